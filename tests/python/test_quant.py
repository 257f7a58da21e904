"""Quantization-aware training on tpu: the fake quantizers (per tensor, per
channel, with tensor parameters) and the fused moving-average observer,
against CPU: outputs, masks, gradients and the observer's state (running
range, scale, zero point) step by step, in every mode."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.ao.quantization as tq

import torch_tpu  # noqa: F401

A = torch.ops.aten


def _inputs(dtype):
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(4, 37, generator=g) * 3).to(dtype)
    x[0, :6] = torch.tensor([float("nan"), float("inf"), -float("inf"), 0.05, 0.15, -0.25]).to(dtype)
    x[1] = (torch.arange(37) * 0.05).to(dtype)  # halfway cases
    return x


def _same(got, want):
    got = got.cpu()
    assert got.dtype == want.dtype and got.shape == want.shape
    assert torch.equal(got.isnan(), want.isnan())
    assert torch.equal(got.nan_to_num(), want.nan_to_num()), (got, want)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64], ids=str)
@pytest.mark.parametrize("qparams", [(0.1, 3, 0, 255), (0.05, 0, -128, 127), (0.3, -5, -8, 7), (1e-3, 100, 0, 255)],
                         ids=str)
def test_per_tensor_fake_quantize_gives_cpu_values_and_masks(dtype, qparams):
    scale, zp, lo, hi = qparams
    x = _inputs(dtype)
    for enabled in (None, 1, 0):
        def run(t, d):
            if enabled is None:
                return A.fake_quantize_per_tensor_affine_cachemask(t, scale, zp, lo, hi)
            return A._fake_quantize_per_tensor_affine_cachemask_tensor_qparams(
                t, torch.tensor([scale], device=d), torch.tensor([zp], dtype=torch.int32, device=d),
                torch.tensor([enabled], device=d), lo, hi)
        want, got = run(x, "cpu"), run(x.to("tpu"), "tpu")
        _same(got[0], want[0])
        _same(got[1], want[1])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64], ids=str)
@pytest.mark.parametrize("zp_kind", ["int", "float"])
@pytest.mark.parametrize("axis", [0, 1])
def test_per_channel_fake_quantize_gives_cpu_values_and_masks(dtype, zp_kind, axis):
    x = _inputs(dtype)
    n = x.size(axis)
    g = torch.Generator().manual_seed(1)
    scale = torch.rand(n, generator=g) * 0.2 + 0.01
    zp = torch.randint(0, 256, (n,), generator=g, dtype=torch.int32)
    if zp_kind == "float":
        zp = zp.float().clamp(max=254) + 0.5
    want = A.fake_quantize_per_channel_affine_cachemask(x, scale, zp, axis, 0, 255)
    got = A.fake_quantize_per_channel_affine_cachemask(x.to("tpu"), scale.to("tpu"), zp.to("tpu"), axis, 0, 255)
    _same(got[0], want[0])
    _same(got[1], want[1])


def test_fake_quantize_refuses_what_cpu_refuses():
    x = torch.randn(2, 3)
    calls = [
        lambda t: A.fake_quantize_per_tensor_affine_cachemask(t, 0.1, 300, 0, 255),
        lambda t: A.fake_quantize_per_tensor_affine_cachemask(t, 0.1, 3, 10, 5),
        lambda t: A.fake_quantize_per_tensor_affine_cachemask(t.long(), 0.1, 3, 0, 255),
        lambda t: A.fake_quantize_per_channel_affine_cachemask(t, torch.ones(3, device=t.device) / 10,
                                                               torch.zeros(3, dtype=torch.int32, device=t.device),
                                                               0, 0, 255),
        lambda t: A.fake_quantize_per_channel_affine_cachemask(t, torch.ones(2, device=t.device) / 10,
                                                               torch.zeros(2, dtype=torch.int32, device=t.device),
                                                               2, 0, 255),
        lambda t: A.fake_quantize_per_channel_affine_cachemask(t, torch.ones(3, device=t.device) / 10,
                                                               torch.zeros(3, dtype=torch.int32, device=t.device),
                                                               -1, 0, 255),
    ]
    for call in calls:
        with pytest.raises(Exception) as want:
            call(x)
        with pytest.raises(Exception) as got:
            call(x.to("tpu"))
            torch.tpu.synchronize()
        assert got.type is want.type, (got.value, want.value)
    # A zero point out of range, checked on the device.
    bad_zp = torch.tensor([3, 300], dtype=torch.int32)
    with pytest.raises(RuntimeError, match="zero_point"):
        A.fake_quantize_per_channel_affine_cachemask(x, torch.ones(2) / 10, bad_zp, 0, 0, 255)
    with pytest.raises(RuntimeError, match="zero_point"):
        A.fake_quantize_per_channel_affine_cachemask(x.to("tpu"), torch.ones(2, device="tpu") / 10,
                                                     bad_zp.to("tpu"), 0, 0, 255)
        torch.tpu.synchronize()


_QAT = {
    "fused": lambda: tq.FusedMovingAvgObsFakeQuantize(),
    "fused_symmetric": lambda: tq.FusedMovingAvgObsFakeQuantize(
        observer=tq.MovingAverageMinMaxObserver, quant_min=-128, quant_max=127, dtype=torch.qint8,
        qscheme=torch.per_tensor_symmetric),
    "fused_per_channel": lambda: tq.FusedMovingAvgObsFakeQuantize(
        observer=tq.MovingAveragePerChannelMinMaxObserver, quant_min=-128, quant_max=127, dtype=torch.qint8,
        qscheme=torch.per_channel_symmetric, ch_axis=0),
    "fake_quantize": lambda: tq.FakeQuantize(),
    "fake_quantize_per_channel": lambda: tq.FakeQuantize(
        observer=tq.PerChannelMinMaxObserver, quant_min=-128, quant_max=127, dtype=torch.qint8,
        qscheme=torch.per_channel_symmetric),
}


@pytest.mark.parametrize("name", sorted(_QAT))
def test_qat_fake_quantize_modules_train_as_on_cpu(name):
    """Outputs, input gradients and the module's state (observer range,
    scale, zero point, flags) equal CPU's over steps that observe, stop
    fake quantizing, and stop observing."""
    g = torch.Generator().manual_seed(2)
    cpu = _QAT[name]()
    tpu = copy.deepcopy(cpu).to("tpu")
    for step in range(4):
        if step == 2:
            cpu.disable_fake_quant(), tpu.disable_fake_quant()
        if step == 3:
            cpu.enable_fake_quant(), tpu.enable_fake_quant()
            cpu.disable_observer(), tpu.disable_observer()
        x = torch.randn(6, 10, generator=g) * (step + 1) + step * 0.3
        xc, xt = x.clone().requires_grad_(), x.to("tpu").requires_grad_()
        yc, yt = cpu(xc), tpu(xt)
        (yc * torch.arange(10.0)).sum().backward()
        (yt * torch.arange(10.0, device="tpu")).sum().backward()
        torch.testing.assert_close(yt.detach().cpu(), yc.detach(), rtol=1e-6, atol=1e-7)
        torch.testing.assert_close(xt.grad.cpu(), xc.grad)
        want = cpu.state_dict()
        for k, v in tpu.state_dict().items():
            torch.testing.assert_close(v.cpu(), want[k], rtol=1e-6, atol=1e-9, msg=f"step {step}: {k}")


def test_qat_of_a_small_model_matches_cpu():
    """prepare_qat on a small convolutional model, a few SGD steps: the
    losses and the observers' scales equal CPU's."""
    torch.manual_seed(0)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.quant, self.dequant = tq.QuantStub(), tq.DeQuantStub()
            self.conv = torch.nn.Conv2d(3, 4, 3)
            self.fc = torch.nn.Linear(4 * 6 * 6, 5)

        def forward(self, x):
            x = torch.relu(self.conv(self.quant(x)))
            return self.dequant(self.fc(x.flatten(1)))

    model = Net()
    model.qconfig = tq.get_default_qat_qconfig("x86")
    cpu = tq.prepare_qat(model.train())
    tpu = copy.deepcopy(cpu).to("tpu")
    opt_c = torch.optim.SGD(cpu.parameters(), lr=0.05)
    opt_t = torch.optim.SGD(tpu.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(3)
    for _ in range(3):
        x, y = torch.randn(4, 3, 8, 8, generator=g), torch.randint(0, 5, (4,), generator=g)
        losses = []
        for m, opt, d in ((cpu, opt_c, "cpu"), (tpu, opt_t, "tpu")):
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(m(x.to(d)), y.to(d))
            loss.backward()
            opt.step()
            losses.append(loss.item())
        assert abs(losses[0] - losses[1]) < 1e-4, losses
    want = cpu.state_dict()
    for k, v in tpu.state_dict().items():
        if k.endswith("scale") or k.endswith("zero_point"):
            torch.testing.assert_close(v.cpu(), want[k], rtol=1e-4, atol=1e-6, msg=k)
