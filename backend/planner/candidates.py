"""The planner's search space: every deployment of one model worth simulating, and the pruning that
drops, before anything is simulated, the ones that cannot run (weights plus one full sequence of KV
larger than a device's memory, a TP that does not divide the heads, a precision the GPU lacks).

A candidate is one GPU type at one precision, laid out as tp x pp devices per replica and dp
replicas (continuous or chunked scheduling), or as P prefill and D decode groups of tp devices each
(disaggregated), with a limit on the requests one engine runs at once (max_batch).
"""
from __future__ import annotations

from dataclasses import dataclass

from backend.errors import InputError

POLICIES = ("continuous", "chunked", "disaggregated")
MEMORY_FRACTION = 0.9   # of a device's memory for weights + KV (the rest: activations, the runtime), as vLLM's default
PRECISION_ORDER = ("bfloat16", "fp8", "nvfp4")


@dataclass(slots=True, frozen=True)
class Candidate:
    gpu: str                    # a profile key (profiles/<key>.toml)
    precision: str              # bfloat16 | fp8 | nvfp4
    policy: str                 # continuous | chunked | disaggregated
    max_batch: int              # requests one engine runs at once
    tp: int = 1                 # devices a matrix is split over (disaggregated: each pool's groups)
    pp: int = 1                 # pipeline stages a replica's layers are split into
    dp: int = 1                 # replicas behind the router
    prefill_workers: int = 0    # disaggregated: groups of tp devices that run prompts
    decode_workers: int = 0     # disaggregated: groups of tp devices that run decode steps

    @property
    def devices(self) -> int:
        if self.policy == "disaggregated":
            return (self.prefill_workers + self.decode_workers) * self.tp
        return self.tp * self.pp * self.dp

    @property
    def layout(self) -> str:
        """'tp4 pp1 dp2' or 'tp2 P1:D3'."""
        if self.policy == "disaggregated":
            return f"tp{self.tp} P{self.prefill_workers}:D{self.decode_workers}"
        return f"tp{self.tp} pp{self.pp} dp{self.dp}"

    @property
    def label(self) -> str:
        return f"{self.devices}x {self.gpu} {self.precision} {self.layout} {self.policy} b{self.max_batch}"


@dataclass(slots=True)
class SearchSpace:
    gpus: tuple[str, ...]
    max_gpus: int = 8
    precisions: tuple[str, ...] = PRECISION_ORDER     # each GPU keeps those it has a peak for
    policies: tuple[str, ...] = POLICIES
    tps: tuple[int, ...] = (1, 2, 4, 8)
    pps: tuple[int, ...] = (1, 2)
    dps: tuple[int, ...] = (1, 2, 4, 8)
    max_batches: tuple[int, ...] = (32, 64, 128, 256)
    disaggregated_batches: tuple[int, ...] = (64, 256)   # fewer: a split multiplies the count already


def runnable_precisions(profile, wanted: tuple[str, ...]) -> list[str]:
    """The precisions of `wanted` this profile has a tensor peak for (nvfp4 only on FP4 parts)."""
    from backend.precision import precision
    return [name for name in wanted if profile.has_peak(precision(name))]


def enumerate_candidates(space: SearchSpace, profiles: dict) -> list[Candidate]:
    """Every layout of the space, unpruned; `profiles` maps each GPU key to its GpuProfile."""
    out: list[Candidate] = []
    for gpu in space.gpus:
        for prec in runnable_precisions(profiles[gpu], space.precisions):
            for policy in space.policies:
                if policy == "disaggregated":
                    out += _disaggregated(space, gpu, prec)
                    continue
                for tp in space.tps:
                    for pp in space.pps:
                        for dp in space.dps:
                            if tp * pp * dp > space.max_gpus:
                                continue
                            out += [Candidate(gpu, prec, policy, b, tp, pp, dp) for b in space.max_batches]
    return out


def _disaggregated(space: SearchSpace, gpu: str, prec: str) -> list[Candidate]:
    out = []
    for tp in space.tps:
        groups = space.max_gpus // tp
        for p in range(1, groups):
            for d in range(1, groups - p + 1):
                out += [Candidate(gpu, prec, "disaggregated", b, tp, 1, 1, p, d) for b in space.disaggregated_batches]
    return out


def device_memory(shape, prec_name: str, tp: int, pp: int, kv_dtype_bytes: int | None = None) -> tuple[float, float]:
    """(weight bytes, KV bytes per token) one device of a tp x pp group holds: the weights split
    evenly, the KV heads split over tp (replicated when tp exceeds them), the layers over pp."""
    from backend.precision import precision
    from backend.targets.simulated import model_bytes
    prec = precision(prec_name)
    kv_bytes = kv_dtype_bytes or prec.activation_bytes
    heads_per_device = -(-shape.num_kv_heads // tp)
    layers_per_stage = -(-shape.num_layers // pp)
    return model_bytes(shape, prec) / (tp * pp), 2 * layers_per_stage * heads_per_device * shape.head_dim * kv_bytes


def kv_tokens_that_fit(candidate: Candidate, shape, profile, max_len: int) -> int:
    """KV tokens one engine of this candidate can hold: the memory left after the weights (at
    MEMORY_FRACTION of each device), at most every slot at full length; 0 when not one sequence fits."""
    weights, per_token = device_memory(shape, candidate.precision, candidate.tp, candidate.pp)
    free = profile.memory_gb * 1e9 * MEMORY_FRACTION - weights
    fit = int(free // per_token) if free > 0 else 0
    return 0 if fit < max_len else min(fit, candidate.max_batch * max_len)


def why_not(candidate: Candidate, shape, profile, max_len: int) -> str | None:
    """None when the candidate can run; else the one reason it is pruned."""
    if shape.num_heads % candidate.tp:
        return f"tp {candidate.tp} does not divide {shape.num_heads} attention heads"
    if candidate.pp > shape.num_layers:
        return f"pp {candidate.pp} exceeds {shape.num_layers} layers"
    if kv_tokens_that_fit(candidate, shape, profile, max_len) == 0:
        weights, per_token = device_memory(shape, candidate.precision, candidate.tp, candidate.pp)
        return (f"{weights / 1e9:,.1f} GB of weights + {max_len * per_token / 1e9:,.2f} GB of KV per device "
                f"exceed {MEMORY_FRACTION:.0%} of {profile.memory_gb:g} GB")
    return None


def prune(candidates: list[Candidate], shape, profiles: dict, max_len: int) -> tuple[list[Candidate], dict[str, int]]:
    """(the candidates that can run, {reason: how many were pruned for it})."""
    kept, pruned = [], {}
    for c in candidates:
        reason = why_not(c, shape, profiles[c.gpu], max_len)
        if reason is None:
            kept.append(c)
        else:
            key = "weights + KV exceed the memory" if "GB of weights" in reason else reason
            pruned[key] = pruned.get(key, 0) + 1
    return kept, pruned


def find_profiles(gpus: tuple[str, ...]) -> dict:
    """{key: GpuProfile} for each GPU key; an unknown key is one line naming the known ones."""
    from backend.roofline.profiles import find_profile, list_profiles
    out = {}
    for key in gpus:
        try:
            out[key] = find_profile(key)
        except InputError:
            known = ", ".join(p.key for p in list_profiles() if not p.is_cpu)
            raise InputError(f"--gpus: unknown GPU {key!r} (known: {known})") from None
        if out[key].price_per_hour is None:
            raise InputError(f"--gpus: profile {key!r} has no price_per_hour, so it cannot be costed")
    return out
