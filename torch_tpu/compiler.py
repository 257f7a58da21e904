"""``torch.compile`` for the ``tpu`` device.

Dynamo captures a graph; AOTAutograd traces its forward and backward to
ATen (PyTorch's Core ATen decompositions apply only to ops that have no tpu
lowering, so fused lowerings such as attention stay whole); each ATen graph
is then replayed through the same lowerings as eager ops, under an executor
of its own that defers every op: one call of a graph is one StableHLO module
and one executable, found again by the graph's structure in the executable
cache shared with eager (memory and disk, so a second process compiles
nothing).

Two ways in:

- ``torch.compile(model, backend="tpu")``;
- ``torch.compile(model)`` with the default backend: a graph whose inputs are
  on ``tpu`` comes here, while graphs of CPU (or CUDA) tensors go to Inductor
  unchanged. (PyTorch's Inductor has a ``tpu`` device of its own that emits
  Pallas kernels for Google's package; graphs of our tensors never reach it.)
  Inductor's ``mode=`` and ``options=`` are accepted and have no effect here
  (one warning).
"""

from __future__ import annotations

import functools
import logging
import threading
import warnings
from typing import Any, Callable

import torch

__all__ = ["backend", "stats", "reset_stats", "recompile_reasons", "CompileError"]

_ops = torch.ops.torch_tpu
_lock = threading.Lock()
_stats = {"graphs": 0, "calls": 0, "recompiles": 0}
_recompiles: list[tuple[str, str]] = []
_log = logging.getLogger("torch_tpu.compile")


class CompileError(RuntimeError):
    """An op of a compiled graph could not be lowered or run; names the op
    and the user's source line."""


def stats() -> dict[str, int]:
    """Graphs handed to the tpu compiler (forward and backward count
    separately: one per Dynamo graph and recompile) and calls of them."""
    with _lock:
        return dict(_stats)


def reset_stats() -> None:
    with _lock:
        for k in _stats:
            _stats[k] = 0
        _recompiles.clear()


def recompile_reasons() -> list[tuple[str, str]]:
    """(function, reason) for each recompile the tpu backend saw: the guard
    that failed, as Dynamo recorded it ("tensor 'x' size mismatch at index
    0. expected 2, actual 3"). Each is also logged to the "torch_tpu.compile"
    logger (INFO)."""
    with _lock:
        return list(_recompiles)


def _note_recompile(gm) -> None:
    """When Dynamo compiles a frame again, say which guard failed."""
    try:
        from torch._dynamo.utils import guard_failures
        from torch._guards import CompileContext

        cid = CompileContext.current_compile_id()
    except Exception:  # noqa: BLE001 (best effort: never fail a compile over a log line)
        return
    if cid is None or not cid.frame_compile_id:
        return
    reason, where = "", getattr(gm, "_torch_tpu_name", None) or type(gm).__name__
    for code, failures in list(guard_failures.items()):
        if failures and str(failures[-1]).startswith(f"{cid.frame_id}/"):
            reason = str(failures[-1]).split(": ", 1)[-1]
            where = f"{code.co_name} ({code.co_filename}:{code.co_firstlineno})"
    with _lock:
        _stats["recompiles"] += 1
        _recompiles.append((where, reason))
    _log.info("torch.compile on tpu: recompiling %s (compile %s): %s", where, cid, reason or "unknown reason")


def _count(key: str) -> None:
    with _lock:
        _stats[key] += 1


# ---- running one ATen graph ---------------------------------------------------------


def _where(node: torch.fx.Node) -> str:
    trace = node.meta.get("stack_trace") or ""
    lines = [ln.strip() for ln in trace.strip().splitlines() if ln.strip()]
    # The last "File ..." line of the trace is the user's source line.
    for i in range(len(lines) - 1, -1, -1):
        if lines[i].startswith("File "):
            code = lines[i + 1] if i + 1 < len(lines) else ""
            return f"{lines[i]}: {code}".rstrip(": ")
    return ""


def _failed_node(gm: torch.fx.GraphModule, tb) -> torch.fx.Node | None:
    """The node whose line of the graph's generated code raised."""
    import linecache

    line = None
    while tb is not None:
        code = tb.tb_frame.f_code
        if code.co_filename.startswith("<eval_with_key>") or "fx_generated" in code.co_filename:
            line = linecache.getline(code.co_filename, tb.tb_lineno)
        tb = tb.tb_next
    if not line or " = " not in line:
        return None
    names = [n.strip() for n in line.split(" = ", 1)[0].split(",")]
    nodes = {n.name: n for n in gm.graph.nodes}
    for name in names:
        if name in nodes:
            return nodes[name]
    return None


def _compile_graph(gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
    """The callable AOTAutograd runs for one ATen graph (boxed: a list of
    arguments)."""
    from torch._functorch.aot_autograd import make_boxed_func

    _count("graphs")

    def run(*args):
        _count("calls")
        # One call = one deferred graph = one program: the scope's executor
        # is this call's own, and leaving it runs what it recorded. The
        # graph's generated code runs the ops (and drops each intermediate
        # after its last use).
        try:
            with _execution_scope():
                return gm(*args)
        except CompileError:
            raise
        except Exception as e:  # noqa: BLE001 (re-raised with the node's context)
            node = _failed_node(gm, e.__traceback__)
            if node is None:
                raise
            where = _where(node)
            msg = (f"torch.compile (tpu backend): {node.target} failed in the compiled graph"
                   + (f", from {where}" if where else "") + f": {e}")
            if isinstance(e, NotImplementedError):
                raise NotImplementedError(msg) from e
            raise CompileError(msg) from e

    return make_boxed_func(run)


class _execution_scope:
    __slots__ = ()

    def __enter__(self):
        _ops._enter_execution_mode("fused")

    def __exit__(self, *exc):
        _ops._exit_execution_mode()
        return False


@functools.lru_cache(maxsize=1)
def _decompositions() -> dict:
    """Core ATen decompositions for the ops without a tpu kernel."""
    from torch._decomp import core_aten_decompositions

    table = {}
    for op, fn in core_aten_decompositions().items():
        name = op.name() if hasattr(op, "name") else str(op)
        if not torch._C._dispatch_has_kernel_for_dispatch_key(name, "PrivateUse1"):
            table[op] = fn
    return table


_warned_options = False
_warned_dynamic = False


def _warn_if_dynamic(example_inputs) -> None:
    """Dynamic shapes (dynamic=True, mark_dynamic, or Dynamo's automatic
    dynamic shapes after a second shape) work, but XLA programs have static
    shapes: each distinct shape a symbolic graph meets compiles a program of
    its own (once; the cache keeps it). Said once, so recompiles are never
    silent."""
    global _warned_dynamic
    if _warned_dynamic:
        return
    symbolic = any(isinstance(x, torch.SymInt) or
                   (isinstance(x, torch.Tensor) and any(isinstance(d, torch.SymInt) for d in x.shape))
                   for x in example_inputs)
    if symbolic:
        _warned_dynamic = True
        warnings.warn("torch.compile on tpu: this graph has dynamic shapes; XLA compiles one program per "
                      "distinct shape it meets (each once, then cached). To bound compilation, pad inputs to a "
                      "few bucket sizes (with masks) or compile with dynamic=False.", stacklevel=2)




def backend(gm: torch.fx.GraphModule, example_inputs: list, **options: Any) -> Callable:
    """The Dynamo backend ``"tpu"``: forward and backward through AOTAutograd,
    each graph replayed through the tpu lowerings as one program."""
    global _warned_options
    _register_device_interface()
    meaningful = {k: v for k, v in options.items() if k not in ("mode", "options") or v}
    if meaningful and not _warned_options:
        _warned_options = True
        warnings.warn(f"torch.compile on tpu: the options {sorted(meaningful)} are Inductor's and have no "
                      "effect with the tpu backend", stacklevel=2)
    _warn_if_dynamic(example_inputs)
    _note_recompile(gm)
    from torch._dynamo.backends.common import aot_autograd

    compiler = aot_autograd(fw_compiler=_compile_graph, bw_compiler=_compile_graph,
                            inference_compiler=_compile_graph, decompositions=_decompositions(),
                            keep_inference_input_mutations=True)
    compiled = compiler(gm, example_inputs)

    @functools.wraps(compiled)
    def run(*args):
        # AOTAutograd's runtime wrapper writes mutated inputs back (an
        # optimizer's parameters and state) after the graph: in the same
        # scope, those copies join the graph's program instead of running as
        # one program each.
        with _execution_scope():
            return compiled(*args)

    return run


# ---- registration ----------------------------------------------------------------------


def _on_tpu(example_inputs) -> bool:
    for x in example_inputs:
        if isinstance(x, torch.Tensor) and x.device.type == "tpu":
            return True
    return False


def _register_backend() -> None:
    """backend="tpu" is found through the package's `torch_dynamo_backends`
    entry point (pyproject.toml) without importing Dynamo at `import
    torch_tpu`; when Dynamo is already loaded it is registered at once."""
    import sys

    if "torch._dynamo" not in sys.modules:
        return
    from torch._dynamo.backends.registry import _BACKENDS, register_backend

    if "tpu" not in _BACKENDS:
        register_backend(name="tpu")(backend)


def _route_default_backend() -> None:
    """torch.compile's default backend (Inductor) hands graphs of tpu tensors
    to ``backend``; every other graph goes to Inductor as before."""
    wrapper = torch._TorchCompileInductorWrapper
    if getattr(wrapper.__call__, "_torch_tpu_routed", False):
        return
    inductor_call = wrapper.__call__

    @functools.wraps(inductor_call)
    def __call__(self, model_, inputs_, *args, **kwargs):
        if _on_tpu(inputs_):
            return backend(model_, inputs_, options=self.config)
        return inductor_call(self, model_, inputs_, *args, **kwargs)

    __call__._torch_tpu_routed = True
    wrapper.__call__ = __call__


@functools.lru_cache(maxsize=1)
def _register_device_interface() -> None:
    from torch._dynamo import device_interface as di

    class TpuInterface(di.DeviceInterface):
        class device:  # noqa: N801 (the interface's spelling)
            def __new__(cls, device):
                return torch.tpu.device(device)

        Event = torch.Event
        Stream = torch.Stream

        class Worker:
            @staticmethod
            def set_device(device: int):
                torch.tpu.set_device(device)

            @staticmethod
            def current_device() -> int:
                return torch.tpu.current_device()

            @staticmethod
            def get_device_properties(device=None):
                return torch.tpu.get_device_properties(device)

        current_device = staticmethod(lambda: torch.tpu.current_device())
        set_device = staticmethod(lambda device: torch.tpu.set_device(device))
        device_count = staticmethod(lambda: torch.tpu.device_count())
        is_available = staticmethod(lambda: torch.tpu.is_available())
        synchronize = staticmethod(lambda device=None: torch.tpu.synchronize(device))
        get_device_properties = staticmethod(lambda device=None: torch.tpu.get_device_properties(device))
        is_bf16_supported = staticmethod(lambda including_emulation=False: True)
        get_compute_capability = staticmethod(lambda device=None: "")

        @classmethod
        def is_dtype_supported(cls, dtype, including_emulation=False) -> bool:
            return True

    di.get_registered_device_interfaces()  # PyTorch's own table first: ours replaces its "tpu" entry
    di.register_interface_for_device("tpu", TpuInterface)
    for i in range(torch.tpu.device_count()):
        di.register_interface_for_device(f"tpu:{i}", TpuInterface)


def register() -> None:
    _register_backend()
    _route_default_backend()
