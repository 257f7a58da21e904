#!/usr/bin/env bash
# TorchTitan's own trainer, unchanged, on the tpu device: the debug Llama 3
# (debug_model.toml here), FSDP2 over NPROC ranks, each TransformerBlock
# compiled. TorchTitan picks "tpu" by itself: `import torch` brings up
# torch_tpu. Needs `pip install -e ".[titan]"` (TorchTitan 0.2.2).
#
#   bash examples/torchtitan/run.sh                       # 2 ranks, 10 steps
#   NPROC=1 bash examples/torchtitan/run.sh --training.steps 20
set -euo pipefail
cd "$(dirname "$0")/../.."
NPROC=${NPROC:-2}
# The tokenizer and data set, made locally from examples/data/tales.txt.
[ -f examples/torchtitan/assets/tokenizer/tokenizer.json ] || python examples/torchtitan/make_assets.py
HF_DATASETS_OFFLINE=1 exec torchrun --standalone --nproc-per-node "$NPROC" \
  -m torchtitan.train --job.config_file examples/torchtitan/debug_model.toml "$@"
