"""Fake quantization (quantization-aware training) as tpu kernels made of
the ops we lower, so they run as device programs: the per-tensor and
per-channel fake quantizers with their masks, and the fused moving-average
observer with its fake quantizer (``torch.ao.quantization.FakeQuantize`` and
``FusedMovingAvgObsFakeQuantize``). The arithmetic is CPU's: the input
scaled by the float reciprocal of the scale, rounded half to even, shifted
by the zero point, clamped, and scaled back; the quantization parameters
follow FBGEMM's rule, as CPU's observer does. Checks are CPU's, in CPU's
order, with CPU's exception types."""

from __future__ import annotations

from array import array

import torch

_lib = None
_INT32_MIN = -2 ** 31
_RANGE_MSG = "`quant_min` should be less than or         equal to `quant_max`."  # CPU's, spaces included
_ZP_MSG = "`zero_point` must be between `quant_min` and `quant_max`."
_TYPE_NAMES = {torch.float64: "Double", torch.float16: "Half", torch.bfloat16: "BFloat16", torch.int64: "Long",
               torch.int32: "Int", torch.int16: "Short", torch.int8: "Char", torch.uint8: "Byte", torch.bool: "Bool"}


def _f32(v: float) -> float:
    """v rounded to float32, as C++ converts a double to float."""
    return array("f", [v])[0]


_SMALL_SCALE = _f32(6.1e-5)  # FBGEMM's smallest scale, a float


def _item_error(t):
    return RuntimeError(f"a Tensor with {t.numel()} elements cannot be converted to Scalar")


def _check_item(*tensors):
    """CPU reads these with item(): each must hold one value."""
    for t in tensors:
        if t.numel() != 1:
            raise _item_error(t)


def _check_float(*tensors):
    """CPU reads these through float pointers."""
    for t in tensors:
        if t.dtype != torch.float32:
            raise RuntimeError(f"expected scalar type Float but found {_TYPE_NAMES.get(t.dtype, t.dtype)}")


def _dtype_check(x, name):
    if x.dtype not in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
        raise NotImplementedError(f'"{name}" not implemented for \'{_TYPE_NAMES.get(x.dtype, x.dtype)}\'')


def _compute_dtype(x):
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def _fake_quant(x, scale, zero_point, quant_min, quant_max, nonfinite_low: bool, float_zero_point=False):
    """(output, mask) for `scale` and `zero_point` broadcast against x (float32
    tensors). `nonfinite_low`: the per-channel kernel (NaN and infinities
    quantize to quant_min, converted through int64; the mask compares that
    int64); otherwise the per-tensor one (a NaN quantizes to quant_min,
    infinities clamp as numbers; the mask compares in float)."""
    ct = _compute_dtype(x)
    xf = x.to(ct)
    inv = torch.reciprocal(scale.float()).to(ct)
    zp = zero_point.to(ct)
    q = torch.round(xf * inv + zp) if float_zero_point else torch.round(xf * inv) + zp
    # CPU clamps and subtracts the zero point exactly (int64, double): past
    # 2**24, where float32 misses integers, that takes doubles here.
    exact = torch.float64 if max(abs(quant_min), abs(quant_max)) > 2 ** 24 else ct
    q_exact, zp_exact = q.to(exact), zero_point.to(exact)
    lo = torch.tensor(float(quant_min), dtype=exact, device=x.device)
    hi = torch.tensor(float(quant_max), dtype=exact, device=x.device)
    if nonfinite_low:
        mask = (q_exact >= lo) & (q_exact <= hi)
        clamped = torch.where(torch.isfinite(q_exact), q_exact.clamp(lo, hi), lo)
        back = scale.to(exact)
    else:
        mask = (q >= lo.to(ct)) & (q <= hi.to(ct))
        clamped = torch.where(torch.isnan(q_exact), lo, q_exact.clamp(lo, hi))
        back = scale.float()  # (The per-tensor kernel scales back in float, even for double input.)
    out = ((clamped - zp_exact).to(back.dtype) * back).to(x.dtype)
    return out, mask


def fake_quantize_per_tensor_affine_cachemask(self, scale, zero_point, quant_min, quant_max):
    torch._check(quant_min <= quant_max, lambda: _RANGE_MSG)
    torch._check(quant_min <= zero_point <= quant_max, lambda: _ZP_MSG)
    _dtype_check(self, "fake_quantize_tensor_cachemask_kernel_type_handling")
    s = torch.tensor(scale, dtype=torch.float32, device=self.device)
    z = torch.tensor(zero_point, dtype=torch.int64, device=self.device)
    return _fake_quant(self, s, z, quant_min, quant_max, nonfinite_low=False)


def _per_tensor_qparams_fake_quant(self, scale, zero_point, quant_min, quant_max):
    """CPU's per-tensor kernel with tensor parameters, its checks in CPU's
    order: the range, then the item() reads (zero point first), the dtype."""
    torch._check(quant_min <= quant_max, lambda: _RANGE_MSG)
    _check_item(zero_point, scale)
    _dtype_check(self, "fake_quantize_tensor_cachemask_kernel_type_handling")
    # (CPU reads the scale as a float, the zero point as an integer: truncated.)
    return _fake_quant(self, scale.reshape(()), zero_point.reshape(()).long(), quant_min, quant_max,
                       nonfinite_low=False)


def fake_quantize_per_tensor_affine_cachemask_tensor_qparams(self, scale, zero_point, fake_quant_enabled,
                                                             quant_min, quant_max):
    torch._check(quant_min <= quant_max, lambda: _RANGE_MSG)
    _check_item(zero_point, scale, fake_quant_enabled)
    out, mask = _per_tensor_qparams_fake_quant(self, scale, zero_point, quant_min, quant_max)
    on = fake_quant_enabled.reshape(()).long() != 0  # CPU reads it as an integer
    return torch.where(on, out, self), mask | ~on


def _check_per_channel(self, scale, zero_point, axis, quant_min, quant_max):
    """CPU's checks of the per-channel fake quantizer, in CPU's order, all but
    the zero points' range (a device value)."""
    torch._check(scale.dtype in (torch.float32, torch.bfloat16),
                 lambda: f"Scale must be Float or BFloat16, found {_TYPE_NAMES.get(scale.dtype, scale.dtype)}")
    torch._check(zero_point.dtype in (torch.int32, torch.float32, torch.float16),
                 lambda: "Zero-point must be Int32, Float or Half, found "
                         f"{_TYPE_NAMES.get(zero_point.dtype, zero_point.dtype)}")
    torch._check(scale.dim() == 1, lambda: "scale should be a 1-D tensor")
    torch._check(zero_point.dim() == 1, lambda: "zero point should be a 1-D tensor")
    torch._check(scale.numel() == zero_point.numel(),
                 lambda: "scale and zero-point need to have the same dimensions")
    torch._check(scale.numel() == self.size(axis),  # (size() raises CPU's IndexError for a bad axis)
                 lambda: "dimensions of scale and zero-point are not consistent with input tensor")
    torch._check(quant_min <= quant_max, lambda: _RANGE_MSG)
    torch._check(zero_point.is_floating_point() or zero_point.numel() > 0,
                 lambda: "min(): Expected reduction dim to be specified for input.numel() == 0. "
                         "Specify the reduction dim with the 'dim' argument.")
    torch._check(0 <= axis <= self.dim(), lambda: "`axis` must be between 0 and number of dimensions of input")
    _dtype_check(self, "fake_quantize_channel_cachemask_cpu_type_handling")


def _zero_points_in_range(zero_point, quant_min, quant_max):
    return ((zero_point >= quant_min) & (zero_point <= quant_max)).all()


def _per_channel_fake_quant(self, scale, zero_point, axis, quant_min, quant_max):
    shape = [1] * self.dim()
    shape[axis] = -1
    return _fake_quant(self, scale.reshape(shape), zero_point.reshape(shape), quant_min, quant_max,
                       nonfinite_low=True, float_zero_point=zero_point.is_floating_point())


def fake_quantize_per_channel_affine_cachemask(self, scale, zero_point, axis, quant_min, quant_max):
    _check_per_channel(self, scale, zero_point, axis, quant_min, quant_max)
    if not zero_point.is_floating_point():  # (checked on the device: no wait for the host)
        torch._assert_async(_zero_points_in_range(zero_point, quant_min, quant_max), _ZP_MSG)
    return _per_channel_fake_quant(self, scale, zero_point, axis, quant_min, quant_max)


def _cpp_half(v: int) -> int:
    return -((-v) // 2) if v < 0 else v // 2  # C++ integer division truncates


def _cpp_min0(v):
    return torch.where(v > 0, torch.zeros_like(v), v)  # std::min(v, 0.f): a NaN stays


def _cpp_max0(v):
    return torch.where(v < 0, torch.zeros_like(v), v)  # std::max(v, 0.f)


def _as_float(d):
    """Doubles rounded to float32, kept as doubles. The device flushes float32
    subnormals to zero, CPU keeps them (a scale of 3e-39 is FBGEMM's small
    scale case, not a zero scale): those are rounded here in double."""
    subnormal = torch.round(d * 2.0 ** 149) * 2.0 ** -149  # (exact; ties to even, as the conversion)
    return torch.where(d.abs() < 2.0 ** -126, subnormal, d.float().to(torch.float64))


def _choose_qparams(min_val, max_val, quant_min, quant_max, symmetric):
    """FBGEMM's ChooseQuantizationParams (CPU's observer) for ranges [min_val,
    max_val] (float32 tensors of one shape): float32 scales, int32 zero points.
    As FBGEMM: min, max and the scale are floats (float arithmetic done here
    in double, then rounded: the same values), the scale computed in double,
    the zero point in double; the halves and sums of the integer range are C++
    int arithmetic."""
    f64 = torch.float64
    qmin, qmax, span = float(quant_min), float(quant_max), quant_max - quant_min
    mn, mx = min_val.to(f64), max_val.to(f64)
    if symmetric:
        sym_min, sym_max = float(-(_cpp_half(span) + 1)), float(_cpp_half(span))
        both = (mn < 0) & (mx > 0)
        max_scale = torch.maximum(_as_float(mn / sym_min).abs(), _as_float(mx / sym_max).abs())
        mn = torch.where(both, _as_float(max_scale * sym_min), mn)
        mx = torch.where(both, _as_float(max_scale * sym_max), mx)
    mn, mx = _cpp_min0(mn), _cpp_max0(mx)
    scale = _as_float((mx - mn) / float(span))
    scale = torch.where((scale == 0) | torch.isinf(_as_float(1.0 / scale)), torch.full_like(scale, _f32(0.1)), scale)
    # Scales below the smallest: the smallest, the range widened to match.
    small = scale < _SMALL_SCALE
    amplifier = _as_float(_SMALL_SCALE / scale)
    wide = _f32(_SMALL_SCALE * _f32(span))
    mn_small = torch.where(mn == 0, mn, torch.where(mx == 0, torch.full_like(mn, -wide), _as_float(mn * amplifier)))
    mx_small = torch.where(mn == 0, torch.full_like(mx, wide), torch.where(mx == 0, mx, _as_float(mx * amplifier)))
    mn, mx = torch.where(small, mn_small, mn), torch.where(small, mx_small, mx)
    scale = torch.where(small, torch.full_like(scale, _SMALL_SCALE), scale)
    from_min, from_max = mn / scale, mx / scale
    initial = torch.where(abs(qmin) + from_min.abs() < abs(qmax) + from_max.abs(), qmin - from_min, qmax - from_max)
    if symmetric:
        initial = torch.where((mn < 0) & (mx > 0), torch.full_like(initial, (quant_min + quant_max) / 2), initial)
    # (nearbyint of a NaN converts to INT32_MIN on CPU.)
    nudged = torch.where(initial < qmin, torch.full_like(initial, qmin),
                         torch.where(initial > qmax, torch.full_like(initial, qmax),
                                     torch.where(torch.isnan(initial), torch.full_like(initial, _INT32_MIN),
                                                 torch.round(initial))))
    return scale.float(), nudged.to(torch.int32)


class _Flag:
    """observer_on / fake_quant_on as CPU reads them (item().toInt(): one
    value, truncated, on when nonzero). The flag stays on the device, where it
    selects, unless a step it guards would raise; then the host reads it, as
    CPU does, to know whether CPU takes that step."""

    def __init__(self, flag):
        _check_item(flag)
        self._flag, self._host = flag, None

    @property
    def value(self):
        """The host's bool once read, else a device bool."""
        return self._host if self._host is not None else self._flag.reshape(()).long() != 0

    def host(self) -> bool:
        if self._host is None:
            v = self._flag.item()
            if not -2 ** 31 - 1 < v < 2 ** 31:  # (NaN too)
                raise RuntimeError("value cannot be converted to type int without overflow")
            self._host = int(v) != 0
        return self._host


def _pick(on, new, old):
    """new where the flag is on: a host bool picks, a device bool selects."""
    return new if on is True else torch.where(on, new, old)


def _observe_error(x, y, running_min, running_max, per_row, ch_axis):
    """The error CPU's observer step raises for these arguments, or None."""
    if per_row and ch_axis != 0:
        return RuntimeError("Per-channel FakeQuant in fused_moving_avg_obs_fake_quant is only supported on axis == 0")
    if per_row and y.size(1) == 0:
        return IndexError("aminmax: Expected reduction dim 1 to have non-zero size.")
    if not per_row and x.numel() == 0:
        return RuntimeError("aminmax(): cannot compute aminmax over an empty dimension as the operation has no "
                            "identity.")
    try:
        _check_float(x, running_min, running_max)
    except RuntimeError as e:
        return e
    needed = y.size(0) if per_row else 1
    if running_min.numel() < needed or running_max.numel() < needed:  # (CPU writes past their end)
        return RuntimeError(f"fused_moving_avg_obs_fake_quant: running_min and running_max need {needed} values, "
                            f"got {running_min.numel()} and {running_max.numel()}")
    return None


def _observe(x, y, running_min, running_max, averaging_const, per_row, on):
    """CPU's moving average of the minima and maxima (of the rows of y, or of
    x), in float, into the first values of the running statistics."""
    x_min, x_max = torch.aminmax(y, dim=1) if per_row else torch.aminmax(x)
    c = _f32(averaging_const)
    for stat, cur in ((running_min, x_min), (running_max, x_max)):
        flat, cur = stat.reshape(-1), cur.reshape(-1)
        head = flat[:cur.numel()]
        # (The product rounded to float before the sum, as CPU's float arithmetic: a
        # fused program would otherwise contract them into one fused multiply-add.)
        step = (c * (cur - head).to(torch.float64)).float()
        new = torch.where(torch.isinf(head), cur, head + step)
        if flat.numel() > cur.numel():
            new = torch.cat([new, flat[cur.numel():]])
        stat.copy_(_pick(on, new, flat).reshape(stat.shape))


def _write_rows(t, values, count, on):
    """CPU's `t[i] = values[i]` for i < count."""
    if count:
        t[:count].copy_(_pick(on, values[:count].reshape((count,) + (1,) * (t.dim() - 1)).to(t.dtype), t[:count]))


def _select_error(t, i):
    if t.dim() == 0:
        return IndexError("select() cannot be applied to a 0-dim tensor.")
    return IndexError(f"select(): index {i} out of range for tensor of size {list(t.shape)} at dimension 0")


def _store_qparams(s, z, scale, zero_point, on):
    """CPU's loop `scale[i] = s[i]; zero_point[i] = z[i]`, which stops at the
    first index one of them lacks (an IndexError)."""
    n = s.numel()
    rows_s = 0 if scale.dim() == 0 else scale.size(0)
    rows_z = 0 if zero_point.dim() == 0 else zero_point.size(0)
    stop = min(rows_s, rows_z, n)
    _write_rows(scale, s.reshape(-1), stop + (stop < n and rows_z == stop < rows_s), on)
    _write_rows(zero_point, z.reshape(-1), stop, on)
    if stop < n:
        raise _select_error(scale, stop) if rows_s == stop else _select_error(zero_point, stop)


def _fake_quant_may_raise(x, running_min, running_max, scale, zero_point, quant_min, quant_max, ch_axis, per_row):
    """Whether CPU's fake-quantizing step could raise for these arguments
    (then the flag is read on the host)."""
    if quant_min > quant_max or x.dtype not in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
        return True
    if not per_row:
        return any(t.numel() != 1 for t in (running_min, running_max, scale, zero_point)) or \
            scale.dim() == 0 or zero_point.dim() == 0
    n = running_min.numel()
    return (running_min.dtype != torch.float32 or running_max.dtype != torch.float32 or running_max.numel() != n
            or scale.dim() != 1 or zero_point.dim() != 1 or scale.numel() != n or zero_point.numel() != n
            or n == 0 or not 0 <= ch_axis < x.dim() or n != x.size(ch_axis) or scale.dtype != torch.float32
            or zero_point.dtype not in (torch.int32, torch.float32, torch.float16))


def _fake_quantize(x, running_min, running_max, scale, zero_point, quant_min, quant_max, ch_axis, per_row,
                   symmetric, on):
    """CPU's fake-quantizing step: the parameters from the running range,
    stored, then the fake quantizer; raises where CPU does."""
    if per_row:
        _check_float(running_min)
        n = running_min.numel()
        if running_max.numel() < n:  # (CPU reads past its end)
            raise RuntimeError(f"fused_moving_avg_obs_fake_quant: running_max needs {n} values, "
                               f"got {running_max.numel()}")
        s, z = _choose_qparams(running_min.reshape(-1), running_max.reshape(-1)[:n], quant_min, quant_max, symmetric)
        _store_qparams(s, z, scale, zero_point, on)
        _check_per_channel(x, scale, zero_point, ch_axis, quant_min, quant_max)
        if not zero_point.is_floating_point():  # (checked on the device, where CPU checks it)
            ok = _zero_points_in_range(zero_point, quant_min, quant_max)
            torch._assert_async(ok if on is True else ok | ~on, _ZP_MSG)
        return _per_channel_fake_quant(x, scale, zero_point, ch_axis, quant_min, quant_max)
    _check_item(running_min, running_max)
    s, z = _choose_qparams(running_min.reshape(1).float(), running_max.reshape(1).float(), quant_min, quant_max,
                           symmetric)
    _store_qparams(s, z, scale, zero_point, on)
    return _per_tensor_qparams_fake_quant(x, scale, zero_point, quant_min, quant_max)


def fused_moving_avg_obs_fq_helper(self, observer_on, fake_quant_on, running_min, running_max, scale, zero_point,
                                   averaging_const, quant_min, quant_max, ch_axis, per_row_fake_quant=False,
                                   symmetric_quant=False):
    """CPU's fused observer and fake quantizer, step by step. The flags select
    on the device; the host reads one only where a step it guards would raise
    (CPU reads both on the host every call)."""
    torch._check(ch_axis < self.dim(),
                 lambda: "Error in fused_moving_avg_obs_fake_quant_cpu: ch_axis must be < self.dim()")
    observe = _Flag(observer_on)
    y = self
    if per_row_fake_quant:
        if self.dim() != 2:  # (CPU swaps dims 0 and ch_axis; for a negative ch_axis it only sets dim 0)
            dims = list(range(self.dim()))
            if ch_axis >= 0:
                dims[ch_axis], dims[0] = 0, ch_axis
            elif dims:
                dims[0] = ch_axis
            y = self.permute(dims).flatten(1)
        size = self.size(ch_axis)
        if running_min.numel() == 0:  # (a per-channel observer starts empty; the new parameters are unset)
            running_min.resize_(size).fill_(float("inf"))
            running_max.resize_(size).fill_(float("-inf"))
            scale.resize_(size)
            zero_point.resize_(size)
    error = _observe_error(self, y, running_min, running_max, per_row_fake_quant, ch_axis)
    if error is None:
        _observe(self, y, running_min, running_max, averaging_const, per_row_fake_quant, observe.value)
    elif observe.host():
        raise error
    fake_quant = _Flag(fake_quant_on)
    if _fake_quant_may_raise(self, running_min, running_max, scale, zero_point, quant_min, quant_max, ch_axis,
                           per_row_fake_quant) and not fake_quant.host():
        return self.clone(), torch.ones_like(self, dtype=torch.bool)
    on = fake_quant.value
    if on is False:
        return self.clone(), torch.ones_like(self, dtype=torch.bool)
    out, mask = _fake_quantize(self, running_min, running_max, scale, zero_point, quant_min, quant_max, ch_axis,
                               per_row_fake_quant, symmetric_quant, on)
    if on is True:
        return out, mask
    return torch.where(on, out, self), mask | ~on


def register() -> None:
    global _lib
    _lib = torch.library.Library("aten", "IMPL")
    _lib.impl("fake_quantize_per_tensor_affine_cachemask", fake_quantize_per_tensor_affine_cachemask, "PrivateUse1")
    _lib.impl("_fake_quantize_per_tensor_affine_cachemask_tensor_qparams",
              fake_quantize_per_tensor_affine_cachemask_tensor_qparams, "PrivateUse1")
    _lib.impl("fake_quantize_per_channel_affine_cachemask", fake_quantize_per_channel_affine_cachemask, "PrivateUse1")
    _lib.impl("_fused_moving_avg_obs_fq_helper", fused_moving_avg_obs_fq_helper, "PrivateUse1")
