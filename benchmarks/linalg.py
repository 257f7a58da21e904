"""Linear algebra on the tpu device (StableHLO loops) vs CPU PyTorch (LAPACK).

    python benchmarks/linalg.py [--repeats 5]

Prints the median time of each op on both devices and the ratio tpu / CPU
(below 1: tpu faster), after one warm-up call that compiles the program. The
decompositions loop over columns (LU, QR) or rotations (Jacobi eigh and SVD),
so the ratio shows what the portable formulation costs against LAPACK.
Also matrix products with a transposed operand (a linear layer's weight
gradient x.t() @ g, A.t() @ v), where XLA's CPU kernel depends on the
operands' orientation.
"""

import argparse

import torch

import torch_tpu  # noqa: F401
from _timing import median_seconds


def timed(op, device, *xs):
    args = [x.to(device) for x in xs]

    def run():
        out = op(*args)
        if device != "cpu":
            torch.tpu.synchronize()
        return out

    return run


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    g = torch.Generator().manual_seed(0)
    cases = []
    for n in (64, 256):
        a = torch.randn(n, n, generator=g)
        b = torch.randn(n, 8, generator=g)
        cases += [(f"solve {n}x{n}", torch.linalg.solve, (a, b)), (f"det {n}x{n}", torch.linalg.det, (a,)),
                  (f"qr {n}x{n}", torch.linalg.qr, (a,))]
    for n in (16, 64):
        a = torch.randn(n, n, generator=g)
        cases += [(f"eigh {n}x{n}", torch.linalg.eigh, (a + a.mT,)), (f"svd {n}x{n}", torch.linalg.svd, (a,))]
    big = torch.randn(2048, 512, generator=g)
    for n in (1, 8, 128):
        cases.append((f"A.t() @ B, 2048x512, B 2048x{n}", lambda a, b: a.t() @ b,
                      (big, torch.randn(2048, n, generator=g))))
    cases.append(("A.t() @ v, 2048x512", lambda a, v: a.t() @ v, (big, torch.randn(2048, generator=g))))
    cases.append(("A.t() @ B.t(), 2048x512, B 128x2048", lambda a, b: a.t() @ b.t(),
                  (big, torch.randn(128, 2048, generator=g))))
    print(f"{'op':<40} {'tpu ms':>10} {'cpu ms':>10} {'tpu/cpu':>8}")
    for name, op, xs in cases:
        t = median_seconds(timed(op, "tpu", *xs), args.repeats)
        c = median_seconds(timed(op, "cpu", *xs), args.repeats)
        print(f"{name:<40} {t * 1e3:>10.3f} {c * 1e3:>10.3f} {t / c:>8.1f}")


if __name__ == "__main__":
    main()
