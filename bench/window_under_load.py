"""The window under load: the real main window fed synthetic engine steps at 5,000 a second.

    python -m bench.window_under_load [--rate 5000] [--seconds 20] [--batch 8] [--output-len 512] [--readme]

The steps come the way a small model on a GPU makes them: a synthetic engine
(bench.synthetic_engine) in the window's real engine process emits one RecordBatch per
engine step (the step, a token and its text per running request, admissions and finished
requests), paced by the wall clock, and they reach the window through the real path: batched
onto the engine process's pipe, then the worker's coalesced signals and the record streamed
to disk.
`--batch` requests decode together; each finishes after `--output-len` tokens and a new one
arrives and is prefilled in a step of its own.

Measured in the window's thread, second by second:
- backlog: steps the engine process has emitted minus steps the window has taken in;
- frames: paint events of the step strip and of the request lanes;
- event-loop lateness: how late a 10 ms precise timer fires;
- memory: the process's resident set (RSS), whose change after the buffers fill should be flat.
Offscreen (QT_QPA_PLATFORM=offscreen); prints a Markdown table (--readme: into bench/README.md too).
"""
from __future__ import annotations

import argparse
import os
import resource
import sys
import time

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np  # noqa: E402
import pyqtgraph  # noqa: E402
import PySide6  # noqa: E402
from PySide6 import QtCore, QtWidgets  # noqa: E402

from backend.engine.process import EngineProcess  # noqa: E402
from gui.main_window import MainWindow  # noqa: E402
from gui.worker import RunWorker  # noqa: E402
from bench.common import add_readme_flag, measured_line, publish  # noqa: E402
from bench.synthetic_engine import SyntheticEngine  # noqa: E402

TICK_MS = 10            # the responsiveness probe's interval


class PaintCounter(QtCore.QObject):
    def __init__(self, widget: QtWidgets.QWidget):
        super().__init__()
        self.count = 0
        widget.installEventFilter(self)

    def eventFilter(self, obj, event) -> bool:
        if event.type() == QtCore.QEvent.Type.Paint:
            self.count += 1
        return False


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


class Probe:
    """Samples the window once a second and times a 10 ms timer, all in the window's thread."""

    def __init__(self, window: MainWindow, engine: SyntheticEngine):
        self.window, self.engine = window, engine
        self.strip = PaintCounter(window.timeline.viewport())
        self.lanes = PaintCounter(window.lanes.viewport())
        self.ticks: list[float] = []
        self.rows: list[dict] = []
        self.tick_timer = QtCore.QTimer()
        self.tick_timer.setTimerType(QtCore.Qt.TimerType.PreciseTimer)
        self.tick_timer.setInterval(TICK_MS)
        self.tick_timer.timeout.connect(lambda: self.ticks.append(time.perf_counter()))
        self.sample_timer = QtCore.QTimer()
        self.sample_timer.setTimerType(QtCore.Qt.TimerType.PreciseTimer)
        self.sample_timer.setInterval(1000)
        self.sample_timer.timeout.connect(self.sample)
        self._last = None
        self.load_before = 0.0      # the machine's load average as the run starts
        self.window_cpu_s = 0.0     # the window's thread's CPU time during the run
        self._cpu0 = 0.0

    def start(self) -> None:
        self.load_before = os.getloadavg()[0]
        self._cpu0 = time.thread_time()
        self._last = (time.perf_counter(), 0, 0, 0)
        self.tick_timer.start()
        self.sample_timer.start()

    def stop(self) -> None:
        self.tick_timer.stop()
        self.sample_timer.stop()
        self.window_cpu_s = time.thread_time() - self._cpu0

    def sample(self) -> None:
        now = time.perf_counter()
        t_prev, strip_prev, lanes_prev, ticks_prev = self._last
        span = now - t_prev
        ticks = np.array(self.ticks[max(ticks_prev - 1, 0):])
        late = np.maximum(np.diff(ticks) * 1000.0 - TICK_MS, 0.0) if len(ticks) > 1 else np.zeros(1)
        emitted, received = self.engine.emitted, self.window.store.num_steps
        self.rows.append({"t": now - self.engine.t0, "emitted": emitted, "received": received,
                          "backlog": emitted - received, "strip_fps": (self.strip.count - strip_prev) / span,
                          "lanes_fps": (self.lanes.count - lanes_prev) / span,
                          "late_p99": float(np.percentile(late, 99)), "rss": rss_mb()})
        self._last = (now, self.strip.count, self.lanes.count, len(self.ticks))

    def lateness(self, since: float = 0.0, until: float = float("inf")) -> np.ndarray:
        ticks = np.array([t for t in self.ticks if since <= t <= until])
        return np.maximum(np.diff(ticks) * 1000.0 - TICK_MS, 0.0) if len(ticks) > 1 else np.zeros(1)


def machine_extras() -> tuple[str, ...]:
    return (f"PySide6 {PySide6.__version__}", f"pyqtgraph {pyqtgraph.__version__}",
            f"Qt platform {os.environ['QT_QPA_PLATFORM']}")


def report(args, probe: Probe, engine: SyntheticEngine, window: MainWindow) -> str:
    # the seconds while steps were coming; the run's end (the summary, the table's last rows,
    # the record's files closed) is reported on its own line
    rows = [r for r in probe.rows if r["t"] <= args.seconds + 0.5]
    after = probe.rows[len(rows):]
    late = probe.lateness(until=engine.t0 + args.seconds + 0.5)
    quarter = max(len(rows) // 4, 1)
    backlog = [r["backlog"] for r in rows]
    backlog_first, backlog_last = np.mean(backlog[:quarter]), np.mean(backlog[-quarter:])
    strip = [r["strip_fps"] for r in rows[1:]] or [0.0]
    lanes = [r["lanes_fps"] for r in rows[1:]] or [0.0]
    p50, p99 = np.percentile(late, 50), np.percentile(late, 99)
    full = [r for r in rows if r["t"] >= args.seconds / 2]   # the buffers fill in the first half
    rss0, rss1 = full[0]["rss"], full[-1]["rss"]
    growth = rss1 / rss0 - 1
    steps_per_s = engine.emitted / max(rows[-1]["t"], 1e-9)

    def verdict(ok: bool) -> str:
        return "met" if ok else "missed"
    lines = [
        measured_line(*machine_extras()), "",
        f"Load average {probe.load_before:.1f} before the run (other processes sharing the cores).",
        f"{engine.emitted:,} steps in {rows[-1]['t']:.1f} s ({steps_per_s:,.0f} steps/s, batch {args.batch}: "
        f"{steps_per_s * args.batch:,.0f} tokens/s, {window.store.num_requests:,} requests). CPU time: the window's "
        f"thread {probe.window_cpu_s:.1f} s; the engine process's producing thread {engine.cpu_s:.1f} s (making and "
        "sending the records).",
        "",
        "| measure | target | measured | |",
        "|---|---|---|---|",
        f"| backlog of undelivered steps (emitted − taken in) | not growing | max {max(backlog):,} steps "
        f"({max(backlog) / args.rate * 1000:.0f} ms of records); mean {backlog_first:,.0f} in the first quarter, "
        f"{backlog_last:,.0f} in the last | {verdict(backlog_last <= 2 * max(backlog_first, 100))} |",
        f"| plot repaint rate (paint events per second) | ≥ 30 | step strip: mean {np.mean(strip):.1f}, lowest "
        f"second {min(strip):.1f}; request lanes: mean {np.mean(lanes):.1f}, lowest {min(lanes):.1f} | "
        f"{verdict(min(np.mean(strip), np.mean(lanes)) >= 30)} |",
        f"| event loop: lateness of a 10 ms timer | p99 ≤ 50 ms | p50 {p50:.1f} ms, p99 {p99:.1f} ms, max "
        f"{late.max():.1f} ms ({len(late):,} ticks) | {verdict(p99 <= 50)} |",
        f"| memory (RSS) once the buffers are full, {full[0]['t']:.0f} s → {full[-1]['t']:.0f} s | flat within a "
        f"few % | {rss0:,.0f} MB → {rss1:,.0f} MB ({rss1 - rss0:+.1f} MB, {100 * growth:+.1f}%) | "
        f"{verdict(abs(growth) <= 0.03)} |",
        "",
        "| second | steps emitted | taken in | backlog | strip fps | lanes fps | timer p99 late (ms) | RSS (MB) |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(f"| {r['t']:.0f} | {r['emitted']:,} | {r['received']:,} | {r['backlog']:,} | {r['strip_fps']:.1f} "
                     f"| {r['lanes_fps']:.1f} | {r['late_p99']:.1f} | {r['rss']:,.0f} |")
    end = probe.lateness(since=engine.t0 + args.seconds + 0.5)
    if after and end.size:
        lines += ["", f"After the last step, the run's end (its summary, the table's last rows, the record's files "
                      f"closed) held the event loop for up to {end.max():,.0f} ms; RSS {after[-1]['rss']:,.0f} MB."]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=5000.0, help="engine steps per second")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--batch", type=int, default=8, help="requests decoding together")
    parser.add_argument("--output-len", type=int, default=512, help="tokens each request generates")
    add_readme_flag(parser)
    args = parser.parse_args()

    app = QtWidgets.QApplication.instance() or QtWidgets.QApplication(sys.argv[:1])
    engine = SyntheticEngine(args.rate, args.seconds, args.batch, args.output_len)
    window = MainWindow(worker=RunWorker(engine=EngineProcess(target=engine)))
    window.resize(1400, 900)
    window.show()
    probe = Probe(window, engine)
    loop = QtCore.QEventLoop()
    window.runFinished.connect(lambda _result: loop.quit())
    window.runFailed.connect(lambda message: (print(f"error: {message}", file=sys.stderr), loop.quit()))
    probe.start()
    window.start_run()
    loop.exec()
    probe.stop()
    table = report(args, probe, engine, window)
    window.close()
    engine.remove()
    return publish("window_under_load", table, args.readme)


if __name__ == "__main__":
    sys.exit(main())
