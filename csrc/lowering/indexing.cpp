// Indexing: advanced indexing (index, index_put), index_select, gather,
// scatter family, masked ops, take/put, index_add/copy/fill, embedding
// backward, and the data-dependent nonzero and masked_select.
#include "csrc/lowering/common.h"

namespace tpu::lowering {

namespace {

using hlo::Cmp;

Value i64(Builder& b, Value v) { return b.convert(v, DType::I64); }

// idx < 0 ? idx + size : idx
Value wrap_index(Builder& b, Value idx, int64_t size) {
  idx = i64(b, idx);
  Value zero = b.zeros(b.type(idx));
  return b.select(b.compare(Cmp::LT, idx, zero), b.add(idx, b.full_int(size, DType::I64, b.dims(idx))), idx);
}

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

Dims iota_dims(int64_t n) {
  Dims d(n);
  for (int64_t i = 0; i < n; ++i) d[i] = i;
  return d;
}

// Element-wise gather: out[i...] = x[coords[i...]].
Value gather_points(Builder& b, Value x, Value coords) {
  const int64_t rank = b.rank(x);
  Dims out = b.dims(coords);
  out.pop_back();
  Builder::GatherDims dn;
  dn.collapsed_slice_dims = iota_dims(rank);
  dn.start_index_map = iota_dims(rank);
  dn.index_vector_dim = static_cast<int64_t>(out.size());
  return b.gather(x, coords, dn, Dims(rank, 1), out);
}

// Element-wise scatter of `updates` (shape = coords without the last dim).
Value scatter_points(Builder& b, Value x, Value coords, Value updates, const Builder::RegionBody& combiner) {
  const int64_t rank = b.rank(x);
  Builder::ScatterDims dn;
  dn.inserted_window_dims = iota_dims(rank);
  dn.scatter_dims_to_operand_dims = iota_dims(rank);
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
      int64_t stride = infos[i].numel();
      for (int64_t k = 0; k < infos[i].dim(); ++k) {
        stride /= infos[i].sizes[k];
        Value coord = b.div(picked, b.full_int(stride, DType::I64, {n}));
        coord = b.rem(coord, b.full_int(infos[i].sizes[k], DType::I64, {n}));
        per_dim.push_back(coord);
      }
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
    check_index_range(c, *per_dim[d], self.sizes[d], true,
                      "index out of bounds for dimension " + std::to_string(d) + " with size " +
                          std::to_string(self.sizes[d]));
    Value idx = wrap_index(b, b.broadcast_to(*per_dim[d], batch), self.sizes[d]);
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
  AdvancedIndex ai = advanced_index(c, 0, 1);
  const bool accumulate = c.args.bool_(3);
  Value x = c.args.tensor(0);
  Value v = cast(b, c.args.tensor(2), self.dtype);
  if (ai.dims.empty()) {
    Value vb = b.broadcast_to(v, self.sizes);
    return one(accumulate ? (self.dtype == at::kBool ? b.or_(x, vb) : b.add(x, vb)) : vb);
  }
  TORCH_CHECK(b.rank(v) <= static_cast<int64_t>(ai.result.size()),
              "shape mismatch: value tensor of shape ", dims_string(b.dims(v)),
              " cannot be broadcast to indexing result of shape ", dims_string(ai.result));
  broadcast_shapes(b.dims(v), ai.result);
  Value updates = b.broadcast_to(v, ai.result);
  Builder::ScatterDims dn;
  dn.update_window_dims = window_positions(ai, self.dim());
  dn.inserted_window_dims = Dims(ai.dims.begin(), ai.dims.end());
  dn.scatter_dims_to_operand_dims = Dims(ai.dims.begin(), ai.dims.end());
  dn.index_vector_dim = static_cast<int64_t>(ai.batch.size());
  return one(b.scatter(x, ai.coords, updates, dn, accumulate ? combiner("add", b.dtype(x)) : nullptr));
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
  check_index_range(c, idx, b.dims(x)[dim], false,
                    "gather(): index out of bounds for dimension " + std::to_string(dim) + " with size " +
                        std::to_string(b.dims(x)[dim]));
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
  s.x = c.args.tensor(0);
  s.empty = index.numel() == 0;
  if (s.empty) return s;
  const int64_t dim = wrap_dim(c.args.int_(1), self.dim());
  s.scalar_self = self.dim() == 0;
  if (s.scalar_self) s.x = b.reshape(s.x, {1});
  Value idx = c.args.tensor(2);
  if (index.dim() == 0) idx = b.reshape(idx, {1});
  check_index_range(c, idx, b.dims(s.x)[dim], false,
                    "scatter(): index out of bounds for dimension " + std::to_string(dim) + " with size " +
                        std::to_string(b.dims(s.x)[dim]));
  s.ishape = b.dims(idx);
  s.coords = full_coordinates(b, idx, dim, b.rank(s.x));
  return s;
}

// The source tensor at argument `i`, in self's dtype, sliced to the index shape.
Value scatter_source(Context& c, size_t i, const Dims& ishape) {
  Builder& b = c.b;
  Value src = cast(b, c.args.tensor(i), c.args.info(0).dtype);
  if (b.rank(src) == 0) src = b.reshape(src, {1});
  return b.slice(src, Dims(ishape.size(), 0), ishape);
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

Value index_vector(Context& c, size_t i, int64_t size) {
  Builder& b = c.b;
  Value idx = c.args.tensor(i);
  if (b.rank(idx) == 0) idx = b.reshape(idx, {1});
  TORCH_CHECK_INDEX(b.rank(idx) == 1, "index_select(): Index is supposed to be a vector");
  check_index_range(c, idx, size, true, "index out of range in self");
  return wrap_index(b, idx, size);
}

std::vector<Value> lower_index_select(Context& c) {
  Builder& b = c.b;
  const TensorInfo& self = c.args.info(0);
  const int64_t dim = wrap_dim(c.args.int_(1), self.dim());
  Value x = c.args.tensor(0);
  if (self.dim() == 0) {
    return one(x);
  }
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
  Value coords;   // coordinates of the addressed slices
  Dims space;     // self's shape with dim replaced by index.numel()
  bool scalar_self = false;
  Value finish(Builder& b, Value r) const { return scalar_self ? b.reshape(r, {}) : r; }
};

IndexAlongDim index_along_dim(Context& c) {
  Builder& b = c.b;
  const TensorInfo& self = c.args.info(0);
  const int64_t dim = wrap_dim(c.args.int_(1), self.dim());
  IndexAlongDim s;
  s.x = c.args.tensor(0);
  s.scalar_self = self.dim() == 0;
  Dims sizes = s.scalar_self ? Dims{1} : self.sizes;
  if (s.scalar_self) s.x = b.reshape(s.x, {1});
  Value idx = index_vector(c, 2, sizes[dim]);
  s.space = sizes;
  s.space[dim] = b.dims(idx)[0];
  s.coords = slice_coordinates(b, idx, dim, sizes);
  return s;
}

// index_add(self, dim, index, source, alpha) / index_copy(self, dim, index, source)
std::vector<Value> index_scatter(Context& c, bool add) {
  Builder& b = c.b;
  const TensorInfo& self = c.args.info(0);
  IndexAlongDim s = index_along_dim(c);
  Value src = b.reshape(cast(b, c.args.tensor(3), self.dtype), s.space);
  if (add && c.args.has(4) && !c.args.scalar(4).equal(1)) {
    src = b.mul(src, splat(b, c.args.scalar_value(4, to_hlo(self.dtype)), s.space));
  }
  return one(s.finish(b, scatter_points(b, s.x, s.coords, src, add ? combiner("add", b.dtype(s.x)) : nullptr)));
}

std::vector<Value> lower_index_fill(Context& c) {
  // index_fill(self, dim, index, value)
  Builder& b = c.b;
  const TensorInfo& self = c.args.info(0);
  IndexAlongDim s = index_along_dim(c);
  Value v = c.args.is_tensor(3) ? cast(b, c.args.tensor(3), self.dtype)
                                : c.args.scalar_value(3, to_hlo(self.dtype));
  return one(s.finish(b, scatter_points(b, s.x, s.coords, splat(b, v, s.space), nullptr)));
}

// index_reduce(self, dim, index, source, reduce, include_self)
std::vector<Value> lower_index_reduce(Context& c) {
  Builder& b = c.b;
  IndexAlongDim s = index_along_dim(c);
  Value src = b.reshape(cast(b, c.args.tensor(3), c.args.info(0).dtype), s.space);
  return one(s.finish(b, reduce_into(b, s.x, s.coords, src, c.args.string(4), include_self_arg(c, 5))));
}

// ---- masks -----------------------------------------------------------------------------

Value as_bool(Builder& b, Value m) {
  return b.dtype(m) == DType::Pred ? m : b.compare(Cmp::NE, m, b.zeros(b.type(m)));
}

std::vector<Value> lower_masked_fill(Context& c) {
  Builder& b = c.b;
  const TensorInfo& self = c.args.info(0);
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

// Flat positions [k] in a tensor of `sizes` -> coordinates [k, rank].
Value unravel(Builder& b, Value pos, const Dims& sizes) {
  const int64_t k = b.dims(pos)[0];
  std::vector<Value> cols;
  int64_t stride = 1;
  for (int64_t s : sizes) stride *= s;
  for (int64_t s : sizes) {
    stride /= s;
    Value coord = b.rem(b.div(pos, b.full_int(stride, DType::I64, {k})), b.full_int(s, DType::I64, {k}));
    cols.push_back(b.reshape(coord, {k, 1}));
  }
  return b.concatenate(cols, 1);
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
  Value idx = wrap_index(b, b.reshape(c.args.tensor(1), {k}), n);
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
