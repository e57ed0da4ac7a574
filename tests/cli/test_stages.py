"""A run says each stage as it begins, with the seconds since the command started: compiling the
kernels (first use on a machine only), loading, probing bfloat16 fidelity (first start of a model
file only), warming up, running."""
import re

from backend.cli.main import main
from backend.events import Progress
from backend.kernels import matmath
from backend.loaders import cache

UNIT, _ = matmath.bf16_unit()
STAGE = re.compile(r"^\.\.\. (.+)  \[(\d+\.\d) s\]$")


def stages(err: str) -> list[tuple[str, float]]:
    found = [STAGE.match(line) for line in err.splitlines() if line.startswith("... ")]
    assert all(found), err
    return [(m.group(1), float(m.group(2))) for m in found]


def test_each_stage_is_said_in_order_with_its_seconds_and_the_second_start_skips_the_probe(capsys):
    for start in ("first", "second"):
        assert main(["run", "--prompt-len", "12", "--output-len", "2"]) == 0
        said = stages(capsys.readouterr().err)
        words = [w for w, _ in said]
        assert words[0] == "loading smollm2-135m" and words[-2:] == ["warming up", "running"], words
        seconds = [s for _, s in said]
        assert seconds == sorted(seconds)
        if UNIT is not None:   # auto probes bfloat16 once per model file; the second start reads the verdict
            assert words[1] == f"bfloat16 fidelity on {UNIT}: kept from an earlier start" or (
                start == "first" and words[1].startswith(f"probing bfloat16 fidelity on {UNIT}")), words
        else:
            assert len(words) == 3, words


def test_a_machine_without_a_build_of_the_kernels_is_told_they_are_compiling(tmp_path, monkeypatch):
    from backend import kernels
    built = []
    monkeypatch.setattr(kernels, "library_path", lambda: tmp_path / "none-yet.so")
    monkeypatch.setattr(kernels, "load", lambda: built.append(True))
    said = []
    cache.build_kernels(said.append)
    assert said == [Progress("compiling the CPU kernels for this CPU (first use only; the build is kept)", None)]
    assert built == [True]
    (tmp_path / "none-yet.so").touch()   # built: nothing more to say
    said.clear()
    cache.build_kernels(said.append)
    assert said == []
    monkeypatch.setenv("PHASESCOPE_KERNELS", "0")   # kernels turned off: nothing to compile
    (tmp_path / "none-yet.so").unlink()
    cache.build_kernels(said.append)
    assert said == []
