// grid_sampler_2d and its backward (torch.nn.functional.grid_sample on 4-D
// input): bilinear, nearest and bicubic interpolation with zeros, border and
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

struct Sampler {
  int64_t n, ch, h, w, ho, wo;
  DType ct;
  Coord x, y;  // source coordinates (bicubic: before padding, which applies per tap)
  int64_t padding;
  bool align;
};

Sampler sampler(Context& c, size_t input_arg, size_t grid_arg, size_t interp_arg) {
  const TensorInfo& in = c.args.info(input_arg);
  const TensorInfo& gi = c.args.info(grid_arg);
  TORCH_CHECK(in.dim() == 4 && gi.dim() == 4 && gi.sizes[3] == 2 && gi.sizes[0] == in.sizes[0],
              "grid_sampler_2d: expected 4D input [N, C, H, W] and grid [N, H_out, W_out, 2] with the same N, got ",
              dims_string(in.sizes), " and ", dims_string(gi.sizes));
  const int64_t interp = c.args.int_(interp_arg);
  TORCH_CHECK(interp == kBilinear || interp == kNearest || interp == kBicubic,
              "grid_sampler_2d: unknown interpolation mode ", interp);
  Builder& b = c.b;
  Sampler s{in.sizes[0], in.sizes[1], in.sizes[2], in.sizes[3], gi.sizes[1], gi.sizes[2],
            to_hlo(opmath_type(in.dtype)), {}, {}, 0, false};
  Value grid = b.convert(c.args.tensor(grid_arg), s.ct);
  const Dims gd{s.n, s.ho, s.wo};
  Value gx = b.reshape(b.slice(grid, {0, 0, 0, 0}, {s.n, s.ho, s.wo, 1}), gd);
  Value gy = b.reshape(b.slice(grid, {0, 0, 0, 1}, {s.n, s.ho, s.wo, 2}), gd);
  s.padding = c.args.int_(interp_arg + 1);
  s.align = c.args.bool_(interp_arg + 2);
  const int64_t coord_padding = interp == kBicubic ? kZeros : s.padding;
  s.x = source_coord(b, gx, s.w, coord_padding, s.align);
  s.y = source_coord(b, gy, s.h, coord_padding, s.align);
  return s;
}

// A sampling point (integer corner) with its validity and weight, and the
// weight's derivatives with respect to the source coordinates.
struct Tap {
  Value coords;  // [N, Ho, Wo, 3] i64: (n, y, x), clamped in range
  Value valid;   // [N, Ho, Wo]
  Value weight;  // [N, Ho, Wo]
  Value dx, dy;  // d weight / d ix, d weight / d iy (invalid for nearest)
};

Tap tap(Builder& b, const Sampler& s, Value xi, Value yi, Value weight, Value dx = Value(), Value dy = Value()) {
  const Dims gd{s.n, s.ho, s.wo};
  Value valid = b.and_(b.and_(b.compare(Cmp::GE, xi, k(b, 0, xi)), b.compare(Cmp::LT, xi, k(b, s.w, xi))),
                       b.and_(b.compare(Cmp::GE, yi, k(b, 0, yi)), b.compare(Cmp::LT, yi, k(b, s.h, yi))));
  auto idx = [&](Value v, int64_t size) {
    return b.reshape(b.clamp(b.zeros(Type{DType::I64, gd}), b.convert(v, DType::I64), b.full_int(size - 1, DType::I64, gd)),
                     {s.n, s.ho, s.wo, 1});
  };
  Value nidx = b.reshape(b.iota(Type{DType::I64, gd}, 0), {s.n, s.ho, s.wo, 1});
  return {b.concatenate({nidx, idx(yi, s.h), idx(xi, s.w)}, 3), valid, weight, dx, dy};
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

// The taps of nearest (1), bilinear (nw, ne, sw, se) or bicubic (4 x 4)
// interpolation.
std::vector<Tap> taps(Builder& b, const Sampler& s, int64_t interp) {
  Value ix = s.x.at, iy = s.y.at;
  if (interp == kNearest) {
    Value rx = b.unary("stablehlo.round_nearest_even", ix), ry = b.unary("stablehlo.round_nearest_even", iy);
    return {tap(b, s, rx, ry, k(b, 1, ix))};
  }
  Value x0 = b.unary("stablehlo.floor", ix), y0 = b.unary("stablehlo.floor", iy);
  if (interp == kBicubic) {
    auto [wx, dwx] = cubic_weights(b, b.sub(ix, x0));
    auto [wy, dwy] = cubic_weights(b, b.sub(iy, y0));
    std::vector<Tap> out;
    for (int i = 0; i < 4; ++i) {
      for (int j = 0; j < 4; ++j) {
        Value xi = pad_tap(b, b.add(x0, k(b, i - 1, x0)), s.w, s.padding, s.align);
        Value yj = pad_tap(b, b.add(y0, k(b, j - 1, y0)), s.h, s.padding, s.align);
        out.push_back(tap(b, s, xi, yj, b.mul(wx[i], wy[j]), b.mul(dwx[i], wy[j]), b.mul(wx[i], dwy[j])));
      }
    }
    return out;
  }
  Value x1 = b.add(x0, k(b, 1, x0)), y1 = b.add(y0, k(b, 1, y0));
  Value xa = b.sub(x1, ix), xb = b.sub(ix, x0), ya = b.sub(y1, iy), yb = b.sub(iy, y0);
  return {tap(b, s, x0, y0, b.mul(xa, ya), b.neg(ya), b.neg(xa)), tap(b, s, x1, y0, b.mul(xb, ya), ya, b.neg(xb)),
          tap(b, s, x0, y1, b.mul(xa, yb), b.neg(yb), xa), tap(b, s, x1, y1, b.mul(xb, yb), yb, xb)};
}

// input[n, :, y, x] at each tap: [N, C, Ho, Wo] (zero where out of bounds).
Value read(Builder& b, const Sampler& s, Value input, const Tap& t) {
  Builder::GatherDims dn;
  dn.offset_dims = {1};
  dn.collapsed_slice_dims = {0, 2, 3};
  dn.start_index_map = {0, 2, 3};
  dn.index_vector_dim = 3;
  Value v = b.gather(input, t.coords, dn, {1, s.ch, 1, 1}, {s.n, s.ch, s.ho, s.wo});
  return b.select(b.broadcast_in_dim(t.valid, b.dims(v), {0, 2, 3}), v, b.zeros(b.type(v)));
}

Value spread(Builder& b, const Sampler& s, Value w) { return b.broadcast_in_dim(w, {s.n, s.ch, s.ho, s.wo}, {0, 2, 3}); }

// grid_sampler_2d(input, grid, interpolation_mode, padding_mode, align_corners)
std::vector<Value> lower_grid_sampler(Context& c) {
  Builder& b = c.b;
  const at::ScalarType t = c.args.info(0).dtype;
  Sampler s = sampler(c, 0, 1, 2);
  Value input = b.convert(c.args.tensor(0), s.ct);
  Value out = b.zeros(Type{s.ct, {s.n, s.ch, s.ho, s.wo}});
  if (s.n * s.ch * s.h * s.w > 0) {
    for (const Tap& tp : taps(b, s, c.args.int_(2))) {
      out = b.add(out, b.mul(read(b, s, input, tp), spread(b, s, tp.weight)));
    }
  }
  return one(cast(b, out, t));
}

// grid_sampler_2d_backward(grad_output, input, grid, interpolation_mode,
//   padding_mode, align_corners, output_mask) -> (grad_input, grad_grid)
std::vector<Value> lower_grid_sampler_backward(Context& c) {
  Builder& b = c.b;
  const at::ScalarType t = c.args.info(1).dtype;
  const at::ScalarType gt = c.args.info(2).dtype;
  Sampler s = sampler(c, 1, 2, 3);
  const int64_t interp = c.args.int_(3);
  std::vector<int64_t> mask = c.args.ints(6);
  Value g = b.convert(c.args.tensor(0), s.ct);
  Value input = b.convert(c.args.tensor(1), s.ct);
  const Dims od{s.n, s.ch, s.ho, s.wo}, gd{s.n, s.ho, s.wo};
  Value gin = b.zeros(Type{s.ct, {s.n, s.ch, s.h, s.w}});
  Value gix = b.zeros(Type{s.ct, gd}), giy = b.zeros(Type{s.ct, gd});
  const bool empty = s.n * s.ch * s.h * s.w == 0;
  std::vector<Tap> tps = empty ? std::vector<Tap>{} : taps(b, s, interp);
  Builder::ScatterDims dn;
  dn.update_window_dims = {1};
  dn.inserted_window_dims = {0, 2, 3};
  dn.scatter_dims_to_operand_dims = {0, 2, 3};
  dn.index_vector_dim = 3;
  auto add = [](Builder& rb, const std::vector<Value>& a) { return std::vector<Value>{rb.add(a[0], a[1])}; };
  for (const Tap& tp : tps) {
    if (mask.empty() || mask[0]) {
      Value upd = b.mul(g, spread(b, s, b.select(tp.valid, tp.weight, b.zeros(b.type(tp.weight)))));
      gin = b.scatter(gin, tp.coords, upd, dn, add);
    }
    if (!tp.dx.valid() || (mask.size() > 1 && !mask[1])) continue;
    // sum over channels of value * grad_output, times d weight / d coordinate
    Value vg = sum_over(b, b.mul(read(b, s, input, tp), g), {1});
    gix = b.add(gix, b.mul(vg, tp.dx));
    giy = b.add(giy, b.mul(vg, tp.dy));
  }
  gix = b.mul(gix, s.x.grad);
  giy = b.mul(giy, s.y.grad);
  Value ggrid = b.concatenate({b.reshape(gix, {s.n, s.ho, s.wo, 1}), b.reshape(giy, {s.n, s.ho, s.wo, 1})}, 3);
  return {cast(b, gin, t), cast(b, ggrid, gt)};
}

}  // namespace

TPU_LOWERINGS(grid_sample) {
  reg("aten::grid_sampler_2d", lower_grid_sampler);
  reg("aten::grid_sampler_2d_backward", lower_grid_sampler_backward);
}

}  // namespace tpu::lowering
