"""Workloads: arrival processes, length distributions, prompts and the request sources built from them."""
