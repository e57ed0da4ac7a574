"""Plain settings objects shared by the CLI and the window: a run's model, sampling, engine, batch, sweep
and remote endpoint, and the RunConfig that holds them. No torch here, and nothing above the vocabulary."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, is_dataclass
from enum import StrEnum
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from backend.errors import InputError

if TYPE_CHECKING:   # annotations only: a workload's settings sit in the layer below (backend/workload)
    from backend.workload.spec import WorkloadSpec


class SweepKind(StrEnum):
    """A sweep's axis: the word after `sweep` on the command line, and the `kind` that run.json's
    sweep settings, sweep.csv and the sweep's points carry."""

    BATCH = "batch"               # decode steps at each batch size
    PROMPT = "prompt"             # prefills at each prompt length
    PRECISION = "precision"       # a batch's prefill and decode at each weight precision
    RATE = "rate"                 # one load run at each arrival rate
    CONCURRENCY = "concurrency"   # one closed-loop load run at each number of users
    PD_RATIO = "pd-ratio"         # one simulated disaggregated load run at each prefill:decode split
    DEPTH = "depth"               # prefill and decode tokens/s at each context depth (llama-bench's -d), any target

    @property
    def run_kind(self) -> RunKind:
        return RunKind(f"sweep-{self.value}")


class RunKind(StrEnum):
    """What a run does; its value is the `mode` run.json records (the words earlier versions wrote,
    so their folders read back unchanged). Each kind needs its own settings (RunConfig.check_kind):
    a batch its BatchRun, a load run its WorkloadSpec, a sweep its SweepSpec of the matching
    SweepKind, a load sweep both. The planner is not a kind of run: it is a search whose every
    candidate is a simulated LOAD run."""

    BATCH = "batch"
    LOAD = "load"
    SWEEP_BATCH = "sweep-batch"
    SWEEP_PROMPT = "sweep-prompt"
    SWEEP_PRECISION = "sweep-precision"
    SWEEP_RATE = "sweep-rate"
    SWEEP_CONCURRENCY = "sweep-concurrency"
    SWEEP_PD_RATIO = "sweep-pd-ratio"
    SWEEP_DEPTH = "sweep-depth"

    @classmethod
    def parse(cls, value) -> RunKind:
        """The kind named by `value` (a RunKind or its word); InputError naming every kind otherwise."""
        try:
            return cls(value)
        except ValueError:
            words = [kind.value for kind in cls]
            raise InputError(f"unknown run kind {value!r}: use {', '.join(words[:-1])} or {words[-1]}") from None

    @classmethod
    def recorded(cls, value) -> RunKind | None:
        """The kind a run.json records as its config's mode; None where it records none this version knows."""
        try:
            return cls(value)
        except ValueError:
            return None

    @property
    def sweep_kind(self) -> SweepKind | None:
        """The axis of a sweep; None for one batch or one load run."""
        return SweepKind(self.value.removeprefix("sweep-")) if self.value.startswith("sweep-") else None

    @property
    def needs_workload(self) -> bool:
        """A load run, and the sweeps whose every point is one."""
        return self in LOAD_KINDS

    @property
    def command(self) -> str:
        """The sub-command that runs this kind: `run`, `load`, `sweep batch`, ..."""
        sweep = self.sweep_kind
        return "run" if self is RunKind.BATCH else f"sweep {sweep}" if sweep else self.value


LOAD_KINDS = frozenset({RunKind.LOAD, RunKind.SWEEP_RATE, RunKind.SWEEP_CONCURRENCY, RunKind.SWEEP_PD_RATIO})
# the sweeps whose points are a few `run`s each (backend/sweeps/steps.py) and those whose points are a `load` each
STEP_SWEEPS = (RunKind.SWEEP_BATCH, RunKind.SWEEP_PROMPT, RunKind.SWEEP_PRECISION)
LOAD_SWEEPS = (RunKind.SWEEP_RATE, RunKind.SWEEP_CONCURRENCY, RunKind.SWEEP_PD_RATIO)


@dataclass(slots=True)
class ModelChoice:
    name: str = "smollm2-135m"   # a known name (bundled or synthetic shape), a folder, a .gguf file or a hub id
    device: str = "auto"         # auto | cpu | cuda | cuda:N | mps
    dtype: str = "auto"          # auto | float32 | bfloat16 | float16
    prefill_math: str = "auto"   # auto | fp32 | bf16: the CPU kernels' products of many rows (kernels/matmath.py)
    decode_math: str = "fp32"    # fp32 | int8: the CPU kernels' decode products of Q8_0/Q4_x/Q5_x/K-quants (kernels/decodemath.py)


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
    # disaggregated: prompts on prefill workers, their KV handed to decode workers (backend/targets/disaggregated/coordinator.py)
    prefill_workers: int = 1     # engine processes (simulated: devices) that run prompt chunks only
    decode_workers: int = 1      # engine processes (simulated: devices) that run decode steps only
    kv_transport: str = "auto"   # auto | shm | pipe: how the KV goes from a prefill to a decode process
    kv_link: str | None = None   # simulated: a link of profiles/links/interconnects.toml (None: the profile's default)
    kv_link_gbs: float | None = None   # simulated: the link's bandwidth in GB/s (overrides the link's)
    kv_link_us: float | None = None    # simulated: the link's latency per hand-off in microseconds
    # the KV cache's layout (backend/engine/kv_blocks.py); None: the target's default (engine_run.kv_settings)
    kv_layout: str | None = None       # paged | slots
    kv_block_size: int = 16            # paged: tokens a block holds (a power of two)
    prefix_caching: bool | None = None # paged: reuse cached prefixes of full blocks


ROUTERS = ("round-robin", "least-loaded")
SPEC_METHODS = ("ngram", "draft")


@dataclass(slots=True)
class SpecConfig:
    """Speculative decoding (backend/engine/spec/): who guesses, and how many tokens a step verifies."""

    method: str = ""             # "" (off) | ngram (prompt lookup) | draft (a draft model)
    draft_model: str = ""        # draft: a model as --model takes it
    draft_dtype: str = "auto"    # draft: its precision, as --dtype takes it
    num_tokens: int = 4          # K: guesses per verification step (a step verifies K+1 positions)
    ngram_min: int = 1           # ngram: the shortest suffix looked up
    ngram_max: int = 4           # ngram: the longest suffix looked up (tried first)
    # the simulator's pricing (backend/sim/spec.py): None = the default or what spec_from measured
    acceptance: float | None = None  # per-guess acceptance rate alpha (guesses kept independently)
    draft_cost: float | None = None  # a draft pass's time as a fraction of the target's decode step
    spec_from: str = ""              # a run folder whose measured spec_alpha and draft time are used

    @property
    def is_on(self) -> bool:
        return bool(self.method)

    @classmethod
    def parse(cls, text: str | None, num_tokens: int = 4, ngram_min: int = 1, ngram_max: int = 4,
              acceptance: float | None = None, draft_cost: float | None = None, spec_from: str = "") -> SpecConfig:
        """--spec ngram | draft:MODEL[@DTYPE] (None or "off": no speculation); one line for a bad value."""
        spec = cls(num_tokens=num_tokens, ngram_min=ngram_min, ngram_max=ngram_max, acceptance=acceptance,
                   draft_cost=draft_cost, spec_from=spec_from)
        if text is None or text in ("", "off"):
            return spec
        if text == "ngram":
            spec.method = "ngram"
        elif text.startswith("draft:") and text[len("draft:"):].strip("@ "):
            name, _, dtype = text[len("draft:"):].partition("@")
            spec.method, spec.draft_model, spec.draft_dtype = "draft", name, dtype or "auto"
        else:
            raise InputError(f"--spec {text!r}: use ngram or draft:MODEL (e.g. draft:smollm2-135m@q4_0)")
        spec.validate()
        return spec

    def validate(self) -> None:
        if not self.is_on:
            return
        if self.method not in SPEC_METHODS:
            raise InputError(f"speculation: unknown method {self.method!r} (use ngram or draft)")
        if isinstance(self.num_tokens, bool) or not isinstance(self.num_tokens, int) or self.num_tokens < 1:
            raise InputError(f"--spec-tokens must be at least 1, got {self.num_tokens!r}")
        if not 1 <= self.ngram_min <= self.ngram_max:
            raise InputError(f"--spec-ngram-min {self.ngram_min} and --spec-ngram-max {self.ngram_max}: "
                             "need 1 <= min <= max")
        if self.method == "draft" and not self.draft_model:
            raise InputError("--spec draft:MODEL needs a model name")
        if self.acceptance is not None and not 0.0 <= self.acceptance < 1.0:
            raise InputError(f"--spec-acceptance must be in [0, 1), got {self.acceptance!r}")
        if self.draft_cost is not None and not 0.0 <= self.draft_cost <= 100.0:
            raise InputError(f"--spec-draft-cost must be in [0, 100] (a fraction of a decode step), "
                             f"got {self.draft_cost!r}")

    def describe(self) -> str:
        """e.g. 'ngram K=4' or 'draft smollm2-135m@q4_0 K=4'."""
        if self.method == "draft":
            dtype = "" if self.draft_dtype == "auto" else f"@{self.draft_dtype}"
            return f"draft {self.draft_model}{dtype} K={self.num_tokens}"
        return f"ngram K={self.num_tokens} n={self.ngram_min}..{self.ngram_max}" if self.method else "off"


@dataclass(slots=True)
class Deployment:
    """How a simulated model is spread over devices (backend/sim/parallel.py prices it): tensor,
    pipeline, data and expert parallelism, the link between the devices and the KV cache's dtype."""

    tp: int = 1                  # tensor parallel: each matrix split over tp devices, two all-reduces a layer
    pp: int = 1                  # pipeline parallel: the layers in pp stages, microbatches in flight
    dp: int = 1                  # data parallel: replicas of tp x pp devices behind a router
    ep: int = 1                  # expert parallel (MoE): the experts spread over ep of a stage's tp devices
    router: str = "round-robin"  # dp > 1: round-robin | least-loaded
    link: str | None = None      # a link of profiles/links/ between a replica's devices (None: the profile's)
    kv_dtype: str = "auto"       # auto (the activations') | fp8 | bfloat16 | float16 | float32
    prefill_tp: int | None = None   # disaggregated: the prefill pool's devices' tp (None: tp)
    decode_tp: int | None = None    # disaggregated: the decode pool's devices' tp (None: tp)
    engine: str = "vllm"         # the serving engine family whose host costs a step pays (backend/sim/engines.py)

    @property
    def devices(self) -> int:
        """Devices of the whole deployment (a disaggregated one counts its pools itself)."""
        return self.tp * self.pp * self.dp

    def is_single(self) -> bool:
        return self.devices == 1 and self.ep == 1


@dataclass(slots=True)
class BatchRun:
    """`run`: one batch, prefilled together then decoded together."""

    prompt: str | None = None    # text prompt (each request gets the same one), or None for synthetic tokens
    chat: bool = False
    prompt_len: int = 128
    output_len: int = 64
    batch: int = 1


@dataclass(slots=True)
class SweepSpec:
    kind: SweepKind = SweepKind.BATCH
    batches: list[int] = field(default_factory=lambda: [1, 2, 4, 8, 16, 32, 64])
    lengths: list[int] = field(default_factory=lambda: [32, 64, 128, 256, 512, 1024, 2048])
    context: int = 512                                    # batch sweep: tokens each request attends to
    steps: int = 8                                        # timed steps (or prefills) per point
    warmup: int = 2
    # precision sweep (backend/sweeps/steps.py): B prompts of prompt_len, output_len decode steps;
    # depth sweep (backend/sweeps/depth.py): prompt_len tokens prefilled and output_len decoded at each depth
    dtypes: list[str] = field(default_factory=lambda: list(PRECISION_DEFAULT))
    prompt_len: int = 512
    output_len: int = 64
    batch: int = 1
    # load sweeps (backend/sweeps/load.py): one load run per arrival rate or per number of closed-loop users
    rates: list[float] = field(default_factory=lambda: [1.0, 2.0, 4.0, 8.0])
    concurrencies: list[int] = field(default_factory=lambda: [1, 2, 4, 8, 16])
    # pd-ratio (backend/sweeps/pd_ratio.py): every prefill:decode split of this many simulated devices
    total_devices: int = 8
    # depth (backend/sweeps/depth.py): tokens already in the context when the timed prefill and decode run
    depths: list[int] = field(default_factory=lambda: [0, 4096, 16384])

    def __post_init__(self) -> None:
        try:
            self.kind = SweepKind(self.kind)   # the word, as the CLI and earlier run.json files give it
        except ValueError:
            words = [kind.value for kind in SweepKind]
            raise InputError(f"unknown sweep {self.kind!r}: use {', '.join(words[:-1])} or {words[-1]}") from None


PRECISION_DEFAULT = ("float32", "bfloat16", "q8_0", "q4_1")


APIS = ("completions", "chat")


@dataclass(slots=True)
class RemoteEndpoint:
    """Where a remote run sends its requests; its repr leaves the key out."""

    url: str                                      # base URL, e.g. http://127.0.0.1:8000/v1
    model: str                                    # the served model name
    api_key: str | None = field(default=None, repr=False)   # never written anywhere
    api: str = "completions"                      # completions | chat
    timeout_s: float = 120.0                      # longest wait to connect or for the next event
    read_metrics: bool = True                     # poll the server's Prometheus /metrics
    tokenizer: str | None = None                  # the served model's tokenizer: .gguf, HF folder or hub id
    client_workers: int | None = None             # client worker processes; None: one per core
    ray_address: str | None = None                # HOST:PORT of a Ray cluster: the workers run there as actors

    def validate(self) -> None:
        parts = urlsplit(self.url)
        try:
            parts.port   # parsed lazily: a port that is not a number raises here
        except ValueError:
            raise InputError(f"--endpoint {self.url!r}: the port is not a number") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            shown = safe_url(self.url) if parts.scheme else self.url
            raise InputError(f"--endpoint {shown!r}: expected an http(s) URL such as http://127.0.0.1:8000/v1")
        if not self.model.strip():
            raise InputError("--served-model is empty: give the name the server serves (see GET <endpoint>/models)")
        if self.api not in APIS:
            raise InputError(f"--api {self.api!r}: use completions or chat")
        if not self.timeout_s > 0:
            raise InputError(f"--request-timeout must be a positive number of seconds, got {self.timeout_s}")
        if self.client_workers is not None and self.client_workers < 1:
            raise InputError(f"--client-workers must be at least 1, got {self.client_workers}")


def safe_url(url: str) -> str:
    """The URL without user:password or query string, fit for a file or a message."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return f"{parts.scheme}://{host}{parts.path}"


@dataclass(slots=True)
class RunConfig:
    """Everything one run needs; written to run.json so a run can be reproduced."""

    mode: RunKind = RunKind.BATCH   # what the run does; the settings below that it needs: check_kind
    model: ModelChoice = field(default_factory=ModelChoice)
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    engine: EngineConfig = field(default_factory=EngineConfig)
    batch: BatchRun = field(default_factory=BatchRun)
    workload: WorkloadSpec | None = None   # a load run and a load sweep (RunKind.needs_workload)
    sweep: SweepSpec | None = None         # a sweep, of its kind's axis (RunKind.sweep_kind)
    endpoint: RemoteEndpoint | None = None # drive a server instead of a local model
    profile: str | None = None           # GPU profile name or path
    slo_ttft_ms: float | None = None
    slo_tpot_ms: float | None = None
    out_dir: str | None = None
    threads: int | None = None           # CPU threads (and as many cores); None: all cores, torch's default count
    repeats: int = 1                     # the same settings run back to back, the model loaded once (session.execute)
    simulate: bool = False               # price each step on `profile` with a cost model, on a virtual clock (no weights)
    deployment: Deployment = field(default_factory=Deployment)   # simulated: parallelism, link, KV dtype
    spec: SpecConfig = field(default_factory=SpecConfig)         # speculative decoding (local engine only, for now)

    def __post_init__(self) -> None:
        self.mode = RunKind.parse(self.mode)   # the word, as the CLI, the window and run.json give it

    def check_kind(self) -> None:
        """InputError unless the settings this run's kind needs are there: a load run (and a load
        sweep) its workload, a sweep its SweepSpec of the matching axis, a batch or load run no SweepSpec."""
        kind = RunKind.parse(self.mode)   # a mode set after construction is read again
        if kind.needs_workload and self.workload is None:
            raise InputError(f"`{kind.command}` needs a workload (--workload NAME|PATH or the workload flags)")
        axis = kind.sweep_kind
        if axis is None:
            if self.sweep is not None:
                raise InputError(f"`{kind.command}` is not a sweep, yet its settings carry a {self.sweep.kind} sweep")
        elif self.sweep is None:
            raise InputError(f"`{kind.command}` needs its sweep settings (a SweepSpec of kind {axis})")
        elif self.sweep.kind != axis:
            raise InputError(f"`{kind.command}` sweeps {axis}, but its sweep settings are of kind {self.sweep.kind}")

    @property
    def load_workload(self) -> WorkloadSpec:
        """The workload of a load run or a load sweep (check_kind has checked it is there)."""
        if self.workload is None:
            raise InputError(f"`{RunKind.parse(self.mode).command}` needs a workload (--workload NAME|PATH)")
        return self.workload

    @property
    def sweep_spec(self) -> SweepSpec:
        """The settings of a sweep (check_kind has checked their kind matches the run's)."""
        if self.sweep is None:
            raise InputError(f"`{RunKind.parse(self.mode).command}` is not a sweep: it has no sweep settings")
        return self.sweep


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
        if isinstance(value, StrEnum):
            return value.value   # the run kind's and the sweep's words
        return value
    data = plain(config)
    data.pop("endpoint", None)
    return data
