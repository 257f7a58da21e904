"""The bad-input corpus: invalid calls across ops, each run on CPU and on tpu
(the suite runs in all three execution modes). For every call, CPU raises
and tpu must raise the same exception type; the process survives; and an
unrelated tensor with work still pending before the call reads back intact
afterwards (an error belongs to its op)."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F

import torch_tpu

CASES: dict[str, object] = {}
# Cases whose CPU reference cannot be run as such (tensors on two devices):
# the exception CPU PyTorch raises for them.
EXPECTED: dict[str, type] = {}


def case(name, fn, expected: type | None = None):
    assert name not in CASES, name
    CASES[name] = fn
    if expected is not None:
        EXPECTED[name] = expected


def t(d, *shape, dtype=torch.float32):
    return torch.ones(*shape, dtype=dtype, device=d)


def idx(d, *values):
    return torch.tensor(values, dtype=torch.long, device=d)


# -- shapes that do not broadcast -------------------------------------------
BINARY = ["add", "sub", "mul", "div", "maximum", "minimum", "atan2", "pow", "fmod", "remainder", "eq", "ne", "lt",
          "le", "gt", "ge", "hypot", "copysign", "logaddexp", "fmax", "fmin", "xlogy", "nextafter", "heaviside",
          "logical_and", "logical_or", "logical_xor", "true_divide", "floor_divide", "ldexp"]
for op in BINARY:
    case(f"{op}: shapes (3,) and (4,)", lambda d, op=op: getattr(torch, op)(t(d, 3), t(d, 4)))
INPLACE = ["add_", "sub_", "mul_", "div_", "pow_", "fmod_", "remainder_", "clamp_min_", "clamp_max_", "copysign_",
           "atan2_", "hypot_", "lerp_", "addcmul_", "addcdiv_", "masked_fill_", "fill_", "copy_", "maximum", "logaddexp"]
for op in INPLACE[:15]:
    case(f"{op}: in place into a smaller tensor",
         lambda d, op=op: getattr(t(d, 3), op)(t(d, 2, 3)) if op not in ("lerp_",)
         else t(d, 3).lerp_(t(d, 2, 3), 0.5))
case("addcmul_: shapes", lambda d: t(d, 3).addcmul_(t(d, 4), t(d, 4)))
case("addcdiv_: shapes", lambda d: t(d, 3).addcdiv_(t(d, 4), t(d, 4)))
case("where: shapes", lambda d: torch.where(t(d, 3, dtype=torch.bool), t(d, 4), t(d, 3)))
case("lerp: shapes", lambda d: torch.lerp(t(d, 3), t(d, 4), 0.5))
case("clamp: tensor bound shape", lambda d: torch.clamp(t(d, 3), min=t(d, 4)))

# -- out= of a dtype the result cannot be cast to ----------------------------
for op in ["add", "sub", "mul", "div", "maximum", "minimum", "atan2", "sin", "exp", "sqrt", "sigmoid", "tanh"]:
    args = (2,) if op in ("sin", "exp", "sqrt", "sigmoid", "tanh") else (2, 2)

    def out_int(d, op=op, args=args):
        ins = [t(d, 3) * 1.5 for _ in args]
        return getattr(torch, op)(*ins, out=torch.empty(3, dtype=torch.long, device=d))
    case(f"{op}: float result into an int64 out=", out_int)
case("mm: out= of the wrong dtype", lambda d: torch.mm(t(d, 2, 2), t(d, 2, 2), out=torch.empty(2, 2, dtype=torch.long, device=d)))
case("cat: out= of the wrong dtype", lambda d: torch.cat([t(d, 2), t(d, 2)], out=torch.empty(4, dtype=torch.bool, device=d)))

# -- dimensions out of range -------------------------------------------------
DIM_OPS = {
    "sum": lambda x: x.sum(5), "mean": lambda x: x.mean(5), "amax": lambda x: x.amax(5), "amin": lambda x: x.amin(5),
    "prod": lambda x: x.prod(5), "std": lambda x: x.std(5), "var": lambda x: x.var(5), "norm": lambda x: x.norm(dim=5),
    "logsumexp": lambda x: x.logsumexp(5), "softmax": lambda x: x.softmax(5), "log_softmax": lambda x: x.log_softmax(5),
    "cumsum": lambda x: x.cumsum(5), "cumprod": lambda x: x.cumprod(5), "argmax": lambda x: x.argmax(5),
    "argmin": lambda x: x.argmin(5), "sort": lambda x: x.sort(5), "argsort": lambda x: x.argsort(5),
    "topk": lambda x: x.topk(1, 5), "flip": lambda x: x.flip(5), "unsqueeze": lambda x: x.unsqueeze(5),
    "squeeze": lambda x: x.squeeze(5), "transpose": lambda x: x.transpose(0, 5), "narrow": lambda x: x.narrow(5, 0, 1),
    "select": lambda x: x.select(5, 0), "cat": lambda x: torch.cat([x, x], 5), "stack": lambda x: torch.stack([x, x], 6),
    "chunk": lambda x: x.chunk(2, 5), "split": lambda x: x.split(1, 5), "roll": lambda x: x.roll(1, 5),
    "cummax": lambda x: x.cummax(5), "max": lambda x: x.max(5), "min": lambda x: x.min(5), "median": lambda x: x.median(5),
    "mode": lambda x: x.mode(5), "kthvalue": lambda x: x.kthvalue(1, 5), "any": lambda x: x.any(5), "all": lambda x: x.all(5),
    "count_nonzero": lambda x: x.count_nonzero(5), "index_select": lambda x: x.index_select(5, torch.zeros(1, dtype=torch.long, device=x.device)),
    "movedim": lambda x: x.movedim(0, 5), "diff": lambda x: x.diff(dim=5), "unbind": lambda x: x.unbind(5),
    "gather": lambda x: x.gather(5, torch.zeros(2, 3, dtype=torch.long, device=x.device)),
    "nansum": lambda x: x.nansum(5), "logcumsumexp": lambda x: x.logcumsumexp(5), "unflatten": lambda x: x.unflatten(5, (1, 3)),
}
for name, f in DIM_OPS.items():
    case(f"{name}: dim 5 of a 2-d tensor", lambda d, f=f: f(t(d, 2, 3)))

# -- indices out of range (device-side checks on tpu) ------------------------
case("index_select: index 5 of 3", lambda d: t(d, 3).index_select(0, idx(d, 5)))
case("index_select: index -4 of 3", lambda d: t(d, 3).index_select(0, idx(d, -4)))
case("gather: index 5 of 3", lambda d: t(d, 3).gather(0, idx(d, 5)))
case("gather: negative index", lambda d: t(d, 3).gather(0, idx(d, -1)))
case("scatter: index 5 of 3", lambda d: t(d, 3).scatter(0, idx(d, 5), 1.0))
case("scatter_add: index 5 of 3", lambda d: t(d, 3).scatter_add(0, idx(d, 5), t(d, 1)))
case("scatter_reduce: index 5 of 3", lambda d: t(d, 3).scatter_reduce(0, idx(d, 5), t(d, 1), "amax"))
case("take: index 5 of 3", lambda d: t(d, 3).take(idx(d, 5)))
case("embedding: index 5 of 3", lambda d: F.embedding(idx(d, 5), t(d, 3, 2)))
case("advanced index: 5 of 3", lambda d: t(d, 3)[idx(d, 5)])
case("advanced index: -4 of 3", lambda d: t(d, 3)[idx(d, -4)])
case("index_put_: 5 of 3", lambda d: t(d, 3).index_put_((idx(d, 5),), t(d, 1)))
case("setitem: 5 of 3", lambda d: t(d, 3).__setitem__(idx(d, 5), 2.0))
case("index_add: 5 of 3", lambda d: t(d, 3).index_add(0, idx(d, 5), t(d, 1)))
case("index_copy: 5 of 3", lambda d: t(d, 3).index_copy(0, idx(d, 5), t(d, 1)))
# Negative entries: CPU wraps them for index_fill only (index_add along the
# first or last of several dims raises a RuntimeError, elsewhere IndexError).
case("index_select: -1", lambda d: t(d, 3).index_select(0, idx(d, -1)))
case("embedding: -1", lambda d: F.embedding(idx(d, -1), t(d, 5, 2)))
case("index_copy: -1", lambda d: t(d, 3).index_copy(0, idx(d, -1), t(d, 1)))
case("index_copy: -1 along dim 1", lambda d: t(d, 2, 3).index_copy(1, idx(d, -1), t(d, 2, 1)))
case("index_add: -1", lambda d: t(d, 3).index_add(0, idx(d, -1), t(d, 1)))
case("index_add: -1 along the first dim", lambda d: t(d, 3, 2).index_add(0, idx(d, -1), t(d, 1, 2)))
case("index_add: -1 along the last dim", lambda d: t(d, 3, 2).index_add(1, idx(d, -1), t(d, 3, 1)))
case("index_add: -1 along a middle dim", lambda d: t(d, 2, 3, 2).index_add(1, idx(d, -1), t(d, 2, 1, 2)))
case("index_fill: 3 of 3", lambda d: t(d, 3).index_fill(0, idx(d, 3), 1.0))
case("index_fill: 5 of 3", lambda d: t(d, 3).index_fill(0, idx(d, 5), 1.0))
case("put_: 5 of 3", lambda d: t(d, 3).put_(idx(d, 5), t(d, 1)))
case("nll_loss: target 5 of 3 classes", lambda d: F.nll_loss(t(d, 2, 3), idx(d, 0, 5)))
case("cross_entropy: target 5 of 3 classes", lambda d: F.cross_entropy(t(d, 2, 3), idx(d, 0, 5)))
case("one_hot: negative class", lambda d: F.one_hot(idx(d, -1), 3))
case("one_hot: class 3 of 3", lambda d: F.one_hot(idx(d, 3), 3))
case("select: index 3 of 3", lambda d: t(d, 3).select(0, 3))
case("narrow: past the end", lambda d: t(d, 3).narrow(0, 2, 2))
case("integer index 3 of 3", lambda d: t(d, 3)[3])
case("kthvalue: k 4 of 3", lambda d: t(d, 3).kthvalue(4))
case("topk: k 5 of 3", lambda d: t(d, 3).topk(5))

# -- index, mask and condition dtypes ----------------------------------------
case("index_select: float index", lambda d: t(d, 3).index_select(0, t(d, 1)))
case("gather: float index", lambda d: t(d, 3).gather(0, t(d, 1)))
case("scatter: float index", lambda d: t(d, 3).scatter(0, t(d, 1), 1.0))
case("take: float index", lambda d: t(d, 3).take(t(d, 1)))
case("index_put_: float index", lambda d: t(d, 3).index_put_((t(d, 1),), t(d, 1)))
case("embedding: float index", lambda d: F.embedding(t(d, 2), t(d, 3, 2)))
# Values of another dtype: CPU refuses them in every index_put variant.
case("index_put_: int64 values into float", lambda d: t(d, 3).index_put_((idx(d, 1),), idx(d, 1)))
case("index_put_: float64 values into float, accumulate",
     lambda d: t(d, 3).index_put_((idx(d, 1),), t(d, 1, dtype=torch.float64), accumulate=True))
case("index_put: float values into int64", lambda d: t(d, 3, dtype=torch.int64).index_put((idx(d, 1),), t(d, 1)))
case("setitem: a tensor of another dtype", lambda d: t(d, 3).__setitem__(idx(d, 0, 2), idx(d, 1, 2)))
case("setitem through a mask: a tensor of another dtype", lambda d: t(d, 3).__setitem__(t(d, 3) > 0, idx(d, 1, 2, 3)))
case("_unsafe_index_put: another dtype", lambda d: torch.ops.aten._unsafe_index_put(t(d, 3), [idx(d, 1)], idx(d, 1), False))
case("index_put_ into an expanded tensor: another dtype",
     lambda d: t(d, 3).expand(2, 3).index_put_((idx(d, 1),), idx(d, 1, 2, 3)))
case("masked_fill: float mask", lambda d: t(d, 3).masked_fill(t(d, 3), 1.0))
case("masked_select: float mask", lambda d: t(d, 3).masked_select(t(d, 3)))
case("masked_scatter: float mask", lambda d: t(d, 3).masked_scatter(t(d, 3), t(d, 3)))
case("where: float condition", lambda d: torch.where(t(d, 3), t(d, 3), t(d, 3)))
case("index_add: float index", lambda d: t(d, 3).index_add(0, t(d, 1), t(d, 1)))
case("index_add: source dtype", lambda d: t(d, 3).index_add(0, idx(d, 0), t(d, 1, dtype=torch.float64)))
case("scatter_add: source dtype", lambda d: t(d, 3).scatter_add(0, idx(d, 0), t(d, 1, dtype=torch.float64)))
case("nll_loss: float target", lambda d: F.nll_loss(t(d, 2, 3), t(d, 2)))

# -- tensors on two devices --------------------------------------------------
MIXED = {
    "add": lambda a, b: a + b, "mul": lambda a, b: a * b, "matmul": lambda a, b: a.reshape(1, 3) @ b.reshape(3, 1),
    "cat": lambda a, b: torch.cat([a, b]), "stack": lambda a, b: torch.stack([a, b]),
    "where": lambda a, b: torch.where(a > 0, a, b), "maximum": torch.maximum, "eq": torch.eq,
    "index_select": lambda a, b: a.index_select(0, b.long()), "add_": lambda a, b: a.add_(b),
    "lerp": lambda a, b: torch.lerp(a, b, 0.5), "dot": torch.dot,
}
for name, f in MIXED.items():
    case(f"{name}: a tpu and a CPU tensor", lambda d, f=f: f(t(d, 3), torch.zeros(3)), expected=RuntimeError)

# -- overlapping writes ------------------------------------------------------
case("cat: out= is an input", lambda d: (lambda x: torch.cat([x, x], out=x))(t(d, 2)))
case("stack: out= is an input", lambda d: (lambda x: torch.stack([x, x], out=x))(t(d, 2)))
case("index_select: out= is self", lambda d: (lambda x: torch.index_select(x, 0, idx(d, 0, 1), out=x))(t(d, 2)))
case("add: out= partly overlaps an input", lambda d: (lambda x: torch.add(x[:3], x[1:], out=x[1:]))(t(d, 4)))
case("add_: into an expanded tensor", lambda d: t(d, 1).expand(3).add_(1))
case("mul_: into an expanded tensor", lambda d: t(d, 1).expand(3).mul_(t(d, 3)))
case("masked_select: out= is self", lambda d: (lambda x: torch.masked_select(x, x > 0, out=x))(t(d, 2)))
case("gather: out= is self", lambda d: (lambda x: torch.gather(x, 0, idx(d, 0, 1), out=x))(t(d, 2)))

# -- integer division by zero (raised at the next wait on tpu) ---------------
for name, f in {
    "div floor": lambda a, b: torch.div(a, b, rounding_mode="floor"),
    "div trunc": lambda a, b: torch.div(a, b, rounding_mode="trunc"),
    "remainder": torch.remainder, "fmod": torch.fmod, "floor_divide": torch.floor_divide,
    "// operator": lambda a, b: a // b, "% operator": lambda a, b: a % b,
    "remainder_": lambda a, b: a.remainder_(b),
}.items():
    for dt in (torch.int64, torch.int32):
        case(f"{name}: {dt} by zero", lambda d, f=f, dt=dt: f(torch.tensor([3, 4], dtype=dt, device=d),
                                                            torch.tensor([1, 0], dtype=dt, device=d)))
case("floor_divide_: by a zero scalar", lambda d: torch.tensor([3], device=d).floor_divide_(0))

# -- huge and negative sizes -------------------------------------------------
SIZES = {
    "empty(-1)": lambda d: torch.empty(-1, device=d), "zeros(-2)": lambda d: torch.zeros(-2, device=d),
    "ones(3, -1)": lambda d: torch.ones(3, -1, device=d), "full(-1)": lambda d: torch.full((-1,), 1.0, device=d),
    "randn(-1)": lambda d: torch.randn(-1, device=d), "rand(2, -3)": lambda d: torch.rand(2, -3, device=d),
    "randint(-1)": lambda d: torch.randint(0, 5, (-1,), device=d),
    "empty: overflowing numel": lambda d: torch.empty(2**62, 2**62, device=d),
    "arange: step 0": lambda d: torch.arange(0, 5, 0, device=d),
    "arange: wrong sign": lambda d: torch.arange(0, 5, -1, device=d),
    "linspace: negative steps": lambda d: torch.linspace(0, 1, -1, device=d),
    "logspace: negative steps": lambda d: torch.logspace(0, 1, -2, device=d),
    "randint: low >= high": lambda d: torch.randint(5, 5, (2,), device=d),
    "randperm(-1)": lambda d: torch.randperm(-1, device=d),
    "eye(-1)": lambda d: torch.eye(-1, device=d),
    "view: two -1": lambda d: t(d, 6).view(-1, -1), "view: wrong numel": lambda d: t(d, 6).view(4, 2),
    "reshape: -2": lambda d: t(d, 6).reshape(-2, 3), "expand: -2": lambda d: t(d, 1).expand(-2),
    "expand: 2 to 3": lambda d: t(d, 2).expand(3), "repeat: fewer dims": lambda d: t(d, 2, 2).repeat(2),
    "new_empty(-1)": lambda d: t(d, 2).new_empty(-1), "resize_(-1)": lambda d: t(d, 2).resize_(-1),
    "unfold: step 0": lambda d: t(d, 4).unfold(0, 2, 0), "unfold: size 5 of 4": lambda d: t(d, 4).unfold(0, 5, 1),
    "split: size 0": lambda d: t(d, 4).split(0), "chunk: 0 chunks": lambda d: t(d, 4).chunk(0),
    "tril_indices: negative": lambda d: torch.tril_indices(-1, 3, device=d),
    "view: non-contiguous": lambda d: t(d, 2, 3).t().view(6),
    "unflatten: sizes": lambda d: t(d, 6).unflatten(0, (4, 2)),
    "as_strided: negative stride": lambda d: t(d, 4).as_strided((2,), (-1,)),
    "F.pad: negative past the size": lambda d: F.pad(t(d, 3), (-2, -2)),
}
for name, f in SIZES.items():
    case(name, f)

# -- invalid probabilities ---------------------------------------------------
PROB = {
    "multinomial: negative": lambda d: torch.multinomial(torch.tensor([0.5, -0.1], device=d), 1),
    "multinomial: zero sum": lambda d: torch.multinomial(torch.zeros(2, device=d), 1),
    "multinomial: nan": lambda d: torch.multinomial(torch.tensor([float("nan"), 1.0], device=d), 1),
    "multinomial: inf": lambda d: torch.multinomial(torch.tensor([float("inf"), 1.0], device=d), 1),
    "multinomial: more than categories without replacement": lambda d: torch.multinomial(t(d, 2), 3),
    "multinomial: 0 samples": lambda d: torch.multinomial(t(d, 2), 0),
    "multinomial: 3-d": lambda d: torch.multinomial(t(d, 2, 2, 2), 1),
    "multinomial: integer weights": lambda d: torch.multinomial(t(d, 2, dtype=torch.long), 1),
    "bernoulli: p > 1": lambda d: torch.bernoulli(torch.tensor([1.5], device=d)),
    "bernoulli: p < 0": lambda d: torch.bernoulli(torch.tensor([-0.5], device=d)),
    "bernoulli: nan": lambda d: torch.bernoulli(torch.tensor([float("nan")], device=d)),
    "bernoulli_: float p 2": lambda d: t(d, 2).bernoulli_(2.0),
    "bernoulli_: tensor p": lambda d: t(d, 2).bernoulli_(torch.tensor([1.5, 0.5], device=d)),
    "dropout: p 1.5": lambda d: F.dropout(t(d, 3), 1.5),
    "dropout: p -0.1": lambda d: F.dropout(t(d, 3), -0.1),
    "normal: negative std": lambda d: torch.normal(torch.zeros(2, device=d), -1.0),
    "normal_: negative std": lambda d: t(d, 2).normal_(0, -1),
    "uniform_: from > to": lambda d: t(d, 2).uniform_(2, 1),
    "exponential_: negative rate": lambda d: t(d, 2).exponential_(-1),
    "geometric_: p 0": lambda d: t(d, 2).geometric_(0),
    "random_: from >= to": lambda d: t(d, 2).random_(5, 5),
    "histc: min > max": lambda d: torch.histc(t(d, 3), bins=4, min=3, max=1),
    "histc: 0 bins": lambda d: torch.histc(t(d, 3), bins=0),
}
for name, f in PROB.items():
    case(name, f)

# -- dtypes an op does not take ----------------------------------------------
DTYPES = {
    "matmul: bool": lambda d: t(d, 2, 2, dtype=torch.bool) @ t(d, 2, 2, dtype=torch.bool),
    "bmm: bool": lambda d: torch.bmm(t(d, 1, 2, 2, dtype=torch.bool), t(d, 1, 2, 2, dtype=torch.bool)),
    "dot: bool": lambda d: torch.dot(t(d, 2, dtype=torch.bool), t(d, 2, dtype=torch.bool)),
    "mm: dtypes differ": lambda d: torch.mm(t(d, 2, 2), t(d, 2, 2, dtype=torch.float64)),
    "argmax: bool": lambda d: t(d, 2, dtype=torch.bool).argmax(),
    "argmin: bool": lambda d: t(d, 2, dtype=torch.bool).argmin(),
    "lerp: int64": lambda d: torch.lerp(t(d, 2, dtype=torch.long), t(d, 2, dtype=torch.long), 0.5),
    "lerp: int64 weight tensor": lambda d: torch.lerp(t(d, 2, dtype=torch.long), t(d, 2, dtype=torch.long), t(d, 2, dtype=torch.long)),
    "softmax: int64": lambda d: torch.softmax(t(d, 3, dtype=torch.long), 0),
    "log_softmax: int64": lambda d: torch.log_softmax(t(d, 3, dtype=torch.long), 0),
    "nll_loss: int64 input": lambda d: F.nll_loss(t(d, 2, 3, dtype=torch.long), idx(d, 0, 1)),
    "bitwise_and: float": lambda d: t(d, 2) & t(d, 2),
    "bitwise_not: float": lambda d: ~t(d, 2),
    "shift: float": lambda d: t(d, 2) << 1,
    "pow: int to a negative int": lambda d: t(d, 2, dtype=torch.long) ** -1,
    "pow: int to -2": lambda d: torch.pow(t(d, 2, dtype=torch.int32), -2),
    "div_: int in place true division": lambda d: t(d, 2, dtype=torch.long).div_(2),
    "addcdiv: int": lambda d: torch.addcdiv(t(d, 2, dtype=torch.long), t(d, 2, dtype=torch.long), t(d, 2, dtype=torch.long)),
    "sub: bool": lambda d: t(d, 2, dtype=torch.bool) - t(d, 2, dtype=torch.bool),
    "neg: bool": lambda d: -t(d, 2, dtype=torch.bool),
    "mean: int64": lambda d: t(d, 2, dtype=torch.long).mean(),
    "std: int64": lambda d: t(d, 2, dtype=torch.long).std(),
    "histc: bool": lambda d: torch.histc(t(d, 2, dtype=torch.bool)),
    "cholesky: int64": lambda d: torch.linalg.cholesky(t(d, 2, 2, dtype=torch.long)),
    "inverse: int64": lambda d: torch.linalg.inv(t(d, 2, 2, dtype=torch.long)),
    "conv2d: dtypes differ": lambda d: F.conv2d(t(d, 1, 1, 3, 3), t(d, 1, 1, 2, 2, dtype=torch.float64)),
    "linear: dtypes differ": lambda d: F.linear(t(d, 2, 3), t(d, 4, 3, dtype=torch.float64)),
    "embedding: int weight index bool": lambda d: F.embedding(t(d, 2, dtype=torch.bool), t(d, 3, 2)),
    "sqrt_: int in place": lambda d: t(d, 2, dtype=torch.long).sqrt_(),
}
for name, f in DTYPES.items():
    case(name, f)

# -- layers and linear algebra given the wrong shapes ------------------------
LAYERS = {
    "mm: shapes": lambda d: t(d, 2, 3) @ t(d, 2, 3),
    "bmm: batch differs": lambda d: torch.bmm(t(d, 2, 2, 3), t(d, 3, 3, 2)),
    "mv: shapes": lambda d: torch.mv(t(d, 2, 3), t(d, 2)),
    "dot: lengths": lambda d: torch.dot(t(d, 2), t(d, 3)),
    "baddbmm: shapes": lambda d: torch.baddbmm(t(d, 2, 2, 2), t(d, 2, 2, 3), t(d, 2, 2, 2)),
    "addmm: shapes": lambda d: torch.addmm(t(d, 2, 2), t(d, 2, 3), t(d, 2, 2)),
    "linear: in features": lambda d: F.linear(t(d, 2, 3), t(d, 4, 5)),
    "conv2d: channels": lambda d: F.conv2d(t(d, 1, 3, 4, 4), t(d, 2, 2, 3, 3)),
    "conv2d: kernel larger than input": lambda d: F.conv2d(t(d, 1, 1, 2, 2), t(d, 1, 1, 3, 3)),
    "conv1d: 4-d input": lambda d: F.conv1d(t(d, 1, 1, 3, 3), t(d, 1, 1, 2)),
    "conv_transpose2d: channels": lambda d: F.conv_transpose2d(t(d, 1, 3, 4, 4), t(d, 2, 2, 3, 3)),
    "max_pool2d: kernel larger than input": lambda d: F.max_pool2d(t(d, 1, 1, 2, 2), 3),
    "avg_pool2d: padding too large": lambda d: F.avg_pool2d(t(d, 1, 1, 4, 4), 2, padding=2),
    "adaptive_avg_pool2d: negative output": lambda d: F.adaptive_avg_pool2d(t(d, 1, 1, 4, 4), -1),
    "layer_norm: normalized shape": lambda d: F.layer_norm(t(d, 2, 3), (4,)),
    "group_norm: groups do not divide": lambda d: F.group_norm(t(d, 2, 3, 4), 2),
    "batch_norm: running stats size": lambda d: F.batch_norm(t(d, 2, 3), t(d, 4), t(d, 4)),
    "instance_norm: 1-d": lambda d: F.instance_norm(t(d, 3)),
    "embedding: 1-d weight": lambda d: F.embedding(idx(d, 0), t(d, 3)),
    "cross_entropy: batch sizes": lambda d: F.cross_entropy(t(d, 2, 3), idx(d, 0, 1, 2)),
    "mse_loss: shapes do not broadcast": lambda d: F.mse_loss(t(d, 2, 3), t(d, 4)),
    "binary_cross_entropy: input > 1": lambda d: F.binary_cross_entropy(t(d, 2) * 2, t(d, 2)),
    "kl_div: shapes": lambda d: F.kl_div(t(d, 2, 3), t(d, 4)),
    "interpolate: no size": lambda d: F.interpolate(t(d, 1, 1, 4)),
    "interpolate: 2-d input for bilinear": lambda d: F.interpolate(t(d, 1, 4), size=8, mode="bilinear"),
    "pixel_shuffle: channels": lambda d: F.pixel_shuffle(t(d, 1, 3, 2, 2), 2),
    "pixel_shuffle: 2-d input": lambda d: F.pixel_shuffle(t(d, 4, 2), 2),
    "pixel_shuffle: factor 0": lambda d: F.pixel_shuffle(t(d, 1, 4, 2, 2), 0),
    "pixel_unshuffle: height": lambda d: F.pixel_unshuffle(t(d, 1, 1, 3, 4), 2),
    "pixel_unshuffle: width": lambda d: F.pixel_unshuffle(t(d, 1, 1, 4, 3), 2),
    "pixel_unshuffle: negative factor": lambda d: F.pixel_unshuffle(t(d, 1, 1, 4, 4), -2),
    "unfold (im2col): 3-d kernel": lambda d: F.unfold(t(d, 1, 1, 4, 4), (2, 2, 2)),
    "grid_sample: grid shape": lambda d: F.grid_sample(t(d, 1, 1, 4, 4), t(d, 1, 2, 2, 3), align_corners=False),
    "cholesky: not square": lambda d: torch.linalg.cholesky(t(d, 2, 3)),
    "inv: not square": lambda d: torch.linalg.inv(t(d, 2, 3)),
    "det: not square": lambda d: torch.linalg.det(t(d, 2, 3)),
    "solve: shapes": lambda d: torch.linalg.solve(t(d, 3, 3), t(d, 2)),
    "qr: 1-d": lambda d: torch.linalg.qr(t(d, 3)),
    "eigh: not square": lambda d: torch.linalg.eigh(t(d, 2, 3)),
    "diag: 3-d": lambda d: torch.diag(t(d, 2, 2, 2)),
    "tril: 1-d": lambda d: torch.tril(t(d, 3)),
    "trace: 3-d": lambda d: torch.trace(t(d, 2, 2, 2)),
    "cross: no dim of size 3": lambda d: torch.linalg.cross(t(d, 2, 2), t(d, 2, 2)),
    "roll: shifts and dims differ": lambda d: t(d, 3).roll((1, 2), (0,)),
    "permute: repeated dim": lambda d: t(d, 2, 3).permute(0, 0),
    "flatten: start after end": lambda d: t(d, 2, 3, 4).flatten(2, 1),
    "scaled_dot_product_attention: head dims": lambda d: F.scaled_dot_product_attention(t(d, 1, 2, 4), t(d, 1, 2, 3), t(d, 1, 2, 3)),
    "clamp: no bound": lambda d: torch.clamp(t(d, 2)),
    "tensordot: dims": lambda d: torch.tensordot(t(d, 2, 3), t(d, 4, 5), dims=([1], [0])),
    "einsum: shapes": lambda d: torch.einsum("ij,jk->ik", t(d, 2, 3), t(d, 4, 5)),
    "broadcast_to: 3 to 2": lambda d: torch.broadcast_to(t(d, 3), (2,)),
    "index_put_: too many indices": lambda d: t(d, 3).index_put_((idx(d, 0), idx(d, 0)), t(d, 1)),
    "too many indices": lambda d: t(d, 3)[0, 0],
    "repeat_interleave: repeats length": lambda d: t(d, 3).repeat_interleave(idx(d, 1, 2)),
    "ctc_loss: target longer than allowed": lambda d: F.ctc_loss(t(d, 4, 1, 3).log_softmax(2), idx(d, 1, 1, 1, 1, 1).view(1, 5), idx(d, 4), idx(d, 6)),
}
for name, f in LAYERS.items():
    case(name, f)

# -- accepted on tpu where CPU raises (issue 49) ------------------------------
case("masked_fill_: float mask", lambda d: t(d, 3).masked_fill_(t(d, 3), 0.0))
for mname, mdtype in {"int64": torch.int64, "uint8": torch.uint8}.items():
    case(f"masked_fill_: {mname} mask", lambda d, m=mdtype: t(d, 3).masked_fill_(t(d, 3, dtype=m), 0.0))
    case(f"masked_fill: {mname} mask", lambda d, m=mdtype: t(d, 3).masked_fill(t(d, 3, dtype=m), 0.0))
    case(f"masked_scatter: {mname} mask", lambda d, m=mdtype: t(d, 3).masked_scatter(t(d, 3, dtype=m), t(d, 3)))
    case(f"masked_select: {mname} mask", lambda d, m=mdtype: t(d, 3).masked_select(t(d, 3, dtype=m)))
# (CPU's where takes a uint8 condition, with a deprecation warning)
case("where: int64 condition", lambda d: torch.where(t(d, 3, dtype=torch.int64), t(d, 3), t(d, 3)))
for what, value in {"nan": float("nan"), "inf": float("inf"), "-inf": float("-inf")}.items():
    case(f"histc: data holding {what}, range from the data",
         lambda d, v=value: torch.histc(torch.tensor([1.0, v, 2.0], device=d), bins=4))
    case(f"histogram: data holding {what}, range from the data",
         lambda d, v=value: torch.histogram(torch.tensor([1.0, v, 2.0], device=d), 4))
case("histc: range to inf", lambda d: torch.histc(t(d, 3), bins=4, min=0, max=float("inf")))
case("sub: bool tensor minus an int", lambda d: t(d, 3, dtype=torch.bool) - 1)
case("rsub: an int minus a bool tensor", lambda d: 1 - t(d, 3, dtype=torch.bool))
case("fill_: 300 into uint8", lambda d: t(d, 3, dtype=torch.uint8).fill_(300))
case("clamp: max 2**31 of int32", lambda d: t(d, 3, dtype=torch.int32).clamp(max=2**31))
case("amax: out= of another dtype", lambda d: torch.amax(t(d, 2, 3), 0, out=torch.empty(0, dtype=torch.float64, device=d)))
case("all: out= of a float dtype", lambda d: torch.all(t(d, 2, 3), 0, out=torch.empty(0, device=d)))
case("sort: indices out= of int32", lambda d: torch.sort(t(d, 3), out=(t(d, 3), torch.empty(0, dtype=torch.int32, device=d))))


def _run(fn, device):
    """Returns the exception the call raised (after the device finished the
    work), or None."""
    try:
        out = fn(device)
        if device == "tpu":
            torch.tpu.synchronize()
            for o in (out if isinstance(out, (tuple, list)) else [out]):
                if isinstance(o, torch.Tensor) and o.device.type == "tpu":
                    o.cpu()
    except Exception as e:  # noqa: BLE001
        return e
    return None


def test_corpus_is_large():
    assert len(CASES) >= 250, len(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_input(name):
    fn = CASES[name]
    if name in EXPECTED:
        cpu = EXPECTED[name]("(two devices)")
    else:
        cpu = _run(fn, "cpu")
    assert cpu is not None, f"{name}: not an invalid call on CPU (the corpus entry is wrong)"
    # An unrelated tensor with work pending on the device before the call.
    bystander = torch.arange(6.0, device="tpu") * 2 + 1
    tpu = _run(fn, "tpu")
    assert tpu is not None, f"{name}: tpu accepted a call CPU rejects ({type(cpu).__name__}: {cpu})"
    assert type(tpu) is type(cpu), (
        f"{name}: tpu raised {type(tpu).__name__}: {tpu}\n  CPU raised {type(cpu).__name__}: {cpu}")
    assert "PJRT" not in str(tpu) and "stablehlo" not in str(tpu), f"{name}: compiler text reached the user: {tpu}"
    assert torch.equal(bystander.cpu(), torch.arange(6.0) * 2 + 1), f"{name}: the error spread to other tensors"
    # The device still works.
    assert (torch.ones(2, device="tpu") + 1).cpu().tolist() == [2.0, 2.0]


# -- issue 49: value checks, out= dtypes, large Python ints -------------------
# Each call must have CPU's outcome: the same exception type and message (a
# fragment for the device-side checks, whose message cannot hold the data's
# values), or the same values and dtypes.

def _outcome(fn, device):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            out = fn(device)
            outs = out if isinstance(out, (tuple, list)) else [out]
            return ("ok", [o.cpu() if isinstance(o, torch.Tensor) else o for o in outs])
        except Exception as e:  # noqa: BLE001  (type and message are compared)
            return (type(e), str(e))


def _as_on_cpu(fn, fragment=None, what=""):
    cpu, tpu = _outcome(fn, "cpu"), _outcome(fn, "tpu")
    assert cpu[0] == tpu[0], f"{what}\nCPU: {cpu}\ntpu: {tpu}"
    if cpu[0] != "ok":
        want = fragment if fragment is not None else cpu[1].split("\n")[0]
        assert want in tpu[1], f"{what}\nCPU: {cpu[1]}\ntpu: {tpu[1]}"
        return
    for got, want in zip(tpu[1], cpu[1]):
        if isinstance(want, torch.Tensor):
            assert got.dtype == want.dtype and got.shape == want.shape, (what, got, want)
            torch.testing.assert_close(got, want, equal_nan=True, rtol=1e-3, atol=1e-3, msg=lambda m: f"{what}: {m}")
        else:
            assert got == want, what


@pytest.mark.parametrize("mask_dtype", [torch.bool, torch.uint8, torch.int64, torch.float32], ids=str)
@pytest.mark.parametrize("shape", [(4,), (2, 3)], ids=str)
def test_masks_must_be_bool_as_on_cpu(mask_dtype, shape):
    """masked_fill(_), masked_scatter(_), masked_select and where take a
    bool mask (where also uint8, deprecated) and refuse others with CPU's
    message; a mask that broadcasts works as on CPU."""
    def x(d):
        return torch.arange(float(torch.Size(shape).numel()), device=d).view(shape)

    def m(d):
        return (torch.arange(shape[-1], device=d) % 2).to(mask_dtype)

    _as_on_cpu(lambda d: x(d).masked_fill_(m(d), -1.0))
    _as_on_cpu(lambda d: x(d).masked_fill(m(d), -1.0))
    _as_on_cpu(lambda d: x(d).masked_fill(m(d), torch.tensor(-1.0, device=d)))
    _as_on_cpu(lambda d: x(d).masked_scatter(m(d), -x(d)))
    _as_on_cpu(lambda d: x(d).masked_scatter_(m(d), -x(d)))
    _as_on_cpu(lambda d: x(d).masked_select(m(d)))
    _as_on_cpu(lambda d: torch.where(m(d), x(d), -x(d)))
    _as_on_cpu(lambda d: torch.where(m(d), x(d), 0.5))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_histc_of_data_holding_inf_or_nan_raises_as_on_cpu(dtype):
    """histc and histogram take their range from the data when none is
    given: data holding inf or NaN is CPU's RuntimeError, checked on the
    device (raised by the read of the result, without a wait in the call);
    an explicit range counts the finite values; an infinite range, or min >
    max, is refused at the call."""
    for bad in (float("nan"), float("inf"), float("-inf")):
        for shape in [(5,), (2, 3)]:
            def data(d, bad=bad, shape=shape):
                v = torch.linspace(-1, 1, torch.Size(shape).numel(), dtype=dtype)
                v[1] = bad
                return v.view(shape).to(d)

            bystander = torch.arange(4.0, device="tpu") + 1
            x = data("tpu")
            with pytest.raises(RuntimeError, match="is not finite"):  # (debug eager: at the call)
                before = torch_tpu.counters()["host_reads"]
                h = torch.histc(x, bins=4)
                assert torch_tpu.counters()["host_reads"] == before, "histc waited for the device"
                h.cpu()
            assert bystander.cpu().tolist() == [1.0, 2.0, 3.0, 4.0]
            _as_on_cpu(lambda d, data=data: torch.histc(data(d), bins=4), fragment="torch.histc: range of [")
            _as_on_cpu(lambda d, data=data: torch.histogram(data(d), 4)[0], fragment="is not finite")
            _as_on_cpu(lambda d, data=data: torch.histc(data(d), bins=3, min=-1, max=1))
            _as_on_cpu(lambda d, data=data: torch.histogram(data(d), 3, range=(-1.0, 1.0)))
    _as_on_cpu(lambda d: torch.histc(torch.ones(3, dtype=dtype, device=d), bins=4, min=0, max=float("inf")))
    _as_on_cpu(lambda d: torch.histc(torch.ones(3, dtype=dtype, device=d), bins=4, min=float("nan"), max=1))
    _as_on_cpu(lambda d: torch.histc(torch.ones(3, dtype=dtype, device=d), bins=4, min=2, max=1))
    _as_on_cpu(lambda d: torch.histogram(torch.ones(3, dtype=dtype, device=d), 4, range=(0.0, float("inf"))))
    _as_on_cpu(lambda d: torch.histc(torch.tensor([], dtype=dtype, device=d), bins=4))
    assert torch.histc(torch.tensor([1.0, 2.0], device="tpu"), bins=2).cpu().tolist() == [1.0, 1.0]


_OUT_IN_DTYPES = [torch.float32, torch.int64, torch.uint8, torch.bool]
_OUT_DTYPES = [torch.float32, torch.float64, torch.float16, torch.int64, torch.int32, torch.uint8, torch.bool]


def _e(d, dtype):
    return torch.empty(0, dtype=dtype, device=d)


OUT_REDUCTIONS = {
    # compute in the out tensor's dtype (torch.sum(x_float, 0, out=long) sums the values cast to int64)
    "sum": lambda x, o, d: torch.sum(x, 0, out=o),
    "sum keepdim": lambda x, o, d: torch.sum(x, (0, 1), keepdim=True, out=o),
    "sum with dtype": lambda x, o, d: torch.sum(x, 0, dtype=torch.float64, out=o),
    "prod": lambda x, o, d: torch.prod(x, 1, out=o),
    "mean": lambda x, o, d: torch.mean(x, 0, out=o),
    "mean with dtype": lambda x, o, d: torch.mean(x, 0, dtype=torch.float64, out=o),
    "nansum": lambda x, o, d: torch.nansum(x, 0, out=o),
    "cumsum": lambda x, o, d: torch.cumsum(x, 0, out=o),
    "cumsum with dtype": lambda x, o, d: torch.cumsum(x, 1, dtype=torch.float64, out=o),
    "cumprod": lambda x, o, d: torch.cumprod(x, 1, out=o),
    "logsumexp": lambda x, o, d: torch.logsumexp(x, 0, out=o),
    "var": lambda x, o, d: torch.var(x, 0, out=o),
    "all": lambda x, o, d: torch.all(x, 0, out=o),
    "any (all dims)": lambda x, o, d: torch.any(x, out=o),
    # refuse any dtype but the result's, each with CPU's message
    "sum (all dims)": lambda x, o, d: torch.ops.aten.sum.out(x, out=o),
    "amax": lambda x, o, d: torch.amax(x, 0, out=o),
    "aminmax": lambda x, o, d: torch.aminmax(x, dim=0, out=(o, _e(d, x.dtype)))[0],
    "max values": lambda x, o, d: torch.max(x, 0, out=(o, _e(d, torch.long)))[0],
    "max indices": lambda x, o, d: torch.max(x, 0, out=(_e(d, x.dtype), o))[1],
    "argmax": lambda x, o, d: torch.argmax(x, 0, out=o),
    "cummax values": lambda x, o, d: torch.cummax(x, 0, out=(o, _e(d, torch.long)))[0],
    "cummin indices": lambda x, o, d: torch.cummin(x, 0, out=(_e(d, x.dtype), o))[1],
    "logcumsumexp": lambda x, o, d: torch.logcumsumexp(x, 0, out=o),
    "sort values": lambda x, o, d: torch.sort(x, 1, out=(o, _e(d, torch.long)))[0],
    "topk indices": lambda x, o, d: torch.topk(x, 2, 1, out=(_e(d, x.dtype), o))[1],
    "kthvalue values": lambda x, o, d: torch.kthvalue(x, 1, 1, out=(o, _e(d, torch.long)))[0],
    "kthvalue indices": lambda x, o, d: torch.kthvalue(x, 1, 1, out=(_e(d, x.dtype), o))[1],
    "median values": lambda x, o, d: torch.median(x, 1, out=(o, _e(d, torch.long)))[0],
    "median indices": lambda x, o, d: torch.median(x, 1, out=(_e(d, x.dtype), o))[1],
    "mode values": lambda x, o, d: torch.mode(x, 1, out=(o, _e(d, torch.long)))[0],
    "histc": lambda x, o, d: torch.histc(x, 4, out=o),
    "count_nonzero": lambda x, o, d: torch.ops.aten.count_nonzero.dim_IntList_out(x, [0], out=o),
    "vector_norm": lambda x, o, d: torch.linalg.vector_norm(x, 2, 0, out=o),
    "std_mean": lambda x, o, d: torch.ops.aten.std_mean.correction_out(x, [0], out0=o, out1=_e(d, x.dtype))[0],
    "index_select": lambda x, o, d: torch.index_select(x, 0, torch.tensor([1, 0], device=d), out=o),
}


@pytest.mark.parametrize("name", sorted(OUT_REDUCTIONS))
def test_reductions_into_out_tensors_of_other_dtypes_follow_cpu(name):
    """out= of a dtype other than the result's: sum, prod, mean, nansum,
    cumsum and cumprod compute in it (values cast first), logsumexp, var and
    std cast into any floating one, all and any write bool or uint8; the
    rest (and a dtype= that differs from out's) raise CPU's error."""
    f = OUT_REDUCTIONS[name]
    for in_dtype in _OUT_IN_DTYPES:
        # (tpu takes integer histc and bool topk inputs, as CUDA does)
        if (name == "histc" and not in_dtype.is_floating_point) or (name.startswith("topk") and in_dtype == torch.bool):
            continue
        for out_dtype in _OUT_DTYPES:
            def call(d, in_dtype=in_dtype, out_dtype=out_dtype):
                x = torch.tensor([[1.5, -2.0, 0.0, 3.0], [2.5, 1.0, -0.5, 4.0], [0.5, 7.0, 2.0, -3.0]], device=d)
                return f(x.to(in_dtype), _e(d, out_dtype), d)

            _as_on_cpu(call, what=f"{name}: {in_dtype} into {out_dtype}")


# Ops on integer tensors with Python ints beyond the dtype's range: an
# operand (x + v) wraps into the tensor's dtype as on CPU (2**63 included,
# which PyTorch holds as an unsigned 64-bit int); a Scalar CPU's kernel
# converts with a range check (fill_, clamp, masked_fill, pow's exponent,
# add's alpha) raises its RuntimeError. Float tensors: a float beyond the
# dtype's range likewise.
LARGE_INTS = {
    "add_": lambda x, v, d: x.add_(v),
    "sub": lambda x, v, d: x - v,
    "rsub": lambda x, v, d: v - x,
    "mul": lambda x, v, d: x * v,
    "eq": lambda x, v, d: x == v,
    "bitwise_and": lambda x, v, d: x & v if not x.is_floating_point() else x,
    "floor_divide": lambda x, v, d: x // v if v != 0 else x,
    "fill_": lambda x, v, d: x.fill_(v),
    "full_like": lambda x, v, d: torch.full_like(x, v),
    "masked_fill": lambda x, v, d: x.masked_fill(x > 1, v),
    "index_fill": lambda x, v, d: x.index_fill(0, torch.tensor([0], device=d), v),
    "clamp": lambda x, v, d: x.clamp(max=v),
    "clamp_min": lambda x, v, d: x.clamp_min(v),
    "where": lambda x, v, d: torch.where(x > 1, x, v),
    "pow": lambda x, v, d: x.pow(v) if v >= 0 else x,
    "add alpha": lambda x, v, d: x.add(x, alpha=v),
    "sub alpha": lambda x, v, d: x.sub(x, alpha=v),
    "hardtanh": lambda x, v, d: F.hardtanh(x, 0, v) if v >= 0 else x,
    "threshold": lambda x, v, d: F.threshold(x, v, 1),
}


@pytest.mark.parametrize("name", sorted(LARGE_INTS))
def test_large_python_numbers_wrap_or_raise_as_on_cpu(name):
    f = LARGE_INTS[name]
    for dtype in [torch.int64, torch.int32, torch.uint8, torch.int8, torch.float16, torch.float32]:
        values = [2**63, 2**64 - 1, 2**63 - 1, -(2**63), 2**31, 300, -1, 7]
        if dtype.is_floating_point:
            values = [1e300, -1e300, 70000.0, 2**63, 7]
        for v in values:
            _as_on_cpu(lambda d, dtype=dtype, v=v: f(torch.tensor([3, 1, 0, 2], device=d).to(dtype), v, d),
                       what=f"{name}: {dtype} with {v}")


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8], ids=str)
def test_integer_pow_with_large_exponents_is_cpus(dtype):
    """x ** e wraps as repeated multiplication for every exponent (XLA's
    integer pow reads e's low 6 bits only: 2 ** 64 was 1, 0 ** 300 was 1)."""
    x = torch.tensor([0, 1, 2, 3, 5, -1, -2, -3]).to(dtype)
    for e in [0, 1, 2, 7, 31, 62, 63, 64, 65, 127, 128, 300, 2**31 - 1, 2**40 + 3]:
        _as_on_cpu(lambda d, e=e: x.to(d) ** e)
    exps = torch.tensor([0, 63, 64, 65, 300, 100, 3, 127]).to(dtype)
    _as_on_cpu(lambda d: x.to(d) ** exps.to(d))
    if dtype != torch.uint8:
        _as_on_cpu(lambda d: x.to(d) ** torch.full((8,), -3, dtype=dtype, device=d))


def test_record_stream_is_accepted_and_memory_stays_sound():
    """tensor.record_stream(stream) (DDP, FSDP, pin-memory loaders) is a
    no-op on tpu: a storage's memory is its own PJRT buffer, which PJRT frees
    only after the programs reading it are done. A tensor dropped after a
    program reading it was started leaves that program's result intact, and
    new tensors never see its bytes."""
    s = torch.tpu.current_stream()
    x = torch.randn(256, 256, device="tpu")
    want = (x.cpu() @ x.cpu()).sum()
    y = (x @ x).sum()
    x.record_stream(s)
    x.record_stream(torch.Stream(device="tpu"))
    del x
    fresh = [torch.zeros(256, 256, device="tpu") for _ in range(8)]
    torch.testing.assert_close(y.cpu(), want, rtol=1e-4, atol=1e-2)
    assert all(int(f.count_nonzero().cpu()) == 0 for f in fresh)
    with pytest.raises(RuntimeError, match="stream of the tpu device"):
        torch.ones(2, device="tpu").record_stream(torch.Stream(device="cpu"))
