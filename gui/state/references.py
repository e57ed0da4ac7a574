"""Reference runs: saved runs kept on screen beside the current one. No Qt, so tested alone.

A reference is a run folder read once (as Open run reads it) into a RunStore of its own: the
views that draw the current run draw a reference from the same kind of store, and a new run
resets only the window's store, never these. Each reference keeps a colour from a fixed
palette, assigned in order and never given to another while it exists, and a label from its
run.json (model, device, dtype, policy, date).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from backend.config import RunKind, SweepKind
from backend.sweeps.points import STEP_KINDS, read_points
from backend.errors import InputError
from backend.events import PrecisionPoint, SweepPoint
from backend.results.export import read_run
from backend.precision import from_info
from backend.records import Phase, RunData
from backend.run_info import RunInfo

from gui.state.live_metrics import compute
from gui.state.run_store import PHASE_CODE, RunStore

# distinct from the current run's blue and the phases' orange, blue and purple
PALETTE = ("#d81b60", "#00897b", "#b8860b", "#6d4c41", "#7cb342", "#00acc1", "#5e35b1", "#f4511e")

# the figures the metrics panel compares: (key, row title, whether lower is better)
COMPARED = (
    ("ttft_mean", "TTFT mean (ms)", True),
    ("ttft_p99", "TTFT p99 (ms)", True),
    ("tpot_mean", "TPOT mean (ms)", True),
    ("tpot_p99", "TPOT p99 (ms)", True),
    ("output_rate", "Output tokens/s", False),
    ("decode_rate", "Decode tokens/s", False),   # decode-only steps' tokens over their time, as the CLI's summary
)


def read_run_folder(folder: str | Path) -> tuple[RunData, list[SweepPoint], list[PrecisionPoint]]:
    """A run folder as Open run reads it: the run, a batch or prompt sweep's points, a precision sweep's."""
    run = read_run(folder)
    kind, points = read_points(folder)
    if kind is SweepKind.PRECISION:
        return run, [], points
    return run, points if kind in STEP_KINDS else [], []


def run_policy(config: dict, info: RunInfo) -> str:
    """What drove the run: the engine's scheduling policy for a batch or load run, else its mode."""
    if info.is_remote:
        return "remote"
    if info.is_imported and info.imported is not None:
        return f"imported from {info.imported.tool}"
    mode = str(config.get("mode") or "?")
    policy = (config.get("engine") or {}).get("policy") if isinstance(config.get("engine"), dict) else None
    return str(policy) if mode in (RunKind.BATCH, RunKind.LOAD) and policy else mode


def run_label(config: dict, info: RunInfo) -> str:
    """model · device · dtype · policy · date, from run.json."""
    precision = from_info(info)
    dtype = precision.name if precision is not None else info.dtype or "?"
    return " · ".join(str(part) for part in (info.model or "?", info.device or "?", dtype,
                                             run_policy(config, info), info.created_minute or "undated"))


@dataclass(eq=False)
class Reference:
    key: int                  # R1, R2, ...: never reused in a window's life
    folder: Path
    run: RunData
    sweep: list[SweepPoint]
    precision: list[PrecisionPoint]
    color: str
    store: RunStore
    visible: bool = True
    tag: str = ""             # a name given where it was added (Compare policies' "chunked 128"), else its policy
    _figures: dict | None = field(default=None, repr=False)
    _points: dict = field(default_factory=dict, repr=False)

    @property
    def name(self) -> str:
        """The short name legends use: R1 static."""
        return f"R{self.key} {self.tag or run_policy(self.run.config, self.run.info)}"

    @property
    def label(self) -> str:
        return run_label(self.run.config, self.run.info)

    @property
    def figures(self) -> dict[str, float | None]:
        """The compared figures (COMPARED), computed once: a reference does not change."""
        if self._figures is None:
            self._figures = compared_figures(self.store)
        return self._figures

    def throughput_points(self, kind: SweepKind) -> tuple[np.ndarray, np.ndarray, str]:
        """(x, tokens/s, what they are) for the throughput plot of `kind` (BATCH or PROMPT)."""
        if kind not in self._points:
            self._points[kind] = throughput_points(self.store, self.sweep, kind)
        return self._points[kind]


def compared_figures(store: RunStore) -> dict[str, float | None]:
    """The figures COMPARED names, from a store (the current run's, or a reference's)."""
    m = compute(store)
    decode = store.decode_tokens / (store.decode_ms / 1000.0) if store.decode_ms > 0 and store.decode_tokens else None
    return {"ttft_mean": m.ttft_mean_ms, "ttft_p99": m.ttft_p99_ms, "tpot_mean": m.tpot_mean_ms,
            "tpot_p99": m.tpot_p99_ms, "output_rate": m.output_tokens_per_s, "decode_rate": decode}


def delta_percent(current: float | None, reference: float | None) -> float | None:
    """The current run against the reference, in percent of the reference."""
    if current is None or reference is None or reference == 0:
        return None
    return 100.0 * (current - reference) / reference


def throughput_points(store: RunStore, sweep: list[SweepPoint], kind: SweepKind) -> tuple[np.ndarray, np.ndarray, str]:
    """A sweep's own points of this kind; for a run without them (a batch or load run), on the batch
    plot, its decode-only steps grouped by batch size: each size's median step as tokens/s."""
    points = [p for p in sweep if p.kind == kind]
    if points:
        return np.log2([p.x for p in points]), np.array([p.tokens_per_s for p in points]), "sweep"
    if kind != SweepKind.BATCH or len(store.steps) == 0:
        return np.empty(0), np.empty(0), "none"
    steps = store.steps
    decode = steps.column("phase") == PHASE_CODE[Phase.DECODE]
    batch = steps.column("num_decode_requests")[decode]
    tokens, duration = steps.column("num_decode_tokens")[decode], steps.column("duration_ms")[decode]
    keep = (duration > 0) & (batch > 0)
    batch, rate = batch[keep], tokens[keep] / (duration[keep] / 1000.0)
    sizes = np.unique(batch)
    return np.log2(sizes), np.array([np.median(rate[batch == b]) for b in sizes]), "steps"


class ReferenceSet:
    """The window's references, in the order added; `version` changes with every change."""

    def __init__(self, palette: tuple[str, ...] = PALETTE):
        self.palette = palette
        self.items: list[Reference] = []
        self.version = 0
        self.aligned: int | None = None   # the reference drawn under the current run's strip and lanes
        self._next_key = 1

    def __iter__(self):
        return iter(self.items)

    def __len__(self) -> int:
        return len(self.items)

    def get(self, key: int | None) -> Reference | None:
        return next((r for r in self.items if r.key == key), None)

    def visible(self) -> list[Reference]:
        return [r for r in self.items if r.visible]

    def add(self, folder: str | Path, tag: str = "") -> Reference:
        """Read a run folder as a reference; InputError (one line) for one that is not a readable run."""
        path = Path(folder)
        if any(r.folder == path.resolve() for r in self.items):
            raise InputError(f"{path} is already a reference")
        try:
            run, sweep, precision = read_run_folder(path)
            store = RunStore()
            store.load(run, path, sweep, precision)
        except InputError:
            raise
        except (OSError, ValueError, KeyError, TypeError, AttributeError, IndexError) as exc:
            # a folder read_run accepts but whose contents make no run (hand-edited, truncated)
            raise InputError(f"{path} is not a readable run folder: {exc}") from None
        if not run.steps and not run.requests and not sweep and not precision:
            raise InputError(f"{path} holds no steps, requests or sweep points to compare")
        ref = Reference(self._next_key, path.resolve(), run, sweep, precision, self._free_color(), store, tag=tag)
        self._next_key += 1
        self.items.append(ref)
        self.version += 1
        return ref

    def remove(self, key: int) -> None:
        self.items = [r for r in self.items if r.key != key]
        if self.aligned == key:
            self.aligned = None
        self.version += 1

    def set_visible(self, key: int, visible: bool) -> None:
        ref = self.get(key)
        if ref is not None and ref.visible != visible:
            ref.visible = visible
            self.version += 1

    def align(self, key: int | None) -> None:
        if key != self.aligned:
            self.aligned = key if self.get(key) is not None else None
            self.version += 1

    def _free_color(self) -> str:
        """The first palette colour no reference holds (past the palette's size, colours repeat)."""
        used = {r.color for r in self.items}
        free = [c for c in self.palette if c not in used]
        return free[0] if free else self.palette[len(self.items) % len(self.palette)]
