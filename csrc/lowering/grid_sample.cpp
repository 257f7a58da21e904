// grid_sampler_2d/3d and their backward (torch.nn.functional.grid_sample):
// (bi/tri)linear, nearest and (2-D) bicubic interpolation with zeros, border and
// reflection padding, as the CPU kernel computes them (source coordinates,
// tap weights, and the gradient with respect to the grid).
#include <cmath>

#include "csrc/lowering/common.h"

namespace tpu::lowering {

namespace {

using hlo::Cmp;

enum Interp { kBilinear = 0, kNearest = 1, kBicubic = 2 };
enum Padding { kZeros = 0, kBorder = 1, kReflection = 2 };

Value k(Builder& b, double v, Value like) { return b.full(v, b.dtype(like), b.dims(like)); }

// A source coordinate along an axis of `size` from normalized grid values,
// and d(coordinate)/d(grid value).
struct Coord {
  Value at, grad;
};

// Clip to [0, size - 1]; the gradient vanishes where clipped.
void clip(Builder& b, Coord& c, int64_t size) {
  Value lo = b.compare(Cmp::LE, c.at, k(b, 0, c.at));
  Value hi = b.compare(Cmp::GE, c.at, k(b, static_cast<double>(size - 1), c.at));
  c.grad = b.select(b.or_(lo, hi), k(b, 0, c.grad), c.grad);
  c.at = b.select(lo, k(b, 0, c.at), b.select(hi, k(b, static_cast<double>(size - 1), c.at), c.at));
}

// Reflect into [twice_low / 2, twice_high / 2], tracking the sign of the slope.
void reflect(Builder& b, Coord& c, double twice_low, double twice_high) {
  if (twice_low == twice_high) {
    c.at = k(b, 0, c.at);
    c.grad = k(b, 0, c.grad);
    return;
  }
  const double lo = twice_low / 2, span = (twice_high - twice_low) / 2;
  Value in = b.sub(c.at, k(b, lo, c.at));
  Value neg = b.compare(Cmp::LT, in, k(b, 0, in));
  Value mult = b.select(neg, k(b, -1, in), k(b, 1, in));
  in = b.abs(in);
  Value extra = b.rem(in, k(b, span, in));
  Value flips = b.unary("stablehlo.floor", b.div(in, k(b, span, in)));
  Value even = b.compare(Cmp::EQ, b.rem(flips, k(b, 2, flips)), k(b, 0, flips));
  c.at = b.select(even, b.add(extra, k(b, lo, extra)), b.add(b.sub(k(b, span, extra), extra), k(b, lo, extra)));
  c.grad = b.mul(c.grad, b.select(even, mult, b.neg(mult)));
}

Coord source_coord(Builder& b, Value g, int64_t size, int64_t padding, bool align) {
  Coord c;
  if (align) {
    c.at = b.mul(b.div(b.add(g, k(b, 1, g)), k(b, 2, g)), k(b, static_cast<double>(size - 1), g));
    c.grad = k(b, (size - 1) / 2.0, g);
  } else {
    c.at = b.div(b.sub(b.mul(b.add(g, k(b, 1, g)), k(b, static_cast<double>(size), g)), k(b, 1, g)), k(b, 2, g));
    c.grad = k(b, size / 2.0, g);
  }
  if (padding == kBorder) {
    clip(b, c, size);
  } else if (padding == kReflection) {
    if (align) reflect(b, c, 0, 2.0 * (size - 1));
    else reflect(b, c, -1, 2.0 * size - 1);
    clip(b, c, size);
  }
  // Non-finite coordinates sample nothing (the CPU maps them far outside).
  c.at = b.select(b.is_finite(c.at), c.at, k(b, -100, c.at));
  return c;
}

// The sampling geometry: input [N, C, *spatial], grid [N, *out, nsp] whose
// last dim holds (x, y[, z]), i.e. coordinates of the spatial dims in
// reverse order.
struct Sampler {
  int64_t n, ch, nsp;
  Dims spatial, out;     // input's spatial sizes, output's
  DType ct;
  std::vector<Coord> c;  // per grid component (x, y, z); bicubic: before padding, applied per tap
  int64_t padding;
  bool align;
  Dims grid_dims() const {  // [N, *out]
    Dims d{n};
    d.insert(d.end(), out.begin(), out.end());
    return d;
  }
  Dims out_dims() const {  // [N, C, *out]
    Dims d{n, ch};
    d.insert(d.end(), out.begin(), out.end());
    return d;
  }
  int64_t size_of(size_t j) const { return spatial[nsp - 1 - j]; }  // extent along grid component j
};

Sampler sampler(Context& c, size_t input_arg, size_t grid_arg, size_t interp_arg, int64_t nsp) {
  const TensorInfo& in = c.args.info(input_arg);
  const TensorInfo& gi = c.args.info(grid_arg);
  TORCH_CHECK(in.dim() == nsp + 2 && gi.dim() == nsp + 2 && gi.sizes.back() == nsp && gi.sizes[0] == in.sizes[0],
              "grid_sampler_", nsp, "d: expected ", nsp + 2, "D input and grid with ", nsp,
              " coordinates per point and the same batch, got ", dims_string(in.sizes), " and ", dims_string(gi.sizes));
  const int64_t interp = c.args.int_(interp_arg);
  TORCH_CHECK(interp == kBilinear || interp == kNearest || (interp == kBicubic && nsp == 2),
              "grid_sampler_", nsp, "d: unsupported interpolation mode ", interp);
  Builder& b = c.b;
  Sampler s;
  s.n = in.sizes[0];
  s.ch = in.sizes[1];
  s.nsp = nsp;
  s.spatial = Dims(in.sizes.begin() + 2, in.sizes.end());
  s.out = Dims(gi.sizes.begin() + 1, gi.sizes.end() - 1);
  s.ct = to_hlo(opmath_type(in.dtype));
  s.padding = c.args.int_(interp_arg + 1);
  s.align = c.args.bool_(interp_arg + 2);
  Value grid = b.convert(c.args.tensor(grid_arg), s.ct);
  const int64_t coord_padding = interp == kBicubic ? kZeros : s.padding;
  for (int64_t j = 0; j < nsp; ++j) {
    Value g = b.reshape(b.slice_dim(grid, nsp + 1, j, j + 1), s.grid_dims());
    s.c.push_back(source_coord(b, g, s.size_of(j), coord_padding, s.align));
  }
  return s;
}

// A sampling point (integer corner) with its validity and weight, and the
// weight's derivatives with respect to the source coordinates.
struct Tap {
  Value coords;           // [N, *out, 1 + nsp] i64: (n, spatial...) clamped in range
  Value valid;            // [N, *out]
  Value weight;           // [N, *out]
  std::vector<Value> dw;  // d weight / d coordinate j (empty for nearest)
};

// pos[j]: the integer position along grid component j.
Tap tap(Builder& b, const Sampler& s, const std::vector<Value>& pos, Value weight, std::vector<Value> dw = {}) {
  const Dims gd = s.grid_dims();
  Dims col = gd;
  col.push_back(1);
  Value valid = b.full(1, DType::Pred, gd);
  std::vector<Value> parts{b.reshape(b.iota(Type{DType::I64, gd}, 0), col)};
  for (int64_t d = 0; d < s.nsp; ++d) {  // input dims in order: component nsp - 1 - d
    const size_t j = static_cast<size_t>(s.nsp - 1 - d);
    Value v = pos[j];
    const int64_t size = s.size_of(j);
    valid = b.and_(valid, b.and_(b.compare(Cmp::GE, v, k(b, 0, v)), b.compare(Cmp::LT, v, k(b, size, v))));
    parts.push_back(b.reshape(
        b.clamp(b.zeros(Type{DType::I64, gd}), b.convert(v, DType::I64), b.full_int(size - 1, DType::I64, gd)), col));
  }
  return {b.concatenate(parts, static_cast<int64_t>(gd.size())), valid, weight, std::move(dw)};
}

// Keys' cubic convolution weights (A = -0.75) of the 4 taps around t in
// [0, 1), and their derivatives in t.
std::pair<std::vector<Value>, std::vector<Value>> cubic_weights(Builder& b, Value t) {
  const double A = -0.75;
  auto near = [&](Value x) {  // |x| <= 1
    return b.add(b.mul(b.mul(b.sub(b.mul(k(b, A + 2, x), x), k(b, A + 3, x)), x), x), k(b, 1, x));
  };
  auto far = [&](Value x) {  // 1 < |x| < 2
    return b.sub(b.mul(b.add(b.mul(b.sub(b.mul(k(b, A, x), x), k(b, 5 * A, x)), x), k(b, 8 * A, x)), x), k(b, 4 * A, x));
  };
  Value one_ = k(b, 1, t);
  std::vector<Value> w{far(b.add(t, one_)), near(t), near(b.sub(one_, t)), far(b.sub(k(b, 2, t), t))};
  // d/dt of each weight.
  auto dfar = [&](Value x) { return b.add(b.mul(b.sub(b.mul(k(b, 3 * A, x), x), k(b, 10 * A, x)), x), k(b, 8 * A, x)); };
  auto dnear = [&](Value x) { return b.mul(b.sub(b.mul(k(b, 3 * (A + 2), x), x), k(b, 2 * (A + 3), x)), x); };
  std::vector<Value> dw{dfar(b.add(t, one_)), dnear(t), b.neg(dnear(b.sub(one_, t))), b.neg(dfar(b.sub(k(b, 2, t), t)))};
  return {w, dw};
}

// An integer tap coordinate moved inside by the padding mode (bicubic pads
// each tap, not the source coordinate).
Value pad_tap(Builder& b, Value v, int64_t size, int64_t padding, bool align) {
  if (padding == kZeros) return v;
  Coord c{v, k(b, 1, v)};
  if (padding == kReflection) {
    if (align) reflect(b, c, 0, 2.0 * (size - 1));
    else reflect(b, c, -1, 2.0 * size - 1);
  }
  clip(b, c, size);
  return c.at;
}

// The taps of nearest (1), linear (2^nsp corners) or bicubic (4 x 4)
// interpolation.
std::vector<Tap> taps(Builder& b, const Sampler& s, int64_t interp) {
  const size_t nsp = static_cast<size_t>(s.nsp);
  std::vector<Value> at;
  for (const Coord& c : s.c) at.push_back(c.at);
  if (interp == kNearest) {
    std::vector<Value> pos;
    for (Value v : at) pos.push_back(b.unary("stablehlo.round_nearest_even", v));
    return {tap(b, s, pos, k(b, 1, at[0]))};
  }
  std::vector<Value> lo;
  for (Value v : at) lo.push_back(b.unary("stablehlo.floor", v));
  if (interp == kBicubic) {
    auto [wx, dwx] = cubic_weights(b, b.sub(at[0], lo[0]));
    auto [wy, dwy] = cubic_weights(b, b.sub(at[1], lo[1]));
    std::vector<Tap> out;
    for (int i = 0; i < 4; ++i) {
      for (int j = 0; j < 4; ++j) {
        Value xi = pad_tap(b, b.add(lo[0], k(b, i - 1, lo[0])), s.size_of(0), s.padding, s.align);
        Value yj = pad_tap(b, b.add(lo[1], k(b, j - 1, lo[1])), s.size_of(1), s.padding, s.align);
        out.push_back(tap(b, s, {xi, yj}, b.mul(wx[i], wy[j]), {b.mul(dwx[i], wy[j]), b.mul(wx[i], dwy[j])}));
      }
    }
    return out;
  }
  // Linear: per component the lower corner weighs (lo + 1 - c), the upper (c - lo).
  std::vector<Value> w_lo, w_hi;
  for (size_t j = 0; j < nsp; ++j) {
    w_lo.push_back(b.sub(b.add(lo[j], k(b, 1, lo[j])), at[j]));
    w_hi.push_back(b.sub(at[j], lo[j]));
  }
  std::vector<Tap> out;
  for (int corner = 0; corner < (1 << nsp); ++corner) {
    std::vector<Value> pos, w(nsp), dw;
    for (size_t j = 0; j < nsp; ++j) {
      const bool hi = (corner >> j) & 1;
      pos.push_back(hi ? b.add(lo[j], k(b, 1, lo[j])) : lo[j]);
      w[j] = hi ? w_hi[j] : w_lo[j];
    }
    Value weight = w[0];
    for (size_t j = 1; j < nsp; ++j) weight = b.mul(weight, w[j]);
    for (size_t j = 0; j < nsp; ++j) {  // product rule: d w_j / d c_j = +-1
      Value d = k(b, ((corner >> j) & 1) ? 1.0 : -1.0, at[j]);
      for (size_t i = 0; i < nsp; ++i) if (i != j) d = b.mul(d, w[i]);
      dw.push_back(d);
    }
    out.push_back(tap(b, s, pos, weight, dw));
  }
  return out;
}

// A per-point value [N, *out] over the channels: [N, C, *out].
Value spread(Builder& b, const Sampler& s, Value w) {
  Dims map{0};
  for (int64_t d = 0; d < s.nsp; ++d) map.push_back(2 + d);
  return b.broadcast_in_dim(w, s.out_dims(), map);
}

// input[n, :, spatial...] at each tap: [N, C, *out] (zero where out of bounds).
Value read(Builder& b, const Sampler& s, Value input, const Tap& t) {
  Builder::GatherDims dn;
  dn.offset_dims = {1};
  dn.collapsed_slice_dims = {0};
  dn.start_index_map = {0};
  for (int64_t d = 0; d < s.nsp; ++d) {
    dn.collapsed_slice_dims.push_back(2 + d);
    dn.start_index_map.push_back(2 + d);
  }
  dn.index_vector_dim = s.nsp + 1;
  Dims slice(s.nsp + 2, 1);
  slice[1] = s.ch;
  Value v = b.gather(input, t.coords, dn, slice, s.out_dims());
  return b.select(spread(b, s, t.valid), v, b.zeros(b.type(v)));
}

// grid_sampler_{2,3}d(input, grid, interpolation_mode, padding_mode, align_corners)
std::vector<Value> lower_grid_sampler(Context& c, int64_t nsp) {
  Builder& b = c.b;
  const at::ScalarType t = c.args.info(0).dtype;
  Sampler s = sampler(c, 0, 1, 2, nsp);
  Value input = b.convert(c.args.tensor(0), s.ct);
  Value out = b.zeros(Type{s.ct, s.out_dims()});
  if (c.args.info(0).numel() > 0) {
    for (const Tap& tp : taps(b, s, c.args.int_(2))) {
      out = b.add(out, b.mul(read(b, s, input, tp), spread(b, s, tp.weight)));
    }
  }
  return one(cast(b, out, t));
}

// grid_sampler_{2,3}d_backward(grad_output, input, grid, interpolation_mode,
//   padding_mode, align_corners, output_mask) -> (grad_input, grad_grid)
std::vector<Value> lower_grid_sampler_backward(Context& c, int64_t nsp) {
  Builder& b = c.b;
  const at::ScalarType t = c.args.info(1).dtype;
  const at::ScalarType gt = c.args.info(2).dtype;
  Sampler s = sampler(c, 1, 2, 3, nsp);
  std::vector<int64_t> mask = c.args.ints(6);
  Value g = b.convert(c.args.tensor(0), s.ct);
  Value input = b.convert(c.args.tensor(1), s.ct);
  const Dims gd = s.grid_dims();
  Value gin = b.zeros(Type{s.ct, c.args.info(1).sizes});
  std::vector<Value> gc(nsp, b.zeros(Type{s.ct, gd}));
  std::vector<Tap> tps = c.args.info(1).numel() == 0 ? std::vector<Tap>{} : taps(b, s, c.args.int_(3));
  Builder::ScatterDims dn;
  dn.update_window_dims = {1};
  dn.inserted_window_dims = {0};
  dn.scatter_dims_to_operand_dims = {0};
  for (int64_t d = 0; d < nsp; ++d) {
    dn.inserted_window_dims.push_back(2 + d);
    dn.scatter_dims_to_operand_dims.push_back(2 + d);
  }
  dn.index_vector_dim = nsp + 1;
  auto add = [](Builder& rb, const std::vector<Value>& a) { return std::vector<Value>{rb.add(a[0], a[1])}; };
  for (const Tap& tp : tps) {
    if (mask.empty() || mask[0]) {
      Value upd = b.mul(g, spread(b, s, b.select(tp.valid, tp.weight, b.zeros(b.type(tp.weight)))));
      gin = b.scatter(gin, tp.coords, upd, dn, add);
    }
    if (tp.dw.empty() || (mask.size() > 1 && !mask[1])) continue;
    // sum over channels of value * grad_output, times d weight / d coordinate
    Value vg = sum_over(b, b.mul(read(b, s, input, tp), g), {1});
    for (int64_t j = 0; j < nsp; ++j) gc[j] = b.add(gc[j], b.mul(vg, tp.dw[j]));
  }
  Dims col = gd;
  col.push_back(1);
  std::vector<Value> parts;
  for (int64_t j = 0; j < nsp; ++j) parts.push_back(b.reshape(b.mul(gc[j], s.c[j].grad), col));
  return {cast(b, gin, t), cast(b, b.concatenate(parts, nsp + 1), gt)};
}

}  // namespace

TPU_LOWERINGS(grid_sample) {
  reg("aten::grid_sampler_2d", [](Context& c) { return lower_grid_sampler(c, 2); });
  reg("aten::grid_sampler_3d", [](Context& c) { return lower_grid_sampler(c, 3); });
  reg("aten::grid_sampler_2d_backward", [](Context& c) { return lower_grid_sampler_backward(c, 2); });
  reg("aten::grid_sampler_3d_backward", [](Context& c) { return lower_grid_sampler_backward(c, 3); });
}

}  // namespace tpu::lowering
