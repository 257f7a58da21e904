// Neural-network ops: pooling, losses, dropout backward (normalization is in
// normalization.cpp, upsampling in upsample.cpp). Spatial ops work on the trailing dims and accept inputs with or
// without a batch dimension.
#include <cmath>

#include "csrc/lowering/common.h"

namespace tpu::lowering {

namespace {

using hlo::Cmp;

Value k(Builder& b, double v, Value like) { return b.full(v, b.dtype(like), b.dims(like)); }

Dims expand_param(const std::vector<int64_t>& v, int64_t n, const Dims& dflt) {
  if (v.empty()) return dflt;
  if (v.size() == 1) return Dims(n, v[0]);
  TORCH_CHECK(static_cast<int64_t>(v.size()) == n, "expected ", n, " values, got ", v.size());
  return Dims(v.begin(), v.end());
}


// ---- pooling ------------------------------------------------------------------------

struct Pool {
  int64_t nsp = 2;
  Dims kernel, stride, padding, dilation;
  bool ceil_mode = false;
};

int64_t floor_div(int64_t a, int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); }

int64_t pool_out(int64_t in, int64_t k, int64_t p, int64_t s, int64_t d, bool ceil_mode) {
  int64_t out = floor_div(in + 2 * p - d * (k - 1) - 1 + (ceil_mode ? s - 1 : 0), s) + 1;
  if (ceil_mode && (out - 1) * s >= in + p) --out;
  return out;
}

Pool pool_params(Context& c, size_t first, int64_t nsp, bool has_dilation) {
  // (kernel_size, stride, padding[, dilation], ceil_mode)
  Pool p;
  p.nsp = nsp;
  p.kernel = expand_param(c.args.ints(first), nsp, {});
  TORCH_CHECK(static_cast<int64_t>(p.kernel.size()) == nsp, "kernel_size must have ", nsp, " elements");
  p.stride = expand_param(c.args.has(first + 1) ? c.args.ints(first + 1) : std::vector<int64_t>{}, nsp, p.kernel);
  p.padding = expand_param(c.args.ints(first + 2), nsp, Dims(nsp, 0));
  size_t next = first + 3;
  if (has_dilation) p.dilation = expand_param(c.args.ints(next++), nsp, Dims(nsp, 1));
  else p.dilation = Dims(nsp, 1);
  p.ceil_mode = c.args.bool_(next);
  for (int64_t i = 0; i < nsp; ++i) {
    TORCH_CHECK(p.kernel[i] > 0 && p.stride[i] > 0 && p.dilation[i] > 0,
                "pooling: kernel_size, stride and dilation must be positive");
    TORCH_CHECK(p.padding[i] >= 0 && p.padding[i] <= p.kernel[i] / 2,
                "pad should be at most half of effective kernel size, but got pad=", p.padding[i],
                ", kernel_size=", p.kernel[i], " and dilation=", p.dilation[i]);
  }
  return p;
}

// Output spatial sizes and the (low, high) padding that yields exactly them.
struct Windows {
  Dims out;
  std::vector<std::pair<int64_t, int64_t>> pad;  // over all dims of the input
  Dims window, strides, dilation;                 // over all dims
};

Windows windows(const Pool& p, const Dims& sizes) {
  const int64_t rank = static_cast<int64_t>(sizes.size());
  const int64_t lead = rank - p.nsp;
  Windows w;
  w.window = Dims(rank, 1);
  w.strides = Dims(rank, 1);
  w.dilation = Dims(rank, 1);
  w.pad.assign(rank, {0, 0});
  for (int64_t i = 0; i < p.nsp; ++i) {
    const int64_t in = sizes[lead + i];
    const int64_t out = pool_out(in, p.kernel[i], p.padding[i], p.stride[i], p.dilation[i], p.ceil_mode);
    TORCH_CHECK(out > 0, "Given input size: ", dims_string(sizes), ". Calculated output size is too small");
    w.out.push_back(out);
    const int64_t needed = (out - 1) * p.stride[i] + p.dilation[i] * (p.kernel[i] - 1) + 1;
    w.pad[lead + i] = {p.padding[i], std::max<int64_t>(0, needed - in - p.padding[i])};
    w.window[lead + i] = p.kernel[i];
    w.strides[lead + i] = p.stride[i];
    w.dilation[lead + i] = p.dilation[i];
  }
  return w;
}

// The flat index of each element within its spatial plane.
Value plane_index(Builder& b, const Dims& sizes, int64_t nsp) {
  const int64_t rank = static_cast<int64_t>(sizes.size());
  const Type it{DType::I64, sizes};
  Value idx = b.zeros(it);
  int64_t stride = 1;
  for (int64_t d = rank - 1; d >= rank - nsp; --d) {
    idx = b.add(idx, b.mul(b.iota(it, d), b.full_int(stride, DType::I64, sizes)));
    stride *= sizes[d];
  }
  return idx;
}

// Body of a (value, index) max reduction: the larger value, NaN first, the
// earlier index on ties (-1 marks padding and loses ties).
std::vector<Value> max_with_index(Builder& rb, const std::vector<Value>& a) {
  Value av = a[0], ai = a[1], bv = a[2], bi = a[3];
  Value anan = rb.compare(Cmp::NE, av, av), bnan = rb.compare(Cmp::NE, bv, bv);
  Value zero = rb.zeros(rb.type(ai));
  Value a_first = rb.or_(rb.compare(Cmp::LT, bi, zero),
                         rb.and_(rb.compare(Cmp::GE, ai, zero), rb.compare(Cmp::LT, ai, bi)));
  Value greater = rb.compare(Cmp::GT, av, bv);
  Value equal = rb.or_(rb.compare(Cmp::EQ, av, bv), rb.and_(anan, bnan));
  Value pick_a = rb.or_(rb.and_(anan, rb.not_(bnan)),
                        rb.or_(rb.and_(greater, rb.not_(bnan)), rb.and_(equal, a_first)));
  return {rb.select(pick_a, av, bv), rb.select(pick_a, ai, bi)};
}

std::pair<Value, Value> reduce_window_pairs(Builder& b, Value x, Value idx, const Windows& w) {
  const Type xt = b.type(x);
  Value init_v = b.lowest(xt.dtype), init_i = b.constant_int(-1, DType::I64);
  std::string body = b.region({Type{xt.dtype, {}}, Type{DType::I64, {}}, Type{xt.dtype, {}}, Type{DType::I64, {}}},
                              max_with_index);
  const int64_t rank = xt.rank();
  Dims out = xt.dims;
  for (int64_t d = 0; d < rank; ++d) {
    const int64_t padded = xt.dims[d] + w.pad[d].first + w.pad[d].second;
    const int64_t win = (w.window[d] - 1) * w.dilation[d] + 1;
    out[d] = padded < win ? 0 : (padded - win) / w.strides[d] + 1;
  }
  std::string pad = "dense<[";
  for (int64_t d = 0; d < rank; ++d) {
    if (d) pad += ", ";
    pad += "[" + std::to_string(w.pad[d].first) + ", " + std::to_string(w.pad[d].second) + "]";
  }
  pad += "]> : tensor<" + std::to_string(rank) + "x2xi64>";
  std::string attrs = "window_dimensions = " + hlo::array_attr(w.window) +
                      ", window_strides = " + hlo::array_attr(w.strides) +
                      ", base_dilations = " + hlo::array_attr(Dims(rank, 1)) +
                      ", window_dilations = " + hlo::array_attr(w.dilation) + ", padding = " + pad;
  auto r = b.emit("stablehlo.reduce_window", {x, idx, init_v, init_i},
                  {Type{xt.dtype, out}, Type{DType::I64, out}}, attrs, {body});
  // Keep exactly the requested windows.
  Dims limit = out;
  const int64_t lead = rank - static_cast<int64_t>(w.out.size());
  for (size_t i = 0; i < w.out.size(); ++i) limit[lead + i] = w.out[i];
  return {b.slice(r[0], Dims(rank, 0), limit), b.slice(r[1], Dims(rank, 0), limit)};
}

std::vector<Value> lower_max_pool(Context& c, int64_t nsp) {
  // max_pool{2,3}d_with_indices(self, kernel_size, stride, padding, dilation, ceil_mode)
  const TensorInfo& in = c.args.info(0);
  TORCH_CHECK(in.dim() == nsp + 1 || in.dim() == nsp + 2, "max_pool", nsp, "d: expected ", nsp + 1,
              "D or ", nsp + 2, "D input, got ", in.dim(), "D");
  Pool p = pool_params(c, 1, nsp, true);
  Windows w = windows(p, in.sizes);
  Builder& b = c.b;
  Value x = c.args.tensor(0);
  auto [v, i] = reduce_window_pairs(b, x, plane_index(b, in.sizes, nsp), w);
  return {v, i};
}

// Scatter-add `grad` (shape of indices) into the planes of `sizes` at the
// flat plane positions `indices` (or store it there, with `add` false).
Value scatter_planes(Builder& b, Value grad, Value indices, const Dims& sizes, int64_t nsp, bool add = true) {
  const int64_t rank = static_cast<int64_t>(sizes.size());
  const int64_t lead = rank - nsp;
  Dims flat_sizes(sizes.begin(), sizes.begin() + lead);
  int64_t plane = 1;
  for (int64_t d = lead; d < rank; ++d) plane *= sizes[d];
  flat_sizes.push_back(plane);
  const Dims& gd = b.dims(grad);
  Dims with_one = gd;
  with_one.push_back(1);
  std::vector<Value> parts;
  for (int64_t d = 0; d < lead; ++d) parts.push_back(b.reshape(b.iota(Type{DType::I64, gd}, d), with_one));
  parts.push_back(b.reshape(b.convert(indices, DType::I64), with_one));
  Value coords = b.concatenate(parts, static_cast<int64_t>(gd.size()));
  // Every dim of grad is a scatter (batch) dim; the operand dims are all indexed.
  Builder::ScatterDims dn;
  dn.inserted_window_dims = range(0, lead + 1);
  dn.scatter_dims_to_operand_dims = range(0, lead + 1);
  dn.index_vector_dim = static_cast<int64_t>(gd.size());
  Value zero = b.zeros(Type{b.dtype(grad), flat_sizes});
  Builder::RegionBody sum = [](Builder& rb, const std::vector<Value>& a) {
    return std::vector<Value>{rb.add(a[0], a[1])};
  };
  return b.reshape(b.scatter(zero, coords, grad, dn, add ? sum : nullptr), sizes);
}

// max_unpool2d(self, indices, output_size) / max_unpool3d(self, indices,
// output_size, stride, padding): each value goes to its flat position in the
// output plane; the rest is zero.
std::vector<Value> lower_max_unpool(Context& c, int64_t nsp) {
  const TensorInfo& in = c.args.info(0);
  const TensorInfo& idx = c.args.info(1);
  const std::vector<int64_t> out_size = c.args.ints(2);
  TORCH_CHECK(in.dim() == nsp + 1 || in.dim() == nsp + 2, "max_unpool", nsp, "d: expected ", nsp + 1, "D or ",
              nsp + 2, "D input, got ", dims_string(in.sizes));
  TORCH_CHECK(in.sizes == idx.sizes, "max_unpool", nsp, "d: expected shape of indices to be the same as that of ",
              "the input, got ", dims_string(idx.sizes), " and ", dims_string(in.sizes));
  TORCH_CHECK(static_cast<int64_t>(out_size.size()) == nsp, "max_unpool", nsp, "d: there should be exactly ", nsp,
              " elements in output_size, got ", out_size.size());
  Builder& b = c.b;
  Dims sizes(in.sizes.begin(), in.sizes.end() - nsp);
  int64_t plane = 1;
  for (int64_t s : out_size) {
    sizes.push_back(s);
    plane *= s;
  }
  Value indices = c.args.tensor(1);
  check_index_range(c, indices, plane, false,
                    "max_unpool" + std::to_string(nsp) + "d: found an invalid max index (output volumes are of size " +
                        dims_string(Dims(out_size.begin(), out_size.end())) + ")");
  return one(scatter_planes(b, c.args.tensor(0), indices, sizes, nsp, false));
}

// fractional_max_pool{2,3}d(self, kernel_size, output_size, random_samples)
// -> (output, indices): each plane's windows start where its random samples
// put them (CPU's generate_intervals, in the input's dtype: for output i <
// O - 1, trunc((i + u) * alpha) - trunc(u * alpha), alpha = (in - k) / (O - 1);
// the last at in - k). A window's value and flat plane index are CPU's scan:
// the first maximum in row-major order, or the last NaN. The samples drive
// W, H for 2-d (samples[..., 0] the width's) and T, H, W for 3-d.
std::vector<Value> lower_fractional_max_pool(Context& c, int64_t nsp) {
  const TensorInfo& in = c.args.info(0);
  const std::string name = "fractional_max_pool" + std::to_string(nsp) + "d()";
  TORCH_CHECK(in.dim() == nsp + 1 || in.dim() == nsp + 2, name, ": expected ", nsp + 1, "D or ", nsp + 2,
              "D tensor for input, but got: ", dims_string(in.sizes));
  const Dims ks = c.args.ints(1), os = c.args.ints(2);
  TORCH_CHECK(static_cast<int64_t>(ks.size()) == nsp && static_cast<int64_t>(os.size()) == nsp, name,
              ": kernel_size and output_size must have ", nsp, " elements");
  const int64_t lead = in.dim() - nsp;
  for (int64_t d = 0; d < nsp; ++d) {
    TORCH_CHECK(ks[d] > 0 && os[d] >= 0, name, ": kernel_size must be positive and output_size not negative");
    // (CPU's 3-d kernel refuses a window reaching the input's last element too)
    TORCH_CHECK(nsp == 3 ? os[d] + ks[d] - 1 < in.sizes[lead + d] : os[d] + ks[d] - 1 <= in.sizes[lead + d], name,
                ": pool size ", ks[d],
                " too large relative to input size ", in.sizes[lead + d], " for output size ", os[d]);
  }
  Builder& b = c.b;
  const DType dt = to_hlo(in.dtype), ct = to_hlo(opmath_type(in.dtype));
  const int64_t N = lead == 2 ? in.sizes[0] : 1, C = in.sizes[lead - 1];
  Dims sp(in.sizes.begin() + lead, in.sizes.end());
  Dims xs{N, C};
  xs.insert(xs.end(), sp.begin(), sp.end());
  Value x = b.reshape(c.args.tensor(0), xs);
  // Window starts per plane and spatial dim, [N, C, O_d], as CPU rounds them.
  // (CPU reads the first N rows of the samples: an unbatched input takes row 0)
  const Dims& rs = c.args.info(3).sizes;
  TORCH_CHECK(rs.size() == 3 && rs[2] == nsp, name, ": expected _random_samples of shape [N, C, ", nsp,
              "], but got ", dims_string(rs));
  TORCH_CHECK(rs[1] == C, name, ": expected _random_samples.size(1) to equal the input's channels (", C,
              "), but got ", dims_string(rs));
  TORCH_CHECK(rs[0] >= N, name, ": expected _random_samples.size(0) to be at least the input's batch size (", N,
              "), but got ", dims_string(rs));
  Value samples = b.convert(b.slice_dim(c.args.tensor(3), 0, 0, N), ct);
  auto rnd = [&](Value v) { return b.convert(b.convert(v, dt), ct); };  // (each step in the input's dtype)
  std::vector<Value> starts(nsp);
  for (int64_t d = 0; d < nsp; ++d) {
    const int64_t which = nsp == 2 ? 1 - d : d;
    const int64_t o = os[d], in_d = sp[d], k = ks[d];
    const Dims od{N, C, o};
    Value u = b.broadcast_in_dim(b.reshape(b.slice(samples, {0, 0, which}, {N, C, which + 1}), {N, C}), od, {0, 1});
    Value last = b.full_int(in_d - k, DType::I64, od);
    if (o <= 1) {
      starts[d] = last;
      continue;
    }
    Value alpha = rnd(b.div(rnd(b.full(static_cast<double>(in_d - k), ct, od)), rnd(b.full(static_cast<double>(o - 1), ct, od))));
    Value i = b.convert(b.iota(Type{DType::I64, od}, 2), ct);
    Value first = b.convert(rnd(b.mul(rnd(b.add(i, u)), alpha)), DType::I64);
    Value base = b.convert(rnd(b.mul(u, alpha)), DType::I64);
    starts[d] = b.select(b.compare(Cmp::EQ, b.iota(Type{DType::I64, od}, 2), b.full_int(o - 1, DType::I64, od)), last,
                         b.sub(first, base));
  }
  // Every window element: [N, C, O..., K...] coordinates and flat indices.
  Dims full{N, C};
  full.insert(full.end(), os.begin(), os.end());
  full.insert(full.end(), ks.begin(), ks.end());
  const Type it{DType::I64, full};
  Dims with_one = full;
  with_one.push_back(1);
  std::vector<Value> coords{b.reshape(b.iota(it, 0), with_one), b.reshape(b.iota(it, 1), with_one)};
  Value flat = b.zeros(it);
  int64_t stride = 1;
  std::vector<Value> pos(nsp);
  for (int64_t d = nsp - 1; d >= 0; --d) {
    pos[d] = b.add(b.broadcast_in_dim(starts[d], full, {0, 1, 2 + d}), b.iota(it, 2 + nsp + d));
    flat = b.add(flat, b.mul(pos[d], b.full_int(stride, DType::I64, full)));
    stride *= sp[d];
  }
  for (int64_t d = 0; d < nsp; ++d) coords.push_back(b.reshape(pos[d], with_one));
  Value vals = gather_points(b, x, b.concatenate(coords, static_cast<int64_t>(full.size())));
  Dims kdims;
  for (int64_t d = 0; d < nsp; ++d) kdims.push_back(2 + nsp + d);
  auto r = b.reduce({vals, flat}, {b.constant(std::nan(""), dt), b.constant_int(-1, DType::I64)}, kdims,
                    [](Builder& rb, const std::vector<Value>& a) {
    // (a: the accumulated pair, the window's other pair; the scan keeps the
    // last NaN and otherwise the first maximum, whatever order XLA combines in)
    Value av = a[0], ai = a[1], bv = a[2], bi = a[3];
    Value anan = rb.compare(Cmp::NE, av, av), bnan = rb.compare(Cmp::NE, bv, bv);
    Value zero = rb.zeros(rb.type(ai));
    Value a_none = rb.compare(Cmp::LT, ai, zero), b_none = rb.compare(Cmp::LT, bi, zero);
    Value a_later = rb.compare(Cmp::GT, ai, bi);
    Value pick_a = rb.select(
        b_none, rb.constant_bool(true),
        rb.select(a_none, rb.constant_bool(false),
                  rb.select(rb.and_(anan, bnan), a_later,
                            rb.select(anan, rb.constant_bool(true),
                                      rb.select(bnan, rb.constant_bool(false),
                                                rb.or_(rb.compare(Cmp::GT, av, bv),
                                                       rb.and_(rb.compare(Cmp::EQ, av, bv), rb.not_(a_later))))))));
    return std::vector<Value>{rb.select(pick_a, av, bv), rb.select(pick_a, ai, bi)};
  });
  Dims out_sizes(in.sizes.begin(), in.sizes.begin() + lead);
  out_sizes.insert(out_sizes.end(), os.begin(), os.end());
  return {b.reshape(r[0], out_sizes), b.reshape(r[1], out_sizes)};
}

std::vector<Value> lower_max_pool_backward(Context& c, int64_t nsp, size_t indices_arg) {
  // (grad_output, self, ..., indices)
  const TensorInfo& in = c.args.info(1);
  const at::ScalarType t = in.dtype;
  Builder& b = c.b;
  Value g = cast(b, c.args.tensor(0), opmath_type(t));
  Value r = scatter_planes(b, g, c.args.tensor(indices_arg), in.sizes, nsp);
  return one(cast(b, r, t));
}

// Divisors of avg pooling per output position (spatial dims only).
Value avg_divisor(Builder& b, const Pool& p, const Windows& w, const Dims& in_spatial,
                  bool count_include_pad, std::optional<int64_t> divisor_override, DType dt) {
  const int64_t nsp = p.nsp;
  if (divisor_override) return b.full(static_cast<double>(*divisor_override), dt, w.out);
  Value ones = b.full(1, dt, in_spatial);
  std::vector<std::pair<int64_t, int64_t>> pad(nsp);
  if (count_include_pad) {
    ones = b.pad(ones, b.constant(1, dt), p.padding, p.padding);
    const int64_t lead = static_cast<int64_t>(w.pad.size()) - nsp;
    for (int64_t i = 0; i < nsp; ++i) pad[i] = {0, std::max<int64_t>(0, w.pad[lead + i].second - p.padding[i])};
  } else {
    const int64_t lead = static_cast<int64_t>(w.pad.size()) - nsp;
    for (int64_t i = 0; i < nsp; ++i) pad[i] = w.pad[lead + i];
  }
  Value cnt = b.reduce_window(ones, b.constant(0, dt), p.kernel, p.stride, Dims(nsp, 1), Dims(nsp, 1), pad,
                              "stablehlo.add");
  return b.slice(cnt, Dims(nsp, 0), w.out);
}

std::vector<Value> lower_avg_pool(Context& c, int64_t nsp) {
  // avg_pool{2,3}d(self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)
  const TensorInfo& in = c.args.info(0);
  TORCH_CHECK(in.dim() == nsp + 1 || in.dim() == nsp + 2, "avg_pool", nsp, "d: expected ", nsp + 1,
              "D or ", nsp + 2, "D input, got ", in.dim(), "D");
  Pool p = pool_params(c, 1, nsp, false);
  const bool include_pad = c.args.bool_(5);
  std::optional<int64_t> divisor = c.args.opt_int(6);
  TORCH_CHECK(!divisor || *divisor != 0, "divisor must be not zero");
  Windows w = windows(p, in.sizes);
  Builder& b = c.b;
  const at::ScalarType t = in.dtype;
  const DType ct = to_hlo(opmath_type(t));
  Value x = b.convert(c.args.tensor(0), ct);
  Value sum = b.reduce_window(x, b.constant(0, ct), w.window, w.strides, Dims(in.dim(), 1), w.dilation, w.pad,
                              "stablehlo.add");
  const int64_t lead = in.dim() - nsp;
  Dims limit = b.dims(sum);
  for (int64_t i = 0; i < nsp; ++i) limit[lead + i] = w.out[i];
  sum = b.slice(sum, Dims(in.dim(), 0), limit);
  Dims in_spatial(in.sizes.begin() + lead, in.sizes.end());
  Value div = avg_divisor(b, p, w, in_spatial, include_pad, divisor, ct);
  return one(cast(b, b.div(sum, b.broadcast_in_dim(div, limit, range(lead, in.dim()))), t));
}

std::vector<Value> lower_avg_pool_backward(Context& c, int64_t nsp) {
  // (grad_output, self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)
  const TensorInfo& in = c.args.info(1);
  Pool p = pool_params(c, 2, nsp, false);
  const bool include_pad = c.args.bool_(6);
  std::optional<int64_t> divisor = c.args.opt_int(7);
  Windows w = windows(p, in.sizes);
  Builder& b = c.b;
  const at::ScalarType t = in.dtype;
  const DType ct = to_hlo(opmath_type(t));
  const int64_t lead = in.dim() - nsp;
  Dims in_spatial(in.sizes.begin() + lead, in.sizes.end());
  Value g = b.convert(c.args.tensor(0), ct);
  Value div = avg_divisor(b, p, w, in_spatial, include_pad, divisor, ct);
  g = b.div(g, b.broadcast_in_dim(div, b.dims(g), range(lead, in.dim())));
  // Spread every gradient over its window: dilate by the stride, then sum
  // windows of the kernel size.
  Dims lo(in.dim(), 0), hi(in.dim(), 0), interior(in.dim(), 0);
  for (int64_t i = 0; i < nsp; ++i) {
    lo[lead + i] = p.kernel[i] - 1;
    hi[lead + i] = p.kernel[i] - 1;
    interior[lead + i] = p.stride[i] - 1;
  }
  Value spread = b.pad(g, b.constant(0, ct), lo, hi, interior);
  Dims win(in.dim(), 1);
  for (int64_t i = 0; i < nsp; ++i) win[lead + i] = p.kernel[i];
  std::vector<std::pair<int64_t, int64_t>> none(in.dim(), {0, 0});
  Value full = b.reduce_window(spread, b.constant(0, ct), win, Dims(in.dim(), 1), Dims(in.dim(), 1),
                               Dims(in.dim(), 1), none, "stablehlo.add");
  // full covers padded-input positions [0, L); the input starts at `padding`.
  Dims start(in.dim(), 0), grow(in.dim(), 0);
  for (int64_t i = 0; i < nsp; ++i) {
    const int64_t have = b.dims(full)[lead + i];
    start[lead + i] = p.padding[i];
    grow[lead + i] = std::max<int64_t>(0, p.padding[i] + in.sizes[lead + i] - have);
  }
  full = b.pad(full, b.constant(0, ct), Dims(in.dim(), 0), grow);
  Dims limit = in.sizes;
  for (int64_t i = 0; i < nsp; ++i) limit[lead + i] = start[lead + i] + in.sizes[lead + i];
  return one(cast(b, b.slice(full, start, limit), t));
}

// Averaging matrix of adaptive pooling [out, in]: rows average
// [floor(i*in/out), ceil((i+1)*in/out)).
Value adaptive_matrix(Builder& b, int64_t in, int64_t out, DType dt) {
  const Type it{DType::I64, {out, in}};
  Value i = b.iota(it, 0), j = b.iota(it, 1);
  Value start = b.div(b.mul(i, b.full_int(in, DType::I64, {out, in})), b.full_int(out, DType::I64, {out, in}));
  Value end = b.div(b.add(b.mul(b.add(i, b.full_int(1, DType::I64, {out, in})), b.full_int(in, DType::I64, {out, in})),
                          b.full_int(out - 1, DType::I64, {out, in})),
                    b.full_int(out, DType::I64, {out, in}));
  Value inside = b.and_(b.compare(Cmp::GE, j, start), b.compare(Cmp::LT, j, end));
  Value w = b.div(b.full(1, dt, {out, in}), b.convert(b.sub(end, start), dt));
  return b.select(inside, w, b.zeros(Type{dt, {out, in}}));
}

// x with dim `d` replaced by m's dim 0 (contracting m's dim 1) or, when
// `transposed`, by m's dim 1 (contracting dim 0).
Value apply_along(Builder& b, Value x, int64_t d, Value m, bool transposed) {
  const int64_t rank = b.rank(x);
  Value r = b.dot_general(x, m, {}, {}, {d}, {transposed ? 0 : 1}, b.dtype(x), true);
  Dims perm;
  for (int64_t i = 0; i < rank - 1; ++i) {
    if (i == d) perm.push_back(rank - 1);
    perm.push_back(i);
  }
  if (d == rank - 1) perm.push_back(rank - 1);
  return b.transpose(r, perm);
}

std::vector<Value> lower_adaptive_avg(Context& c, int64_t nsp) {
  const TensorInfo& in = c.args.info(0);
  Dims out = expand_param(c.args.ints(1), nsp, {});
  const int64_t lead = in.dim() - nsp;
  TORCH_CHECK(lead == 1 || lead == 2, "adaptive_avg_pool", nsp, "d: expected ", nsp + 1, "D or ", nsp + 2,
              "D input");
  for (int64_t i = 0; i < nsp; ++i) {
    TORCH_CHECK(in.sizes[lead + i] > 0, "adaptive_avg_pool", nsp, "d(): Expected input to have non-zero size for non-batch dimensions");
  }
  Builder& b = c.b;
  const at::ScalarType t = in.dtype;
  const DType ct = to_hlo(opmath_type(t));
  Value x = b.convert(c.args.tensor(0), ct);
  for (int64_t i = 0; i < nsp; ++i) {
    x = apply_along(b, x, lead + i, adaptive_matrix(b, in.sizes[lead + i], out[i], ct), false);
  }
  return one(cast(b, x, t));
}

std::vector<Value> lower_adaptive_avg_backward(Context& c, int64_t nsp) {
  // (grad_output, self)
  const TensorInfo& go = c.args.info(0);
  const TensorInfo& in = c.args.info(1);
  const int64_t lead = in.dim() - nsp;
  Builder& b = c.b;
  const at::ScalarType t = in.dtype;
  const DType ct = to_hlo(opmath_type(t));
  Value g = b.convert(c.args.tensor(0), ct);
  for (int64_t i = 0; i < nsp; ++i) {
    g = apply_along(b, g, lead + i, adaptive_matrix(b, in.sizes[lead + i], go.sizes[lead + i], ct), true);
  }
  return one(cast(b, g, t));
}

// adaptive_max_pool{2,3}d(self, output_size) -> (out, indices): one spatial
// dim at a time, over the windows' masks.
std::vector<Value> lower_adaptive_max(Context& c, int64_t nsp) {
  const TensorInfo& in = c.args.info(0);
  Dims out = expand_param(c.args.ints(1), nsp, {});
  const int64_t lead = in.dim() - nsp;
  Builder& b = c.b;
  Value x = c.args.tensor(0);
  Value idx = plane_index(b, in.sizes, nsp);
  const DType dt = b.dtype(x);
  for (int64_t i = 0; i < nsp; ++i) {
    const int64_t d = lead + i;
    const int64_t n = b.dims(x)[d];
    const int64_t o = out[i];
    // [.., o, n, ..]: the window mask of output o over input n.
    Dims sizes = b.dims(x);
    Dims expanded = sizes;
    expanded.insert(expanded.begin() + d, o);
    Dims bd;
    for (int64_t a = 0; a < static_cast<int64_t>(sizes.size()); ++a) bd.push_back(a < d ? a : a + 1);
    Value xe = b.broadcast_in_dim(x, expanded, bd);
    Value ie = b.broadcast_in_dim(idx, expanded, bd);
    const Type it{DType::I64, expanded};
    Value oi = b.iota(it, d), ni = b.iota(it, d + 1);
    Value start = b.div(b.mul(oi, b.full_int(n, DType::I64, expanded)), b.full_int(o, DType::I64, expanded));
    Value end = b.div(b.add(b.mul(b.add(oi, b.full_int(1, DType::I64, expanded)), b.full_int(n, DType::I64, expanded)),
                            b.full_int(o - 1, DType::I64, expanded)),
                      b.full_int(o, DType::I64, expanded));
    Value inside = b.and_(b.compare(Cmp::GE, ni, start), b.compare(Cmp::LT, ni, end));
    xe = b.select(inside, xe, b.broadcast_in_dim(b.lowest(dt), expanded, {}));
    ie = b.select(inside, ie, b.full_int(-1, DType::I64, expanded));
    auto r = b.reduce({xe, ie}, {b.lowest(dt), b.constant_int(-1, DType::I64)}, {d + 1}, max_with_index);
    x = r[0];
    idx = r[1];
  }
  return {x, idx};
}

// ---- losses ----------------------------------------------------------------------------

enum Reduction { kNone = 0, kMean = 1, kSum = 2 };

Value reduce_loss(Builder& b, Value l, int64_t reduction) {
  if (reduction == kNone) return l;
  const Dims all = range(0, b.rank(l));
  Value s = sum_over(b, l, all);
  if (reduction == kSum) return s;
  const double n = static_cast<double>(b.type(l).numel());
  return b.div(s, b.full(n, b.dtype(s), {}));
}

// d(reduced)/d(elementwise): grad broadcast, scaled by 1/n for the mean.
Value expand_loss_grad(Builder& b, Value g, const Dims& shape, int64_t reduction) {
  Value e = b.broadcast_to(g, shape);
  if (reduction == kMean) e = b.div(e, b.full(static_cast<double>(Type{DType::F32, shape}.numel()), b.dtype(e), shape));
  return e;
}

// ---- margin losses over classes: self [N, C] (or [C], or a scalar as [1, 1]) --

struct ClassRows {
  Value x;            // [N, C] in opmath
  int64_t n = 1, c = 1;
  Dims none_shape;    // the loss shape for reduction='none'
};

ClassRows class_rows(Context& c, size_t self_arg, size_t target_arg, const char* op, bool target_per_class) {
  const TensorInfo& in = c.args.info(self_arg);
  const TensorInfo& tg = c.args.info(target_arg);
  ClassRows r;
  TORCH_CHECK(in.dim() <= 2 && (in.dim() < 2 || in.sizes[1] > 0), op,
              ": Expected non-empty vector or matrix with optional 0-dim batch size, but got: ",
              dims_string(in.sizes));
  if (in.dim() == 2) {
    r.n = in.sizes[0];
    r.c = in.sizes[1];
  } else {
    r.c = in.dim() == 0 ? 1 : in.sizes[0];
  }
  const Dims want = target_per_class ? (in.dim() == 2 ? Dims{r.n, r.c} : Dims{r.c}) : Dims{r.n};
  const bool ok = target_per_class ? (tg.dim() <= 1 && in.dim() <= 1 ? tg.numel() == r.c : tg.sizes == want)
                                   : (tg.dim() <= 1 && tg.numel() == r.n);
  TORCH_CHECK(ok, op, ": inconsistent target size: ", dims_string(tg.sizes), " for input of size: ",
              dims_string(in.sizes));
  r.x = c.b.reshape(c.b.convert(c.args.tensor(self_arg), to_hlo(opmath_type(in.dtype))), {r.n, r.c});
  // reduction='none' keeps a loss per row for a batch (and, for a class
  // index target, for any target with a dim).
  if (in.dim() == 2 || (!target_per_class && tg.dim() > 0)) r.none_shape = {r.n};
  return r;
}

// Per-row losses [N] -> the reduced loss (sum / mean over rows, or none).
Value finish_rows(Builder& b, const ClassRows& r, Value rows, int64_t reduction) {
  if (reduction == kNone) return b.reshape(rows, r.none_shape);
  Value s = sum_over(b, rows, {0});
  return reduction == kSum ? s : b.div(s, b.full(static_cast<double>(r.n), b.dtype(s), {}));
}

// The incoming gradient per row [N] for a loss reduced with `reduction`.
Value row_grad(Builder& b, const ClassRows& r, Value g, int64_t reduction) {
  Value e = reduction == kNone ? b.reshape(g, {r.n}) : b.broadcast_in_dim(g, {r.n}, {});
  if (reduction == kMean) e = b.div(e, b.full(static_cast<double>(r.n), b.dtype(e), {r.n}));
  return e;
}

Value class_onehot(Builder& b, Value labels, int64_t n, int64_t cls) {
  return b.compare(hlo::Cmp::EQ, b.broadcast_in_dim(b.convert(labels, DType::I64), {n, cls}, {0}),
                   b.iota(Type{DType::I64, {n, cls}}, 1));
}

// multi_margin_loss: sum over j != y of max(0, margin - x[y] + x[j])^p,
// times weight[y], over C. Returns (the per-element terms' derivative
// factor d[N, C] for j != y, per-row loss [N]).
std::pair<Value, Value> multi_margin_terms(Context& c, const ClassRows& r, size_t target_arg, size_t p_arg,
                                           size_t margin_arg, size_t weight_arg) {
  Builder& b = c.b;
  const int64_t p = c.args.scalar(p_arg).toLong();
  TORCH_CHECK(p == 1 || p == 2, "only p == 1 and p == 2 supported");
  const DType ct = b.dtype(r.x);
  const Dims nc{r.n, r.c};
  Value y = b.reshape(c.args.tensor(target_arg), {r.n});
  check_index_range(c, y, r.c, false, "multi_margin_loss: target out of range");
  Value hot = class_onehot(b, y, r.n, r.c);
  Value xy = sum_over(b, b.select(hot, r.x, b.zeros(Type{ct, nc})), {1});
  Value z = b.add(b.sub(b.full(c.args.scalar(margin_arg).toDouble(), ct, nc), b.broadcast_in_dim(xy, nc, {0})), r.x);
  Value active = b.and_(b.compare(hlo::Cmp::GT, z, b.zeros(Type{ct, nc})), b.not_(hot));
  Value h = b.select(active, z, b.zeros(Type{ct, nc}));
  Value term = p == 1 ? h : b.mul(h, h);
  Value dterm = p == 1 ? b.convert(active, ct) : b.mul(b.full(2, ct, nc), h);
  Value scale = b.full(1.0 / static_cast<double>(r.c), ct, {r.n});
  if (c.args.has(weight_arg)) {
    Value w = b.convert(c.args.tensor(weight_arg), ct);
    Value wy = sum_over(b, b.select(hot, b.broadcast_in_dim(w, nc, {1}), b.zeros(Type{ct, nc})), {1});
    scale = b.mul(scale, wy);
  }
  Value loss = b.mul(sum_over(b, term, {1}), scale);
  return {b.mul(dterm, b.broadcast_in_dim(scale, nc, {0})), loss};
}

// multi_margin_loss(self, target, p, margin, weight, reduction)
std::vector<Value> lower_multi_margin(Context& c) {
  ClassRows r = class_rows(c, 0, 1, "multi_margin_loss", false);
  Value loss = multi_margin_terms(c, r, 1, 2, 3, 4).second;
  return one(cast(c.b, finish_rows(c.b, r, loss, c.args.int_(5)), c.args.info(0).dtype));
}

// multi_margin_loss_backward(grad_output, self, target, p, margin, weight, reduction)
std::vector<Value> lower_multi_margin_backward(Context& c) {
  Builder& b = c.b;
  ClassRows r = class_rows(c, 1, 2, "multi_margin_loss_backward", false);
  Value d = multi_margin_terms(c, r, 2, 3, 4, 5).first;
  const Dims nc{r.n, r.c};
  Value g = row_grad(b, r, b.convert(c.args.tensor(0), b.dtype(r.x)), c.args.int_(6));
  d = b.mul(d, b.broadcast_in_dim(g, nc, {0}));
  // x[y] enters every term with the opposite sign.
  Value hot = class_onehot(b, b.reshape(c.args.tensor(2), {r.n}), r.n, r.c);
  Value gy = b.broadcast_in_dim(sum_over(b, d, {1}), nc, {0});
  Value gi = b.select(hot, b.neg(gy), d);
  return one(cast(b, b.reshape(gi, c.args.info(1).sizes), c.args.info(1).dtype));
}

// multilabel_margin_loss: per row, the targets are the labels before the
// first -1; loss = sum over targets k and non-targets j of
// max(0, 1 - (x[k] - x[j])) / C. Returns (mask [N, K, C] of active terms,
// is_target [N, C], per-row loss [N]).
struct MultilabelTerms {
  Value active, is_target, hot, loss;
};

MultilabelTerms multilabel_terms(Context& c, const ClassRows& r, size_t target_arg) {
  Builder& b = c.b;
  const DType ct = b.dtype(r.x);
  const int64_t n = r.n, cls = r.c;
  const Dims nkc{n, cls, cls};
  Value y = b.convert(b.reshape(c.args.tensor(target_arg), {n, cls}), DType::I64);
  // valid[i, k]: no -1 at or before k.
  Value nonneg = b.compare(hlo::Cmp::GE, y, b.zeros(Type{DType::I64, {n, cls}}));
  Value valid = scan(b, nonneg, 1, "stablehlo.and", 1);
  Value yc = b.select(valid, y, b.zeros(Type{DType::I64, {n, cls}}));
  Value ok = b.or_(b.not_(valid), b.compare(hlo::Cmp::LT, yc, b.full_int(cls, DType::I64, {n, cls})));
  c.args.check(b.reduce(ok, b.constant_bool(true), {0, 1}, "stablehlo.and"),
               "multilabel_margin_loss: target out of range (" + std::string(c.op) + ")");
  // hot[i, k, j] = (target k of row i is class j)
  Value hot = b.and_(b.compare(hlo::Cmp::EQ, b.broadcast_in_dim(yc, nkc, {0, 1}), b.iota(Type{DType::I64, nkc}, 2)),
                     b.broadcast_in_dim(valid, nkc, {0, 1}));
  Value is_target = b.reduce(hot, b.constant_bool(false), {1}, "stablehlo.or");
  Value xk = sum_over(b, b.select(hot, b.broadcast_in_dim(r.x, nkc, {0, 2}), b.zeros(Type{ct, nkc})), {2});
  Value z = b.add(b.sub(b.full(1, ct, nkc), b.broadcast_in_dim(xk, nkc, {0, 1})), b.broadcast_in_dim(r.x, nkc, {0, 2}));
  Value active = b.and_(b.and_(b.compare(hlo::Cmp::GT, z, b.zeros(Type{ct, nkc})), b.broadcast_in_dim(valid, nkc, {0, 1})),
                        b.not_(b.broadcast_in_dim(is_target, nkc, {0, 2})));
  Value loss = b.div(sum_over(b, b.select(active, z, b.zeros(Type{ct, nkc})), {1, 2}),
                     b.full(static_cast<double>(cls), ct, {n}));
  return {active, is_target, hot, loss};
}

// multilabel_margin_loss_forward(self, target, reduction) -> (output, is_target)
std::vector<Value> lower_multilabel_margin(Context& c) {
  Builder& b = c.b;
  const TensorInfo& in = c.args.info(0);
  ClassRows r = class_rows(c, 0, 1, "multilabel_margin_loss", true);
  MultilabelTerms t = multilabel_terms(c, r, 1);
  Value is_target = b.reshape(b.convert(t.is_target, to_hlo(in.dtype)), c.args.info(1).sizes);
  return {cast(b, finish_rows(b, r, t.loss, c.args.int_(2)), in.dtype), is_target};
}

// multilabel_margin_loss_backward(grad_output, self, target, reduction, is_target)
std::vector<Value> lower_multilabel_margin_backward(Context& c) {
  Builder& b = c.b;
  const TensorInfo& in = c.args.info(1);
  ClassRows r = class_rows(c, 1, 2, "multilabel_margin_loss_backward", true);
  MultilabelTerms t = multilabel_terms(c, r, 2);
  const DType ct = b.dtype(r.x);
  const Dims nkc{r.n, r.c, r.c};
  Value g = b.div(row_grad(b, r, b.convert(c.args.tensor(0), ct), c.args.int_(3)),
                  b.full(static_cast<double>(r.c), ct, {r.n}));
  Value a = b.convert(t.active, ct);
  // +1 for each active term at its non-target j, -1 at its target k.
  Value per_k = sum_over(b, a, {2});  // [N, K]
  Value minus = sum_over(b, b.select(t.hot, b.broadcast_in_dim(per_k, nkc, {0, 1}), b.zeros(Type{ct, nkc})), {1});
  Value gi = b.mul(b.sub(sum_over(b, a, {1}), minus), b.broadcast_in_dim(g, {r.n, r.c}, {0}));
  return one(cast(b, b.reshape(gi, in.sizes), in.dtype));
}

// The result takes self's and target's promoted dtype (PyTorch's meta kernels).
template <typename F>
std::vector<Value> pointwise_loss(Context& c, F f) {
  // (self, target, reduction, ...)
  const at::ScalarType t = c10::promoteTypes(c.args.info(0).dtype, c.args.info(1).dtype);
  const Dims shape = broadcast_shapes(c.args.info(0).sizes, c.args.info(1).sizes);
  Builder& b = c.b;
  const DType ct = to_hlo(opmath_type(t));
  Value x = b.broadcast_to(b.convert(c.args.tensor(0), ct), shape);
  Value y = b.broadcast_to(b.convert(c.args.tensor(1), ct), shape);
  return one(cast(b, reduce_loss(b, f(b, x, y), c.args.int_(2)), t));
}

template <typename F>
std::vector<Value> pointwise_loss_backward(Context& c, F f) {
  // (grad_output, self, target, reduction, ...): the result takes the
  // promoted dtype of all three (PyTorch's meta kernels; autograd then casts
  // the gradient to self's dtype).
  const at::ScalarType t = c10::promoteTypes(c10::promoteTypes(c.args.info(0).dtype, c.args.info(1).dtype),
                                             c.args.info(2).dtype);
  const Dims shape = broadcast_shapes(c.args.info(1).sizes, c.args.info(2).sizes);
  Builder& b = c.b;
  const DType ct = to_hlo(opmath_type(t));
  Value g = expand_loss_grad(b, b.convert(c.args.tensor(0), ct), shape, c.args.int_(3));
  Value x = b.broadcast_to(b.convert(c.args.tensor(1), ct), shape);
  Value y = b.broadcast_to(b.convert(c.args.tensor(2), ct), shape);
  return one(cast(b, b.mul(g, f(b, x, y)), t));
}

// Targets of nll_loss: the one-hot class mask [*target, C] and the weight
// of each sample (its class weight, 0 where target == ignore_index).
struct NllTargets {
  Value onehot, weight;
  Dims ts, bts;  // target shape, target shape + [C]
  int64_t tr = 0;
};

NllTargets nll_targets(Context& c, size_t target_arg, size_t weight_arg, int64_t ignore, int64_t classes, DType ct) {
  Builder& b = c.b;
  NllTargets t;
  t.ts = c.args.info(target_arg).sizes;
  t.tr = static_cast<int64_t>(t.ts.size());
  t.bts = t.ts;
  t.bts.push_back(classes);
  Value target = b.convert(c.args.tensor(target_arg), DType::I64);
  Value valid = b.compare(Cmp::NE, target, b.full_int(ignore, DType::I64, t.ts));
  check_index_range(c, b.select(valid, target, b.zeros(Type{DType::I64, t.ts})), classes, false,
                    "Target out of bounds");
  Value safe = b.select(valid, target, b.zeros(Type{DType::I64, t.ts}));
  t.onehot = b.compare(Cmp::EQ, b.iota(Type{DType::I64, t.bts}, t.tr),
                       b.broadcast_in_dim(safe, t.bts, range(0, t.tr)));
  t.weight = b.full(1, ct, t.ts);
  if (c.args.has(weight_arg)) {
    Value w = b.broadcast_in_dim(b.convert(c.args.tensor(weight_arg), ct), t.bts, {t.tr});
    t.weight = sum_over(b, b.select(t.onehot, w, b.zeros(Type{ct, t.bts})), {t.tr});
  }
  t.weight = b.select(valid, t.weight, b.zeros(Type{ct, t.ts}));
  return t;
}

// nll_loss_forward(self [N, C] or [C], target, weight?, reduction, ignore_index) -> (output, total_weight)
// Also nll_loss2d_forward with self [N, C, H, W].
std::vector<Value> lower_nll_loss(Context& c) {
  const TensorInfo& in = c.args.info(0);
  TORCH_CHECK_NOT_IMPLEMENTED(!is_integral(in.dtype), "\"nll_loss_out_frame\" not implemented for '",
                              c10::toString(in.dtype), "'");
  const int64_t reduction = c.args.int_(3);
  Builder& b = c.b;
  const at::ScalarType t = in.dtype;
  const DType ct = to_hlo(opmath_type(t));
  const bool batched = in.dim() >= 2;
  NllTargets nt = nll_targets(c, 1, 2, c.args.int_(4), batched ? in.sizes[1] : in.sizes[0], ct);
  Value x = b.convert(c.args.tensor(0), ct);
  if (batched && in.dim() > 2) {  // classes last: [N, *, C]
    Dims perm{0};
    for (int64_t i = 2; i < in.dim(); ++i) perm.push_back(i);
    perm.push_back(1);
    x = b.transpose(x, perm);
  }
  Value picked = sum_over(b, b.select(nt.onehot, b.reshape(x, nt.bts), b.zeros(Type{ct, nt.bts})), {nt.tr});
  Value loss = b.neg(b.mul(picked, nt.weight));
  Value total = sum_over(b, nt.weight, range(0, nt.tr));
  Value out = loss;
  if (reduction != kNone) {
    Value s = sum_over(b, loss, range(0, nt.tr));
    out = reduction == kSum ? s : b.div(s, total);
  }
  return {cast(b, out, t), cast(b, total, t)};
}

// nll_loss_backward(grad_output, self, target, weight?, reduction, ignore_index, total_weight)
std::vector<Value> lower_nll_loss_backward(Context& c) {
  const TensorInfo& in = c.args.info(1);
  const int64_t reduction = c.args.int_(4);
  Builder& b = c.b;
  const at::ScalarType t = in.dtype;
  const DType ct = to_hlo(opmath_type(t));
  const bool batched = in.dim() >= 2;
  NllTargets nt = nll_targets(c, 2, 3, c.args.int_(5), batched ? in.sizes[1] : in.sizes[0], ct);
  Value g = b.convert(c.args.tensor(0), ct);
  Value gs = reduction == kNone ? b.broadcast_to(g, nt.ts) : b.broadcast_in_dim(g, nt.ts, {});
  if (reduction == kMean) gs = b.div(gs, b.broadcast_in_dim(b.convert(c.args.tensor(6), ct), nt.ts, {}));
  Value scale = b.mul(b.neg(nt.weight), gs);
  Value grad = b.select(nt.onehot, b.broadcast_in_dim(scale, nt.bts, range(0, nt.tr)), b.zeros(Type{ct, nt.bts}));
  if (batched && in.dim() > 2) {  // [N, *, C] -> [N, C, *]
    Dims perm{0, static_cast<int64_t>(nt.bts.size()) - 1};
    for (int64_t i = 1; i < static_cast<int64_t>(nt.bts.size()) - 1; ++i) perm.push_back(i);
    grad = b.transpose(grad, perm);
  }
  return one(cast(b, b.reshape(grad, in.sizes), t));
}

Value bce(Builder& b, Value x, Value y) {
  // -(y log x + (1 - y) log(1 - x)), logs clamped at -100 as PyTorch does
  Value lo = k(b, -100, x);
  Value lx = b.max(b.unary("stablehlo.log", x), lo);
  Value l1x = b.max(b.unary("stablehlo.log", b.sub(k(b, 1, x), x)), lo);
  return b.neg(b.add(b.mul(y, lx), b.mul(b.sub(k(b, 1, y), y), l1x)));
}

// binary_cross_entropy(self, target, weight?, reduction)
std::vector<Value> lower_bce(Context& c) {
  const at::ScalarType t = c.args.info(0).dtype;
  Builder& b = c.b;
  const DType ct = to_hlo(opmath_type(t));
  const Dims& shape = c.args.info(0).sizes;
  Value x = b.convert(c.args.tensor(0), ct), y = b.broadcast_to(b.convert(c.args.tensor(1), ct), shape);
  check_all(c, b.and_(b.compare(Cmp::GE, x, b.zeros(b.type(x))), b.compare(Cmp::LE, x, b.full(1, ct, shape))),
            std::string(exec::kRuntimeErrorCheck) + "all elements of input should be between 0 and 1");
  Value l = bce(b, x, y);
  if (c.args.has(2)) l = b.mul(l, b.broadcast_to(b.convert(c.args.tensor(2), ct), shape));
  return one(cast(b, reduce_loss(b, l, c.args.int_(3)), t));
}

// binary_cross_entropy_backward(grad_output, self, target, weight?, reduction)
std::vector<Value> lower_bce_backward(Context& c) {
  const at::ScalarType t = c.args.info(1).dtype;
  Builder& b = c.b;
  const DType ct = to_hlo(opmath_type(t));
  const Dims& shape = c.args.info(1).sizes;
  Value g = expand_loss_grad(b, b.convert(c.args.tensor(0), ct), shape, c.args.int_(4));
  Value x = b.convert(c.args.tensor(1), ct), y = b.broadcast_to(b.convert(c.args.tensor(2), ct), shape);
  // (x - y) / max((1 - x) x, eps)
  Value denom = b.max(b.mul(b.sub(k(b, 1, x), x), x), k(b, 1e-12, x));
  Value r = b.mul(g, b.div(b.sub(x, y), denom));
  if (c.args.has(3)) r = b.mul(r, b.broadcast_to(b.convert(c.args.tensor(3), ct), shape));
  return one(cast(b, r, t));
}


// native_dropout_backward(grad_output, mask, scale)
std::vector<Value> lower_dropout_backward(Context& c) {
  const at::ScalarType t = c.args.info(0).dtype;
  Builder& b = c.b;
  const DType ct = to_hlo(opmath_type(t));
  Value g = b.convert(c.args.tensor(0), ct);
  Value m = b.convert(c.args.tensor(1), ct);
  Value s = b.full(c.args.double_(2), ct, b.dims(g));
  return one(cast(b, b.mul(b.mul(g, m), s), t));
}


}  // namespace

TPU_LOWERINGS(nn) {
  reg("aten::max_pool2d_with_indices", [](Context& c) { return lower_max_pool(c, 2); });
  reg("aten::max_pool3d_with_indices", [](Context& c) { return lower_max_pool(c, 3); });
  // (grad_output, self, kernel_size, stride, padding, dilation, ceil_mode, indices)
  reg("aten::max_pool2d_with_indices_backward", [](Context& c) { return lower_max_pool_backward(c, 2, 7); });
  reg("aten::max_pool3d_with_indices_backward", [](Context& c) { return lower_max_pool_backward(c, 3, 7); });
  reg("aten::max_unpool2d", [](Context& c) { return lower_max_unpool(c, 2); });
  reg("aten::max_unpool3d", [](Context& c) { return lower_max_unpool(c, 3); });
  reg("aten::avg_pool2d", [](Context& c) { return lower_avg_pool(c, 2); });
  reg("aten::avg_pool3d", [](Context& c) { return lower_avg_pool(c, 3); });
  reg("aten::avg_pool2d_backward", [](Context& c) { return lower_avg_pool_backward(c, 2); });
  reg("aten::avg_pool3d_backward", [](Context& c) { return lower_avg_pool_backward(c, 3); });
  reg("aten::_adaptive_avg_pool2d", [](Context& c) { return lower_adaptive_avg(c, 2); });
  reg("aten::_adaptive_avg_pool3d", [](Context& c) { return lower_adaptive_avg(c, 3); });
  reg("aten::_adaptive_avg_pool2d_backward", [](Context& c) { return lower_adaptive_avg_backward(c, 2); });
  reg("aten::_adaptive_avg_pool3d_backward", [](Context& c) { return lower_adaptive_avg_backward(c, 3); });
  reg("aten::adaptive_max_pool2d", [](Context& c) { return lower_adaptive_max(c, 2); });
  reg("aten::adaptive_max_pool3d", [](Context& c) { return lower_adaptive_max(c, 3); });
  // (grad_output, self, indices)
  reg("aten::adaptive_max_pool2d_backward", [](Context& c) { return lower_max_pool_backward(c, 2, 2); });
  reg("aten::adaptive_max_pool3d_backward", [](Context& c) { return lower_max_pool_backward(c, 3, 2); });
  // (grad_output, self, kernel_size, output_size, indices)
  reg("aten::fractional_max_pool2d", [](Context& c) { return lower_fractional_max_pool(c, 2); });
  reg("aten::fractional_max_pool3d", [](Context& c) { return lower_fractional_max_pool(c, 3); });
  reg("aten::fractional_max_pool2d_backward", [](Context& c) { return lower_max_pool_backward(c, 2, 4); });
  reg("aten::fractional_max_pool3d_backward", [](Context& c) { return lower_max_pool_backward(c, 3, 4); });


  reg("aten::nll_loss_forward", lower_nll_loss);
  reg("aten::nll_loss2d_forward", lower_nll_loss);
  reg("aten::nll_loss_backward", lower_nll_loss_backward);
  reg("aten::nll_loss2d_backward", lower_nll_loss_backward);
  reg("aten::mse_loss", [](Context& c) {
    return pointwise_loss(c, [](Builder& b, Value x, Value y) { Value d = b.sub(x, y); return b.mul(d, d); });
  });
  reg("aten::mse_loss_backward", [](Context& c) {
    return pointwise_loss_backward(c, [](Builder& b, Value x, Value y) { return b.mul(k(b, 2, x), b.sub(x, y)); });
  });
  reg("aten::smooth_l1_loss", [](Context& c) {
    const double beta = c.args.double_(3);
    return pointwise_loss(c, [beta](Builder& b, Value x, Value y) {
      Value d = b.abs(b.sub(x, y));
      if (beta == 0) return d;
      return b.select(b.compare(Cmp::LT, d, k(b, beta, d)), b.div(b.mul(k(b, 0.5, d), b.mul(d, d)), k(b, beta, d)),
                      b.sub(d, k(b, 0.5 * beta, d)));
    });
  });
  reg("aten::smooth_l1_loss_backward", [](Context& c) {
    const double beta = c.args.double_(4);
    return pointwise_loss_backward(c, [beta](Builder& b, Value x, Value y) {
      Value d = b.sub(x, y);
      Value sign = b.unary("stablehlo.sign", d);
      if (beta == 0) return sign;
      return b.select(b.compare(Cmp::LT, b.abs(d), k(b, beta, d)), b.div(d, k(b, beta, d)), sign);
    });
  });
  reg("aten::huber_loss", [](Context& c) {
    const double delta = c.args.double_(3);
    return pointwise_loss(c, [delta](Builder& b, Value x, Value y) {
      Value d = b.abs(b.sub(x, y));
      return b.select(b.compare(Cmp::LT, d, k(b, delta, d)), b.mul(k(b, 0.5, d), b.mul(d, d)),
                      b.mul(k(b, delta, d), b.sub(d, k(b, 0.5 * delta, d))));
    });
  });
  reg("aten::huber_loss_backward", [](Context& c) {
    const double delta = c.args.double_(4);
    return pointwise_loss_backward(c, [delta](Builder& b, Value x, Value y) {
      Value d = b.sub(x, y);
      return b.clamp(k(b, -delta, d), d, k(b, delta, d));
    });
  });
  reg("aten::binary_cross_entropy", lower_bce);
  reg("aten::multi_margin_loss", lower_multi_margin);
  reg("aten::multi_margin_loss_backward", lower_multi_margin_backward);
  reg("aten::multilabel_margin_loss_forward", lower_multilabel_margin);
  reg("aten::multilabel_margin_loss_backward", lower_multilabel_margin_backward);
  reg("aten::binary_cross_entropy_backward", lower_bce_backward);

  reg("aten::native_dropout_backward", lower_dropout_backward);
}

}  // namespace tpu::lowering
