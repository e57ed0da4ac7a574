"""A llama.cpp server that dies while a test uses it fails that test by name, not with a connection error.

Run as a session of its own (pytester): a crash is simulated by sending the server SIGSEGV, the
signal llama.cpp's AMX path died of on the machines that taught us this.
"""
import pytest

INNER_CONFTEST = '''
import pytest

@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    from tests.llama_server import watch_report
    watch_report(item, call, outcome.get_result())
'''

INNER_TESTS = '''
import os
import signal

import httpx
import pytest

from tests.llama_server import LIVE, llama_server


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    with llama_server(log_path=tmp_path_factory.mktemp("llama") / "server.log") as server:
        yield server.url


def crash(url):
    server = next(s for s in LIVE if s.url == url)
    os.kill(server.proc.pid, signal.SIGSEGV)
    server.proc.wait(30)


def test_crashes_mid_run(llama):
    crash(llama)
    httpx.get(llama + "/models", timeout=5)   # refused: the report must not say so


def test_comes_after_the_crash(llama):
    pass


def test_ends_on_purpose(tmp_path):
    with llama_server(log_path=tmp_path / "server.log") as server:
        server.kill()
        server.proc.wait(30)


def test_its_own_server_crashes(tmp_path):
    with llama_server(log_path=tmp_path / "server.log") as server:
        crash(server.url)
        httpx.get(server.url + "/models", timeout=5)
'''


def test_a_server_killed_mid_test_fails_that_test_by_name(pytester):
    pytest.importorskip("llama_cpp", reason='llama.cpp server not installed (pip install "llama-cpp-python[server]")')
    pytester.makeconftest(INNER_CONFTEST)
    pytester.makepyfile(test_inner=INNER_TESTS)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-rA")
    result.assert_outcomes(failed=3, passed=1)
    summary = {line.split(" ")[1].split("::")[1]: line for line in result.outlines
               if line.startswith(("FAILED ", "PASSED "))}
    named = "llama.cpp server died with signal 11 (SIGSEGV) during the test; last lines of its log: "
    assert named in summary["test_crashes_mid_run"], summary
    assert "ConnectError" not in summary["test_crashes_mid_run"]
    assert ("llama.cpp server died with signal 11 (SIGSEGV) during an earlier test "
            "(test_inner.py::test_crashes_mid_run)") in summary["test_comes_after_the_crash"]
    assert named in summary["test_its_own_server_crashes"], summary
    assert summary["test_ends_on_purpose"].startswith("PASSED")
