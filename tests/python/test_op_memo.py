"""The op memo: an op's program is built once per signature and reused.

A reused program must compute exactly what a freshly built one would: these
tests vary everything a program may depend on (shapes, strides, offsets,
shared storages, storage state, number arguments the lowering reads or only
passes on, generators) and compare against CPU PyTorch and against the same
calls with the memo off."""

import contextlib

import pytest
import torch

import torch_tpu
from conftest import assert_same, make


@contextlib.contextmanager
def memo(enabled):
    torch_tpu.set_op_memo(enabled)
    try:
        yield
    finally:
        torch_tpu.set_op_memo(True)


def built_and_reused(fn):
    """Runs fn() and returns how many op programs it built and reused."""
    c0 = torch_tpu.counters()
    fn()
    torch.tpu.synchronize()
    c1 = torch_tpu.counters()
    return c1["programs_built"] - c0["programs_built"], c1["programs_reused"] - c0["programs_reused"]


def test_repeated_op_builds_once():
    x = torch.randn(7, 5, device="tpu")
    y = torch.randn(7, 5, device="tpu")
    torch.sub(x, y)  # warm
    built, reused = built_and_reused(lambda: [torch.sub(x, y) for _ in range(10)])
    assert built == 0 and reused == 10
    # another shape is another signature
    built, _ = built_and_reused(lambda: torch.sub(x[:3], y[:3]))
    assert built == 1


def test_runtime_numbers_do_not_rebuild_and_bind_their_values():
    xc = make((6, 4), torch.float32, seed=1)
    x = xc.to("tpu")
    x.mul(0.25)
    values = [0.5, -3.0, 1e-3, 7.25, 0.0, -0.0]
    results = []
    built, reused = built_and_reused(lambda: results.extend(x.mul(v) for v in values))
    assert built == 0 and reused == len(values)
    for v, r in zip(values, results):
        assert_same(r, xc.mul(v))
    # a 0-dim CPU tensor operand is bound the same way
    for v in values:
        assert_same(x * torch.tensor(v), xc * torch.tensor(v))
    # and entries of a Scalar list
    xs = [make((3,), torch.float32, seed=s).to("tpu") for s in range(3)]
    for vals in ([1.0, 2.0, 3.0], [-0.5, 0.25, 8.0], [1.0, 1.0, 1.0]):
        out = torch._foreach_mul(xs, vals)
        for o, xi, v in zip(out, xs, vals):
            assert_same(o, xi.cpu() * v)


def test_numbers_the_lowering_reads_select_the_program():
    xc, yc = make((5, 3), torch.float32, seed=2), make((5, 3), torch.float32, seed=3)
    x, y = xc.to("tpu"), yc.to("tpu")
    for alpha in [1, 2.0, 1, -0.5, 1.0, 3]:
        assert_same(torch.add(x, y, alpha=alpha), torch.add(xc, yc, alpha=alpha))
        assert_same(torch.sub(x, y, alpha=alpha), torch.sub(xc, yc, alpha=alpha))
    for exponent in [2, 3, 0.5, 2, -1, 0, 1]:
        assert_same(torch.pow(x.abs(), exponent), torch.pow(xc.abs(), exponent), rtol=1e-5, atol=1e-5)
    for lo, hi in [(-1, 1), (0, 2), (-0.5, 0.5), (-1, 1)]:
        assert_same(torch.clamp(x, lo, hi), torch.clamp(xc, lo, hi))
        assert_same(torch.nn.functional.hardtanh(x, lo, hi), torch.nn.functional.hardtanh(xc, lo, hi))
    for slope in [0.01, 0.2, 0.01]:
        assert_same(torch.nn.functional.leaky_relu(x, slope), torch.nn.functional.leaky_relu(xc, slope))
    for eps in [1e-5, 1e-1, 1e-5]:
        assert_same(torch.nn.functional.layer_norm(x, (3,), eps=eps),
                    torch.nn.functional.layer_norm(xc, (3,), eps=eps), rtol=1e-5, atol=1e-5)
    for p in [1, 2, 3.5, float("inf"), 2]:
        assert_same(torch.linalg.vector_norm(x, p), torch.linalg.vector_norm(xc, p), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.bfloat16])
def test_views_offsets_and_strides(dtype):
    base_c = make((8, 6), dtype, seed=4)
    base = base_c.to("tpu")
    views = [lambda t: t, lambda t: t[2:], lambda t: t[:, 1:4], lambda t: t.t(), lambda t: t[1::2, ::3],
             lambda t: t[3], lambda t: t[3:4, 2:2], lambda t: t.reshape(-1)[5:17]]
    for _ in range(2):  # the second round reuses every program
        for v in views:
            assert_same(v(base).neg(), v(base_c).neg())
            assert_same(v(base) + v(base), v(base_c) + v(base_c))
            assert_same(v(base).sum(), v(base_c).sum()) if dtype != torch.bfloat16 else None


def test_in_place_with_shared_and_separate_storages():
    for _ in range(2):
        ac = make((6,), torch.float32, seed=5)
        a, b = ac.to("tpu"), ac.clone().to("tpu")
        a.add_(a)        # both operands are one storage
        b.add_(b.clone())  # same shapes, separate storages
        assert_same(a, ac + ac)
        assert_same(b, ac + ac)
        # disjoint views of one storage; partially overlapping ones are
        # refused, as on CPU, and leave the storage as it was
        cc = make((10,), torch.float32, seed=6)
        c = cc.to("tpu")
        c[5:10].add_(c[0:5])
        cc[5:10].add_(cc[0:5])
        assert_same(c, cc)
        for t in (cc, c):
            with pytest.raises(RuntimeError, match="single memory location"):
                t[2:7].add_(t[0:5])
        assert_same(c, cc)


def test_storage_state_never_written_and_written():
    for _ in range(2):
        z = torch.empty(4, 3, device="tpu")  # never written: zeros
        assert_same(z + 1, torch.ones(4, 3))
        w = torch.full((4, 3), 2.0, device="tpu")
        assert_same(w + 1, torch.full((4, 3), 3.0))
        # the same storage read as another dtype
        u = torch.ones(4, device="tpu", dtype=torch.float32)
        assert_same(u.view(torch.int32) + 0, torch.ones(4).view(torch.int32))


def test_random_ops_draw_fresh_keys_and_follow_the_seed():
    torch.manual_seed(0)
    a = torch.rand(1000, device="tpu")
    b = torch.rand(1000, device="tpu")
    assert not torch.equal(a.cpu(), b.cpu())
    g = torch.Generator(device="tpu").manual_seed(5)
    c = torch.randn(100, device="tpu", generator=g)
    g.manual_seed(5)
    d = torch.randn(100, device="tpu", generator=g)
    assert torch.equal(c.cpu(), d.cpu())
    with memo(False):
        torch.manual_seed(1)
        off = [torch.rand(64, device="tpu").cpu() for _ in range(3)]
    torch.manual_seed(1)
    on = [torch.rand(64, device="tpu").cpu() for _ in range(3)]
    for x, y in zip(off, on):
        assert torch.equal(x, y)
    x = torch.ones(2000, device="tpu")
    kept = [torch.nn.functional.dropout(x, p).cpu() for p in (0.5, 0.1, 0.5)]
    assert abs((kept[0] == 0).float().mean().item() - 0.5) < 0.06
    assert abs((kept[1] == 0).float().mean().item() - 0.1) < 0.04
    assert not torch.equal(kept[0], kept[2])


def test_foreach_adam_step_sizes_change_every_step_without_rebuilding():
    torch.manual_seed(0)
    model_c = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2))
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2)).to("tpu")
    model.load_state_dict(model_c.state_dict())
    opt_c = torch.optim.Adam(model_c.parameters(), lr=1e-2, foreach=True)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2, foreach=True)
    data = torch.randn(32, 8)
    target = torch.randn(32, 2)

    def step(m, o, x, y):
        o.zero_grad()
        loss = torch.nn.functional.mse_loss(m(x), y)
        loss.backward()
        o.step()
        return loss

    for _ in range(3):
        step(model_c, opt_c, data, target)
        step(model, opt, data.to("tpu"), target.to("tpu"))
    built, reused = built_and_reused(
        lambda: [step(model, opt, data.to("tpu"), target.to("tpu")) for _ in range(3)])
    for _ in range(3):
        step(model_c, opt_c, data, target)
    assert built == 0, built
    assert reused > 0
    for p, pc in zip(model.parameters(), model_c.parameters()):
        assert_same(p.detach(), pc.detach(), rtol=1e-4, atol=1e-5)


def test_memo_off_matches_memo_on():
    torch.manual_seed(3)
    xc = torch.randn(9, 4)
    wc = torch.randn(4, 4)

    def program(x, w):
        h = torch.tanh(x @ w) * 0.5 + x[:, :4].flip(0)
        h = h.masked_fill(h > 0.3, -1.0)
        return torch.softmax(h, dim=-1).cumsum(0), h.max(dim=1).values, torch.where(h > 0, h, x)

    with memo(False):
        off = [t.cpu() for t in program(xc.to("tpu"), wc.to("tpu"))]
    on1 = [t.cpu() for t in program(xc.to("tpu"), wc.to("tpu"))]
    on2 = [t.cpu() for t in program(xc.to("tpu"), wc.to("tpu"))]
    for a, b, c in zip(off, on1, on2):
        assert torch.equal(a, b) and torch.equal(b, c)


def test_out_variant_resized_output_is_replayed():
    # out= tensors of the wrong shape are resized to the result's (the
    # signature fixes both shapes), so the program is reused.
    xc = make((5,), torch.float32, seed=3)
    x = xc.to("tpu")

    def add_into_empty(v):
        out = torch.empty(0, device="tpu")
        torch.add(x, v, out=out)
        return out

    add_into_empty(1.0)
    outs = []
    built, reused = built_and_reused(lambda: outs.extend(add_into_empty(v) for v in (1.0, -2.5)))
    assert built == 0 and reused == 2
    for v, out in zip((1.0, -2.5), outs):
        assert out.shape == (5,)
        assert_same(out, xc + v)
    # a view of a larger tensor written in place is not resized
    big = torch.zeros(2, 5, device="tpu")
    for _ in range(2):
        torch.add(x, 1.0, out=big[1])
    assert_same(big, torch.stack([torch.zeros(5), xc + 1]))
    # factories that fill an out= tensor: arange's length comes from its numbers
    for n in range(100, 116, 2):  # (no growing sequence of lengths: test_bucketed.py pads those)
        torch.arange(n, device="tpu")
    torch.arange(4, device="tpu")
    built, reused = built_and_reused(lambda: torch.arange(4, device="tpu"))
    assert built == 0 and reused == 1
    for end in (4, 7, 4):
        assert torch.equal(torch.arange(end, device="tpu").cpu(), torch.arange(end))
        assert torch.equal(torch.arange(0.5, end, 0.25, device="tpu").cpu(), torch.arange(0.5, end, 0.25))
    # a non-empty out= of another shape is resized too (PyTorch warns)
    for _ in range(2):
        out = torch.ones(2, 2, device="tpu")
        with pytest.warns(UserWarning, match="resized"):
            torch.mul(x, 2.0, out=out)
        assert out.shape == (5,)
        assert_same(out, xc * 2.0)


def test_errors_still_raised_on_reuse():
    x = torch.randn(3, 4, device="tpu")
    y = torch.randn(4, 3, device="tpu")
    for _ in range(2):
        with pytest.raises(RuntimeError):
            torch.add(x, y)
    idx = torch.tensor([0, 5], device="tpu")
    for _ in range(2):
        with pytest.raises(IndexError):
            x[idx].cpu()


def test_fused_mode_reuses_plans():
    xc = make((6, 6), torch.float32, seed=7)
    with torch_tpu.execution_mode("fused"):
        x = xc.to("tpu")
        for s in [0.5, 2.0, -1.0]:
            y = (x * s + 1).relu().sum(0)
            assert_same(y, (xc * s + 1).relu().sum(0))


@contextlib.contextmanager
def _default_dtype(dtype):
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


def test_default_dtype_is_part_of_the_signature():
    """A plan built under one default dtype is not replayed under another:
    integer-to-float promotions read it."""
    x = torch.arange(4, device="tpu")
    assert torch.sin(x).dtype == torch.float32
    for dtype in (torch.float64, torch.float16, torch.float32):
        with _default_dtype(dtype):
            for fn in (torch.sin, lambda t: t / 2, lambda t: t.mean(dtype=None) if t.is_floating_point() else t * 0.5,
                       lambda t: torch.sqrt(t)):
                assert_same(fn(x), fn(x.cpu()))
            # Python floats (wrapped numbers) promote to the default dtype too.
            assert_same(torch.ones(3, dtype=torch.int32, device="tpu") * 1.5,
                        torch.ones(3, dtype=torch.int32) * 1.5)
    with _default_dtype(torch.float64):
        assert torch.sin(x).dtype == torch.float64
        one = torch.ones(2, dtype=torch.float32)
        assert_same(torch.polar(one.to("tpu"), one.to("tpu")) * 2.0, torch.polar(one, one) * 2.0)


def test_matmul_precision_is_part_of_the_signature():
    """The same matmul under another float32 matmul precision builds its own
    program: a kept plan of the old precision is not replayed."""
    a = torch.randn(8, 8, device="tpu")
    old = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("highest")
        a @ a
        built = torch_tpu.counters()["programs_built"]
        a @ a
        assert torch_tpu.counters()["programs_built"] == built
        torch.set_float32_matmul_precision("medium")
        r = a @ a
        assert torch_tpu.counters()["programs_built"] == built + 1
        torch.testing.assert_close(r.cpu(), a.cpu() @ a.cpu(), rtol=2e-2, atol=2e-2)
        # Both plans are kept: going back replays the first one.
        torch.set_float32_matmul_precision("highest")
        torch.testing.assert_close((a @ a).cpu(), a.cpu() @ a.cpu())
        a + 1
        built = torch_tpu.counters()["programs_built"]
        # An op whose lowering does not read the precision replays its plan
        # under any precision.
        torch.set_float32_matmul_precision("medium")
        a + 1
        a @ a
        assert torch_tpu.counters()["programs_built"] == built
    finally:
        torch.set_float32_matmul_precision(old)


def test_foreach_ops_replay_under_another_matmul_precision():
    """A _foreach op runs its element's lowering per list entry: what that
    lowering read (not the precision, for an add) decides its plan's key."""
    old = torch.get_float32_matmul_precision()
    xs = [torch.randn(4, 4, device="tpu") for _ in range(2)]
    try:
        torch.set_float32_matmul_precision("highest")
        torch._foreach_add(xs, xs)
        built = torch_tpu.counters()["programs_built"]
        torch.set_float32_matmul_precision("medium")
        torch._foreach_add(xs, xs)
        assert torch_tpu.counters()["programs_built"] == built
    finally:
        torch.set_float32_matmul_precision(old)
