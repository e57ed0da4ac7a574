"""A module-scoped fixture that moves what is alive when a test module starts (torch's, transformers'
and pytest's hundreds of thousands of objects) out of the garbage collector's sight.

The engine calls gc.collect() as it builds and closes runners (backend/engine/runner.py,
backend/targets/local.py, backend/loaders/cache.py), so that a runner caught in a reference cycle
frees its tensors. Each collection walks every tracked object: about a third of a second with
transformers imported, several times per run. Frozen objects are not walked; everything made
afterwards (the runners, their caches, their cycles) is collected exactly as before. Use it with
`pytestmark = pytest.mark.usefixtures("frozen_heap")` after importing it.
"""
import gc

import pytest


@pytest.fixture(scope="module")
def frozen_heap():
    gc.collect()   # what is already garbage is freed, not frozen
    gc.freeze()
    yield
    gc.unfreeze()
