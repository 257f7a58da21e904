"""Finding the PJRT plugin that backs the ``tpu`` device.

Order: ``TORCH_TPU_PJRT_PLUGIN`` (a path), else libtpu when TPU chips are
present, else the CUDA plugin when an NVIDIA GPU is present, else the CPU
plugin. Nothing is loaded here; the C++ runtime loads the chosen file on
first use and reports what went wrong with it.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import sys
from dataclasses import dataclass


@dataclass
class PluginChoice:
    path: str  # "" when nothing was found
    kind: str  # "env", "tpu", "cuda", "cpu" or "none"
    searched: list[str]


def _package_file(package: str, *relative: str) -> str | None:
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for base in spec.submodule_search_locations:
        for rel in relative:
            for hit in sorted(glob.glob(os.path.join(base, rel))):
                if os.path.isfile(hit):
                    return hit
    return None


def _tpu_chips_present() -> bool:
    # TPU VMs expose the chips as /dev/accel* (v4, v5) or /dev/vfio (v5e+, v6).
    return bool(glob.glob("/dev/accel*")) or os.path.isdir("/dev/vfio") and bool(
        glob.glob("/dev/vfio/[0-9]*")
    )


def _nvidia_gpu_present() -> bool:
    return bool(glob.glob("/dev/nvidia[0-9]*"))


def find_plugin() -> PluginChoice:
    searched: list[str] = []
    env = os.environ.get("TORCH_TPU_PJRT_PLUGIN", "")
    if env:
        return PluginChoice(env, "env", ["TORCH_TPU_PJRT_PLUGIN=" + env])

    searched.append("libtpu (pip install libtpu) with TPU chips in /dev/accel* or /dev/vfio")
    if _tpu_chips_present():
        path = _package_file("libtpu", "libtpu.so")
        if path:
            return PluginChoice(path, "tpu", searched)

    searched.append("jax-cuda13-pjrt / jax-cuda12-pjrt with an NVIDIA GPU in /dev/nvidia*")
    if _nvidia_gpu_present():
        for pkg, rel in (
            ("jax_plugins.xla_cuda13", "xla_cuda_plugin.so"),
            ("jax_plugins.xla_cuda12", "xla_cuda_plugin.so"),
            ("xla_cuda13_pjrt", "*.so"),
        ):
            path = _package_file(pkg, rel)
            if path:
                return PluginChoice(path, "cuda", searched)

    searched.append("lammps-jax-pjrt-cpu or xla-cpu-pjrt (the CPU plugin)")
    for pkg, rel in (
        ("lammps_jax_pjrt_cpu", "pjrt_c_api_cpu_plugin.so"),
        ("xla_plugins.xla_cpu_pjrt", "xla_cpu_pjrt.so"),
    ):
        path = _package_file(pkg, rel)
        if path:
            return PluginChoice(path, "cpu", searched)
    return PluginChoice("", "none", searched)


# XLA:CPU gives all of a program's temporaries one allocation: for a fused
# training step, every activation of the step (about 100 MB for the demo
# GPT). glibc's malloc serves a block above 32 MiB with a fresh mmap, so each
# run of the program page-faults and zeroes the whole block again and unmaps
# it after: a quarter of a fused GPT step's time. With XLA's temporaries in
# heaps of at most 30 MiB, each block stays under glibc's largest mmap
# threshold (32 MiB), and malloc reuses it from one run to the next. (A
# single temporary above the cap still gets a block of its own, as before,
# and XLA logs a warning when it compiles such a program: the cap is as
# high as works, so that few programs do.) Accelerator plugins reuse device
# memory in their own allocators, so only the CPU plugin gets the flag.
CPU_TEMP_HEAP_FLAG = "--xla_multiheap_size_constraint_per_heap"
CPU_TEMP_HEAP_BYTES = 30 << 20


def is_cpu_plugin(choice: PluginChoice) -> bool:
    return choice.kind == "cpu" or (choice.kind == "env" and "cpu" in os.path.basename(choice.path).lower())


def xla_flags(choice: PluginChoice, current: str) -> str:
    """XLA_FLAGS for the plugin `choice`: `current` (the user's), with the
    CPU plugin's temporary-heap cap added unless the user set one."""
    if not is_cpu_plugin(choice) or CPU_TEMP_HEAP_FLAG in current:
        return current
    return f"{current} {CPU_TEMP_HEAP_FLAG}={CPU_TEMP_HEAP_BYTES}".strip()


def default_cache_dir() -> str:
    """Where compiled programs persist: TORCH_TPU_CACHE_DIR ("0" or "off":
    nowhere), else the user's cache directory ($XDG_CACHE_HOME or ~/.cache,
    under torch_tpu/executables)."""
    explicit = os.environ.get("TORCH_TPU_CACHE_DIR")
    if explicit is not None:
        return "" if explicit.strip().lower() in ("", "0", "off", "none") else explicit
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "torch_tpu", "executables")


def session_name() -> str:
    """Names this workload for warm starts: the command line and working
    directory. A rerun of the same command loads, in the background from the
    moment the device starts, the compiled programs the last run used
    (TORCH_TPU_SESSION overrides the name; "0" turns preloading off)."""
    explicit = os.environ.get("TORCH_TPU_SESSION")
    if explicit is not None:
        return "" if explicit.strip().lower() in ("", "0", "off", "none") else explicit
    argv = getattr(sys, "orig_argv", None) or sys.argv
    return "\0".join([os.getcwd(), *argv])


def cpu_device_count() -> int:
    """How many devices the XLA CPU plugin simulates: TORCH_TPU_CPU_DEVICES, or
    under a launcher (torchrun), one per local process, so that each rank
    can take `tpu:LOCAL_RANK` as on a multi-accelerator host; else 1."""
    for var in ("TORCH_TPU_CPU_DEVICES", "LOCAL_WORLD_SIZE"):
        value = os.environ.get(var, "").strip()
        if value:
            try:
                n = int(value)
            except ValueError:
                raise ValueError(f"{var}={value!r} is not a number of devices") from None
            if n < 1:
                raise ValueError(f"{var}={value!r}: the number of devices must be at least 1")
            return n
    return 1
