"""The step strip names what its rows are: a simulated --dp run's replicas, or disaggregated workers."""
from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from gui.views.worker_strip import is_replicas, strip_title  # noqa: E402


def test_replicas_and_workers_get_their_own_title():
    assert is_replicas(["replica-0", "replica-1"]) and not is_replicas(["prefill-0", "decode-0"])
    assert not is_replicas([])
    assert "by replica" in strip_title(True) and "prefill workers above" in strip_title(False)
