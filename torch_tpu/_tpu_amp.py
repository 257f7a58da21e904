"""``torch.tpu.amp``: the device-specific spellings of automatic mixed
precision that CUDA code uses (``torch.cuda.amp.autocast()``,
``torch.cuda.amp.GradScaler()``), for code moved to the tpu device by
renaming the device. Like ``torch.cuda.amp`` they are deprecated aliases of
``torch.amp`` with the device filled in, and say so once (FutureWarning).

The default dtype is the tpu device's autocast dtype (bfloat16, which needs
no gradient scaling; ``torch.get_autocast_dtype("tpu")``), not CUDA's
float16.
"""

from __future__ import annotations

import functools
import warnings

import torch

__all__ = ["autocast", "GradScaler", "custom_fwd", "custom_bwd"]


def _deprecated(name: str, replacement: str) -> None:
    warnings.warn(f"`torch.tpu.amp.{name}(args...)` is deprecated. Please use `{replacement}` instead.",
                  FutureWarning, stacklevel=3)


class autocast(torch.amp.autocast):
    """``torch.autocast("tpu", ...)``."""

    def __init__(self, enabled: bool = True, dtype: "torch.dtype | None" = None, cache_enabled: bool = True):
        _deprecated("autocast", "torch.amp.autocast('tpu', args...)")
        super().__init__("tpu", enabled=enabled, dtype=dtype, cache_enabled=cache_enabled)


class GradScaler(torch.amp.GradScaler):
    """``torch.amp.GradScaler("tpu", ...)``."""

    def __init__(self, init_scale: float = 2.0**16, growth_factor: float = 2.0, backoff_factor: float = 0.5,
                 growth_interval: int = 2000, enabled: bool = True) -> None:
        _deprecated("GradScaler", "torch.amp.GradScaler('tpu', args...)")
        super().__init__("tpu", init_scale=init_scale, growth_factor=growth_factor,
                         backoff_factor=backoff_factor, growth_interval=growth_interval, enabled=enabled)


def custom_fwd(fwd=None, *, cast_inputs: "torch.dtype | None" = None):
    """``torch.amp.custom_fwd(device_type="tpu", ...)``."""
    _deprecated("custom_fwd", "torch.amp.custom_fwd(args..., device_type='tpu')")
    if fwd is None:
        return functools.partial(torch.amp.custom_fwd, device_type="tpu", cast_inputs=cast_inputs)
    return torch.amp.custom_fwd(fwd, device_type="tpu", cast_inputs=cast_inputs)


def custom_bwd(bwd=None):
    """``torch.amp.custom_bwd(device_type="tpu")``."""
    _deprecated("custom_bwd", "torch.amp.custom_bwd(args..., device_type='tpu')")
    if bwd is None:
        return functools.partial(torch.amp.custom_bwd, device_type="tpu")
    return torch.amp.custom_bwd(bwd, device_type="tpu")
