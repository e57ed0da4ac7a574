"""The analytic roofline: a step's FLOPs and bytes (cost.py, attention.py, moe.py), the roofs they meet
(roofs.py), GPU profiles (profiles.py), model configs (model_configs.py) and calibration of this machine
(calibrate.py). The simulator's price of a step, its parallel layouts and its fits are backend/sim/."""
