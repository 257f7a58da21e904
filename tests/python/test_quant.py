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


# The fused observer (torch.fused_moving_avg_obs_fake_quant's kernel) against
# CPU's over its argument space: outputs, masks, the four tensors it updates
# in place, and the errors (CPU's type and message) with the state CPU leaves.

_INF = float("inf")
_RANGES = [(-128, 127), (0, 255), (0, 15)]


def _fused(x, observe, fake_quant, stats, device, averaging_const=0.01, quant_range=(-128, 127), ch_axis=0,
           per_row=False, symmetric=False):
    """Runs the fused observer on `device` over copies of the CPU inputs:
    (the (output, mask) pair or the exception raised, the four updated tensors)."""
    state = [t.clone().to(device) for t in stats]
    flags = [(f if isinstance(f, torch.Tensor) else torch.tensor([f])).to(device) for f in (observe, fake_quant)]
    try:
        result = A._fused_moving_avg_obs_fq_helper(x.to(device), *flags, *state, averaging_const, *quant_range,
                                                   ch_axis, per_row, symmetric)
        if device == "tpu":
            torch.tpu.synchronize()
        result = tuple(t.cpu() for t in result)
    except Exception as e:  # noqa: BLE001 (compared with CPU's)
        result = e
    return result, [t.cpu() for t in state]


def _check_fused(x, observe, fake_quant, stats, **kw):
    want, want_state = _fused(x, observe, fake_quant, stats, "cpu", **kw)
    got, got_state = _fused(x, observe, fake_quant, stats, "tpu", **kw)
    where = f"x {tuple(x.shape)} observe={observe} fake_quant={fake_quant} {kw}"
    if isinstance(want, Exception):
        assert type(got) is type(want), f"{where}: {got!r}, CPU raised {want!r}"
        assert str(got).startswith(str(want).split("\n")[0]), f"{where}: {got}, CPU: {want}"
    else:
        assert not isinstance(got, Exception), f"{where}: raised {got!r}, CPU returned"
        _same(got[0], want[0])
        _same(got[1], want[1])
    # A per-channel observer that starts empty gets new parameters that are
    # unset until CPU computes them (fake quantizing that returned).
    resized = kw.get("per_row") and stats[0].numel() == 0 and want_state[2].numel() != stats[2].numel()
    set_by_cpu = not isinstance(want, Exception) and bool(torch.as_tensor(fake_quant).reshape(-1)[0])
    for i, (g, w) in enumerate(zip(got_state, want_state)):
        assert g.dtype == w.dtype and g.shape == w.shape, \
            f"{where}: state {i}: {g.dtype} {g.shape}, CPU {w.dtype} {w.shape}"
        if i < 2 or not resized or set_by_cpu:
            assert torch.equal(g.isnan(), w.isnan()) and torch.equal(g.nan_to_num(), w.nan_to_num()), \
                f"{where}: state {i}: {g}, CPU {w}"


def _observer_input(shape, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g) * (1 + seed % 4) + (seed % 3 - 1) * 0.7
    if x.numel() >= 8:
        x.view(-1)[:4] = torch.tensor([0.05, 0.15, -0.25, 3.5])  # (halfway cases at scales 0.1 and 1)
    return x


_SHAPES = [(4, 37), (3, 4, 5), (5,), (), (0, 3), (3, 0)]


def _stats_cases(x, per_row, ch_axis):
    """Running statistics and parameters as CPU accepts them: fresh, set,
    empty (as a per-channel observer starts), and oversized."""
    z = torch.zeros(1, dtype=torch.int32)
    if not per_row:
        return [[torch.tensor(_INF), torch.tensor(-_INF), torch.ones(1), z],
                [torch.tensor([-1.5]), torch.tensor([2.5]), torch.tensor([0.2]), torch.tensor([3], dtype=torch.int32)],
                [torch.tensor([-1.5, 7.0]), torch.tensor([2.5, 9.0]), torch.ones(1), z]]  # (CPU uses the first)
    empty = [torch.empty(0), torch.empty(0), torch.empty(0), torch.empty(0, dtype=torch.int32)]
    if not -x.dim() <= ch_axis < x.dim() or x.dim() < 1:
        return [empty]
    n = x.size(ch_axis)
    g = torch.Generator().manual_seed(n)
    low = -torch.rand(n, generator=g) * 2
    return [empty,
            [torch.full((n,), _INF), torch.full((n,), -_INF), torch.ones(n), torch.zeros(n, dtype=torch.int32)],
            [low, low + torch.rand(n, generator=g) * 3, torch.ones(n), torch.zeros(n, dtype=torch.int32)],
            [torch.cat([low, low]), torch.cat([low, low]) + 1, torch.ones(2 * n),
             torch.zeros(2 * n, dtype=torch.int32)]]


@pytest.mark.parametrize("quant_range", _RANGES, ids=str)
@pytest.mark.parametrize("symmetric", [False, True], ids=["affine", "symmetric"])
@pytest.mark.parametrize("per_row", [False, True], ids=["per_tensor", "per_channel"])
def test_fused_observer_matches_cpu_over_its_arguments(per_row, symmetric, quant_range):
    """Every shape kind (empty ones included), every valid and invalid
    ch_axis, the observer and the fake quantizer on and off, running
    statistics fresh, set, empty and oversized."""
    for seed, shape in enumerate(_SHAPES):
        x = _observer_input(shape, seed)
        for ch_axis in range(-x.dim() - 1, x.dim() + 1):
            for stats in _stats_cases(x, per_row, ch_axis):
                for observe, fake_quant in ((1, 1), (1, 0), (0, 1), (0, 0)):
                    _check_fused(x, observe, fake_quant, stats, quant_range=quant_range, ch_axis=ch_axis,
                                 per_row=per_row, symmetric=symmetric)


@pytest.mark.parametrize("quant_range", _RANGES, ids=str)
@pytest.mark.parametrize("symmetric", [False, True], ids=["affine", "symmetric"])
@pytest.mark.parametrize("per_row", [False, True], ids=["per_tensor", "per_channel"])
def test_fused_observer_steps_match_cpu(per_row, symmetric, quant_range):
    """An observer carried over steps of random inputs (several shapes and
    scales, infinities and NaN in the last), flags switching: the running
    range, scale, zero point, output and mask equal CPU's at every step."""
    g = torch.Generator().manual_seed(7)
    for shape in [(6, 10), (4, 3, 5)]:
        n = shape[0]
        cpu = [torch.empty(0), torch.empty(0), torch.empty(0), torch.empty(0, dtype=torch.int32)] if per_row else \
            [torch.tensor(_INF), torch.tensor(-_INF), torch.ones(1), torch.zeros(1, dtype=torch.int32)]
        tpu = [t.to("tpu") for t in cpu]
        flags = [(1, 1), (1, 1), (1, 0), (0, 1), (1, 1), (0, 0), (1, 1)]
        for step, (observe, fake_quant) in enumerate(flags):
            x = torch.randn(shape, generator=g) * 10.0 ** (step % 4 - 2) + step * 0.1
            if step == len(flags) - 1 and not per_row:
                x[0, 0], x[1, 1] = _INF, float("nan")
            args = (0.01 * (step + 1), *quant_range, 0, per_row, symmetric)
            want = A._fused_moving_avg_obs_fq_helper(x, torch.tensor([observe]), torch.tensor([fake_quant]), *cpu,
                                                     *args)
            got = A._fused_moving_avg_obs_fq_helper(x.to("tpu"), torch.tensor([observe], device="tpu"),
                                                    torch.tensor([fake_quant], device="tpu"), *tpu, *args)
            for t, c in zip(tpu, cpu):
                _same(t, c)
            _same(got[0], want[0])
            _same(got[1], want[1])
        assert tpu[0].numel() == (n if per_row else 1)


_EDGES = [0.0, 1e-36, -1e-36, 1e-30, -1e-30, 1e-9, -1e-9, 3e-7, 1e-3, -1e-3, 6.1e-5 * 255, 0.05, 0.5, -0.5, 1.0,
          -1.0, 5.0, -5.0, 1e30, -1e30, 3e38, -3e38]


@pytest.mark.parametrize("quant_range", _RANGES + [(-8, 7), (0, 1), (-1, 0), (0, 65535), (-2 ** 30, 2 ** 30 - 1)],
                         ids=str)
@pytest.mark.parametrize("symmetric", [False, True], ids=["affine", "symmetric"])
def test_fused_observer_parameters_match_cpu_at_edges(symmetric, quant_range):
    """FBGEMM's rule over ranges of every sign and magnitude (tiny ranges
    whose scale is a float32 subnormal, scales below the smallest, huge and
    reversed ranges), one channel per range: scales and zero points equal
    CPU's exactly."""
    pairs = torch.tensor([(a, b) for a in _EDGES for b in _EDGES])
    n = len(pairs)
    stats = [pairs[:, 0].contiguous(), pairs[:, 1].contiguous(), torch.ones(n), torch.zeros(n, dtype=torch.int32)]
    _check_fused(torch.zeros(n, 1), 0, 1, stats, quant_range=quant_range, per_row=True, symmetric=symmetric)


@pytest.mark.parametrize("quant_range", [(-128, 127), (0, 255), (3, 3), (5, 3)], ids=str)
def test_fused_observer_nonfinite_ranges_match_cpu(quant_range):
    """Infinite and NaN running ranges (an input with infinities or NaN), an
    empty integer range and a reversed one, per tensor."""
    values = [0.0, -1.0, 1.0, 1e-36, _INF, -_INF, float("nan"), 3e38, -3e38]
    x = _observer_input((4, 37), 1)
    for a in values:
        for b in values:
            for symmetric in (False, True):
                stats = [torch.tensor(a), torch.tensor(b), torch.ones(1), torch.zeros(1, dtype=torch.int32)]
                _check_fused(x, 0, 1, stats, quant_range=quant_range, symmetric=symmetric)


def test_fused_observer_reads_flags_and_parameters_as_cpu():
    """Flags read as CPU's item().toInt() (truncated, nonzero is on, one
    value), and parameter tensors of other shapes and dtypes: values or
    CPU's error, and the state CPU leaves."""
    x = _observer_input((4, 37), 2)
    fresh = [torch.tensor(_INF), torch.tensor(-_INF), torch.ones(1), torch.zeros(1, dtype=torch.int32)]
    for flag in [torch.tensor([0.5]), torch.tensor([-0.7]), torch.tensor([2.0]), torch.tensor([True]),
                 torch.tensor(3), torch.tensor([3], dtype=torch.int32), torch.tensor([1, 1]),
                 torch.tensor([], dtype=torch.long)]:
        _check_fused(x, flag, 1, fresh)
        _check_fused(x, 1, flag, fresh)
    z = torch.zeros(1, dtype=torch.int32)
    r = [torch.tensor(-1.0), torch.tensor(1.0)]
    for params in [[torch.tensor(1.0), z], [torch.ones(1), torch.tensor(0, dtype=torch.int32)],
                   [torch.ones(2), z], [torch.ones(1), torch.zeros(2, dtype=torch.int32)], [torch.empty(0), z],
                   [torch.ones(1, dtype=torch.float64), z], [torch.ones(1, dtype=torch.float16), z],
                   [torch.ones(1), torch.zeros(1)], [torch.ones(1), torch.zeros(1, dtype=torch.int64)],
                   [torch.ones(1, 1), torch.zeros(1, 1, dtype=torch.int32)]]:
        for observe, fake_quant in ((1, 1), (0, 1), (1, 0)):
            _check_fused(x, observe, fake_quant, r + params, quant_range=(0, 255))
    for stats in [[torch.tensor([[-1.0]]), torch.tensor([[1.0]]), torch.ones(1), z],
                  [torch.tensor(-1.0, dtype=torch.float64), torch.tensor(1.0, dtype=torch.float64), torch.ones(1), z],
                  [torch.empty(0), torch.empty(0), torch.ones(1), z]]:
        for observe, fake_quant in ((1, 1), (0, 1), (0, 0)):
            if stats[0].numel() == 0 and observe:
                continue  # (CPU writes past the end of empty statistics)
            _check_fused(x, observe, fake_quant, stats)
    for dtype in (torch.float64, torch.float16, torch.bfloat16, torch.int64):
        for observe, fake_quant in ((1, 1), (0, 1), (0, 0)):
            _check_fused(x.to(dtype), observe, fake_quant, fresh)
    for observe, fake_quant in ((1, 1), (0, 1), (1, 0)):
        _check_fused(x, observe, fake_quant, fresh, quant_range=(5, 3))
        _check_fused(x, observe, fake_quant, fresh, averaging_const=1e40)
    # Per channel: parameters CPU refuses, statistics of another dtype.
    n = x.size(0)
    rows = [torch.full((n,), -1.0), torch.full((n,), 1.0)]
    for params in [[torch.ones(n, dtype=torch.float64), torch.zeros(n, dtype=torch.int32)],
                   [torch.ones(n), torch.zeros(n, dtype=torch.int64)], [torch.ones(n), torch.zeros(n)],
                   [torch.ones(n - 1), torch.zeros(n - 1, dtype=torch.int32)],
                   [torch.ones(n), torch.zeros(n - 1, dtype=torch.int32)], [torch.tensor(1.0), torch.zeros(n)]]:
        for observe, fake_quant in ((1, 1), (0, 1), (1, 0)):
            _check_fused(x, observe, fake_quant, rows + params, per_row=True)
    for observe, fake_quant in ((1, 1), (0, 1), (1, 0)):
        _check_fused(x, observe, fake_quant, [r.double() for r in rows] + [torch.ones(n), torch.zeros(n)],
                     per_row=True)


def test_fused_observer_issue_cases():
    """The reported cases: a symmetric signed range with a positive input
    (output 1.0, zero point -128), per channel along axis 1 (CPU's error),
    an empty input with the observer off (parameters recomputed), and empty
    per-channel statistics (resized)."""
    fresh = [torch.tensor(_INF), torch.tensor(-_INF), torch.ones(1), torch.zeros(1, dtype=torch.int32)]
    out, state = _fused(torch.ones(2, 3), 1, 1, fresh, "tpu", symmetric=True)
    assert torch.equal(out[0], torch.ones(2, 3)) and state[3].tolist() == [-128]
    for ch_axis in (1, -1):
        got, _ = _fused(torch.ones(2, 3), 1, 1, [torch.empty(0)] * 3 + [torch.empty(0, dtype=torch.int32)], "tpu",
                        ch_axis=ch_axis, per_row=True)
        assert isinstance(got, RuntimeError) and "only supported on axis == 0" in str(got)
    _, state = _fused(torch.ones(0, 3), 0, 1, [torch.tensor(-1.0), torch.tensor(1.0)] + fresh[2:], "tpu",
                      quant_range=(0, 255))
    assert abs(state[2].item() - 2 / 255) < 1e-9 and state[3].tolist() == [127]
    _, state = _fused(torch.ones(2, 3), 1, 1, [torch.empty(0)] * 3 + [torch.empty(0, dtype=torch.int32)], "tpu",
                      per_row=True)
    assert [t.shape for t in state] == [(2,)] * 4 and state[0].tolist() == [1.0, 1.0]
