"""The first lowerings against CPU PyTorch: several shapes and dtypes,
broadcasting, type promotion, non-contiguous and zero-size inputs."""

import pytest
import torch

from conftest import assert_close_to_float64_reference, assert_same, make, tolerance

FLOATS = [torch.float32, torch.bfloat16, torch.float16, torch.float64]
NUMERIC = FLOATS + [torch.int64, torch.int32, torch.uint8]
SHAPE_PAIRS = [((3, 4), (3, 4)), ((3, 4), (4,)), ((2, 1, 4), (3, 1)), ((0, 4), (4,)), ((), (5,)), ((5,), ())]


def on_tpu(*xs):
    return [x.to("tpu") if isinstance(x, torch.Tensor) else x for x in xs]


def non_contiguous(x):
    """The same values, laid out transposed in a bigger buffer."""
    if x.dim() < 2:
        return x
    big = torch.zeros(x.shape[-1], x.shape[-2] * 2, *x.shape[:-2], dtype=x.dtype)
    view = big.permute(*range(2, x.dim()), 1, 0)[..., ::2, :] if x.dim() > 2 else big.t()[::2]
    view.copy_(x)
    return view


@pytest.mark.parametrize("op", ["add", "sub", "mul", "div"])
@pytest.mark.parametrize("dtype", NUMERIC, ids=str)
@pytest.mark.parametrize("shapes", SHAPE_PAIRS, ids=str)
def test_binary_arithmetic(op, dtype, shapes):
    a, b = make(shapes[0], dtype, 1), make(shapes[1], dtype, 2, low=1)
    fn = getattr(torch, op)
    assert_same(fn(*on_tpu(a, b)), fn(a, b))
    assert_same(fn(*on_tpu(non_contiguous(a), b)), fn(a, b))


@pytest.mark.parametrize("op", ["add", "sub"])
def test_alpha(op):
    a, b = make((4, 3), torch.float32), make((3,), torch.float32, 1)
    fn = getattr(torch, op)
    assert_same(fn(*on_tpu(a, b), alpha=2.5), fn(a, b, alpha=2.5))
    ai, bi = make((4,), torch.int64), make((4,), torch.int64, 1)
    assert_same(fn(*on_tpu(ai, bi), alpha=3), fn(ai, bi, alpha=3))


@pytest.mark.parametrize("a_dtype,b_dtype", [(torch.int32, torch.float32), (torch.uint8, torch.int8),
                                             (torch.bool, torch.int64), (torch.bfloat16, torch.float16),
                                             (torch.float32, torch.float64), (torch.int64, torch.bool)],
                         ids=str)
def test_type_promotion(a_dtype, b_dtype):
    a, b = make((3, 2), a_dtype), make((3, 2), b_dtype, 1, low=1)
    for fn in (torch.add, torch.mul, torch.sub if torch.bool not in (a_dtype, b_dtype) else torch.mul):
        assert_same(fn(*on_tpu(a, b)), fn(a, b))
    assert_same(torch.div(*on_tpu(a, b)), torch.div(a, b))


@pytest.mark.parametrize("scalar", [2, -3, 0.5, True, 2.5e3])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bfloat16, torch.bool], ids=str)
def test_scalar_operands(scalar, dtype):
    a = make((5,), dtype)
    (t,) = on_tpu(a)
    if dtype == torch.bool and not isinstance(scalar, bool):
        return
    assert_same(t + scalar, a + scalar)
    assert_same(t * scalar, a * scalar)
    assert_same(scalar * t, scalar * a)
    if dtype != torch.bool and not isinstance(scalar, bool):
        assert_same(t - scalar, a - scalar)
        assert_same(scalar - t, scalar - a)


def test_changing_scalars_do_not_recompile():
    import torch_tpu

    t = torch.ones(8, device="tpu")
    (t * 0.5).cpu()  # (in fused eager the first program also computes t)
    (t * 0.25).cpu()
    before = torch_tpu.cache_stats()["misses"]
    for lr in (0.1, 0.01, 0.003, 1e-4):
        assert_same(t * lr, torch.ones(8) * lr)
    assert torch_tpu.cache_stats()["misses"] == before


@pytest.mark.parametrize("op", ["neg", "abs", "exp", "log", "sqrt", "relu", "sigmoid", "tanh"])
@pytest.mark.parametrize("dtype", FLOATS + [torch.int64], ids=str)
@pytest.mark.parametrize("shape", [(7,), (3, 4), (0, 2), ()], ids=str)
def test_unary(op, dtype, shape):
    low = 0.1 if op in ("log", "sqrt") else -4
    a = make(shape, dtype, low=low, high=4)
    if op in ("log", "sqrt") and not dtype.is_floating_point:
        a = a.abs() + 1
    fn = getattr(torch, op)
    assert_same(fn(a.to("tpu")), fn(a))
    assert_same(fn(non_contiguous(a).to("tpu")), fn(a))


@pytest.mark.parametrize("op", ["eq", "ne", "lt", "le", "gt", "ge"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool, torch.bfloat16], ids=str)
def test_comparisons(op, dtype):
    a, b = make((4, 5), dtype, 1, -2, 2), make((5,), dtype, 2, -2, 2)
    fn = getattr(torch, op)
    assert_same(fn(*on_tpu(a, b)), fn(a, b))
    assert_same(fn(a.to("tpu"), 1), fn(a, 1))


def test_nan_semantics():
    a = torch.tensor([float("nan"), 1.0, float("inf"), -0.0])
    b = torch.tensor([1.0, float("nan"), float("inf"), 0.0])
    for fn in (torch.eq, torch.ne, torch.lt, torch.maximum, torch.minimum, torch.add):
        assert_same(fn(*on_tpu(a, b)), fn(a, b))


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.bool], ids=str)
def test_where(dtype):
    c, a, b = make((3, 1), torch.bool), make((3, 4), dtype, 1), make((4,), dtype, 2)
    assert_same(torch.where(*on_tpu(c, a, b)), torch.where(c, a, b))
    assert_same(torch.where(c.to("tpu"), a.to("tpu"), 0), torch.where(c, a, 0))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool, torch.float64], ids=str)
@pytest.mark.parametrize("dim,keepdim", [(None, False), (0, False), (1, True), ((0, 2), False), (-1, True)])
def test_sum_mean(dtype, dim, keepdim):
    a = make((3, 4, 5), dtype)
    t = a.to("tpu")
    sum_ = (lambda x: x.sum()) if dim is None else (lambda x: x.sum(dim, keepdim=keepdim))
    mean = (lambda x: x.mean()) if dim is None else (lambda x: x.mean(dim, keepdim=keepdim))
    if dtype == torch.bfloat16:  # against the float64 sums of the same values, not CPU's bfloat16 kernel
        assert_close_to_float64_reference(sum_(t), sum_, (a,), sum_of_products=True, terms=a.numel())
        assert_close_to_float64_reference(mean(t), mean, (a,), sum_of_products=True, terms=a.numel())
    else:
        assert_same(sum_(t), sum_(a))
        if dtype.is_floating_point:
            assert_same(mean(t), mean(a))
    if dim is not None:
        assert_same(t.sum(dim, dtype=torch.float64), a.sum(dim, dtype=torch.float64))
    if not dtype.is_floating_point:
        with pytest.raises(RuntimeError, match="mean"):
            t.mean()
    z = make((0, 3), dtype).to("tpu")
    assert_same(z.sum(0), make((0, 3), dtype).sum(0))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64, torch.int64], ids=str)
@pytest.mark.parametrize("m,k,n", [(2, 3, 4), (16, 32, 8), (1, 1, 1), (0, 3, 2), (3, 0, 2)])
def test_matmuls(dtype, m, k, n):
    a, b = make((m, k), dtype, 1, -2, 2), make((k, n), dtype, 2, -2, 2)

    def check(got, fn, *inputs, roundings=0):
        if dtype == torch.bfloat16:  # against the float64 product of the same values, not CPU's bfloat16 kernel
            assert_close_to_float64_reference(got, fn, inputs, sum_of_products=True, terms=k + 1, roundings=roundings)
        else:
            assert_same(got, fn(*inputs))

    check(torch.mm(*on_tpu(a, b)), torch.mm, a, b)
    check(torch.mm(*on_tpu(non_contiguous(a), b)), torch.mm, a, b)
    bias = make((n,), dtype, 3, -2, 2)
    if dtype.is_floating_point:
        addmm = lambda c, x, y: torch.addmm(c, x, y, beta=0.5, alpha=2.0)  # noqa: E731
        check(addmm(*on_tpu(bias, a, b)), addmm, bias, a, b, roundings=1)  # (the product, rounded before the sum)
    ba, bb = make((3, m, k), dtype, 4, -2, 2), make((3, k, n), dtype, 5, -2, 2)
    check(torch.bmm(*on_tpu(ba, bb)), torch.bmm, ba, bb)


def test_addmm_beta_zero_ignores_nan():
    bias = torch.full((2,), float("nan"))
    a, b = torch.ones(3, 4), torch.ones(4, 2)
    assert_same(torch.addmm(*on_tpu(bias, a, b), beta=0), torch.addmm(bias, a, b, beta=0))


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool], ids=str)
def test_cat(dtype):
    parts = [make((2, 3), dtype, 1), make((4, 3), dtype, 2), make((0, 3), dtype, 3)]
    assert_same(torch.cat(on_tpu(*parts)), torch.cat(parts))
    assert_same(torch.cat(on_tpu(parts[0], parts[0].t().t()), dim=1), torch.cat([parts[0], parts[0]], dim=1))
    mixed = [make((2,), torch.int32), make((3,), torch.float32), torch.empty(0)]
    assert_same(torch.cat(on_tpu(*mixed)), torch.cat(mixed))


@pytest.mark.parametrize("dtype", [torch.float32, torch.int8, torch.bool, torch.bfloat16], ids=str)
def test_fill_and_zero(dtype):
    a = make((3, 4), dtype)
    t = a.to("tpu")
    t.fill_(1)
    a.fill_(1)
    assert_same(t, a)
    t[1].zero_()
    a[1].zero_()
    assert_same(t, a)
    t.fill_(torch.tensor(0, device="tpu"))
    assert_same(t, torch.zeros(3, 4, dtype=dtype))


def _rand(shape, dtype, g):
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    return (torch.randn(shape, generator=g) * 4).to(dtype)


@pytest.mark.parametrize("op", ["index_copy", "index_add", "index_fill"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool], ids=str)
@pytest.mark.parametrize("shape,dim", [((5,), 0), ((5, 3), 0), ((5, 3), 1), ((4, 3, 2), -1), ((4, 3, 2), 1),
                                       ((0, 3), 1), ((4, 0), 0), ((), 0)], ids=str)
def test_index_along_dim_ops(op, dtype, shape, dim):
    """index_copy/index_add/index_fill (one window written per index entry)
    against CPU: values, in place on a non-contiguous self, duplicates
    (index_add sums them), empty indices and zero-size tensors."""
    g = torch.Generator().manual_seed(0)
    x = _rand(shape, dtype, g)
    n = x.shape[dim] if x.dim() else 1
    indices = [[], list(range(n))[::-1]] + ([[n - 1, 0, n - 1]] if n and op == "index_add" else [])
    if op == "index_fill" and n:
        indices.append([-1, 0])  # index_fill wraps negative entries (the others raise: test_bad_inputs)
    for idx in indices:
        if x.dim() == 0 and len(idx) != 1:
            continue
        i = torch.tensor(idx, dtype=torch.long)
        src_shape = list(x.shape)
        if x.dim():
            src_shape[dim] = len(idx)
        src = _rand(src_shape, dtype, g)
        if op == "index_fill":
            value = True if dtype == torch.bool else 3
            ref, got = x.index_fill(dim, i, value), x.to("tpu").index_fill(dim, i.to("tpu"), value)
        else:
            ref = getattr(x, op)(dim, i, src)
            got = getattr(x.to("tpu"), op)(dim, i.to("tpu"), src.to("tpu"))
        assert_same(got, ref, **tolerance(dtype))
    if x.dim() == 2 and x.numel():
        # In place into a transposed (non-contiguous) self.
        xt, i = x.t().contiguous().t(), torch.tensor([n - 1, 0])
        src_shape = list(x.shape)
        src_shape[dim] = 2
        src = _rand(src_shape, dtype, g)
        yt = xt.to("tpu")
        if op == "index_fill":
            getattr(xt, op + "_")(dim, i, 1), getattr(yt, op + "_")(dim, i.to("tpu"), 1)
        else:
            getattr(xt, op + "_")(dim, i, src), getattr(yt, op + "_")(dim, i.to("tpu"), src.to("tpu"))
        assert yt.stride() == xt.stride()
        assert_same(yt, xt, **tolerance(dtype))


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8], ids=str)
def test_gcd_and_lcm_are_cpus(dtype):
    """Euclid's algorithm on every element (zeros, signs, broadcasting, the
    in-place form); lcm wraps as CPU's, whose C++ computes narrow types'
    products in int before truncating."""
    g = torch.Generator().manual_seed(0)
    info = torch.iinfo(dtype)
    lo, hi = max(info.min, -2**31), min(info.max, 2**31 - 1)
    a = torch.randint(lo, hi, (3000,), dtype=dtype, generator=g)
    b = torch.randint(lo, hi, (3000,), dtype=dtype, generator=g)
    a[:5], b[3:8] = 0, 0
    for f in (torch.gcd, torch.lcm):
        assert torch.equal(f(a.to("tpu"), b.to("tpu")).cpu(), f(a, b))
    x, y = a[:6].reshape(2, 3, 1), b[:4]
    assert torch.equal(torch.gcd(x.to("tpu"), y.to("tpu")).cpu(), torch.gcd(x, y))
    t = a[:10].to("tpu")
    t.lcm_(b[:10].to("tpu"))
    assert torch.equal(t.cpu(), torch.lcm(a[:10], b[:10]))
    with pytest.raises(NotImplementedError):
        torch.gcd(torch.ones(2, device="tpu"), torch.ones(2, device="tpu"))


def test_in_place_shift_operators():
    """x <<= n and x >>= n (Python's __ilshift__ / __irshift__), by a number
    and by a tensor, arithmetic for signed values."""
    x = torch.tensor([5, -7, 9, 1 << 20])
    for op, by in (("__ilshift__", 3), ("__irshift__", 2), ("__ilshift__", torch.tensor([1, 2, 3, 4])),
                   ("__irshift__", torch.tensor([0, 1, 2, 30]))):
        want, got = x.clone(), x.to("tpu")
        getattr(want, op)(by)
        getattr(got, op)(by.to("tpu") if isinstance(by, torch.Tensor) else by)
        assert torch.equal(got.cpu(), want), op


def test_advanced_indexing_takes_cpu_index_tensors():
    """As on CUDA: index tensors and masks on the CPU index a tpu tensor
    (read, write, accumulate), e.g. nn.init.sparse_'s CPU permutations;
    other ops still want one device."""
    x = torch.arange(20.0).reshape(4, 5)
    t = x.to("tpu")
    rows, cols, mask = torch.tensor([0, 3, 3]), torch.tensor([1, 4, 0]), x > 7
    assert torch.equal(t[rows].cpu(), x[rows]) and torch.equal(t[rows, cols].cpu(), x[rows, cols])
    assert torch.equal(t[mask].cpu(), x[mask]) and torch.equal(t[:, torch.tensor([True, False] * 2 + [True])].cpu(),
                                                                 x[:, torch.tensor([True, False] * 2 + [True])])
    want, got = x.clone(), t.clone()
    want[rows, cols] = -1.0
    got[rows, cols] = -1.0
    want[mask] = 0.5
    got[mask] = 0.5
    want.index_put_((rows,), torch.ones(5), accumulate=True)
    got.index_put_((rows,), torch.ones(5, device="tpu"), accumulate=True)
    assert torch.equal(got.cpu(), want)
    # A mask's count is read on the host; the result is still self's clone, in self's layout.
    xt, m5 = torch.randn(5, 5).t(), torch.tensor([True, False, True, False, True])
    for mask in (m5, m5.to("tpu")):
        got = torch.index_put(xt.to("tpu"), (mask,), torch.ones(5, device="tpu"), accumulate=True)
        want = torch.index_put(xt, (m5,), torch.ones(5), accumulate=True)
        assert got.stride() == want.stride() and torch.equal(got.cpu(), want)
    w = torch.nn.init.sparse_(torch.empty(6, 4, device="tpu"), 0.5)
    assert w.device.type == "tpu" and int((w == 0).sum(0).min()) >= 3
    with pytest.raises(RuntimeError, match="same device"):
        torch.index_select(t, 0, rows)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64, torch.int32, torch.uint8])
@pytest.mark.parametrize("is_max", [True, False])
def test_argmax_and_argmin_pick_the_first_extreme_as_cpu(dtype, is_max):
    """The first index of the extreme along a dim or over all elements, with
    ties (few distinct values), a NaN anywhere winning (floats), -0.0 beside
    0.0, keepdim, a non-contiguous input, size-1 and odd-length dims."""
    fn = torch.argmax if is_max else torch.argmin
    g = torch.Generator().manual_seed(7)
    for shape in [(8, 2048), (3, 5, 7), (1, 33), (6,)]:
        x = torch.randint(0, 4, shape, generator=g).to(dtype)
        if dtype.is_floating_point:
            x[0].view(-1)[min(3, x[0].numel() - 1)] = float("nan")
            x.view(-1)[-2:] = torch.tensor([-0.0, 0.0]).to(dtype)
            x = x * (torch.rand(shape, generator=g) > 0.5).to(dtype)  # more ties at 0 (and -0)
        t = x.to("tpu")
        for args in [dict(), dict(dim=-1), dict(dim=0, keepdim=True)] + ([dict(dim=1)] if len(shape) > 2 else []):
            assert torch.equal(fn(t, **args).cpu(), fn(x, **args)), (shape, args)
        if len(shape) > 1:
            assert torch.equal(fn(t.transpose(0, -1), dim=1).cpu(), fn(x.transpose(0, -1), dim=1))
