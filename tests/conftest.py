"""Shared fixtures."""
import os

# As in main.py: idle OpenMP threads sleep rather than spin, so a test that shares the cores
# with a Qt thread or a server process is not slowed several-fold.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def smollm2():
    """The bundled SmolLM2-135M-Instruct, loaded once per session on the CPU in float32."""
    from backend.weights import load_model

    return load_model("smollm2-135m", device="cpu", dtype="float32")
