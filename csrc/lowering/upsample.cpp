// Upsampling (nearest, nearest-exact, linear, bilinear, trilinear, bicubic)
// and its backward ops, separable: one spatial dim at a time, on the trailing
// dims, with or without a batch dimension. Source indices and weights are
// computed on the host exactly as PyTorch computes them.
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
// of every output index (2 taps for linear, 4 for cubic).
struct Taps {
  std::vector<std::vector<int64_t>> index;
  std::vector<std::vector<double>> weight;
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

Taps interp_taps(int64_t in, int64_t out, bool align_corners, std::optional<double> scale, bool fp64, bool cubic) {
  return fp64 ? make_taps<double>(in, out, align_corners, scale, cubic)
              : make_taps<float>(in, out, align_corners, scale, cubic);
}

Value weights_along(Builder& b, const std::vector<double>& w, const Dims& shape, int64_t d, DType dt) {
  return b.broadcast_in_dim(b.constant_floats(w, {static_cast<int64_t>(w.size())}, dt), shape, {d});
}

// upsample_{linear1d, bilinear2d, trilinear3d, bicubic2d}(self, output_size,
// align_corners, scales...): separable, one spatial dim at a time.
std::vector<Value> lower_upsample_interp(Context& c, int64_t nsp, bool cubic) {
  const TensorInfo& in = c.args.info(0);
  Dims out = c.args.ints(1);
  const bool align = c.args.bool_(2);
  Builder& b = c.b;
  const at::ScalarType t = in.dtype;
  const DType ct = to_hlo(opmath_type(t));
  Value x = b.convert(c.args.tensor(0), ct);
  const int64_t lead = in.dim() - nsp;
  for (int64_t i = 0; i < nsp; ++i) {
    const int64_t d = lead + i;
    Taps tp = interp_taps(in.sizes[d], out[i], align, scale_arg(c, 3 + i), t == at::kDouble, cubic);
    Value sum;
    for (size_t j = 0; j < tp.index.size(); ++j) {
      Value v = take_along(b, x, d, tp.index[j]);
      v = b.mul(v, weights_along(b, tp.weight[j], b.dims(v), d, ct));
      sum = j == 0 ? v : b.add(sum, v);
    }
    x = sum;
  }
  return one(cast(b, x, t));
}

// upsample_*_backward(grad_output, output_size, input_size, align_corners, scales...)
std::vector<Value> lower_upsample_interp_backward(Context& c, int64_t nsp, bool cubic) {
  Dims out = c.args.ints(1);
  Dims in = c.args.ints(2);
  const bool align = c.args.bool_(3);
  const at::ScalarType t = c.args.info(0).dtype;
  Builder& b = c.b;
  const DType ct = to_hlo(opmath_type(t));
  Value g = b.convert(c.args.tensor(0), ct);
  const int64_t lead = static_cast<int64_t>(in.size()) - nsp;
  for (int64_t i = nsp - 1; i >= 0; --i) {
    const int64_t d = lead + i;
    Taps tp = interp_taps(in[d], out[i], align, scale_arg(c, 4 + i), t == at::kDouble, cubic);
    const Dims& shape = b.dims(g);
    Value sum;
    for (size_t j = 0; j < tp.index.size(); ++j) {
      Value v = add_along(b, b.mul(g, weights_along(b, tp.weight[j], shape, d, ct)), d, tp.index[j], in[d]);
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
}

}  // namespace tpu::lowering
