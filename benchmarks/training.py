"""Training-step time on the tpu device, side by side with CPU PyTorch.

    python benchmarks/training.py [--repeats 7] [--steps 5]

The MLP, the CNN and the GPT of torch_tpu/testing/models.py train with AdamW
on the same batches on tpu and in plain CPU PyTorch eager. For each model it
prints the median time of one training step (forward, backward, optimizer;
the step counter read back with .item() at the end of each timed group) over
`repeats` groups of `steps` steps, after one warm-up group (which compiles),
and the ratio tpu / CPU (below 1: tpu faster). The GPT uses the demo's
configuration (examples/train_gpt.py), so its tokens/s is the demo's.
"""

import argparse
import copy
import statistics
import time

import torch
import torch.nn.functional as F

import torch_tpu
from torch_tpu.testing.models import CNN, GPT, MLP, GPTConfig


def cases():
    g = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    gpt_cfg = GPTConfig(vocab_size=63, block_size=64, n_layer=4, n_head=4, n_embd=128)
    ids = torch.randint(0, 63, (32, 65), generator=g)
    return [
        ("MLP 3x128, batch 256", MLP(d_in=32, hidden=128, classes=10, depth=3),
         (torch.randn(256, 32, generator=g), torch.randint(0, 10, (256,), generator=g)), None),
        ("CNN 3 stages, 32x32 images, batch 32", CNN(classes=10, width=16),
         (torch.randn(32, 3, 32, 32, generator=g), torch.randint(0, 10, (32,), generator=g)), None),
        ("GPT 4 layers x 128, 32 x 64 tokens", GPT(gpt_cfg), (ids[:, :-1], ids[:, 1:]), 32 * 64),
    ]


def step_fn(model, batch, device):
    model = copy.deepcopy(model).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = (t.to(device) for t in batch)

    def step():
        out = model(x, y) if isinstance(model, GPT) else model(x)
        loss = out[1] if isinstance(out, tuple) else F.cross_entropy(out, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    return step


def median_step_seconds(step, steps, repeats):
    step().item()  # compile and warm up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(steps):
            loss = step()
        loss.item()
        times.append((time.perf_counter() - t0) / steps)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--steps", type=int, default=5)
    args = ap.parse_args()
    info = torch_tpu.plugin_info()
    print(f"tpu: {info['platform']} PJRT plugin {info['platform_version']}; torch {torch.__version__}, "
          f"{torch.get_num_threads()} CPU threads; medians of {args.repeats} x {args.steps} steps")
    print(f"{'model':40s} {'tpu ms':>9s} {'CPU ms':>9s} {'tpu/CPU':>8s} {'tpu tok/s':>10s} {'CPU tok/s':>10s}")
    for name, model, batch, tokens in cases():
        tpu = median_step_seconds(step_fn(model, batch, "tpu"), args.steps, args.repeats)
        cpu = median_step_seconds(step_fn(model, batch, "cpu"), args.steps, args.repeats)
        tok = f"{tokens / tpu:10,.0f} {tokens / cpu:10,.0f}" if tokens else ""
        print(f"{name:40s} {tpu * 1e3:9.2f} {cpu * 1e3:9.2f} {tpu / cpu:8.2f} {tok}")
    stats = torch_tpu.cache_stats()
    print(f"compiled {stats['misses']} programs in {stats['compile_seconds']:.1f}s")


if __name__ == "__main__":
    main()
