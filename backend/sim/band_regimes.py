"""The regimes a simulated or published figure belongs to, and a published figure's residual: the nouns that
backend/sim/bands.py (the table, a run's bands) and backend/sim/band_rules.py (how a band is made) share."""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Regime(Enum):
    PREFILL = "prefill"                   # TTFT: the prompt's prefill
    BATCH1_DECODE = "batch-1 decode"      # one request decoding (TPOT, ITL, a batch-1 latency)
    BATCHED_DECODE = "batched decode"     # several decoding together
    SATURATION = "saturation"             # throughput of a full batch or a saturated server; cost per token
    MOE = "moe"
    TP = "tp>1"
    LOW_PRECISION = "fp8/fp4"
    ALL = "all"                           # every residual: the fallback


PHASES = (Regime.PREFILL, Regime.BATCH1_DECODE, Regime.BATCHED_DECODE, Regime.SATURATION)


@dataclass(slots=True, frozen=True)
class Residual:
    figure: str
    metric: str
    regimes: tuple[Regime, ...]
    measured: float
    predicted: float
    residual: float                       # log(measured time / predicted time)


# the metrics that are rates (tokens/s): their residual is the inverse ratio's, their band the time's inverted
RATE_METRICS = ("tok_s_per_gpu", "tok_s")
