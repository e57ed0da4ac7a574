"""The fake server's Prometheus `/metrics`, as vLLM, SGLang or TGI name it, from its real state.

The gauges are read from the streams in flight when the page is asked for: running (admitted to
the batch), waiting (for a batch slot, `Behaviour.max_batch`), and the KV cache's usage (the
prompt and the tokens written so far of every admitted stream, over `Behaviour.kv_tokens`). The
histograms observe each request as the engine loop serves it: queue (read to admitted), prefill
(admitted to first token), decode (first to last token), TTFT, every inter-token gap (TGI: each
request's mean gap), end to end;
TGI's forward-pass histograms observe each engine step, by method.
"""
from __future__ import annotations

import bisect

BOUNDS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
LABELS = 'model_name="fake"'

# quantity -> (metric name, extra labels), per engine; the gauges first
NAMES = {
    "vllm": {"running": "vllm:num_requests_running", "waiting": "vllm:num_requests_waiting",
             "kv": "vllm:kv_cache_usage_perc", "queue": "vllm:request_queue_time_seconds",
             "prefill": "vllm:request_prefill_time_seconds", "decode": "vllm:request_decode_time_seconds",
             "ttft": "vllm:time_to_first_token_seconds", "itl": "vllm:inter_token_latency_seconds",
             "e2e": "vllm:e2e_request_latency_seconds"},
    "sglang": {"running": "sglang:num_running_reqs", "waiting": "sglang:num_queue_reqs",
               "kv": "sglang:token_usage", "queue": "sglang:queue_time_seconds",
               "ttft": "sglang:time_to_first_token_seconds", "itl": "sglang:inter_token_latency_seconds",
               "e2e": "sglang:e2e_request_latency_seconds"},
    "tgi": {"running": "tgi_batch_current_size", "waiting": "tgi_queue_size",
            "queue": "tgi_request_queue_duration", "step_prefill": "tgi_batch_forward_duration",
            "step_decode": "tgi_batch_forward_duration", "tpot": "tgi_request_mean_time_per_token_duration",
            "e2e": "tgi_request_duration"},
}


class _Hist:
    def __init__(self):
        self.counts = [0] * (len(BOUNDS) + 1)
        self.total = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect.bisect_left(BOUNDS, seconds)] += 1
        self.total += seconds

    def lines(self, name: str, labels: str) -> list[str]:
        out, cum = [], 0
        for le, n in zip([*(repr(b) for b in BOUNDS), "+Inf"], self.counts):
            cum += n
            out.append(f'{name}_bucket{{{labels},le="{le}"}} {float(cum)}')
        out += [f"{name}_sum{{{labels}}} {self.total!r}", f"{name}_count{{{labels}}} {float(cum)}"]
        return out


class FakeMetrics:
    def __init__(self, behaviour):
        self.behaviour = behaviour
        self.hists = {q: _Hist() for q in ("queue", "prefill", "decode", "ttft", "itl", "tpot", "e2e", "step_prefill",
                                           "step_decode")}
        self._last_step: float | None = None
        self._firsts = 0   # first tokens written in the current step: it was a prefill step

    # ---- the engine loop's observations ---------------------------------------------------------

    def step(self, streams, now: float) -> None:
        if self._last_step is not None and streams:
            self.hists["step_prefill" if self._firsts else "step_decode"].observe(now - self._last_step)
        self._last_step, self._firsts = now, 0

    def token(self, s, now: float) -> None:
        writes = s.log.writes_s
        if len(writes) == 1:
            self._firsts += 1
            self.hists["ttft"].observe(now - s.log.read_s)
            self.hists["queue"].observe(s.admitted_s - s.log.read_s)
            self.hists["prefill"].observe(now - s.admitted_s)
        else:
            self.hists["itl"].observe(writes[-1] - writes[-2])

    def finished(self, s, now: float) -> None:
        writes = s.log.writes_s
        self.hists["decode"].observe(now - writes[0])
        if len(writes) > 1:   # TGI's per-request mean gap
            self.hists["tpot"].observe((writes[-1] - writes[0]) / (len(writes) - 1))
        self.hists["e2e"].observe(now - s.log.read_s)

    # ---- the page -------------------------------------------------------------------------------

    def page(self, streams) -> str:
        names = NAMES[self.behaviour.metrics]
        running = [s for s in streams if s.admitted_s is not None]
        held = sum(s.prompt_tokens + s.sent for s in running)
        gauges = {"running": float(len(running)), "waiting": float(len(streams) - len(running)),
                  "kv": min(1.0, held / self.behaviour.kv_tokens)}
        lines = ["# HELP fake_build_info the fake OpenAI server", "# TYPE fake_build_info gauge",
                 f'fake_build_info{{version="0",note="a \\"quoted\\" label, with a comma"}} 1.0']
        for key, name in names.items():
            if key in gauges:
                lines += [f"# TYPE {name} gauge", f"{name}{{{LABELS}}} {gauges[key]!r}"]
            else:
                labels = LABELS + (f',method="{key[5:]}"' if key.startswith("step_") else "")
                lines += [f"# TYPE {name} histogram"] + self.hists[key].lines(name, labels)
        return "\n".join(lines) + "\n"
