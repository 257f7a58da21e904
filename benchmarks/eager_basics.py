"""Eager basics on the tpu device, measured side by side with CPU PyTorch.

    python benchmarks/eager_basics.py [--repeats 7]

Prints medians over repeats and the ratio tpu / CPU (below 1: tpu faster):
  - small-op latency: `x + 1` on a 16x16 tensor, asynchronous dispatch
    (1000 ops, one synchronize) and round trip (synchronize after each op),
    with programs started by the launcher thread (the default) and on the
    calling thread (TORCH_TPU_ASYNC_LAUNCH=0), interleaved;
  - a few ops then a read (`(x * 3 - 1).cpu()`), both ways;
  - float32 matmul at 512x512 and 2048x2048;
  - compiling an op for the first time vs. finding it in the cache.
"""

import argparse
import statistics
import time

import torch

import torch_tpu
from _timing import median_seconds


def small_op(device, n, sync_each):
    x = torch.randn(16, 16, device=device)

    def run():
        y = x
        for _ in range(n):
            y = x + 1
            if sync_each and device != "cpu":
                torch.tpu.synchronize()
        if device != "cpu":
            torch.tpu.synchronize()
        return y

    run()  # warm up (compile)
    return run


class inline_launches:
    """Strict eager's programs start on the calling thread within the block
    (as with TORCH_TPU_ASYNC_LAUNCH=0), not on the launcher thread."""

    def __enter__(self):
        torch.tpu.synchronize()
        torch.ops.torch_tpu._hold_inline_launches(True)

    def __exit__(self, *exc):
        torch.tpu.synchronize()
        torch.ops.torch_tpu._hold_inline_launches(False)


def inline(fn):
    def run():
        with inline_launches():
            return fn()

    return run


def ops_then_read():
    x = torch.randn(37, 53, device="tpu")

    def run():
        return (x * 3 - 1).cpu()

    run()
    return run


def execute_floor(n):
    """The plugin alone: n executions of x + 1 on a 16x16 value, launched from
    C++ as strict eager launches an op (no dispatcher, memo or Python)."""
    x = torch.randn(16, 16, device="tpu")
    torch.tpu.synchronize()

    def run():  # seconds per execution, timed in C++ (after a warm-up there)
        return torch.ops.torch_tpu._execute_floor(x, n)

    return run


def matmul(device, size, n):
    a = torch.randn(size, size, device=device)
    b = torch.randn(size, size, device=device)

    def run():
        for _ in range(n):
            c = a @ b
        if device != "cpu":
            torch.tpu.synchronize()
        return c

    run()
    return run


def compile_vs_hit():
    # A shape no other code uses, so the first call compiles.
    shape = (37, 53)
    x = torch.randn(shape, device="tpu")
    torch_tpu.clear_cache()
    t0 = time.perf_counter()
    (x * 3 - 1).cpu()
    cold = time.perf_counter() - t0
    hits = []
    for _ in range(20):
        t0 = time.perf_counter()
        (x * 3 - 1).cpu()
        hits.append(time.perf_counter() - t0)
    return cold, statistics.median(hits)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--repeats", type=int, default=7)
    args = p.parse_args()
    r = args.repeats
    info = torch_tpu.plugin_info()
    print(f"# torch {torch.__version__}, tpu = {info['platform']} PJRT plugin (API {info['pjrt_api_version']}), "
          f"{torch.get_num_threads()} CPU threads")
    print(f"{'benchmark':44s} {'tpu':>12s} {'cpu':>12s} {'tpu/cpu':>8s}")

    def row(name, t_tpu, t_cpu, unit="us", scale=1e6):
        print(f"{name:44s} {t_tpu * scale:10.1f}{unit} {t_cpu * scale:10.1f}{unit} {t_tpu / t_cpu:8.2f}")

    n = 1000
    op_tpu, op_cpu, floor = small_op("tpu", n, False), small_op("cpu", n, False), execute_floor(n)
    op_inline = inline(op_tpu)
    times = {"tpu": [], "inline": [], "cpu": [], "floor": []}
    for _ in range(r):  # interleaved: the machine's noise hits all alike
        for name, fn in (("tpu", op_tpu), ("inline", op_inline), ("cpu", op_cpu)):
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
        times["floor"].append(floor() * n)
    t_tpu, t_inline, t_cpu, t_floor = (statistics.median(times[k]) / n for k in ("tpu", "inline", "cpu", "floor"))
    row("x + 1, 16x16, async dispatch (per op)", t_tpu, t_cpu)
    row("  started on the calling thread instead", t_inline, t_cpu)
    row("  the plugin's execute alone (the floor)", t_floor, t_cpu)
    row("  torch_tpu's own cost above the floor", t_inline - t_floor, t_cpu)
    n = 200
    round_trip, round_cpu = small_op("tpu", n, True), small_op("cpu", n, True)
    round_inline = inline(round_trip)
    few = ops_then_read()
    few_inline = inline(few)
    x_cpu = torch.randn(37, 53)
    times = {k: [] for k in ("rt", "rt_inline", "rt_cpu", "few", "few_inline", "few_cpu")}
    for _ in range(r):
        for name, fn, reps in (("rt", round_trip, 1), ("rt_inline", round_inline, 1), ("rt_cpu", round_cpu, 1),
                               ("few", few, 50), ("few_inline", few_inline, 50),
                               ("few_cpu", lambda: (x_cpu * 3 - 1).clone(), 50)):
            t0 = time.perf_counter()
            for _ in range(reps):
                fn()
            times[name].append((time.perf_counter() - t0) / (n if name.startswith("rt") else reps))
    med = {k: statistics.median(v) for k, v in times.items()}
    row("x + 1, 16x16, round trip (per op)", med["rt"], med["rt_cpu"])
    row("  started on the calling thread instead", med["rt_inline"], med["rt_cpu"])
    row("(x * 3 - 1).cpu(), 37x53 (per call)", med["few"], med["few_cpu"])
    row("  started on the calling thread instead", med["few_inline"], med["few_cpu"])
    row("matmul 512x512 f32 (per op)", median_seconds(matmul("tpu", 512, 10), r) / 10,
        median_seconds(matmul("cpu", 512, 10), r) / 10, "ms", 1e3)
    row("matmul 2048x2048 f32 (per op)", median_seconds(matmul("tpu", 2048, 2), max(3, r // 2)) / 2,
        median_seconds(matmul("cpu", 2048, 2), max(3, r // 2)) / 2, "ms", 1e3)
    colds, hits = zip(*(compile_vs_hit() for _ in range(max(3, r // 2))))
    cold, hit = statistics.median(colds), statistics.median(hits)
    print(f"{'x * 3 - 1, 37x53: cold compile vs cache hit':44s} {cold * 1e3:10.1f}ms {hit * 1e3:10.3f}ms "
          f"{cold / hit:8.0f}x")


if __name__ == "__main__":
    main()
