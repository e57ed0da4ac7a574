"""Every test under tests/gui: Qt offscreen (set on import of gui_fixtures, before anything imports Qt),
its own configuration and data folders, the `window` and `inprocess_window` fixtures, and a failure
for any test that leaves a worker QThread or an engine process running (no_thread_left)."""
from tests.fakes.gui_fixtures import config_dir, inprocess_window, no_thread_left, window  # noqa: F401
