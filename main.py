"""phasescope: see prefill and decode, measured on your own hardware.

`python main.py` opens the window; `python main.py SUBCOMMAND ...` runs headless
(run, load, sweep, models, profiles, calibrate). `python main.py --help` lists them.
The installed `phasescope` command starts the same way (backend/__main__.py).
"""
import sys

# backend.__main__ sets the environment (OMP_WAIT_POLICY=PASSIVE) before torch can load.
from backend.__main__ import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
