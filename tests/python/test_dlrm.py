"""examples/dlrm.py, the DLRM-style recommendation model (issue 48, item 4):
20 training steps on tpu equal CPU's (losses and every parameter, the
tables trained by Adagrad on sparse gradients) in strict and fused eager and
with the dense part compiled; with its tables split over 2 ranks (all_to_all
of pooled embeddings over the tpu c10d backend, DDP over the dense part) it
equals one process on the global batch."""

import os
import sys

import pytest
import torch

import torch_tpu

from conftest import run_torchrun

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "examples")
sys.path.insert(0, EXAMPLES)
import dlrm  # noqa: E402

STEPS = 20


def _close(got, want):
    torch.testing.assert_close(got[0], want[0], rtol=1e-5, atol=1e-5)
    assert sorted(got[1]) == sorted(want[1])
    for k in want[1]:
        torch.testing.assert_close(got[1][k], want[1][k], rtol=1e-4, atol=1e-5, msg=k)


@pytest.fixture(scope="module")
def cpu_run():
    return dlrm.train(dlrm.Config(), "cpu", STEPS)


def test_dlrm_trains_as_on_cpu_in_strict_eager(cpu_run):
    with torch_tpu.execution_mode("strict"):
        got = dlrm.train(dlrm.Config(), "tpu", STEPS)
    _close(got, cpu_run)
    losses = got[0]
    assert sum(losses[-5:]) / 5 < losses[0] - 0.2, losses  # it learns the hidden rule


def test_dlrm_trains_as_on_cpu_in_fused_eager():
    # Every step's id lists have new lengths, so each fused step compiles its
    # graphs anew (~6 s a step here): 6 steps check the same program shapes
    # as 20 at a third of the cost.
    with torch_tpu.execution_mode("fused"):
        got = dlrm.train(dlrm.Config(), "tpu", 6)
    _close(got, dlrm.train(dlrm.Config(), "cpu", 6))


def test_dlrm_with_the_dense_part_compiled_trains_as_on_cpu(cpu_run):
    _close(dlrm.train(dlrm.Config(), "tpu", STEPS, compile_dense=True), cpu_run)


def test_dlrm_tables_split_over_two_ranks_equal_one_process(tmp_path):
    # Each step's id lists have new lengths and compile anew (issue 48):
    # 8 steps check the split against one process at under half the cost.
    steps = 8
    script = f"""
import os, sys
sys.path.insert(0, {EXAMPLES!r})
import torch, dlrm
losses, state = dlrm.train_table_wise(dlrm.Config(), {steps})
torch.save({{"losses": losses, "state": state}}, os.path.join(os.environ["RESULTS"], "rank" + os.environ["RANK"]))
"""
    r = run_torchrun(script, tmp_path, nproc=2, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    ranks = [torch.load(tmp_path / f"rank{i}") for i in range(2)]
    assert ranks[0]["losses"] == ranks[1]["losses"]
    # rank r holds tables r, r + 2, ...; both hold the (DDP-synchronized) dense part
    for k in [k for k in ranks[0]["state"] if k.startswith("dense.")]:
        assert torch.equal(ranks[0]["state"][k], ranks[1]["state"][k]), k
    assert sorted(k for k in ranks[0]["state"] if k.startswith("table")) == ["table0", "table2"]
    assert sorted(k for k in ranks[1]["state"] if k.startswith("table")) == ["table1", "table3"]
    merged = {**ranks[1]["state"], **ranks[0]["state"]}
    _close((ranks[0]["losses"], merged), dlrm.train(dlrm.Config(), "cpu", steps))
