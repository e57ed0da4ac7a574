#!/usr/bin/env bash
# The GPU path's smoke check, the first time a CUDA machine is at hand (about five minutes): one table
# of checks (bench/gpu_check.py says what each is), exit status 1 on any failure.
#
#   bash bench/gpu_check.sh                 # every check
#   bash bench/gpu_check.sh --dry-run       # what needs no GPU; each GPU check reported as skipped
#   bash bench/gpu_check.sh --only calibrate step-clock
#
# PYTHON picks the interpreter (default: the project's .venv if there is one, else python3); it needs a
# CUDA build of torch and pytest. The table goes into bench/README.md's GPU section with the GPU's name and date.
set -uo pipefail
cd "$(dirname "$0")/.."
if [ -z "${PYTHON:-}" ]; then
    if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
export PYTHONUNBUFFERED=1 OMP_WAIT_POLICY=PASSIVE
exec "$PYTHON" -m bench.gpu_check "$@"
