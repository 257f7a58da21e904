"""Sparse COO and CSR tensors on tpu against CPU: construction, copies
between devices, coalescing, arithmetic, matrix products, sums, sparse
embedding gradients and the optimizers that take them."""

from __future__ import annotations

import copy

import pytest
import torch

import torch_tpu

pytestmark = pytest.mark.filterwarnings(r"ignore:Sparse (invariant checks|\w+ tensor support):UserWarning")

TPU = "tpu"
# (size, sparse_dim): matrices, a hybrid tensor (dense trailing dims), 3 sparse dims
SHAPES = [((7, 5), 2), ((6, 3, 2), 1), ((4, 3, 5), 3)]


def rand_coo(size, sparse_dim, nnz, dtype=torch.float32, seed=0):
    """An uncoalesced CPU COO tensor: unsorted indices with duplicates."""
    g = torch.Generator().manual_seed(seed)
    idx = torch.stack([torch.randint(0, n, (nnz,), generator=g) for n in size[:sparse_dim]]) \
        if sparse_dim else torch.zeros((0, nnz), dtype=torch.int64)
    if nnz > 2:
        idx[:, -1] = idx[:, 0]  # a duplicate for sure
    values = torch.randn((nnz,) + tuple(size[sparse_dim:]), generator=g, dtype=torch.float64).to(dtype)
    return torch.sparse_coo_tensor(idx, values, size)


def tol(dtype):
    return dict(rtol=1.6e-2, atol=1e-2) if dtype == torch.bfloat16 else \
        dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=1e-12, atol=1e-12)


def same_coo(got, want, coalesced_values=True, **kw):
    """Same layout, size, dtype, dims, coalescing flag; same entries (after
    coalescing both when ``coalesced_values``, else exactly as stored)."""
    assert got.device.type == TPU and got.layout == torch.sparse_coo
    assert (got.shape, got.dtype, got.is_coalesced()) == (want.shape, want.dtype, want.is_coalesced())
    assert (got.sparse_dim(), got.dense_dim()) == (want.sparse_dim(), want.dense_dim())
    assert got._indices().device.type == TPU and got._values().device.type == TPU
    g, w = got.cpu(), want
    assert g.is_coalesced() == w.is_coalesced()
    if coalesced_values:
        g, w = g.coalesce(), w.coalesce()
    else:
        assert g._nnz() == w._nnz()
    assert torch.equal(g._indices(), w._indices())
    torch.testing.assert_close(g._values(), w._values(), **(kw or tol(want.dtype)))


def same_dense(got, want, **kw):
    assert got.device.type == TPU and got.layout == torch.strided
    assert (got.shape, got.dtype) == (want.shape, want.dtype)
    torch.testing.assert_close(got.cpu(), want, **(kw or tol(want.dtype)))


# ---------------------------------------------------------------- construction

@pytest.mark.parametrize("size,sparse_dim", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_construction_and_copies_keep_cpu_entries(size, sparse_dim, dtype):
    a = rand_coo(size, sparse_dim, 9, dtype)
    i, v = a._indices(), a._values()
    for t in (torch.sparse_coo_tensor(i, v, size, device=TPU),
              torch.sparse_coo_tensor(i.to(TPU), v.to(TPU), size),
              a.to(TPU), a.tpu()):
        same_coo(t, a, coalesced_values=False)
        assert t._nnz() == 9 and not t.is_coalesced()
        back = t.cpu()
        assert back.device.type == "cpu" and torch.equal(back._indices(), i) and torch.equal(back._values(), v)
    # size inferred from the indices, as on CPU
    same_coo(torch.sparse_coo_tensor(i.to(TPU), v.to(TPU)), torch.sparse_coo_tensor(i, v), coalesced_values=False)
    c = a.coalesce()
    same_coo(c.to(TPU), c, coalesced_values=False)  # the flag travels
    x = a.to_dense()
    same_coo(x.to(TPU).to_sparse(), x.to_sparse(), coalesced_values=False)
    same_coo(x.to(TPU).to_sparse(sparse_dim), x.to_sparse(sparse_dim), coalesced_values=False)
    same_dense(a.to(TPU).to_dense(), x)
    with pytest.raises(RuntimeError, match="uncoalesced"):
        a.to(TPU).indices()


def test_empty_and_single_entry_tensors():
    for nnz in (0, 1):
        a = rand_coo((4, 3), 2, nnz)
        t = a.to(TPU)
        same_coo(t, a, coalesced_values=False)
        same_coo(t.coalesce(), a.coalesce(), coalesced_values=False)
        same_dense(t.to_dense(), a.to_dense())
        same_coo(t + t, a + a)
        same_dense(torch.sparse.mm(t, torch.ones(3, 2, device=TPU)), torch.sparse.mm(a, torch.ones(3, 2)))
    z = torch.zeros(3, 4)
    same_coo(z.to(TPU).to_sparse(), z.to_sparse(), coalesced_values=False)
    e = torch.sparse_coo_tensor(torch.zeros((2, 0), dtype=torch.long), torch.zeros(0), (2, 3), device=TPU)
    assert e._nnz() == 0 and e.is_coalesced()


def test_metadata_and_clone():
    a = rand_coo((6, 3, 2), 1, 5)
    t = a.to(TPU)
    assert (t.sparse_dim(), t.dense_dim(), t._nnz(), t.is_sparse) == (1, 2, 5, True)
    c = t.clone()
    same_coo(c, a, coalesced_values=False)
    c._values().zero_()  # a copy: t unchanged
    same_coo(t, a, coalesced_values=False)
    z = t.clone().zero_()
    assert z._nnz() == 0 and z.shape == t.shape
    s = torch.sparse_coo_tensor(torch.zeros((1, 0), dtype=torch.long), torch.zeros(0, 3, 2), (6, 3, 2), device=TPU)
    s.copy_(a)  # copy_ from CPU into a tpu sparse tensor
    same_coo(s, a, coalesced_values=False)


# ---------------------------------------------------------------- coalescing

@pytest.mark.parametrize("size,sparse_dim", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_coalesce_sums_duplicates_in_cpu_order(size, sparse_dim, dtype):
    a = rand_coo(size, sparse_dim, 30, dtype, seed=1)
    t = a.to(TPU)
    c, w = t.coalesce(), a.coalesce()
    same_coo(c, w, coalesced_values=False)  # the same stored entries, not only the same tensor
    assert torch.equal(c.indices().cpu(), w.indices())
    torch.testing.assert_close(c.values().cpu(), w.values(), **tol(dtype))
    assert not t.is_coalesced()  # coalesce is out of place
    assert c.coalesce() is c


def test_coalesce_bfloat16_against_float64():
    a = rand_coo((9, 4), 2, 40, torch.float64, seed=2)
    got = a.to(torch.bfloat16).to(TPU).coalesce()
    assert got.dtype == torch.bfloat16 and got.is_coalesced()
    want = a.to(torch.bfloat16).to(torch.float64).coalesce()
    assert torch.equal(got._indices().cpu(), want._indices())
    torch.testing.assert_close(got._values().cpu().double(), want._values(), rtol=2e-2, atol=2e-2)


def test_device_ops_read_the_host_only_for_data_dependent_sizes():
    if torch_tpu.get_execution_mode() == "debug":
        pytest.skip("debug eager verifies each index check at its op (a read each)")
    t = rand_coo((7, 5), 2, 12).to(TPU)
    d = torch.randn(7, 5, device=TPU)
    m = torch.randn(5, 3, device=TPU)
    torch.tpu.synchronize()

    def reads(f):
        before = torch_tpu.counters()["host_reads"]
        f()
        return torch_tpu.counters()["host_reads"] - before

    assert reads(lambda: t.coalesce()) == 1  # the nnz
    for f in (lambda: t.to_dense(), lambda: d + t, lambda: d.add_(t), lambda: torch.sparse.mm(t, m),
              lambda: t * 2.5, lambda: t + t, lambda: d.sparse_mask(t), lambda: d * t):
        assert reads(f) == 0


# ---------------------------------------------------------------- arithmetic

@pytest.mark.parametrize("size,sparse_dim", SHAPES, ids=str)
@pytest.mark.parametrize("coalesce", [(False, False), (True, False), (True, True)], ids=str)
def test_add_and_sub(size, sparse_dim, coalesce):
    a, b = rand_coo(size, sparse_dim, 10, seed=3), rand_coo(size, sparse_dim, 7, seed=4)
    a = a.coalesce() if coalesce[0] else a
    b = b.coalesce() if coalesce[1] else b
    ta, tb = a.to(TPU), b.to(TPU)
    same_coo(ta + tb, a + b)
    same_coo(torch.add(ta, tb, alpha=0.5), torch.add(a, b, alpha=0.5))
    same_coo(ta - tb, a - b)
    d = torch.randn(size)
    same_dense(d.to(TPU) + ta, d + a)
    same_dense(torch.add(d.to(TPU), ta, alpha=-2), torch.add(d, a, alpha=-2))
    same_dense(d.to(TPU) - ta, d - a)
    x = d.to(TPU)
    x.add_(ta, alpha=3)
    same_dense(x, d.clone().add_(a, alpha=3))
    y = ta.clone()
    y.add_(tb)
    z = a.clone()
    z.add_(b)
    same_coo(y, z)
    with pytest.raises(RuntimeError, match=r"add\(sparse, dense\) is not supported"):
        ta + d.to(TPU)


def test_add_promotes_dtypes():
    a, b = rand_coo((5, 4), 2, 6), rand_coo((5, 4), 2, 6, torch.float64, seed=1)
    same_coo(a.to(TPU) + b.to(TPU), a + b)
    d = torch.randn(5, 4, dtype=torch.float64)
    same_dense(d.to(TPU) + a.to(TPU), d + a)


@pytest.mark.parametrize("size,sparse_dim", SHAPES, ids=str)
def test_mul_div_neg_pow(size, sparse_dim):
    a = rand_coo(size, sparse_dim, 10, seed=5)
    t = a.to(TPU)
    for c in (a, a.coalesce()):
        tc = c.to(TPU)
        same_coo(tc * 2.5, c * 2.5)
        same_coo(3 * tc, 3 * c)
        same_coo(tc * torch.tensor(-2.0, device=TPU), c * torch.tensor(-2.0))
        same_coo(tc / 4, c / 4)
        same_coo(-tc, -c)
    same_coo(t.coalesce() ** 2, a.coalesce() ** 2)
    d = torch.randn(size)
    same_coo(d.to(TPU) * t, d * a)
    same_coo(t * d.to(TPU), a * d)
    b = rand_coo(size, sparse_dim, 12, seed=6)
    got, want = t * b.to(TPU), a * b
    # (CPU's product of uncoalesced operands keeps explicit zeros where they
    # do not intersect; the tensors are equal)
    assert got.is_coalesced() == want.is_coalesced() and got.dtype == want.dtype
    same_dense(got.to_dense(), want.to_dense())
    same_coo(t.coalesce() * b.coalesce().to(TPU), a.coalesce() * b.coalesce())
    x, y = t.clone(), a.clone()
    x.mul_(0.5)
    y.mul_(0.5)
    same_coo(x, y)


@pytest.mark.parametrize("size,sparse_dim", SHAPES, ids=str)
def test_index_select(size, sparse_dim):
    a = rand_coo(size, sparse_dim, 12, seed=7)
    for c in (a, a.coalesce()):
        for dim in range(len(size)):
            index = torch.tensor([size[dim] - 1, 0, size[dim] - 1, 1 % size[dim]])
            got, want = c.to(TPU).index_select(dim, index.to(TPU)), c.index_select(dim, index)
            same_coo(got, want)
            assert got._nnz() == want._nnz()


def test_sparse_mask():
    a = rand_coo((6, 5), 2, 9, seed=8)
    d = torch.randn(6, 5)
    for m in (a, a.coalesce()):
        same_coo(d.to(TPU).sparse_mask(m.to(TPU)), d.sparse_mask(m), coalesced_values=False)
    h = rand_coo((6, 3, 2), 1, 5, seed=9)
    d = torch.randn(6, 3, 2)
    same_coo(d.to(TPU).sparse_mask(h.coalesce().to(TPU)), d.sparse_mask(h.coalesce()), coalesced_values=False)


@pytest.mark.parametrize("size,sparse_dim", SHAPES, ids=str)
def test_sparse_sum(size, sparse_dim):
    a = rand_coo(size, sparse_dim, 15, torch.float64, seed=10)
    t = a.to(TPU)
    same_dense(torch.sparse.sum(t), torch.sparse.sum(a))
    for dim in [0, len(size) - 1, (0, 1)]:
        got, want = torch.sparse.sum(t, dim), torch.sparse.sum(a, dim)
        if want.layout == torch.sparse_coo:
            same_coo(got, want, coalesced_values=False)
        else:
            same_dense(got, want)


@pytest.mark.parametrize("size,sparse_dim", SHAPES[1:], ids=str)
def test_gradients_through_sparse_ops(size, sparse_dim):
    """Gradients of the values and of dense operands through construction,
    coalesce, to_dense, torch.sparse.sum (by dim) and torch.sparse.mm."""
    a = rand_coo(size, sparse_dim, 10, torch.float64, seed=13)
    b = rand_coo(size[:2], 2, 10, seed=14)
    m = torch.randn(size[1], 3, dtype=torch.float64)

    def grads(device):
        v = a._values().to(device).requires_grad_()
        mm = m.to(device).requires_grad_()
        x = torch.sparse_coo_tensor(a._indices().to(device), v, size)
        s = torch.sparse.sum(x, [0, len(size) - 1])
        loss = x.to_dense().pow(2).sum() + x.coalesce().values().sin().sum() + s.to_dense().pow(2).sum()
        x2 = torch.sparse_coo_tensor(b._indices().to(device), v.reshape(10, -1).sum(1), b.shape)
        loss = loss + torch.sparse.mm(x2, mm).pow(2).sum()
        loss.backward()
        return v.grad, mm.grad

    for got, want in zip(grads(TPU), grads("cpu")):
        same_dense(got, want)


# ---------------------------------------------------------------- matrix products

@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_sparse_mm_and_addmm(dtype):
    a = rand_coo((7, 5), 2, 14, dtype, seed=11)
    m = torch.randn(5, 3, dtype=dtype)
    t, tm = a.to(TPU), m.to(TPU)
    for c, tc in ((a, t), (a.coalesce(), t.coalesce())):
        same_dense(torch.sparse.mm(tc, tm), torch.sparse.mm(c, m))
        same_dense(tc @ tm, c @ m)
        same_dense(torch.mm(tc, tm), torch.mm(c, m))
    s = torch.randn(7, 3, dtype=dtype)
    same_dense(torch.sparse.addmm(s.to(TPU), t, tm, beta=0.5, alpha=2), torch.sparse.addmm(s, a, m, beta=0.5, alpha=2))
    bias = torch.randn(3, dtype=dtype)
    same_dense(torch.addmm(bias.to(TPU), t, tm), torch.addmm(bias, a, m))
    nan = torch.full((7, 3), float("nan"), dtype=dtype)
    same_dense(torch.addmm(nan.to(TPU), t, tm, beta=0), torch.addmm(nan, a, m, beta=0))
    e = torch.randn(4, 7, dtype=dtype)
    same_dense(torch.mm(e.to(TPU), t), torch.mm(e, a))  # dense @ sparse


def test_sparse_mm_bfloat16_against_float64():
    a = rand_coo((16, 12), 2, 40, torch.float64, seed=12)
    m = torch.randn(12, 8, dtype=torch.float64)
    a16, m16 = a.to(torch.bfloat16), m.to(torch.bfloat16)
    got = torch.sparse.mm(a16.to(TPU), m16.to(TPU))
    assert got.dtype == torch.bfloat16
    want = torch.sparse.mm(a16.double(), m16.double())
    torch.testing.assert_close(got.cpu().double(), want, rtol=2e-2, atol=5e-2)


# ---------------------------------------------------------------- CSR

@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_csr_construction_to_dense_and_mm(dtype):
    x = torch.randn(6, 5, dtype=dtype)
    x[x.abs() < 0.7] = 0
    x[2] = 0  # an empty row
    csr = x.to_sparse_csr()
    for t in (x.to(TPU).to_sparse_csr(),
              torch.sparse_csr_tensor(csr.crow_indices(), csr.col_indices(), csr.values(), x.shape, device=TPU),
              csr.to(TPU),
              x.to_sparse().to(TPU).to_sparse_csr()):
        assert t.layout == torch.sparse_csr and t.device.type == TPU and t.values().device.type == TPU
        assert t._nnz() == csr._nnz() and t.dtype == dtype
        assert torch.equal(t.crow_indices().cpu(), csr.crow_indices())
        assert torch.equal(t.col_indices().cpu(), csr.col_indices())
        assert torch.equal(t.values().cpu(), csr.values())
        same_dense(t.to_dense(), x)
        back = t.cpu()
        assert back.layout == torch.sparse_csr and torch.equal(back.to_dense(), x)
        m = torch.randn(5, 3, dtype=dtype)
        same_dense(t @ m.to(TPU), csr @ m)
        same_dense(torch.sparse.mm(t, m.to(TPU)), torch.sparse.mm(csr, m))
        s = torch.randn(6, 3, dtype=dtype)
        same_dense(torch.addmm(s.to(TPU), t, m.to(TPU), beta=0.5, alpha=-1), torch.addmm(s, csr, m, beta=0.5, alpha=-1))


def same_compressed(got, want, **kw):
    """Same layout, size, dtype, compressed and plain indices, values."""
    assert got.device.type == TPU and (got.layout, got.shape, got.dtype) == (want.layout, want.shape, want.dtype)
    rows = got.layout in (torch.sparse_csr, torch.sparse_bsr)
    pick = (lambda t: (t.crow_indices(), t.col_indices())) if rows else (lambda t: (t.ccol_indices(), t.row_indices()))
    for g, w in zip(pick(got), pick(want)):
        assert g.device.type == TPU and torch.equal(g.cpu(), w)
    torch.testing.assert_close(got.values().cpu(), want.values(), **(kw or tol(want.dtype)))


def rand_matrix(rows, cols, dtype=torch.float32, seed=0):
    """A dense matrix with zeros: a zero row, a zero column, a zero 2x2 block."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, cols, generator=g, dtype=torch.float64).to(dtype)
    x[x.abs() < 0.6] = 0
    x[1], x[:, 2], x[2:4, 4:6] = 0, 0, 0
    return x


@pytest.mark.parametrize("layout,blocksize", [(torch.sparse_csc, None), (torch.sparse_bsr, (2, 2)),
                                              (torch.sparse_bsr, (3, 1)), (torch.sparse_bsc, (2, 3))], ids=str)
def test_csc_and_block_layouts_convert_as_on_cpu(layout, blocksize):
    x = rand_matrix(6, 6, torch.float64, seed=3)
    args = (blocksize,) if blocksize else ()
    convert = {torch.sparse_csc: "to_sparse_csc", torch.sparse_bsr: "to_sparse_bsr",
               torch.sparse_bsc: "to_sparse_bsc"}[layout]
    want = getattr(x, convert)(*args)
    t = x.to(TPU)
    for got in (getattr(t, convert)(*args), getattr(t.to_sparse(), convert)(*args),
                getattr(t.to_sparse_csr(), convert)(*args), t.to_sparse(layout=layout, blocksize=blocksize),
                want.to(TPU)):
        same_compressed(got, want)
        same_dense(got.to_dense(), x)
        same_coo(got.to_sparse(), want.to_sparse(), coalesced_values=False)  # CPU's order, flag
        assert torch.equal(got.cpu().to_dense(), x)
        m = torch.randn(6, 3, dtype=torch.float64)
        same_dense(got @ m.to(TPU), x @ m)  # (CPU's MKL refuses non-square blocks)
    with pytest.raises(RuntimeError, match="divisible"):
        t.to_sparse_bsr((4, 4))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_csr_arithmetic_and_products(dtype):
    x, y = rand_matrix(6, 7, dtype, seed=4), rand_matrix(6, 7, dtype, seed=5)
    a, b = x.to_sparse_csr(), y.to_sparse_csr()
    ta, tb = a.to(TPU), b.to(TPU)
    d = torch.randn(6, 7, dtype=dtype)
    same_compressed(ta + tb, a + b)
    same_compressed(torch.add(ta, tb, alpha=-2), torch.add(a, b, alpha=-2))
    same_dense(ta + d.to(TPU), a + d)
    same_dense(d.to(TPU) + ta, d + a)
    same_compressed(ta * 3, a * 3)
    same_compressed(ta * tb, a * b)
    same_compressed(ta * d.to(TPU), a * d)
    same_compressed(-ta, -a)
    same_dense(ta.sum(), a.sum())
    v, s = torch.randn(7, dtype=dtype), torch.randn(6, dtype=dtype)
    same_dense(ta @ v.to(TPU), a @ v)
    same_dense(torch.addmv(s.to(TPU), ta, v.to(TPU), beta=0.5, alpha=2), torch.addmv(s, a, v, beta=0.5, alpha=2))
    m1, m2 = torch.randn(6, 3, dtype=dtype), torch.randn(3, 7, dtype=dtype)
    same_compressed(torch.sparse.sampled_addmm(ta, m1.to(TPU), m2.to(TPU), beta=0.5, alpha=2),
                    torch.sparse.sampled_addmm(a, m1, m2, beta=0.5, alpha=2))
    same_coo(ta.to_sparse(), a.to_sparse())
    same_dense(ta.t().to_dense(), a.t().to_dense())
    w = torch.randn(7, 2, dtype=dtype, requires_grad=True)
    tw = w.detach().to(TPU).requires_grad_()
    torch.mm(a, w).pow(2).sum().backward()
    torch.mm(ta, tw).pow(2).sum().backward()
    same_dense(tw.grad, w.grad)


ZERO_PRESERVING = ["abs", "sqrt", "relu", "tanh", "sin", "sinh", "asinh", "atan", "expm1", "log1p", "erf",
                   "sign", "sgn", "floor", "ceil", "round", "trunc", "frac", "deg2rad", "rad2deg", "signbit",
                   "isnan", "isinf", "isposinf", "isneginf", "nan_to_num"]


@pytest.mark.parametrize("layout", ["coo", "hybrid", "csr"])
def test_zero_preserving_functions_keep_the_entries(layout):
    """abs, sqrt, relu, tanh... of a sparse tensor: CPU's entries, dtype,
    coalescing; in place and into out= too; with inf and nan values."""
    if layout == "csr":
        x = rand_matrix(5, 6, seed=6)
        x[0, 0], x[0, 1], x[4, 5] = float("inf"), float("-inf"), float("nan")
        cpu = x.to_sparse_csr()
        same = same_compressed
    else:
        cpu = rand_coo((7, 5), 2, 12, seed=6) if layout == "coo" else rand_coo((6, 3, 2), 1, 8, seed=6)
        cpu._values()[0] = float("inf")
        same = same_coo
    t = cpu.to(TPU)
    for name in ZERO_PRESERVING:
        if name in ("sqrt", "log1p"):
            src, tsrc = cpu.abs(), t.abs()
        else:
            src, tsrc = cpu, t
        try:
            want = getattr(torch, name)(src)
        except NotImplementedError:  # (CPU's CSR has no nan_to_num): the same error
            with pytest.raises(NotImplementedError):
                getattr(torch, name)(tsrc)
            continue
        same(getattr(torch, name)(tsrc), want, equal_nan=True, rtol=1e-5, atol=1e-5)
        if hasattr(torch.Tensor, name + "_") and want.dtype == src.dtype and layout != "hybrid":
            c, tc = src.coalesce() if layout != "csr" else src.clone(), tsrc.coalesce() if layout != "csr" else tsrc.clone()
            same(getattr(tc, name + "_")(), getattr(c, name + "_")(), equal_nan=True, rtol=1e-5, atol=1e-5)
    same_coo(torch.tanh(t.to(torch.bfloat16)).double(), torch.tanh(cpu.double()).to(torch.bfloat16).double(),
             rtol=1.6e-2, atol=1e-2) if layout != "csr" else None
    if layout == "coo":
        out = torch.sparse_coo_tensor(size=(7, 5), device=TPU)
        torch.sin(t, out=out)
        same_coo(out, torch.sin(cpu), equal_nan=True, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("size,sparse_dim,dim", [((5, 6), 2, 1), ((5, 6), 2, 0), ((4, 3, 5), 3, 1),
                                                 ((6, 4, 3), 2, 2), ((6, 4, 3), 2, -2)], ids=str)
def test_sparse_softmax_and_log_softmax_with_gradients(size, sparse_dim, dim):
    """Over each line's stored entries (the others are -inf), CPU's values
    and gradients; a dense dim of a hybrid tensor too."""
    cpu = rand_coo(size, sparse_dim, 14, torch.float64, seed=7)
    weight = torch.randn(size, dtype=torch.float64)
    for fn in (torch.sparse.softmax, torch.sparse.log_softmax):
        c = cpu.coalesce().requires_grad_()
        t = c.detach().to(TPU).requires_grad_()
        # (CPU's backward misreads a negative dim: its gradient at dim -2 is
        # not the dense softmax's. The reference takes the wrapped dim.)
        want, got = fn(c, dim % len(size)), fn(t, dim)
        same_coo(got, want)
        (want.to_dense() * weight).sum().backward()
        (got.to_dense() * weight.to(TPU)).sum().backward()
        same_coo(t.grad, c.grad)
    empty = torch.sparse_coo_tensor(torch.zeros((2, 0), dtype=torch.int64), torch.zeros(0), (3, 4))
    same_coo(torch.sparse.softmax(empty.to(TPU), 1), torch.sparse.softmax(empty, 1))


def test_coo_shape_ops_and_products():
    a, b = rand_coo((4, 5), 2, 9, seed=8), rand_coo((4, 5), 2, 6, seed=9)
    h = rand_coo((4, 3, 2), 1, 5, seed=10)
    ta, tb, th = a.to(TPU), b.to(TPU), h.to(TPU)
    same_coo(torch.cat([ta, tb], 0), torch.cat([a, b], 0), coalesced_values=False)
    same_coo(torch.cat([ta, tb], 1), torch.cat([a, b], 1), coalesced_values=False)
    same_coo(torch.cat([th, th], 2), torch.cat([h, h], 2), coalesced_values=False)
    same_coo(torch.stack([ta, tb], 1), torch.stack([a, b], 1))
    same_coo(ta.unsqueeze(0), a.unsqueeze(0))
    same_coo(th.unsqueeze(3), h.unsqueeze(3))
    same_coo(ta.permute(1, 0), a.permute(1, 0))
    same_coo(ta.coalesce().narrow_copy(1, 1, 3), a.coalesce().narrow_copy(1, 1, 3))
    same_coo(torch.floor_divide(ta, 2), torch.floor_divide(a, 2))
    assert bool(torch.any(ta)) == bool(torch.any(a))
    same_coo(ta.sum(1), a.sum(1))
    v, m, m3 = torch.randn(5), torch.randn(5, 3), torch.randn(2, 5, 3)
    same_dense(torch.mv(ta, v.to(TPU)), torch.mv(a, v))
    same_dense(torch.mm(ta, m.to(TPU), out=torch.empty(4, 3, device=TPU)), torch.mm(a, m))
    s3 = torch.stack([a, b]).coalesce()
    same_dense(torch.bmm(s3.to(TPU), m3.to(TPU)), torch.bmm(s3, m3))
    same_coo(torch.sparse.mm(ta, tb.t()), torch.sparse.mm(a, b.t()))
    # the product's structural entries stay where values cancel
    p = torch.sparse_coo_tensor(torch.tensor([[0, 0], [0, 1]]), torch.tensor([1., -1.]), (1, 2))
    q = torch.sparse_coo_tensor(torch.tensor([[0, 1], [0, 0]]), torch.tensor([1., 1.]), (2, 1))
    same_coo(torch.sparse.mm(p.to(TPU), q.to(TPU)), torch.sparse.mm(p, q))
    same_coo(torch.hspmm(ta, m.to(TPU)), torch.hspmm(a, m))
    same_coo(torch.smm(ta, m.to(TPU)), torch.smm(a, m), coalesced_values=False)
    c = rand_coo((4, 3), 2, 3, seed=11)
    same_coo(torch.sspaddmm(c.to(TPU), ta, m.to(TPU), beta=0.5, alpha=2), torch.sspaddmm(c, a, m, beta=0.5, alpha=2),
             coalesced_values=False)


# ---------------------------------------------------------------- embeddings

def dense_grad(g):
    return g.coalesce().to_dense().cpu()


def same_grad(got, want):
    """A sparse gradient on tpu equal to CPU's: flag, and after coalescing
    the same indices and values."""
    assert got.is_sparse and got.device.type == TPU
    same_coo(got, want)


@pytest.mark.parametrize("padding_idx", [None, 2], ids=str)
def test_embedding_sparse_gradient_and_accumulation(padding_idx):
    emb = torch.nn.Embedding(12, 4, sparse=True, padding_idx=padding_idx)
    et = copy.deepcopy(emb).to(TPU)
    idx = torch.tensor([[1, 2, 1, 7], [3, 1, 0, 11]])
    emb(idx).pow(2).sum().backward()
    et(idx.to(TPU)).pow(2).sum().backward()
    same_grad(et.weight.grad, emb.weight.grad)
    assert torch.equal(et.weight.grad._indices().cpu(), emb.weight.grad._indices())  # the same entries, unsorted
    idx2 = torch.tensor([5, 1, 2, 2])  # a second backward accumulates: sparse + sparse
    emb(idx2).sum().backward()
    et(idx2.to(TPU)).sum().backward()
    same_grad(et.weight.grad, emb.weight.grad)


@pytest.mark.parametrize("mode,psw", [("sum", False), ("sum", True), ("mean", False)], ids=str)
@pytest.mark.parametrize("padding_idx", [None, 0], ids=str)
@pytest.mark.parametrize("include_last_offset", [False, True], ids=str)
def test_embedding_bag_sparse_gradient(mode, psw, padding_idx, include_last_offset):
    bag = torch.nn.EmbeddingBag(10, 3, mode=mode, sparse=True, padding_idx=padding_idx,
                                include_last_offset=include_last_offset)
    bt = copy.deepcopy(bag).to(TPU)
    inp = torch.tensor([1, 2, 0, 4, 5, 4, 3, 0, 9])
    offsets = torch.tensor([0, 3, 3, 6, 9] if include_last_offset else [0, 3, 3, 6])
    w = torch.rand(9) if psw else None
    g = torch.Generator().manual_seed(0)
    up = torch.randn(4, 3, generator=g)
    (bag(inp, offsets, per_sample_weights=w) * up).sum().backward()
    tw = None if w is None else w.to(TPU)
    (bt(inp.to(TPU), offsets.to(TPU), per_sample_weights=tw) * up.to(TPU)).sum().backward()
    same_grad(bt.weight.grad, bag.weight.grad)


def test_embedding_bag_2d_input_sparse_gradient():
    bag = torch.nn.EmbeddingBag(10, 3, mode="mean", sparse=True)
    bt = copy.deepcopy(bag).to(TPU)
    inp = torch.tensor([[1, 2, 3], [4, 4, 0]])
    bag(inp).sum().backward()
    bt(inp.to(TPU)).sum().backward()
    same_grad(bt.weight.grad, bag.weight.grad)


def test_dense_embedding_bag_backward_still_refuses_double_backward():
    bag = torch.nn.EmbeddingBag(10, 3, mode="sum").to(TPU)
    x = torch.randn(2, 3, device=TPU, requires_grad=True)
    out = (bag(torch.tensor([1, 2, 0, 4], device=TPU), torch.tensor([0, 2], device=TPU)) * x).sum()
    (g,) = torch.autograd.grad(out, bag.weight, create_graph=True)
    with pytest.raises(RuntimeError, match="derivative for '_embedding_bag_backward' is not implemented"):
        g.pow(2).sum().backward()


# ---------------------------------------------------------------- optimizers

def _clip(params, max_norm):
    """clip_grad_norm_; on CPU, which refuses sparse gradients, of their
    dense equivalents, masked back."""
    if params[0].device.type != "cpu":
        return torch.nn.utils.clip_grad_norm_(params, max_norm)
    sparse = [(p, p.grad.coalesce()) for p in params if p.grad.is_sparse]
    for p, g in sparse:
        p.grad = g.to_dense()
    norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
    for p, g in sparse:
        p.grad = p.grad.sparse_mask(g)
    return norm


def _train(make_opt, device, clip, steps=3):
    torch.manual_seed(0)
    emb = torch.nn.Embedding(20, 4, sparse=True).to(device)
    bag = torch.nn.EmbeddingBag(15, 4, mode="sum", sparse=True).to(device)
    lin = torch.nn.Linear(4, 1).to(device)
    opts = make_opt(list(emb.parameters()) + list(bag.parameters()), list(lin.parameters()))
    params = list(emb.parameters()) + list(bag.parameters()) + list(lin.parameters())
    norms = []
    for s in range(steps):
        idx = (torch.tensor([[1, 2, 1, 7], [3, 1, 0, 19]]) + s) % 20
        bi = (torch.tensor([1, 4, 4, 14, 0, 2]) + s) % 15
        for o in opts:
            o.zero_grad()
        pooled = bag(bi.to(device), torch.tensor([0, 2, 5], device=device))
        (lin(emb(idx.to(device))).pow(2).sum() + lin(pooled).sum()).backward()
        if clip:
            if device != "cpu":
                assert emb.weight.grad.is_sparse
            norms.append(_clip(params, 0.5).cpu())
        for o in opts:
            o.step()
    return [p.detach().cpu() for p in params], norms


OPTIMIZERS = {
    "sgd": lambda sp, dn: [torch.optim.SGD(sp + dn, lr=0.1)],
    "sgd_momentum": lambda sp, dn: [torch.optim.SGD(sp + dn, lr=0.1, momentum=0.9, dampening=0.1)],
    "adagrad": lambda sp, dn: [torch.optim.Adagrad(sp + dn, lr=0.1, lr_decay=0.01, initial_accumulator_value=0.1)],
    "sparse_adam": lambda sp, dn: [torch.optim.SparseAdam(sp, lr=0.1), torch.optim.Adam(dn, lr=0.1)],
}


@pytest.mark.parametrize("name", list(OPTIMIZERS))
@pytest.mark.parametrize("clip", [False, True], ids=["noclip", "clip_grad_norm"])
def test_optimizers_take_sparse_gradients_as_on_cpu(name, clip):
    want, want_norms = _train(OPTIMIZERS[name], "cpu", clip)
    got, got_norms = _train(OPTIMIZERS[name], TPU, clip)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6)
    for g, w in zip(got_norms, want_norms):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------- fresh batches (buckets)
#
# A sparse gradient's nnz changes with every batch. Where its indices and
# values are held padded (docs/bounded_dynamism.md), the sparse kernels work
# on the buckets, the entries past nnz masked: one program per bucket.

_tt = torch.ops.torch_tpu


def _held_with_garbage(t, dim, garbage):
    """``t`` on tpu, held padded along ``dim`` in its bucket, the padding
    filled with ``garbage`` (what a kernel must never read)."""
    k = _tt._bucket_of(t.shape[dim])
    b = torch.full(t.shape[:dim] + (k,) + t.shape[dim + 1:], garbage, dtype=t.dtype)
    b.narrow(dim, 0, t.shape[dim]).copy_(t)
    held = _tt._as_padded(b.to(TPU), list(t.shape))
    assert _tt._storage_info(held).startswith("padded")
    return held


def _garbage_coo(cpu):
    """The tpu COO tensor of ``cpu``'s entries, indices and values held
    padded, the padding holding indices far out of range and NaN values."""
    return torch.sparse_coo_tensor(_held_with_garbage(cpu._indices(), 1, 10**12),
                                   _held_with_garbage(cpu._values(), 0, float("nan")), cpu.shape)


@pytest.mark.parametrize("size,sparse_dim", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_kernels_on_entries_held_padded_never_read_the_padding(size, sparse_dim, dtype):
    for nnz in (20, 27):  # (one bucket)
        cpu = rand_coo(size, sparse_dim, nnz, dtype, seed=nnz)
        t = _garbage_coo(cpu)
        c = t.coalesce()
        same_coo(c, cpu.coalesce(), coalesced_values=False)
        if c._nnz() >= 2:  # the result is held padded: its readers run bucketed too
            assert _tt._storage_info(c._values()).startswith("padded")
        d = torch.randn(size, dtype=dtype)
        d[0] = -0.0  # (a row no entry reaches keeps its sign)
        for s in (t, c):
            same_dense(d.to(TPU).add_(s, alpha=-0.5), d + cpu * -0.5)
            got = d.to(TPU).add_(s).cpu()
            assert torch.equal(got.signbit(), (d + cpu).signbit())
        same_coo(d.to(TPU).sparse_mask(c), d.sparse_mask(cpu.coalesce()), coalesced_values=False)
        same_coo(c * 2.5 + c, cpu.coalesce() * 3.5)


def test_embedding_bag_of_ids_held_padded_never_reads_the_padding():
    torch.manual_seed(0)
    w = torch.randn(50, 8)
    for n in (20, 23, 30):
        ids = torch.randint(0, 50, (n,))
        offsets = torch.tensor([0, 3, 3, 10, n - 1])
        held = _held_with_garbage(ids, 0, 10**12)
        for mode in ("sum", "mean", "max"):
            got = torch.nn.functional.embedding_bag(held, w.to(TPU), offsets.to(TPU), mode=mode)
            same_dense(got, torch.nn.functional.embedding_bag(ids, w, offsets, mode=mode))
        # per-sample weights held padded too, their padding NaN
        psw = torch.rand(n, dtype=torch.float32)
        got = torch.nn.functional.embedding_bag(held, w.to(TPU), offsets.to(TPU), mode="sum",
                                                per_sample_weights=_held_with_garbage(psw, 0, float("nan")))
        same_dense(got, torch.nn.functional.embedding_bag(ids, w, offsets, mode="sum", per_sample_weights=psw))
        bad = ids.clone()
        bad[n - 1] = 50  # a real id out of range still raises
        with pytest.raises(IndexError, match="index out of range"):
            torch.nn.functional.embedding_bag(_held_with_garbage(bad, 0, 0), w.to(TPU), offsets.to(TPU)).cpu()


def _fresh_training(make_opt, device, steps):
    """Embedding bags (sparse gradients) under a linear layer, trained on a
    new batch per step: 4 bags of new id counts (in one bucket), as a
    recommendation model's click log gives them. The tables and, per step,
    the programs built."""
    torch.manual_seed(0)
    # (tables large enough that a batch's unique ids stay in its bucket too)
    bags = [torch.nn.EmbeddingBag(1000, 8, mode="sum", sparse=True).to(device),
            torch.nn.EmbeddingBag(500, 8, mode="mean", sparse=True).to(device)]
    lin = torch.nn.Linear(16, 1).to(device)
    opts = make_opt([b.weight for b in bags], list(lin.parameters()))
    built = []
    g = torch.Generator().manual_seed(1)
    for s in range(steps):
        before = torch_tpu.counters()["programs_built"] if device == TPU else 0
        pooled = []
        for b in bags:
            n = int(torch.randint(36, 60, (), generator=g))  # (bucket 64)
            ids = torch.randint(0, b.num_embeddings, (n,), generator=g)
            offsets = torch.tensor([0, 5, n // 2, n - 3])
            # (the sum bag weighs its ids: per-sample weights, uploaded as the ids are)
            psw = torch.rand(n, generator=g).to(device) if b.mode == "sum" else None
            pooled.append(b(ids.to(device), offsets.to(device), per_sample_weights=psw))
        for o in opts:
            o.zero_grad()
        loss = torch.tanh(lin(torch.cat(pooled, 1))).pow(2).mean()
        loss.backward()
        # (the norm of sparse gradients held padded, and the scaling by it)
        _clip([b.weight for b in bags] + list(lin.parameters()), 0.05)
        for o in opts:
            o.step()
        loss.item()
        built.append(torch_tpu.counters()["programs_built"] - before if device == TPU else 0)
    return [b.weight.detach().cpu() for b in bags], built


@pytest.mark.parametrize("name", ["sgd", "adagrad", "sparse_adam"])
def test_fresh_batches_of_sparse_embeddings_compile_nothing_after_warm_up(name):
    want, _ = _fresh_training(OPTIMIZERS[name], "cpu", 8)
    got, built = _fresh_training(OPTIMIZERS[name], TPU, 8)
    for g, w in zip(got, want):  # (Adam's steps scale rounding up where its second moment is tiny)
        torch.testing.assert_close(g, w, **(dict(rtol=1e-4, atol=1e-4) if name == "sparse_adam" else {}))
    assert built[4:] == [0] * 4, built
