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


@pytest.fixture
def tpu():
    return torch.device("tpu")
