#!/usr/bin/env bash
# The checks to run at once when a session is lent an NVIDIA machine (the
# `device` tool): build against that machine's torch, run a test subset and
# the eager benchmarks on the CUDA PJRT plugin, and keep the logs in $OUT.
#
#   device.run(command="bash .ci/device.sh", timeout_s=540)
#
# That machine has torch 2.11 (CUDA 13), Python 3.12, jax and the CUDA PJRT
# plugin (jax-cuda13-pjrt) and reaches no registry, so nothing is installed
# from PyPI: the extension is built with --no-deps against what is there, and
# tests that need other packages are left out. Each step is bounded so that
# the logs come back even when one runs long; the whole script stays within
# about 8 minutes.
#
# Building against torch 2.11 works (checked against torch==2.11.0 from PyPI,
# its CUDA build, on a CPU machine): the C++ guards its API differences with
# TORCH_VERSION, and CMakeLists.txt keeps a CUDA build of torch from asking
# for the CUDA toolkit. cmake and ninja are in python3's environment there
# (pip packages), so its bin directory goes first on PATH.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/torch_tpu_device}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
export TORCH_TPU_CACHE_DIR=/tmp/torch_tpu_cache
PATH="$(python3 -c 'import os, sys; print(os.path.dirname(sys.executable))'):$PATH"
export PATH

step() {  # step NAME SECONDS COMMAND...: run COMMAND, its output to $OUT/NAME.log
  local name=$1 limit=$2
  shift 2
  echo "== $name"
  timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  tail -n 25 "$OUT/$name.log"
  echo "== $name: rc=$rc"
}

{ nvidia-smi -L; python3 -c "import sys, torch, jax; print(sys.version.split()[0], 'torch', torch.__version__, 'jax', jax.__version__)"
  cmake --version | head -n 1; echo "ninja $(ninja --version)"; } \
  > "$OUT/machine.log" 2>&1
cat "$OUT/machine.log"

step build 240 python3 -m pip install --no-build-isolation --no-deps -e .
step plugin 60 python3 -c "
import torch, torch_tpu
print(torch_tpu.plugin_info())
x = torch.randn(64, 64, device='tpu')
torch.testing.assert_close((x @ x).cpu(), x.cpu() @ x.cpu(), rtol=1e-3, atol=1e-3)
print('matmul on', x.device, 'matches CPU')"
step tests 240 python3 -m pytest -q -x -p no:cacheprovider \
  tests/python/test_tensors.py tests/python/test_views.py tests/python/test_ops.py \
  tests/python/test_execution.py tests/python/test_fused.py tests/python/test_attention.py \
  tests/python/test_training.py -k "not hugging and not safetensors"
step bench 120 python3 benchmarks/eager_basics.py --repeats 5
