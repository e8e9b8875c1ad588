#!/usr/bin/env bash
# The GPU checks of issues 3 and 19 in one go, on a machine with a CUDA GPU of compute
# capability 9.0 or more: the GPU tests (tests/trainers/precision/test_gpu.py; they skip
# elsewhere) and the BF16-vs-FP8 step-time benchmark (our real FP8 and the fused torchao
# path side by side). Logs and OUT/gpu_fp8.json go to the folder $1 (default gpu-logs).
#   make gpu-wheels                       # here, once: the wheels the GPU machine lacks, in .whl/
#   PYTHON=python3 bash benchmarks/gpu_check.sh gpu-logs    # there, with .whl carried
# Needs torch with CUDA, numpy, pyyaml and pytest there; pydantic and torchao come from
# .whl/ when present (the machine has no network); not mlflow or the services (the
# conftest, which starts none but imports the test helpers, is not loaded).
set -uo pipefail
out=${1:-gpu-logs}
mkdir -p "$out"
py=${PYTHON:-python3}
if compgen -G ".whl/*.whl" > /dev/null; then
  $py -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/rcpforge-site .whl/*.whl \
    && export PYTHONPATH=/tmp/rcpforge-site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD PYTHONUNBUFFERED=1
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  $py -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"
  $py -c "import pydantic; print('pydantic', pydantic.VERSION)" || echo "pydantic: missing (run make gpu-wheels and carry .whl)"
  $py -c "import torchao.float8, torchao; print('torchao', torchao.__version__)" 2>/dev/null \
    || echo "torchao: missing or broken: the fused FP8 path will not run (make gpu-wheels, carry .whl)"; } 2>&1 | tee "$out/gpu.txt"
$py -m pytest -q --noconftest -p no:cacheprovider -rA tests/trainers/precision/test_gpu.py 2>&1 | tee "$out/test_gpu.log"
tests=$?
timeout 420 $py benchmarks/gpu_fp8.py --json "$out/gpu_fp8.json" 2>&1 | tee "$out/gpu_fp8.log"
bench=$?
echo "tests exit $tests, benchmark exit $bench"
exit $((tests || bench))
