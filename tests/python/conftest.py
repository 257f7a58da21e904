"""Shared fixtures: every test compares the tpu device against CPU PyTorch."""

import collections
import os
import socket
import subprocess
import sys

import pytest
import torch

import torch_tpu  # noqa: F401  (registers the tpu device)

DTYPES = [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
          torch.float16, torch.bfloat16, torch.float32, torch.float64]


def make(shape, dtype, seed=0, low=-5, high=5):
    """A random CPU tensor of any dtype (bools and integers included)."""
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if not dtype.is_floating_point:
        lo = 0 if dtype == torch.uint8 else low
        return torch.randint(int(lo), int(high), shape, generator=g, dtype=torch.int64).to(dtype)
    return (torch.rand(shape, generator=g, dtype=torch.float64) * (high - low) + low).to(dtype)


def tolerance(dtype):
    if dtype == torch.bfloat16:
        return dict(rtol=1.6e-2, atol=1e-2)
    if dtype == torch.float16:
        return dict(rtol=1e-3, atol=1e-3)
    if dtype == torch.float32:
        return dict(rtol=1e-5, atol=1e-5)
    return dict(rtol=0, atol=0) if not dtype.is_floating_point else dict(rtol=1e-7, atol=1e-7)


def assert_same(tpu_result, cpu_result, **tol):
    """tpu_result (on tpu) equals cpu_result: shape, dtype and values."""
    if isinstance(cpu_result, (tuple, list)):
        assert len(tpu_result) == len(cpu_result)
        for a, b in zip(tpu_result, cpu_result):
            assert_same(a, b, **tol)
        return
    assert isinstance(tpu_result, torch.Tensor), type(tpu_result)
    assert tpu_result.device.type == "tpu", f"result on {tpu_result.device}, expected tpu"
    got = tpu_result.cpu()
    assert got.shape == cpu_result.shape, (got.shape, cpu_result.shape)
    assert got.dtype == cpu_result.dtype, (got.dtype, cpu_result.dtype)
    kw = tolerance(cpu_result.dtype)
    kw.update(tol)
    torch.testing.assert_close(got, cpu_result, equal_nan=True, **kw)


def ulp(x, dtype):
    """The spacing of `dtype`'s numbers at each element of `x` (float64):
    2^floor(log2|x|) * eps, the subnormal spacing below the smallest normal."""
    fi = torch.finfo(dtype)
    mag = x.detach().to(torch.float64).abs().nan_to_num(nan=0.0, posinf=fi.max, neginf=fi.max).clamp(min=fi.tiny)
    return torch.exp2(torch.floor(torch.log2(mag))) * fi.eps


def _to_float64(tree, absolute=False):
    """Floating and complex tensors of `tree` in double precision (their
    magnitudes with absolute=True), on the CPU, detached (requires_grad
    kept); anything else as it is."""
    from torch.utils._pytree import tree_map

    def up(x):
        if isinstance(x, torch.Tensor) and (x.is_floating_point() or x.is_complex()):
            y = x.detach().cpu().to(torch.complex128 if x.is_complex() else torch.float64)
            y = y.abs() if absolute else y
            return y.requires_grad_(x.requires_grad)
        return x

    return tree_map(up, tree)


def _cpu_copy(tree):
    from torch.utils._pytree import tree_map

    return tree_map(lambda x: x.detach().cpu().clone().requires_grad_(x.requires_grad)
                    if isinstance(x, torch.Tensor) else x, tree)


def assert_close_to_float64_reference(tpu_result, cpu_fn, inputs, ulps=2, terms=4096, sum_of_products=False,
                                      roundings=0, atol=None):
    """A reduced-precision (bfloat16, float16, 8-bit float) tpu result is as
    accurate as a correct kernel's, whatever CPU's own kernel for the dtype
    does.

    `inputs` are the op's operands, already rounded to the reduced dtype (or
    rounded by cpu_fn itself), a tuple passed to cpu_fn positionally; cpu_fn
    may return a tuple (e.g. a result and gradients). The reference is cpu_fn on them upcast to
    float64: the exact answer to the rounded inputs, to float64's precision.
    CPU's reduced-precision kernels round otherwise from one machine to
    another (oneDNN's bfloat16 3-d convolution on an AVX2-only CPU is 275
    ulps off where this CPU's is 0.5), so comparing with CPU's
    reduced-precision result measures CPU's kernel.

    Each element of each floating result must lie within `ulps` ulps (of the
    result's dtype, at the reference's magnitude) of the reference, plus an
    absolute term for sums. A kernel that accumulates in float32 and rounds
    once is within 0.5 ulp plus float32's error of the sum, at most
    n * 2^-24 * the sum of the n terms' magnitudes (it shows where the sum
    cancels, near zero). With sum_of_products (each result element a sum of
    products of input elements with non-negative coefficients: matmul,
    convolution and their gradients) that sum of magnitudes is cpu_fn of
    the inputs' magnitudes, element by element; else each term is taken no
    larger than the result's largest magnitude. `terms` bounds n (float64
    results: 2^-53 for 2^-24). A kernel that rounds `roundings`
    intermediate values to the inputs' (or the result's) dtype (addmm's
    product before the bias is added, the statistics a norm saves for its
    backward, attention's scores) adds half an ulp of a value of that
    magnitude for each (a number, or one for each result). `atol` replaces
    the absolute term. None of this depends on CPU's kernel for the dtype:
    its result gives only the expected shapes and dtypes (and the values of
    integer and boolean results: indices, masks), and its error, in the
    message, for comparison."""
    from torch.utils._pytree import tree_flatten

    ref = cpu_fn(*_to_float64(tuple(inputs)))
    low = cpu_fn(*_cpu_copy(tuple(inputs)))
    magnitude = cpu_fn(*_to_float64(tuple(inputs), absolute=True)) if sum_of_products else None
    # half an ulp of the least precise floating input (intermediates' rounding)
    inter = max([torch.finfo(x.dtype).eps / 2 for x in tree_flatten(tuple(inputs))[0]
                 if isinstance(x, torch.Tensor) and x.is_floating_point()] + [0.0])
    _assert_near_reference(tpu_result, ref, low, magnitude, ulps, terms, (roundings, inter), atol, path="result")


def _assert_near_reference(got, ref, low, magnitude, ulps, terms, roundings, atol, path):
    if isinstance(low, (tuple, list)):
        assert isinstance(got, (tuple, list)) and len(got) == len(low), (path, type(got))
        for i, (g, r, lo) in enumerate(zip(got, ref, low)):
            m = None if magnitude is None else magnitude[i]
            count, inter = roundings
            count = count[i] if isinstance(count, (tuple, list)) else count
            _assert_near_reference(g, r, lo, m, ulps, terms, (count, inter), atol, f"{path}[{i}]")
        return
    if low is None:
        assert got is None, (path, type(got))
        return
    assert isinstance(got, torch.Tensor), (path, type(got))
    assert got.device.type == "tpu", f"{path} on {got.device}, expected tpu"
    got, ref, low = got.detach().cpu(), ref.detach(), low.detach()
    assert got.shape == low.shape, (path, got.shape, low.shape)
    assert got.dtype == low.dtype, (path, got.dtype, low.dtype)
    if got.is_complex():  # (real and imaginary parts, each a float)
        got, ref, low = (torch.view_as_real(t.resolve_conj()) for t in (got, ref, low))
        magnitude = None if magnitude is None else torch.stack([magnitude.abs()] * 2, -1)
    if not got.is_floating_point():
        assert torch.equal(got, low), f"{path}: {got} != CPU's {low}"
        return
    ref, got64 = ref.to(torch.float64), got.to(torch.float64)
    # Where the reference rounds to an infinity or is not a number, the
    # result is that special value.
    rounded = ref.to(got.dtype).to(torch.float64)
    special = ~rounded.isfinite()
    assert torch.equal(got64[special].isnan(), rounded[special].isnan()) and \
        torch.equal(got64[special].nan_to_num(), rounded[special].nan_to_num()), \
        f"{path}: {got64[special]} where the float64 reference is {ref[special]}"
    finite = ~special
    if not finite.any():
        return
    # float32's unit roundoff (float64's for float64 results), the result's
    unit = min(torch.finfo(got.dtype).eps / 2, 2.0 ** -24)
    count, inter = roundings
    inter = max(inter, torch.finfo(got.dtype).eps / 2)
    if atol is not None:
        bound = atol
    else:
        size = magnitude.detach().to(torch.float64).abs() if magnitude is not None else ref[finite].abs().max().item()
        bound = (terms * unit + count * inter) * size
    cpu_err = (low.to(torch.float64) - ref).abs()[finite].nan_to_num(posinf=0.0).max().item()
    err = (got64 - ref).abs()
    bad = finite & ~(err <= ulps * ulp(ref, got.dtype) + bound)
    if bad.any():
        i = int(torch.nonzero(bad.reshape(-1))[0])
        e, r, g = err.reshape(-1)[i].item(), ref.reshape(-1)[i].item(), got64.reshape(-1)[i].item()
        raise AssertionError(
            f"{path} ({got.dtype}): {int(bad.sum())} of {bad.numel()} elements farther from the float64 reference "
            f"than {ulps} ulps + {_at(bound, i):.3g}; the first at flat index {i}: {g!r}, reference {r!r}, error {e:.3g} "
            f"({e / ulp(torch.tensor(r), got.dtype).item():.2f} ulps); largest error {err[finite].max().item():.3g}, "
            f"CPU's own {cpu_err:.3g}")


def _at(bound, i):
    return bound.reshape(-1)[i].item() if isinstance(bound, torch.Tensor) else bound


def assert_trained_close(got, want, any_atol, most_rtol=1e-5, most_atol=1e-6, most=0.95):
    """Parameters after optimizer steps: every element within `any_atol`,
    and at least a fraction `most` of them within (most_rtol, most_atol).

    Optimizers that divide by a running norm of the gradient (Adam,
    RMSprop, Adagrad) take near-lr-sized steps even for near-zero
    gradients, so the last bits in which two matmul implementations differ
    there (XLA's CPU code and MKL, and both by machine) become visible in a
    few parameters; a wrong update shows in many, or by more than that."""
    got, want = got.detach().cpu(), want.detach().cpu()
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, got.dtype, want.shape, want.dtype)
    torch.testing.assert_close(got, want, rtol=0, atol=any_atol)
    off = (got - want).abs() > most_atol + most_rtol * want.abs()
    assert off.float().mean() <= 1 - most, f"{int(off.sum())} of {off.numel()} elements off, max {(got - want).abs().max()}"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (for a test's server)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_python(code, env=None, timeout=600):
    """Run `code` in a fresh interpreter (for process-wide settings)."""
    full_env = dict(os.environ)
    for k, v in (env or {}).items():  # None removes a variable
        if v is None:
            full_env.pop(k, None)
        else:
            full_env[k] = v
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=full_env, timeout=timeout)


def run_torchrun(script_text, tmp_path, nproc=2, timeout=180):
    """Run `script_text` under torchrun with `nproc` ranks on this host
    (loopback); the script finds tmp_path in $RESULTS. Each rank gets its own
    device (TORCH_TPU_CPU_DEVICES left to torchrun's LOCAL_WORLD_SIZE)."""
    script = tmp_path / "train.py"
    script.write_text(script_text)
    env = dict(os.environ, RESULTS=str(tmp_path))
    env.pop("TORCH_TPU_CPU_DEVICES", None)
    return subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}", str(script)],
        capture_output=True, text=True, timeout=timeout, env=env,
    )


@pytest.fixture
def tpu():
    return torch.device("tpu")


# ---- which tests run in the non-default modes ---------------------------------------
#
# tests/run.sh runs the whole suite in strict eager, then again in fused
# eager and in debug eager. Those runs check what a mode changes: how
# programs are grouped, deferred, run and waited for, and where errors
# surface. The ops themselves lower the same way in every mode, so the
# sweeps over many shapes and dtypes of the same lowering run in part there.
# Per file and mode: "all", "none" (the file's tests set their own modes, or
# nothing of them depends on the mode), or k: the first and every k-th case
# of each parametrized test (unparametrized tests always run).
MODE_POLICY = {
    #                       fused   debug
    "test_abi.py":         ("none", "none"),  # declarations: no programs
    "test_autoload.py":    ("none", "none"),  # fresh processes importing torch; no mode of their own
    "test_torchtitan.py":  ("none", "none"),  # TorchTitan's own trainer, in strict eager
    "test_ray_train.py":   ("none", "none"),  # Ray's workers, in strict eager
    "test_litert.py":      ("none", "none"),  # export: the graph, not how ops run
    "test_dtensor_random.py": ("all", "none"),  # generator offsets advance in deferred graphs too
    "test_sparse.py":      (4, 4),
    "test_jagged.py":      (3, 6),
    "test_dlrm.py":        ("none", "none"),  # its tests choose their modes; one trainer per mode
    "test_cache.py":       ("none", "none"),  # its processes choose strict eager
    "test_opinfo.py":      ("none", "none"),  # the sweep compiles a program per sample
    "test_fuzz.py":        ("none", "none"),  # its workers choose their modes
    "test_launcher.py":    ("none", "none"),  # strict eager's launcher: its tests choose strict
    "test_vllm.py":        ("all", "none"),   # vLLM's engine on tpu: one engine, its ops run in the mode
    "test_vllm_families.py": ("none", "none"),  # an engine per family, in strict eager
    "test_vllm_serve.py":  ("none", "none"),  # `vllm serve`: its engine process runs in strict eager
    "test_vllm_tp.py":     ("none", "none"),  # two ranks' engine processes, in strict eager
    "test_linalg.py":      (16, 16),          # one loop program per op
    "test_hardening.py":   (4, 4),            # PyTorch's corner cases of each lowering
    "test_ops.py":         (3, 6),
    "test_nn.py":          (4, 4),
    "test_numerics.py":    (3, 6),
    "test_training.py":    (4, 4),
    "test_ecosystem.py":   (4, "none"),
    "test_parity.py":      (2, 2),
    "test_attention.py":   (2, 4),
    "test_quant.py":       (8, 8),
    "test_pallas.py":      ("all", 2),
    "test_compile.py":     ("all", 2),
    "test_bucketed.py":    (2, 2),            # (HF generate with beams: strict eager only)
    "test_bucketed_prefill.py": ("all", "all"),
    "test_flex_attention.py": (2, 4),
}


def current_mode():
    if os.environ.get("TORCH_TPU_LAUNCH_BLOCKING", "0") not in ("", "0"):
        return "debug"
    if os.environ.get("TORCH_TPU_DEFER_AND_FUSE", "0") not in ("", "0"):
        return "fused"
    return "strict"


# The files that take longest, collected first: tests/run.sh runs the suite
# in two pytest-xdist workers, one file to a worker in collection order, and
# the longest file started last would run alone at the end. The rest follow
# by their number of tests, most first (what pytest-xdist's own reordering
# does, which tests/run.sh turns off: it put these files, which hold few
# tests, last; the OpInfo sweeps then ran alone for the pass's last 6 min).
LONGEST_FIRST = ("test_opinfo.py", "test_fuzz.py", "test_ecosystem.py", "test_torchtitan.py",
                 "test_ray_train.py", "test_dlrm.py", "test_vllm_tp.py", "test_vllm_families.py",
                 "test_vllm_serve.py", "test_vllm.py", "test_cache.py")


def pytest_configure(config):
    config.addinivalue_line("markers", "strict_eager_only: runs in the strict eager pass of tests/run.sh only "
                            "(what it checks does not depend on the mode; MODE_POLICY for a single test)")


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    tests = collections.Counter(item.path.name for item in items)
    # (stable: a file's tests keep their order, and files stay whole)
    items.sort(key=lambda item: (rank.get(item.path.name, len(rank)), -tests[item.path.name]))
    mode = current_mode()
    if mode == "strict":
        return
    column = 0 if mode == "fused" else 1
    keep, drop, seen = [], [], {}
    for item in items:
        policy = MODE_POLICY.get(item.path.name, ("all", "all"))[column]
        if policy == "none" or item.get_closest_marker("strict_eager_only"):
            drop.append(item)
            continue
        if policy == "all" or not hasattr(item, "callspec"):
            keep.append(item)
            continue
        key = (item.path.name, item.originalname)
        k = seen[key] = seen.get(key, -1) + 1
        (keep if k % policy == 0 else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
