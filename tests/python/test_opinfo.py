"""The OpInfo conformance harness on its CI subset (the full run is
`python -m torch_tpu.testing.opinfo`, see the README)."""

import json
import os
import subprocess
import sys

import pytest

REPORT = os.path.join(os.path.dirname(__file__), "..", "..", "reports", "opinfo_ci.json")


@pytest.fixture(scope="module")
def report():
    cmd = [sys.executable, "-m", "torch_tpu.testing.opinfo", "--subset", "ci", "--report", REPORT,
           "--group", "100",
           "--max-samples", "16"]  # (max_pool2d alone has 1440 samples; the full run takes them all)
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=2400)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    print(r.stdout.splitlines()[-1])
    with open(REPORT) as f:
        return json.load(f)


def test_subset_ran(report):
    from torch_tpu.testing.opinfo import CI_SUBSET

    assert report["summary"]["ops"] >= len(CI_SUBSET) * 0.9


def test_no_crash_and_no_wrong_value(report):
    s = report["summary"]
    assert s["crashed_ops"] == []
    assert s["wrong_value_ops"] == [], s["wrong_value_ops"]


def test_float32_forward_and_backward(report):
    s = report["summary"]
    assert s["float32_forward_all"]["percent"] >= 95, s["float32_forward_all"]
    assert s["float32_backward_all"]["percent"] >= 90, s["float32_backward_all"]


def test_no_fallback_needed(report):
    assert report["summary"].get("float32_pass_only_with_cpu_fallback", []) == []


# Ops whose results are still laid out otherwise than on CPU (kernels.cpp's
# cpu_kernel_layouts corrects the meta kernels that differ from CPU's):
#  - linalg.lstsq: it has no meta kernel, and CPU's solution is a view of
#    LAPACK's column-major (max(m, n), k) buffer (not dense when m > n).
_LAYOUT_KNOWN = {"linalg.lstsq"}


def _transposed(t):
    import torch

    if isinstance(t, torch.Tensor) and t.layout == torch.strided and t.dim() >= 2 and t.numel() > 1:
        return t.transpose(-1, -2).contiguous().transpose(-1, -2)
    return t


def _channels_last(t):
    import torch

    if isinstance(t, torch.Tensor) and t.layout == torch.strided and t.dim() in (4, 5) and t.numel() > 1:
        return t.contiguous(memory_format=torch.channels_last if t.dim() == 4 else torch.channels_last_3d)
    return t


def _odd_size_one_strides(t):
    """The same values, transposed as _transposed does, each size-1 dim given
    a stride no contiguous layout would (dense all the same)."""
    import torch

    t = _transposed(t)
    if isinstance(t, torch.Tensor) and t.layout == torch.strided and 1 in t.shape and t.numel() > 0:
        big = max([s * n for s, n in zip(t.stride(), t.shape)] + [1])
        strides = [big + 3 + d if n == 1 else s for d, (s, n) in enumerate(zip(t.stride(), t.shape))]
        x = torch.empty_strided(t.shape, strides, dtype=t.dtype)
        x.copy_(t)
        return x
    return t


def _layout_sweep(relayout, takes, samples_per_op, size_one_dims=False):
    """Every OpInfo op whose float32 samples (the first few) have operands
    `takes` accepts, each operand relaid out by `relayout`: the ops whose
    results' strides (of dims longer than 1, or of all dims with
    `size_one_dims`) differ from CPU's, and how many results were compared."""
    import warnings

    import torch
    from torch.testing._internal.common_methods_invocations import op_db

    import torch_tpu  # noqa: F401

    def to_tpu(t):
        return t.to("tpu") if isinstance(t, torch.Tensor) else t

    def strides(t):
        if size_one_dims:
            return tuple(t.stride()) if t.numel() else ()
        return tuple(s for s, n in zip(t.stride(), t.shape) if n > 1)

    wrong, checked = {}, 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for op in op_db:
            if torch.float32 not in op.dtypes:
                continue
            try:
                samples = list(op.sample_inputs("cpu", torch.float32, requires_grad=False))[:samples_per_op]
            except Exception:  # noqa: BLE001  (samples this torch build cannot make)
                continue
            for s in samples:
                args = [relayout(s.input)] + [relayout(a) for a in s.args]
                kwargs = {k: relayout(v) for k, v in s.kwargs.items()}
                if not takes(args):
                    continue
                try:
                    want = op.op(*args, **kwargs)
                    got = op.op(*[to_tpu(a) for a in args], **{k: to_tpu(v) for k, v in kwargs.items()})
                except Exception:  # noqa: BLE001  (errors are the conformance harness's business)
                    continue
                wants = want if isinstance(want, (tuple, list)) else [want]
                gots = got if isinstance(got, (tuple, list)) else [got]
                for w, g in zip(wants, gots):
                    if not isinstance(w, torch.Tensor) or w.layout != torch.strided or not isinstance(g, torch.Tensor):
                        continue
                    checked += 1
                    if strides(g) != strides(w):
                        wrong.setdefault(op.name, (tuple(w.shape), w.stride(), g.stride()))
    return {k: v for k, v in wrong.items() if k not in _LAYOUT_KNOWN}, checked


def test_results_of_transposed_inputs_are_laid_out_as_on_cpu():
    """Every OpInfo op of two or more tensors, its samples (float32, the
    first three) with transposed inputs: the results' strides (of dims longer
    than 1) are CPU's. Layouts decide which later views and in-place writes
    alias what (TensorIterator's rules). Only the samples with a size-1 dim:
    the others are relaid out exactly so by the size-1 sweep below, which
    checks every stride of them."""
    import torch

    def takes(args):
        tensors = [a for a in args if isinstance(a, torch.Tensor) and a.dim() >= 1]
        return len(tensors) >= 2 and any(1 in a.shape for a in tensors)

    wrong, checked = _layout_sweep(_transposed, takes, 3)
    assert checked > 140, checked
    assert not wrong, f"results laid out otherwise than on CPU (shape, CPU strides, tpu strides): {wrong}"


def test_results_of_channels_last_inputs_are_laid_out_as_on_cpu():
    """Every OpInfo op with a 4-d or 5-d operand, its samples (float32, the
    first three) with every such operand channels-last: the results' strides
    are CPU's (convolutions, pads, unpooling, shuffles and norms choose their
    results' format from their operands' on CPU)."""
    import torch

    wrong, checked = _layout_sweep(
        _channels_last, lambda args: any(isinstance(a, torch.Tensor) and a.dim() in (4, 5) for a in args), 3)
    assert checked > 130, checked
    assert not wrong, f"results laid out otherwise than on CPU (shape, CPU strides, tpu strides): {wrong}"


# max_pool1d without a gradient runs CPU's own 1-d kernel (a contiguous
# result); with one, or on any other device, it is max_pool2d's result
# squeezed, whose size-1 dims keep other strides: CPU disagrees with itself.
_SIZE_ONE_KNOWN = {"nn.functional.max_pool1d"}


def test_strides_of_size_one_dims_are_cpus():
    """Every OpInfo op, its samples (float32, the first three) transposed and
    with odd strides on their size-1 dims: all the results' strides are
    CPU's, those of size-1 dims included (a later broadcasting op orders its
    result's dims by them). Single-operand ops are swept here too: FFTs and
    geqrf differed, with no size-1 dims at all."""
    import torch

    wrong, checked = _layout_sweep(
        _odd_size_one_strides, lambda args: any(isinstance(a, torch.Tensor) and a.dim() >= 1 for a in args), 3,
        size_one_dims=True)
    assert checked > 1500, checked
    wrong = {k: v for k, v in wrong.items() if k not in _SIZE_ONE_KNOWN}
    assert not wrong, f"results laid out otherwise than on CPU (shape, CPU strides, tpu strides): {wrong}"
