"""Targets: whatever executes a run's requests, each with the one signature of `events.Target`.

local.py (the engine on this machine's model), disaggregated/ (prefill and decode in separate
engine processes), remote/ (an OpenAI-compatible server). The simulated target (the same scheduler
on a virtual clock, each step priced by a GPU profile's cost model) is backend/sim/; the window's
client of an engine process is backend/engine/process.py.
"""
