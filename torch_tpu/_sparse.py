"""Sparse COO and CSR tensors on tpu (dispatch keys SparsePrivateUse1 and
SparseCsrPrivateUse1).

A sparse tpu tensor is PyTorch's own SparseTensorImpl (or
SparseCsrTensorImpl) whose indices and values are dense tpu tensors. Two
kinds of kernels serve it:

- PyTorch's kernels that only touch metadata or call other ops (creation,
  ``_nnz``, ``_indices``, ``is_coalesced``, ``copy_sparse_to_sparse_``,
  ``clone``, ``sub``...) are registered for SparseCPU, SparseCUDA and
  SparseMeta alike; they are reused here by redispatching to the SparseCPU
  entry, whose code is device-generic.
- The kernels whose CPU versions loop over the data on the host
  (``_coalesce``, sparse ``add``, ``mul``, ``addmm``, ``index_select``,
  ``sparse_mask``, dense <-> sparse conversions) are written here in dense
  tpu ops (sort, cumsum, scatter, index_add, index_put with accumulate), so
  each runs as device programs. Where a result's size depends on the data
  (nnz after coalescing, the nonzeros of a dense tensor) it is read from the
  device once, as CPU's and CUDA's kernels do.

Sparse embedding gradients need one more kernel: _embedding_bag_backward's
tpu autograd kernel sends sparse=True to PyTorch's composite sparse backward
(the dense case keeps its lowering).
"""

from __future__ import annotations

import contextlib

import torch

from . import _sparse_compressed

_lib = None
_SPARSE_CPU = torch._C.DispatchKeySet(torch._C.DispatchKey.SparseCPU)
_SPARSE_CSR_CPU = torch._C.DispatchKeySet(torch._C.DispatchKey.SparseCsrCPU)

# SparseCPU kernels whose code is device-generic (metadata, or calls that
# dispatch again): the same C++ function PyTorch registers for SparseCPU,
# SparseCUDA and SparseMeta.
_COO_GENERIC = (
    "_sparse_coo_tensor_with_dims", "_sparse_coo_tensor_with_dims_and_tensors",
    "_nnz", "_indices", "_values", "_dimI", "_dimV", "sparse_dim", "dense_dim",
    "is_coalesced", "_coalesced_", "indices", "values", "copy_sparse_to_sparse_",
    "sparse_resize_", "sparse_resize_and_clear_", "resize_as_sparse_", "zero_",
    "empty.memory_format", "empty_like", "clone", "sum", "copy_",
    "sub.Tensor", "sub_.Tensor", "sub.out", "mm", "sum.dim_IntList",
    "neg", "neg_", "neg.out", "pow.Tensor_Scalar", "pow.Tensor_Scalar_out",
)
_CSR_GENERIC = (
    "crow_indices", "col_indices", "ccol_indices", "row_indices", "values", "_nnz", "sparse_dim",
    "dense_dim", "empty.memory_format", "empty_like", "clone", "mm", "copy_", "zero_", "fill_.Scalar",
    "neg", "neg_", "neg.out", "mul.Scalar", "mul_.Scalar", "sum",
)
# Functions that map 0 to 0, so a sparse result keeps the input's entries:
# PyTorch's kernels for both layouts apply the function to the values
# (SparseUnaryOps.cpp, SparseCsrTensorMath.cpp), with ATen calls only.
_ZERO_PRESERVING = (
    "abs", "asin", "asinh", "atan", "atanh", "ceil", "deg2rad", "erf", "erfinv", "expm1", "floor", "frac",
    "log1p", "round", "sign", "sgn", "sin", "sinh", "sqrt", "tan", "tanh", "trunc", "relu", "nan_to_num",
    "signbit", "isneginf", "isposinf", "isnan", "isinf", "threshold_backward",
)
# COO shape and reduction kernels written with ATen calls (TensorShape.cpp,
# SparseTensor.cpp): unsqueeze, permute, cat and narrow_copy move indices,
# any reduces the values, mv is an addmm.
_COO_GENERIC_BASES = _ZERO_PRESERVING + (
    "unsqueeze", "permute", "cat", "narrow_copy", "any", "mv",
)


def _op(name: str):
    base, _, overload = name.partition(".")
    return getattr(getattr(torch.ops.aten, base), overload or "default")


def _redispatch(name: str, keyset):
    op = _op(name)
    return lambda *args, **kwargs: op.redispatch(keyset, *args, **kwargs)


# ---------------------------------------------------------------- helpers

def _coo(indices, values, size, coalesced):
    return torch.ops.aten._sparse_coo_tensor_with_dims_and_tensors(
        indices.shape[0], values.dim() - 1, list(size), indices, values,
        dtype=values.dtype, layout=torch.sparse_coo, device=values.device, is_coalesced=coalesced)


def _flatten(indices, sizes):
    """Row-major linear index of each column of ``indices`` in ``sizes``
    (at::sparse::flatten_indices)."""
    lin = torch.zeros(indices.shape[1], dtype=torch.int64, device=indices.device)
    stride = 1
    for d in range(len(sizes) - 1, -1, -1):
        lin = lin + indices[d].to(torch.int64) * stride
        stride *= sizes[d]
    return lin


def _is_one(x):
    return isinstance(x, (int, float, bool)) and x == 1


def _set(out, result):
    """Make ``out`` (an out= argument) equal to ``result``."""
    if out.is_sparse:
        return out.copy_(result)
    if out.shape != result.shape:
        out.resize_(result.shape)
    return out.copy_(result)


# ---------------------------------------------------------------- buckets
#
# The nnz of a sparse gradient changes with every batch (the ids a batch
# holds, how many of them repeat), and a program per nnz would compile at
# every training step. Where the indices and values of a COO tensor are held
# padded (docs/bounded_dynamism.md: their storage holds a bucket of their
# size, as uploaded token ids and embedding-bag results are), the kernels
# below work on the buckets themselves, the entries past nnz masked, and
# give padded results: one program per bucket, not per nnz.

_tt = torch.ops.torch_tpu
_LAST = torch.iinfo(torch.int64).max  # a padding entry's key: sorted after every real one


@contextlib.contextmanager
def _exact_new_tensors():
    """The bucket-sized tensors made here are exact (the new-tensor rule
    would pad them by their sizes, which change with the bucket)."""
    was = _tt._exact_new_tensors(True)
    try:
        yield
    finally:
        _tt._exact_new_tensors(was)


def _bucket(t, dim, pad_exact):
    """``t`` as its bucket along ``dim``: a tensor of the bucket's size there
    (t's elements first, then padding holding anything), its other sizes
    t's. Where t's storage is padded along ``dim`` only, its padded value
    (no program); else, with ``pad_exact``, t padded (a program per size);
    else None."""
    got = _tt._padded_value(t)
    if got:
        b = got[0]
        same = all(b.shape[d] == t.shape[d] for d in range(t.dim()) if d != dim)
        return b if same and b.shape[dim] != t.shape[dim] else None
    if not pad_exact:
        return None
    extra = _tt._bucket_of(t.shape[dim]) - t.shape[dim]
    return torch.constant_pad_nd(t, [0, 0] * (t.dim() - 1 - dim) + [0, extra], 0)


def _buckets(sparse, pad_exact=False):
    """(indices, values, nnz) of a COO tensor as buckets along nnz, where
    bucketing is on, nnz is at least 2, sparse dims exist, values are not
    empty, and at least one of the two is held padded (or ``pad_exact``);
    else None."""
    nnz = sparse._nnz()
    indices, values = sparse._indices(), sparse._values()
    if nnz < 2 or indices.shape[0] == 0 or values.numel() == 0 or not _tt._bucketing():
        return None
    bi, bv = _bucket(indices, 1, False), _bucket(values, 0, False)
    if bi is None and bv is None and not pad_exact:
        return None
    bi = bi if bi is not None else _bucket(indices, 1, True)
    bv = bv if bv is not None else _bucket(values, 0, True)
    if bi is None or bv is None or bi.shape[1] != bv.shape[0]:
        return None
    return bi, bv, nnz


def _valid(k, n, device):
    """[k] bool: which of a bucket's k entries are real (the first n; n is
    a run-time operand of the program, not part of its key)."""
    return torch.arange(k, device=device) < n


def _held(bucket, sizes, dim):
    """The tensor of ``sizes`` whose first ``sizes[dim]`` entries along
    ``dim`` are ``bucket``'s: held padded in its own bucket (narrowed, one
    program per pair of buckets, where that is smaller than ``bucket``'s),
    exact below 2."""
    n = sizes[dim]
    if n < 2:
        return bucket.narrow(dim, 0, n).contiguous()
    k = _tt._bucket_of(n)
    if k != bucket.shape[dim]:
        bucket = bucket.narrow(dim, 0, k).clone()
    return _tt._as_padded(bucket, list(sizes))


def _segments(keys):
    """For sorted ``keys``: which elements start a run of equal keys, and
    each element's run number."""
    n = keys.shape[0]
    new = torch.ones(n, dtype=torch.bool, device=keys.device)
    if n > 1:
        new[1:] = keys[1:] != keys[:-1]
    return new, torch.cumsum(new.to(torch.int64), 0) - 1


def _sum_by_key(keys, indices, values, size, n=None):
    """Sorted unique keys with their columns of ``indices`` and the sums of
    their ``values``: a coalesced COO tensor. With ``n``, the inputs are
    buckets whose first n entries are real, and the result is held padded."""
    k, sd = keys.shape[0], indices.shape[0]
    if n is not None:
        keys = torch.where(_valid(k, n, keys.device), keys, _LAST)
    sorted_keys, perm = torch.sort(keys, stable=True)
    new, seg = _segments(sorted_keys)
    # The result's nnz: one host read, the data-dependent size. (Padding
    # entries share the last run, after every real one.)
    m = int(seg[-1]) + 1 if n is None else int((new & (sorted_keys != _LAST)).sum())
    new_indices = torch.zeros((sd, m if n is None else k), dtype=indices.dtype, device=indices.device)
    if sd:
        new_indices.scatter_(1, seg.unsqueeze(0).expand(sd, -1), indices.index_select(1, perm))
    new_values = values.new_zeros((new_indices.shape[1],) + tuple(values.shape[1:]))
    new_values.index_add_(0, seg, values.index_select(0, perm))
    if n is not None:
        new_indices = _held(new_indices, (sd, m), 1)
        new_values = _held(new_values, (m,) + tuple(values.shape[1:]), 0)
    return _coo(new_indices, new_values, size, True)


# ---------------------------------------------------------------- COO kernels

def coalesce(self):
    """CPU's _coalesce_sparse_cpu: duplicates summed, indices sorted."""
    nnz = self._nnz()
    indices, values = self._indices(), self._values()
    if nnz < 2:
        return _coo(indices.clone(), values.clone(), self.shape, True)
    sd = self.sparse_dim()
    got = _buckets(self, pad_exact=True)
    if got is None:
        return _sum_by_key(_flatten(indices, self.shape[:sd]), indices, values, self.shape)
    bi, bv, n = got
    with _exact_new_tensors():
        return _sum_by_key(_flatten(bi, self.shape[:sd]), bi, bv, self.shape, n)


def _scatter_dense(dense, sparse, alpha):
    """dense += alpha * sparse, in place (duplicates accumulate)."""
    got = _buckets(sparse)
    if got is not None:
        bi, bv, n = got
        with _exact_new_tensors():
            valid = _valid(bi.shape[1], n, bi.device)
            values = bv.to(dense.dtype)
            if not _is_one(alpha):
                values = values * alpha
            # Padding entries add -0 to row 0: x + -0 is x for every x.
            values = torch.where(valid.view((-1,) + (1,) * (values.dim() - 1)), values,
                                 values.new_full((), -0.0))
            return dense.index_put_(tuple(torch.where(valid, i, 0) for i in bi), values, accumulate=True)
    indices, values = sparse._indices(), sparse._values().to(dense.dtype)
    if sparse._nnz() == 0:
        return dense
    if not _is_one(alpha):
        values = values * alpha
    if sparse.sparse_dim() == 0:
        return dense.add_(values.sum(0))
    return dense.index_put_(tuple(indices), values, accumulate=True)


def _check_same_size(a, b, what="add"):
    torch._check(a.shape == b.shape,
                 lambda: f"{what}: expected 'self' and 'other' to have same size, but self has size "
                         f"{list(a.shape)} while other has size {list(b.shape)}")


def _add(self, other, alpha):
    if not self.is_sparse:
        torch._check(not other.is_sparse_csr, lambda: "add(dense, sparse_csr) is not supported")
        _check_same_size(self, other)
        common = torch.result_type(self, other)
        return _scatter_dense(self.to(common, copy=True), other, alpha)
    torch._check(other.is_sparse, lambda: "add(sparse, dense) is not supported. Use add(dense, sparse) instead.")
    torch._check(self.shape == other.shape,
                 lambda: f"add: expected sizes of 'self' and 'other' to match, but {list(self.shape)} != "
                         f"{list(other.shape)}")
    common = torch.promote_types(self.dtype, other.dtype)
    if other._nnz() == 0:
        return _coo(self._indices().clone(), self._values().to(common, copy=True), self.shape, self.is_coalesced())
    if self._nnz() == 0:
        return _coo(other._indices().clone(), other._values().to(common) * alpha, self.shape, other.is_coalesced())
    torch._check(self.sparse_dim() == other.sparse_dim(),
                 lambda: f"add: expected 'self' and 'other' to have same density, but 'self' has "
                         f"{self.sparse_dim()} sparse dimensions while 'other' has {other.sparse_dim()} "
                         "sparse dimensions")
    ov = other._values().to(common)
    if not _is_one(alpha):
        ov = ov * alpha
    indices = torch.cat([self._indices(), other._indices()], 1)
    values = torch.cat([self._values().to(common), ov], 0)
    if self.is_coalesced() and other.is_coalesced():
        # CPU merges the two sorted lists; the merge of sorted unique keys is
        # their sorted union with common keys summed.
        sd = self.sparse_dim()
        return _sum_by_key(_flatten(indices, self.shape[:sd]), indices, values, self.shape)
    # Uncoalesced operands: the concatenation (CUDA's result; CPU's equals it
    # after coalescing).
    return _coo(indices, values, self.shape, False)


def add(self, other, *, alpha=1):
    return _add(self, other, alpha)


def add_(self, other, *, alpha=1):
    if not self.is_sparse:
        _check_same_size(self, other)
        return _scatter_dense(self, other, alpha)
    return self.copy_(_add(self, other, alpha))


def add_out(self, other, *, alpha=1, out):
    if out is self and not self.is_sparse:
        return add_(self, other, alpha=alpha)
    return _set(out, _add(self, other, alpha))


def to_dense(self, dtype=None, masked_grad=None):
    torch._check(dtype is None, lambda: "dtype argument is not supported by sparse_to_dense")
    dense = torch.zeros(self.shape, dtype=self.dtype, device=self.device)
    return _scatter_dense(dense, self, 1)


def dense_to_sparse(self, sparse_dim=None, *, layout=None, blocksize=None, dense_dim=None):
    """CPU's dense_to_sparse: the nonzero positions of the first sparse_dim
    dimensions in row-major order, coalesced."""
    if layout is not None and layout != torch.sparse_coo:
        return _sparse_compressed.from_dense(self, layout, blocksize, dense_dim)
    if sparse_dim is None:
        sparse_dim = self.dim() - (dense_dim or 0)
    torch._check(0 <= sparse_dim <= self.dim(),
                 lambda: f"sparse_dim argument must be in [0,{self.dim()}] range, but {sparse_dim} is given")
    if sparse_dim == 0:
        return _coo(torch.zeros((0, 1), dtype=torch.int64, device=self.device), self.unsqueeze(0).clone(),
                    self.shape, True)
    nz = self != 0
    if sparse_dim < self.dim():
        nz = nz.flatten(sparse_dim).any(sparse_dim)
    indices = torch.nonzero(nz).t().contiguous()
    values = self[tuple(indices)] if indices.shape[1] else self.new_zeros((0,) + tuple(self.shape[sparse_dim:]))
    return _coo(indices, values.contiguous(), self.shape, True)


def to_sparse_default(self, *, layout=None, blocksize=None, dense_dim=None):
    return dense_to_sparse(self, layout=layout, blocksize=blocksize, dense_dim=dense_dim)


def to_sparse_dim(self, sparse_dim):
    return dense_to_sparse(self, sparse_dim)


def _mul_sparse_sparse(self, other):
    """The intersection of two COO tensors, products of matching entries."""
    torch._check(self.shape == other.shape and self.sparse_dim() == other.sparse_dim(),
                 lambda: f"mul(sparse, sparse): operands have incompatible sizes {list(self.shape)} and "
                         f"{list(other.shape)}")
    coalesced = self.is_coalesced() and other.is_coalesced()
    a, b = self.coalesce(), other.coalesce()
    common = torch.promote_types(a.dtype, b.dtype)
    sd = a.sparse_dim()
    if a._nnz() == 0 or b._nnz() == 0:
        return _coo(a._indices()[:, :0].clone(), a._values()[:0].to(common), a.shape, coalesced)
    la, lb = _flatten(a._indices(), a.shape[:sd]), _flatten(b._indices(), b.shape[:sd])
    pos = torch.searchsorted(lb, la).clamp(max=lb.shape[0] - 1)
    keep = torch.nonzero(lb[pos] == la).squeeze(1)
    values = a._values().index_select(0, keep).to(common) * b._values().index_select(0, pos[keep]).to(common)
    return _coo(a._indices().index_select(1, keep), values, a.shape, coalesced)


def _mul(self, other):
    # (A Python number arrives as itself, not as a wrapped 0-dim tensor.)
    if not isinstance(other, torch.Tensor):
        return _coo(self._indices().clone(), self._values() * other, self.shape, self.is_coalesced())
    if not isinstance(self, torch.Tensor):
        return _coo(other._indices().clone(), self * other._values(), other.shape, other.is_coalesced())
    if self.is_sparse and other.is_sparse:
        return _mul_sparse_sparse(self, other)
    s, d = (self, other) if self.is_sparse else (other, self)
    if d.dim() == 0:
        values = s._values() * d if s is self else d * s._values()
        return _coo(s._indices().clone(), values, s.shape, s.is_coalesced())
    torch._check(torch.broadcast_shapes(d.shape, s.shape) == s.shape,
                 lambda: f"mul(sparse, dense): the dense operand's size {list(d.shape)} must broadcast to "
                         f"the sparse operand's {list(s.shape)}")
    sd = s.sparse_dim()
    picked = d.expand(s.shape)[tuple(s._indices())] if sd else d.expand(s.shape).unsqueeze(0)
    values = s._values() * picked if s is self else picked * s._values()
    return _coo(s._indices().clone(), values, s.shape, s.is_coalesced())


def mul(self, other):
    return _mul(self, other)


def mul_(self, other):
    if self.is_sparse and (not isinstance(other, torch.Tensor) or (not other.is_sparse and other.dim() == 0)):
        self._values().mul_(other)
        return self
    if not self.is_sparse:  # dense *= sparse: CPU zeroes self and adds the product
        res = _mul(self, other)
        return _scatter_dense(self.zero_(), res, 1)
    return self.copy_(_mul(self, other))


def mul_out(self, other, *, out):
    return _set(out, _mul(self, other))


def _div(self, other, rounding_mode=None):
    torch._check(not isinstance(other, torch.Tensor) or (other.dim() == 0 and not other.is_sparse),
                 lambda: "Sparse division requires a scalar or zero-dim dense tensor divisor (got shape "
                         f"{list(other.shape)} for divisor)")
    if rounding_mode is not None:  # (rounding is not linear: the duplicates are summed first, as on CPU)
        self = self.coalesce()
    values = torch.div(self._values(), other, rounding_mode=rounding_mode)
    return _coo(self._indices().clone(), values, self.shape, self.is_coalesced())


def div(self, other, *, rounding_mode=None):
    return _div(self, other, rounding_mode)


def div_(self, other, *, rounding_mode=None):
    result = _div(self, other, rounding_mode)  # (checks)
    if rounding_mode is not None and not self.is_coalesced():
        return self.copy_(result)
    self._values().div_(other, rounding_mode=rounding_mode)
    return self


def div_out(self, other, *, rounding_mode=None, out):
    return _set(out, _div(self, other, rounding_mode))


def floor_divide(self, other):
    return _div(self, other, "floor")


def floor_divide_(self, other):
    return div_(self, other, rounding_mode="floor")


def floor_divide_out(self, other, *, out):
    return _set(out, _div(self, other, "floor"))


def index_select(self, dim, index):
    """CPU's index_select on COO: entries whose index along ``dim`` is in
    ``index``, once per occurrence, ordered by position in ``index``."""
    ndim = self.dim()
    dim = dim + ndim if dim < 0 else dim
    torch._check(0 <= dim < max(ndim, 1), lambda: f"index_select(): dim {dim} out of range")
    index = index.reshape(-1).to(device=self.device, dtype=torch.int64)
    sd = self.sparse_dim()
    indices, values = self._indices(), self._values()
    size = list(self.shape)
    size[dim] = index.shape[0]
    if dim >= sd:
        return _coo(indices.clone(), values.index_select(dim - sd + 1, index), size, False)
    nnz, k = self._nnz(), index.shape[0]
    if nnz == 0 or k == 0:
        return _coo(indices[:, :0].clone(), values[:0].clone(), size, False)
    sorted_index, order = torch.sort(index, stable=True)
    key = indices[dim]
    lo = torch.searchsorted(sorted_index, key)
    count = torch.searchsorted(sorted_index, key, right=True) - lo
    ends = torch.cumsum(count, 0)
    total = int(ends[-1])  # the result's nnz
    if total == 0:
        return _coo(indices[:, :0].clone(), values[:0].clone(), size, False)
    j = torch.arange(total, device=self.device)
    entry = torch.searchsorted(ends, j, right=True)
    pos = order[lo[entry] + j - (ends - count)[entry]]
    pos, by_pos = torch.sort(pos, stable=True)
    entry = entry[by_pos]
    new_indices = indices.index_select(1, entry)
    new_indices[dim] = pos
    return _coo(new_indices, values.index_select(0, entry), size, False)


def sparse_mask(self, mask):
    """``self`` at ``mask``'s indices, with ``mask``'s coalescing flag."""
    torch._check(mask.shape == self.shape,
                 lambda: f"sparse_mask(): operands have incompatible sizes; self has size {list(self.shape)} "
                         f"but mask has size {list(mask.shape)}")
    if mask._nnz() == 0:
        return mask.clone().to(self.device, self.dtype)
    dense = self.to_dense() if self.is_sparse else self
    sd = mask.sparse_dim()
    bi = _bucket(mask._indices(), 1, False) if sd and mask._nnz() >= 2 else None
    if bi is not None:  # (the mask's indices held padded: the values gathered at their bucket)
        n = mask._nnz()
        with _exact_new_tensors():
            valid = _valid(bi.shape[1], n, bi.device)
            values = dense[tuple(torch.where(valid, i, 0) for i in bi)]
            return _coo(_held(bi, mask._indices().shape, 1),
                        _held(values.contiguous(), (n,) + tuple(dense.shape[sd:]), 0), self.shape,
                        mask.is_coalesced())
    values = dense[tuple(mask._indices())] if sd else dense.unsqueeze(0).expand_as(mask._values())
    return _coo(mask._indices().clone(), values.contiguous(), self.shape, mask.is_coalesced())


def sparse_sum_backward(grad, self, dim):
    """The gradient of torch.sparse.sum(self, dim): at each stored entry of
    ``self`` (coalesced, as CPU's: a gradient is a tensor, one value per
    position), the gradient at the position it was summed into."""
    self = self.coalesce()
    sd = self.sparse_dim()
    dims = sorted({d % self.dim() for d in dim})
    kept = [d for d in range(sd) if d not in dims]
    indices, nnz = self._indices(), self._nnz()
    if not kept:
        per = (grad.to_dense() if grad.is_sparse else grad).unsqueeze(0)
    elif not grad.is_sparse:
        per = grad[tuple(indices[kept])]
    else:
        g = grad.coalesce()
        sizes = [self.shape[d] for d in kept]
        key, gkey = _flatten(indices[kept], sizes), _flatten(g._indices(), sizes)
        gvalues = g._values()
        if gkey.shape[0] == 0:
            per = gvalues.new_zeros((nnz,) + tuple(gvalues.shape[1:]))
        else:
            pos = torch.searchsorted(gkey, key).clamp(max=gkey.shape[0] - 1)
            hit = (gkey[pos] == key).reshape((-1,) + (1,) * (gvalues.dim() - 1))
            per = torch.where(hit, gvalues.index_select(0, pos), torch.zeros((), dtype=gvalues.dtype,
                                                                             device=gvalues.device))
    for p in (d - sd + 1 for d in dims if d >= sd):
        per = per.unsqueeze(p)
    values = per.expand((nnz,) + tuple(self.shape[sd:])).to(self.dtype).contiguous()
    return _coo(indices.clone(), values, self.shape, self.is_coalesced())


def _entries(m):
    """(rows, cols, values) of a 2-D sparse matrix, COO or compressed."""
    if m.layout != torch.sparse_coo:
        return _sparse_compressed.entries(m)
    torch._check(m.sparse_dim() == 2 and m.dense_dim() == 0,
                 lambda: f"addmm: matrices expected, got {m.sparse_dim()} sparse dims and {m.dense_dim()} "
                         "dense dims")
    i = m._indices()
    return i[0], i[1], m._values()


def _opmath(dtype):
    return torch.float32 if dtype in (torch.bfloat16, torch.float16) else dtype


def addmm(self, mat1, mat2, *, beta=1, alpha=1):
    """beta * self + alpha * (mat1 @ mat2), one operand sparse (COO or CSR):
    each stored element scales a row of the dense operand, summed by
    index_add into its output row (or column)."""
    torch._check(mat1.dim() == 2 and mat2.dim() == 2,
                 lambda: f"addmm: 2-D matrices expected, got {mat1.dim()}D and {mat2.dim()}D tensors")
    torch._check(mat1.shape[1] == mat2.shape[0],
                 lambda: f"mat1 and mat2 shapes cannot be multiplied ({mat1.shape[0]}x{mat1.shape[1]} and "
                         f"{mat2.shape[0]}x{mat2.shape[1]})")
    torch._check(mat1.dtype == mat2.dtype,
                 lambda: f"expected mat1 and mat2 to have the same dtype, but got: {mat1.dtype} != {mat2.dtype}")
    dtype = mat1.dtype
    acc_t = _opmath(dtype)
    m, n = mat1.shape[0], mat2.shape[1]
    if mat1.layout != torch.strided:
        rows, cols, vals = _entries(mat1)
        dense = mat2.to(acc_t)
        acc = torch.zeros((m, n), dtype=acc_t, device=mat2.device)
        if vals.shape[0]:
            acc.index_add_(0, rows, vals.to(acc_t).unsqueeze(1) * dense.index_select(0, cols))
    else:
        rows, cols, vals = _entries(mat2)
        dense = mat1.to(acc_t)
        acc = torch.zeros((m, n), dtype=acc_t, device=mat1.device)
        if vals.shape[0]:
            acc.index_add_(1, cols, dense.index_select(1, rows) * vals.to(acc_t).unsqueeze(0))
    if not _is_one(alpha):
        acc = acc * alpha
    if not (isinstance(beta, (int, float, bool)) and beta == 0):
        base = self.to_dense() if self.layout != torch.strided else self
        acc = acc + (base.to(acc_t) if _is_one(beta) else base.to(acc_t) * beta).expand(m, n)
    return acc.to(dtype)


def addmm_out(self, mat1, mat2, *, beta=1, alpha=1, out):
    return _set(out, addmm(self, mat1, mat2, beta=beta, alpha=alpha))


def addmm_(self, mat1, mat2, *, beta=1, alpha=1):
    return self.copy_(addmm(self, mat1, mat2, beta=beta, alpha=alpha))


def vector_norm(self, ord=2, dim=None, keepdim=False, *, dtype=None):
    """linalg.vector_norm of a COO tensor (what clip_grad_norm_ asks of a
    sparse gradient): of its coalesced values when the implicit zeros
    cannot change it, else of the dense tensor."""
    if dim is None and not keepdim and ord > 0:
        x = self.coalesce()
        got = _buckets(x)
        if got is not None:  # (held padded: the norm of the bucket, its padding zeros)
            _, bv, n = got
            with _exact_new_tensors():
                valid = _valid(bv.shape[0], n, bv.device).view((-1,) + (1,) * (bv.dim() - 1))
                return torch.linalg.vector_norm(torch.where(valid, bv, 0), ord, dtype=dtype)
        return torch.linalg.vector_norm(x._values(), ord, dtype=dtype)
    return torch.linalg.vector_norm(self.to_dense(), ord, dim, keepdim, dtype=dtype)


# ---------------------------------------------------------------- embedding_bag

_BAG_BACKWARD = torch.ops.aten._embedding_bag_backward.default


class _BagBackward(torch.autograd.Function):
    """The dense lowering under a node that refuses double backward, as the
    autograd kernel this one stands in for does."""

    @staticmethod
    def forward(ctx, *args):
        with torch._C._AutoDispatchBelowAutograd():
            return _BAG_BACKWARD(*args)

    @staticmethod
    def backward(ctx, *grads):
        raise RuntimeError("the derivative for '_embedding_bag_backward' is not implemented.")


def embedding_bag_backward(grad, indices, offsets, offset2bag, bag_size, maximum_indices, num_weights,
                           scale_grad_by_freq, mode, sparse, per_sample_weights, padding_idx=-1):
    """The autograd kernel of _embedding_bag_backward on tpu: sparse=True
    takes PyTorch's composite sparse backward (a COO gradient built from
    dense tpu ops), the dense case the lowering."""
    if sparse:
        return torch.ops.aten._embedding_bag_sparse_backward(
            grad, indices, offsets, offset2bag, bag_size, num_weights, scale_grad_by_freq, mode,
            per_sample_weights, padding_idx)
    args = (grad, indices, offsets, offset2bag, bag_size, maximum_indices, num_weights, scale_grad_by_freq,
            mode, sparse, per_sample_weights, padding_idx)
    needs_grad = grad.requires_grad or (per_sample_weights is not None and per_sample_weights.requires_grad)
    if torch.is_grad_enabled() and needs_grad:
        return _BagBackward.apply(*args)
    with torch._C._AutoDispatchBelowAutograd():
        return _BAG_BACKWARD(*args)


# ---------------------------------------------------------------- softmax, products

def _lines(self, dim):
    """For a coalesced COO tensor and a sparse dim: each entry's line along
    ``dim`` (entries equal in every other sparse index share one), and the
    number of lines."""
    sd = self.sparse_dim()
    others = [d for d in range(sd) if d != dim]
    indices = self._indices()
    if not others:
        return torch.zeros(indices.shape[1], dtype=torch.int64, device=self.device), 1
    key = _flatten(indices[others], [self.shape[d] for d in others])
    lines, line = torch.unique(key, return_inverse=True)
    return line, lines.shape[0]


def _line_sums(values, line, count):
    """Each entry's sum of ``values`` over its line (_lines)."""
    at = line.view((-1,) + (1,) * (values.dim() - 1)).expand_as(values)
    return values.new_zeros((count,) + tuple(values.shape[1:])).index_add_(0, line, values).gather(0, at)


def _softmax(self, dim, half_to_float, log):
    torch._check(not half_to_float, lambda: "softmax with half to float conversion is not supported on sparse tensors")
    dim = dim % max(self.dim(), 1)
    x = self.coalesce()
    values, sd = x._values(), x.sparse_dim()
    if dim >= sd:  # a dense dim: every entry's values on their own
        out = (torch.log_softmax if log else torch.softmax)(values, dim - sd + 1)
        return _coo(x._indices().clone(), out, self.shape, True)
    if x._nnz() == 0:
        return _coo(x._indices().clone(), values.clone(), self.shape, True)
    line, count = _lines(x, dim)
    at = line.view((-1,) + (1,) * (values.dim() - 1)).expand_as(values)
    top = values.new_full((count,) + tuple(values.shape[1:]), float("-inf")).scatter_reduce(0, at, values, "amax")
    top = torch.where(torch.isfinite(top), top, torch.zeros((), dtype=top.dtype, device=top.device))
    shifted = values - top.gather(0, at)
    total = _line_sums(shifted.exp(), line, count)
    out = shifted - total.log() if log else shifted.exp() / total
    return _coo(x._indices().clone(), out, self.shape, True)


def sparse_softmax(self, dim, half_to_float):
    """Softmax over the stored entries of each line (the unstored ones are
    -inf, as on CPU): a COO result with the input's coalesced entries."""
    return _softmax(self, dim, half_to_float, False)


def sparse_log_softmax(self, dim, half_to_float):
    return _softmax(self, dim, half_to_float, True)


def _softmax_backward(grad, output, dim, log):
    dim = dim % max(output.dim(), 1)
    out = output.coalesce()
    g = (grad.to_dense() if grad.is_sparse else grad).sparse_mask(out)._values()
    y, sd = out._values(), out.sparse_dim()
    if dim >= sd:
        d = dim - sd + 1
        values = (g - y.exp() * g.sum(d, keepdim=True)) if log else y * (g - (g * y).sum(d, keepdim=True))
        return _coo(out._indices().clone(), values, out.shape, True)
    if out._nnz() == 0:
        return _coo(out._indices().clone(), y.clone(), out.shape, True)
    line, count = _lines(out, dim)
    values = g - y.exp() * _line_sums(g, line, count) if log else y * (g - _line_sums(g * y, line, count))
    return _coo(out._indices().clone(), values, out.shape, True)


def sparse_softmax_backward(grad_output, output, dim, self):
    return _softmax_backward(grad_output, output, dim, False)


def sparse_log_softmax_backward(grad_output, output, dim, self):
    return _softmax_backward(grad_output, output, dim, True)


def bmm(self, mat2):
    """A batch of sparse matrices (COO, 3 sparse dims) times dense ones:
    each entry scales a row of its batch's matrix, summed into its row."""
    torch._check(self.dim() == 3 and mat2.dim() == 3 and self.sparse_dim() == 3,
                 lambda: f"bmm_sparse: expected a 3-D sparse tensor with 3 sparse dims and a 3-D dense one, "
                         f"got sizes {list(self.shape)} and {list(mat2.shape)}")
    torch._check(self.shape[0] == mat2.shape[0] and self.shape[2] == mat2.shape[1],
                 lambda: f"bmm_sparse: the sizes {list(self.shape)} and {list(mat2.shape)} do not match")
    torch._check(self.dtype == mat2.dtype,
                 lambda: f"bmm_sparse: expected the same dtype, got {self.dtype} and {mat2.dtype}")
    acc_t = _opmath(self.dtype)
    out = torch.zeros((self.shape[0], self.shape[1], mat2.shape[2]), dtype=acc_t, device=mat2.device)
    if self._nnz():
        b, i, k = self._indices()
        out.index_put_((b, i), self._values().to(acc_t).unsqueeze(1) * mat2.to(acc_t)[b, k], accumulate=True)
    return out.to(self.dtype)


def bmm_out(self, mat2, *, out):
    return _set(out, bmm(self, mat2))


def _mm(a, b):
    """a @ b, one operand sparse: addmm's product alone."""
    return addmm(torch.zeros((), dtype=a.dtype, device=b.device), a, b, beta=0)


def sparse_sparse_matmul(self, other):
    """sparse @ sparse (2-D COO): the product's structural entries (a pair of
    stored entries meets there, even where the values cancel), coalesced."""
    torch._check(self.dim() == 2 and other.dim() == 2 and self.shape[1] == other.shape[0],
                 lambda: f"sparse matmul: the sizes {list(self.shape)} and {list(other.shape)} do not multiply")
    def ones(t):
        return _coo(t._indices(), torch.ones_like(t._values()), t.shape, t.is_coalesced())
    pattern = _mm(ones(self), ones(other).to_dense())
    product = _mm(self, other.to_dense())
    indices = torch.nonzero(pattern).t().contiguous()
    return _coo(indices, product[tuple(indices)].contiguous(), (self.shape[0], other.shape[1]), True)


def hspmm(mat1, mat2):
    """sparse @ dense as a hybrid COO tensor: the rows of mat1 holding
    entries, with their dense rows of the product."""
    product = _mm(mat1, mat2)
    rows = mat1.coalesce()._indices()[0]
    rows = torch.unique_consecutive(rows) if rows.shape[0] else rows
    return _coo(rows.unsqueeze(0).clone(), product.index_select(0, rows), (mat1.shape[0], mat2.shape[1]), False)


def hspmm_out(mat1, mat2, *, out):
    return _set(out, hspmm(mat1, mat2))


def sspaddmm(self, mat1, mat2, *, beta=1, alpha=1):
    """beta * self + alpha * (mat1 @ mat2), sparse: self's entries, then
    every column of each row of mat1 holding entries (CPU's order, not
    coalesced)."""
    size = (mat1.shape[0], mat2.shape[1])
    torch._check(self.is_sparse and (self.shape == size or self._nnz() == 0),  # (smm passes an empty self)
                 lambda: f"sspaddmm: self must be a sparse tensor of size {list(size)}, got {list(self.shape)}")
    rows_part = hspmm(mat1, mat2)
    rows, p = rows_part._indices()[0], mat2.shape[1]
    product_indices = torch.stack([rows.repeat_interleave(p), torch.arange(p, device=rows.device).repeat(rows.shape[0])])
    if self.shape != size:
        self = _coo(product_indices[:, :0], rows_part._values().new_zeros(0), size, True)
    indices = torch.cat([self._indices(), product_indices], 1)
    values = torch.cat([self._values() * beta, rows_part._values().reshape(-1) * alpha])
    return _coo(indices, values, size, False)


def sspaddmm_out(self, mat1, mat2, *, beta=1, alpha=1, out):
    return _set(out, sspaddmm(self, mat1, mat2, beta=beta, alpha=alpha))


def mm_out(self, mat2, *, out):
    return _set(out, _mm(self, mat2))


def rad2deg(self):
    x = self.coalesce()  # (as the other functions of _ZERO_PRESERVING)
    return _coo(x._indices().clone(), torch.rad2deg(x._values()), self.shape, True)


def rad2deg_(self):
    self._values().rad2deg_()
    return self


def rad2deg_out(self, *, out):
    return _set(out, rad2deg(self))


def _generic(key, bases):
    """The overloads PyTorch registers for ``key`` whose base name is one of
    ``bases``."""
    names = []
    for full in torch._C._dispatch_get_registrations_for_dispatch_key(key):
        ns, _, name = full.partition("::")
        base = name.partition(".")[0]
        if ns == "aten" and (base in bases or base.rstrip("_") in bases):
            names.append(name)
    return names


def register() -> None:
    global _lib
    _lib = torch.library.Library("aten", "IMPL")
    for name in sorted(set(_COO_GENERIC) | set(_generic("SparseCPU", _COO_GENERIC_BASES))):
        _lib.impl(name, _redispatch(name, _SPARSE_CPU), "SparsePrivateUse1")
    for name in sorted(set(_CSR_GENERIC) | set(_generic("SparseCsrCPU", _ZERO_PRESERVING))):
        _lib.impl(name, _redispatch(name, _SPARSE_CSR_CPU), "SparseCsrPrivateUse1")
    for name, fn in (
        ("_coalesce", coalesce),
        ("_to_dense", to_dense),
        ("add.Tensor", add), ("add_.Tensor", add_), ("add.out", add_out),
        ("mul.Tensor", mul), ("mul_.Tensor", mul_), ("mul.out", mul_out),
        ("div.Tensor", div), ("div_.Tensor", div_), ("div.out", div_out),
        ("div.Tensor_mode", div), ("div_.Tensor_mode", div_), ("div.out_mode", div_out),
        ("floor_divide", floor_divide), ("floor_divide_.Tensor", floor_divide_), ("floor_divide.out", floor_divide_out),
        ("index_select", index_select), ("sparse_mask", sparse_mask),
        ("addmm", addmm), ("addmm.out", addmm_out), ("addmm_", addmm_), ("mm.out", mm_out),
        ("bmm", bmm), ("bmm.out", bmm_out), ("_sparse_sparse_matmul", sparse_sparse_matmul),
        ("hspmm", hspmm), ("hspmm.out", hspmm_out), ("sspaddmm.out", sspaddmm_out),
        ("_sparse_softmax", sparse_softmax), ("_sparse_log_softmax", sparse_log_softmax),
        ("_sparse_softmax_backward_data", sparse_softmax_backward),
        ("_sparse_log_softmax_backward_data", sparse_log_softmax_backward),
        ("rad2deg", rad2deg), ("rad2deg_", rad2deg_), ("rad2deg.out", rad2deg_out),
        ("linalg_vector_norm", vector_norm), ("_sparse_sum_backward", sparse_sum_backward),
    ):
        _lib.impl(name, fn, "SparsePrivateUse1")
    for name, fn in (
        ("_to_sparse", to_sparse_default), ("_to_sparse.sparse_dim", to_sparse_dim),
    ):
        _lib.impl(name, fn, "PrivateUse1")
    _lib.impl("_embedding_bag_backward", embedding_bag_backward, "AutogradPrivateUse1")
    _sparse_compressed.register(_lib)
