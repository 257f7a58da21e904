"""FlexAttention (torch.nn.attention.flex_attention) on tpu: block masks
built on the device, eager calls, torch.compile, forward and backward, all
against CPU PyTorch (its flex_attention forward, and the same attention
written densely where CPU's flex has no backward)."""

import pytest
import torch
from torch.nn.attention.flex_attention import AuxRequest, create_block_mask, flex_attention

import torch_tpu
from conftest import assert_close_to_float64_reference, assert_same, make, run_python

TOL = {torch.float32: dict(rtol=1e-4, atol=1e-4)}


def causal(b, h, q, k):
    return q >= k


def sliding(b, h, q, k):
    return (q >= k) & (q - k < 24)


def documents(ids):
    """Attention within a document only (ids: [B, S], a tensor the mask
    captures), causal inside it."""
    def mask(b, h, q, k):
        return (ids[b, q] == ids[b, k]) & (q >= k)
    return mask


def relative_bias(s, b, h, q, k):
    return s + (k - q).to(s.dtype) * 0.05


def tanh_softcap(s, b, h, q, k):
    return 20.0 * torch.tanh(s / 20.0)


def qkv(B, Hq, Hkv, S, E, dtype=torch.float32, seed=0):
    return (make((B, Hq, S, E), dtype, seed=seed, low=-2, high=2),
            make((B, Hkv, S, E), dtype, seed=seed + 1, low=-2, high=2),
            make((B, Hkv, S, E), dtype, seed=seed + 2, low=-2, high=2))


def block_masks(mask_mod, B, H, S, block, doc_ids=None):
    """The same mask built on CPU and on tpu."""
    mods = (documents(doc_ids), documents(doc_ids.to("tpu"))) if doc_ids is not None else (mask_mod, mask_mod)
    return (create_block_mask(mods[0], B, H, S, S, device="cpu", BLOCK_SIZE=block),
            create_block_mask(mods[1], B, H, S, S, device="tpu", BLOCK_SIZE=block))


def doc_ids(B, S, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 3, (B, S), generator=g).sort(-1).values


MASKS = {"causal": causal, "sliding": sliding, "documents": None}


@pytest.mark.parametrize("name", list(MASKS))
@pytest.mark.parametrize("S,block", [(100, 32), (256, 128)])
def test_block_mask_built_on_tpu_equals_cpu(name, S, block):
    ids = doc_ids(2, S) if name == "documents" else None
    cpu, dev = block_masks(MASKS[name], 2, None, S, block, ids)
    assert dev.kv_num_blocks.device.type == "tpu"
    assert cpu.shape == dev.shape and cpu.BLOCK_SIZE == dev.BLOCK_SIZE
    for a, b in zip(cpu.as_tuple(), dev.as_tuple()):
        if isinstance(a, torch.Tensor):
            assert_same(b, a, rtol=0, atol=0)
            assert a.stride() == b.stride()
    assert dev.sparsity() == cpu.sparsity()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", list(MASKS))
@pytest.mark.parametrize("score_mod", [None, relative_bias, tanh_softcap], ids=["plain", "bias", "softcap"])
def test_eager_forward_and_logsumexp_equal_cpu(dtype, name, score_mod):
    B, Hq, Hkv, S, E = 2, 4, 2, 100, 16
    q, k, v = qkv(B, Hq, Hkv, S, E, dtype)
    ids = doc_ids(B, S, seed=1) if name == "documents" else None
    bm_cpu, bm_dev = block_masks(MASKS[name], B, None, S, 32, ids)

    def attend(q, k, v, block_mask=bm_cpu):
        out, aux = flex_attention(q, k, v, score_mod=score_mod, block_mask=block_mask, enable_gqa=True,
                                  return_aux=AuxRequest(lse=True))
        return out, aux.lse

    got = attend(q.to("tpu"), k.to("tpu"), v.to("tpu"), bm_dev)
    if dtype == torch.bfloat16:
        # Against the float64 attention of the same values, not CPU's
        # bfloat16 kernels: the scores, a score_mod's terms and the
        # probabilities are rounded to bfloat16 on the way (three roundings).
        assert_close_to_float64_reference(got, attend, (q, k, v), roundings=3)
    else:
        assert_same(got, attend(q, k, v), **TOL[dtype])


def test_non_contiguous_inputs_from_a_bshe_layout():
    """Projections reshaped [B, S, H, E] and transposed to [B, H, S, E], as
    attention layers write them."""
    B, S, H, E = 2, 64, 4, 16
    x = make((B, S, 3 * H * E), torch.float32, low=-1, high=1)
    q, k, v = (t.view(B, S, H, E).transpose(1, 2) for t in x.split(H * E, dim=-1))
    assert not q.is_contiguous()
    want = flex_attention(q, k, v, score_mod=relative_bias)
    xd = x.to("tpu")
    qd, kd, vd = (t.view(B, S, H, E).transpose(1, 2) for t in xd.split(H * E, dim=-1))
    assert_same(flex_attention(qd, kd, vd, score_mod=relative_bias), want, **TOL[torch.float32])


def dense_reference(q, k, v, bias, allowed):
    """The attention FlexAttention computes, as plain CPU ops (CPU's
    flex_attention has no backward)."""
    rep = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
    s = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5 + bias
    return s.masked_fill(~allowed, float("-inf")).softmax(-1) @ v


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_backward_with_a_captured_bias_equals_dense_attention(compiled):
    """Gradients of q, k, v and of a bias tensor the score_mod captures,
    under a sliding-window block mask."""
    B, Hq, Hkv, S, E = 2, 4, 2, 96, 16
    q, k, v = qkv(B, Hq, Hkv, S, E, seed=3)
    bias = make((Hq, S, S), torch.float32, seed=7, low=-1, high=1)
    qi = torch.arange(S)[:, None]
    ki = torch.arange(S)[None, :]
    allowed = sliding(None, None, qi, ki)
    cpu = [t.clone().requires_grad_() for t in (q, k, v, bias)]
    want = dense_reference(*cpu, allowed)
    grad_out = make(tuple(want.shape), torch.float32, seed=11, low=-1, high=1)
    want.backward(grad_out)

    dev = [t.to("tpu").requires_grad_() for t in (q, k, v, bias)]
    _, bm = block_masks(sliding, B, None, S, 32)
    attend = torch.compile(flex_attention, backend="tpu") if compiled else flex_attention
    got = attend(dev[0], dev[1], dev[2], score_mod=lambda s, b, h, i, j: s + dev[3][h, i, j],
                 block_mask=bm, enable_gqa=True)
    got.backward(grad_out.to("tpu"))
    assert_same(got, want.detach(), **TOL[torch.float32])
    for d, c in zip(dev, cpu):
        assert_same(d.grad, c.grad, rtol=1e-4, atol=2e-4)


def test_compiled_flex_attention_trains_a_layer_like_eager():
    """A causal attention layer under torch.compile (the default backend
    routes tpu graphs to ours): losses and gradients equal the uncompiled
    layer's, and the second step replays the forward and backward graphs
    captured by the first (FlexAttention's higher-order ops are traced into
    ATen ops, so no op is dispatched again)."""
    B, S, H, E = 2, 64, 4, 16

    class Layer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = torch.nn.Linear(H * E, 3 * H * E)
            self.out = torch.nn.Linear(H * E, H * E)

        def forward(self, x, bm):
            q, k, v = (t.view(B, S, H, E).transpose(1, 2) for t in self.qkv(x).split(H * E, -1))
            return self.out(flex_attention(q, k, v, block_mask=bm).transpose(1, 2).reshape(B, S, H * E))

    torch.manual_seed(0)
    eager = Layer().to("tpu")
    compiled = Layer().to("tpu")
    compiled.load_state_dict(eager.state_dict())
    step = torch.compile(compiled)
    bm = create_block_mask(causal, None, None, S, S, device="tpu", BLOCK_SIZE=32)
    for i in range(2):
        x = make((B, S, H * E), torch.float32, seed=i, low=-1, high=1).to("tpu")
        if i == 1:
            before = torch_tpu.compiler.stats()
        eager.zero_grad(set_to_none=True)
        compiled.zero_grad(set_to_none=True)
        want = eager(x, bm).square().mean()
        got = step(x, bm).square().mean()
        want.backward()
        got.backward()
        torch.testing.assert_close(got.cpu(), want.detach().cpu(), rtol=1e-5, atol=1e-6)
        for a, b in zip(compiled.parameters(), eager.parameters()):
            torch.testing.assert_close(a.grad.cpu(), b.grad.cpu(), rtol=1e-4, atol=1e-5)
    after = torch_tpu.compiler.stats()
    assert after["replays"] - before["replays"] == 2, (before, after)
    assert (after["op_runs"], after["captures"]) == (before["op_runs"], before["captures"]), (before, after)


def test_other_devices_keep_pytorchs_answer():
    q = torch.empty(1, 1, 8, 4, device="meta")
    with pytest.raises(ValueError, match="FlexAttention is only supported on"):
        flex_attention(q, q, q)


@pytest.mark.strict_eager_only  # (import order in fresh processes: no mode of its own)
def test_the_check_is_adapted_whichever_is_imported_first():
    """import torch_tpu does not import flex_attention (its import cost is
    the user's choice), and the device check accepts tpu either way round."""
    code = """
import sys, torch
{first}
import torch_tpu
assert ({first!r} != '') or 'torch.nn.attention.flex_attention' not in sys.modules
from torch.nn.attention.flex_attention import flex_attention
q = torch.ones(1, 1, 4, 8, device='tpu')
out = flex_attention(q, q, q)
torch.testing.assert_close(out.cpu(), torch.ones(1, 1, 4, 8))
print('ok')
"""
    for first in ("", "import torch.nn.attention.flex_attention"):
        r = run_python(code.format(first=first))
        assert r.returncode == 0 and "ok" in r.stdout, r.stderr[-2000:]
