"""PyTorch's device-generic Python code (torch.utils.checkpoint,
torch.random.fork_rng, torch.amp, DataLoader workers, fork handling) reads
the device module by name: torch.tpu must answer it as torch.cuda does."""

import os
import textwrap

import pytest
import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint

import torch_tpu  # noqa: F401
from conftest import run_python


class Block(nn.Module):
    def __init__(self, p=0.5):
        super().__init__()
        self.a = nn.Linear(16, 32)
        self.drop = nn.Dropout(p)
        self.b = nn.Linear(32, 16)

    def forward(self, x):
        return self.b(self.drop(torch.relu(self.a(x)))) + x


def _grads(model, x, use_checkpoint, reentrant):
    torch.tpu.manual_seed(1234)
    x = x.detach().requires_grad_(True)
    model.zero_grad()
    h = x
    for blk in model:
        h = checkpoint(blk, h, use_reentrant=reentrant) if use_checkpoint else blk(h)
    h.pow(2).sum().backward()
    return [x.grad.cpu()] + [p.grad.cpu() for p in model.parameters()]


@pytest.mark.parametrize("reentrant", [False, True], ids=["non_reentrant", "reentrant"])
def test_checkpoint_with_dropout_recomputes_the_same_mask(reentrant):
    """The recomputation restores the tpu RNG state saved at the forward, so
    gradients equal those without checkpointing (they differed by ~7 before
    torch.tpu had `_initialized`)."""
    torch.manual_seed(0)
    model = nn.Sequential(Block(), Block()).to("tpu")
    x = torch.randn(8, 16, device="tpu")
    assert torch.tpu._initialized
    want = _grads(model, x, False, reentrant)
    got = _grads(model, x, True, reentrant)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6)


def test_checkpoint_leaves_the_rng_where_the_forward_left_it():
    """After a checkpointed backward the generator is where a plain forward
    and backward leave it (the recomputation draws from a forked state)."""
    model = Block().to("tpu")
    x = torch.randn(4, 16, device="tpu", requires_grad=True)
    torch.tpu.manual_seed(7)
    model(x).sum().backward()
    plain = torch.tpu.get_rng_state()
    torch.tpu.manual_seed(7)
    checkpoint(model, x, use_reentrant=False).sum().backward()
    assert torch.equal(torch.tpu.get_rng_state(), plain)


def test_fork_rng_restores_the_tpu_generator():
    torch.tpu.manual_seed(3)
    before = torch.tpu.get_rng_state()
    with torch.random.fork_rng(device_type="tpu"):
        torch.rand(5, device="tpu")
        assert not torch.equal(torch.tpu.get_rng_state(), before)
    assert torch.equal(torch.tpu.get_rng_state(), before)
    a = torch.rand(5, device="tpu").cpu()
    torch.tpu.set_rng_state(before)
    assert torch.equal(torch.rand(5, device="tpu").cpu(), a)


def test_device_module_answers_what_generic_code_asks():
    mod = torch.get_device_module("tpu")
    assert mod is torch.tpu
    assert torch.amp.is_autocast_available("tpu")
    assert getattr(mod, "_initialized", False) is True
    assert mod.is_initialized() and not mod._is_in_bad_fork()
    with pytest.raises(AttributeError):
        mod.no_such_attribute  # noqa: B018
    assert torch.accelerator.is_available() or torch.accelerator.current_accelerator() is None


FORK_CHILD = textwrap.dedent("""
    import os, sys, torch, torch_tpu
    x = torch.ones(3, device="tpu")
    assert x.sum().item() == 3
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        out = []
        out.append(str(torch.tpu._is_in_bad_fork()))
        out.append(str(torch.tpu.is_initialized()))
        for fn in (lambda: (x + 1).cpu(), lambda: x.cpu(), lambda: torch.zeros(2, device="tpu").sum().item()):
            try:
                fn()
                out.append("no error")
            except RuntimeError as e:
                out.append("forked subprocess" in str(e) and "spawn" in str(e))
        torch.manual_seed(0)  # DataLoader workers do this: it must not touch the device
        os.write(w, repr(out).encode())
        os._exit(0)
    os.close(w)
    data = os.read(r, 4096).decode()
    os.waitpid(pid, 0)
    print(data)
    print((x * 2).sum().item(), torch.tpu._is_in_bad_fork())
""")


@pytest.mark.parametrize("mode", ["strict", "fused", "debug"])
def test_forked_child_raises_instead_of_hanging(mode):
    env = {"TORCH_TPU_DEFER_AND_FUSE": "1" if mode == "fused" else None,
           "TORCH_TPU_LAUNCH_BLOCKING": "1" if mode == "debug" else None}
    r = run_python(FORK_CHILD, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert lines[-2] == "['True', 'False', True, True, True]", r.stdout
    assert lines[-1] == "6.0 False"


def test_dataloader_fork_workers_with_the_device_started():
    """Forked DataLoader workers seed torch (manual_seed reaches the device
    module) and build CPU batches; the parent moves them to tpu."""
    torch.ones(1, device="tpu").cpu()
    ds = torch.utils.data.TensorDataset(torch.arange(12.0).view(6, 2))
    ctx = "fork" if "fork" in __import__("multiprocessing").get_all_start_methods() else None
    if ctx is None:
        pytest.skip("no fork start method")
    loader = torch.utils.data.DataLoader(ds, batch_size=2, num_workers=2, multiprocessing_context=ctx, timeout=60)
    total = sum(batch.to("tpu").sum() for (batch,) in loader)
    assert total.item() == sum(range(12))
    assert os.getpid() > 0


def test_package_level_aliases_and_device_context():
    assert torch_tpu.is_available() == torch.tpu.is_available()
    assert torch_tpu.device_count() == torch.tpu.device_count() >= 1
    before = torch.tpu.current_device()
    for idx in (None, -1):
        with torch.tpu.device(idx):
            assert torch.tpu.current_device() == before
    with torch.tpu.device(torch.device("tpu", 0)):
        assert torch.tpu.current_device() == 0


def test_torch_accelerator_memory_queries():
    """torch.accelerator's memory calls go to the allocator as a
    DeviceAllocator (they hit an internal assert before)."""
    torch.tpu.synchronize()
    base = torch.accelerator.memory_allocated()
    x = torch.ones(1000, device="tpu")
    assert torch.accelerator.memory_allocated() == base + 4000 == torch.tpu.memory_allocated()
    stats = torch.accelerator.memory_stats()
    assert stats["allocated_bytes.all.current"] == base + 4000
    assert stats["allocation.all.current"] >= 1
    assert torch.accelerator.max_memory_allocated() >= base + 4000
    assert torch.accelerator.memory_reserved() == torch.accelerator.memory_allocated()
    torch.accelerator.reset_peak_memory_stats()
    assert torch.accelerator.max_memory_allocated() == torch.accelerator.memory_allocated()
    torch.accelerator.empty_cache()
    del x
    assert torch.accelerator.memory_allocated() == base
    free, total = torch.tpu.mem_get_info()
    assert 0 < free <= total == torch.tpu.get_device_properties().total_memory


def test_out_of_memory_is_torch_out_of_memory_error_and_the_process_goes_on():
    with pytest.raises(torch.OutOfMemoryError, match="out of memory"):
        torch.empty(1 << 40, device="tpu")
    y = torch.arange(4.0, device="tpu") * 2
    assert y.sum().item() == 12.0


def test_events_follow_real_device_completion():
    """An event recorded after work is complete exactly when that work is;
    streams are torch.Stream objects (DDP, FSDP and torch.accelerator make
    them), every one the device's in-order stream."""
    s = torch.tpu.Stream()
    assert isinstance(s, torch.Stream) and isinstance(torch.Stream(device="tpu"), torch.Stream)
    assert torch.accelerator.current_stream().device.type == "tpu"
    x = torch.randn(300, 300, device="tpu")
    x.sum().item()
    start = torch.tpu.Event(enable_timing=True)
    start.record()
    for _ in range(40):
        x = torch.tanh(x @ x)
    end = torch.tpu.Event(enable_timing=True)
    end.record()
    pending = not end.query()  # may already be done on a fast machine
    end.synchronize()
    assert end.query() and start.query()
    assert end.elapsed_time(start) <= 0 <= start.elapsed_time(end)
    if pending:
        assert start.elapsed_time(end) > 0
    e = s.record_event()
    e.synchronize()
    assert e.query() and s.query()
    e.wait()
    s.wait_event(e)
    s.wait_stream(torch.tpu.current_stream())
    with torch.tpu.stream(s):
        y = x + 1
    s.synchronize()
    assert torch.isfinite(y).all().item()
    # torch.Event itself works on tpu too.
    a, b = torch.Event(device="tpu", enable_timing=True), torch.Event(device="tpu", enable_timing=True)
    a.record()
    b.record()
    b.synchronize()
    assert a.elapsed_time(b) >= 0


def test_an_event_in_fused_eager_waits_for_the_deferred_work():
    with torch_tpu.execution_mode("fused"):
        x = torch.randn(200, 200, device="tpu")
        for _ in range(20):
            x = torch.tanh(x @ x)
        e = torch.tpu.Event()
        e.record()  # runs the deferred graph: the event is its completion
        assert torch.ops.torch_tpu._storage_info(x).startswith("buffer")
        e.synchronize()
        assert e.query()


def test_precision_context_is_per_thread():
    """torch.tpu.precision sets the calling thread's float32 matmul precision
    (its backward too), not the process's: another thread, and a thread
    started inside the block, read the process default
    (torch.set_float32_matmul_precision); op programs are keyed on it."""
    import threading

    a = torch.randn(64, 64)
    at = a.to("tpu")
    before = torch.get_float32_matmul_precision()
    seen = {}
    inside, leave = threading.Event(), threading.Event()

    def other():
        with torch.tpu.precision("high"):
            seen["other_in_block"] = torch.tpu.get_precision()
            inside.set()
            leave.wait(60)

    t = threading.Thread(target=other)
    t.start()
    try:
        assert inside.wait(60)
        assert torch.tpu.get_precision() is torch.tpu.Precision(before)  # not the other thread's block
        with torch.tpu.precision(torch.tpu.Precision.HIGHEST):
            assert torch.tpu.get_precision() is torch.tpu.Precision.HIGHEST
            assert torch.get_float32_matmul_precision() == before  # the process default is untouched
            child = threading.Thread(target=lambda: seen.setdefault("child", torch.tpu.get_precision()))
            child.start()
            child.join(60)
            exact = (at @ at).cpu()
            with torch.tpu.precision("default"):
                assert torch.tpu.get_precision() is torch.tpu.Precision.DEFAULT
                built = torch_tpu.counters()["programs_built"]
                w = at.clone().requires_grad_()

                class Spy(torch.autograd.Function):
                    @staticmethod
                    def forward(ctx, x):
                        return x.clone()

                    @staticmethod
                    def backward(ctx, g):
                        seen["backward"] = (torch.tpu.get_precision(), threading.get_ident())
                        return g

                (Spy.apply(w) @ at).sum().backward()  # autograd runs it on its device thread
                # forward and backward matmuls under DEFAULT: programs of their own
                assert torch_tpu.counters()["programs_built"] >= built + 2
            assert torch.tpu.get_precision() is torch.tpu.Precision.HIGHEST
    finally:
        leave.set()
        t.join(60)
    assert seen["other_in_block"] is torch.tpu.Precision.HIGH
    assert seen["child"] is torch.tpu.Precision(before)
    assert seen["backward"][0] is torch.tpu.Precision.DEFAULT
    assert torch.get_float32_matmul_precision() == before
    torch.testing.assert_close(exact, a @ a, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(w.grad.cpu(), torch.ones(64, 64) @ a.T, rtol=2e-2, atol=2e-1)
    # The process default: set_precision is torch.set_float32_matmul_precision.
    try:
        torch.tpu.set_precision("high")
        assert torch.get_float32_matmul_precision() == "high" and torch.tpu.get_precision() is torch.tpu.Precision.HIGH
    finally:
        torch.set_float32_matmul_precision(before)
    with pytest.raises(ValueError, match="unknown precision"):
        torch.tpu.precision("fastest")


def test_device_module_autocast_and_cache_flags():
    """torch.tpu's autocast accessors are torch.autocast('tpu')'s state;
    the dump-on-cache-miss flag has a getter."""
    assert not torch.tpu._is_autocast_enabled()
    assert torch.tpu._get_autocast_dtype() is torch.bfloat16
    with torch.autocast("tpu", dtype=torch.float16):
        assert torch.tpu._is_autocast_enabled() and torch.tpu._get_autocast_dtype() is torch.float16
    assert not torch.tpu._is_autocast_enabled()
    old = torch.tpu._get_autocast_dtype()
    try:
        torch.tpu._set_autocast_enabled(True)
        torch.tpu._set_autocast_dtype(torch.float16)
        assert torch.is_autocast_enabled("tpu") and torch.get_autocast_dtype("tpu") is torch.float16
        x = torch.randn(4, 4, device="tpu")
        assert (x @ x).dtype is torch.float16  # the state is autocast's own
    finally:
        torch.tpu._set_autocast_enabled(False)
        torch.tpu._set_autocast_dtype(old)
    assert not torch.is_autocast_enabled("tpu")
    with pytest.raises(ValueError, match="supports"):
        torch.tpu._set_autocast_dtype(torch.int32)
    assert torch.tpu._get_dump_on_cache_miss() is False
    torch.tpu._set_dump_on_cache_miss(True)
    try:
        assert torch.tpu._get_dump_on_cache_miss() is True
    finally:
        torch.tpu._set_dump_on_cache_miss(False)


def test_asking_for_the_device_initializes_it():
    out = run_python("import torch, torch_tpu\n"
                     "assert not torch.tpu.is_initialized()\n"
                     "assert torch_tpu.api.tpu_device() == torch.device('tpu', 0)\n"
                     "assert torch.tpu.is_initialized() and torch.tpu._initialized\n"
                     "print('ok')\n", timeout=180)
    assert out.returncode == 0 and "ok" in out.stdout, out.stdout + out.stderr


def test_dump_on_cache_miss_prints_each_compiled_program():
    code = ("import torch, torch_tpu\n"
            "torch.tpu._set_dump_on_cache_miss(True)\n"
            "x = torch.arange(7.0, device='tpu')\n"
            "(x * 3.25).cpu()\n"
            "torch.tpu._set_dump_on_cache_miss(False)\n"
            "torch.sin(x).cpu()\n")
    r = run_python(code, env={"TORCH_TPU_CACHE_DIR": "0", "TORCH_TPU_SESSION": "0"}, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "cache miss, compiling program" in r.stderr and "stablehlo.multiply" in r.stderr
    assert "stablehlo.sine" not in r.stderr  # compiled after the dump was switched off
