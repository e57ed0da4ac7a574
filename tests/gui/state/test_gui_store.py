"""The window's run store and live metrics, fed hand-made records (no Qt, no model)."""
import math

import pytest
from tests.fakes.gui_fixtures import step, two_request_run

from backend.events import ModelLoaded, RequestsArrived, SweepPoint
from backend.results.export import read_run, write_run
from backend.records import Phase, RecordBatch, RequestStatus, TokenRecord
from backend.targets.remote.metrics import ServerMetrics
from gui.state.live_metrics import compute
from gui.state.run_store import RunStore


def fed_store() -> RunStore:
    store = RunStore()
    for event in two_request_run():
        store.add_event(event)
    return store


def test_store_keeps_every_step_and_token_exactly():
    store = fed_store()
    assert len(store.steps) == 5
    assert store.step(0)["phase"] is Phase.PREFILL and store.step(4)["phase"] is Phase.DECODE
    assert store.steps.column("num_tokens").tolist() == [100, 50, 2, 2, 1]
    assert len(store.tokens) == 7
    assert store.now_ms() == 21.0


def test_lanes_follow_requests_live_then_take_their_records():
    store = RunStore()
    events = two_request_run()
    for event in events[:-1]:   # everything but the finished records
        store.add_event(event)
    assert store.num_requests == 2
    live = store.lane(store.rows[1])
    assert live["status"] is RequestStatus.DECODING
    assert live["arrival_ms"] == 5.0 and live["first_token_ms"] == 15.0 and live["last_token_ms"] == 19.0
    assert live["output_tokens"] == 3
    # admitted with the step of [10, 15]: known while it runs, and its queue time with it
    assert live["scheduled_ms"] == 10.0 and live["queue_ms"] == 5.0
    assert math.isnan(live["finish_ms"])
    store.add_event(events[-1])
    done = store.lane(store.rows[1])
    assert done["status"] is RequestStatus.FINISHED and done["scheduled_ms"] == 10.0 and done["e2e_ms"] == 14.0


def test_streamed_text_accumulates_and_the_final_text_wins():
    store = RunStore()
    events = two_request_run()
    for event in events[:-1]:
        store.add_event(event)
    assert store.request_text(0) == "Hello there there there"
    assert store.request_text(1) == "Hi!!"
    store.add_event(events[-1])
    assert store.request_text(0) == "Hello there there there"


def test_step_at_finds_the_step_under_a_time():
    store = fed_store()
    assert store.step_at(12.0) == 1
    assert store.step_at(20.5) == 4
    assert store.step_at(-1.0) is None
    assert store.step_at(30.0) is None


def test_live_metrics_match_a_hand_computation():
    m = compute(fed_store())
    assert m.num_requests == 2 and m.num_finished == 2
    assert m.ttft_mean_ms == pytest.approx(10.0)          # (10 - 0) and (15 - 5)
    assert m.tpot_mean_ms == pytest.approx((11 / 3 + 2) / 2)
    assert m.kv_tokens == 157 and m.kv_capacity == 1024
    assert m.output_tokens_per_s == pytest.approx(7 / 0.021)
    # prefill: 150 tokens in 15 ms; decode: 5 tokens in 6 ms
    assert m.prefill_ms_per_token == pytest.approx(0.1)
    assert m.decode_ms_per_token == pytest.approx(6 / 5)
    assert m.cost_ratio == pytest.approx(12.0)
    # where the time goes: mean TTFT + mean time after the first token (3 steps of 11/3 ms, 2 of 2 ms)
    assert m.example_requests == 2 and m.example_output_tokens == pytest.approx(3.5)
    assert m.example_decode_steps == (2, 3)
    assert m.example_decode_ms == pytest.approx((11 + 4) / 2)
    assert m.example_total_ms == pytest.approx(10 + 7.5)
    assert m.decode_share == pytest.approx(7.5 / 17.5)
    assert m.roofline == []   # no ModelLoaded, so no shape to count FLOPs with


def loaded(device_name: str = "Test CPU") -> ModelLoaded:
    from backend.models.shapes import SHAPES
    shape = SHAPES["smollm2-135m"]
    return ModelLoaded("smollm2-135m", "cpu", device_name, "float32", "test", False, shape.num_params(),
                       4 * shape.num_params(), 1024, shape)


def test_live_metrics_place_each_phase_under_the_devices_roof():
    from backend.roofline.profiles import local_profile_path
    from backend.roofline.cost import phase_cost
    store = RunStore()
    store.add_event(loaded())
    for event in two_request_run():
        store.add_event(event)
    # the store's whole-run sums of the two prefill steps and the three decode steps
    prefill, decode = store.roofline[Phase.PREFILL], store.roofline[Phase.DECODE]
    assert (prefill.steps, prefill.tokens, prefill.time_ms) == (2, 150, 15.0)
    assert (decode.steps, decode.tokens, decode.context_tokens, decode.time_ms) == (3, 5, 5, 6.0)
    m = compute(store)
    labels = [label for label, _ in m.roofline]
    assert labels == ["roofline", "prefill", "decode"]
    assert m.roofline[0][1].startswith("generic CPU profile")   # nothing calibrated for "Test CPU"
    # calibrated for this CPU with an absurd bandwidth: the same decode steps come out compute-bound
    local_profile_path().parent.mkdir(parents=True, exist_ok=True)
    local_profile_path().write_text('name = "This machine: Test CPU (2 threads)"\nvendor = "x"\nmemory_gb = 8\n'
                                    'bandwidth_gbs = 1e9\nsource = ""\n[tflops]\nfp32 = 0.1\n')
    m = compute(store)
    text = dict(m.roofline)
    assert text["roofline"].startswith("this machine (calibrated)")
    assert text["decode"].endswith("compute-bound")
    flops = phase_cost(store.model.shape, 4, decode).flops
    assert f"= {100 * flops / 0.006 / 0.1e12:.0f}% of the fp32 matmul peak" in text["decode"]   # 6 ms of decode


def test_live_metrics_of_an_empty_store_are_all_unknown():
    m = compute(RunStore())
    assert m.ttft_mean_ms is None and m.example_total_ms is None and m.kv_tokens is None


def test_export_of_a_partial_run_reads_back(tmp_path):
    store = RunStore()
    events = two_request_run()
    for event in events[:-1]:   # the run failed before any request finished
        store.add_event(event)
    data = store.to_run_data()
    assert [s.step for s in data.steps] == [0, 1, 2, 3, 4]
    assert data.steps[2].phase is Phase.DECODE and isinstance(data.steps[2].num_tokens, int)
    assert {r.request_id for r in data.requests} == {0, 1}
    assert all(r.status is RequestStatus.ERROR for r in data.requests)
    write_run(tmp_path / "partial", data)
    back = read_run(tmp_path / "partial")
    assert len(back.steps) == 5 and len(back.tokens) == 7 and len(back.requests) == 2
    assert back.steps[1].start_ms == 10.0


def test_load_shows_a_saved_run(tmp_path):
    write_run(tmp_path / "run", fed_store().to_run_data())
    store = RunStore()
    store.add_event(RecordBatch(tokens=[TokenRecord(99, 0, 1.0)]))   # left over from an earlier run
    store.load(read_run(tmp_path / "run"))
    assert store.num_requests == 2 and 99 not in store.rows
    assert store.rows == {0: 0, 1: 1}             # rows in arrival order
    assert store.request_text(0) == "Hello there there there"
    assert store.to_run_data().steps[3].start_ms == 17.0


def test_events_besides_records_are_kept():
    store = RunStore()
    store.add_event(ModelLoaded("tiny", "cpu", "CPU", "float32", "random", True, 10, 40, 512, None))
    point = SweepPoint("batch", 4, 2.0, 2000.0, 1.0, 1.0, None, None, 1.0, None, "memory")
    store.add_event(point)
    assert store.info.model == "tiny" and store.sweep_points == [point]
    version = store.version
    store.add_event(object())     # unknown events are ignored
    assert store.version == version


def test_a_hundred_thousand_steps_keep_the_store_within_a_fixed_memory():
    import tracemalloc
    store = RunStore(steps_kept=8192, tokens_kept=32768, bars_kept=4096)
    store.add_event(RequestsArrived(list(range(4)), [0.0] * 4, [16] * 4))
    traced = {}
    tracemalloc.start()
    try:
        for chunk in range(1000):                       # 100,000 steps, 100 per batch, 4 tokens each
            batch = RecordBatch()
            for i in range(chunk * 100, chunk * 100 + 100):
                batch.steps.append(step(i, Phase.DECODE, i * 0.2, 0.2, decode=4, running=4))
                batch.tokens.extend(TokenRecord(r, i, i * 0.2 + 0.2) for r in range(4))
            store.add_batch(batch)
            if chunk + 1 in (500, 1000):
                traced[chunk + 1] = tracemalloc.get_traced_memory()[0]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # holding everything would take 100,000 x 17 x 8 B of steps and 400,000 x 4 x 8 B of tokens (26 MB)
    assert peak < 6 * 2**20
    assert traced[1000] - traced[500] < 256 * 2**10    # flat: the second 50,000 steps added nothing
    assert store.num_steps == 100_000 and len(store.steps) <= 8192 and not store.is_complete
    assert store.steps.column("step")[-1] == 99_999      # the newest steps are exact
    assert store.bars.column("count").sum() == 100_000   # the strip still covers the whole run, merged
    assert store.bars.column("start")[0] == 0.0
    # whole-run figures do not forget the dropped steps
    m = compute(store)
    assert m.decode_ms_per_token == pytest.approx(0.2 / 4)
    assert m.num_running == 4 and store.lane(0)["output_tokens"] == 100_000


def test_older_bars_are_merged_and_described_as_such():
    store = RunStore(steps_kept=64, tokens_kept=64, bars_kept=64)
    store.add_batch(RecordBatch(steps=[step(i, Phase.DECODE, float(i), 1.0, decode=1 + i % 5) for i in range(1000)]))
    assert store.step_at(2.5) is None                    # no longer held one by one
    old = store.bar_at(2.5)
    assert old["count"] > 1 and old["start"] <= 2.5 <= old["end"] and old["tokens"] == 5
    assert store.bar_at(999.5)["count"] == 1 and store.step(store.step_at(999.5))["step"] == 999
    assert store.bar_at(5000.0) is None


def test_export_of_a_long_run_leaves_its_steps_to_the_recorded_files():
    store = RunStore(steps_kept=64, tokens_kept=64)
    store.add_batch(RecordBatch(steps=[step(i, Phase.DECODE, float(i), 1.0, decode=1) for i in range(200)]))
    assert not store.is_complete
    assert store.to_run_data(with_records=False).steps == []
    held = store.to_run_data().steps
    assert 32 <= len(held) <= 64 and held[-1].step == 199


def test_a_remote_run_is_sent_when_it_arrives_and_shows_the_servers_load():
    store = RunStore()
    store.remote = True
    store.add_event(RequestsArrived([0, 1], [0.0, 3.0], [7, 7]))
    store.add_event(RecordBatch(tokens=[TokenRecord(0, 0, 40.0)], text={0: "Hello"}))
    lane = store.lane(0)
    assert lane["scheduled_ms"] == 0.0 and lane["queue_ms"] == 0.0 and lane["first_token_ms"] == 40.0
    m = compute(store)
    assert m.load_source == "client" and (m.num_running, m.num_waiting) == (2, 0)
    store.add_event(ServerMetrics(50.0, running=5.0, waiting=1.0, kv_usage=0.5))
    m = compute(store)
    assert m.load_source == "server" and (m.num_running, m.num_waiting, m.kv_usage) == (5, 1, 0.5)


def test_load_keeps_a_sweeps_points_and_the_folder_it_came_from(tmp_path):
    write_run(tmp_path / "run", fed_store().to_run_data())
    point = SweepPoint("prompt", 64, 2.0, 32000.0, 1.0, 1.0, None, None, None, None, "compute")
    store = RunStore()
    store.load(read_run(tmp_path / "run"), tmp_path / "run", [point])
    assert store.sweep_points == [point] and store.source == tmp_path / "run"
    assert store.is_complete and not store.remote
