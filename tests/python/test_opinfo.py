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
           "--group", "100"]
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
