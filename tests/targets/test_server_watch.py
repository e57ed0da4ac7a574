"""A llama.cpp server that dies while a test uses it fails that test by name, not with a connection error.

Run as a session of its own (pytester): a crash is simulated by sending the server SIGSEGV, the
signal llama.cpp's AMX path died of on the machines that taught us this.
"""
import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

INNER_CONFTEST = '''
import pytest

@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    from tests.fakes.llama_server import watch_report
    watch_report(item, call, outcome.get_result())
'''

INNER_TESTS = '''
import os
import signal

import httpx
import pytest

from tests.fakes.llama_server import LIVE, llama_server


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


def test_a_server_killed_mid_test_fails_that_test_by_name(pytester, monkeypatch):
    # found, not imported: pytester unloads at its end what the test imported (numpy cannot load twice)
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.skip('llama.cpp server not installed (pip install "llama-cpp-python[server]")')
    pytester.makeconftest(INNER_CONFTEST)
    pytester.makepyfile(test_inner=INNER_TESTS)
    monkeypatch.setenv("PYTHONPATH", str(ROOT))   # the inner session imports tests.fakes.llama_server
    # in a process of its own, for the same reason
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", timeout=300)
    # the test after the crash fails in its set-up, which pytest counts as an error
    result.assert_outcomes(failed=2, errors=1, passed=1)
    text = result.stdout.str()

    def report(test: str) -> list[str]:
        """The lines of a test's failure section (headed `___ test ___` or `___ ERROR at setup of test ___`)."""
        section = re.search(rf"_ (?:ERROR at setup of )?{test} _+\n(.*?)(?=\n_{{3,}} |\n={{3,}} )", text, re.S)
        assert section, text
        return section.group(1).splitlines()

    named = "llama.cpp server died with signal 11 (SIGSEGV) during the test; last lines of its log: "
    for test in ("test_crashes_mid_run", "test_its_own_server_crashes"):
        lines = report(test)   # one line: the death, not the connection error the test ran into
        assert len(lines) == 1 and lines[0].startswith(named) and "Uvicorn running on" in lines[0], lines
    lines = report("test_comes_after_the_crash")
    assert len(lines) == 1 and lines[0].startswith(
        "llama.cpp server died with signal 11 (SIGSEGV) during an earlier test (test_inner.py::test_crashes_mid_run)")
    assert "test_ends_on_purpose" not in text.split("short test summary")[-1]
