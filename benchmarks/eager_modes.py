"""Strict vs Fused Eager, and a cold vs warm persistent compile cache.

    python benchmarks/eager_modes.py [--repeats 7]

Prints medians, side by side in one run:
  - a chain of 150 elementwise ops on a 2000x2000 float32 tensor, read back
    once: Strict Eager (one program per op) vs Fused Eager (one program);
  - training steps (forward, backward, AdamW) of the MLP and GPT of
    torch_tpu/testing/models.py, a small and the demo-sized GPT, in both
    modes and in CPU PyTorch;
  - Strict Eager per-op overhead on a cache hit (x + 1 on 16x16) vs CPU;
  - Fused Eager's own costs: recording an op (x + 1 on 16x16, interleaved
    with CPU torch's whole op), and running a cached graph of n ops
    (flush + wait), fitted as a + b * n;
  - per fused training step, the device time of its program (the profiler's
    device spans) beside CPU PyTorch's whole step: what the device alone
    costs, whatever the host does;
  - time to the first training step of a new process with a cold and with a
    warm disk cache (TORCH_TPU_CACHE_DIR), in each mode: the step alone,
    and from process start (imports and set-up included) to its end.
"""

import argparse
import copy
import json
import os
import subprocess
import sys
import tempfile

import torch
import torch.nn.functional as F

import torch_tpu
from _timing import median_seconds
from torch_tpu.testing.models import GPT, MLP, GPTConfig


def chain(x):
    for i in range(150):
        x = torch.sin(x) if i % 3 == 0 else x * 1.0001 + 0.0001
    return x


def training_case(name):
    g = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    if name == "MLP 3x128, batch 256":
        return MLP(d_in=32, hidden=128, classes=10, depth=3), torch.randn(256, 32, generator=g), \
            torch.randint(0, 10, (256,), generator=g)
    if name == "GPT 2x64, 8 x 32 tokens":
        ids = torch.randint(0, 63, (8, 33), generator=g)
        return GPT(GPTConfig(vocab_size=63, block_size=32, n_layer=2, n_head=4, n_embd=64)), ids[:, :-1], ids[:, 1:]
    ids = torch.randint(0, 63, (32, 65), generator=g)
    return GPT(GPTConfig(vocab_size=63, block_size=64, n_layer=4, n_head=4, n_embd=128)), ids[:, :-1], ids[:, 1:]


def step_fn(model, x, y, device):
    model = copy.deepcopy(model).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = x.to(device), y.to(device)

    def steps(n=5):
        for _ in range(n):
            out = model(x, y)[1] if isinstance(model, GPT) else F.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            out.backward()
            opt.step()
        out.item()

    steps(3)  # compile, create the optimizer state
    return steps


FIRST_STEP = """
import json, sys, time
t0 = time.perf_counter()
import torch, torch_tpu, torch.nn.functional as F
from torch_tpu.testing.models import GPT, GPTConfig
torch_tpu.set_execution_mode(sys.argv[1])
torch.manual_seed(0)
model = GPT(GPTConfig(vocab_size=63, block_size=64, n_layer=4, n_head=4, n_embd=128)).to("tpu")
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)  # (its first construction imports torch._dynamo: ~1 s)
ids = torch.randint(0, 63, (32, 65))
t1 = time.perf_counter()  # set-up done: the step itself is what the cache speeds up
loss = model(ids[:, :-1].to("tpu"), ids[:, 1:].to("tpu"))[1]
loss.backward()
opt.step()
loss.item()
t2 = time.perf_counter()
s = torch_tpu.cache_stats()
print(json.dumps({"import": t1 - t0, "first_step": t2 - t1, "start_to_step": t2 - t0, "misses": s["misses"],
                  "disk_hits": s["disk_hits"] + s["preloaded"]}))
"""


def fused_costs(repeats):
    """Recording one op, and a cached graph's flush as a + b * ops."""
    import statistics
    import time

    a = torch.randn(16, 16, device="tpu")
    ac = a.cpu()
    n = 1000
    record, cpu = [], []
    with torch_tpu.execution_mode("fused"):
        for _ in range(repeats + 1):  # (the first compiles)
            t0 = time.perf_counter()
            for _ in range(n):
                a + 1
            record.append((time.perf_counter() - t0) / n)
            torch_tpu.flush()
            t0 = time.perf_counter()
            for _ in range(n):
                ac + 1
            cpu.append((time.perf_counter() - t0) / n)

        def flush_seconds(ops):
            times = []
            for _ in range(repeats + 1):
                y = a
                for _ in range(ops):
                    y = y + 1
                t0 = time.perf_counter()
                torch_tpu.flush()
                torch.tpu.synchronize()
                times.append(time.perf_counter() - t0)
            return statistics.median(times[1:])

        small, large = flush_seconds(10), flush_seconds(1000)
    per_op = (large - small) / 990
    return statistics.median(record[1:]), statistics.median(cpu[1:]), small - 10 * per_op, per_op


def device_ms_per_step(model, x, y):
    """Median device time of a fused training step's program (profiler spans)."""
    import statistics

    from torch.profiler import ProfilerActivity, profile

    with torch_tpu.execution_mode("fused"):
        steps = step_fn(model, x, y, "tpu")
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
            steps(8)
    spans = [e.time_range.elapsed_us() for e in prof.events()
             if e.device_type != torch.autograd.DeviceType.CPU and e.name == "tpu fused program"]
    # (one program per step: forward, backward and the optimizer; the last
    # span is the loss read)
    return statistics.median(spans[1:-1]) / 1e3


def first_step(mode, cache_dir):
    env = dict(os.environ, TORCH_TPU_CACHE_DIR=cache_dir)
    out = subprocess.run([sys.executable, "-c", FIRST_STEP, mode], env=env, capture_output=True, text=True,
                         check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    info = torch_tpu.plugin_info()
    print(f"tpu: {info['platform']} PJRT plugin; torch {torch.__version__}, {torch.get_num_threads()} CPU threads; "
          f"medians of {args.repeats}")

    x = torch.randn(2000, 2000)
    xt = x.to("tpu")
    times = {}
    for mode in ("strict", "fused"):
        with torch_tpu.execution_mode(mode):
            times[mode] = median_seconds(lambda: chain(xt).sum().item(), args.repeats)
    times["cpu"] = median_seconds(lambda: chain(x).sum().item(), args.repeats)
    print(f"\n150 elementwise ops, 2000x2000 f32: strict {times['strict'] * 1e3:.1f} ms, fused "
          f"{times['fused'] * 1e3:.1f} ms (fused {times['strict'] / times['fused']:.2f}x faster), CPU torch "
          f"{times['cpu'] * 1e3:.1f} ms")

    print(f"\n{'training step':30s} {'strict ms':>10s} {'fused ms':>10s} {'CPU ms':>8s} {'strict/fused':>13s} "
          f"{'fused/CPU':>10s} {'fused device ms':>16s} {'device/CPU':>11s}")
    for name in ("MLP 3x128, batch 256", "GPT 2x64, 8 x 32 tokens", "GPT 4x128, 32 x 64 (demo)"):
        model, xb, yb = training_case(name)
        t = {}
        for mode in ("strict", "fused"):
            with torch_tpu.execution_mode(mode):
                t[mode] = median_seconds(step_fn(model, xb, yb, "tpu"), args.repeats) / 5
        t["cpu"] = median_seconds(step_fn(model, xb, yb, "cpu"), args.repeats) / 5
        device = device_ms_per_step(model, xb, yb)
        print(f"{name:30s} {t['strict'] * 1e3:10.2f} {t['fused'] * 1e3:10.2f} {t['cpu'] * 1e3:8.2f} "
              f"{t['strict'] / t['fused']:13.2f} {t['fused'] / t['cpu']:10.2f} {device:16.2f} "
              f"{device / (t['cpu'] * 1e3):11.2f}")

    record, cpu_op, flush_a, flush_b = fused_costs(args.repeats)
    print(f"\nfused eager: recording x + 1 (16x16) {record * 1e6:.2f} us vs CPU torch's whole op {cpu_op * 1e6:.2f} us "
          f"({record / cpu_op:.2f}x); a cached graph's flush + wait {flush_a * 1e6:.1f} us + {flush_b * 1e6:.3f} us "
          f"per recorded op")

    a = torch.randn(16, 16, device="tpu")
    ac = a.cpu()

    def ops(t, n=1000):
        for _ in range(n):
            t + 1
        if t.device.type == "tpu":
            torch.tpu.synchronize()

    with torch_tpu.execution_mode("strict"):
        per_op = median_seconds(lambda: ops(a), args.repeats) / 1000
    per_op_cpu = median_seconds(lambda: ops(ac), args.repeats) / 1000
    print(f"\nstrict eager per-op overhead (x + 1, 16x16, cache hit): {per_op * 1e6:.1f} us vs CPU torch "
          f"{per_op_cpu * 1e6:.1f} us ({per_op / per_op_cpu:.1f}x)")

    print("\nnew process, demo GPT: time of the first training step (after imports and set-up)")
    for mode in ("strict", "fused"):
        with tempfile.TemporaryDirectory() as d:
            cold = first_step(mode, d)
            warm = first_step(mode, d)
        print(f"  {mode:6s} cold cache {cold['first_step']:.2f}s ({cold['misses']} compiled), warm cache "
              f"{warm['first_step']:.2f}s ({warm['disk_hits']} loaded, {warm['misses']} compiled): "
              f"{cold['first_step'] / warm['first_step']:.1f}x sooner; from process start "
              f"{cold['start_to_step']:.2f}s vs {warm['start_to_step']:.2f}s")


if __name__ == "__main__":
    main()
