"""torch.compile on tpu against eager tpu and CPU PyTorch (eager and Inductor).

    python benchmarks/compile.py [--repeats 5] [--quick]

For each model (MLP 3x128, CNN, GPT 4x128, GPT 6x384) and for a training
step (forward, backward, AdamW, all inside one compiled function) and a GPT
forward, prints side by side in one run, medians:
  - step time: compiled tpu (called from strict eager, and from fused
    eager, where the step's graphs become one program), strict eager tpu,
    fused eager tpu, CPU eager, torch.compile with Inductor on CPU (same
    cores);
  - the first step (compilation included) of compiled tpu and of Inductor,
    each in a fresh process with an empty cache;
  - programs run per step on tpu (compiled and strict).
The contenders alternate within each repeat, and the order rotates from
one repeat to the next: drift of this shared machine's speed hits all of
them alike, and so does the slot right after the CPU contenders (whose
OpenMP threads keep spinning for a while after they finish).
"""

import argparse
import copy
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch
import torch.nn.functional as F

import torch_tpu
from torch_tpu.testing.models import CNN, GPT, MLP, GPTConfig

CASES = ["MLP 3x128 b256", "CNN w16 b32 32x32", "GPT 4x128 32x64", "GPT 6x384 8x128", "GPT 4x128 forward"]


def case(name):
    g = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    if name.startswith("MLP"):
        return MLP(d_in=32, hidden=128, classes=10, depth=3), torch.randn(256, 32, generator=g), \
            torch.randint(0, 10, (256,), generator=g)
    if name.startswith("CNN"):
        return CNN(classes=10, width=16), torch.randn(32, 3, 32, 32, generator=g), \
            torch.randint(0, 10, (32,), generator=g)
    if name.startswith("GPT 6x384"):
        ids = torch.randint(0, 63, (8, 129), generator=g)
        return GPT(GPTConfig(vocab_size=63, block_size=128, n_layer=6, n_head=6, n_embd=384)), ids[:, :-1], ids[:, 1:]
    ids = torch.randint(0, 63, (32, 65), generator=g)
    return GPT(GPTConfig(vocab_size=63, block_size=64, n_layer=4, n_head=4, n_embd=128)), ids[:, :-1], ids[:, 1:]


def make_step(name, device, how):
    """A function running one step of `name` on `device`; `how` is "eager",
    "compiled" (backend tpu on tpu, Inductor on CPU), "fused", or
    "compiled_fused" (compiled, called inside fused eager: the step's graphs
    join one program)."""
    model, x, y = case(name)
    model = copy.deepcopy(model).to(device)
    x, y = x.to(device), y.to(device)
    forward_only = name.endswith("forward")
    opt = None if forward_only else torch.optim.AdamW(model.parameters(), lr=1e-3)

    def loss_of():
        return model(x, y)[1] if isinstance(model, GPT) else F.cross_entropy(model(x), y)

    def train_step():
        opt.zero_grad(set_to_none=True)
        loss = loss_of()
        loss.backward()
        opt.step()
        return loss

    def forward():
        with torch.no_grad():
            return model(x)

    fn = forward if forward_only else train_step
    if how in ("compiled", "compiled_fused"):
        # dynamic=False: the cases share this code object, so Dynamo would
        # otherwise make their shapes dynamic from the second case on
        fn = torch.compile(fn, backend="tpu" if device == "tpu" else "inductor", dynamic=False)

    def run():
        if how in ("fused", "compiled_fused"):
            with torch_tpu.execution_mode("fused"):
                out = fn()
        elif device == "tpu":
            with torch_tpu.execution_mode("strict"):
                out = fn()
        else:
            out = fn()
        out.sum().item()  # wait for the device

    return run


FIRST = """
import json, sys, time
sys.path.insert(0, sys.argv[3])
import torch, torch_tpu
from compile import make_step
t0 = time.perf_counter()
step = make_step(sys.argv[1], sys.argv[2], "compiled")
step()
print(json.dumps({"first": time.perf_counter() - t0}))
"""


def first_step(name, device):
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ, TORCH_TPU_CACHE_DIR=os.path.join(d, "tpu"), TORCHINDUCTOR_CACHE_DIR=os.path.join(d, "ind"),
                   TORCH_TPU_SESSION="0")
        out = subprocess.run([sys.executable, "-c", FIRST, name, device, os.path.dirname(os.path.abspath(__file__))],
                             env=env, capture_output=True, text=True, timeout=1800)
        if out.returncode != 0:
            return float("nan")
        return json.loads(out.stdout.strip().splitlines()[-1])["first"]


def programs_per_step(run):
    torch.tpu.synchronize()
    before = torch_tpu.counters()["executions"]
    run()
    torch.tpu.synchronize()
    return torch_tpu.counters()["executions"] - before


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="the small cases only, no first-step processes")
    args = ap.parse_args()
    info = torch_tpu.plugin_info()
    print(f"tpu: {info['platform']} PJRT plugin; torch {torch.__version__}, {torch.get_num_threads()} CPU threads; "
          f"medians of {args.repeats}, contenders interleaved")
    contenders = [("compiled tpu", "tpu", "compiled"), ("comp+fused", "tpu", "compiled_fused"),
                  ("strict tpu", "tpu", "eager"), ("fused tpu", "tpu", "fused"),
                  ("CPU eager", "cpu", "eager"), ("Inductor CPU", "cpu", "compiled")]
    print(f"\n{'case':20s}" + "".join(f"{c[0]:>14s}" for c in contenders) +
          f"{'strict/comp':>12s}{'comp/Ind':>10s}{'c+f/Ind':>9s}{'progs c/c+f/s':>15s}")
    cases = CASES[:2] + CASES[-1:] if args.quick else CASES
    firsts = {}
    for name in cases:
        # Each case compiles afresh: the cases share code objects (the model's
        # forward, the optimizer's step), and Dynamo's recompile limit would
        # otherwise send later cases back to eager.
        torch._dynamo.reset()
        runs = [make_step(name, dev, how) for _, dev, how in contenders]
        for r in runs:  # warm-up: compile, create the optimizer state
            r()
            r()
        times = [[] for _ in runs]
        for rep in range(args.repeats):
            for j in range(len(runs)):
                k = (j + rep) % len(runs)
                t0 = time.perf_counter()
                runs[k]()
                times[k].append(time.perf_counter() - t0)
        med = [statistics.median(t) for t in times]
        progs = (programs_per_step(runs[0]), programs_per_step(runs[1]), programs_per_step(runs[2]))
        print(f"{name:20s}" + "".join(f"{m * 1e3:12.2f}ms" for m in med) +
              f"{med[2] / med[0]:12.2f}{med[0] / med[5]:10.2f}{med[1] / med[5]:9.2f}"
              f"{progs[0]:>7d}/{progs[1]}/{progs[2]:<4d}")
        if not args.quick:
            firsts[name] = (first_step(name, "tpu"), first_step(name, "cpu"))
    if firsts:
        print(f"\n{'first step, new process, empty caches':40s}{'tpu compiled':>14s}{'Inductor CPU':>14s}{'ratio':>8s}")
        for name, (t, i) in firsts.items():
            print(f"{name:40s}{t:13.2f}s{i:13.2f}s{t / i:8.2f}")


if __name__ == "__main__":
    main()
