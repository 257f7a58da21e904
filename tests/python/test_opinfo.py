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
           "--max-samples", "48"]  # (max_pool2d alone has 1440 samples)
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
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


# Ops whose results of transposed inputs are still laid out otherwise than
# on CPU (their meta kernels' layouts differ from the CPU kernels'): none
# now; kernels.cpp's cpu_kernel_layouts corrects the meta kernels that differ.
_LAYOUT_KNOWN = set()


def test_results_of_transposed_inputs_are_laid_out_as_on_cpu():
    """Every OpInfo op of two or more tensors, its samples (float32, the
    first six) with transposed inputs: the results' strides (of dims longer
    than 1) are CPU's. Layouts decide which
    later views and in-place writes alias what (TensorIterator's rules)."""
    import warnings

    import torch
    from torch.testing._internal.common_methods_invocations import op_db

    import torch_tpu  # noqa: F401

    def transposed(t):
        if isinstance(t, torch.Tensor) and t.layout == torch.strided and t.dim() >= 2 and t.numel() > 1:
            return t.transpose(-1, -2).contiguous().transpose(-1, -2)
        return t

    def to_tpu(t):
        return t.to("tpu") if isinstance(t, torch.Tensor) else t

    def strides(t):
        return tuple(s for s, n in zip(t.stride(), t.shape) if n > 1)

    wrong, checked = {}, 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for op in op_db:
            if torch.float32 not in op.dtypes:
                continue
            try:
                samples = list(op.sample_inputs("cpu", torch.float32, requires_grad=False))[:6]
            except Exception:  # noqa: BLE001  (samples this torch build cannot make)
                continue
            for s in samples:
                args = [transposed(s.input)] + [transposed(a) for a in s.args]
                if sum(isinstance(a, torch.Tensor) and a.dim() >= 1 for a in args) < 2:
                    continue
                try:
                    want = op.op(*args, **s.kwargs)
                    if not isinstance(want, torch.Tensor) or want.layout != torch.strided:
                        continue
                    got = op.op(*[to_tpu(a) for a in args], **{k: to_tpu(v) for k, v in s.kwargs.items()})
                except Exception:  # noqa: BLE001  (errors are the conformance harness's business)
                    continue
                checked += 1
                if strides(got) != strides(want):
                    wrong.setdefault(op.name, (tuple(want.shape), want.stride(), got.stride()))
    assert checked > 500, checked
    unexpected = {k: v for k, v in wrong.items() if k not in _LAYOUT_KNOWN}
    assert not unexpected, f"results laid out otherwise than on CPU (shape, CPU strides, tpu strides): {unexpected}"
