"""Compare policies: one workload under static, continuous and chunked (and at a second dtype or
chunk size where the form gives one), run one after another; each run is saved to its own folder
and added as a reference as it finishes. The last run also stays on screen as the current run.
Stop ends the series: the runs finished so far stay as references."""
from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from PySide6 import QtCore

from backend.config import RunConfig
from backend.errors import InputError, RunError
from backend.events import RunFinished

from gui.controllers.compare_cache import CompareCache, compare_root
from gui.controllers.files import export_run


def folder_name(index: int, name: str) -> str:
    """1-static, 4-continuous-q8_0, ..."""
    return f"{index}-" + "".join(c if c.isalnum() or c in "._" else "-" for c in name)


@dataclass(eq=False)
class Series:
    folder: Path                              # one sub-folder per run
    runs: list[tuple[str, RunConfig]]         # (name, settings) in the order they run
    index: int = 0                            # the run under way
    references: list = field(default_factory=list)   # the references added so far
    cancelled: bool = False


class CompareController(QtCore.QObject):
    """Runs a series through `runs` (the RunsController) and, as each run ends (its `ended`), saves it
    and adds it through `references` (the ReferencesController); `finished` gives the Series once it
    ends for whatever reason."""

    finished = QtCore.Signal(object)   # the Series
    message = QtCore.Signal(str)
    error = QtCore.Signal(str)

    def __init__(self, store, runs, references, form, parent: QtCore.QObject | None = None):
        """`form`: the RunForm, which names the policies (and dtypes) to compare."""
        super().__init__(parent)
        self.store = store
        self.runs = runs
        self.references = references
        self.form = form
        self.series: Series | None = None
        self.cache = CompareCache(references.references, lambda: self.series.folder if self.series else None, self)
        runs.ended.connect(self._run_ended)

    def start(self, config: RunConfig) -> None:
        runs = [(name, replace(config, engine=engine,
                               model=replace(config.model, dtype=dtype) if dtype else config.model))
                for name, engine, dtype in self.form.compare_engines(config.engine)]
        try:
            root = compare_root()
            root.mkdir(parents=True, exist_ok=True)
            folder = Path(tempfile.mkdtemp(prefix=time.strftime("%Y%m%d-%H%M%S-"), dir=root))
        except OSError as exc:
            self.error.emit(f"cannot make a folder for Compare policies under {compare_root()}: {exc}")
            return
        self.series = Series(folder, runs)
        self.cache.prune()   # the oldest series go once the cache passes its bound
        self._run_in_series()

    def _run_in_series(self) -> None:
        s = self.series
        name, config = s.runs[s.index]
        self.runs.launch(config, f"compare {s.index + 1} of {len(s.runs)}: {name}")

    def cancel(self) -> None:
        """Stop: the run under way is the series' last."""
        if self.series is not None:
            self.series.cancelled = True

    def abandon(self) -> None:
        """The window is going: the series starts nothing more, and says nothing."""
        self.series = None

    def _run_ended(self, result: RunFinished | None) -> None:
        """After each run of the series (None: it failed to start or crashed): save it, add it, run the next."""
        s = self.series
        if s is None:
            return
        name, _ = s.runs[s.index]
        if result is None or result.error or result.stopped:
            self._end(f"{name} {'was stopped' if result is not None and result.stopped else 'failed'}")
            return
        folder = s.folder / folder_name(s.index + 1, name)
        try:
            export_run(folder, self.store)
        except (InputError, RunError) as exc:
            self._end(f"{name} could not be saved: {exc}")
            return
        ref = self.references.add(str(folder), name)
        if ref is not None:
            s.references.append(ref)
        s.index += 1
        if s.index < len(s.runs) and not s.cancelled and not self.runs.should_stop():
            self._run_in_series()
        else:
            self._end("stopped" if s.index < len(s.runs) else "")

    def _end(self, why: str) -> None:
        s, self.series = self.series, None
        names = ", ".join(r.name for r in s.references) or "none"
        rest = len(s.runs) - len(s.references)
        tail = f"; {why}, the other {rest} not run" if why and rest else f"; {why}" if why else ""
        self.message.emit(f"Compared {len(s.references)} of {len(s.runs)} runs ({names}), "
                          f"saved under {s.folder}{tail}")
        self.finished.emit(s)
