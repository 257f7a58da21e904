"""JAX and Pallas kernels as PyTorch ops on tpu.

    import torch, torch_tpu.pallas as tp

    def rms(x, w):                       # a JAX function
        return x * jax.lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + 1e-6) * w

    rms_op = tp.jax_op("mylib::rms", rms)          # a torch.library custom op
    y = rms_op(x, w)                               # x, w: tpu tensors
    rms_fn = tp.custom_jax_kernel(rms)             # or a plain callable
    add = tp.custom_kernel([spec], pallas_kernel)  # a Pallas kernel

No data crosses between JAX and PyTorch, and JAX runs nothing: a function
is traced and exported to StableHLO once per input signature (shapes,
dtypes, static arguments), and its functions are imported into the
program of the op that calls it (csrc/lowering/imported.cpp). So the call
runs in strict eager, fuses with its neighbours in fused eager and sits
inside compiled graphs. The backward is JAX's vjp of the function, exported
the same way. Pallas kernels run through Pallas's interpret mode (plain
StableHLO) on the CPU plugin, as their Mosaic (TPU) or Triton (GPU) calls
elsewhere.
"""

from __future__ import annotations

import functools
import inspect
import re
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch

__all__ = ["custom_jax_kernel", "custom_kernel", "jax_op", "trace_count"]

_ops = torch.ops.torch_tpu
_lock = threading.Lock()
_traces = 0

_TORCH_TO_JAX = {
    torch.float32: "float32",
    torch.float64: "float64",
    torch.float16: "float16",
    torch.bfloat16: "bfloat16",
    torch.int64: "int64",
    torch.int32: "int32",
    torch.int16: "int16",
    torch.int8: "int8",
    torch.uint8: "uint8",
    torch.bool: "bool",
    torch.complex64: "complex64",
    torch.float8_e4m3fn: "float8_e4m3fn",
    torch.float8_e5m2: "float8_e5m2",
    torch.float8_e4m3fnuz: "float8_e4m3fnuz",
    torch.float8_e5m2fnuz: "float8_e5m2fnuz",
}
_JAX_TO_TORCH = {v: k for k, v in _TORCH_TO_JAX.items()}


def trace_count() -> int:
    """How many times a JAX function was traced and exported (one per new
    input signature of each kernel)."""
    return _traces


def _jax():
    try:
        import jax  # noqa: F401
        from jax import export  # noqa: F401
    except ImportError as e:
        raise ImportError(
            "torch_tpu.pallas needs JAX to trace and export kernels: pip install 'jax[cpu]' "
            "(JAX only traces here; the kernels run on the tpu device)"
        ) from e
    return jax


def _platform() -> str:
    """The platform the loaded PJRT plugin runs, as JAX names it."""
    name = _ops._runtime_info()[1].lower()
    return {"gpu": "cuda"}.get(name, name)


def _jax_dtype(dtype: torch.dtype, what: str):
    import jax.numpy as jnp

    if dtype not in _TORCH_TO_JAX:
        raise TypeError(f"{what}: JAX kernels take {sorted(str(d) for d in _TORCH_TO_JAX)}, not {dtype}")
    return jnp.dtype(_TORCH_TO_JAX[dtype])


def _torch_dtype(dtype, what: str) -> torch.dtype:
    name = str(dtype)
    if name not in _JAX_TO_TORCH:
        raise TypeError(f"{what}: the JAX function returns {name}, which tpu tensors do not have")
    return _JAX_TO_TORCH[name]


_SYMBOL = re.compile(r"func\.func (?:public |private )?@([\w$.]+)")


def _functions_text(exported) -> str:
    """The exported module's functions, its symbols spelled @__IMPORT__name
    (the program that imports them gives them its own prefix)."""
    from jax._src.interpreters import mlir as jmlir
    from jax._src.lib.mlir import ir

    module = ir.Module.parse(exported.mlir_module(), context=jmlir.make_ir_context())
    text = module.operation.get_asm(enable_debug_info=False)
    # Keep what is inside `module @name attributes {...} {` ... `}`.
    lines = text.strip().splitlines()
    if not (lines[0].startswith("module") and lines[-1].strip() == "}"):
        raise RuntimeError(f"torch_tpu.pallas: unexpected exported module text: {lines[0]!r}")
    body = "\n".join(lines[1:-1]) + "\n"
    # The result names JAX attaches mean nothing to our programs.
    body = re.sub(r"\s*\{jax\.result_info = \"[^\"]*\"\}", "", body)
    names = set(_SYMBOL.findall(body))
    body = body.replace("func.func public @", "func.func private @")
    for name in sorted(names, key=len, reverse=True):
        body = re.sub(r"@" + re.escape(name) + r"\b", "@__IMPORT__" + name, body)
    return body


@dataclass
class _Export:
    """One input signature of a kernel, exported: the forward and, made on
    first use, the backward (JAX's vjp)."""

    name: str
    kernel: int
    kept: list[int]  # the tensor arguments the exported function uses
    out_tree: Any
    out_specs: list[tuple[tuple[int, ...], torch.dtype]]
    in_specs: list[tuple[tuple[int, ...], torch.dtype]]
    fn: Callable
    structure: str = "tree"  # how outputs come back: "leaf", "tuple", "list" or a JAX "tree"
    vjp: "_Export | None" = None
    diff: list[int] = field(default_factory=list)  # the float inputs the backward differentiates


def _register(name: str, exported, in_specs, out_specs) -> int:
    kept = sorted(exported.module_kept_var_idx)
    ins = [in_specs[i] for i in kept]
    flat = lambda specs: [d for s, _ in specs for d in s]  # noqa: E731
    return _ops._jax_register(
        name, _functions_text(exported), "main",
        [len(s) for s, _ in ins], flat(ins), [int(_dtype_index(d)) for _, d in ins],
        [len(s) for s, _ in out_specs], flat(out_specs), [int(_dtype_index(d)) for _, d in out_specs],
    )


def _dtype_index(dtype: torch.dtype) -> int:
    # c10::ScalarType's number for the dtype.
    return {
        torch.uint8: 0, torch.int8: 1, torch.int16: 2, torch.int32: 3, torch.int64: 4, torch.float16: 5,
        torch.float32: 6, torch.float64: 7, torch.complex64: 9, torch.bool: 11, torch.bfloat16: 15,
        torch.float8_e5m2: 23, torch.float8_e4m3fn: 24, torch.float8_e5m2fnuz: 25, torch.float8_e4m3fnuz: 26,
    }[dtype]


def _export(fn: Callable, name: str, in_specs) -> _Export:
    global _traces
    jax = _jax()
    from jax import export

    specs = [jax.ShapeDtypeStruct(s, _jax_dtype(d, name)) for s, d in in_specs]
    try:
        with jax.enable_x64(True):  # int64 and float64 tensors keep their types
            exported = export.export(jax.jit(fn), platforms=[_platform()])(*specs)
    except Exception as e:
        sig = ", ".join(f"{d}{list(s)}" for s, d in in_specs)
        raise RuntimeError(f"{name}: JAX could not trace the function for ({sig}): {type(e).__name__}: {e}") from e
    _traces += 1
    out_specs = [(tuple(a.shape), _torch_dtype(a.dtype, name)) for a in exported.out_avals]
    kernel = _register(name, exported, in_specs, out_specs)
    tree, n = jax.tree_util, len(out_specs)
    structure = ("leaf" if exported.out_tree == tree.tree_structure(0)
                 else "tuple" if exported.out_tree == tree.tree_structure((0,) * n)
                 else "list" if exported.out_tree == tree.tree_structure([0] * n) else "tree")
    return _Export(name, kernel, sorted(exported.module_kept_var_idx), exported.out_tree, out_specs,
                   list(in_specs), fn, structure)


def _restructure(structure: str, out_tree, outs: list):
    # Plain Python for the common structures, so torch.compile traces it.
    if structure == "leaf":
        return outs[0]
    if structure == "tuple":
        return tuple(outs)
    if structure == "list":
        return list(outs)
    import jax

    return jax.tree_util.tree_unflatten(out_tree, outs)


def _run(e: _Export, tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    return list(_ops._jax_call([tensors[i] for i in e.kept], e.kernel))


def _vjp_of(e: _Export) -> _Export:
    """The backward of `e`: (primals..., cotangents...) -> gradients of its
    float inputs."""
    with _lock:
        if e.vjp is None:
            jax = _jax()
            diff = [i for i, (_, d) in enumerate(e.in_specs) if d.is_floating_point or d.is_complex]
            n = len(e.in_specs)

            def backward(*args):
                primals, cts = list(args[:n]), args[n:]

                def f(*d):
                    full = list(primals)
                    for i, v in zip(diff, d):
                        full[i] = v
                    return jax.tree_util.tree_leaves(e.fn(*full))

                _, pullback = jax.vjp(f, *[primals[i] for i in diff])
                return pullback(list(cts))

            e.diff = diff
            e.vjp = _export(backward, e.name + " (backward)", e.in_specs + e.out_specs)
        return e.vjp


class _JaxFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, e: _Export, *tensors):
        ctx.e = e
        ctx.save_for_backward(*tensors)
        return tuple(_run(e, tensors))

    @staticmethod
    def backward(ctx, *grads):
        e = ctx.e
        tensors = ctx.saved_tensors
        vjp = _vjp_of(e)
        cts = [g if g is not None else torch.zeros(s, dtype=d, device=tensors[0].device)
               for g, (s, d) in zip(grads, e.out_specs)]
        dgrads = _run(vjp, list(tensors) + [c.to(d) for c, (_, d) in zip(cts, e.out_specs)])
        out: list[torch.Tensor | None] = [None] * len(tensors)
        for i, g in zip(e.diff, dgrads):
            out[i] = g
        return (None, *out)


class _Kernel:
    """A JAX function callable on tpu tensors, exported once per signature."""

    def __init__(self, fn: Callable, static_argnums=(), input_output_aliases=None, name: str | None = None):
        _jax()
        self.fn = fn
        self.name = name or getattr(fn, "__name__", "jax_kernel")
        if isinstance(static_argnums, int):
            static_argnums = (static_argnums,)
        self.static = tuple(sorted(static_argnums))
        self.aliases = dict(input_output_aliases or {})
        self.exports: dict[Any, _Export] = {}
        functools.update_wrapper(self, fn)

    def signature(self, args) -> tuple[list[torch.Tensor], tuple, Callable]:
        tensors, statics = [], []
        for i, a in enumerate(args):
            if i in self.static:
                statics.append(a)
            else:
                if not isinstance(a, torch.Tensor):
                    raise TypeError(f"{self.name}: argument {i} is {type(a).__name__}; pass tensors, or name it in "
                                    "static_argnums")
                tensors.append(a)
        fn = self.fn
        if self.static:
            static, n = dict(zip(self.static, statics)), len(args)

            def fn(*ts, _f=self.fn):
                it = iter(ts)
                return _f(*[static[i] if i in static else next(it) for i in range(n)])
        return tensors, tuple(statics), fn

    def export_for(self, tensors, statics, fn) -> _Export:
        key = (tuple((tuple(t.shape), t.dtype) for t in tensors), statics)
        e = self.exports.get(key)
        if e is None:
            with _lock:
                e = self.exports.get(key)
                if e is None:
                    e = _export(fn, self.name, [(tuple(t.shape), t.dtype) for t in tensors])
                    self.exports[key] = e
        return e

    @torch._dynamo.disable  # a graph break under torch.compile: jax_op's ops go inside graphs
    def __call__(self, *args):
        tensors, statics, fn = self.signature(args)
        if tensors and any(t.device.type != "tpu" for t in tensors):
            devs = sorted({str(t.device) for t in tensors})
            raise RuntimeError(f"{self.name}: JAX kernels run on tpu tensors; got tensors on {devs}")
        e = self.export_for(tensors, statics, fn)
        if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
            outs = list(_JaxFunction.apply(e, *tensors))
        else:
            outs = _run(e, tensors)
        for i, o in self.aliases.items():
            # The output takes the input's place, as the input's buffer would
            # on an accelerator: the input is updated and returned.
            with torch.no_grad():
                tensors[i].copy_(outs[o])
            outs[o] = tensors[i]
        return _restructure(e.structure, e.out_tree, outs)


def custom_jax_kernel(fn: Callable, static_argnums=(), input_output_aliases=None) -> Callable:
    """Wraps the JAX function `fn` so that it is called on tpu tensors (and
    differentiated by autograd through JAX's vjp). Arguments named in
    `static_argnums` are Python values fixed at trace time (a new value
    traces again); `input_output_aliases` maps an input index to the output
    that updates it in place."""
    return _Kernel(fn, static_argnums, input_output_aliases)


def custom_kernel(output_shapes, pallas_kernel: Callable, **pallas_kwargs) -> Callable:
    """A Pallas kernel as a callable on tpu tensors: `output_shapes` lists the
    outputs (objects with .shape and .dtype, a torch dtype or a JAX one, or
    (shape, dtype) pairs); the rest goes to `pallas_call` (grid, in_specs,
    out_specs, ...). On the CPU plugin the kernel runs in Pallas's interpret
    mode."""
    jax = _jax()
    from jax.experimental import pallas as pl

    def spec(s):
        shape, dtype = (s.shape, s.dtype) if hasattr(s, "shape") else s
        if isinstance(dtype, torch.dtype):
            dtype = _jax_dtype(dtype, getattr(pallas_kernel, "__name__", "pallas kernel"))
        return jax.ShapeDtypeStruct(tuple(shape), dtype)

    single = hasattr(output_shapes, "shape") or (isinstance(output_shapes, tuple) and len(output_shapes) == 2
                                                  and not hasattr(output_shapes[0], "shape")
                                                  and isinstance(output_shapes[0], (tuple, list)))
    out_shape = spec(output_shapes) if single else [spec(s) for s in output_shapes]
    platform = _platform()
    pallas_kwargs.setdefault("interpret", platform == "cpu")
    if platform == "cpu" and not pallas_kwargs["interpret"]:
        raise RuntimeError(
            f"{getattr(pallas_kernel, '__name__', 'pallas kernel')}: the loaded PJRT plugin runs on the CPU, where "
            "Pallas kernels run only in interpret mode (lowered to plain StableHLO); drop interpret=False, which "
            "asks for a Mosaic (TPU) or Triton (GPU) kernel")
    call = pl.pallas_call(pallas_kernel, out_shape=out_shape, **pallas_kwargs)
    k = _Kernel(call, name=getattr(pallas_kernel, "__name__", "pallas_kernel"))
    return k


def jax_op(name: str, fn: Callable):
    """Defines the torch.library custom op `name` ("namespace::op") running
    the JAX function `fn` on tpu tensors: its fake kernel comes from JAX's
    shape inference, so it works under torch.compile, and its backward is
    JAX's vjp (override it with torch.library.register_autograd). Returns a
    callable taking `fn`'s tensor arguments; `.op` is the OpOverload."""
    kernel = _Kernel(fn, name=name)
    kernel.structure, kernel.out_tree = None, None  # the outputs' structure (the same for every signature)
    n = len([p for p in inspect.signature(fn).parameters.values()
             if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)])
    params = ", ".join(f"Tensor a{i}" for i in range(n))
    ns, opname = name.split("::")
    lib = torch.library.Library(ns, "FRAGMENT")
    lib.define(f"{opname}({params}) -> Tensor[]")
    op = getattr(getattr(torch.ops, ns), opname).default

    def impl(*tensors):
        tensors, statics, f = kernel.signature(tensors)
        return _run(kernel.export_for(tensors, statics, f), tensors)

    def fake(*tensors):
        tensors, statics, f = kernel.signature(tensors)
        e = kernel.export_for(tensors, statics, f)
        kernel.structure, kernel.out_tree = e.structure, e.out_tree
        return [torch.empty(s, dtype=d, device=tensors[0].device) for s, d in e.out_specs]

    lib.impl(opname, impl, "PrivateUse1")
    torch.library.register_fake(name, fake, lib=lib)

    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)

    def backward(ctx, grads):
        tensors = list(ctx.saved_tensors)
        e = kernel.export_for(tensors, (), kernel.fn)
        vjp = _vjp_of(e)
        cts = [g if g is not None else torch.zeros(s, dtype=d, device=tensors[0].device)
               for g, (s, d) in zip(grads, e.out_specs)]
        dgrads = list(_ops._jax_call([(tensors + cts)[i] for i in vjp.kept], vjp.kernel))
        out: list[torch.Tensor | None] = [None] * len(tensors)
        for i, g in zip(e.diff, dgrads):
            out[i] = g
        return tuple(out)

    torch.library.register_autograd(name, backward, setup_context=setup_context, lib=lib)

    def call(*tensors):
        outs = op(*tensors)
        if kernel.structure is None:  # eager: the op ran without its fake kernel
            e = kernel.export_for(list(tensors), (), kernel.fn)
            kernel.structure, kernel.out_tree = e.structure, e.out_tree
        return _restructure(kernel.structure, kernel.out_tree, list(outs))

    call.op = op
    call.lib = lib  # the registration lives as long as the op does
    call.__name__ = opname
    return call
