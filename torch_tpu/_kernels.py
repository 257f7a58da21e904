"""Registering the lowered ops with the dispatcher.

The C++ lowering table holds functional ops only ("aten::add.Tensor"). Each
one also serves its in-place ("aten::add_.Tensor") and out= ("aten::add.out")
variants, found here by matching schemas: same arguments, plus the mutated
self or the out arguments. Ops that PyTorch decomposes itself
(CompositeImplicitAutograd) are left alone: a backend kernel would hide their
autograd formula.
"""

from __future__ import annotations

import torch

FUNCTIONAL, INPLACE, OUT = 0, 1, 2


def _full_name(schema) -> str:
    return schema.name + ("." + schema.overload_name if schema.overload_name else "")


def _signature(args) -> list[tuple[str, str]]:
    return [(a.name, str(a.type)) for a in args]


def _is_composite_implicit(name: str) -> bool:
    return torch._C._dispatch_has_kernel_for_dispatch_key(name, "CompositeImplicitAutograd")


def variants_of(functional: str) -> list[tuple[str, int]]:
    """[(variant name, kind)] served by the lowering of ``functional``."""
    base, _, overload = functional.partition(".")
    schemas = torch._C._jit_get_schemas_for_operator(base)
    fschema = next((s for s in schemas if s.overload_name == overload), None)
    if fschema is None:
        return []  # not an op of this torch version (see tests/python/test_registry.py)
    fsig = _signature(fschema.arguments)
    # A lowering registered under an out= or in-place name serves that op only.
    if any(a.is_out for a in fschema.arguments):
        return [(functional, OUT)]
    first = fschema.arguments[0] if fschema.arguments else None
    if first is not None and first.alias_info is not None and first.alias_info.is_write:
        return [(functional, INPLACE)]
    out: list[tuple[str, int]] = [(functional, FUNCTIONAL)]
    # (An operator's in-place form is named with a trailing underscore;
    # Python's dunder operators with an i: __lshift__ -> __ilshift__.)
    dunder = base.startswith("aten::__") and base.endswith("__")
    inplace = "aten::__i" + base[len("aten::__"):] if dunder else base + "_"
    for s in torch._C._jit_get_schemas_for_operator(inplace):
        args = s.arguments
        if s.overload_name == overload and args and args[0].alias_info is not None:
            if args[0].alias_info.is_write and _signature(args) == fsig:
                out.append((_full_name(s), INPLACE))
    for s in schemas:
        outs = [a for a in s.arguments if a.is_out]
        if not outs or s is fschema:
            continue
        if _signature([a for a in s.arguments if not a.is_out]) == fsig:
            out.append((_full_name(s), OUT))
    return [(n, k) for n, k in out if not _is_composite_implicit(n)]


def register() -> int:
    """Register every lowered op and its variants; returns how many."""
    variants, functionals, kinds = [], [], []
    lowered = set(torch.ops.torch_tpu._lowering_names())
    for functional in sorted(lowered):
        for name, kind in variants_of(functional):
            if name != functional and name in lowered:
                continue  # (an in-place or out= form with a lowering of its own: mul_.Scalar)
            variants.append(name)
            functionals.append(functional)
            kinds.append(kind)
    torch.ops.torch_tpu._register_kernels(variants, functionals, kinds)
    return len(variants)


_meta_lib = None


def register_missing_meta() -> None:
    """Meta kernels for the random ops PyTorch ships without one (binomial,
    _sample_dirichlet): without them, torch.compile's tracing runs the op on
    the device to learn its result's shape, which draws from the generator,
    so a compiled function's first call after torch.manual_seed would not
    draw what eager or its later calls draw. Their results are contiguous, of
    the first operand's shape and dtype."""
    global _meta_lib
    if _meta_lib is not None:
        return
    _meta_lib = torch.library.Library("aten", "IMPL")
    for name in ("binomial", "_sample_dirichlet"):
        if not torch._C._dispatch_has_kernel_for_dispatch_key("aten::" + name, "Meta"):
            _meta_lib.impl(name, lambda self, *args, **kwargs: torch.empty(self.shape, dtype=self.dtype,
                                                                            device=self.device), "Meta")
