"""The FLOP/byte cost model, GPU profiles, calibration of this machine, and the sweeps measured against them."""
