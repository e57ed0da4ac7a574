"""The deployment planner: search GPU type, count, layout, precision, policy and batch limits by simulation for the cheapest configurations that meet latency SLOs (no Qt)."""
