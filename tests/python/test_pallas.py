"""JAX and Pallas kernels as PyTorch ops on tpu (torch_tpu.pallas), against
the same math in PyTorch on CPU: forward and gradients, several shapes and
dtypes, in each execution mode (the suite runs in all three) and under
torch.compile; re-trace counts; the Pallas examples; the errors."""

from __future__ import annotations

import os
import sys

import pytest
import torch

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from jax.experimental import pallas as pl  # noqa: E402

import torch_tpu  # noqa: E402,F401
from conftest import assert_close_to_float64_reference  # noqa: E402
import torch_tpu.pallas as tp  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))


def _f(x, y):
    return jnp.sin(x) * y + jnp.sum(x, axis=-1, keepdims=True)


def _f_torch(x, y):
    return torch.sin(x) * y + x.sum(-1, keepdim=True)


@pytest.mark.parametrize("shape", [(4, 3), (2, 5, 7), (1, 1)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_kernel_forward_and_gradients_match_cpu(shape, dtype):
    k = tp.custom_jax_kernel(_f)
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(shape, generator=g).to(dtype), torch.randn(shape, generator=g).to(dtype)
    gout = torch.randn(shape, generator=g).to(dtype)

    def forward_backward(x, y, gout, f=_f_torch):
        x, y = x.detach().requires_grad_(), y.detach().requires_grad_()
        out = f(x, y)
        assert out.dtype == x.dtype and out.shape == x.shape and out.device == x.device
        out.backward(gout)
        return out.detach(), x.grad, y.grad

    got = forward_backward(x.to("tpu"), y.to("tpu"), gout.to("tpu"), f=k)
    if dtype == torch.bfloat16:
        # Against the same math in float64 on the same values, not CPU's
        # bfloat16 kernels: sin or cos, its product and the row sum are
        # rounded to bfloat16 on the way (three values).
        assert_close_to_float64_reference(got, forward_backward, (x, y, gout), roundings=3)
        return
    for a, b in zip(got, forward_backward(x, y, gout)):
        torch.testing.assert_close(a.cpu(), b, rtol=1e-5, atol=1e-5)


def test_float8_tensors_pass_through_jax_kernels():
    """A JAX kernel takes and returns 8-bit floats (a float8 quantizer)."""
    @tp.custom_jax_kernel
    def quantize(x, scale):
        return (x.astype(jnp.float32) * scale).astype(jnp.float8_e4m3fn)

    x = (torch.randn(4, 8) * 20).to(torch.float8_e5m2)
    got = quantize(x.to("tpu"), torch.tensor(3.0, device="tpu"))
    assert got.dtype == torch.float8_e4m3fn
    assert torch.equal(got.cpu().view(torch.uint8), (x.float() * 3).clamp(-448, 448).to(torch.float8_e4m3fn).view(torch.uint8))


def test_same_signature_never_retraces():
    k = tp.custom_jax_kernel(lambda x: x * 2)
    x = torch.randn(3, 4, device="tpu")
    before = tp.trace_count()
    for _ in range(5):
        k(x)
    assert tp.trace_count() == before + 1
    k(torch.randn(5, 4, device="tpu"))  # a new shape traces once more
    k(torch.randn(5, 4, device="tpu"))
    assert tp.trace_count() == before + 2
    k(x.double())  # and a new dtype
    assert tp.trace_count() == before + 3


def test_outputs_statics_unused_arguments_integers_and_aliases():
    def several(x, n, unused, i):
        return x * n, (i + n).astype(jnp.int64), jnp.max(x)

    k = tp.custom_jax_kernel(several, static_argnums=(1,))
    x = torch.randn(3, 4)
    i = torch.arange(6).reshape(2, 3)
    a, b, c = k(x.to("tpu"), 3, torch.zeros(2, device="tpu"), i.to("tpu"))
    torch.testing.assert_close(a.cpu(), x * 3)
    assert b.dtype == torch.int64 and torch.equal(b.cpu(), i + 3)
    torch.testing.assert_close(c.cpu(), x.max())
    a2, _, _ = k(x.to("tpu"), 5, torch.zeros(2, device="tpu"), i.to("tpu"))  # another static value
    torch.testing.assert_close(a2.cpu(), x * 5)

    inc = tp.custom_jax_kernel(lambda t: t + 1, input_output_aliases={0: 0})
    t = torch.zeros(4, device="tpu")
    r = inc(t)
    assert r is t and t.cpu().tolist() == [1.0] * 4


def _rms(x, w):
    return x * jax.lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + 1e-6) * w


def _rms_torch(x, w):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6) * w


rms_op = tp.jax_op("torch_tpu_tests::rms", _rms)


def test_jax_op_is_a_custom_op_with_gradients():
    assert isinstance(rms_op.op, torch._ops.OpOverload)
    x, w = torch.randn(8, 16), torch.randn(16)
    xt, wt = x.to("tpu").requires_grad_(), w.to("tpu").requires_grad_()
    out = rms_op(xt, wt)
    xc, wc = x.clone().requires_grad_(), w.clone().requires_grad_()
    ref = _rms_torch(xc, wc)
    torch.testing.assert_close(out.cpu(), ref.detach(), rtol=1e-5, atol=1e-5)
    (out * 3).sum().backward()
    (ref * 3).sum().backward()
    torch.testing.assert_close(xt.grad.cpu(), xc.grad, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(wt.grad.cpu(), wc.grad, rtol=1e-4, atol=1e-5)


def test_jax_op_fuses_with_its_neighbours():
    x, w = torch.randn(8, 16), torch.randn(16)
    with torch_tpu.execution_mode("fused"):
        before = torch_tpu.fused_stats()["flushes"]
        y = rms_op(x.to("tpu") * 2, w.to("tpu")) + 1
        out = y.cpu()
        assert torch_tpu.fused_stats()["flushes"] == before + 1
    torch.testing.assert_close(out, _rms_torch(x * 2, w) + 1, rtol=1e-5, atol=1e-5)


def test_jax_op_inside_torch_compile():
    def model(x, w):
        return (rms_op(torch.relu(x), w) * 3).sum()

    compiled = torch.compile(model, backend="tpu")
    x, w = torch.randn(8, 16), torch.randn(16)
    xt, wt = x.to("tpu").requires_grad_(), w.to("tpu").requires_grad_()
    loss = compiled(xt, wt)
    loss.backward()
    xc, wc = x.clone().requires_grad_(), w.clone().requires_grad_()
    ref = (_rms_torch(torch.relu(xc), wc) * 3).sum()
    ref.backward()
    torch.testing.assert_close(loss.cpu(), ref.detach(), rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(xt.grad.cpu(), xc.grad, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(wt.grad.cpu(), wc.grad, rtol=1e-4, atol=1e-5)


def test_user_supplied_backward():
    op = tp.jax_op("torch_tpu_tests::double", lambda x: x * 2)

    def backward(ctx, grads):
        return (grads[0] * 100,)  # deliberately not the true gradient

    torch.library.register_autograd("torch_tpu_tests::double", backward, lib=op.lib)
    x = torch.ones(3, device="tpu", requires_grad=True)
    op(x).sum().backward()
    assert x.grad.cpu().tolist() == [100.0] * 3


def test_pallas_kernel():
    def add_kernel(x_ref, y_ref, o_ref):
        o_ref[...] = x_ref[...] + 2 * y_ref[...]

    add = tp.custom_kernel(((16, 8), torch.float32), add_kernel, grid=(2,),
                           in_specs=[pl.BlockSpec((8, 8), lambda i: (i, 0))] * 2,
                           out_specs=pl.BlockSpec((8, 8), lambda i: (i, 0)))
    a, b = torch.randn(16, 8), torch.randn(16, 8)
    torch.testing.assert_close(add(a.to("tpu"), b.to("tpu")).cpu(), a + 2 * b)


def test_pallas_examples_train_like_torch_ops():
    import pallas_kernels as ex

    x, w = torch.randn(16, 32), torch.randn(32)
    torch.testing.assert_close(ex.rmsnorm_op(x.to("tpu"), w.to("tpu")).cpu(),
                               torch.nn.functional.rms_norm(x, (32,), w, ex.EPS), rtol=1e-5, atol=1e-5)
    q, k, v = (torch.randn(2, 32, 8) for _ in range(3))
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(ex.attention_op(q.to("tpu"), k.to("tpu"), v.to("tpu")).cpu(), ref,
                               rtol=1e-4, atol=1e-5)
    losses = ex.train(steps=6)
    torch.testing.assert_close(torch.tensor(losses["pallas"]), torch.tensor(losses["torch"]), rtol=1e-4, atol=1e-4)
    assert losses["pallas"][-1] < losses["pallas"][0]


def test_errors_name_the_function_and_the_fix(monkeypatch):
    def bad(x):
        return x.reshape(7)  # cannot reshape 12 elements

    with pytest.raises(RuntimeError, match="bad: JAX could not trace"):
        tp.custom_jax_kernel(bad)(torch.randn(3, 4, device="tpu"))
    with pytest.raises(TypeError, match="uint32"):
        tp.custom_jax_kernel(lambda x: x.astype(jnp.uint32))(torch.randn(3, device="tpu"))
    with pytest.raises(RuntimeError, match="run on tpu tensors"):
        tp.custom_jax_kernel(lambda x: x)(torch.randn(3))
    with pytest.raises(TypeError, match="static_argnums"):
        tp.custom_jax_kernel(lambda x, n: x * n)(torch.randn(3, device="tpu"), 2)
    def k(x_ref, o_ref):
        o_ref[...] = x_ref[...]

    with pytest.raises(RuntimeError, match="interpret mode"):  # a kernel for another platform
        tp.custom_kernel(((4,), torch.float32), k, interpret=False)
    monkeypatch.setitem(sys.modules, "jax", None)
    with pytest.raises(ImportError, match=r"pip install 'jax\[cpu\]'"):
        tp.custom_jax_kernel(lambda x: x)
