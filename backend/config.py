"""Plain settings objects shared by the CLI and the window. No torch here."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, is_dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:   # annotations only: settings import nothing above them
    from backend.remote.target import RemoteEndpoint
    from backend.engine.sweep import SweepSpec
    from backend.workload.spec import WorkloadSpec


@dataclass(slots=True)
class ModelChoice:
    name: str = "smollm2-135m"   # a known name (bundled or synthetic shape), a folder, a .gguf file or a hub id
    device: str = "auto"         # auto | cpu | cuda | cuda:N | mps
    dtype: str = "auto"          # auto | float32 | bfloat16 | float16


@dataclass(slots=True)
class SamplingConfig:
    temperature: float = 0.0     # 0 is greedy
    top_p: float = 1.0
    seed: int = 0
    ignore_eos: bool = False


@dataclass(slots=True)
class EngineConfig:
    policy: str = "continuous"   # static | continuous | chunked | disaggregated
    max_batch: int = 32          # requests running at once (= KV cache slots)
    chunk_tokens: int = 512      # per-step token budget under the chunked policy
    kv_tokens: int | None = None # KV cache capacity in tokens; None derives it from free memory
    max_len: int | None = None   # longest sequence (prompt + output) one slot holds; None derives it from the workload
    # disaggregated: prompts on prefill workers, their KV handed to decode workers (backend/engine/disaggregated.py)
    prefill_workers: int = 1     # engine processes (simulated: devices) that run prompt chunks only
    decode_workers: int = 1      # engine processes (simulated: devices) that run decode steps only
    kv_transport: str = "auto"   # auto | shm | pipe: how the KV goes from a prefill to a decode process
    kv_link: str | None = None   # simulated: a link of profiles/links/kv-links.toml (None: the profile's default)
    kv_link_gbs: float | None = None   # simulated: the link's bandwidth in GB/s (overrides the link's)
    kv_link_us: float | None = None    # simulated: the link's latency per hand-off in microseconds


@dataclass(slots=True)
class BatchRun:
    """`run`: one batch, prefilled together then decoded together."""

    prompt: str | None = None    # text prompt (each request gets the same one), or None for synthetic tokens
    chat: bool = False
    prompt_len: int = 128
    output_len: int = 64
    batch: int = 1


@dataclass(slots=True)
class RunConfig:
    """Everything one run needs; written to run.json so a run can be reproduced."""

    mode: str = "batch"          # batch | load | sweep-batch | sweep-prompt | sweep-precision | sweep-rate | sweep-concurrency
    model: ModelChoice = field(default_factory=ModelChoice)
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    engine: EngineConfig = field(default_factory=EngineConfig)
    batch: BatchRun = field(default_factory=BatchRun)
    workload: WorkloadSpec | None = None   # for mode "load"
    sweep: SweepSpec | None = None         # for the sweep modes
    endpoint: RemoteEndpoint | None = None # drive a server instead of a local model
    profile: str | None = None           # GPU profile name or path
    slo_ttft_ms: float | None = None
    slo_tpot_ms: float | None = None
    out_dir: str | None = None
    threads: int | None = None           # CPU threads (and as many cores); None: all cores, torch's default count
    repeats: int = 1                     # the same settings run back to back, the model loaded once (session.execute)
    simulate: bool = False               # price each step on `profile` with a cost model, on a virtual clock (no weights)


def config_dict(config: RunConfig) -> dict:
    """The full configuration as plain data for run.json (reproducible from it).

    The remote endpoint is left out: it carries the API key, which is never written; a
    remote run records its endpoint's safe parts itself."""
    def plain(value):
        if is_dataclass(value):
            return {k: plain(v) for k, v in asdict(value).items()}
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [plain(v) for v in value]
        return value
    data = plain(config)
    data.pop("endpoint", None)
    return data
