"""``torch.tpu``: the device module of the ``tpu`` device.

Mirrors ``torch.cuda`` where the concepts carry over: devices, seeding,
synchronization, streams and events, memory statistics.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch

_ops = torch.ops.torch_tpu


def is_available() -> bool:
    try:
        return _ops.device_count() > 0
    except RuntimeError:
        return False


def is_initialized() -> bool:
    """Whether this process has started the device (and can use it: a child
    forked after its parent started the device cannot)."""
    return bool(_ops._started()) and not _is_in_bad_fork()


def init() -> None:
    _lazy_init()


def __getattr__(name: str):
    # torch.utils.checkpoint and other device-generic code read the device
    # module's `_initialized` flag (torch.cuda keeps one) to decide whether to
    # save and restore the device RNG state. Computed, not stored: the C++
    # runtime starts on first use without telling Python.
    if name == "_initialized":
        return is_initialized()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def device_count() -> int:
    try:
        return int(_ops.device_count())
    except RuntimeError:
        return 0


def _index(device: Any = None) -> int:
    if device is None:
        return current_device()
    if isinstance(device, int):
        return device
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != "tpu":
            raise ValueError(f"expected a tpu device, got {device}")
        return current_device() if device.index is None else device.index
    raise TypeError(f"expected a device index, str or torch.device, got {type(device).__name__}")


def current_device() -> int:
    return int(_ops.current_device())


def set_device(device: Any) -> None:
    idx = _index(device)
    n = device_count()
    if not 0 <= idx < n:
        raise RuntimeError(f"tpu device index {idx} is out of range: {n} device(s) available")
    _ops.set_device(idx)


class device:
    """Context manager that makes ``idx`` the current tpu device."""

    def __init__(self, idx: Any):
        # None and -1 leave the current device as it is (as torch.cuda.device does).
        self.idx = None if idx is None or (isinstance(idx, int) and idx < 0) else _index(idx)
        self.prev = None

    def __enter__(self):
        if self.idx is not None:
            self.prev = current_device()
            set_device(self.idx)
        return self

    def __exit__(self, *exc):
        if self.prev is not None:
            set_device(self.prev)
        return False


def synchronize(device: Any = None) -> None:
    """Wait until every program started on the device has finished."""
    _ops.synchronize(_index(device))


def get_device_name(device: Any = None) -> str:
    return str(_ops.device_name(_index(device)))


class _DeviceProperties:
    def __init__(self, idx: int):
        info = list(_ops._runtime_info())
        self.name = get_device_name(idx)
        self.platform = info[1]
        self.platform_version = info[2]
        self.pjrt_api_version = info[3]
        self.plugin = info[0]
        # The plugin's limit, or (the CPU plugin) the host's memory.
        self.total_memory = int(_ops.mem_get_info(idx)[1])

    def __repr__(self) -> str:
        return (
            f"_TpuDeviceProperties(name='{self.name}', platform='{self.platform}', "
            f"pjrt_api_version='{self.pjrt_api_version}', total_memory={self.total_memory})"
        )


def get_device_properties(device: Any = None) -> _DeviceProperties:
    return _DeviceProperties(_index(device))


def get_device_capability(device: Any = None) -> tuple[int, int]:
    return (0, 0)


# ---- random numbers -------------------------------------------------------------


def manual_seed(seed: int) -> None:
    """Seed the current tpu device's default generator."""
    s = int(seed) & 0xFFFF_FFFF_FFFF_FFFF
    _ops.manual_seed(current_device(), s - (1 << 64) if s >= (1 << 63) else s)


def manual_seed_all(seed: int) -> None:
    for i in range(device_count()):
        with device(i):
            manual_seed(seed)


def seed() -> int:
    return int(_ops.seed(current_device()))


def seed_all() -> None:
    s = seed()
    manual_seed_all(s)


def initial_seed() -> int:
    return int(_ops.initial_seed(current_device())) & 0xFFFF_FFFF_FFFF_FFFF


def get_rng_state(device: Any = None) -> torch.Tensor:
    return _ops.get_rng_state(_index(device))


def set_rng_state(new_state: torch.Tensor, device: Any = None) -> None:
    _ops.set_rng_state(_index(device), new_state)


def get_rng_state_all() -> list[torch.Tensor]:
    return [get_rng_state(i) for i in range(device_count())]


def set_rng_state_all(new_states: list[torch.Tensor]) -> None:
    for i, s in enumerate(new_states):
        set_rng_state(s, i)


# ---- streams and events -----------------------------------------------------------
# One in-order stream per device: programs run in the order they are started.


class Stream:
    def __init__(self, device: Any = None, priority: int = 0):
        self.device = torch.device("tpu", _index(device))
        self.priority = priority

    def synchronize(self) -> None:
        synchronize(self.device)

    def wait_stream(self, stream: "Stream") -> None:
        pass

    def wait_event(self, event: "Event") -> None:
        pass

    def record_event(self, event: "Event | None" = None) -> "Event":
        event = event or Event()
        event.record(self)
        return event

    def query(self) -> bool:
        return True

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Stream) and other.device == self.device

    def __hash__(self) -> int:
        return hash(("tpu-stream", self.device))


class Event:
    def __init__(self, enable_timing: bool = False, blocking: bool = False):
        self.enable_timing = enable_timing
        self._device: int | None = None
        self._time: float | None = None

    def record(self, stream: Stream | None = None) -> None:
        import time

        self._device = (stream.device.index if stream is not None else current_device())
        if self.enable_timing:
            synchronize(self._device)
            self._time = time.perf_counter()

    def synchronize(self) -> None:
        if self._device is not None:
            synchronize(self._device)

    def wait(self, stream: Stream | None = None) -> None:
        pass

    def query(self) -> bool:
        return True

    def elapsed_time(self, end: "Event") -> float:
        if self._time is None or end._time is None:
            raise RuntimeError("both events must be recorded with enable_timing=True")
        return (end._time - self._time) * 1000.0


def current_stream(device: Any = None) -> Stream:
    return Stream(device)


def default_stream(device: Any = None) -> Stream:
    return Stream(device)


@contextlib.contextmanager
def stream(s: Stream | None):
    yield s


# ---- memory -------------------------------------------------------------------------


def memory_allocated(device: Any = None) -> int:
    """Bytes held by live tpu tensors' storages on the device."""
    return int(_ops.memory_stats(_index(device))[0])


def max_memory_allocated(device: Any = None) -> int:
    return int(_ops.memory_stats(_index(device))[1])


def reset_peak_memory_stats(device: Any = None) -> None:
    _ops.reset_peak_memory_stats(_index(device))


def memory_stats(device: Any = None) -> dict[str, int]:
    allocated, peak, allocs, in_use, limit = (int(v) for v in _ops.memory_stats(_index(device)))
    stats = {
        "allocated_bytes.all.current": allocated,
        "allocated_bytes.all.peak": peak,
        "num_alloc_retries": 0,
        "allocation.all.allocated": allocs,
    }
    if in_use >= 0:
        stats["device_bytes_in_use"] = in_use
    if limit >= 0:
        stats["device_bytes_limit"] = limit
    return stats


def memory_reserved(device: Any = None) -> int:
    """Nothing is cached: the reserved bytes are the allocated ones."""
    return memory_allocated(device)


def max_memory_reserved(device: Any = None) -> int:
    return max_memory_allocated(device)


def reset_accumulated_memory_stats(device: Any = None) -> None:
    _ops.reset_accumulated_memory_stats(_index(device))


def mem_get_info(device: Any = None) -> tuple[int, int]:
    """(free, total) bytes of the device (the host's memory for the CPU plugin)."""
    free, total = (int(v) for v in _ops.mem_get_info(_index(device)))
    return free, total


def memory_summary(device: Any = None, abbreviated: bool = False) -> str:
    s = memory_stats(device)
    return (f"tpu:{_index(device)} memory: {s['allocated_bytes.all.current']} bytes allocated "
            f"(peak {s['allocated_bytes.all.peak']}), {s['allocation.all.allocated']} allocations; "
            "buffers are freed when their tensors die (no cache)")


def empty_cache() -> None:
    """Buffers are freed when their tensors die; nothing is cached."""


def get_amp_supported_dtype() -> list[torch.dtype]:
    return [torch.bfloat16, torch.float16]


def _is_in_bad_fork() -> bool:
    """True in a child made by fork() after this process started the device:
    the device cannot be used there (use the 'spawn' start method)."""
    return bool(_ops._in_forked_child()) and bool(_ops._started())


def _lazy_init() -> None:
    if _is_in_bad_fork():
        raise RuntimeError(
            "Cannot re-initialize the tpu device in a forked subprocess: the parent process had started it, "
            "and a PJRT plugin does not survive fork(). To use tpu with multiprocessing, use the 'spawn' "
            "start method (multiprocessing.set_start_method('spawn') or torch.multiprocessing.spawn).")
    _ops.device_count()


# ---- the compilation cache ------------------------------------------------------------


def cache_stats() -> dict:
    """Executable cache statistics (hits, misses, disk_hits, compile_seconds,
    ...); the same as ``torch_tpu.cache_stats()``."""
    import torch_tpu

    return torch_tpu.cache_stats()


def clear_cache(disk: bool = False) -> int:
    """Drop compiled programs from memory (and from disk with ``disk=True``)."""
    import torch_tpu

    return torch_tpu.clear_cache(disk)
