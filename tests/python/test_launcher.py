"""Strict eager's launcher thread (csrc/exec/launcher.h): programs queued in
order and started off the calling thread, their results filled when they
start. The tests run with every program through the thread ("always"), so
they do not depend on the burst heuristic's timing, and compare against CPU
and against programs started on the calling thread ("0")."""

import threading

import pytest
import torch

import torch_tpu
from conftest import run_python

set_launch = torch.ops.torch_tpu._set_async_launch


@pytest.fixture
def launch_mode():
    """Sets the launch mode for the test; the process's mode comes back after."""
    before = set_launch("1")
    set_launch(before)
    modes = []

    def use(mode):
        torch.tpu.synchronize()
        modes.append(set_launch(mode))

    with torch_tpu.execution_mode("strict"):
        yield use
    torch.tpu.synchronize()
    set_launch(before)


def _program(x, w, idx):
    """A mix of what strict eager launches: elementwise chains, in-place
    updates (donated), views written through, matmuls, reductions and index
    ops (with device checks)."""
    y = (x * 3 - 1).relu()
    x.add_(y, alpha=0.5)
    x[1:3].mul_(2)
    z = x.t() @ w
    z.index_add_(0, idx, torch.ones(idx.numel(), z.shape[1], device=z.device))
    g = x.gather(1, idx[:2].expand(x.shape[0], 2))
    s = z.sum(0, keepdim=True) + g.sum()
    return x, z, g, s


@pytest.mark.parametrize("shape", [(5, 7), (64, 33), (0, 4)])
def test_queued_programs_give_cpus_values_strides_and_aliasing(launch_mode, shape):
    launch_mode("always")
    torch.manual_seed(0)
    x = torch.randn(shape)
    w = torch.randn(shape[0], 6)
    idx = torch.tensor([0, 3, 1, 3]) % shape[1]
    xt = x.to("tpu")
    view = xt[:, 1:]  # shares xt's storage: sees its in-place updates
    got = _program(xt, w.to("tpu"), idx.to("tpu"))
    want = _program(x, w, idx)
    for g, e in zip(got, want):
        assert g.shape == e.shape and g.stride() == e.stride() and g.dtype == e.dtype
        torch.testing.assert_close(g.cpu(), e, rtol=1e-5, atol=1e-5)
    assert got[0] is xt
    torch.testing.assert_close(view.cpu(), x[:, 1:])


def test_a_loop_of_in_place_updates_donates_as_when_started_inline(launch_mode):
    """Whether an update donates its old buffer is decided as if every queued
    program had started (and let go of its arguments): the same programs
    compile whether the thread is behind or not, and a loop compiles
    nothing after its first round."""

    def rounds(n, mode):
        launch_mode(mode)
        p = torch.randn(37, 29, device="tpu")
        g = torch.randn(37, 29, device="tpu")
        for _ in range(n):
            r = p * 0.5  # reads p: its program may still be queued when p is updated
            p.add_(g, alpha=-0.1)
            p.mul_(0.9).add_(r, alpha=0.01)
        return p.cpu()

    rounds(2, "0")
    misses = torch_tpu.cache_stats()["misses"]
    for mode in ("always", "1", "0", "always"):
        rounds(30, mode)
    assert torch_tpu.cache_stats()["misses"] == misses


def test_executions_are_counted_when_queued(launch_mode):
    launch_mode("always")
    x = torch.randn(8, device="tpu")
    before = torch_tpu.counters()["executions"]
    for _ in range(5):
        x = x + 1
    assert torch_tpu.counters()["executions"] == before + 5


def test_a_failed_check_of_a_queued_program_belongs_to_its_values(launch_mode):
    launch_mode("always")
    x = torch.arange(6.0, device="tpu")
    bad = x.gather(0, torch.tensor([9], device="tpu"))
    derived = bad * 2
    fine = x + 1
    assert fine.cpu().tolist() == [1, 2, 3, 4, 5, 6]
    for t in (bad, derived):
        with pytest.raises(RuntimeError, match=r"gather\(\): index out of bounds.*\(aten::gather\).*asynchronously"):
            t.cpu()
    torch.tpu.synchronize()  # (the reads reported it)
    unread = x.gather(0, torch.tensor([7], device="tpu"))
    with pytest.raises(RuntimeError, match="out of bounds"):
        torch.tpu.synchronize()  # a failure no read reported
    torch.tpu.synchronize()  # once
    del unread


def test_events_and_synchronize_cover_programs_still_queued(launch_mode):
    launch_mode("always")
    x = torch.randn(128, 128, device="tpu")
    for _ in range(20):
        x = torch.tanh(x @ x * 0.01)
    e = torch.tpu.Event()
    e.record()
    e.synchronize()
    assert e.query()
    y = x.clone()
    torch.tpu.synchronize()
    torch.testing.assert_close(y.cpu(), x.cpu())


def test_more_programs_than_the_queue_holds(launch_mode):
    launch_mode("always")
    x = torch.zeros(3, device="tpu")
    for _ in range(5000):  # the caller waits for the thread past 4096 queued programs
        x += 1
    assert x.cpu().tolist() == [5000.0] * 3


def test_threads_share_the_launcher(launch_mode):
    launch_mode("always")
    results, errors = {}, []

    def work(k):
        try:
            with torch_tpu.execution_mode("strict"):
                t = torch.full((4, 5), float(k), device="tpu")
                for _ in range(200):
                    t = t * 1.0 + 1
                results[k] = t.cpu()
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors and len(results) == 4
    for k, t in results.items():
        assert torch.equal(t, torch.full((4, 5), float(k) + 200))


def test_fused_graph_reads_queued_values_and_donates_as_before(launch_mode):
    launch_mode("always")
    p = torch.randn(16, 8, device="tpu")
    q = p * 2  # queued
    with torch_tpu.execution_mode("fused"):
        p.add_(q, alpha=0.5)  # the fused graph reads q and updates p in place
        s = p.sum()
    assert abs(s.item() - (p.cpu().sum().item())) < 1e-4
    torch.testing.assert_close(p.cpu(), q.cpu() / 2 * 2, rtol=1e-6, atol=1e-6)


def test_training_step_matches_inline_launching(launch_mode):
    def train(mode):
        launch_mode(mode)
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(12, 32), torch.nn.GELU(), torch.nn.Linear(32, 3)).to("tpu")
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        data = torch.randn(8, 12, device="tpu")
        target = torch.randint(0, 3, (8,), device="tpu")
        losses = []
        for _ in range(5):
            loss = torch.nn.functional.cross_entropy(model(data), target)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return losses, [p.detach().cpu() for p in model.parameters()]

    l0, p0 = train("0")
    l1, p1 = train("always")
    assert l0 == l1
    for a, b in zip(p0, p1):
        assert torch.equal(a, b)


def test_profiler_sees_programs_started_on_the_ops_thread(launch_mode):
    launch_mode("always")
    x = torch.randn(64, 64, device="tpu")
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                            torch.profiler.ProfilerActivity.PrivateUse1]) as prof:
        for _ in range(3):
            x = x @ x * 0.01
        torch.tpu.synchronize()
    names = {e.key for e in prof.key_averages() if e.device_time_total > 0}
    assert any("mm" in n for n in names), names


def test_a_process_exits_with_programs_still_queued():
    r = run_python("import torch, torch_tpu\n"
                   "x = torch.randn(64, 64, device='tpu')\n"
                   "for _ in range(300): x = x @ x * 0.01\n"
                   "print('queued')\n",
                   env={"TORCH_TPU_ASYNC_LAUNCH": "always"}, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "queued", r.stderr


def test_unknown_launch_mode_is_a_value_error():
    with pytest.raises(ValueError, match="unknown launch mode 'sometimes'"):
        set_launch("sometimes")


def test_a_program_that_cannot_start_fails_its_values_with_the_plugins_error(launch_mode):
    """A program the thread cannot start (the plugin out of device memory):
    reads of its results, and of what was computed from them, raise
    torch.OutOfMemoryError, as the op would have raised on the calling
    thread; other tensors, and the device, go on. Another failure keeps the
    plugin's message."""
    launch_mode("always")
    x = torch.arange(6.0, device="tpu")
    before = x * 2
    torch.tpu.synchronize()  # (so that the failure is the next program's)
    torch.ops.torch_tpu._fail_next_launch(True, "cannot allocate 96 bytes")
    y = x + 1  # its program fails to start
    z = y * 3  # computed from it
    after = x - 1
    for t in (y, z):
        with pytest.raises(torch.OutOfMemoryError, match="out of device memory.*cannot allocate 96 bytes"):
            t.cpu()
    assert before.cpu().tolist() == [0, 2, 4, 6, 8, 10]
    assert after.cpu().tolist() == [-1, 0, 1, 2, 3, 4]
    torch.tpu.synchronize()
    torch.ops.torch_tpu._fail_next_launch(False, "the plugin refused")
    v = x + 5
    with pytest.raises(RuntimeError, match="the plugin refused"):
        v.cpu()
    assert (x + 5).cpu().tolist() == [5, 6, 7, 8, 9, 10]
    torch.tpu.synchronize()
