"""The KV cache tab in a real window: a simulated multi-turn run with paged blocks and prefix caching fills
the map cell for cell with its owners, the requests table shows cached and computed prompt tokens, the
lanes pale the reused share of prefills, the hit rate is drawn over time; the slot layout shows its
reserved, unused room."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from backend.engine.kv_watch import RESERVED
from backend.engine.paged_scheduler import CACHED_FREE, FREE
from gui.views.kv_map import grid_width, map_image, with_gaps
from gui.views.requests_table import COLUMNS
from tests.fakes.gui_fixtures import RUN_TIMEOUT_MS


@pytest.fixture
def window(inprocess_window):
    """The window with its runs in this process: these runs are simulated (no model, no device), and
    an engine process would cost a Python start and torch's import per test for the same events
    (tests/gui/test_gui_engine_process.py checks the window's runs through that process)."""
    return inprocess_window


def simulated_chat(w, requests: str = "3"):
    c = w.controls
    c.select_model("llama-8b")
    c.select_profile("h100-sxm")
    c.simulate_check.setChecked(True)
    c.form.set_kind("load")
    c.form.preset_combo.setCurrentText("multi-turn-chat")
    c.form.fields["load"]["requests"].setText(requests)
    return c.build_config()


def run(qtbot, w, config):
    with qtbot.waitSignal(w.runFinished, timeout=RUN_TIMEOUT_MS) as done:
        assert w.runs.launch(config)
    w.view_tabs.show_view(w.kv_view)
    w.repaint_views()
    return done.args[0]


def test_a_prefix_cached_multi_turn_run_fills_the_map_table_lanes_and_hit_rate(qtbot, window):
    finished = run(qtbot, window, simulated_chat(window))
    assert finished.error is None
    data, kv, view = finished.data, window.store.kv, window.kv_view
    assert data.config["engine"]["kv_layout"] == "paged" and data.config["engine"]["prefix_caching"]
    # every block a cell: the cache's blocks, drawn in a grid that holds them all
    num_blocks = data.info.kv_capacity // data.config["engine"]["kv_block_size"]
    assert kv.num_cells == num_blocks and kv.latest.final
    rows, width = -(-num_blocks // view._width), view._width
    assert width == grid_width(num_blocks, 0) and rows * width >= num_blocks > (rows - 1) * width
    # the run is over: no block is held, the conversations' prefixes stay cached
    assert not (kv.owners >= 0).any() and (kv.owners == CACHED_FREE).sum() > 0
    assert "cached, free" in view.summary.text() and "at the end" in view.summary.text()
    cell = int(np.flatnonzero(kv.owners == CACHED_FREE)[0])   # hovering a cell names it
    assert view.hover_text(cell % width + 0.5, cell // width + 0.5).startswith(f"block {cell} · cached, free")
    # while it ran, the map showed requests holding blocks (some snapshot had owners)
    assert kv.num_snapshots >= 2 and kv.history.column("held").max() > 0
    # the requests table: cached + computed = prompt, and later turns found their conversation cached
    table = window.table.source
    names = [c[0] for c in COLUMNS]
    cached_col, computed_col, prompt_col = names.index("cached"), names.index("computed"), names.index("prompt")
    cells = [[table.data(table.index(r, c)) for c in (prompt_col, cached_col, computed_col)]
             for r in range(table.rowCount())]
    assert len(cells) == len(data.requests)
    assert all(int(p) == int(c) + int(m) for p, c, m in cells)
    shown = sorted(int(c) for _, c, _ in cells)
    assert shown == sorted(r.cached_prompt_tokens for r in data.requests) and shown[-1] > 0
    # the lanes: the reused share of each prefill drawn paler over it, named in the legend
    assert not window.lanes.reused.path().isEmpty() and "reused" in window.lanes.getPlotItem().titleLabel.text
    # over time: the hit rate so far and the held share exist; the hit rate ends near the summary's
    hit = view.curves["hit"]
    assert len(hit.xData) == window.store.num_steps > 0 and hit.yData[-1] > 0
    assert abs(hit.yData[-1] - 100 * data.summary.prefix_hit_rate) < 15
    assert view.curves["cached"].xData is not None and len(view.curves["cached"].xData) > 0
    assert window.view_tabs.tabText(window.view_tabs.currentIndex()) == "KV cache"
    # and on the engine-step strip: the same two lines on its right axis, which names them
    strip = window.timeline
    assert strip.kv.shown and "KV" in strip.kv.axis.labelText and "KV cache held" in strip.kv.axis.toolTip()
    assert np.array_equal(strip.kv.hit.yData, hit.yData[-len(strip.kv.hit.yData):])
    assert len(strip.kv.held.xData) == window.store.num_steps and strip.kv.held.yData.max() > 0


def test_the_slot_layout_shows_each_slots_reserved_unused_room(qtbot, window):
    config = simulated_chat(window, requests="2")
    config = replace(config, engine=replace(config.engine, kv_layout="slots", prefix_caching=False))
    finished = run(qtbot, window, config)
    assert finished.error is None
    kv = window.store.kv
    assert kv.latest.layout == "slots" and kv.latest.cells_per_row > 0
    # some snapshot, mid-run, had a request's slot part written and the rest reserved
    assert kv.history.column("reserved").max() > 0
    assert window.kv_view.curves["reserved"].yData.max() > 0
    assert "reserved, unused" in window.kv_view.map.getPlotItem().titleLabel.text
    assert window.kv_view._width == kv.latest.cells_per_row


def test_a_cells_colour_pales_with_what_it_holds_and_states_have_their_own():
    owners = np.array([3, 3, CACHED_FREE, FREE, RESERVED], dtype=np.int32)
    tokens = np.array([16, 2, 16, 0, 0], dtype=np.uint16)
    image = map_image(owners, tokens, 16, 3)
    assert image.shape == (2, 3, 4) and image[1, 2, 3] == 0 and image[0, 0, 3] == 255
    full, partial = image[0, 0, :3].astype(int), image[0, 1, :3].astype(int)
    assert partial.sum() > full.sum()   # paler: nearer white
    assert len({tuple(image[0, 2, :3]), tuple(image[1, 0, :3]), tuple(image[1, 1, :3])}) == 3


def test_gaps_keep_each_cell_apart():
    image = map_image(np.array([1, 1], dtype=np.int32), np.array([16, 16], dtype=np.uint16), 16, 2)
    big = with_gaps(image, 3)
    assert big.shape == (3, 6, 4)
    assert big[0, :, 3].tolist() == [255, 255, 0, 255, 255, 0] and not big[2, :, 3].any()


def test_an_opened_run_folder_replays_the_maps_it_recorded(qtbot, window, tmp_path):
    from backend.results.kv_file import FILE
    finished = run(qtbot, window, simulated_chat(window, requests="2"))
    assert finished.error is None
    live = window.store.kv
    live_final = (live.owners.copy(), live.latest.time_ms)
    assert window.files.export_csv(str(tmp_path / "chat"))
    assert (tmp_path / "chat" / FILE).is_file()   # Export CSV copies the worker's recording of the maps
    assert window.files.open_run(str(tmp_path / "chat"))
    window.repaint_views()
    kv, view = window.store.kv, window.kv_view
    # the last snapshot is the live run's last, cell for cell
    assert kv.is_replay and kv.latest.final and kv.shown == len(kv.recorded) - 1 >= 1
    assert np.array_equal(kv.owners, live_final[0]) and abs(kv.latest.time_ms - live_final[1]) < 1e-3
    assert not view.empty_label.isVisible() and not view.slider_row.isHidden()
    assert f"recorded snapshot {len(kv.recorded)} of {len(kv.recorded)}" in view.summary.text()
    assert len(view.curves["cached"].xData) == len(kv.recorded)   # the counts over time, from the file
    # the slider picks an earlier snapshot: a map with requests holding blocks, its moment marked below
    busy = int(np.argmax(kv.history.column("held")))
    assert kv.history.column("held")[busy] > 0
    view.slider.setValue(busy)
    assert kv.shown == busy and (kv.owners >= 0).any() and not kv.latest.final
    assert view.moment.isVisible() and view.moment.value() == kv.latest.time_ms
    assert f"recorded snapshot {busy + 1} of" in view.summary.text()


def test_an_old_folder_without_the_map_says_so_in_its_place(qtbot, window, tmp_path):
    from backend.results.kv_file import FILE
    assert run(qtbot, window, simulated_chat(window, requests="1")).error is None
    assert window.files.export_csv(str(tmp_path / "old"))
    (tmp_path / "old" / FILE).unlink()   # as a folder written before kv_map.jsonl
    assert window.files.open_run(str(tmp_path / "old"))
    window.repaint_views()
    kv, view = window.store.kv, window.kv_view
    assert kv.latest is None and not kv.is_replay and view.slider_row.isHidden()
    assert view.empty_label.isVisible()
    assert view.empty_label.textItem.toPlainText() == "This run did not record the cache (its folder is from before kv_map.jsonl)"
    assert len(view.curves["hit"].xData) > 0   # its steps' hit rate still draws


def test_the_strips_kv_lines_stay_away_from_a_run_without_a_cache_and_keep_the_runs_hit_rate(qtbot):
    """A remote run's steps hold no KV capacity: no lines, no right axis. The hit rate so far is the whole
    run's, also once the store has dropped its older steps."""
    from backend.records import Phase, RecordBatch, StepRecord
    from gui.state.run_store import RunStore
    from gui.views.timeline import TimelineView

    def step(i, reused, computed, kv_tokens, capacity):
        return StepRecord.measured(run_id="r", step=i, phase=Phase.PREFILL, prefill_tokens=[computed], num_decode=0,
                                   contexts=[reused + computed], start_ms=10.0 * i, duration_ms=5.0,
                                   kv_tokens=kv_tokens, kv_capacity=capacity, num_reused_tokens=reused)
    store = RunStore(steps_kept=4)
    strip = TimelineView(store)
    qtbot.addWidget(strip)
    store.add_batch(RecordBatch(steps=[step(0, 0, 8, 0, 0)]))
    strip.refresh()
    assert not strip.kv.shown and not strip.kv.view.isVisible() and not strip.kv.axis.labelText and not strip.kv.axis.toolTip()
    store.reset()
    store.add_batch(RecordBatch(steps=[step(i, 16 * (i % 2), 16, 32 * (i + 1), 1024) for i in range(10)]))
    strip.refresh()
    assert strip.kv.shown and "hit" in strip.kv.axis.labelText and "prefix hit rate" in strip.kv.axis.toolTip()
    assert len(store.steps) < 10   # older steps dropped ...
    assert strip.kv.hit.yData[-1] == pytest.approx(100 * 80 / 240)   # ... the hit rate still the run's: 5 x 16 of 240
    assert strip.kv.held.yData[-1] == pytest.approx(100 * 320 / 1024)
