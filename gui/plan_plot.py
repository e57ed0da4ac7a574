"""The planner's picture: every simulated deployment's $/1M tokens against its goodput, the Pareto
front drawn over them and the chosen one (the cheapest that meets the SLOs) named.

`draw_plan(item, rows)` draws into any pyqtgraph PlotItem (the plan view's, or an offscreen one);
`python -m gui.plan_plot PLAN_CSV PNG` writes the PNG `plan --out` asks for (the backend starts it
as a child process: it imports no Qt itself). Rows are plan.csv's (backend/planner/report.py).
"""
from __future__ import annotations

import csv
import math
import sys
from pathlib import Path

SIZE = (1100, 680)
GREY, BLUE, ORANGE, RED = "#9a9a9a", "#0072B2", "#E69F00", "#D55E00"   # Okabe-Ito, as plot_export's


def number(row: dict, key: str) -> float:
    try:
        value = float(row.get(key, math.nan))
    except (TypeError, ValueError):
        return math.nan
    return value


def read_plan_csv(path: str | Path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def describe(row: dict) -> str:
    """'2 x h100-sxm fp8 kv-fp8, tp2 pp1 dp1, chunked b128' (the layout as Candidate.layout writes it)."""
    if row.get("policy") == "disaggregated":
        decode_tp = row.get("decode_tp") or row["tp"]
        layout = f"P{row['prefill_workers']}xtp{row['tp']}:D{row['decode_workers']}xtp{decode_tp}"
    else:
        ep = row.get("ep") or "1"
        layout = f"tp{row['tp']} pp{row['pp']} dp{row['dp']}" + (f" ep{ep}" if ep != "1" else "")
    k = row.get("spec_tokens") or "0"   # speculating: its K, on either kind of layout
    layout += f" K{k}" if k != "0" else ""
    kv = " kv-fp8" if row.get("kv_dtype") == "fp8" else ""
    return f"{row['devices']} x {row['gpu']} {row['precision']}{kv}, {layout}, {row['policy']} b{row['max_batch']}"


def chosen_index(rows: list[dict]) -> int | None:
    """The cheapest row that meets the SLOs (more goodput, fewer devices, a smaller batch limit break
    ties, as backend.planner.pareto.cheapest), or None."""
    good = [i for i, r in enumerate(rows) if flag(r, "meets_slo") and math.isfinite(number(r, "usd_per_m_tokens"))]
    if not good:
        return None
    return min(good, key=lambda i: (number(rows[i], "usd_per_m_tokens"), -number(rows[i], "goodput_rps"),
                                    number(rows[i], "devices"), number(rows[i], "max_batch")))


def draw_plan(item, rows: list[dict]) -> None:
    """Scatter, front and annotation into a pyqtgraph PlotItem (cleared first). In log mode the data
    go in as dollars and positions of items (the label) as log10 of them."""
    import pyqtgraph as pg
    item.clear()
    item.setLabel("left", "goodput, requests/s meeting both SLOs")
    item.getAxis("bottom").enableAutoSIPrefix(False)
    item.getAxis("left").enableAutoSIPrefix(False)
    item.showGrid(x=True, y=True, alpha=0.25)
    if item.legend is None:
        item.addLegend(offset=(-10, -10))   # bottom right: the cheap, low-goodput corner is usually empty there
    points = [(number(r, "usd_per_m_tokens"), number(r, "goodput_rps"), r) for r in rows]
    points = [(x, y, r) for x, y, r in points if x > 0 and math.isfinite(x) and math.isfinite(y)]
    costs = [x for x, _, _ in points]
    log = bool(costs) and max(costs) > 4 * min(costs)   # a log axis only where the costs span a wide range
    item.setLogMode(x=log, y=False)
    item.setLabel("bottom", "cost, $ per million tokens (input + output" + (", log scale)" if log else ")"))
    at = math.log10 if log else (lambda v: v)   # an item's position is in the view's (log) coordinates
    for meets, colour, name in ((False, GREY, "misses the SLOs"), (True, BLUE, "meets the SLOs")):
        sel = [(x, y) for x, y, r in points if flag(r, "meets_slo") == meets]
        if sel:
            item.plot([x for x, _ in sel], [y for _, y in sel], pen=None, symbol="o", symbolSize=7,
                      symbolPen=pg.mkPen(colour, width=1), symbolBrush=pg.mkBrush(colour if meets else None),
                      name=f"{name} ({len(sel)})")
    front = sorted((x, y) for x, y, r in points if flag(r, "on_front"))
    if front:
        item.plot([x for x, _ in front], [y for _, y in front], pen=pg.mkPen(ORANGE, width=2.5),
                  symbol="s", symbolSize=10, symbolBrush=ORANGE, symbolPen=pg.mkPen("k", width=1),
                  name=f"Pareto front ({len(front)})")
    best = chosen_index(rows)
    if best is None:
        return
    r = rows[best]
    x, y = number(r, "usd_per_m_tokens"), number(r, "goodput_rps")
    item.plot([x], [y], pen=None, symbol="star", symbolSize=24, symbolBrush=RED, symbolPen=pg.mkPen("k", width=1),
              name="chosen: cheapest that meets the SLOs")
    text = (f"chosen: {describe(r)}\n${x:.3f} per 1M tokens, goodput {y:.2f} req/s\n"
            f"TTFT p90 {number(r, 'ttft_p90_ms'):,.0f} ms, TPOT p90 {number(r, 'tpot_p90_ms'):.1f} ms")
    logs = [at(p[0]) for p in points]
    ys = [p[1] for p in points]
    middle_x = (min(logs) + max(logs)) / 2
    middle_y = (min(ys) + max(ys)) / 2
    # the label leans toward the middle of the plot, so it stays inside it
    # (anchor (0, 0) puts the text's top-left corner at the point; a small margin keeps the star visible)
    anchor = (-0.03 if at(x) <= middle_x else 1.03, -0.25 if y >= middle_y else 1.25)
    label = pg.TextItem(text, color=RED, anchor=anchor)   # (a fill is drawn misplaced by the PNG exporter)
    item.addItem(label)
    label.setPos(at(x), y)


def flag(row: dict, key: str) -> bool:
    value = number(row, key)
    return math.isfinite(value) and value != 0


def render_png(rows: list[dict], path: str | Path, title: str = "") -> Path:
    """The plot of these rows written to `path` offscreen; OSError when it cannot be drawn."""
    from gui.views.plot_export import export_png, offscreen_pyqtgraph
    app, pg = offscreen_pyqtgraph("the PNG")
    widget = pg.PlotWidget()
    widget.resize(*SIZE)
    item = widget.getPlotItem()
    item.setTitle(title or "Simulated deployments: cost against goodput")
    draw_plan(item, rows)
    return export_png(app, item, Path(path), SIZE[0])


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3):
        print("usage: python -m gui.plan_plot PLAN_CSV PNG [TITLE]", file=sys.stderr)
        return 2
    try:
        render_png(read_plan_csv(argv[0]), argv[1], argv[2] if len(argv) == 3 else "")
    except OSError as exc:
        print(str(exc), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
