"""Driving an OpenAI-compatible server: the target, its streaming client, and the server's /metrics."""
