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

import functools

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


def _patch_max_memory(module) -> None:
    """``device_map="auto"`` (and "balanced", "sequential"): accelerate sizes
    the accelerators it knows by index and gives every layer to the CPU when
    it finds none. With an available tpu and no other accelerator, the tpu
    devices are listed by index as CUDA's would be (an index is the current
    accelerator's device to torch: ``torch.device(0)`` is ``tpu:0``), with
    their free memory, ahead of the CPU."""
    original = getattr(module, "get_max_memory", None)
    if original is None or getattr(original, "_torch_tpu", False):
        return

    @functools.wraps(original)
    def get_max_memory(max_memory=None):
        acc = torch.accelerator.current_accelerator(check_available=True)
        if acc is None or acc.type != "tpu":
            return original(max_memory)
        if max_memory is not None:
            # The user's budget: accelerate checks the indices against
            # CUDA's device count (and warns that each is unavailable);
            # check them against the tpu devices instead.
            n = torch.tpu.device_count()
            indices = sorted(k for k in max_memory if isinstance(k, int))
            for k in indices:
                if not 0 <= k < n:
                    module.logger.warning(f"Device {k} is not available, available tpu devices are {list(range(n))}")
            rest = original({k: v for k, v in max_memory.items() if not isinstance(k, int)})
            size = module.convert_file_size_to_int
            return {**{k: size(max_memory[k]) if isinstance(max_memory[k], str) else max_memory[k]
                       for k in indices}, **rest}
        found = original(None)
        if any(isinstance(k, int) for k in found) or "mps" in found:
            return found
        return {**{i: torch.tpu.mem_get_info(i)[0] for i in range(torch.tpu.device_count())}, **found}

    get_max_memory._torch_tpu = True
    module.get_max_memory = get_max_memory


def install() -> None:
    after_import("accelerate.state", _patch)
    after_import("accelerate.utils.modeling", _patch_max_memory)
