"""What the app's next start preloads in its engine process: the last model loaded, the window's
defaults the first time, nothing after a run that loaded none, and never a failure on a bad file."""
import json

import pytest

from backend.config import ModelChoice, RunConfig
from backend.engine import preload
from backend.engine.threads import window_default_threads


@pytest.fixture(autouse=True)
def own_config(tmp_path, monkeypatch):
    monkeypatch.setenv("PHASESCOPE_CONFIG_DIR", str(tmp_path / "config"))   # a folder not made yet
    return tmp_path / "config"


def test_a_first_start_preloads_the_windows_defaults():
    config = preload.recall()
    assert config.model == ModelChoice() and config.threads == window_default_threads()


def test_the_model_kept_comes_back_as_it_went():
    preload.remember(RunConfig(model=ModelChoice("tiny", "cpu", "q8_0", "fp32"), threads=3))
    config = preload.recall()
    assert config.model == ModelChoice("tiny", "cpu", "q8_0", "fp32") and config.threads == 3


def test_a_model_named_on_the_command_line_replaces_the_kept_name_only():
    preload.remember(RunConfig(model=ModelChoice("tiny", "cpu", "float32"), threads=None))
    config = preload.recall(model="gpt2-124m")
    assert config.model == ModelChoice("gpt2-124m", "cpu", "float32") and config.threads is None


def test_nothing_is_preloaded_after_a_run_that_loaded_nothing():
    preload.remember(RunConfig(model=ModelChoice("tiny")))
    preload.remember(None)
    assert preload.recall() is None
    assert preload.recall(model="tiny") is None   # the last run was a simulation or a server's: no guess


@pytest.mark.parametrize("text", ["not json", "[1, 2]", '{"preload": 3}', '{"preload": {"model": "x"}}',
                                  '{"preload": {"model": {"name": 7, "device": "cpu"}, "threads": -2}}'])
def test_a_file_that_is_not_ours_preloads_what_it_can_and_never_fails(own_config, text):
    own_config.mkdir()
    (own_config / preload.FILE).write_text(text)
    config = preload.recall()
    assert isinstance(config, RunConfig) and isinstance(config.model.name, str)
    assert config.threads is None or config.threads > 0


def test_remembering_the_same_model_again_leaves_the_file_alone(own_config):
    config = RunConfig(model=ModelChoice("tiny"), threads=1)
    preload.remember(config)
    path = own_config / preload.FILE
    before = path.stat().st_ino   # a write renames a new file into place
    preload.remember(config)
    assert path.stat().st_ino == before
    preload.remember(RunConfig(model=ModelChoice("tiny"), threads=2))
    assert path.stat().st_ino != before
    assert json.loads(path.read_text())["preload"]["model"]["name"] == "tiny"


def test_a_folder_that_cannot_be_written_costs_the_head_start_only(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("PHASESCOPE_CONFIG_DIR", str(blocker / "config"))   # under a file: no folder there
    preload.remember(RunConfig())
    assert preload.recall().model == ModelChoice()
