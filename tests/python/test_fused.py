"""Fused eager: deferred ops run together as one program, with eager results.

The whole suite also runs in this mode (TORCH_TPU_DEFER_AND_FUSE=1, see
tests/run.sh); these tests check what is specific to it: what triggers a
flush, that intermediates stay inside the program, that a loop compiles
once, and that views, in-place ops and errors keep their eager meaning.
"""

import copy
import os
import re
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

import torch_tpu
from conftest import assert_trained_close
from torch_tpu.testing.models import GPT, MLP, GPTConfig


@pytest.fixture(autouse=True)
def fused():
    with torch_tpu.execution_mode("fused"):
        yield


def flushes():
    return torch_tpu.fused_stats()["flushes"]


def test_ops_are_deferred_until_a_value_is_read():
    x = torch.randn(4, 5, device="tpu")
    torch_tpu.flush()
    before, runs = flushes(), torch_tpu.counters()["executions"]
    y = (x * 2 + 1).exp()
    z = y.sum(0)
    assert flushes() == before and torch_tpu.counters()["executions"] == runs
    got = z.cpu()  # one program for the four ops
    assert flushes() == before + 1 and torch_tpu.counters()["executions"] == runs + 1
    torch.testing.assert_close(got, (x.cpu() * 2 + 1).exp().sum(0))  # (exp may differ from the CPU in the last bit)


@pytest.mark.parametrize("trigger", ["item", "cpu", "print", "synchronize", "tolist", "nonzero", "mode_switch",
                                     "equal", "save"])
def test_flush_triggers(trigger, tmp_path, capsys):
    x = torch.arange(6.0, device="tpu")
    torch_tpu.flush()
    before = flushes()
    y = x * 3 - 1
    if trigger == "item":
        assert y[2].item() == 5.0
    elif trigger == "cpu":
        assert y.cpu().tolist() == [-1, 2, 5, 8, 11, 14]
    elif trigger == "print":
        print(y)
        assert "14." in capsys.readouterr().out
    elif trigger == "synchronize":
        torch.tpu.synchronize()
    elif trigger == "tolist":
        assert y.tolist()[-1] == 14.0
    elif trigger == "nonzero":  # a data-dependent shape
        assert (y > 4).nonzero().flatten().cpu().tolist() == [2, 3, 4, 5]
    elif trigger == "mode_switch":
        torch_tpu.set_execution_mode("strict")
    elif trigger == "equal":
        assert torch.equal(y, y.clone())
    elif trigger == "save":
        torch.save(y, tmp_path / "y.pt")
        assert torch.load(tmp_path / "y.pt").cpu().tolist() == [-1, 2, 5, 8, 11, 14]
    assert flushes() > before


def test_graph_size_limit_flushes(monkeypatch):
    limit = torch_tpu.fused_max_ops()
    x = torch.zeros(3, device="tpu")
    torch_tpu.flush()
    before = flushes()
    for _ in range(limit + 5):
        x = x + 1
    assert flushes() == before + 1  # at the limit, not at the end
    assert x.cpu().tolist() == [limit + 5.0] * 3


def test_views_in_place_and_aliasing_keep_eager_semantics():
    base_c = torch.arange(24.0).reshape(4, 6)
    base_t = base_c.to("tpu")
    for b in (base_c, base_t):
        row = b[1]
        col = b[:, 2]
        row.mul_(10)  # visible through base and col
        col.add_(col.sum())
        b.t()[3:5, 1:3].zero_()
        b[b > 100] = -1
        b.view(-1)[::5] += 0.5
    torch.testing.assert_close(base_t.cpu(), base_c, rtol=0, atol=0)
    torch.testing.assert_close(row.cpu(), base_c[1], rtol=0, atol=0)
    assert row.data_ptr() == base_t.data_ptr() + 6 * 4


def test_results_equal_strict_mode_on_a_mixed_program():
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(16, 32, generator=g), torch.randn(32, 8, generator=g)

    def program(a, b):
        h = torch.tanh(a @ b) * 0.5 + a[:, :8].sigmoid()
        h = h.softmax(-1).cumsum(1) / (h.abs() + 1)
        idx = h.argmax(1)
        return h.index_select(0, idx)[:, ::2].contiguous(), F.layer_norm(h, (8,)), h.std(0)

    fused_results = [r.cpu() for r in program(a.to("tpu"), b.to("tpu"))]
    with torch_tpu.execution_mode("strict"):
        strict_results = [r.cpu() for r in program(a.to("tpu"), b.to("tpu"))]
    for f, s in zip(fused_results, strict_results):
        torch.testing.assert_close(f, s, rtol=1e-6, atol=1e-6)


def _train(model, mode, steps, kind):
    g = torch.Generator().manual_seed(0)
    with torch_tpu.execution_mode(mode):
        model = copy.deepcopy(model).to("tpu")
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        losses = []
        for _ in range(steps):
            if kind == "mlp":
                x = torch.randn(16, 32, generator=g)
                y = x[:, :10].argmax(1)
                loss = F.cross_entropy(model(x.to("tpu")), y.to("tpu"))
            else:
                ids = torch.randint(0, 32, (4, 17), generator=g)
                loss = model(ids[:, :-1].to("tpu"), ids[:, 1:].to("tpu"))[1]
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            losses.append(loss.detach())
        return torch.stack(losses).cpu(), model


@pytest.mark.parametrize("kind", ["mlp", "gpt"])
def test_training_matches_strict_and_compiles_once(kind):
    torch.manual_seed(0)
    model = MLP(d_in=32, hidden=32, classes=10, depth=2) if kind == "mlp" else \
        GPT(GPTConfig(vocab_size=32, block_size=16, n_layer=1, n_head=2, n_embd=32))
    strict_losses, strict_model = _train(model, "strict", 6, kind)
    _train(model, "fused", 6, kind)  # warm-up: compiles every program the run below needs
    misses = torch_tpu.cache_stats()["misses"]
    f0 = flushes()
    fused_losses, fused_model = _train(model, "fused", 6, kind)
    # Each step is one program (the optimizer step ends it), compiled by the warm-up.
    assert flushes() - f0 >= 6
    assert torch_tpu.cache_stats()["misses"] == misses
    # XLA fuses across op boundaries and may contract a multiply and an add
    # into one rounding, so values can differ in the last bits; AdamW turns
    # such differences in near-zero gradients into visible (lr-sized) ones
    # for a few parameters, hence the parameter tolerance: a tenth of one
    # step (lr 1e-2) for any parameter, a hundredth for nearly all (how far
    # the last bits carry depends on the machine's XLA CPU code: 1.3e-4 on
    # one, under 1e-4 on another).
    torch.testing.assert_close(fused_losses, strict_losses, rtol=1e-5, atol=1e-6)
    for p, q in zip(fused_model.parameters(), strict_model.parameters()):
        assert_trained_close(p, q, any_atol=1e-3, most_rtol=1e-3, most_atol=1e-4)


@pytest.mark.parametrize("kind", ["mlp", "gpt"])
def test_a_training_loop_needs_two_programs(kind):
    # The first step creates the optimizer state; from the second on every
    # step is the same program, also when gradients accumulate over steps:
    # storage values are kept flat, so a bias gradient first made by a
    # keepdim sum and later by an in-place add enter with the same type.
    torch.manual_seed(1)
    model = MLP(d_in=24, hidden=24, classes=6, depth=2) if kind == "mlp" else \
        GPT(GPTConfig(vocab_size=24, block_size=8, n_layer=1, n_head=2, n_embd=24))
    seen = lambda: (lambda s: s["misses"] + s["disk_hits"])(torch_tpu.cache_stats())
    with torch_tpu.execution_mode("fused"):
        model = model.to("tpu")
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        ids = torch.randint(0, 24, (2, 9)).to("tpu")
        x, y = torch.randn(8, 24).to("tpu"), torch.randint(0, 6, (8,)).to("tpu")
        counts = []
        for _ in range(5):
            loss = F.cross_entropy(model(x), y) if kind == "mlp" else model(ids[:, :-1], ids[:, 1:])[1]
            loss.backward()  # no zero_grad: gradients accumulate
            opt.step()
            loss.item()
            counts.append(seen())
    assert counts[2:] == [counts[1]] * 3, counts


def test_intermediates_are_not_materialized():
    x = torch.randn(256, 256, device="tpu")
    torch.tpu.synchronize()
    base = torch.tpu.memory_allocated()
    y = x
    for _ in range(20):
        y = torch.sin(y) * 1.5  # each step's result dies at the next
    # The 40 deferred results are not device buffers: only the live one will be.
    torch.tpu.synchronize()
    assert torch.tpu.memory_allocated() - base == 256 * 256 * 4
    torch.testing.assert_close(y.cpu(), _sin_chain(x.cpu(), 20), rtol=1e-6, atol=1e-6)


def _sin_chain(x, n):
    for _ in range(n):
        x = torch.sin(x) * 1.5
    return x


def test_device_side_errors_surface_at_the_flush():
    x = torch.arange(5.0, device="tpu")
    bad = torch.tensor([1, 7], device="tpu")
    y = x[bad]  # out of range: checked on the device
    with pytest.raises(IndexError, match="out of bounds|out of range"):
        y.cpu()
    # The device and other tensors are fine afterwards.
    assert (x * 2).cpu().tolist() == [0, 2, 4, 6, 8]


def test_host_errors_raise_at_the_op():
    a, b = torch.ones(2, 3, device="tpu"), torch.ones(4, 5, device="tpu")
    with pytest.raises(RuntimeError, match="shapes cannot be multiplied"):
        a @ b
    assert (a + 1).sum().item() == 12


TEMPORARIES = """
import torch, torch_tpu

def step(a, b):
    parts = [(a + i) @ b for i in range(16)]
    total = sum(parts)
    return sum(p * total for p in parts)  # the 16 4 MiB parts live together

a, b = torch.randn(1024, 64, device="tpu"), torch.randn(64, 1024, device="tpu")
with torch_tpu.execution_mode("fused"):
    y = step(a, b)
print(float(y[0, 0]))
"""


def test_cpu_plugin_temporaries_stay_in_heaps_malloc_can_reuse(tmp_path):
    # A fused step's temporaries in one block above glibc's 32 MiB mmap
    # threshold were mapped, zero-filled and unmapped at every run (a quarter
    # of a fused GPT step): torch_tpu caps XLA:CPU's temporary heaps at
    # 30 MiB, keeping the user's own XLA_FLAGS.
    dump = tmp_path / "dump"
    env = dict(os.environ, TORCH_TPU_CACHE_DIR="0", TORCH_TPU_SESSION="0",
               XLA_FLAGS=f"--xla_dump_to={dump} --xla_dump_hlo_as_text")
    out = subprocess.run([sys.executable, "-c", TEMPORARIES], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    temps = []
    for f in dump.glob("*tpu_fused*buffer-assignment.txt"):
        temps += [int(s) for s in re.findall(r"^allocation \d+: size (\d+), .*preallocated-temp", f.read_text(), re.M)]
    assert temps, "no fused program was dumped"
    assert max(temps) <= torch_tpu._plugin.CPU_TEMP_HEAP_BYTES + 4 * 1024 * 1024, sorted(temps)
    assert sum(temps) >= 60 * 1024 * 1024  # (the temporaries did exist)


def test_xla_flags_for_the_cpu_plugin_keep_the_users():
    from torch_tpu._plugin import CPU_TEMP_HEAP_FLAG, PluginChoice, xla_flags

    cpu = PluginChoice("/x/pjrt_c_api_cpu_plugin.so", "cpu", [])
    assert xla_flags(cpu, "") == f"{CPU_TEMP_HEAP_FLAG}={30 << 20}"
    assert xla_flags(cpu, "--xla_dump_to=/d") == f"--xla_dump_to=/d {CPU_TEMP_HEAP_FLAG}={30 << 20}"
    assert xla_flags(cpu, f"{CPU_TEMP_HEAP_FLAG}=-1") == f"{CPU_TEMP_HEAP_FLAG}=-1"
    assert xla_flags(PluginChoice("/x/pjrt_c_api_cpu_plugin.so", "env", []), "").startswith(CPU_TEMP_HEAP_FLAG)
    for kind, path in (("tpu", "/x/libtpu.so"), ("cuda", "/x/xla_cuda_plugin.so"), ("env", "/x/libtpu.so")):
        assert xla_flags(PluginChoice(path, kind, []), "--a") == "--a"
    # This process runs on the CPU plugin with the cap.
    if torch_tpu.plugin_info()["platform"] == "cpu":
        assert CPU_TEMP_HEAP_FLAG in os.environ["XLA_FLAGS"]


@pytest.mark.parametrize("cls,kw,states", [(torch.optim.AdamW, {}, 2), (torch.optim.Adam, dict(weight_decay=0.1), 2),
                                           (torch.optim.SGD, dict(momentum=0.9, weight_decay=0.1), 1),
                                           (torch.optim.RMSprop, dict(momentum=0.9, weight_decay=0.1), 2)])
def test_optimizer_steps_update_parameters_and_state_in_place(cls, kw, states):
    # A parameter or state written by several in-place ops in one step
    # (weight decay's mul_, then addcdiv_) gives its buffer to the last of
    # them: the step keeps no second copy of the model or of its state.
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4)).to("tpu")
    ref = copy.deepcopy(model).cpu()
    opt = cls(model.parameters(), lr=1e-3, foreach=True, **kw)
    ref_opt = cls(ref.parameters(), lr=1e-3, foreach=True, **kw)
    x = torch.randn(16, 32)
    n = len(list(model.parameters()))
    for step in range(3):
        for m, o, inp in ((model, opt, x.to("tpu")), (ref, ref_opt, x)):
            o.zero_grad()
            m(inp).square().mean().backward()
        torch.tpu.synchronize()
        before = torch_tpu.fused_stats()
        opt.step()
        ref_opt.step()
        torch.tpu.synchronize()
        after = torch_tpu.fused_stats()
        assert after["flushes"] - before["flushes"] == 1
        if step > 0:  # (the first step creates the state)
            assert after["donated"] - before["donated"] == n * (1 + states)
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p.detach().cpu(), q.detach(), rtol=1e-5, atol=1e-6)


def _upload(x):
    return x.to("tpu")  # (one line for every size: the new-tensor rule holds them padded)


def test_a_graph_does_not_depend_on_run_time_sizes_being_equal():
    """Two batches held padded in one bucket, of lengths that are equal at
    some steps and not at others (two tables' id counts): each op's run-time
    length is a parameter of its own, so the fused graph is one program
    whatever the lengths are (sharing equal numbers made a new one whenever
    the pattern of equal lengths changed), and its values are the lengths'."""
    lengths = [(20, 21), (22, 23), (24, 25), (26, 26), (27, 28), (29, 29), (30, 31), (17, 17)]
    g = torch.Generator().manual_seed(0)
    graphs = []
    for n1, n2 in lengths:
        a, b = torch.randint(-9, 9, (n1,), generator=g), torch.randint(-9, 9, (n2,), generator=g)
        ta, tb = _upload(a), _upload(b)
        before = torch_tpu.fused_stats()["graphs"]
        got = torch.stack([(ta * 3).sum(), (tb - 1).sum()]).cpu()
        graphs.append(torch_tpu.fused_stats()["graphs"] - before)
        torch.testing.assert_close(got, torch.stack([(a * 3).sum(), (b - 1).sum()]))
    assert graphs[3:] == [0] * (len(lengths) - 3), graphs
