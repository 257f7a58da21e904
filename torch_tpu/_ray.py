"""Ray Train on the tpu device, with no setup hook.

With device-backend autoload every Ray worker that imports torch has the tpu
device and the ``tpu`` c10d backend, so
``TorchTrainer(..., torch_config=TorchConfig(backend="tpu"))`` sets up its
process group on tpu. Ray picks each worker's device (``get_device()``,
``prepare_model``, ``prepare_data_loader``) from the accelerators Ray allotted
it (GPU, or TPU on TPU VMs), so with ``use_gpu=False`` it would be the CPU.
torch_tpu never imports Ray; when Ray's modules load it adds two things:

- ``ray.train.torch.config``: ``_TorchBackend.on_start`` first marks every
  worker when the configured backend is tpu (``"tpu"``, ``"tpu_dist"``, or a
  ``"tpu:..."`` entry in a ``device:backend`` list); other backends are left
  as they are.
- ``ray.air._internal.device_manager``: the manager Ray uses when a worker
  has none of its accelerators (the CPU one) gives a marked worker
  ``tpu:LOCAL_RANK`` where the process has that device (torchrun's
  convention on a host with several), else its current device, and makes
  it current; unmarked workers get the CPU as before. (The XLA CPU plugin
  gives each Ray worker one device, ``tpu:0``: Ray sets LOCAL_WORLD_SIZE
  after the worker imported torch.)
"""

from __future__ import annotations

import functools
import os

import torch

from ._after_import import after_import

# Set in a Ray Train worker whose TorchConfig backend is tpu.
_TPU_WORKER = False


def _is_tpu_backend(backend) -> bool:
    if not isinstance(backend, str):
        return False
    for entry in backend.split(","):
        device, sep, _ = entry.strip().partition(":")
        # "tpu" or "tpu_dist" alone names the backend; "tpu:NAME" a device's.
        if device.strip() == "tpu" or (not sep and device.strip() == "tpu_dist"):
            return True
    return False


def _mark_worker() -> None:
    """Runs in each Ray Train worker before its process group is set up."""
    global _TPU_WORKER
    _TPU_WORKER = True


def _worker_device() -> torch.device:
    try:
        local = int(os.environ.get("LOCAL_RANK", "0"))
    except ValueError:
        local = 0
    index = local if 0 <= local < torch.tpu.device_count() else torch.tpu.current_device()
    if torch.tpu.current_device() != index:
        torch.tpu.set_device(index)
    return torch.device("tpu", index)


def _manager_class(base):
    class TPUOrCPUTorchDeviceManager(base):
        """Ray's device manager for a worker without GPUs or Ray TPUs: the
        tpu device where the worker's TorchConfig backend is tpu, else the
        CPU (``base``)."""

        _torch_tpu = True

        def get_devices(self):
            if _TPU_WORKER:
                return [_worker_device()]
            return super().get_devices()

        def set_device(self, device):
            if device is not None and torch.device(device).type == "tpu":
                torch.tpu.set_device(device)
            elif hasattr(base, "set_device"):
                super().set_device(device)

    TPUOrCPUTorchDeviceManager.__qualname__ = TPUOrCPUTorchDeviceManager.__name__
    return TPUOrCPUTorchDeviceManager


def _patch_device_manager(module) -> None:
    base = getattr(module, "DEFAULT_TORCH_DEVICE_MANAGER_CLS", None)
    if base is None or getattr(base, "_torch_tpu", False):
        return
    module.DEFAULT_TORCH_DEVICE_MANAGER_CLS = _manager_class(base)
    if type(getattr(module, "_torch_device_manager", None)) is base:
        module._torch_device_manager = None  # made before the patch: choose again


def _patch_config(module) -> None:
    cls = getattr(module, "_TorchBackend", None)
    original = getattr(cls, "on_start", None)
    if original is None or getattr(original, "_torch_tpu", False):
        return

    @functools.wraps(original)
    def on_start(self, worker_group, backend_config):
        if _is_tpu_backend(getattr(backend_config, "backend", None)):
            worker_group.execute(_mark_worker)
        return original(self, worker_group, backend_config)

    on_start._torch_tpu = True
    cls.on_start = on_start


def install() -> None:
    after_import("ray.air._internal.device_manager", _patch_device_manager)
    after_import("ray.train.torch.config", _patch_config)
