"""Ray Train, unchanged, on tpu: ``TorchTrainer`` with
``TorchConfig(backend="tpu")``, 2 workers, DDP, no worker setup hook; the
workers' ``ray.train.torch.get_device()`` is their tpu device, and the
trained weights equal those of the same run on gloo/CPU.

One run of ``examples/ray_train.py --compare-cpu`` (one trainer per backend)
in a fresh process with a time limit: Ray starts a controller and two worker
processes per trainer, about 35 s each on 2 cores. Skipped when Ray is not
installed (the ``ray`` extra; README, "Ray Train"); Ray is not imported into
the test process. Strict eager only.
"""

import importlib.util
import os
import re
import subprocess
import sys

import types

import pytest
import torch

from conftest import current_mode, run_python
from torch_tpu import _ray

pytestmark = pytest.mark.skipif(current_mode() != "strict", reason="strict eager only")
needs_ray = pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="ray not installed (the ray extra)")

_EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "ray_train.py")


@needs_ray
def test_torch_trainer_ddp_on_tpu_matches_gloo_cpu(tmp_path):
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0")
    env.pop("TORCH_TPU_CPU_DEVICES", None)  # the plugin's default: one device per worker
    r = subprocess.run(
        [sys.executable, _EXAMPLE, "--steps", "4", "--compare-cpu", "--storage", str(tmp_path / "results")],
        capture_output=True, text=True, timeout=420, env=env, cwd=tmp_path,
    )
    log = r.stdout[-4000:] + r.stderr[-8000:]
    assert r.returncode == 0, log
    assert "Unknown backend type" not in r.stdout + r.stderr, log
    # get_device() in rank 0 (whose checkpoint the driver reads) is tpu:0; gloo's is the CPU.
    assert re.search(r"^tpu:  4 steps on tpu:0, loss ", r.stdout, re.M), log
    assert re.search(r"^gloo: 4 steps on cpu, loss ", r.stdout, re.M), log
    diff = float(re.search(r"max \|weight difference\| tpu vs gloo/CPU: (\S+)", r.stdout).group(1))
    # float32 convolutions and matmuls by XLA's CPU kernels vs PyTorch's: rounding only.
    assert diff < 1e-5, log


# ---- the pieces, without Ray -------------------------------------------------


def test_which_backends_are_tpu():
    for name in ("tpu", "tpu_dist", "cpu:gloo,tpu:tpu", "tpu:tpu_dist", " cpu:gloo , tpu:tpu "):
        assert _ray._is_tpu_backend(name), name
    for name in ("gloo", "nccl", "cpu:gloo,cuda:nccl", "hccl", None, "", "tpux"):
        assert not _ray._is_tpu_backend(name), name


def test_on_start_marks_the_workers_of_a_tpu_trainer_only(monkeypatch):
    calls = []

    class _TorchBackend:
        def on_start(self, worker_group, backend_config):
            calls.append(backend_config.backend)

    class WorkerGroup:
        def __init__(self):
            self.ran = []

        def execute(self, fn, *args, **kwargs):
            self.ran.append(fn)

    module = types.SimpleNamespace(_TorchBackend=_TorchBackend)
    _ray._patch_config(module)
    _ray._patch_config(module)  # once only
    for backend, marked in (("gloo", False), ("tpu", True), ("cpu:gloo,tpu:tpu", True)):
        group = WorkerGroup()
        _TorchBackend().on_start(group, types.SimpleNamespace(backend=backend))
        assert group.ran == ([_ray._mark_worker] if marked else []), backend
    assert calls == ["gloo", "tpu", "cpu:gloo,tpu:tpu"]


def test_the_default_device_manager_gives_a_marked_worker_its_tpu(monkeypatch):
    class CPUManager:
        def get_devices(self):
            return [torch.device("cpu")]

    module = types.SimpleNamespace(DEFAULT_TORCH_DEVICE_MANAGER_CLS=CPUManager, _torch_device_manager=CPUManager())
    _ray._patch_device_manager(module)
    cls = module.DEFAULT_TORCH_DEVICE_MANAGER_CLS
    assert issubclass(cls, CPUManager) and module._torch_device_manager is None
    _ray._patch_device_manager(module)
    assert module.DEFAULT_TORCH_DEVICE_MANAGER_CLS is cls  # once only
    monkeypatch.setattr(_ray, "_TPU_WORKER", False)
    assert cls().get_devices() == [torch.device("cpu")]
    monkeypatch.setattr(_ray, "_TPU_WORKER", True)
    monkeypatch.setenv("LOCAL_RANK", "0")
    assert cls().get_devices() == [torch.device("tpu", 0)]
    monkeypatch.setenv("LOCAL_RANK", str(torch.tpu.device_count()))  # no such device: the current one
    assert cls().get_devices() == [torch.device("tpu", torch.tpu.current_device())]


_PARTIAL = r"""
import sys, types, importlib.abc, importlib.machinery
from torch_tpu._after_import import after_import
seen = []
# A module that registers a function on itself while its body runs, as
# ray.train.torch.config would if its `import torch` were the first.
src = "from torch_tpu._after_import import after_import\n" \
      "after_import('partial_mod', lambda m: SEEN.append(m.DEFINED_LATER))\n" \
      "DEFINED_LATER = 42\n"
class Loader(importlib.abc.Loader):
    def create_module(self, spec): return None
    def exec_module(self, module):
        module.SEEN = seen
        exec(src, module.__dict__)
class Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "partial_mod":
            return importlib.machinery.ModuleSpec(name, Loader())
sys.meta_path.append(Finder())
import partial_mod
assert seen == [], seen          # not run on the half-made module
import json                     # the next import runs it
import colorsys
assert seen == [42], seen
after_import("partial_mod", lambda m: seen.append("now"))  # a finished module: at once
assert seen == [42, "now"], seen
print("ok")
"""


def test_after_import_waits_for_a_module_still_executing():
    out = run_python(_PARTIAL, timeout=120)
    assert out.returncode == 0 and "ok" in out.stdout, out.stdout + out.stderr
