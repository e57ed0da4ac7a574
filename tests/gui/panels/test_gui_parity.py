"""Every sub-command and flag of the command line, and where the window reaches it.

The parser is walked as `main.py` builds it: each (sub-command, flag) must be either REACHED (the
widget or action that sets it, found on a real window; for a flag that goes into a RunConfig, the
window's settings built with it must hold the same value in the same field as the CLI's) or
NOT_REACHED with the reason. A new flag with neither fails the first test, by name.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from typing import Callable


import pytest

from backend.cli.main import build_parser


@dataclass(frozen=True)
class Reach:
    where: str                                   # the widget or action on the window (an attribute path)
    value: str | None = None                     # a value to give both sides; None: existence only
    field: Callable | None = None                # RunConfig -> the value compared
    argv: tuple[str, ...] = ()                   # other flags the value needs on the CLI's side
    prepare: Callable | None = None              # ... and on the window's: prepare(window)


def text(window, where: str, value: str) -> None:
    widget = resolve(window, where)
    if hasattr(widget, "setCurrentText") and not hasattr(widget, "edit"):
        widget.setCurrentText(value)
    elif hasattr(widget, "setValue"):
        widget.setValue(float(value) if "." in value else int(value))
    elif hasattr(widget, "setChecked"):
        widget.setChecked(True)
    elif hasattr(widget, "setPlainText"):
        widget.setPlainText(value)
    else:
        widget.setText(value)


def resolve(window, where: str):
    """`controls.form.fields[load][rate]` -> the object (attributes and [key] lookups)."""
    obj = window
    for part in where.replace("]", "").replace("[", ".").split("."):
        obj = obj[part] if isinstance(obj, dict) else getattr(obj, part)
    return obj


def simulated(w) -> None:
    w.controls.simulate_check.setChecked(True)


def closed(w) -> None:
    w.controls.form.arrival_combo.setCurrentText("closed")


def gamma(w) -> None:
    w.controls.form.arrival_combo.setCurrentText("gamma")


def remote(w) -> None:
    w.controls.select_remote("http://127.0.0.1:9/v1", "served")


def simulated_spec(w) -> None:
    w.controls.simulate_check.setChecked(True)
    w.controls.form.spec_combo.setCurrentText("ngram")


def disaggregated(w) -> None:
    w.controls.form.policy_combo.setCurrentText("disaggregated")
    w.controls.simulate_check.setChecked(True)


REMOTE_ARGV = ("--endpoint", "http://127.0.0.1:9/v1", "--served-model", "served")
LOAD = "controls.form.fields[load]"
# a flag's widget, the same for every sub-command that has it unless REACHED_IN names it for one
REACHED = {
    "--model": Reach("controls.model_combo", "smollm2-135m", lambda c: c.model.name),
    "--device": Reach("controls.device_combo", "cpu", lambda c: c.model.device),
    "--dtype": Reach("controls.dtype_combo", "float32", lambda c: c.model.dtype),
    "--prefill-math": Reach("controls.math_combo", "fp32", lambda c: c.model.prefill_math),
    "--seed": Reach("controls.form.fields[sampling][seed]", "7", lambda c: c.sampling.seed),
    "--temperature": Reach("controls.form.fields[sampling][temperature]", "0.5", lambda c: c.sampling.temperature),
    "--top-p": Reach("controls.form.fields[sampling][top_p]", "0.9", lambda c: c.sampling.top_p),
    "--ignore-eos": Reach("controls.form.ignore_eos", "", lambda c: c.sampling.ignore_eos),
    "--profile": Reach("controls.profile_combo", "h100-sxm", lambda c: c.profile),
    "--repeats": Reach("controls.form.fields[shared][repeats]", "3", lambda c: c.repeats),
    "--threads": Reach("controls.threads_spin", "1", lambda c: c.threads),
    "--simulate": Reach("controls.simulate_check", "", lambda c: c.simulate),
    "--tp": Reach("controls.deployment_box.tp_spin", "3", lambda c: c.deployment.tp, ("--simulate",), simulated),
    "--pp": Reach("controls.deployment_box.pp_spin", "2", lambda c: c.deployment.pp, ("--simulate",), simulated),
    "--dp": Reach("controls.deployment_box.dp_spin", "2", lambda c: c.deployment.dp, ("--simulate",), simulated),
    "--ep": Reach("controls.deployment_box.ep_spin"),   # MoE models only: the box keeps it at 1 for a dense one
    "--router": Reach("controls.deployment_box.router_combo"),
    "--link": Reach("controls.deployment_box.link_combo"),
    "--kv-dtype": Reach("controls.deployment_box.kv_combo", "fp8", lambda c: c.deployment.kv_dtype, ("--simulate",),
                        simulated),
    "--engine": Reach("controls.deployment_box.engine_combo", "trtllm", lambda c: c.deployment.engine, ("--simulate",),
                      simulated),
    "plan --engine": Reach("tools.plan_dialog.view.engine_combo"),
    "--prefill-tp": Reach("controls.deployment_box.prefill_tp_spin", "3", lambda c: c.deployment.prefill_tp,
                          ("--simulate", "--policy", "disaggregated"), disaggregated),
    "--decode-tp": Reach("controls.deployment_box.decode_tp_spin", "3", lambda c: c.deployment.decode_tp,
                         ("--simulate", "--policy", "disaggregated"), disaggregated),
    # a load run's (and every load sweep's) workload page
    "--workload": Reach("controls.form.preset_combo", "closed-loop-8", lambda c: c.workload.name),
    "--policy": Reach("controls.form.policy_combo", "chunked", lambda c: c.engine.policy),
    "--prefill-workers": Reach(f"{LOAD}[prefill_workers]", "2", lambda c: c.engine.prefill_workers,
                               ("--policy", "disaggregated"), disaggregated),
    "--decode-workers": Reach(f"{LOAD}[decode_workers]", "3", lambda c: c.engine.decode_workers,
                              ("--policy", "disaggregated"), disaggregated),
    "--max-batch": Reach(f"{LOAD}[max_batch]", "12", lambda c: c.engine.max_batch),
    "--chunk-tokens": Reach(f"{LOAD}[chunk_tokens]", "96", lambda c: c.engine.chunk_tokens, ("--policy", "chunked"),
                            lambda w: w.controls.form.policy_combo.setCurrentText("chunked")),
    "--kv-tokens": Reach(f"{LOAD}[kv_tokens]", "4096", lambda c: c.engine.kv_tokens),
    "--kv-layout": Reach("controls.form.kv_layout_combo", "slots", lambda c: c.engine.kv_layout),
    "--kv-block-size": Reach(f"{LOAD}[kv_block_size]", "32", lambda c: c.engine.kv_block_size),
    "--prefix-caching": Reach("controls.form.prefix_combo", "off", lambda c: c.engine.prefix_caching),
    "--spec": Reach("controls.form.spec_combo", "ngram", lambda c: c.spec.method),
    "--spec-tokens": Reach("controls.form.fields[spec][num_tokens]", "3", lambda c: c.spec.num_tokens,
                           ("--spec", "ngram"), lambda w: w.controls.form.spec_combo.setCurrentText("ngram")),
    "--spec-ngram-min": Reach("controls.form.fields[spec][ngram_min]", "2", lambda c: c.spec.ngram_min,
                              ("--spec", "ngram"), lambda w: w.controls.form.spec_combo.setCurrentText("ngram")),
    "--spec-ngram-max": Reach("controls.form.fields[spec][ngram_max]", "6", lambda c: c.spec.ngram_max,
                              ("--spec", "ngram"), lambda w: w.controls.form.spec_combo.setCurrentText("ngram")),
    # the simulator's pricing of the guesses, under Simulate while a proposer is chosen
    "--spec-acceptance": Reach("controls.sim_spec_box.acceptance_spin", "0.55", lambda c: c.spec.acceptance,
                               ("--simulate", "--spec", "ngram"), simulated_spec),
    "--spec-draft-cost": Reach("controls.sim_spec_box.draft_cost_spin", "0.25", lambda c: c.spec.draft_cost,
                               ("--simulate", "--spec", "ngram"), simulated_spec),
    "--spec-from": Reach("controls.sim_spec_box.from_edit", "runs/measured", lambda c: c.spec.spec_from,
                         ("--simulate", "--spec", "ngram"), simulated_spec),
    "--requests": Reach(f"{LOAD}[requests]", "5", lambda c: c.workload.num_requests),
    "--arrival": Reach("controls.form.arrival_combo", "constant", lambda c: c.workload.arrival),
    "--rate": Reach(f"{LOAD}[rate]", "3", lambda c: c.workload.rate, ("--arrival", "poisson"),
                    lambda w: w.controls.form.arrival_combo.setCurrentText("poisson")),
    "--burstiness": Reach(f"{LOAD}[burstiness]", "0.5", lambda c: c.workload.burstiness, ("--arrival", "gamma"), gamma),
    "--concurrency": Reach(f"{LOAD}[concurrency]", "3", lambda c: c.workload.concurrency, ("--arrival", "closed"),
                           closed),
    "--think-ms": Reach("controls.form.think_spin", "250", lambda c: c.workload.think_ms,
                        ("--arrival", "closed", "--concurrency", "8"), closed),
    "--turns": Reach(f"{LOAD}[turns]", "3", lambda c: c.workload.turns),
    "--turn-len": Reach(f"{LOAD}[turn_len]", "16:40", lambda c: c.workload.turn_len.describe(), ("--turns", "3"),
                        lambda w: w.controls.form.fields["load"]["turns"].setText("3")),
    "--shared-prefix-len": Reach(f"{LOAD}[shared_prefix_len]", "48", lambda c: c.workload.shared_prefix_len),
    "--trace": Reach(f"{LOAD}[trace]"),   # a file: test_gui_window's trace tests compare it
    "--trace-speed": Reach("controls.form.trace_speed_spin"),
    "--slo-ttft-ms": Reach(f"{LOAD}[slo_ttft_ms]", "500", lambda c: c.slo_ttft_ms),
    "--slo-tpot-ms": Reach(f"{LOAD}[slo_tpot_ms]", "40", lambda c: c.slo_tpot_ms),
    "--endpoint": Reach("controls.url_field", "http://127.0.0.1:9/v1", lambda c: c.endpoint.url,
                        ("--served-model", "served"), lambda w: w.controls.select_remote("", "served")),
    "--served-model": Reach("controls.served_field", "served", lambda c: c.endpoint.model,
                            ("--endpoint", "http://127.0.0.1:9/v1"), lambda w: w.controls.select_remote(
                                "http://127.0.0.1:9/v1", "")),
    "--api-key": Reach("controls.key_edit", "secret", lambda c: c.endpoint.api_key, REMOTE_ARGV, remote),
    "--api": Reach("controls.api_combo", "chat", lambda c: c.endpoint.api, REMOTE_ARGV, remote),
    "--request-timeout": Reach("controls.timeout_field", "30", lambda c: c.endpoint.timeout_s, REMOTE_ARGV, remote),
    "--ray": Reach("controls.ray_field", "127.0.0.1:6379", lambda c: c.endpoint.ray_address, REMOTE_ARGV, remote),
    # the sweeps' axes
    "--batches": Reach("controls.form.fields[sweep-batch][batches]", "1,4", lambda c: c.sweep.batches),
    "--context": Reach("controls.form.fields[sweep-batch][context]", "256", lambda c: c.sweep.context),
    "--lengths": Reach("controls.form.fields[sweep-prompt][lengths]", "16,32", lambda c: c.sweep.lengths),
    "--dtypes": Reach("controls.form.fields[sweep-precision][dtypes]", "float32,q8_0", lambda c: c.sweep.dtypes),
    "--rates": Reach("controls.form.fields[load-sweep][rates]", "0.5,2", lambda c: c.sweep.rates),
    "--concurrencies": Reach("controls.form.fields[load-sweep][concurrencies]", "1,3", lambda c: c.sweep.concurrencies),
    "--total-devices": Reach("controls.form.fields[load-sweep][total_devices]", "4", lambda c: c.sweep.total_devices),
    "--depths": Reach("controls.form.fields[sweep-depth][depths]", "0,256", lambda c: c.sweep.depths),
    # the window's own command line: what it selects when it opens
    "(window) --model": Reach("controls.model_combo"),
    "(window) --profile": Reach("controls.profile_combo"),
    # tools
    "calibrate --device": Reach("controls.device_combo"),
    "calibrate --fit": Reach("controls.fit_button"),
    "models --add-folder": Reach("controls.model_combo"),   # its "Open folder…" entry remembers the folder
    "models --local": Reach("controls.model_combo"),        # the models found on the disk are listed in it
    "example --profile": Reach("tools.example_dialog.profile_combo"),
    "example --no-measure": Reach("tools.example_dialog.measure_check"),
    "example --threads": Reach("controls.threads_spin"),
    "plan --model": Reach("tools.plan_dialog.view.model_edit"),
    "plan --slo-ttft-ms": Reach("tools.plan_dialog.view.ttft_spin"),
    "plan --slo-tpot-ms": Reach("tools.plan_dialog.view.tpot_spin"),
    "plan --rate": Reach("tools.plan_dialog.view.rate_spin"),
    "plan --prompt-len": Reach("tools.plan_dialog.view.prompt_edit"),
    "plan --output-len": Reach("tools.plan_dialog.view.output_edit"),
    "plan --requests": Reach("tools.plan_dialog.view.requests_spin"),
    "plan --attainment": Reach("tools.plan_dialog.view.attainment_spin"),
    "plan --confidence": Reach("tools.plan_dialog.view.confidence_spin"),
    "plan --trace": Reach("tools.plan_dialog.view.trace_edit"),
    "plan --seed": Reach("tools.plan_dialog.view.seed_spin"),
    "plan --precisions": Reach("tools.plan_dialog.view.precisions_edit"),
    "plan --kv-dtypes": Reach("tools.plan_dialog.view.kv_dtypes_edit"),
    "plan --policies": Reach("tools.plan_dialog.view.policies_edit"),
    "plan --max-batches": Reach("tools.plan_dialog.view.max_batches_edit"),
    "plan --top": Reach("tools.plan_dialog.view.top_spin"),
    "plan --out": Reach("tools.plan_dialog.view.export_button"),
    "plan --gpus": Reach("tools.plan_dialog.view.gpus_edit"),
    "plan --max-gpus": Reach("tools.plan_dialog.view.max_gpus_spin"),
    "plan --budget": Reach("tools.plan_dialog.view.budget_spin"),
    "plan --workers": Reach("tools.plan_dialog.view.workers_spin"),
    "plan --spec": Reach("tools.plan_dialog.view.spec_edit"),
    "plan --spec-tokens": Reach("tools.plan_dialog.view.spec_tokens_edit"),
    "plan --spec-acceptance": Reach("tools.plan_dialog.view.spec_pricing.acceptance_spin"),
    "plan --spec-draft-cost": Reach("tools.plan_dialog.view.spec_pricing.draft_cost_spin"),
    "plan --spec-from": Reach("tools.plan_dialog.view.spec_pricing.from_edit"),
    "compare RUN": Reach("add_reference_action"),   # each run added as a reference: every view overlays them
}
# per sub-command, where a flag means something else than the shared table says
REACHED_IN = {
    ("run", "--prompt"): Reach("controls.form.prompt_edit", "hello there", lambda c: c.batch.prompt),
    ("run", "--chat"): Reach("controls.form.chat_check", "", lambda c: c.batch.chat, ("--prompt", "hello")),
    ("run", "--prompt-len"): Reach("controls.form.fields[batch][prompt_len]", "40", lambda c: c.batch.prompt_len,
                                   (), lambda w: w.controls.form.use_synthetic_prompt()),
    ("run", "--output-len"): Reach("controls.form.fields[batch][output_len]", "9", lambda c: c.batch.output_len),
    ("run", "--batch"): Reach("controls.form.fields[batch][batch]", "3", lambda c: c.batch.batch),
    ("sweep batch", "--steps"): Reach("controls.form.fields[sweep-batch][steps]", "4", lambda c: c.sweep.steps),
    ("sweep prompt", "--steps"): Reach("controls.form.fields[sweep-prompt][steps]", "4", lambda c: c.sweep.steps),
    ("sweep precision", "--steps"): Reach("controls.form.fields[sweep-precision][steps]", "4", lambda c: c.sweep.steps),
    ("sweep precision", "--prompt-len"): Reach("controls.form.fields[sweep-precision][prompt_len]", "64",
                                               lambda c: c.sweep.prompt_len),
    ("sweep precision", "--output-len"): Reach("controls.form.fields[sweep-precision][output_len]", "8",
                                               lambda c: c.sweep.output_len),
    ("sweep precision", "--batch"): Reach("controls.form.fields[sweep-precision][batch]", "2", lambda c: c.sweep.batch),
    ("sweep depth", "--steps"): Reach("controls.form.fields[sweep-depth][steps]", "2", lambda c: c.sweep.steps),
    ("sweep depth", "--prompt-len"): Reach("controls.form.fields[sweep-depth][prompt_len]", "64",
                                           lambda c: c.sweep.prompt_len),
    ("sweep depth", "--output-len"): Reach("controls.form.fields[sweep-depth][output_len]", "8",
                                           lambda c: c.sweep.output_len),
}
for command in ("load", "sweep rate", "sweep concurrency", "sweep pd-ratio"):
    for flag, key in (("--prompt-len", "prompt_len"), ("--output-len", "output_len")):
        REACHED_IN[(command, flag)] = Reach(f"{LOAD}[{key}]", "24:48",
                                            lambda c, key=key: getattr(c.workload, key).describe())
# deliberately not in the window, each with why
NOT_REACHED = {
    "--out": "the File menu's Export CSV… writes the run on screen as --out would (and compare's PNGs: "
             "File › Save plot as PNG…)",
    "(window) --install-desktop-entry": "it installs the applications-menu entry for a pipx install and exits: "
                                        "a window is already open when it could be pressed",
    "(window) --uninstall-desktop-entry": "it removes that entry and exits, as the line above",
    "(window) --autostart": "it presses Run once the window opens: the Run button",
    "--duration": "a preset's duration is kept while Requests is empty; the window sets a count, not a duration",
    "--ramp-ms": "the closed loop's default ramp (20 ms per mean output token) is the window's; users start "
                 "staggered",
    "--kv-transport": "auto (shared memory where the system has it, measured the faster here) is the only sensible "
                      "choice on one machine; the pipe is a benchmark's comparison",
    "--kv-link": "simulated disaggregation's KV link: the deployment box's Link is the replica's; the hand-off "
                 "takes the profile's own link",
    "--kv-link-gbs": "as --kv-link: a what-if for the CLI",
    "--decode-math": "an opt-in that moves the logits (int8 activations in the decode products of Q8_0/Q4_x/Q5_x): "
                     "the CLI's, beside bench/int8_fidelity.py's figures, until the window's run form has room",
    "--kv-link-us": "as --kv-link: a what-if for the CLI",
    "--no-server-metrics": "the window always reads a server's /metrics: the live metrics panel shows them",
    "--tokenizer": "the window uses the bundled tokenizer for SmolLM2 servers and estimates otherwise, as the "
                   "CLI does without the flag",
    "--client-workers": "one client process per core, the CLI's default",
    "calibrate --out": "the window writes this machine's profile where the profile list reads it",
    "calibrate --quick": "the window measures fully: a profile it lists should be the careful one",
    "calibrate --runs": "Fit… measures its runs into the cache folder (gui/controllers/tools.calibration_runs_dir)",
    "calibrate --check": "Fit… leaves each of its runs out in turn for the held-out error",
    "calibrate --threads": "the engine process measures with the Threads spin's count",
    "calibrate --from": "a server's profile is fitted from remote run folders, a command-line step; the TOML it writes opens in the window with the GPU profile's Open… button",
    "compare --resamples": "the References panel's comparisons use the CLI's default 1000 seeded resamples",
    "compare --seed": "as --resamples: the bootstrap's default seed",
    "run --kv-layout": "a batch run is one static batch of equal requests, admitted together: its cache's "
                       "layout changes no figure (a load run's page sets it)",
    "run --kv-block-size": "as run --kv-layout: blocks of any size hold the same batch",
    "run --prefix-caching": "as run --kv-layout: requests admitted in one step find nothing cached yet",
    "load --definitions": "a console table of every definition: the window shows the same table without asking, "
                          "under the metrics panel's Definitions toggle, once the run ends (docs/metrics.md)",
    "import FILE|DIR": "import turns another tool's result file into a run folder once, from the command line; the "
                       "window opens the folder it writes (File › Open run, References)",
}
COMMANDS_REACHED = {   # the sub-commands without flags: where the window does what they do
    "doctor": "problems found at start are shown (the display check runs before the window opens)",
    "profiles": "the GPU profile list in the controls, each profile's source as its tooltip",
    "sweep": "the run kinds of the controls",
}
KIND_OF = {"run": "batch", "load": "load", "sweep batch": "sweep-batch", "sweep prompt": "sweep-prompt",
           "sweep precision": "sweep-precision", "sweep rate": "sweep-rate", "sweep concurrency": "sweep-concurrency",
           "sweep pd-ratio": "sweep-pd-ratio", "sweep depth": "sweep-depth"}


def cli_flags() -> dict[str, list[str]]:
    """Every sub-command (as "sweep rate"; the window's own as "(window)") and its flags (a positional as its
    metavar), from the parser main.py builds."""
    found: dict[str, list[str]] = {}

    def walk(parser: argparse.ArgumentParser, path: list[str]) -> None:
        name = " ".join(path) or "(window)"
        found[name] = []
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub, subparser in action.choices.items():
                    walk(subparser, path + [sub])
            elif isinstance(action, argparse._HelpAction):
                continue
            elif action.option_strings:
                found[name].append(action.option_strings[-1])
            else:
                found[name].append(action.metavar or action.dest.upper())
    walk(build_parser(), [])
    return found


def reach_of(command: str, flag: str) -> Reach | str | None:
    """The Reach, the reason it is not reached, or None when neither table names it."""
    for key in ((command, flag),):
        if key in REACHED_IN:
            return REACHED_IN[key]
    for key in (f"{command} {flag}", flag):
        if key in REACHED:
            return REACHED[key]
        if key in NOT_REACHED:
            return NOT_REACHED[key]
    return None


def test_every_cli_flag_is_reached_by_the_window_or_named_with_why():
    flags = cli_flags()
    assert {"run", "load", "sweep rate", "sweep concurrency", "sweep pd-ratio", "calibrate", "example"} <= set(flags)
    missing = [f"{command} {flag}" for command, names in flags.items() for flag in names
               if reach_of(command, flag) is None]
    assert not missing, f"CLI flags with no place in the window and no reason why: {missing}"
    bare = [command for command, names in flags.items() if not names and command not in COMMANDS_REACHED]
    assert not bare, f"sub-commands without flags that the window does not name: {bare}"
    for why in NOT_REACHED.values():
        assert len(why) > 20   # a reason, not a placeholder


def test_a_new_flag_without_a_mapping_fails(monkeypatch):
    """The check above catches what a later change adds to the parser."""
    import backend.cli.main as cli_main
    build = cli_main.build_parser

    def with_new_flag():
        parser = build()
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        sub.choices["run"].add_argument("--brand-new-flag")
        return parser
    monkeypatch.setattr(sys.modules[__name__], "build_parser", with_new_flag)
    with pytest.raises(AssertionError, match="run --brand-new-flag"):
        test_every_cli_flag_is_reached_by_the_window_or_named_with_why()


@pytest.fixture(autouse=True)
def no_thread_left():
    """The GUI tests' leak check (tests/fakes/gui_fixtures.py) without its full collection before each
    test (about half a second each on a loaded machine, most of this file's time): these tests build
    controls and a window whose worker never runs, so no thread but the main one allocates, and the
    automatic collector frees what earlier tests left on that thread as before."""
    from backend.engine.process import live_engines
    from gui.worker import running_threads
    yield
    leaked = running_threads()
    assert not leaked, f"{len(leaked)} worker thread(s) still running after the test"
    engines = live_engines()
    assert not engines, f"engine process(es) {engines} still running after the test"


@pytest.fixture
def parity_window(qtbot):
    from gui.main_window import MainWindow
    from gui.worker import RunWorker
    w = MainWindow(worker=RunWorker(run=lambda config, emit, stop: None))   # nothing runs: settings only
    qtbot.addWidget(w)
    w.tools.open_plan()
    w.tools.open_example()
    yield w
    w.tools.plan_dialog.close()


def test_every_reached_widget_exists_on_the_window(parity_window):
    flags = cli_flags()
    for command, names in flags.items():
        for flag in names:
            reach = reach_of(command, flag)
            if isinstance(reach, Reach):
                assert resolve(parity_window, reach.where) is not None, f"{command} {flag}: {reach.where}"
    assert parity_window.findChild(type(parity_window.run_action), "exampleAction") is not None
    assert parity_window.findChild(type(parity_window.run_action), "planAction") is not None


def cli_config(command: str, argv: list[str]):
    from backend.cli.load import load_config
    from backend.cli.main import run_config
    from backend.cli.tools import sweep_config
    args = build_parser().parse_args(command.split() + argv)
    if command == "run":
        return run_config(args)
    return load_config(args) if command == "load" else sweep_config(args)


class Shim:
    """What `Reach.where` resolves against: the controls dock alone (a whole window per flag is slow)."""

    def __init__(self, controls):
        self.controls = controls


# a simulation uses no device, kernel arithmetic or threads of this machine: the window leaves them out
# under Simulate (threads None, device auto) where the CLI carries the flags unused
SIMULATION_UNUSED = {"--device", "--prefill-math", "--threads"}
# the split sweep last: choosing it ticks Simulate, which the other kinds would then inherit
ORDER = [*(c for c in KIND_OF if c != "sweep pd-ratio"), "sweep pd-ratio"]


def compared() -> list[tuple[str, Reach, list[str]]]:
    """Each flag compared, with the run-producing sub-commands that have it."""
    flags = cli_flags()
    by_flag: dict[tuple[str, Reach], list[str]] = {}
    for command in ORDER:
        for flag in flags[command]:
            reach = reach_of(command, flag)
            if isinstance(reach, Reach) and reach.field is not None:
                by_flag.setdefault((flag, reach), []).append(command)
    return [(flag, reach, commands) for (flag, reach), commands in by_flag.items()]


@pytest.mark.parametrize("flag,reach,commands", compared(), ids=lambda x: x if isinstance(x, str) else "")
def test_the_window_builds_the_same_run_config_field_as_the_flag(qtbot, flag, reach, commands):
    from gui.panels.controls import ControlsPanel
    controls = ControlsPanel()
    qtbot.addWidget(controls)
    w = Shim(controls)
    controls.select_model("smollm2-135m")
    controls.form.preset_combo.setCurrentText("poisson-chat")   # the CLI's default workload
    if reach.prepare is not None:
        reach.prepare(w)
    if reach.where == "controls.profile_combo":
        controls.select_profile(reach.value)
    elif reach.where == "controls.model_combo":
        controls.select_model(reach.value)
    else:
        text(w, reach.where, reach.value)
    checked = 0
    for command in commands:
        simulated = command == "sweep pd-ratio" or "--simulate" in reach.argv
        if simulated and flag in SIMULATION_UNUSED or command == "sweep pd-ratio" and flag == "--simulate":
            continue   # pd-ratio is always simulated
        if command == "sweep pd-ratio" and flag in ("--endpoint", "--served-model", "--api-key", "--api",
                                                    "--request-timeout", "--ray"):
            continue   # a split sweep is simulated: the CLI refuses a server, the window offers none for it
        controls.form.set_kind(KIND_OF[command])
        argv = [*reach.argv, flag] + ([reach.value] if reach.value else [])
        expected = reach.field(cli_config(command, argv))
        got = reach.field(controls.build_config())
        assert got == expected, f"{command} {flag} {reach.value}: window {got!r}, CLI {expected!r}"
        checked += 1
    assert checked or flag in SIMULATION_UNUSED
