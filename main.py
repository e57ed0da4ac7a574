"""phasescope: see prefill and decode, measured on your own hardware.

`python main.py` opens the window; `python main.py SUBCOMMAND ...` runs headless
(run, load, sweep, models, profiles, calibrate). `python main.py --help` lists them.
"""
import sys

from backend.cli import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
