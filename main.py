"""phasescope: see prefill and decode, measured on your own hardware.

`python main.py` opens the window; `python main.py SUBCOMMAND ...` runs headless
(run, load, sweep, compare, models, profiles, calibrate, doctor). `python main.py --help` lists them.
The installed `phasescope` command starts the same way (gui/app.py).
"""
import sys

# gui.app sets the environment (OMP_WAIT_POLICY=PASSIVE) before torch can load; it imports Qt
# only to open the window.
from gui.app import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
