"""phasescope's shipped data: GPU profiles (`*.toml` here) and workload presets (`workloads/*.toml`).

A package only so that the TOML files travel as package data and are found through this file
wherever phasescope is: a checkout, an editable install or an installed wheel.
"""
from pathlib import Path

HERE = Path(__file__).resolve().parent
WORKLOADS = HERE / "workloads"
