"""The tour's step on speculative decoding: the same input-grounded request decoded plainly, then with n-gram
guesses (K=4) verified in one step each; what a verification step costs against a plain decode step, and the
tokens each emitted. Computed from the two runs' records. Qt-free."""
from __future__ import annotations

import math

from backend.records import Phase, RunData

from gui.tour.finding import DECODE, GREEN, RED, Curve, Figure, Finding, Mark, Outcome, faster, median, ms

VERIFY = "#d63384"   # the window's verification colour (gui/views/plot_style.VERIFY_COLOR), without importing Qt
TOKEN_TICKS = [(float(n), str(n)) for n in (1, 2, 4, 8)]


def _decoding(data: RunData):
    """Steps that computed no prompt token: (plain decode steps, verification steps)."""
    steps = [s for s in data.steps if s.phase is Phase.DECODE and s.num_prefill_tokens == 0]
    return [s for s in steps if not s.is_verification], [s for s in steps if s.is_verification]


def _tpot(data: RunData) -> float:
    return median(r.tpot_ms for r in data.requests if r.tpot_ms is not None)


def speculation(outcomes: list[Outcome]) -> Finding:
    """(10) one request decoded plainly and with n-gram guesses: a verification's price and yield."""
    plain_run, spec_run = outcomes[0].data, outcomes[-1].data
    plain, _ = _decoding(plain_run)
    own_plain, verify = _decoding(spec_run)
    decode_ms = median(s.duration_ms for s in plain + own_plain)
    verify_ms = median(s.duration_ms for s in verify)
    tokens = median(s.num_tokens for s in verify)
    emitted = sum(s.num_accepted_tokens + s.num_decode_requests for s in verify)
    per_verification = emitted / len(verify) if verify else math.nan
    output = sum(r.output_tokens for r in spec_run.requests)
    fig = Figure("A verification step against a decode step: time by the tokens computed", "tokens computed in the step",
                 "step time (ms)", log_x=True, x_ticks=TOKEN_TICKS)
    fig.curves.append(Curve("plain decode steps (1 token)", [s.num_tokens for s in plain + own_plain],
                            [s.duration_ms for s in plain + own_plain], DECODE, line=False))
    fig.curves.append(Curve("verification steps (1 + 4 guesses)", [s.num_tokens for s in verify],
                            [s.duration_ms for s in verify], VERIFY, line=False, symbol="d"))
    if not math.isnan(decode_ms):
        fig.curves.append(Curve(f"one decode step: {ms(decode_ms)}", [1, 8], [decode_ms] * 2, GREEN, dash=True,
                                symbol=None))
    if verify:
        fig.marks.append(Mark("point", f"{tokens:g} tokens: {verify_ms / decode_ms:.1f}x a decode step, "
                                       f"{per_verification:.1f} tokens emitted", tokens, y=verify_ms, color=RED))
    sentence = (
        f"A plain decode step took {ms(decode_ms)} for one token. With n-gram guesses, {len(verify)} verification "
        f"steps each computed {tokens:g} tokens (the last token and 4 guesses) in {ms(verify_ms)}, "
        f"{verify_ms / decode_ms:.1f}x a decode step, and emitted {per_verification:.1f} tokens each (the guesses "
        f"kept and the model's own next one): {emitted} of the {output} output tokens. "
        f"TPOT went from {ms(_tpot(plain_run))} to {ms(_tpot(spec_run))} ({faster(_tpot(plain_run), _tpot(spec_run))}). "
        + ("A verification cost about one decode step: the step is bound by reading the weights, which it does once "
           "for all its tokens." if verify_ms < 1.3 * decode_ms else
           "A verification cost more than one decode step here: on this CPU the extra tokens' arithmetic shows "
           "(the Speculation view puts it beside the roofline's prediction, where the crossover is)."))
    rows = [[name, s.step, "verification" if s.is_verification else "decode", s.num_tokens, s.num_proposed_tokens,
             s.num_accepted_tokens, round(s.duration_ms, 3)]
            for name, data in (("plain", plain_run), ("ngram K=4", spec_run)) for s in sorted(
                _decoding(data)[0] + _decoding(data)[1], key=lambda s: s.step)]
    header = ["run", "step", "kind", "tokens", "guesses", "kept", "duration_ms"]
    return Finding(sentence, fig, header, rows)
