"""What watching costs: the same batch in the real window and headless, alternately.

    python -m bench.window_vs_headless [--repeats 3] [--threads N] [--cases smollm2-b1,smollm2-b8,tiny-b1] [--readme]

Each case (bundled SmolLM2 at batch 1 and 8, and `tiny`; 128-token synthetic prompt, 128
output tokens, --ignore-eos, CPU, float32) runs `repeats` times on each side, the sides
alternating (W H, H W, W H, ...) so that drift in the host's bandwidth falls on both:

- window: the real app in its own process, under `app.exec()` and driven by timers only
  (PySide6's QTest.qWait and pytest-qt's waits hold the GIL while they sleep); the run goes
  to its engine process as a user's would, and its steps are read from the window's record;
- headless: `main.py run ... --threads N --out DIR`, the reference, its steps from steps.csv.

Both use the same thread count: the window's default (all cores but one) unless --threads.
Prints each run's decode-step median and prefill time, the window/headless ratios of the
medians over repeats, and the window's main-thread and the engine's CPU use, as Markdown
(--readme: into bench/README.md too).
Under Xvfb for a real window (DISPLAY set), else offscreen.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import ROOT, add_readme_flag, in_order, log, measured_line, publish
CASES = {"smollm2-b1": ("smollm2-135m", 1), "smollm2-b8": ("smollm2-135m", 8), "tiny-b1": ("tiny", 1)}
PROMPT, OUTPUT = 128, 128


def step_figures(steps_csv: Path) -> tuple[float, float]:
    """(decode-step median, prefill time) in ms from a steps.csv."""
    with open(steps_csv, newline="") as f:
        rows = list(csv.DictReader(f))
    decode = [float(r["duration_ms"]) for r in rows if r["phase"] == "decode"]
    prefill = sum(float(r["duration_ms"]) for r in rows if r["phase"] == "prefill")
    return statistics.median(decode), prefill


def headless(model: str, batch: int, threads: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="phasescope-bench-") as out:
        cmd = [sys.executable, str(ROOT / "main.py"), "run", "--model", model, "--device", "cpu", "--dtype", "float32",
               "--prompt-len", str(PROMPT), "--output-len", str(OUTPUT), "--batch", str(batch), "--ignore-eos",
               "--threads", str(threads), "--out", out]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
        decode, prefill = step_figures(Path(out) / "steps.csv")
    return {"decode_ms": decode, "prefill_ms": prefill}


def windowed(model: str, batch: int, threads: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="phasescope-bench-") as out:
        result = Path(out) / "result.json"
        cmd = [sys.executable, "-m", "bench.window_vs_headless", "--one-window", model, str(batch), str(threads),
               str(result)]
        subprocess.run(cmd, check=True, cwd=ROOT)
        return json.loads(result.read_text())


def one_window(model: str, batch: int, threads: int, result_path: str) -> int:
    """In its own process: open the window, run once, write the figures, quit. Timers only."""
    os.environ.setdefault("QT_QPA_PLATFORM", "xcb" if os.environ.get("DISPLAY") else "offscreen")
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")   # as main.py sets it
    from PySide6 import QtCore, QtWidgets
    from backend.events import EngineStatus, Progress
    from gui.main_window import MainWindow

    app = QtWidgets.QApplication(sys.argv[:1])
    window = MainWindow()
    window.resize(1400, 900)
    window.show()
    c = window.controls
    c.select_model(model)
    c.device_combo.setCurrentText("cpu")
    c.dtype_combo.setCurrentText("float32")
    c.threads_spin.setValue(threads)
    c.form.set_kind("batch")
    # random prompt tokens, as headless `run --prompt-len` takes: the form's default is its English prompt in the
    # chat template (about 43 tokens), which made the window's prefill look 0.55x (batch 1) and 0.35x (batch 8)
    # of the headless one's 128 tokens
    c.form.synthetic_check.setChecked(True)
    fields = c.form.fields["batch"]
    fields["prompt_len"].setText(str(PROMPT))
    fields["output_len"].setText(str(OUTPUT))
    fields["batch"].setText(str(batch))
    c.form.ignore_eos.setChecked(True)
    class Probe(QtCore.QObject):
        """Lives in the window's thread, so its slots run there (a plain function connected to
        the worker's signals would run in the worker's thread)."""

        def __init__(self):
            super().__init__()
            self.start = None               # (monotonic, the window thread's CPU time) when the run started
            self.engine: list[EngineStatus] = []

        @QtCore.Slot(object)
        def on_event(self, event) -> None:
            if isinstance(event, Progress) and event.message == "running":
                self.start = (time.monotonic(), time.thread_time())
            elif isinstance(event, EngineStatus):
                self.engine.append(event)

        @QtCore.Slot(object)
        def on_finished(self, _result) -> None:
            wall, cpu = time.monotonic() - self.start[0], time.thread_time() - self.start[1]
            decode, prefill = step_figures(window.store.source / "steps.csv")
            before = [e for e in self.engine if e.clock_s < self.start[0]]
            busy = before[-1:] + [e for e in self.engine if e.clock_s >= self.start[0]]
            share = busy[-1].cpu_share_since(busy[0]) if len(busy) > 1 else None
            engine_share = float("nan") if share is None else share
            Path(result_path).write_text(json.dumps({
                "decode_ms": decode, "prefill_ms": prefill, "window_cpu": cpu / wall, "engine_cpu": engine_share,
                "engine_pid": self.engine[-1].pid if self.engine else None, "window_pid": os.getpid()}))
            QtCore.QTimer.singleShot(0, window.close)
            QtCore.QTimer.singleShot(0, app.quit)

    probe = Probe()
    window.worker.event.connect(probe.on_event)
    window.runFinished.connect(probe.on_finished)   # after the window has taken the run's folder in
    QtCore.QTimer.singleShot(500, window.start_run)   # once the window has painted its first frame
    return app.exec()


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--one-window":
        model, batch, threads, result = sys.argv[2:6]
        return one_window(model, int(batch), int(threads), result)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=max(1, len(os.sched_getaffinity(0)) - 1))
    parser.add_argument("--cases", default=",".join(CASES))
    add_readme_flag(parser)
    args = parser.parse_args()
    display = "Xvfb/X11 (DISPLAY=" + os.environ["DISPLAY"] + ")" if os.environ.get("DISPLAY") else "offscreen"
    lines = [measured_line(f"{args.threads} engine thread(s)", f"window on {display}"), "",
             f"{PROMPT}-token prompt, {OUTPUT} output tokens, --ignore-eos, float32", "",
             "| case | run | side | decode step median | prefill | window thread CPU | engine CPU |",
             "|---|---:|---|---:|---:|---:|---:|"]
    summary = []
    for name in args.cases.split(","):
        model, batch = CASES[name]
        results = {"window": [], "headless": []}
        for i in range(args.repeats):
            for side in in_order(i, ("window", "headless")):
                r = windowed(model, batch, args.threads) if side == "window" else headless(model, batch, args.threads)
                results[side].append(r)
                cpu = (f"{100 * r['window_cpu']:.0f}% of a core", f"{100 * r['engine_cpu']:.0f}% of a core") \
                    if side == "window" else ("—", "—")
                lines.append(f"| {name} | {i + 1} | {side} | {r['decode_ms']:.2f} ms | {r['prefill_ms']:.1f} ms | "
                             f"{cpu[0]} | {cpu[1]} |")
                log(lines[-1])
        med = {side: {k: statistics.median(r[k] for r in rs) for k in ("decode_ms", "prefill_ms")}
               for side, rs in results.items()}
        summary.append((name, med))
    lines += ["", "| case | decode: window / headless | prefill: window / headless | target |", "|---|---:|---:|---|"]
    for name, med in summary:
        d = med["window"]["decode_ms"] / med["headless"]["decode_ms"]
        p = med["window"]["prefill_ms"] / med["headless"]["prefill_ms"]
        lines.append(f"| {name} | {d:.3f} ({med['window']['decode_ms']:.2f} / {med['headless']['decode_ms']:.2f} ms) | "
                     f"{p:.3f} ({med['window']['prefill_ms']:.1f} / {med['headless']['prefill_ms']:.1f} ms) | "
                     f"≤ 1.05: {'met' if max(d, p) <= 1.05 else 'missed'} |")
    return publish("window_vs_headless", lines, args.readme)


if __name__ == "__main__":
    sys.exit(main())
