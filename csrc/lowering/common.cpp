#include "csrc/lowering/common.h"

#include <c10/core/DefaultDtype.h>
#include <c10/core/ScalarTypeToTypeMeta.h>

#include <algorithm>
#include <limits>

namespace tpu::lowering {

at::ScalarType default_float() { return c10::typeMetaToScalarType(c10::get_default_dtype()); }

std::string type_meta_name(at::ScalarType t) { return std::string(c10::scalarTypeToTypeMeta(t).name()); }

Dims arg_shape(Context& c, size_t i) { return c.args.is_tensor(i) ? c.args.info(i).sizes : Dims{}; }

ResultType& promote_arg(ResultType& r, Context& c, size_t i) {
  return c.args.is_tensor(i) ? r.tensor(c.args.info(i)) : r.scalar_kind(c.args.scalar_kind(i));
}

Value operand(Context& c, size_t i, at::ScalarType t, const Dims& dims) {
  Builder& b = c.b;
  Value v = c.args.is_tensor(i) ? cast(b, c.args.tensor(i), t) : c.args.scalar_value(i, to_hlo(t));
  return b.broadcast_to(v, dims);
}

Value operand(Context& c, size_t i, at::ScalarType result, at::ScalarType compute, const Dims& dims) {
  if (result == compute || (c.args.is_tensor(i) && c.args.info(i).dtype == result)) {
    return operand(c, i, compute, dims);
  }
  // Through `compute` first: c10's reduced float types are made from a float,
  // so a double or an int64 is rounded twice on CPU too.
  Builder& b = c.b;
  Value v = c.args.is_tensor(i) ? cast(b, c.args.tensor(i), compute) : c.args.scalar_value(i, to_hlo(compute));
  return b.broadcast_to(cast(b, cast(b, v, result), compute), dims);
}

bool is_scalar_operand(Context& c, size_t i) { return !c.args.is_tensor(i) || c.args.info(i).sizes.empty(); }

Promoted promote2(Context& c, size_t i, size_t j, bool opmath, bool exact_right) {
  ResultType r;
  promote_arg(r, c, i);
  promote_arg(r, c, j);
  Promoted p;
  p.type = r.get();
  p.compute = opmath ? opmath_type(p.type) : p.type;
  p.shape = broadcast_shapes(arg_shape(c, i), arg_shape(c, j));
  p.a = operand(c, i, p.type, p.compute, p.shape);
  p.b = exact_right && is_scalar_operand(c, j) ? operand(c, j, p.compute, p.shape)
                                               : operand(c, j, p.type, p.compute, p.shape);
  return p;
}

Dims reduce_dims(Context& c, size_t dim_arg, int64_t rank) {
  std::vector<int64_t> dims;
  if (c.args.has(dim_arg)) dims = c.args.ints(dim_arg);
  if (dims.empty()) return range(0, rank);
  Dims w = wrap_dims(dims, rank);
  if (rank == 0) return {};
  std::sort(w.begin(), w.end());
  return w;
}

Dims kept_shape(const Dims& sizes, const Dims& dims, bool keepdim) {
  Dims out;
  for (int64_t i = 0; i < static_cast<int64_t>(sizes.size()); ++i) {
    const bool reduced = std::find(dims.begin(), dims.end(), i) != dims.end();
    if (!reduced) {
      out.push_back(sizes[i]);
    } else if (keepdim) {
      out.push_back(1);
    }
  }
  return out;
}

Value contract_major_dims(Builder& b, Value x, Value y, const Dims& batch, DType acc, bool highest) {
  const int64_t nb = static_cast<int64_t>(batch.size());
  const bool vector = b.rank(y) == nb + 1;
  const int64_t m = b.dims(x)[nb + 1], n = vector ? 1 : b.dims(y)[nb + 1];
  if (!vector && m <= n) return b.dot_general(x, y, batch, batch, {nb}, {nb}, acc, highest);
  Value r = b.dot_general(y, x, batch, batch, {nb}, {nb}, acc, highest);  // [batch..., N, M]
  return vector ? r : product_transposed(b, r, nb);
}

Value product_transposed(Builder& b, Value product, int64_t batch_dims) {
  Dims back;
  for (int64_t i = 0; i < batch_dims; ++i) back.push_back(i);
  back.push_back(batch_dims + 1);
  back.push_back(batch_dims);
  // (the barrier keeps the product as written)
  return b.transpose(b.barrier(product), back);
}

Value sum_over(Builder& b, Value x, const Dims& dims) {
  if (dims.empty()) return x;
  const DType dt = b.dtype(x);
  Value zero = dt == DType::Pred ? b.constant_bool(false) : b.constant_int(0, dt);
  return b.reduce(x, zero, dims, dt == DType::Pred ? "stablehlo.or" : "stablehlo.add");
}

Value keep_dims(Builder& b, Value reduced, const Dims& in_sizes, const Dims& dims, bool keepdim) {
  if (!keepdim) return reduced;
  return b.reshape(reduced, kept_shape(in_sizes, dims, true));
}

int64_t count_over(const Dims& sizes, const Dims& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= sizes[d];
  return n;
}

Value splat(Builder& b, Value x, const Dims& dims) { return b.broadcast_to(x, dims); }

void check_all(Context& c, Value ok, const std::string& message) {
  Builder& b = c.b;
  if (b.type(ok).numel() == 0) return;
  Dims all;
  for (int64_t k = 0; k < b.rank(ok); ++k) all.push_back(k);
  if (!all.empty()) ok = b.reduce(ok, b.constant_bool(true), all, "stablehlo.and");
  c.args.check(ok, message + " (" + std::string(c.op) + ")");
  c.checks.push_back(ok);
}

Value skip_unless_checked(Context& c, Value coords) {
  Builder& b = c.b;
  if (c.checks.empty() || b.type(coords).numel() == 0) return coords;
  Value ok = c.checks.front();
  for (size_t k = 1; k < c.checks.size(); ++k) ok = b.and_(ok, c.checks[k]);
  c.gating_checks = c.checks.size();
  if (b.dtype(coords) != DType::I32 && b.dtype(coords) != DType::I64) coords = b.convert(coords, DType::I64);
  const Dims& d = b.dims(coords);
  // Far past any dim, yet no overflow when XLA adds a window's extent.
  Value nowhere = b.broadcast_in_dim(b.constant_int(std::numeric_limits<int32_t>::max(), b.dtype(coords)), d, {});
  return b.select(b.broadcast_in_dim(ok, d, {}), coords, nowhere);
}

void check_index_range(Context& c, Value idx, int64_t size, bool allow_negative, const std::string& message) {
  check_index_range(c, idx, c.b.constant_int(size, DType::I64), allow_negative, message);
}

void check_index_range(Context& c, Value idx, Value size, bool allow_negative, const std::string& message) {
  Builder& b = c.b;
  if (b.type(idx).numel() == 0) return;
  Value i = b.convert(idx, DType::I64);
  const Dims& d = b.dims(i);
  Value n = b.broadcast_in_dim(size, d, {});
  check_all(c, b.and_(b.compare(hlo::Cmp::GE, i, allow_negative ? b.neg(n) : b.zeros(b.type(i))),
                      b.compare(hlo::Cmp::LT, i, n)),
            message);
}

Value dim_size(Context& c, size_t i, int64_t dim) {
  if (!c.args.varies(i, dim)) return c.b.constant_int(c.args.static_size(i, dim), DType::I64);
  return c.b.convert(c.args.run_time_size(i, dim), DType::I64);
}

void unsupported(Context& c, const std::string& what) {
  throw Unsupported(c10::SourceLocation{__func__, __FILE__, static_cast<uint32_t>(__LINE__)},
                    std::string(c.op) + " on the tpu device does not support " + what + ".");
}

// Inclusive scan along `dim` in log2(n) steps (Hillis-Steele).
Value scan(Builder& b, Value x, int64_t dim, std::string_view op, double identity) {
  Value id = b.dtype(x) == DType::Pred ? b.constant_bool(identity != 0) : b.constant(identity, b.dtype(x));
  return scan(b, x, dim, [&](Value later, Value earlier) { return b.binary(op, later, earlier); }, id);
}

Value scan(Builder& b, Value x, int64_t dim, const std::function<Value(Value, Value)>& combine, Value identity) {
  const int64_t n = b.dims(x)[dim];
  const int64_t r = b.rank(x);
  for (int64_t shift = 1; shift < n; shift <<= 1) {
    Dims lo(r, 0), hi(r, 0);
    lo[dim] = shift;
    Value shifted = b.slice_dim(b.pad(x, identity, lo, hi), dim, 0, n);
    x = combine(x, shifted);
  }
  return x;
}

// Slices x[..., idx[j], ...] along d.
Dims range(int64_t from, int64_t to) {
  Dims d;
  for (int64_t i = from; i < to; ++i) d.push_back(i);
  return d;
}

Value any_of(Builder& b, Value p) { return b.reduce(p, b.constant_bool(false), range(0, b.rank(p)), "stablehlo.or"); }

std::vector<Value> rounds_until_done(Builder& b, const std::vector<Value>& init, size_t done, int64_t cap,
                                     const RoundBody& body) {
  std::vector<Value> carried{b.constant_int(0, DType::I64)};
  carried.insert(carried.end(), init.begin(), init.end());
  auto out = b.while_loop(
      carried,
      [&](Builder& rb, const std::vector<Value>& v) {
        return std::vector<Value>{rb.and_(any_of(rb, rb.not_(v[1 + done])),
                                          rb.compare(hlo::Cmp::LT, v[0], rb.constant_int(cap, DType::I64)))};
      },
      [&](Builder& rb, const std::vector<Value>& v) {
        Value n = rb.add(v[0], rb.constant_int(1, DType::I64));
        std::vector<Value> next{n};
        std::vector<Value> rest = body(rb, n, std::vector<Value>(v.begin() + 1, v.end()));
        next.insert(next.end(), rest.begin(), rest.end());
        return next;
      });
  return std::vector<Value>(out.begin() + 1, out.end());
}

Value gather_points(Builder& b, Value x, Value coords) {
  const int64_t rank = b.rank(x);
  Dims out = b.dims(coords);
  out.pop_back();
  Builder::GatherDims dn;
  for (int64_t d = 0; d < rank; ++d) {
    dn.collapsed_slice_dims.push_back(d);
    dn.start_index_map.push_back(d);
  }
  dn.index_vector_dim = static_cast<int64_t>(out.size());
  return b.gather(x, coords, dn, Dims(rank, 1), out);
}

Value take_along(Builder& b, Value x, int64_t d, const std::vector<int64_t>& idx) {
  const int64_t n = static_cast<int64_t>(idx.size());
  Builder::GatherDims dn;
  for (int64_t i = 0; i < b.rank(x); ++i) if (i != d) dn.offset_dims.push_back(i);
  dn.collapsed_slice_dims = {d};
  dn.start_index_map = {d};
  dn.index_vector_dim = 1;
  Dims slice = b.dims(x);
  slice[d] = 1;
  Dims out = b.dims(x);
  out[d] = n;
  return b.gather(x, b.constant_i64s(idx, {n, 1}), dn, slice, out);
}

// Slices of g along d added into positions idx[j] of a length-n dim.
Value add_along(Builder& b, Value g, int64_t d, const std::vector<int64_t>& idx, int64_t n) {
  const int64_t m = static_cast<int64_t>(idx.size());
  Dims sizes = b.dims(g);
  sizes[d] = n;
  Builder::ScatterDims dn;
  dn.inserted_window_dims = {d};
  dn.scatter_dims_to_operand_dims = {d};
  dn.index_vector_dim = 1;
  // Updates must list the scatter dim first: move d to the front.
  Dims perm{d};
  for (int64_t i = 0; i < b.rank(g); ++i) if (i != d) perm.push_back(i);
  Value gt = b.transpose(g, perm);
  for (int64_t i = 1; i < b.rank(g); ++i) dn.update_window_dims.push_back(i);
  return b.scatter(b.zeros(Type{b.dtype(g), sizes}), b.constant_i64s(idx, {m, 1}), gt, dn,
                   [](Builder& rb, const std::vector<Value>& a) { return std::vector<Value>{rb.add(a[0], a[1])}; });
}

}  // namespace tpu::lowering
