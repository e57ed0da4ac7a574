"""The program's start, shared by `python main.py`, `python -m backend` and the installed `phasescope` script.

The environment is set here, before anything imports torch (backend.cli does not, at import):
idle OpenMP threads sleep instead of spinning. With a GUI thread or other work sharing the
cores, spinning threads made a CPU decode step ~4x slower (57 ms -> 250 ms on 2 cores).
"""
import os
import sys

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def main(argv: list[str] | None = None) -> int:
    """Run the window (no arguments) or a sub-command; the exit status."""
    from backend.cli import main as cli_main

    return cli_main(sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    sys.exit(main())
