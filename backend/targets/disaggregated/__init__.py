"""The disaggregated policy: prefill and decode in separate engines, the KV handed between them.

coordinator.py (the target: arrivals to prefill workers, hand-offs to decode workers, one merged
record stream), worker.py (one prefill or decode engine process), events.py (the worker layout
event), summary.py (the hand-off's figures and the TTFT split). The same split on simulated
devices with a KV link is backend/sim/disaggregated.py.
"""
