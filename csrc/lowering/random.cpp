// Random numbers on the device: every op draws a fresh key from its
// Generator and runs stablehlo.rng_bit_generator (ThreeFry), so results are
// reproducible under torch.manual_seed and independent of the host.
#include <cmath>
#include <functional>

#include "csrc/lowering/common.h"

namespace tpu::lowering {

namespace {

using hlo::Cmp;

Value k(Builder& b, double v, Value like) { return b.full(v, b.dtype(like), b.dims(like)); }

Value random_bits(Context& c, size_t gen_arg, const Dims& shape, DType bits) {
  auto [state, out] = c.b.rng_bit_generator(c.args.rng_key(gen_arg), Type{bits, shape}, hlo::RngAlgorithm::ThreeFry);
  (void)state;
  return out;
}

// Uniform on the grid k * 2^-n, k in [0, 2^n), in `ct` (F32 or F64, whose
// significand holds n bits): every value exact, none rounding up to 1.
Value uniform_grid(Context& c, size_t gen_arg, const Dims& shape, DType ct, int n) {
  Builder& b = c.b;
  const DType bits_dt = ct == DType::F64 ? DType::U64 : DType::U32;
  const int width = ct == DType::F64 ? 64 : 32;
  Value bits = random_bits(c, gen_arg, shape, bits_dt);
  Value k = b.binary("stablehlo.shift_right_logical", bits, b.full_int(width - n, bits_dt, shape));
  return b.mul(b.convert(k, ct), b.full(std::ldexp(1.0, -n), ct, shape));
}

// Uniform in [0, 1) with as many random bits as `dt`'s mantissa holds, so
// that every value is exactly representable in `dt` (never rounds up to 1).
Value uniform01(Context& c, size_t gen_arg, const Dims& shape, DType dt) {
  if (dt == DType::F64) return uniform_grid(c, gen_arg, shape, DType::F64, 53);
  return uniform_grid(c, gen_arg, shape, DType::F32, dt == DType::BF16 ? 8 : dt == DType::F16 ? 11 : 24);
}

// Uniform in the open interval (0, 1), in the compute type (f64 for
// double, else f32, whose results the callers round to `dt`): the odd
// multiples of 2^-mant (mant: the compute type's significand bits), a grid
// of mant - 1 bits moved up by half its step. Each is exact, so none rounds
// to 1 (half a step added to a full mant-bit grid would: above 1/2 its
// values are a full step of the significand apart), and the set is
// symmetric about 1/2: 1 - u and 2u - 1 are exact too, and 2u - 1 never
// reaches -1 or 1.
Value uniform_open(Context& c, size_t gen_arg, const Dims& shape, DType dt) {
  const DType ct = dt == DType::F64 ? DType::F64 : DType::F32;
  const int mant = ct == DType::F64 ? 53 : 24;
  Value u = uniform_grid(c, gen_arg, shape, ct, mant - 1);
  return c.b.add(u, c.b.full(std::ldexp(1.0, -mant), ct, shape));
}

Value standard_normal(Context& c, size_t gen_arg, const Dims& shape, DType dt) {
  Builder& b = c.b;
  Value u = uniform_open(c, gen_arg, shape, dt);  // in opmath (f32 or f64)
  Value two_u_minus_1 = b.sub(b.mul(u, k(b, 2, u)), k(b, 1, u));
  return b.mul(b.unary("chlo.erf_inv", two_u_minus_1), k(b, M_SQRT2, u));
}

DType opmath(DType dt) { return dt == DType::F64 ? DType::F64 : DType::F32; }

void check_float(const TensorInfo& t, const char* op) {
  TORCH_CHECK(c10::isFloatingType(t.dtype), op, " expects a floating point tensor, got ", c10::toString(t.dtype));
}

// A complex tensor draws its real and imaginary parts as two real values
// each (PyTorch fills view_as_real(self)): `draw` makes a real tensor of the
// given shape, whose last dim of 2 becomes (real, imaginary).
Value complex_of_parts(Builder& b, const Dims& sizes, DType complex_dt,
                       const std::function<Value(const Dims&, DType)>& draw) {
  const DType real_dt = complex_dt == DType::C128 ? DType::F64 : DType::F32;
  Dims pairs = sizes;
  pairs.push_back(2);
  Value v = b.convert(draw(pairs, real_dt), real_dt);
  const int64_t r = static_cast<int64_t>(sizes.size());
  Dims lo(r + 1, 0), hi = pairs;
  hi[r] = 1;
  Value re = b.reshape(b.slice(v, lo, hi), sizes);
  lo[r] = 1;
  hi[r] = 2;
  Value im = b.reshape(b.slice(v, lo, hi), sizes);
  return b.complex(re, im);
}

// uniform(self, from, to, *, generator)
std::vector<Value> lower_uniform(Context& c) {
  const TensorInfo& self = c.args.info(0);
  if (c10::isComplexType(self.dtype)) {
    const double from = c.args.double_(1), to = c.args.double_(2);
    TORCH_CHECK(from <= to, "uniform_ expects to return a [from, to) range, but found from=", from, " > to=", to);
    Builder& b = c.b;
    return one(complex_of_parts(b, self.sizes, to_hlo(self.dtype), [&](const Dims& shape, DType dt) {
      Value u = uniform01(c, 3, shape, dt);
      return b.add(b.mul(u, splat(b, c.args.runtime_scalar(to - from, b.dtype(u)), shape)),
                   splat(b, c.args.runtime_scalar(from, b.dtype(u)), shape));
    }));
  }
  check_float(self, "uniform_");
  const double from = c.args.double_(1), to = c.args.double_(2);
  TORCH_CHECK(from <= to, "uniform_ expects to return a [from, to) range, but found from=", from, " > to=", to);
  Builder& b = c.b;
  const DType dt = to_hlo(self.dtype);
  Value u = uniform01(c, 3, self.sizes, dt);
  Value r = b.add(b.mul(u, splat(b, c.args.runtime_scalar(to - from, b.dtype(u)), self.sizes)),
                  splat(b, c.args.runtime_scalar(from, b.dtype(u)), self.sizes));
  return one(b.convert(r, dt));
}

// normal(self, mean, std, *, generator): normal_ and normal_functional
std::vector<Value> lower_normal_fill(Context& c) {
  const TensorInfo& self = c.args.info(0);
  const double std = c.args.double_(2);
  TORCH_CHECK(std >= 0.0, "normal expects std >= 0.0, but found std ", std);
  Builder& b = c.b;
  if (c10::isComplexType(self.dtype)) {
    // Each part has std / sqrt(2), so that the complex values have std `std`.
    return one(complex_of_parts(b, self.sizes, to_hlo(self.dtype), [&](const Dims& shape, DType dt) {
      Value z = standard_normal(c, 3, shape, dt);
      return b.add(b.mul(z, splat(b, c.args.runtime_scalar(std / M_SQRT2, b.dtype(z)), shape)),
                   splat(b, c.args.runtime_scalar(c.args.double_(1), b.dtype(z)), shape));
    }));
  }
  check_float(self, "normal_");
  const DType dt = to_hlo(self.dtype);
  Value z = standard_normal(c, 3, self.sizes, dt);
  Value r = b.add(b.mul(z, splat(b, c.args.runtime_scalar(std, b.dtype(z)), self.sizes)),
                  splat(b, c.args.runtime_scalar(c.args.double_(1), b.dtype(z)), self.sizes));
  return one(b.convert(r, dt));
}

// normal.Tensor_Tensor / Tensor_float / float_Tensor (mean, std, *, generator)
std::vector<Value> lower_normal_tensors(Context& c) {
  const bool mean_t = c.args.is_tensor(0), std_t = c.args.is_tensor(1);
  at::ScalarType t = mean_t ? c.args.info(0).dtype : c.args.info(1).dtype;
  Dims shape = broadcast_shapes(arg_shape(c, 0), arg_shape(c, 1));
  Builder& b = c.b;
  const DType dt = to_hlo(t);
  const DType ct = opmath(dt);
  Value z = standard_normal(c, 2, shape, dt);
  Value mean = mean_t ? b.broadcast_to(b.convert(c.args.tensor(0), ct), shape)
                      : splat(b, c.args.runtime_scalar(c.args.double_(0), ct), shape);
  Value sd = std_t ? b.broadcast_to(b.convert(c.args.tensor(1), ct), shape)
                   : splat(b, c.args.runtime_scalar(c.args.double_(1), ct), shape);
  return one(b.convert(b.add(b.mul(z, sd), mean), dt));
}

// bernoulli(self) with p = self, bernoulli.p(self, p), bernoulli.Tensor(self, p)
std::vector<Value> lower_bernoulli(Context& c, int mode) {
  const TensorInfo& self = c.args.info(0);
  Builder& b = c.b;
  const size_t gen = mode == 0 ? 1 : 2;
  const DType pt = c10::isFloatingType(self.dtype) ? to_hlo(self.dtype) : DType::F32;
  const DType ct = opmath(pt);
  Value p;
  if (mode == 0) {
    p = b.convert(c.args.tensor(0), ct);
  } else if (mode == 1) {
    const double pv = c.args.double_(1);
    TORCH_CHECK(0 <= pv && pv <= 1, "bernoulli_ expects p to be in [0, 1], but got p=", pv);
    p = splat(b, c.args.runtime_scalar(pv, ct), self.sizes);
  } else {
    p = b.broadcast_to(b.convert(c.args.tensor(1), ct), self.sizes);
  }
  if (mode != 1) {
    // Probabilities outside [0, 1] (NaN included) raise, as on CPU.
    check_all(c, b.and_(b.compare(Cmp::GE, p, b.zeros(b.type(p))), b.compare(Cmp::LE, p, b.full(1, b.dtype(p), b.dims(p)))),
              std::string(exec::kRuntimeErrorCheck) + "Expected p_in >= 0 && p_in <= 1 to be true, but got false.");
  }
  Value u = uniform01(c, gen, self.sizes, ct == DType::F64 ? DType::F64 : DType::F32);
  return one(b.convert(b.compare(Cmp::LT, b.convert(u, ct), p), to_hlo(self.dtype)));
}

// random.from(self, from, to?), random.to(self, to), random(self)
std::vector<Value> lower_random(Context& c, int mode) {
  const TensorInfo& self = c.args.info(0);
  Builder& b = c.b;
  const DType dt = to_hlo(self.dtype);
  int64_t from = 0, to = 0;
  size_t gen = 1;
  // The default upper bound: 2^mantissa for floats, the max for integers.
  auto top = [&]() -> int64_t {
    switch (self.dtype) {
      case at::kBool: return 2;
      case at::kFloat: return (int64_t{1} << 24) + 1;
      case at::kDouble: return (int64_t{1} << 53) + 1;
      case at::kHalf: return (int64_t{1} << 11) + 1;
      case at::kBFloat16: return (int64_t{1} << 8) + 1;
      case at::kByte: return 256;
      case at::kChar: return 128;
      case at::kShort: return 32768;
      case at::kInt: return int64_t{1} << 31;
      default: return std::numeric_limits<int64_t>::max();
    }
  };
  if (mode == 0) {
    from = c.args.int_(1);
    to = c.args.has(2) ? c.args.int_(2) : top();
    gen = 3;
  } else if (mode == 1) {
    to = c.args.int_(1);
    gen = 2;
  } else {
    to = top();
  }
  TORCH_CHECK(from < to, "random_ expects 'from' to be less than 'to', but got from=", from, " >= to=", to);
  const uint64_t range = static_cast<uint64_t>(to) - static_cast<uint64_t>(from);
  Value bits = random_bits(c, gen, self.sizes, DType::U64);
  Value r = b.rem(bits, b.full_int(static_cast<int64_t>(range), DType::U64, self.sizes));
  Value v = b.add(b.convert(r, DType::I64), b.full_int(from, DType::I64, self.sizes));
  return one(b.convert(v, dt));
}

template <typename F>
std::vector<Value> from_uniform(Context& c, size_t gen_arg, F f) {
  const TensorInfo& self = c.args.info(0);
  check_float(self, "random sampling");
  Builder& b = c.b;
  const DType dt = to_hlo(self.dtype);
  Value u = uniform_open(c, gen_arg, self.sizes, dt);
  return one(b.convert(f(b, u), dt));
}

// native_dropout(input, p, train) -> (output, mask)
std::vector<Value> lower_native_dropout(Context& c) {
  const TensorInfo& in = c.args.info(0);
  const double p = c.args.double_(1);
  const bool train = !c.args.has(2) || c.args.bool_(2);
  Builder& b = c.b;
  Value x = c.args.tensor(0);
  if (!train || p == 0) {
    return {x, b.broadcast_in_dim(b.constant_bool(true), in.sizes, {})};
  }
  TORCH_CHECK(p >= 0 && p <= 1, "dropout probability has to be between 0 and 1, but got ", p);
  const DType dt = to_hlo(in.dtype);
  const DType ct = opmath(dt);
  Value u = uniform01(c, 99, in.sizes, ct);
  Value keep = b.compare(Cmp::GE, u, splat(b, c.args.runtime_scalar(p, ct), in.sizes));
  const double scale = p < 1 ? 1.0 / (1.0 - p) : 0.0;
  Value y = b.mul(b.select(keep, b.convert(x, ct), b.zeros(Type{ct, in.sizes})),
                  splat(b, c.args.runtime_scalar(scale, ct), in.sizes));
  return {b.convert(y, dt), keep};
}

// randperm.generator_out(n, *, generator, out): sort random keys.
std::vector<Value> lower_randperm(Context& c) {
  const int64_t n = c.args.int_(0);
  TORCH_CHECK(n >= 0, "n must be non-negative, got", n);
  Builder& b = c.b;
  const at::ScalarType t = c.args.out_dtype().value_or(at::kLong);
  if (n == 0) return one(b.zeros(Type{to_hlo(t), {0}}));
  Value keys = random_bits(c, 1, {n}, DType::U64);
  Value idx = b.iota(Type{DType::I64, {n}}, 0);
  auto r = b.sort({keys, idx}, 0, true, [](Builder& rb, const std::vector<Value>& a) {
    return std::vector<Value>{rb.compare(Cmp::LT, a[0], a[1])};
  });
  return one(b.convert(r[1], to_hlo(t)));
}

// multinomial(self [n] or [B, n], num_samples, replacement, *, generator)
std::vector<Value> lower_multinomial(Context& c) {
  const TensorInfo& in = c.args.info(0);
  TORCH_CHECK(in.dim() == 1 || in.dim() == 2, "prob_dist must be 1 or 2 dim");
  TORCH_CHECK(c10::isFloatingType(in.dtype), "multinomial only supports floating-point dtypes for input, got: ",
              c10::toString(in.dtype));
  const int64_t s = c.args.int_(1);
  const bool replacement = c.args.bool_(2);
  const int64_t n = in.sizes.back();
  TORCH_CHECK(s > 0, "cannot sample n_sample <= 0 samples");
  TORCH_CHECK(replacement || s <= n, "cannot sample n_sample > prob_dist.size(-1) samples without replacement");
  Builder& b = c.b;
  const int64_t rows = in.dim() == 2 ? in.sizes[0] : 1;
  const DType ct = opmath(to_hlo(in.dtype));
  Value p = b.reshape(b.convert(c.args.tensor(0), ct), {rows, n});
  // CPU's checks of the distribution, on the device.
  const std::string rt(exec::kRuntimeErrorCheck);
  check_all(c, b.and_(b.is_finite(p), b.compare(Cmp::GE, p, b.zeros(b.type(p)))),
            rt + "probability tensor contains either `inf`, `nan` or element < 0");
  Value row_sum = b.reduce(p, b.constant(0, ct), {1}, "stablehlo.add");
  check_all(c, b.compare(Cmp::GT, row_sum, b.zeros(b.type(row_sum))),
            rt + "invalid multinomial distribution (sum of probabilities <= 0)");
  Value out;
  if (replacement) {
    // Inverse CDF: the first category whose cumulative weight exceeds u * total.
    Value cdf = b.reduce_window(p, b.constant(0, ct), {1, n}, {1, 1}, {1, 1}, {1, 1}, {{0, 0}, {n - 1, 0}},
                                "stablehlo.add");
    Value total = b.slice(cdf, {0, n - 1}, {rows, n});
    Value u = uniform01(c, 3, {rows, s}, ct);
    Value target = b.mul(u, b.broadcast_in_dim(b.reshape(total, {rows}), {rows, s}, {0}));
    Value le = b.compare(Cmp::LE, b.broadcast_in_dim(cdf, {rows, s, n}, {0, 2}),
                         b.broadcast_in_dim(target, {rows, s, n}, {0, 1}));
    Value idx = b.reduce(b.convert(le, DType::I64), b.constant_int(0, DType::I64), {2}, "stablehlo.add");
    out = b.min(idx, b.full_int(n - 1, DType::I64, {rows, s}));
  } else {
    // Exponential race: the s smallest -log(u) / p.
    Value u = uniform_open(c, 3, {rows, n}, to_hlo(in.dtype));
    Value key = b.div(b.neg(b.unary("stablehlo.log", u)), p);
    Value idx = b.iota(Type{DType::I64, {rows, n}}, 1);
    auto r = b.sort({key, idx}, 1, true, [](Builder& rb, const std::vector<Value>& a) {
      return std::vector<Value>{rb.compare(Cmp::LT, a[0], a[1])};
    });
    out = b.slice(r[1], {0, 0}, {rows, s});
  }
  return one(in.dim() == 1 ? b.reshape(out, {s}) : out);
}

// rrelu_with_noise(self, noise!, lower, upper, training, generator): in
// training, each non-positive x is scaled by a fresh slope from
// U(lower, upper), recorded in noise (1 elsewhere); in evaluation it is
// leaky_relu with the mean slope.
std::vector<Value> lower_rrelu_with_noise(Context& c) {
  const TensorInfo& in = c.args.info(0);
  check_float(in, "rrelu");
  Builder& b = c.b;
  const DType ct = opmath(to_hlo(in.dtype));
  const double lo = c.args.scalar(2).toDouble(), hi = c.args.scalar(3).toDouble();
  TORCH_CHECK(lo <= hi, "Lower bound should be less than or equal to the upper bound");
  Value x = b.convert(c.args.tensor(0), ct);
  Value nonpos = b.compare(hlo::Cmp::LE, x, b.zeros(b.type(x)));
  if (!c.args.bool_(4)) {
    Value y = b.select(nonpos, b.mul(x, k(b, (lo + hi) / 2, x)), x);
    return one(b.convert(y, to_hlo(in.dtype)));
  }
  Value u = uniform01(c, 5, in.sizes, ct);
  Value slope = b.add(b.mul(u, k(b, hi - lo, u)), k(b, lo, u));
  Value noise = b.select(nonpos, slope, k(b, 1, x));
  c.args.assign(1, noise);
  return one(b.convert(b.mul(x, noise), to_hlo(in.dtype)));
}

// rrelu_with_noise_backward(grad, self, noise, lower, upper, training, self_is_result)
std::vector<Value> lower_rrelu_with_noise_backward(Context& c) {
  const TensorInfo& in = c.args.info(1);
  Builder& b = c.b;
  const DType ct = opmath(to_hlo(in.dtype));
  const double lo = c.args.scalar(3).toDouble(), hi = c.args.scalar(4).toDouble();
  Value g = b.convert(c.args.tensor(0), ct);
  Value r;
  if (c.args.bool_(5) && hi - lo > 1e-6) {
    r = b.mul(g, b.convert(c.args.tensor(2), ct));
  } else {
    Value x = b.convert(c.args.tensor(1), ct);
    r = b.select(b.compare(hlo::Cmp::GT, x, b.zeros(b.type(x))), g, b.mul(g, k(b, (lo + hi) / 2, g)));
  }
  return one(b.convert(r, to_hlo(in.dtype)));
}

}  // namespace

TPU_LOWERINGS(random) {
  reg("aten::uniform", lower_uniform);
  reg("aten::rrelu_with_noise", lower_rrelu_with_noise);
  reg("aten::rrelu_with_noise_backward", lower_rrelu_with_noise_backward);
  reg("aten::normal_functional", lower_normal_fill);
  reg("aten::normal_", lower_normal_fill);
  reg("aten::normal.Tensor_Tensor", lower_normal_tensors);
  reg("aten::normal.Tensor_float", lower_normal_tensors);
  reg("aten::normal.float_Tensor", lower_normal_tensors);
  reg("aten::bernoulli", [](Context& c) { return lower_bernoulli(c, 0); });
  reg("aten::bernoulli.p", [](Context& c) { return lower_bernoulli(c, 1); });
  reg("aten::bernoulli.Tensor", [](Context& c) { return lower_bernoulli(c, 2); });
  reg("aten::bernoulli_.float", [](Context& c) { return lower_bernoulli(c, 1); });
  reg("aten::bernoulli_.Tensor", [](Context& c) { return lower_bernoulli(c, 2); });
  reg("aten::random.from", [](Context& c) { return lower_random(c, 0); });
  reg("aten::random.to", [](Context& c) { return lower_random(c, 1); });
  reg("aten::random", [](Context& c) { return lower_random(c, 2); });
  reg("aten::exponential", [](Context& c) {
    const double l = c.args.double_(1);
    return from_uniform(c, 2, [l](Builder& b, Value u) {
      return b.div(b.neg(b.unary("stablehlo.log", u)), k(b, l, u));
    });
  });
  reg("aten::geometric", [](Context& c) {
    const double p = c.args.double_(1);
    return from_uniform(c, 2, [p](Builder& b, Value u) {
      return b.unary("stablehlo.ceil", b.div(b.unary("stablehlo.log", u), k(b, std::log1p(-p), u)));
    });
  });
  reg("aten::log_normal", [](Context& c) {
    const TensorInfo& self = c.args.info(0);
    Builder& b = c.b;
    const DType dt = to_hlo(self.dtype);
    Value z = standard_normal(c, 3, self.sizes, dt);
    Value r = b.unary("stablehlo.exponential", b.add(b.mul(z, k(b, c.args.double_(2), z)), k(b, c.args.double_(1), z)));
    return one(b.convert(r, dt));
  });
  reg("aten::cauchy", [](Context& c) {
    const double median = c.args.double_(1), sigma = c.args.double_(2);
    return from_uniform(c, 3, [=](Builder& b, Value u) {
      return b.add(k(b, median, u), b.mul(k(b, sigma, u), b.unary("stablehlo.tan", b.mul(k(b, M_PI, u), b.sub(u, k(b, 0.5, u))))));
    });
  });
  reg("aten::native_dropout", lower_native_dropout);
  reg("aten::randperm.generator_out", lower_randperm);
  reg("aten::multinomial", lower_multinomial);
}

}  // namespace tpu::lowering
