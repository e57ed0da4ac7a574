#!/usr/bin/env bash
# The GPU checks in one go, for a session that has a CUDA machine (about 3-5 minutes):
#   1. the tests that exercise the CUDA path (captured graphs against the plain decode, the runner,
#      the models against transformers) on the GPU;
#   2. the GPU rows of bench.engine_vs_hf: llama-1b in bf16, batch-1 decode against the measured
#      bandwidth (with and without CUDA graphs) and a 2,048-token prefill against the bf16 matmul rate;
#      int8 weight-only (torch's kernel) batch-1 decode beside it.
#
# Run from anywhere: bash bench/gpu_check.sh        (logs go to $OUT, or /tmp/gpu-check/ without it)
# Needs python3 with a CUDA build of torch, pytest, numpy and transformers (the device image has
# them). gguf is not needed: the GPU rows use the synthetic llama-1b shape. The table it prints goes
# into bench/README.md too, in place of the previous GPU rows (their own markers, engine_vs_hf_gpu).
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
LOGS=${OUT:-/tmp/gpu-check}
mkdir -p "$LOGS"
export PYTHONUNBUFFERED=1 OMP_WAIT_POLICY=PASSIVE

if ! $PY -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)"; then
    echo "gpu_check: $PY has no CUDA-enabled torch on this machine; nothing to check" >&2
    exit 2
fi
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv | tee "$LOGS/gpu.txt"
$PY -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" | tee -a "$LOGS/gpu.txt"

status=0
timeout 240 $PY -m pytest -q -p no:cacheprovider tests/engine/test_cuda_graphs.py tests/engine/test_runner.py tests/models/test_models.py tests/models/test_quant.py \
    2>&1 | tee "$LOGS/tests.log" || status=1
timeout 300 $PY -m bench.engine_vs_hf --gpu-only --readme 2>&1 | tee "$LOGS/gpu_bench.md" || status=1
exit $status
