"""What the CLI prints: model lists, live progress of a load run, and the phase summary."""
from __future__ import annotations

import math
import sys
from collections import Counter
import time

from backend.config import RunKind
from backend.events import (
    DepthPoint, LoadPoint, ModelLoaded, PDPoint, PrecisionPoint, Progress, RequestsArrived, RunFinished, SweepPoint)
from backend.precision import from_info
from backend.records import RecordBatch, RequestStatus
from backend.summary import Summary, figure

from backend.results.text import (breakdown_of, breakdown_text, cost_model_text, ms_text as _ms, precision_text,
                                  roofline_lines)
from backend.roofline.cost import PhaseTotals
from backend.engine.threads import describe_threads


def _gb(n: float) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e9 else f"{n / 1e6:.0f} MB"


def _params(n: int) -> str:
    return f"{n / 1e6:,.0f} M" if n >= 10e6 else f"{n / 1e6:,.2f} M"


def _rate(value: float) -> str:
    return "n/a" if value is None or math.isnan(value) else f"{value:,.1f} tok/s"


def print_models() -> int:
    from backend.loaders.weights import list_models
    rows = [("name", "arch", "params", "fp32", "bf16", "source")]
    for m in list_models():
        rows.append((m.name, m.arch, _params(m.params), _gb(m.bytes_fp32), _gb(m.bytes_bf16), m.source))
    print_table(rows)
    print("\nAlso: a Hugging Face folder (config.json + *.safetensors), a .gguf file, or a hub id (downloaded when online).")
    return 0


def print_local_models(add_folder: str | None = None, out=None) -> int:
    """`models --local`: every model found on this disk, with why this engine cannot run it if it cannot."""
    import torch
    from backend.loaders.discover import add_folder as remember, find_models, hf_cache, llama_cpp_cache, ollama_store
    from backend.loaders.weights import free_memory
    out = out or sys.stdout
    if add_folder:
        print(f"will look in {remember(add_folder)} too", file=out)
    free = free_memory(torch.device("cpu"))
    found = find_models(free)
    if not found:
        print(f"no models found (looked in {hf_cache()}, LM Studio's folders, {ollama_store()}, {llama_cpp_cache()} "
              "and the added folders)", file=out)
        return 0
    rows = [("model", "where", "arch", "params", "format", "bits/weight", "size", "fits RAM", "runs here")]
    for m in found:
        rows.append((m.name, m.where, m.arch, _params(m.params) if m.params else "-", m.format,
                     f"{m.bits_per_weight:.2f}" if m.bits_per_weight else "-", _gb(m.size_bytes),
                     {True: "yes", False: "no", None: "?"}[m.fits], "yes" if m.runs else f"no: {m.reason}"))
    print_table(rows, out=out)
    print("\nRun one with --model PATH; the paths:", file=out)
    for m in found:
        if m.runs:
            print(f"  {m.name}: {m.path}", file=out)
    return 0


def print_table(rows: list[tuple], out=None) -> None:
    out = out or sys.stdout
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    for n, row in enumerate(rows):
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip(), file=out)
        if n == 0:
            print("  ".join("-" * w for w in widths), file=out)


class LiveProgress:
    """Prints loading messages, and for load runs one status line a second to stderr."""

    def __init__(self, enabled: bool, interval_s: float = 1.0):
        self.enabled = enabled
        self.interval_s = interval_s
        self.arrived = self.finished = self.tokens = 0
        self.running = self.waiting = 0
        self._last = time.monotonic()
        self._tokens_at_last = 0
        self.loaded: ModelLoaded | None = None
        self.sweep = None   # a tools_cli.SweepPrinter during sweeps
        self._started = time.monotonic()   # each stage's line says when it began

    def on_event(self, event) -> None:
        if isinstance(event, Progress):
            print(f"... {event.message}  [{time.monotonic() - self._started:.1f} s]", file=sys.stderr)
        elif isinstance(event, ModelLoaded):
            self.loaded = event
            self._last = time.monotonic()   # the first status line comes a second into the run
        elif isinstance(event, (SweepPoint, PrecisionPoint, LoadPoint, PDPoint, DepthPoint)) and self.sweep is not None:
            self.sweep.on_point(event)
        elif isinstance(event, RequestsArrived):
            self.arrived += len(event.request_ids)
        elif isinstance(event, RecordBatch):
            self.tokens += len(event.tokens)
            self.finished += len(event.requests)
            if event.steps:
                self.running, self.waiting = event.steps[-1].num_running, event.steps[-1].num_waiting
            now = time.monotonic()
            if self.enabled and now - self._last >= self.interval_s:
                rate = (self.tokens - self._tokens_at_last) / (now - self._last)
                print(f"  arrived {self.arrived:5d}  running {self.running:4d}  waiting {self.waiting:4d}  "
                      f"finished {self.finished:5d}  {rate:8.1f} tok/s", file=sys.stderr)
                self._last, self._tokens_at_last = now, self.tokens

    def close(self) -> None:
        sys.stderr.flush()


def print_run(config, finished: RunFinished, out=None, definitions: bool = False) -> None:
    """The generated text (for a text prompt) and the phase summary; with `definitions`, every latency
    under each tool's definition side by side (backend.results.definitions)."""
    out = out or sys.stdout
    data = finished.data
    if data is None:
        return
    info, s = data.info, finished.summary
    if config.mode == RunKind.BATCH and config.batch.prompt is not None and data.requests:
        print("--- generated text (request 0) ---", file=out)
        print(data.requests[0].text.strip(), file=out)
        print("----------------------------------", file=out)
    if info.is_remote:
        remote = info.remote
        print(f"target  {remote.endpoint}  model {remote.served_model}  api {remote.api}  "
              f"(times from this machine's clock; the server's engine steps are not visible)", file=out)
        _print_load_summary(s, out)
        _print_turns(data.requests, out)
        if definitions:
            _print_definitions(s, out)
        if s.errors:
            print("errors   " + ", ".join(f"{k} {int(v)}" for k, v in s.errors.items()), file=out)
        from backend.targets.remote.honesty import client_line
        from backend.targets.remote.server_log import server_line
        print(client_line(info), file=out)
        if remote.server_metrics:
            print(server_line(remote.server_metrics, s), file=out)
        from backend.targets.remote.prefix_cache import prefix_line
        if (line := prefix_line(s, (remote.server_metrics or {}).get("engine"))) is not None:
            print(line, file=out)
        from backend.targets.remote.spec_counters import server_spec_line
        if (line := server_spec_line(s, (remote.server_metrics or {}).get("engine"))) is not None:
            print(line, file=out)
        for line in remote.warnings:   # what the run knows is wrong with its own figures
            print(f"warning  {line}", file=out)
        if config.out_dir:
            print(f"records written to {config.out_dir}/", file=out)
        return
    weights = "RANDOM weights (synthetic shape: timings are real, the text is noise)" if info.random_weights \
        else info.source
    print(f"model   {info.model}  ({_params(info.num_params)} params, "
          f"{_gb(info.weight_bytes)})  {weights}", file=out)
    if info.is_simulated:
        sim = info.simulated
        print(f"device  {info.device} ({info.device_name}), {precision_text(info)}; SIMULATED: "
              f"{sim.virtual_s or 0:,.1f} s of virtual time in {info.wall_s or 0:,.1f} s", file=out)
        print(f"        cost model {cost_model_text(sim.cost_model or {})}: "
              f"{sim.cost_model_source or 'no source recorded'}", file=out)
    else:
        host = info.host
        threads = (describe_threads(host.threads, host.affinity) if host.affinity
                   else f"{host.threads} threads")
        from backend.results.matmul import math_lines, products_text
        products = products_text(host.matmul)
        print(f"device  {info.device} ({info.device_name}), {precision_text(info)}, "
              f"{threads}" + (f"; kernels: {host.kernels}" if host.kernels else "")
              + (f"; products: {products}" if products else ""), file=out)
        for label, text in math_lines(info):
            print(f"  {label:<7} {text}", file=out)
    if info.disaggregated is not None:
        from backend.cli.disaggregated_report import print_layout
        print_layout(info.disaggregated, s, out)
    if config.mode == RunKind.BATCH:
        _print_batch_summary(config, data, s, out)
    else:
        _print_load_summary(s, out)
        _print_turns(data.requests, out)
        if definitions:
            _print_definitions(s, out)
        from backend.results.definitions import differences
        for line in differences(s):
            print(f"note     definitions: {line}", file=out)
        _print_rejections(data.requests, out)
    from backend.results.band_text import band_lines
    for line in band_lines(s):
        print(line, file=out)
    from backend.results.cost import cost_text
    cost = cost_text(s, info.priced_on or "")
    if cost:
        print(cost, file=out)
    if config.out_dir:
        print(f"records written to {config.out_dir}/ (steps.csv, requests.csv, tokens.csv, summary.csv, "
              f"run.json, trace.json)", file=out)


def _decode_reads(data, s: Summary) -> str:
    """What a decode step reads of the weights: all of a dense model's; of a mixture of experts,
    the experts its tokens were routed to (the decode steps' own mean count, where they measured it)."""
    shape = data.info.shape or {}   # run.json's: the ModelShape as a dict
    experts = shape.get("num_experts", 0)
    if not experts:
        return "every weight read each step"
    touched, read = figure(s.decode_experts_touched_mean), figure(s.decode_weight_bytes_mean)
    if math.isnan(touched):
        return f"only the experts routed to read ({shape.get('experts_per_token')} of {experts} a token)"
    return f"{touched / shape['num_layers']:.1f} of {experts} experts a layer read, {read / 1e6:,.0f} MB a step"


def _print_batch_summary(config, data, s: Summary, out) -> None:
    finished = [r for r in data.requests if r.status is RequestStatus.FINISHED]
    b = config.batch
    prompt_tokens = data.requests[0].prompt_tokens if data.requests else 0
    out_tokens = finished[0].output_tokens if finished else 0
    print(f"batch   {b.batch} request(s) x {prompt_tokens} prompt tokens, {out_tokens} output tokens each", file=out)
    print("", file=out)
    ttft, tpot = figure(s.ttft_mean_ms), figure(s.tpot_mean_ms)
    print(f"prefill  TTFT {_ms(ttft):>12}   {_rate(s.prefill_tokens_per_s):>16}   "
          f"one pass over every prompt token", file=out)
    print(f"decode   TPOT {_ms(tpot):>12}   {_rate(s.decode_tokens_per_s):>16}   "
          f"one step per token, {_decode_reads(data, s)}", file=out)
    ratio = figure(s.decode_prefill_cost_ratio)
    if not math.isnan(ratio):
        print(f"a decoded token costs {ratio:,.1f}x a prefilled token", file=out)
    info = data.info
    totals = {phase: PhaseTotals.from_summary(s, phase) for phase in ("prefill", "decode")}
    if info.shape is not None and any(t is not None and t.steps for t in totals.values()):
        from backend.roofline.profiles import run_profile
        device, name = info.device, info.device_name
        if info.is_simulated:   # judged against the profile it was priced on
            from backend.sim.parallel import replica_profile
            from backend.roofline.profiles import find_profile
            replicas = info.replicas
            profile = replica_profile(find_profile(info.profile), *((replicas.tp, replicas.pp) if replicas else ()))
        else:
            profile = run_profile(device, name)
        from backend.roofline.roofs import math_from_info
        for label, text in roofline_lines(info.shape, from_info(info) or info.dtype, device, name, totals,
                                          profile, math_from_info(info)):
            print(f"roofline {text}" if label == "roofline" else f"  {label:<7} {text}", file=out)
    breakdown = breakdown_of(finished)
    if breakdown is not None:
        print(f"total    {breakdown_text(*breakdown)}", file=out)
    if s.spec_verifications is not None:
        print(spec_line(s), file=out)


def _print_turns(requests, out) -> None:
    """A multi-turn run: TTFT by turn, as the context grows."""
    from backend.results.turns import turns_line
    line = turns_line(requests)
    if line:
        print(line, file=out)


def _print_definitions(s: Summary, out) -> None:
    from backend.results.definitions import definition_rows
    if s.itl_split_p50_ms is None:   # a run folder from before the definitions were recorded
        print("definitions: not recorded in this run", file=out)
        return
    print("", file=out)
    print_table(definition_rows(s), out)
    print(f"chunks   {s.num_chunks or 0} carried text, {s.num_multi_token_chunks or 0} of them several tokens; "
          f"first chunks role-only {s.num_first_chunk_role or 0}, empty {s.num_first_chunk_empty or 0} "
          "(docs/metrics.md says which tool uses which)", file=out)


def _print_rejections(requests, out) -> None:
    """Why requests were refused: each distinct reason once, with how many it refused."""
    reasons = Counter(r.finish_reason for r in requests if r.status is RequestStatus.REJECTED)
    for reason, count in reasons.most_common():
        print(f"rejected {count}: {reason}", file=out)


def _print_load_summary(s: Summary, out) -> None:
    print("", file=out)
    print(f"requests {int(s.num_finished)} finished, {int(s.num_rejected)} rejected, "
          f"{int(s.num_preemptions or 0)} preemptions, in {s.duration_s:.1f} s  "
          f"({s.requests_per_s:.2f} req/s, {s.output_tokens_per_s:.1f} output tok/s, "
          f"{s.total_tokens_per_s:.1f} total tok/s)", file=out)
    if not s.num_finished:
        return
    rows = [("metric", "mean", "p50", "p90", "p99")]
    latencies = [("TTFT", (s.ttft_mean_ms, s.ttft_p50_ms, s.ttft_p90_ms, s.ttft_p99_ms)),
                 ("TPOT", (s.tpot_mean_ms, s.tpot_p50_ms, s.tpot_p90_ms, s.tpot_p99_ms)),
                 ("ITL", (s.itl_mean_ms, s.itl_p50_ms, s.itl_p90_ms, s.itl_p99_ms)),
                 ("end-to-end", (s.e2e_mean_ms, s.e2e_p50_ms, s.e2e_p90_ms, s.e2e_p99_ms)),
                 ("queue wait", (s.queue_mean_ms, s.queue_p50_ms, s.queue_p90_ms, s.queue_p99_ms))]
    for label, values in latencies:
        rows.append((label + " (ms)", *(f"{v:,.1f}" for v in values)))
    print_table(rows, out)
    if s.goodput_requests_per_s is not None:
        print(f"goodput  {s.goodput_requests_per_s:.2f} req/s meet the SLO "
              f"({s.slo_attainment * 100:.0f}% of finished requests)", file=out)
    if not s.num_steps:
        return   # a remote target: no engine steps to split into phases
    print(f"phases   prefill {_rate(s.prefill_tokens_per_s)}, decode {_rate(s.decode_tokens_per_s)}, "
          f"time in prefill {s.prefill_time_ms:,.0f} ms / decode {s.decode_time_ms:,.0f} ms / "
          f"mixed {s.mixed_time_ms:,.0f} ms", file=out)
    if s.prefix_hit_rate is not None:
        print(prefix_line(s), file=out)
    if s.spec_verifications is not None:
        print(spec_line(s), file=out)


def spec_line(s: Summary) -> str:
    """Speculative decoding in one line: how many guesses were kept, where, and what the draft cost."""
    draft = (f"; draft {s.spec_draft_time_ms:,.0f} ms ({_share(s.spec_draft_share)} of the engine's time)"
             if s.spec_draft_time_ms and s.spec_draft_time_ms >= 1 else "")
    return (f"spec     {s.spec_verifications:,} verifications kept {s.spec_accepted_tokens:,} of "
            f"{s.spec_proposed_tokens:,} guesses ({_share(s.spec_acceptance_rate)}; by position "
            f"{s.spec_acceptance_by_position}); {s.spec_mean_acceptance_length:.2f} tokens a verification, "
            f"per-guess rate for any K {s.spec_alpha:.2f}{draft}")


def prefix_line(s: Summary) -> str:
    """The prefix cache in one line; the time saved is an estimate, and says so; the workload's
    theoretical hit rate beside it (backend/results/prefix_ceiling.py)."""
    from backend.results.prefix_ceiling import ceiling_text
    return (f"prefix   cache hit {_share(s.prefix_hit_rate)} of prompt tokens ({s.prefix_hit_tokens:,}), "
            f"{_share(s.prefix_request_hit_rate)} of requests; {s.reused_tokens:,} tokens reused, about "
            f"{s.prefill_saved_ms:,.0f} ms of prefill saved (estimate: reused tokens x this run's prefill time per "
            f"token); {s.num_evictions:,} evictions{ceiling_text(s)}")


def _share(value: float | None) -> str:
    return "n/a" if value is None or value != value else f"{100 * value:.1f}%"
