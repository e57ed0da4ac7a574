"""Shared fixtures."""
import os
from pathlib import Path

# As in main.py: idle OpenMP threads sleep rather than spin, so a test that shares the cores
# with a Qt thread or a server process is not slowed several-fold.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def smollm2():
    """The bundled SmolLM2-135M-Instruct, loaded once per session on the CPU in float32."""
    from backend.loaders.weights import load_model

    return load_model("smollm2-135m", device="cpu", dtype="float32")


# `make test` hands whole files to two workers (pytest-xdist, --dist loadfile --no-loadscope-reorder), in
# the order collected. The files that take longest go first (ranked by tools/test_order.py from a whole
# run's JUnit report on a 2-core machine), so neither worker is left finishing a long file alone at the
# end; the rest keep their order. A stale list costs only balance, never a test.
RUN_FIRST = [
    "tests/models/test_quant.py", "tests/models/test_families.py", "tests/gui/test_gui_window.py",
    "tests/gui/test_gui_reliability.py", "tests/models/test_kernels_arm.py", "tests/models/test_quant_gguf.py",
    "tests/engine/test_spec_engine.py", "tests/cli/test_reliability.py", "tests/cli/test_prefill_math.py",
    "tests/gui/test_gui_engine_process.py", "tests/gui/controllers/test_gui_shutdown.py",
    "tests/gui/tour/test_tour.py", "tests/targets/test_disaggregated.py", "tests/targets/test_remote.py",
    "tests/models/test_moe.py", "tests/targets/test_disaggregated_spec.py", "tests/engine/test_engine_process.py",
    "tests/gui/views/test_gui_precision.py", "tests/engine/test_engine_paged.py", "tests/models/test_gemma.py",
]


def pytest_collection_modifyitems(config, items):
    rank = {path: i for i, path in enumerate(RUN_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))   # stable: files stay whole


def _child_processes() -> list[str]:
    """Live (not zombie) child processes of this one, as "pid command" (Linux /proc; elsewhere multiprocessing's).
    Under pytest-xdist each worker is its own process: it sees only the processes its own tests started."""
    proc = Path("/proc")
    if not proc.is_dir():
        import multiprocessing
        return [f"{p.pid} {p.name}" for p in multiprocessing.active_children()]
    found = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            name, rest = (entry / "stat").read_text().rsplit(")", 1)
        except OSError:
            continue   # it ended while we looked
        state, ppid = rest.split()[:2]
        if int(ppid) == os.getpid() and state != "Z":
            found.append(f"{entry.name} {name.split('(', 1)[1]}")
    return found


@pytest.fixture(scope="session", autouse=True)
def nothing_left_running():
    """Fails the session when a test left a non-daemon thread, a worker QThread or a child process behind."""
    yield
    import sys
    import threading

    def ours(thread) -> bool:   # pytest-timeout's watchdog of the test now ending is not a test's thread
        return (thread is not threading.main_thread() and not thread.daemon
                and not thread.name.startswith("pytest_timeout "))
    for thread in threading.enumerate():
        if ours(thread):
            thread.join(timeout=5)   # one that is ending gets the moment it needs
    threads = [t.name for t in threading.enumerate() if ours(t) and t.is_alive()]
    qthreads = sys.modules["gui.worker"].running_threads() if "gui.worker" in sys.modules else []
    children = _child_processes()
    assert not threads and not qthreads and not children, (
        f"left running at the end of the session: threads {threads}, worker QThreads {len(qthreads)}, "
        f"child processes {children}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A llama.cpp server that died while a test used it fails that test by name (tests/fakes/llama_server.py)."""
    outcome = yield
    from tests.fakes.llama_server import watch_report
    watch_report(item, call, outcome.get_result())
