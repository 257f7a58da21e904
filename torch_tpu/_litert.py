"""LiteRT export (litert-torch) of models that live on the tpu device.

``litert_torch.convert(model, sample_args)`` traces the model with
torch.export on the device it is on. On tpu, ``scaled_dot_product_attention``
(every ``nn.MultiheadAttention`` and ``nn.TransformerEncoderLayer``) picks
PyTorch's "overrideable" fused backend, so the exported graph holds
``aten._scaled_dot_product_fused_attention_overrideable``, which LiteRT has
no lowering for ("Lowering not found"); on CPU the graph holds CPU's flash
op, which torch's core decompositions turn back into the math backend. When
litert-torch's decomposition table loads, torch_tpu adds the same for the
overrideable op: PyTorch's math backend (which LiteRT lowers), its output laid
out as the fused op lays it out.

Its lowering also caches each constant under the address of
``tensor.contiguous().detach().cpu()``, which is the tensor itself for a CPU
model; for a device model it is a temporary copy, freed at once, whose
address the next constant's copy may take: a LayerNorm's bias then became
a copy of its weight. The fingerprint keeps its copy alive, so no two
constants share an address while the cache holds them. torch_tpu never
imports litert-torch.
"""

from __future__ import annotations

import torch

from ._after_import import after_import


def _matching_layout(out: torch.Tensor, query: torch.Tensor) -> torch.Tensor:
    """``out`` with the dimension order of ``query``'s strides, as the fused
    op's meta function allocates it (views after it stay valid)."""
    if out.dim() != query.dim():
        return out
    order = sorted(range(query.dim()), key=lambda d: query.stride()[d], reverse=True)
    if order == list(range(query.dim())):
        return out.contiguous()
    inverse = [order.index(d) for d in range(query.dim())]
    return out.permute(order).contiguous().permute(inverse)


def sdpa_overrideable_decomposition(
    query, key, value, attn_bias=None, dropout_p=0.0, is_causal=False, return_debug_mask=False, scale=None
):
    """``aten._scaled_dot_product_fused_attention_overrideable`` in core ATen
    ops: the output by PyTorch's math backend, and the logsumexp of the
    scaled, masked scores (float32, as the fused op returns it)."""
    aten = torch.ops.aten
    out, _ = aten._scaled_dot_product_attention_math.default(
        query, key, value, attn_mask=attn_bias, dropout_p=dropout_p, is_causal=is_causal, scale=scale
    )
    scores = torch.matmul(query.float(), key.float().transpose(-2, -1))
    scores = scores * (scale if scale is not None else query.size(-1) ** -0.5)
    if is_causal:
        keep = torch.ones(query.size(-2), key.size(-2), dtype=torch.bool, device=query.device).tril()
        scores = scores.masked_fill(~keep, float("-inf"))
    if attn_bias is not None:
        if attn_bias.dtype == torch.bool:
            scores = scores.masked_fill(~attn_bias, float("-inf"))
        else:
            scores = scores + attn_bias.float()
    lse = torch.logsumexp(scores, dim=-1)
    if query.dim() == 3:
        lse = lse.unsqueeze(0)
    seed = torch.zeros((), dtype=torch.long, device=query.device)
    offset = torch.zeros((), dtype=torch.long, device=query.device)
    return (_matching_layout(out, query), lse, None, None, query.size(-2), key.size(-2), seed, offset, None)


def _add_decomposition(module) -> None:
    add = getattr(module, "add_pre_convert_decomp", None)
    if add is not None:
        add(torch.ops.aten._scaled_dot_product_fused_attention_overrideable.default, sdpa_overrideable_decomposition)


def _patch_constant_cache(module) -> None:
    cls = getattr(module, "_ConstantFingerprint", None)
    original = getattr(cls, "from_tensor", None)
    if original is None or getattr(original, "_torch_tpu", False):
        return
    make = original.__func__

    def from_tensor(cls, tensor):
        fingerprint = make(cls, tensor)
        # Not a field: equality and hashing stay the fingerprint's own.
        object.__setattr__(fingerprint, "_torch_tpu_keepalive", tensor)
        return fingerprint

    from_tensor._torch_tpu = True
    cls.from_tensor = classmethod(from_tensor)


def install() -> None:
    after_import("litert_torch.fx_infra.decomp", _add_decomposition)
    after_import("litert_torch.backend.inline_consts", _patch_constant_cache)
