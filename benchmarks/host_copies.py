"""Device-to-host copies of a 256 MB tensor: time for the call to return,
blocking vs non-blocking, and until the data is there (return plus
torch.tpu.synchronize()).

    python benchmarks/host_copies.py [--repeats 7] [--mb 256]

A non-blocking copy into pinned memory (`pinned.copy_(t, non_blocking=True)`,
`t.to("cpu", non_blocking=True)`, which makes the pinned tensor) returns at
once, as on CUDA; its data is valid after torch.tpu.synchronize(), a
recorded Event's synchronize() or the stream's. Medians over repeats.
"""

import argparse
import statistics
import time

import torch

import torch_tpu  # noqa: F401


def timed(fn, repeats):
    """Medians of (seconds to return, seconds until synchronize returns)."""
    fn()
    torch.tpu.synchronize()
    ret, done = [], []
    for _ in range(repeats):
        torch.tpu.synchronize()
        t0 = time.perf_counter()
        fn()
        t1 = time.perf_counter()
        torch.tpu.synchronize()
        t2 = time.perf_counter()
        ret.append(t1 - t0)
        done.append(t2 - t0)
    return statistics.median(ret), statistics.median(done)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--mb", type=int, default=256)
    args = ap.parse_args()
    n = args.mb * 2**20 // 4
    t = torch.randn(n, device="tpu")
    pinned = torch.empty(n, pin_memory=True)
    pageable = torch.empty(n)
    cases = [
        ("pinned.copy_(t)", lambda: pinned.copy_(t)),
        ("pinned.copy_(t, non_blocking=True)", lambda: pinned.copy_(t, non_blocking=True)),
        ("pageable.copy_(t)", lambda: pageable.copy_(t)),
        ('t.to("cpu")', lambda: t.to("cpu")),
        ('t.to("cpu", non_blocking=True)', lambda: t.to("cpu", non_blocking=True)),
    ]
    print(f"device-to-host copy of {args.mb} MB, medians of {args.repeats} (ms)")
    print(f"{'':40s} {'returns':>9s} {'data there':>11s}")
    for name, fn in cases:
        r, d = timed(fn, args.repeats)
        print(f"{name:40s} {r * 1e3:9.2f} {d * 1e3:11.2f}")


if __name__ == "__main__":
    main()
