"""The seed's worked example, shared by `example` (backend/cli/example.py) and the window's Run ›
Worked example and tour: its settings (one 2,000-token prompt, 300 output tokens, alone on a static
engine), the seed's row worked by hand, and a measured or simulated run as a row beside it."""
from __future__ import annotations

import math

from backend.config import BatchRun, EngineConfig, ModelChoice, RunConfig, RunKind
from backend.records import RequestStatus
from backend.results.text import breakdown_of

PROMPT_LEN, OUTPUT_LEN = 2000, 300
SEED_ROW = ("seed's worked example (8B, datacenter GPU, by hand)", 200.0, 20.0, 6200.0, 0.97)


def example_config(model: str, simulate: bool, profile: str | None, threads: int | None) -> RunConfig:
    return RunConfig(mode=RunKind.BATCH, model=ModelChoice(model),
                     batch=BatchRun(prompt_len=PROMPT_LEN, output_len=OUTPUT_LEN),
                     engine=EngineConfig(policy="static", max_batch=1), profile=profile, simulate=simulate,
                     threads=threads)


def row_of(label: str, finished) -> tuple:
    done = [r for r in finished.data.requests if r.status is RequestStatus.FINISHED]
    breakdown = breakdown_of(done)
    if breakdown is None:
        return (label, math.nan, math.nan, math.nan, math.nan)
    ttft, decode_ms, total, _, _, tpot = breakdown
    return (label, ttft, tpot, total, decode_ms / total)


def format_rows(rows: list[tuple]) -> list[tuple]:
    table = [("", "TTFT", "TPOT", "total", "decode share", "decoded / prefilled token")]
    for label, ttft, tpot, total, share in rows:
        ratio = tpot / (ttft / PROMPT_LEN) if ttft and ttft == ttft else math.nan
        table.append((label, f"{ttft:,.0f} ms", f"{tpot:,.1f} ms", f"{total:,.0f} ms", f"{share * 100:.0f}%",
                      f"{ratio:,.0f}x"))
    return table
