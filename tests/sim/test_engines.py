"""Engines as a dimension (backend/sim/engines.py): a published figure's engine text read as a family, --engine
choosing a profile's [simulation.<family>] host terms (the shared ones where the family has none), the choice in
run.json, and the fit giving a family with enough figures its own host terms."""
from __future__ import annotations

import argparse
import json
from dataclasses import replace

import pytest

from backend.config import BatchRun, Deployment, ModelChoice, RunConfig
from backend.errors import InputError
from backend.roofline.profiles import find_profile, load_profile
from backend.sim.engines import DEFAULT_ENGINE, EngineFamily, family_of, parse_engine
from backend.sim.published_figures import FIGURES
from backend.sim.step_time import CostModel


@pytest.mark.parametrize("text,family", [
    ("TensorRT-LLM 0.9.0, gptSessionBenchmark", EngineFamily.TRTLLM),
    ("NVIDIA NIM 1.8.0 for Llama-3.3-70b-instruct (TensorRT-LLM backend profile, fp8, TP2)", EngineFamily.TRTLLM),
    ("vLLM (ROCm) on BM.GPU.MI300X.8", EngineFamily.VLLM),
    ("SGLang v0.4.1 with --enable-torch-compile", EngineFamily.SGLANG),
    ("gpt-fast (torch.compile, batch 1)", EngineFamily.COMPILED),
    ("llama.cpp server b4000", EngineFamily.OTHER),
])
def test_an_engine_text_names_its_family(text, family):
    assert family_of(text) is family


def test_every_published_figure_has_a_named_family():
    families = {family_of(f.source.engine) for f in FIGURES}
    assert EngineFamily.OTHER not in families and {EngineFamily.VLLM, EngineFamily.TRTLLM} <= families


def test_the_engine_choices_are_the_profiles_engine_keys():
    from backend.sim.engines import ENGINE_CHOICES, ENGINE_KEYS
    assert ENGINE_CHOICES == ENGINE_KEYS


def test_an_unknown_engine_is_one_line_and_none_is_the_default():
    assert parse_engine(None) is DEFAULT_ENGINE is EngineFamily.VLLM
    with pytest.raises(InputError, match="known: vllm, sglang, trtllm, compiled") as info:
        parse_engine("tgi")
    assert "\n" not in str(info.value)


def with_engines(profile, **tables):
    return replace(profile, simulation={**profile.simulation, **tables})


def test_a_family_takes_its_own_host_terms_and_one_without_the_shared():
    profile = find_profile("h100-sxm")
    shared = CostModel.for_profile(replace(profile, simulation={k: v for k, v in profile.simulation.items()
                                                                 if k not in ("vllm", "trtllm")}))
    mine = with_engines(profile, vllm={"step_ms": 0.75, "layer_us": 3.0, "source": "fitted on vLLM's"},
                        trtllm={"step_ms": 2.5})
    vllm = CostModel.for_profile(mine, None, "vllm")
    assert (vllm.step_ms, vllm.layer_us, vllm.mfu) == (0.75, 3.0, shared.mfu)
    assert "engine vllm: fitted on vLLM's" in vllm.source
    assert CostModel.for_profile(mine, None, EngineFamily.TRTLLM).step_ms == 2.5
    assert CostModel.for_profile(mine).step_ms == 0.75   # the default is vllm
    other = CostModel.for_profile(mine, None, "sglang")
    assert other.step_ms == shared.step_ms and "no terms of its own" in other.source


def test_a_profile_refuses_a_term_an_engine_table_cannot_hold(tmp_path):
    text = find_profile("h100-sxm").path.read_text()
    path = tmp_path / "x.toml"
    path.write_text(text + "\n[simulation.sglang]\nmfu = 0.5\n")
    with pytest.raises(InputError, match="simulation.sglang.mfu") as info:
        load_profile(path)
    assert "\n" not in str(info.value)
    path.write_text(text + "\n[simulation.sglang]\nstep_ms = -1\n")
    with pytest.raises(InputError, match="step_ms"):
        load_profile(path)


def batch_1_itl(engine: str, out) -> tuple[float, dict]:
    """A simulated batch-1 decode of an 8B model on an H100 with `engine`: its ITL and run.json's simulated info."""
    from backend.sim.target import run_simulated
    config = RunConfig(mode="batch", simulate=True, profile="h100-sxm", model=ModelChoice("llama-3.1-8b"),
                       batch=BatchRun(prompt_len=128, output_len=16, batch=1), deployment=Deployment(engine=engine),
                       out_dir=str(out))
    finished = run_simulated(config, emit=lambda e: None, should_stop=lambda: False)
    assert finished.error is None
    return finished.summary.itl_mean_ms, json.loads((out / "run.json").read_text())["info"]


def test_the_engine_prices_the_step_and_run_json_names_it(tmp_path):
    profile = find_profile("h100-sxm")
    assert isinstance(profile.simulation.get("vllm"), dict)   # the shipped profiles carry the fitted vLLM terms
    vllm_ms, info = batch_1_itl("vllm", tmp_path / "vllm")
    trt_ms, trt_info = batch_1_itl("trtllm", tmp_path / "trt")
    assert info["serving_engine"] == "vllm" and trt_info["serving_engine"] == "trtllm"
    assert info["cost_model"]["layer_us"] == profile.simulation["vllm"]["layer_us"]
    assert trt_info["cost_model"]["layer_us"] == profile.simulation["trtllm"]["layer_us"]
    assert vllm_ms != trt_ms and "engine vllm" in info["cost_model_source"]


def test_the_flag_sets_the_deployment_and_the_default_is_vllm():
    from backend.cli.flags import deployment_flags, deployment_of
    p = argparse.ArgumentParser()
    deployment_flags(p)
    assert deployment_of(p.parse_args([])).engine == "vllm"
    assert deployment_of(p.parse_args(["--engine", "compiled"])).engine == "compiled"
    assert "Default: vllm" in p.format_help().replace("\n", " ").replace("  ", " ")
    with pytest.raises(SystemExit):
        p.parse_args(["--engine", "other"])


def test_the_fit_gives_a_family_with_enough_figures_its_own_host_terms():
    from backend.sim import published_fit as fp
    from tests.sim.test_fit_published import BASE, figure_like, synthetic as plain

    def synthetic(fig, steps, experts, seed):   # with the parts the +attn-fixed structures price
        trace = plain(fig, steps, experts, seed)
        for key in ("request_layers", "expert_rows"):
            trace.arrays[key] = 0.0 * trace.arrays["layers"]
        return trace
    vllm = [synthetic(figure_like(i, 1.0), 12, 0.0, n) for n, i in enumerate(("F31", "F32", "F34", "F35", "F112"))]
    trt = [synthetic(figure_like(i, 1.0), 12, 0.0, 10 + n) for n, i in enumerate(("F01", "F02", "F04", "F05", "F07"))]
    # the vLLM figures were made with 1.5 ms more per step than the TensorRT-LLM ones
    for trace, extra in [(t, 1.5) for t in vllm] + [(t, 0.0) for t in trt]:
        terms = {**BASE.terms(), "step_ms": BASE.step_ms + extra}
        trace.figure = replace(trace.figure, value=trace.predict(terms))
    # over the shared terms that made the figures, each family's host terms are fitted on its own figures
    fit = fp.Fit("shared+attn-fixed+pcie+efu-by-precision+engine", dict(BASE.terms()), counts={"*": 10})
    fp.fit_engines(fit, vllm + trt)
    assert set(fit.engines) == {"vllm", "trtllm"} and fit.counts["vllm"] == 5
    # a step's fixed cost: its step_ms, its 32 layers' layer_us and its 64 requests' request_ms (collinear here:
    # every synthetic step has 32 layers and 64 requests)
    fixed = {k: t["step_ms"] + t["layer_us"] * 32 / 1e3 + t["request_ms"] * 64 for k, t in fit.engines.items()}
    base = BASE.step_ms + BASE.layer_us * 32 / 1e3 + BASE.request_ms * 64
    assert fixed["trtllm"] == pytest.approx(base, abs=0.2) and fixed["vllm"] == pytest.approx(base + 1.5, abs=0.2)
    # a family under the minimum keeps the shared terms
    few = fp.fit_traces(vllm[:fp.MIN_PER_ENGINE - 1] + trt, "shared+attn-fixed+pcie+efu-by-precision+engine")
    assert "vllm" not in few.engines and few.terms_for(vllm[0].figure)["step_ms"] == few.shared["step_ms"]


def test_the_planner_runs_every_candidate_on_the_engine_it_was_given():
    from backend.cli.main import build_parser
    from backend.planner.candidates import Candidate
    from backend.planner.evaluate import run_config
    from backend.planner.inputs import problem_and_space
    argv = ["plan", "--model", "llama-3.1-8b", "--slo-ttft-ms", "500", "--slo-tpot-ms", "50", "--rate", "2"]
    default, _ = problem_and_space(build_parser().parse_args(argv))
    problem, _ = problem_and_space(build_parser().parse_args(argv + ["--engine", "sglang"]))
    assert default.engine == "vllm" and problem.engine == "sglang"
    config = run_config(Candidate("h100-sxm", "bfloat16", "continuous", 32, 1, 1, 1), problem)
    assert config.deployment.engine == "sglang"
