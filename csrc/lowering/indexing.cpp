// Indexing: advanced indexing (index, index_put), index_select, gather,
// scatter family, masked ops, take/put, index_add/copy/fill, embedding
// backward, and the data-dependent nonzero and masked_select.
#include "csrc/lowering/common.h"

namespace tpu::lowering {

namespace {

using hlo::Cmp;

Value i64(Builder& b, Value v) { return b.convert(v, DType::I64); }

// idx < 0 ? idx + size : idx (size: i64, rank 0)
Value wrap_index(Builder& b, Value idx, Value size) {
  idx = i64(b, idx);
  Value zero = b.zeros(b.type(idx));
  return b.select(b.compare(Cmp::LT, idx, zero), b.add(idx, b.broadcast_in_dim(size, b.dims(idx), {})), idx);
}

Value wrap_index(Builder& b, Value idx, int64_t size) { return wrap_index(b, idx, b.constant_int(size, DType::I64)); }

// Coordinates for an elementwise gather/scatter along `dim` with `index`
// (whose shape is the iteration space): [*index.shape, rank].
Value full_coordinates(Builder& b, Value index, int64_t dim, int64_t rank) {
  const Dims& shape = b.dims(index);
  Dims with_one = shape;
  with_one.push_back(1);
  std::vector<Value> parts;
  for (int64_t d = 0; d < rank; ++d) {
    Value coord = d == dim ? i64(b, index) : b.iota(Type{DType::I64, shape}, d);
    parts.push_back(b.reshape(coord, with_one));
  }
  return b.concatenate(parts, static_cast<int64_t>(shape.size()));
}



// Element-wise scatter of `updates` (shape = coords without the last dim).
Value scatter_points(Builder& b, Value x, Value coords, Value updates, const Builder::RegionBody& combiner) {
  const int64_t rank = b.rank(x);
  Builder::ScatterDims dn;
  dn.inserted_window_dims = range(0, rank);
  dn.scatter_dims_to_operand_dims = range(0, rank);
  dn.index_vector_dim = b.rank(updates);
  return b.scatter(x, coords, updates, dn, combiner);
}

Builder::RegionBody combiner(const std::string& reduce, DType dt) {
  if (reduce.empty() || reduce == "none") return nullptr;
  std::string op;
  if (reduce == "add" || reduce == "sum" || reduce == "mean") {
    op = dt == DType::Pred ? "stablehlo.or" : "stablehlo.add";
  } else if (reduce == "multiply" || reduce == "prod") {
    op = dt == DType::Pred ? "stablehlo.and" : "stablehlo.multiply";
  } else if (reduce == "amax") {
    op = "stablehlo.maximum";
  } else if (reduce == "amin") {
    op = "stablehlo.minimum";
  } else {
    TORCH_CHECK(false, "reduce argument must be either sum, prod, mean, amax or amin, got ", reduce);
  }
  return [op](Builder& rb, const std::vector<Value>& a) { return std::vector<Value>{rb.binary(op, a[0], a[1])}; };
}

// ---- advanced indexing -------------------------------------------------------------

Value true_positions(Context& c, Value flat_mask, int64_t* count);

struct AdvancedIndex {
  std::vector<int64_t> dims;   // indexed dims of self, increasing
  Value coords;                // [*B, dims.size()] i64
  Dims batch;                  // B
  bool adjacent = true;        // indexed dims contiguous: B goes in place
  Dims result;                 // shape of self[indices]
};

// self[indices] for Tensor?[] indices (None entries are full slices; bool
// masks select their nonzero positions, which needs their count).
// Flat positions [k] in a tensor of `sizes` -> one coordinate [k] per dim.
// (A zero-size dim holds no position, so its stride may be anything: the
// strides are products of the later sizes, clamped to 1, never a quotient.)
std::vector<Value> unravel_dims(Builder& b, Value pos, const Dims& sizes) {
  const int64_t k = b.dims(pos)[0];
  const int64_t r = static_cast<int64_t>(sizes.size());
  std::vector<int64_t> strides(r, 1);
  for (int64_t d = r - 2; d >= 0; --d) strides[d] = strides[d + 1] * std::max<int64_t>(sizes[d + 1], 1);
  std::vector<Value> coords;
  for (int64_t d = 0; d < r; ++d) {
    coords.push_back(b.rem(b.div(pos, b.full_int(strides[d], DType::I64, {k})), b.full_int(sizes[d], DType::I64, {k})));
  }
  return coords;
}

// The same as coordinates [k, rank].
Value unravel(Builder& b, Value pos, const Dims& sizes) {
  const int64_t k = b.dims(pos)[0];
  std::vector<Value> cols;
  for (Value coord : unravel_dims(b, pos, sizes)) cols.push_back(b.reshape(coord, {k, 1}));
  return b.concatenate(cols, 1);
}

AdvancedIndex advanced_index(Context& c, size_t self_arg, size_t indices_arg) {
  Builder& b = c.b;
  const TensorInfo& self = c.args.info(self_arg);
  std::vector<TensorInfo> infos = c.args.infos(indices_arg);
  std::vector<Value> values = c.args.tensors(indices_arg);
  TORCH_CHECK_INDEX(static_cast<int64_t>(infos.size()) <= self.dim(), "too many indices for tensor of dimension ",
                    self.dim(), " (got ", infos.size(), ")");
  // Expand masks into one long index per masked dim.
  std::vector<std::optional<Value>> per_dim;
  for (size_t i = 0; i < infos.size(); ++i) {
    if (!values[i].valid()) {
      per_dim.push_back(std::nullopt);
      continue;
    }
    const at::ScalarType t = infos[i].dtype;
    if (t == at::kBool || t == at::kByte) {
      const int64_t start = static_cast<int64_t>(per_dim.size());
      for (int64_t k = 0; k < infos[i].dim(); ++k) {
        TORCH_CHECK_INDEX(infos[i].sizes[k] == self.sizes[start + k], "The shape of the mask ",
                          dims_string(infos[i].sizes), " at index ", k,
                          " does not match the shape of the indexed tensor ", dims_string(self.sizes),
                          " at index ", start + k);
      }
      Value mask = b.dtype(values[i]) == DType::Pred ? values[i]
                                                     : b.compare(Cmp::NE, values[i], b.zeros(b.type(values[i])));
      Value flat = b.reshape(mask, {infos[i].numel()});
      int64_t n = 0;
      Value picked = true_positions(c, flat, &n);
      // Unravel flat positions into per-dim coordinates.
      for (Value coord : unravel_dims(b, picked, infos[i].sizes)) per_dim.push_back(coord);
      continue;
    }
    TORCH_CHECK_INDEX(c10::isIntegralType(t, false),
                      "tensors used as indices must be long, int, byte or bool tensors");
    per_dim.push_back(values[i]);
  }
  AdvancedIndex ai;
  Dims batch;
  bool first = true;
  for (size_t d = 0; d < per_dim.size(); ++d) {
    if (!per_dim[d]) continue;
    batch = first ? b.dims(*per_dim[d]) : broadcast_shapes(batch, b.dims(*per_dim[d]));
    first = false;
    if (!ai.dims.empty() && ai.dims.back() != static_cast<int64_t>(d) - 1) ai.adjacent = false;
    ai.dims.push_back(static_cast<int64_t>(d));
  }
  ai.batch = batch;
  Dims with_one = batch;
  with_one.push_back(1);
  std::vector<Value> parts;
  for (int64_t d : ai.dims) {
    // (a bucketed program's padded self: its run-time size)
    const Value size = dim_size(c, self_arg, d);
    check_index_range(c, *per_dim[d], size, true,
                      "index out of bounds for dimension " + std::to_string(d) + " with size " +
                          c.args.size_text(self_arg, d));
    Value idx = wrap_index(b, b.broadcast_to(*per_dim[d], batch), size);
    parts.push_back(b.reshape(idx, with_one));
  }
  ai.coords = parts.empty() ? Value{} : b.concatenate(parts, static_cast<int64_t>(batch.size()));
  // Result shape.
  if (ai.adjacent && !ai.dims.empty()) {
    for (int64_t d = 0; d < ai.dims.front(); ++d) ai.result.push_back(self.sizes[d]);
    ai.result.insert(ai.result.end(), batch.begin(), batch.end());
    for (int64_t d = ai.dims.back() + 1; d < self.dim(); ++d) ai.result.push_back(self.sizes[d]);
  } else {
    ai.result = batch;
    for (int64_t d = 0; d < self.dim(); ++d) {
      if (std::find(ai.dims.begin(), ai.dims.end(), d) == ai.dims.end()) ai.result.push_back(self.sizes[d]);
    }
  }
  return ai;
}

// Positions (in the result) of self's non-indexed dims.
Dims window_positions(const AdvancedIndex& ai, int64_t rank) {
  Dims pos;
  const int64_t nb = static_cast<int64_t>(ai.batch.size());
  int64_t out = 0;
  for (int64_t d = 0; d < rank; ++d) {
    const bool indexed = std::find(ai.dims.begin(), ai.dims.end(), d) != ai.dims.end();
    if (ai.adjacent) {
      if (d == ai.dims.front()) out += nb;
      if (!indexed) pos.push_back(out++);
    } else if (!indexed) {
      pos.push_back(nb + out++);
    }
  }
  return pos;
}

std::vector<Value> lower_index(Context& c) {
  Builder& b = c.b;
  const TensorInfo& self = c.args.info(0);
  AdvancedIndex ai = advanced_index(c, 0, 1);
  Value x = c.args.tensor(0);
  if (ai.dims.empty()) return one(x);
  Builder::GatherDims dn;
  dn.offset_dims = window_positions(ai, self.dim());
  dn.collapsed_slice_dims = Dims(ai.dims.begin(), ai.dims.end());
  dn.start_index_map = Dims(ai.dims.begin(), ai.dims.end());
  dn.index_vector_dim = static_cast<int64_t>(ai.batch.size());
  Dims slice = self.sizes;
  for (int64_t d : ai.dims) slice[d] = 1;
  return one(b.gather(x, ai.coords, dn, slice, ai.result));
}

// index_put(self, indices, values, accumulate) and _index_put_impl (+ unsafe).
std::vector<Value> lower_index_put(Context& c) {
  Builder& b = c.b;
  const TensorInfo& self = c.args.info(0);
  // As on CPU, every variant (index_put_, setitem with a tensor, the
  // functional and unsafe ones) refuses values of another dtype.
  const at::ScalarType vt = c.args.info(2).dtype;
  TORCH_CHECK(vt == self.dtype, "Index put requires the source and destination dtypes match, got ",
              c10::toString(self.dtype), " for the destination and ", c10::toString(vt), " for the source.");
  AdvancedIndex ai = advanced_index(c, 0, 1);
  const bool accumulate = c.args.bool_(3);
  Value x = c.args.tensor(0);
  Value v = c.args.tensor(2);
  if (ai.dims.empty()) {
    Value vb = b.broadcast_to(v, self.sizes);
    return one(accumulate ? (self.dtype == at::kBool ? b.or_(x, vb) : b.add(x, vb)) : vb);
  }
  TORCH_CHECK(b.rank(v) <= static_cast<int64_t>(ai.result.size()),
              "shape mismatch: value tensor of shape ", dims_string(b.dims(v)),
              " cannot be broadcast to indexing result of shape ", dims_string(ai.result));
  broadcast_shapes(b.dims(v), ai.result);
  Value updates = b.broadcast_to(v, ai.result);
  const Value coords = skip_unless_checked(c, ai.coords);
  Builder::ScatterDims dn;
  dn.update_window_dims = window_positions(ai, self.dim());
  dn.inserted_window_dims = Dims(ai.dims.begin(), ai.dims.end());
  dn.scatter_dims_to_operand_dims = Dims(ai.dims.begin(), ai.dims.end());
  dn.index_vector_dim = static_cast<int64_t>(ai.batch.size());
  return one(b.scatter(x, coords, updates, dn, accumulate ? combiner("add", b.dtype(x)) : nullptr));
}

// ---- gather / scatter along a dim ----------------------------------------------------

std::vector<Value> lower_gather(Context& c) {
  Builder& b = c.b;
  const TensorInfo& self = c.args.info(0);
  const TensorInfo& index = c.args.info(2);
  const int64_t dim = wrap_dim(c.args.int_(1), self.dim());
  Value x = c.args.tensor(0);
  if (index.numel() == 0) return one(b.zeros(Type{to_hlo(self.dtype), index.sizes}));
  if (self.dim() == 0) x = b.reshape(x, {1});
  Value idx = c.args.tensor(2);
  if (index.dim() == 0) idx = b.reshape(idx, {1});
  const int64_t rank = b.rank(x);
  TORCH_CHECK(b.rank(idx) == rank, "Index tensor must have the same number of dimensions as input tensor");
  if (Type{DType::I64, b.dims(idx)}.numel() == 0) return one(b.zeros(Type{to_hlo(self.dtype), index.sizes}));
  check_index_range(c, idx, dim_size(c, 0, dim), false,
                    std::string(exec::kRuntimeErrorCheck) + "gather(): index out of bounds for dimension " +
                        std::to_string(dim) + " with size " + c.args.size_text(0, dim));
  Value r = gather_points(b, x, full_coordinates(b, idx, dim, rank));
  return one(b.reshape(r, index.sizes));
}

// The shared part of scatter(self, dim, index, ...): self and index as at
// least 1-D values and the element coordinates the index addresses.
struct DimScatter {
  Value x;          // self (rank >= 1)
  Value coords;     // [*index.shape, rank]
  Dims ishape;      // index shape (rank >= 1)
  bool scalar_self = false;
  bool empty = false;
  Value finish(Builder& b, Value r) const { return scalar_self ? b.reshape(r, {}) : r; }
};

DimScatter dim_scatter(Context& c) {
  Builder& b = c.b;
  const TensorInfo& self = c.args.info(0);
  const TensorInfo& index = c.args.info(2);
  DimScatter s;
  for (int64_t d = 0; d < self.dim(); ++d) {
    if (c.args.varies(0, d)) unsupported(c, "a scatter into a padded tensor");
  }
  s.x = c.args.tensor(0);
  s.empty = index.numel() == 0;
  if (s.empty) return s;
  const int64_t dim = wrap_dim(c.args.int_(1), self.dim());
  s.scalar_self = self.dim() == 0;
  if (s.scalar_self) s.x = b.reshape(s.x, {1});
  Value idx = c.args.tensor(2);
  if (index.dim() == 0) idx = b.reshape(idx, {1});
  check_index_range(c, idx, dim_size(c, 0, dim), false,
                    std::string(exec::kRuntimeErrorCheck) + "scatter(): index out of bounds for dimension " +
                        std::to_string(dim) + " with size " + c.args.size_text(0, dim));
  s.ishape = b.dims(idx);
  s.coords = skip_unless_checked(c, full_coordinates(b, idx, dim, b.rank(s.x)));
  return s;
}

// The source tensor at argument `i`, in self's dtype, sliced to the index shape.
// (In a bucketed program, a padded source takes the index's run-time
// sizes instead: a static slice of a dim that varies could cut its
// elements.)
Value scatter_source(Context& c, size_t i, const Dims& ishape) {
  Builder& b = c.b;
  Value src = cast(b, c.args.tensor(i), c.args.info(0).dtype);
  if (b.rank(src) == 0) src = b.reshape(src, {1});
  std::vector<int64_t> varying;
  for (int64_t d = 0; d < static_cast<int64_t>(ishape.size()); ++d) {
    if (!c.args.varies(i, d)) continue;
    if (b.dims(src)[d] != ishape[d]) unsupported(c, "a padded source of another bucket than its index");
    varying.push_back(d);  // (the slice keeps all of it)
  }
  src = b.slice(src, Dims(ishape.size(), 0), ishape);
  for (int64_t d : varying) {
    src = b.set_dimension_size(src, c.args.varies(2, d) ? c.args.run_time_size(2, d)
                                                        : b.constant_int(ishape[d], DType::I32), d);
  }
  return src;
}

// scatter(self, dim, index, src|value[, reduce]): src is sliced to index's shape.
std::vector<Value> scatter_impl(Context& c, const std::string& reduce, bool value_arg, size_t reduce_arg) {
  Builder& b = c.b;
  DimScatter s = dim_scatter(c);
  if (s.empty) return one(s.x);
  Value src = value_arg || !c.args.is_tensor(3)
                  ? splat(b, c.args.scalar_value(3, to_hlo(c.args.info(0).dtype)), s.ishape)
                  : scatter_source(c, 3, s.ishape);
  std::string red = reduce;
  if (reduce_arg < c.args.size() && c.args.has(reduce_arg)) red = c.args.string(reduce_arg);
  return one(s.finish(b, scatter_points(b, s.x, s.coords, src, combiner(red, b.dtype(s.x)))));
}

// Reduce `src` (shaped like the iteration space of `coords`) into x at
// coords with `reduce` (sum, prod, mean, amax, amin), as scatter_reduce and
// index_reduce do. Without include_self, the positions that receive updates
// start from the reduction's identity.
Value reduce_into(Builder& b, Value x, const Value& coords, Value src, const std::string& reduce, bool include_self) {
  const DType dt = b.dtype(x);
  const Dims space = b.dims(src);
  Builder::RegionBody comb = combiner(reduce, dt);  // validates `reduce`
  if (!include_self) {
    Value id;
    if (reduce == "sum" || reduce == "mean") id = b.zeros(Type{dt, {}});
    else if (reduce == "prod") id = dt == DType::Pred ? b.constant_bool(true) : b.constant(1, dt);
    else if (reduce == "amax") id = b.lowest(dt);
    else id = b.highest(dt);
    x = scatter_points(b, x, coords, b.broadcast_in_dim(id, space, {}), nullptr);
  }
  Value r = scatter_points(b, x, coords, src, comb);
  if (reduce != "mean") return r;
  Value ones = b.full_int(1, DType::I64, space);
  Value base = include_self ? b.full_int(1, DType::I64, b.dims(x)) : b.zeros(Type{DType::I64, b.dims(x)});
  Value count = scatter_points(b, base, coords, ones, combiner("add", DType::I64));
  Value cnt = b.convert(b.max(count, b.full_int(1, DType::I64, b.dims(count))), dt);
  Value mean = b.div(r, cnt);
  if (!hlo::is_float(dt)) {
    // PyTorch floors integer means; stablehlo.divide truncates.
    Value fix = b.and_(b.compare(Cmp::NE, b.rem(r, cnt), b.zeros(b.type(r))),
                       b.compare(Cmp::LT, r, b.zeros(b.type(r))));
    mean = b.select(fix, b.sub(mean, b.full_int(1, dt, b.dims(mean))), mean);
  }
  return b.select(b.compare(Cmp::GT, count, b.zeros(b.type(count))), mean, r);
}

bool include_self_arg(Context& c, size_t i) { return !c.args.has(i) || c.args.bool_(i); }

// scatter_reduce.two(self, dim, index, src, reduce, include_self)
std::vector<Value> lower_scatter_reduce(Context& c) {
  Builder& b = c.b;
  DimScatter s = dim_scatter(c);
  if (s.empty) return one(s.x);
  Value src = scatter_source(c, 3, s.ishape);
  return one(s.finish(b, reduce_into(b, s.x, s.coords, src, c.args.string(4), include_self_arg(c, 5))));
}

// ---- along-dim index ops ---------------------------------------------------------------

// Coordinates to address slices self[..., index[i], ...] along dim: the
// iteration space is self's shape with dim replaced by index.numel().
Value slice_coordinates(Builder& b, Value index, int64_t dim, const Dims& self_sizes) {
  const int64_t n = b.dims(index)[0];
  Dims space = self_sizes;
  space[dim] = n;
  Value along = b.broadcast_in_dim(index, space, {dim});
  return full_coordinates(b, along, dim, static_cast<int64_t>(space.size()));
}

// The index argument i as a vector, checked against `size` as CPU checks
// it for the op (negative entries wrap only where CPU accepts them).
struct IndexPolicy {
  bool check = true;
  bool allow_negative = false;
  std::string message = "index out of range in self";  // IndexError unless prefixed kRuntimeErrorCheck
};

Value index_vector(Context& c, size_t i, int64_t size, const IndexPolicy& policy = {}) {
  Builder& b = c.b;
  Value idx = c.args.tensor(i);
  if (b.rank(idx) == 0) idx = b.reshape(idx, {1});
  TORCH_CHECK_INDEX(b.rank(idx) == 1, "index_select(): Index is supposed to be a vector");
  if (policy.check) check_index_range(c, idx, size, policy.allow_negative, policy.message);
  return policy.allow_negative ? wrap_index(b, idx, size) : idx;
}

std::vector<Value> lower_index_select(Context& c) {
  Builder& b = c.b;
  const TensorInfo& self = c.args.info(0);
  const at::ScalarType it = c.args.info(2).dtype;
  TORCH_CHECK(it == at::kLong || it == at::kInt, "index_select(): Expected dtype int32 or int64 for index");
  const int64_t dim = wrap_dim(c.args.int_(1), self.dim());
  Value x = c.args.tensor(0);
  if (self.dim() == 0) {
    return one(x);
  }
  // (a bucketed program selects along a static dim: a beam search's reorder of its padded KV cache)
  if (c.args.varies(0, dim)) unsupported(c, "index_select along a padded dim");
  Value idx = index_vector(c, 2, self.sizes[dim]);
  Builder::GatherDims dn;
  for (int64_t d = 0; d < self.dim(); ++d) if (d != dim) dn.offset_dims.push_back(d);
  dn.collapsed_slice_dims = {dim};
  dn.start_index_map = {dim};
  dn.index_vector_dim = 1;
  Dims slice = self.sizes;
  slice[dim] = 1;
  Dims out = self.sizes;
  out[dim] = b.dims(idx)[0];
  return one(b.gather(x, b.reshape(idx, {out[dim], 1}), dn, slice, out));
}

// The shared part of index_add/index_copy/index_fill(self, dim, index, ...):
// slices self[..., index[i], ...] along dim.
struct IndexAlongDim {
  Value x;        // self (rank >= 1)
  Value index;    // the wrapped index vector
  int64_t dim = 0;
  Dims space;     // self's shape with dim replaced by index.numel()
  bool scalar_self = false;
  Value finish(Builder& b, Value r) const { return scalar_self ? b.reshape(r, {}) : r; }
  // Writes (or combines) updates of shape `space` into the slices: one
  // window per index entry (a point-wise scatter would loop over every
  // element).
  Value scatter(Builder& b, Value updates, const Builder::RegionBody& comb) const {
    const int64_t rank = b.rank(x);
    Builder::ScatterDims dn;
    for (int64_t d = 0; d < rank; ++d) {
      if (d != dim) dn.update_window_dims.push_back(d);
    }
    dn.inserted_window_dims = {dim};
    dn.scatter_dims_to_operand_dims = {dim};
    dn.index_vector_dim = 1;
    return b.scatter(x, b.reshape(index, {space[dim], 1}), updates, dn, comb);
  }
};

std::string out_of_bounds(int64_t dim, int64_t size) {
  return "index out of bounds for dimension " + std::to_string(dim) + " with size " + std::to_string(size);
}

IndexAlongDim index_along_dim(Context& c, const std::string& op) {
  Builder& b = c.b;
  const TensorInfo& self = c.args.info(0);
  const int64_t dim = wrap_dim(c.args.int_(1), self.dim());
  IndexAlongDim s;
  s.x = c.args.tensor(0);
  s.scalar_self = self.dim() == 0;
  Dims sizes = s.scalar_self ? Dims{1} : self.sizes;
  if (s.scalar_self) s.x = b.reshape(s.x, {1});
  // CPU's checks: index_fill wraps negative entries; index_copy, index_add
  // and index_reduce refuse them (index_add along the first or last of
  // several dims with a RuntimeError: CPU's vectorized path).
  IndexPolicy policy;
  if (op == "index_fill") {
    policy.allow_negative = true;
    policy.message = out_of_bounds(dim, sizes[dim]);
  } else if (op == "index_copy") {
    policy.message = "index_copy_(): " + out_of_bounds(dim, sizes[dim]);
  } else if (op == "index_add" && self.dim() > 1 && (dim == 0 || dim == self.dim() - 1)) {
    policy.message = std::string(exec::kRuntimeErrorCheck) + "index_add(): " + out_of_bounds(dim, sizes[dim]);
  }
  policy.check = self.numel() > 0;  // (CPU writes nothing into an empty self, and checks nothing)
  // (every user scatters along it: a failed check leaves self as it was)
  s.index = skip_unless_checked(c, index_vector(c, 2, sizes[dim], policy));
  s.dim = dim;
  s.space = sizes;
  s.space[dim] = b.dims(s.index)[0];
  return s;
}

// index_add(self, dim, index, source, alpha) / index_copy(self, dim, index, source)
std::vector<Value> index_scatter(Context& c, bool add) {
  Builder& b = c.b;
  const TensorInfo& self = c.args.info(0);
  const std::string name = add ? "index_add_()" : "index_copy_()";
  const at::ScalarType it = c.args.info(2).dtype;
  if (add) {
    TORCH_CHECK(it == at::kLong || it == at::kInt, name, ": Expected dtype int32/int64 for index but got: ",
                c10::toString(it));
  } else {
    TORCH_CHECK(it == at::kLong, name, ": Expected a long tensor for index, but got ", c10::toString(it));
  }
  TORCH_CHECK(self.dtype == c.args.info(3).dtype, name, ": self (", c10::toString(self.dtype), ") and source (",
              c10::toString(c.args.info(3).dtype), ") must have the same scalar type");
  IndexAlongDim s = index_along_dim(c, add ? "index_add" : "index_copy");
  Value src = b.reshape(cast(b, c.args.tensor(3), self.dtype), s.space);
  if (add && c.args.has(4) && !c.args.scalar(4).equal(1)) {
    src = b.mul(src, splat(b, c.args.scalar_value(4, to_hlo(self.dtype)), s.space));
  }
  return one(s.finish(b, s.scatter(b, src, add ? combiner("add", b.dtype(s.x)) : nullptr)));
}

std::vector<Value> lower_index_fill(Context& c) {
  // index_fill(self, dim, index, value)
  Builder& b = c.b;
  const TensorInfo& self = c.args.info(0);
  IndexAlongDim s = index_along_dim(c, "index_fill");
  Value v = c.args.is_tensor(3) ? cast(b, c.args.tensor(3), self.dtype)
                                : c.args.scalar_value(3, to_hlo(self.dtype));
  return one(s.finish(b, s.scatter(b, splat(b, v, s.space), nullptr)));
}

// index_reduce(self, dim, index, source, reduce, include_self)
std::vector<Value> lower_index_reduce(Context& c) {
  Builder& b = c.b;
  IndexAlongDim s = index_along_dim(c, "index_reduce");
  Value src = b.reshape(cast(b, c.args.tensor(3), c.args.info(0).dtype), s.space);
  Value coords = slice_coordinates(b, s.index, s.dim, b.dims(s.x));
  return one(s.finish(b, reduce_into(b, s.x, coords, src, c.args.string(4), include_self_arg(c, 5))));
}

// ---- masks -----------------------------------------------------------------------------

Value as_bool(Builder& b, Value m) {
  return b.dtype(m) == DType::Pred ? m : b.compare(Cmp::NE, m, b.zeros(b.type(m)));
}

std::vector<Value> lower_masked_fill(Context& c) {
  Builder& b = c.b;
  const TensorInfo& self = c.args.info(0);
  TORCH_CHECK(c.args.info(1).dtype == at::kBool, "masked_fill_ only supports boolean masks, but got mask with dtype ",
              type_meta_name(c.args.info(1).dtype));
  const Dims shape = broadcast_shapes(self.sizes, c.args.info(1).sizes);
  Value x = b.broadcast_to(c.args.tensor(0), shape);
  Value m = b.broadcast_to(as_bool(b, c.args.tensor(1)), shape);
  Value v = c.args.is_tensor(2) ? cast(b, c.args.tensor(2), self.dtype)
                                : c.args.scalar_value(2, to_hlo(self.dtype));
  if (c.args.is_tensor(2)) {
    TORCH_CHECK(c.args.info(2).dim() == 0, "masked_fill_ only supports a 0-dimensional value tensor, but got tensor with ",
                c.args.info(2).dim(), " dimension(s).");
  }
  return one(b.select(m, splat(b, v, shape), x));
}

// Running count of true entries before each position (exclusive), i64.
Value exclusive_count(Builder& b, Value flat_mask) {
  const int64_t n = b.dims(flat_mask)[0];
  Value ones = b.convert(flat_mask, DType::I64);
  if (n == 0) return ones;
  Value incl = b.reduce_window(ones, b.constant_int(0, DType::I64), {n}, {1}, {1}, {1}, {{n - 1, 0}}, "stablehlo.add");
  return b.sub(incl, ones);
}

// self (arg 0) and mask (arg 1) broadcast together and flattened.
struct FlatMasked {
  Value x, m;
  Dims shape;
  int64_t n = 0;
};

FlatMasked flat_masked(Context& c) {
  Builder& b = c.b;
  FlatMasked f;
  f.shape = broadcast_shapes(c.args.info(0).sizes, c.args.info(1).sizes);
  f.n = Type{DType::I64, f.shape}.numel();
  f.x = b.reshape(b.broadcast_to(c.args.tensor(0), f.shape), {f.n});
  f.m = b.reshape(b.broadcast_to(as_bool(b, c.args.tensor(1)), f.shape), {f.n});
  return f;
}

std::vector<Value> lower_masked_scatter(Context& c) {
  Builder& b = c.b;
  const TensorInfo& self = c.args.info(0);
  TORCH_CHECK(c.args.info(1).dtype == at::kBool,
              "masked_scatter_ only supports boolean masks, but got mask with dtype ", c10::toString(c.args.info(1).dtype));
  auto [x, m, shape, n] = flat_masked(c);
  const int64_t sn = c.args.info(2).numel();
  if (sn == 0 || n == 0) return one(b.reshape(x, shape));
  Value src = b.reshape(cast(b, c.args.tensor(2), self.dtype), {sn});
  Value pos = b.clamp(b.constant_int(0, DType::I64), exclusive_count(b, m), b.constant_int(sn - 1, DType::I64));
  Value vals = gather_points(b, src, b.reshape(pos, {n, 1}));
  return one(b.reshape(b.select(m, vals, x), shape));
}

// The positions where `flat_mask` is true, in order: i64[count].
// The first `size` positions where flat_mask is true (slots past the number
// of trues hold 0).
Value first_true_positions(Builder& b, Value flat_mask, int64_t size) {
  const int64_t n = b.dims(flat_mask)[0];
  Value rank = b.min(exclusive_count(b, flat_mask), b.full_int(size, DType::I64, {n}));
  Value slot = b.select(flat_mask, rank, b.full_int(size, DType::I64, {n}));
  Builder::ScatterDims dn;
  dn.inserted_window_dims = {0};
  dn.scatter_dims_to_operand_dims = {0};
  dn.index_vector_dim = 1;
  Value picked = b.scatter(b.zeros(Type{DType::I64, {size + 1}}), b.reshape(slot, {n, 1}),
                           b.iota(Type{DType::I64, {n}}, 0), dn, nullptr);
  return b.slice(picked, {0}, {size});
}

Value count_true(Builder& b, Value flat_mask) {
  return b.reduce(b.convert(flat_mask, DType::I64), b.constant_int(0, DType::I64), {0}, "stablehlo.add");
}

Value true_positions(Context& c, Value flat_mask, int64_t* count) {
  *count = c.args.host_int(count_true(c.b, flat_mask));
  return first_true_positions(c.b, flat_mask, *count);
}

std::vector<Value> lower_masked_select(Context& c) {
  TORCH_CHECK(c.args.info(1).dtype == at::kBool, "masked_select: expected BoolTensor for mask");
  c.args.output_depends_on_data();
  Builder& b = c.b;
  const TensorInfo& self = c.args.info(0);
  auto [x, m, shape, n] = flat_masked(c);
  if (n == 0) return one(b.zeros(Type{to_hlo(self.dtype), {0}}));
  int64_t count = 0;
  Value pos = true_positions(c, m, &count);
  if (count == 0) return one(b.zeros(Type{to_hlo(self.dtype), {0}}));
  return one(gather_points(b, x, b.reshape(pos, {count, 1})));
}

std::vector<Value> lower_nonzero(Context& c) {
  c.args.output_depends_on_data();
  Builder& b = c.b;
  const TensorInfo& self = c.args.info(0);
  const int64_t n = self.numel();
  const int64_t rank = self.dim();
  if (n == 0) return one(b.zeros(Type{DType::I64, {0, rank}}));
  Value m = b.reshape(as_bool(b, c.args.tensor(0)), {n});
  int64_t count = 0;
  Value pos = true_positions(c, m, &count);
  if (rank == 0) return one(b.zeros(Type{DType::I64, {count, 0}}));
  return one(unravel(b, pos, self.sizes));
}

// nonzero_static(self, *, size, fill_value): nonzero padded (or cut) to
// `size` rows, with no wait for the device.
std::vector<Value> lower_nonzero_static(Context& c) {
  Builder& b = c.b;
  const TensorInfo& self = c.args.info(0);
  const int64_t size = c.args.int_(1);
  const int64_t fill = c.args.int_(2);
  TORCH_CHECK(size >= 0, "nonzero_static: 'size' must be an non-negative integer");
  const int64_t n = self.numel();
  const int64_t rank = self.dim();
  if (rank == 0 || n == 0 || size == 0) return one(b.full_int(fill, DType::I64, {size, rank}));
  Value m = b.reshape(as_bool(b, c.args.tensor(0)), {n});
  Value coords = unravel(b, first_true_positions(b, m, size), self.sizes);
  Value valid = b.compare(Cmp::LT, b.iota(Type{DType::I64, {size, rank}}, 0),
                          b.broadcast_in_dim(count_true(b, m), {size, rank}, {}));
  return one(b.select(valid, coords, b.full_int(fill, DType::I64, {size, rank})));
}

// ---- flat take / put ---------------------------------------------------------------------

std::vector<Value> lower_take(Context& c) {
  Builder& b = c.b;
  const TensorInfo& self = c.args.info(0);
  const TensorInfo& index = c.args.info(1);
  const int64_t n = self.numel();
  if (index.numel() == 0) return one(b.zeros(Type{to_hlo(self.dtype), index.sizes}));
  TORCH_CHECK_INDEX(n > 0, "take(): tried to take from an empty tensor");
  Value flat = b.reshape(c.args.tensor(0), {n});
  check_index_range(c, c.args.tensor(1), n, true, "take(): index out of range for tensor of size " + std::to_string(n));
  Value idx = wrap_index(b, b.reshape(c.args.tensor(1), {index.numel()}), n);
  return one(b.reshape(gather_points(b, flat, b.reshape(idx, {index.numel(), 1})), index.sizes));
}

std::vector<Value> lower_put(Context& c) {
  // put(self, index, source, accumulate)
  Builder& b = c.b;
  const TensorInfo& self = c.args.info(0);
  const int64_t n = self.numel();
  const int64_t k = c.args.info(1).numel();
  Value x = c.args.tensor(0);
  if (k == 0) return one(x);
  Value flat = b.reshape(x, {n});
  check_index_range(c, c.args.tensor(1), n, true, "put(): index out of range for tensor of size " + std::to_string(n));
  Value idx = skip_unless_checked(c, wrap_index(b, b.reshape(c.args.tensor(1), {k}), n));
  Value src = b.reshape(cast(b, c.args.tensor(2), self.dtype), {k});
  const bool acc = c.args.has(3) && c.args.bool_(3);
  Value r = scatter_points(b, flat, b.reshape(idx, {k, 1}), src, acc ? combiner("add", b.dtype(flat)) : nullptr);
  return one(b.reshape(r, self.sizes));
}

// embedding_dense_backward(grad_output, indices, num_weights, padding_idx, scale_grad_by_freq)
std::vector<Value> lower_embedding_dense_backward(Context& c) {
  Builder& b = c.b;
  const TensorInfo& g = c.args.info(0);
  const TensorInfo& indices = c.args.info(1);
  const int64_t num_weights = c.args.int_(2);
  const int64_t padding_idx = c.args.int_(3);
  const bool scale = c.args.bool_(4);
  const int64_t k = indices.numel();
  const int64_t d = g.sizes.back();
  const at::ScalarType t = g.dtype;
  const at::ScalarType compute = opmath_type(t);
  Value grad = b.reshape(cast(b, c.args.tensor(0), compute), {k, d});
  Value idx = i64(b, b.reshape(c.args.tensor(1), {k}));
  if (k == 0) return one(b.zeros(Type{to_hlo(t), {num_weights, d}}));
  Value keep = b.compare(Cmp::NE, idx, b.full_int(padding_idx, DType::I64, {k}));
  if (scale) {
    Value counts = scatter_points(b, b.zeros(Type{DType::I64, {num_weights}}), b.reshape(idx, {k, 1}),
                                  b.full_int(1, DType::I64, {k}), combiner("add", DType::I64));
    Value per = gather_points(b, counts, b.reshape(idx, {k, 1}));
    grad = b.div(grad, b.broadcast_in_dim(b.convert(per, to_hlo(compute)), {k, d}, {0}));
  }
  grad = b.select(b.broadcast_in_dim(keep, {k, d}, {0}), grad, b.zeros(b.type(grad)));
  Builder::ScatterDims dn;
  dn.update_window_dims = {1};
  dn.inserted_window_dims = {0};
  dn.scatter_dims_to_operand_dims = {0};
  dn.index_vector_dim = 1;
  Value r = b.scatter(b.zeros(Type{to_hlo(compute), {num_weights, d}}), b.reshape(idx, {k, 1}), grad, dn,
                      combiner("add", to_hlo(compute)));
  return one(cast(b, r, t));
}

// ---- embedding_bag (the CUDA conventions for the auxiliary results) --------------------

enum BagMode { kBagSum = 0, kBagMean = 1, kBagMax = 2 };

// For each of the k indices, the bag it falls in: the number of bag starts
// (offsets[1:num_bags]) at or before its position. Linear in k + num_bags:
// each start marks its position (starts past the last index mark the spare
// slot k), and a cumulative sum counts the marks up to each position.
Value bag_of(Builder& b, Value offsets, int64_t k, int64_t num_bags) {
  if (num_bags <= 1 || k == 0) return b.zeros(Type{DType::I64, {k}});
  Value starts = b.slice(i64(b, offsets), {1}, {num_bags});
  starts = b.clamp(b.zeros(Type{DType::I64, {num_bags - 1}}), starts, b.full_int(k, DType::I64, {num_bags - 1}));
  Value marks = scatter_points(b, b.zeros(Type{DType::I64, {k + 1}}), b.reshape(starts, {num_bags - 1, 1}),
                               b.full_int(1, DType::I64, {num_bags - 1}), combiner("add", DType::I64));
  return scan(b, b.slice(marks, {0}, {k}), 0, "stablehlo.add", 0);
}

// _embedding_bag(weight, indices, offsets, scale_grad_by_freq, mode, sparse,
//   per_sample_weights, include_last_offset, padding_idx)
//   -> (output [bags, D], offset2bag [k], bag_size [offsets], max_indices)
std::vector<Value> lower_embedding_bag(Context& c) {
  Builder& b = c.b;
  const TensorInfo& w = c.args.info(0);
  const TensorInfo& ii = c.args.info(1);
  const TensorInfo& oi = c.args.info(2);
  const int64_t mode = c.args.int_(4);
  const bool last = c.args.bool_(7);
  const int64_t padding_idx = c.args.has(8) ? c.args.int_(8) : -1;
  TORCH_CHECK(ii.dim() == 1, "embedding_bag: input has to be a 1D or 2D Tensor, but got Tensor of dimension ", ii.dim());
  TORCH_CHECK(oi.dim() == 1, "embedding_bag: offsets has to be a 1D Tensor, but got Tensor of dimension ", oi.dim());
  TORCH_CHECK(mode >= 0 && mode <= 2, "embedding_bag: mode has to be sum, mean or max");
  // At bucket shapes (a padded input), XLA masks the padding's gathers and
  // scatter updates; max mode's winner positions are read back from a
  // concatenation past the input's end, which would move with its size.
  if (mode == kBagMax && c.args.varies(1, 0)) unsupported(c, "mode='max' over a padded input");
  const int64_t k = ii.numel(), rows = w.sizes[0], dim = w.sizes[1];
  const int64_t num_bags = last ? oi.numel() - 1 : oi.numel();
  TORCH_CHECK(num_bags >= 0, "include_last_offset: numBags should be at least 1");
  const at::ScalarType compute = opmath_type(w.dtype);
  const DType ct = to_hlo(compute);
  const DType it = to_hlo(ii.dtype);
  Value idx = i64(b, c.args.tensor(1));
  Value bag = bag_of(b, c.args.tensor(2), k, num_bags);
  // A padded input's padding (past its run-time size) holds anything: it is
  // in no bag, and no index to check.
  Value valid = b.full(1, DType::Pred, {k});
  if (c.args.varies(1, 0)) {
    valid = b.compare(Cmp::LT, b.iota(Type{DType::I64, {k}}, 0), b.broadcast_in_dim(dim_size(c, 1, 0), {k}, {}));
    idx = b.select(valid, idx, b.zeros(Type{DType::I64, {k}}));
  }
  if (k > 0) check_index_range(c, idx, rows, false, "embedding_bag: index out of range in self");
  Value keep = padding_idx >= 0 ? b.and_(valid, b.compare(Cmp::NE, idx, b.full_int(padding_idx, DType::I64, {k})))
                                : valid;
  // Indices past the last bag (include_last_offset) belong to no bag.
  keep = b.and_(keep, b.compare(Cmp::LT, bag, b.full_int(std::max<int64_t>(num_bags, 1), DType::I64, {k})));
  if (num_bags == 0) keep = b.full(0, DType::Pred, {k});
  Value safe_idx = b.select(keep, idx, b.zeros(Type{DType::I64, {k}}));
  Value safe_bag = b.select(keep, bag, b.zeros(Type{DType::I64, {k}}));
  // The gathered rows [k, D].
  Builder::GatherDims gd;
  gd.offset_dims = {1};
  gd.collapsed_slice_dims = {0};
  gd.start_index_map = {0};
  gd.index_vector_dim = 1;
  Value rows_k = k == 0 || rows == 0 ? b.zeros(Type{ct, {k, dim}})
                                     : b.gather(cast(b, c.args.tensor(0), compute), b.reshape(safe_idx, {k, 1}), gd,
                                                {1, dim}, {k, dim});
  if (c.args.has(6)) {
    TORCH_CHECK(mode == kBagSum, "embedding_bag: per_sample_weights only supported with mode='sum'");
    rows_k = b.mul(rows_k, b.broadcast_in_dim(cast(b, c.args.tensor(6), compute), {k, dim}, {0}));
  }
  Value keep_kd = b.broadcast_in_dim(keep, {k, dim}, {0});
  Builder::ScatterDims sd;
  sd.update_window_dims = {1};
  sd.inserted_window_dims = {0};
  sd.scatter_dims_to_operand_dims = {0};
  sd.index_vector_dim = 1;
  const int64_t nb = std::max<int64_t>(num_bags, 0);
  Value slots = b.reshape(safe_bag, {k, 1});
  Value count = scatter_points(b, b.zeros(Type{DType::I64, {nb}}), slots, b.convert(keep, DType::I64),
                               combiner("add", DType::I64));
  Value out, max_indices = b.zeros(Type{it, {0}});
  if (mode == kBagMax) {
    Value masked = b.select(keep_kd, rows_k, b.full(-INFINITY, ct, {k, dim}));
    out = b.scatter(b.full(-INFINITY, ct, {nb, dim}), slots, masked, sd, combiner("amax", ct));
    // The first index (in input order) that attains the maximum; -1 for an empty bag.
    Value best = b.gather(out, slots, gd, {1, dim}, {k, dim});
    Value hit = b.and_(keep_kd, b.compare(Cmp::EQ, masked, best));
    Value pos = b.select(hit, b.broadcast_in_dim(b.iota(Type{DType::I64, {k}}, 0), {k, dim}, {0}),
                         b.full_int(k, DType::I64, {k, dim}));
    Value first = b.scatter(b.full_int(k, DType::I64, {nb, dim}), slots, pos, sd, combiner("amin", DType::I64));
    // Map the winning positions to their weight rows.
    Value padded = b.concatenate({idx, b.full_int(-1, DType::I64, {1})}, 0);
    Builder::GatherDims pg;
    pg.collapsed_slice_dims = {0};
    pg.start_index_map = {0};
    pg.index_vector_dim = 2;
    max_indices = b.convert(b.gather(padded, b.reshape(first, {nb, dim, 1}), pg, {1}, {nb, dim}), it);
    Value empty = b.broadcast_in_dim(b.compare(Cmp::EQ, count, b.zeros(Type{DType::I64, {nb}})), {nb, dim}, {0});
    out = b.select(empty, b.zeros(Type{ct, {nb, dim}}), out);
  } else {
    // (what is in no bag adds -0: x + -0 is x for every x, -0 included)
    out = b.scatter(b.zeros(Type{ct, {nb, dim}}), slots, b.select(keep_kd, rows_k, b.full(-0.0, ct, {k, dim})), sd,
                    combiner("add", ct));
    if (mode == kBagMean) {
      Value n = b.convert(b.max(count, b.full_int(1, DType::I64, {nb})), ct);
      out = b.div(out, b.broadcast_in_dim(n, {nb, dim}, {0}));
    }
  }
  // bag_size has offsets' length (the CUDA layout); the extra slot is 0.
  Value bag_size = b.convert(count, it);
  if (oi.numel() > nb) bag_size = b.concatenate({bag_size, b.zeros(Type{it, {oi.numel() - nb}})}, 0);
  return {cast(b, out, w.dtype), b.convert(bag, it), bag_size, max_indices};
}

// Where embedding_bag's backward finds its arguments (grad and indices come
// first in both schemas).
struct BagGradArgs {
  size_t offset2bag, bag_size, max_indices, num_weights, scale, mode, weights, padding_idx;
};
// _embedding_bag_dense_backward(grad, indices, offset2bag, bag_size,
//   maximum_indices, num_weights, scale_grad_by_freq, mode, per_sample_weights, padding_idx)
constexpr BagGradArgs kDenseBagGrad{2, 3, 4, 5, 6, 7, 8, 9};
// _embedding_bag_backward(grad, indices, offsets, offset2bag, bag_size,
//   maximum_indices, num_weights, scale_grad_by_freq, mode, sparse, per_sample_weights, padding_idx)
constexpr BagGradArgs kBagGrad{3, 4, 5, 6, 7, 8, 10, 11};

std::vector<Value> lower_embedding_bag_backward(Context& c, const BagGradArgs& a) {
  Builder& b = c.b;
  const TensorInfo& g = c.args.info(0);
  const int64_t k = c.args.info(1).numel();
  const int64_t num_weights = c.args.int_(a.num_weights);
  const bool scale = c.args.bool_(a.scale);
  const int64_t mode = c.args.int_(a.mode);
  const int64_t padding_idx = c.args.has(a.padding_idx) ? c.args.int_(a.padding_idx) : -1;
  const int64_t nb = g.sizes[0], dim = g.sizes[1];
  const at::ScalarType compute = opmath_type(g.dtype);
  const DType ct = to_hlo(compute);
  Value grad = cast(b, c.args.tensor(0), compute);
  Builder::ScatterDims sd;
  sd.update_window_dims = {1};
  sd.inserted_window_dims = {0};
  sd.scatter_dims_to_operand_dims = {0};
  sd.index_vector_dim = 1;
  Value zero_w = b.zeros(Type{ct, {num_weights, dim}});
  if (mode == kBagMax) {
    // grad_weight[max_indices[b, d], d] += grad[b, d]
    Value mi = i64(b, c.args.tensor(a.max_indices));
    Value valid = b.compare(Cmp::GE, mi, b.zeros(Type{DType::I64, {nb, dim}}));
    Value coords = b.concatenate({b.reshape(b.select(valid, mi, b.zeros(b.type(mi))), {nb, dim, 1}),
                                  b.reshape(b.iota(Type{DType::I64, {nb, dim}}, 1), {nb, dim, 1})}, 2);
    Value upd = b.select(valid, grad, b.zeros(b.type(grad)));
    return one(cast(b, scatter_points(b, zero_w, coords, upd, combiner("add", ct)), g.dtype));
  }
  if (k == 0 || nb == 0) return one(cast(b, zero_w, g.dtype));
  Value idx = i64(b, c.args.tensor(1));
  Value bag = b.clamp(b.zeros(Type{DType::I64, {k}}), i64(b, c.args.tensor(a.offset2bag)), b.full_int(nb - 1, DType::I64, {k}));
  Value keep = b.compare(Cmp::LT, i64(b, c.args.tensor(a.offset2bag)), b.full_int(nb, DType::I64, {k}));
  if (padding_idx >= 0) keep = b.and_(keep, b.compare(Cmp::NE, idx, b.full_int(padding_idx, DType::I64, {k})));
  Builder::GatherDims gd;
  gd.offset_dims = {1};
  gd.collapsed_slice_dims = {0};
  gd.start_index_map = {0};
  gd.index_vector_dim = 1;
  Value per = b.gather(grad, b.reshape(bag, {k, 1}), gd, {1, dim}, {k, dim});
  if (mode == kBagMean) {
    Value size = b.convert(gather_points(b, i64(b, c.args.tensor(a.bag_size)), b.reshape(bag, {k, 1})), ct);
    size = b.max(size, b.full(1, ct, {k}));
    per = b.div(per, b.broadcast_in_dim(size, {k, dim}, {0}));
  }
  if (c.args.has(a.weights)) per = b.mul(per, b.broadcast_in_dim(cast(b, c.args.tensor(a.weights), compute), {k, dim}, {0}));
  Value safe_idx = b.select(keep, idx, b.zeros(Type{DType::I64, {k}}));
  if (scale) {
    Value counts = scatter_points(b, b.zeros(Type{DType::I64, {num_weights}}), b.reshape(safe_idx, {k, 1}),
                                  b.convert(keep, DType::I64), combiner("add", DType::I64));
    Value f = b.convert(gather_points(b, counts, b.reshape(safe_idx, {k, 1})), ct);
    per = b.div(per, b.broadcast_in_dim(b.max(f, b.full(1, ct, {k})), {k, dim}, {0}));
  }
  per = b.select(b.broadcast_in_dim(keep, {k, dim}, {0}), per, b.zeros(b.type(per)));
  Value r = b.scatter(zero_w, b.reshape(safe_idx, {k, 1}), per, sd, combiner("add", ct));
  return one(cast(b, r, g.dtype));
}

// _embedding_bag_per_sample_weights_backward(grad, weight, indices, offsets,
//   offset2bag, mode, padding_idx): d out / d w_i = grad[bag_i] . weight[idx_i]
std::vector<Value> lower_embedding_bag_psw_backward(Context& c) {
  Builder& b = c.b;
  const TensorInfo& g = c.args.info(0);
  const int64_t k = c.args.info(2).numel();
  const int64_t padding_idx = c.args.has(6) ? c.args.int_(6) : -1;
  TORCH_CHECK(c.args.int_(5) == kBagSum, "embedding_bag_backward: per_sample_weights only supported for mode='sum'");
  const int64_t nb = g.sizes[0], dim = g.sizes[1];
  const at::ScalarType compute = opmath_type(g.dtype);
  const DType ct = to_hlo(compute);
  if (k == 0 || nb == 0) return one(b.zeros(Type{to_hlo(g.dtype), {k}}));
  Value idx = i64(b, c.args.tensor(2));
  Value raw_bag = i64(b, c.args.tensor(4));
  Value keep = b.compare(Cmp::LT, raw_bag, b.full_int(nb, DType::I64, {k}));
  if (padding_idx >= 0) keep = b.and_(keep, b.compare(Cmp::NE, idx, b.full_int(padding_idx, DType::I64, {k})));
  Value bag = b.clamp(b.zeros(Type{DType::I64, {k}}), raw_bag, b.full_int(nb - 1, DType::I64, {k}));
  Builder::GatherDims gd;
  gd.offset_dims = {1};
  gd.collapsed_slice_dims = {0};
  gd.start_index_map = {0};
  gd.index_vector_dim = 1;
  Value gk = b.gather(cast(b, c.args.tensor(0), compute), b.reshape(bag, {k, 1}), gd, {1, dim}, {k, dim});
  Value wk = b.gather(cast(b, c.args.tensor(1), compute), b.reshape(b.select(keep, idx, b.zeros(b.type(idx))), {k, 1}),
                      gd, {1, dim}, {k, dim});
  Value dot = b.reduce(b.mul(gk, wk), b.zeros(Type{ct, {}}), {1}, "stablehlo.add");
  return one(cast(b, b.select(keep, dot, b.zeros(b.type(dot))), g.dtype));
}

}  // namespace

TPU_LOWERINGS(indexing) {
  reg("aten::index.Tensor", lower_index);
  reg("aten::_unsafe_index.Tensor", lower_index);
  reg("aten::index_put", lower_index_put);
  reg("aten::_index_put_impl", lower_index_put);
  reg("aten::_unsafe_index_put", lower_index_put);
  reg("aten::gather", lower_gather);
  reg("aten::scatter.src", [](Context& c) { return scatter_impl(c, "", false, 99); });
  reg("aten::scatter.value", [](Context& c) { return scatter_impl(c, "", true, 99); });
  reg("aten::scatter.reduce", [](Context& c) { return scatter_impl(c, "", false, 4); });
  reg("aten::scatter.value_reduce", [](Context& c) { return scatter_impl(c, "", true, 4); });
  reg("aten::scatter_add", [](Context& c) { return scatter_impl(c, "add", false, 99); });
  reg("aten::scatter_reduce.two", lower_scatter_reduce);
  reg("aten::nonzero_static", lower_nonzero_static);
  reg("aten::_embedding_bag", lower_embedding_bag);
  reg("aten::_embedding_bag_forward_only", lower_embedding_bag);
  reg("aten::_embedding_bag_dense_backward", [](Context& c) { return lower_embedding_bag_backward(c, kDenseBagGrad); });
  reg("aten::_embedding_bag_backward", [](Context& c) {
    if (c.args.bool_(9)) unsupported(c, "sparse gradients");
    return lower_embedding_bag_backward(c, kBagGrad);
  });
  reg("aten::_embedding_bag_per_sample_weights_backward", lower_embedding_bag_psw_backward);
  reg("aten::index_reduce", lower_index_reduce);
  reg("aten::index_select", lower_index_select);
  reg("aten::index_add", [](Context& c) { return index_scatter(c, true); });
  reg("aten::index_copy", [](Context& c) { return index_scatter(c, false); });
  reg("aten::index_fill.int_Scalar", lower_index_fill);
  reg("aten::index_fill.int_Tensor", lower_index_fill);
  reg("aten::masked_fill.Scalar", lower_masked_fill);
  reg("aten::masked_fill.Tensor", lower_masked_fill);
  reg("aten::masked_scatter", lower_masked_scatter);
  reg("aten::masked_select", lower_masked_select);
  reg("aten::nonzero", lower_nonzero);
  reg("aten::take", lower_take);
  reg("aten::put", lower_put);
  reg("aten::embedding_dense_backward", lower_embedding_dense_backward);
}

}  // namespace tpu::lowering
