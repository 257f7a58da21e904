"""Numerical families against CPU PyTorch: exact division, special
functions, interpolation and grid sampling, embedding bags, histograms,
unique along a dim, and the factories' integral and reduced-precision rules."""

import pytest
import torch

from conftest import assert_same


def rand(*shape, seed=0, low=-3.0, high=3.0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(*shape, generator=g, dtype=torch.float64) * (high - low) + low).to(dtype)


def tpu(*xs):
    return [x.to("tpu") for x in xs]


def test_division_by_a_broadcast_value_is_correctly_rounded():
    # XLA would rewrite x / broadcast(y) as x * (1 / y): 5.125 / 5.125 == 0.99999994.
    a, b = torch.full((10, 1, 5), 5.125), torch.full((10, 5), 5.125)
    assert_same(torch.div(*tpu(a, b), rounding_mode="trunc"), torch.div(a, b, rounding_mode="trunc"))
    x, y = rand(1000, seed=1, low=0, high=10), rand(1, seed=2, low=0.5, high=1.5)
    assert torch.equal((x.to("tpu") / y.to("tpu")).cpu(), x / y)
    assert torch.equal((x.to("tpu") / 3.7).cpu(), x / 3.7)
    assert torch.equal(torch.floor_divide(*tpu(x, y)).cpu(), torch.floor_divide(x, y))


@pytest.mark.parametrize("name", ["bessel_j0", "bessel_j1", "bessel_y0", "bessel_y1", "modified_bessel_i0",
                                  "modified_bessel_i1", "modified_bessel_k0", "modified_bessel_k1",
                                  "scaled_modified_bessel_k0", "scaled_modified_bessel_k1", "spherical_bessel_j0",
                                  "airy_ai", "log_ndtr", "ndtri", "erfcx", "i0e"])
def test_special_functions(name):
    f = getattr(torch.special, name)
    if name == "ndtri":
        x = torch.cat([rand(200, seed=3, low=0, high=1), torch.tensor([0.0, 1.0, 1e-30, 0.5, -1.0])])
    else:
        x = torch.cat([rand(300, seed=3, low=-30, high=30), torch.tensor([0.0, 1e-4, 7.99, 8.01, 12.5, 60.0])])
    x2 = x[::2]  # non-contiguous
    for inp in (x, x2, x[:0]):
        got, want = f(inp.to("tpu")).cpu(), f(inp)
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5, equal_nan=True)


@pytest.mark.parametrize("name", ["i0", "i0e", "i1", "i1e", "modified_bessel_i0", "modified_bessel_i1"])
def test_modified_bessel_functions_in_float64_keep_float64_precision(name):
    """The float64 kernels are not float32's approximation (relative error
    2e-7): against CPU to 1e-13, on both sides of where they switch from
    the series to the asymptotic expansion, at 0, huge and infinite
    arguments (CPU's unscaled functions give NaN there) and NaN."""
    f = getattr(torch.special, name)
    x = torch.cat([rand(400, seed=11, low=-40, high=40, dtype=torch.float64),
                   torch.tensor([0.0, 1e-300, -1e-8, 19.999, 20.0, 20.001, -20.5, 700.0, 705.0, 1e5, 1e300,
                                 float("inf"), -float("inf"), float("nan")], dtype=torch.float64)])
    got, want = f(x.to("tpu")).cpu(), f(x)
    assert got.dtype == torch.float64
    torch.testing.assert_close(got, want, rtol=1e-13, atol=0, equal_nan=True)
    torch.testing.assert_close(f(x[1::3].to("tpu")).cpu(), f(x[1::3]), rtol=1e-13, atol=0, equal_nan=True)


@pytest.mark.parametrize("name", ["chebyshev_polynomial_t", "hermite_polynomial_h", "laguerre_polynomial_l",
                                  "legendre_polynomial_p", "shifted_chebyshev_polynomial_w"])
def test_orthogonal_polynomials(name):
    f = getattr(torch.special, name)
    x = torch.cat([rand(40, seed=4, low=-1.5, high=1.5), torch.tensor([-1.0, 0.0, 1.0])])
    n = torch.arange(-1, 12).float()
    got = f(x[:, None].to("tpu"), n.to("tpu")).cpu()
    torch.testing.assert_close(got, f(x[:, None], n), rtol=1e-4, atol=1e-4, equal_nan=True)
    torch.testing.assert_close(f(x.to("tpu"), 5).cpu(), f(x, 5), rtol=1e-4, atol=1e-4)


def test_incomplete_gamma():
    a, x = rand(500, seed=5, low=0, high=20), rand(500, seed=6, low=0, high=30)
    for f in (torch.special.gammainc, torch.special.gammaincc):
        torch.testing.assert_close(f(*tpu(a, x)).cpu(), f(a, x), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align_corners", [False, True])
def test_grid_sample_2d_and_gradients(mode, padding_mode, align_corners):
    inp = rand(2, 3, 5, 7, seed=7)
    grid = rand(2, 4, 6, 2, seed=8, low=-1.2, high=1.2)
    grads = {}
    for dev in ("cpu", "tpu"):
        i, g = inp.to(dev).requires_grad_(), grid.to(dev).requires_grad_()
        out = torch.nn.functional.grid_sample(i, g, mode=mode, padding_mode=padding_mode, align_corners=align_corners)
        w = torch.linspace(-1, 1, out.numel()).reshape(out.shape).to(dev)
        grads[dev] = [out.detach().cpu()] + [t.cpu() for t in torch.autograd.grad((out * w).sum(), (i, g))]
    for got, want in zip(grads["tpu"], grads["cpu"]):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_grid_sample_3d():
    inp, grid = rand(2, 2, 4, 5, 6, seed=9), rand(2, 3, 4, 5, 3, seed=10, low=-1.1, high=1.1)
    for mode in ("bilinear", "nearest"):
        got = torch.nn.functional.grid_sample(*tpu(inp, grid), mode=mode, align_corners=False).cpu()
        torch.testing.assert_close(got, torch.nn.functional.grid_sample(inp, grid, mode=mode, align_corners=False),
                                   rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("size", [(3, 4), (9, 11)])
@pytest.mark.parametrize("align_corners", [False, True])
def test_bicubic_upsampling(size, align_corners):
    x = rand(2, 3, 5, 6, seed=11)
    f = lambda t: torch.nn.functional.interpolate(t, size=size, mode="bicubic", align_corners=align_corners)  # noqa: E731
    torch.testing.assert_close(f(x.to("tpu")).cpu(), f(x), rtol=1e-4, atol=1e-5)
    xt = x.to("tpu").requires_grad_()
    f(xt).sum().backward()
    xc = x.clone().requires_grad_()
    f(xc).sum().backward()
    torch.testing.assert_close(xt.grad.cpu(), xc.grad, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag(mode):
    weight = rand(10, 4, seed=12)
    idx = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9, 0])
    offsets = torch.tensor([0, 3, 3, 6])  # one empty bag
    kw = dict(mode=mode, padding_idx=2)
    want = torch.nn.functional.embedding_bag(idx, weight, offsets, **kw)
    got = torch.nn.functional.embedding_bag(*tpu(idx, weight, offsets), **kw)
    assert_same(got, want, rtol=1e-5, atol=1e-6)
    if mode == "sum":
        psw = rand(9, seed=13)
        want = torch.nn.functional.embedding_bag(idx, weight, offsets, mode="sum", per_sample_weights=psw)
        got = torch.nn.functional.embedding_bag(*tpu(idx, weight, offsets), mode="sum", per_sample_weights=psw.to("tpu"))
        assert_same(got, want, rtol=1e-5, atol=1e-6)


def test_histogram_and_unique_dim():
    x = rand(100, seed=14)
    for kw in (dict(bins=7), dict(bins=5, range=(-1.0, 2.0)), dict(bins=4, density=True)):
        got, want = torch.histogram(x.to("tpu"), **kw), torch.histogram(x, **kw)
        for g, w in zip(got, want):
            torch.testing.assert_close(g.cpu(), w)
    m = torch.tensor([[1, 2], [0, 5], [1, 2], [0, 5], [3, 3]])
    for dim in (0, 1):
        got = torch.unique(m.to("tpu"), dim=dim, return_inverse=True, return_counts=True)
        want = torch.unique(m, dim=dim, return_inverse=True, return_counts=True)
        for g, w in zip(got, want):
            assert torch.equal(g.cpu(), w)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.bfloat16, torch.float32], ids=str)
def test_factories_follow_the_cpu(dtype):
    cases = [(torch.arange, (0.0, -8.000001, -4.0)), (torch.arange, (0.5, 7.3, 1.5)),
             (torch.linspace, (4.3, -3, 50)), (torch.logspace, (0, 1.2, 2)), (torch.logspace, (0, 4, 4))]
    for f, args in cases:
        if f is torch.arange and dtype.is_floating_point is False and args[2] == 1.5:
            continue  # the truncated step would be 1: a different range on both sides alike, skip
        assert_same(f(*args, dtype=dtype, device="tpu"), f(*args, dtype=dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_logcumsumexp_keeps_entries_far_below_the_maximum(dtype):
    """A shift by the global maximum underflowed every entry ~88 below it."""
    x = torch.tensor([0.0, 200.0, -300.0, 5.0], dtype=dtype)
    assert_same(torch.logcumsumexp(x.to("tpu"), 0), torch.logcumsumexp(x, 0))
    g = torch.Generator().manual_seed(3)
    y = (torch.randn(3, 9, 4, generator=g) * 100).to(dtype)
    for dim in (0, 1, -1):
        assert_same(torch.logcumsumexp(y.to("tpu"), dim), torch.logcumsumexp(y, dim), rtol=1e-5, atol=1e-4)
    # Infinities and NaN as on CPU.
    inf = float("inf")
    z = torch.tensor([-inf, -inf, 1.0, inf, inf, 2.0, float("nan"), 0.0])
    assert_same(torch.logcumsumexp(z.to("tpu"), 0), torch.logcumsumexp(z, 0))
    # Non-contiguous input.
    assert_same(torch.logcumsumexp(y.mT.to("tpu"), 1), torch.logcumsumexp(y.mT, 1), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("n", [7, 100, 1000, 4099])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_atan_of_long_vectors(n, dtype):
    # The XLA CPU plugin's vectorized atan is wrong past a few dozen
    # elements (found by the fuzzer): atan goes through atan2 with a runtime one.
    x = torch.linspace(-60, 60, n).to(dtype)
    torch.testing.assert_close(torch.atan(x.to("tpu")).cpu(), torch.atan(x))
    torch.testing.assert_close(torch.atan(x.to("tpu")[::3]).cpu(), torch.atan(x[::3]))


@pytest.mark.parametrize("src", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
@pytest.mark.parametrize("dst", [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool])
def test_float_to_integer_casts_of_nan_inf_and_out_of_range(src, dst):
    # As the host's casts give them: NaN and values out of range go to the
    # lowest value of a 32/64-bit signed integer, narrower types wrap from it.
    x = torch.tensor([float("nan"), float("inf"), -float("inf"), 1e20, -1e20, 3.7, -3.7, 300.5, -129.0,
                      2.0**31, -(2.0**31) - 1024.0])
    x = x.to(src)
    assert torch.equal(x.to("tpu").to(dst).cpu(), x.to(dst))


def test_log_softmax_of_one_infinite_entry():
    for v in (float("inf"), -float("inf"), float("nan"), 2.5):
        x = torch.tensor(v)
        for f in (torch.log_softmax, torch.softmax):
            torch.testing.assert_close(f(x.to("tpu"), 0).cpu(), f(x, 0), equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("exponent", [2, 3, -2, -1, 2.0, -1.0])
def test_integer_powers_are_cpus_products_bit_for_bit(dtype, exponent):
    """CPU computes x ** 2, 3, -2 and -1 as x * x, x * x * x, 1 / (x * x)
    and 1 / x (bfloat16 rounding the square): the same bits here, specials
    and a strided input included."""
    torch.manual_seed(0)
    x = (torch.randn(64, 33, dtype=torch.float64) * 4).to(dtype)
    x[0, :8] = torch.tensor([0.0, -0.0, float("inf"), -float("inf"), float("nan"), 1e-30, -3e4, 1.5], dtype=dtype)
    x = x[:, ::2]
    want, got = x ** exponent, (x.to("tpu") ** exponent).cpu()
    assert got.dtype == want.dtype and got.shape == want.shape and got.stride() == want.stride()
    assert torch.equal(want.isnan(), got.isnan())
    assert torch.equal(want.nan_to_num(), got.nan_to_num())
    assert torch.equal(want.signbit(), got.signbit())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("exponent", [0.5, -0.5, 2, 0.25])
def test_pow_of_infinities_and_signed_zeros_is_cpus(dtype, exponent):
    """CPU computes x ** 0.5 and x ** -0.5 as sqrt and rsqrt (not in float16):
    (-inf) ** 0.5 is NaN there, not pow's inf, and (-0) ** -0.5 is -inf (a
    fused-eager fuzz run found it)."""
    x = torch.tensor([-float("inf"), float("inf"), -0.0, 0.0, 4.0, -1.0, 2.0, 1e-3], dtype=dtype)
    want, got = x ** exponent, (x.to("tpu") ** exponent).cpu()
    assert torch.equal(want.isnan(), got.isnan())
    torch.testing.assert_close(got.nan_to_num(), want.nan_to_num(), rtol=1e-2, atol=0)
    assert torch.equal(want.signbit() & ~want.isnan(), got.signbit() & ~got.isnan())
