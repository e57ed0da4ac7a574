"""Every architecture the engine runs, end to end: a saved Hugging Face folder of each family (random
weights, from tests/models/test_models.py's variants and the families' own test files) through
`run`, `load` under the chunked policy, and `sweep batch`, as the CLI and the window run them
(backend.session.execute). The arithmetic is checked against transformers in those files; here,
that each family goes through every run kind and writes its records."""
import pytest

from backend.config import BatchRun, EngineConfig, ModelChoice, RunConfig, SamplingConfig, SweepSpec
from backend.events import SweepPoint
from backend.loaders.cache import ModelCache
from backend.session import execute
from backend.workload.spec import LengthDist, WorkloadSpec
from tests.models.test_models import VARIANTS, reference_pair

transformers = pytest.importorskip("transformers")


def family_variants() -> dict:
    """The variants of every family's test file: Llama-family and GPT-2 here, Gemma and MoE in theirs."""
    found = dict(VARIANTS)
    for module in ("tests.models.test_gemma", "tests.models.test_moe"):
        try:
            found |= __import__(module, fromlist=["VARIANTS"]).VARIANTS
        except (ImportError, AttributeError):
            continue
    return found


FAMILIES = family_variants()


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def folder(request, tmp_path_factory):
    VARIANTS.setdefault(request.param, FAMILIES[request.param])   # reference_pair reads the table
    hf, _, _ = reference_pair(request.param)
    path = tmp_path_factory.mktemp(request.param)
    hf.save_pretrained(path, safe_serialization=True)
    return path


def config(folder, mode: str, **parts) -> RunConfig:
    return RunConfig(mode=mode, model=ModelChoice(str(folder), "cpu", "auto"), sampling=SamplingConfig(ignore_eos=True),
                     **parts)


def test_each_family_runs_a_batch_a_load_and_a_sweep(folder, tmp_path):
    models = ModelCache()   # the three runs on one load, as the window's engine process keeps its model
    batch = execute(config(folder, "batch", engine=EngineConfig(policy="static"),
                           batch=BatchRun(prompt_len=12, output_len=4, batch=2)), lambda e: None, lambda: False,
                    models=models)
    assert batch.error is None and batch.summary.num_finished == 2
    assert len(batch.data.steps) == 4                      # one prefill, then three decode steps
    workload = WorkloadSpec("mix", num_requests=4, arrival="burst", prompt_len=LengthDist("uniform", low=6, high=20),
                            output_len=LengthDist("fixed", 3))
    load = execute(config(folder, "load", engine=EngineConfig(policy="chunked", chunk_tokens=16, max_batch=4),
                          workload=workload), lambda e: None, lambda: False, models=models)
    assert load.error is None and load.summary.num_finished == 4
    events = []
    sweep = execute(config(folder, "sweep-batch", sweep=SweepSpec(kind="batch", batches=[1, 4], context=16, steps=2,
                                                                  warmup=1)), events.append, lambda: False,
                    models=models)
    assert sweep.error is None
    assert [e.x for e in events if isinstance(e, SweepPoint)] == [1, 4]


def test_each_family_gives_the_same_greedy_tokens_drafting_for_itself(folder):
    """Speculative decoding (docs/speculative.md): the family's model as its own draft, three guesses a step,
    verified as short prefill segments batched with chunked prefills; float32 products throughout
    (--prefill-math fp32), so the tokens must be exactly the plain run's."""
    from backend.config import SpecConfig
    workload = WorkloadSpec("mix", num_requests=4, arrival="burst", prompt_len=LengthDist("uniform", low=6, high=20),
                            output_len=LengthDist("fixed", 8))

    models = ModelCache()   # the plain and the speculating run on one load of the target model

    def tokens(spec: SpecConfig):
        run = RunConfig(mode="load", model=ModelChoice(str(folder), "cpu", "auto", "fp32"),
                        sampling=SamplingConfig(ignore_eos=True), spec=spec, workload=workload,
                        engine=EngineConfig(policy="chunked", chunk_tokens=16, max_batch=4))
        finished = execute(run, lambda e: None, lambda: False, models=models)
        assert finished.error is None and finished.summary.num_finished == 4
        ordered = sorted(finished.data.tokens, key=lambda t: (t.request_id, t.index))
        return [(t.request_id, t.token_id) for t in ordered], finished.summary

    plain, _ = tokens(SpecConfig())
    guessed, summary = tokens(SpecConfig("draft", str(folder), num_tokens=3))
    assert guessed == plain
    assert summary.spec_accepted_tokens > 0
