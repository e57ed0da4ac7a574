"""Sweeps: one setting varied over an axis, each point measured (or priced) and written as a row.

steps.py (`sweep batch`, `sweep prompt`, `sweep precision`: each point a few ordinary runs
through the engine, or the simulated engine), load.py (`sweep rate`, `sweep concurrency`: one
load run per point through any target), pd_ratio.py (`sweep pd-ratio`: every prefill:decode
split of N simulated devices), depth.py and depth_probes.py (`sweep depth`: prefill and decode
tokens/s at each context depth, pairs of requests whose prompts no prefix cache can serve, on the
engine or a server), points.py (sweep.csv, one writer and reader for every kind, the
kind recorded in run.json) and parse.py (the axes from their flags).
"""
