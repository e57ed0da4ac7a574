"""A prefill segment asked for logits at every position (make_step_batch's every_row: a speculative
verification) gives, row by row, the logits of decoding those tokens one at a time."""
import torch

from backend.config import SamplingConfig
from backend.engine.runner import Runner, kernel_math
from backend.loaders.weights import load_model
from backend.models import make_step_batch


def test_make_step_batch_asks_every_row_of_the_chosen_segments_only():
    batch = make_step_batch([(0, 0, [1, 2, 3]), (1, 5, [4, 5])], [(2, 7, 9)], "cpu", every_row=[1])
    assert batch.logit_rows.tolist() == [2, 3, 4, 5]   # segment 0's last, segment 1's two, the decode


def test_every_row_logits_match_one_token_decodes():
    loaded = load_model("tiny", "cpu", "float32")
    runner = Runner(loaded, 2, 64, SamplingConfig())
    prompt, tail = list(range(3, 20)), [41, 7, 300, 12]
    with torch.inference_mode(), kernel_math(runner.device, runner.math):
        model, cache = runner.model, runner.cache
        for slot in (0, 1):
            model(make_step_batch([(slot, 0, prompt)], [], "cpu"), cache)
        together = model(make_step_batch([(0, len(prompt), tail)], [], "cpu", every_row=[0]), cache)   # (4, vocab)
        apart = torch.cat([model(make_step_batch([], [(1, len(prompt) + i, t)], "cpu"), cache)
                           for i, t in enumerate(tail)])
    assert together.shape == apart.shape == (len(tail), loaded.shape.vocab_size)
    assert torch.allclose(together, apart, atol=1e-4, rtol=1e-4)
    assert together.argmax(-1).tolist() == apart.argmax(-1).tolist()


def test_decode_rows_of_one_slot_match_one_token_decodes():
    """A verification as K+1 decode rows of one table row (the runner's route on the C kernels): every
    row's key is written before any row attends, so each sees the rows before it, as one-token decodes
    do; with two threads a row whose keys were written by another thread's work item would race."""
    loaded = load_model("tiny", "cpu", "float32")
    runner = Runner(loaded, 2, 64, SamplingConfig())
    prompt, tail = list(range(3, 20)), [41, 7, 300, 12, 5]
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with torch.inference_mode(), kernel_math(runner.device, runner.math):
            model, cache = runner.model, runner.cache
            for slot in (0, 1):
                model(make_step_batch([(slot, 0, prompt)], [], "cpu"), cache)
            rows = [(0, len(prompt) + i, t) for i, t in enumerate(tail)] + [(1, len(prompt), 99)]
            together = model(make_step_batch([], rows, "cpu"), cache)   # (6, vocab)
            apart = torch.cat([model(make_step_batch([], [(1, len(prompt) + i, t)], "cpu"), cache)
                               for i, t in enumerate(tail)])
            other = model(make_step_batch([], [(0, len(prompt), 99)], "cpu"), cache)   # slot 0 rewritten
    finally:
        torch.set_num_threads(threads)
    assert together.shape == (len(tail) + 1, loaded.shape.vocab_size)
    assert torch.allclose(together[:-1], apart, atol=1e-4, rtol=1e-4)
    assert together[:-1].argmax(-1).tolist() == apart.argmax(-1).tolist()
    assert torch.allclose(together[-1:], other, atol=1e-4, rtol=1e-4)   # the other request's row, unchanged
