"""Tensors on tpu: copies for every dtype, factories, clone, item, printing."""

import itertools
import time

import pytest
import torch

from conftest import DTYPES, assert_same, make

SHAPES = [(), (0,), (7,), (3, 4), (2, 0, 3), (2, 3, 5)]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_round_trip(dtype, shape):
    x = make(shape, dtype)
    t = x.to("tpu")
    assert t.device.type == "tpu" and t.dtype == dtype and t.shape == x.shape
    assert torch.equal(t.cpu(), x)


@pytest.mark.parametrize("src,dst", list(itertools.product(DTYPES, DTYPES)), ids=str)
def test_dtype_conversion_on_device(src, dst):
    x = make((3, 5), src, low=-3, high=3)
    assert_same(x.to("tpu").to(dst), x.to(dst), rtol=0, atol=0)


FLOAT8 = [torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e4m3fnuz, torch.float8_e5m2fnuz]


def _same_float8(got, want):
    """Bit for bit, any NaN encoding equal to any other."""
    assert got.dtype == want.dtype and got.shape == want.shape and got.stride() == want.stride()
    g, w = got.cpu().float(), want.float()
    assert bool(((g == w) & (g.signbit() == w.signbit()) | (g.isnan() & w.isnan())).all())


@pytest.mark.parametrize("dtype", FLOAT8, ids=str)
def test_float8_conversions_are_cpus_bit_for_bit(dtype):
    """The 8-bit floats (torchao's float8 training, fp8 checkpoints): every
    value of the type, the midpoints between neighbours (round half to
    even) and their neighbours, overflow (e4m3fn saturates at +-448, e5m2
    goes to infinity, the FNUZ types to NaN), infinities, NaN and signed
    zeros, converted from float32, float64 (rounded to float first, as CPU
    does), half, bfloat16 and integers, and back to every dtype."""
    every = torch.arange(256, dtype=torch.uint8).view(dtype).float()
    finite = every[torch.isfinite(every)].unique()
    mids = (finite[1:] + finite[:-1]) / 2
    inf = torch.tensor(float("inf"))
    g = torch.Generator().manual_seed(0)
    x = torch.cat([every, mids, mids.nextafter(inf), mids.nextafter(-inf),
                   *[torch.randn(2000, generator=g) * s for s in (1e-4, 1, 300, 1e5)],
                   torch.tensor([inf, -inf, float("nan"), 0.0, -0.0, 1e30, -465.0, 480.0, 57344.0, 61440.0])])
    for src in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
        _same_float8(x.to(src).to("tpu").to(dtype), x.to(src).to(dtype))
    ints = x.nan_to_num(0).clamp(-1e5, 1e5)
    for src in (torch.int64, torch.int32, torch.uint8, torch.bool):
        _same_float8(ints.to(src).to("tpu").to(dtype), ints.to(src).to(dtype))
    v = torch.arange(256, dtype=torch.uint8).view(dtype)
    small = v[v.float().abs() < 100]  # (integer casts of NaN and of large values are undefined in C++)
    for dst in (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.bool):
        assert_same(v.to("tpu").to(dst), v.to(dst), rtol=0, atol=0)
    for dst in FLOAT8:
        _same_float8(v.to("tpu").to(dst), v.to(dst))
    for dst in (torch.int64, torch.int32, torch.int8, torch.uint8):
        assert torch.equal(small.to("tpu").to(dst).cpu(), small.to(dst))


@pytest.mark.parametrize("dtype", FLOAT8, ids=str)
def test_float8_tensors_move_index_and_multiply_as_on_cpu(dtype):
    """What CPU PyTorch does with 8-bit floats (moving, viewing, indexing,
    filling, comparing, matmul) gives CPU's bits; a Python number that
    does not fit raises CPU's error."""
    x = (torch.randn(4, 8, generator=torch.Generator().manual_seed(1)) * 4).to(dtype)
    idx = torch.tensor([2, 0, 3])
    cases = [
        lambda x: x, lambda x: x.t().contiguous(), lambda x: x[:, 1:7:2].clone(), lambda x: torch.cat([x, x[:1]]),
        lambda x: torch.stack([x, x], 1), lambda x: x.flip(0).roll(3, 1), lambda x: x[:1].expand(3, 8).contiguous(),
        lambda x: torch.nn.functional.pad(x, (1, 2)), lambda x: x[idx.to(x.device)], lambda x: x.abs(),
        lambda x: torch.where(x.float() > 0, x, x[0]), lambda x: x.clone().fill_(1.5), lambda x: x.view(torch.uint8),
        lambda x: x.view(torch.int16), lambda x: x.clone().index_put_((idx.to(x.device),), x[0, 0]),
        lambda x: (x.float() * 3).to(dtype), lambda x: torch.full((2, 3), -2.5, dtype=dtype, device=x.device),
        lambda x: x @ (x.t().float() / 4).to(dtype),
    ]
    for f in cases:
        want, got = f(x), f(x.to("tpu"))
        if want.dtype == dtype:
            _same_float8(got, want)
        else:
            assert_same(got, want, rtol=0, atol=0)
    assert_same(x.to("tpu") == x[0, 0].item(), x == x[0, 0].item())
    assert_same(x.to("tpu").isnan(), x.isnan())
    with pytest.raises(RuntimeError, match="overflow"):
        torch.zeros(2, dtype=dtype, device="tpu").fill_(1e6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool, torch.bfloat16], ids=str)
def test_non_contiguous_copies_both_ways(dtype):
    x = make((6, 8), dtype)
    # host non-contiguous -> device
    assert torch.equal(x.t().to("tpu").cpu(), x.t())
    assert torch.equal(x[::2, 1::3].to("tpu").cpu(), x[::2, 1::3])
    # device non-contiguous -> host
    t = x.to("tpu")
    assert torch.equal(t.t().cpu(), x.t())
    assert torch.equal(t[1:5, ::2].cpu(), x[1:5, ::2])
    # into a non-contiguous destination on either side
    dst = torch.zeros(8, 6, dtype=dtype)
    dst.t().copy_(t)
    assert torch.equal(dst.t(), x)
    dt = torch.zeros(8, 6, dtype=dtype, device="tpu")
    dt.t().copy_(x)
    assert torch.equal(dt.cpu().t(), x)


def test_copy_broadcasts_and_converts():
    dst = torch.zeros(3, 4, device="tpu")
    dst.copy_(torch.arange(4))
    assert torch.equal(dst.cpu(), torch.arange(4).float().expand(3, 4))
    dst.copy_(torch.tensor([1, 2, 3], device="tpu").unsqueeze(1))
    assert torch.equal(dst.cpu(), torch.tensor([[1.0] * 4, [2.0] * 4, [3.0] * 4]))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_empty_never_exposes_uninitialized_memory(dtype):
    for _ in range(3):
        junk = torch.full((64,), 7, dtype=torch.float32, device="tpu")
        del junk
        e = torch.empty(64, dtype=dtype, device="tpu")
        assert torch.equal(e.cpu(), torch.zeros(64, dtype=dtype))
        s = torch.empty_strided((4, 4), (1, 4), dtype=dtype, device="tpu")
        assert s.stride() == (1, 4)
        assert torch.equal(s.cpu(), torch.zeros(4, 4, dtype=dtype))


def test_factories():
    assert_same(torch.zeros(2, 3, device="tpu"), torch.zeros(2, 3))
    assert_same(torch.ones(4, dtype=torch.int32, device="tpu"), torch.ones(4, dtype=torch.int32))
    assert_same(torch.full((2, 2), 3.5, device="tpu"), torch.full((2, 2), 3.5))
    assert_same(torch.full((3,), True, device="tpu"), torch.full((3,), True))
    for args in [(5,), (2, 9), (1, 2, 0.25), (10, 0, -3), (0.5, 3.0, 0.5)]:
        assert_same(torch.arange(*args, device="tpu"), torch.arange(*args))
    assert_same(torch.arange(0, 6, dtype=torch.float64, device="tpu"), torch.arange(0, 6, dtype=torch.float64))
    assert_same(torch.zeros_like(torch.ones(3, device="tpu")), torch.zeros(3))
    assert_same(torch.linspace(-1, 1, 7, device="tpu"), torch.linspace(-1, 1, 7))
    assert_same(torch.eye(3, 4, device="tpu"), torch.eye(3, 4))


@pytest.mark.parametrize("dtype", [torch.float32, torch.int16, torch.bool], ids=str)
def test_clone_and_contiguous(dtype):
    x = make((4, 6), dtype)
    t = x.to("tpu")
    c = t.t().clone()
    assert c.stride() == x.t().clone().stride()  # preserve_format keeps the layout
    assert torch.equal(c.cpu(), x.t())
    k = t.t().contiguous()
    assert k.is_contiguous() and torch.equal(k.cpu(), x.t().contiguous())
    cl = torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last)
    tl = cl.to("tpu").clone()
    assert tl.is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(tl.cpu(), cl)
    # a clone is independent of its source
    c2 = t.clone()
    t.zero_()
    assert torch.equal(c2.cpu(), x)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_item(dtype):
    x = make((3,), dtype)
    t = x.to("tpu")
    assert t[1].item() == x[1].item()
    assert type(t[1].item()) is type(x[1].item())


def test_printing():
    x = torch.tensor([[1.5, -2.0], [3.25, 0.0]])
    text = repr(x.to("tpu"))
    assert text == repr(x)[:-1] + ", device='tpu:0')"
    assert "device='tpu:0'" in repr(torch.arange(3, device="tpu"))
    big = torch.arange(5000.0).reshape(50, 100)
    assert "..." in repr(big.to("tpu"))
    assert repr(torch.tensor([True, False], device="tpu")).startswith("tensor([ True, False]")


def test_cross_device_mixing_is_an_error():
    with pytest.raises(RuntimeError, match="same device"):
        torch.ones(3, device="tpu") + torch.ones(3)
    # 0-dim CPU tensors act as scalars, as on CUDA
    assert_same(torch.ones(3, device="tpu") + torch.tensor(2.0), torch.full((3,), 3.0))


def test_to_dtype_and_device_in_one_call():
    x = make((3, 3), torch.float32)
    assert_same(x.to("tpu", torch.float16), x.half())
    assert torch.equal(x.to("tpu").to("cpu", torch.int32), x.int())


def test_adopted_host_memory_is_held_while_the_device_buffer_lives():
    # torch_tpu::_adopt_host (how the c10d backend returns results): the
    # device tensor takes the host tensor's values, and holds the host memory
    # only as long as its buffer aliases it.
    uses = lambda t: torch._C._storage_Use_Count(t.untyped_storage()._cdata)  # noqa: E731
    n = 1 << 14
    host = torch.arange(n, dtype=torch.float32)
    baseline = uses(host)
    x = torch.empty(n, device="tpu")
    torch.ops.torch_tpu._adopt_host(x, host)
    assert torch.equal(x.cpu(), torch.arange(n, dtype=torch.float32))
    x.add_(1)  # a new buffer: the host memory is free again
    torch.tpu.synchronize()
    # The plugin hands the host memory back from its own thread once the old
    # buffer is gone, a moment after the program that replaced it finished
    # (the wait ends when it has: the deadline only bounds a loaded machine's).
    deadline = time.monotonic() + 120
    while uses(host) != baseline and time.monotonic() < deadline:
        time.sleep(0.01)
    assert uses(host) == baseline
    host.fill_(-1)
    assert torch.equal(x.cpu(), torch.arange(n, dtype=torch.float32) + 1)
    # Views, other dtypes and zero-size tensors take the values by copy.
    y = torch.zeros(4, 4, device="tpu")
    torch.ops.torch_tpu._adopt_host(y.t(), torch.ones(4, 4))
    assert torch.equal(y.cpu(), torch.ones(4, 4))
    b = torch.empty(0, device="tpu", dtype=torch.bool)
    torch.ops.torch_tpu._adopt_host(b, torch.empty(0, dtype=torch.bool))
    with pytest.raises(RuntimeError, match="_adopt_host"):
        torch.ops.torch_tpu._adopt_host(x, torch.ones(3))


@pytest.mark.parametrize("rows,cols,offset", [(3, 3, 0), (3, 4, 1), (4, 2, -1), (0, 3, 0), (3, 3, -5), (2, 5, 9)])
def test_tril_and_triu_indices(rows, cols, offset):
    for f in (torch.tril_indices, torch.triu_indices):
        got = f(rows, cols, offset, device="tpu")
        assert got.device.type == "tpu"
        assert torch.equal(got.cpu(), f(rows, cols, offset))
    assert torch.tril_indices(3, 3, dtype=torch.int32, device="tpu").dtype == torch.int32


def test_in_place_multiply_by_a_number_rounds_it_as_cpu_does():
    """aten::mul_.Scalar (not Python's x.mul_(s), which is mul_.Tensor)
    rounds the number to a half or bfloat16 tensor's dtype before
    multiplying in float; mul.Scalar does not."""
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        x = torch.randn(3, 40).to(dtype).t()
        for s in (1 / 3, 2.0, 1e-3, 7):
            want = torch.ops.aten.mul_.Scalar(x.clone(), s)
            got = x.to("tpu")
            torch.ops.aten.mul_.Scalar(got, s)
            assert_same(got, want, rtol=0, atol=0)
            assert_same(torch.ops.aten.mul.Scalar(x.to("tpu"), s), torch.ops.aten.mul.Scalar(x, s), rtol=0, atol=0)


@pytest.mark.strict_eager_only  # (a lowering's values: the same in every mode)
def test_window_functions_are_cpus():
    """Every window factory on tpu (kaiser_window's CPU kernel is a dispatch
    stub: it has its own tpu kernel), periodic and symmetric, lengths 0, 1
    and more: float64, bfloat16 and half exactly CPU's (PyTorch's composites
    call mul_.Scalar, whose CPU kernel rounds the number to the tensor's
    dtype first), float32 within an ulp or two of cos."""
    def windows(**kw):
        yield "hann", torch.hann_window, {}
        yield "hamming", torch.hamming_window, {}
        yield "blackman", torch.blackman_window, {}
        yield "bartlett", torch.bartlett_window, {}
        for beta in (0.5, 8.6, 12.0, 60.0):
            yield f"kaiser {beta}", torch.kaiser_window, dict(beta=beta)
    for n in (0, 1, 2, 7, 64, 401):
        for periodic in (True, False):
            for dtype in (torch.float64, torch.float32, torch.bfloat16, torch.float16):
                for name, f, kw in windows():
                    want = f(n, periodic, dtype=dtype, **kw)
                    got = f(n, periodic, dtype=dtype, device="tpu", **kw)
                    assert got.device.type == "tpu" and got.dtype == dtype and got.shape == want.shape, name
                    tol = {torch.float64: (1e-13, 1e-15), torch.float32: (4e-6, 1e-7)}.get(dtype, (0, 0))
                    if name.startswith("kaiser") and dtype == torch.float16:
                        tol = (0, torch.finfo(dtype).eps)  # (i0 in float32 then rounded: an ulp at a boundary)
                    torch.testing.assert_close(got.cpu().double(), want.double(), rtol=tol[0], atol=tol[1], msg=name)
    assert torch.kaiser_window(10, device="tpu").dtype == torch.get_default_dtype()
    with pytest.raises(RuntimeError, match="floating point"):
        torch.kaiser_window(5, dtype=torch.int64, device="tpu")
    with pytest.raises(RuntimeError, match="non-negative"):
        torch.kaiser_window(-1, device="tpu")


def test_angle_of_a_transposed_complex_tensor_has_cpus_layout():
    """CPU's angle of a complex tensor writes into an empty out= tensor, so
    its result is contiguous where a real input's keeps the input's layout."""
    z = torch.randn(3, 4, dtype=torch.complex64).t()
    for x in (z, z.real.contiguous().t()):
        assert_same(torch.angle(x.to("tpu")), torch.angle(x), rtol=1e-6, atol=1e-6)
