"""Compressed sparse layouts on tpu: CSR, CSC, BSR and BSC (dispatch key
SparseCsrPrivateUse1, which the four share).

A compressed tpu tensor is PyTorch's SparseCsrTensorImpl whose compressed
indices, plain indices and values are dense tpu tensors. Its kernels work
on the element entries it stands for (rows, columns, values: what a COO
matrix holds), computed with dense tpu ops, so conversions between the
layouts, ``to_dense``, arithmetic and products are one set of code.
Only 2-D matrices without batch or dense dimensions are served (the
kernels check it and say so), as CPU's conversions from dense require for
the block layouts.
"""

from __future__ import annotations

import torch

from . import _sparse

_COMPRESSED_ROWS = (torch.sparse_csr, torch.sparse_bsr)  # compressed along rows; the others along columns
_BLOCKED = (torch.sparse_bsr, torch.sparse_bsc)


def _check_matrix(t, what):
    torch._check(t.dim() == 2 and (t.layout == torch.strided or t.dense_dim() == 0),
                 lambda: f"{what} on tpu: only 2-D {t.layout} matrices without batch or dense dimensions "
                         f"(got a tensor of size {list(t.shape)})")


def _expand_pointers(compressed, nnz):
    """The compressed dimension's index of each stored element (or block)."""
    k = torch.arange(nnz, dtype=compressed.dtype, device=compressed.device)
    return torch.searchsorted(compressed, k, right=True) - 1


def _indices(t):
    """(compressed, plain) index tensors of a compressed tensor."""
    if t.layout in _COMPRESSED_ROWS:
        return t.crow_indices(), t.col_indices()
    return t.ccol_indices(), t.row_indices()


def entries(t):
    """(rows, cols, values) of a 2-D compressed matrix, one per element it
    stores, in the order CPU's conversion to COO gives (stored order; a
    block's elements row by row)."""
    _check_matrix(t, f"{t.layout} kernels")
    compressed, plain = _indices(t)
    values = t.values()
    n = values.shape[0]
    outer = _expand_pointers(compressed, n)
    rows, cols = (outer, plain) if t.layout in _COMPRESSED_ROWS else (plain, outer)
    if t.layout not in _BLOCKED:
        return rows, cols, values
    r, c = values.shape[1], values.shape[2]
    i = torch.arange(r, dtype=rows.dtype, device=rows.device).view(1, r, 1)
    j = torch.arange(c, dtype=cols.dtype, device=cols.device).view(1, 1, c)
    rows = (rows.view(n, 1, 1) * r + i).expand(n, r, c).reshape(-1)
    cols = (cols.view(n, 1, 1) * c + j).expand(n, r, c).reshape(-1)
    return rows, cols, values.reshape(-1)


def to_coo(self, sparse_dim=None):
    """A compressed tensor as COO: coalesced from CSR, in stored order (not
    coalesced) from the other layouts, as on CPU."""
    torch._check(sparse_dim is None or sparse_dim == 2,
                 lambda: f"to_sparse: a 2-D {self.layout} tensor converts to COO with sparse_dim 2, not {sparse_dim}")
    rows, cols, values = entries(self)
    return _sparse._coo(torch.stack([rows, cols]).to(torch.int64), values, self.shape,
                        self.layout == torch.sparse_csr)


def to_dense(self, dtype=None, masked_grad=None):
    torch._check(dtype is None, lambda: "dtype argument is not supported by sparse_compressed_to_dense")
    rows, cols, values = entries(self)
    dense = torch.zeros(self.shape, dtype=self.dtype, device=self.device)
    if values.shape[0] == 0:
        return dense
    return dense.index_put_((rows, cols), values, accumulate=True)


def _make(compressed, plain, values, size, layout):
    return torch.ops.aten._sparse_compressed_tensor_unsafe(
        compressed, plain, values, list(size), dtype=values.dtype, layout=layout, device=values.device)


def _pointers(outer, count, like):
    """Compressed pointers of sorted outer indices over ``count`` rows or columns."""
    counts = torch.zeros(count, dtype=like.dtype, device=like.device)
    counts.index_add_(0, outer, torch.ones_like(outer))
    return torch.cat([torch.zeros(1, dtype=like.dtype, device=like.device), torch.cumsum(counts, 0)])


def from_coo(coo, layout, blocksize=None):
    """A 2-D COO tensor in a compressed layout (CPU's conversions: entries
    sorted along the compressed dimension; a block layout stores every block
    holding an entry, zeros included)."""
    _check_matrix(coo, f"to {layout}")
    torch._check(coo.sparse_dim() == 2, lambda: f"to {layout}: expected 2 sparse dimensions")
    if layout in _BLOCKED:
        return _from_dense_blocked(coo.to_dense(), layout, blocksize)
    c = coo.coalesce()
    indices, values = c._indices(), c._values()
    if layout == torch.sparse_csc and values.shape[0]:
        # column-major order: sort by (col, row)
        order = torch.argsort(indices[1] * coo.shape[0] + indices[0], stable=True)
        indices, values = indices.index_select(1, order), values.index_select(0, order)
    outer, plain = (indices[0], indices[1]) if layout == torch.sparse_csr else (indices[1], indices[0])
    count = coo.shape[0] if layout == torch.sparse_csr else coo.shape[1]
    return _make(_pointers(outer, count, indices), plain.contiguous(), values.contiguous(), coo.shape, layout)


def _from_dense_blocked(dense, layout, blocksize):
    torch._check(blocksize is not None and len(blocksize) == 2,
                 lambda: f"to {layout}: a blocksize of two numbers is required")
    r, c = blocksize
    m, n = dense.shape
    torch._check(r > 0 and c > 0 and m % r == 0 and n % c == 0,
                 lambda: f"to {layout}: the tensor's size {list(dense.shape)} must be divisible by the "
                         f"blocksize {list(blocksize)}")
    blocks = dense.reshape(m // r, r, n // c, c).transpose(1, 2)  # [R, C, r, c]
    mask = (blocks != 0).flatten(2).any(2)
    if layout == torch.sparse_bsc:
        br, bc = torch.nonzero(mask.t()).t().flip(0)
    else:
        br, bc = torch.nonzero(mask).t()
    values = blocks[br, bc].contiguous()
    outer, plain, count = (br, bc, m // r) if layout == torch.sparse_bsr else (bc, br, n // c)
    return _make(_pointers(outer, count, br), plain.contiguous(), values, dense.shape, layout)


def from_dense(self, layout, blocksize=None, dense_dim=None):
    torch._check(not dense_dim, lambda: f"to {layout} on tpu: dense dimensions are not supported")
    _check_matrix(self, f"to {layout}")
    if layout in _BLOCKED:
        return _from_dense_blocked(self, layout, blocksize)
    return from_coo(_sparse.dense_to_sparse(self, 2), layout)


def _from_sparse(self, layout, blocksize, dense_dim):
    torch._check(not dense_dim, lambda: f"to {layout} on tpu: dense dimensions are not supported")
    if self.layout == layout and layout not in _BLOCKED:
        return self
    return from_coo(self if self.layout == torch.sparse_coo else to_coo(self), layout, blocksize)


def _converters(layout):
    """Kernels of _to_sparse_csr / _csc (dense_dim) and _bsr / _bsc
    (blocksize, dense_dim), from a dense and from a sparse tensor."""
    if layout in _BLOCKED:
        def strided(self, blocksize, dense_dim=None):
            return from_dense(self, layout, blocksize, dense_dim)

        def sparse(self, blocksize, dense_dim=None):
            return _from_sparse(self, layout, blocksize, dense_dim)
    else:
        def strided(self, dense_dim=None):
            return from_dense(self, layout, None, dense_dim)

        def sparse(self, dense_dim=None):
            return _from_sparse(self, layout, None, dense_dim)
    return strided, sparse


def to_sparse(self, *, layout=None, blocksize=None, dense_dim=None):
    """_to_sparse of a compressed tensor: COO, or another compressed layout."""
    if layout in (None, torch.sparse_coo):
        torch._check(not dense_dim, lambda: "to_sparse on tpu: dense dimensions are not supported")
        return to_coo(self)
    return _from_sparse(self, layout, blocksize, dense_dim)


def _same_layout(result, like):
    return result if like.layout == torch.sparse_coo else from_coo(result, like.layout, _blocksize(like))


def _blocksize(t):
    return tuple(t.values().shape[1:3]) if t.layout in _BLOCKED else None


def add(self, other, *, alpha=1):
    """Compressed + compressed stays in the layout; with a dense operand the
    result is dense (CPU's)."""
    if self.layout == torch.strided or other.layout == torch.strided:
        a = self.to_dense() if self.layout != torch.strided else self
        b = other.to_dense() if other.layout != torch.strided else other
        return torch.add(a, b, alpha=alpha)
    torch._check(self.layout == other.layout,
                 lambda: f"add: expected operands of one layout, got {self.layout} and {other.layout}")
    return _same_layout(torch.add(to_coo(self), to_coo(other), alpha=alpha).coalesce(), self)


def add_(self, other, *, alpha=1):
    return self.copy_(add(self, other, alpha=alpha))


def add_out(self, other, *, alpha=1, out):
    return _sparse._set(out, add(self, other, alpha=alpha))


def mul(self, other):
    """The product keeps the compressed operand's entries (CPU's: a
    compressed result, also with a dense operand)."""
    if not isinstance(other, torch.Tensor) or other.dim() == 0 and other.layout == torch.strided:
        return _make(*[x.clone() for x in _indices(self)], self.values() * other, self.shape, self.layout)
    s = self if self.layout != torch.strided else other
    a = to_coo(self) if self.layout != torch.strided else self
    b = to_coo(other) if other.layout != torch.strided else other
    return _same_layout(torch.mul(a, b).coalesce(), s)


def mul_(self, other):
    return self.copy_(mul(self, other))


def mul_out(self, other, *, out):
    return _sparse._set(out, mul(self, other))


def addmv_out(self, mat, vec, *, beta=1, alpha=1, out):
    torch._check(vec.dim() == 1, lambda: f"addmv: vector expected, got {vec.dim()}D")
    result = _sparse.addmm(self.unsqueeze(1), mat, vec.unsqueeze(1), beta=beta, alpha=alpha).squeeze(1)
    return _sparse._set(out, result)


def sampled_addmm(self, mat1, mat2, *, beta=1, alpha=1):
    """beta * self + alpha * (mat1 @ mat2) at self's entries (a CSR result)."""
    torch._check(self.layout == torch.sparse_csr, lambda: f"sampled_addmm: expected a CSR self, got {self.layout}")
    torch._check(mat1.dim() == 2 and mat2.dim() == 2 and mat1.shape[1] == mat2.shape[0]
                 and self.shape == (mat1.shape[0], mat2.shape[1]),
                 lambda: f"sampled_addmm: sizes {list(self.shape)}, {list(mat1.shape)} and {list(mat2.shape)} "
                         "do not match")
    rows, cols, values = entries(self)
    acc_t = _sparse._opmath(values.dtype)
    picked = (mat1.to(acc_t).index_select(0, rows) * mat2.to(acc_t).t().index_select(0, cols)).sum(1)
    out = values.to(acc_t) * beta + picked * alpha
    return _make(*[x.clone() for x in _indices(self)], out.to(values.dtype), self.shape, self.layout)


def sampled_addmm_out(self, mat1, mat2, *, beta=1, alpha=1, out):
    return _sparse._set(out, sampled_addmm(self, mat1, mat2, beta=beta, alpha=alpha))


def register(lib) -> None:
    for layout in (torch.sparse_csr, torch.sparse_csc, torch.sparse_bsr, torch.sparse_bsc):
        name = "_to_sparse_" + str(layout).rsplit("_", 1)[1]
        strided, sparse = _converters(layout)
        lib.impl(name, strided, "PrivateUse1")
        lib.impl(name, sparse, "SparseCsrPrivateUse1")
        lib.impl(name, sparse, "SparsePrivateUse1")
    for name, fn in (
        ("_to_dense", to_dense), ("_to_sparse", to_sparse), ("_to_sparse.sparse_dim", to_coo),
        ("add.Tensor", add), ("add_.Tensor", add_), ("add.out", add_out),
        ("mul.Tensor", mul), ("mul_.Tensor", mul_), ("mul.out", mul_out),
        ("addmv.out", addmv_out),
        ("sparse_sampled_addmm", sampled_addmm), ("sparse_sampled_addmm.out", sampled_addmm_out),
        ("addmm", _sparse.addmm), ("addmm.out", _sparse.addmm_out), ("addmm_", _sparse.addmm_),
    ):
        lib.impl(name, fn, "SparseCsrPrivateUse1")
