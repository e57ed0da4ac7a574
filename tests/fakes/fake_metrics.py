"""The fake server's Prometheus `/metrics`, as vLLM, SGLang, TGI or llama.cpp name it, from its real state.

The gauges are read from the streams in flight when the page is asked for: running (admitted to
the batch), waiting (for a batch slot, `Behaviour.max_batch`), and the KV cache's usage (the
prompt and the tokens written so far of every admitted stream, over `Behaviour.kv_tokens`). The
histograms observe each request as the engine loop serves it: queue (read to admitted), prefill
(admitted to first token), decode (first to last token), TTFT, every inter-token gap (TGI: each
request's mean gap), end to end;
TGI's forward-pass histograms observe each engine step, by method.

The prefix cache's counters count prompt tokens as each engine does: vLLM the tokens it looked up
and found when it admits a request (its counters, per engine core, are published from the start,
under their names since v0.10 and their deprecated gpu_ names alike); SGLang each finished
request's prompt and cached tokens (a labelled counter shows once first incremented, so
cached_tokens_total is absent until the first hit) and a gauge of the last prefill's hit rate;
llama.cpp only the prompt tokens it computed (it publishes no cache figure).

Speculative decoding (`Behaviour.spec_tokens`): each decode step of a stream is a verification of K
guesses that kept all but one of the tokens it wrote; vLLM counts verifications, guesses, kept guesses
and kept guesses per position (label `position`, published from the start); SGLang a gauge of the mean
tokens a verification emitted.
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
    "llamacpp": {"running": "llamacpp:requests_processing", "waiting": "llamacpp:requests_deferred"},
}
# counter -> the names it is published under, per engine (values are prompt tokens, or generated ones)
COUNTER_NAMES = {
    "vllm": {"queries": ("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"),
             "hits": ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total")},
    "sglang": {"queries": ("sglang:prompt_tokens_total",), "hits": ("sglang:cached_tokens_total",)},
    "tgi": {},
    "llamacpp": {"computed": ("llamacpp:prompt_tokens_total",), "predicted": ("llamacpp:tokens_predicted_total",)},
}
PUBLISHED_AT_START = ("vllm", "llamacpp")   # their counters are made per engine at start; SGLang's at first use


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
        names = COUNTER_NAMES.get(behaviour.metrics, {})
        self.counts: dict[str, float] = {k: 0.0 for k in names} if behaviour.metrics in PUBLISHED_AT_START else {}
        self.hit_rate: float | None = None   # SGLang's gauge: the last prefill's cached share of its prompt
        k = behaviour.spec_tokens
        self.spec = {"drafts": 0.0, "draft_tokens": 0.0, "accepted": 0.0} if k else {}
        self.spec_pos = [0.0] * k
        self.spec_emitted = 0.0   # SGLang's gauge: tokens the verifications emitted, over spec["drafts"]

    def verified(self, k: int, kept: int) -> None:
        """One verification of k guesses that kept `kept` of them."""
        self.spec["drafts"] += 1
        self.spec["draft_tokens"] += k
        self.spec["accepted"] += kept
        for j in range(kept):
            self.spec_pos[j] += 1
        self.spec_emitted += kept + 1

    def _count(self, key: str, n: float) -> None:
        if key in COUNTER_NAMES.get(self.behaviour.metrics, {}):
            self.counts[key] = self.counts.get(key, 0.0) + n

    # ---- the engine loop's observations ---------------------------------------------------------

    def step(self, streams, now: float) -> None:
        if self._last_step is not None and streams:
            self.hists["step_prefill" if self._firsts else "step_decode"].observe(now - self._last_step)
        self._last_step, self._firsts = now, 0

    def admitted(self, prompt_tokens: int, cached: int) -> None:
        """A request read, its prompt looked up in the prefix cache (vLLM counts here; llama.cpp computes
        the part it did not find)."""
        if self.behaviour.metrics == "vllm":
            self._count("queries", prompt_tokens)
            self._count("hits", cached)
        self._count("computed", prompt_tokens - cached)

    def token(self, s, now: float) -> None:
        writes = s.log.writes_s
        if len(writes) == 1:
            if s.prompt_tokens:
                self.hit_rate = s.cached / s.prompt_tokens
            self._firsts += 1
            self.hists["ttft"].observe(now - s.log.read_s)
            self.hists["queue"].observe(s.admitted_s - s.log.read_s)
            self.hists["prefill"].observe(now - s.admitted_s)
        else:
            self.hists["itl"].observe(writes[-1] - writes[-2])

    def finished(self, s, now: float) -> None:
        if self.behaviour.metrics == "sglang":
            self._count("queries", s.prompt_tokens)
            if s.cached > 0:   # as SGLang: cached_tokens_total is only touched by a hit
                self._count("hits", s.cached)
        self._count("predicted", s.sent)
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
        if self.behaviour.metrics == "sglang" and self.hit_rate is not None:
            names = {**names, "cache_hit_rate": "sglang:cache_hit_rate"}
            gauges["cache_hit_rate"] = self.hit_rate
        lines = ["# HELP fake_build_info the fake OpenAI server", "# TYPE fake_build_info gauge",
                 f'fake_build_info{{version="0",note="a \\"quoted\\" label, with a comma"}} 1.0']
        for key, name in names.items():
            if key in gauges:
                lines += [f"# TYPE {name} gauge", f"{name}{{{LABELS}}} {gauges[key]!r}"]
            else:
                labels = LABELS + (f',method="{key[5:]}"' if key.startswith("step_") else "")
                lines += [f"# TYPE {name} histogram"] + self.hists[key].lines(name, labels)
        for key, value in self.counts.items():
            for name in COUNTER_NAMES[self.behaviour.metrics][key]:
                labels = LABELS + (',engine="0"' if self.behaviour.metrics == "vllm" else "")
                lines += [f"# TYPE {name[:-len('_total')]} counter", f"{name}{{{labels}}} {value!r}"]
        lines += self._spec_lines()
        return "\n".join(lines) + "\n"

    def _spec_lines(self) -> list[str]:
        if not self.spec:
            return []
        if self.behaviour.metrics == "vllm":
            labels = LABELS + ',engine="0"'
            out = []
            for key, name in (("drafts", "vllm:spec_decode_num_drafts"), ("draft_tokens",
                              "vllm:spec_decode_num_draft_tokens"), ("accepted", "vllm:spec_decode_num_accepted_tokens")):
                out += [f"# TYPE {name} counter", f"{name}_total{{{labels}}} {self.spec[key]!r}"]
            name = "vllm:spec_decode_num_accepted_tokens_per_pos"
            out.append(f"# TYPE {name} counter")
            out += [f'{name}_total{{{labels},position="{j}"}} {v!r}' for j, v in enumerate(self.spec_pos)]
            return out
        if self.behaviour.metrics == "sglang" and self.spec["drafts"]:
            return ["# TYPE sglang:spec_accept_length gauge",
                    f"sglang:spec_accept_length{{{LABELS}}} {self.spec_emitted / self.spec['drafts']!r}"]
        return []
