"""The programs of one training step: fused eager's against torch.compile's.

    python benchmarks/program_compare.py [--case "GPT 4x128 32x64"] [--repeats 7]

Each contender runs in a process of its own, with XLA dumping the programs
it compiles (XLA_FLAGS=--xla_dump_to) and no compile cache. After warm-up the
process clears its executables and runs one more step, so the dumps it
makes then are exactly the steady-state step's programs. Prints, side by
side:
  - programs and host reads per step (torch_tpu.counters()), device time per
    step (the profiler's device spans) and the step's median wall time;
  - the programs as handed to XLA: ops by kind (dots, transposes, converts,
    copies, gathers and scatters, ...), and as XLA optimized them: fusions,
    dots, copies and transposes left outside fusions, the input buffers
    donated to outputs, and the temporary allocations (largest and total).
The contenders: fused eager; fused eager without the CPU plugin's cap on
XLA's temporary heaps (XLA_FLAGS=--xla_multiheap_size_constraint_per_heap=-1,
what fused eager ran with before); torch.compile(backend="tpu") called from
strict eager. The cases are benchmarks/compile.py's.
"""

import argparse
import collections
import glob
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))

CHILD = """
import glob, json, os, statistics, sys, time
sys.path.insert(0, sys.argv[4])
import torch, torch_tpu
from torch.profiler import ProfilerActivity, profile
from compile import make_step
case, how, dump = sys.argv[1], sys.argv[2], sys.argv[3]
step = make_step(case, "tpu", how)
for _ in range(3):
    step()
torch_tpu.clear_cache(disk=True)
before = set(glob.glob(os.path.join(dump, "*")))
step()  # recompiles the steady-state programs, and only those
steady = sorted({os.path.basename(p).split(".")[0] for p in set(glob.glob(os.path.join(dump, "*"))) - before
                 if p.endswith(".before_optimizations.txt")})
torch.tpu.synchronize()
c0 = torch_tpu.counters()
step()
torch.tpu.synchronize()
c1 = torch_tpu.counters()
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
    for _ in range(5):
        step()
spans = sorted((e.time_range.start, e.time_range.end) for e in prof.events()
               if e.device_type != torch.autograd.DeviceType.CPU and e.name == "tpu fused program")
device_us, end = 0, float("-inf")  # (the union: queued programs' spans overlap)
for a, b in spans:
    device_us += max(0, b - max(a, end))
    end = max(end, b)
wall = []
for _ in range(int(sys.argv[5])):
    t0 = time.perf_counter()
    step()
    wall.append(time.perf_counter() - t0)
print(json.dumps({"modules": steady, "executions": c1["executions"] - c0["executions"],
                  "host_reads": c1["host_reads"] - c0["host_reads"], "device_ms": device_us / 5e3,
                  "wall_ms": statistics.median(wall) * 1e3}))
"""

INSTR = re.compile(r"^\s*(?:ROOT )?%\S+ = (?:\([^)]*\)|\S+) ([a-z][\w\-]*)\(")
TEMP = re.compile(r"^allocation \d+: size (\d+), .*preallocated-temp", re.M)


def op_counts(path, entry_only=False):
    counts = collections.Counter()
    inside = False
    with open(path) as f:
        for line in f:
            if line.startswith("ENTRY"):
                inside = True
            elif line.startswith("}"):
                inside = False
            if entry_only and not inside:
                continue
            m = INSTR.match(line)
            if m:
                counts[m.group(1)] += 1
    return counts


def summarize(dump, modules):
    pre, post = collections.Counter(), collections.Counter()
    temps, donated = [], 0
    for m in modules:
        base = os.path.join(dump, m + ".tpu_")
        (pre_file,) = glob.glob(base + "*.before_optimizations.txt")
        pre += op_counts(pre_file)
        (post_file,) = glob.glob(base + "*.cpu_after_optimizations.txt") or glob.glob(base + "*after_optimizations.txt")
        post += op_counts(post_file, entry_only=True)
        with open(post_file) as f:
            header = f.readline()
        donated += header.count("may-alias)") + header.count("must-alias)")
        for ba in glob.glob(base + "*after_optimizations-buffer-assignment.txt"):
            with open(ba) as f:
                temps += [int(s) for s in TEMP.findall(f.read())]
    return pre, post, temps, donated


def run(case, how, repeats, extra_flags=""):
    with tempfile.TemporaryDirectory() as d:
        dump = os.path.join(d, "dump")
        env = dict(os.environ, TORCH_TPU_CACHE_DIR="0", TORCH_TPU_SESSION="0",
                   XLA_FLAGS=f"{os.environ.get('XLA_FLAGS', '')} --xla_dump_to={dump} --xla_dump_hlo_as_text "
                             f"{extra_flags}".strip())
        out = subprocess.run([sys.executable, "-c", CHILD, case, how, dump, HERE, str(repeats)], env=env,
                             capture_output=True, text=True, timeout=1800)
        if out.returncode != 0:
            raise RuntimeError(f"{how}: {out.stderr[-3000:]}")
        res = json.loads(out.stdout.strip().splitlines()[-1])
        res["pre"], res["post"], res["temps"], res["donated"] = summarize(dump, res["modules"])
        return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", default="GPT 4x128 32x64")
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    contenders = [("fused eager", "fused", ""),
                  ("fused, one temp heap", "fused", "--xla_multiheap_size_constraint_per_heap=-1"),
                  ("torch.compile", "compiled", "")]
    t0 = time.perf_counter()
    res = [run(args.case, how, args.repeats, flags) for _, how, flags in contenders]
    print(f"{args.case}: one training step (forward, backward, AdamW); {time.perf_counter() - t0:.0f} s\n")
    width = 22
    print(f"{'':34s}" + "".join(f"{c[0]:>{width}s}" for c in contenders))

    def row(label, values):
        print(f"{label:34s}" + "".join(f"{v:>{width}}" for v in values))

    row("programs run per step", [r["executions"] for r in res])
    row("host reads per step", [r["host_reads"] for r in res])
    row("device ms per step", [f"{r['device_ms']:.2f}" for r in res])
    row(f"wall ms per step (median of {args.repeats})", [f"{r['wall_ms']:.2f}" for r in res])
    row("steady-state programs compiled", [len(r["modules"]) for r in res])
    row("input buffers donated", [r["donated"] for r in res])
    row("largest temp allocation (MiB)", [f"{max(r['temps'] or [0]) / 2**20:.1f}" for r in res])
    row("temp allocations (count / MiB)",
        [f"{len(r['temps'])} / {sum(r['temps']) / 2**20:.1f}" for r in res])
    print("\nops handed to XLA (all computations)")
    kinds = ["dot", "transpose", "reshape", "convert", "copy", "broadcast", "gather", "scatter", "select",
             "compare", "reduce", "add", "multiply", "subtract", "divide", "abs", "parameter", "constant"]
    for k in kinds:
        row(f"  {k}", [r["pre"][k] for r in res])
    row("  total", [sum(r["pre"].values()) for r in res])
    print("\nafter XLA's optimizations (entry computation)")
    for k in ["fusion", "dot", "copy", "transpose", "bitcast", "custom-call"]:
        row(f"  {k}", [r["post"][k] for r in res])


if __name__ == "__main__":
    main()
