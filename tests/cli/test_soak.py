"""The soak test: the load driver on the `tiny` model for ten minutes, watched from outside.

Not in the default run (pyproject's addopts leave out the `soak` marker):

    PHASESCOPE_SOAK_S=600 .venv/bin/pytest -m soak tests/cli/test_soak.py -s

PHASESCOPE_SOAK_S sets the seconds of Poisson arrivals (default 600). The process's resident
memory is sampled every second; after the warm-up it must stay flat: it may grow by no more
than a small fixed allowance plus what the per-request records legitimately add (a few
hundred bytes per request), far less than keeping every step and token would take.
"""
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from backend.results.export import read_run
from backend.records import RequestStatus

ROOT = Path(__file__).resolve().parents[2]
SOAK_S = float(os.environ.get("PHASESCOPE_SOAK_S", "600"))
RATE = 8.0                    # requests per second, Poisson
WARMUP_FRACTION = 0.2         # RSS samples before this share of the run are left out
ALLOWED_MB = 16.0             # fixed allowance for allocator noise after the warm-up
ALLOWED_MB_PER_S = 0.05       # ~6 KB per request at 8 requests/s; every step and token kept would be ~0.2 MB/s


def rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


@pytest.mark.soak
@pytest.mark.timeout(int(SOAK_S) + 600)
@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="samples memory through /proc (Linux)")
def test_the_load_driver_runs_for_minutes_with_flat_memory_and_every_request_accounted_for(tmp_path):
    out = tmp_path / "run"
    args = [sys.executable, "main.py", "load", "--model", "tiny", "--device", "cpu", "--dtype", "float32",
            "--arrival", "poisson", "--rate", str(RATE), "--duration", str(SOAK_S), "--prompt-len", "16:256",
            "--output-len", "8:128", "--max-batch", "16", "--policy", "continuous", "--seed", "11",
            "--out", str(out)]
    samples: list[tuple[float, float]] = []   # (seconds since start, RSS MB)
    with open(tmp_path / "stdout.txt", "w") as stdout, open(tmp_path / "stderr.txt", "w") as stderr:
        proc = subprocess.Popen(args, cwd=ROOT, stdout=stdout, stderr=stderr)
        start = time.monotonic()
        try:
            while proc.poll() is None:
                rss = rss_mb(proc.pid)
                if rss is not None:
                    samples.append((time.monotonic() - start, rss))
                try:
                    proc.wait(timeout=1.0)   # one sample a second until it ends
                except subprocess.TimeoutExpired:
                    pass
        finally:
            proc.kill()
            proc.wait()
    err = (tmp_path / "stderr.txt").read_text()
    assert proc.returncode == 0, err[-3000:]
    assert "Traceback" not in err

    run = read_run(out)
    statuses = {r.status for r in run.requests}
    # every request that arrived finished, or was rejected with its reason
    assert statuses <= {RequestStatus.FINISHED, RequestStatus.REJECTED}
    assert all(r.finish_reason for r in run.requests if r.status is RequestStatus.REJECTED)
    assert sorted(r.request_id for r in run.requests) == list(range(len(run.requests)))
    assert len(run.requests) == int(run.summary.num_requests)
    expected = RATE * SOAK_S
    assert abs(len(run.requests) - expected) < 5 * math.sqrt(expected), len(run.requests)   # Poisson count
    finished = sum(r.status is RequestStatus.FINISHED for r in run.requests)
    assert finished == len(run.requests)   # every drawn request fits the tiny model's slots

    settled = [mb for t, mb in samples if t >= WARMUP_FRACTION * SOAK_S]
    assert len(settled) >= 10, samples
    growth = max(settled) - settled[0]
    allowed = ALLOWED_MB + ALLOWED_MB_PER_S * (samples[-1][0] - WARMUP_FRACTION * SOAK_S)
    print(f"\nsoak: {SOAK_S:.0f} s, {len(run.requests)} requests ({finished} finished), {len(run.steps)} steps; "
          f"{settled[0]:.0f} MB after warm-up, {max(settled):.0f} MB peak "
          f"(growth {growth:.1f} MB, allowed {allowed:.1f} MB)")
    assert growth <= allowed, f"RSS grew {growth:.1f} MB after the warm-up (allowed {allowed:.1f} MB): {samples}"
