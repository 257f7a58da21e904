"""nn.MultiheadAttention and nn.TransformerEncoder in eval mode take
PyTorch's fused inference ops (and, with a padding mask, nested tensors) on
tpu as on CPU: the same outputs."""

import pytest
import torch
import torch.nn as nn

import torch_tpu  # noqa: F401


def _same(a, b, tol=1e-5):
    assert a.device.type == "tpu" and a.shape == b.shape and a.dtype == b.dtype
    torch.testing.assert_close(a.cpu(), b, rtol=tol, atol=tol, equal_nan=True)


@pytest.mark.parametrize("need_weights,average", [(False, True), (True, True), (True, False)])
@pytest.mark.parametrize("masks", ["none", "key_padding", "attn", "both"])
def test_multihead_attention_fast_path(need_weights, average, masks):
    torch.manual_seed(0)
    m = nn.MultiheadAttention(16, 4, batch_first=True).eval()
    x = torch.randn(3, 5, 16)
    kpm = torch.tensor([[False] * 5, [False] * 3 + [True] * 2, [False] * 4 + [True]])
    am = torch.triu(torch.ones(5, 5, dtype=torch.bool), 1)
    kw = {"need_weights": need_weights, "average_attn_weights": average}
    if masks in ("key_padding", "both"):
        kw["key_padding_mask"] = kpm
    if masks in ("attn", "both"):
        kw["attn_mask"] = am
    with torch.no_grad():
        ref = m(x, x, x, **kw)
        mt = m.to("tpu")
        got = mt(x.to("tpu"), x.to("tpu"), x.to("tpu"),
                 **{k: v.to("tpu") if isinstance(v, torch.Tensor) else v for k, v in kw.items()})
    _same(got[0], ref[0])
    if need_weights:
        _same(got[1], ref[1])
    else:
        assert got[1] is None and ref[1] is None


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("padding", [False, True])
@pytest.mark.parametrize("nested", [True, False])
def test_transformer_encoder_fast_path(norm_first, activation, padding, nested):
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, activation=activation, batch_first=True,
                                       norm_first=norm_first)
    enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=nested).eval()
    x = torch.randn(3, 6, 16)
    mask = torch.tensor([[False] * 6, [False] * 4 + [True] * 2, [False] + [True] * 5]) if padding else None
    with torch.no_grad():
        ref = enc(x, src_key_padding_mask=mask)
        got = enc.to("tpu")(x.to("tpu"), src_key_padding_mask=None if mask is None else mask.to("tpu"))
    _same(got, ref, tol=1e-4)


def test_left_aligned_check():
    t = torch.randn(2, 3, 4, device="tpu")
    left = torch.tensor([[True, True, False], [True, False, False]], device="tpu")
    assert torch._nested_tensor_from_mask_left_aligned(t, left)
    assert not torch._nested_tensor_from_mask_left_aligned(t, ~left)
