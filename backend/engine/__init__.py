"""The local engine: request state, the scheduler (no torch), the engine loop, the runner, CUDA graphs, threads."""
