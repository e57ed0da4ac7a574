"""The runner: sampling, prefill-then-decode against full forward passes, warm-up, CPU weight packing."""
import pytest
import torch

from backend.workload.arrivals import RequestSpec
from backend.config import RunConfig, SamplingConfig
from backend.results.recorder import RunRecorder
from backend.workload.arrivals import FixedSource
from backend.engine.loop import Engine
from backend.models import KVCache, make_step_batch
from backend import kernels
from backend.kernels import ops
from backend.models import packed
from backend.models.packed import can_pack, is_packed, pack_weights
from backend.engine.runner import Runner, sample
from backend.engine.scheduler import Scheduler, SchedulerConfig
from backend.loaders.weights import load_model

from backend.engine.warmup import warmup_steps
from tests.engine.test_cuda_graphs import SHAPES, loaded, random_model


def logits_rows(seed: int = 0, rows: int = 4, vocab: int = 50) -> torch.Tensor:
    return torch.randn(rows, vocab, generator=torch.Generator().manual_seed(seed))


def test_greedy_is_the_argmax():
    logits = logits_rows()
    assert sample(logits, 0.0, 1.0, None).tolist() == logits.argmax(-1).tolist()
    assert sample(logits, 0.0, 0.5, None).tolist() == logits.argmax(-1).tolist()   # top_p is ignored when greedy


@pytest.mark.parametrize("top_p", [1.0, 0.8])
def test_seeded_sampling_is_reproducible_and_not_constant(top_p):
    logits = logits_rows(rows=1, vocab=8) * 0.1   # nearly flat: sampling spreads over many tokens

    def draws(seed):
        gen = torch.Generator().manual_seed(seed)
        return [sample(logits, 1.0, top_p, gen).item() for _ in range(40)]

    assert draws(3) == draws(3)
    assert draws(3) != draws(4)
    assert len(set(draws(3))) > 2


def test_a_tiny_top_p_always_keeps_the_argmax():
    logits = logits_rows(rows=3) * 0.5
    gen = torch.Generator().manual_seed(0)
    for _ in range(30):
        assert sample(logits, 1.5, 1e-6, gen).tolist() == logits.argmax(-1).tolist()


def run_engine(runner: Runner, specs: list[RequestSpec], policy: str = "continuous", slots: int = 3) -> dict[int, list[int]]:
    scheduler = Scheduler(SchedulerConfig(policy=policy, max_batch=slots, kv_capacity=slots * 40, max_len=40))
    records = RunRecorder(RunConfig(), lambda e: None)
    result = Engine(scheduler, runner, "test", ignore_eos=True).run(FixedSource(specs), records.emit, lambda: False)
    assert result.error is None
    return {r.request_id: [t.token_id for t in records.tokens if t.request_id == r.request_id] for r in records.requests}


def specs(n: int = 4) -> list[RequestSpec]:
    return [RequestSpec(i, 0.0, [(5 * i + 3 * j + 1) % 96 for j in range(4 + 3 * i)], "", 6) for i in range(n)]


@pytest.mark.parametrize("policy", ["continuous", "chunked"])
def test_prefill_then_decode_equals_greedy_full_forward_passes(policy):
    model = loaded("llama", "cpu")
    generated = run_engine(Runner(model, 3, 40, SamplingConfig(ignore_eos=True)), specs(), policy)
    shape = SHAPES["llama"]
    for spec in specs():
        seq = list(spec.prompt_ids)
        for _ in range(spec.max_new_tokens):   # no cache reuse: each token from one full pass over the sequence
            batch = make_step_batch([(0, 0, seq)], [], "cpu")
            with torch.inference_mode():
                seq.append(int(model.model(batch, KVCache(shape, 1, 40, "cpu", torch.float32)).argmax(-1)))
        assert generated[spec.request_id] == seq[len(spec.prompt_ids):], spec.request_id


@pytest.mark.parametrize("use_cuda_graphs", [False, True])
def test_warmup_leaves_no_trace_in_the_results(use_cuda_graphs):
    sampling = SamplingConfig(temperature=0.9, top_p=0.95, seed=5, ignore_eos=True)

    def generate(warm: bool):
        runner = Runner(loaded("llama", "cpu"), 3, 40, sampling, use_cuda_graphs=use_cuda_graphs)
        if warm:
            runner.warmup(warmup_steps("chunked", 3, 40, chunk_tokens=8, temperature=sampling.temperature,
                                       prompt_len=20))
        return run_engine(runner, specs())

    cold = generate(False)
    assert generate(True) == cold
    assert len({tuple(tokens) for tokens in cold.values()}) > 1


def _packed_as(layout: str, monkeypatch) -> type:
    """Make pack_weights choose `layout`; the type its packed matrices then have."""
    if layout == "onednn":   # as on a machine where the C kernels cannot be built
        monkeypatch.setattr(ops, "usable", lambda device, dtype: False)
        return torch.Tensor
    assert ops.usable(torch.device("cpu"), torch.float32), kernels.reason()
    return packed.Panels


@pytest.mark.parametrize("layout", ["panels", "onednn"])
def test_the_runner_packs_cpu_weights_once_and_the_logits_stay(layout, monkeypatch):
    kind = _packed_as(layout, monkeypatch)
    model = loaded("llama", "cpu")
    plain = random_model("llama", "cpu")
    Runner(model, 2, 40, SamplingConfig())
    qkv = model.model.layers[0].qkv
    assert is_packed(model.model) and isinstance(qkv, kind) and (layout == "panels" or qkv.is_mkldnn)
    qkv = model.model.layers[0].qkv
    assert pack_weights(model.model) and model.model.layers[0].qkv is qkv   # a second runner repacks nothing
    batch = [(0, 0, list(range(1, 12)))], [(1, 3, 7)]
    caches = [KVCache(SHAPES["llama"], 2, 40, "cpu", torch.float32) for _ in range(2)]
    with torch.inference_mode():
        for cache in caches:   # slot 1 holds 3 cached tokens for the decode row
            m = model.model if cache is caches[0] else plain
            m(make_step_batch([(1, 0, [4, 5, 6])], [], "cpu"), cache)
        got = model.model(make_step_batch(*batch, "cpu"), caches[0])
        expected = plain(make_step_batch(*batch, "cpu"), caches[1])
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("layout", ["panels", "onednn"])
def test_untied_heads_are_packed_in_place_and_tied_ones_keep_the_embedding(layout, monkeypatch):
    kind = _packed_as(layout, monkeypatch)
    untied = load_model("tiny", "cpu", "float32").model
    assert untied.lm_head is not None and pack_weights(untied)
    assert isinstance(untied.lm_head, kind) and untied.packed_head is untied.lm_head and not untied.embed.is_mkldnn
    assert ("lm_head" in dict(untied.named_parameters())) == (layout == "onednn")   # Panels are not parameters
    gpt2 = random_model("gpt2", "cpu", packed=True)
    assert isinstance(gpt2.packed_head, kind) and not gpt2.wte.is_mkldnn


def test_packing_is_refused_where_onednn_cannot_run_the_dtype():
    assert not can_pack(torch.device("meta"), torch.float32)
    assert not can_pack(torch.device("cpu"), torch.float64)
    model = random_model("llama", "cpu").to(torch.float64)
    assert not pack_weights(model) and not model.layers[0].qkv.is_mkldnn
    assert not ops.usable(torch.device("cpu"), torch.float64)   # the C kernels are float32 only


@pytest.mark.parametrize("arch", list(SHAPES))
def test_a_wide_decode_batch_matches_each_request_alone(arch):
    """Nine decode rows of different lengths in one batch (masked attention), on packed weights."""
    model = random_model(arch, "cpu", packed=True)
    shape = SHAPES[arch]
    prompts = [[(3 * i + 5 * j + 2) % 96 for j in range(2 + i)] for i in range(9)]
    alone = []
    for p in prompts:
        cache = KVCache(shape, 1, 20, "cpu", torch.float32)
        with torch.inference_mode():
            model(make_step_batch([(0, 0, p)], [], "cpu"), cache)
            alone.append(model(make_step_batch([], [(0, len(p), 9)], "cpu"), cache))
    cache = KVCache(shape, 9, 20, "cpu", torch.float32)
    with torch.inference_mode():
        model(make_step_batch([(s, 0, p) for s, p in enumerate(prompts)], [], "cpu"), cache)
        together = model(make_step_batch([], [(s, len(p), 9) for s, p in enumerate(prompts)], "cpu"), cache)
    torch.testing.assert_close(together, torch.cat(alone), atol=1e-4, rtol=1e-4)


def test_a_gpu_step_never_asks_for_the_cpu_kernels(monkeypatch):
    """kernels.load() compiles the C kernels on first use: a step on CUDA must not call it."""
    from backend.engine.runner import kernel_math
    from backend.kernels import matmath
    asked = []
    monkeypatch.setattr(kernels, "load", lambda: asked.append("load"))
    with kernel_math(torch.device("cuda", 0), matmath.FP32):
        pass
    assert asked == []
    with kernel_math(torch.device("cpu"), matmath.FP32):
        pass
    assert asked   # the CPU's steps hand their arithmetic to the kernels


def test_a_gpu_models_arithmetic_is_told_without_the_cpu_kernels(monkeypatch):
    """run.json's "matmul" and the loaded event of a CUDA model: "torch", with no kernels.load() on the way."""
    from types import SimpleNamespace
    from backend.models import fidelity

    def refuse():
        raise AssertionError("a CUDA model asked for the CPU kernels")
    monkeypatch.setattr(kernels, "load", refuse)
    on_gpu = SimpleNamespace(device=torch.device("cuda", 0), dtype=torch.bfloat16,
                             precision=SimpleNamespace(name="bfloat16"))
    choice = fidelity.choose(on_gpu, "auto")
    assert choice.as_dict() == {"mode": "auto", "unit": "fp32", "min_rows": 0, "fp32_unit": "torch",
                                "note": "the products run on torch, in the model's dtype", "fidelity": None}


def test_the_runner_is_built_warmed_up_and_stepped_inside_its_device_scope(monkeypatch):
    """device_scope faked: cuda:N must be the current device while the graphs are captured and replayed."""
    import contextlib
    from backend.engine import runner as runner_module
    scopes = []
    inside = []

    @contextlib.contextmanager
    def scope(device):
        scopes.append(device)
        inside.append(True)
        try:
            yield
        finally:
            inside.pop()
    warmup = Runner.warmup

    def checked_warmup(self, *args, **kwargs):
        assert inside, "warm-up (and the graph captures) outside the device scope"
        return warmup(self, *args, **kwargs)
    monkeypatch.setattr(runner_module, "device_scope", scope)
    monkeypatch.setattr(Runner, "warmup", checked_warmup)
    loaded = load_model("tiny", device="cpu", dtype="float32")
    built = runner_module.build_runner(loaded, 2, 64, SamplingConfig(), use_cuda_graphs=True)
    assert scopes and set(scopes) == {loaded.device} and not inside and built.static is not None


# ---- on a GPU ---------------------------------------------------------------------------------------

def cuda_devices(n: int):
    """Skip unless this machine has n CUDA devices."""
    found = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return pytest.mark.skipif(found < n, reason="no CUDA device" if not found else f"fewer than {n} CUDA devices")


CUDA_DEVICES = [pytest.param("cuda:0", marks=cuda_devices(1)), pytest.param("cuda:1", marks=cuda_devices(2))]


@pytest.mark.parametrize("device", CUDA_DEVICES)
def test_cuda_graph_replays_do_real_work_on_their_device(device):
    """The graphs' logits are poisoned with NaN before a replay: an empty graph (captured on another device
    than its kernels ran on) would hand the NaN back. cuda:1 captures inside torch.cuda.device(cuda:1)."""
    from backend.engine.runner import build_runner
    from backend.loaders.device import device_scope
    from tests.engine.test_cuda_graphs import prompt
    graphs = build_runner(loaded("llama", device), 2, 32, SamplingConfig(), use_cuda_graphs=True)
    eager = build_runner(loaded("llama", device), 2, 32, SamplingConfig(), use_cuda_graphs=False)
    assert graphs.static.graphs   # warm-up captured every bucket
    with torch.inference_mode():
        for runner in (graphs, eager):
            runner.model(make_step_batch([(0, 0, prompt(0))], [], runner.device), runner.cache)
        for _, logits in graphs.static.graphs.values():
            logits.fill_(float("nan"))
        with device_scope(graphs.device):
            got = graphs.static.decode([0], [len(prompt(0))], [3]).clone()
        expected = eager.model(make_step_batch([], [(0, len(prompt(0)), 3)], eager.device), eager.cache)
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got, expected, atol=1e-3, rtol=1e-3)


@pytest.mark.parametrize("device", CUDA_DEVICES[:1])
def test_cuda_a_run_never_loads_the_cpu_kernels(device, monkeypatch):
    from backend.engine.runner import build_runner

    def refuse():
        raise AssertionError("a CUDA run asked for the CPU kernels (a compile on its first step)")
    monkeypatch.setattr(kernels, "load", refuse)
    runner = build_runner(loaded("llama", device), 2, 32, SamplingConfig())   # warm-up: prefill, decode, captures
    assert runner.use_cuda_graphs


@pytest.mark.parametrize("use_cuda_graphs", [False, True])
def test_the_paged_runner_with_prefix_caching_samples_what_the_slot_runner_does(use_cuda_graphs):
    """Blocks of 4 in a pool smaller than the rows' reach (the warm-up wraps round it), prompts sharing an
    8-token prefix: later requests read the first one's blocks through their tables; the static decode
    path (CUDA graphs' form, eager here) pads with a scratch row that owns a block of its own."""
    from backend.engine.paged_scheduler import scheduler_for
    from backend.engine.runner import PagedPool
    shared = [(7 * j + 2) % 96 for j in range(8)]
    prompts = [shared + [(5 * i + 3 * j + 1) % 96 for j in range(3 + 2 * i)] for i in range(4)]
    specs_ = [RequestSpec(i, 0.0, p, "", 6) for i, p in enumerate(prompts)]

    def run(paged: bool) -> tuple[dict[int, list[int]], int]:
        config = SchedulerConfig(policy="chunked", max_batch=3, kv_capacity=80, max_len=40, chunk_tokens=12,
                                 kv_layout="paged" if paged else "slots", block_size=4, prefix_caching=paged)
        runner = Runner(loaded("llama", "cpu"), 3, 40, SamplingConfig(ignore_eos=True), use_cuda_graphs=use_cuda_graphs,
                        paged=PagedPool(4, config.num_blocks) if paged else None)
        runner.warmup(warmup_steps("chunked", 3, 40, chunk_tokens=12))
        records = RunRecorder(RunConfig(), lambda e: None)
        result = Engine(scheduler_for(config), runner, "test", ignore_eos=True).run(FixedSource(specs_), records.emit,
                                                                                    lambda: False)
        assert result.error is None
        tokens = {r.request_id: [t.token_id for t in records.tokens if t.request_id == r.request_id]
                  for r in records.requests}
        return tokens, sum(r.cached_prompt_tokens or 0 for r in records.requests)

    slots, _ = run(False)
    paged, hits = run(True)
    assert paged == slots and hits >= 8
