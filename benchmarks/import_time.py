"""`import torch` with and without device-backend autoload (torch_tpu imported
by torch's `torch.backends` entry point), and the first tpu op after it.

    python benchmarks/import_time.py [--runs 9]

Each run is a fresh interpreter; the contenders are interleaved run by run
and the medians printed. The device's runtime (the PJRT plugin) starts on
first use, so autoload adds only the package's import, not the plugin's.
"""

import argparse
import os
import statistics
import subprocess
import sys

CONTENDERS = {
    "import torch (autoload off)": ("import torch", {"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}),
    "import torch (autoload on)": ("import torch", {}),
    "import torch; first tpu op": ("import torch; torch.ones(2, device='tpu').sum().item()", {}),
}

TIMED = "import time; t0 = time.perf_counter(); {code}; print(time.perf_counter() - t0)"


def run_once(code: str, env: dict) -> float:
    out = subprocess.run([sys.executable, "-c", TIMED.format(code=code)], capture_output=True, text=True,
                         env=dict(os.environ, **env), check=True)
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=9)
    args = parser.parse_args()
    times = {name: [] for name in CONTENDERS}
    for _ in range(args.runs):
        for name, (code, env) in CONTENDERS.items():
            times[name].append(run_once(code, env))
    base = statistics.median(times["import torch (autoload off)"])
    for name, ts in times.items():
        m = statistics.median(ts)
        print(f"{name:32s} {m * 1e3:8.1f} ms  {m / base:5.2f}x")


if __name__ == "__main__":
    main()
