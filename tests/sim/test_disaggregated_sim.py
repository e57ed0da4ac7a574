"""The disaggregated policy simulated: the link prices the hand-off, decode devices never prefill, and
the P:D sweep's best split moves toward more prefill devices as prompts grow. No torch needed."""
import math
from dataclasses import replace

import pytest

from backend.config import EngineConfig, ModelChoice, RunConfig, SweepSpec
from backend.events import PDPoint
from backend.sweeps.pd_ratio import mark_best
from backend.sim.links import KVLink, known_links, resolve_link
from backend.errors import InputError
from backend.results.export import read_run
from backend.records import Phase, RequestStatus
from backend.roofline.profiles import find_profile
from backend.session import execute
from backend.workload.spec import apply_overrides, load_workload


def sim_config(prompt_len="2000", output_len="200", rate=30.0, requests=60, prefill=2, decode=2, tmp_path=None,
               max_batch=128, **engine) -> RunConfig:
    spec = apply_overrides(load_workload("poisson-chat"), num_requests=requests, rate=rate, prompt_len=prompt_len,
                           output_len=output_len)
    return RunConfig(mode="load", model=ModelChoice("llama-8b"), profile="h100-sxm", simulate=True,
                     engine=EngineConfig(policy="disaggregated", max_batch=max_batch, prefill_workers=prefill,
                                         decode_workers=decode, **engine),
                     workload=spec, slo_ttft_ms=1000.0, slo_tpot_ms=50.0, out_dir=str(tmp_path) if tmp_path else None)


def test_links_have_sources_and_profiles_have_defaults():
    links = known_links()
    assert {"nvlink4", "rdma-400g", "pcie5-x16"} <= set(links)
    assert all(link.gbs > 0 and link.us >= 0 and link.source for link in links.values())
    assert resolve_link(sim_config(), find_profile("h100-sxm")).name == "nvlink4"
    assert resolve_link(sim_config(), find_profile("h100-pcie")).name == "pcie5-x16"
    over = resolve_link(sim_config(kv_link="rdma-400g", kv_link_us=20.0), find_profile("h100-sxm"))
    assert (over.name, over.gbs, over.us) == ("rdma-400g", 50.0, 20.0)
    assert resolve_link(sim_config(kv_link_gbs=12.5), find_profile("h100-sxm")).gbs == 12.5
    with pytest.raises(InputError, match="--kv-link"):
        resolve_link(sim_config(kv_link="carrier-pigeon"), find_profile("h100-sxm"))


def test_one_request_ttft_is_prefill_plus_link_plus_first_decode(tmp_path):
    """Alone on the devices, a request's transfer is exactly the link's latency plus its bytes at the link's rate."""
    cfg = sim_config(requests=1, prefill=1, decode=1, tmp_path=tmp_path, kv_link="rdma-400g")
    finished = execute(cfg, lambda e: None, lambda: False)
    assert finished.error is None
    run = read_run(tmp_path)
    (r,) = run.requests
    per_token = 2 * 32 * 8 * 128 * 2   # llama-8b: 32 layers, 8 KV heads of 128, bf16
    assert r.kv_bytes == per_token * (r.prompt_tokens - 1)
    assert r.kv_transfer_ms == pytest.approx(10e-3 + r.kv_bytes / 50e9 * 1e3)
    assert r.queue_ms + r.prefill_ms + r.kv_transfer_ms + r.first_decode_ms == pytest.approx(r.ttft_ms)
    decode_steps = [s for s in run.steps if s.worker == "decode-0"]
    assert r.first_decode_ms == pytest.approx(decode_steps[0].duration_ms)
    assert run.info.disaggregated.kv_link["name"] == "rdma-400g"


def test_decode_devices_never_prefill_and_every_request_finishes():
    finished = execute(sim_config(prefill=2, decode=3), lambda e: None, lambda: False)
    steps, requests = finished.data.steps, finished.data.requests
    assert {s.worker for s in steps} == {"prefill-0", "prefill-1", "decode-0", "decode-1", "decode-2"}
    for s in steps:
        if s.worker.startswith("decode"):
            assert s.phase is Phase.DECODE and s.num_prefill_tokens == 0
        else:
            assert s.phase is Phase.PREFILL and s.num_decode_tokens == 0
    assert len(requests) == 60 and all(r.status is RequestStatus.FINISHED for r in requests)
    assert all(r.output_tokens == 200 for r in requests)
    assert finished.summary.num_handed_off == 60


def test_a_slower_link_costs_ttft():
    fast = execute(sim_config(kv_link="nvlink4"), lambda e: None, lambda: False).summary
    slow = execute(sim_config(kv_link="pcie3-x16", kv_link_us=1000.0), lambda e: None, lambda: False).summary
    assert slow.split_kv_transfer_mean_ms > 5 * fast.split_kv_transfer_mean_ms
    assert slow.ttft_mean_ms > fast.ttft_mean_ms


def sweep_pd_ratio(config: RunConfig, total: int, out=None) -> tuple[list[PDPoint], dict]:
    """`sweep pd-ratio` through session, as the CLI and the window run it: (its points, its summary)."""
    points = []
    config = replace(config, mode="sweep-pd-ratio", sweep=SweepSpec("pd-ratio", total_devices=total), out_dir=out)
    finished = execute(config, lambda e: points.append(e) if isinstance(e, PDPoint) else None, lambda: False)
    return points, finished.summary


def best_prefill_devices(prompt_len: str, rate: float) -> int:
    points, summary = sweep_pd_ratio(sim_config(prompt_len=prompt_len, rate=rate, requests=240, max_batch=64), 6)
    assert len(points) == 5 and sum(pt.best for pt in points) == 1
    best = next(pt for pt in points if pt.best)
    assert summary.best_split == best.split
    return best.prefill_devices


def test_a_pd_ratio_sweep_writes_its_points_and_each_splits_records(tmp_path):
    from backend.sweeps.points import read_points
    points, _ = sweep_pd_ratio(sim_config(requests=20), 3, out=str(tmp_path))
    assert read_points(tmp_path) == ("pd-ratio", points)
    assert read_run(tmp_path).config["mode"] == "sweep-pd-ratio"
    for pt in points:   # each split's own run folder
        assert read_run(tmp_path / f"split-{pt.prefill_devices}p{pt.decode_devices}d").summary.num_finished == 20


def test_best_split_moves_toward_prefill_as_prompts_grow():
    short = best_prefill_devices("200", 80.0)
    long = best_prefill_devices("4000", 12.0)
    assert long > short


def test_best_split_among_ties_has_the_most_headroom():
    def point(p, goodput, ttft99, itl99):
        return PDPoint(p, 4 - p, 10, goodput, 1.0, 100.0, 25.0, goodput / 4, 1.0, ttft99, 1.0, itl99, 0.1)
    points = [point(1, 9.99, 900.0, 10.0), point(2, 10.0, 100.0, 12.0), point(3, 7.0, 50.0, 5.0)]
    assert mark_best(points, 1000.0, 50.0) is points[1]   # 1 and 2 tie on goodput; 2 has more headroom
    assert not math.isnan(points[1].goodput_per_device)


def test_sweep_needs_two_devices():
    with pytest.raises(InputError, match="--total-devices"):
        sweep_pd_ratio(sim_config(), 1)
    with pytest.raises(InputError, match="needs --profile"):
        sweep_pd_ratio(replace(sim_config(), profile=None), 4)


def test_link_seconds():
    assert KVLink("x", 10.0, 100.0).seconds(10**9) == pytest.approx(0.1 + 1e-4)
