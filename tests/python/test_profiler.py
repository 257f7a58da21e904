"""torch.profiler on tpu: device activity (each program a kernel span on
the device, linked to the op that started it), as Kineto shows CUDA."""

import json

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

import torch_tpu

pytestmark = pytest.mark.skipif(not torch.autograd.kineto_available(), reason="torch built without Kineto")


def _device_events(prof):
    return [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.PrivateUse1]


def test_profiler_shows_device_time_per_op_and_kernel_spans(tmp_path):
    x = torch.randn(128, 128, device="tpu")
    (x @ x).cpu()  # compiled before the trace
    activities = [ProfilerActivity.CPU, getattr(ProfilerActivity, "TPU", ProfilerActivity.PrivateUse1)]
    with torch_tpu.execution_mode("strict"), profile(activities=activities) as prof:
        for _ in range(3):
            y = (x @ x).relu()
        y.cpu()
    kernels = _device_events(prof)
    assert len(kernels) >= 6 and all(k.name == "tpu program" for k in kernels)
    mm = [a for a in prof.key_averages() if a.key == "aten::mm"]
    assert mm and mm[0].device_time_total > 0  # device time attributed to the op that ran it
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    events = json.loads(path.read_text())["traceEvents"]
    ops = {e["args"]["External id"]: e for e in events if e.get("cat") == "cpu_op" and "External id" in e.get("args", {})}
    spans = [e for e in events if e.get("cat") == "kernel"]
    assert spans and all(e["dur"] >= 0 for e in spans)
    linked = [e for e in spans if ops.get(e["args"].get("External id"), {}).get("name") == "aten::mm"]
    assert len(linked) == 3
    for span in linked:  # a program runs after the op that launched it started
        assert span["ts"] >= ops[span["args"]["External id"]]["ts"]


def test_a_fused_flush_is_one_span():
    x = torch.randn(64, 64, device="tpu")
    with torch_tpu.execution_mode("fused"):
        (x.sin() * 2 + 1).cpu()
    with torch_tpu.execution_mode("fused"), profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        (x.sin() * 2 + 1).cpu()
    assert [k.name for k in _device_events(prof)] == ["tpu fused program"]


def test_legacy_profiler_times_ops_on_the_device():
    x = torch.randn(384, 384, device="tpu")
    (x @ x).cpu()
    with torch_tpu.execution_mode("strict"), torch.autograd.profiler.profile(use_device="tpu") as prof:
        for _ in range(2):
            y = x @ x
        y.cpu()
    rows = {a.key: a for a in prof.key_averages()}
    assert rows["aten::mm"].device_time_total > 0
    assert all(a.cpu_time_total >= 0 for a in rows.values())
