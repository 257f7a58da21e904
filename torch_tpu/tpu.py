"""``torch.tpu``: the device module of the ``tpu`` device.

Mirrors ``torch.cuda`` where the concepts carry over: devices, seeding,
synchronization, streams and events, memory statistics.
"""

from __future__ import annotations

import contextlib
import enum
from collections import OrderedDict
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


class device_of(device):
    """Context manager that makes the device of ``obj`` (a tensor) current;
    a CPU tensor leaves the current device as it is."""

    def __init__(self, obj: Any):
        super().__init__(obj.get_device() if obj.device.type == "tpu" else -1)


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
# One in-order stream per device: PJRT runs a device's programs in the order
# they are started, so every stream of a device is that one (ordering work on
# it with everything else is always correct). Events are real: recording one
# takes the completion of the latest program started on the device (running
# the thread's deferred fused graph first); query() tells whether it is done,
# synchronize() waits for it, elapsed_time() measures between completions.


class Stream(torch.Stream):
    def __new__(cls, device: Any = None, priority: int = 0, **kwargs):
        return super().__new__(cls, device=torch.device("tpu", _index(device)), priority=priority)

    def __init__(self, device: Any = None, priority: int = 0, **kwargs):
        self.priority = priority

    def wait_event(self, event: "torch.Event") -> None:
        pass  # one in-order stream: already ordered

    def wait_stream(self, stream: "torch.Stream") -> None:
        pass

    def record_event(self, event: "torch.Event | None" = None) -> "torch.Event":
        event = event if event is not None else Event()
        event.record(self)
        return event


class Event(torch.Event):
    def __new__(cls, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False):
        return super().__new__(cls, device="tpu", enable_timing=enable_timing, blocking=blocking,
                               interprocess=interprocess)

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False):
        self.enable_timing = enable_timing

    def record(self, stream: "torch.Stream | None" = None) -> None:
        super().record(stream if stream is not None else current_stream())

    def wait(self, stream: "torch.Stream | None" = None) -> None:
        pass  # one in-order stream: already ordered

    def elapsed_time(self, end_event: "torch.Event") -> float:
        """Milliseconds between this event's completion and ``end_event``'s."""
        if end_event.device.type != "tpu":
            raise ValueError(f"elapsed_time: end_event is on {end_event.device}, not tpu")
        return float(_ops._event_elapsed_ms(self.event_id, end_event.event_id))


def current_stream(device: Any = None) -> Stream:
    return Stream(device)


def default_stream(device: Any = None) -> Stream:
    return Stream(device)


def set_stream(stream: torch.Stream) -> None:
    """Every stream of a device is its one in-order stream: nothing to switch."""


@contextlib.contextmanager
def stream(s: "torch.Stream | None"):
    yield s


class StreamContext:
    """Context manager selecting a stream (torch.cuda.StreamContext's form);
    every stream of a device is its one in-order stream."""

    def __init__(self, stream: "torch.Stream | None"):
        self.stream = stream

    def __enter__(self):
        return self.stream

    def __exit__(self, *exc):
        return False


def is_current_stream_capturing() -> bool:
    """No stream is ever capturing a graph (there are no device graphs to capture)."""
    return False


def is_bf16_supported(including_emulation: bool = True) -> bool:
    """bfloat16 is a native dtype of every tpu device (and of XLA on CPU and GPU)."""
    return True


def is_tf32_supported() -> bool:
    """TF32 is an NVIDIA tensor-core format; float32 matmul precision is set
    with torch.set_float32_matmul_precision."""
    return False


# ---- memory -------------------------------------------------------------------------


def memory_stats(device: Any = None) -> "OrderedDict[str, int]":
    """The device's memory statistics under CUDA's caching allocator's keys
    and meanings (``allocated_bytes.all.current``, ``active_bytes.all.peak``,
    ``reserved_bytes.all.peak``, ``allocation.large_pool.allocated``,
    ``num_ooms``, ``num_alloc_retries``, ...): ``current`` now, ``peak``
    since ``reset_peak_memory_stats``, ``allocated``/``freed`` since
    ``reset_accumulated_memory_stats``; pools split by size as CUDA's (small:
    under 1 MiB). Nothing is cached: each storage is one device buffer, so
    allocated, active, requested and reserved bytes are equal, every
    allocation is a segment, and there are no retries or splits. Also
    ``device_bytes_in_use`` / ``device_bytes_limit`` where the plugin
    reports them."""
    idx = _index(device)
    stats = torch.accelerator.memory_stats(idx)
    _, _, _, in_use, limit = (int(v) for v in _ops.memory_stats(idx))
    if in_use >= 0:
        stats["device_bytes_in_use"] = in_use
    if limit >= 0:
        stats["device_bytes_limit"] = limit
    return stats


def memory_stats_as_nested_dict(device: Any = None) -> dict:
    """memory_stats as nested dictionaries (``stats["allocated_bytes"]["all"]["peak"]``)."""
    nested: dict = {}
    for key, value in memory_stats(device).items():
        *path, leaf = key.split(".")
        node = nested
        for part in path:
            node = node.setdefault(part, {})
        node[leaf] = value
    return nested


def memory_allocated(device: Any = None) -> int:
    """Bytes held by live tpu tensors' storages on the device."""
    return int(_ops.memory_stats(_index(device))[0])


def max_memory_allocated(device: Any = None) -> int:
    """The most bytes held at once since the last reset_peak_memory_stats."""
    return int(_ops.memory_stats(_index(device))[1])


def memory_reserved(device: Any = None) -> int:
    """Nothing is cached: the reserved bytes are the allocated ones."""
    return memory_allocated(device)


def max_memory_reserved(device: Any = None) -> int:
    return max_memory_allocated(device)


def reset_peak_memory_stats(device: Any = None) -> None:
    """Reset every statistic's peak to its current value."""
    _ops.reset_peak_memory_stats(_index(device))


def reset_max_memory_allocated(device: Any = None) -> None:
    """The older name of reset_peak_memory_stats."""
    reset_peak_memory_stats(device)


def reset_max_memory_cached(device: Any = None) -> None:
    """The older name of reset_peak_memory_stats."""
    reset_peak_memory_stats(device)


def reset_accumulated_memory_stats(device: Any = None) -> None:
    """Reset the allocated/freed totals and the OOM count."""
    _ops.reset_accumulated_memory_stats(_index(device))


def set_per_process_memory_fraction(fraction: float, device: Any = None) -> None:
    """Limit the bytes this process's live tensors may hold on the device to
    ``fraction`` of its memory (mem_get_info's total); an allocation past it
    raises torch.OutOfMemoryError, as on CUDA. 1.0 removes the limit."""
    if not isinstance(fraction, (int, float)) or not 0 <= fraction <= 1:
        raise ValueError(f"set_per_process_memory_fraction: fraction must be in [0, 1], got {fraction}")
    idx = _index(device)
    total = mem_get_info(idx)[1]
    _ops._set_memory_limit(idx, 0 if fraction >= 1 else max(1, int(total * fraction)))


OutOfMemoryError = torch.OutOfMemoryError


def mem_get_info(device: Any = None) -> tuple[int, int]:
    """(free, total) bytes of the device (the host's memory for the CPU plugin)."""
    free, total = (int(v) for v in _ops.mem_get_info(_index(device)))
    return free, total


def memory_summary(device: Any = None, abbreviated: bool = False) -> str:
    """A table of memory_stats, in the layout of torch.cuda.memory_summary."""
    idx = _index(device)
    stats = memory_stats(idx)
    rows = [("allocated_bytes", "Allocated memory", True), ("active_bytes", "Active memory", True),
            ("requested_bytes", "Requested memory", True), ("reserved_bytes", "tpu reserved memory", True),
            ("allocation", "Allocations", False), ("active", "Active allocs", False),
            ("segment", "tpu reserved segments", False)]
    pools = [("all", "")] + ([] if abbreviated else [("large_pool", "      from large pool"),
                                                       ("small_pool", "      from small pool")])
    rule, thick = "-" * 75, "=" * 75
    lines = [thick, f" {'':17} PyTorch tpu memory summary, device ID {idx:<17d} ", rule,
             f"  {'':9} tpu OOMs: {stats['num_ooms']:<13d} | {'':6} alloc retries: {stats['num_alloc_retries']:<14d} ",
             thick, "        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  "]
    for key, name, is_bytes in rows:
        lines.append(rule)
        scale = None
        for pool, label in pools:
            values = [stats[f"{key}.{pool}.{m}"] for m in ("current", "peak", "allocated", "freed")]
            scale = scale or values  # a metric's units follow its "all" row, as CUDA's table
            cells = [(_format_bytes if is_bytes else _format_count)(v, ref) for v, ref in zip(values, scale)]
            lines.append(f" {label or name:<21} | " + " | ".join(cells) + " ")
    lines.append(thick)
    return "|" + "|\n|".join(lines) + "|\n"


def _format_bytes(n: int, ref: int) -> str:
    unit = "B  "
    for next_unit in ("KiB", "MiB", "GiB", "TiB", "PiB"):
        if ref < 768 * 1024:
            break
        unit, n, ref = next_unit, n // 1024, ref / 1024
    return f"{n:6d} {unit}"


def _format_count(n: int, ref: int) -> str:
    unit = " "
    for next_unit in ("K", "M"):
        if ref < 750 * 1000:
            break
        unit, n, ref = next_unit, n // 1000, ref / 1000
    return f"{n:7d} {unit} "


def empty_cache() -> None:
    """Buffers are freed when their tensors die; nothing is cached."""


def get_amp_supported_dtype() -> list[torch.dtype]:
    return [torch.bfloat16, torch.float16]


# The autocast state of the tpu device, as torch.autocast("tpu") sets it
# (the names TorchTPU's device module gives; torch.is_autocast_enabled("tpu")
# and friends are the same state).
def _is_autocast_enabled() -> bool:
    return torch.is_autocast_enabled("tpu")


def _set_autocast_enabled(enabled: bool) -> None:
    torch.set_autocast_enabled("tpu", bool(enabled))


def _get_autocast_dtype() -> torch.dtype:
    return torch.get_autocast_dtype("tpu")


def _set_autocast_dtype(dtype: torch.dtype) -> None:
    if dtype not in get_amp_supported_dtype():
        raise ValueError(f"torch.tpu._set_autocast_dtype: tpu autocast supports {get_amp_supported_dtype()}, "
                         f"got {dtype}")
    torch.set_autocast_dtype("tpu", dtype)


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


# ---- matmul precision --------------------------------------------------------------------


class Precision(enum.Enum):
    """Precision of float32 matmuls and convolutions: XLA's DEFAULT (one
    bfloat16 pass on TPU), HIGH (three passes) and HIGHEST (float32). They are
    PyTorch's float32 matmul precisions "medium", "high" and "highest"."""

    DEFAULT = "medium"
    HIGH = "high"
    HIGHEST = "highest"


def get_precision() -> Precision:
    """The calling thread's precision: its innermost ``precision`` block's,
    else the process default (torch.get_float32_matmul_precision())."""
    scoped = str(_ops._scoped_precision())
    return Precision(scoped or torch.get_float32_matmul_precision())


def set_precision(precision: "Precision | str") -> None:
    """Set the process default (what threads outside a ``precision`` block
    use; the same as torch.set_float32_matmul_precision)."""
    torch.set_float32_matmul_precision(_as_precision(precision).value)


def _as_precision(p: "Precision | str") -> Precision:
    if isinstance(p, Precision):
        return p
    name = str(p)
    for member in Precision:
        if name.upper() == member.name or name.lower() == member.value:
            return member
    raise ValueError(f"torch.tpu.precision: unknown precision {p!r}; expected one of "
                     f"{[m.name for m in Precision]} (or {[m.value for m in Precision]})")


class precision(contextlib.ContextDecorator):
    """Run the block's float32 matmuls and convolutions at precision ``p`` on
    the calling thread (and in the backward passes it runs: autograd's
    threads follow it); other threads, and threads started inside the
    block, keep the process default. Usable as a decorator."""

    def __init__(self, p: "Precision | str"):
        self.precision = _as_precision(p)

    def __enter__(self):
        _ops._enter_precision(self.precision.value)
        return self

    def __exit__(self, *exc):
        _ops._exit_precision()
        return False


# ---- the compilation cache ------------------------------------------------------------


def _set_dump_on_cache_miss(on: bool = True) -> None:
    """Print every program compiled on a cache miss (its StableHLO) to stderr."""
    _ops._set_dump_on_cache_miss(bool(on))


def _get_dump_on_cache_miss() -> bool:
    """Whether every program compiled on a cache miss is printed."""
    return bool(_ops._get_dump_on_cache_miss())



def cache_stats() -> dict:
    """Executable cache statistics (hits, misses, disk_hits, compile_seconds,
    ...); the same as ``torch_tpu.cache_stats()``."""
    import torch_tpu

    return torch_tpu.cache_stats()


def clear_cache(disk: bool = False) -> int:
    """Drop compiled programs from memory (and from disk with ``disk=True``)."""
    import torch_tpu

    return torch_tpu.clear_cache(disk)
