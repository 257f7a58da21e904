"""Shared fixtures: every test compares the tpu device against CPU PyTorch."""

import os
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
    "test_sparse.py":      (2, 4),
    "test_cache.py":       ("none", "none"),  # its processes choose strict eager
    "test_opinfo.py":      ("none", "none"),  # the sweep compiles a program per sample
    "test_fuzz.py":        ("none", "none"),  # its workers choose their modes
    "test_launcher.py":    ("none", "none"),  # strict eager's launcher: its tests choose strict
    "test_serving.py":     ("all", "none"),   # the engine runs in a strict scope of its own
    "test_linalg.py":      (8, 8),            # one loop program per op
    "test_ops.py":         (3, 6),
    "test_nn.py":          (2, 4),
    "test_numerics.py":    (3, 6),
    "test_training.py":    (2, 4),
    "test_ecosystem.py":   (4, "none"),
    "test_parity.py":      (2, 2),
    "test_attention.py":   (2, 4),
    "test_quant.py":       (2, 4),
    "test_pallas.py":      ("all", 2),
    "test_compile.py":     ("all", 2),
    "test_bucketed.py":    ("all", "all"),
    "test_bucketed_prefill.py": ("all", "all"),
}


def current_mode():
    if os.environ.get("TORCH_TPU_LAUNCH_BLOCKING", "0") not in ("", "0"):
        return "debug"
    if os.environ.get("TORCH_TPU_DEFER_AND_FUSE", "0") not in ("", "0"):
        return "fused"
    return "strict"


# The files that take longest, collected first: tests/run.sh runs the suite
# in two pytest-xdist workers, one file to a worker in collection order, and
# the longest file started last would run alone at the end.
LONGEST_FIRST = ("test_opinfo.py", "test_fuzz.py", "test_serving.py", "test_ecosystem.py", "test_torchtitan.py",
                 "test_ray_train.py", "test_cache.py")


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # (stable: the rest keep their order)
    mode = current_mode()
    if mode == "strict":
        return
    column = 0 if mode == "fused" else 1
    keep, drop, seen = [], [], {}
    for item in items:
        policy = MODE_POLICY.get(item.path.name, ("all", "all"))[column]
        if policy == "none":
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
