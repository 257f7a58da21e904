"""torch.distributed on tpu tensors: the ``tpu`` c10d backend.

``import torch_tpu`` registers the backend (also under TorchTPU's name,
``tpu_dist``) for the ``tpu`` device, so every usual way of starting works::

    dist.init_process_group()                     # tpu tensors -> tpu, CPU tensors -> gloo
    dist.init_process_group("tpu")                # the same
    dist.init_process_group("cpu:gloo,tpu:tpu")   # the same, spelled out
    dist.init_process_group(device_id=torch.device("tpu", local_rank))

A process group made with it carries two backends: the tpu backend
(csrc/distributed/process_group.h) for tpu tensors and a Gloo backend for CPU
tensors, which is also the tpu backend's host transport on plugins that
cannot run a program across processes (the XLA CPU plugin).
"""

from __future__ import annotations

import torch

BACKEND = "tpu"
ALIASES = ("tpu_dist",)


def _create(opts, backend_options=None):
    """c10d's creator (extended API): one process group with the tpu backend
    for tpu tensors and Gloo for CPU tensors (the tpu backend's transport)."""
    from torch.distributed import PrefixStore, ProcessGroup, ProcessGroupGloo

    from . import _C_distributed

    rank, size, timeout = opts.group_rank, opts.group_size, opts.timeout
    ranks = list(opts.global_ranks_in_group)
    host = ProcessGroupGloo(PrefixStore("host/", opts.store), rank, size, timeout=timeout)
    host.options.global_ranks_in_group = ranks
    host.options.group_name = opts.group_id
    host._set_sequence_number_for_group()
    backend = _C_distributed.ProcessGroupTPU(opts.store, rank, size, timeout, host, opts.group_id, ranks)

    pg = ProcessGroup(opts.store, rank, size)
    pg._set_default_backend(ProcessGroup.BackendType.CUSTOM)
    pg._register_backend(torch.device("tpu"), ProcessGroup.BackendType.CUSTOM, backend)
    pg._register_backend(torch.device("cpu"), ProcessGroup.BackendType.GLOO, host)
    return pg


def register() -> None:
    """Registers the backend with torch.distributed (at ``import torch_tpu``)."""
    if not torch.distributed.is_available():
        return
    Backend = torch.distributed.Backend
    for name in (BACKEND, *ALIASES):
        if name.upper() not in Backend._plugins:
            Backend.register_backend(name, _create, extended_api=True, devices=["tpu"])


def all_reduce_local(tensors, op: str = "sum"):
    """The reduction (``"sum"``, ``"product"``, ``"max"``, ``"min"``) of
    ``tensors[r]`` on ``tpu:r`` for r = 0..n-1, one result per device: one
    program across this process's devices (an XLA all-reduce over replicas,
    no round trip through the host). With the CPU plugin,
    ``TORCH_TPU_CPU_DEVICES=N`` gives a process N devices."""
    return list(torch.ops.torch_tpu._all_reduce_local(list(tensors), op))
