"""The FLOP/byte cost model, GPU profiles, calibration of this machine, the simulator's step time and its fit."""
