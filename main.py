"""phasescope: see prefill and decode, measured on your own hardware.

`python main.py` opens the window; `python main.py SUBCOMMAND ...` runs headless
(run, load, sweep, models, profiles, calibrate). `python main.py --help` lists them.
"""
import os
import sys

# Idle OpenMP threads sleep instead of spinning: with a GUI thread or other work sharing the
# cores, spinning threads made a CPU decode step ~4x slower (57 ms -> 250 ms on 2 cores).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from backend.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
