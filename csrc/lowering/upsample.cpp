// Upsampling (nearest, nearest-exact, linear, bilinear, trilinear, bicubic,
// and antialiased bilinear and bicubic) and its backward ops, separable: one
// spatial dim at a time, on the trailing dims, with or without a batch
// dimension. Source indices and weights are computed on the host exactly as
// PyTorch computes them.
#include <algorithm>
#include <cmath>

#include "csrc/lowering/common.h"

namespace tpu::lowering {

namespace {

// PyTorch's source-index scale for output `out` from input `in`.
double area_scale(int64_t in, int64_t out, bool align_corners, std::optional<double> scale) {
  if (align_corners) return out > 1 ? static_cast<double>(in - 1) / (out - 1) : 0.0;
  if (scale && *scale > 0) return 1.0 / *scale;
  return static_cast<double>(in) / out;
}

std::optional<double> scale_arg(Context& c, size_t i) {
  if (i >= c.args.size() || !c.args.has(i)) return std::nullopt;
  return c.args.double_(i);
}

// Nearest source indices, computed as PyTorch does (in float).
std::vector<int64_t> nearest_indices(int64_t in, int64_t out, std::optional<double> scale, bool exact) {
  const float s = static_cast<float>(scale && *scale > 0 ? 1.0 / *scale : static_cast<double>(in) / out);
  std::vector<int64_t> idx(out);
  for (int64_t i = 0; i < out; ++i) {
    const float src = exact ? std::floor((static_cast<float>(i) + 0.5f) * s) : std::floor(static_cast<float>(i) * s);
    idx[i] = std::min<int64_t>(static_cast<int64_t>(src), in - 1);
  }
  return idx;
}


// Adds rows of `g` (along d) into rows idx[i] of a zero tensor with `n` rows.

// upsample_nearest{1,2,3}d(self, output_size, scales...) and _upsample_nearest_exact.
std::vector<Value> lower_upsample_nearest(Context& c, int64_t nsp, bool exact) {
  const TensorInfo& in = c.args.info(0);
  Dims out = c.args.ints(1);
  Builder& b = c.b;
  Value x = c.args.tensor(0);
  const int64_t lead = in.dim() - nsp;
  for (int64_t i = 0; i < nsp; ++i) {
    x = take_along(b, x, lead + i, nearest_indices(in.sizes[lead + i], out[i], scale_arg(c, 2 + i), exact));
  }
  return one(x);
}

std::vector<Value> lower_upsample_nearest_backward(Context& c, int64_t nsp, bool exact) {
  // (grad_output, output_size, input_size, scales...)
  Dims out = c.args.ints(1);
  Dims in = c.args.ints(2);
  const at::ScalarType t = c.args.info(0).dtype;
  Builder& b = c.b;
  Value g = cast(b, c.args.tensor(0), opmath_type(t));
  const int64_t lead = static_cast<int64_t>(in.size()) - nsp;
  for (int64_t i = 0; i < nsp; ++i) {
    g = add_along(b, g, lead + i, nearest_indices(in[lead + i], out[i], scale_arg(c, 3 + i), exact), in[lead + i]);
  }
  return one(cast(b, g, t));
}

// Interpolation taps along one dim: for tap j, the source index and weight
// of every output index (2 taps for linear, 4 for cubic, as many as the
// widest filter for antialiased ones). `valid[j][o]` false: output o has
// fewer taps; its tap j contributes nothing (not even 0 * inf); empty: every
// tap is valid.
struct Taps {
  std::vector<std::vector<int64_t>> index;
  std::vector<std::vector<double>> weight;
  std::vector<std::vector<int64_t>> valid;
};

// The taps as the CPU kernels compute them: in float (opmath) for every
// dtype but float64, so indices and weights round the same way.
template <typename T>
Taps make_taps(int64_t in, int64_t out, bool align_corners, std::optional<double> scale, bool cubic) {
  const T s = static_cast<T>(area_scale(in, out, align_corners, scale));
  const int ntaps = cubic ? 4 : 2;
  Taps taps;
  taps.index.assign(ntaps, std::vector<int64_t>(out));
  taps.weight.assign(ntaps, std::vector<double>(out));
  auto clamp_index = [in](int64_t i) { return std::min<int64_t>(std::max<int64_t>(i, 0), in - 1); };
  for (int64_t o = 0; o < out; ++o) {
    T src = align_corners ? s * static_cast<T>(o) : s * (static_cast<T>(o) + T(0.5)) - T(0.5);
    if (!cubic) {
      if (src < 0) src = 0;
      const int64_t i0 = std::min<int64_t>(static_cast<int64_t>(src), in - 1);
      const T l1 = src - static_cast<T>(i0);
      taps.index[0][o] = i0;
      taps.index[1][o] = i0 < in - 1 ? i0 + 1 : i0;
      taps.weight[0][o] = static_cast<double>(T(1) - l1);
      taps.weight[1][o] = static_cast<double>(l1);
      continue;
    }
    // Keys' cubic convolution (A = -0.75) over the 4 neighbours, clamped at the edges.
    const int64_t i0 = std::min<int64_t>(static_cast<int64_t>(std::floor(src)), in - 1);
    const T t = std::min(std::max(src - static_cast<T>(i0), T(0)), T(1));
    const T A = T(-0.75);
    auto near = [A](T x) { return ((A + T(2)) * x - (A + T(3))) * x * x + T(1); };
    auto far = [A](T x) { return ((A * x - T(5) * A) * x + T(8) * A) * x - T(4) * A; };
    const T w[4] = {far(t + T(1)), near(t), near(T(1) - t), far(T(2) - t)};
    for (int j = 0; j < 4; ++j) {
      taps.index[j][o] = clamp_index(i0 - 1 + j);
      taps.weight[j][o] = static_cast<double>(w[j]);
    }
  }
  return taps;
}

// Antialiased taps (PIL's resampling, as CPU's _upsample_*_aa kernels
// compute them, with their mix of T and double arithmetic): downscaling
// widens the filter (triangle, or Keys' cubic with A = -0.5) by the scale, so
// that every input under an output contributes, and each output's weights
// are normalized to sum to 1.
template <typename T>
Taps make_aa_taps(int64_t in, int64_t out, bool align_corners, std::optional<double> scale, bool cubic) {
  const T s = static_cast<T>(area_scale(in, out, align_corners, scale));
  const int interp = cubic ? 4 : 2;
  const T support = s >= T(1) ? static_cast<T>((interp * 0.5) * s) : static_cast<T>(interp * 0.5);
  const int64_t ntaps = static_cast<int64_t>(std::ceil(support)) * 2 + 1;
  const T invscale = s >= T(1) ? static_cast<T>(1.0 / s) : T(1);
  auto filter = [cubic](T x) -> T {
    if (x < 0.0) x = -x;
    if (!cubic) return x < 1.0 ? 1.0 - x : 0.0;
    const T a = T(-0.5);
    if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
    if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
    return 0.0;
  };
  Taps taps;
  taps.index.assign(ntaps, std::vector<int64_t>(out));
  taps.weight.assign(ntaps, std::vector<double>(out, 0.0));
  taps.valid.assign(ntaps, std::vector<int64_t>(out, 0));
  std::vector<T> w(ntaps);
  for (int64_t o = 0; o < out; ++o) {
    const T center = s * (o + 0.5);
    const int64_t lo = std::min<int64_t>(std::max<int64_t>(static_cast<int64_t>(center - support + 0.5), 0), in - 1);
    const int64_t size = std::clamp<int64_t>(std::min<int64_t>(static_cast<int64_t>(center + support + 0.5), in) - lo,
                                             0, ntaps);
    T total = 0;
    for (int64_t j = 0; j < size; ++j) {
      w[j] = filter((static_cast<T>(j + lo) - center + 0.5) * invscale);
      total += w[j];
    }
    for (int64_t j = 0; j < ntaps; ++j) {
      taps.index[j][o] = j < size ? lo + j : lo;
      if (j >= size) continue;
      taps.weight[j][o] = static_cast<double>(total != 0 ? w[j] / total : w[j]);
      taps.valid[j][o] = 1;
    }
  }
  return taps;
}

Taps interp_taps(int64_t in, int64_t out, bool align_corners, std::optional<double> scale, bool fp64, bool cubic,
                 bool antialias) {
  if (antialias) {
    return fp64 ? make_aa_taps<double>(in, out, align_corners, scale, cubic)
                : make_aa_taps<float>(in, out, align_corners, scale, cubic);
  }
  return fp64 ? make_taps<double>(in, out, align_corners, scale, cubic)
              : make_taps<float>(in, out, align_corners, scale, cubic);
}

// v * the weights of tap j along d, zero where the tap is not one of an
// output's.
Value weighted_tap(Builder& b, Value v, const Taps& tp, size_t j, int64_t d, DType dt) {
  const Dims shape = b.dims(v);
  Value wv = b.mul(v, b.broadcast_in_dim(b.constant_floats(tp.weight[j], {static_cast<int64_t>(tp.weight[j].size())}, dt),
                                         shape, {d}));
  if (tp.valid.empty() || std::all_of(tp.valid[j].begin(), tp.valid[j].end(), [](int64_t x) { return x != 0; })) {
    return wv;
  }
  const int64_t n = static_cast<int64_t>(tp.valid[j].size());
  Value ok = b.compare(hlo::Cmp::NE, b.constant_i64s(tp.valid[j], {n}), b.broadcast_in_dim(b.constant_int(0, DType::I64), {n}, {}));
  return b.select(b.broadcast_in_dim(ok, shape, {d}), wv, b.broadcast_in_dim(b.constant(0.0, dt), shape, {}));
}

// upsample_{linear1d, bilinear2d, trilinear3d, bicubic2d}(self, output_size,
// align_corners, scales...) and _upsample_{bilinear2d, bicubic2d}_aa:
// separable, one spatial dim at a time (the antialiased ones from the last,
// as CPU's kernels).
std::vector<Value> lower_upsample_interp(Context& c, int64_t nsp, bool cubic, bool antialias = false) {
  const TensorInfo& in = c.args.info(0);
  Dims out = c.args.ints(1);
  const bool align = c.args.bool_(2);
  Builder& b = c.b;
  const at::ScalarType t = in.dtype;
  const DType ct = to_hlo(opmath_type(t));
  Value x = b.convert(c.args.tensor(0), ct);
  const int64_t lead = in.dim() - nsp;
  for (int64_t k = 0; k < nsp; ++k) {
    const int64_t i = antialias ? nsp - 1 - k : k;
    const int64_t d = lead + i;
    Taps tp = interp_taps(in.sizes[d], out[i], align, scale_arg(c, 3 + i), t == at::kDouble, cubic, antialias);
    Value sum;
    for (size_t j = 0; j < tp.index.size(); ++j) {
      Value v = weighted_tap(b, take_along(b, x, d, tp.index[j]), tp, j, d, ct);
      sum = j == 0 ? v : b.add(sum, v);
    }
    x = sum;
  }
  return one(cast(b, x, t));
}

// upsample_*_backward(grad_output, output_size, input_size, align_corners, scales...)
std::vector<Value> lower_upsample_interp_backward(Context& c, int64_t nsp, bool cubic, bool antialias = false) {
  Dims out = c.args.ints(1);
  Dims in = c.args.ints(2);
  const bool align = c.args.bool_(3);
  const at::ScalarType t = c.args.info(0).dtype;
  Builder& b = c.b;
  const DType ct = to_hlo(opmath_type(t));
  Value g = b.convert(c.args.tensor(0), ct);
  const int64_t lead = static_cast<int64_t>(in.size()) - nsp;
  for (int64_t k = 0; k < nsp; ++k) {
    const int64_t i = antialias ? k : nsp - 1 - k;
    const int64_t d = lead + i;
    Taps tp = interp_taps(in[d], out[i], align, scale_arg(c, 4 + i), t == at::kDouble, cubic, antialias);
    Value sum;
    for (size_t j = 0; j < tp.index.size(); ++j) {
      Value v = add_along(b, weighted_tap(b, g, tp, j, d, ct), d, tp.index[j], in[d]);
      sum = j == 0 ? v : b.add(sum, v);
    }
    g = sum;
  }
  return one(cast(b, g, t));
}

}  // namespace

TPU_LOWERINGS(upsample) {
  reg("aten::upsample_nearest1d", [](Context& c) { return lower_upsample_nearest(c, 1, false); });
  reg("aten::upsample_nearest2d", [](Context& c) { return lower_upsample_nearest(c, 2, false); });
  reg("aten::upsample_nearest3d", [](Context& c) { return lower_upsample_nearest(c, 3, false); });
  reg("aten::_upsample_nearest_exact1d", [](Context& c) { return lower_upsample_nearest(c, 1, true); });
  reg("aten::_upsample_nearest_exact2d", [](Context& c) { return lower_upsample_nearest(c, 2, true); });
  reg("aten::_upsample_nearest_exact3d", [](Context& c) { return lower_upsample_nearest(c, 3, true); });
  reg("aten::upsample_nearest1d_backward", [](Context& c) { return lower_upsample_nearest_backward(c, 1, false); });
  reg("aten::upsample_nearest2d_backward", [](Context& c) { return lower_upsample_nearest_backward(c, 2, false); });
  reg("aten::upsample_nearest3d_backward", [](Context& c) { return lower_upsample_nearest_backward(c, 3, false); });
  reg("aten::_upsample_nearest_exact1d_backward", [](Context& c) { return lower_upsample_nearest_backward(c, 1, true); });
  reg("aten::_upsample_nearest_exact2d_backward", [](Context& c) { return lower_upsample_nearest_backward(c, 2, true); });
  reg("aten::_upsample_nearest_exact3d_backward", [](Context& c) { return lower_upsample_nearest_backward(c, 3, true); });
  reg("aten::upsample_linear1d", [](Context& c) { return lower_upsample_interp(c, 1, false); });
  reg("aten::upsample_bilinear2d", [](Context& c) { return lower_upsample_interp(c, 2, false); });
  reg("aten::upsample_trilinear3d", [](Context& c) { return lower_upsample_interp(c, 3, false); });
  reg("aten::upsample_bicubic2d", [](Context& c) { return lower_upsample_interp(c, 2, true); });
  reg("aten::upsample_linear1d_backward", [](Context& c) { return lower_upsample_interp_backward(c, 1, false); });
  reg("aten::upsample_bilinear2d_backward", [](Context& c) { return lower_upsample_interp_backward(c, 2, false); });
  reg("aten::upsample_trilinear3d_backward", [](Context& c) { return lower_upsample_interp_backward(c, 3, false); });
  reg("aten::upsample_bicubic2d_backward", [](Context& c) { return lower_upsample_interp_backward(c, 2, true); });
  reg("aten::_upsample_bilinear2d_aa", [](Context& c) { return lower_upsample_interp(c, 2, false, true); });
  reg("aten::_upsample_bicubic2d_aa", [](Context& c) { return lower_upsample_interp(c, 2, true, true); });
  reg("aten::_upsample_bilinear2d_aa_backward",
      [](Context& c) { return lower_upsample_interp_backward(c, 2, false, true); });
  reg("aten::_upsample_bicubic2d_aa_backward",
      [](Context& c) { return lower_upsample_interp_backward(c, 2, true, true); });
}

}  // namespace tpu::lowering
