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

``F.scaled_dot_product_attention`` over jagged tensors: CPU reaches it
through strided-layout nested tensors (PyTorch's math fallback), CUDA
through its varlen flash kernels; on tpu the jagged query, key and value
are padded to their longest sequence, attend with a mask of each batch
item's key length (and causal, top-left, where asked), and the result is
packed back to the query's offsets: dense programs only, gradients through
the two conversions.
"""

from __future__ import annotations

import torch
from torch.nested._internal.nested_tensor import nested_from_padded

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


def _padded_heads(t):
    """A jagged (B, H, j, D) or (B, j, H, D) tensor as padded (B, H, L, D),
    with its lengths."""
    x = t.transpose(1, t._ragged_idx) if t._ragged_idx != 1 else t  # (B, j, H, D)
    padded = torch.nested.to_padded_tensor(x.contiguous(), 0.0)
    return padded.transpose(1, 2), x.offsets().diff()


def jagged_sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """SDPA over jagged tpu tensors with the ragged dim at 2 (B, H, j, D):
    padded attention masked by each item's key length."""
    torch._check(attn_mask is None, lambda: "scaled_dot_product_attention: an attn_mask with jagged inputs is "
                                            "not supported (CPU's and CUDA's refuse it too)")
    torch._check(all(t.dim() == 4 for t in (query, key, value)),
                 lambda: f"scaled_dot_product_attention: jagged inputs of 4 dims (B, H, j, D) expected, got "
                         f"{query.dim()}, {key.dim()} and {value.dim()}")
    q, q_len = _padded_heads(query)
    k, k_len = _padded_heads(key)
    v, _ = _padded_heads(value)
    lq, lk = q.shape[2], k.shape[2]
    mask = (torch.arange(lk, device=k.device) < k_len.unsqueeze(1)).view(-1, 1, 1, lk)
    if is_causal:
        mask = mask & torch.ones(lq, lk, dtype=torch.bool, device=q.device).tril()
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p,
                                                           scale=scale, enable_gqa=enable_gqa)
    x = query.transpose(1, query._ragged_idx) if query._ragged_idx != 1 else query
    out = out.transpose(1, 2)  # (B, L, H, Dv)
    packed = nested_from_padded(out, x.offsets(), sum_S=x.values().shape[0])
    return packed.transpose(1, query._ragged_idx) if query._ragged_idx != 1 else packed


def _route_jagged_sdpa() -> None:
    """Jagged SDPA on tpu takes jagged_sdpa; every other device (and the
    jagged tensors whose ragged dim is not the sequence's, which PyTorch runs
    as dense SDPA on the values) keeps PyTorch's."""
    from torch.nested._internal import ops

    original = ops.jagged_scaled_dot_product_attention
    if getattr(original, "_torch_tpu", False):
        return

    def route(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        if query.device.type == "tpu" and query._ragged_idx != 1 and query.dim() == 4:
            return jagged_sdpa(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
        return original(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)

    route._torch_tpu = True
    ops.jagged_scaled_dot_product_attention = route


def register() -> None:
    global _lib
    _lib = torch.library.Library("aten", "IMPL")
    _lib.impl("_jagged_to_padded_dense_forward", jagged_to_padded_dense_forward, "PrivateUse1")
    _lib.impl("_padded_dense_to_jagged_forward", padded_dense_to_jagged_forward, "PrivateUse1")
    _route_jagged_sdpa()
