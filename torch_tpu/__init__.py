"""torch_tpu: PyTorch on TPUs and every other PJRT device, as the ``tpu`` device.

    import torch, torch_tpu
    model.to("tpu")

Importing registers the ``tpu`` device (PyTorch's PrivateUse1 backend), the
``torch.tpu`` module and the ``.tpu()`` methods. The PJRT plugin is loaded on
first use: ``TORCH_TPU_PJRT_PLUGIN`` if set, else libtpu on TPU hosts, else the
CUDA plugin on NVIDIA hosts, else the XLA CPU plugin.
"""

from __future__ import annotations

import contextlib
import glob
import os
import sys

# Quiet the XLA plugin's informational logging unless the user asked for it.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")


def _autoload() -> None:
    """The ``torch.backends`` entry point: ``import torch`` imports this
    package (device-backend autoload), so the ``tpu`` device exists in every
    process that imports torch, worker processes that never name torch_tpu
    included; ``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` turns it off. Importing did
    the registration; nothing is left to do. Defined before ``import torch``
    because ``import torch_tpu`` as a process's first import of torch reaches
    this entry point while this module is still being imported."""


import torch  # noqa: E402

from . import _plugin  # noqa: E402

__all__ = [
    "cache_stats",
    "clear_cache",
    "cpu_fallback_counts",
    "device_count",
    "execution_mode",
    "get_execution_mode",
    "is_available",
    "plugin_info",
    "set_cpu_fallback",
    "set_execution_mode",
    "set_op_memo",
]


def _library_path() -> str:
    here = os.path.dirname(os.path.abspath(__file__))
    hits = sorted(glob.glob(os.path.join(here, "lib", "libtorch_tpu*.so")))
    if not hits:
        raise ImportError(
            "torch_tpu's C++ extension is missing (torch_tpu/lib/libtorch_tpu.so). Build it with "
            "`pip install --no-build-isolation -e .` from the repository root."
        )
    return hits[0]


torch.ops.load_library(_library_path())
_ops = torch.ops.torch_tpu

torch.utils.rename_privateuse1_backend("tpu")

from . import tpu as _tpu_module  # noqa: E402

torch._register_device_module("tpu", _tpu_module)
from . import _tpu_amp  # noqa: E402

_tpu_module.amp = _tpu_amp
sys.modules["torch.tpu.amp"] = _tpu_amp
torch.utils.generate_methods_for_privateuse1_backend(
    for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=True
)

_PLUGIN = _plugin.find_plugin()
# (read by the plugin when it starts, on first use; part of the compile
# cache's key)
_xla_flags = _plugin.xla_flags(_PLUGIN, os.environ.get("XLA_FLAGS", ""))
if _xla_flags:
    os.environ["XLA_FLAGS"] = _xla_flags
_ops._configure(
    _PLUGIN.path,
    _plugin.cpu_device_count(),
    _plugin.default_cache_dir(),
    _plugin.session_name(),
)

from . import _kernels  # noqa: E402

_kernels.register()
_kernels.register_missing_meta()

from . import api  # noqa: E402,F401
from . import _accelerate, _ctc, _factories, _fastpath, _flex_attention, _jagged, _litert, _quant, _ray, _sparse, compiler, distributed  # noqa: E402

_ctc.register()
_factories.register()
_fastpath.register()
_jagged.register()
_quant.register()
_sparse.register()
compiler.register()
_accelerate.install()
_flex_attention.install()
_litert.install()
_ray.install()
distributed.register()
from . import vllm as _vllm  # noqa: E402  (the vLLM platform plugin; imports no vLLM)

_vllm.install()
# Ctrl-C while the host waits for the device raises KeyboardInterrupt at
# once, from the op that waited (the hook needs Python: it lives in the
# pybind11 module).
try:
    from . import _C_distributed as _py_helpers

    _ops._set_interrupt_hook(_py_helpers._interrupt_hook())
except ImportError:  # built without the module: a wait raises RuntimeError on Ctrl-C
    pass
# torch.profiler's device activity: each program run on a tpu device is a
# kernel span under the op that started it (csrc/aten/profiler.cpp).
if torch.autograd.kineto_available():
    _ops._register_profiler()


def _flush_after_optimizer_step(optimizer, args, kwargs) -> None:
    # Fused eager: one training step becomes one program (forward, backward
    # and update), the same every iteration, so it compiles once. (Under
    # torch.compile the step's graphs are programs already: no graph break.)
    if torch.compiler.is_compiling():
        return
    if _ops._started():
        _ops.flush()


from torch.optim.optimizer import register_optimizer_step_post_hook  # noqa: E402

register_optimizer_step_post_hook(_flush_after_optimizer_step)


def _drain_autograd_device_thread() -> None:
    # Autograd runs a tpu backward on its own device thread, which releases
    # the graph it ran (its thread-local state and the callbacks queued on
    # it hold Python objects) just after backward() returns, and needs the
    # GIL for that. A script that ends right then keeps the GIL through
    # shutdown, and a thread that asks for it once the interpreter is
    # finalizing is stopped in a way that aborts the process (SIGABRT). At
    # exit, give the GIL away for a moment first.
    if _ops._started() and not _ops._in_forked_child():
        import time

        time.sleep(0.02)


import atexit  # noqa: E402

atexit.register(_drain_autograd_device_thread)


def is_available() -> bool:
    """Whether a tpu device can be used (the same as ``torch.tpu.is_available``)."""
    return _tpu_module.is_available()


def device_count() -> int:
    """Number of tpu devices (the same as ``torch.tpu.device_count``)."""
    return _tpu_module.device_count()


def plugin_info() -> dict[str, str]:
    """The PJRT plugin behind the ``tpu`` device (starts the runtime)."""
    path, platform, version, api_version = (str(s) for s in _ops._runtime_info())
    return {
        "path": path,
        "kind": _PLUGIN.kind,
        "platform": platform,
        "platform_version": version,
        "pjrt_api_version": api_version,
    }


def cache_stats() -> dict[str, float]:
    """Statistics of the executable cache shared by all execution modes:
    hits (found in memory), misses (compiled), disk_hits (loaded from the
    persistent cache), entries (in memory), evictions (dropped from memory by
    its size bound), compile_seconds (spent compiling), load_seconds (spent
    loading from disk), preloaded (loaded from disk ahead of use: a process
    that starts like an earlier one loads that one's programs in the
    background), and the cache directory (empty when the persistent cache is
    off)."""
    hits, misses, disk_hits, entries, seconds, evictions, load, preloaded = (
        float(v) for v in _ops.cache_stats())
    return {
        "hits": int(hits),
        "misses": int(misses),
        "disk_hits": int(disk_hits),
        "entries": int(entries),
        "evictions": int(evictions),
        "compile_seconds": seconds,
        "load_seconds": load,
        "preloaded": int(preloaded),
        "dir": str(_ops.cache_dir()),
    }


def counters() -> dict[str, int]:
    """Process-wide counts: programs executed on the device; reads from the
    device to the host (``.item()``, ``.cpu()``, printing, data-dependent
    shapes), each of which waits for the device to finish; op programs built
    by running a lowering, and op calls that reused a program built before
    for the same signature (shapes, dtypes, layouts; see ``set_op_memo``)."""
    built, reused, _ = (int(v) for v in _ops.op_memo_counts())
    return {
        "executions": int(_ops.executions()),
        "host_reads": int(_ops.host_reads()),
        "programs_built": built,
        "programs_reused": reused,
    }


def set_op_memo(enabled: bool) -> None:
    """Reuse each op's program for later calls with the same signature (on by
    default; ``TORCH_TPU_OP_MEMO=0`` turns it off). Off, every op call runs
    its lowering again: slower, for debugging only."""
    _ops.set_op_memo(bool(enabled))


def clear_cache(disk: bool = False) -> int:
    """Drop the in-memory compiled programs and reset the statistics; with
    ``disk=True`` also delete the persistent entries (returns how many)."""
    return int(_ops.clear_cache(bool(disk)))


def set_cpu_fallback(enabled: bool) -> None:
    """Run ops without a tpu lowering on the CPU (off by default; slow)."""
    _ops.set_cpu_fallback(bool(enabled))


def cpu_fallback_enabled() -> bool:
    return bool(_ops.cpu_fallback_enabled())


def cpu_fallback_counts() -> dict[str, int]:
    """How many times each op ran through the CPU fallback."""
    names, counts = _ops.cpu_fallback_counts()
    return dict(zip(names, (int(c) for c in counts)))


def set_execution_mode(mode: str) -> None:
    """``"strict"`` (asynchronous, the default), ``"debug"`` (synchronous) or
    ``"fused"`` (ops are deferred and run together as one program).

    Sets the mode of the calling thread's innermost ``execution_mode`` scope;
    outside every scope, the process default (what threads without a scope
    use; ``TORCH_TPU_DEFER_AND_FUSE=1`` / ``TORCH_TPU_LAUNCH_BLOCKING=1`` set
    its initial value). Leaving fused mode runs what was deferred."""
    _ops.set_execution_mode(mode)


def get_execution_mode() -> str:
    return str(_ops.execution_mode())


def flush() -> None:
    """Fused eager: run the ops deferred so far as one program, without
    waiting for it (reading a value, ``torch.tpu.synchronize()`` and the end
    of every ``optimizer.step()`` do this too)."""
    _ops.flush()


def fused_stats() -> dict[str, int]:
    """Fused eager: programs recorded, fused programs run (flushes), the
    distinct fused programs among them (graphs: each is compiled once, or
    found in the executable cache), and the input buffers they donated
    (a tensor written in place, such as a parameter or an optimizer's state,
    whose old buffer became its new value's: updated without a copy)."""
    recorded, flushes, graphs, donated = (int(v) for v in _ops.fused_stats())
    return {"recorded": recorded, "flushes": flushes, "graphs": graphs, "donated": donated}


def fused_max_ops() -> int:
    """Fused eager: the graph runs once it holds this many ops
    (TORCH_TPU_FUSED_MAX_OPS, default 2000)."""
    return int(_ops.fused_max_ops())


class execution_mode(contextlib.ContextDecorator):
    """Run the block in ``mode`` (``"debug"``, ``"strict"`` or ``"fused"``) on
    the calling thread only; other threads keep their own modes. The block's
    backward passes (autograd runs them on its own threads) follow it too, so
    a fused forward, backward and optimizer step make one program. Leaving a
    fused block runs what it deferred. Usable as a decorator."""

    def __init__(self, mode: str):
        if mode not in ("debug", "strict", "fused"):
            raise RuntimeError(f"tpu: unknown execution mode '{mode}'; expected 'debug', 'strict' or 'fused'")
        self.mode = mode

    def __enter__(self):
        _ops._enter_execution_mode(self.mode)
        return self

    def __exit__(self, *exc):
        _ops._exit_execution_mode()
        return False
