"""The engine's nouns: request state (request.py), the scheduler (scheduler.py, no torch), the
decode-only batch of a disaggregated decode worker (decode_batch.py), the engine loop
(loop.py: schedule, run, record), the runner (runner.py: one step's tensors through the model),
CUDA graphs (cuda_graphs.py), what a runner takes of its device's memory (memory_fit.py, no torch), the KV hand-off between processes (kv_transfer.py), and the
threads a run takes (threads.py). Targets (backend/targets/, backend/sim/) drive these; process.py
is the window's client of an engine in its own process (any run of `session.execute` there)."""
