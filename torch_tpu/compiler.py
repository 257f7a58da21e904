"""``torch.compile`` for the ``tpu`` device.

Dynamo captures a graph; AOTAutograd traces its forward and backward to
ATen (PyTorch's Core ATen decompositions apply only to ops that have no tpu
lowering, so fused lowerings such as attention stay whole). The first call
of each ATen graph (per input signature) runs its ops through the same
lowerings as eager ops under a capture executor: they become one function,
kept with how to bind its operands again (csrc/aten/graph_replay.cpp).
Later calls run the graph's host part (CPU scalars such as an optimizer's
step counts), bind the new inputs and record that one function into the
calling scope's program: one call of a graph is one StableHLO module and
one executable, found again by the graph's structure in the executable
cache shared with eager (memory and disk, so a second process compiles
nothing). A graph that cannot be bound again exactly runs its ops each call.

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
import os
import threading
import warnings
from typing import Any, Callable

import torch

__all__ = ["backend", "stats", "reset_stats", "recompile_reasons", "CompileError", "config", "bucket",
           "pad_to_bucket"]

_ops = torch.ops.torch_tpu
_lock = threading.Lock()
_stats = {"graphs": 0, "calls": 0, "recompiles": 0, "captures": 0, "replays": 0, "op_runs": 0}
_recompiles: list[tuple[str, str]] = []
_log = logging.getLogger("torch_tpu.compile")


class CompileError(RuntimeError):
    """An op of a compiled graph could not be lowered or run (names the op
    and the user's source line), or a graph met more shapes than
    ``config.max_shapes``."""


class config:  # noqa: N801 (a namespace of settings, like torch._dynamo.config)
    """Settings of the tpu backend.

    ``max_shapes``: how many distinct input shapes one graph with dynamic
    dimensions may meet. XLA programs have static shapes, so each shape
    compiles a program of its own (once: the cache keeps it); past the bound
    the call raises ``CompileError`` naming the fix (pad to a few buckets,
    a static KV cache) instead of compiling one program per length forever.
    0: no bound. Default 32, or ``TORCH_TPU_COMPILE_MAX_SHAPES``.
    """

    max_shapes = int(os.environ.get("TORCH_TPU_COMPILE_MAX_SHAPES", "32"))


def bucket(n: int, buckets=None) -> int:
    """The smallest of ``buckets`` (ascending; default: powers of two from
    16) that holds ``n``."""
    if buckets is None:
        b = 16
        while b < n:
            b *= 2
        return b
    for b in sorted(buckets):
        if b >= n:
            return b
    raise ValueError(f"bucket: {n} is larger than the largest bucket {max(buckets)}")


def pad_to_bucket(x: torch.Tensor, dim: int, buckets=None, value=0):
    """``x`` padded with ``value`` along ``dim`` to its bucket (see
    ``bucket``), and the unpadded length: a compiled graph then meets a few
    shapes instead of one per length. Mask the padding where it matters
    (attention masks, loss ignore_index)."""
    n = x.shape[dim]
    size = bucket(n, buckets)
    if size == n:
        return x, n
    shape = list(x.shape)
    shape[dim] = size - n
    return torch.cat([x, x.new_full(shape, value)], dim), n


def stats() -> dict[str, int]:
    """Graphs handed to the tpu compiler (forward and backward count
    separately: one per Dynamo graph and recompile) and calls of them; of
    the calls, how many captured their graph (the first with a signature),
    replayed a capture (no op dispatched) or ran its ops (a graph or
    signature that cannot be replayed)."""
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


def _graph_error(gm: torch.fx.GraphModule, e: BaseException, node: torch.fx.Node | None = None):
    """`e` raised by an op of `gm`, as an error naming the op and the user's
    source line (None when the failing node is unknown)."""
    if isinstance(e, CompileError):
        return None
    node = node if node is not None else _failed_node(gm, e.__traceback__)
    if node is None:
        return None
    where = _where(node)
    msg = (f"torch.compile (tpu backend): {node.target} failed in the compiled graph"
           + (f", from {where}" if where else "") + f": {e}")
    return NotImplementedError(msg) if isinstance(e, NotImplementedError) else CompileError(msg)


_SYM_OPS = frozenset(
    getattr(torch.ops.aten, name).int if hasattr(getattr(torch.ops.aten, name), "int")
    else getattr(torch.ops.aten, name).default
    for name in ("sym_size", "sym_stride", "sym_numel", "sym_storage_offset"))


def _placeholder_symbols(gm: torch.fx.GraphModule) -> dict:
    """Where each size symbol of the graph's inputs is bound: symbol ->
    (placeholder, dim), or (placeholder, None) for a SymInt input."""
    out = {}
    for n in gm.graph.nodes:
        if n.op != "placeholder":
            continue
        v = n.meta.get("val")
        dims = [(None, v)] if isinstance(v, torch.SymInt) else (
            list(enumerate(v.shape)) if isinstance(v, torch.Tensor) else [])
        for d, size in dims:
            if isinstance(size, torch.SymInt) and size.node.expr.is_Symbol:
                out.setdefault(size.node.expr, (n, d))
    return out


class _SizeOf:
    """A size of an intermediate tensor, from the sizes of the graph's
    inputs that its symbolic expression names (a replay runs no device op,
    and the inputs' shapes fix every other shape)."""

    __name__ = "size_of"  # (FX names call targets by it)

    def __init__(self, expr, symbols):
        self.expr, self.symbols, self.memo = expr, symbols, {}

    @staticmethod
    def evaluates(size: torch.SymInt, symbols) -> bool:
        """Whether the expression of ``size`` gives its traced value from its
        symbols' traced values (else the graph has no plan: its ops run)."""
        try:
            node = size.node
            values = [int(node.shape_env.var_to_val[s]) for s in symbols]
            return node.hint is not None and _SizeOf(node.expr, symbols)(*values) == int(node.hint)
        except Exception:  # noqa: BLE001 (an expression sympy cannot evaluate to an integer)
            return False

    def __call__(self, *values):
        v = self.memo.get(values)
        if v is None:
            import sympy

            v = self.memo[values] = int(self.expr.xreplace(dict(zip(self.symbols, map(sympy.Integer, values)))))
        return v


def _symbolic(v) -> bool:
    if isinstance(v, (torch.SymInt, torch.SymFloat)):
        return True
    return isinstance(v, torch.Tensor) and any(isinstance(d, torch.SymInt) for d in v.shape)


def _on_device(v) -> bool:
    if isinstance(v, torch.Tensor):
        return v.device.type == "tpu"
    if isinstance(v, (list, tuple)):
        return any(_on_device(x) for x in v)
    return False


# Ops that talk to a process group (functional collectives in graphs of
# DTensor, tensor parallel and compiled FSDP): their graphs run their ops
# each call.
_COLLECTIVE_NAMESPACES = ("_c10d_functional", "c10d_functional", "_dtensor", "c10d")


@functools.lru_cache(maxsize=1)
def _rng_state_hops() -> tuple:
    """The higher-order ops AOTAutograd puts around a random op it will
    recompute in the backward (activation checkpointing with dropout): the
    forward saves the generator's state, the backward runs the op again
    from it."""
    from torch._prims.rng_prims import run_and_save_rng_state, run_with_rng_state

    return (run_and_save_rng_state, run_with_rng_state)


def _teach_rng_state_hops(module) -> None:
    """PyTorch implements the two ops for a fixed list of devices (a table
    inside their BackendSelect kernels: cuda, cpu, hpu, xpu) and raises for
    any other. For tpu inputs they save and restore the tpu generator's
    state, as torch.utils.checkpoint does in eager; every other device keeps
    PyTorch's kernel. Graphs holding them are never replayed (a replay runs
    no Python, and would draw fresh random numbers where the recomputation
    must draw the forward's): they run their ops each call."""
    from torch._C import DispatchKey

    # (hop, its tpu kernel, how many arguments precede the op's own)
    for hop, tpu_kernel, lead in ((module.run_and_save_rng_state, _run_and_save_rng_state, 1),
                                  (module.run_with_rng_state, _run_with_rng_state, 2)):
        original = hop.py_kernels.get(DispatchKey.BackendSelect)
        if original is None or getattr(original, "_torch_tpu", False):
            continue
        hop.py_kernels[DispatchKey.BackendSelect] = _tpu_or(original, tpu_kernel, lead, module.get_device)
        hop._dispatch_cache.clear()


def _tpu_or(original, tpu_kernel, lead, get_device):
    """A kernel that runs ``tpu_kernel`` when the op's tensors are on tpu
    and ``original`` otherwise."""
    def kernel(*args, **kwargs):
        if get_device(args[lead:], kwargs) == "tpu":
            return tpu_kernel(*args, **kwargs)
        return original(*args, **kwargs)

    kernel._torch_tpu = True
    return kernel


def _run_and_save_rng_state(op, *args, **kwargs):
    return torch.tpu.get_rng_state(), op(*args, **kwargs)


def _run_with_rng_state(rng_state, op, *args, **kwargs):
    current = torch.tpu.get_rng_state()
    torch.tpu.set_rng_state(rng_state.cpu())
    try:
        return op(*args, **kwargs)
    finally:
        torch.tpu.set_rng_state(current)


def _replay_bindable(v) -> bool:
    """A graph input a replay can bind: a tensor, a number or nothing."""
    if v is None or isinstance(v, (torch.Tensor, int, float, bool, torch.SymInt, torch.SymFloat, torch.SymBool)):
        return True
    if isinstance(v, (list, tuple)):
        return all(_replay_bindable(x) for x in v)
    return False


class _HostPlan:
    """What of an ATen graph runs on the host at a replay: the nodes that
    compute on CPU tensors and numbers (an optimizer's step counts, say),
    as a graph of their own that also reads, right after each is made, the
    CPU scalars the device ops use."""

    def __init__(self, gm, host, referenced, host_outputs, output_nodes, sizes):
        self.referenced = referenced  # host nodes whose scalars device ops read
        self.host_outputs = host_outputs  # output position -> index among the host outputs
        runs = [n for n in gm.graph.nodes if n in host and n.op != "placeholder"]
        self.gm = self._build(gm, runs, referenced, output_nodes, sizes) if runs or referenced else None

    @staticmethod
    def make(gm: torch.fx.GraphModule):
        """The plan, or None when the graph's host part reads device data."""
        host, device = set(), set()
        # sizes: a device tensor's size node -> (its expression or value, the
        # expression's symbols, the input and dim each is read from)
        symbols, sizes = None, {}
        for n in gm.graph.nodes:
            if n.op == "output":
                continue
            if n.op in ("placeholder", "get_attr"):
                val = n.meta.get("val") if n.op == "placeholder" else getattr(gm, n.target, None)
                if n.op == "placeholder" and not _replay_bindable(val):
                    return None  # an object (a DeviceMesh, a process group): nothing a replay binds
                (device if _on_device(val) else host).add(n)
                continue
            if isinstance(n.target, torch._ops.OpOverload) and n.target.namespace in _COLLECTIVE_NAMESPACES:
                return None  # a replay runs no Python: every call must reach the process group
            if n.target in _rng_state_hops():
                return None  # (see _teach_rng_state_hops)
            if n.target in (torch.ops.aten._local_scalar_dense.default, torch.ops.aten.item.default):
                return None  # a number made from data would become a constant
            inputs = n.all_input_nodes
            if _on_device(n.meta.get("val")):
                device.add(n)
            elif n.target in _SYM_OPS and all(i.op == "placeholder" or i in host for i in inputs):
                host.add(n)  # shapes are part of the replay's signature
            elif n.target in _SYM_OPS and isinstance(n.meta.get("val"), (int, torch.SymInt)):
                # An intermediate's size: a function of the inputs' sizes, or
                # (a size that depends on data) no plan.
                v = n.meta["val"]
                if isinstance(v, torch.SymInt):
                    symbols = _placeholder_symbols(gm) if symbols is None else symbols
                    free = sorted(v.node.expr.free_symbols, key=str)
                    if not (set(free) <= symbols.keys() and _SizeOf.evaluates(v, free)):
                        return None
                    sizes[n] = (v.node.expr, free, [symbols[f] for f in free])
                else:
                    sizes[n] = (v, [], [])
                host.add(n)
            elif any(i in device for i in inputs):
                return None  # the host would wait for device data
            else:
                host.add(n)
        referenced = []
        for n in gm.graph.nodes:
            val = n.meta.get("val") if n.op != "get_attr" else getattr(gm, n.target, None)
            if n in host and isinstance(val, torch.Tensor) and val.dim() == 0 and any(u in device for u in n.users):
                referenced.append(n)
        out = next(n for n in gm.graph.nodes if n.op == "output")
        host_outputs, order = {}, []
        for i, o in enumerate(out.args[0]):
            if isinstance(o, torch.fx.Node) and o in host and o.op != "placeholder":
                host_outputs[i] = len(order)
                order.append(o)
        return _HostPlan(gm, host, referenced, host_outputs, order, sizes)

    @staticmethod
    def _build(gm, runs, referenced, host_output_nodes, sizes):
        g = torch.fx.Graph()
        env, numbers = {}, []
        runs, wanted = set(runs), set(referenced)
        for n in gm.graph.nodes:
            if n.op == "placeholder":
                env[n] = g.placeholder(n.name)
            elif n in sizes:
                expr, free, where = sizes[n]
                if not free:
                    env[n] = int(expr)
                    continue
                args = tuple(env[p] if d is None else g.call_function(torch.ops.aten.sym_size.int, (env[p], d))
                             for p, d in where)
                env[n] = g.call_function(_SizeOf(expr, free), args)
            elif n in runs:
                env[n] = g.node_copy(n, lambda x: env[x])
            if n in wanted:
                numbers.append(g.call_method("item", (env[n],)))
        g.output((numbers, [env[n] for n in host_output_nodes]))
        return torch.fx.GraphModule(gm, g)


class _Graph:
    """One ATen graph handed to the tpu compiler.

    Its first call with a given signature runs its ops under a capture
    executor (csrc/aten/graph_replay.cpp): they become one function,
    recorded into the calling scope's program, and kept with how to bind it
    again. Later calls with that signature bind the new inputs and record
    the one function, without running the ops through the dispatcher. A
    graph or signature that cannot be replayed exactly runs its ops each
    call (still one program)."""

    def __init__(self, gm: torch.fx.GraphModule):
        import weakref

        self.gm = gm
        self.handle = _ops._graph_new()
        weakref.finalize(self, _ops._graph_release, self.handle)
        self.plan = _HostPlan.make(gm)
        self.outputs: dict[int, list] = {}  # entry -> how to assemble the outputs
        self.constants = [getattr(gm, n.target) for n in gm.graph.nodes
                          if n.op == "get_attr" and isinstance(getattr(gm, n.target, None), torch.Tensor)]
        self.symbolic = any(_symbolic(n.meta.get("val")) for n in gm.graph.nodes if n.op == "placeholder")
        self.shapes: set = set()

    def __call__(self, *args):
        _count("calls")
        with _execution_scope():
            if self.plan is not None and _replay_enabled:
                entry = _ops._graph_lookup(self.handle, list(args))
                if entry >= 0:
                    _count("replays")
                    return self._replay(entry, args)
                if entry == -1:
                    self._check_shapes(args)
                    _count("captures")
                    return self._capture(args)
            self._check_shapes(args)
            _count("op_runs")
            return self._run(args)

    def _check_shapes(self, args):
        """A graph with dynamic dimensions compiles a program per shape:
        bounded by config.max_shapes, past which it says what to do."""
        if not self.symbolic or _recording.bucketed:
            return
        shape = tuple(tuple(a.shape) if isinstance(a, torch.Tensor) else None for a in args)
        if shape in self.shapes:
            return
        bound = config.max_shapes
        if bound and len(self.shapes) >= bound:
            raise CompileError(
                f"torch.compile (tpu backend): a graph with dynamic dimensions met its {bound + 1}th distinct "
                f"input shape; XLA programs have static shapes, so each shape compiles a program of its own. "
                f"Pad inputs to a few sizes (torch_tpu.compiler.pad_to_bucket(x, dim), masking the padding), "
                f"use a static KV cache for generation (cache_implementation='static'), mark the dimension "
                f"static (dynamic=False), or raise the bound (torch_tpu.compiler.config.max_shapes, "
                f"TORCH_TPU_COMPILE_MAX_SHAPES; 0: none)")
        self.shapes.add(shape)

    def _run(self, args):
        try:
            return self.gm(*args)
        except Exception as e:  # noqa: BLE001 (re-raised with the node's context)
            err = _graph_error(self.gm, e)
            if err is None:
                raise
            raise err from e

    def _replay(self, entry, args):
        plan = self.plan
        numbers, host_outs = plan.gm(*args) if plan.gm is not None else ((), ())
        tensors = _ops._graph_replay(self.handle, entry, list(args), list(numbers))
        out = []
        for kind, v in self.outputs[entry]:
            out.append(tensors[v] if kind == "tpu" else host_outs[v] if kind == "host" else
                       args[v] if kind == "arg" else out[v] if kind == "same" else v)
        return out

    def _capture(self, args):
        plan = self.plan
        keep = {}

        gm = self.gm
        referenced = set(plan.referenced)

        class Capture(torch.fx.Interpreter):
            def run_node(self, n):
                try:
                    r = super().run_node(n)
                except Exception as e:  # noqa: BLE001
                    err = _graph_error(gm, e, n)
                    if err is None:
                        raise
                    raise err from e
                if n in referenced:
                    keep[n] = r
                return r

        _ops._graph_capture_begin(self.handle, list(args))
        try:
            interp = Capture(gm)
            outs = interp.run(*args)
            interp.env.clear()
        except BaseException:
            _ops._graph_capture_abort()
            raise
        host = [keep[n]._cdata if n in keep else 0 for n in plan.referenced]
        spec, tensors = self._output_spec(outs, args)
        # (Outputs that cannot be described still get this call's values.)
        entry, why = _ops._graph_capture_end(self.handle, list(args), tensors, host, self.constants,
                                             spec is not None)
        if spec is None:
            why = "an output is neither a tpu tensor nor a host value"
        if entry >= 0:
            self.outputs[entry] = spec
        else:
            _log.debug("torch.compile on tpu: %s is not replayed (it runs its ops each call): %s",
                       getattr(gm, "_torch_tpu_name", "a graph"), why)
        return outs

    def _output_spec(self, outs, args):
        spec, tensors = [], []
        ids = {}
        arg_ids = {id(a): i for i, a in enumerate(args) if isinstance(a, torch.Tensor)}
        for i, o in enumerate(outs):
            if i in self.plan.host_outputs:
                spec.append(("host", self.plan.host_outputs[i]))
            elif isinstance(o, torch.Tensor) and id(o) in arg_ids:
                spec.append(("arg", arg_ids[id(o)]))  # an input returned as it is
            elif isinstance(o, torch.Tensor) and o.device.type == "tpu":
                if id(o) in ids:
                    spec.append(("same", ids[id(o)]))
                else:
                    ids[id(o)] = i
                    spec.append(("tpu", len(tensors)))
                    tensors.append(o)
            elif o is None or isinstance(o, (int, float, bool)):
                spec.append(("const", o))
            else:
                return None, []
        return spec, tensors


_replay_enabled = True


class _Recording(threading.local):
    bucketed: bool = False  # inside _bucketed_shapes


_recording = _Recording()


class _bucketed_shapes:
    """Inside, graphs with dynamic dimensions are the caller's to bound: it
    calls them with a fixed set of bucket shapes, all compiled at its start
    (vLLM's model runner on tpu). Their shapes neither warn nor count against
    ``config.max_shapes``."""

    __slots__ = ("was",)

    def __enter__(self):
        self.was, _recording.bucketed = _recording.bucketed, True

    def __exit__(self, *exc):
        _recording.bucketed = self.was
        return False


def _compile_graph(gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
    """The callable AOTAutograd runs for one ATen graph (boxed: a list of
    arguments)."""
    from ._graph_code import GraphCode

    _count("graphs")
    return GraphCode(_Graph(_inline_dense_hops(gm, example_inputs)))


@functools.lru_cache(maxsize=1)
def _dense_hops() -> tuple:
    """Higher-order ops that Inductor lowers to kernels of its own and that
    reach this backend whole, with a dense implementation in ATen ops."""
    from torch._higher_order_ops.flex_attention import flex_attention, flex_attention_backward

    return (flex_attention, flex_attention_backward)


def _inline_dense_hops(gm: torch.fx.GraphModule, example_inputs: list) -> torch.fx.GraphModule:
    """The graph with FlexAttention's higher-order ops (forward and backward)
    traced into the ATen ops of their dense implementation.

    Run as they are, those ops execute Python (vmapped score and mask
    functions) that uploads constants (``torch.tensor(-inf)``) on every
    call, so the graph could never be replayed: each call dispatched every
    op again, and the first two calls compiled two different programs.
    Traced here, the constants are the graph's own and it replays like any
    other. A graph that cannot be traced this way is left as it is (it runs
    its ops each call, as before)."""
    hops = _dense_hops()
    if not any(n.op == "call_function" and n.target in hops for n in gm.graph.nodes):
        return gm
    import contextlib

    from torch._C import DispatchKey
    from torch._dispatch.python import enable_python_dispatcher
    from torch._guards import detect_fake_mode
    from torch.fx.experimental.proxy_tensor import make_fx

    class Inline(torch.fx.Interpreter):
        def run_node(self, n):
            if n.op != "call_function" or n.target not in hops:
                return super().run_node(n)
            args, kwargs = self.fetch_args_kwargs_from_env(n)
            dense = n.target.py_kernels[DispatchKey.CompositeExplicitAutograd]
            if n.target is hops[1]:
                # The dense backward computes a captured buffer's gradient
                # only for buffers that require grad, which a backward
                # graph's inputs never do: the traced op says which have one.
                wanted = [g is not None for g in n.meta["val"][3]]
                buffers = list(args[12])
                for i, (b, w) in enumerate(zip(buffers, wanted)):
                    if w and isinstance(b, torch.Tensor) and not b.requires_grad:
                        buffers[i] = b.detach().requires_grad_()
                args = (*args[:12], tuple(buffers), *args[13:])
                with torch.enable_grad():
                    return dense(*args, **kwargs)
            return dense(*args, **kwargs)

    fake = detect_fake_mode(example_inputs)
    try:
        with enable_python_dispatcher(), torch.fx.traceback.preserve_node_meta(), \
                fake if fake is not None else contextlib.nullcontext():
            traced = make_fx(lambda *a: Inline(gm).run(*a), decomposition_table=_decompositions(),
                             tracing_mode="real" if fake is not None else "fake")(*example_inputs)
    except Exception as e:  # noqa: BLE001 (the graph still runs, op by op)
        _log.debug("torch.compile on tpu: a higher-order op stays whole (its graph is not replayed): %s", e)
        return gm
    return _constants_on_device(traced)


def _constants_on_device(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """The graph with each tensor constant that it copies to a tpu device
    (``_to_copy(lift_fresh_copy(constant), device=tpu)``) made a constant
    on that device, once.

    torch 2.11's make_fx traces the dense FlexAttention's
    ``torch.tensor(-inf, device=scores.device)`` so (2.13's keeps the CPU
    scalar): an upload at every call, which a replay cannot repeat. Graphs
    without that pattern are returned as they are."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    changed = False
    for n in list(gm.graph.nodes):
        if n.op != "call_function" or n.target is not torch.ops.aten._to_copy.default:
            continue
        if len(n.args) != 1 or set(n.kwargs) != {"device"} or torch.device(n.kwargs["device"]).type != "tpu":
            continue
        lift = n.args[0]
        if not (isinstance(lift, torch.fx.Node) and lift.target is torch.ops.aten.lift_fresh_copy.default
                and len(lift.users) == 1):
            continue
        const = lift.args[0]
        if not (isinstance(const, torch.fx.Node) and const.op == "get_attr" and len(const.users) == 1):
            continue
        value = getattr(gm, const.target, None)
        if not isinstance(value, torch.Tensor) or value.device.type != "cpu" or value.requires_grad:
            continue
        with unset_fake_temporarily():
            setattr(gm, const.target, value.to(n.kwargs["device"]))
        lift.meta = dict(lift.meta, val=n.meta.get("val"))
        n.replace_all_uses_with(lift)
        gm.graph.erase_node(n)
        changed = True
    if changed:
        gm.graph.lint()
        gm.recompile()
    return gm


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
    if _warned_dynamic or _recording.bucketed:
        return
    symbolic = any(isinstance(x, torch.SymInt) or
                   (isinstance(x, torch.Tensor) and any(isinstance(d, torch.SymInt) for d in x.shape))
                   for x in example_inputs)
    if symbolic:
        _warned_dynamic = True
        warnings.warn("torch.compile on tpu: this graph has dynamic shapes; XLA compiles one program per "
                      "distinct shape it meets (each once, then cached), up to torch_tpu.compiler.config."
                      "max_shapes. To bound compilation, pad inputs to a few bucket sizes "
                      "(torch_tpu.compiler.pad_to_bucket, with masks) or compile with dynamic=False.", stacklevel=2)




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
    from ._graph_code import CompiledFunction

    return CompiledFunction(compiler(gm, example_inputs))


# ---- registration ----------------------------------------------------------------------


def _on_tpu(gm: torch.fx.GraphModule, example_inputs) -> bool:
    """Whether the graph computes on the tpu device: an input is a tpu
    tensor, or (a graph with no tensor input, such as
    ``create_block_mask(..., device="tpu")``) a value it makes is."""
    for x in example_inputs:
        if isinstance(x, torch.Tensor) and x.device.type == "tpu":
            return True
    for n in gm.graph.nodes:
        v = n.meta.get("example_value", n.meta.get("val"))
        for t in v if isinstance(v, (tuple, list)) else (v,):
            if isinstance(t, torch.Tensor) and t.device.type == "tpu":
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
        if _on_tpu(model_, inputs_):
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
    from ._after_import import after_import

    _register_backend()
    _route_default_backend()
    after_import("torch._prims.rng_prims", _teach_rng_state_hops)
