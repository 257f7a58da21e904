"""Hugging Face accelerate on the tpu device, with no environment variable.

Transformers finds the tpu device through ``torch.accelerator``; accelerate
(1.x) picks its device from a fixed list of the devices it knows and falls
back to the CPU, so the Trainer put the model on ``tpu:0`` and every batch on
the CPU. accelerate has no hook for out-of-tree devices, so when its module
``accelerate.state`` is first imported (torch_tpu never imports accelerate
itself) ``PartialState.default_device`` is wrapped: where accelerate found
nothing but the CPU and ``torch.accelerator`` reports an available tpu, the
device is tpu. ``ACCELERATE_TORCH_DEVICE``, ``cpu=True`` (``use_cpu``) and
every device accelerate knows are left as they are.
"""

from __future__ import annotations

import torch

from ._after_import import after_import


def _patch(module) -> None:
    cls = getattr(module, "PartialState", None)
    original = getattr(cls, "default_device", None)
    if not isinstance(original, property) or getattr(original.fget, "_torch_tpu", False):
        return

    def default_device(self):
        device = original.fget(self)
        if device.type == "cpu":
            acc = torch.accelerator.current_accelerator(check_available=True)
            if acc is not None and acc.type == "tpu":
                return torch.device("tpu")
        return device

    default_device._torch_tpu = True
    cls.default_device = property(default_device, doc=original.__doc__)


def install() -> None:
    after_import("accelerate.state", _patch)
