// Sorting and selection: sort, topk, kthvalue, median, searchsorted and
// bucketize, unique (data-dependent: the number of distinct values is read
// back from the device).
#include "csrc/lowering/common.h"

namespace tpu::lowering {

namespace {

using hlo::Cmp;

// a before b: NaN sorts above every number, equal keys keep their order
// (stable sort).
Value precedes(Builder& b, Value x, Value y, bool descending) {
  if (b.dtype(x) == DType::Pred) {
    return descending ? b.and_(x, b.not_(y)) : b.and_(b.not_(x), y);
  }
  if (!hlo::is_float(b.dtype(x))) return b.compare(descending ? Cmp::GT : Cmp::LT, x, y);
  Value xnan = b.compare(Cmp::NE, x, x), ynan = b.compare(Cmp::NE, y, y);
  if (descending) return b.or_(b.compare(Cmp::GT, x, y), b.and_(xnan, b.not_(ynan)));
  return b.or_(b.compare(Cmp::LT, x, y), b.and_(b.not_(xnan), ynan));
}

std::pair<Value, Value> sort_with_indices(Builder& b, Value x, int64_t dim, bool descending) {
  Value idx = b.iota(Type{DType::I64, b.dims(x)}, dim);
  auto r = b.sort({x, idx}, dim, true, [descending](Builder& rb, const std::vector<Value>& a) {
    return std::vector<Value>{precedes(rb, a[0], a[1], descending)};
  });
  return {r[0], r[1]};
}

// sort.stable(self, *, stable, dim, descending)
std::vector<Value> lower_sort(Context& c) {
  const TensorInfo& in = c.args.info(0);
  Builder& b = c.b;
  Value x = c.args.tensor(0);
  if (in.dim() == 0) return {x, b.constant_int(0, DType::I64)};
  const int64_t dim = wrap_dim(c.args.int_(2), in.dim());
  const bool descending = c.args.bool_(3);
  auto [v, i] = sort_with_indices(b, x, dim, descending);
  return {v, i};
}

// topk(self, k, dim, largest, sorted)
std::vector<Value> lower_topk(Context& c) {
  const TensorInfo& in = c.args.info(0);
  const int64_t kk = c.args.int_(1);
  Builder& b = c.b;
  Value x = c.args.tensor(0);
  const int64_t dim = wrap_dim(c.args.int_(2), in.dim());
  const int64_t n = in.dim() == 0 ? 1 : in.sizes[dim];
  TORCH_CHECK(kk >= 0 && kk <= n, "selected index k out of range");
  if (in.dim() == 0) return {x, b.constant_int(0, DType::I64)};
  const bool largest = c.args.bool_(3);
  auto [v, i] = sort_with_indices(b, x, dim, largest);
  return {b.slice_dim(v, dim, 0, kk), b.slice_dim(i, dim, 0, kk)};
}

// Element `pos` (a per-row i64 value, shape = x without `dim`) along dim.
Value pick_along(Builder& b, Value x, int64_t dim, Value pos) {
  const Dims& sizes = b.dims(x);
  Dims kept;
  for (int64_t d = 0; d < b.rank(x); ++d) if (d != dim) kept.push_back(d);
  Value onehot = b.compare(Cmp::EQ, b.iota(Type{DType::I64, sizes}, dim), b.broadcast_in_dim(pos, sizes, kept));
  if (b.dtype(x) == DType::Pred) {
    return b.reduce(b.and_(onehot, x), b.constant_bool(false), {dim}, "stablehlo.or");
  }
  Value zero = b.zeros(b.type(x));
  Value init = b.zeros(Type{b.dtype(x), {}});
  // NaN-safe: select, then add zeros (a NaN row element only counts when picked).
  return b.reduce(b.select(onehot, x, zero), init, {dim}, "stablehlo.add");
}

// kthvalue(self, k, dim, keepdim)
std::vector<Value> lower_kthvalue(Context& c) {
  const TensorInfo& in = c.args.info(0);
  TORCH_CHECK_NOT_IMPLEMENTED(in.dtype != at::kBool, "\"kthvalue_cpu\" not implemented for 'Bool'");
  const int64_t kk = c.args.int_(1);
  Builder& b = c.b;
  Value x = c.args.tensor(0);
  if (in.dim() == 0) {
    TORCH_CHECK(kk == 1, "kthvalue(): selected number k out of range for dimension 0");
    return {x, b.constant_int(0, DType::I64)};
  }
  const int64_t dim = wrap_dim(c.args.int_(2), in.dim());
  const bool keepdim = c.args.bool_(3);
  TORCH_CHECK(kk >= 1 && kk <= in.sizes[dim], "kthvalue(): selected number k out of range for dimension ", dim);
  auto [v, i] = sort_with_indices(b, x, dim, false);
  Value vk = b.reshape(b.slice_dim(v, dim, kk - 1, kk), kept_shape(in.sizes, {dim}, false));
  Value ik = b.reshape(b.slice_dim(i, dim, kk - 1, kk), kept_shape(in.sizes, {dim}, false));
  return {keep_dims(b, vk, in.sizes, {dim}, keepdim), keep_dims(b, ik, in.sizes, {dim}, keepdim)};
}

// The lower median along dim; NaN when the row has one (median) or the
// median of the non-NaN values (nanmedian).
std::pair<Value, Value> median_along(Builder& b, Value x, int64_t dim, bool ignore_nan) {
  const Dims& sizes = b.dims(x);
  const int64_t n = sizes[dim];
  auto [v, i] = sort_with_indices(b, x, dim, false);
  Dims row = kept_shape(sizes, {dim}, false);
  Value pos;
  if (ignore_nan && hlo::is_float(b.dtype(x))) {
    Value ok = b.convert(b.compare(Cmp::EQ, x, x), DType::I64);
    Value m = b.reduce(ok, b.constant_int(0, DType::I64), {dim}, "stablehlo.add");
    // (m - 1) / 2, and 0 for an all-NaN row.
    pos = b.div(b.max(b.sub(m, b.full_int(1, DType::I64, row)), b.zeros(Type{DType::I64, row})),
                b.full_int(2, DType::I64, row));
  } else {
    pos = b.full_int((n - 1) / 2, DType::I64, row);
  }
  Value mv = pick_along(b, v, dim, pos);
  Value mi = pick_along(b, i, dim, pos);
  if (!ignore_nan && hlo::is_float(b.dtype(x))) {
    // A NaN anywhere: the median is that NaN (the first one, as on CPU).
    Value isnan = b.compare(Cmp::NE, x, x);
    Value any = b.reduce(isnan, b.constant_bool(false), {dim}, "stablehlo.or");
    Value first_nan = b.reduce(b.select(isnan, b.iota(Type{DType::I64, sizes}, dim), b.full_int(n, DType::I64, sizes)),
                               b.constant_int(n, DType::I64), {dim}, "stablehlo.minimum");
    mv = b.select(any, b.full(NAN, b.dtype(mv), row), mv);
    mi = b.select(any, first_nan, mi);
  }
  return {mv, mi};
}

std::vector<Value> lower_median_all(Context& c, bool ignore_nan) {
  const TensorInfo& in = c.args.info(0);
  TORCH_CHECK_NOT_IMPLEMENTED(in.dtype != at::kBool, "\"median_cpu\" not implemented for 'Bool'");
  Builder& b = c.b;
  if (in.numel() == 0) return one(b.full(NAN, to_hlo(in.dtype), {}));
  Value flat = b.reshape(c.args.tensor(0), {in.numel()});
  return one(median_along(b, flat, 0, ignore_nan).first);
}

std::vector<Value> lower_median_dim(Context& c, bool ignore_nan) {
  const TensorInfo& in = c.args.info(0);
  TORCH_CHECK_NOT_IMPLEMENTED(in.dtype != at::kBool, "\"median_out\" not implemented for 'Bool'");
  Builder& b = c.b;
  Value x = c.args.tensor(0);
  if (in.dim() == 0) return {x, b.constant_int(0, DType::I64)};
  const int64_t dim = wrap_dim(c.args.int_(1), in.dim());
  const bool keepdim = c.args.bool_(2);
  TORCH_CHECK_INDEX(in.sizes[dim] > 0, "median() cannot compute median for a dimension of size 0");
  auto [v, i] = median_along(b, x, dim, ignore_nan);
  return {keep_dims(b, v, in.sizes, {dim}, keepdim), keep_dims(b, i, in.sizes, {dim}, keepdim)};
}

// mode(self, dim, keepdim): the most frequent value along dim (the smallest
// on ties, as on CPU) and the last index holding it.
std::vector<Value> lower_mode(Context& c) {
  const TensorInfo& in = c.args.info(0);
  Builder& b = c.b;
  Value x = c.args.tensor(0);
  if (in.dim() == 0) return {x, b.constant_int(0, DType::I64)};
  const int64_t dim = wrap_dim(c.args.int_(1), in.dim());
  const bool keepdim = c.args.bool_(2);
  TORCH_CHECK_INDEX(in.sizes[dim] > 0, "mode(): Expected reduction dim ", dim, " to have non-zero size.");
  const int64_t n = in.sizes[dim];
  const Dims& sizes = in.sizes;
  auto [v, i] = sort_with_indices(b, x, dim, false);  // stable: equal values keep index order
  // Where each run of equal values starts, and each element's rank within its run.
  Value prev = b.slice_dim(b.pad(v, b.zeros(Type{b.dtype(v), {}}), [&] {
    Dims lo(in.dim(), 0);
    lo[dim] = 1;
    return lo;
  }(), Dims(in.dim(), 0)), dim, 0, n);
  Value pos = b.iota(Type{DType::I64, sizes}, dim);
  Value differs = b.dtype(v) == DType::Pred ? b.xor_(prev, v) : b.compare(Cmp::NE, prev, v);
  Value starts = b.or_(differs, b.compare(Cmp::EQ, pos, b.zeros(Type{DType::I64, sizes})));
  Value run_start = scan(b, b.select(starts, pos, b.zeros(Type{DType::I64, sizes})), dim, "stablehlo.maximum", 0);
  Value count = b.add(b.sub(pos, run_start), b.full_int(1, DType::I64, sizes));
  // The first position reaching the highest count ends the smallest modal run.
  Dims kept;
  for (int64_t d = 0; d < in.dim(); ++d) if (d != dim) kept.push_back(d);
  Value best = b.reduce(count, b.constant_int(0, DType::I64), {dim}, "stablehlo.maximum");
  Value at_best = b.compare(Cmp::EQ, count, b.broadcast_in_dim(best, sizes, kept));
  Value end = b.reduce(b.select(at_best, pos, b.full_int(n, DType::I64, sizes)), b.constant_int(n, DType::I64), {dim},
                       "stablehlo.minimum");
  Value mv = pick_along(b, v, dim, end), mi = pick_along(b, i, dim, end);
  return {keep_dims(b, mv, sizes, {dim}, keepdim), keep_dims(b, mi, sizes, {dim}, keepdim)};
}

// searchsorted(sorted_sequence, self, out_int32, right, side, sorter):
// the count of sequence entries before each value.
Value bucket_count(Builder& b, Value seq, Value v, bool right) {
  const Dims& sd = b.dims(seq);
  const Dims& vd = b.dims(v);
  const int64_t m = sd.back();
  const int64_t vr = b.rank(v);
  Dims full = vd;
  full.push_back(m);
  Value vb = b.broadcast_in_dim(v, full, [&] {
    Dims d;
    for (int64_t i = 0; i < vr; ++i) d.push_back(i);
    return d;
  }());
  Value sb;
  if (sd.size() == 1) {
    sb = b.broadcast_in_dim(seq, full, {vr});
  } else {
    // Leading dims of seq match v's: seq [*, m] against v [*, k].
    Dims d;
    for (int64_t i = 0; i < static_cast<int64_t>(sd.size()) - 1; ++i) d.push_back(i);
    d.push_back(vr);
    sb = b.broadcast_in_dim(seq, full, d);
  }
  Value before = right ? b.compare(Cmp::LE, sb, vb) : b.compare(Cmp::LT, sb, vb);
  return b.reduce(b.convert(before, DType::I64), b.constant_int(0, DType::I64), {vr}, "stablehlo.add");
}

std::vector<Value> lower_searchsorted(Context& c) {
  const TensorInfo& seq = c.args.info(0);
  const bool out_int32 = c.args.bool_(2);
  bool right = c.args.bool_(3);
  if (c.args.has(4)) {
    const std::string side = c.args.string(4);
    TORCH_CHECK(side == "left" || side == "right", "side can only be 'left' or 'right' but got ", side);
    TORCH_CHECK(!(side == "left" && right), "torch.searchsorted(): side and right can't be set to opposites, got side of left while right was True");
    right = side == "right";
  }
  Builder& b = c.b;
  ResultType r;
  r.tensor(seq);
  promote_arg(r, c, 1);
  const at::ScalarType t = r.get();
  Value s = cast(b, c.args.tensor(0), t);
  if (c.args.has(5) && seq.numel() > 0) {
    // Sort the sequence by `sorter` along its last dim.
    Value sorter = b.convert(c.args.tensor(5), DType::I64);
    const Dims& sd = b.dims(s);
    const int64_t last = static_cast<int64_t>(sd.size()) - 1;
    Dims with_one = sd;
    with_one.push_back(1);
    std::vector<Value> parts;
    for (int64_t d = 0; d < static_cast<int64_t>(sd.size()); ++d) {
      parts.push_back(b.reshape(d == last ? sorter : b.iota(Type{DType::I64, sd}, d), with_one));
    }
    Builder::GatherDims dn;
    for (int64_t d = 0; d < static_cast<int64_t>(sd.size()); ++d) {
      dn.collapsed_slice_dims.push_back(d);
      dn.start_index_map.push_back(d);
    }
    dn.index_vector_dim = static_cast<int64_t>(sd.size());
    s = b.gather(s, b.concatenate(parts, static_cast<int64_t>(sd.size())), dn, Dims(sd.size(), 1), sd);
  }
  Value v = c.args.is_tensor(1) ? cast(b, c.args.tensor(1), t) : c.args.scalar_value(1, to_hlo(t));
  if (seq.sizes.back() == 0) {  // nothing to search: every value lands at 0
    Value z = b.zeros(Type{DType::I64, b.dims(v)});
    return one(out_int32 ? b.convert(z, DType::I32) : z);
  }
  Value cnt = bucket_count(b, s, v, right);
  return one(out_int32 ? b.convert(cnt, DType::I32) : cnt);
}

// bucketize(self, boundaries, out_int32, right)
std::vector<Value> lower_bucketize(Context& c) {
  Builder& b = c.b;
  ResultType r;
  promote_arg(r, c, 0);
  r.tensor(c.args.info(1));
  const at::ScalarType t = r.get();
  Value v = c.args.is_tensor(0) ? cast(b, c.args.tensor(0), t) : c.args.scalar_value(0, to_hlo(t));
  Value bounds = cast(b, c.args.tensor(1), t);
  TORCH_CHECK(b.rank(bounds) == 1, "boundaries tensor must be 1 dimension, but got dim(", b.rank(bounds), ")");
  Value cnt = bucket_count(b, bounds, v, c.args.bool_(3));
  return one(c.args.bool_(2) ? b.convert(cnt, DType::I32) : cnt);
}

// Row i of x [n, k] before row j in lexicographic order (NaN last per entry).
Value rows_precede(Builder& b, const std::vector<Value>& a, int64_t k) {
  // a = (lhs_0, rhs_0, lhs_1, rhs_1, ...): decide on the first differing column.
  Value result = b.constant_bool(false);
  for (int64_t j = k - 1; j >= 0; --j) {
    Value lt = precedes(b, a[2 * j], a[2 * j + 1], false);
    Value gt = precedes(b, a[2 * j + 1], a[2 * j], false);
    result = b.select(b.or_(lt, gt), lt, result);
  }
  return result;
}

// The distinct rows of x [n, k] (sorted, or consecutive runs only): values
// [count, k], inverse [n] (the group of each input row) and counts [count].
// The number of groups is read back from the device.
std::vector<Value> unique_rows(Context& c, Value x, bool sort_first) {
  Builder& b = c.b;
  const int64_t n = b.dims(x)[0], k = b.dims(x)[1];
  const DType dt = b.dtype(x);
  Value order = b.iota(Type{DType::I64, {n}}, 0);
  if (sort_first) {
    std::vector<Value> cols;
    for (int64_t j = 0; j < k; ++j) cols.push_back(b.reshape(b.slice(x, {0, j}, {n, j + 1}), {n}));
    cols.push_back(order);
    auto sorted = b.sort(cols, 0, true, [k](Builder& rb, const std::vector<Value>& a) {
      return std::vector<Value>{rows_precede(rb, a, k)};
    });
    order = sorted.back();
    sorted.pop_back();
    std::vector<Value> parts;
    for (Value col : sorted) parts.push_back(b.reshape(col, {n, 1}));
    x = b.concatenate(parts, 1);
  }
  // A run starts where a row differs from its predecessor (NaNs all differ,
  // as on the CPU).
  Value prev = b.slice(x, {0, 0}, {n - 1, k});
  Value cur = b.slice(x, {1, 0}, {n, k});
  Value differs = dt == DType::Pred ? b.xor_(prev, cur) : b.compare(Cmp::NE, prev, cur);
  differs = b.reduce(differs, b.constant_bool(false), {1}, "stablehlo.or");
  Value starts = b.concatenate({b.broadcast_in_dim(b.constant_bool(true), {1}, {}), differs}, 0);
  Value group = b.sub(scan(b, b.convert(starts, DType::I64), 0, "stablehlo.add", 0), b.full_int(1, DType::I64, {n}));
  const int64_t count = c.args.host_int(b.reduce(b.convert(starts, DType::I64), b.constant_int(0, DType::I64), {0},
                                                 "stablehlo.add"));
  Builder::ScatterDims rows_dn;
  rows_dn.update_window_dims = {1};
  rows_dn.inserted_window_dims = {0};
  rows_dn.scatter_dims_to_operand_dims = {0};
  rows_dn.index_vector_dim = 1;
  Builder::ScatterDims dn;
  dn.inserted_window_dims = {0};
  dn.scatter_dims_to_operand_dims = {0};
  dn.index_vector_dim = 1;
  // values[group] = row (all rows of a group are equal; any write wins).
  Value slot = b.reshape(group, {n, 1});
  Value values = b.scatter(b.zeros(Type{dt, {count, k}}), slot, x, rows_dn, nullptr);
  // inverse[order[j]] = group[j]
  Value inverse = b.scatter(b.zeros(Type{DType::I64, {n}}), b.reshape(order, {n, 1}), group, dn, nullptr);
  Value counts = b.scatter(b.zeros(Type{DType::I64, {count}}), slot, b.full_int(1, DType::I64, {n}), dn,
                           [](Builder& rb, const std::vector<Value>& a) { return std::vector<Value>{rb.add(a[0], a[1])}; });
  return {values, inverse, counts};
}

// unique over the flattened input: (values, inverse, counts), the last two
// empty unless asked for.
std::vector<Value> unique_flat(Context& c, bool sort_first, bool want_inverse, bool want_counts) {
  c.args.output_depends_on_data();
  const TensorInfo& in = c.args.info(0);
  Builder& b = c.b;
  const int64_t n = in.numel();
  const DType dt = to_hlo(in.dtype);
  Value none = b.zeros(Type{DType::I64, {0}});
  if (n == 0) return {b.zeros(Type{dt, {0}}), want_inverse ? b.zeros(Type{DType::I64, in.sizes}) : none, none};
  std::vector<Value> r = unique_rows(c, b.reshape(c.args.tensor(0), {n, 1}), sort_first);
  return {b.reshape(r[0], {b.dims(r[0])[0]}), want_inverse ? b.reshape(r[1], in.sizes) : none,
          want_counts ? r[2] : none};
}

// unique along dim: the distinct slices x[..., i, ...] (values, inverse,
// counts); inverse and counts always come back.
std::vector<Value> unique_along(Context& c, int64_t dim_arg, bool sort_first) {
  c.args.output_depends_on_data();
  const TensorInfo& in = c.args.info(0);
  Builder& b = c.b;
  const int64_t dim = wrap_dim(c.args.int_(dim_arg), in.dim());
  const int64_t n = in.dim() == 0 ? 1 : in.sizes[dim];
  int64_t k = 1;
  for (int64_t d = 0; d < in.dim(); ++d) {
    if (d != dim) k *= in.sizes[d];
  }
  if (n == 0) {
    return {c.args.tensor(0), b.zeros(Type{DType::I64, {0}}), b.zeros(Type{DType::I64, {0}})};
  }
  TORCH_CHECK(k > 0, "There are 0 sized dimensions, and they aren't selected, so unique cannot be applied");
  // Move dim to the front: rows are the slices.
  Dims perm{dim};
  for (int64_t d = 0; d < in.dim(); ++d) if (d != dim) perm.push_back(d);
  Value x = in.dim() == 0 ? b.reshape(c.args.tensor(0), {1, 1}) : b.reshape(b.transpose(c.args.tensor(0), perm), {n, k});
  std::vector<Value> r = unique_rows(c, x, sort_first);
  const int64_t count = b.dims(r[0])[0];
  if (in.dim() == 0) return {b.reshape(r[0], {}), r[1], r[2]};
  Dims moved{count};
  for (int64_t d = 0; d < in.dim(); ++d) if (d != dim) moved.push_back(in.sizes[d]);
  Dims back(in.dim());
  for (int64_t i = 0; i < in.dim(); ++i) back[perm[i]] = i;
  return {b.transpose(b.reshape(r[0], moved), back), r[1], r[2]};
}

}  // namespace

TPU_LOWERINGS(sort) {
  reg("aten::sort.stable", lower_sort);
  reg("aten::topk", lower_topk);
  reg("aten::kthvalue", lower_kthvalue);
  reg("aten::mode", lower_mode);
  reg("aten::median", [](Context& c) { return lower_median_all(c, false); });
  reg("aten::nanmedian", [](Context& c) { return lower_median_all(c, true); });
  reg("aten::median.dim", [](Context& c) { return lower_median_dim(c, false); });
  reg("aten::nanmedian.dim", [](Context& c) { return lower_median_dim(c, true); });
  reg("aten::searchsorted.Tensor", lower_searchsorted);
  reg("aten::searchsorted.Scalar", lower_searchsorted);
  reg("aten::bucketize.Tensor", lower_bucketize);
  reg("aten::bucketize.Scalar", lower_bucketize);
  // _unique2(self, sorted, return_inverse, return_counts)
  reg("aten::_unique2", [](Context& c) { return unique_flat(c, true, c.args.bool_(2), c.args.bool_(3)); });
  // _unique(self, sorted, return_inverse) -> (values, inverse)
  reg("aten::_unique", [](Context& c) {
    auto r = unique_flat(c, true, c.args.bool_(2), false);
    return std::vector<Value>{r[0], r[1]};
  });
  // unique_consecutive(self, return_inverse, return_counts, dim?)
  reg("aten::unique_consecutive", [](Context& c) {
    if (c.args.has(3)) {
      std::vector<Value> r = unique_along(c, 3, false);
      Value none = c.b.zeros(Type{DType::I64, {0}});
      return std::vector<Value>{r[0], c.args.bool_(1) ? r[1] : none, c.args.bool_(2) ? r[2] : none};
    }
    return unique_flat(c, false, c.args.bool_(1), c.args.bool_(2));
  });
  // unique_dim(self, dim, sorted, return_inverse, return_counts)
  reg("aten::unique_dim", [](Context& c) { return unique_along(c, 1, true); });
  // unique_dim_consecutive(self, dim, return_inverse, return_counts)
  reg("aten::unique_dim_consecutive", [](Context& c) { return unique_along(c, 1, false); });
}

}  // namespace tpu::lowering
