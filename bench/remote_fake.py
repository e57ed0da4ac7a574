"""The fake OpenAI server as the remote benchmarks run it: its own process on its own core, its truth, and
the CPU a client's whole process tree spends while the server is busy with it."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import numpy as np

from bench.common import ROOT
SERVER_CORE = 0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def client_cores() -> set[int]:
    """Every core but the server's (all of them on a one-core machine)."""
    cores = os.sched_getaffinity(0)
    return (cores - {SERVER_CORE}) or cores


def p(values, q) -> float:
    return float(np.percentile(values, q)) if len(values) else float("nan")


class Server:
    def __init__(self, gap_ms: float):
        self.port = free_port()
        pin = ["taskset", "-c", str(SERVER_CORE)] if shutil.which("taskset") and len(os.sched_getaffinity(0)) > 1 \
            else []
        self.proc = subprocess.Popen([*pin, sys.executable, str(ROOT / "tests" / "fakes" / "fake_openai.py"),
                                      "--port", str(self.port), "--gap-ms", str(gap_ms)], stdout=subprocess.PIPE,
                                     cwd=ROOT)
        self.proc.stdout.readline()   # "serving on ..."
        self.root = f"http://127.0.0.1:{self.port}"
        self.url = self.root + "/v1"

    def reset(self) -> None:
        httpx.post(self.root + "/fake/reset", timeout=10)

    def log(self) -> dict:
        return httpx.get(self.root + "/fake/log", timeout=120).json()

    def count(self, client: httpx.Client) -> dict:
        return client.get(self.root + "/fake/count", timeout=10).json()

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait()


def truth(log: dict) -> dict:
    """The server's own figures: true gaps between token writes, and read-to-first-write TTFT."""
    reqs = log["requests"]
    gaps = [(b - a) * 1000 for r in reqs for a, b in zip(r["writes_s"], r["writes_s"][1:])]
    ttft = [(r["writes_s"][0] - r["read_s"]) * 1000 for r in reqs if r["writes_s"]]
    means = [(r["writes_s"][-1] - r["writes_s"][0]) * 1000 / (len(r["writes_s"]) - 1) for r in reqs
             if len(r["writes_s"]) > 1]
    return {"gap_p50": p(gaps, 50), "gap_p99": p(gaps, 99), "srv_ttft_p50": p(ttft, 50),
            "mean_gap_p50": p(means, 50), "mean_gap_p99": p(means, 99),
            "srv_requests": len(reqs), "srv_tokens": sum(r["num_tokens"] for r in reqs),
            "srv_conns": log["num_connections"] - 1}   # less the log's own GET


def tree_cpu_s(root: int) -> float:
    """CPU seconds of a process and all its descendants (user + system, with their reaped children's)."""
    tick = os.sysconf("SC_CLK_TCK")
    parents, cpu = {}, {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid = int(entry)
        parents[pid] = int(fields[1])
        cpu[pid] = sum(int(x) for x in fields[11:15]) / tick   # utime stime cutime cstime
    total, stack = 0.0, [root]
    children: dict[int, list[int]] = {}
    for pid, parent in parents.items():
        children.setdefault(parent, []).append(pid)
    while stack:
        pid = stack.pop()
        total += cpu.get(pid, 0.0)
        stack.extend(children.get(pid, []))
    return total


class BusyCPU:
    """A thread on the server's core that samples a client's process-tree CPU when the server reads its first
    request and when it has finished `expected` ones: the client's CPU over the run, without its start and export."""

    def __init__(self, server: Server, expected: int):
        self.server = server
        self.expected = expected
        self.pid: int | None = None
        self.start_s: float | None = None
        self.end_s: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self) -> BusyCPU:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def cpu_s(self) -> float | None:
        return None if self.start_s is None or self.end_s is None else self.end_s - self.start_s

    def _watch(self) -> None:
        try:
            os.sched_setaffinity(0, {SERVER_CORE})   # this thread only (Linux): keep off the client's core
        except OSError:
            pass
        with httpx.Client() as client:
            while not self._stop.wait(0.01):
                if self.pid is None:
                    continue
                count = self.server.count(client)
                if self.start_s is None and count["read"] > 0:
                    self.start_s = tree_cpu_s(self.pid)
                if self.start_s is not None and count["done"] >= self.expected:
                    self.end_s = tree_cpu_s(self.pid)
                    return
