"""Each tour step's finding, computed from the records of its runs on this machine: the figure
with what to look at placed on the measured data, the sentence and the table. Qt-free."""
from __future__ import annotations

import math

from backend.records import Phase, RequestStatus, StepRecord

from gui.tour.finding import (DECODE, GREY, MIXED, PHASE, PREFILL, RED, Curve, Figure, Finding, Mark, Outcome,
                              Rects, faster, median, ms, times)

TOKEN_TICKS = [(math.log10(n), str(n)) for n in (1, 10, 100, 1000, 10000)]
BASE = math.log10(0.5)   # bars start half a token up, so a one-token decode step has height on the log axis


def _height(tokens: int) -> float:
    return math.log10(max(tokens, 1))


def strip(steps: list[StepRecord], title: str) -> Figure:
    """The engine-step strip, as the window draws it: one bar a step, its width its time, its
    height its tokens (log), coloured by phase."""
    fig = Figure(title, "time since the run started (ms)", "tokens in the step", y_ticks=TOKEN_TICKS)
    for phase in Phase:
        own = [s for s in steps if s.phase is phase]
        if own:
            fig.rects.append(Rects(phase.value, [s.start_ms for s in own], [s.start_ms + s.duration_ms for s in own],
                                   [BASE] * len(own), [_height(s.num_tokens) for s in own], PHASE[phase.value]))
    return fig


def _finished(outcome: Outcome):
    return [r for r in outcome.data.requests if r.status is RequestStatus.FINISHED]


def _phase(steps, phase: Phase) -> list[StepRecord]:
    return [s for s in steps if s.phase is phase]


def one_request(outcomes: list[Outcome]) -> Finding:
    """(1) prefill's one pass against decode's many steps; TTFT and TPOT; where the time goes."""
    out = outcomes[0]
    steps = sorted(out.data.steps, key=lambda s: s.start_ms)
    prefill, decode = _phase(steps, Phase.PREFILL), _phase(steps, Phase.DECODE)
    prompt = sum(s.num_prefill_tokens for s in prefill)
    p_ms = sum(s.duration_ms for s in prefill)
    d_ms = median(s.duration_ms for s in decode)
    decode_total = sum(s.duration_ms for s in decode)
    total = p_ms + decode_total
    per_prompt_token = p_ms / prompt if prompt else math.nan
    fig = strip(steps, "One request: the engine's steps")
    if prefill:
        fig.marks.append(Mark("region", f"prefill: {prompt} tokens in one pass, {ms(p_ms)} (TTFT)",
                              prefill[0].start_ms, prefill[-1].start_ms + prefill[-1].duration_ms, color=PREFILL))
    if decode:
        fig.marks.append(Mark("region", f"decode: {len(decode)} steps of one token, {ms(d_ms)} each (TPOT)",
                              decode[0].start_ms, decode[-1].start_ms + decode[-1].duration_ms, color=DECODE))
    sentence = (f"Prefill took {ms(p_ms)} for {prompt} prompt tokens ({ms(per_prompt_token)} a token); each decode "
                f"step took {ms(d_ms)} for a single token, so a generated token cost "
                f"{times(per_prompt_token, d_ms)} a prompt token, and the {len(decode)} decode steps were "
                f"{decode_total / total:.0%} of the request's {ms(total)}." if total else "No steps were recorded.")
    rows = [[s.step, s.phase.value, s.num_tokens, round(s.start_ms, 3), round(s.duration_ms, 3)] for s in steps]
    return Finding(sentence, fig, ["step", "phase", "tokens", "start_ms", "duration_ms"], rows)


def prompt_lengths(outcomes: list[Outcome]) -> Finding:
    """(2) one request at each prompt length: its prefill step, and its median decode step."""
    rows = []
    for out in outcomes:
        prefill, decode = _phase(out.data.steps, Phase.PREFILL), _phase(out.data.steps, Phase.DECODE)
        tokens = sum(s.num_prefill_tokens for s in prefill)
        rows.append([tokens, sum(s.duration_ms for s in prefill), median(s.duration_ms for s in decode)])
    rows.sort()
    xs = [r[0] for r in rows]
    fig = Figure("Prefill and decode against the prompt's length", "prompt tokens", "ms (log scale)",
                 log_x=True, log_y=True,
                 curves=[Curve("prefill (the whole prompt, one step)", xs, [r[1] for r in rows], PREFILL),
                         Curve("decode (one token, median step)", xs, [r[2] for r in rows], DECODE)])
    if len(rows) < 2:
        return Finding("Not enough prompt lengths ran to compare.", fig, [], [])
    (a, pa, da), (b, pb, db) = rows[0], rows[-1]
    fig.marks += [Mark("point", f"prefill {times(pa, pb)}", b, y=pb, color=PREFILL),
                  Mark("point", f"decode {times(da, db)}", b, y=db, color=DECODE)]
    sentence = (f"From {a} to {b} prompt tokens ({b / a:.0f}x), prefill went from {ms(pa)} to {ms(pb)} "
                f"({times(pa, pb)}) while a decode step went from {ms(da)} to {ms(db)} ({times(da, db)}): "
                f"every decode step reads the same weights whatever the prompt; only its attention grows with it.")
    return Finding(sentence, fig, ["prompt_tokens", "prefill_ms", "decode_step_ms"],
                   [[x, round(p, 3), round(d, 3)] for x, p, d in rows])


def precisions(outcomes: list[Outcome]) -> Finding:
    """(3) a precision sweep: weight bytes, TPOT and TTFT, each against the first precision's."""
    points = outcomes[0].precision_points
    fig = Figure("Fewer bytes per weight: decode follows, prefill does not", "weight precision (bits a weight)",
                 "relative to the first precision", log_y=True,
                 x_ticks=[(i, f"{p.dtype} ({p.weight_bits:.1f})") for i, p in enumerate(points)])
    if not points:
        return Finding("The sweep measured no precision.", fig, [], [])
    base = points[0]
    xs = list(range(len(points)))
    fig.curves += [Curve("weight bytes", xs, [p.weight_bytes / base.weight_bytes for p in points], GREY, dash=True),
                   Curve("TPOT (a decode step)", xs, [p.tpot_ms / base.tpot_ms for p in points], DECODE),
                   Curve("TTFT (prefill)", xs, [p.ttft_ms / base.ttft_ms for p in points], PREFILL)]
    last = points[-1]
    fig.marks += [Mark("point", f"decode {faster(base.tpot_ms, last.tpot_ms)}", xs[-1],
                       y=last.tpot_ms / base.tpot_ms, color=DECODE),
                  Mark("point", f"prefill {faster(base.ttft_ms, last.ttft_ms)}", xs[-1],
                       y=last.ttft_ms / base.ttft_ms, color=PREFILL)]
    sentence = (f"{last.dtype} stores a weight in {last.weight_bits:.1f} bits against {base.dtype}'s "
                f"{base.weight_bits:.0f}: {times(last.weight_bytes, base.weight_bytes)} fewer bytes. A decode step "
                f"went from {ms(base.tpot_ms)} to {ms(last.tpot_ms)} ({faster(base.tpot_ms, last.tpot_ms)}); the "
                f"prefill went from {ms(base.ttft_ms)} to {ms(last.ttft_ms)} ({faster(base.ttft_ms, last.ttft_ms)}).")
    rows = [[p.dtype, p.weight_bytes, round(p.weight_bits, 2), round(p.ttft_ms, 3), round(p.tpot_ms, 3)]
            for p in points]
    return Finding(sentence, fig, ["dtype", "weight_bytes", "bits", "ttft_ms", "tpot_ms"], rows)


def _ttfts(out: Outcome) -> dict[int, float]:
    return {r.request_id: r.ttft_ms for r in _finished(out) if r.ttft_ms is not None}


def _last_finish(out: Outcome) -> float:
    return max((r.finish_ms for r in _finished(out) if r.finish_ms is not None), default=math.nan)


def static_continuous(outcomes: list[Outcome]) -> Finding:
    """(5) the same burst under static and continuous batching: each request's TTFT."""
    (a_name, a), (b_name, b) = ((o.name, _ttfts(o)) for o in outcomes[:2])
    ids = sorted(set(a) & set(b))
    fig = Figure("The same burst of requests: time to first token", "request (in arrival order)",
                 "TTFT (ms)", x_ticks=[(i, str(i + 1)) for i in range(len(ids))])
    for offset, name, ttft, color in ((-0.2, a_name, a, GREY), (0.2, b_name, b, DECODE)):
        fig.rects.append(Rects(name, [i + offset - 0.18 for i in range(len(ids))],
                               [i + offset + 0.18 for i in range(len(ids))], [0.0] * len(ids),
                               [ttft[k] for k in ids], color))
    if not ids:
        return Finding("No request finished under both policies.", fig, [], [])
    k = max(range(len(ids)), key=lambda i: a[ids[i]] - b[ids[i]])
    fig.marks.append(Mark("point", f"request {k + 1}: {ms(a[ids[k]])} → {ms(b[ids[k]])}", k - 0.2,
                          y=a[ids[k]], color=RED))
    ta, tb = (_last_finish(o) / 1000 for o in outcomes[:2])
    mean_a, mean_b = (sum(t[i] for i in ids) / len(ids) for t in (a, b))
    sentence = (f"{a_name.capitalize()} batching: mean TTFT {ms(mean_a)}, the last request done at {ta:.1f} s; "
                f"{b_name}: mean TTFT {ms(mean_b)}, done at {tb:.1f} s. Request {k + 1} waited "
                f"{ms(a[ids[k]])} for its first token under {a_name} batching (a slot frees only when the whole "
                f"batch ends) and {ms(b[ids[k]])} under {b_name} (a slot frees when its request ends).")
    rows = [[i + 1, round(a[k2], 3), round(b[k2], 3)] for i, k2 in enumerate(ids)]
    return Finding(sentence, fig, ["request", f"{a_name}_ttft_ms", f"{b_name}_ttft_ms"], rows)


def _gaps(out: Outcome) -> tuple[list[float], list[float]]:
    """Every wait between two tokens of one request: (time of the later token in s, gap in ms)."""
    by_request: dict[int, list[float]] = {}
    for t in out.data.tokens:
        by_request.setdefault(t.request_id, []).append(t.time_ms)
    xs, ys = [], []
    for times_ms in by_request.values():
        times_ms.sort()
        for before, after in zip(times_ms, times_ms[1:]):
            xs.append(after / 1000)
            ys.append(after - before)
    return xs, ys


def chunked(outcomes: list[Outcome]) -> Finding:
    """(6) the same arrivals under continuous and chunked prefill: the pauses between tokens."""
    fig = Figure("Pauses between two tokens of a running request", "time (s)", "gap between tokens (ms)",
                 log_y=True)
    stats = []
    for out, color in zip(outcomes[:2], (PREFILL, MIXED)):
        xs, ys = _gaps(out)
        fig.curves.append(Curve(out.name, xs, ys, color, line=False))
        stats.append((out.name, max(ys, default=math.nan), median(ys), xs, ys))
    (a_name, a_max, a_med, axs, ays), (b_name, b_max, b_med, _, _) = stats
    if ays:
        i = max(range(len(ays)), key=ays.__getitem__)
        fig.marks.append(Mark("point", f"a prompt's prefill: decodes waited {ms(a_max)}", axs[i], y=ays[i]))
    chunk = outcomes[1].data.config.get("engine", {}).get("chunk_tokens", "?")
    sentence = (f"Under {a_name} batching the longest pause between two tokens of a running request was "
                f"{ms(a_max)} (a whole prompt's prefill step); with chunked prefill ({chunk} tokens a step) it was "
                f"{ms(b_max)}. The median gap went from {ms(a_med)} to {ms(b_med)}: each step now carries a slice "
                f"of a prompt beside the decodes.")
    rows = [[o.name, round(mx, 3), round(md, 3)] for o, (_, mx, md, _, _) in zip(outcomes, stats)]
    return Finding(sentence, fig, ["policy", "max_gap_ms", "median_gap_ms"], rows)


def _workers(out: Outcome) -> dict[str, list[tuple[float, float, int, str]]]:
    """Each worker's steps (start_ms, end_ms, tokens, phase): as the window held them, else from the records."""
    if out.worker_steps:
        return out.worker_steps
    rows: dict[str, list] = {}
    for s in out.data.steps:
        if s.worker:
            rows.setdefault(s.worker, []).append((s.start_ms, s.start_ms + s.duration_ms, s.num_tokens, s.phase.value))
    return rows


def disaggregated(outcomes: list[Outcome]) -> Finding:
    """(7) prefill and decode in separate engines: each worker's steps, and the KV handed between them."""
    out = outcomes[0]
    workers = _workers(out)
    names = sorted(workers, key=lambda w: (not w.startswith("decode"), w))   # decode at the bottom
    fig = Figure("Two engines: one prefills, one decodes", "time since the run started (ms)", "engine",
                 y_ticks=[(i + 0.5, name.replace("-", " ")) for i, name in enumerate(names)])
    for i, name in enumerate(names):
        for phase in Phase:
            own = [r for r in workers[name] if r[3] == phase.value]
            if own:
                fig.rects.append(Rects(phase.value, [r[0] for r in own], [r[1] for r in own],
                                       [i + 0.1] * len(own), [i + 0.9] * len(own), PHASE[phase.value]))
    prefills = [r for name in names if name.startswith("prefill") for r in workers[name]]
    decodes = [r for name in names if name.startswith("decode") for r in workers[name]]
    done = _finished(out)
    transfer = median(r.kv_transfer_ms for r in done)
    kv_kb = median(r.kv_bytes / 1024 for r in done if r.kv_bytes is not None)
    prompts_in_decode = sum(1 for r in decodes if r[3] != Phase.DECODE.value)
    longest_prefill = max((r[1] - r[0] for r in prefills), default=math.nan)
    longest_decode = max((r[1] - r[0] for r in decodes), default=math.nan)
    if prefills:
        a, b, tokens, _ = max(prefills, key=lambda r: r[1] - r[0])
        fig.marks.append(Mark("region", f"the longest prompt step ({tokens} tokens, {ms(b - a)}): decoding goes on "
                              f"beside it", a, b))
    sentence = (f"The prefill engine ran {len(prefills)} prompt steps, the longest {ms(longest_prefill)}; the decode "
                f"engine's {len(decodes)} steps held no prompt" + ("" if not prompts_in_decode else
                                                                   f" but in {prompts_in_decode} of them") +
                f", and its longest took {ms(longest_decode)}. Each prompt's KV cache ({kv_kb:,.0f} KB, median) took "
                f"{ms(transfer)} to hand over.")
    rows = [[r.request_id, r.prompt_tokens, r.ttft_ms, r.prefill_ms, r.kv_transfer_ms, r.kv_bytes, r.tpot_ms]
            for r in done]
    return Finding(sentence, fig, ["request", "prompt_tokens", "ttft_ms", "prefill_ms", "kv_transfer_ms",
                                   "kv_bytes", "tpot_ms"], rows)


def worked_example(outcomes: list[Outcome], seed_row: tuple) -> Finding:
    """(8) the seed's worked example simulated on a datacenter profile: TTFT, TPOT, the decode share."""
    out = outcomes[0]
    steps = sorted(out.data.steps, key=lambda s: s.start_ms)
    request = next(iter(_finished(out)), None)
    profile = out.data.info.profile or out.data.config.get("profile") or "?"
    fig = strip(steps, f"The worked example, SIMULATED on {profile}")
    if request is None or request.ttft_ms is None:
        return Finding("The request did not finish.", fig, [], [])
    total = request.e2e_ms
    decode_ms = total - request.ttft_ms
    fig.marks += [Mark("region", f"TTFT {ms(request.ttft_ms)}", 0.0, request.ttft_ms, color=PREFILL),
                  Mark("region", f"decode: {request.output_tokens - 1} steps of {ms(request.tpot_ms)}, "
                       f"{decode_ms / total:.0%} of the time", request.ttft_ms, total, color=DECODE)]
    _, s_ttft, s_tpot, s_total, s_share = seed_row
    sentence = (f"Simulated: TTFT {ms(request.ttft_ms)}, TPOT {ms(request.tpot_ms)}, {total:,.0f} ms in all, "
                f"{decode_ms / total:.0%} of it decoding. The seed worked it out by hand as about {s_ttft:.0f} ms, "
                f"{s_tpot:.0f} ms, {s_total:,.0f} ms and {s_share:.0%}.")
    rows = [["simulated", round(request.ttft_ms, 3), round(request.tpot_ms, 3), round(total, 3),
             round(decode_ms / total, 4)], ["seed (by hand)", s_ttft, s_tpot, s_total, s_share]]
    return Finding(sentence, fig, ["", "ttft_ms", "tpot_ms", "total_ms", "decode_share"], rows)
