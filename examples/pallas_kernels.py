"""Pallas kernels inside a PyTorch model that trains on tpu.

    python examples/pallas_kernels.py [--steps 30]

Two kernels written with jax.experimental.pallas: a fused RMSNorm and a
blocked causal attention (one query block per grid step, online softmax
over key blocks). Each is wrapped in jax.custom_vjp with a plain-JAX
backward, so torch_tpu exports its vjp for autograd, and becomes a PyTorch
op with torch_tpu.pallas.jax_op. A small transformer uses both and trains
on the tpu device; the losses are printed next to the same model with
PyTorch's own RMSNorm and attention. On the CPU plugin the kernels run
through Pallas's interpret mode; on TPU they would be Mosaic calls.
"""

from __future__ import annotations

import argparse
import functools
import math

import jax
import jax.numpy as jnp
import torch
import torch.nn as nn
import torch.nn.functional as F
from jax.experimental import pallas as pl

import torch_tpu  # noqa: F401
import torch_tpu.pallas as tp

EPS = 1e-6


# ---- RMSNorm ---------------------------------------------------------------

def _rmsnorm_kernel(x_ref, w_ref, o_ref):
    x = x_ref[...].astype(jnp.float32)
    scale = jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + EPS)
    o_ref[...] = (x * scale * w_ref[...].astype(jnp.float32)).astype(o_ref.dtype)


def _rmsnorm_reference(x, w):
    x32 = x.astype(jnp.float32)
    return (x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, -1, keepdims=True) + EPS) * w).astype(x.dtype)


@jax.custom_vjp
def rmsnorm(x, w):
    rows, d = x.shape
    block = 8 if rows % 8 == 0 else rows
    return pl.pallas_call(
        _rmsnorm_kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(rows // block,),
        in_specs=[pl.BlockSpec((block, d), lambda i: (i, 0)), pl.BlockSpec((d,), lambda i: (0,))],
        out_specs=pl.BlockSpec((block, d), lambda i: (i, 0)),
        interpret=tp._platform() == "cpu",
    )(x, w)


def _rmsnorm_fwd(x, w):
    return rmsnorm(x, w), (x, w)


def _rmsnorm_bwd(res, g):
    _, pullback = jax.vjp(_rmsnorm_reference, *res)
    return pullback(g)


rmsnorm.defvjp(_rmsnorm_fwd, _rmsnorm_bwd)


# ---- blocked causal attention ----------------------------------------------

def _attention_kernel(q_ref, k_ref, v_ref, o_ref, *, block_q: int, block_k: int, seq: int):
    qi = pl.program_id(1)
    q = q_ref[...].astype(jnp.float32) / math.sqrt(q_ref.shape[-1])
    rows = qi * block_q + jnp.arange(block_q)[:, None]

    def body(kb, carry):
        m, l, acc = carry
        k = k_ref[pl.ds(kb * block_k, block_k), :].astype(jnp.float32)
        v = v_ref[pl.ds(kb * block_k, block_k), :].astype(jnp.float32)
        s = q @ k.T
        cols = kb * block_k + jnp.arange(block_k)[None, :]
        s = jnp.where(cols <= rows, s, -jnp.inf)
        m_new = jnp.maximum(m, s.max(-1, keepdims=True))
        p = jnp.exp(s - m_new)
        corr = jnp.exp(m - m_new)
        return m_new, l * corr + p.sum(-1, keepdims=True), acc * corr + p @ v

    d = q_ref.shape[-1]
    init = (jnp.full((block_q, 1), -jnp.inf, jnp.float32), jnp.zeros((block_q, 1), jnp.float32),
            jnp.zeros((block_q, d), jnp.float32))
    # Key blocks up to and including the diagonal one.
    _, l, acc = jax.lax.fori_loop(0, (qi * block_q) // block_k + 1, body, init)
    o_ref[...] = (acc / l).astype(o_ref.dtype)


def _attention_reference(q, k, v):
    t = q.shape[1]
    s = jnp.einsum("btd,bsd->bts", q, k) / math.sqrt(q.shape[-1])
    s = jnp.where(jnp.tril(jnp.ones((t, t), bool)), s, -jnp.inf)
    return jnp.einsum("bts,bsd->btd", jax.nn.softmax(s, -1), v).astype(q.dtype)


@jax.custom_vjp
def attention(q, k, v):
    """Causal attention of q, k, v: [batch*heads, seq, dim]."""
    bh, t, d = q.shape
    block = min(16, t)
    kernel = functools.partial(_attention_kernel, block_q=block, block_k=block, seq=t)
    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype),
        grid=(bh, t // block),
        in_specs=[pl.BlockSpec((None, block, d), lambda b, i: (b, i, 0)),
                  pl.BlockSpec((None, t, d), lambda b, i: (b, 0, 0)),
                  pl.BlockSpec((None, t, d), lambda b, i: (b, 0, 0))],
        out_specs=pl.BlockSpec((None, block, d), lambda b, i: (b, i, 0)),
        interpret=tp._platform() == "cpu",
    )(q, k, v)


def _attention_fwd(q, k, v):
    return attention(q, k, v), (q, k, v)


def _attention_bwd(res, g):
    _, pullback = jax.vjp(_attention_reference, *res)
    return pullback(g)


attention.defvjp(_attention_fwd, _attention_bwd)

rmsnorm_op = tp.jax_op("examples::pallas_rmsnorm", rmsnorm)
attention_op = tp.jax_op("examples::pallas_attention", attention)


# ---- a small transformer using them ----------------------------------------

class Block(nn.Module):
    def __init__(self, d: int, heads: int, pallas: bool):
        super().__init__()
        self.heads, self.pallas = heads, pallas
        self.norm1 = nn.Parameter(torch.ones(d))
        self.norm2 = nn.Parameter(torch.ones(d))
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.proj = nn.Linear(d, d, bias=False)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def norm(self, x, w):
        if self.pallas:
            return rmsnorm_op(x.reshape(-1, x.shape[-1]), w).reshape(x.shape)
        return F.rms_norm(x, (x.shape[-1],), w, EPS)

    def attend(self, x):
        b, t, d = x.shape
        h = self.heads
        q, k, v = self.qkv(x).split(d, -1)
        q, k, v = (z.reshape(b, t, h, d // h).transpose(1, 2) for z in (q, k, v))
        if self.pallas:
            o = attention_op(*(z.reshape(b * h, t, d // h) for z in (q, k, v))).reshape(b, h, t, d // h)
        else:
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(o.transpose(1, 2).reshape(b, t, d))

    def forward(self, x):
        x = x + self.attend(self.norm(x, self.norm1))
        return x + self.mlp(self.norm(x, self.norm2))


class TinyLM(nn.Module):
    def __init__(self, vocab=64, d=64, heads=4, layers=2, seq=32, pallas=True):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.randn(seq, d) * 0.02)
        self.blocks = nn.ModuleList(Block(d, heads, pallas) for _ in range(layers))
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        x = self.emb(idx) + self.pos[: idx.shape[1]]
        for blk in self.blocks:
            x = blk(x)
        return self.head(x)


def train(steps: int = 30, seed: int = 0, device: str = "tpu"):
    """Trains the Pallas model and the same model with PyTorch's ops from the
    same weights on the same batches; returns both loss curves."""
    torch.manual_seed(seed)
    models = {"pallas": TinyLM(pallas=True)}
    models["torch"] = TinyLM(pallas=False)
    models["torch"].load_state_dict(models["pallas"].state_dict())
    losses = {}
    g = torch.Generator().manual_seed(seed)
    data = [torch.randint(0, 64, (4, 33), generator=g) for _ in range(steps)]
    for name, model in models.items():
        model.to(device)
        opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
        losses[name] = []
        for batch in data:
            batch = batch.to(device)
            logits = model(batch[:, :-1])
            loss = F.cross_entropy(logits.reshape(-1, 64), batch[:, 1:].reshape(-1))
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses[name].append(loss.item())
    return losses


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    args = ap.parse_args()
    losses = train(args.steps)
    for i, (a, b) in enumerate(zip(losses["pallas"], losses["torch"])):
        if i % 5 == 0 or i == args.steps - 1:
            print(f"step {i:3d}  pallas kernels {a:.4f}  torch ops {b:.4f}")
    print("JAX traces:", tp.trace_count())


if __name__ == "__main__":
    main()
