"""The local engine as a target (local.py) and the sweeps over its model (sweep.py); request state,
the scheduler (no torch), the engine loop, the runner, CUDA graphs, and the threads a run takes."""
