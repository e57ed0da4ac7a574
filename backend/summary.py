"""A run's figures: run.json's `summary` (and summary.csv's rows), typed.

On disk the summary is one flat object of named numbers, as every earlier version wrote it; in
memory it is a `Summary` whose fields are those names. A field is None when the run did not record
it (a sweep has no latencies, a local run no server figures); a recorded figure with no data behind
it is NaN. Three families of figures are named after something the run chose, and are held as typed
maps: `errors` (`errors_{kind}`), `precision` (`{dtype}_bytes_ratio`, `..._tpot_speedup`,
`..._ttft_speedup`) and `crossover` (`{label}_crossover_batch`). `to_json` and `from_json` are the one
way between the two; docs/run-folder.md lists every field.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

NAN = float("nan")


@dataclass(slots=True)
class PrecisionGain:
    """A precision sweep: one precision against the sweep's first."""

    bytes_ratio: float                    # first's weight bytes over this one's
    tpot_speedup: float
    ttft_speedup: float


@dataclass(slots=True, frozen=True)
class Band:
    """A simulated figure's interval at the summary's band_level (backend.sim.bands): low <= high, in its unit."""

    low: float
    high: float

    def contains(self, value: float) -> bool:
        return self.low <= value <= self.high

    def width(self, centre: float) -> float:
        """The band's width as a fraction of the figure it surrounds."""
        return (self.high - self.low) / centre if centre else NAN


@dataclass(slots=True)
class Crossovers:
    """A batch sweep: the batch size where decode turns compute-bound (None: none found below the cap)."""

    measured: int | None = None
    predicted: int | None = None          # by the roofline of the selected profile
    predicted_local: int | None = None    # by this machine's profile


@dataclass(slots=True)
class Summary:
    """Every figure a run folder's summary can hold, grouped as the code that computes them."""

    # requests and throughput (backend.results.summary)
    num_requests: int | None = None
    num_finished: int | None = None
    num_rejected: int | None = None
    num_errors: int | None = None
    num_preemptions: int | None = None
    num_steps: int | None = None
    duration_s: float | None = None
    requests_per_s: float | None = None
    output_tokens_per_s: float | None = None
    total_tokens_per_s: float | None = None
    # latency percentiles over finished requests (itl: over token gaps), ms
    ttft_mean_ms: float | None = None
    ttft_p50_ms: float | None = None
    ttft_p90_ms: float | None = None
    ttft_p99_ms: float | None = None
    tpot_mean_ms: float | None = None
    tpot_p50_ms: float | None = None
    tpot_p90_ms: float | None = None
    tpot_p99_ms: float | None = None
    itl_mean_ms: float | None = None
    itl_p50_ms: float | None = None
    itl_p90_ms: float | None = None
    itl_p99_ms: float | None = None
    # the same latencies under other tools' definitions (backend.results.definitions; docs/metrics.md)
    ttft_first_chunk_mean_ms: float | None = None   # to the first chunk of any kind, a role-only one included
    ttft_first_chunk_p50_ms: float | None = None
    ttft_first_chunk_p90_ms: float | None = None
    ttft_first_chunk_p99_ms: float | None = None
    itl_split_mean_ms: float | None = None          # a chunk of k tokens as k gaps of gap / k
    itl_split_p50_ms: float | None = None
    itl_split_p90_ms: float | None = None
    itl_split_p99_ms: float | None = None
    tpot_e2e_mean_ms: float | None = None           # (end-to-end - TTFT) / (tokens - 1)
    tpot_e2e_p50_ms: float | None = None
    tpot_e2e_p90_ms: float | None = None
    tpot_e2e_p99_ms: float | None = None
    num_chunks: int | None = None                   # streamed chunks that carried text
    num_multi_token_chunks: int | None = None       # of them, carrying several tokens
    num_first_chunk_role: int | None = None         # requests whose first chunk was role-only
    num_first_chunk_empty: int | None = None        # ... or empty
    ttft_definition: str | None = None              # the definition each headline figure uses (its key stem)
    itl_definition: str | None = None
    tpot_definition: str | None = None
    definitions_differ: int | None = None           # 1 when another definition moves a headline p50 > 5%
    e2e_mean_ms: float | None = None
    e2e_p50_ms: float | None = None
    e2e_p90_ms: float | None = None
    e2e_p99_ms: float | None = None
    queue_mean_ms: float | None = None
    queue_p50_ms: float | None = None
    queue_p90_ms: float | None = None
    queue_p99_ms: float | None = None
    # each phase's time and rate (mixed steps count in neither rate)
    prefill_time_ms: float | None = None
    decode_time_ms: float | None = None
    mixed_time_ms: float | None = None
    mixed_prefill_tokens: int | None = None
    mixed_decode_tokens: int | None = None
    num_input_tokens: int | None = None
    num_output_tokens: int | None = None
    prefill_tokens_per_s: float | None = None
    decode_tokens_per_s: float | None = None
    decode_prefill_cost_ratio: float | None = None
    decode_weight_bytes_mean: float | None = None
    decode_experts_touched_mean: float | None = None
    # each phase's sums for the roofline (backend.roofline.cost.PhaseTotals)
    prefill_steps: int | None = None
    prefill_tokens: int | None = None
    prefill_context_tokens: int | None = None
    prefill_attention_pairs: float | None = None
    prefill_logit_rows: int | None = None
    decode_steps: int | None = None
    decode_tokens: int | None = None
    decode_context_tokens: int | None = None
    decode_attention_pairs: float | None = None
    decode_logit_rows: int | None = None
    decode_share: float | None = None
    # prefix caching, paged layout (backend.results.summary): present when the run cached prefixes
    prefix_hit_tokens: int | None = None          # prompt tokens the requests' prefills found cached
    prefix_hit_rate: float | None = None          # those over the prompt tokens of admitted requests
    prefix_request_hit_rate: float | None = None  # share of admitted requests that found at least one block
    reused_tokens: int | None = None              # tokens found cached by the steps (recomputes after preemption too)
    prefill_saved_ms: float | None = None         # ESTIMATE: reused tokens x this run's prefill time per computed token
    num_evictions: int | None = None              # cached blocks taken for new contents
    # the workload's own ceiling beside it (backend.results.prefix_ceiling): its prompts replayed one at a
    # time through an infinite cache, and through an LRU pool of this run's size (no concurrency in either)
    prefix_ideal_hit_rate: float | None = None        # infinite cache: the most any cache could find
    prefix_ideal_sized_hit_rate: float | None = None  # a pool of prefix_ideal_num_blocks blocks
    prefix_ideal_num_blocks: int | None = None
    prefix_ideal_block_size: int | None = None
    # speculative decoding (backend.results.spec_figures; docs/speculative.md): present when the run speculated
    spec_verifications: int | None = None            # a request's decode that verified guesses, counted per request
    spec_proposed_tokens: int | None = None          # guesses verified
    spec_accepted_tokens: int | None = None          # of them kept
    spec_acceptance_rate: float | None = None        # kept / verified guesses (falls as K grows: see the next two)
    spec_mean_acceptance_length: float | None = None # tokens a verification emitted: kept guesses + 1
    spec_acceptance_by_position: str | None = None   # "0.92,0.81,...": kept at guess i among verifications with an i-th
    spec_acceptance_histogram: str | None = None     # "n0,n1,...": verifications by guesses kept
    spec_alpha: float | None = None                  # the rate normalised for K: the per-guess acceptance a that gives
                                                     # the mean acceptance length with each step's guesses (Leviathan eq. 1)
    spec_draft_time_ms: float | None = None          # the proposer's time (a draft model's passes) before the steps
    spec_draft_share: float | None = None            # of the engine's time: draft / (draft + steps)
    # the disaggregated policy's TTFT split and KV hand-off (backend.targets.disaggregated.summary)
    num_handed_off: int | None = None
    split_queue_mean_ms: float | None = None
    split_queue_p50_ms: float | None = None
    split_queue_p90_ms: float | None = None
    split_queue_p99_ms: float | None = None
    split_prefill_mean_ms: float | None = None
    split_prefill_p50_ms: float | None = None
    split_prefill_p90_ms: float | None = None
    split_prefill_p99_ms: float | None = None
    split_kv_transfer_mean_ms: float | None = None
    split_kv_transfer_p50_ms: float | None = None
    split_kv_transfer_p90_ms: float | None = None
    split_kv_transfer_p99_ms: float | None = None
    split_first_decode_mean_ms: float | None = None
    split_first_decode_p50_ms: float | None = None
    split_first_decode_p90_ms: float | None = None
    split_first_decode_p99_ms: float | None = None
    kv_bytes_mean: float | None = None
    kv_bytes_total: float | None = None
    kv_transfer_gb_per_s: float | None = None
    # a remote server's own /metrics (backend.targets.remote.server_log)
    server_running_max: float | None = None
    server_running_mean: float | None = None
    server_waiting_max: float | None = None
    server_waiting_mean: float | None = None
    server_kv_usage_max: float | None = None
    server_kv_usage_mean: float | None = None
    server_queue_count: float | None = None
    server_queue_mean_ms: float | None = None
    server_queue_p50_ms: float | None = None
    server_queue_p90_ms: float | None = None
    server_prefill_count: float | None = None
    server_prefill_mean_ms: float | None = None
    server_prefill_p50_ms: float | None = None
    server_prefill_p90_ms: float | None = None
    server_decode_count: float | None = None
    server_decode_mean_ms: float | None = None
    server_decode_p50_ms: float | None = None
    server_decode_p90_ms: float | None = None
    server_ttft_count: float | None = None
    server_ttft_mean_ms: float | None = None
    server_ttft_p50_ms: float | None = None
    server_ttft_p90_ms: float | None = None
    server_itl_count: float | None = None
    server_itl_mean_ms: float | None = None
    server_itl_p50_ms: float | None = None
    server_itl_p90_ms: float | None = None
    server_e2e_count: float | None = None
    server_e2e_mean_ms: float | None = None
    server_e2e_p50_ms: float | None = None
    server_e2e_p90_ms: float | None = None
    server_cache_hit_rate_max: float | None = None    # SGLang's prefix-cache hit-rate gauge (0 to 1)
    server_cache_hit_rate_mean: float | None = None
    server_prefix_queries: float | None = None        # prompt tokens its prefix cache was asked for over the run
    server_prefix_hits: float | None = None           # and found there (each counter at the end less at the start)
    server_prefix_hit_rate: float | None = None       # hits / queries
    # the server's speculative decoding over the run (backend.targets.remote.spec_counters): vLLM's counters
    server_spec_drafts: float | None = None           # verifications
    server_spec_draft_tokens: float | None = None     # guesses verified
    server_spec_accepted_tokens: float | None = None  # of them kept
    server_spec_acceptance_rate: float | None = None  # kept / verified
    server_spec_mean_acceptance_length: float | None = None  # 1 + kept / verifications
    server_spec_acceptance_by_position: str | None = None    # "0.87,0.77,...": kept at position j / verifications
    server_spec_accept_length_max: float | None = None       # SGLang's accept-length gauge over the readings
    server_spec_accept_length_mean: float | None = None
    # ... and the client's view of it (backend.targets.remote.prefix_cache): the answers' cached prompt tokens
    client_cached_requests: int | None = None         # finished requests whose answer said how many were cached
    client_cached_prompt_tokens: int | None = None    # their cached prompt tokens
    client_reported_prompt_tokens: int | None = None  # their prompt tokens
    client_prefix_hit_rate: float | None = None       # cached / prompt tokens
    # a remote run's client: its own load (backend.targets.remote.honesty) and its token counts
    client_workers: int | None = None
    client_loop_lag_p50_ms: float | None = None
    client_loop_lag_p99_ms: float | None = None
    client_loop_lag_max_ms: float | None = None
    client_dispatch_late_p50_ms: float | None = None
    client_dispatch_late_p99_ms: float | None = None
    client_refill_wait_p50_ms: float | None = None   # closed loop: a user's wait for its next request (not flagged)
    client_refill_wait_p99_ms: float | None = None
    client_cpu_share_max: float | None = None
    client_cpu_s: float | None = None
    client_coordinator_cpu_s: float | None = None
    connections_opened: int | None = None
    client_clumped_share: float | None = None
    client_limited: int | None = None     # 1 when the client could not keep up
    num_stopped_early: int | None = None
    num_prompt_tokens_estimated: int | None = None
    num_output_tokens_estimated: int | None = None
    errors: dict[str, int] = field(default_factory=dict)   # errors_{kind}: failed requests by kind
    # cost at the profile's price (backend.results.cost)
    price_per_hour: float | None = None
    cost_prefill_usd: float | None = None
    cost_decode_usd: float | None = None
    cost_per_m_input_usd: float | None = None
    cost_per_m_output_usd: float | None = None
    cost_per_m_output_wall_usd: float | None = None
    # the objectives and goodput (with --slo-ttft-ms / --slo-tpot-ms)
    slo_ttft_ms: float | None = None
    slo_tpot_ms: float | None = None
    slo_attainment: float | None = None
    goodput_requests_per_s: float | None = None
    # a sweep's folder (backend.sweeps)
    kind: str | None = None               # batch, prompt, precision, rate, concurrency, pd-ratio, depth
    num_points: int | None = None
    note: str | None = None               # why it stopped early, what it skipped
    simulated: bool | None = None
    context: int | None = None            # batch sweep: tokens each request attends to
    crossover: Crossovers | None = None   # batch sweep: {measured,predicted,predicted_local}_crossover_batch
    simulated_mape: float | None = None   # step-time error of the simulation beside measured points, %
    simulated_worst: float | None = None
    best_tokens_per_s: float | None = None
    best_at: int | None = None
    largest_fit: int | None = None
    batch: int | None = None              # precision sweep: the batch and lengths of each run
    prompt_len: int | None = None
    output_len: int | None = None
    precision: dict[str, PrecisionGain] = field(default_factory=dict)   # precision sweep, by dtype
    pareto: str | None = None             # rate / concurrency sweep: the front's points, "5,20"
    best_goodput_at: float | None = None
    best_goodput_requests_per_s: float | None = None
    total_devices: int | None = None      # pd-ratio sweep
    best_split: str | None = None         # pd-ratio sweep: "1P:2D"
    # how far to trust a simulated figure (backend.sim.bands): each banded figure's interval is written as
    # {figure}_low and {figure}_high beside it (tpot_p50_ms_low, ...), from the simulator's cross-validated errors
    band_level: float | None = None       # the bands' level: 0.8 holds 80% of the published figures' errors
    band_regimes: str | None = None       # which regimes' errors each family of figures took its band from
    bands: dict[str, Band] = field(default_factory=dict)   # figure name -> its interval
    extra: dict[str, Any] = field(default_factory=dict)   # names this version does not know: kept, written back

    def to_json(self) -> dict[str, Any]:
        """The flat object run.json and summary.csv hold, fields in declaration order, None left out."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "errors":
                out.update({f"errors_{kind}": n for kind, n in value.items()})
            elif f.name == "crossover":
                if value is not None:   # the measured one always (None: none found); a prediction where made
                    out["measured_crossover_batch"] = value.measured
                    out.update({f"{label}_crossover_batch": getattr(value, label) for label in _CROSSOVERS
                                if label != "measured" and getattr(value, label) is not None})
            elif f.name == "precision":
                for dtype, gain in value.items():
                    out.update({f"{dtype}_{name}": getattr(gain, name) for name in _GAINS})
            elif f.name == "extra":
                out.update(value)
            elif f.name == "bands":
                continue   # written beside each figure
            elif value is not None:
                out[f.name] = value
                if (band := self.bands.get(f.name)) is not None:
                    out[f"{f.name}_low"], out[f"{f.name}_high"] = band.low, band.high
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Summary:
        """The typed summary of a flat object (run.json's, or one a producer built)."""
        plain = {f.name for f in fields(cls)} - {"errors", "crossover", "precision", "extra", "bands"}
        values: dict[str, Any] = {}
        errors: dict[str, int] = {}
        crossover: dict[str, int | None] = {}
        gains: dict[str, dict[str, float]] = {}
        extra: dict[str, Any] = {}
        edges: dict[str, dict[str, float]] = {}
        for key, value in data.items():
            if key in plain:
                values[key] = value
            elif key.startswith("errors_"):
                errors[key.removeprefix("errors_")] = value
            elif (edge := _band_edge(key, plain)) is not None:
                edges.setdefault(key.removesuffix("_" + edge), {})[edge] = value
            elif key.endswith("_crossover_batch") and key.removesuffix("_crossover_batch") in _CROSSOVERS:
                crossover[key.removesuffix("_crossover_batch")] = value
            elif (gain := next((g for g in _GAINS if key.endswith("_" + g)), None)) is not None:
                gains.setdefault(key.removesuffix("_" + gain), {})[gain] = value
            else:
                extra[key] = value
        precision = {}
        for dtype, parts in gains.items():
            if set(parts) == set(_GAINS):
                precision[dtype] = PrecisionGain(**parts)
            else:   # not a whole gain: kept as it was
                extra.update({f"{dtype}_{g}": v for g, v in parts.items()})
        bands = {}
        for name, parts in edges.items():
            if set(parts) == {"low", "high"} and name in values:
                bands[name] = Band(parts["low"], parts["high"])
            else:   # half a band, or one beside no figure: kept as it was
                extra.update({f"{name}_{e}": v for e, v in parts.items()})
        return cls(**values, errors=errors, crossover=Crossovers(**crossover) if crossover else None,
                   precision=precision, bands=bands, extra=extra)

    def merged(self, figures: dict[str, Any]) -> Summary:
        """This summary with more named figures (a target's own: the KV hand-off, the server's, the cost)."""
        return Summary.from_json({**self.to_json(), **figures})

    def numbers(self) -> dict[str, float]:
        """Every numeric figure by its name (booleans and text left out): what repeats compare."""
        return {k: float(v) for k, v in self.to_json().items()
                if isinstance(v, (int, float)) and not isinstance(v, bool)}


def _band_edge(key: str, plain: set[str]) -> str | None:
    """'low' or 'high' when `key` is a band's edge of a plain figure (tpot_p50_ms_low), else None."""
    edge = next((e for e in ("low", "high") if key.endswith("_" + e)), None)
    return edge if edge is not None and key.removesuffix("_" + edge) in plain else None


_CROSSOVERS = tuple(f.name for f in fields(Crossovers))
_GAINS = tuple(f.name for f in fields(PrecisionGain))


def figure(value: float | None) -> float:
    """A figure as a float, NaN where the summary did not record it."""
    return NAN if value is None else float(value)
