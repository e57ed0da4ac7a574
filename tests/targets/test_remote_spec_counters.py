"""A remote run's speculative decoding as the server counts it on /metrics: vLLM's verification, guess and
kept-guess counters (per position too) as per-run figures, SGLang's accept-length gauge, against the fake
server (tests/fakes/fake_metrics.py), whose every decode step verifies K guesses and keeps chunk - 1."""
import io

import pytest

from backend.cli.report import print_run
from backend.config import RemoteEndpoint, RunConfig
from backend.records import RequestStatus
from backend.results.export import read_run
from backend.summary import Summary
from backend.targets.remote.metrics import server_metrics
from backend.targets.remote.spec_counters import server_spec_figures, server_spec_line
from backend.targets.remote.target import run_remote
from backend.workload.spec import workload_from_dict
from tests.fakes.fake_openai import Behaviour, FakeOpenAI

VLLM_PAGE = """# TYPE vllm:spec_decode_num_drafts counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 10.0
vllm:spec_decode_num_drafts_total{engine="1",model_name="m"} 10.0
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 60.0
vllm:spec_decode_num_draft_tokens_total{engine="1",model_name="m"} 60.0
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 30.0
vllm:spec_decode_num_accepted_tokens_total{engine="1",model_name="m"} 20.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 9.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="m",position="0"} 8.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} 7.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="m",position="1"} 5.0
"""


def test_vllm_counters_add_over_engine_cores_by_position():
    reading = server_metrics(VLLM_PAGE, 0.0)
    assert reading.engine == "vllm"
    assert reading.counters["spec_drafts"] == 20 and reading.counters["spec_accepted_tokens"] == 50
    assert (reading.counters["spec_accepted_pos0"], reading.counters["spec_accepted_pos1"]) == (17, 12)
    assert "spec_accepted_pos2" not in reading.counters   # not exported: not read as 0
    figures = server_spec_figures(reading.counters.get)
    assert figures["server_spec_mean_acceptance_length"] == pytest.approx(1 + 50 / 20)
    assert figures["server_spec_acceptance_rate"] == pytest.approx(50 / 120)
    assert figures["server_spec_acceptance_by_position"] == "0.850,0.600"


def test_no_verification_is_no_figure():
    assert server_spec_figures({"spec_drafts": 0.0}.get) == {}
    assert server_spec_figures({}.get) == {}
    assert server_spec_line(Summary(), "vllm") is None


def drive(server, out, num_requests=8):
    spec = workload_from_dict({"arrival": "poisson", "rate": 200.0, "num_requests": num_requests, "prompt_len": 16,
                               "output_len": 11, "seed": 0}, "test")
    config = RunConfig(mode="load", workload=spec, out_dir=str(out),
                       endpoint=RemoteEndpoint(server.url, "fake", None, "completions", 30.0, True, None, 1))
    finished = run_remote(config, lambda e: None, lambda: False)
    assert finished.error is None
    assert all(r.status is RequestStatus.FINISHED and r.output_tokens == 11 for r in finished.data.requests)
    return finished


def spec_line(finished) -> str:
    buf = io.StringIO()
    print_run(RunConfig(mode="load"), finished, out=buf)
    return next(line for line in buf.getvalue().splitlines() if line.startswith("spec"))


def test_vllm_speculation_per_run_against_the_fake_server(tmp_path):
    """11 tokens a request in chunks of 3: a first write, then 3 verifications of K = 4 keeping 2, 2 and 1
    (the last chunk holds the 2 tokens left): per request 3 verifications, 5 kept of 12 guesses."""
    with FakeOpenAI(Behaviour(gap_ms=2.0, metrics="vllm", chunk_tokens=3, spec_tokens=4)) as server:
        first = drive(server, tmp_path / "a")
        second = drive(server, tmp_path / "b", num_requests=4)   # counts only its own: the counters go on
    for finished, n in ((first, 8), (second, 4)):
        s = finished.summary
        assert (s.server_spec_drafts, s.server_spec_draft_tokens, s.server_spec_accepted_tokens) == (3 * n, 12 * n, 5 * n)
        assert s.server_spec_mean_acceptance_length == pytest.approx(1 + 5 / 3)
        assert s.server_spec_acceptance_rate == pytest.approx(5 / 12)
        assert s.server_spec_acceptance_by_position == "1.000,0.667,0.000,0.000"
    back = read_run(tmp_path / "b").summary
    assert back.server_spec_acceptance_by_position == "1.000,0.667,0.000,0.000"
    line = spec_line(second)
    assert "server /metrics (vllm" in line and "12 verifications" in line and "2.67 tokens a verification" in line


def test_sglang_accept_length_gauge_against_the_fake_server(tmp_path):
    with FakeOpenAI(Behaviour(gap_ms=2.0, metrics="sglang", chunk_tokens=3, spec_tokens=4)) as server:
        finished = drive(server, tmp_path / "a")
    s = finished.summary
    assert s.server_spec_drafts is None
    # every verification emits 3 tokens but each request's last emits 2: the running mean is between
    assert 2.0 < s.server_spec_accept_length_mean <= s.server_spec_accept_length_max <= 3.0
    assert "accept length gauge" in spec_line(finished)
