"""Factories computed from host integers only, as tpu kernels in the ops we
lower (so they run as device programs): tril_indices and triu_indices."""

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


def register() -> None:
    global _lib
    _lib = torch.library.Library("aten", "IMPL")
    _lib.impl("tril_indices", tril_indices, "PrivateUse1")
    _lib.impl("triu_indices", triu_indices, "PrivateUse1")
