"""Instructions per small op, counted by callgrind (stable on a noisy machine).

    python benchmarks/op_instructions.py [--mode strict|fused|cpu] [--ops-per-flush 50] [--top 25]
                                         [--launch inline|thread]

Runs `y = x + 1` on a 16x16 float32 tensor under `valgrind --tool=callgrind`
twice, with N and N + 2000 ops after the same warm-up (and a first run that
fills the compile cache), and prints the
difference divided by 2000: the instructions of one op with every one-time
cost (start-up, compiles, the warm-up) cancelled. In fused eager the graph is
flushed (torch_tpu.flush()) every --ops-per-flush ops, so the figure is one
recorded op plus its share of a cached flush; the flush's own share is
printed apart. Also prints the inclusive instructions per op of the --top
functions that differ most between the two runs (callgrind_annotate
--inclusive=yes), which is where an op's instructions go.

Strict eager's programs start on the calling thread (--launch inline:
TORCH_TPU_ASYNC_LAUNCH=0), or all on the launcher thread (--launch thread:
TORCH_TPU_ASYNC_LAUNCH=always), where the instructions are also counted per
thread (--separate-threads): the calling thread's share is what an op costs
the program issuing it.

Needs valgrind (Debian's package). A compile cache of its own is used:
valgrind reports other CPU features than the host, so programs compiled
outside it do not load under it.
"""

import argparse
import glob
import os
import re
import subprocess
import sys
import tempfile

WORKLOAD = r"""
import sys, torch
mode, n, per_flush = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
device = "cpu" if mode == "cpu" else "tpu"
if device == "tpu":
    import torch_tpu
    torch_tpu.set_execution_mode(mode)
x = torch.randn(16, 16, device=device)

def run(count):
    y = None
    for i in range(count):
        y = x + 1
        if mode == "fused" and (i + 1) % per_flush == 0:
            torch_tpu.flush()
    if device == "tpu":
        torch.tpu.synchronize()
    return y

run(300)
run(n)
"""


def callgrind(mode, n, per_flush, cache, out, launch):
    env = dict(os.environ, TORCH_TPU_CACHE_DIR=cache, TORCH_TPU_SESSION="0", TORCH_TPU_FUSED_MAX_OPS="100000",
               TORCH_TPU_ASYNC_LAUNCH="always" if launch == "thread" else "0")
    threads = ["--separate-threads=yes"] if launch == "thread" else []
    cmd = ["valgrind", "--tool=callgrind", *threads, f"--callgrind-out-file={out}", sys.executable, "-c", WORKLOAD,
           mode, str(n), str(per_flush)]
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if not threads:
        return (*annotate(out), {})
    # One file per thread (out-01, out-02, ...): the whole, and each thread's.
    total, per_fn, per_thread = 0, {}, {}
    for f in sorted(glob.glob(out + "-*")):
        t, fns = annotate(f)
        total += t
        for k, v in fns.items():
            per_fn[k] = per_fn.get(k, 0) + v
        name = "calling thread" if f.endswith("-01") else \
            "launcher thread" if any("Launcher::loop" in k for k in fns) else "plugin threads"
        per_thread[name] = per_thread.get(name, 0) + t
    return total, per_fn, per_thread


def annotate(out):
    text = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", out],
                          capture_output=True, text=True, check=True).stdout
    total, per_fn = 0, {}
    for line in text.splitlines():
        m = re.match(r"\s*([\d,]+)\s+\([^)]*\)\s+PROGRAM TOTALS", line) or re.match(r"\s*([\d,]+)\s+PROGRAM TOTALS", line)
        if m:
            total = int(m.group(1).replace(",", ""))
            continue
        m = re.match(r"\s*([\d,]+)\s+(?:\([^)]*\)\s+)?\*?\s*(\S.*)$", line)
        if m and ":" in m.group(2):
            per_fn[m.group(2).strip()] = int(m.group(1).replace(",", ""))
    return total, per_fn


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mode", choices=["strict", "fused", "cpu"], default="strict")
    p.add_argument("--ops-per-flush", type=int, default=50)
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--match", default="", help="list only functions whose name contains this (e.g. tpu::)")
    p.add_argument("--launch", choices=["inline", "thread"], default="inline",
                   help="strict eager: start programs on the calling thread, or on the launcher thread")
    args = p.parse_args()
    extra = 2000
    with tempfile.TemporaryDirectory() as tmp:
        cache = os.path.join(tmp, "cache")
        # The first run compiles (and fills the cache); the two counted runs
        # then load the same programs from disk.
        runs = [callgrind(args.mode, n, args.ops_per_flush, cache, os.path.join(tmp, f"cg.{k}"), args.launch)
                for k, n in enumerate((0, 200, 200 + extra))][1:]
    (t0, f0, p0), (t1, f1, p1) = runs
    print(f"{args.mode}: {(t1 - t0) / extra:,.0f} instructions per op")
    for name in sorted(set(p0) | set(p1)):
        print(f"  {name}: {(p1.get(name, 0) - p0.get(name, 0)) / extra:,.0f}")
    diffs = sorted(((f1.get(k, 0) - f0.get(k, 0)) / extra, k) for k in set(f0) | set(f1) if args.match in k)
    for d, name in reversed(diffs[-args.top:]):
        print(f"{d:10,.0f}  {name[:150]}")


if __name__ == "__main__":
    main()
