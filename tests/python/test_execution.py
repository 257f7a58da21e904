"""Execution: strict (asynchronous) and debug (synchronous) modes, the
executable cache in memory and on disk, synchronization, several devices."""

import os

import pytest
import torch

import torch_tpu
from conftest import run_python


def test_default_mode_is_strict_and_debug_is_switchable():
    default = "fused" if os.environ.get("TORCH_TPU_DEFER_AND_FUSE", "0") != "0" else "strict"
    if os.environ.get("TORCH_TPU_LAUNCH_BLOCKING", "0") != "0":
        default = "debug"
    assert torch_tpu.get_execution_mode() == default
    with torch_tpu.execution_mode("debug"):
        assert torch_tpu.get_execution_mode() == "debug"
        x = torch.arange(10.0, device="tpu") * 3
        assert torch.equal(x.cpu(), torch.arange(10.0) * 3)
    assert torch_tpu.get_execution_mode() == default
    with pytest.raises(RuntimeError, match="unknown execution mode"):
        torch_tpu.set_execution_mode("fast")


def test_launch_blocking_environment_selects_debug():
    r = run_python("import torch_tpu, torch; torch.ones(1, device='tpu'); print(torch_tpu.get_execution_mode())",
                   env={"TORCH_TPU_LAUNCH_BLOCKING": "1"})
    assert r.stdout.strip().endswith("debug"), r.stderr


def test_cache_hits_on_repeat():
    x = torch.randn(17, 3, device="tpu")
    (x * 2 + 1).cpu()  # (in fused eager the first program also computes x)
    (x * 2 + 1).cpu()
    s0 = torch_tpu.cache_stats()
    for _ in range(5):
        (x * 2 + 1).cpu()
    s1 = torch_tpu.cache_stats()
    assert s1["misses"] == s0["misses"]
    assert s1["hits"] >= s0["hits"] + 5
    assert s1["compile_seconds"] >= 0


def test_persistent_cache_is_reused_across_processes(tmp_path):
    code = ("import torch, torch_tpu\n"
            "x = torch.arange(12.0, device='tpu').reshape(3, 4)\n"
            "y = (x.t() @ x).sum(0).cpu()\n"
            "s = torch_tpu.cache_stats()\n"
            "print(s['misses'], s['disk_hits'] + s['preloaded'], y.tolist())\n")
    env = {"TORCH_TPU_CACHE_DIR": str(tmp_path)}
    first = run_python(code, env=env)
    second = run_python(code, env=env)
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    m1, d1, y1 = first.stdout.strip().split(" ", 2)
    m2, d2, y2 = second.stdout.strip().split(" ", 2)
    assert int(m1) > 0 and int(d1) == 0
    assert int(m2) == 0 and int(d2) == int(m1)
    assert y1 == y2
    assert any(p.suffix == ".xla" for p in tmp_path.iterdir())


def test_synchronize_waits_for_all_work():
    x = torch.randn(256, 256, device="tpu")
    for _ in range(10):
        x = x @ x * 0.01
    torch.tpu.synchronize()
    assert torch.isfinite(x).all().item()


def test_two_devices():
    code = r"""
import torch, torch_tpu
assert torch.tpu.device_count() == 2
a = torch.arange(6.0, device='tpu:0')
b = a.to('tpu:1')
assert b.device == torch.device('tpu:1')
c = (b * 2).to('tpu:0')
assert c.device.index == 0 and torch.equal(c.cpu(), torch.arange(6.0) * 2)
with torch.tpu.device(1):
    d = torch.ones(3, device='tpu')
    assert d.device.index == 1
assert torch.tpu.current_device() == 0
try:
    a + b
except RuntimeError as e:
    assert 'same device' in str(e)
else:
    raise AssertionError('mixing devices must fail')
torch.tpu.manual_seed_all(3)
print('ok')
"""
    r = run_python(code, env={"TORCH_TPU_CPU_DEVICES": "2"})
    assert r.stdout.strip() == "ok", r.stdout + r.stderr


def test_debug_mode_raises_at_the_op_naming_it_and_its_inputs():
    x = torch.arange(5.0, device="tpu")
    bad = torch.tensor([1, 7], device="tpu")
    with torch_tpu.execution_mode("debug"):
        with pytest.raises(IndexError, match=r"\(aten::index\.Tensor\) \[inputs: Float\[5\], Long\[2\]\]"):
            x[bad]  # raised by this line, not at a later read
    with torch_tpu.execution_mode("strict"):
        y = x[bad]  # asynchronous: nothing yet
        with pytest.raises(IndexError, match="detected asynchronously.*TORCH_TPU_LAUNCH_BLOCKING"):
            y.cpu()
    assert (x + 1).cpu().tolist() == [1, 2, 3, 4, 5]  # the device is usable afterwards


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_a_failed_device_check_belongs_to_the_values_its_op_made(mode):
    """An asynchronous error is raised by reads of what the failing op made
    (and of what was computed from it), every time; other tensors, pending
    in the same stretch of work (in fused eager: the same graph), read
    normally. An in-place op that fails leaves its target as it was, as on
    CPU: one read of it raises the error, later reads give the old values.
    synchronize raises a failure no read has reported, once."""
    x = torch.arange(6.0, device="tpu")
    with torch_tpu.execution_mode(mode):
        before = x * 2
        bad = x.gather(0, torch.tensor([7], device="tpu"))  # asynchronous: nothing yet
        derived = bad + 1
        after = x + 1
        y = torch.arange(3.0, device="tpu")
        y.index_put_((torch.tensor([5], device="tpu"),), torch.tensor([9.0], device="tpu"))
        z = torch.ones(2, device="tpu") * 3
    assert before.cpu().tolist() == [0, 2, 4, 6, 8, 10]
    assert after.cpu().tolist() == [1, 2, 3, 4, 5, 6]
    for _ in range(2):
        with pytest.raises(RuntimeError, match="gather.*out of bounds.*detected asynchronously"):
            bad.cpu()
        with pytest.raises(RuntimeError, match="gather.*out of bounds"):
            derived.sum().item()
    with pytest.raises(IndexError, match="out of bounds"):
        y.cpu()
    assert y.cpu().tolist() == [0, 1, 2]
    assert (y * 2).cpu().tolist() == [0, 2, 4]
    assert z.cpu().tolist() == [3, 3]
    # Not read by anyone: synchronize reports it, once.
    with torch_tpu.execution_mode(mode):
        torch.arange(3, device="tpu") // torch.zeros(3, dtype=torch.long, device="tpu")
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        torch.tpu.synchronize()
    torch.tpu.synchronize()


# In-place scatters of a few rows into a big tensor, each with its index
# argument(s) built from `i` (a long vector of row numbers).
_SCATTERS = {
    "index_copy_": lambda t, i, v: t.index_copy_(0, i, v),
    "index_add_": lambda t, i, v: t.index_add_(0, i, v, alpha=2),
    "index_put_": lambda t, i, v: t.index_put_((i,), v),
    "index_put_ accumulate": lambda t, i, v: t.index_put_((i,), v, accumulate=True),
    "setitem": lambda t, i, v: t.__setitem__(i, v),
    "index_fill_": lambda t, i, v: t.index_fill_(0, i, 7.5),
    "index_reduce_ amax": lambda t, i, v: t.index_reduce_(0, i, v, "amax", include_self=False),
    "scatter_": lambda t, i, v: t.scatter_(0, i[:, None].expand(v.shape), v),
    "scatter_add_": lambda t, i, v: t.scatter_add_(0, i[:, None].expand(v.shape), v),
    "scatter_reduce_ prod": lambda t, i, v: t.scatter_reduce_(0, i[:, None].expand(v.shape), v, "prod"),
    "put_": lambda t, i, v: t.put_(i * t.shape[1], v[:, 0]),
}


@pytest.mark.parametrize("mode", ["strict", "debug"])
@pytest.mark.parametrize("op", sorted(_SCATTERS))
def test_an_in_place_scatter_with_a_bad_index_leaves_every_row_as_it_was(op, mode):
    """A bad index among good ones: the op raises (at the read in strict
    eager, at the call in debug), and the whole target, a view into a larger
    storage, keeps its values, the rows of the good indices too; so does
    the rest of the storage. With good indices, CPU's values."""
    fn = _SCATTERS[op]
    torch.manual_seed(0)
    base_cpu = torch.randn(40, 3)
    v_cpu = torch.randn(4, 3)
    good, bad = torch.tensor([3, 0, 9, 3]), torch.tensor([3, 0, 31, 3])
    for index, fails in ((good, False), (bad, True)):
        base = base_cpu.to("tpu")
        target, target_cpu = base[5:35], base_cpu.clone()[5:35]
        with torch_tpu.execution_mode(mode):
            if fails and mode == "debug":
                with pytest.raises((IndexError, RuntimeError), match="out of (bounds|range)"):
                    fn(target, index.to("tpu"), v_cpu.to("tpu"))
            else:
                fn(target, index.to("tpu"), v_cpu.to("tpu"))
        if not fails:
            fn(target_cpu, index, v_cpu)
            torch.testing.assert_close(base.cpu()[5:35], target_cpu, rtol=0, atol=0)
            continue
        if mode == "strict":
            with pytest.raises((IndexError, RuntimeError), match="out of (bounds|range)"):
                target.cpu()
        assert torch.equal(base.cpu(), base_cpu), op


def test_an_in_place_scatter_guards_its_target_without_a_pass_over_it():
    """Strict eager keeps a target whole when a check fails. For a scatter
    of a few rows that guard is the scatter itself (its indices address
    nothing then), not a select over the whole target, which made writing 8
    rows into a 32 MB tensor cost 10 ms: no program selects over the
    target's elements."""
    code = (
        "import torch, torch_tpu\n"
        "t = torch.zeros(4099, 3, device='tpu')\n"
        "i = torch.tensor([5, 1, 4000], device='tpu')\n"
        "v = torch.ones(3, 3, device='tpu')\n"
        "torch.tpu._set_dump_on_cache_miss(True)\n"
        "t.index_copy_(0, i, v); t.index_add_(0, i, v); t.index_put_((i,), v, accumulate=True)\n"
        "t[i] = v; t.scatter_add_(0, i[:, None].expand(3, 3), v); t.index_fill_(0, i, 2.0)\n"
        "torch.tpu.synchronize(); torch.tpu._set_dump_on_cache_miss(False)\n"
        "print(t[5].cpu().tolist())\n")
    r = run_python(code, env={"TORCH_TPU_CACHE_DIR": "0", "TORCH_TPU_DEFER_AND_FUSE": None,
                              "TORCH_TPU_LAUNCH_BLOCKING": None}, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().endswith("[2.0, 2.0, 2.0]"), r.stdout
    programs = r.stderr.split("cache miss, compiling program")[1:]
    assert sum("stablehlo.scatter" in p for p in programs) >= 6, r.stderr
    whole = [line for p in programs for line in p.splitlines()
             if "stablehlo.select" in line and ("4099" in line or "12297" in line)]
    assert not whole, whole


def test_a_failed_check_inside_a_compiled_graph_belongs_to_its_outputs():
    """A replayed graph whose check fails: its outputs raise when read,
    other tensors do not."""
    fn = torch.compile(lambda t, i: (t.gather(0, i) * 2, t + 1), backend="tpu")
    x = torch.arange(6.0, device="tpu")
    good = torch.tensor([1, 2], device="tpu")
    for _ in range(2):  # captured, then replayed
        out, other = fn(x, good)
        assert out.cpu().tolist() == [2, 4]
    for _ in range(2):
        out, other = fn(x, torch.tensor([1, 9], device="tpu"))
        unrelated = x * 3
        assert unrelated.cpu().tolist() == [0, 3, 6, 9, 12, 15]
        with pytest.raises(RuntimeError, match="gather.*out of bounds"):
            out.cpu()


def test_a_compiled_steps_checks_are_read_with_one_wait_and_a_failure_names_its_op():
    """The index checks of a compiled step (one per gather here, 12) are
    read together: reading its output waits for the device a few times, not
    once per check (each wait costs tens of microseconds on the CPU plugin;
    a step with a check per layer paid them on every read). A failure among
    them still raises its own op's error, with CPU's exception type."""
    idx = torch.tensor([1, 0, 3, 2], device="tpu")

    def step(x, i, j, idx=idx):
        for _ in range(10):
            x = x.index_select(0, idx) * 0.5 + x
        return x.index_select(0, i) + x.gather(1, j)

    fn = torch.compile(step, backend="tpu")
    xc = torch.randn(4, 3)
    x = xc.to("tpu")
    i, j = torch.tensor([3, 1, 0, 2]), torch.tensor([[0, 2, 1]] * 4)
    it, jt = i.to("tpu"), j.to("tpu")
    for _ in range(3):  # captured, then replayed
        fn(x, it, jt)
    before = torch_tpu.counters()["host_reads"]
    for _ in range(5):
        out = fn(x, it, jt)
    torch.testing.assert_close(out.cpu(), step(xc, i, j, idx.cpu()))
    assert torch_tpu.counters()["host_reads"] - before <= 3
    bad_i = fn(x, torch.tensor([3, 1, 4, 2], device="tpu"), jt)
    bad_j = fn(x, it, torch.tensor([[0, 2, 3]] * 4, device="tpu"))
    fine = fn(x, it, jt)
    with pytest.raises(IndexError, match=r"index out of range in self \(aten::index_select\)"):
        bad_i.cpu()
    with pytest.raises(RuntimeError, match=r"gather\(\): index out of bounds for dimension 1 with size 3"):
        bad_j.cpu()
    torch.testing.assert_close(fine.cpu(), step(xc, i, j, idx.cpu()))


def _held(t):
    return torch.ops.torch_tpu._storage_info(t).split()[0]  # "deferred" or "buffer"


def test_execution_mode_is_per_thread():
    """A fused scope on one thread leaves another thread's mode, and its ops,
    alone: the strict thread's results are buffers at once, the fused
    thread's stay deferred in its own graph until its scope ends."""
    import threading

    outside = torch_tpu.get_execution_mode()
    in_fused = threading.Event()
    strict_done = threading.Event()
    seen = {}

    def fused_worker():
        with torch_tpu.execution_mode("fused"):
            x = torch.arange(6.0, device="tpu") * 2
            seen["fused_mode"] = torch_tpu.get_execution_mode()
            in_fused.set()
            strict_done.wait(60)
            seen["fused_held_while_other_ran"] = _held(x)
            seen["fused_value"] = (x + 1).cpu()

    def strict_worker():
        in_fused.wait(60)
        with torch_tpu.execution_mode("strict"):
            y = torch.arange(6.0, device="tpu") * 3
            seen["strict_mode"] = torch_tpu.get_execution_mode()
            seen["strict_held"] = _held(y)
            seen["strict_value"] = y.cpu()
        strict_done.set()

    threads = [threading.Thread(target=fused_worker), threading.Thread(target=strict_worker)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads)
    assert seen["fused_mode"] == "fused" and seen["strict_mode"] == "strict"
    assert seen["strict_held"] == "buffer"
    assert seen["fused_held_while_other_ran"] == "deferred"
    assert torch.equal(seen["strict_value"], torch.arange(6.0) * 3)
    assert torch.equal(seen["fused_value"], torch.arange(6.0) * 2 + 1)
    assert torch_tpu.get_execution_mode() == outside  # this thread never changed


def test_a_thread_without_a_scope_uses_the_process_default():
    import threading

    got = {}
    with torch_tpu.execution_mode("debug"):
        t = threading.Thread(target=lambda: got.setdefault("mode", torch_tpu.get_execution_mode()))
        t.start()
        t.join(60)
        assert torch_tpu.get_execution_mode() == "debug"
    assert got["mode"] == torch_tpu.get_execution_mode()


def test_fused_scope_covers_the_backward_on_autograds_thread():
    """Autograd runs tpu backward ops on its own device thread; the scope
    travels with PyTorch's thread-local state, so forward, backward and the
    optimizer step are one fused program."""
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2)).to("tpu")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(4, 8, device="tpu")
    torch.tpu.synchronize()
    with torch_tpu.execution_mode("fused"):
        for _ in range(2):  # the first step also makes the gradients
            opt.zero_grad()
            model(x).sum().backward()
            opt.step()
        before = torch_tpu.fused_stats()["flushes"]
        opt.zero_grad()
        loss = model(x).sum()
        loss.backward()
        assert all(_held(p.grad) == "deferred" for p in model.parameters())
        opt.step()  # ends the step: one flush
        assert torch_tpu.fused_stats()["flushes"] - before == 1
    loss.item()


def test_set_execution_mode_changes_only_the_innermost_scope():
    outside = torch_tpu.get_execution_mode()
    with torch_tpu.execution_mode("fused"):
        x = torch.ones(3, device="tpu") + 1
        torch_tpu.set_execution_mode("strict")  # leaving fused mode runs what was deferred
        assert _held(x) == "buffer"
        assert torch_tpu.get_execution_mode() == "strict"
    assert torch_tpu.get_execution_mode() == outside


def test_nested_scopes_restore_in_order_and_decorators_work():
    outside = torch_tpu.get_execution_mode()

    @torch_tpu.execution_mode("debug")
    def inner():
        return torch_tpu.get_execution_mode()

    with torch_tpu.execution_mode("fused"):
        with torch_tpu.execution_mode("fused"):
            y = torch.ones(2, device="tpu") * 5
        assert _held(y) == "deferred"  # the inner scope reused the outer one's graph
        assert inner() == "debug"
        assert torch_tpu.get_execution_mode() == "fused"
    assert _held(y) == "buffer"
    assert torch_tpu.get_execution_mode() == outside
    with pytest.raises(RuntimeError, match="unknown execution mode"):
        torch_tpu.execution_mode("fast")


def test_execute_floor_runs_the_plugin_alone():
    # benchmarks/eager_basics.py's floor: seconds per bare execution of x + 1;
    # x itself is left as it was.
    x = torch.randn(16, 16, device="tpu")
    want = x.cpu()
    per = torch.ops.torch_tpu._execute_floor(x, 20)
    assert 0 < per < 1
    assert torch.equal(x.cpu(), want)
    with pytest.raises(RuntimeError, match="_execute_floor: expected a tpu tensor"):
        torch.ops.torch_tpu._execute_floor(torch.ones(2), 5)
