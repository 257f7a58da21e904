"""torch.distributed on tpu tensors against gloo on CPU tensors, same processes.

    python benchmarks/distributed.py [--repeats 7] [--quick]

Prints, medians, side by side in one run:
  - all_reduce (SUM, float32) bus bandwidth from 1 MB to 256 MB on tpu
    tensors (the tpu backend) and on CPU tensors (gloo) in the same 2 ranks;
    the two alternate within each repeat, so drift of this shared machine hits
    both alike. Bus bandwidth = bytes * 2 (n - 1) / n / time (NCCL's measure).
  - a DDP training step (an MLP and the small GPT) with 2 ranks vs 1 rank,
    each rank on its own tpu device (this machine has 2 cores: report only).
"""

import argparse
import os
import statistics
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _timing import median_seconds  # noqa: E402


def bandwidth(rank, world, init, sizes_mb, repeats, out):
    import torch_tpu  # noqa: F401

    dist.init_process_group(init_method=init, rank=rank, world_size=world)
    rows = []
    for mb in sizes_mb:
        n = mb * 2**20 // 4
        tpu = torch.ones(n, device="tpu")
        cpu = torch.ones(n)
        times = {"tpu": [], "gloo": []}
        for t in (tpu, cpu):  # warm-up
            dist.all_reduce(t)
        torch.tpu.synchronize()
        for _ in range(repeats):
            for name, t in (("tpu", tpu), ("gloo", cpu)):
                dist.barrier()
                t0 = time.perf_counter()
                dist.all_reduce(t)
                if name == "tpu":
                    torch.tpu.synchronize()
                times[name].append(time.perf_counter() - t0)
        bus = 2 * (world - 1) / world * n * 4
        med = {k: statistics.median(v) for k, v in times.items()}
        rows.append((mb, bus / med["tpu"] / 1e9, bus / med["gloo"] / 1e9))
    if rank == 0:
        torch.save(rows, out)
    dist.destroy_process_group()


def _model(name):
    torch.manual_seed(0)
    if name == "MLP":
        return nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10))
    from torch_tpu.testing.models import GPT, GPTConfig

    return GPT(GPTConfig(vocab_size=128, block_size=64, n_layer=4, n_head=4, n_embd=128))


def ddp_step(rank, world, init, name, repeats, out):
    import torch_tpu  # noqa: F401

    dist.init_process_group(init_method=init, rank=rank, world_size=world)
    model = nn.parallel.DistributedDataParallel(_model(name).to("tpu"))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(rank)
    if name == "MLP":
        x, y = torch.randn(128, 256, generator=g).to("tpu"), torch.randint(0, 10, (128,), generator=g).to("tpu")
    else:
        x = torch.randint(0, 128, (16, 64), generator=g).to("tpu")
        y = torch.randint(0, 128, (16, 64), generator=g).to("tpu")

    def step():
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        loss.item()

    t = median_seconds(step, repeats)
    if rank == 0:
        torch.save(t, out)
    dist.destroy_process_group()


def spawn(fn, world, *args):
    with tempfile.TemporaryDirectory() as tmp:
        init = f"file://{os.path.join(tmp, 'store')}"
        out = os.path.join(tmp, "out.pt")
        mp.start_processes(fn, args=(world, init, *args, out), nprocs=world, start_method="spawn")
        return torch.load(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--quick", action="store_true", help="1-16 MB and 3 repeats")
    args = ap.parse_args()
    sizes = [1, 4, 16] if args.quick else [1, 4, 16, 64, 256]
    repeats = 3 if args.quick else args.repeats

    print("all_reduce float32 SUM, 2 ranks, bus bandwidth (GB/s), medians of", repeats)
    print(f"{'size':>8} {'tpu':>10} {'gloo':>10} {'tpu/gloo':>9}")
    for mb, tpu, gloo in spawn(bandwidth, 2, sizes, repeats):
        print(f"{mb:>6}MB {tpu:>10.2f} {gloo:>10.2f} {tpu / gloo:>9.2f}")

    print("\nDDP training step (AdamW), median ms; each rank on its own device")
    print(f"{'model':>8} {'1 rank':>10} {'2 ranks':>10} {'2/1':>6}")
    for name in ("MLP", "GPT"):
        one = spawn(ddp_step, 1, name, repeats)
        two = spawn(ddp_step, 2, name, repeats)
        print(f"{name:>8} {one * 1e3:>10.1f} {two * 1e3:>10.1f} {two / one:>6.2f}")


if __name__ == "__main__":
    main()
