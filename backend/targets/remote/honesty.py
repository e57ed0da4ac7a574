"""What a remote run says about its own figures: a client that could not keep up, estimated
token counts, answers shorter than asked, connections opened.

A client that is short of CPU reads tokens late and in clumps: its inter-token gaps collapse to
zero between clumps and stretch across them, its TTFT grows, and its requests go out after their
planned arrival. So the workers measure themselves (their loop's lag, their CPU, how late each
request went out, and how many tokens came in one read with their stream's previous token, which
a client reads only when it is late by a whole gap), and when a measure crosses its threshold
the run is flagged `client_limited`, with which measure and by how much, in the summary,
run.json, the console and the window. Every read is stamped before any stream is parsed
(backend.targets.remote.http11), so parsing a burst of streams is no error of its own: what
moves a figure is the loop waking late, by more than the figure can absorb (the thresholds
below follow bench.remote_client's exactness: ITL p99 within 2x, TTFT p50 within 5 ms).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from backend.run_info import RemoteInfo, RunInfo

LOOP_LAG_P99_MS = 1.0       # the event loop wakes later than this (p99): token times are this late...
# ...and matters once more than this share of tokens came in one read with the one before (measured against the
# fake server's truth: ITL p50 held within 0.2 ms at 7% and 19% clumped, and moved 0.3 ms at 33%; a server that
# writes two steps back to back makes a few clumps of its own)
CLUMPED_SHARE = 0.25
# ...or once it wakes later than this many whole gaps between tokens (the run's ITL p50): a read that late holds a
# gap stretched by more than itself, so ITL p99 goes past twice the true one (bench.remote_client's exactness).
# One gap flagged exact runs (1 ms ticks, 64 streams: lag p99 1.7 ms, every figure exact); at 1 ms ticks and 256
# streams the lag p99 was 4.1 ms, four gaps, with ITL p99 2.6x the truth. Each read is stamped as it comes, before
# any stream is parsed (backend.targets.remote.http11), so what is left late is the loop waking up late.
LAG_GAPS = 2.0
# ...or when the loop's typical wake-up (p50) is later than this: a first token read that late moves TTFT p50 past
# what bench.remote_client calls exact (within 5 ms of the server's)
TTFT_TOLERANCE_MS = 5.0
# Requests go out later than they could have by more than this (p99) beyond the loop's own wake-up lag (p99). A request
# waits for its moment on a timer, so it goes out at best as late as the loop wakes: that part is the loop lag's measure
# above (on a shared VM its p99 is 5-6 ms at 10 ms ticks, with every figure exact). Only the excess says the worker was
# too busy to send, so the load offered was lighter than planned.
DISPATCH_LATE_P99_MS = 5.0
CPU_SHARE = 0.9             # a worker (one event loop, one core) busier than this


def _p(values, q: float) -> float:
    return float(np.percentile(values, q)) if len(values) else float("nan")


@dataclass(slots=True)
class ClientLoad:
    """How the client itself fared during the run."""

    num_workers: int
    loop_lag_ms: list[float] = field(default_factory=list)     # every worker's probe readings
    late_ms: list[float] = field(default_factory=list)         # each request: sent minus when it could have gone
    # a closed loop's next requests: how long each user waited for the coordinator to make it (its round trip; the
    # user idles, but nothing measured is late, so it is shown and never flagged)
    refill_ms: list[float] = field(default_factory=list)
    cpu_shares: list[float] = field(default_factory=list)      # each worker's CPU time over its run time
    cpu_s: float = 0.0                                         # all workers' CPU time
    coordinator_cpu_s: float = 0.0
    wall_s: float = 0.0
    num_connections: int = 0
    num_tokens: int = 0                                        # tokens read by the workers (0: not counted)
    num_clumped: int = 0                                       # of them, read together with their stream's previous
    itl_p50_ms: float = float("nan")                           # the run's measured gap between tokens (NaN: none)

    @property
    def clumped_share(self) -> float:
        return self.num_clumped / self.num_tokens if self.num_tokens else float("nan")

    def figures(self) -> dict[str, float]:
        return {"client_workers": self.num_workers,
                "client_loop_lag_p50_ms": _p(self.loop_lag_ms, 50), "client_loop_lag_p99_ms": _p(self.loop_lag_ms, 99),
                "client_loop_lag_max_ms": max(self.loop_lag_ms, default=float("nan")),
                "client_dispatch_late_p50_ms": _p(self.late_ms, 50),
                "client_dispatch_late_p99_ms": _p(self.late_ms, 99),
                **({"client_refill_wait_p50_ms": _p(self.refill_ms, 50),
                    "client_refill_wait_p99_ms": _p(self.refill_ms, 99)} if self.refill_ms else {}),
                "client_cpu_share_max": max(self.cpu_shares, default=float("nan")),
                "client_cpu_s": self.cpu_s, "client_coordinator_cpu_s": self.coordinator_cpu_s,
                "connections_opened": self.num_connections, "client_clumped_share": self.clumped_share}

    def limits(self) -> list[str]:
        """Each threshold crossed, and by how much; empty when the client kept up."""
        f = self.figures()
        out = []
        # a late loop distorts token times only once it is late by gaps: then a read holds the stream's next tokens
        # together (gaps of 0 and one long gap). A lag shorter than the gaps moves each time a little.
        clumped, lag, lag50 = self.clumped_share, f["client_loop_lag_p99_ms"], f["client_loop_lag_p50_ms"]
        beyond_gaps = lag > LAG_GAPS * self.itl_p50_ms   # False where the run has no gap (NaN)
        typical = lag50 > TTFT_TOLERANCE_MS
        if lag > LOOP_LAG_P99_MS and (not clumped <= CLUMPED_SHARE or beyond_gaps or typical):
            why = []
            if self.num_tokens and clumped > CLUMPED_SHARE:
                why.append(f"{100 * clumped:.1f}% of tokens were read together with the one before them "
                           f"(> {100 * CLUMPED_SHARE:g}%)")
            if beyond_gaps:
                why.append(f"the lag is longer than {LAG_GAPS:g} gaps between tokens (ITL p50 {self.itl_p50_ms:.2f} "
                           "ms): ITL p99 is stretched")
            if typical:
                why.append(f"its p50 {lag50:.2f} ms is longer than {TTFT_TOLERANCE_MS:g} ms: TTFT is late by about "
                           "that")
            out.append(f"event-loop lag p99 {lag:.2f} ms > {LOOP_LAG_P99_MS:g} ms "
                       f"(max {f['client_loop_lag_max_ms']:.1f} ms): token times are late by about that much"
                       + "".join(f", and {w}" for w in why))
        late = f["client_dispatch_late_p99_ms"]
        own = lag if lag == lag else 0.0   # the loop's own wake-up lag (none measured: 0)
        if late > DISPATCH_LATE_P99_MS + own:
            out.append(f"requests went out {late:.1f} ms after they could have (p99), {late - own:.1f} ms beyond "
                       f"the event loop's own lag (p99 {own:.2f} ms) > {DISPATCH_LATE_P99_MS:g} ms: the load offered "
                       "is lighter than planned")
        if f["client_cpu_share_max"] > CPU_SHARE:
            busy = sum(share > CPU_SHARE for share in self.cpu_shares)
            out.append(f"{busy} of {self.num_workers} client worker{'s' * (self.num_workers > 1)} used "
                       f"{100 * f['client_cpu_share_max']:.0f}% of a core (> {100 * CPU_SHARE:.0f}%)")
        return out


def client_report(load: ClientLoad) -> tuple[dict[str, float], dict, list[str]]:
    """Summary figures, run.json's "client" entry, and the warning lines."""
    limits = load.limits()
    figures = load.figures()
    figures["client_limited"] = 1 if limits else 0
    info = {"limited": bool(limits), "reasons": limits,
            "thresholds": {"loop_lag_p99_ms": LOOP_LAG_P99_MS, "clumped_share": CLUMPED_SHARE,
                           "loop_lag_gaps": LAG_GAPS, "ttft_tolerance_ms": TTFT_TOLERANCE_MS,
                           "dispatch_late_beyond_loop_lag_p99_ms": DISPATCH_LATE_P99_MS, "cpu_share": CPU_SHARE},
            **{k: v for k, v in figures.items() if k != "client_limited"}}
    lines = []
    if limits:
        lines.append("CLIENT-LIMITED: this machine could not keep up, so latencies are overstated and token gaps "
                     "clumped: " + "; ".join(limits) + " (more --client-workers, or a less loaded client machine)")
    return figures, info, lines


def token_count_lines(num_requests: int, prompt_estimates: int, output_estimates: int) -> list[str]:
    lines = []
    if prompt_estimates:
        lines.append(f"{prompt_estimates} of {num_requests} prompt lengths are estimates (no usage from the server "
                     "and no tokenizer for its model: give --tokenizer)")
    if output_estimates:
        lines.append(f"{output_estimates} of {num_requests} output lengths are estimates (no usage from the server; "
                     "counted as streamed events)")
    return lines


def early_stop_line(num_early: int, num_finished: int, reasons: dict[str, int]) -> list[str]:
    if not num_early:
        return []
    why = ", ".join(f"finish_reason {r}" for r in sorted(reasons)) or "finish_reason stop"
    return [f"{num_early} of {num_finished} requests stopped early ({why}): TPOT and ITL cover fewer tokens than "
            "planned (--ignore-eos asks for full lengths; llama.cpp's Python server honours only min_tokens)"]


def client_line(info: RunInfo) -> str:
    """One line on the client itself, for the console: workers, CPU, loop lag, connections, tokenizer."""
    remote = info.remote or RemoteInfo()
    c = remote.client or {}
    lag = c.get("client_loop_lag_p99_ms", float("nan"))
    share = c.get("client_cpu_share_max", float("nan"))
    return (f"client   {c.get('client_workers', '?')} worker(s), busiest at {100 * share:.0f}% of a core, "
            f"event-loop lag p99 {lag:.2f} ms, {c.get('connections_opened', '?')} connection(s) opened; "
            + (f"closed loop's refill wait p99 {refill:.1f} ms (its round trip, not flagged); "
               if (refill := c.get("client_refill_wait_p99_ms")) is not None else "")
            + f"prompt lengths by {remote.tokenizer or '?'}" + ("  [CLIENT-LIMITED]" if c.get("limited") else ""))
