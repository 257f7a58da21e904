"""The kernels vLLM launches outside the model, on tpu, and the guard on its
CPU kernels.

vLLM's CPU build registers its C++ kernels (``torch.ops._C``,
``_C_cache_ops``, ...) for every device: they read and write host memory
through raw pointers, so a tpu tensor reaching one would crash the process
(a tpu tensor's data pointer is a device buffer, not host memory).
``import_and_guard`` gives each of them a PrivateUse1 kernel that raises
``NotImplementedError`` naming the op and the tpu path to use instead;
``register_overrides`` points the kernels vLLM's model runner launches
(Triton kernels on GPUs, C++ on CPU) at implementations in torch ops, which
run as programs on the device.
"""

from __future__ import annotations

import contextlib
import threading

import torch

from torch_tpu._sparse import _exact_new_tensors

# vLLM's C++ extension namespaces (the CPU build registers ops in these).
VLLM_NAMESPACES = ("_C", "_C_cache_ops", "_C_utils", "_C_custom_ar", "_moe_C", "_rocm_C", "_C_cpu")

_guarded: set[str] = set()
_libraries: list[torch.library.Library] = []
_lock = threading.Lock()


class CpuKernelOnTpuError(NotImplementedError):
    """A tpu tensor reached one of vLLM's CPU (raw host pointer) kernels."""


def _refuse(op: str):
    def kernel(*args, **kwargs):
        raise CpuKernelOnTpuError(
            f"vLLM's kernel {op} reads host memory through raw pointers and cannot take tpu tensors. "
            "torch_tpu's vLLM platform replaces the kernels its model runner and attention backend "
            "use; this one was reached from elsewhere (a model layer or feature the tpu platform does "
            "not cover yet). Run the model with TORCH_TPU_VLLM=0 (vLLM's CPU platform) or report the "
            "layer that called it."
        )

    kernel.__name__ = f"tpu_refuses_{op.replace('::', '_').replace('.', '_')}"
    return kernel


def guard_cpu_kernels() -> list[str]:
    """Gives every op of vLLM's C++ namespaces that has no PrivateUse1 kernel
    one that raises ``CpuKernelOnTpuError``; returns the ops guarded now."""
    added = []
    with _lock:
        names = torch._C._dispatch_get_all_op_names()
        for full in names:
            ns, _, name = full.partition("::")
            if ns not in VLLM_NAMESPACES or full in _guarded:
                continue
            if torch._C._dispatch_has_kernel_for_dispatch_key(full, "PrivateUse1"):
                continue
            lib = torch.library.Library(ns, "IMPL")
            try:
                lib.impl(name, _refuse(full), "PrivateUse1")
            except RuntimeError:
                continue
            _libraries.append(lib)
            _guarded.add(full)
            added.append(full)
    return added


def import_and_guard() -> None:
    """Imports vLLM's C++ extensions (as vLLM's platforms do) and guards
    their kernels against tpu tensors."""
    for mod in ("vllm._C", "vllm._moe_C", "vllm._C_utils"):
        with contextlib.suppress(ImportError):
            __import__(mod)
    guard_cpu_kernels()


def token_requests(query_start_loc: torch.Tensor, num_tokens: int) -> torch.Tensor:
    """The request of each of a step's first ``num_tokens`` tokens (int64):
    how many requests end at or before it (``query_start_loc`` splits the
    flat token axis into requests; a token past the last request gets the
    request count)."""
    ends = query_start_loc[1:].to(torch.int64)
    tok = torch.arange(num_tokens, device=query_start_loc.device, dtype=torch.int64)
    return (tok.unsqueeze(1) >= ends.unsqueeze(0)).sum(1)


def _bucket(n: int, limit: int) -> int:
    """The power of two (at least 16) at or above ``n``, at most ``limit``."""
    b = 16
    while b < n:
        b *= 2
    return max(min(b, limit), n)


def _widened(t: torch.Tensor, n: int) -> torch.Tensor:
    """The first ``n`` elements of the 1-d buffer view ``t`` starts (read
    past its end, within its storage): vLLM hands out a step's prefix of a
    persistent buffer, and a program over the prefix's own length would be
    compiled for every length."""
    room = t.untyped_storage().nbytes() // t.element_size() - t.storage_offset()
    return t.as_strided((min(n, room),), (1,), t.storage_offset())


def compute_slot_mapping(
    num_tokens: int,
    max_num_tokens: int,
    query_start_loc: torch.Tensor,
    positions: torch.Tensor,
    block_table: torch.Tensor,
    block_table_stride: int,
    slot_mapping: torch.Tensor,
    KV_CACHE_BLOCK_SIZE: int,  # noqa: N803 (the kernel's parameter names)
    TOTAL_CP_WORLD_SIZE: int = 1,  # noqa: N803
    TOTAL_CP_RANK: int = 0,  # noqa: N803
    CP_KV_CACHE_INTERLEAVE_SIZE: int = 1,  # noqa: N803
    PAD_ID: int = -1,  # noqa: N803
    BLOCK_SIZE: int = 1024,  # noqa: N803
) -> None:
    """vLLM's slot mapping: for each scheduled token, the KV cache slot its
    key and value go to (``block_table[req, pos // block_size] * block_size
    + pos % block_size``), ``PAD_ID`` for the padding up to
    ``max_num_tokens``; written into ``slot_mapping`` in place.

    It runs over power-of-two buckets of the step's tokens and requests, the
    counts themselves run-time operands, so a step of a new size compiles
    nothing new within its buckets."""
    if TOTAL_CP_WORLD_SIZE != 1:
        raise NotImplementedError("tpu: vLLM's context parallelism (decode context parallel) is not supported")
    done = 0
    if num_tokens:
        with _exact_new_tensors():  # (bucket-sized: the new-tensor rule would pad them by their history)
            dev = positions.device
            reqs = query_start_loc.shape[0] - 1
            qsl = _widened(query_start_loc, _bucket(reqs, block_table.shape[0]) + 1)
            pos = _widened(positions, _bucket(num_tokens, max_num_tokens)).to(torch.int64)
            done = pos.shape[0]
            counts = torch.tensor([num_tokens, reqs], device=dev)  # (an upload: no program)
            ends = qsl[1:].to(torch.int64)
            ends = torch.where(torch.arange(ends.shape[0], device=dev) < counts[1], ends,
                               torch.iinfo(torch.int64).max)
            tok = torch.arange(done, device=dev, dtype=torch.int64)
            real = tok < counts[0]
            req = (tok.unsqueeze(1) >= ends.unsqueeze(0)).sum(1)
            pos = torch.where(real, pos, 0)
            at = torch.where(real, req * block_table_stride
                             + torch.div(pos, KV_CACHE_BLOCK_SIZE, rounding_mode="floor"), 0)
            block = block_table.reshape(-1)[at]
            slots = torch.where(real, block.to(torch.int64) * KV_CACHE_BLOCK_SIZE + pos % KV_CACHE_BLOCK_SIZE,
                                PAD_ID)
            slot_mapping[:done].copy_(slots)
    if max_num_tokens > done:
        slot_mapping[done:max_num_tokens].fill_(PAD_ID)


def register_overrides() -> None:
    """Points the kernels vLLM's model runner launches at the torch-op
    implementations above."""
    from vllm.triton_utils import dispatcher

    overrides = {"vllm.v1.worker.block_table.ComputeSlotMappingKernel.kernel": compute_slot_mapping}
    try:
        dispatcher.register_kernels(overrides)
    except AttributeError:
        # vLLM's scan of sys.modules for other holders of a kernel calls
        # vars(x).get(...) on every module attribute that has a __dict__; an
        # object whose __dict__ is no dict (llvmlite.binding.ffi.lib, once
        # numba or llvmlite is imported) stops it before the kernel's own
        # attribute is swapped. The slot-mapping kernel has no other holder
        # (its runner launches it through the class): swap that here.
        for name, impl in overrides.items():
            host, attr = dispatcher._resolve_kernel(name)
            if not isinstance(getattr(host, attr), dispatcher.KernelOverride):
                setattr(host, attr, dispatcher.KernelOverride(getattr(host, attr), impl))
