"""Shared fixtures."""
import pytest


@pytest.fixture(scope="session")
def smollm2():
    """The bundled SmolLM2-135M-Instruct, loaded once per session on the CPU in float32."""
    from backend.weights import load_model

    return load_model("smollm2-135m", device="cpu", dtype="float32")
