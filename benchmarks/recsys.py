"""The DLRM training step of examples/dlrm.py at benchmark size, tpu vs CPU.

    python benchmarks/recsys.py [--repeats 5] [--tables 26] [--rows 100000]

Tables of 100k x 64, batch 2048, 26 sparse features with 1-20 ids per sample
(issue 48's figures), Adagrad on the tables' sparse gradients, Adam on the
dense part. Prints medians, the contenders interleaved round by round:

  - the whole step on CPU eager, and on tpu in strict eager, fused eager and
    with the dense part compiled; each on a fixed set of batches (cycled, so
    every shape has been seen: the device's steady state) and on a new batch
    per step (every step has new id counts, so new shapes: what a training
    run on fresh data sees until shapes repeat);
  - the sparse optimizer's step alone (Adagrad over the 26 tables' sparse
    gradients), tpu vs CPU;
  - programs built per step on fresh batches (torch_tpu.counters()).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

import torch_tpu

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
import dlrm  # noqa: E402


def _sync(device):
    if device == "tpu":
        torch.tpu.synchronize()


class Contender:
    def __init__(self, name, cfg, device, mode=None, compile_dense=False):
        self.name, self.cfg, self.device, self.mode = name, cfg, device, mode
        self.sparse, self.dense = dlrm.build(cfg, device)
        self.opt_s, self.opt_d = dlrm._optimizers(cfg, self.sparse, self.dense)
        self.run_dense = torch.compile(self.dense, backend="tpu") if compile_dense else self.dense

    def _mode(self):
        return torch_tpu.execution_mode(self.mode) if self.mode else contextlib.nullcontext()

    def timed(self, batch):
        with self._mode():
            t0 = time.perf_counter()
            dlrm.train_step(self.sparse, self.run_dense, self.opt_s, self.opt_d, dlrm._on(self.device, batch)).item()
            _sync(self.device)
            return time.perf_counter() - t0

    def timed_optimizer(self, batch):
        """The sparse optimizer's step alone, on the gradients of `batch`."""
        with self._mode():
            x, ids, offsets, y = dlrm._on(self.device, batch)
            self.opt_s.zero_grad()
            F.binary_cross_entropy_with_logits(self.run_dense(x, self.sparse(ids, offsets)), y).backward()
            _sync(self.device)
            t0 = time.perf_counter()
            self.opt_s.step()
            _sync(self.device)
            return time.perf_counter() - t0


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--tables", type=int, default=26)
    p.add_argument("--rows", type=int, default=100_000)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--batch", type=int, default=2048)
    p.add_argument("--fixed-batches", type=int, default=2, help="batches cycled for the steady state")
    p.add_argument("--fresh", type=int, default=3, help="steps on new batches per contender")
    args = p.parse_args()
    cfg = dlrm.Config(tables=args.tables, rows=args.rows, dim=args.dim, batch=args.batch,
                      bottom=(512, 256, args.dim), top=(512, 256))
    print(f"DLRM: {cfg.tables} tables of {cfg.rows} x {cfg.dim}, batch {cfg.batch}, 1-{cfg.max_ids} ids per "
          f"sample and feature; medians of {args.repeats}, interleaved", flush=True)
    contenders = [
        Contender("CPU eager", cfg, "cpu"),
        Contender("tpu strict eager", cfg, "tpu", "strict"),
        Contender("tpu fused eager", cfg, "tpu", "fused"),
        Contender("tpu strict, dense part compiled", cfg, "tpu", "strict", compile_dense=True),
    ]
    fixed = [dlrm.make_batch(cfg, 10_000 + i) for i in range(args.fixed_batches)]
    for c in contenders:  # warm-up: every fixed batch's shapes compiled
        for b in fixed:
            c.timed(b)
    steady = {c.name: [] for c in contenders}
    for r in range(args.repeats):
        for c in contenders:
            steady[c.name].append(c.timed(fixed[r % len(fixed)]))
    fresh = {c.name: [] for c in contenders}
    built = {c.name: [] for c in contenders}
    for r in range(args.fresh):
        for i, c in enumerate(contenders):
            # new id counts every step, and a batch of its own for each
            # contender (the tpu ones share the programs of a shape)
            batch = dlrm.make_batch(cfg, r * len(contenders) + i)
            before = torch_tpu.counters()["programs_built"]
            fresh[c.name].append(c.timed(batch))
            built[c.name].append(torch_tpu.counters()["programs_built"] - before)
    opt = {c.name: [] for c in contenders[:2]}
    for r in range(args.repeats):
        for c in contenders[:2]:
            opt[c.name].append(c.timed_optimizer(fixed[r % len(fixed)]))

    base = statistics.median(steady["CPU eager"])
    base_fresh = statistics.median(fresh["CPU eager"])
    print(f"\n{'whole step':34s} {'fixed batches':>14s} {'vs CPU':>7s} {'new batches':>12s} {'vs CPU':>7s}"
          f" {'programs built/step':>20s}")
    for c in contenders:
        s, f = statistics.median(steady[c.name]), statistics.median(fresh[c.name])
        print(f"{c.name:34s} {s * 1e3:11.1f} ms {s / base:7.2f} {f * 1e3:9.1f} ms {f / base_fresh:7.2f}"
              f" {statistics.median(built[c.name]):20.0f}")
    o_cpu = statistics.median(opt["CPU eager"])
    o_tpu = statistics.median(opt["tpu strict eager"])
    print(f"\nsparse Adagrad step alone ({cfg.tables} tables): CPU {o_cpu * 1e3:.1f} ms, tpu strict {o_tpu * 1e3:.1f} ms "
          f"({o_tpu / o_cpu:.2f}x)")


if __name__ == "__main__":
    main()
