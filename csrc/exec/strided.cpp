#include "csrc/exec/strided.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>

namespace tpu::exec {

using hlo::Builder;
using hlo::Dims;
using hlo::DType;
using hlo::Type;
using hlo::Value;

namespace {

// A view whose dimensions (those of size > 1 and stride != 0), sorted by
// decreasing stride, nest without overlap and with each stride a multiple of
// the next: it is a rectangular sub-block of a reshaped slice of storage.
struct Layout {
  std::vector<int64_t> dims;  // original dimension indices, outermost first
  bool structured = true;
  int64_t span = 1;           // elements from the first to the last one + 1
};

Layout analyze(const Dims& sizes, const Dims& strides) {
  Layout l;
  for (size_t k = 0; k < sizes.size(); ++k) {
    if (sizes[k] > 1 && strides[k] != 0) l.dims.push_back(static_cast<int64_t>(k));
  }
  std::stable_sort(l.dims.begin(), l.dims.end(),
                   [&](int64_t a, int64_t b) { return strides[a] > strides[b]; });
  for (size_t i = 0; i < l.dims.size(); ++i) {
    const int64_t k = l.dims[i];
    if (strides[k] < 0) l.structured = false;
    l.span += (sizes[k] - 1) * std::max<int64_t>(strides[k], 0);
    if (i + 1 < l.dims.size()) {
      const int64_t inner = l.dims[i + 1];
      if (strides[inner] <= 0 || strides[k] % strides[inner] != 0 ||
          strides[k] < sizes[inner] * strides[inner]) {
        l.structured = false;
      }
    }
  }
  return l;
}

Value offset_value(Builder& b, const Offset& off) {
  return off.is_static() ? b.constant_int(off.value, DType::I64) : off.dynamic;
}

// [off, off + len) of the rank-1 `src`.
Value take(Builder& b, Value src, const Offset& off, int64_t len) {
  if (off.is_static()) return b.slice(src, {off.value}, {off.value + len});
  return b.dynamic_slice(src, {off.dynamic}, {len});
}

// Element indices (i64, dims `sizes`) of the view into storage.
Value element_indices(Builder& b, const Dims& sizes, const Dims& strides, const Offset& off) {
  Type t{DType::I64, sizes};
  Value idx = b.broadcast_in_dim(offset_value(b, off), sizes, {});
  for (size_t k = 0; k < sizes.size(); ++k) {
    if (sizes[k] <= 1 || strides[k] == 0) continue;
    Value term = b.mul(b.iota(t, static_cast<int64_t>(k)), b.full_int(strides[k], DType::I64, sizes));
    idx = b.add(idx, term);
  }
  return idx;
}

Dims sorted_sizes(const Layout& l, const Dims& sizes) {
  Dims out;
  for (int64_t k : l.dims) out.push_back(sizes[k]);
  return out;
}

// The reshaped storage block: [size_0, stride_0/stride_1, ..., stride_last].
Dims block_shape(const Layout& l, const Dims& sizes, const Dims& strides) {
  Dims r{sizes[l.dims[0]]};
  for (size_t i = 1; i < l.dims.size(); ++i) r.push_back(strides[l.dims[i - 1]] / strides[l.dims[i]]);
  r.push_back(strides[l.dims.back()]);
  return r;
}

// Permutation taking the sorted-by-stride order to increasing dimension order.
Dims to_dim_order(const Layout& l) {
  std::vector<int64_t> idx(l.dims.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) { return l.dims[a] < l.dims[b]; });
  return Dims(idx.begin(), idx.end());
}

// The storage block a structured view lives in: `src` is the flat value
// padded so that the block [offset, offset + len) is always in range, and
// `block` that range reshaped to block_shape().
struct Block {
  Value src, block;
  Dims shape;
  int64_t len = 0, pad = 0;
};

Block open_block(Builder& b, Value flat, const Layout& l, const Dims& sizes, const Dims& strides,
                 const Offset& off) {
  Block k;
  k.shape = block_shape(l, sizes, strides);
  k.len = sizes[l.dims[0]] * strides[l.dims[0]];
  k.pad = k.len - l.span;
  k.src = k.pad > 0 ? b.pad(flat, b.zeros(Type{b.dtype(flat), {}}), {0}, {k.pad}) : flat;
  k.block = b.reshape(take(b, k.src, off, k.len), k.shape);
  return k;
}

bool dense_block(const Dims& sizes, const Dims& strides) {
  int64_t expected = 1;
  for (int64_t k = static_cast<int64_t>(sizes.size()) - 1; k >= 0; --k) {
    if (sizes[k] == 1) continue;
    if (strides[k] != expected) return false;
    expected *= sizes[k];
  }
  return true;
}

}  // namespace

bool is_dense_row_major(const Dims& sizes, const Dims& strides) { return dense_block(sizes, strides); }

Value read_strided(Builder& b, Value flat, const Dims& sizes, const Dims& strides, const Offset& off) {
  const DType dt = b.dtype(flat);
  const Type result{dt, sizes};
  if (result.numel() == 0) return b.zeros(result);
  if (dense_block(sizes, strides)) {
    return b.reshape(take(b, flat, off, result.numel()), sizes);
  }
  const Layout l = analyze(sizes, strides);
  if (l.dims.empty()) {  // one element, broadcast
    Value e = b.reshape(take(b, flat, off, 1), {});
    return b.broadcast_in_dim(e, sizes, {});
  }
  if (!l.structured) {
    Dims idx_dims = sizes;
    idx_dims.push_back(1);
    Value idx = b.reshape(element_indices(b, sizes, strides, off), idx_dims);
    Builder::GatherDims dn;
    dn.collapsed_slice_dims = {0};
    dn.start_index_map = {0};
    dn.index_vector_dim = static_cast<int64_t>(sizes.size());
    return b.gather(flat, idx, dn, {1}, sizes);
  }
  Block k = open_block(b, flat, l, sizes, strides, off);
  Dims limit = sorted_sizes(l, sizes);
  limit.push_back(1);
  Value block = b.slice(k.block, Dims(k.shape.size(), 0), limit);
  block = b.reshape(block, sorted_sizes(l, sizes));
  block = b.transpose(block, to_dim_order(l));
  Dims bdims(l.dims.begin(), l.dims.end());
  std::sort(bdims.begin(), bdims.end());
  return b.broadcast_in_dim(block, sizes, bdims);
}

Value read_strided_at_run_time(Builder& b, Value flat, const Dims& sizes, const std::vector<Value>& strides,
                               Value offset, const std::function<Value(Value)>& place) {
  const Type result{b.dtype(flat), sizes};
  if (result.numel() == 0) return b.zeros(result);
  const Type t{DType::I64, sizes};
  Value idx = b.broadcast_in_dim(offset, sizes, {});
  for (size_t k = 0; k < sizes.size(); ++k) {
    if (sizes[k] <= 1) continue;
    idx = b.add(idx, b.mul(b.iota(t, static_cast<int64_t>(k)), b.broadcast_in_dim(strides[k], sizes, {})));
  }
  if (place) idx = place(idx);
  Dims idx_dims = sizes;
  idx_dims.push_back(1);
  Builder::GatherDims dn;
  dn.collapsed_slice_dims = {0};
  dn.start_index_map = {0};
  dn.index_vector_dim = static_cast<int64_t>(sizes.size());
  return b.gather(flat, b.reshape(idx, idx_dims), dn, {1}, sizes);
}

Value write_strided(Builder& b, Value flat, Value values, const Dims& sizes, const Dims& strides,
                    const Offset& off) {
  const DType dt = b.dtype(flat);
  const int64_t n = b.dims(flat)[0];
  const int64_t numel = Type{dt, sizes}.numel();
  if (numel == 0) return flat;
  if (b.dtype(values) != dt || b.dims(values) != sizes) {
    throw std::logic_error("write_strided: values " + b.type(values).str() +
                           " do not match the view " + hlo::dims_str(sizes) + " of " +
                           b.type(flat).str());
  }
  for (size_t k = 0; k < sizes.size(); ++k) {
    if (sizes[k] > 1 && strides[k] == 0) {
      throw std::logic_error("write_strided: cannot write an expanded (stride 0) view");
    }
  }
  if (dense_block(sizes, strides)) {
    Value v = b.reshape(values, {numel});
    if (off.is_static() && off.value == 0 && numel == n) return v;
    return b.dynamic_update_slice(flat, v, {offset_value(b, off)});
  }
  const Layout l = analyze(sizes, strides);
  if (!l.structured) {
    Value idx = b.reshape(element_indices(b, sizes, strides, off), {numel, 1});
    Builder::ScatterDims dn;
    dn.inserted_window_dims = {0};
    dn.scatter_dims_to_operand_dims = {0};
    dn.index_vector_dim = 1;
    return b.scatter(flat, idx, b.reshape(values, {numel}), dn, nullptr);
  }
  Block k = open_block(b, flat, l, sizes, strides, off);
  // values in dimension order without size-1 dims, then in stride order.
  Dims by_dim = sorted_sizes(l, sizes);
  Dims dim_order = to_dim_order(l);
  Dims nt_dims(by_dim.size());
  for (size_t i = 0; i < dim_order.size(); ++i) nt_dims[i] = by_dim[dim_order[i]];
  Value v = b.reshape(values, nt_dims);
  Dims inverse(dim_order.size());
  for (size_t i = 0; i < dim_order.size(); ++i) inverse[dim_order[i]] = static_cast<int64_t>(i);
  v = b.transpose(v, inverse);
  Dims with_unit = by_dim;
  with_unit.push_back(1);
  v = b.reshape(v, with_unit);
  std::vector<Value> zeros(k.shape.size(), b.constant_int(0, DType::I64));
  Value block = b.reshape(b.dynamic_update_slice(k.block, v, zeros), {k.len});
  Value src = b.dynamic_update_slice(k.src, block, {offset_value(b, off)});
  return k.pad > 0 ? b.slice(src, {0}, {n}) : src;
}

}  // namespace tpu::exec
