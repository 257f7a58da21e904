"""The inference fast paths of nn.MultiheadAttention and nn.TransformerEncoderLayer.

In eval mode without gradients PyTorch calls fused ops for these layers on
every device it lists as supported, the PrivateUse1 backend included:
``aten::_native_multi_head_attention`` and ``aten::_transformer_encoder_layer_fwd``.
Here they are the same math in the ops we lower (projections, scaled
dot-product scores, softmax, layer norm, the feed-forward), registered as
the tpu kernels of those ops, so each runs as device programs.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

_lib = None


def _mask_for_scores(mask: torch.Tensor, mask_type, batch: int, heads: int, t: int, s: int) -> torch.Tensor:
    # mask_type 0: an attention mask [T, S]; 1: a key padding mask [B, S];
    # 2: a merged mask broadcastable to [B, H, T, S]. True (or -inf) masks out.
    if mask_type == 1 or (mask_type is None and mask.dim() == 2 and mask.shape == (batch, s) and (t, s) != (batch, s)):
        return mask.view(batch, 1, 1, s)
    if mask.dim() == 2:
        return mask.view(1, 1, t, s)
    if mask.dim() == 3:
        return mask.view(mask.shape[0], 1, t, s) if mask.shape[0] == batch else mask.view(1, *mask.shape)
    return mask


def native_multi_head_attention(query, key, value, embed_dim, num_head, qkv_weight, qkv_bias, proj_weight,
                                proj_bias, mask=None, need_weights=True, average_attn_weights=True,
                                mask_type=None):
    b, t, e = query.shape
    s = key.shape[1]
    d = embed_dim // num_head
    wq, wk, wv = qkv_weight.split(embed_dim)
    bq, bk, bv = qkv_bias.split(embed_dim)
    q = F.linear(query, wq, bq).view(b, t, num_head, d).transpose(1, 2)
    k = F.linear(key, wk, bk).view(b, s, num_head, d).transpose(1, 2)
    v = F.linear(value, wv, bv).view(b, s, num_head, d).transpose(1, 2)
    scores = (q / math.sqrt(d)) @ k.transpose(-2, -1)
    if mask is not None:
        m = _mask_for_scores(mask, mask_type, b, num_head, t, s)
        scores = scores.masked_fill(m, float("-inf")) if m.dtype == torch.bool else scores + m
    attn = torch.softmax(scores, -1)
    out = (attn @ v).transpose(1, 2).reshape(b, t, embed_dim)
    out = F.linear(out, proj_weight, proj_bias)
    if not need_weights:
        return out, None
    return out, attn.mean(1) if average_attn_weights else attn


def transformer_encoder_layer_fwd(src, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias,
                                  use_gelu, norm_first, eps, norm_weight_1, norm_bias_1, norm_weight_2,
                                  norm_bias_2, ffn_weight_1, ffn_bias_1, ffn_weight_2, ffn_bias_2, mask=None,
                                  mask_type=None):
    def attend(x):
        return native_multi_head_attention(x, x, x, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight,
                                           proj_bias, mask, False, True, mask_type)[0]

    def feed_forward(x):
        h = F.linear(x, ffn_weight_1, ffn_bias_1)
        return F.linear(F.gelu(h) if use_gelu else F.relu(h), ffn_weight_2, ffn_bias_2)

    def norm(x, w, bias):
        return F.layer_norm(x, (embed_dim,), w, bias, eps)

    if norm_first:
        x = src + attend(norm(src, norm_weight_1, norm_bias_1))
        return x + feed_forward(norm(x, norm_weight_2, norm_bias_2))
    x = norm(src + attend(src), norm_weight_1, norm_bias_1)
    return norm(x + feed_forward(x), norm_weight_2, norm_bias_2)


def nested_tensor_from_mask_left_aligned(t, mask):
    # mask [B, S], True at valid positions: left aligned when every row is
    # a run of True followed only by False.
    m = mask.to(torch.int32)
    return bool((m[:, 1:] <= m[:, :-1]).all().item()) if m.shape[1] > 1 else True


def nested_tensor_from_mask(t, mask, mask_check=True):
    # t [B, S, E] and mask [B, S] (True at valid, left-aligned positions): a
    # nested tensor of the B sequences t[b, :len_b].
    if mask_check and not nested_tensor_from_mask_left_aligned(t, mask):
        raise RuntimeError("_nested_tensor_from_mask: the mask is not left aligned (valid positions first in "
                           "every row); pass mask_check=False to skip this check")
    lengths = mask.sum(1).tolist()
    e = t.shape[-1]
    buffer = torch.cat([t[b, :n].reshape(-1) for b, n in enumerate(lengths)])
    sizes = torch.tensor([[n, e] for n in lengths], dtype=torch.int64)
    strides = torch.tensor([[e, 1]] * len(lengths), dtype=torch.int64)
    offsets = torch.tensor([0] + [n * e for n in lengths[:-1]], dtype=torch.int64).cumsum(0)
    return torch._nested_view_from_buffer(buffer, sizes, strides, offsets)


def nested_transformer_encoder_layer_fwd(src, *args, mask=None, mask_type=None):
    # A nested batch: padded, run with the matching key padding mask, and
    # nested again with the same lengths (PyTorch passes no other mask with
    # nested input).
    if mask is not None:
        raise RuntimeError("_transformer_encoder_layer_fwd: a mask with NestedTensor input is not supported")
    lengths = src._nested_tensor_size()[:, 0].tolist()
    padded = src.to_padded_tensor(0.0)
    s = padded.shape[1]
    valid = torch.arange(s).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)
    valid = valid.to(padded.device)
    out = transformer_encoder_layer_fwd(padded, *args, mask=~valid, mask_type=1)
    return nested_tensor_from_mask(out, valid, mask_check=False)


def register() -> None:
    global _lib
    _lib = torch.library.Library("aten", "IMPL")
    _lib.impl("_native_multi_head_attention", native_multi_head_attention, "PrivateUse1")
    _lib.impl("_transformer_encoder_layer_fwd", transformer_encoder_layer_fwd, "PrivateUse1")
    _lib.impl("_nested_tensor_from_mask_left_aligned", nested_tensor_from_mask_left_aligned, "PrivateUse1")
    _lib.impl("_nested_tensor_from_mask", nested_tensor_from_mask, "PrivateUse1")
    _lib.impl("_transformer_encoder_layer_fwd", nested_transformer_encoder_layer_fwd, "NestedTensorPrivateUse1")
