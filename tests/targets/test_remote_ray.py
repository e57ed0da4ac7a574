"""`load --endpoint --ray`: the client workers as actors on a real Ray cluster, started by the test on
loopback (a head with 2 CPUs), against the fake server; one worker killed mid-run."""
import argparse
import contextlib
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from backend.config import RemoteEndpoint, RunConfig
from backend.errors import InputError
from backend.events import RequestsArrived
from backend.records import RequestStatus
from backend.targets.remote.ray_pool import measure_offset
from backend.targets.remote.target import add_remote_flags, endpoint_from_args, run_remote
from backend.workload.spec import workload_from_dict
from tests.fakes.fake_openai import Behaviour, FakeOpenAI
from tests.fakes.llama_server import free_port

needs_ray = pytest.mark.skipif(importlib.util.find_spec("ray") is None,
                               reason="Ray is not installed (pip install 'phasescope[ray]')")


def _ray_cli() -> str:
    beside = Path(sys.executable).with_name("ray")
    return str(beside) if beside.exists() else shutil.which("ray")


def session_processes(sid: int) -> dict[int, str]:
    """The live processes of session `sid` (Linux /proc), pid -> name: a Ray head and everything it started."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            name, rest = (entry / "stat").read_text().rsplit(")", 1)
        except OSError:
            continue   # it ended while we looked
        state, _ppid, _pgrp, session = rest.split()[:4]
        if int(session) == sid and state != "Z":
            found[int(entry.name)] = name.split("(", 1)[1]
    return found


def end_session(sid: int, grace_s: float = 5.0) -> dict[int, str]:
    """SIGTERM every process of session `sid`, SIGKILL those left after `grace_s`; what was still alive
    after that ({} when all ended). Nothing outside the session is touched (`ray stop` would end every
    Ray process on the machine, another user's cluster included)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in session_processes(sid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + grace_s
        while session_processes(sid) and time.monotonic() < deadline:
            time.sleep(0.1)   # processes of another parent: there is nothing to wait on but /proc
    return session_processes(sid)


@pytest.fixture(scope="module")
def ray_head(tmp_path_factory):
    """A Ray head on 127.0.0.1 with 2 CPUs and no dashboard, in a short temporary folder (its socket paths
    must stay under the kernel's 107 characters). `ray start --block` in a session of its own: every
    process of the cluster is in that session, and the teardown ends those and only those (checked
    against a bystander named like Ray's own raylet, which `ray stop` would have killed)."""
    if not Path("/proc").is_dir():
        pytest.skip("ending only the test's own Ray processes needs Linux's /proc")
    port, temp = free_port(), tempfile.mkdtemp(prefix="ray", dir="/tmp")
    log_path = tmp_path_factory.mktemp("ray") / "head.log"
    bystander_exe = log_path.with_name("raylet")   # another cluster's raylet, as `ray stop` sees it: by name
    shutil.copy(shutil.which("sleep"), bystander_exe)
    with open(log_path, "wb") as log:
        head = subprocess.Popen([_ray_cli(), "start", "--head", "--block", "--node-ip-address", "127.0.0.1",
                                 "--port", str(port), "--num-cpus", "2", "--include-dashboard=false",
                                 "--disable-usage-stats", "--temp-dir", temp,
                                 # a port of its own rather than Ray's fixed default, which another cluster may hold
                                 "--dashboard-agent-listen-port", str(free_port())],
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})
    bystander = subprocess.Popen([str(bystander_exe), "600"], start_new_session=True)
    try:
        deadline = time.monotonic() + 120.0
        while "Ray runtime started" not in log_path.read_text(errors="replace"):
            assert head.poll() is None, f"ray start ended with {head.returncode}: {log_path.read_text()[-2000:]}"
            assert time.monotonic() < deadline, f"the Ray head did not start in 120 s: {log_path.read_text()[-2000:]}"
            time.sleep(0.2)   # a process's log: there is no signal to wait on
        started = session_processes(head.pid)
        assert {"gcs_server", "raylet"} <= set(started.values()), started   # the cluster lives in its session
        yield f"127.0.0.1:{port}"
    finally:
        left = end_session(head.pid)
        head.wait(timeout=30)
        alive = bystander.poll() is None
        bystander.kill()
        bystander.wait()
        shutil.rmtree(temp, ignore_errors=True)
    assert not left, f"Ray processes left running after the teardown: {left}"
    assert alive, "the teardown ended a process it did not start"


def workload(num_requests):
    return workload_from_dict({"arrival": "poisson", "rate": 20.0, "num_requests": num_requests, "prompt_len": 16,
                               "output_len": 40, "prompt_source": "synthetic", "seed": 1}, "test")


def drive(address, server, spec, out, on_event=lambda e: None):
    endpoint = RemoteEndpoint(server.url, "fake", None, "completions", 30.0, False, None, 2, address)
    config = RunConfig(mode="load", workload=spec, out_dir=str(out), endpoint=endpoint)
    return run_remote(config, on_event, lambda: False)


def assert_one_clock(finished):
    """Each request's times in order, and every token within its request's span, on the coordinator's clock."""
    spans = {r.request_id: r for r in finished.data.requests}
    for r in finished.data.requests:
        if r.status is RequestStatus.FINISHED:
            assert r.arrival_ms <= r.first_token_ms <= r.finish_ms
    for t in finished.data.tokens:
        r = spans[t.request_id]
        assert r.arrival_ms <= t.time_ms <= r.finish_ms


def assert_offsets(info):
    workers = info.remote.ray["workers"]
    assert [w["worker"] for w in workers] == [0, 1]
    for w in workers:   # one host: the true offset is 0, which the measurement must bracket
        assert w["uncertainty_ms"] > 0 and abs(w["offset_ms"]) <= w["uncertainty_ms"] + 1e-6


@needs_ray
def test_two_actors_merge_into_one_stream(ray_head, tmp_path):
    with FakeOpenAI(Behaviour(gap_ms=2.0)) as server:
        finished = drive(ray_head, server, workload(24), tmp_path)
    assert finished.error is None
    records = finished.data.requests
    assert sorted(r.request_id for r in records) == list(range(24))
    assert all(r.status is RequestStatus.FINISHED and r.output_tokens == 40 for r in records)
    assert len(finished.data.tokens) == 24 * 40 and len(server.log) == 24
    assert_one_clock(finished)
    assert_offsets(finished.data.info)
    assert finished.data.config["remote"]["ray"] == ray_head
    assert '"offset_ms"' in (tmp_path / "run.json").read_text()


@needs_ray
def test_a_killed_worker_fails_its_requests_and_the_run_goes_on(ray_head, tmp_path):
    import ray
    killed = []

    def on_event(event):   # on the calling thread, as records arrive: kill worker 1 a third of the way in
        if isinstance(event, RequestsArrived) and not killed and max(event.request_ids) >= 10:
            entry = next(a for a in ray.util.list_named_actors(all_namespaces=True) if a["name"].endswith("-client-1"))
            ray.kill(ray.get_actor(entry["name"], namespace=entry["namespace"]), no_restart=True)
            killed.append(entry["name"])

    with FakeOpenAI(Behaviour(gap_ms=10.0)) as server:   # 0.4 s a request: some are in flight when it dies
        finished = drive(ray_head, server, workload(30), tmp_path, on_event)
    assert killed and finished.error is None
    records = finished.data.requests
    assert sorted(r.request_id for r in records) == list(range(30))
    lost = [r for r in records if r.status is RequestStatus.ERROR]
    done = [r for r in records if r.status is RequestStatus.FINISHED]
    assert lost and len(done) + len(lost) == 30 and len(done) > 10
    assert all(r.finish_reason.startswith("worker_lost: client worker 1 ") for r in lost)
    assert finished.summary.errors["worker_lost"] == len(lost)
    workers = finished.data.info.remote.ray["workers"]
    assert workers[1]["lost"] and "was lost" in workers[1]["lost"] and workers[0]["lost"] is None
    assert any("client worker 1" in w for w in finished.data.info.remote.warnings)
    assert_one_clock(finished)


def test_measure_offset_brackets_a_skewed_clock():
    offset, uncertainty, rtt = measure_offset(lambda: time.perf_counter() - 5.0)   # theirs runs 5 s behind
    assert abs(offset - 5.0) <= uncertainty + 1e-9 and rtt == 2 * uncertainty


def parse(argv):
    parser = argparse.ArgumentParser()
    add_remote_flags(parser)
    return parser.parse_args(argv)


def test_bad_ray_input_is_one_line(monkeypatch):
    with pytest.raises(InputError, match="--ray needs --endpoint"):
        endpoint_from_args(parse(["--ray", "127.0.0.1:6379"]))
    with socket.socket() as s:   # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    spec = workload(2)
    endpoint = RemoteEndpoint("http://127.0.0.1:9/v1", "m", None, "completions", 5.0, False, None, None,
                              f"127.0.0.1:{port}")
    with pytest.raises(InputError, match=f"--ray 127.0.0.1:{port}: cannot reach a Ray cluster there"):
        run_remote(RunConfig(mode="load", workload=spec, endpoint=endpoint), lambda e: None, lambda: False)
    endpoint.ray_address = "no-port"
    with pytest.raises(InputError, match="expected the head's HOST:PORT"):
        run_remote(RunConfig(mode="load", workload=spec, endpoint=endpoint), lambda e: None, lambda: False)
    monkeypatch.setitem(sys.modules, "ray", None)   # as if Ray were not installed
    with pytest.raises(InputError, match=r"--ray needs Ray: pip install 'phasescope\[ray\]'"):
        run_remote(RunConfig(mode="load", workload=spec, endpoint=endpoint), lambda e: None, lambda: False)
