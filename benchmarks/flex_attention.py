"""FlexAttention under torch.compile on tpu: its higher-order ops traced
into ATen ops (the graph replays: no op is dispatched after the first call)
against the same graph running its ops each call (how it ran before the
tracing, kept here by turning the tracing off while one copy compiles).

    python benchmarks/flex_attention.py [--repeats 15]

One training step of an attention layer (qkv projection, FlexAttention with
a causal block mask, output projection; forward and backward), for three
sizes (batch, sequence, heads, head dim). The two compiled copies alternate
within each repeat; prints medians and their ratio.
"""

import argparse
import statistics
import time

import torch
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

import torch_tpu
import torch_tpu.compiler as compiler


class Layer(torch.nn.Module):
    def __init__(self, heads, head_dim):
        super().__init__()
        self.heads, self.head_dim = heads, head_dim
        dim = heads * head_dim
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.out = torch.nn.Linear(dim, dim)

    def forward(self, x, block_mask):
        b, s, d = x.shape
        q, k, v = (t.view(b, s, self.heads, self.head_dim).transpose(1, 2) for t in self.qkv(x).split(d, -1))
        return self.out(flex_attention(q, k, v, block_mask=block_mask).transpose(1, 2).reshape(b, s, d))


def _without_tracing(gm, example_inputs):
    return gm


def run(batch, seq, heads, head_dim, repeats):
    x = torch.randn(batch, seq, heads * head_dim, device="tpu")
    mask = create_block_mask(lambda b, h, q, k: q >= k, None, None, seq, seq, device="tpu")
    plain, inlined = Layer(heads, head_dim).to("tpu"), Layer(heads, head_dim).to("tpu")
    # Two functions (two code objects): Dynamo compiles each on its own.
    copies = {"ops each call": (plain, torch.compile(lambda x, bm: plain(x, bm), backend="tpu")),
              "replayed": (inlined, torch.compile(lambda x, bm: inlined(x, bm), backend="tpu"))}
    traced = compiler._inline_dense_hops
    for name, (layer, step) in copies.items():
        # Forward and backward graphs compile at their first call: with the
        # tracing off for the first copy.
        compiler._inline_dense_hops = _without_tracing if name == "ops each call" else traced
        try:
            for _ in range(3):
                step(x, mask).sum().backward()
        finally:
            compiler._inline_dense_hops = traced
    times = {name: [] for name in copies}
    for _ in range(repeats):
        for name, (layer, step) in copies.items():
            t0 = time.perf_counter()
            step(x, mask).sum().backward()
            layer.qkv.weight.grad.cpu()
            times[name].append(time.perf_counter() - t0)
    med = {name: statistics.median(t) * 1e3 for name, t in times.items()}
    print(f"B={batch} S={seq} H={heads} E={head_dim}: ops each call {med['ops each call']:.2f} ms, "
          f"replayed {med['replayed']:.2f} ms, ratio {med['ops each call'] / med['replayed']:.2f}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    print(f"tpu device on the {torch_tpu.plugin_info()['platform']} plugin")
    for size in ((2, 64, 4, 16), (2, 128, 4, 32), (4, 256, 8, 64)):
        run(*size, args.repeats)
    print("compiler stats:", compiler.stats())


if __name__ == "__main__":
    main()
