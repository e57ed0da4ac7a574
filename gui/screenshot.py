"""Render the README's screenshot: the window after real runs of the bundled model, offscreen.

    python -m gui.screenshot [docs/screenshot.png]
    python -m gui.screenshot --precision [precision.png]
    python -m gui.screenshot --references [references.png]
    python -m gui.screenshot --simulate [simulate.png]
    python -m gui.screenshot --sizes [sizes]
    python -m gui.screenshot --first-run [first-run.png]
    python -m gui.screenshot --load-sweeps [sweep-rate.png] (and sweep-pd-ratio.png beside it)

It first measures this machine quickly (calibrate --quick, into a temporary configuration
folder: the user's own profile is left alone), so the throughput plot compares the measured
points with this machine's roofline rather than a generic CPU's. Then it runs a short
batch-size sweep (for the throughput plot) and a chat workload through the load driver, and
saves the whole window at 1400 x 900. With --precision it runs a small precision sweep of the
bundled model instead (float32, bfloat16, q8_0, q4_1), for the precision tab. With --references
it runs the chat workload twice, under the static and the continuous policy, saves each run and
adds both as references: the window then compares static against continuous in every view (the
current run on screen is the continuous one, with the static reference's steps and lanes under it).
With --simulate it runs a batch-size sweep of the bundled model (measured, with this machine's cost
model beside it), then "Simulate on this profile": a chat workload of llama-8b on an H100.
With --sizes it runs a short precision sweep and saves the window at 1366 x 768 and 1920 x 1080
(PREFIX-1366x768.png, PREFIX-1920x1080.png): the status bar's message whole at both widths
(docs/window-*.png are the real window's, by tools/window_shots.py).
With --first-run it presses Run on the window's defaults, as on a fresh install (no calibration; one
batch: the default question as a chat message), for the Generated text a newcomer sees first. With --load-sweeps it runs a rate sweep of the
bundled model (a short workload at four arrival rates, SLOs set) and saves it, then a prefill:decode
split sweep of llama-8b over 4 simulated H100s, saved beside it as sweep-pd-ratio.png.
"""
from __future__ import annotations

import os
import sys
import tempfile

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6 import QtCore, QtWidgets  # noqa: E402

from backend.config import RunKind  # noqa: E402
from backend.roofline.calibrate import calibrate, write_profile  # noqa: E402
from backend.roofline.profiles import LOCAL_KEY  # noqa: E402

from gui.main_window import MainWindow  # noqa: E402


def run_and_wait(app: QtWidgets.QApplication, window: MainWindow) -> None:
    loop = QtCore.QEventLoop()
    outcome = []
    window.runFinished.connect(lambda r: (outcome.append(r), loop.quit()))
    window.runFailed.connect(lambda m: (outcome.append(m), loop.quit()))
    window.start_run()
    loop.exec()
    if isinstance(outcome[0], str):
        raise SystemExit(f"error: {outcome[0]}")


def measure_this_machine(folder: str) -> None:
    """This machine's profile, measured quickly, in `folder` as the configuration folder."""
    os.environ["PHASESCOPE_CONFIG_DIR"] = folder
    # a fresh process measures cold (thread pool start-up, first-touch page faults) and reads
    # several times too slow: a throwaway quick run first, then the one that is kept
    calibrate("cpu", quick=True)
    profile = calibrate("cpu", lambda message, _fraction: print(f"calibrating: {message}"), quick=True)
    write_profile(profile)
    print(f"this machine: {profile.tflops} TFLOP/s, {profile.bandwidth_gbs} GB/s")


def main(*args: str) -> int:
    precision, references, simulate = "--precision" in args, "--references" in args, "--simulate" in args
    sizes = "--sizes" in args
    first_run, load_sweeps = "--first-run" in args, "--load-sweeps" in args
    paths = [a for a in args if not a.startswith("--")]
    path = paths[0] if paths else ("precision.png" if precision else "references.png" if references
                                   else "simulate.png" if simulate else "sizes" if sizes
                                   else "first-run.png" if first_run
                                   else "sweep-rate.png" if load_sweeps else "docs/screenshot.png")
    with tempfile.TemporaryDirectory(prefix="phasescope-config-") as folder:
        if first_run:   # as on a fresh install: no measured profile, every setting at its default
            os.environ["PHASESCOPE_CONFIG_DIR"] = folder
            return shoot_first_run(path)
        measure_this_machine(folder)
        if load_sweeps:
            return shoot_load_sweeps(path)
        if references:
            return shoot_references(path)
        if simulate:
            return shoot_simulated(path)
        if sizes:
            return shoot_sizes(path)
        return shoot_precision(path) if precision else shoot(path)


def open_window(model: str = "smollm2-135m", height: int = 900):
    """(the app, a shown window on `model`, CPU and this machine's profile, its run form)."""
    app = QtWidgets.QApplication.instance() or QtWidgets.QApplication(sys.argv[:1])
    window = MainWindow()
    window.resize(1400, height)
    window.show()
    controls = window.controls
    controls.select_model(model)
    controls.device_combo.setCurrentText("cpu")
    controls.select_profile(LOCAL_KEY)   # preselected on a CPU once measured; said here so it cannot drift
    return app, window, controls.form


def set_batch_sweep(form, batches: str, steps: str) -> None:
    form.set_kind(RunKind.SWEEP_BATCH)
    form.fields[RunKind.SWEEP_BATCH]["batches"].setText(batches)
    form.fields[RunKind.SWEEP_BATCH]["context"].setText("256")
    form.fields[RunKind.SWEEP_BATCH]["steps"].setText(steps)


def set_chat_load(form, policy: str, requests: str = "10") -> None:
    """The chat workload preset, 10 requests at 3 a second, at most 4 at once."""
    form.set_kind(RunKind.LOAD)
    form.preset_combo.setCurrentText("poisson-chat")
    form.fields["load"]["requests"].setText(requests)
    form.fields["load"]["rate"].setText("3")
    form.fields["load"]["max_batch"].setText("4")
    form.policy_combo.setCurrentText(policy)


def save(app, window, path: str) -> int:
    window.repaint_views()
    app.processEvents()
    window.grab().save(path)
    window.close()
    print(f"wrote {path}")
    return 0


def shoot(path: str) -> int:
    app, window, form = open_window()
    set_batch_sweep(form, "1,2,4,8,16,32", "4")
    run_and_wait(app, window)
    set_chat_load(form, "continuous")
    run_and_wait(app, window)
    window.select_request(2)
    return save(app, window, path)


def shoot_precision(path: str, dtypes: str = "float32,bfloat16,q8_0,q4_1", prompt_len: str = "128",
                    output_len: str = "16") -> int:
    """The window after a small precision sweep of the bundled model, its precision tab in front."""
    app, window, form = open_window()
    form.set_kind(RunKind.SWEEP_PRECISION)
    f = form.fields[RunKind.SWEEP_PRECISION]
    for key, text in (("dtypes", dtypes), ("prompt_len", prompt_len), ("output_len", output_len), ("steps", "2")):
        f[key].setText(text)
    run_and_wait(app, window)
    return save(app, window, path)


def shoot_sizes(prefix: str) -> int:
    """A short precision sweep (its long "Finished: precision sweep, ..." line), then the window at two sizes."""
    app, window, form = open_window()
    form.set_kind(RunKind.SWEEP_PRECISION)
    f = form.fields[RunKind.SWEEP_PRECISION]
    for key, text in (("dtypes", "float32,q8_0,q4_1"), ("prompt_len", "64"), ("output_len", "8"), ("steps", "2")):
        f[key].setText(text)
    run_and_wait(app, window)
    for width, height in ((1366, 768), (1920, 1080)):
        window.resize(width, height)
        window.repaint_views()
        app.processEvents()
        path = f"{prefix}-{width}x{height}.png"
        window.grab().save(path)
        print(f"wrote {path}; status: {window.statusBar().currentMessage()!r}, "
              f"clipped: {window.statusBar().is_clipped()}")
    window.close()
    return 0


def shoot_references(path: str, model: str = "smollm2-135m", requests: str = "10") -> int:
    """The window comparing the chat workload under the static and the continuous policy, as references."""
    # taller: two more plots (the reference's strip and lanes) share the centre
    app, window, form = open_window(model, height=1150)
    set_batch_sweep(form, "1,2,4,8", "3")   # the throughput plot's own measured points, under the references'
    run_and_wait(app, window)
    with tempfile.TemporaryDirectory(prefix="phasescope-references-") as saved:
        for policy in ("static", "continuous"):
            set_chat_load(form, policy, requests)
            run_and_wait(app, window)
            folder = os.path.join(saved, policy)
            if not window.files.export_csv(folder) or window.reference_runs.add(folder) is None:
                raise SystemExit(f"error: {window.last_error}")
        window.reference_runs.align(window.references.items[0].key)   # static's steps under the current run's
        window.view_tabs.show_view(window.distributions)
        return save(app, window, path)


def shoot_simulated(path: str) -> int:
    """A measured batch sweep beside this machine's cost model, then a chat workload simulated on an H100."""
    app, window, form = open_window()
    set_batch_sweep(form, "1,2,4,8,16", "3")
    run_and_wait(app, window)
    controls = window.controls
    controls.select_model("llama-8b")
    controls.select_profile("h100-sxm")
    controls.simulate_check.setChecked(True)
    set_chat_load(form, "continuous", requests="200")
    form.fields["load"]["rate"].setText("20")
    form.fields["load"]["max_batch"].setText("32")
    run_and_wait(app, window)
    return save(app, window, path)


def shoot_first_run(path: str) -> int:
    """Run pressed on the defaults: what a new user sees first."""
    app = QtWidgets.QApplication.instance() or QtWidgets.QApplication(sys.argv[:1])
    window = MainWindow()
    window.resize(1400, 900)
    window.show()
    run_and_wait(app, window)
    window.select_request(0)
    return save(app, window, path)


def shoot_load_sweeps(path: str) -> int:
    """A rate sweep of the bundled model, then a prefill:decode split sweep of llama-8b on 4 simulated H100s."""
    app, window, form = open_window()
    form.set_kind(RunKind.SWEEP_RATE)
    form.fields["load-sweep"]["rates"].setText("1,2,4,8")
    f = form.fields["load"]
    for key, value in (("requests", "12"), ("prompt_len", "32:128"), ("output_len", "16:48"), ("max_batch", "8"),
                       ("slo_ttft_ms", "1000"), ("slo_tpot_ms", "60")):
        f[key].setText(value)
    run_and_wait(app, window)
    window.repaint_views()
    app.processEvents()
    window.grab().save(path)
    print(f"wrote {path}")
    controls = window.controls
    controls.select_model("llama-8b")
    controls.select_profile("h100-sxm")
    form.set_kind(RunKind.SWEEP_PD_RATIO)   # ticks Simulate
    form.fields["load-sweep"]["total_devices"].setText("4")
    for key, value in (("requests", "200"), ("rate", "8"), ("prompt_len", "1024:3072"), ("output_len", "128:384"),
                       ("max_batch", "64"), ("slo_ttft_ms", "1000"), ("slo_tpot_ms", "40")):
        f[key].setText(value)
    form.arrival_combo.setCurrentText("poisson")
    run_and_wait(app, window)
    return save(app, window, os.path.join(os.path.dirname(path), "sweep-pd-ratio.png"))


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
