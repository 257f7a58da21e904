"""A differential fuzzer: random programs of common ops, run on tpu and on CPU.

    python -m torch_tpu.testing.fuzz --seed 0 --programs 20000 --mode strict
    python -m torch_tpu.testing.fuzz --seed 0 --minutes 30 --mode fused

Each program starts from a few random tensors (0- and 1-sized dims,
transposed, strided, offset and expanded layouts; float32, bfloat16, int64,
bool) and applies 5 to 30 ops drawn from 128 (elementwise, reductions,
views and in-place writes through views, matmul, indexing, cat/stack,
where, softmax, sort/topk, cumsum, conversions). The same program runs on
CPU and on tpu; after every op the two must agree: both raise the same
exception type, or both give the same values, dtype, shape, strides,
storage offset and the same sharing of storage with earlier tensors; at the
end every tensor is compared again (writes through views). Programs run in
a worker process: a crash or a hang is caught there, the program is rerun
alone to confirm it, and every finding is shrunk to a minimal program,
printed as Python.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import os
import random
import sys
import time
import traceback
from dataclasses import dataclass, field

DTYPES = ["float32", "bfloat16", "int64", "bool"]


# ---- programs ----------------------------------------------------------------

@dataclass
class Input:
    shape: tuple
    dtype: str
    layout: str  # contiguous | transposed | strided | offset | expanded
    seed: int


@dataclass
class Step:
    op: str
    args: list  # indices of earlier values
    seed: int   # draws the op's parameters (from shapes and dtypes only)


@dataclass
class Program:
    inputs: list = field(default_factory=list)
    steps: list = field(default_factory=list)

    def to_json(self):
        return json.dumps({"inputs": [vars(i) for i in self.inputs], "steps": [vars(s) for s in self.steps]})

    @staticmethod
    def from_json(text):
        d = json.loads(text)
        return Program([Input(tuple(i["shape"]), i["dtype"], i["layout"], i["seed"]) for i in d["inputs"]],
                       [Step(s["op"], s["args"], s["seed"]) for s in d["steps"]])


def make_input(torch, spec: Input, device: str):
    g = torch.Generator().manual_seed(spec.seed)
    dtype = getattr(torch, spec.dtype)
    shape = list(spec.shape)
    base_shape = list(shape)
    if spec.layout == "transposed" and len(shape) >= 2:
        base_shape[-1], base_shape[-2] = base_shape[-2], base_shape[-1]
    elif spec.layout == "strided" and shape:
        base_shape[-1] = shape[-1] * 2
    elif spec.layout == "offset" and shape:
        base_shape[0] = shape[0] + 1
    elif spec.layout == "expanded" and shape:
        base_shape[0] = 1
    if dtype == torch.bool:
        base = torch.randint(0, 2, base_shape, generator=g).bool()
    elif dtype == torch.int64:
        base = torch.randint(-8, 9, base_shape, generator=g)
    else:
        base = (torch.randn(base_shape, generator=g) * 2).to(dtype)
    base = base.to(device)
    if spec.layout == "transposed" and len(shape) >= 2:
        return base.transpose(-1, -2)
    if spec.layout == "strided" and shape:
        return base[..., ::2]
    if spec.layout == "offset" and shape:
        return base[1:]
    if spec.layout == "expanded" and shape:
        return base.expand(*shape)
    return base


# ---- the ops -----------------------------------------------------------------
# Each op: (arity, accepts(dtypes) -> bool, fn(torch, args, rng) -> tensor or
# tuple). `rng` is seeded by the step: parameters depend only on shapes and
# dtypes, so CPU and tpu draw the same ones.

def _f(d):
    return d in ("float32", "bfloat16")


def _num(d):
    return d != "bool"


def _dim(rng, x):
    return rng.randrange(-x.dim(), x.dim()) if x.dim() else 0


def _ops():
    ops = {}

    def op(name, arity, accepts, fn):
        ops[name] = (arity, accepts, fn)

    any_ = lambda *ds: True  # noqa: E731
    # unary elementwise
    for name in ["abs", "neg", "exp", "log", "sqrt", "sin", "cos", "tanh", "sigmoid", "relu", "floor", "ceil",
                 "round", "trunc", "sign", "reciprocal", "rsqrt", "expm1", "log1p", "erf", "square", "frac",
                 "atan", "asin", "sinh", "log2", "exp2", "angle", "nan_to_num"]:
        # (not signbit: the sign bit of a NaN is not portable)
        floaty = name not in ("abs", "neg", "sign", "square", "relu")
        op(name, 1, (lambda d: _f(d)) if floaty else (lambda d: _num(d) and (d != "bool")),
           lambda t, a, r, name=name: getattr(t, name)(a[0]))
    op("logical_not", 1, any_, lambda t, a, r: t.logical_not(a[0]))
    op("bitwise_not", 1, lambda d: d in ("int64", "bool"), lambda t, a, r: t.bitwise_not(a[0]))
    op("clamp", 1, lambda d: _num(d), lambda t, a, r: a[0].clamp(-1, 1))
    op("pow_scalar", 1, _f, lambda t, a, r: a[0] ** r.choice([2, 0.5, 3, -1.0]))
    op("mul_scalar", 1, _num, lambda t, a, r: a[0] * r.choice([2, -1, 0.5]))
    op("add_scalar", 1, _num, lambda t, a, r: a[0] + r.choice([1, -3, 0.25]))
    op("gelu", 1, _f, lambda t, a, r: t.nn.functional.gelu(a[0]))
    op("silu", 1, _f, lambda t, a, r: t.nn.functional.silu(a[0]))
    op("leaky_relu", 1, _f, lambda t, a, r: t.nn.functional.leaky_relu(a[0], 0.1))
    # binary elementwise (broadcasting; may raise on shapes, as CPU does)
    for name in ["add", "sub", "mul", "div", "maximum", "minimum", "eq", "lt", "ge", "ne", "atan2", "fmod",
                 "remainder", "logical_and", "logical_or", "bitwise_and", "bitwise_xor", "hypot", "floor_divide"]:
        def acc(d1, d2, name=name):
            if name in ("bitwise_and", "bitwise_xor"):
                return d1 in ("int64", "bool") and d2 in ("int64", "bool")
            if name in ("atan2", "hypot"):
                return _f(d1) and _f(d2)
            if name in ("sub",):
                return d1 != "bool" and d2 != "bool"
            if name in ("fmod", "remainder", "floor_divide", "div"):
                return _f(d1) or _f(d2)  # integers by zero raise asynchronously: covered elsewhere
            return True
        op(name, 2, acc, lambda t, a, r, name=name: getattr(t, name)(a[0], a[1]))
    op("where", 3, lambda c, x, y: c == "bool", lambda t, a, r: t.where(a[0], a[1], a[2]))
    op("lerp", 2, lambda d1, d2: _f(d1) and d1 == d2, lambda t, a, r: t.lerp(a[0], a[1], 0.3))
    op("addcmul", 3, lambda *ds: all(_f(d) for d in ds) and len(set(ds)) == 1,
       lambda t, a, r: t.addcmul(a[0], a[1], a[2], value=0.5))
    # reductions
    for name in ["sum", "mean", "amax", "amin", "prod", "std", "var", "logsumexp", "nansum", "any", "all",
                 "count_nonzero", "argmax", "argmin"]:
        def acc1(d, name=name):
            if name in ("mean", "std", "var", "logsumexp"):
                return _f(d)
            if name in ("argmax", "argmin", "amax", "amin"):
                return d != "bool"
            return True

        def fn(t, a, r, name=name):
            x = a[0]
            if r.random() < 0.3 or x.dim() == 0:
                if name in ("logsumexp",):
                    return getattr(t, name)(x, 0 if x.dim() else 0) if x.dim() else x.exp().log()
                return getattr(t, name)(x)
            dim = _dim(r, x)
            if name in ("count_nonzero", "argmax", "argmin"):
                return getattr(t, name)(x, dim)
            if name in ("any", "all"):
                return getattr(t, name)(x, dim, keepdim=r.random() < 0.5)
            return getattr(t, name)(x, dim, keepdim=r.random() < 0.5)
        op(name, 1, acc1, fn)
    op("max_dim", 1, lambda d: d != "bool", lambda t, a, r: a[0].max(_dim(r, a[0])) if a[0].dim() else a[0].max())
    op("cumsum", 1, _num, lambda t, a, r: a[0].cumsum(_dim(r, a[0])))
    op("cumprod", 1, _f, lambda t, a, r: a[0].cumprod(_dim(r, a[0])))
    op("cummax", 1, lambda d: d != "bool", lambda t, a, r: a[0].cummax(_dim(r, a[0])))
    op("softmax", 1, _f, lambda t, a, r: a[0].softmax(_dim(r, a[0])))
    op("log_softmax", 1, _f, lambda t, a, r: a[0].log_softmax(_dim(r, a[0])))
    op("sort", 1, lambda d: d != "bool", lambda t, a, r: a[0].sort(_dim(r, a[0]), descending=r.random() < 0.5, stable=True))
    op("argsort", 1, lambda d: d != "bool", lambda t, a, r: a[0].argsort(_dim(r, a[0]), stable=True))

    def topk(t, a, r):
        x = a[0]
        d = _dim(r, x)
        n = x.shape[d] if x.dim() else 1
        return x.topk(r.randint(0, n) if n else 0, d if x.dim() else 0, sorted=True)
    op("topk", 1, lambda d: d == "float32" or d == "int64", topk)
    # views and shape ops
    op("t", 1, any_, lambda t, a, r: a[0].t() if a[0].dim() <= 2 else a[0].transpose(0, -1))
    op("transpose", 1, any_, lambda t, a, r: a[0].transpose(_dim(r, a[0]), _dim(r, a[0])))
    op("permute", 1, any_, lambda t, a, r: a[0].permute(*r.sample(range(a[0].dim()), a[0].dim())))
    op("reshape", 1, any_, lambda t, a, r: a[0].reshape(-1) if r.random() < 0.5 else a[0].reshape(*_factor(r, a[0].numel())))
    op("view", 1, any_, lambda t, a, r: a[0].view(-1))
    op("flatten", 1, any_, lambda t, a, r: a[0].flatten())
    op("unsqueeze", 1, any_, lambda t, a, r: a[0].unsqueeze(r.randrange(-a[0].dim() - 1, a[0].dim() + 1)))
    op("squeeze", 1, any_, lambda t, a, r: a[0].squeeze())
    op("slice", 1, any_, _slice)
    op("select", 1, any_, lambda t, a, r: a[0].select(_dim(r, a[0]), 0) if a[0].dim() and min(a[0].shape) > 0 else a[0])
    op("narrow", 1, any_, _narrow)
    op("expand", 1, any_, lambda t, a, r: a[0].expand(2, *a[0].shape))
    op("contiguous", 1, any_, lambda t, a, r: a[0].contiguous())
    op("clone", 1, any_, lambda t, a, r: a[0].clone())
    op("flip", 1, any_, lambda t, a, r: a[0].flip(_dim(r, a[0])) if a[0].dim() else a[0].flip(0))
    op("roll", 1, any_, lambda t, a, r: a[0].roll(r.randint(-3, 3), _dim(r, a[0])) if a[0].dim() else a[0])
    op("diagonal", 1, any_, lambda t, a, r: a[0].diagonal(0, 0, 1) if a[0].dim() >= 2 else a[0])
    op("unfold", 1, any_, lambda t, a, r: a[0].unfold(_dim(r, a[0]), 1, 1) if a[0].dim() else a[0])
    op("repeat", 1, any_, lambda t, a, r: a[0].repeat(*([2] + [1] * a[0].dim())))
    op("tril", 1, any_, lambda t, a, r: a[0].tril(r.randint(-1, 1)) if a[0].dim() >= 2 else a[0])
    op("cat", 2, lambda d1, d2: True, lambda t, a, r: t.cat([a[0], a[1]], _dim(r, a[0]) if a[0].dim() else 0))
    op("stack", 2, lambda d1, d2: True, lambda t, a, r: t.stack([a[0], a[1]], r.randrange(0, a[0].dim() + 1)))
    op("matmul", 2, lambda d1, d2: d1 == d2 and _f(d1), lambda t, a, r: a[0] @ a[1])
    op("mm_t", 1, _f, lambda t, a, r: a[0] @ a[0].t() if a[0].dim() == 2 else a[0] * 1)
    # conversions
    for to in DTYPES:
        op(f"to_{to}", 1, any_, lambda t, a, r, to=to: a[0].to(getattr(t, to)))
    op("masked_fill", 2, lambda d, m: m == "bool", lambda t, a, r: a[0].masked_fill(a[1], 3))
    # indexing
    op("index_select", 1, any_, _index_select)
    op("gather", 1, any_, _gather)
    op("getitem_mask", 2, lambda d, m: m == "bool", lambda t, a, r: a[0][a[1]])
    op("getitem_int", 1, any_, _getitem_int)
    op("nonzero", 1, any_, lambda t, a, r: a[0].nonzero())
    # in-place ops (through views when the input is one)
    op("add_", 2, lambda d1, d2: d1 != "bool" and d2 != "bool", lambda t, a, r: a[0].add_(a[1]))
    op("mul_", 1, lambda d: d != "bool", lambda t, a, r: a[0].mul_(2))
    op("fill_", 1, any_, lambda t, a, r: a[0].fill_(1))
    op("zero_", 1, any_, lambda t, a, r: a[0].zero_())
    op("clamp_", 1, lambda d: _num(d), lambda t, a, r: a[0].clamp_(-1, 1))
    op("copy_", 2, lambda d1, d2: True, lambda t, a, r: a[0].copy_(a[1]))
    # (also into a tensor whose elements share memory, which CPU deprecates
    # but writes: a location is filled if any of its aliases is masked)
    op("masked_fill_", 2, lambda d, m: m == "bool", lambda t, a, r: a[0].masked_fill_(a[1], 0))
    op("setitem_slice", 1, any_, _setitem_slice)
    op("index_add_", 1, lambda d: d == "float32" or d == "int64", _index_add)
    op("relu_", 1, lambda d: d in ("float32", "bfloat16", "int64"), lambda t, a, r: a[0].relu_())
    op("sigmoid_", 1, _f, lambda t, a, r: a[0].sigmoid_())
    # Not drawn by random programs (their names start with "__"): for the
    # fuzzer's own tests, a crash.
    op("__crash__", 1, any_, lambda t, a, r: os._exit(7) if a[0].device.type != "cpu" else a[0])
    return ops


def _factor(r, n):
    if n == 0:
        return (0, r.choice([1, 2]))
    divisors = [d for d in range(1, n + 1) if n % d == 0]
    a = r.choice(divisors)
    return (a, n // a)


def _span(r, x):
    """A dim of x and a start within it (x has dims)."""
    d = _dim(r, x)
    return d, x.shape[d], r.randint(0, x.shape[d])


def _slice(t, a, r):
    x = a[0]
    if not x.dim():
        return x
    d, n, start = _span(r, x)
    idx = [slice(None)] * x.dim()
    idx[d] = slice(start, r.randint(start, n), r.choice([1, 1, 2]))
    return x[tuple(idx)]


def _narrow(t, a, r):
    x = a[0]
    if not x.dim():
        return x
    d, n, start = _span(r, x)
    return x.narrow(d, start, r.randint(0, n - start))


def _indices(t, r, n, k, device):
    return t.tensor([r.randrange(n) for _ in range(k)] if n else [], dtype=t.long, device=device)


def _index_select(t, a, r):
    x = a[0]
    if not x.dim():
        return x
    d = _dim(r, x)
    return x.index_select(d, _indices(t, r, x.shape[d], r.randint(0, 4), x.device))


def _gather(t, a, r):
    x = a[0]
    if not x.dim() or x.numel() == 0:
        return x
    d = _dim(r, x)
    shape = list(x.shape)
    shape[d] = r.randint(1, 3)
    idx = t.tensor([r.randrange(x.shape[d]) for _ in range(math.prod(shape))], dtype=t.long).reshape(shape)
    return x.gather(d, idx.to(x.device))


def _getitem_int(t, a, r):
    x = a[0]
    if not x.dim() or x.shape[0] == 0:
        return x
    return x[r.randrange(-x.shape[0], x.shape[0])]


def _setitem_slice(t, a, r):
    x = a[0]
    if not x.dim() or x.shape[0] == 0:
        return x.fill_(2)
    x[r.randrange(x.shape[0])] = 5
    return x


def _index_add(t, a, r):
    x = a[0]
    if not x.dim() or x.shape[0] == 0:
        return x
    idx = _indices(t, r, x.shape[0], 2, x.device)
    return x.index_add_(0, idx, t.ones(2, *x.shape[1:], dtype=x.dtype, device=x.device))


OPS = None


def ops():
    global OPS
    if OPS is None:
        OPS = _ops()
    return OPS


def random_program(rng: random.Random, n_steps: int) -> Program:
    p = Program()
    dtypes = []
    shapes = []
    for _ in range(rng.randint(2, 4)):
        rank = rng.randint(0, 3)
        shape = tuple(rng.choice([0, 1, 1, 2, 3, 4, 5]) for _ in range(rank))
        dt = rng.choice(DTYPES)
        layout = rng.choice(["contiguous", "contiguous", "transposed", "strided", "offset", "expanded"])
        p.inputs.append(Input(shape, dt, layout, rng.randrange(2**31)))
        dtypes.append(dt)
        shapes.append(shape)
    names = sorted(n for n in ops() if not n.startswith("__"))
    for _ in range(n_steps):
        for _attempt in range(20):
            name = rng.choice(names)
            arity, accepts, _ = ops()[name]
            args = [rng.randrange(len(dtypes)) for _ in range(arity)]
            if arity >= 2 and rng.random() < 0.5:
                args[1] = args[0]  # the same tensor twice (aliasing)
            if accepts(*[dtypes[i] for i in args]):
                break
        else:
            continue
        p.steps.append(Step(name, args, rng.randrange(2**31)))
        dtypes.append(dtypes[args[0]])  # a guess for later choices; real dtypes come from running
    return p


# ---- running and comparing ----------------------------------------------------

class Outcome:
    def __init__(self, values, errors):
        self.values = values  # per value index: tensor or None
        self.errors = errors  # per step: exception type name or None


def run_program(torch, p: Program, device: str, follow=None):
    """Runs `p`: its values (None where a step raised), the exception type of
    each step, and which values come from bfloat16 arithmetic (compared with
    bfloat16's tolerance even when converted to float32 later).

    `follow` (a tpu run's `expected`) makes a CPU run take the tpu's answer
    of each op that is not in-place (copied into CPU's result, which keeps
    CPU's layout and aliasing): later in-place writes then act on the same
    numbers on both devices, so a rounding difference within tolerance that
    a conversion to an integer or a comparison made large is not taken for
    a wrong write."""
    values = [make_input(torch, i, device) for i in p.inputs]
    low = [i.dtype == "bfloat16" for i in p.inputs]
    errors = []
    # On tpu, what CPU gives for each op applied to the tpu's own inputs of
    # the moment: values are compared op by op, so that rounding differences
    # within tolerance do not compound along a program.
    expected = [None] * len(values)
    # Which values an in-place op wrote (themselves or through a view)
    # after they were made.
    written = [False] * len(values)
    for s in p.steps:
        arity, accepts, fn = ops()[s.op]
        args = [values[i] for i in s.args]
        low.append(any(low[i] for i in s.args))
        if any(a is None for a in args) or not accepts(*[str(a.dtype).split(".")[1] for a in args]):
            errors.append("skipped")
            values.append(None)
            expected.append(None)
            written.append(False)
            continue
        snapshot = None
        mark = False
        if device != "cpu":
            try:
                snapshot = [a.cpu().clone() for a in args]
            except Exception:  # noqa: BLE001  (reported by the run below)
                snapshot = None
        try:
            out = fn(torch, args, random.Random(s.seed))
            if isinstance(out, tuple):
                out = out[0]
            if device != "cpu":
                torch.tpu.synchronize()
            errors.append(None)
            values.append(out)
            if isinstance(out, torch.Tensor) and out.dtype == torch.bfloat16:
                low[-1] = True
            inplace = s.op.endswith("_") or s.op == "setitem_slice"
            if inplace:
                target = _storage(args[0])
                same = [i for i, v in enumerate(values[:-1]) if v is not None and _storage(v) == target]
                undefined = _undefined_overlap(args) or any(written[i] is UNDEFINED for i in same)
                mark = UNDEFINED if undefined else True
                for i in same:
                    written[i] = mark
        except Exception as e:  # noqa: BLE001
            errors.append(type(e).__name__)
            values.append(None)
        inplace = s.op.endswith("_") or s.op == "setitem_slice"
        # An in-place op's result is checked by its final state (a snapshot
        # of the inputs loses which elements share memory).
        written.append(mark or inplace)
        ref = None
        if snapshot is not None and values[-1] is not None and not inplace:
            try:
                ref = fn(torch, snapshot, random.Random(s.seed))
                ref = ref[0] if isinstance(ref, tuple) else ref
                ref = (ref, values[-1].cpu().clone())  # (CPU's answer, tpu's answer) at this step
                if s.op in _SCALAR_REFERENCE and ref[0].dtype.is_floating_point:
                    wide = fn(torch, [a.double() if a.is_floating_point() else a for a in snapshot],
                              random.Random(s.seed))
                    ref = ref + (wide.to(ref[0].dtype),)
            except Exception:  # noqa: BLE001
                ref = None
        expected.append(ref)
        if follow is not None and not inplace and values[-1] is not None:
            _take(torch, values[-1], follow[len(values) - 1])
    return values, errors, low, expected, written


def _take(torch, out, ref):
    """Writes the tpu's answer of a step (`ref[1]` of its `expected`) into
    CPU's result of it, where they have one shape and dtype."""
    if ref is None or not isinstance(out, torch.Tensor):
        return
    got = ref[1]
    if got.shape != out.shape or got.dtype != out.dtype:
        return
    try:
        with torch.no_grad():
            out.copy_(got)
    except RuntimeError:  # an expanded result: more than one element per location
        pass


# A value written by an in-place op whose source overlapped its destination
# in a way CPU does not detect (a column of a matrix copied into its rows):
# PyTorch leaves the result undefined (CPU's depends on its loop order, and
# reads elements it has already written), so its final value is not compared.
UNDEFINED = "undefined"


def _addresses(t) -> set:
    """The bytes of its storage that `t`'s elements occupy."""
    import torch
    if t.numel() == 0:
        return set()
    idx = torch.zeros((), dtype=torch.int64)
    for n, st in zip(t.shape, t.stride()):
        idx = idx.unsqueeze(-1) + torch.arange(n) * st
    size = t.element_size()
    return {b for e in (idx + t.storage_offset()).flatten().tolist() for b in range(e * size, (e + 1) * size)}


def _undefined_overlap(args) -> bool:
    """Whether an in-place op's destination overlaps one of its sources
    without being the same view of it (a source identical to the destination,
    `x.add_(x)`, is well defined; a partial overlap CPU detects raises)."""
    dst = args[0]
    for a in args[1:]:
        if not hasattr(a, "untyped_storage") or _storage(a) != _storage(dst):
            continue
        if (a.data_ptr(), a.shape, a.stride()) == (dst.data_ptr(), dst.shape, dst.stride()):
            continue
        if _addresses(a) & _addresses(dst):
            return True
    return False


# Ops whose rounding error grows with the number of elements they combine:
# in bfloat16 CPU's own result depends on the input's layout (a strided
# prod of 50 values is 4 ulps from the contiguous one).
_COMPOUNDING = frozenset({"prod", "cumprod"})

# Ops whose CPU kernel disagrees with itself on special values: on some
# machines the vectorized float32/bfloat16 gelu gives NaN for +inf, where its
# scalar tail (and float64, and CUDA) give inf, so CPU's answer depends on the
# machine and on where in the tensor the inf sits. For these a tpu value also
# passes when it is CPU's float64 answer in the op's dtype.
_SCALAR_REFERENCE = frozenset({"gelu"})


def _close(torch, a, b, low: bool, loose: bool = False, compounding: bool = False) -> bool:
    if a.dtype.is_floating_point:
        tol = (6e-2 if compounding else 2e-2) if low else (1e-3 if loose else 1e-4)
        return torch.allclose(a.float(), b.float(), rtol=tol, atol=tol, equal_nan=True)
    return torch.equal(a, b)


def _storage(t):
    try:
        return t.untyped_storage()._cdata
    except Exception:  # noqa: BLE001
        return None


def compare(torch, p: Program, cpu, tpu) -> str | None:
    """The first difference between the CPU and tpu runs, or None."""
    cv, ce, low, _, written = cpu
    tv, te, _, expected, _ = tpu
    for k, (a, b) in enumerate(zip(ce, te)):
        if a != b:
            s = p.steps[k]
            return f"step {k} ({s.op}): CPU {a or 'ok'}, tpu {b or 'ok'}"
    n_in = len(p.inputs)
    for k, (a, b) in enumerate(zip(cv, tv)):
        if a is None or b is None:
            if (a is None) != (b is None):
                return f"value {k}: present on one device only"
            continue
        where = f"value {k}" + (f" (step {k - n_in}: {p.steps[k - n_in].op})" if k >= n_in else " (input)")
        if a.dtype != b.dtype or tuple(a.shape) != tuple(b.shape):
            # A shape that depends on data (nonzero of a bfloat16 result)
            # may follow a rounding difference within tolerance in its input:
            # CPU's op on the tpu's own inputs then gives the tpu's shape.
            ref = expected[k] if k >= n_in else None
            if (a.dtype == b.dtype and ref is not None and tuple(ref[0].shape) == tuple(b.shape)
                    and _close(torch, ref[0], ref[1], low[k])):
                continue
            return f"{where}: CPU {a.dtype}{list(a.shape)}, tpu {b.dtype}{list(b.shape)}"
        # Strides of dims of size 1 (or of empty tensors) mean nothing.
        sa = [s for s, n in zip(a.stride(), a.shape) if n > 1]
        sb = [s for s, n in zip(b.stride(), b.shape) if n > 1]
        # CPU's TensorIterator lays results out ignoring 0-dim CPU operands
        # (they are its scalars); on accelerators (CUDA, tpu, meta) they count.
        scalar_arg = k >= n_in and any(cv[i] is not None and cv[i].dim() == 0 for i in p.steps[k - n_in].args)
        if scalar_arg:
            sa = sb
        if a.numel() > 1 and (sa != sb or a.storage_offset() != b.storage_offset()):
            return (f"{where}: CPU strides {a.stride()} offset {a.storage_offset()}, "
                    f"tpu strides {b.stride()} offset {b.storage_offset()}")
        # The op's values when it ran, against CPU's on the same inputs.
        if k >= n_in and expected[k] is not None:
            want, got = expected[k][:2]
            close = lambda w: _close(torch, w, got, low[k], compounding=p.steps[k - n_in].op in _COMPOUNDING)  # noqa: E731
            if want.shape == got.shape and not any(close(w) for w in (want, *expected[k][2:])):
                return (f"{where}: values differ: CPU {want.flatten()[:8].tolist()} "
                        f"tpu {got.flatten()[:8].tolist()}")
        # The final values of tensors written after they were made (through
        # views included), the two runs apart.
        bc = b.cpu()
        if written[k] is UNDEFINED:
            continue
        if (written[k] or k < n_in) and not _close(torch, a, bc, low[k], loose=True):
            return f"{where}: final values differ: CPU {a.flatten()[:8].tolist()} tpu {bc.flatten()[:8].tolist()}"
    # Which values share storage.
    for i in range(len(cv)):
        for j in range(i):
            if cv[i] is None or cv[j] is None or tv[i] is None or tv[j] is None:
                continue
            if cv[i].numel() == 0 or cv[j].numel() == 0:
                continue
            sc = _storage(cv[i]) == _storage(cv[j])
            st = _storage(tv[i]) == _storage(tv[j])
            if sc != st:
                return f"values {j} and {i}: share storage on {'CPU' if sc else 'tpu'} only"
    return None


def compare_runs(torch, p: Program, cpu, tpu) -> str | None:
    """compare(); a difference of written values is confirmed against a
    second CPU run that takes the tpu's answer of each op, so that only the
    writes themselves are compared."""
    found = compare(torch, p, cpu, tpu)
    if found is not None and "final values differ" in found:
        found = compare(torch, p, run_program(torch, p, "cpu", follow=tpu[3]), tpu)
    return found


def check(torch, p: Program) -> str | None:
    try:
        return compare_runs(torch, p, run_program(torch, p, "cpu"), run_program(torch, p, "tpu"))
    except Exception as e:  # noqa: BLE001
        return f"harness error: {type(e).__name__}: {e}"


def as_python(p: Program) -> str:
    lines = ["import torch, torch_tpu, random", "from torch_tpu.testing.fuzz import Program, check",
             f"p = Program.from_json({p.to_json()!r})", "print(check(torch, p))"]
    return "\n".join(lines)


# ---- workers, crashes, shrinking ---------------------------------------------

def _worker(conn, mode: str):
    os.environ.pop("TORCH_TPU_DEFER_AND_FUSE", None)
    os.environ.pop("TORCH_TPU_LAUNCH_BLOCKING", None)
    import torch
    import torch_tpu

    torch_tpu.set_execution_mode(mode)
    # XLA flushes denormal floats to zero (as TPUs do): so does CPU here.
    torch.set_flush_denormal(True)
    while True:
        msg = conn.recv()
        if msg is None:
            return
        conn.send(check(torch, Program.from_json(msg)))


class Worker:
    def __init__(self, mode: str):
        self.mode = mode
        self.ctx = mp.get_context("spawn")
        self._start()

    def _start(self):
        self.conn, child = self.ctx.Pipe()
        self.proc = self.ctx.Process(target=_worker, args=(child, self.mode), daemon=True)
        self.proc.start()

    def run(self, p: Program, timeout: float) -> str | None:
        """The finding for `p` (None: none); a crash or hang restarts the worker."""
        try:
            self.conn.send(p.to_json())
            if self.conn.poll(timeout):
                return self.conn.recv()
            what = f"hang: no answer in {timeout:.0f} s"
        except (EOFError, BrokenPipeError, ConnectionResetError):
            what = None
        self.proc.join(0.5)
        if what is None:
            code = self.proc.exitcode
            what = f"crash: the process died (exit code {code})"
        self.proc.kill()
        self.proc.join()
        self._start()
        return what

    def close(self):
        try:
            self.conn.send(None)
        except Exception:  # noqa: BLE001
            pass
        self.proc.join(2)
        if self.proc.is_alive():
            self.proc.kill()


def shrink(worker: Worker, p: Program, timeout: float) -> Program:
    """Removes steps (and inputs) while the program still fails."""
    def fails(q):
        return worker.run(q, timeout) is not None

    changed = True
    while changed:
        changed = False
        for k in range(len(p.steps) - 1, -1, -1):
            q = Program(list(p.inputs), p.steps[:k] + p.steps[k + 1:])
            # Indices of later steps' arguments shift by one past the removed value.
            n = len(p.inputs) + k
            ok = True
            for s in q.steps[k:]:
                if n in s.args:
                    ok = False
                    break
            if not ok:
                continue
            q.steps = q.steps[:k] + [Step(s.op, [a - 1 if a > n else a for a in s.args], s.seed) for s in q.steps[k:]]
            if fails(q):
                p, changed = q, True
    return p


def fuzz(seed: int = 0, programs: int = 100, minutes: float | None = None, mode: str = "strict",
         timeout: float = 60.0, log=print, progress: int = 0) -> dict:
    """Runs random programs; returns counts and the (shrunk) findings.

    `progress` > 0 logs a line every that many programs, so that a long run
    that is stopped still says how far it got."""
    rng = random.Random(seed)
    worker = Worker(mode)
    findings = []
    start = time.monotonic()
    ran = 0
    try:
        while ran < programs and (minutes is None or time.monotonic() - start < minutes * 60):
            p = random_program(rng, rng.randint(5, 30))
            ran += 1
            found = worker.run(p, timeout)
            if found is not None:
                small = shrink(worker, p, timeout)
                again = worker.run(small, timeout) or found
                findings.append({"finding": again, "program": small.to_json(), "python": as_python(small)})
                log(f"[fuzz] program {ran}: {again}\n{as_python(small)}")
            if progress and ran % progress == 0:
                log(f"[fuzz] {ran} programs in {mode} eager, {time.monotonic() - start:.0f} s, "
                    f"{len(findings)} findings")
    finally:
        worker.close()
    return {"programs": ran, "mode": mode, "seed": seed, "seconds": time.monotonic() - start, "findings": findings}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--programs", type=int, default=1000)
    ap.add_argument("--minutes", type=float, default=None)
    ap.add_argument("--mode", choices=["strict", "fused", "debug"], default="strict")
    ap.add_argument("--report", default=None, help="write the findings as JSON")
    ap.add_argument("--progress", type=int, default=1000, help="log a line every this many programs (0: never)")
    args = ap.parse_args()
    result = fuzz(args.seed, args.programs, args.minutes, args.mode,
                  log=lambda line: print(line, flush=True), progress=args.progress)
    print(f"[fuzz] {result['programs']} programs in {result['mode']} eager, {result['seconds']:.0f} s, "
          f"{len(result['findings'])} findings")
    if args.report:
        with open(args.report, "w") as f:
            json.dump(result, f, indent=1)
    sys.exit(1 if result["findings"] else 0)


if __name__ == "__main__":
    main()
