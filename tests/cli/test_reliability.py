"""Reliability from the command line and the backend: bad input gets one line, faults keep what was measured.

Each bad-input case runs the CLI's entry point (backend.cli.main.main, in this process, which spares a
torch import per case): one line on stderr, exit 2 (bad input) or 1 (a failure during the run), never a
traceback, and nothing already saved touched. A real process per command (run, load, sweep, profiles)
checks the same from outside, and so do the cases that set the environment or a real full disk.
docs/reliability.md lists every case and the test that covers it.
"""
import csv
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from backend.config import BatchRun, EngineConfig, ModelChoice, RunConfig, SamplingConfig, SweepSpec
from backend.errors import RunError
from backend.events import Progress
from backend.results.export import read_run, write_run
from backend.run_info import RunInfo
from backend.summary import Summary
from backend.records import RecordBatch, RequestStatus, RunData
from backend.session import execute
from backend.workload.spec import apply_overrides, load_workload
from tests.cli.test_cli import main_in_process
from tests.fakes.faults import fill_disk, start_load_run

ROOT = Path(__file__).resolve().parents[2]

PROFILE = """\
name = "Test GPU"
vendor = "Acme"
memory_gb = 16
bandwidth_gbs = 500.0
source = "made up for a test"

[tflops]
bf16 = 100.0
"""
WORKLOAD = 'arrival = "poisson"\nrate = 2.0\nnum_requests = 4\nprompt_len = 8\noutput_len = 8\n'


def cli(*args, env=None, timeout=300):
    return subprocess.run([sys.executable, "main.py", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


def assert_one_line(proc, code: int, *words: str) -> str:
    """Exit `code`, no traceback, and besides progress lines ("... loading") one `error:` line with every word."""
    assert proc.returncode == code, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip() and not line.startswith("... ")]
    assert len(lines) == 1 and "error:" in lines[0], proc.stderr
    for word in words:
        assert word in lines[0], proc.stderr
    return lines[0]


# ---- profile and workload TOML ------------------------------------------------------------------

BAD_PROFILES = [
    ("not-toml", "name = [unclosed", "not TOML"),
    ("missing-field", PROFILE.replace('vendor = "Acme"\n', ""), "'vendor'"),
    ("wrong-type", PROFILE.replace("bandwidth_gbs = 500.0", 'bandwidth_gbs = "fast"'), "'bandwidth_gbs'"),
    ("zero", PROFILE.replace("memory_gb = 16", "memory_gb = 0"), "'memory_gb'"),
    ("negative", PROFILE.replace("bf16 = 100.0", "bf16 = -5"), "'tflops.bf16'"),
    ("unknown-key", PROFILE.replace('vendor = "Acme"', 'vendor = "Acme"\ncolour = "green"'), "'colour'"),
]


@pytest.mark.parametrize("case, text, field", BAD_PROFILES, ids=[c[0] for c in BAD_PROFILES])
def test_a_malformed_profile_file_is_refused_naming_file_and_field(tmp_path, case, text, field):
    path = tmp_path / f"{case}.toml"
    path.write_text(text)
    # `run` takes --profile too: it is checked before the model loads, not silently ignored
    assert_one_line(main_in_process("run", "--model", "tiny", "--profile", str(path)), 2, str(path), field)


def test_a_profile_file_that_is_fine_is_taken_by_a_sweep(tmp_path):
    path = tmp_path / "mine.toml"
    path.write_text(PROFILE)
    proc = main_in_process("sweep", "batch", "--model", "tiny", "--batches", "1", "--context", "8", "--steps", "1",
                           "--profile", str(path), "--out", str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "out" / "run.json").read_text())["info"]["profile"] == "mine"


def test_a_broken_measured_profile_is_named_and_the_shipped_ones_still_work(tmp_path):
    config = tmp_path / "config"
    config.mkdir()
    (config / "this-machine.toml").write_text("name = [broken")
    env = {"PHASESCOPE_CONFIG_DIR": str(config)}
    assert_one_line(cli("profiles", env=env), 2, "this-machine.toml", "not TOML")
    proc = cli("run", "--model", "tiny", "--profile", "h100-sxm", "--prompt-len", "4", "--output-len", "2", env=env)
    assert proc.returncode == 0, proc.stderr


BAD_WORKLOADS = [
    ("not-toml", "arrival = \n", "not valid TOML"),
    ("missing-field", WORKLOAD.replace("num_requests = 4\n", ""), "field 'num_requests': missing"),
    ("wrong-type", WORKLOAD.replace("rate = 2.0", 'rate = "fast"'), "field 'rate': expected a number"),
    ("zero", WORKLOAD.replace("rate = 2.0", "rate = 0"), "field 'rate'"),
    ("negative", WORKLOAD.replace("num_requests = 4", "num_requests = -4"), "field 'num_requests'"),
    ("unknown-key", WORKLOAD + "rtae = 1\n", "field 'rtae': unknown key"),
]


@pytest.mark.parametrize("case, text, field", BAD_WORKLOADS, ids=[c[0] for c in BAD_WORKLOADS])
def test_a_malformed_workload_file_is_refused_naming_file_and_field(tmp_path, case, text, field):
    path = tmp_path / f"{case}.toml"
    path.write_text(text)
    assert_one_line(main_in_process("load", "--model", "tiny", "--workload", str(path)), 2, str(path), field)


# ---- models -------------------------------------------------------------------------------------

def tiny_gpt2_folder(folder: Path) -> Path:
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(vocab_size=96, n_positions=64, n_embd=32, n_layer=1, n_head=4)
    transformers.GPT2LMHeadModel(config).save_pretrained(folder)
    return folder


def bad_model(tmp_path: Path, case: str) -> str:
    """A model argument that cannot load, made on disk for `case`."""
    if case == "no-config":
        (tmp_path / "no-config").mkdir()
        return str(tmp_path / "no-config")
    if case == "unsupported-arch":
        folder = tmp_path / "bert"
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps({"architectures": ["BertModel"], "hidden_size": 8}))
        return str(folder)
    if case in ("truncated-gguf", "corrupt-gguf"):
        from backend.loaders.weights import bundled_gguf
        path = tmp_path / f"{case}.gguf"
        if case == "truncated-gguf":
            with open(bundled_gguf(), "rb") as f:
                path.write_bytes(f.read(1 << 20))
        else:
            path.write_bytes(b"this is not a GGUF file" * 64)
        return str(path)
    if case in ("truncated-safetensors", "corrupt-safetensors"):
        folder = tiny_gpt2_folder(tmp_path / case)
        weights = folder / "model.safetensors"
        weights.write_bytes(weights.read_bytes()[:5000] if case == "truncated-safetensors" else b"\x00" * 4096)
        return str(folder)
    if case == "missing-folder":
        return str(tmp_path / "nowhere" / "model")
    if case == "missing-file":
        return str(tmp_path / "nowhere.gguf")
    return "no-such-model"


MODEL_CASES = [
    ("no-config", "no config.json"),
    ("unsupported-arch", "BertModel is not supported; supported: LlamaForCausalLM"),
    ("truncated-gguf", "not a readable GGUF file"),
    ("corrupt-gguf", "not a readable GGUF file"),
    ("truncated-safetensors", "cannot read safetensors file"),
    ("corrupt-safetensors", "cannot read safetensors file"),
    ("missing-folder", "no such file or folder"),
    ("missing-file", "no such file or folder"),
    ("unknown-name", "unknown model 'no-such-model'; known: smollm2-135m, tiny"),
]


@pytest.mark.parametrize("case, words", MODEL_CASES, ids=[c[0] for c in MODEL_CASES])
def test_a_model_that_cannot_load_says_why(tmp_path, case, words):
    name = bad_model(tmp_path, case)
    assert_one_line(main_in_process("run", "--model", name, "--output-len", "2"), 2, words)


@pytest.mark.parametrize("env", [{"HF_HUB_OFFLINE": "1"}, {"HF_ENDPOINT": "http://127.0.0.1:9"}],
                         ids=["HF_HUB_OFFLINE", "unreachable-hub"])
def test_a_hub_id_while_offline_says_so(tmp_path, env):
    # an empty cache, and either offline mode or a hub that refuses connections: never the network
    env = {**env, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_ETAG_TIMEOUT": "2", "HF_HUB_DOWNLOAD_TIMEOUT": "2"}
    line = assert_one_line(cli("run", "--model", "phasescope-test/does-not-exist", env=env), 2,
                           "cannot download phasescope-test/does-not-exist: offline")
    assert "unreachable" in line or "HF_HUB_OFFLINE" in line


# ---- numbers ------------------------------------------------------------------------------------

NUMBERS = [
    # (arguments, words the one line holds): zero, negative, non-numeric and absurdly large values
    (["run", "--batch", "0"], ["--batch", "must be positive"]),
    (["run", "--batch", "-3"], ["--batch", "must be positive"]),
    (["run", "--batch", "many"], ["--batch", "not a whole number"]),
    (["run", "--prompt-len", "-1"], ["--prompt-len", "must be positive"]),
    (["run", "--prompt-len", "1e3"], ["--prompt-len", "not a whole number"]),
    (["run", "--output-len", "1000000000"], ["1000000000 output tokens exceeds tiny's context of 2048"]),
    (["run", "--temperature", "warm"], ["--temperature", "not a number"]),
    (["run", "--top-p", "0"], ["--top-p"]),
    (["load", "--rate", "-1"], ["--rate", "greater than 0"]),
    (["load", "--rate", "fast"], ["--rate", "invalid float value"]),
    (["load", "--rate", "inf"], ["--rate", "greater than 0"]),
    (["load", "--requests", "0"], ["--requests", "at least 1"]),
    (["load", "--requests", "-5"], ["--requests", "at least 1"]),
    (["load", "--duration", "0"], ["--duration", "greater than 0"]),
    (["load", "--max-batch", "0"], ["--max-batch", "positive"]),
    (["load", "--max-batch", "-1"], ["--max-batch", "positive"]),
    (["load", "--kv-tokens", "0"], ["--kv-tokens", "positive"]),
    (["load", "--chunk-tokens", "-4", "--policy", "chunked"], ["--chunk-tokens", "positive"]),
    (["load", "--arrival", "closed", "--concurrency", "0"], ["--concurrency", "at least 1"]),
    (["load", "--arrival", "gamma", "--burstiness", "0"], ["--burstiness", "greater than 0"]),
    (["load", "--output-len", "0"], ["--output-len", "at least 1"]),
    (["load", "--prompt-len", "100000000"], ["--prompt-len", "at most 1048576"]),
    (["load", "--prompt-len", "ten"], ["--prompt-len"]),
    (["sweep", "batch", "--batches", "0"], ["--batches", "positive"]),
    (["sweep", "batch", "--context", "-1"], ["--context", "positive"]),
    (["sweep", "prompt", "--lengths", "100000"], ["prompt of 100000 tokens + 1 output tokens exceeds tiny's context of 2048"]),
]


@pytest.mark.parametrize("args, words", NUMBERS, ids=[" ".join(a) for a, _ in NUMBERS])
def test_a_bad_number_is_refused_with_one_line(args, words):
    assert_one_line(main_in_process(*args, "--model", "tiny"), 2, *words)


@pytest.mark.parametrize("case", [0, 9, 23], ids=["run", "load", "sweep"])
def test_a_bad_number_in_a_real_process_is_one_line_and_exit_2(case):
    args, words = NUMBERS[case]
    assert_one_line(cli(*args, "--model", "tiny"), 2, *words)


@pytest.mark.parametrize("args", [["run", "--batch", "100000000"], ["load", "--max-batch", "100000000"]])
def test_a_batch_that_cannot_fit_says_what_it_needs_and_what_there_is(args):
    line = assert_one_line(main_in_process(*args, "--model", "tiny"), 2, "needs", "GiB is free")
    needs = float(line.split(" needs ")[1].split(" GiB")[0].replace(",", ""))
    free = float(line.split("; ")[1].split(" GiB")[0].replace(",", ""))
    assert needs > free > 0


def test_a_sweep_stops_at_the_first_batch_that_cannot_fit_and_says_why():
    proc = main_in_process("sweep", "batch", "--model", "tiny", "--batches", "100000000", "--context", "8",
                           "--steps", "1")
    assert proc.returncode == 0 and "Traceback" not in proc.stderr
    assert "stopped at batch 100000000: it does not fit in memory" in proc.stdout
    assert "the KV cache for 100,000,000 sequences" in proc.stdout and "GiB is free" in proc.stdout


# ---- prompts ------------------------------------------------------------------------------------

def test_prompts_longer_than_the_context_are_rejected_with_the_reason_in_a_load():
    proc = main_in_process("load", "--model", "tiny", "--prompt-len", "5000", "--requests", "3", "--arrival",
                           "burst", "--output-len", "4")
    assert proc.returncode == 0, proc.stderr
    assert "3 rejected" in proc.stdout
    assert "rejected 3: prompt of 2048 tokens + 4 output tokens exceeds the 2048-token slot" in proc.stdout


def wordlevel_llama_folder(folder: Path) -> Path:
    """A Hugging Face folder: a tiny random Llama and a WordLevel tokenizer that maps unknown words to [UNK]."""
    transformers = pytest.importorskip("transformers")
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    vocab = {"[UNK]": 0, "the": 1, "capital": 2, "of": 3, "france": 4, "is": 5, "paris": 6}
    vocab.update({f"w{i}": i for i in range(len(vocab), 64)})
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.decoder = decoders.WordPiece()   # joins words with spaces
    folder.mkdir(parents=True)
    tokenizer.save(str(folder / "tokenizer.json"))
    config = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
    transformers.LlamaForCausalLM(config).save_pretrained(folder)
    return folder


def batch_config(model="tiny", **batch) -> RunConfig:
    return RunConfig(mode="batch", model=ModelChoice(model, "cpu", "float32"),
                     sampling=SamplingConfig(ignore_eos=True), engine=EngineConfig(policy="static"),
                     batch=BatchRun(**{"prompt_len": 8, "output_len": 4, "batch": 1, **batch}))


def test_text_the_tokenizer_cannot_round_trip_gets_a_note_and_still_runs(tmp_path):
    folder = wordlevel_llama_folder(tmp_path / "wordlevel")
    events = []
    finished = execute(batch_config(str(folder), prompt="the capital of Zanzibar"), events.append, lambda: False)
    notes = [e.message for e in events if isinstance(e, Progress) and e.message.startswith("note:")]
    assert notes == ["note: wordlevel's tokenizer does not round-trip this prompt exactly (characters outside "
                     "its vocabulary are replaced); the model sees the replaced text"]
    assert finished.error is None and finished.data.requests[0].output_tokens == 4
    # text inside the vocabulary round-trips: no note
    events.clear()
    execute(batch_config(str(folder), prompt="the capital of france"), events.append, lambda: False)
    assert not [e for e in events if isinstance(e, Progress) and e.message.startswith("note:")]
    # the CLI prints the note on stderr and runs to the end
    proc = main_in_process("run", "--model", str(folder), "--prompt", "the capital of Zanzibar", "--output-len", "2")
    assert proc.returncode == 0 and "does not round-trip this prompt exactly" in proc.stderr


# ---- export -------------------------------------------------------------------------------------

def test_an_output_folder_that_does_not_exist_is_created(tmp_path):
    out = tmp_path / "a" / "b" / "c"
    proc = main_in_process("run", "--model", "tiny", "--prompt-len", "4", "--output-len", "3", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert len(read_run(out).steps) == 3
    assert not list(out.glob("*.partial")) and not list(out.glob(".*.tmp"))


def test_an_output_folder_without_write_permission_is_refused(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("running as root, where chmod does not stop writes; the path-under-a-file variant "
                    "(test_cli.py::test_unwritable_output_folder_is_refused_and_nothing_is_left) covers it")
    locked = tmp_path / "locked"
    locked.mkdir()
    (locked / "steps.csv").write_text("old run")
    locked.chmod(0o500)
    try:
        assert_one_line(main_in_process("run", "--model", "tiny", "--out", str(locked)), 2,
                        "cannot write to output folder")
    finally:
        locked.chmod(0o700)
    assert [p.name for p in locked.iterdir()] == ["steps.csv"] and (locked / "steps.csv").read_text() == "old run"


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux) for a real ENOSPC")
@pytest.mark.parametrize("output_len", ["4", "2000"], ids=["full-at-the-end", "full-mid-run"])
def test_a_full_disk_ends_the_run_with_one_line_and_no_half_written_file(tmp_path, output_len):
    # The streamed steps file is a link to /dev/full, where every write fails with ENOSPC (a real
    # full disk, not a mock): on the first flush, a second into a long run, or at the end of a short one.
    out = tmp_path / "out"
    out.mkdir()
    (out / "steps.csv").write_text("an earlier run")
    (out / "steps.csv.partial").symlink_to("/dev/full")
    proc = cli("run", "--model", "tiny", "--prompt-len", "16", "--output-len", output_len, "--ignore-eos",
               "--out", str(out))
    assert_one_line(proc, 1, f"cannot write to output folder {out}", "No space left on device")
    assert sorted(p.name for p in out.iterdir()) == ["steps.csv"]   # no partial, no temporary, no new file
    assert (out / "steps.csv").read_text() == "an earlier run"


def test_a_full_disk_during_an_export_leaves_every_saved_file_as_it_was(tmp_path, monkeypatch):
    run = RunData("r1", {"mode": "batch"}, RunInfo(model="tiny"), summary=Summary(ttft_mean_ms=1.0))
    out = tmp_path / "out"
    write_run(out, RunData("r0", {"mode": "batch"}, RunInfo(model="older")))
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    fill_disk(monkeypatch, files_that_fit=4)
    with pytest.raises(RunError, match="No space left on device"):
        write_run(out, run)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before   # the four written first were not renamed


# ---- stop, kill -------------------------------------------------------------------------------

def counting_runner(monkeypatch, on_call):
    """Runner.run wrapped: on_call(n) runs before the n-th step's computation (1-based)."""
    from backend.engine.runner import Runner
    real_run = Runner.run
    calls = {"n": 0}

    def run(self, out):
        calls["n"] += 1
        on_call(calls["n"])
        return real_run(self, out)
    monkeypatch.setattr(Runner, "run", run)
    return calls


def test_stop_pressed_inside_a_step_ends_the_run_after_that_step(monkeypatch):
    stop = threading.Event()
    calls = counting_runner(monkeypatch, lambda n: stop.set() if n == 5 else None)
    finished = execute(batch_config(output_len=200), lambda e: None, stop.is_set)
    assert finished.stopped
    assert calls["n"] == 5                     # the step in flight when Stop came finished; no other began
    assert len(finished.data.steps) == 5 and len(finished.data.tokens) == 5


def test_stop_from_another_thread_at_any_moment_ends_the_run_within_one_step():
    stop = threading.Event()
    seen = {"steps": 0, "at_stop": None}
    ten_steps = threading.Event()

    def emit(event):
        if isinstance(event, RecordBatch) and event.steps:
            seen["steps"] += len(event.steps)
            if seen["steps"] >= 10:
                ten_steps.set()

    def press_stop():
        ten_steps.wait()
        seen["at_stop"] = seen["steps"]
        stop.set()
    presser = threading.Thread(target=press_stop)
    presser.start()
    try:
        finished = execute(batch_config(output_len=1000), emit, stop.is_set)
    finally:
        ten_steps.set()
        presser.join()
    assert finished.stopped
    assert len(finished.data.steps) - seen["at_stop"] <= 1


def test_stop_while_the_engine_waits_for_arrivals_runs_no_further_step():
    spec = apply_overrides(load_workload("poisson-chat"), num_requests=3, arrival="constant", rate=0.01,
                           prompt_len="8", output_len="4")   # one request now, the next in 100 s
    config = RunConfig(mode="load", model=ModelChoice("tiny", "cpu", "float32"),
                       sampling=SamplingConfig(ignore_eos=True), engine=EngineConfig(max_batch=2), workload=spec)
    stop = threading.Event()
    steps = []

    def emit(event):
        if isinstance(event, RecordBatch):
            steps.extend(event.steps)
            if any(r.status is RequestStatus.FINISHED for r in event.requests):
                stop.set()                        # the first request is done; the engine now idles
    finished = execute(config, emit, stop.is_set)
    assert finished.stopped and len(steps) == 4   # one prefill, three decodes: nothing after Stop


def test_stop_during_a_sweep_point_ends_it_within_one_step(monkeypatch):
    from backend.engine.runner import Runner
    real = Runner.run
    stop = threading.Event()
    passes = {"n": 0}

    def run(self, out):
        passes["n"] += 1
        if passes["n"] == 3:
            stop.set()                            # inside the first point's run
        return real(self, out)
    monkeypatch.setattr(Runner, "run", run)
    config = RunConfig(mode="sweep-batch", model=ModelChoice("tiny", "cpu", "float32"),
                       sweep=SweepSpec("batch", batches=[1, 2], context=16, steps=50))
    finished = execute(config, lambda e: None, stop.is_set)
    assert finished.stopped and finished.summary.note == "stopped by user"
    assert passes["n"] == 3 and finished.summary.num_points == 0


def test_a_killed_load_run_leaves_its_records_on_disk_up_to_the_last_second(tmp_path):
    proc = start_load_run(tmp_path, stdout=subprocess.DEVNULL)
    try:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        proc.kill()
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL
    assert not (tmp_path / "steps.csv").exists()      # never finished: only the streamed files
    for name, column in (("steps.csv.partial", "duration_ms"), ("tokens.csv.partial", "time_ms")):
        text = (tmp_path / name).read_text()
        whole_lines = text[:text.rfind("\n") + 1]     # the kill may cut the last line short
        rows = list(csv.DictReader(whole_lines.splitlines()))
        assert rows and all(float(r[column]) >= 0 for r in rows), name
