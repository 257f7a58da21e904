"""Factories computed from host integers only, as tpu kernels in the ops we
lower (so they run as device programs): tril_indices, triu_indices and
kaiser_window (whose CPU kernel is a dispatch stub no other device has)."""

from __future__ import annotations

import torch

_lib = None


def _tri_indices(name, row, col, offset, dtype, device, lower):
    torch._check(row >= 0, lambda: f"row must be non-negative, got{row}")
    torch._check(col >= 0, lambda: f"col must be non-negative, got{col}")
    dtype = torch.long if dtype is None else dtype
    torch._check(dtype in (torch.long, torch.int32), lambda: f"\"{name}\" not implemented for '{dtype}'")
    i = torch.arange(row, device=device).view(-1, 1).expand(row, col)
    j = torch.arange(col, device=device).view(1, -1).expand(row, col)
    keep = (j - i) <= offset if lower else (j - i) >= offset
    return torch.stack([i[keep], j[keep]]).to(dtype)


def tril_indices(row, col, offset=0, *, dtype=None, layout=None, device=None, pin_memory=None):
    return _tri_indices("tril_indices", row, col, offset, dtype, device, True)


def triu_indices(row, col, offset=0, *, dtype=None, layout=None, device=None, pin_memory=None):
    return _tri_indices("triu_indices", row, col, offset, dtype, device, False)


def kaiser_window(window_length, periodic=True, beta=12.0, *, dtype=None, layout=None, device=None, pin_memory=None):
    """CPU's kaiser_window: i0(beta * sqrt(|1 - ((n - a) / a)^2|)) / i0(beta),
    a = (N - 1) / 2, computed in the dtype's opmath precision."""
    dtype = torch.get_default_dtype() if dtype is None else dtype
    torch._check(dtype.is_floating_point, lambda: f"kaiser_window expects floating point dtypes, got: {dtype}")
    torch._check(window_length >= 0,
                 lambda: f"kaiser_window requires non-negative window_length, got window_length={window_length}")
    if window_length <= 1:
        return torch.ones(window_length, dtype=dtype, device=device)
    n = window_length + 1 if periodic else window_length
    opmath = torch.float64 if dtype == torch.float64 else torch.float32
    alpha = torch.tensor((n - 1) / 2.0, dtype=opmath).item()  # (rounded to opmath first, as CPU does)
    beta = torch.tensor(beta, dtype=opmath, device=device)
    i = torch.arange(n, dtype=dtype, device=device).to(opmath)  # (CPU's positions are in the dtype)
    x = beta * torch.sqrt(torch.abs(1 - ((i - alpha) / alpha) ** 2))
    return (torch.special.i0(x) / torch.special.i0(beta)).to(dtype)[: window_length]


def register() -> None:
    global _lib
    _lib = torch.library.Library("aten", "IMPL")
    _lib.impl("tril_indices", tril_indices, "PrivateUse1")
    _lib.impl("triu_indices", triu_indices, "PrivateUse1")
    for overload in ("kaiser_window", "kaiser_window.periodic", "kaiser_window.beta"):
        _lib.impl(overload, kaiser_window, "PrivateUse1")
