// Random numbers on the device: every op takes (seed, offset) from its
// Generator and runs stablehlo.rng_bit_generator (ThreeFry), so results are
// reproducible under torch.manual_seed and independent of the host.
//
// Positions, as CUDA's philox offsets: an op drawing n values takes stream
// positions [offset, offset + n) and its Generator moves on by n (rounded
// up to 4). Value i of the op depends on position offset + i only, whatever
// the op's shape: the bits are drawn as one flat vector, whose element i
// ThreeFry computes from counter offset + i alone (64-bit values), or from
// half i % 2 of counter offset / 2 + i / 2 (32-bit values; offsets are
// multiples of 4). So a tensor drawn in pieces at the pieces' offsets (a
// DTensor shard at offset + k, as OffsetBasedRNGTracker places it) equals
// the tensor drawn whole. 64-bit and 32-bit draws use different keys, so
// that their positions never share counters.
#include <cmath>
#include <functional>
#include <limits>

#include "csrc/lowering/common.h"

namespace tpu::lowering {

namespace {

using hlo::Cmp;

Value k(Builder& b, double v, Value like) { return b.full(v, b.dtype(like), b.dims(like)); }

int64_t numel_of(const Dims& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// The ThreeFry state (key, first counter) of a (seed, offset) key: key
// seed ^ `salt`, counter offset >> `shift`.
Value three_fry_state(Builder& b, Value key, uint64_t salt, int64_t shift) {
  Value mask = b.concatenate({b.full_int(static_cast<int64_t>(salt), DType::U64, {1}), b.full_int(0, DType::U64, {1})}, 0);
  Value shifts = b.concatenate({b.full_int(0, DType::U64, {1}), b.full_int(shift, DType::U64, {1})}, 0);
  return b.binary("stablehlo.shift_right_logical", b.xor_(key, mask), shifts);
}

constexpr uint64_t kBits64Salt = 0x9E3779B97F4A7C15ull;   // 64-bit draws' key
constexpr uint64_t kSamplerSalt = 0xD1B54A32D192ED03ull;  // rejection samplers' key derivation

// n = numel(shape) random values of `bits` (U32 or U64) at the op's
// positions, laid out row-major in `shape`.
Value random_bits(Context& c, size_t gen_arg, const Dims& shape, DType bits) {
  const int64_t n = numel_of(shape);
  Value key = c.args.rng_key(gen_arg, static_cast<uint64_t>(n));
  Value state = bits == DType::U64 ? three_fry_state(c.b, key, kBits64Salt, 0) : three_fry_state(c.b, key, 0, 1);
  auto [next, out] = c.b.rng_bit_generator(state, Type{bits, {n}}, hlo::RngAlgorithm::ThreeFry);
  (void)next;
  return c.b.reshape(out, shape);
}

// Uniform on the grid k * 2^-n, k in [0, 2^n), in `ct` (F32 or F64, whose
// significand holds n bits): every value exact, none rounding up to 1.
DType bits_type(DType ct) { return ct == DType::F64 ? DType::U64 : DType::U32; }

Value grid_of_bits(Builder& b, Value bits, DType ct, int n) {
  const Dims& shape = b.dims(bits);
  const int width = ct == DType::F64 ? 64 : 32;
  Value k = b.binary("stablehlo.shift_right_logical", bits, b.full_int(width - n, bits_type(ct), shape));
  return b.mul(b.convert(k, ct), b.full(std::ldexp(1.0, -n), ct, shape));
}

Value uniform_grid(Context& c, size_t gen_arg, const Dims& shape, DType ct, int n) {
  return grid_of_bits(c.b, random_bits(c, gen_arg, shape, bits_type(ct)), ct, n);
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
Value open_of_bits(Builder& b, Value bits, DType ct) {
  const int mant = ct == DType::F64 ? 53 : 24;
  Value u = grid_of_bits(b, bits, ct, mant - 1);
  return b.add(u, b.full(std::ldexp(1.0, -mant), ct, b.dims(bits)));
}

Value uniform_open(Context& c, size_t gen_arg, const Dims& shape, DType dt) {
  const DType ct = dt == DType::F64 ? DType::F64 : DType::F32;
  return open_of_bits(c.b, random_bits(c, gen_arg, shape, bits_type(ct)), ct);
}

// A standard normal from an open uniform, as standard_normal draws it.
Value normal_of_open(Builder& b, Value u) {
  Value two_u_minus_1 = b.sub(b.mul(u, k(b, 2, u)), k(b, 1, u));
  return b.mul(b.unary("chlo.erf_inv", two_u_minus_1), k(b, M_SQRT2, u));
}

Value standard_normal(Context& c, size_t gen_arg, const Dims& shape, DType dt) {
  return normal_of_open(c.b, uniform_open(c, gen_arg, shape, dt));  // in opmath (f32 or f64)
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


// ---- rejection samplers: gamma, Dirichlet, Poisson, binomial -----------------
//
// CPU's samplers loop per element until a draw is accepted; here every
// element draws each round and keeps its first accepted value, the rounds
// running while any element is still waiting (each round a fresh ThreeFry
// draw from the state the last one left). The rounds are capped: an element
// still waiting after them (a NaN or negative parameter, which would loop
// forever on CPU) is NaN.

constexpr int64_t kMaxRounds = 2000;

// (The round's two open uniforms in ct, the values carried) -> the values
// carried next; carried[0] is the pred "accepted".
using SamplerBody = std::function<std::vector<Value>(Builder&, Value u1, Value u2, const std::vector<Value>& carried)>;

// Runs `body` until every element's carried[0] (accepted) holds or the cap;
// returns the generator's state after the last round, then the carried
// values.
std::vector<Value> run_rounds(Context& c, size_t gen_arg, const Dims& shape, DType ct, std::vector<Value> init,
                              const SamplerBody& body) {
  const int64_t rank = static_cast<int64_t>(shape.size());
  Dims two = shape;
  two.insert(two.begin(), 2);
  // The rounds draw from a key of their own, made from the op's (seed,
  // offset): how far they go depends on the data, so they cannot take
  // positions of the shared stream.
  Builder& b = c.b;
  Value key = c.args.rng_key(gen_arg, static_cast<uint64_t>(numel_of(shape)));
  Value derived = b.rng_bit_generator(three_fry_state(b, key, kSamplerSalt, 0), Type{DType::U64, {1}},
                                      hlo::RngAlgorithm::ThreeFry).second;
  init.insert(init.begin(), b.concatenate({derived, b.full_int(0, DType::U64, {1})}, 0));
  return rounds_until_done(c.b, init, 1, kMaxRounds, [&](Builder& rb, Value, const std::vector<Value>& v) {
    auto [state, bits] = rb.rng_bit_generator(v[0], Type{bits_type(ct), two}, hlo::RngAlgorithm::ThreeFry);
    Dims lo(rank + 1, 0), hi = two;
    hi[0] = 1;
    Value u1 = rb.reshape(open_of_bits(rb, rb.slice(bits, lo, hi), ct), shape);
    lo[0] = 1;
    hi[0] = 2;
    Value u2 = rb.reshape(open_of_bits(rb, rb.slice(bits, lo, hi), ct), shape);
    std::vector<Value> next{state};
    std::vector<Value> rest = body(rb, u1, u2, std::vector<Value>(v.begin() + 1, v.end()));
    next.insert(next.end(), rest.begin(), rest.end());
    return next;
  });
}

// Gamma(alpha, 1) samples in ct (Marsaglia and Tsang's method, alpha < 1
// boosted to alpha + 1 and scaled by u^(1/alpha), as CPU's sample_gamma);
// alpha = 0 gives 0, a negative alpha NaN.
Value sample_gamma(Context& c, size_t gen_arg, Value alpha, DType ct) {
  Builder& b = c.b;
  const Dims shape = b.dims(alpha);
  auto kk = [&](Builder& rb, double v) { return rb.full(v, ct, shape); };
  Value small = b.compare(Cmp::LT, alpha, kk(b, 1));
  Value a1 = b.select(small, b.add(alpha, kk(b, 1)), alpha);
  Value d = b.sub(a1, kk(b, 1.0 / 3.0));
  Value cc = b.div(kk(b, 1), b.unary("stablehlo.sqrt", b.mul(kk(b, 9), d)));
  Value nan = kk(b, std::nan(""));
  auto out = run_rounds(c, gen_arg, shape, ct, {b.full_int(0, DType::Pred, shape), nan},
                        [&](Builder& rb, Value u1, Value u2, const std::vector<Value>& v) {
    Value x = normal_of_open(rb, u1);
    Value y = rb.add(kk(rb, 1), rb.mul(cc, x));
    Value vv = rb.mul(rb.mul(y, y), y);
    Value xx = rb.mul(x, x);
    Value squeeze = rb.compare(Cmp::LT, u2, rb.sub(kk(rb, 1), rb.mul(kk(rb, 0.0331), rb.mul(xx, xx))));
    Value logv = rb.unary("stablehlo.log", vv);
    Value full = rb.compare(Cmp::LT, rb.unary("stablehlo.log", u2),
                            rb.add(rb.mul(kk(rb, 0.5), xx), rb.mul(d, rb.add(rb.sub(kk(rb, 1), vv), logv))));
    Value ok = rb.and_(rb.compare(Cmp::GT, y, kk(rb, 0)), rb.or_(squeeze, full));
    Value fresh = rb.and_(ok, rb.not_(v[0]));
    return std::vector<Value>{rb.or_(v[0], ok), rb.select(fresh, rb.mul(d, vv), v[1])};
  });
  // The boost's scale: one more open uniform per element, from where the
  // rounds left the generator.
  Value u = open_of_bits(b, b.rng_bit_generator(out[0], Type{bits_type(ct), shape}, hlo::RngAlgorithm::ThreeFry).second,
                         ct);
  Value scale = b.select(small, b.pow(u, b.div(kk(b, 1), alpha)), kk(b, 1));
  Value g = b.mul(scale, out[2]);
  g = b.select(b.compare(Cmp::LT, alpha, kk(b, 0)), kk(b, std::nan("")), g);  // (CPU: never returns)
  return b.select(b.compare(Cmp::EQ, alpha, kk(b, 0)), kk(b, 0), g);
}

// The smallest positive normal value of dt (CPU clamps samples up to it).
double tiny_of(at::ScalarType t) {
  switch (t) {
    case at::kDouble: return std::numeric_limits<double>::min();
    case at::kHalf: return 6.103515625e-05;
    case at::kBFloat16: return std::numeric_limits<float>::min();
    default: return std::numeric_limits<float>::min();
  }
}

Value at_least(Builder& b, Value x, double lo) {
  Value l = b.full(lo, b.dtype(x), b.dims(x));
  return b.select(b.compare(Cmp::LT, x, l), l, x);  // (NaN stays NaN)
}

// _standard_gamma(self, generator)
std::vector<Value> lower_standard_gamma(Context& c) {
  const TensorInfo& in = c.args.info(0);
  check_float(in, "_standard_gamma");
  Builder& b = c.b;
  const DType dt = to_hlo(in.dtype), ct = opmath(dt);
  Value g = sample_gamma(c, 1, b.convert(c.args.tensor(0), ct), ct);
  return one(at_least(b, b.convert(g, dt), tiny_of(in.dtype)));
}

// _sample_dirichlet(self, generator): gamma samples in float64 (CPU's
// guard against underflow), normalized over the last dim, then in
// [tiny, the largest value below 1] of the dtype.
std::vector<Value> lower_sample_dirichlet(Context& c) {
  const TensorInfo& in = c.args.info(0);
  check_float(in, "_sample_dirichlet");
  Builder& b = c.b;
  const DType dt = to_hlo(in.dtype);
  const int64_t r = in.dim();
  Value g = at_least(b, sample_gamma(c, 1, b.convert(c.args.tensor(0), DType::F64), DType::F64),
                     std::numeric_limits<double>::min());
  if (r == 0) return one(b.full(1.0, dt, {}));  // (CPU: gamma / gamma)
  Value sum = b.reduce(g, b.constant(0, DType::F64), {r - 1}, "stablehlo.add");
  Dims keep(r - 1);
  for (int64_t d = 0; d + 1 < r; ++d) keep[d] = d;
  Value x = b.convert(b.div(g, b.broadcast_in_dim(sum, in.sizes, keep)), dt);
  const double below_one = in.dtype == at::kDouble ? std::nextafter(1.0, 0.0)
                           : in.dtype == at::kHalf ? 1.0 - std::ldexp(1.0, -11)
                           : in.dtype == at::kBFloat16 ? 1.0 - std::ldexp(1.0, -8)
                                                       : static_cast<double>(std::nextafter(1.0f, 0.0f));
  Value hi = b.full(below_one, dt, in.sizes);
  x = b.select(b.compare(Cmp::GT, x, hi), hi, x);
  return one(at_least(b, x, tiny_of(in.dtype)));
}

// poisson(self, generator): rates >= 10 by Hoermann's transformed rejection
// (PTRS), smaller ones by multiplying uniforms until the product falls to
// exp(-rate), as CPU's sample_poisson.
std::vector<Value> lower_poisson(Context& c) {
  const TensorInfo& in = c.args.info(0);
  check_float(in, "poisson");
  Builder& b = c.b;
  const DType dt = to_hlo(in.dtype), ct = opmath(dt);
  const Dims& shape = in.sizes;
  auto kk = [&](Builder& rb, double v) { return rb.full(v, ct, shape); };
  Value lam = b.convert(c.args.tensor(0), ct);
  Value big = b.compare(Cmp::GE, lam, kk(b, 10));
  Value slam = b.unary("stablehlo.sqrt", lam), loglam = b.unary("stablehlo.log", lam);
  Value bb = b.add(kk(b, 0.931), b.mul(kk(b, 2.53), slam));
  Value a = b.add(kk(b, -0.059), b.mul(kk(b, 0.02483), bb));
  Value invalpha = b.add(kk(b, 1.1239), b.div(kk(b, 1.1328), b.sub(bb, kk(b, 3.4))));
  Value vr = b.sub(kk(b, 0.9277), b.div(kk(b, 3.6224), b.sub(bb, kk(b, 2))));
  Value enlam = b.unary("stablehlo.exponential", b.neg(lam));
  Value zero_rate = b.compare(Cmp::EQ, lam, kk(b, 0));
  // carried: accepted, result, the small rates' running product and count
  auto out = run_rounds(c, 1, shape, ct, {zero_rate, kk(b, 0), kk(b, 1), kk(b, 0)},
                        [&](Builder& rb, Value u1, Value u2, const std::vector<Value>& v) {
    Value done = v[0], result = v[1], prod = v[2], count = v[3];
    // PTRS (uniforms in (0, 1): CPU's are in [0, 1)).
    Value U = rb.sub(u1, kk(rb, 0.5)), V = u2;
    Value us = rb.sub(kk(rb, 0.5), rb.abs(U));
    Value kf = rb.unary("stablehlo.floor", rb.add(rb.add(rb.mul(rb.add(rb.div(rb.mul(kk(rb, 2), a), us), bb), U), lam), kk(rb, 0.43)));
    Value quick = rb.and_(rb.compare(Cmp::GE, us, kk(rb, 0.07)), rb.compare(Cmp::LE, V, vr));
    Value reject = rb.or_(rb.compare(Cmp::LT, kf, kk(rb, 0)),
                          rb.and_(rb.compare(Cmp::LT, us, kk(rb, 0.013)), rb.compare(Cmp::GT, V, us)));
    Value lhs = rb.sub(rb.add(rb.unary("stablehlo.log", V), rb.unary("stablehlo.log", invalpha)),
                       rb.unary("stablehlo.log", rb.add(rb.div(a, rb.mul(us, us)), bb)));
    Value rhs = rb.sub(rb.add(rb.neg(lam), rb.mul(kf, loglam)), rb.unary("chlo.lgamma", rb.add(kf, kk(rb, 1))));
    Value ptrs_ok = rb.or_(quick, rb.and_(rb.not_(reject), rb.compare(Cmp::LE, lhs, rhs)));
    // Products of uniforms.
    Value p2 = rb.mul(prod, u1);
    Value still = rb.compare(Cmp::GT, p2, enlam);
    Value small_ok = rb.not_(still);
    Value ok = rb.select(big, ptrs_ok, small_ok);
    Value fresh = rb.and_(ok, rb.not_(done));
    Value value = rb.select(big, kf, count);
    Value live = rb.and_(rb.not_(big), rb.not_(done));
    return std::vector<Value>{rb.or_(done, ok), rb.select(fresh, value, result), rb.select(live, p2, prod),
                              rb.select(rb.and_(live, still), rb.add(count, kk(rb, 1)), count)};
  });
  Value r = b.select(out[1], out[2], kk(b, std::nan("")));
  return one(b.convert(r, dt));
}

// log(k!) - Stirling's approximation of it (k >= 0), the tail BTRS corrects by.
Value stirling_tail(Builder& b, Value k) {
  const DType ct = b.dtype(k);
  const Dims& shape = b.dims(k);
  auto kk = [&](double v) { return b.full(v, ct, shape); };
  Value k1 = b.add(k, kk(1));
  Value approx = b.add(b.sub(b.mul(b.add(k, kk(0.5)), b.unary("stablehlo.log", k1)), k1), kk(0.5 * std::log(2 * M_PI)));
  return b.sub(b.unary("chlo.lgamma", k1), approx);
}

// binomial(count, prob, generator): Hoermann's BTRS where count * p >= 10
// (p the smaller of prob and 1 - prob), else the sum of geometric draws
// (inversion), mirrored for prob > 1/2, as CPU's sample_binomial.
std::vector<Value> lower_binomial(Context& c) {
  const TensorInfo& in = c.args.info(0);
  check_float(in, "binomial");
  Builder& b = c.b;
  const DType dt = to_hlo(in.dtype), ct = opmath(dt);
  const Dims shape = broadcast_shapes(in.sizes, c.args.info(1).sizes);
  auto kk = [&](Builder& rb, double v) { return rb.full(v, ct, shape); };
  Value n = b.broadcast_to(b.convert(c.args.tensor(0), ct), shape);
  Value prob = b.broadcast_to(b.convert(c.args.tensor(1), ct), shape);
  Value flip = b.compare(Cmp::GT, prob, kk(b, 0.5));
  Value p = b.select(flip, b.sub(kk(b, 1), prob), prob);
  Value trivial = b.or_(b.or_(b.compare(Cmp::LE, n, kk(b, 0)), b.compare(Cmp::LE, prob, kk(b, 0))),
                        b.compare(Cmp::GE, prob, kk(b, 1)));
  Value big = b.compare(Cmp::GE, b.mul(n, p), kk(b, 10));
  // BTRS's constants.
  Value sd = b.unary("stablehlo.sqrt", b.mul(b.mul(n, p), b.sub(kk(b, 1), p)));
  Value bb = b.add(kk(b, 1.15), b.mul(kk(b, 2.53), sd));
  Value a = b.add(b.add(kk(b, -0.0873), b.mul(kk(b, 0.0248), bb)), b.mul(kk(b, 0.01), p));
  Value cc = b.add(b.mul(n, p), kk(b, 0.5));
  Value vr = b.sub(kk(b, 0.92), b.div(kk(b, 4.2), bb));
  Value r = b.div(p, b.sub(kk(b, 1), p));
  Value alpha = b.mul(b.add(kk(b, 2.83), b.div(kk(b, 5.1), bb)), sd);
  Value m = b.unary("stablehlo.floor", b.mul(b.add(n, kk(b, 1)), p));
  Value logq = b.unary("stablehlo.log_plus_one", b.neg(p));
  // carried: accepted, result, the inversion's geometric sum and count
  auto out = run_rounds(c, 2, shape, ct, {trivial, kk(b, 0), kk(b, 0), kk(b, 0)},
                        [&](Builder& rb, Value u1, Value u2, const std::vector<Value>& v) {
    Value done = v[0], result = v[1], gsum = v[2], count = v[3];
    auto log = [&](Value x) { return rb.unary("stablehlo.log", x); };
    Value U = rb.sub(u1, kk(rb, 0.5)), V = u2;
    Value us = rb.sub(kk(rb, 0.5), rb.abs(U));
    Value k = rb.unary("stablehlo.floor",
                       rb.add(rb.mul(rb.add(rb.div(rb.mul(kk(rb, 2), a), us), bb), U), cc));
    Value in_range = rb.and_(rb.compare(Cmp::GE, k, kk(rb, 0)), rb.compare(Cmp::LE, k, n));
    Value quick = rb.and_(rb.compare(Cmp::GE, us, kk(rb, 0.07)), rb.compare(Cmp::LE, V, vr));
    Value lv = log(rb.div(rb.mul(V, alpha), rb.add(rb.div(a, rb.mul(us, us)), bb)));
    Value nm1 = rb.add(rb.sub(n, m), kk(rb, 1)), nk1 = rb.add(rb.sub(n, k), kk(rb, 1));
    Value bound = rb.add(rb.add(rb.mul(rb.add(m, kk(rb, 0.5)), log(rb.div(rb.add(m, kk(rb, 1)), rb.mul(r, nm1)))),
                                rb.mul(rb.add(n, kk(rb, 1)), log(rb.div(nm1, nk1)))),
                         rb.mul(rb.add(k, kk(rb, 0.5)), log(rb.div(rb.mul(r, nk1), rb.add(k, kk(rb, 1))))));
    bound = rb.add(bound, rb.sub(rb.add(stirling_tail(rb, m), stirling_tail(rb, rb.sub(n, m))),
                                 rb.add(stirling_tail(rb, k), stirling_tail(rb, rb.sub(n, k)))));
    Value btrs_ok = rb.and_(in_range, rb.or_(quick, rb.compare(Cmp::LE, lv, bound)));
    // Inversion: geometric draws until their sum passes the count.
    Value geom = rb.unary("stablehlo.ceil", rb.div(log(u1), logq));
    Value g2 = rb.add(gsum, geom);
    Value passed = rb.compare(Cmp::GT, g2, n);
    Value ok = rb.select(big, btrs_ok, passed);
    Value fresh = rb.and_(ok, rb.not_(done));
    Value live = rb.and_(rb.not_(big), rb.not_(done));
    return std::vector<Value>{rb.or_(done, ok), rb.select(fresh, rb.select(big, k, count), result),
                              rb.select(live, g2, gsum),
                              rb.select(rb.and_(live, rb.not_(passed)), rb.add(count, kk(rb, 1)), count)};
  });
  Value k = b.select(flip, b.sub(n, out[2]), out[2]);
  k = b.select(trivial, b.select(b.compare(Cmp::GE, prob, kk(b, 1)), b.select(b.compare(Cmp::LE, n, kk(b, 0)), kk(b, 0), n),
                                 kk(b, 0)), k);
  Value bad = b.or_(b.not_(out[1]), b.compare(Cmp::NE, prob, prob));  // (NaN prob, or rounds exhausted)
  return one(b.convert(b.select(bad, kk(b, std::nan("")), k), dt));
}

// _standard_gamma_grad(alpha, x): dx/dalpha of a Gamma(alpha, 1) sample x at
// fixed CDF (the reparameterized gradient of Gamma.rsample), in float64:
// -(dP(alpha, x)/dalpha) / p(x) = -sum_n r_n (log x - digamma(alpha + n + 1)),
// r_n = x^(n+1) / (alpha (alpha + 1) ... (alpha + n)), summed until the terms
// are below float64's resolution of the sum (the series of the regularized
// incomplete gamma function, differentiated term by term). CPU's kernel
// uses approximations accurate to 1e-4 to 4e-3 relative; this is exact to
// rounding. 0 where x <= 0; NaN for alpha <= 0.
std::vector<Value> lower_standard_gamma_grad(Context& c) {
  const TensorInfo& in = c.args.info(0);
  check_float(in, "_standard_gamma_grad");
  Builder& b = c.b;
  const DType dt = to_hlo(in.dtype), ct = DType::F64;
  const Dims shape = broadcast_shapes(in.sizes, c.args.info(1).sizes);
  auto kk = [&](Builder& rb, double v) { return rb.full(v, ct, shape); };
  Value a = b.broadcast_to(b.convert(c.args.tensor(0), ct), shape);
  Value x = b.broadcast_to(b.convert(c.args.tensor(1), ct), shape);
  Value pos = b.compare(Cmp::GT, x, kk(b, 0));
  Value xs = b.select(pos, x, kk(b, 1));  // (x <= 0 gives 0 below)
  Value lx = b.unary("stablehlo.log", xs);
  Value r0 = b.div(xs, a);
  Value psi0 = b.unary("chlo.digamma", b.add(a, kk(b, 1)));
  Value s0 = b.mul(r0, b.sub(lx, psi0));
  constexpr int64_t kMaxTerms = 20000;
  // carried: r, psi, sum, done
  auto out = rounds_until_done(
      b, {r0, psi0, s0, b.full_int(0, DType::Pred, shape)}, 3, kMaxTerms,
      [&](Builder& rb, Value n, const std::vector<Value>& v) {
        Value an = rb.add(a, rb.broadcast_in_dim(rb.convert(n, ct), shape, {}));
        Value ratio = rb.div(xs, an);
        Value r = rb.mul(v[0], ratio);
        Value psi = rb.add(v[1], rb.div(kk(rb, 1), an));
        Value t = rb.mul(r, rb.sub(lx, psi));
        Value sum = rb.select(v[3], v[2], rb.add(v[2], t));
        Value small = rb.compare(Cmp::LE, rb.abs(t), rb.mul(kk(rb, 1e-17), rb.abs(sum)));
        Value converged = rb.or_(rb.and_(small, rb.compare(Cmp::LT, ratio, kk(rb, 1))),
                                 rb.compare(Cmp::EQ, r, kk(rb, 0)));
        return std::vector<Value>{rb.select(v[3], v[0], r), rb.select(v[3], v[1], psi), sum,
                                  rb.or_(v[3], rb.or_(converged, rb.compare(Cmp::NE, t, t)))};
      });
  Value g = b.neg(out[2]);
  // (Past the terms' cap, alpha is beyond 1e7: the sample's first-order
  // dependence on alpha at a fixed normal quantile.)
  Value far = b.div(b.add(xs, a), b.mul(kk(b, 2), a));
  g = b.select(out[3], g, far);
  g = b.select(pos, g, kk(b, 0));
  g = b.select(b.compare(Cmp::GT, a, kk(b, 0)), g, kk(b, std::nan("")));
  return one(b.convert(g, dt));
}

// _dirichlet_grad(x, alpha, total): the backward of Dirichlet and Beta
// rsample. For x's marginal Beta(a, b), a = alpha, b = total - alpha, it is
// dx/da at fixed CDF with b fixed, divided by 1 - x (the factor the
// simplex's correction in torch.distributions' backward takes out). The
// incomplete beta function's series I_z(p, q) = z^p (1-z)^q / (p B(p, q)) *
// sum_n c_n z^n, c_n = (p+q)_n / (p+1)_n, differentiated term by term: in x
// itself below (a+1)/(a+b+2), else in 1 - x with the shapes swapped, so the
// series converges; float64, summed until the terms fall below the sum's
// resolution. (CPU's kernel is within 1e-3 of it.)
std::vector<Value> lower_dirichlet_grad(Context& c) {
  const TensorInfo& in = c.args.info(0);
  check_float(in, "_dirichlet_grad");
  Builder& b = c.b;
  const DType dt = to_hlo(in.dtype), ct = DType::F64;
  const Dims shape = broadcast_shapes(broadcast_shapes(in.sizes, c.args.info(1).sizes), c.args.info(2).sizes);
  auto kk = [&](Builder& rb, double v) { return rb.full(v, ct, shape); };
  Value x = b.broadcast_to(b.convert(c.args.tensor(0), ct), shape);
  Value a = b.broadcast_to(b.convert(c.args.tensor(1), ct), shape);
  Value bb = b.sub(b.broadcast_to(b.convert(c.args.tensor(2), ct), shape), a);
  Value swap = b.compare(Cmp::GT, x, b.div(b.add(a, kk(b, 1)), b.add(b.add(a, bb), kk(b, 2))));
  Value p = b.select(swap, bb, a), q = b.select(swap, a, bb);
  Value z = b.select(swap, b.sub(kk(b, 1), x), x);
  Value pq = b.add(p, q);
  constexpr int64_t kMaxTerms = 100000;
  Value zero = kk(b, 0), one_ = kk(b, 1);
  // carried: t, D_n, E_n, S, T_d, T_e, done
  auto out = rounds_until_done(
      b, {one_, zero, zero, one_, zero, zero, b.full_int(0, DType::Pred, shape)}, 6, kMaxTerms,
      [&](Builder& rb, Value n, const std::vector<Value>& v) {
        Value nf = rb.broadcast_in_dim(rb.convert(n, ct), shape, {});
        Value pqn1 = rb.add(pq, rb.sub(nf, kk(rb, 1)));  // p + q + n - 1
        Value pn = rb.add(p, nf);
        Value inv_pqn1 = rb.div(kk(rb, 1), pqn1);
        Value dn = rb.add(v[1], rb.sub(inv_pqn1, rb.div(kk(rb, 1), pn)));
        Value en = rb.add(v[2], inv_pqn1);
        Value t = rb.div(rb.mul(rb.mul(v[0], z), pqn1), pn);
        Value done = v[6];
        Value sum = rb.add(v[3], t);
        Value small = rb.compare(Cmp::LE, t, rb.mul(kk(rb, 1e-17), sum));
        Value shrinking = rb.compare(Cmp::LT, rb.div(rb.mul(z, rb.add(pq, nf)), rb.add(pn, kk(rb, 1))), kk(rb, 1));
        auto keep = [&](Value old, Value fresh) { return rb.select(done, old, fresh); };
        return std::vector<Value>{keep(v[0], t), keep(v[1], dn), keep(v[2], en), keep(v[3], sum),
                                  keep(v[4], rb.add(v[4], rb.mul(t, dn))), keep(v[5], rb.add(v[5], rb.mul(t, en))),
                                  rb.or_(done, rb.or_(rb.and_(small, shrinking), rb.compare(Cmp::NE, t, t)))};
      });
  Value S = out[3], Td = out[4], Te = out[5];
  auto digamma = [&](Value v) { return b.unary("chlo.digamma", v); };
  auto log = [&](Value v) { return b.unary("stablehlo.log", v); };
  Value psi_pq = digamma(pq);
  // In x: -(z / p) (S (log z - 1/p - digamma(p) + digamma(p+q)) + T_d).
  Value direct = b.neg(b.mul(b.div(z, p), b.add(b.mul(S, b.add(b.sub(b.sub(log(z), b.div(one_, p)), digamma(p)), psi_pq)), Td)));
  // In 1 - x: ((1 - z) / p) (S (log(1 - z) - digamma(q) + digamma(p+q)) + T_e).
  Value swapped = b.mul(b.div(b.sub(one_, z), p),
                        b.add(b.mul(S, b.add(b.sub(b.unary("stablehlo.log_plus_one", b.neg(z)), digamma(q)), psi_pq)), Te));
  Value g = b.select(swap, swapped, direct);
  g = b.select(out[6], g, kk(b, std::nan("")));
  return one(b.convert(g, dt));
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
  reg("aten::_standard_gamma", lower_standard_gamma);
  reg("aten::_standard_gamma_grad", lower_standard_gamma_grad);
  reg("aten::_sample_dirichlet", lower_sample_dirichlet);
  reg("aten::_dirichlet_grad", lower_dirichlet_grad);
  reg("aten::poisson", lower_poisson);
  reg("aten::binomial", lower_binomial);
}

}  // namespace tpu::lowering
