"""Jagged nested tensors (``torch.nested``, ``layout=torch.jagged``) on tpu.

PyTorch's jagged tensor is a tensor subclass over one dense ``values``
tensor and its ``offsets``: nearly every op it supports is the op on
``values``, which runs as a tpu program like any other. The two that are
not are the conversions between the packed and the padded form, which
``to_padded_tensor``, ``nested_tensor_from_padded``, softmax and layer norm
over the ragged dim, and their gradients call. CPU and CUDA run them as
kernels that loop over the batch; here each is one gather by indices
computed on the device from the offsets (no host read):

- packed -> padded, ``(sum(L_b), D) -> (B, max_L, D)``: position ``l`` of
  row ``b`` reads value ``offsets[b] + l`` where ``l < L_b`` and is the
  padding value elsewhere (rows longer than ``max_L`` are cut, as on CPU);
- padded -> packed, ``(B, L, D) -> (total, D)``: value ``i`` belongs to row
  ``b = searchsorted(offsets[1:], i, right=True)`` at position
  ``l = i - offsets[b]`` and reads ``padded[b, l]``; a row longer than
  ``L`` is refused as on CPU, by a device-side assert.

Each is the other's gradient in PyTorch's autograd formulas, so gradients
flow through both.
"""

from __future__ import annotations

import torch

_lib = None


def _check_offsets(op: str, offsets) -> torch.Tensor:
    if len(offsets) != 1:
        raise RuntimeError(f"{op}: only one jagged dimension is supported (got {len(offsets)} offsets tensors)")
    off = offsets[0]
    if off.dim() != 1 or off.numel() < 1:
        raise RuntimeError(f"{op}: offsets must be 1-d with at least one entry, got shape {tuple(off.shape)}")
    return off


def jagged_to_padded_dense_forward(values, offsets, max_lengths, padding_value=0.0):
    op = "_jagged_to_padded_dense_forward"
    off = _check_offsets(op, offsets)
    if len(max_lengths) != 1:
        raise RuntimeError(f"{op}: expected one max length, got {list(max_lengths)}")
    if values.dim() < 1:
        raise RuntimeError(f"{op}: values must have at least one dim, got shape {tuple(values.shape)}")
    batch, length = off.numel() - 1, int(max_lengths[0])
    rest = tuple(values.shape[1:])
    out = values.new_full((batch, length) + rest, padding_value)
    if batch == 0 or length == 0 or values.shape[0] == 0:
        return out
    off = off.to(torch.int64)
    pos = torch.arange(length, device=values.device)
    mask = pos < (off[1:] - off[:-1]).unsqueeze(1)                      # (B, L)
    index = torch.where(mask, off[:-1].unsqueeze(1) + pos, 0).clamp_(max=values.shape[0] - 1)
    gathered = values.index_select(0, index.reshape(-1)).reshape((batch, length) + rest)
    return torch.where(mask.reshape((batch, length) + (1,) * len(rest)), gathered, out)


def padded_dense_to_jagged_forward(dense, offsets, total_L=None):
    op = "_padded_dense_to_jagged_forward"
    off = _check_offsets(op, offsets)
    if dense.dim() < 2:
        raise RuntimeError(f"{op}: the padded tensor needs a batch and a length dim, got shape {tuple(dense.shape)}")
    batch, length = dense.shape[0], dense.shape[1]
    if off.numel() - 1 != batch:
        raise RuntimeError(f"{op}: {off.numel()} offsets for a batch of {batch} (padded shape {tuple(dense.shape)}); "
                           "expected batch + 1")
    # Without total_L the size is the last offset, read from the device (as
    # CPU's and CUDA's kernels do); the nested ops pass it.
    total = int(total_L) if total_L is not None else int(off[-1])
    rest = tuple(dense.shape[2:])
    if total == 0 or batch == 0 or length == 0:
        return dense.new_zeros((total,) + rest)
    off = off.to(torch.int64)
    # CPU refuses a row longer than the padded length: checked on the device,
    # raised at the next synchronization (as CUDA's device-side asserts are).
    torch._assert_async((off[1:] - off[:-1]).amax() <= length,
                        f"{op}(): found a batch item longer than the max length {length} of the padded input "
                        f"(shape {tuple(dense.shape)}); pad to the longest row")
    i = torch.arange(total, device=dense.device)
    row = torch.searchsorted(off[1:], i, right=True).clamp_(max=batch - 1)
    pos = i - off.index_select(0, row)
    inside = pos < length
    flat = dense.reshape((batch * length,) + rest)
    got = flat.index_select(0, row * length + torch.where(inside, pos, 0))
    return torch.where(inside.reshape((total,) + (1,) * len(rest)), got, 0)


def register() -> None:
    global _lib
    _lib = torch.library.Library("aten", "IMPL")
    _lib.impl("_jagged_to_padded_dense_forward", jagged_to_padded_dense_forward, "PrivateUse1")
    _lib.impl("_padded_dense_to_jagged_forward", padded_dense_to_jagged_forward, "PrivateUse1")
