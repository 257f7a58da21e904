"""The tpu device: registration, torch.tpu, generated methods, seeding."""

import os

import pytest
import torch

import torch_tpu
from conftest import run_python
from torch_tpu.api import tpu_device


def test_device_is_registered_as_tpu():
    assert torch._C._get_privateuse1_backend_name() == "tpu"
    t = torch.ones(2, device="tpu")
    assert t.device.type == "tpu" and t.device.index == 0
    assert t.is_tpu


def test_torch_tpu_module():
    assert torch.tpu.is_available()
    assert torch.tpu.device_count() >= 1
    assert torch.tpu.current_device() == 0
    torch.tpu.set_device(0)
    assert isinstance(torch.tpu.get_device_name(), str) and torch.tpu.get_device_name()
    torch.tpu.synchronize()
    assert torch.tpu.is_initialized()
    props = torch.tpu.get_device_properties(0)
    assert props.pjrt_api_version.startswith("0.")
    with pytest.raises(RuntimeError, match="out of range"):
        torch.tpu.set_device(99)


def test_api_tpu_device():
    assert tpu_device() == torch.device("tpu", 0)
    assert tpu_device(0) == torch.device("tpu:0")


def test_plugin_info():
    info = torch_tpu.plugin_info()
    assert info["pjrt_api_version"].split(".")[0] == "0"
    assert info["path"].endswith(".so")


def test_generated_methods():
    x = torch.arange(4.0)
    assert x.tpu().device.type == "tpu"
    m = torch.nn.Linear(3, 2).tpu()
    assert m.weight.device.type == "tpu"
    s = torch.tensor([1.0, 2.0]).tpu().untyped_storage()
    assert s.device.type == "tpu" and s.nbytes() == 8


def test_manual_seed_reproduces():
    torch.tpu.manual_seed(123)
    a = torch.rand(16, device="tpu").cpu()
    torch.tpu.manual_seed(123)
    b = torch.rand(16, device="tpu").cpu()
    assert torch.equal(a, b)
    torch.manual_seed(7)  # also seeds the tpu generators
    c = torch.rand(16, device="tpu").cpu()
    torch.manual_seed(7)
    assert torch.equal(c, torch.rand(16, device="tpu").cpu())
    assert not torch.equal(a, c)
    assert torch.tpu.initial_seed() == 7


def test_rng_state_round_trip():
    torch.tpu.manual_seed(5)
    state = torch.tpu.get_rng_state()
    a = torch.randn(8, device="tpu").cpu()
    torch.tpu.set_rng_state(state)
    b = torch.randn(8, device="tpu").cpu()
    assert torch.equal(a, b)
    assert state.dtype == torch.uint8 and state.device.type == "cpu"


def test_memory_statistics_track_storages():
    torch.tpu.synchronize()
    before = torch.tpu.memory_allocated()
    x = torch.empty(1024, 1024, device="tpu")
    assert torch.tpu.memory_allocated() - before == 4 * 1024 * 1024
    assert torch.tpu.max_memory_allocated() >= torch.tpu.memory_allocated()
    del x
    assert torch.tpu.memory_allocated() == before


def test_memory_stats_have_cudas_keys_and_meanings():
    """memory_stats: CUDA's caching allocator's keys, each measured against
    the storages the test makes: current, peak (reset by
    reset_peak_memory_stats), allocated/freed totals (reset by
    reset_accumulated_memory_stats), pools split at 1 MiB, OOMs counted;
    memory_summary shows them."""
    tpu = torch.tpu
    cuda_keys = {f"{stat}.{pool}.{metric}"
                 for stat in ("allocated_bytes", "reserved_bytes", "active_bytes", "requested_bytes",
                              "inactive_split_bytes", "allocation", "segment", "active", "inactive_split")
                 for pool in ("all", "large_pool", "small_pool")
                 for metric in ("current", "peak", "allocated", "freed")}
    cuda_keys |= {"num_alloc_retries", "num_ooms", "num_sync_all_streams", "num_device_alloc", "num_device_free",
                  "max_split_size", "oversize_allocations.current", "oversize_segments.peak"}
    torch.tpu.synchronize()
    tpu.reset_accumulated_memory_stats()
    tpu.reset_peak_memory_stats()
    s0 = tpu.memory_stats()
    assert cuda_keys <= set(s0), cuda_keys - set(s0)
    assert list(s0) == sorted(s0)
    held = s0["allocated_bytes.all.current"]
    assert held == tpu.memory_allocated() == s0["reserved_bytes.all.current"] == s0["active_bytes.all.current"]
    assert s0["allocated_bytes.all.peak"] == held and s0["allocated_bytes.all.allocated"] == 0
    assert s0["num_ooms"] == 0 and s0["num_alloc_retries"] == 0

    big = torch.empty(512, 1024, device="tpu")  # 2 MiB: large pool
    small = torch.empty(1000, device="tpu")  # 4000 bytes: small pool
    s1 = tpu.memory_stats()
    for stat in ("allocated_bytes", "reserved_bytes", "active_bytes", "requested_bytes"):
        assert s1[f"{stat}.all.current"] == held + 2 * 2**20 + 4000
        assert s1[f"{stat}.all.peak"] == held + 2 * 2**20 + 4000
        assert s1[f"{stat}.all.allocated"] == 2 * 2**20 + 4000
        assert s1[f"{stat}.large_pool.current"] - s0[f"{stat}.large_pool.current"] == 2 * 2**20
        assert s1[f"{stat}.small_pool.current"] - s0[f"{stat}.small_pool.current"] == 4000
    assert s1["allocation.all.current"] - s0["allocation.all.current"] == 2
    assert s1["allocation.all.allocated"] == s1["num_device_alloc"] == 2
    assert s1["segment.large_pool.allocated"] == 1 and s1["segment.small_pool.allocated"] == 1

    del big
    s2 = tpu.memory_stats()
    assert s2["allocated_bytes.all.current"] == held + 4000
    assert s2["allocated_bytes.all.peak"] == held + 2 * 2**20 + 4000  # the peak stays
    assert s2["allocated_bytes.all.freed"] == s2["allocated_bytes.large_pool.freed"] == 2 * 2**20
    assert s2["allocation.all.freed"] == s2["num_device_free"] == 1
    assert tpu.max_memory_allocated() == held + 2 * 2**20 + 4000 == tpu.max_memory_reserved()
    tpu.reset_peak_memory_stats()
    s3 = tpu.memory_stats()
    assert s3["allocated_bytes.all.peak"] == s3["allocated_bytes.all.current"] == held + 4000
    assert s3["allocation.all.peak"] == s3["allocation.all.current"]
    assert s3["allocated_bytes.all.allocated"] == 2 * 2**20 + 4000  # totals outlive a peak reset
    assert tpu.memory_stats_as_nested_dict()["allocated_bytes"]["all"]["peak"] == held + 4000

    total = tpu.mem_get_info()[1]
    tpu.set_per_process_memory_fraction((held + 100_000) / total)
    try:
        with pytest.raises(torch.OutOfMemoryError):
            torch.empty(1_000_000, device="tpu")
    finally:
        tpu.set_per_process_memory_fraction(1.0)
    assert tpu.memory_stats()["num_ooms"] == 1
    summary = tpu.memory_summary()
    assert "tpu OOMs: 1 " in summary and "Allocated memory" in summary and "from small pool" in summary
    assert "from small pool" not in tpu.memory_summary(abbreviated=True)
    tpu.reset_accumulated_memory_stats()
    s4 = tpu.memory_stats()
    assert s4["num_ooms"] == 0 and s4["allocated_bytes.all.allocated"] == 0 and s4["allocation.all.freed"] == 0
    assert s4["allocated_bytes.all.current"] == held + 4000
    del small


def _made_on_device(n, seed):
    """A tpu tensor that programs computed, and its values on the CPU."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, generator=g)
    return (x.to("tpu") * 2 + 1), x * 2 + 1


def _sync(kind):
    if kind == "synchronize":
        torch.tpu.synchronize()
    elif kind == "event":
        ev = torch.tpu.Event()
        ev.record()
        ev.synchronize()
    else:
        torch.tpu.current_stream().synchronize()


@pytest.mark.parametrize("how", ["copy_", "to"])
@pytest.mark.parametrize("sync", ["synchronize", "event", "stream"])
def test_non_blocking_copy_to_host_is_there_after_each_sync(how, sync):
    """pinned.copy_(t, non_blocking=True) and t.to("cpu", non_blocking=True): the data is there
    after torch.tpu.synchronize(), an Event recorded after the call, or the stream's synchronize()."""
    t, want = _made_on_device(1 << 20, seed=1)
    half, half_want = t[: 1 << 19].to(torch.bfloat16), want[: 1 << 19].to(torch.bfloat16)
    if how == "copy_":
        out = torch.empty(1 << 20, pin_memory=True)
        assert out.copy_(t, non_blocking=True) is out
        converted = torch.empty(1 << 19, pin_memory=True)  # bfloat16 -> float32 on the way
        converted.copy_(half, non_blocking=True)
    else:
        out = t.to("cpu", non_blocking=True)
        converted = half.to("cpu", torch.float32, non_blocking=True)
        assert out.is_pinned() and converted.is_pinned()  # as CUDA's non-blocking copies to the host
    _sync(sync)
    assert torch.equal(out, want)
    assert torch.equal(converted, half_want.float())


def test_non_blocking_copy_behind_a_long_program_returns_before_it_lands():
    """A non-blocking copy of a value a long program is still computing returns at once: an Event
    recorded after it is not complete until the copy has landed; a blocking copy waits."""
    w = torch.randn(768, 768, device="tpu") / 28
    x = torch.randn(768, 768, device="tpu")

    def long_program(x, times=1):
        for _ in range(40 * times):
            x = torch.tanh(x @ w)
        return x

    long_program(x).sum().item()  # compiled
    big = torch.arange(1 << 22, dtype=torch.float32, device="tpu")
    # Conditions, not durations: the chain is still running after the copy
    # returned and the queries were made (its own Event says so: then the
    # copy cannot have landed, and the later Event and the stream are not
    # complete); a machine that finished the chain first gets a longer one.
    for times in (1, 4, 16):
        src = big + long_program(x, times).sum() * 0  # ready only once the chain is done
        src_ready = torch.tpu.Event()
        src_ready.record()
        out = torch.empty(1 << 22, pin_memory=True)
        out.copy_(src, non_blocking=True)
        ev = torch.tpu.Event()
        ev.record()
        ev_done, stream_done, src_done = ev.query(), torch.tpu.current_stream().query(), src_ready.query()
        if torch_tpu.get_execution_mode() == "debug":  # every copy blocks, as with CUDA_LAUNCH_BLOCKING
            break
        if not src_done:
            assert not ev_done and not stream_done
            break
    else:
        raise AssertionError("the chain was done before the copy returned, even 16 times as long")
    src.add_(1)  # written in place (its old buffer donated) while the copy may still read it
    ev.synchronize()
    assert ev.query()
    assert torch.equal(out, torch.arange(1 << 22, dtype=torch.float32))
    torch.tpu.synchronize()
    assert torch.tpu.current_stream().query()
    # Transfers from or into a pending destination come after the copy, as on one stream.
    out.copy_(big * 2 + long_program(x).sum() * 0, non_blocking=True)
    out.copy_(big * 5, non_blocking=True)  # ready at once: must still land last
    back = out.to("tpu")  # reads the destination: after both
    torch.tpu.synchronize()
    assert torch.equal(out, torch.arange(1 << 22, dtype=torch.float32) * 5)
    assert torch.equal(back.cpu(), out)
    assert torch.equal(src.cpu(), torch.arange(1 << 22, dtype=torch.float32) + 1)
    # Blocking (and non-blocking into pageable memory, as on CUDA): the data is there on return.
    for blocking in (lambda s: s.cpu(), lambda s: torch.empty(1 << 22).copy_(s, non_blocking=True)):
        src = big * 3 + long_program(x).sum() * 0
        got = blocking(src)
        assert torch.equal(got, torch.arange(1 << 22, dtype=torch.float32) * 3)


def test_non_blocking_copy_holds_its_destination_until_it_lands():
    """The destination may be dropped at once: the pending copy holds its memory; later copies
    into reused pinned memory and the device go on."""
    t, want = _made_on_device(1 << 20, seed=2)
    for _ in range(8):
        t.to("cpu", non_blocking=True)  # dropped at once
    kept = t.to("cpu", non_blocking=True)
    torch.tpu.synchronize()
    assert torch.equal(kept, want)
    assert torch.equal((t - 1).cpu(), want - 1)


def test_streams_and_events():
    s = torch.tpu.current_stream()
    e = s.record_event()
    e.synchronize()
    assert e.query() and s.query()
    start = torch.tpu.Event(enable_timing=True)
    end = torch.tpu.Event(enable_timing=True)
    start.record()
    torch.ones(10, device="tpu").sum().item()
    end.record()
    assert end.elapsed_time(start) <= 0 <= start.elapsed_time(end)


def test_data_ptrs_are_distinct_and_not_host_memory():
    a = torch.empty(100, device="tpu")
    b = torch.empty(100, device="tpu")
    assert a.data_ptr() != b.data_ptr()
    assert a[10:].data_ptr() == a.data_ptr() + 40


def test_device_works_under_a_virtual_memory_limit():
    # The device's address space is reserved up front (1 TiB); a process
    # whose virtual memory is limited (ulimit -v, valgrind) gets less of it,
    # not an error.
    import resource
    import subprocess
    import sys

    code = ("import torch, torch_tpu\n"
            "x = torch.arange(6.0, device='tpu')\n"
            "print((x * 2).cpu().tolist())\n")
    limit = 12 << 30

    def limit_memory():
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                       preexec_fn=limit_memory)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip().splitlines()[-1] == "[0.0, 2.0, 4.0, 6.0, 8.0, 10.0]"


OOM_PROGRAM = r"""
import json, resource, sys, torch, torch_tpu
x = torch.arange(4.0, device="tpu")
host = torch.ones(2**29)  # 2 GiB, made before the limit
(x * 2 + 1).cpu()  # the device started, the check's program compiled
def vm_bytes():
    for line in open("/proc/self/status"):
        if line.startswith("VmSize"):
            return int(line.split()[1]) * 1024
limit = vm_bytes() + (1 << 30)  # 1 GiB more address space than the process has mapped
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
GiB = 2**30 // 4  # float32 elements
cases = {
    "randn 4 GiB": lambda: torch.randn(4 * GiB, device="tpu")[:4].cpu(),
    "randn 64 GiB": lambda: torch.randn(64 * GiB, device="tpu").sum().item(),
    "zeros 4 GiB": lambda: torch.zeros(4 * GiB, device="tpu")[:4].cpu(),
    "empty 4 GiB, written": lambda: torch.empty(4 * GiB, device="tpu").add_(1)[:4].cpu(),
    "empty of a huge size": lambda: torch.empty(2**42, device="tpu"),
    "host to tpu": lambda: host.to("tpu")[:4].cpu(),
    "host to tpu, converted": lambda: host.to("tpu", torch.float64)[:4].cpu(),
    "synchronize": lambda: (torch.randn(4 * GiB, device="tpu"), torch.tpu.synchronize()),
}
out = {}
for name, fn in cases.items():
    try:
        fn()
        out[name] = ["no error", ""]
    except Exception as e:
        out[name] = [type(e).__name__, str(e)]
    try:
        torch.tpu.synchronize()  # a failed program is reported once more here, as any program's failure
    except torch.OutOfMemoryError:
        pass
    out[name].append((x * 2 + 1).cpu().tolist())
out["num_ooms"] = torch.tpu.memory_stats()["num_ooms"]
print(json.dumps(out))
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs Linux's /proc/self/status")
def test_running_out_of_memory_is_out_of_memory_error_and_the_process_goes_on():
    """Under an address-space limit, every way the plugin or a host allocation runs out of memory
    raises torch.OutOfMemoryError naming the size and the device; the next op gives right values."""
    import json

    r = run_python(OOM_PROGRAM, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    sizes = {"randn 4 GiB": "4.00 GiB", "randn 64 GiB": "64.00 GiB", "zeros 4 GiB": "4.00 GiB",
             "empty 4 GiB, written": "4.00 GiB", "empty of a huge size": "17592186044416 bytes",
             "host to tpu": "2.00 GiB", "host to tpu, converted": "4294967296 bytes",
             "synchronize": "4.00 GiB"}
    for name, size in sizes.items():
        kind, message, after = out[name]
        assert kind == "OutOfMemoryError", (name, kind, message)
        assert "tpu:0" in message and size in message, (name, message)
        assert after == [1.0, 3.0, 5.0, 7.0], name
    assert out["num_ooms"] >= len(sizes)


def test_pinned_host_memory_is_pinned_and_transfers():
    """pin_memory() (and a DataLoader's pin_memory=True) gives host memory
    that is_pinned() recognises, whatever view of it is asked about; other
    host memory is not pinned; batches reach the device intact."""
    from torch.utils.data import DataLoader, TensorDataset

    x = torch.randn(6, 5)
    p = x.pin_memory()
    assert p.is_pinned() and p[2:, 1:].is_pinned() and not x.is_pinned()
    assert p.device.type == "cpu" and torch.equal(p, x)
    assert torch.empty(7, pin_memory=True).is_pinned()
    ds = TensorDataset(torch.randn(10, 3), torch.arange(10))
    for a, b in DataLoader(ds, batch_size=4, pin_memory=True):
        assert a.is_pinned() and b.is_pinned()
        assert torch.equal(a.to("tpu", non_blocking=True).cpu(), a)
    # Freed pinned memory is forgotten: the next host tensor is not pinned.
    del p
    assert not torch.randn(6, 5).is_pinned()


def test_accelerator_empty_host_cache_with_pinned_memory_alive():
    """torch.accelerator.empty_host_cache() reaches the device's host
    allocator (it crashed the process when none was registered; vLLM calls
    it at exit): nothing is cached, so pinned tensors alive stay intact."""
    p = torch.arange(1000.0).pin_memory()
    t = p.to("tpu", non_blocking=True)
    torch.accelerator.empty_host_cache()
    torch.tpu.synchronize()
    assert p.is_pinned() and torch.equal(t.cpu(), torch.arange(1000.0)) and torch.equal(p, torch.arange(1000.0))


def test_cuda_style_device_module_functions():
    """The torch.cuda functions device-generic code calls through
    torch.get_device_module: bfloat16/TF32 support, device_of, StreamContext,
    stream capture, the older peak-reset name, OutOfMemoryError."""
    tpu = torch.get_device_module("tpu")
    assert tpu.is_bf16_supported() and not tpu.is_tf32_supported() and not tpu.is_current_stream_capturing()
    with tpu.device_of(torch.ones(1, device="tpu")):
        assert tpu.current_device() == 0
    with tpu.StreamContext(tpu.current_stream()) as s:
        assert s is not None
    tpu.reset_max_memory_allocated()
    assert tpu.OutOfMemoryError is torch.OutOfMemoryError


def test_per_process_memory_fraction_limits_live_tensors():
    """set_per_process_memory_fraction: an allocation past the fraction of
    the device's memory raises torch.OutOfMemoryError (naming the limit)
    and allocates nothing; freeing makes room; 1.0 lifts the limit."""
    total = torch.tpu.mem_get_info()[1]
    held = torch.tpu.memory_allocated()
    torch.tpu.set_per_process_memory_fraction((held + 1_000_000) / total)
    try:
        a = torch.empty(100_000, device="tpu")  # 400 kB
        with pytest.raises(torch.OutOfMemoryError, match="set_per_process_memory_fraction"):
            torch.empty(200_000, device="tpu")  # 800 kB more would pass 1 MB
        assert torch.tpu.memory_allocated() == held + 400_000
        del a
        b = torch.empty(200_000, device="tpu")
        assert b.shape == (200_000,)
    finally:
        torch.tpu.set_per_process_memory_fraction(1.0)
    torch.empty(1_000_000, device="tpu")
    with pytest.raises(ValueError):
        torch.tpu.set_per_process_memory_fraction(1.5)
