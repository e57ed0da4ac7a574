"""What the C kernels (backend/kernels) gain: the same model step on them and on torch's kernels.

    python -m bench.kernels_ab [--rounds 5] [--readme]

One process, the bundled SmolLM2-135M in float32, two copies of the model: one packed for the
C kernels (panels), one for oneDNN with torch's attention, RMSNorm and SwiGLU (what runs where
the kernels cannot be built, and what ran before them). Each round times, for both copies,
one after the other (alternating which goes first): a 512-token prefill and decode steps at
batch 1, 8 and 32 with 128 tokens cached. Prints medians and the median of the round-by-round
ratios, so load that drifts hits both sides.
"""
from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse  # noqa: E402
import contextlib  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402

from backend.kernels import ops  # noqa: E402
from backend.models import KVCache, make_step_batch  # noqa: E402
from backend.models import packed  # noqa: E402
from backend.loaders.weights import BUNDLED, load_model  # noqa: E402
from bench.common import add_readme_flag, interleaved, measured_line, publish, ratio_median  # noqa: E402

BATCHES = (1, 8, 32)
CACHED = 128
STEPS = 8


@contextlib.contextmanager
def torch_kernels(on: bool = True):
    """While on, every model takes torch's path: packing, attention, RMSNorm, SwiGLU."""
    saved = ops.usable
    if on:
        ops.usable = lambda device, dtype: False
    try:
        yield
    finally:
        ops.usable = saved


def build(use_kernels: bool):
    loaded = load_model(BUNDLED, "cpu", "float32")
    with torch_kernels(not use_kernels):
        assert packed.pack_weights(loaded.model)
    qkv = loaded.model.layers[0].qkv
    assert isinstance(qkv, packed.Panels) if use_kernels else qkv.is_mkldnn
    return loaded


def timings(loaded, use_kernels: bool) -> dict[str, float]:
    """Seconds: a 512-token prefill, and the median decode step at each batch size."""
    model, shape = loaded.model, loaded.shape
    out = {}
    with torch_kernels(not use_kernels), torch.inference_mode():
        cache = KVCache(shape, max(BATCHES), 640, "cpu", torch.float32)
        prompt = [(i * 7919) % shape.vocab_size for i in range(512)]
        start = time.perf_counter()
        model(make_step_batch([(0, 0, prompt)], [], "cpu"), cache)
        out["prefill 512"] = time.perf_counter() - start
        for batch in BATCHES:
            model(make_step_batch([(s, 0, prompt[:CACHED]) for s in range(batch)], [], "cpu"), cache)
            steps = []
            for i in range(STEPS):
                start = time.perf_counter()
                logits = model(make_step_batch([], [(s, CACHED + i, 5) for s in range(batch)], "cpu"), cache)
                logits.argmax(-1).tolist()
                steps.append(time.perf_counter() - start)
            out[f"decode batch {batch}"] = statistics.median(steps[1:])
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    add_readme_flag(parser)
    args = parser.parse_args()
    if not ops.usable(torch.device("cpu"), torch.float32):
        raise SystemExit("the C kernels are not built here: nothing to compare")
    models = {True: build(True), False: build(False)}
    # a warm-up of each (first-call costs stay out), then rounds alternating which goes first
    c_kernels, torch_ones = interleaved(args.rounds, lambda _warm: timings(models[True], True),
                                        lambda _warm: timings(models[False], False))
    lines = [measured_line(f"{torch.get_num_threads()} torch threads"), "",
             f"SmolLM2-135M fp32, {args.rounds} interleaved rounds after a warm-up; decode steps with {CACHED} "
             f"tokens cached, medians of {STEPS - 1}", "",
             "| step | torch's kernels (oneDNN, SDPA) | C kernels | speed-up |", "|---|---|---|---|"]
    for key in c_kernels[0]:
        theirs = [r[key] for r in torch_ones]
        ours = [r[key] for r in c_kernels]
        lines.append(f"| {key} | {statistics.median(theirs) * 1000:.1f} ms | {statistics.median(ours) * 1000:.1f} ms "
                     f"| {ratio_median(theirs, ours):.2f}x |")
    return publish("kernels_ab", lines, args.readme)


if __name__ == "__main__":
    raise SystemExit(main())
