"""torch.distributed on tpu tensors: the tpu c10d backend, with 2 and 4
processes on this host (spawned, each with its own device), against gloo on
CPU tensors and single-process training. Workers: dist_workers.py."""

from __future__ import annotations

import os
import tempfile

import pytest
import torch
import torch.distributed as dist
import torch.nn as nn

import torch_tpu  # noqa: F401

import dist_workers as w
from conftest import run_python, run_torchrun

pytestmark = pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not built")


def test_backend_is_registered():
    assert dist.Backend.default_device_backend_map["tpu"] == "tpu"
    assert "tpu" in dist.Backend.backend_list and "tpu_dist" in dist.Backend.backend_list
    assert dist.Backend.backend_capability["tpu"] == ["tpu"]


def test_collectives_equal_gloo():
    w.launch(w.collectives, 2)


@pytest.mark.parametrize("backend", ["tpu", "tpu_dist", "cpu:gloo,tpu:tpu"])
def test_backend_names(backend):
    w.launch(w.backend_names, 2, backend)


def test_four_ranks():
    w.launch(w.subgroups_four, 4, timeout=240)


def test_ddp_equals_single_process():
    w.launch(w.ddp, 2)


def test_sync_batch_norm_equals_batch_norm_on_the_global_batch():
    w.launch(w.sync_batch_norm, 2)


def test_fsdp2_dtensor_and_checkpoint_reloaded_by_one_process():
    import torch.distributed.checkpoint as dcp

    with tempfile.TemporaryDirectory() as ckpt:
        w.launch(w.fsdp_dtensor_dcp, 2, ckpt)
        # Saved by 2 ranks, loaded by 1 (another world size), no process group.
        model = w._mlp().to("tpu")
        state = {"model": model.state_dict()}
        dcp.load(state, checkpoint_id=ckpt)
        model.load_state_dict(state["model"])
        expected = torch.load(os.path.join(ckpt, "expected.pt"))
        for k, v in expected.items():
            assert torch.equal(model.state_dict()[k].cpu(), v), k


def test_fsdp2_with_compiled_flex_attention_blocks_equals_single_process():
    w.launch(w.fsdp2_compiled_flex_blocks, 2)


def test_collectives_inside_compiled_graphs_run_every_call():
    w.launch(w.compiled_collectives, 2)


def test_skipped_collective_times_out_naming_it():
    w.launch(w.skipped_collective, 2, timeout=90)


def test_dead_rank_fails_the_others():
    w.launch(w.dead_rank, 2, timeout=90)


TORCHRUN_SCRIPT = r'''
import os, torch, torch_tpu, torch.distributed as dist
local_rank = int(os.environ["LOCAL_RANK"])
dev = torch.device("tpu", local_rank)
torch.tpu.set_device(dev)
dist.init_process_group(device_id=dev)
t = torch.full((2,), float(dist.get_rank() + 1), device=dev)
dist.all_reduce(t)
assert t.device == dev, t.device
assert t.cpu().tolist() == [3.0, 3.0], t
with open(os.path.join(os.environ["RESULTS"], f"rank{dist.get_rank()}"), "w") as f:
    f.write(f"devices {torch.tpu.device_count()} on {t.device}")
dist.destroy_process_group()
'''


def test_torchrun_each_rank_takes_its_own_device(tmp_path):
    r = run_torchrun(TORCHRUN_SCRIPT, tmp_path, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    for rank in range(2):
        assert (tmp_path / f"rank{rank}").read_text() == f"devices 2 on tpu:{rank}"


_LOCAL = r"""
import torch, torch_tpu
from torch_tpu.distributed import all_reduce_local
assert torch.tpu.device_count() == 4
g = torch.Generator().manual_seed(0)
runs = torch_tpu.counters()["executions"]
for dtype in (torch.float32, torch.bfloat16, torch.int64, torch.bool):
    for shape in ((5,), (3, 4), (2, 0)):
        xs = [(torch.randn(shape, generator=g) * 4).to(dtype) for _ in range(4)]
        for op, ref in (("sum", lambda v: sum(v[1:], v[0]) if dtype != torch.bool else torch.stack(v).any(0)),
                        ("max", lambda v: torch.stack(v).amax(0) if dtype != torch.bool else torch.stack(v).any(0)),
                        ("min", lambda v: torch.stack(v).amin(0) if dtype != torch.bool else torch.stack(v).all(0))):
            if dtype == torch.bool and op == "sum":
                continue
            want = ref(xs).to(dtype)
            got = all_reduce_local([x.to(f"tpu:{r}") for r, x in enumerate(xs)], op)
            for r, t in enumerate(got):
                assert t.device == torch.device("tpu", r) and t.dtype == dtype, (t.device, t.dtype)
                tol = dict(rtol=2e-2, atol=5e-2) if dtype == torch.bfloat16 else dict(rtol=1e-6, atol=1e-5)
                torch.testing.assert_close(t.cpu(), want, **tol)
t = [torch.ones(3, device=f"tpu:{r}") for r in range(4)]
assert all_reduce_local([x.t() for x in [torch.ones(2, 3, device=f"tpu:{r}") for r in range(4)]])[0].shape == (3, 2)
for bad in ([t[1], t[0], t[2], t[3]], [t[0], torch.ones(4, device="tpu:1"), t[2], t[3]], t + t):
    try:
        all_reduce_local(bad)
        raise AssertionError("accepted")
    except RuntimeError as e:
        assert "all_reduce_local" in str(e), e
print("ok")
"""


def test_all_reduce_across_a_processs_devices_is_one_replicated_program():
    """TORCH_TPU_CPU_DEVICES=4: one program of 4 replicas (a StableHLO
    all_reduce) reduces tensors on tpu:0..3, each result on its device."""
    out = run_python(_LOCAL, env={"TORCH_TPU_CPU_DEVICES": "4"}, timeout=600)
    assert out.returncode == 0 and "ok" in out.stdout, out.stdout + out.stderr
