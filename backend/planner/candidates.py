"""The planner's search space: every deployment of one model worth simulating, and the pruning that
drops, before anything is simulated, the ones that cannot run (weights plus one full sequence of KV
larger than a device's memory, a TP that does not divide the heads, a precision the GPU lacks).

A candidate is one GPU type at one precision and KV dtype (FP8 where the GPU has an FP8 peak), laid out
as tp x pp devices per replica and dp replicas (continuous or chunked scheduling; a mixture of experts
also with its experts spread over the tp devices), or as P prefill groups of one tp and D decode groups
of another (disaggregated), with a limit on the requests one engine runs at once (max_batch).
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
    tp: int = 1                 # devices a matrix is split over (disaggregated: the prefill pool's groups)
    pp: int = 1                 # pipeline stages a replica's layers are split into
    dp: int = 1                 # replicas behind the router
    prefill_workers: int = 0    # disaggregated: groups of tp devices that run prompts
    decode_workers: int = 0     # disaggregated: groups of decode_tp devices that run decode steps
    decode_tp: int = 0          # disaggregated: the decode pool's groups' tp (0: tp)
    kv_dtype: str = "auto"      # the KV cache's dtype: auto (the activations') or fp8
    ep: int = 1                 # expert parallel (MoE): the experts spread over ep of the tp devices
    spec_tokens: int = 0        # speculative decoding: K guesses a verification step (0: off; --spec)

    @property
    def pool_tps(self) -> tuple[int, int]:
        """(the prefill groups' tp, the decode groups' tp); a colocated candidate's tp twice."""
        return self.tp, self.decode_tp or self.tp

    @property
    def pool_devices(self) -> tuple[int, int]:
        """Disaggregated: (devices of the prefill pool, of the decode pool)."""
        return self.prefill_workers * self.tp, self.decode_workers * (self.decode_tp or self.tp)

    @property
    def devices(self) -> int:
        if self.policy == "disaggregated":
            return sum(self.pool_devices)
        return self.tp * self.pp * self.dp

    @property
    def layout(self) -> str:
        """'tp4 pp1 dp2', 'tp4 pp1 dp1 ep4' or 'P1xtp2:D3xtp4', with ' K4' where it speculates."""
        k = f" K{self.spec_tokens}" if self.spec_tokens else ""
        if self.policy == "disaggregated":
            prefill_tp, decode_tp = self.pool_tps
            return f"P{self.prefill_workers}xtp{prefill_tp}:D{self.decode_workers}xtp{decode_tp}{k}"
        return f"tp{self.tp} pp{self.pp} dp{self.dp}" + (f" ep{self.ep}" if self.ep > 1 else "") + k

    @property
    def numbers(self) -> str:
        """The precision, with an FP8 KV cache said: 'fp8', 'bfloat16 kv-fp8'."""
        return self.precision + (" kv-fp8" if self.kv_dtype == "fp8" else "")

    @property
    def label(self) -> str:
        return f"{self.devices}x {self.gpu} {self.numbers} {self.layout} {self.policy} b{self.max_batch}"


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
    kv_dtypes: tuple[str, ...] = ("auto", "fp8")          # fp8 where the GPU has an FP8 peak
    # speculative decoding's K (plan --spec ... --spec-tokens 0,2,4): 0 is off; every layout is tried at each K
    # (the simulator speculates on every replica, and on a disaggregated layout's decode devices)
    spec_tokens: tuple[int, ...] = (0,)


def runnable_precisions(profile, wanted: tuple[str, ...]) -> list[str]:
    """The precisions of `wanted` this profile has a tensor peak for (nvfp4 only on FP4 parts)."""
    from backend.precision import precision
    return [name for name in wanted if profile.has_peak(precision(name))]


def enumerate_candidates(space: SearchSpace, profiles: dict, shape=None) -> list[Candidate]:
    """Every layout of the space, unpruned; `profiles` maps each GPU key to its GpuProfile. With a
    mixture-of-experts `shape`, each tensor-parallel layout is tried with its experts spread over all
    its devices too (ep = tp, where tp divides the experts)."""
    out: list[Candidate] = []
    experts = getattr(shape, "num_experts", 0) if shape is not None else 0
    for gpu in space.gpus:
        kv_dtypes = [kv for kv in space.kv_dtypes if kv != "fp8" or runnable_precisions(profiles[gpu], ("fp8",))]
        for prec in runnable_precisions(profiles[gpu], space.precisions):
            for kv in kv_dtypes:
                for policy in space.policies:
                    if policy == "disaggregated":
                        out += _disaggregated(space, gpu, prec, kv)
                        continue
                    for tp in space.tps:
                        eps = [1] + ([tp] if experts and tp > 1 and experts % tp == 0 else [])
                        for pp in space.pps:
                            for dp in space.dps:
                                if tp * pp * dp > space.max_gpus:
                                    continue
                                out += [Candidate(gpu, prec, policy, b, tp, pp, dp, kv_dtype=kv, ep=ep,
                                                  spec_tokens=k)
                                        for ep in eps for b in space.max_batches for k in space.spec_tokens]
    return out


def _disaggregated(space: SearchSpace, gpu: str, prec: str, kv: str) -> list[Candidate]:
    """Every split of the devices into P prefill groups of one tp and D decode groups of another, at each K
    (the decode devices guess; the prefill devices do not)."""
    out = []
    for prefill_tp in space.tps:
        for decode_tp in space.tps:
            for p in range(1, space.max_gpus // prefill_tp + 1):
                for d in range(1, (space.max_gpus - p * prefill_tp) // decode_tp + 1):
                    out += [Candidate(gpu, prec, "disaggregated", b, prefill_tp, 1, 1, p, d,
                                      decode_tp if decode_tp != prefill_tp else 0, kv, spec_tokens=k)
                            for b in space.disaggregated_batches for k in space.spec_tokens]
    return out


def device_memory(candidate: Candidate, shape, profile, tp: int | None = None) -> tuple[float, float]:
    """(weight bytes, KV bytes a token) one device of the candidate's tp x pp group holds (tp: a
    disaggregated pool's own): the simulator's own per-device arithmetic (simulated.per_device_bytes)
    at the precision it will run, its KV dtype included."""
    from backend.sim.parallel import Layout
    from backend.sim.model import per_device_bytes, resolve_precision
    prec = resolve_precision(candidate.precision, profile, candidate.kv_dtype)
    return per_device_bytes(shape, prec, Layout(tp=candidate.tp if tp is None else tp, pp=candidate.pp))


def kv_tokens_that_fit(candidate: Candidate, shape, profile, max_len: int) -> int:
    """KV tokens one engine of this candidate can hold: the memory left after the weights (at
    MEMORY_FRACTION of each device), at most every slot at full length; 0 when not one sequence fits.
    A disaggregated candidate's engines share one size, so its smaller pool's devices set it."""
    fits = []
    for tp in sorted(set(candidate.pool_tps)):
        weights, per_token = device_memory(candidate, shape, profile, tp)
        free = profile.memory_gb * 1e9 * MEMORY_FRACTION - weights
        fits.append(int(free // per_token) if free > 0 else 0)
    fit = min(fits)
    return 0 if fit < max_len else min(fit, candidate.max_batch * max_len)


def why_not(candidate: Candidate, shape, profile, max_len: int) -> str | None:
    """None when the candidate can run; else the one reason it is pruned."""
    for tp in sorted(set(candidate.pool_tps)):
        if shape.num_heads % tp:
            return f"tp {tp} does not divide {shape.num_heads} attention heads"
    if candidate.pp > shape.num_layers:
        return f"pp {candidate.pp} exceeds {shape.num_layers} layers"
    if kv_tokens_that_fit(candidate, shape, profile, max_len) == 0:
        weights, per_token = device_memory(candidate, shape, profile, min(candidate.pool_tps))
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
