"""Compare policies: one workload under static, continuous and chunked (and at a second dtype or
chunk size where the form gives one), run one after another; each run is saved to its own folder
and added as a reference as it finishes. The last run also stays on screen as the current run.
Stop ends the series: the runs finished so far stay as references. (Methods of MainWindow.)"""
from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from backend.config import RunConfig
from backend.errors import InputError, RunError
from backend.events import RunFinished

from gui.actions.files import export_run


def compare_root() -> Path:
    """Where the series' folders go: $XDG_CACHE_HOME/phasescope/compare, else ~/.cache/phasescope/compare."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "phasescope" / "compare"


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


class CompareActions:
    """Mixed into MainWindow: uses its controls, store, worker, references, status bar and its
    comparisonFinished signal (the Series, once it ends for whatever reason)."""

    def _build_compare(self) -> None:
        self.series: Series | None = None

    def start_comparison(self, config: RunConfig) -> None:
        runs = [(name, replace(config, engine=engine,
                               model=replace(config.model, dtype=dtype) if dtype else config.model))
                for name, engine, dtype in self.controls.form.compare_engines(config.engine)]
        try:
            root = compare_root()
            root.mkdir(parents=True, exist_ok=True)
            folder = Path(tempfile.mkdtemp(prefix=time.strftime("%Y%m%d-%H%M%S-"), dir=root))
        except OSError as exc:
            self.show_error(f"cannot make a folder for Compare policies under {compare_root()}: {exc}")
            return
        self.series = Series(folder, runs)
        self.prune_compare_cache()   # the oldest series go once the cache passes its bound (compare_cache.py)
        self._run_in_series()

    def _run_in_series(self) -> None:
        s = self.series
        name, config = s.runs[s.index]
        self._launch(config, f"compare {s.index + 1} of {len(s.runs)}: {name}")

    def _cancel_series(self) -> None:
        if self.series is not None:
            self.series.cancelled = True

    def _series_run_ended(self, result: RunFinished | None) -> None:
        """After each run of the series (None: it failed to start or crashed): save it, add it, run the next."""
        s = self.series
        if s is None:
            return
        name, _ = s.runs[s.index]
        if result is None or result.error or result.stopped:
            self._end_series(f"{name} {'was stopped' if result is not None and result.stopped else 'failed'}")
            return
        folder = s.folder / folder_name(s.index + 1, name)
        try:
            export_run(folder, self.store)
        except (InputError, RunError) as exc:
            self._end_series(f"{name} could not be saved: {exc}")
            return
        ref = self.add_reference(str(folder), name)
        if ref is not None:
            s.references.append(ref)
        s.index += 1
        if s.index < len(s.runs) and not s.cancelled and not self.worker.should_stop():
            self._run_in_series()
        else:
            self._end_series("stopped" if s.index < len(s.runs) else "")

    def _end_series(self, why: str) -> None:
        s, self.series = self.series, None
        names = ", ".join(r.name for r in s.references) or "none"
        rest = len(s.runs) - len(s.references)
        tail = f"; {why}, the other {rest} not run" if why and rest else f"; {why}" if why else ""
        self.statusBar().showMessage(f"Compared {len(s.references)} of {len(s.runs)} runs ({names}), "
                                     f"saved under {s.folder}{tail}")
        self.comparisonFinished.emit(s)
