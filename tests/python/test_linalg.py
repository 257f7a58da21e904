"""Decompositions and solvers on tpu against CPU PyTorch (LAPACK): batches,
non-contiguous and empty inputs, singular and rank-deficient matrices, and
gradients. Eigen- and singular vectors are unique only up to sign, so they
are checked through what is unique: reconstructions and projectors."""

import pytest
import torch

from conftest import assert_close_to_float64_reference, assert_same

TOL = dict(rtol=1e-4, atol=1e-4)


def rand(*shape, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=dtype)


def tpu(*xs):
    return [x.to("tpu") for x in xs]


def close(got, want, **tol):
    torch.testing.assert_close(got.cpu(), want, **(tol or TOL))


SHAPES = [(4, 4), (3, 5, 5), (2, 1, 3, 3), (1, 1), (0, 3, 3), (0, 0)]


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_det_slogdet_inv(shape, dtype):
    a = rand(*shape, dtype=dtype)
    (at,) = tpu(a)
    close(torch.linalg.det(at), torch.linalg.det(a))
    sign, logabs = torch.linalg.slogdet(at)
    want = torch.linalg.slogdet(a)
    close(sign, want.sign)
    close(logabs, want.logabsdet)
    close(torch.linalg.inv(at), torch.linalg.inv(a))
    # Non-contiguous: det factors A^T only when A is contiguous.
    close(torch.linalg.det(at.mT), torch.linalg.det(a.mT))


def test_singular_matrices():
    a = torch.tensor([[1.0, 2.0], [2.0, 4.0]])
    (at,) = tpu(a)
    assert torch.linalg.det(at).item() == 0.0
    sign, logabs = torch.linalg.slogdet(at)
    assert sign.item() == 0.0 and logabs.item() == float("-inf")
    lu, piv, info = torch.linalg.lu_factor_ex(at)
    assert info.item() == torch.linalg.lu_factor_ex(a).info.item() == 2
    with pytest.raises(torch.linalg.LinAlgError):
        torch.linalg.inv(at)


@pytest.mark.parametrize("shape", [(5, 5), (3, 5), (5, 3), (2, 4, 6), (0, 3)], ids=str)
def test_lu(shape):
    a = rand(*shape, seed=1)
    (at,) = tpu(a)
    lu, piv = torch.linalg.lu_factor(at)
    want_lu, want_piv = torch.linalg.lu_factor(a)
    close(lu, want_lu)
    assert torch.equal(piv.cpu(), want_piv)
    for got, want in zip(torch.linalg.lu(at), torch.linalg.lu(a)):
        close(got, want)
    for got, want in zip(torch.lu_unpack(lu, piv), torch.lu_unpack(want_lu, want_piv)):
        close(got, want)


@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("adjoint", [True, False])
def test_lu_solve(left, adjoint):
    a, b = rand(3, 4, 4, seed=2), rand(3, 4, 4, seed=3)
    lu, piv = torch.linalg.lu_factor(a)
    got = torch.linalg.lu_solve(*tpu(lu, piv, b), left=left, adjoint=adjoint)
    close(got, torch.linalg.lu_solve(lu, piv, b, left=left, adjoint=adjoint))


@pytest.mark.parametrize("a_shape,b_shape", [((4, 4), (4,)), ((4, 4), (4, 2)), ((3, 4, 4), (4, 1)),
                                             ((2, 1, 3, 3), (5, 3, 2)), ((3, 3), (2, 3, 3))], ids=str)
def test_solve_broadcasts(a_shape, b_shape):
    a, b = rand(*a_shape, seed=4), rand(*b_shape, seed=5)
    close(torch.linalg.solve(*tpu(a, b)), torch.linalg.solve(a, b))
    if len(b_shape) > 1:
        bt = b.mT.contiguous()
        close(torch.linalg.solve(*tpu(a, bt), left=False), torch.linalg.solve(a, bt, left=False))


def test_solve_gradients():
    a, b = rand(4, 4, seed=6), rand(4, 2, seed=7)
    grads = {}
    for dev in ("cpu", "tpu"):
        x, y = a.to(dev).requires_grad_(), b.to(dev).requires_grad_()
        out = torch.linalg.solve(x, y).square().sum() + torch.linalg.det(x) + torch.linalg.inv(x).sum()
        grads[dev] = [g.cpu() for g in torch.autograd.grad(out, (x, y))]
    for got, want in zip(grads["tpu"], grads["cpu"]):
        close(got, want, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (4, 4), (2, 6, 2), (0, 3)], ids=str)
@pytest.mark.parametrize("mode", ["reduced", "complete", "r"])
def test_qr(shape, mode):
    a = rand(*shape, seed=8)
    q, r = torch.linalg.qr(*tpu(a), mode=mode)
    want_q, want_r = torch.linalg.qr(a, mode=mode)
    # geqrf's sign convention (beta = -sign(alpha) ||x||) makes Q and R unique.
    close(r, want_r)
    close(q, want_q)


def test_householder_and_ormqr():
    a = rand(6, 4, seed=9)
    v, tau = torch.geqrf(a)
    gv, gtau = torch.geqrf(*tpu(a))
    close(gv, v)
    close(gtau, tau)
    close(torch.linalg.householder_product(gv, gtau), torch.linalg.householder_product(v, tau))
    c = rand(6, 3, seed=10)
    for left, transpose in [(True, False), (True, True)]:
        close(torch.ormqr(gv, gtau, c.to("tpu"), left, transpose), torch.ormqr(v, tau, c, left, transpose))


@pytest.mark.parametrize("shape", [(5, 5), (3, 4, 4), (1, 1), (0, 3, 3)], ids=str)
def test_eigh(shape):
    a = rand(*shape, seed=11)
    a = a + a.mT
    w, v = torch.linalg.eigh(*tpu(a))
    close(w, torch.linalg.eigvalsh(a))
    w, v = w.cpu(), v.cpu()
    n = shape[-1]
    torch.testing.assert_close(v @ torch.diag_embed(w) @ v.mT, a, **TOL)
    torch.testing.assert_close(v.mT @ v, torch.eye(n).expand_as(a), **TOL)
    # Only the named triangle is read.
    upper = torch.triu(a) + 100 * torch.tril(torch.ones_like(a), -1)
    close(torch.linalg.eigvalsh(upper.to("tpu"), UPLO="U"), torch.linalg.eigvalsh(a))


@pytest.mark.parametrize("shape", [(6, 4), (4, 6), (5, 5), (2, 3, 7), (0, 2), (3, 0)], ids=str)
@pytest.mark.parametrize("full", [False, True])
def test_svd(shape, full):
    a = rand(*shape, seed=12)
    u, s, vh = (x.cpu() for x in torch.linalg.svd(a.to("tpu"), full_matrices=full))
    close(s, torch.linalg.svdvals(a))
    k = min(shape[-2:])
    torch.testing.assert_close((u[..., :k] * s.unsqueeze(-2)) @ vh[..., :k, :], a, **TOL)
    m, n = shape[-2:]
    eye_u = torch.eye(u.shape[-1]).expand(*u.shape[:-2], -1, -1)
    torch.testing.assert_close(u.mT @ u, eye_u, **TOL)
    torch.testing.assert_close(vh @ vh.mT, torch.eye(vh.shape[-2]).expand(*vh.shape[:-2], -1, -1), **TOL)


def test_rank_deficient_svd_keeps_orthonormal_vectors():
    a = torch.zeros(5, 3)
    a[:, 0] = rand(5, seed=13)
    u, s, vh = (x.cpu() for x in torch.linalg.svd(a.to("tpu"), full_matrices=False))
    assert s[1:].abs().max() < 1e-6
    torch.testing.assert_close(u.mT @ u, torch.eye(3), **TOL)
    close(torch.linalg.matrix_rank(a.to("tpu")), torch.linalg.matrix_rank(a))
    close(torch.linalg.pinv(a.to("tpu")), torch.linalg.pinv(a))


def test_cholesky_solve_and_inverse():
    m = rand(3, 4, 4, seed=14)
    spd = m @ m.mT + 4 * torch.eye(4)
    for upper in (False, True):
        f = torch.linalg.cholesky(spd, upper=upper)
        b = rand(3, 4, 2, seed=15)
        close(torch.cholesky_solve(*tpu(b, f), upper=upper), torch.cholesky_solve(b, f, upper=upper))
        close(torch.cholesky_inverse(f[0].to("tpu"), upper=upper), torch.cholesky_inverse(f[0], upper=upper))


def test_integer_input_is_rejected_like_cpu():
    a = torch.ones(3, 3, dtype=torch.int64)
    with pytest.raises(RuntimeError, match="floating point"):
        torch.linalg.det(a.to("tpu"))
    with pytest.raises(NotImplementedError):
        torch.linalg.det(a.to(torch.bfloat16).to("tpu"))


def test_matrix_functions_built_on_decompositions():
    a = rand(4, 4, seed=16)
    (at,) = tpu(a)
    close(torch.linalg.matrix_power(at, -3), torch.linalg.matrix_power(a, -3), rtol=1e-3, atol=1e-3)
    close(torch.linalg.cond(at), torch.linalg.cond(a), rtol=1e-3, atol=1e-3)
    close(torch.linalg.matrix_norm(at, "nuc"), torch.linalg.matrix_norm(a, "nuc"))
    assert_same(torch.linalg.matrix_rank(at), torch.linalg.matrix_rank(a))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.complex64])
@pytest.mark.parametrize("upper", [False, True])
def test_cholesky_ex_info_names_the_first_failing_minor(dtype, upper):
    """info is LAPACK potrf's: the order of the first leading minor that is
    not positive-definite, per matrix of the batch (0 where it factors)."""
    m = rand(4, 5, 5, seed=17, dtype=dtype)
    a = m @ m.mH + 0.5 * torch.eye(5, dtype=dtype)
    a[1, 2, 2] = -5  # fails at order 3
    a[2, 0, 0] = 0  # fails at order 1
    a[3, 4, 4] = float("nan")  # fails at order 5
    want_l, want_info = torch.linalg.cholesky_ex(a, upper=upper)
    got_l, got_info = torch.linalg.cholesky_ex(a.to("tpu"), upper=upper)
    assert got_info.tolist() == want_info.tolist() == [0, 3, 1, 5]
    close(got_l[0], want_l[0])
    # The non-transposed (strided) input and an empty batch.
    close(torch.linalg.cholesky_ex(a[:1].mT.to("tpu"))[0], torch.linalg.cholesky_ex(a[:1].mT)[0])
    assert torch.linalg.cholesky_ex(torch.zeros(0, 3, 3, device="tpu"))[1].shape == (0,)


def test_cholesky_error_names_the_minor_and_batch():
    a = torch.eye(4).repeat(2, 1, 1)
    a[1, 1, 1] = -1
    with pytest.raises(torch.linalg.LinAlgError) as cpu_err:
        torch.linalg.cholesky(a)
    with pytest.raises(torch.linalg.LinAlgError) as tpu_err:
        torch.linalg.cholesky(a.to("tpu"))
    assert str(tpu_err.value) == str(cpu_err.value)
    assert "order 2" in str(tpu_err.value) and "Batch element 1" in str(tpu_err.value)


# ---- the general eigendecomposition (LAPACK geev's steps on the device) ----------


def _eig_residual(a, w, v):
    return (a.to(v.dtype) @ v - v * w.unsqueeze(-2)).abs().amax().item()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.complex64, torch.complex128], ids=str)
@pytest.mark.parametrize("shape", [(4, 4), (2, 3, 6, 6), (1, 1), (0, 3, 3)], ids=str)
def test_eig_is_a_decomposition_with_cpu_conventions(shape, dtype):
    a = rand(*shape, seed=21, dtype=dtype)
    w, v = torch.linalg.eig(a.to("tpu"))
    cw, cv = torch.linalg.eig(a)
    assert (w.dtype, v.dtype, w.shape, v.shape) == (cw.dtype, cv.dtype, cw.shape, cv.shape)
    if a.numel():
        assert v.stride() == cv.stride()  # column-major matrices, as LAPACK writes them
    w, v = w.cpu(), v.cpu()
    close(torch.linalg.eigvals(a.to("tpu")), w, rtol=0, atol=0)
    if a.numel() == 0:
        return
    eps = torch.finfo(dtype).eps
    assert _eig_residual(a, w, v) < 200 * eps * max(1.0, a.abs().max().item())
    close(torch.linalg.vector_norm(v, dim=-2), torch.ones(w.shape, dtype=w.real.dtype))
    if dtype.is_complex:
        # zgeev: each vector's largest component is real and positive; the
        # order and the vectors are CPU's.
        top = v.gather(-2, v.abs().argmax(-2, keepdim=True))
        assert (top.imag == 0).all() and (top.real > 0).all()
        torch.testing.assert_close(w, cw, rtol=1e-4 if dtype == torch.complex64 else 1e-9, atol=1e-5)
        torch.testing.assert_close(v, cv, rtol=1e-3 if dtype == torch.complex64 else 1e-8, atol=1e-4)
        return
    # Conjugate pairs are adjacent, the positive imaginary part first; a
    # pair's largest component is real; real eigenvalues have real vectors
    # and a +0 imaginary part.
    flat_w, flat_v = w.reshape(-1, shape[-1]), v.reshape(-1, shape[-1], shape[-1])
    for ws, vs in zip(flat_w, flat_v):
        j = 0
        while j < len(ws):
            if ws[j].imag == 0:
                assert not torch.signbit(ws[j].imag) and (vs[:, j].imag == 0).all()
                j += 1
                continue
            assert ws[j].imag > 0 and ws[j + 1] == ws[j].conj() and (vs[:, j + 1] == vs[:, j].conj()).all()
            assert vs[vs[:, j].abs().argmax(), j].imag == 0
            j += 2
    # The eigenvalues are CPU's, in CPU's order (the order of deflation).
    torch.testing.assert_close(w, cw, rtol=1e-4 if dtype == torch.float32 else 1e-9, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_eig_follows_lapack_order_and_vectors_on_most_random_matrices(dtype):
    """Eigenvalues come in LAPACK's order of deflation, not sorted; vectors
    are unique up to a phase, and the phase is geev's (unit norm, largest
    component real) on most matrices. A QR iteration that rounds otherwise
    than MKL's may deflate a pair in another order, or turn a vector by -1."""
    a = rand(64, 5, 5, seed=22, dtype=dtype)
    w, v = (t.cpu() for t in torch.linalg.eig(a.to("tpu")))
    cw, cv = torch.linalg.eig(a)
    tol = 1e-4 if dtype == torch.float32 else 1e-9
    same_w = (w - cw).abs().amax(-1) < tol
    same_v = (v - cv).abs().amax((-1, -2)) < 100 * tol
    assert same_w.sum() >= 58, same_w.sum()
    assert (same_w & same_v).sum() >= 40, (same_w & same_v).sum()


@pytest.mark.parametrize("make", ["triu", "tril", "diag", "jordan", "rotation", "zeros", "integers"])
def test_eig_of_structured_matrices_is_cpus(make):
    g = torch.Generator().manual_seed(23)
    a = {
        "triu": torch.randn(5, 5, generator=g).triu(),
        "tril": torch.randn(5, 5, generator=g).tril(),
        "diag": torch.diag(torch.tensor([3.0, -1.0, 2.0, 2.0])),
        "jordan": torch.tensor([[2.0, 1.0, 0.0], [0.0, 2.0, 1.0], [0.0, 0.0, 2.0]]),
        "rotation": torch.tensor([[0.0, -1.0], [1.0, 0.0]]),
        "zeros": torch.zeros(3, 3),
        "integers": torch.randint(-3, 4, (6, 6), generator=g).float(),
    }[make].double()
    w, v = (t.cpu() for t in torch.linalg.eig(a.to("tpu")))
    cw, cv = torch.linalg.eig(a)
    torch.testing.assert_close(w, cw, rtol=1e-9, atol=1e-9)
    if make != "integers":
        torch.testing.assert_close(v, cv, rtol=1e-6, atol=1e-6)


def test_eig_of_transposed_and_batched_input_is_per_matrix():
    a = rand(3, 4, 4, seed=24, dtype=torch.float64)
    t = a.mT  # non-contiguous
    w = torch.linalg.eigvals(t.to("tpu")).cpu()
    for i in range(3):
        close(w[i], torch.linalg.eigvals(t[i].to("tpu")).cpu(), rtol=0, atol=0)
    torch.testing.assert_close(w, torch.linalg.eigvals(t), rtol=1e-9, atol=1e-9)


def test_eig_bad_input_raises_like_cpu():
    for bad in [torch.tensor([[1.0, float("nan")], [0.0, 1.0]]), torch.full((2, 2), float("inf"))]:
        for fn in (torch.linalg.eig, torch.linalg.eigvals):
            with pytest.raises(RuntimeError, match="should not contain infs or NaNs"):
                r = fn(bad.to("tpu"))
                (r[0] if isinstance(r, tuple) else r).cpu()
    with pytest.raises(RuntimeError, match="must be batches of square matrices"):
        torch.linalg.eig(torch.ones(2, 3, device="tpu"))
    with pytest.raises(NotImplementedError, match="Half"):
        torch.linalg.eig(torch.ones(2, 2, dtype=torch.half, device="tpu"))
    # The failed check belongs to the results; other tensors read normally.
    # (debug eager raises at the op, the other modes at the read).
    x = torch.ones(3, device="tpu") * 2
    with pytest.raises(RuntimeError, match="infs or NaNs"):
        w = torch.linalg.eigvals(torch.full((2, 2), float("nan"), device="tpu"))
        assert_same(x, torch.full((3,), 2.0))
        w.cpu()
    assert_same(x, torch.full((3,), 2.0))


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128], ids=str)
def test_complex_solve_and_inverse(dtype):
    a, b = rand(3, 4, 4, seed=25).to(dtype) * (1 + 1j), rand(3, 4, 2, seed=26).to(dtype)
    a = a + rand(3, 4, 4, seed=27).to(dtype) * 1j
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == torch.complex64 else dict(rtol=1e-10, atol=1e-10)
    close(torch.linalg.solve(*tpu(a, b)), torch.linalg.solve(a, b), **tol)
    close(torch.linalg.solve(*tpu(a, b.mT), left=False), torch.linalg.solve(a, b.mT, left=False), **tol)
    close(torch.linalg.inv(a.to("tpu")), torch.linalg.inv(a), **tol)


@pytest.mark.parametrize("dtype", [torch.float64, torch.complex128], ids=str)
def test_eig_gradients_match_cpu(dtype):
    """linalg_eig's backward solves with the (complex) eigenvectors; a loss
    that does not depend on the vectors' phases has CPU's gradient."""
    a = rand(5, 5, seed=28, dtype=torch.float64).to(dtype)
    if dtype.is_complex:
        a = a + 1j * rand(5, 5, seed=29, dtype=torch.float64)
    grads = []
    for dev in ("cpu", "tpu"):
        x = a.to(dev).requires_grad_()
        w, v = torch.linalg.eig(x)
        loss = w.real.sum() + w.imag.pow(2).sum() + v.abs().pow(3).sum()
        (g,) = torch.autograd.grad(loss, x)
        (gv,) = torch.autograd.grad(torch.linalg.eigvals(x).real.pow(2).sum(), x)
        grads.append((g.cpu(), gv.cpu()))
    for got, want in zip(grads[1], grads[0]):
        torch.testing.assert_close(got, want, rtol=1e-8, atol=1e-8)


def _products_with_a_transposed_lhs():
    """(name, op, operands): products whose first operand is a transposed
    view, the case computed as the transposed product of swapped operands."""
    cases = []
    for k, m, n in [(64, 32, 1), (64, 32, 5), (33, 40, 7), (16, 8, 8), (16, 3, 9), (0, 4, 2), (5, 0, 3), (7, 4, 0)]:
        cases.append((f"mm {k}x{m}x{n}", lambda s, r: s.t() @ r, (rand(k, m, seed=k), rand(k, n, seed=n + 1))))
        cases.append((f"mm rhs transposed {k}x{m}x{n}", lambda s, r: torch.mm(s.t(), r.t()),
                      (rand(k, m, seed=k), rand(n, k, seed=n + 2))))
    cases.append(("mv", lambda s, v: torch.mv(s.t(), v), (rand(40, 30), rand(40, seed=3))))
    cases.append(("matmul vector", lambda s, v: s.mT @ v, (rand(40, 30), rand(40, seed=4))))
    cases.append(("bmm", lambda s, r: torch.bmm(s.transpose(1, 2), r), (rand(3, 20, 12), rand(3, 20, 2, seed=5))))
    cases.append(("bmm rhs transposed", lambda s, r: torch.bmm(s.transpose(1, 2), r.transpose(1, 2)),
                  (rand(3, 20, 12), rand(3, 4, 20, seed=6))))
    cases.append(("addmm", lambda c, s, r: torch.addmm(c, s.t(), r, beta=0.5, alpha=2.0),
                  (rand(12, 3, seed=7), rand(20, 12), rand(20, 3, seed=8))))
    cases.append(("baddbmm", lambda c, s, r: torch.baddbmm(c, s.transpose(1, 2), r, alpha=0.5),
                  (rand(2, 12, 3, seed=9), rand(2, 20, 12), rand(2, 20, 3, seed=10))))
    cases.append(("sliced lhs", lambda s, r: s[1:, ::2].t() @ r, (rand(21, 24), rand(20, 3, seed=11))))
    return cases


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.complex64], ids=str)
@pytest.mark.parametrize("case", _products_with_a_transposed_lhs(), ids=lambda c: c[0])
def test_products_with_a_transposed_lhs_are_cpus(case, dtype):
    _, op, xs = case
    xs = [x.to(dtype) for x in xs]
    if dtype.is_complex:
        xs = [x + 0.5j * x.flip(-1) for x in xs]
    got = op(*tpu(*xs))
    want = op(*xs)
    if dtype == torch.bfloat16:  # against the float64 product of the same values, not CPU's bfloat16 kernel
        k = max(max(x.shape) for x in xs) + 1  # (at least each element's number of products, the bias too)
        roundings = 1 if "add" in case[0] else 0  # (the product, rounded before the sum)
        assert_close_to_float64_reference(got, op, xs, sum_of_products=True, terms=k, roundings=roundings)
    else:
        assert_same(got, want, **TOL)
    assert got.stride() == want.stride()


def test_weight_gradient_of_a_linear_layer_is_cpus():
    """A linear layer's weight gradient is g.t() @ x: more output features
    than input features puts the larger free dim on the transposed side."""
    x, w = rand(64, 8, seed=1), rand(32, 8, seed=2)
    g = rand(64, 32, seed=3)
    wt = w.to("tpu").requires_grad_()
    torch.nn.functional.linear(x.to("tpu"), wt).backward(g.to("tpu"))
    wc = w.clone().requires_grad_()
    torch.nn.functional.linear(x, wc).backward(g)
    close(wt.grad, wc.grad)


def _scaled_mm_in_float64(a, b, sa, sb, bias, result, out):
    """torch._scaled_mm (CPU's, for 8-bit operands), or its formula in float64."""
    if a.dtype != torch.float64:
        return torch._scaled_mm(a, b, sa, sb, bias=bias, scale_result=result, out_dtype=out)
    y = (a @ b) * sa * sb + (0 if bias is None else bias)
    return y if result is None else y / result


@pytest.mark.parametrize("dtypes", [(torch.float8_e4m3fn, torch.float8_e4m3fn), (torch.float8_e4m3fn, torch.float8_e5m2),
                                    (torch.float8_e5m2, torch.float8_e4m3fn)], ids=str)
def test_scaled_float8_matmul_is_cpus(dtypes):
    """torch._scaled_mm (torchao's float8 linear layers): 8-bit operands
    times tensor-wise or row-wise float32 scales, accumulated in float32,
    plus a bias, into float32, bfloat16, half or 8 bits (divided by
    scale_result); CPU's values. Bad scales raise CPU's ValueError."""
    g = torch.Generator().manual_seed(0)
    M, K, N = 5, 32, 16
    a = (torch.randn(M, K, generator=g) * 4).to(dtypes[0])
    b = (torch.randn(N, K, generator=g) * 4).to(dtypes[1]).t()  # column-major, as torchao passes it
    scales = [(torch.tensor(0.5), torch.tensor(2.0)), (torch.rand(M, 1, generator=g) + 0.5, torch.rand(1, N, generator=g) + 0.5)]
    for out in (torch.float32, torch.bfloat16, torch.float16, torch.float8_e4m3fn):
        for sa, sb in scales:
            for bias in (None, torch.randn(N, generator=g).to(torch.bfloat16 if out.itemsize == 1 else out)):
                for result in ((None, torch.tensor(4.0)) if out.itemsize == 1 else (None,)):
                    kw = dict(bias=bias, scale_result=result, out_dtype=out)
                    tpu = {k: v.to("tpu") if isinstance(v, torch.Tensor) else v for k, v in kw.items()}
                    got = torch._scaled_mm(a.to("tpu"), b.to("tpu"), sa.to("tpu"), sb.to("tpu"), **tpu)
                    assert got.dtype == out
                    # float32 sums, one rounding of the output type: within an ulp of the float64
                    # product of the same values (not CPU's own rounding of it)
                    assert_close_to_float64_reference(got, _scaled_mm_in_float64, (a, b, sa, sb, bias, result, out),
                                                      ulps=1, terms=K + 1, sum_of_products=True)
    with pytest.raises(ValueError, match="scal"):
        torch._scaled_mm(a.to("tpu"), b.to("tpu"), torch.ones(2, device="tpu"), torch.ones((), device="tpu"),
                         out_dtype=torch.float32)
    with pytest.raises(ValueError, match="scal"):
        torch._scaled_mm(a.float().to("tpu"), b.to("tpu"), torch.ones((), device="tpu"), torch.ones((), device="tpu"),
                         out_dtype=torch.float32)
    with pytest.raises(RuntimeError, match="cannot be multiplied"):
        torch._scaled_mm(a.to("tpu"), b[:8].to("tpu"), torch.ones((), device="tpu"), torch.ones((), device="tpu"))


def test_int8_matmul_accumulates_exactly_in_int32():
    """torch._int_mm (torchao's int8 quantized linear layers): int8 x int8
    products summed in int32, equal to CPU's bit for bit (a long K included),
    transposed operands and empty ones; bad shapes and dtypes raise."""
    g = torch.Generator().manual_seed(0)
    for m, k, n in ((5, 8, 3), (33, 4096, 17), (0, 4, 3), (2, 0, 3)):
        a = torch.randint(-128, 128, (m, k), dtype=torch.int8, generator=g)
        b = torch.randint(-128, 128, (k, n), dtype=torch.int8, generator=g)
        got = torch._int_mm(a.to("tpu"), b.to("tpu"))
        assert got.dtype == torch.int32 and torch.equal(got.cpu(), torch._int_mm(a, b))
    a = torch.randint(-128, 128, (8, 5), dtype=torch.int8, generator=g)
    assert torch.equal(torch._int_mm(a.t().to("tpu"), a.to("tpu")).cpu(), torch._int_mm(a.t(), a))
    with pytest.raises(RuntimeError):
        torch._int_mm(torch.ones(2, 3, dtype=torch.int8, device="tpu"), torch.ones(4, 3, dtype=torch.int8, device="tpu"))
    with pytest.raises(RuntimeError):
        torch._int_mm(torch.ones(2, 3, device="tpu"), torch.ones(3, 3, device="tpu"))


# -- matrices holding NaN or inf (issue 49) ----------------------------------

def _holding(value, where, dtype, n=3):
    """A batch of two well-conditioned symmetric n x n matrices, the second
    holding `value` at the positions `where` ("all": everywhere)."""
    a = rand(n, n, seed=3, dtype=torch.float64)
    a = a @ a.T + n * torch.eye(n, dtype=torch.float64)
    bad = a.clone()
    if where == "all":
        bad[:] = value
    for i, j in ([] if where == "all" else where):
        bad[i, j] = value
    return torch.stack([a, bad]).to(dtype)


NAN_AT = [[(0, 0)], [(1, 2), (2, 1)], [(2, 2)], [(0, 1)], [(2, 0)], "all"]


def _same_with_nans(got, want, what):
    got = got.cpu()
    assert got.dtype == want.dtype and got.shape == want.shape, what
    assert torch.equal(got.isnan(), want.isnan()), f"{what}: NaN at\n{got.isnan()}\nCPU:\n{want.isnan()}"
    torch.testing.assert_close(got, want, equal_nan=True, rtol=1e-3, atol=1e-3, msg=lambda m: f"{what}: {m}")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_lu_based_results_of_matrices_holding_nan_are_cpus(dtype):
    """A NaN anywhere in A: inv and solve are NaN everywhere and det is NaN,
    as on CPU (linalg.inv returned a partly finite inverse); lu_factor picks
    LAPACK's pivots (idamax passes a NaN over unless it is the diagonal
    entry, whose NaNs then fill the rest of the factors); slogdet's sign is
    0 (torch.sign of NaN). The clean matrix of the batch is unaffected."""
    for where in NAN_AT:
        a = _holding(float("nan"), where, dtype)
        at = a.to("tpu")
        rhs = torch.ones(2, 3, 2, dtype=dtype)
        _same_with_nans(torch.linalg.inv(at), torch.linalg.inv(a), f"inv {where}")
        _same_with_nans(torch.linalg.inv_ex(at).inverse, torch.linalg.inv_ex(a).inverse, f"inv_ex {where}")
        _same_with_nans(torch.linalg.solve(at, rhs.to("tpu")), torch.linalg.solve(a, rhs), f"solve {where}")
        _same_with_nans(torch.linalg.det(at), torch.linalg.det(a), f"det {where}")
        sign, logabs = torch.linalg.slogdet(at)
        want = torch.linalg.slogdet(a)
        _same_with_nans(sign, want.sign, f"slogdet sign {where}")
        _same_with_nans(logabs, want.logabsdet, f"slogdet logabsdet {where}")
        lu, piv = torch.linalg.lu_factor(at)
        want_lu, want_piv = torch.linalg.lu_factor(a)
        assert torch.equal(piv.cpu(), want_piv), (where, piv.cpu(), want_piv)
        _same_with_nans(lu, want_lu, f"lu_factor {where}")
        for got, want, name in zip(torch.linalg.lu(at), torch.linalg.lu(a), "PLU"):
            _same_with_nans(got, want, f"lu {name} {where}")


def _raises_linalg_error(fn, fragment):
    """fn() raises torch.linalg.LinAlgError (at the read of its result, or
    in debug eager at the call), as on CPU; other tensors read normally."""
    bystander = torch.arange(3.0, device="tpu") * 2
    with pytest.raises(torch.linalg.LinAlgError, match=fragment):
        out = fn()
        for o in out if isinstance(out, (tuple, list)) else [out]:
            o.cpu()
    assert bystander.cpu().tolist() == [0.0, 2.0, 4.0]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_eigh_and_svd_of_matrices_holding_nan_raise_linalg_error(dtype):
    """LAPACK fails on a NaN: eigh and eigvalsh (of the triangle they read),
    and everything CPU computes with the SVD (svd, svdvals, pinv,
    matrix_rank, the spectral and nuclear norms, cond) raise CPU's
    torch.linalg.LinAlgError; a NaN in the triangle eigh does not read
    changes nothing."""
    # (CPU names the batch element too: "linalg.svd: (Batch element 1): The algorithm ...")
    eigh_fragment = "The algorithm failed to converge because the input matrix is ill-conditioned"
    svd_fragment = "The algorithm failed to converge because the input matrix contained non-finite values"
    for where in NAN_AT:
        a = _holding(float("nan"), where, dtype)
        for fn in (torch.linalg.svd, torch.linalg.svdvals, torch.linalg.pinv, torch.linalg.matrix_rank,
                   torch.linalg.cond, lambda x: torch.linalg.matrix_norm(x, 2),
                   lambda x: torch.linalg.matrix_norm(x, "nuc"), lambda x: torch.linalg.svd(torch.cat([x, x], -1), False)):
            with pytest.raises(torch.linalg.LinAlgError, match=svd_fragment):
                fn(a)
            _raises_linalg_error(lambda fn=fn: fn(a.to("tpu")), svd_fragment)
        lower_holds_nan = where == "all" or any(i >= j for i, j in where)
        for uplo in ("L", "U"):
            reads_nan = lower_holds_nan if uplo == "L" else (where == "all" or any(i <= j for i, j in where))
            for fn in (lambda x: torch.linalg.eigh(x, uplo), lambda x: torch.linalg.eigvalsh(x, uplo)):
                if reads_nan:
                    with pytest.raises(torch.linalg.LinAlgError, match=eigh_fragment):
                        fn(a)
                    _raises_linalg_error(lambda fn=fn: fn(a.to("tpu")), eigh_fragment)
                else:
                    close(torch.linalg.eigvalsh(a.to("tpu"), uplo), torch.linalg.eigvalsh(a, uplo))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_matrix_exp_and_lstsq_of_non_finite_matrices_are_nan(dtype):
    """matrix_exp of a matrix holding inf or NaN is NaN everywhere, as on CPU
    (it was partly inf); lstsq's solution for one is NaN (CPU's gelsy gives
    NaN for -inf and fails an internal assert on NaN); a clean matrix of
    the batch is unaffected."""
    for value in (float("nan"), float("inf"), float("-inf")):
        for where in ([(1, 1)], [(0, 2), (2, 0)], "all"):
            a = _holding(value, where, dtype) / 8
            got = torch.linalg.matrix_exp(a.to("tpu")).cpu()
            want = torch.linalg.matrix_exp(a)
            assert want[1].isnan().all() and got[1].isnan().all(), (value, where, got[1])
            close(got[0], want[0], rtol=1e-4, atol=1e-4)
            rhs = torch.ones(2, 3, 2, dtype=dtype)
            x = torch.linalg.lstsq(a.to("tpu"), rhs.to("tpu")).solution.cpu()
            assert x[1].isnan().all(), (value, where, x[1])
            close(x[0], torch.linalg.lstsq(a[:1], rhs[:1]).solution[0], rtol=1e-3, atol=1e-3)
