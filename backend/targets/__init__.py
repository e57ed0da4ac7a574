"""Targets: whatever executes a run's requests, each with the one signature of `events.Target`.

local.py (the engine on this machine's model), simulated.py (the same scheduler on a virtual
clock, each step priced by a GPU profile's cost model), disaggregated/ (prefill and decode in
separate engine processes, or simulated devices with a KV link), remote/ (an OpenAI-compatible
server). The window's client of an engine process is backend/engine/process.py.
"""
