"""Conformance of the ``tpu`` device against PyTorch's OpInfo database.

Every sample of every OpInfo (``op_db``, shipped inside the torch wheel) runs
on ``tpu`` and on the CPU; results are compared, and for differentiable ops so
are the gradients. The report says per op and dtype how many samples passed,
gave a wrong value, raised, or hit a missing lowering, with the first error.

    python -m torch_tpu.testing.opinfo                 # every op, report in reports/
    python -m torch_tpu.testing.opinfo --subset ci     # the CI subset
    python -m torch_tpu.testing.opinfo --ops add,mm -v # a few ops, verbose

Each group of ops runs in a child process, so that a crash costs one group
(which is then rerun op by op to name the culprit) and never the report.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import subprocess
import sys
import time
import traceback
from dataclasses import asdict, dataclass, field

DTYPES = ("float32", "bfloat16", "int64", "bool")

# Ops whose values are random or uninitialized: only shapes and dtypes compare.
NONDETERMINISTIC = {
    "bernoulli", "normal", "normal.number_mean", "normal.in_place", "rand_like", "randn_like",
    "randint_like", "randint", "multinomial", "uniform", "cauchy", "exponential", "geometric",
    "log_normal", "empty", "empty_like", "new_empty", "new_empty_strided", "empty_strided",
    "empty_permuted", "nn.functional.dropout", "nn.functional.dropout2d",
    "nn.functional.dropout3d", "nn.functional.alpha_dropout", "nn.functional.feature_alpha_dropout",
    "nn.functional.rrelu", "randn", "rand", "torch.rand", "torch.randn", "randperm",
    # Randomized algorithms: they draw from the device's generator.
    "pca_lowrank", "svd_lowrank",
}

# Arguments PyTorch requires on the CPU whatever the device (positions in args).
CPU_ARGS = {"tensor_split": (0,)}
# Factories whose samples may leave the device to its default (the CPU).
FACTORIES = {"arange", "linspace", "logspace", "full", "zeros", "ones", "empty", "eye", "rand", "randn", "randint",
             "empty_strided", "empty_permuted", "scalar_tensor", "tensor"}


def _mode_index_ok(sample, expected, got) -> bool:
    """mode's index may name any position that holds the modal value (the
    CPU's unstable sort picks one arbitrarily on long rows)."""
    import torch

    x = sample.input
    if x.dim() == 0:
        return bool(got[1] == 0)
    dim = sample.args[0] if sample.args else sample.kwargs.get("dim", -1)
    keepdim = sample.args[1] if len(sample.args) > 1 else sample.kwargs.get("keepdim", False)
    idx = got[1] if keepdim else got[1].unsqueeze(dim)
    picked = torch.take_along_dim(x, idx, dim)
    want = expected[0] if keepdim else expected[0].unsqueeze(dim)
    same = picked == want
    if picked.is_floating_point():
        same |= picked.isnan() & want.isnan()
    return bool(same.all())


def _column_signs(U, k):
    """The sign that makes each of the first k columns' largest entry positive."""
    import torch

    cols = U[..., :, :k]
    idx = cols.abs().argmax(dim=-2, keepdim=True)
    s = torch.gather(cols, -2, idx).sign()
    return torch.where(s == 0, torch.ones_like(s), s)


def _canonical_eigh(out):
    w, V = out
    if V.numel() == 0:
        return out
    return w, V * _column_signs(V, V.shape[-1])


def _canonical_svd(out, vh: bool):
    """Singular vectors are unique up to a sign per pair (u_i, v_i), and the
    completion of a full U (or V) only as a subspace: compare the first k
    vectors sign-fixed and the projector onto the rest."""
    U, S, V = out
    if U.numel() == 0:
        return out
    if vh:
        V = V.mT
    k = S.shape[-1]
    s = _column_signs(U, k)
    U1, V1 = U[..., :k] * s, V[..., :k] * s
    U2, V2 = U[..., k:], V[..., k:]
    return U1, U2 @ U2.mT, S, V1, V2 @ V2.mT


# Compared normwise (see _compare): matrix functions, and grid sampling,
# whose grid gradient sums over channels and corners.
NORMWISE = {"matrix_exp", "linalg.matrix_exp", "linalg.matrix_power", "grid_sampler_2d", "grid_sampler_3d",
            "nn.functional.grid_sample"}


def _no_less_accurate(got, expected, exact, dtype) -> bool:
    """Every value of `got` is about as close to the float32 result `exact`
    as the CPU's own reduced-precision result `expected` is (sums with
    cancellation round differently, but no worse)."""
    import torch
    from torch.utils._pytree import tree_flatten

    g, e, x = tree_flatten(got)[0], tree_flatten(expected)[0], tree_flatten(exact)[0]
    if not (len(g) == len(e) == len(x)):
        return False
    tol = _tolerances(dtype)
    for gi, ei, xi in zip(g, e, x):
        if not isinstance(gi, torch.Tensor):
            continue
        if not gi.is_floating_point() or gi.shape != xi.shape:
            return False
        gi, ei, xi = gi.double(), ei.double(), xi.double()
        err, cpu_err = (gi - xi).abs(), (ei - xi).abs()
        ok = err <= 2 * cpu_err + tol["atol"] + tol["rtol"] * xi.abs()
        ok |= gi.isnan() & xi.isnan()
        if not bool(ok.all()):
            return False
    return True


def _upcast(sample, to=None):
    """The sample with its reduced-precision floating tensors in float32 (or
    its float32 ones in float64, with to=torch.float64), gradients kept."""
    import torch
    from torch.utils._pytree import tree_map

    def up(x):
        if isinstance(x, torch.Tensor):
            if to is None and x.dtype in (torch.bfloat16, torch.float16):
                return x.detach().float().requires_grad_(x.requires_grad)
            if to is torch.float64 and x.dtype == torch.float32:
                return x.detach().double().requires_grad_(x.requires_grad)
        return x

    class _Up:
        pass

    u = _Up()
    u.input, u.args, u.kwargs = tree_map(up, (sample.input, sample.args, sample.kwargs))
    u.output_process_fn_grad = sample.output_process_fn_grad
    return u


def _downcast(out, dtype):
    import torch
    from torch.utils._pytree import tree_map

    return tree_map(lambda x: x.to(dtype) if isinstance(x, torch.Tensor) and x.dtype == torch.float32 else x, out)


# Ops whose results are defined up to a sign (or a basis): both sides are
# put in a canonical form before they are compared.
CANONICAL = {
    "linalg.eigh": _canonical_eigh,
    "linalg.svd": lambda out: _canonical_svd(out, True),
    "svd": lambda out: _canonical_svd(out, False),
}


def _sort_args(op_name, sample):
    """(dim, stable) of a sort-like sample."""
    args, kw = sample.args, sample.kwargs
    if op_name in ("sort", "argsort"):
        dim = args[0] if args else kw.get("dim", -1)
        return dim, bool(kw.get("stable", False))
    if op_name == "topk":
        dim = args[1] if len(args) > 1 else kw.get("dim", -1)
        return dim, False
    if op_name == "kthvalue":
        dim = args[1] if len(args) > 1 else kw.get("dim", -1)
        return dim, False
    return -1, True


def _selected_index_ok(op_name, sample, expected, got) -> bool:
    """Without stable=True, sort, argsort, topk and kthvalue may order equal
    values any way: the tpu indices are valid when they pick the expected
    values (for sort and argsort, as a permutation)."""
    import torch

    dim, stable = _sort_args(op_name, sample)
    if stable:
        return False
    x = sample.input
    idx = got if op_name == "argsort" else got[1]
    if x.dim() == 0:
        return bool((idx == 0).all())
    want = torch.sort(x, dim=dim, stable=True)[0] if op_name == "argsort" else expected[0]
    keepdim = op_name == "kthvalue" and (sample.args[2] if len(sample.args) > 2 else sample.kwargs.get("keepdim", False))
    if op_name == "kthvalue" and not keepdim:
        idx, want = idx.unsqueeze(dim), want.unsqueeze(dim)
    if idx.numel() and (idx.min() < 0 or idx.max() >= x.shape[dim]):
        return False
    picked = torch.gather(x, dim, idx)
    same = picked == want
    if picked.is_floating_point():
        same |= picked.isnan() & want.isnan()
    if not bool(same.all()):
        return False
    if op_name in ("sort", "argsort"):
        return bool((torch.sort(idx, dim=dim)[0] == torch.arange(x.shape[dim]).reshape(
            [-1 if d == (dim % x.dim()) else 1 for d in range(x.dim())])).all())
    return True


# Ops whose index results may legitimately differ from the CPU's on ties: a
# check that the tpu index is valid; it then counts as the CPU's.
TIE_INDICES = {
    "mode": lambda name, sample, expected, got: _mode_index_ok(sample, expected, got),
    "sort": _selected_index_ok, "argsort": _selected_index_ok, "topk": _selected_index_ok,
    "kthvalue": _selected_index_ok,
}


def _random_sample(op_name, sample) -> bool:
    """Samples whose values are random (dropout active): compare shapes only."""
    if op_name == "nn.functional.scaled_dot_product_attention":
        return sample.kwargs.get("dropout_p", 0.0) > 0
    if op_name == "nn.functional.multi_head_attention_forward":
        dropout = sample.args[9] if len(sample.args) > 9 else sample.kwargs.get("dropout_p", 0.0)
        return dropout > 0 and sample.kwargs.get("training", True)
    if op_name.startswith("nn.functional.fractional_max_pool"):
        # (each device draws the windows' offsets; with given _random_samples
        # the values are compared, in tests/python/test_nn.py)
        return sample.kwargs.get("_random_samples") is None
    return False


# A fixed set that runs in CI: the core of what eager programs use.
CI_SUBSET = [
    "abs", "add", "sub", "mul", "div", "neg", "exp", "log", "sqrt", "rsqrt", "sigmoid", "tanh",
    "sin", "cos", "pow", "clamp", "where", "eq", "ne", "lt", "ge", "maximum", "minimum",
    "sum", "mean", "prod", "amax", "amin", "argmax", "var", "std", "logsumexp", "cumsum",
    "softmax", "log_softmax", "mm", "bmm", "addmm", "matmul", "cat", "stack", "flip",
    "transpose", "permute", "reshape", "view", "expand", "squeeze", "unsqueeze", "narrow",
    "index_select", "gather", "scatter_add", "masked_fill", "sort", "topk", "tril", "triu",
    "nn.functional.relu", "nn.functional.gelu", "nn.functional.silu", "nn.functional.layer_norm",
    "nn.functional.conv2d", "nn.functional.max_pool2d", "nn.functional.embedding",
    "nn.functional.cross_entropy", "nn.functional.scaled_dot_product_attention",
    "nn.functional.pad", "nonzero", "any", "all", "floor_divide", "remainder",
    "linalg.solve", "linalg.det", "linalg.qr", "linalg.eigh", "linalg.svd", "index_reduce.amax",
    "special.chebyshev_polynomial_t", "mode", "nn.functional.unfold", "arange", "linspace", "unique",
    "nn.functional.grid_sample", "nn.functional.embedding_bag", "special.bessel_j0", "igamma", "histogram",
    "matrix_exp", "linalg.lstsq", "nn.functional.interpolate.bicubic", "_upsample_bilinear2d_aa", "nn.functional.multi_margin_loss",
]


@dataclass
class Tally:
    passed: int = 0
    wrong: int = 0          # ran, but a value differed from the CPU
    errors: int = 0         # raised on tpu where the CPU did not
    unsupported: int = 0    # NotImplementedError (no lowering)
    skipped: int = 0        # the CPU itself raised, or nothing to compare
    first_error: str = ""
    first_wrong: str = ""

    @property
    def total(self) -> int:
        return self.passed + self.wrong + self.errors + self.unsupported

    @property
    def ok(self) -> bool:
        return self.total > 0 and self.passed == self.total


@dataclass
class OpResult:
    op: str
    forward: dict = field(default_factory=dict)    # dtype -> Tally
    backward: dict = field(default_factory=dict)   # dtype -> Tally
    seconds: float = 0.0
    crashed: bool = False


# ---------------------------------------------------------------------------------
# Running one op (in the child process)
# ---------------------------------------------------------------------------------


class _Timeout(Exception):
    pass


def _on_alarm(signum, frame):
    raise _Timeout("timed out")


def _tolerances(dtype, gradient: bool = False):
    import torch

    if gradient and dtype == torch.float32:
        # A gradient sums more rounded terms (and the CPU's fused kernels
        # order them differently): a little more absolute slack near zero.
        return dict(rtol=1e-4, atol=5e-5)
    if dtype in (torch.bfloat16,):
        return dict(rtol=2e-2, atol=2e-2)
    if dtype in (torch.float16,):
        return dict(rtol=2e-3, atol=2e-3)
    if dtype in (torch.float32, torch.complex64):
        return dict(rtol=1e-4, atol=1e-5)
    if dtype in (torch.float64, torch.complex128):
        return dict(rtol=1e-7, atol=1e-7)
    return dict(rtol=0, atol=0)


class _Call:
    """A sample's (input, args, kwargs) moved to a device (factories' device
    arguments included)."""

    def __init__(self, sample, device, op_name=""):
        import torch

        def retarget(v):  # a device argument (factories, .to("cpu")) names the device under test
            return device if (isinstance(v, str) and v in ("cpu", "cpu:0")) or (
                isinstance(v, torch.device) and v.type == "cpu") else v

        kwargs = {k: retarget(v) if k == "device" else v for k, v in sample.kwargs.items()}
        if op_name.split(".")[0] in FACTORIES and "device" not in kwargs:
            kwargs["device"] = device  # the samples rely on the default device
        args = tuple(retarget(a) for a in sample.args)
        keep = CPU_ARGS.get(op_name, ())
        moved = _to((sample.input, args, kwargs), device)
        self.input, self.kwargs = moved[0], moved[2]
        self.args = tuple(a if i in keep else m for i, (a, m) in enumerate(zip(args, moved[1])))


def _same_layout(x, device):
    """x on `device` with the same storage layout (offset, strides, the whole
    storage), so that views and as_strided samples mean the same thing."""
    import torch

    if device == "cpu" or x.device.type == device or x.layout != torch.strided or x.is_conj() or x.is_neg():
        return x.to(device)
    dense = x.is_contiguous() and x.storage_offset() == 0 and x.untyped_storage().nbytes() == x.numel() * x.element_size()
    if dense:
        return x.to(device)
    n = x.untyped_storage().nbytes() // x.element_size()
    base = torch.empty(0, dtype=x.dtype).set_(x.untyped_storage(), 0, (n,), (1,))
    return base.to(device).as_strided(x.shape, x.stride(), x.storage_offset())


def _to(obj, device):
    import torch
    from torch.utils._pytree import tree_map

    def move(x):
        if isinstance(x, torch.Tensor):
            y = _same_layout(x.detach(), device)
            if x.requires_grad:
                y.requires_grad_(True)
            return y
        if isinstance(x, torch.device) and x.type == "cpu":
            return torch.device(device)
        return x

    return tree_map(move, obj)


def _compare(cpu, tpu, dtype, values: bool, gradient: bool = False, normwise: bool = False) -> str | None:
    """None when equal, else a description of the first difference."""
    import torch
    from torch.utils._pytree import tree_flatten

    a, _ = tree_flatten(cpu)
    b, _ = tree_flatten(tpu)
    if len(a) != len(b):
        return f"{len(b)} outputs, expected {len(a)}"
    for i, (x, y) in enumerate(zip(a, b)):
        if isinstance(x, torch.Tensor):
            if not isinstance(y, torch.Tensor):
                return f"output {i}: got {type(y).__name__}, expected a tensor"
            y = y.detach().cpu()
            x = x.detach()
            if x.shape != y.shape:
                return f"output {i}: shape {tuple(y.shape)}, expected {tuple(x.shape)}"
            if x.dtype != y.dtype:
                return f"output {i}: dtype {y.dtype}, expected {x.dtype}"
            if not values:
                continue
            tol = _tolerances(x.dtype, gradient)
            if normwise and x.numel() and x.is_floating_point():
                # Errors relative to the largest entry, as LAPACK's tests
                # measure matrix functions: small entries of a large result
                # carry the rounding of the large ones.
                tol["atol"] = max(tol["atol"], tol["rtol"] * float(x.abs().nan_to_num(0, 0, 0).max()))
            try:
                torch.testing.assert_close(y, x, equal_nan=True, check_stride=False, **tol)
            except AssertionError as e:
                lines = [l for l in str(e).splitlines() if l.strip()]
                return f"output {i}: " + " | ".join(lines[:4])
        elif isinstance(x, float) and isinstance(y, float):
            if not (x == y or (math.isnan(x) and math.isnan(y)) or abs(x - y) <= 1e-5 * max(1, abs(x))):
                return f"output {i}: {y} != {x}"
        elif values and x != y and not (isinstance(x, torch.dtype) or x is None):
            return f"output {i}: {y!r} != {x!r}"
    return None


def _describe(sample) -> str:
    import torch

    def d(x):
        if isinstance(x, torch.Tensor):
            return f"T{tuple(x.shape)}:{str(x.dtype).replace('torch.', '')}"
        if isinstance(x, (list, tuple)):
            return "[" + ", ".join(d(e) for e in x) + "]"
        return repr(x)

    args = [d(sample.input)] + [d(a) for a in sample.args]
    args += [f"{k}={d(v)}" for k, v in sample.kwargs.items()]
    return "(" + ", ".join(args)[:300] + ")"


def _record_failure(tally: Tally, kind: str, msg: str) -> None:
    if kind == "wrong":
        tally.wrong += 1
        if not tally.first_wrong:
            tally.first_wrong = msg[:600]
    elif kind == "unsupported":
        tally.unsupported += 1
        if not tally.first_error:
            tally.first_error = msg[:600]
    else:
        tally.errors += 1
        if not tally.first_error:
            tally.first_error = msg[:600]


def _count(tally: Tally, diff: str | None, what: str, sample, verbose: bool) -> None:
    """A compared sample: passed, or a wrong value described by `diff`."""
    if diff is None:
        tally.passed += 1
        return
    _record_failure(tally, "wrong", f"{_describe(sample)}: {diff}")
    if verbose:
        print(f"  {what}: WRONG {_describe(sample)}: {diff}")


def _spread(samples: list, max_samples: int) -> list:
    """At most `max_samples` of an op's samples, spread evenly over its list
    (OpInfo lists variations in nested loops: the first N would all share
    the outer loop's first values)."""
    if len(samples) <= max_samples:
        return samples
    return [samples[i * len(samples) // max_samples] for i in range(max_samples)]


def _classify(exc: BaseException) -> str:
    return "unsupported" if isinstance(exc, NotImplementedError) else "error"


def _forward(op, dtype, tally: Tally, max_samples: int, verbose: bool) -> None:
    import torch

    values = op.name not in NONDETERMINISTIC
    try:
        samples = list(op.sample_inputs("cpu", dtype, requires_grad=False))
    except Exception as e:  # noqa: BLE001
        tally.skipped += 1
        return
    for sample in _spread(samples, max_samples):
        torch.manual_seed(0)
        try:
            expected = op(sample.input, *sample.args, **sample.kwargs)
        except Exception:  # noqa: BLE001
            tally.skipped += 1
            continue
        try:
            t = _Call(sample, "tpu", op.name)
            got = op(t.input, *t.args, **t.kwargs)
            _check_on_tpu(got)
            got = _to(got, "cpu")
        except _Timeout:
            raise
        except Exception as e:  # noqa: BLE001
            _record_failure(tally, _classify(e), f"{_describe(sample)}: {type(e).__name__}: {e}")
            if verbose:
                print(f"  {op.name} {dtype}: {_describe(sample)}: {type(e).__name__}: {str(e)[:300]}")
            continue
        canon = CANONICAL.get(op.name)
        if canon is not None and isinstance(got, tuple) and isinstance(expected, tuple):
            expected, got = canon(expected), canon(got)
        tie_ok = TIE_INDICES.get(op.name)
        if tie_ok is not None:
            got_cpu, exp_idx = (got, expected) if op.name == "argsort" else (got[1], expected[1])
            if got_cpu.shape == exp_idx.shape and tie_ok(op.name, sample, expected, got):
                got = expected if op.name == "argsort" else (got[0], expected[1])
        check_values = values and not _random_sample(op.name, sample)
        diff = _compare(expected, got, dtype, check_values, normwise=op.name in NORMWISE)
        if diff is not None and check_values and dtype in (torch.bfloat16, torch.float16):
            # The CPU's reduced-precision kernel may itself break down (an
            # overflow to NaN, a rounding per step): its float32 result,
            # rounded to the dtype, is the better reference then.
            try:
                up = _upcast(sample)
                exact = _to(op(up.input, *up.args, **up.kwargs), "cpu")
                reference = _downcast(exact, dtype)
                if _compare(reference, got, dtype, True, normwise=op.name in NORMWISE) is None:
                    diff = None
                elif _no_less_accurate(got, expected, exact, dtype):
                    diff = None
            except Exception:  # noqa: BLE001
                pass
        _count(tally, diff, f"{op.name} {dtype}", sample, verbose)


def _check_on_tpu(out) -> None:
    """Tensor results must live on the tpu device: a CPU result means the op
    never ran there (a harness or registration bug), which must not pass."""
    import torch
    from torch.utils._pytree import tree_flatten

    for o in tree_flatten(out)[0]:
        if isinstance(o, torch.Tensor) and o.device.type != "tpu":
            raise RuntimeError(f"harness: a result is on {o.device}, not on tpu")


def _differentiable_outputs(out):
    import torch
    from torch.utils._pytree import tree_flatten

    flat, _ = tree_flatten(out)
    return [o for o in flat if isinstance(o, torch.Tensor) and o.requires_grad and
            (o.dtype.is_floating_point or o.dtype.is_complex)]


def _grads(op, sample, device):
    import torch
    from torch.utils._pytree import tree_flatten

    s = _Call(sample, device, op.name)
    inputs = [x for x in tree_flatten((s.input, s.args, s.kwargs))[0]
              if isinstance(x, torch.Tensor) and x.requires_grad]
    out = op(s.input, *s.args, **s.kwargs)
    if device != "cpu":
        _check_on_tpu(out)
    # The sample's own post-processing: for ops like eigh and svd it makes
    # the loss independent of the vectors' arbitrary signs.
    out = sample.output_process_fn_grad(out)
    outs = _differentiable_outputs(out)
    if not outs or not inputs:
        return None
    gen = torch.Generator().manual_seed(1234)
    # Drawn in float32 whatever the output dtype, so a float64 reference
    # run sees the same incoming gradients.
    grads_out = [(torch.randn(o.shape, generator=gen, dtype=o.dtype) if o.is_complex()
                  else torch.randn(o.shape, generator=gen).to(o.dtype)).to(device) for o in outs]
    grads = torch.autograd.grad(outs, inputs, grads_out, allow_unused=True)
    return [g.detach().cpu() if g is not None else None for g in grads]


def _backward(op, dtype, tally: Tally, max_samples: int, verbose: bool) -> None:
    import torch

    try:
        samples = list(op.sample_inputs("cpu", dtype, requires_grad=True))
    except Exception:  # noqa: BLE001
        tally.skipped += 1
        return
    for sample in _spread(samples, max_samples):
        if _random_sample(op.name, sample):
            tally.skipped += 1
            continue
        torch.manual_seed(0)
        try:
            expected = _grads(op, sample, "cpu")
        except Exception:  # noqa: BLE001
            tally.skipped += 1
            continue
        if expected is None:
            tally.skipped += 1
            continue
        try:
            got = _grads(op, sample, "tpu")
        except _Timeout:
            raise
        except Exception as e:  # noqa: BLE001
            _record_failure(tally, _classify(e), f"{_describe(sample)}: {type(e).__name__}: {e}")
            if verbose:
                print(f"  {op.name} {dtype} backward: {_describe(sample)}: {type(e).__name__}: {str(e)[:300]}")
            continue
        exp = [g for g in expected]
        exact = None
        diff = None
        if got is None or len(got) != len(exp):
            diff = "different number of gradients"
        else:
            for i, (a, b) in enumerate(zip(exp, got)):
                if (a is None) != (b is None):
                    # An unused input may get None on one side and zeros on the other.
                    other = a if a is not None else b
                    if other is not None and bool(torch.all(other == 0)):
                        continue
                    diff = f"gradient {i}: None on one side"
                    break
                if a is not None:
                    diff = _compare(a, b, dtype, True, gradient=True, normwise=op.name in NORMWISE)
                    if diff and dtype == torch.float32:
                        # Long sums round differently: pass when no less
                        # accurate than the CPU against a float64 gradient.
                        try:
                            if exact is None:
                                exact = _grads(op, _upcast(sample, torch.float64), "cpu")
                            if _no_less_accurate(b, a, exact[i], dtype):
                                diff = None
                        except Exception:  # noqa: BLE001
                            pass
                    if diff:
                        diff = f"gradient {i}: {diff}"
                        break
        _count(tally, diff, f"{op.name} {dtype} backward", sample, verbose)


def _op_key(op) -> str:
    return op.name + ("." + op.variant_test_name if op.variant_test_name else "")


def _watchdog(state: dict, limit: float) -> None:
    """SIGALRM interrupts Python code only: an op stuck in native code (a
    compile that never ends) is reported and the child exits, so the parent
    records it as hung and goes on with the ops after it."""
    while True:
        time.sleep(1.0)
        key, since = state.get("op"), state.get("since")
        if key is not None and time.time() - since > limit:
            print("HUNG " + key, flush=True)
            os._exit(3)


def run_ops(keys: list[str], dtypes, max_samples: int, timeout: int, verbose: bool,
            fallback: bool) -> list[OpResult]:
    """Runs `keys` in order, printing each op's result as one `RESULT` line
    as soon as it is known (the parent reads what a crashed child printed)."""
    import threading

    import torch
    import torch_tpu
    from torch.testing._internal.common_methods_invocations import op_db

    torch_tpu.set_cpu_fallback(fallback)
    by_key = {_op_key(o): o for o in op_db}
    signal.signal(signal.SIGALRM, _on_alarm)
    state: dict = {}
    threading.Thread(target=_watchdog, args=(state, timeout + 30), daemon=True).start()
    results = []
    for key in keys:
        op = by_key[key]
        res = OpResult(op=key)
        t0 = time.time()
        state.update(op=key, since=t0)
        supported = {str(d).replace("torch.", "") for d in op.supported_dtypes("cpu")}
        try:
            signal.alarm(timeout)
            for name in dtypes:
                if name not in supported:
                    continue
                dtype = getattr(torch, name)
                tally = Tally()
                _forward(op, dtype, tally, max_samples, verbose)
                res.forward[name] = asdict(tally)
                if op.supports_autograd and name == "float32" and op.name not in NONDETERMINISTIC:
                    btally = Tally()
                    _backward(op, dtype, btally, max_samples, verbose)
                    res.backward[name] = asdict(btally)
        except _Timeout:
            for name in dtypes:
                res.forward.setdefault(name, asdict(Tally(errors=1, first_error="timed out")))
        finally:
            signal.alarm(0)
            state["op"] = None
        res.seconds = round(time.time() - t0, 2)
        results.append(res)
        print("RESULT " + json.dumps(asdict(res)), flush=True)
        if verbose:
            print(f"{key}: {json.dumps(res.forward)} backward {json.dumps(res.backward)}", flush=True)
    return results


# ---------------------------------------------------------------------------------
# The driver (parent process)
# ---------------------------------------------------------------------------------


def _all_keys() -> list[str]:
    from torch.testing._internal.common_methods_invocations import op_db

    return [_op_key(o) for o in op_db]


def _core_names() -> set[str]:
    import torch

    names = set()
    for full in torch._C._dispatch_get_all_op_names():
        if not full.startswith("aten::"):
            continue
        base, _, overload = full[6:].partition(".")
        try:
            opo = getattr(getattr(torch.ops.aten, base), overload or "default")
        except (AttributeError, RuntimeError):
            continue
        if torch.Tag.core in opo.tags:
            names.add(base)
    return names


def _child(keys, args, fallback: bool) -> tuple[list[dict], str | None]:
    """Runs `keys` in a child process: the results of the ops it finished,
    and None, or "crashed"/"hung" when it stopped at the next op."""
    cmd = [sys.executable, "-m", "torch_tpu.testing.opinfo", "--child", ",".join(keys),
           "--max-samples", str(args.max_samples), "--timeout", str(args.timeout),
           "--dtypes", ",".join(args.dtypes)]
    if fallback:
        cmd.append("--fallback")
    if args.verbose:
        cmd.append("-v")
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=None if args.verbose else subprocess.DEVNULL,
                          text=True)
    lines = proc.stdout.splitlines()
    done = [json.loads(line[len("RESULT "):]) for line in lines if line.startswith("RESULT ")]
    if len(done) == len(keys) and proc.returncode == 0:
        return done, None
    if args.verbose:
        print(proc.stdout[-2000:])
    return done, "hung" if any(line.startswith("HUNG ") for line in lines) else "crashed"


def _run_groups(keys, args, fallback: bool, progress=None) -> dict[str, dict]:
    """Every op of `keys`, `args.group` per child process. An op that crashes
    or hangs its child is recorded as such, and a new child goes on with the
    ops after it."""
    out: dict[str, dict] = {}
    for i in range(0, len(keys), args.group):
        todo = keys[i:i + args.group]
        while todo:
            done, stop = _child(todo, args, fallback)
            for r in done:
                out[r["op"]] = r
            todo = todo[len(done):]
            if stop is not None and todo:
                culprit = todo.pop(0)
                out[culprit] = asdict(OpResult(op=culprit, crashed=True))
                out[culprit]["stopped"] = stop
                print(f"[opinfo] {culprit}: {stop}", flush=True)
        print(f"[opinfo] {min(i + args.group, len(keys))}/{len(keys)} ops", flush=True)
        if progress is not None:
            progress(out)
    return out


def _status(r: dict, dtype: str, which: str = "forward") -> str:
    if r.get("crashed"):
        return "crashed"
    t = r.get(which, {}).get(dtype)
    if t is None:
        return "n/a"
    total = t["passed"] + t["wrong"] + t["errors"] + t["unsupported"]
    if total == 0:
        return "n/a"
    if t["wrong"]:
        return "wrong"
    if t["passed"] == total:
        return "pass"
    if t["unsupported"] and not t["errors"]:
        return "unsupported"
    return "error"


def summarize(results: dict[str, dict], core: set[str], fallback_results: dict[str, dict]) -> dict:
    def base(key: str) -> str:
        name = key.split(".")[0]
        return name

    def rate(keys, dtype, which="forward"):
        st = [_status(results[k], dtype, which) for k in keys]
        applicable = [s for s in st if s != "n/a"]
        ok = sum(1 for s in applicable if s == "pass")
        return {"pass": ok, "of": len(applicable),
                "percent": round(100.0 * ok / len(applicable), 1) if applicable else 0.0}

    keys = sorted(results)
    core_keys = [k for k in keys if base(k) in core]
    summary = {
        "ops": len(keys),
        "core_ops": len(core_keys),
        "float32_forward_core": rate(core_keys, "float32"),
        "float32_forward_all": rate(keys, "float32"),
        "float32_backward_core": rate(core_keys, "float32", "backward"),
        "float32_backward_all": rate(keys, "float32", "backward"),
    }
    for d in DTYPES:
        summary[f"{d}_forward_all"] = rate(keys, d)
    summary["wrong_value_ops"] = sorted(
        k for k in keys if any(_status(results[k], d, w) == "wrong"
                               for d in DTYPES for w in ("forward", "backward")))
    summary["crashed_ops"] = sorted(k for k in keys if results[k].get("crashed"))
    if fallback_results:
        only = [k for k, r in fallback_results.items()
                if _status(results[k], "float32") != "pass" and _status(r, "float32") == "pass"]
        summary["float32_pass_only_with_cpu_fallback"] = sorted(only)
    return summary


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--subset", choices=["all", "ci", "core"], default="all")
    p.add_argument("--ops", default="", help="comma-separated OpInfo names (name or name.variant)")
    p.add_argument("--dtypes", default=",".join(DTYPES))
    p.add_argument("--max-samples", type=int, default=1000,
                   help="samples per op and dtype, spread over its list")
    p.add_argument("--timeout", type=int, default=300, help="seconds per op")
    p.add_argument("--group", type=int, default=40, help="ops per child process")
    p.add_argument("--report", default="reports/opinfo.json")
    p.add_argument("--no-fallback-pass", action="store_true",
                   help="skip rerunning failing ops with the CPU fallback")
    p.add_argument("--fallback", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    p.add_argument("-v", "--verbose", action="store_true")
    args = p.parse_args(argv)
    args.dtypes = [d for d in args.dtypes.split(",") if d]

    if args.child is not None:
        run_ops(args.child.split(","), args.dtypes, args.max_samples, args.timeout,
                args.verbose, args.fallback)
        return 0

    keys = _all_keys()
    if args.ops:
        want = set(args.ops.split(","))
        keys = [k for k in keys if k in want or k.split(".")[0] in want]
    elif args.subset == "ci":
        keys = [k for k in keys if k in CI_SUBSET]
    elif args.subset == "core":
        core = _core_names()
        keys = [k for k in keys if k.split(".")[0] in core]
    t0 = time.time()
    os.makedirs(os.path.dirname(os.path.abspath(args.report)), exist_ok=True)

    def save_partial(partial):
        with open(args.report + ".partial", "w") as f:
            json.dump({"ops": partial}, f)

    results = _run_groups(keys, args, fallback=False, progress=save_partial)
    fallback_results: dict[str, dict] = {}
    if not args.no_fallback_pass:
        failing = [k for k in keys if _status(results[k], "float32") in ("unsupported", "error")]
        if failing:
            fb_args = argparse.Namespace(**{**vars(args), "dtypes": ["float32"]})
            fallback_results = _run_groups(failing, fb_args, fallback=True)
    summary = summarize(results, _core_names(), fallback_results)
    summary["seconds"] = round(time.time() - t0, 1)
    report = {"summary": summary, "ops": results}
    with open(args.report, "w") as f:
        json.dump(report, f, indent=1, sort_keys=True)
    if os.path.exists(args.report + ".partial"):
        os.remove(args.report + ".partial")
    s = summary
    print(
        f"opinfo: {s['ops']} ops ({s['core_ops']} core) | float32 forward: core "
        f"{s['float32_forward_core']['percent']}%, all {s['float32_forward_all']['percent']}% | "
        f"float32 backward: core {s['float32_backward_core']['percent']}% | "
        f"bfloat16 {s['bfloat16_forward_all']['percent']}% | int64 {s['int64_forward_all']['percent']}% | "
        f"wrong-value ops: {len(s['wrong_value_ops'])} | crashed: {len(s['crashed_ops'])} | "
        f"report: {args.report}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
