"""Prefix caching under the disaggregated policy, on the bundled model: the prefill worker reuses the
shared prefix it computed before, still hands the decode worker every prompt token's KV, and the
greedy tokens are those of the same run without the cache and of one local engine."""
from dataclasses import replace

import pytest

from backend.cli.main import main
from backend.config import EngineConfig, ModelChoice, RunConfig, SamplingConfig
from backend.records import RequestStatus, token_ids_by_request
from backend.results.export import read_run
from backend.session import execute
from backend.workload.spec import apply_overrides, load_workload

MODEL = "smollm2-135m"
BLOCK = 16


def config(policy: str, caching: bool | None, tmp_path) -> RunConfig:
    # a 48-token system prompt starting every prompt (three whole blocks), prompts arriving at once; caches of
    # 192 tokens (12 blocks), so that the prefill worker also evicts while it hands off shared blocks. Real text:
    # the bundled model's greedy choices after synthetic ids come near ties, where the split's last prompt token
    # (a decode step, not a prefill row) can flip one even without the cache (seen on request 1 of this workload)
    spec = apply_overrides(load_workload("mixed-lengths"), num_requests=6, arrival="burst", prompt_len="56:100",
                           output_len="3:5", shared_prefix_len=48, prompt_source="text")
    return RunConfig(mode="load", model=ModelChoice(MODEL, "cpu", "float32"), sampling=SamplingConfig(ignore_eos=True),
                     engine=EngineConfig(policy=policy, max_batch=4, chunk_tokens=32, kv_tokens=192,
                                         prefix_caching=caching),
                     workload=spec, out_dir=str(tmp_path))


def tokens_by_request(run) -> dict[int, list[int]]:
    return token_ids_by_request(run.tokens)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("pd-prefix")
    out = {}
    for name, policy, caching in (("on", "disaggregated", None), ("off", "disaggregated", False),
                                  ("local", "continuous", None)):
        finished = execute(config(policy, caching, tmp / name), lambda e: None, lambda: False)
        assert finished.error is None, finished.error
        out[name] = read_run(tmp / name)
    return out


def prefill_computed(run) -> int:
    return sum(s.num_prefill_tokens for s in run.steps if s.worker.startswith("prefill"))


def test_the_cached_prefix_gives_the_same_greedy_tokens(runs):
    on, off, local = runs["on"], runs["off"], runs["local"]
    assert all(r.status is RequestStatus.FINISHED for run in runs.values() for r in run.requests)
    assert len(tokens_by_request(on)) == 6
    assert tokens_by_request(on) == tokens_by_request(off) == tokens_by_request(local)


def test_the_prefill_worker_reuses_the_prefix_and_the_records_say_so(runs):
    on, off = runs["on"], runs["off"]
    assert on.config["engine"]["kv_layout"] == "paged" and on.config["engine"]["prefix_caching"] is True
    assert off.config["engine"]["prefix_caching"] is False and off.summary.prefix_hit_rate is None
    assert all(not r.cached_prompt_tokens for r in off.requests)
    s = on.summary
    assert s.prefix_hit_rate > 0 and s.prefix_request_hit_rate > 0
    # the hits are whole blocks of the shared prefix, counted alike by the requests and by the prefill steps
    assert all((r.cached_prompt_tokens or 0) % BLOCK == 0 for r in on.requests)
    assert sum(r.cached_prompt_tokens for r in on.requests) == s.prefix_hit_tokens > 0
    assert sum(st.num_reused_tokens for st in on.steps) == s.reused_tokens == s.prefix_hit_tokens
    assert all(st.num_reused_tokens == 0 for st in on.steps if st.worker.startswith("decode"))
    # the prefill worker computed only what it did not find; every prompt token is computed or reused
    assert prefill_computed(on) + s.reused_tokens == prefill_computed(off)
    assert s.num_evictions > 0   # its small cache gave cached blocks new contents during the run
    assert 0 < s.prefix_hit_rate <= s.prefix_ideal_hit_rate


def test_the_hand_off_still_moves_the_whole_prompt(runs):
    """The cached blocks travel too: each request's KV bytes are its whole prompt[:-1]'s blocks, as without the cache."""
    on, off = runs["on"], runs["off"]
    shape = runs["local"].info.shape   # float32 keys and values of every layer
    per_token = 2 * shape["num_layers"] * shape["num_kv_heads"] * shape["head_dim"] * 4
    assert {r.request_id: r.kv_bytes for r in on.requests} == {r.request_id: r.kv_bytes for r in off.requests}
    for r in on.requests:
        assert r.kv_bytes == per_token * -(-(r.prompt_tokens - 1) // BLOCK) * BLOCK


def test_prefix_caching_on_is_accepted_and_on_slots_refused(capsys):
    """An explicit on is now the workers' default; slots still refuse it in one line, before any worker starts."""
    assert main(["load", "--model", "tiny", "--policy", "disaggregated", "--kv-layout", "slots",
                 "--prefix-caching", "on", "--requests", "2", "--output-len", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "needs --kv-layout paged" in err[0]


def test_pack_reads_a_requests_row_through_blocks_it_shares_with_another():
    """Two rows share their first two blocks (a cached prefix) and own the rest: each hand-off carries the
    shared blocks and its own, in its row's order, and lands token for token in the other cache's row."""
    import torch
    from backend.engine.kv_transfer import block_of, pack, unpack
    from backend.models import SHAPES, KVCache
    from tests.fakes.paged import row_keys
    shape = SHAPES["tiny"]
    source = KVCache(shape, 2, 64, "cpu", torch.float32, block_size=4, num_blocks=12)
    dest = KVCache(shape, 2, 64, "cpu", torch.float32, block_size=4, num_blocks=12)
    gen = torch.Generator().manual_seed(0)
    for pool in (*source.k, *source.v):
        pool.copy_(torch.randn(pool.shape, generator=gen))
    source.set_row(0, [7, 3, 10])      # 11 tokens: the shared prefix (blocks 7, 3), then its own block
    source.set_row(1, [7, 3, 1, 5])    # 14 tokens: the same prefix, then two of its own
    dest.set_row(0, [11, 0, 4, 8])     # the decode side's blocks for the second request
    block = block_of(source, 14)
    payload = torch.empty(block.shape, dtype=block.torch_dtype)
    pack(source, 1, block, payload)
    unpack(dest, 0, payload)
    for layer in range(shape.num_layers):
        for src, dst in ((source.k[layer], dest.k[layer]), (source.v[layer], dest.v[layer])):
            assert torch.equal(row_keys(dst, dest, 0, 14), row_keys(src, source, 1, 14))
            assert torch.equal(row_keys(src, source, 1, 8), row_keys(src, source, 0, 8))   # the shared prefix
            assert not torch.equal(row_keys(src, source, 1, 11), row_keys(src, source, 0, 11))
