"""The benchmarks: each a module run from the repository's root as `python -m bench.<name>` (bench/README.md
lists them with their latest tables); bench/common.py holds what they share."""
