"""The padded static-shape decode (the CUDA graph path) against the plain decode path.

On the CPU the static path runs eagerly; where CUDA is present the same tests also run with
captured graphs (bench/gpu_check.sh runs them there).
"""
import pytest
import torch

from backend.workload.arrivals import RequestSpec
from backend.config import RunConfig, SamplingConfig
from backend.results.recorder import RunRecorder
from backend.engine.cuda_graphs import StaticDecoder, bucket_sizes, length_buckets
from backend.workload.arrivals import FixedSource
from backend.engine.loop import Engine
from backend.models import build_model, KVCache, make_step_batch
from tests.fakes.paged import row_keys, scramble
from backend.shape import ModelShape
from backend.models.packed import pack_weights
from backend.engine.runner import Runner
from backend.engine.scheduler import Scheduler, SchedulerConfig
from backend.loaders.tokenizer import ByteTokenizer
from backend.loaders.weights import LoadedModel

SHAPES = {
    "llama": ModelShape(arch="llama", vocab_size=96, hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2,
                        head_dim=16, intermediate_size=128, max_position=256),
    "gpt2": ModelShape(arch="gpt2", vocab_size=96, hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=4,
                       head_dim=16, intermediate_size=128, max_position=256, tie_embeddings=True),
}
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
PROMPTS = {0: 5, 1: 9, 2: 3, 3: 12, 4: 7, 5: 4}   # slot -> prompt length


def random_model(arch: str, device: str, packed: bool = False) -> torch.nn.Module:
    torch.manual_seed(0)
    model = build_model(SHAPES[arch]).eval().requires_grad_(False)
    for p in model.parameters():
        p.normal_(0, 0.3)
    model = model.to(device)
    if packed:
        assert pack_weights(model)
    return model


def loaded(arch: str, device: str) -> LoadedModel:
    model = random_model(arch, device)
    shape = SHAPES[arch]
    return LoadedModel(arch, model, shape, ByteTokenizer(shape.vocab_size), torch.device(device), torch.float32,
                       "random", True, 0)


def prompt(slot: int) -> list[int]:
    return [(7 * slot + 3 * i + 1) % 96 for i in range(PROMPTS[slot])]


def test_buckets_are_powers_of_two_then_the_largest_batch():
    assert bucket_sizes(1) == [1]
    assert bucket_sizes(2) == [1, 2]
    assert bucket_sizes(5) == [1, 2, 4, 5]
    assert bucket_sizes(8) == [1, 2, 4, 8]
    with pytest.raises(ValueError):
        bucket_sizes(0)


def test_bucket_for_pads_up_and_refuses_too_many():
    cache = KVCache(SHAPES["llama"], 4, 16, "cpu", torch.float32)
    decoder = StaticDecoder(random_model("llama", "cpu"), cache, scratch_slot=3, max_batch=3, capture=False)
    assert [decoder.bucket_for(n) for n in (1, 2, 3)] == [1, 2, 3]
    with pytest.raises(ValueError):
        decoder.bucket_for(4)
    with pytest.raises(ValueError):
        StaticDecoder(decoder.model, cache, scratch_slot=4, max_batch=3, capture=False)


def test_length_buckets_are_powers_of_two_from_the_smallest_then_max_len():
    assert length_buckets(4096) == [256, 512, 1024, 2048, 4096]
    assert length_buckets(272) == [256, 272]
    assert length_buckets(256) == [256]
    assert length_buckets(48) == [48]
    assert length_buckets(48, smallest=16) == [16, 32, 48]
    with pytest.raises(ValueError):
        length_buckets(0)


class KeyLengths(torch.nn.Module):
    """The model, recording the key length each static step attends over."""

    def __init__(self, model):
        super().__init__()
        self.model, self.lengths = model, []

    def forward(self, batch, cache, static_len=None):
        self.lengths.append(static_len)
        return self.model(batch, cache, static_len=static_len)


def test_the_static_key_length_follows_the_longest_context_not_max_len():
    """A cache of 4,096 positions, contexts of a few tokens: a step attends over 256 keys, and
    over 512 once one request passes 256 (the bucket of the longest context, not of the shortest)."""
    shape = SHAPES["llama"]
    model = KeyLengths(random_model("llama", "cpu"))
    cache = KVCache(shape, 3, 4096, "cpu", torch.float32)
    decoder = StaticDecoder(model, cache, scratch_slot=2, max_batch=2, capture=False)
    assert decoder.lengths == [256, 512, 1024, 2048, 4096]
    assert [decoder.length_for(p) for p in (0, 255, 256, 300, 4095)] == [256, 256, 512, 512, 4096]
    with pytest.raises(ValueError):
        decoder.length_for(4096)
    with torch.inference_mode():
        decoder.decode([0, 1], [5, 9], [1, 2])
        decoder.decode([0, 1], [6, 300], [1, 2])
        decoder.decode([1], [4000], [2])
    assert model.lengths == [256, 512, 4096]


@pytest.mark.parametrize("device", DEVICES)
def test_a_row_given_new_blocks_is_read_through_the_table_by_the_next_static_step(device):
    """The paged allocator moves a row (KVCache.set_row writes the table in place): the static step,
    whose graph holds the table tensor, reads the row's keys at their new blocks, with no recapture."""
    model = random_model("llama", device)
    shape = SHAPES["llama"]
    plain = KVCache(shape, 3, 32, device, torch.float32, block_size=4)
    static = KVCache(shape, 3, 32, device, torch.float32, block_size=4, num_blocks=3 * 8 + 8)   # 8 spare blocks
    decoder = StaticDecoder(model, static, scratch_slot=2, max_batch=2, capture=device == "cuda", min_length=16)
    batch = [(s, 0, prompt(s)) for s in (0, 1)]
    with torch.inference_mode():
        for cache in (plain, static):
            model(make_step_batch(batch, [], device), cache)
    pos = [PROMPTS[0], PROMPTS[1]]
    for step in range(3):
        if step == 1:   # row 0's blocks move to the spare ones, in reverse order
            old = static.block_table[0].long()
            new = torch.arange(3 * 8 + 7, 3 * 8 - 1, -1, device=device)
            for pool in static.k + static.v:
                pool[:, new] = pool[:, old]
                pool[:, old] = float("nan")   # a read of the old place would poison the logits
            static.set_row(0, new)
        tokens = [3 + step, 4 + step]
        with torch.inference_mode():
            expected = model(make_step_batch([], list(zip((0, 1), pos, tokens)), device), plain)
            got = decoder.decode([0, 1], pos, tokens)
        torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)
        pos = [p + 1 for p in pos]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("arch", list(SHAPES))
@pytest.mark.parametrize("packed", [False, True])
@pytest.mark.parametrize("min_length", [16, 256])
@pytest.mark.parametrize("table", ["identity", "scrambled"])
def test_static_decode_matches_the_plain_path_as_the_batch_shrinks_and_grows(arch, device, packed, min_length, table):
    """min_length 16: the steps move from the 16-key bucket to the 32-key one of a 40-position cache;
    256: every step attends over the whole cache. The static cache's block table is the identity
    or a scrambled one (rows own permuted blocks; the static step gathers through the table)."""
    if packed and device != "cpu":
        pytest.skip("packing is a CPU layout")
    model = random_model(arch, device, packed)
    shape = SHAPES[arch]
    plain = KVCache(shape, 6, 40, device, torch.float32)
    static_cache = KVCache(shape, 7, 40, device, torch.float32, block_size=8)   # slot 6: scratch for padding rows
    if table == "scrambled":
        scramble(static_cache, seed=7)
    decoder = StaticDecoder(model, static_cache, scratch_slot=6, max_batch=6, capture=device == "cuda",
                            min_length=min_length)
    positions = dict.fromkeys(PROMPTS, 0)

    def prefill(slots):
        batch = [(s, 0, prompt(s)) for s in slots]
        with torch.inference_mode():
            model(make_step_batch(batch, [], device), plain)
            model(make_step_batch(batch, [], device), static_cache)
        for s in slots:
            positions[s] = PROMPTS[s]

    prefill([3, 0, 5])
    # non-contiguous slots (padded 3 -> 4), a grown batch, a single request, all six, then a
    # shrunk one with a hole: every bucket and the same bucket with different padding
    schedule = [[3, 0, 5], [3, 0, 5], "prefill 1 2 4", [3, 0, 5, 1], [5], [0, 1, 2, 3, 4, 5], [4, 1], [2, 0, 1, 3, 4]]
    for step, slots in enumerate(schedule):
        if isinstance(slots, str):
            prefill([int(s) for s in slots.split()[1:]])
            continue
        tokens = [(11 * step + s) % 96 for s in slots]
        pos = [positions[s] for s in slots]
        with torch.inference_mode():
            expected = model(make_step_batch([], list(zip(slots, pos, tokens)), device), plain)
            got = decoder.decode(list(slots), pos, tokens)
        torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)
        for s in slots:
            positions[s] += 1
    # the padding rows wrote only the scratch slot: every request's keys and values agree
    for a, b in zip(plain.k + plain.v, static_cache.k + static_cache.v):
        for s, n in positions.items():
            torch.testing.assert_close(row_keys(b, static_cache, s, n), row_keys(a, plain, s, n), atol=1e-5,
                                       rtol=1e-4)
    if device == "cuda":   # captured lazily, one per (bucket, length) used
        assert {size for size, _ in decoder.graphs} == {1, 4, 2, 6}
        assert {length for _, length in decoder.graphs} == ({16, 32} if min_length == 16 else {40})


@pytest.mark.parametrize("device", DEVICES)
def test_runner_with_graphs_generates_the_same_tokens_under_continuous_batching(device):
    """Requests of different lengths arrive together into 3 slots: the decode batch grows and shrinks."""
    def generate(use_cuda_graphs: bool) -> dict[int, list[int]]:
        model = loaded("llama", device)
        runner = Runner(model, num_slots=3, max_len=40, sampling=SamplingConfig(ignore_eos=True),
                        use_cuda_graphs=use_cuda_graphs)
        runner.warmup()
        scheduler = Scheduler(SchedulerConfig(policy="continuous", max_batch=3, kv_capacity=120, max_len=40))
        specs = [RequestSpec(i, 0.0, prompt(i % 6), "", 3 + 2 * i) for i in range(6)]
        engine = Engine(scheduler, runner, "test", ignore_eos=True)
        records = RunRecorder(RunConfig(), lambda event: None)
        result = engine.run(FixedSource(specs), records.emit, lambda: False)
        assert result.error is None
        steps = [s.num_decode_requests for s in records.steps if s.num_prefill_requests == 0]
        assert len(set(steps)) > 1   # the decode batch did change size
        return {rid: [t.token_id for t in records.tokens if t.request_id == rid] for rid in range(6)}

    plain, static = generate(False), generate(True)
    assert static == plain
    assert all(len(plain[i]) == 3 + 2 * i for i in range(6))


@pytest.mark.parametrize("device", DEVICES)
def test_guesses_with_graphs_give_the_tokens_without_guesses(device):
    """The GPU runner's route for speculation: plain decode steps through the static path (captured on CUDA),
    a step with verifications eagerly, each verification a prefill segment with logits at every position.
    Greedy, with requests of different lengths coming and going in 3 slots, the tokens are those without
    guesses, and guesses were verified and kept (else the equality would prove nothing)."""
    from backend.engine.spec.ngram import NgramProposer
    from backend.engine.spec.speculator import Speculator

    def generate(speculator) -> tuple[dict[int, list[int]], list]:
        runner = Runner(loaded("llama", device), num_slots=3, max_len=64, sampling=SamplingConfig(ignore_eos=True),
                        use_cuda_graphs=True)
        assert runner.static is not None and not runner._verify_as_decode
        runner.warmup()
        scheduler = Scheduler(SchedulerConfig(policy="continuous", max_batch=3, kv_capacity=192, max_len=64))
        specs = [RequestSpec(i, 0.0, prompt(i % 6) * 3, "", 12 + 3 * i) for i in range(6)]
        records = RunRecorder(RunConfig(), lambda event: None)
        result = Engine(scheduler, runner, "test", ignore_eos=True, speculator=speculator).run(
            FixedSource(specs), records.emit, lambda: False)
        assert result.error is None
        tokens = {rid: [t.token_id for t in sorted(records.tokens, key=lambda t: t.index) if t.request_id == rid]
                  for rid in range(6)}
        return tokens, records.steps

    plain, _ = generate(None)
    guessed, steps = generate(Speculator(NgramProposer(1, 4), 4, backoff=False))
    assert guessed == plain
    assert all(len(plain[i]) == 12 + 3 * i for i in range(6))
    assert sum(s.num_accepted_tokens for s in steps) >= 5
    # verifications shared steps with plain decodes (the eager path computes both)
    assert any(s.num_proposed_tokens and s.num_decode_requests > 1 for s in steps)
