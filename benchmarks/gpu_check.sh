#!/usr/bin/env bash
# The GPU checks of issue 3 in one go, on a machine with a CUDA GPU of compute capability
# 9.0 or more: the GPU tests (tests/trainers/precision/test_gpu.py; they skip elsewhere)
# and the BF16-vs-FP8 step-time benchmark. Logs go to the folder $1 (default gpu-logs).
#   PYTHON=python3 bash benchmarks/gpu_check.sh gpu-logs
# Needs torch with CUDA, pydantic, pyyaml, numpy and pytest; not mlflow or the services
# (the conftest, which starts none but imports the test helpers, is not loaded).
set -uo pipefail
out=${1:-gpu-logs}
mkdir -p "$out"
py=${PYTHON:-python3}
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD PYTHONUNBUFFERED=1
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  $py -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"; } 2>&1 | tee "$out/gpu.txt"
$py -m pytest -q --noconftest -p no:cacheprovider -rA tests/trainers/precision/test_gpu.py 2>&1 | tee "$out/test_gpu.log"
tests=$?
timeout 300 $py benchmarks/gpu_fp8.py 2>&1 | tee "$out/gpu_fp8.log"
bench=$?
echo "tests exit $tests, benchmark exit $bench"
exit $((tests || bench))
