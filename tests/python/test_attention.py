"""scaled_dot_product_attention on tpu: one fused program forward and one
backward ("overrideable" backend) where it covers the call, PyTorch's math
decomposition otherwise; both against CPU PyTorch, values and gradients."""

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import torch_tpu
from conftest import assert_close_to_float64_reference, assert_same, make

TOL = {torch.float32: dict(rtol=1e-5, atol=2e-5), torch.float64: dict(rtol=1e-10, atol=1e-10),
       torch.bfloat16: dict(rtol=2e-2, atol=2e-2), torch.float16: dict(rtol=2e-3, atol=2e-3)}


def run(fn, tensors, dtype=torch.float32, grad=True, math_reference=False):
    """fn on CPU and tpu: output and the gradients of every floating input.
    Returns the tpu output (its grad_fn tells the backend)."""
    cpu = [t.detach().clone().requires_grad_(grad and t.is_floating_point()) for t in tensors]
    dev = [t.detach().to("tpu").requires_grad_(grad and t.is_floating_point()) for t in tensors]
    # Half precision on the CPU: compare against float math, rounded.
    ref_in = [t.detach().double().requires_grad_(t.requires_grad) if t.is_floating_point() else t for t in cpu] \
        if dtype in (torch.float16, torch.bfloat16) else cpu
    if math_reference:
        with sdpa_kernel([SDPBackend.MATH]):
            out_c = fn(*ref_in)
    else:
        out_c = fn(*ref_in)
    out_t = fn(*dev)
    tol = TOL[dtype]
    assert_same(out_t, out_c.to(dtype), **tol)
    if grad:
        g = make(tuple(out_c.shape), torch.float32, seed=9).to(out_c.dtype)
        out_c.backward(g)
        out_t.backward(g.to(dtype).to("tpu"))
        for a, b in zip(dev, ref_in):
            if b.grad is not None:
                assert_same(a.grad, b.grad.to(dtype), rtol=tol["rtol"] * 10, atol=tol["atol"] * 10)
    return out_t


def qkv(shape_q, shape_k, shape_v, dtype=torch.float32, seed=0):
    return [make(s, torch.float32, seed=seed + i, low=-2, high=2).to(dtype)
            for i, s in enumerate((shape_q, shape_k, shape_v))]


def fused(out):
    return type(out.grad_fn).__name__.startswith("ScaledDotProductFusedAttentionOverrideable")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_fused_matches_cpu(dtype, causal):
    for shapes in [((2, 3, 5, 8), (2, 3, 7, 8), (2, 3, 7, 6)),  # L != S, value width != key width
                   ((1, 2, 4, 4), (1, 2, 4, 4), (1, 2, 4, 4)),
                   ((3, 6, 5), (3, 6, 5), (3, 6, 5)),            # rank 3
                   ((4, 3), (6, 3), (6, 2))]:                     # rank 2
        out = run(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
                  qkv(*shapes, dtype=dtype), dtype=dtype)
        assert fused(out)


@pytest.mark.parametrize("mask_shape", [(5, 7), (2, 1, 5, 7), (1, 3, 1, 7), (1, 7)], ids=str)
def test_boolean_and_additive_masks(mask_shape):
    q, k, v = qkv((2, 3, 5, 8), (2, 3, 7, 8), (2, 3, 7, 8))
    keep = torch.rand(mask_shape, generator=torch.Generator().manual_seed(1)) > 0.3
    keep[..., 0] = True  # no row entirely masked (see below for those)
    out = run(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=keep.to(q.device)), [q, k, v])
    assert fused(out)
    # An additive float mask, differentiated too.
    bias = make(mask_shape, torch.float32, seed=2, low=-3, high=1)
    out = run(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m), [q, k, v, bias])
    assert fused(out)


def test_scale_and_non_contiguous_inputs():
    # The GPT layout: [batch, seq, heads, dim] transposed to [batch, heads, seq, dim].
    q, k, v = (t.transpose(1, 2) for t in qkv((2, 5, 3, 8), (2, 5, 3, 8), (2, 5, 3, 8)))
    assert not q.is_contiguous()
    for scale in (None, 0.1, 2.0):
        out = run(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale), [q, k, v])
        assert fused(out)


def test_fully_masked_rows_and_zero_sizes():
    # A row whose every key is masked: PyTorch's math backend returns zeros
    # (a safe softmax) and no gradient through it.
    q, k, v = qkv((1, 2, 4, 8), (1, 2, 6, 8), (1, 2, 6, 8))
    keep = torch.ones(4, 6, dtype=torch.bool)
    keep[2] = False
    out = run(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=keep.to(q.device)), [q, k, v],
              math_reference=True)
    assert fused(out) and torch.equal(out[:, :, 2].cpu(), torch.zeros(1, 2, 8))
    for shapes in [((2, 3, 0, 8), (2, 3, 7, 8), (2, 3, 7, 8)),   # no queries
                   ((2, 3, 5, 8), (2, 3, 0, 8), (2, 3, 0, 8)),   # no keys: zeros
                   ((0, 3, 5, 8), (0, 3, 7, 8), (0, 3, 7, 8))]:  # empty batch
        run(lambda q, k, v: F.scaled_dot_product_attention(q, k, v), qkv(*shapes), math_reference=True)


def test_one_program_each_way():
    q, k, v = (t.to("tpu").requires_grad_() for t in qkv((2, 3, 5, 8), (2, 3, 5, 8), (2, 3, 5, 8)))
    with torch_tpu.execution_mode("fused"):
        F.scaled_dot_product_attention(q, k, v, is_causal=True).sum().backward()  # warm
        torch.tpu.synchronize()
        r0 = torch_tpu.fused_stats()["recorded"]
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        forward = torch_tpu.fused_stats()["recorded"] - r0
        torch.tpu.synchronize()
    assert fused(out) and forward == 1


def test_other_cases_use_the_math_backend():
    q, k, v = qkv((2, 4, 5, 8), (2, 2, 5, 8), (2, 2, 5, 8))
    # grouped-query heads
    out = run(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, enable_gqa=True), [q, k, v])
    assert not fused(out)
    # the user's choice of backends
    q, k, v = qkv((2, 3, 5, 8), (2, 3, 5, 8), (2, 3, 5, 8))
    with sdpa_kernel([SDPBackend.MATH]):
        out = run(lambda q, k, v: F.scaled_dot_product_attention(q, k, v), [q, k, v])
    assert not fused(out)
    # dropout draws on the device's generator: shapes and zeros only
    qt, kt, vt = (t.to("tpu").requires_grad_() for t in (q, k, v))
    out = F.scaled_dot_product_attention(qt, kt, vt, dropout_p=0.5)
    assert not fused(out) and out.shape == (2, 3, 5, 8)
    out.sum().backward()
    assert qt.grad.shape == q.shape


def test_errors():
    q, k, v = (t.to("tpu") for t in qkv((2, 3, 5, 8), (2, 3, 7, 4), (2, 3, 7, 8)))
    with pytest.raises(RuntimeError):
        F.scaled_dot_product_attention(q, k, v)  # key width differs from the query's
    with pytest.raises(RuntimeError):
        F.scaled_dot_product_attention(q, k.double(), v)
    with pytest.raises(RuntimeError, match="attn_mask"):
        F.scaled_dot_product_attention(q, q, q, attn_mask=torch.ones(5, 5, device="tpu"), is_causal=True)
    # the process is fine afterwards
    assert_same(F.scaled_dot_product_attention(q, q, q), F.scaled_dot_product_attention(q.cpu(), q.cpu(), q.cpu()))


@pytest.mark.parametrize("dtype", [None, torch.float64, torch.bfloat16])
def test_safe_softmax_zeroes_fully_masked_rows_as_cpu(dtype):
    """torch._safe_softmax (Transformers' eager attention over masked rows):
    one program; a row of -inf gives zeros, others CPU's softmax, in `dtype`."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 5, 7, generator=g)
    x[1, 2, :] = float("-inf")
    x[0, 0, 3] = float("-inf")
    x[2, :, 4] = float("inf")
    # Reduced-precision results: against the float64 softmax of the same
    # values (rounded to `dtype` first, as the op does), not CPU's bfloat16
    # or half kernel.
    def safe_softmax(t, dim):
        if t.dtype == torch.float64 and dtype is not None:
            return torch._safe_softmax(t.to(dtype).to(torch.float64), dim)
        return torch._safe_softmax(t, dim, dtype)

    for dim in (0, 1, 2, -1):
        got = torch._safe_softmax(x.to("tpu"), dim, dtype)
        if dtype == torch.bfloat16:
            assert_close_to_float64_reference(got, lambda t: safe_softmax(t, dim), (x,))
            continue
        want = torch._safe_softmax(x, dim, dtype)
        assert got.dtype == want.dtype
        torch.testing.assert_close(got.cpu(), want, equal_nan=True)
    half = x.half()
    assert_close_to_float64_reference(torch._safe_softmax(half.to("tpu"), -1, dtype), lambda t: safe_softmax(t, -1),
                                      (half,))
    assert torch.equal(torch._safe_softmax(torch.tensor(2.0).to("tpu"), 0).cpu(), torch._safe_softmax(torch.tensor(2.0), 0))
    with pytest.raises(NotImplementedError, match="not implemented for 'Long'"):
        torch._safe_softmax(torch.ones(3, dtype=torch.long).to("tpu"), 0)
    a, b = x.clone().requires_grad_(), x.to("tpu").requires_grad_()
    torch._safe_softmax(a, -1).pow(2).sum().backward()
    torch._safe_softmax(b, -1).pow(2).sum().backward()
    torch.testing.assert_close(b.grad.cpu(), a.grad, equal_nan=True)
