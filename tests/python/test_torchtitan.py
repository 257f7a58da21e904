"""TorchTitan, unchanged, trains on tpu (issue 45).

Its own trainer (`torchrun -m torchtitan.train`) with the debug Llama
(examples/torchtitan/debug_model.toml, tokenizer and data made locally by
examples/torchtitan/make_assets.py): TorchTitan picks the tpu device by
itself (torch._utils._get_available_device_type: `import torch` brings up
torch_tpu). One process, and FSDP2 over 2 ranks with torch.compile on, on
the same global batches: the losses fall and agree step by step, and from
the second step on the compiled blocks replay (no capture, the same
programs each step).

Needs `pip install -e ".[titan]"` (skipped without TorchTitan).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import pytest

pytest.importorskip("torchtitan")  # (0.2.x also imports triton)

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CONFIG = os.path.join(ROOT, "examples", "torchtitan", "debug_model.toml")

SEQ_LEN = 64
ROWS = 4     # rows per rank and step; one process takes 2 * ROWS
STEPS = 4

# Measurement only (TorchTitan's own --experimental.custom_import, imported
# inside its Trainer): records device programs and torch.compile activity
# of each training step into $TT_COUNTERS/rank<R>.jsonl.
_PROBE = r'''
import json, os, sys
import torch, torch_tpu, torch_tpu.compiler

_Trainer = sys.modules["__main__"].Trainer
_step = _Trainer.train_step

def train_step(self, *args, **kwargs):
    c0, s0 = torch_tpu.counters(), torch_tpu.compiler.stats()
    out = _step(self, *args, **kwargs)
    torch.tpu.synchronize()
    c1, s1 = torch_tpu.counters(), torch_tpu.compiler.stats()
    rec = {"step": self.step, "programs": c1["executions"] - c0["executions"]}
    rec.update({k: s1[k] - s0[k] for k in ("captures", "replays", "op_runs", "recompiles")})
    path = os.path.join(os.environ["TT_COUNTERS"], "rank%s.jsonl" % os.environ["RANK"])
    with open(path, "a") as f:
        f.write(json.dumps(rec) + "\n")
    return out

_Trainer.train_step = train_step
'''


def _rows(tokenizer, n):
    """n texts of examples/data/tales.txt that the tokenizer turns into
    exactly SEQ_LEN + 1 tokens with BOS and EOS: consecutive pieces of the
    token stream, decoded, kept when they encode back to their length."""
    with open(os.path.join(ROOT, "examples", "data", "tales.txt"), encoding="utf-8") as f:
        ids = tokenizer.tokenizer.encode(f.read()).ids
    rows, at = [], 0
    while len(rows) < n:
        assert at + SEQ_LEN < len(ids), "tales.txt ran out"
        text = tokenizer.tokenizer.decode(ids[at:at + SEQ_LEN - 1])
        at += SEQ_LEN - 1
        if len(tokenizer.encode(text, add_bos=True, add_eos=True)) == SEQ_LEN + 1:
            rows.append(text)
    return rows


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    """The tokenizer, and two orderings of the same rows: each document is
    exactly one row (SEQ_LEN + 1 tokens with BOS and EOS), so that one
    process reading rows [A_0 B_0 A_1 B_1 ...] ROWS * 2 at a time and two
    ranks reading the halves [A_0 A_1 ...] and [B_0 B_1 ...] (TorchTitan
    splits the data set contiguously by rank) train on the same global
    batches."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_assets", os.path.join(ROOT, "examples", "torchtitan", "make_assets.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = str(tmp_path_factory.mktemp("titan"))
    mod.make_assets(out)
    tok_dir = os.path.join(out, "tokenizer")
    from torchtitan.components.tokenizer import HuggingFaceTokenizer

    docs = _rows(HuggingFaceTokenizer(tok_dir), 2 * ROWS * STEPS)
    steps = [(docs[2 * ROWS * s:2 * ROWS * s + ROWS], docs[2 * ROWS * s + ROWS:2 * ROWS * (s + 1)]) for s in range(STEPS)]
    orders = {
        "one": [d for a, b in steps for d in a + b],
        "two": [d for a, _ in steps for d in a] + [d for _, b in steps for d in b],
    }
    paths = {}
    for name, rows in orders.items():
        d = os.path.join(out, "data_" + name)
        os.makedirs(d)
        with open(os.path.join(d, "data.json"), "w") as f:
            for r in rows:
                f.write(json.dumps({"text": r}) + "\n")
        paths[name] = d
    probe = os.path.join(out, "probe")
    os.makedirs(probe)
    with open(os.path.join(probe, "tt_probe.py"), "w") as f:
        f.write(_PROBE)
    return {"tokenizer": tok_dir, "data": paths, "probe": probe, "root": out}


def _train(assets, nproc, timeout):
    counters = os.path.join(assets["root"], f"counters{nproc}")
    os.makedirs(counters)
    env = dict(os.environ)
    env.update({
        "HF_DATASETS_OFFLINE": "1",
        "TT_COUNTERS": counters,
        "PYTHONPATH": os.pathsep.join([assets["probe"], env.get("PYTHONPATH", "")]),
    })
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
        "-m", "torchtitan.train",
        "--job.config_file", CONFIG,
        "--job.dump_folder", os.path.join(assets["root"], f"out{nproc}"),
        "--model.hf_assets_path", assets["tokenizer"],
        "--training.dataset_path", assets["data"]["one" if nproc == 1 else "two"],
        "--training.local_batch_size", str(ROWS * 2 // nproc),
        "--training.seq_len", str(SEQ_LEN),
        "--training.steps", str(STEPS),
        # float32 parameters in both runs (FSDP2's bf16 and AMP's bf16 round
        # differently), so that the two runs can agree closely.
        "--training.mixed_precision_param", "float32",
        "--lr_scheduler.warmup_steps", "0",
        "--metrics.disable_color_printing",
        "--experimental.custom_import", "tt_probe",
    ]
    t0 = time.monotonic()
    out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    wall = time.monotonic() - t0
    log = out.stdout + out.stderr
    assert out.returncode == 0, log[-6000:]
    assert "TPU capacity" in log, log[-3000:]  # (TorchTitan names the device type it picked)
    losses = {}
    for m in re.finditer(r"step:\s*(\d+)\s+loss:\s*([0-9.]+)", log):
        losses.setdefault(int(m.group(1)), float(m.group(2)))
    per_rank = []
    for r in range(nproc):
        with open(os.path.join(counters, f"rank{r}.jsonl")) as f:
            per_rank.append([json.loads(line) for line in f])
    print(f"{nproc} rank(s): {wall:.0f} s, losses {losses}, steps {per_rank[0]}")
    return [losses[s] for s in range(1, STEPS + 1)], per_rank, log


@pytest.fixture(scope="module")
def one_rank(assets):
    return _train(assets, 1, timeout=240)


def test_torchtitan_trains_on_tpu_in_one_process(one_rank):
    losses, per_rank, log = one_rank
    assert losses[-1] < losses[0] - 0.3, losses
    steps = per_rank[0]
    # From the second step on, every step runs the same programs and the
    # compiled blocks replay (nothing captured or recompiled again).
    for s in steps[1:]:
        assert s["captures"] == 0 and s["recompiles"] == 0 and s["replays"] > 0, steps
    assert len({s["programs"] for s in steps[2:]}) == 1, steps


def test_torchtitan_fsdp2_compiled_two_ranks_match_one_process(one_rank, assets):
    losses1 = one_rank[0]
    losses2, per_rank, log = _train(assets, 2, timeout=300)
    assert "Applied FSDP to the model" in log and "Compiling each TransformerBlock" in log
    # The same global batches and the same initial weights (DTensor's
    # sharded init equals one device's): the losses agree up to float32
    # rounding of the different reduction orders (gradients reduce-scattered
    # over ranks, per-rank sums of the loss), which Adam's update amplifies a
    # little each step.
    for s, (a, b) in enumerate(zip(losses1, losses2), 1):
        assert abs(a - b) < 2e-4 * max(1.0, abs(a)), (s, losses1, losses2)
    assert losses2[-1] < losses2[0] - 0.3, losses2
    # Under FSDP2 two of the graphs meet their inputs in a new layout at the
    # second step and capture once more; from the third step on every call
    # replays.
    for steps in per_rank:
        assert all(s["recompiles"] == 0 for s in steps), steps
        for s in steps[2:]:
            assert s["captures"] == 0 and s["replays"] > 0, steps
        assert len({s["programs"] for s in steps[2:]}) == 1, steps
