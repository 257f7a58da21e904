"""Fake quantization (quantization-aware training) as tpu kernels made of
the ops we lower, so they run as device programs: the per-tensor and
per-channel fake quantizers with their masks, and the fused moving-average
observer with its fake quantizer (``torch.ao.quantization.FakeQuantize`` and
``FusedMovingAvgObsFakeQuantize``). The arithmetic is CPU's: the input
scaled by the float reciprocal of the scale, rounded half to even, shifted
by the zero point, clamped, and scaled back; the quantization parameters
follow FBGEMM's rule, as CPU's observer does."""

from __future__ import annotations

import torch

_lib = None
_SMALL_SCALE = 6.1e-5  # FBGEMM's smallest scale


def _check_range(zero_point_ok, quant_min, quant_max):
    torch._check(quant_min <= quant_max, lambda: "`quant_min` should be less than or equal to `quant_max`.")
    torch._check(zero_point_ok, lambda: "`zero_point` must be between `quant_min` and `quant_max`.")


def _dtype_check(x, name):
    if x.dtype not in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
        raise NotImplementedError(f'"{name}" not implemented for \'{str(x.dtype).split(".")[1].capitalize()}\'')


def _compute_dtype(x):
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def _fake_quant(x, scale, zero_point, quant_min, quant_max, nonfinite_low: bool, float_zero_point=False):
    """(output, mask) for `scale` and `zero_point` broadcast against x (float32
    tensors). `nonfinite_low`: NaN and infinities quantize to quant_min (the
    per-channel kernel converts through int64); otherwise a NaN does and
    infinities clamp as numbers (the per-tensor kernel)."""
    ct = _compute_dtype(x)
    xf = x.to(ct)
    inv = torch.reciprocal(scale.float()).to(ct)
    zp = zero_point.to(ct)
    q = torch.round(xf * inv + zp) if float_zero_point else torch.round(xf * inv) + zp
    lo = torch.tensor(float(quant_min), dtype=ct, device=x.device)
    hi = torch.tensor(float(quant_max), dtype=ct, device=x.device)
    mask = (q >= lo) & (q <= hi)
    if nonfinite_low:
        clamped = torch.where(torch.isfinite(q), q.clamp(lo, hi), lo)
    else:
        clamped = torch.where(torch.isnan(q), lo, q.clamp(lo, hi))
    # (The per-tensor kernel scales back in float, even for double input.)
    back = scale.to(ct) if nonfinite_low else scale.float()
    out = ((clamped - zp).to(back.dtype) * back).to(x.dtype)
    return out, mask


def fake_quantize_per_tensor_affine_cachemask(self, scale, zero_point, quant_min, quant_max):
    _check_range(quant_min <= zero_point <= quant_max, quant_min, quant_max)
    _dtype_check(self, "fake_quantize_tensor_cachemask_kernel_type_handling")
    s = torch.tensor(scale, dtype=torch.float32, device=self.device)
    z = torch.tensor(zero_point, dtype=torch.int64, device=self.device)
    return _fake_quant(self, s, z, quant_min, quant_max, nonfinite_low=False)


def fake_quantize_per_tensor_affine_cachemask_tensor_qparams(self, scale, zero_point, fake_quant_enabled,
                                                             quant_min, quant_max):
    torch._check(quant_min <= quant_max, lambda: "`quant_min` should be less than or equal to `quant_max`.")
    _dtype_check(self, "fake_quantize_tensor_cachemask_kernel_type_handling")
    out, mask = _fake_quant(self, scale.reshape(-1)[:1].reshape(()), zero_point.reshape(-1)[:1].reshape(()),
                            quant_min, quant_max, nonfinite_low=False)
    on = fake_quant_enabled.reshape(-1)[:1].reshape(()).long() != 0  # CPU reads it as an integer
    return torch.where(on, out, self), mask | ~on


def fake_quantize_per_channel_affine_cachemask(self, scale, zero_point, axis, quant_min, quant_max):
    torch._check(quant_min <= quant_max, lambda: "`quant_min` should be less than or equal to `quant_max`.")
    torch._check(scale.dim() == 1, lambda: "scale should be a 1-D tensor")
    torch._check(zero_point.dim() == 1, lambda: "zero point should be a 1-D tensor")
    torch._check(scale.numel() == zero_point.numel(),
                 lambda: "scale and zero-point need to have the same dimensions")
    torch._check(axis >= 0, lambda: "`axis` must be between 0 and number of dimensions of input")
    torch._check_index(axis < self.dim(), lambda: f"Dimension out of range (expected to be in range of "
                                                       f"[{-self.dim()}, {self.dim() - 1}], but got {axis})")
    torch._check(scale.numel() == self.size(axis),
                 lambda: "dimensions of scale and zero-point are not consistent with input tensor")
    _dtype_check(self, "fake_quantize_channel_cachemask_cpu_type_handling")
    floating = zero_point.is_floating_point()
    if zero_point.numel():  # (checked on the device: no wait for the host)
        torch._assert_async(((zero_point >= quant_min) & (zero_point <= quant_max)).all(),
                            "`zero_point` must be between `quant_min` and `quant_max`.")
    shape = [1] * self.dim()
    shape[axis] = -1
    return _fake_quant(self, scale.reshape(shape), zero_point.reshape(shape), quant_min, quant_max,
                       nonfinite_low=True, float_zero_point=floating)


def _choose_qparams(min_val, max_val, quant_min, quant_max, symmetric):
    """FBGEMM's quantization parameters for ranges [min_val, max_val]
    (float32 tensors of one shape): float32 scale and int32 zero point."""
    f64 = torch.float64
    mn = torch.clamp(min_val, max=0.0).to(f64)
    mx = torch.clamp(max_val, min=0.0).to(f64)
    qmin, qmax = float(quant_min), float(quant_max)
    if symmetric:  # (in float, the half range an integer division, as FBGEMM)
        sym_min = float(-((quant_max - quant_min) // 2 + 1))
        sym_max = float((quant_max - quant_min) // 2)
        both = (mn < 0) & (mx > 0)
        max_scale = torch.maximum((mn.float() / sym_min).abs(), (mx.float() / sym_max).abs()).to(f64)
        mn = torch.where(both, max_scale * sym_min, mn)
        mx = torch.where(both, max_scale * sym_max, mx)
    # min and max are floats in FBGEMM's rule; the scale a double.
    as_float = lambda t: t.float().to(f64)  # noqa: E731
    mn, mx = as_float(mn), as_float(mx)
    span = qmax - qmin
    scale = (mx - mn) / span
    sf = scale.float()
    scale = torch.where((sf == 0) | torch.isinf(1.0 / sf), torch.full_like(scale, 0.1), scale)
    # Scales below the smallest: the smallest, the range widened to match.
    small = scale < _SMALL_SCALE
    amplifier = (_SMALL_SCALE / torch.where(small, scale, torch.ones_like(scale)).float()).to(f64)
    mn_small = torch.where(mn == 0, mn, torch.where(mx == 0, torch.full_like(mn, -_SMALL_SCALE * span),
                                                    as_float(mn * amplifier)))
    mx_small = torch.where(mn == 0, torch.full_like(mx, _SMALL_SCALE * span),
                           torch.where(mx == 0, mx, as_float(mx * amplifier)))
    mn = torch.where(small, as_float(mn_small), mn)
    mx = torch.where(small, as_float(mx_small), mx)
    scale = torch.where(small, as_float(torch.full_like(scale, _SMALL_SCALE)), scale)
    zp_from_min = qmin - mn / scale
    zp_from_max = qmax - mx / scale
    err_min = abs(qmin) - (mn / scale).abs()
    err_max = abs(qmax) - (mx / scale).abs()
    initial = torch.where(err_min < err_max, zp_from_min, zp_from_max)
    if symmetric:
        initial = torch.full_like(initial, (quant_min + quant_max) / 2)
    nudged = torch.where(initial < qmin, torch.full_like(initial, qmin),
                         torch.where(initial > qmax, torch.full_like(initial, qmax), torch.round(initial)))
    return scale.float(), nudged.to(torch.int32)


def fused_moving_avg_obs_fq_helper(self, observer_on, fake_quant_on, running_min, running_max, scale, zero_point,
                                   averaging_const, quant_min, quant_max, ch_axis, per_row_fake_quant=False,
                                   symmetric_quant=False):
    if self.numel() == 0:
        return self.clone(), torch.ones_like(self, dtype=torch.bool)
    x = self.contiguous()
    # (CPU reads both flags on the host; here they select on the device.)
    observing = observer_on.reshape(-1)[:1].reshape(()).long() == 1
    quantizing = fake_quant_on.reshape(-1)[:1].reshape(()).long() == 1
    if per_row_fake_quant:
        rows = x.reshape(x.size(0), -1) if x.dim() != 2 else x
        x_min, x_max = torch.aminmax(rows, dim=1)
    else:
        x_min, x_max = torch.aminmax(x)
    if running_min.numel() != x_min.numel():  # (a per-channel observer starts empty)
        running_min.resize_(x_min.shape).fill_(float("inf"))
        running_max.resize_(x_max.shape).fill_(float("-inf"))
    if per_row_fake_quant and scale.numel() != x_min.numel():
        scale.resize_(x_min.shape).fill_(1.0)
        zero_point.resize_(x_min.shape).zero_()
    c = float(averaging_const)
    new_min = torch.where(torch.isinf(running_min), x_min, running_min + c * (x_min - running_min))
    new_max = torch.where(torch.isinf(running_max), x_max, running_max + c * (x_max - running_max))
    running_min.copy_(torch.where(observing, new_min, running_min))
    running_max.copy_(torch.where(observing, new_max, running_max))
    s, z = _choose_qparams(running_min, running_max, quant_min, quant_max, symmetric_quant)
    scale.copy_(torch.where(quantizing, s.reshape(scale.shape), scale))
    zero_point.copy_(torch.where(quantizing, z.reshape(zero_point.shape).to(zero_point.dtype), zero_point))
    if per_row_fake_quant:
        out, mask = fake_quantize_per_channel_affine_cachemask(self, scale, zero_point, 0, quant_min, quant_max)
    else:
        out, mask = fake_quantize_per_tensor_affine_cachemask_tensor_qparams(
            self, scale, zero_point, torch.ones((), dtype=torch.long, device=self.device), quant_min, quant_max)
    return torch.where(quantizing, out, self), mask | ~quantizing


def register() -> None:
    global _lib
    _lib = torch.library.Library("aten", "IMPL")
    _lib.impl("fake_quantize_per_tensor_affine_cachemask", fake_quantize_per_tensor_affine_cachemask, "PrivateUse1")
    _lib.impl("_fake_quantize_per_tensor_affine_cachemask_tensor_qparams",
              fake_quantize_per_tensor_affine_cachemask_tensor_qparams, "PrivateUse1")
    _lib.impl("fake_quantize_per_channel_affine_cachemask", fake_quantize_per_channel_affine_cachemask, "PrivateUse1")
    _lib.impl("_fused_moving_avg_obs_fq_helper", fused_moving_avg_obs_fq_helper, "PrivateUse1")
