"""JAX and Pallas kernels on tpu against native ops, side by side, medians.

    python benchmarks/jax_kernels.py [--repeats 7]

  - host cost per call (µs) of a JAX op (torch_tpu.pallas.jax_op of x + 1)
    and of the native `x + 1`, 16x16 float32, in strict eager (calls issued,
    then one wait) and fused eager (recorded, then one flush);
  - the Pallas RMSNorm of examples/pallas_kernels.py against
    torch.nn.functional.rms_norm on tpu (1024x512 float32, waited for).
"""

import argparse
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

import torch_tpu
import torch_tpu.pallas as tp

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))


def per_call_us(fn, n, repeats, mode):
    def run():
        with torch_tpu.execution_mode(mode):
            for _ in range(n):
                fn()
            torch.tpu.synchronize()

    run()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        run()
        times.append((time.perf_counter() - t0) / n * 1e6)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    import jax.numpy as jnp  # noqa: F401

    add_one = tp.jax_op("bench::add_one", lambda x: x + 1)
    x = torch.randn(16, 16, device="tpu")
    print("host cost per call, 16x16 float32 (µs, median of", args.repeats, ")")
    print(f"{'mode':>8} {'JAX op':>10} {'native':>10} {'ratio':>7}")
    for mode, n in (("strict", 500), ("fused", 200)):
        # Alternate the contenders so the machine's drift hits both alike.
        jax_t, nat_t = [], []
        for _ in range(args.repeats):
            jax_t.append(per_call_us(lambda: add_one(x), n, 1, mode))
            nat_t.append(per_call_us(lambda: x + 1, n, 1, mode))
        j, nt = statistics.median(jax_t), statistics.median(nat_t)
        print(f"{mode:>8} {j:>10.1f} {nt:>10.1f} {j / nt:>7.2f}")

    import pallas_kernels as ex

    a, w = torch.randn(1024, 512, device="tpu"), torch.randn(512, device="tpu")
    print("\nRMSNorm 1024x512 float32, per call waited for (µs)")
    pal, nat = [], []
    for _ in range(args.repeats):
        pal.append(per_call_us(lambda: ex.rmsnorm_op(a, w).cpu(), 20, 1, "strict"))
        nat.append(per_call_us(lambda: F.rms_norm(a, (512,), w, ex.EPS).cpu(), 20, 1, "strict"))
    p, nt = statistics.median(pal), statistics.median(nat)
    print(f"  Pallas (interpret mode on {tp._platform()}) {p:.1f}   native {nt:.1f}   ratio {p / nt:.2f}")


if __name__ == "__main__":
    main()
