// Special functions without a StableHLO/CHLO op: the modified Bessel
// functions of order 0 and 1 (float32: Abramowitz & Stegun 9.8.1-9.8.4,
// relative error below 2e-7; float64: the power series and the asymptotic
// expansion, below 3e-15 against CPU) and frexp.
#include <cmath>

#include "csrc/lowering/common.h"

namespace tpu::lowering {

namespace {

using hlo::Cmp;

Value k(Builder& b, double v, Value like) { return b.full(v, b.dtype(like), b.dims(like)); }

Value poly(Builder& b, Value t, std::initializer_list<double> coeffs) {
  // Horner: c0 + t (c1 + t (c2 + ...))
  std::vector<double> c(coeffs);
  Value r = k(b, c.back(), t);
  for (int i = static_cast<int>(c.size()) - 2; i >= 0; --i) r = b.add(b.mul(r, t), k(b, c[i], t));
  return r;
}

// exp(-|x|) * I_n(x) for n = 0 or 1.
Value bessel_ie(Builder& b, Value x, int n) {
  Value ax = b.abs(x);
  Value small = b.compare(Cmp::LE, ax, k(b, 3.75, ax));
  Value ts = b.mul(b.div(x, k(b, 3.75, x)), b.div(x, k(b, 3.75, x)));
  Value exp_neg = b.unary("stablehlo.exponential", b.neg(ax));
  Value near;
  if (n == 0) {
    near = poly(b, ts, {1.0, 3.5156229, 3.0899424, 1.2067492, 0.2659732, 0.0360768, 0.0045813});
  } else {
    near = b.mul(x, poly(b, ts, {0.5, 0.87890594, 0.51498869, 0.15084934, 0.02658733, 0.00301532, 0.00032411}));
  }
  near = b.mul(near, exp_neg);
  Value safe = b.max(ax, k(b, 3.75, ax));
  Value tl = b.div(k(b, 3.75, safe), safe);
  Value far;
  if (n == 0) {
    far = poly(b, tl, {0.39894228, 0.01328592, 0.00225319, -0.00157565, 0.00916281, -0.02057706, 0.02635537,
                       -0.01647633, 0.00392377});
  } else {
    far = poly(b, tl, {0.39894228, -0.03988024, -0.00362018, 0.00163801, -0.01031555, 0.02282967, -0.02895312,
                       0.01787654, -0.00420059});
    far = b.select(b.compare(Cmp::LT, x, b.zeros(b.type(x))), b.neg(far), far);
  }
  far = b.div(far, b.unary("stablehlo.sqrt", safe));
  return b.select(small, near, far);
}

// exp(-|x|) * I_n(x) for n = 0 or 1 to float64 precision. Up to |x| = 20,
// the power series sum_k (x/2)^(2k+n) / (k! (k+n)!): positive terms, which
// pass their largest near k = |x|/2 and fall below 1e-17 of the sum by k =
// 40. Beyond, the asymptotic expansion (1 / sqrt(2 pi |x|)) sum_k c_k with
// c_k = -c_(k-1) (4n^2 - (2k-1)^2) / (8 k |x|): its terms shrink by at
// least k / (2 |x|) each, so 22 of them leave less than 1e-16.
Value bessel_ie_f64(Builder& b, Value x, int n) {
  constexpr double kSplit = 20.0;
  constexpr int kSeriesTerms = 40, kAsymptoticTerms = 22;
  Value ax = b.abs(x);
  Value half = b.mul(x, k(b, 0.5, x));
  Value q = b.mul(half, half);
  Value term = n == 0 ? k(b, 1.0, x) : half;
  Value near = term;
  for (int i = 1; i < kSeriesTerms; ++i) {
    term = b.mul(term, b.mul(q, k(b, 1.0 / (static_cast<double>(i) * (i + n)), q)));
    near = b.add(near, term);
  }
  near = b.mul(near, b.unary("stablehlo.exponential", b.neg(ax)));
  Value safe = b.max(ax, k(b, kSplit, ax));
  Value inv = b.div(k(b, 1.0, safe), safe);
  const double mu = 4.0 * n * n;
  term = k(b, 1.0, x);
  Value far = term;
  for (int i = 1; i < kAsymptoticTerms; ++i) {
    const double odd = 2.0 * i - 1.0;
    term = b.mul(term, b.mul(inv, k(b, -(mu - odd * odd) / (8.0 * i), inv)));
    far = b.add(far, term);
  }
  far = b.div(far, b.unary("stablehlo.sqrt", b.mul(safe, k(b, 2.0 * M_PI, safe))));
  if (n == 1) far = b.select(b.compare(Cmp::LT, x, b.zeros(b.type(x))), b.neg(far), far);
  return b.select(b.compare(Cmp::LE, ax, k(b, kSplit, ax)), near, far);
}

std::vector<Value> bessel(Context& c, int n, bool scaled) {
  const at::ScalarType in = c.args.info(0).dtype;
  const at::ScalarType out = is_integral(in) ? default_float() : in;
  Builder& b = c.b;
  Value x = cast(b, c.args.tensor(0), opmath_type(out));
  Value r = out == at::kDouble ? bessel_ie_f64(b, x, n) : bessel_ie(b, x, n);
  if (!scaled) r = b.mul(r, b.unary("stablehlo.exponential", b.abs(x)));
  return one(cast(b, r, out));
}

// frexp(self) -> (mantissa in [0.5, 1), exponent int32): x = mantissa * 2^exponent.
std::vector<Value> lower_frexp(Context& c) {
  const at::ScalarType t = c.args.info(0).dtype;
  TORCH_CHECK(c10::isFloatingType(t), "torch.frexp() only supports floating-point dtypes");
  Builder& b = c.b;
  const DType ct = t == at::kDouble ? DType::F64 : DType::F32;
  Value x = b.convert(c.args.tensor(0), ct);
  Value ax = b.abs(x);
  Value zero = b.zeros(b.type(x));
  Value finite_nonzero = b.and_(b.is_finite(x), b.compare(Cmp::NE, x, zero));
  Value safe = b.select(finite_nonzero, ax, k(b, 1, ax));
  Value e = b.add(b.unary("stablehlo.floor", b.div(b.unary("stablehlo.log", safe), k(b, std::log(2.0), safe))),
                  k(b, 1, safe));
  Value m = b.div(x, b.pow(k(b, 2, e), e));
  // Correct the rounding of log2 near powers of two.
  Value am = b.abs(m);
  Value too_big = b.compare(Cmp::GE, am, k(b, 1, am));
  m = b.select(too_big, b.div(m, k(b, 2, m)), m);
  e = b.select(too_big, b.add(e, k(b, 1, e)), e);
  Value too_small = b.compare(Cmp::LT, b.abs(m), k(b, 0.5, m));
  m = b.select(too_small, b.mul(m, k(b, 2, m)), m);
  e = b.select(too_small, b.sub(e, k(b, 1, e)), e);
  m = b.select(finite_nonzero, m, x);
  e = b.select(finite_nonzero, e, zero);
  return {cast(b, m, t), b.convert(e, DType::I32)};
}

// digamma with PyTorch's conventions at the poles: +-inf at +-0 (sign of
// -x), nan at negative integers.
Value digamma_value(Builder& b, Value x) {
  Value r = b.unary("chlo.digamma", x);
  Value zero = b.zeros(b.type(x));
  Value at_zero = b.compare(Cmp::EQ, x, zero);
  Value inf = k(b, INFINITY, x);
  // copysign(inf, -x): -inf for +0, +inf for -0
  Value neg_zero = b.compare(Cmp::LT, b.bitcast_convert(x, b.dtype(x) == DType::F64 ? DType::I64 : DType::I32),
                             b.zeros(Type{b.dtype(x) == DType::F64 ? DType::I64 : DType::I32, b.dims(x)}));
  r = b.select(at_zero, b.select(neg_zero, inf, b.neg(inf)), r);
  Value neg_int = b.and_(b.compare(Cmp::LT, x, zero), b.compare(Cmp::EQ, x, b.unary("stablehlo.floor", x)));
  return b.select(neg_int, k(b, NAN, x), r);
}

// trigamma as PyTorch computes it: reflection below 1/2, six recurrence
// steps, then the asymptotic series.
Value trigamma_value(Builder& b, Value x) {
  Value small = b.compare(Cmp::LT, x, k(b, 0.5, x));
  Value sin_pi_x = b.unary("stablehlo.sine", b.mul(k(b, M_PI, x), x));
  Value reflect = b.neg(b.div(k(b, M_PI * M_PI, x), b.mul(sin_pi_x, sin_pi_x)));
  Value result = b.select(small, reflect, b.zeros(b.type(x)));
  Value sign = b.select(small, k(b, -1, x), k(b, 1, x));
  Value y = b.select(small, b.sub(k(b, 1, x), x), x);
  for (int i = 0; i < 6; ++i) {
    result = b.add(result, b.div(k(b, 1, y), b.mul(y, y)));
    y = b.add(y, k(b, 1, y));
  }
  Value ixx = b.div(k(b, 1, y), b.mul(y, y));
  Value series = b.sub(k(b, 1.0 / 30, y), b.mul(ixx, k(b, 1.0 / 42, y)));
  series = b.sub(k(b, 1.0 / 6, y), b.mul(ixx, series));
  series = b.add(b.add(k(b, 1, y), b.div(k(b, 1, y), b.mul(k(b, 2, y), y))), b.mul(ixx, series));
  result = b.add(result, b.div(series, y));
  return b.mul(sign, result);
}

// The Hurwitz zeta function sum_k (q + k)^-x as Cephes computes it: direct
// terms until q + k > 9 (at least 9 of them, a loop for very negative q),
// then the Euler-Maclaurin tail.
Value zeta_value(Builder& b, Value x, Value q) {
  const Type t = b.type(x);
  const DType it = DType::I32;
  Value zero = b.zeros(t);
  auto cont = [](Builder& rb, Value a, Value i) {
    return rb.or_(rb.compare(Cmp::LT, i, rb.full_int(9, DType::I32, rb.dims(i))),
                  rb.compare(Cmp::LE, a, rb.full(9.0, rb.dtype(a), rb.dims(a))));
  };
  // (s, a, i, b): s holds q^-x and the terms (q + j)^-x up to a = q + i;
  // b is the last one added.
  Value first = b.pow(q, b.neg(x));
  auto r = b.while_loop(
      {first, q, b.zeros(Type{it, t.dims}), first, x},
      [&](Builder& rb, const std::vector<Value>& v) {
        Value go = cont(rb, v[1], v[2]);
        Dims all;
        for (int64_t d = 0; d < rb.rank(go); ++d) all.push_back(d);
        Value any = all.empty() ? go : rb.reduce(go, rb.constant_bool(false), all, "stablehlo.or");
        return std::vector<Value>{any};
      },
      [&](Builder& rb, const std::vector<Value>& v) {
        Value go = cont(rb, v[1], v[2]);
        Value a = rb.add(v[1], rb.select(go, rb.full(1, rb.dtype(v[1]), rb.dims(v[1])), rb.zeros(rb.type(v[1]))));
        Value term = rb.select(go, rb.pow(a, rb.neg(v[4])), v[3]);
        Value s = rb.add(v[0], rb.select(go, term, rb.zeros(rb.type(term))));
        Value i = rb.add(v[2], rb.convert(go, DType::I32));
        return std::vector<Value>{s, a, i, term, v[4]};
      });
  Value s = r[0], a = r[1];
  Value w = a;
  Value bb = r[3];
  s = b.sub(b.add(s, b.div(b.mul(bb, w), b.sub(x, k(b, 1, x)))), b.mul(k(b, 0.5, bb), bb));
  static const double kA[] = {12.0, -720.0, 30240.0, -1209600.0, 47900160.0, -1.8924375803183791606e9,
                              7.47242496e10, -2.950130727918164224e12, 1.1646782814350067249e14,
                              -4.5979787224074726105e15, 1.8152105401943546773e17, -7.1661652561756670113e18};
  Value acc = k(b, 1, x);
  double kk = 0;
  for (double coeff : kA) {
    acc = b.mul(acc, b.add(x, k(b, kk, x)));
    bb = b.div(bb, w);
    s = b.add(s, b.div(b.mul(acc, bb), k(b, coeff, x)));
    kk += 1;
    acc = b.mul(acc, b.add(x, k(b, kk, x)));
    bb = b.div(bb, w);
    kk += 1;
  }
  // Domain: x == 1 -> inf, x < 1 -> nan, q a non-positive integer -> inf,
  // q < 0 with non-integer x -> nan.
  Value q_int = b.compare(Cmp::EQ, q, b.unary("stablehlo.floor", q));
  Value x_int = b.compare(Cmp::EQ, x, b.unary("stablehlo.floor", x));
  s = b.select(b.and_(b.compare(Cmp::LE, q, zero), q_int), k(b, INFINITY, s), s);
  s = b.select(b.and_(b.compare(Cmp::LT, q, zero), b.not_(x_int)), k(b, NAN, s), s);
  s = b.select(b.compare(Cmp::LT, x, k(b, 1, x)), k(b, NAN, s), s);
  return b.select(b.compare(Cmp::EQ, x, k(b, 1, x)), k(b, INFINITY, s), s);
}

// polygamma(n, self): digamma, trigamma, or (-1)^(n+1) n! zeta(n + 1, x).
std::vector<Value> lower_polygamma(Context& c) {
  const at::ScalarType in = c.args.info(1).dtype;
  const at::ScalarType out = is_integral(in) ? default_float() : in;
  Builder& b = c.b;
  Value x = cast(b, c.args.tensor(1), opmath_type(out));
  const int64_t n = c.args.int_(0);
  TORCH_CHECK(n >= 0, "polygamma(n, x) does not support negative n.");
  Value r;
  if (n == 0) {
    r = digamma_value(b, x);
  } else if (n == 1) {
    r = trigamma_value(b, x);
  } else {
    const double factor = ((n % 2) ? 1.0 : -1.0) * std::exp(std::lgamma(n + 1.0));
    r = b.mul(k(b, factor, x), zeta_value(b, k(b, static_cast<double>(n + 1), x), x));
  }
  return one(cast(b, r, out));
}

// The regularized incomplete gamma functions P(a, x) (igamma) and
// Q(a, x) = 1 - P (igammac): the series for P where x < a + 1, the
// continued fraction for Q (modified Lentz) elsewhere, each run to
// convergence in float64; edge cases as the CPU.
Value incomplete_gamma(Builder& b, Value a, Value x, bool upper) {
  const Dims& d = b.dims(a);
  std::vector<int64_t> all;
  for (int64_t i = 0; i < b.rank(a); ++i) all.push_back(i);
  auto any = [&all](Builder& rb, Value p) {
    return all.empty() ? p : rb.reduce(p, rb.constant_bool(false), all, "stablehlo.or");
  };
  auto kk = [](Builder& rb, double v, Value like) { return rb.full(v, rb.dtype(like), rb.dims(like)); };
  const double eps = 1e-16, tiny = 1e-300;
  Value ok_a = b.select(b.compare(Cmp::GT, a, k(b, 0, a)), a, k(b, 1, a));
  Value ok_x = b.select(b.compare(Cmp::GT, x, k(b, 0, x)), x, k(b, 1, x));
  Value use_series = b.compare(Cmp::LT, ok_x, b.add(ok_a, k(b, 1, a)));
  Value log_pref = b.sub(b.sub(b.mul(ok_a, b.unary("stablehlo.log", ok_x)), ok_x), b.unary("chlo.lgamma", ok_a));
  Value pref = b.unary("stablehlo.exponential", log_pref);
  // Series: P = pref * sum_{n>=0} x^n / (a (a+1) ... (a+n)).
  auto ser = b.while_loop(
      {b.constant_int(0, DType::I64), b.div(k(b, 1, a), ok_a), b.div(k(b, 1, a), ok_a), ok_a, ok_x,
       b.full(1, DType::Pred, d)},
      [&](Builder& rb, const std::vector<Value>& v) {
        return std::vector<Value>{rb.and_(rb.compare(Cmp::LT, v[0], rb.constant_int(20000, DType::I64)), any(rb, v[5]))};
      },
      [&](Builder& rb, const std::vector<Value>& v) {
        Value n1 = rb.convert(rb.broadcast_in_dim(rb.add(v[0], rb.constant_int(1, DType::I64)), rb.dims(v[3]), {}),
                              rb.dtype(v[3]));
        Value del = rb.div(rb.mul(v[1], v[4]), rb.add(v[3], n1));
        Value sum = rb.add(v[2], rb.select(v[5], del, kk(rb, 0, del)));
        Value more = rb.and_(v[5], rb.compare(Cmp::GT, rb.abs(del), rb.mul(rb.abs(sum), kk(rb, eps, sum))));
        return std::vector<Value>{rb.add(v[0], rb.constant_int(1, DType::I64)), del, sum, v[3], v[4], more};
      });
  Value p_series = b.mul(ser[2], pref);
  // Continued fraction: Q = pref * h.
  Value bb0 = b.sub(b.add(ok_x, k(b, 1, x)), ok_a);
  Value safe_b0 = b.select(b.compare(Cmp::LT, b.abs(bb0), k(b, tiny, bb0)), k(b, tiny, bb0), bb0);
  Value d0 = b.div(k(b, 1, x), safe_b0);
  auto cf = b.while_loop(
      {b.constant_int(1, DType::I64), safe_b0, k(b, 1 / tiny, x), d0, d0, ok_a, b.full(1, DType::Pred, d)},
      [&](Builder& rb, const std::vector<Value>& v) {
        return std::vector<Value>{rb.and_(rb.compare(Cmp::LT, v[0], rb.constant_int(20000, DType::I64)), any(rb, v[6]))};
      },
      [&](Builder& rb, const std::vector<Value>& v) {
        Value i = rb.convert(rb.broadcast_in_dim(v[0], rb.dims(v[5]), {}), rb.dtype(v[5]));
        Value an = rb.mul(rb.neg(i), rb.sub(i, v[5]));
        Value bn = rb.add(v[1], kk(rb, 2, v[1]));
        auto guard = [&](Value z) {
          return rb.select(rb.compare(Cmp::LT, rb.abs(z), kk(rb, tiny, z)), kk(rb, tiny, z), z);
        };
        Value dn = guard(rb.add(rb.mul(an, v[3]), bn));
        Value cn = guard(rb.add(bn, rb.div(an, v[2])));
        dn = rb.div(kk(rb, 1, dn), dn);
        Value del = rb.mul(dn, cn);
        Value h = rb.select(v[6], rb.mul(v[4], del), v[4]);
        Value more = rb.and_(v[6], rb.compare(Cmp::GT, rb.abs(rb.sub(del, kk(rb, 1, del))), kk(rb, eps, del)));
        return std::vector<Value>{rb.add(v[0], rb.constant_int(1, DType::I64)), bn, cn, dn, h, v[5], more};
      });
  Value q_cf = b.mul(cf[4], pref);
  Value p = b.select(use_series, p_series, b.sub(k(b, 1, a), q_cf));
  Value q = b.select(use_series, b.sub(k(b, 1, a), p_series), q_cf);
  Value r = upper ? q : p;
  // Edge cases (P; Q mirrors them).
  Value nan = k(b, NAN, a), zero = k(b, 0, a), one_ = k(b, 1, a);
  Value lo = upper ? one_ : zero, hi = upper ? zero : one_;
  auto is = [&](Cmp cmp, Value v, double w) { return b.compare(cmp, v, k(b, w, v)); };
  Value a_inf = is(Cmp::EQ, b.abs(a), INFINITY), x_inf = is(Cmp::EQ, b.abs(x), INFINITY);
  r = b.select(x_inf, hi, r);
  r = b.select(a_inf, b.select(x_inf, nan, lo), r);
  r = b.select(is(Cmp::EQ, x, 0), lo, r);
  r = b.select(is(Cmp::EQ, a, 0), b.select(is(Cmp::GT, x, 0), hi, nan), r);
  r = b.select(b.or_(is(Cmp::LT, x, 0), is(Cmp::LT, a, 0)), nan, r);
  return b.select(b.or_(b.compare(Cmp::NE, a, a), b.compare(Cmp::NE, x, x)), nan, r);
}

std::vector<Value> lower_igamma(Context& c, bool upper) {
  Promoted p = promote2(c, 0, 1, true);
  const at::ScalarType out = is_integral(p.type) ? default_float() : p.type;
  Builder& b = c.b;
  Value a = b.convert(p.a, DType::F64), x = b.convert(p.b, DType::F64);
  return one(cast(b, incomplete_gamma(b, a, x, upper), out));
}

}  // namespace

TPU_LOWERINGS(special) {
  reg("aten::digamma", [](Context& c) {
    const at::ScalarType in = c.args.info(0).dtype;
    const at::ScalarType out = is_integral(in) ? default_float() : in;
    return one(cast(c.b, digamma_value(c.b, cast(c.b, c.args.tensor(0), opmath_type(out))), out));
  });
  reg("aten::polygamma", lower_polygamma);
  reg("aten::igamma", [](Context& c) { return lower_igamma(c, false); });
  reg("aten::igammac", [](Context& c) { return lower_igamma(c, true); });
  reg("aten::special_zeta", [](Context& c) {
    Promoted p = promote2(c, 0, 1, true);
    const at::ScalarType out = is_integral(p.type) ? default_float() : p.type;
    Value x = cast(c.b, p.a, opmath_type(out)), q = cast(c.b, p.b, opmath_type(out));
    return one(cast(c.b, zeta_value(c.b, x, q), out));
  });
  reg("aten::i0", [](Context& c) { return bessel(c, 0, false); });
  reg("aten::special_i0e", [](Context& c) { return bessel(c, 0, true); });
  reg("aten::special_i1", [](Context& c) { return bessel(c, 1, false); });
  reg("aten::special_i1e", [](Context& c) { return bessel(c, 1, true); });
  reg("aten::special_modified_bessel_i0", [](Context& c) { return bessel(c, 0, false); });
  reg("aten::special_modified_bessel_i1", [](Context& c) { return bessel(c, 1, false); });
  reg("aten::frexp.Tensor", lower_frexp);
}

}  // namespace tpu::lowering
