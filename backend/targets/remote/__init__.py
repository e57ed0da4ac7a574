"""Driving an OpenAI-compatible server: the target, its coordinator and client processes, prompts cut to
true lengths, the server's /metrics and what the run says about its own figures."""
