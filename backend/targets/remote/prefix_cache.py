"""A remote run's prefix-cache hit rate, as the server counts it and as its answers report it.

The server's view is its /metrics counters over the run (backend.targets.remote.server_log): vLLM's
prefix_cache_hits / prefix_cache_queries, SGLang's cached_tokens / prompt_tokens, in prompt tokens,
for every request the server served in that time (other clients' too). The client's view is each
answer's own count, kept in the request's `cached_prompt_tokens`: OpenAI's
usage.prompt_tokens_details.cached_tokens (vLLM with --enable-prompt-tokens-details, SGLang with
--enable-cache-report, recent llama.cpp) or llama.cpp's timings.cache_n; its rate is the cached over
the prompt tokens of the finished requests that reported one. llama.cpp's /metrics counts no cache,
so against llama.cpp only the client's view exists. The two differ when other clients share the
server, or when a request fails after the server looked its prompt up (vLLM counts at admission,
SGLang when a request finishes; the client counts finished answers only).
"""
from __future__ import annotations

from backend.records import RequestRecord, RequestStatus
from backend.summary import Summary


def client_figures(requests: list[RequestRecord]) -> dict[str, float]:
    """The summary's client_* prefix figures ({} when no answer reported its cached tokens)."""
    reported = [r for r in requests if r.status is RequestStatus.FINISHED and r.cached_prompt_tokens is not None]
    if not reported:
        return {}
    cached = sum(r.cached_prompt_tokens for r in reported)
    prompt = sum(r.prompt_tokens for r in reported)
    out = {"client_cached_requests": len(reported), "client_cached_prompt_tokens": cached,
           "client_reported_prompt_tokens": prompt}
    if prompt > 0:
        out["client_prefix_hit_rate"] = cached / prompt
    return out


def prefix_line(summary: Summary, engine: str | None) -> str | None:
    """One console line: the server's prefix hit rate beside the client's, each saying where it comes from;
    None when neither side counted one."""
    s = summary
    has_server = s.server_prefix_queries is not None or s.server_cache_hit_rate_mean is not None
    if not has_server and s.client_cached_requests is None and s.prefix_ideal_hit_rate is None:
        return None
    parts = []
    if s.server_prefix_queries is not None:
        parts.append(f"server /metrics ({engine or '?'}, its counters over the run): "
                     f"{_rate(s.server_prefix_hits, s.server_prefix_queries)} of prompt tokens hit its prefix cache")
    if s.server_cache_hit_rate_mean is not None:
        parts.append(f"its cache_hit_rate gauge (the last prefill batch's), mean of the readings "
                     f"{100.0 * s.server_cache_hit_rate_mean:.1f}%")
    if not has_server:
        parts.append("server: no /metrics" if engine is None else
                     f"server /metrics ({engine}): no prefix-cache counters"
                     + (" (llama.cpp publishes none)" if engine == "llamacpp" else ""))
    if s.client_cached_requests is not None:
        parts.append(f"client (cached tokens its answers reported, {s.client_cached_requests} of "
                     f"{s.num_finished or 0} requests): "
                     f"{_rate(s.client_cached_prompt_tokens, s.client_reported_prompt_tokens)}")
    else:
        parts.append("client: the answers did not report cached tokens (vLLM: --enable-prompt-tokens-details, "
                     "SGLang: --enable-cache-report)")
    from backend.results.prefix_ceiling import ceiling_text
    return "prefix   " + "; ".join(parts) + ceiling_text(s)


def _rate(hits: float | None, queries: float | None) -> str:
    hits, queries = hits or 0, queries or 0
    share = f" = {100.0 * hits / queries:.1f}%" if queries > 0 else ""
    return f"{hits:,.0f} / {queries:,.0f}{share}"
