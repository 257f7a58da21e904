"""The ``tpu`` platform for vLLM (see ``torch_tpu.vllm``)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import torch
from vllm.logger import init_logger
from vllm.platforms.interface import Platform, PlatformEnum

if TYPE_CHECKING:
    from vllm.config import VllmConfig

_log = init_logger(__name__)

# The KV cache's block size when the user names none: a multiple of 16, as
# vLLM's other platforms use; the attention backend takes any.
DEFAULT_BLOCK_SIZE = 16
# What the compiled forward's graph depends on beyond the files Dynamo
# traced (which vLLM's compile cache hashes): raised when that changes, so
# that artifacts saved before are not loaded. 2: the KV cache's block count
# is symbolic (worker.TpuModelRunner.initialize_kv_cache_tensors).
AOT_GRAPH_FORMAT = 2


class TpuPlatform(Platform):
    _enum = PlatformEnum.OOT
    device_name: str = "tpu"
    device_type: str = "tpu"
    dispatch_key: str = "PrivateUse1"
    dist_backend: str = "tpu"
    simple_compile_backend: str = "tpu"
    device_control_env_var: str = "TPU_VISIBLE_CHIPS"
    supported_quantization: list[str] = []

    @property
    def supported_dtypes(self) -> list[torch.dtype]:
        return [torch.bfloat16, torch.float16, torch.float32]

    @classmethod
    def check_if_supports_dtype(cls, dtype: torch.dtype) -> None:
        if dtype not in (torch.bfloat16, torch.float16, torch.float32):
            raise ValueError(f"tpu: vLLM models run in bfloat16, float16 or float32, not {dtype}")

    @classmethod
    def get_device_name(cls, device_id: int = 0) -> str:
        return torch.tpu.get_device_name(device_id)

    @classmethod
    def get_device_total_memory(cls, device_id: int = 0) -> int:
        return torch.tpu.mem_get_info(device_id)[1]

    @classmethod
    def set_device(cls, device: torch.device) -> None:
        torch.tpu.set_device(device)

    @classmethod
    def manual_seed_all(cls, seed: int) -> None:
        torch.tpu.manual_seed_all(seed)

    @classmethod
    def inference_mode(cls):
        return torch.inference_mode(mode=True)

    @classmethod
    def is_pin_memory_available(cls) -> bool:
        return True

    @classmethod
    def get_current_memory_usage(cls, device: torch.types.Device | None = None) -> float:
        return float(torch.tpu.memory_allocated(device))

    @classmethod
    def get_attn_backend_cls(cls, selected_backend, attn_selector_config, num_heads: int | None = None) -> str:
        if getattr(attn_selector_config, "use_mla", False) or getattr(attn_selector_config, "use_sparse", False):
            raise NotImplementedError("tpu: vLLM's MLA and sparse attention have no tpu backend yet")
        if selected_backend is not None:
            _log.info("tpu: attention backend %s is not available on tpu; using TPU_PAGED", selected_backend)
        from . import attention

        return attention.PATH

    @classmethod
    def get_device_communicator_cls(cls) -> str:
        return "vllm.distributed.device_communicators.base_device_communicator.DeviceCommunicatorBase"

    @classmethod
    def register_triton_kernel_overrides(cls) -> None:
        from . import kernels

        kernels.register_overrides()

    @classmethod
    def import_kernels(cls) -> None:
        from . import kernels

        kernels.import_and_guard()

    @classmethod
    def apply_config_platform_defaults(cls, vllm_config: "VllmConfig") -> None:
        # Unless the user turns compilation off (enforce_eager, mode 0), the
        # model's forward is one Dynamo trace compiled by the tpu backend:
        # each step, padded to a token bucket (worker.TpuModelRunner),
        # replays one program.
        from vllm.config import CompilationMode

        if vllm_config.compilation_config.mode is None:
            vllm_config.compilation_config.mode = CompilationMode.DYNAMO_TRACE_ONCE

    @classmethod
    def check_and_update_config(cls, vllm_config: "VllmConfig") -> None:
        from vllm.config import CompilationMode
        from vllm.config.compilation import CUDAGraphMode

        cache_config = vllm_config.cache_config
        if not cache_config.user_specified_block_size:
            cache_config.block_size = DEFAULT_BLOCK_SIZE

        parallel_config = vllm_config.parallel_config
        if parallel_config.worker_cls == "auto":
            parallel_config.worker_cls = "torch_tpu.vllm.worker.TpuWorker"
        parallel_config.disable_custom_all_reduce = True
        if getattr(parallel_config, "enable_dbo", False):
            parallel_config.enable_dbo = False

        # The device started in this process cannot be shared with a forked
        # child (PJRT clients do not survive fork): workers are spawned.
        os.environ["VLLM_WORKER_MULTIPROC_METHOD"] = "spawn"

        vllm_config.scheduler_config.async_scheduling = False

        compilation_config = vllm_config.compilation_config
        compilation_config.cudagraph_mode = CUDAGraphMode.NONE
        compilation_config.cudagraph_capture_sizes = []
        if compilation_config.mode == CompilationMode.VLLM_COMPILE:
            _log.info("tpu: vLLM's piecewise Inductor compilation (mode VLLM_COMPILE) does not run on tpu; the "
                      "model's forward is traced once by Dynamo instead (mode DYNAMO_TRACE_ONCE) and compiled by "
                      "the tpu backend, one program per token bucket")
            compilation_config.mode = CompilationMode.DYNAMO_TRACE_ONCE
        if compilation_config.mode != CompilationMode.NONE and compilation_config.backend in ("", "inductor"):
            compilation_config.backend = cls.simple_compile_backend
        # (a field vLLM's compile cache key includes; Inductor never runs here)
        compilation_config.inductor_compile_config["torch_tpu_graph_format"] = AOT_GRAPH_FORMAT

        assert vllm_config.device_config.device_type == "tpu"
