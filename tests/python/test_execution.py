"""Execution: strict (asynchronous) and debug (synchronous) modes, the
executable cache in memory and on disk, synchronization, several devices."""

import os

import pytest
import torch

import torch_tpu
from conftest import run_python


def test_default_mode_is_strict_and_debug_is_switchable():
    default = "fused" if os.environ.get("TORCH_TPU_DEFER_AND_FUSE", "0") != "0" else "strict"
    if os.environ.get("TORCH_TPU_LAUNCH_BLOCKING", "0") != "0":
        default = "debug"
    assert torch_tpu.get_execution_mode() == default
    with torch_tpu.execution_mode("debug"):
        assert torch_tpu.get_execution_mode() == "debug"
        x = torch.arange(10.0, device="tpu") * 3
        assert torch.equal(x.cpu(), torch.arange(10.0) * 3)
    assert torch_tpu.get_execution_mode() == default
    with pytest.raises(RuntimeError, match="unknown execution mode"):
        torch_tpu.set_execution_mode("fast")


def test_launch_blocking_environment_selects_debug():
    r = run_python("import torch_tpu, torch; torch.ones(1, device='tpu'); print(torch_tpu.get_execution_mode())",
                   env={"TORCH_TPU_LAUNCH_BLOCKING": "1"})
    assert r.stdout.strip().endswith("debug"), r.stderr


def test_cache_hits_on_repeat():
    x = torch.randn(17, 3, device="tpu")
    (x * 2 + 1).cpu()  # (in fused eager the first program also computes x)
    (x * 2 + 1).cpu()
    s0 = torch_tpu.cache_stats()
    for _ in range(5):
        (x * 2 + 1).cpu()
    s1 = torch_tpu.cache_stats()
    assert s1["misses"] == s0["misses"]
    assert s1["hits"] >= s0["hits"] + 5
    assert s1["compile_seconds"] >= 0


def test_persistent_cache_is_reused_across_processes(tmp_path):
    code = ("import torch, torch_tpu\n"
            "x = torch.arange(12.0, device='tpu').reshape(3, 4)\n"
            "y = (x.t() @ x).sum(0).cpu()\n"
            "s = torch_tpu.cache_stats()\n"
            "print(s['misses'], s['disk_hits'] + s['preloaded'], y.tolist())\n")
    env = {"TORCH_TPU_CACHE_DIR": str(tmp_path)}
    first = run_python(code, env=env)
    second = run_python(code, env=env)
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    m1, d1, y1 = first.stdout.strip().split(" ", 2)
    m2, d2, y2 = second.stdout.strip().split(" ", 2)
    assert int(m1) > 0 and int(d1) == 0
    assert int(m2) == 0 and int(d2) == int(m1)
    assert y1 == y2
    assert any(p.suffix == ".xla" for p in tmp_path.iterdir())


def test_synchronize_waits_for_all_work():
    x = torch.randn(256, 256, device="tpu")
    for _ in range(10):
        x = x @ x * 0.01
    torch.tpu.synchronize()
    assert torch.isfinite(x).all().item()


def test_two_devices():
    code = r"""
import torch, torch_tpu
assert torch.tpu.device_count() == 2
a = torch.arange(6.0, device='tpu:0')
b = a.to('tpu:1')
assert b.device == torch.device('tpu:1')
c = (b * 2).to('tpu:0')
assert c.device.index == 0 and torch.equal(c.cpu(), torch.arange(6.0) * 2)
with torch.tpu.device(1):
    d = torch.ones(3, device='tpu')
    assert d.device.index == 1
assert torch.tpu.current_device() == 0
try:
    a + b
except RuntimeError as e:
    assert 'same device' in str(e)
else:
    raise AssertionError('mixing devices must fail')
torch.tpu.manual_seed_all(3)
print('ok')
"""
    r = run_python(code, env={"TORCH_TPU_CPU_DEVICES": "2"})
    assert r.stdout.strip() == "ok", r.stdout + r.stderr


def test_debug_mode_raises_at_the_op_naming_it_and_its_inputs():
    x = torch.arange(5.0, device="tpu")
    bad = torch.tensor([1, 7], device="tpu")
    with torch_tpu.execution_mode("debug"):
        with pytest.raises(IndexError, match=r"\(aten::index\.Tensor\) \[inputs: Float\[5\], Long\[2\]\]"):
            x[bad]  # raised by this line, not at a later read
    with torch_tpu.execution_mode("strict"):
        y = x[bad]  # asynchronous: nothing yet
        with pytest.raises(IndexError, match="detected asynchronously.*TORCH_TPU_LAUNCH_BLOCKING"):
            y.cpu()
    assert (x + 1).cpu().tolist() == [1, 2, 3, 4, 5]  # the device is usable afterwards
