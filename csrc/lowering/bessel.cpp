// Special functions of torch.special built from their textbook expansions:
// Bessel J0, J1, Y0, Y1, modified Bessel I0, I1, K0, K1 (and exp-scaled K),
// the spherical Bessel j0, the Airy function Ai, and the normal
// distribution's ndtri and log_ndtr.
//
// Each is a power series near the origin and an asymptotic expansion far
// from it (Abramowitz & Stegun 9.1.10-13, 9.2.5-6, 9.6.10-11, 9.7.2,
// 10.4.2-3, 10.4.59-60), or a continued fraction (the normal tail). They are
// evaluated in float64, which keeps the series' cancellation far below
// float32's resolution at the switch points; float64 inputs would need
// more terms and a finer split than this, so they take the CPU fallback.
#include <cmath>

#include "csrc/lowering/common.h"

namespace tpu::lowering {

namespace {

using hlo::Cmp;

constexpr double kEulerGamma = 0.57721566490153286061;

Value k(Builder& b, double v, Value like) { return b.full(v, b.dtype(like), b.dims(like)); }
Value fn(Builder& b, const char* op, Value x) { return b.unary(op, x); }
Value sqrt_(Builder& b, Value x) { return fn(b, "stablehlo.sqrt", x); }
Value log_(Builder& b, Value x) { return fn(b, "stablehlo.log", x); }
Value exp_(Builder& b, Value x) { return fn(b, "stablehlo.exponential", x); }
Value cos_(Builder& b, Value x) { return fn(b, "stablehlo.cosine", x); }
Value sin_(Builder& b, Value x) { return fn(b, "stablehlo.sine", x); }

// ---- Bessel functions of integer order 0 and 1 -----------------------------------------

// Power series in q = x^2 / 4 (sign = -1 for J and Y, +1 for I and K):
//   S(q) = sum_k (sign q)^k / (k! (k + n)!)            (J_n / I_n up to (x/2)^n)
//   H(q) = sum_k c_k (sign q)^k / (k! (k + n)!)        with c_k = psi(k+1) + psi(k+n+1) + 2 gamma
// (for n = 0, c_k = 2 H_k, the harmonic numbers).
struct Series {
  Value s, h;
};

Series bessel_series(Builder& b, Value q, int n, double sign, int terms) {
  Value term = k(b, 1.0, q);
  for (int i = 1; i <= n; ++i) term = b.div(term, k(b, i, q));  // 1 / n!
  Value s = term, h = b.zeros(b.type(q));
  double hk = 0, hkn = 0;  // H_k and H_{k+n}
  for (int i = 1; i <= n; ++i) hkn += 1.0 / i;
  Value sq = b.mul(k(b, sign, q), q);
  for (int i = 1; i < terms; ++i) {
    term = b.div(b.mul(term, sq), k(b, static_cast<double>(i) * (i + n), q));
    hk += 1.0 / i;
    hkn += 1.0 / (i + n);
    s = b.add(s, term);
    h = b.add(h, b.mul(k(b, hk + hkn, q), term));
  }
  // c_0 = H_0 + H_n: for n = 1 the k = 0 term contributes too.
  if (n == 1) h = b.add(h, k(b, 1.0, q));
  return {s, h};
}

// Asymptotic (Hankel) sums for order n at large x:
//   P = sum (-1)^k a_{2k} / x^{2k},  Q = sum (-1)^k a_{2k+1} / x^{2k+1},
//   A = sum a_k / x^k  (for K),  a_k = prod_{j<=k} (4n^2 - (2j-1)^2) / (8 j).
struct Hankel {
  Value p, q, a;
};

Hankel hankel(Builder& b, Value x, int n, int terms) {
  const double mu = 4.0 * n * n;
  Value inv = b.div(k(b, 1, x), x);
  Value p = k(b, 1, x), q = b.zeros(b.type(x)), a = k(b, 1, x);
  double coeff = 1;
  Value power = k(b, 1, x);
  for (int j = 1; j < terms; ++j) {
    coeff *= (mu - (2.0 * j - 1) * (2.0 * j - 1)) / (8.0 * j);
    power = b.mul(power, inv);
    Value t = b.mul(k(b, coeff, x), power);
    a = b.add(a, t);
    const double sgn = ((j / 2) % 2 == 0) ? 1.0 : -1.0;  // (-1)^floor(j/2)
    if (j % 2 == 0) p = b.add(p, b.mul(k(b, sgn, x), t));
    else q = b.add(q, b.mul(k(b, sgn, x), t));
  }
  return {p, q, a};
}

// J_n(x) and Y_n(x) for x >= 0 (Y only meaningful for x > 0).
std::pair<Value, Value> bessel_jy(Builder& b, Value x, int n) {
  const double split = 12.0;
  Value big = b.compare(Cmp::GT, x, k(b, split, x));
  // Near: the series.
  Value xs = b.select(big, k(b, 1, x), x);
  Value q = b.div(b.mul(xs, xs), k(b, 4, xs));
  Series se = bessel_series(b, q, n, -1.0, 48);
  Value half = b.div(xs, k(b, 2, xs));
  Value lg = b.add(log_(b, half), k(b, kEulerGamma, xs));
  Value j_near, y_near;
  if (n == 0) {
    j_near = se.s;
    // Y0 = (2/pi) [(ln(x/2) + gamma) J0 - sum H_k (-q)^k / (k!)^2]
    y_near = b.mul(k(b, 2 / M_PI, xs), b.sub(b.mul(lg, j_near), b.div(se.h, k(b, 2, xs))));
  } else {
    j_near = b.mul(half, se.s);
    // Y1 = (2/pi) ln(x/2) J1 - 2/(pi x) - (1/pi)(x/2) sum (psi(k+1) + psi(k+2)) (-q)^k / (k!(k+1)!)
    Value psi_sum = b.sub(se.h, b.mul(k(b, 2 * kEulerGamma, xs), se.s));
    y_near = b.sub(b.sub(b.mul(k(b, 2 / M_PI, xs), b.mul(log_(b, half), j_near)), b.div(k(b, 2 / M_PI, xs), xs)),
                   b.mul(k(b, 1 / M_PI, xs), b.mul(half, psi_sum)));
  }
  // Far: the Hankel expansion.
  Value xf = b.select(big, x, k(b, split + 1, x));
  Hankel h = hankel(b, xf, n, 16);
  Value chi = b.sub(xf, k(b, (n / 2.0 + 0.25) * M_PI, xf));
  Value amp = sqrt_(b, b.div(k(b, 2 / M_PI, xf), xf));
  Value j_far = b.mul(amp, b.sub(b.mul(h.p, cos_(b, chi)), b.mul(h.q, sin_(b, chi))));
  Value y_far = b.mul(amp, b.add(b.mul(h.p, sin_(b, chi)), b.mul(h.q, cos_(b, chi))));
  return {b.select(big, j_far, j_near), b.select(big, y_far, y_near)};
}

// I_n(x), K_n(x) and exp(x) K_n(x) for x > 0.
struct ModifiedBessel {
  Value i, kk, k_scaled;
};

ModifiedBessel bessel_ik(Builder& b, Value x, int n) {
  const double split = 8.0;
  Value big = b.compare(Cmp::GT, x, k(b, split, x));
  Value xs = b.select(big, k(b, 1, x), x);
  Value q = b.div(b.mul(xs, xs), k(b, 4, xs));
  Series se = bessel_series(b, q, n, 1.0, 40);
  Value half = b.div(xs, k(b, 2, xs));
  Value i_near, k_near;
  if (n == 0) {
    i_near = se.s;
    // K0 = -(ln(x/2) + gamma) I0 + sum H_k q^k / (k!)^2
    k_near = b.add(b.neg(b.mul(b.add(log_(b, half), k(b, kEulerGamma, xs)), i_near)), b.div(se.h, k(b, 2, xs)));
  } else {
    i_near = b.mul(half, se.s);
    // K1 = 1/x + ln(x/2) I1 - (x/4) sum (psi(k+1) + psi(k+2)) q^k / (k!(k+1)!)
    Value psi_sum = b.sub(se.h, b.mul(k(b, 2 * kEulerGamma, xs), se.s));
    k_near = b.sub(b.add(b.div(k(b, 1, xs), xs), b.mul(log_(b, half), i_near)),
                   b.mul(b.div(xs, k(b, 4, xs)), psi_sum));
  }
  Value xf = b.select(big, x, k(b, split + 1, x));
  Hankel h = hankel(b, xf, n, 14);
  Value k_far_scaled = b.mul(sqrt_(b, b.div(k(b, M_PI / 2, xf), xf)), h.a);
  Value k_scaled = b.select(big, k_far_scaled, b.mul(k_near, exp_(b, xs)));
  Value kk = b.select(big, b.mul(k_far_scaled, exp_(b, b.neg(xf))), k_near);
  return {i_near, kk, k_scaled};
}

// ---- Airy Ai ---------------------------------------------------------------------------

Value airy_ai(Builder& b, Value x) {
  const double split = 5.0;
  Value ax = b.abs(x);
  Value far = b.compare(Cmp::GT, ax, k(b, split, x));
  // Maclaurin: Ai(x) = c1 f(x) - c2 g(x), f = sum 3^k (1/3)_k x^{3k} / (3k)!,
  // g = sum 3^k (2/3)_k x^{3k+1} / (3k+1)!.
  Value xs = b.select(far, k(b, 0, x), x);
  Value x3 = b.mul(b.mul(xs, xs), xs);
  Value tf = k(b, 1, x), tg = xs;
  Value f = tf, g = tg;
  for (int j = 1; j < 40; ++j) {
    // ratio of successive terms: x^3 / ((3j-1) 3j) for f, x^3 / (3j (3j+1)) for g
    tf = b.div(b.mul(tf, x3), k(b, (3.0 * j - 1) * (3.0 * j), x));
    tg = b.div(b.mul(tg, x3), k(b, (3.0 * j) * (3.0 * j + 1), x));
    f = b.add(f, tf);
    g = b.add(g, tg);
  }
  const double c1 = 0.35502805388781723926, c2 = 0.25881940379280679840;
  Value near = b.sub(b.mul(k(b, c1, x), f), b.mul(k(b, c2, x), g));
  // Asymptotic in zeta = (2/3) |x|^{3/2} with u_k = (6k-5)(6k-3)(6k-1) / ((2k-1) 216 k) u_{k-1}.
  Value af = b.select(far, ax, k(b, split + 1, x));
  Value zeta = b.mul(k(b, 2.0 / 3.0, af), b.mul(af, sqrt_(b, af)));
  Value inv = b.div(k(b, 1, zeta), zeta);
  Value all = k(b, 1, x), even = k(b, 1, x), odd = b.zeros(b.type(x));
  double u = 1;
  Value power = k(b, 1, x);
  for (int j = 1; j < 16; ++j) {
    u *= (6.0 * j - 5) * (6.0 * j - 3) * (6.0 * j - 1) / ((2.0 * j - 1) * 216.0 * j);
    power = b.mul(power, inv);
    Value t = b.mul(k(b, u, x), power);
    all = b.add(all, b.mul(k(b, j % 2 ? -1.0 : 1.0, x), t));  // sum (-1)^k u_k / zeta^k
    const double sgn = ((j / 2) % 2 == 0) ? 1.0 : -1.0;
    if (j % 2 == 0) even = b.add(even, b.mul(k(b, sgn, x), t));
    else odd = b.add(odd, b.mul(k(b, sgn, x), t));
  }
  Value quarter = sqrt_(b, sqrt_(b, af));  // |x|^{1/4}
  Value pos = b.div(b.mul(exp_(b, b.neg(zeta)), all), b.mul(k(b, 2 * std::sqrt(M_PI), x), quarter));
  Value phase = b.add(zeta, k(b, M_PI / 4, x));
  Value neg = b.div(b.sub(b.mul(sin_(b, phase), even), b.mul(cos_(b, phase), odd)),
                    b.mul(k(b, std::sqrt(M_PI), x), quarter));
  Value far_v = b.select(b.compare(Cmp::GT, x, k(b, 0, x)), pos, neg);
  return b.select(far, far_v, near);
}

// ---- the normal distribution -------------------------------------------------------------

// Phi(x) - p, accurate in both tails.
Value ndtr_minus(Builder& b, Value x, Value p) {
  Value half_erfc = b.mul(k(b, 0.5, x), fn(b, "chlo.erfc", b.mul(b.neg(x), k(b, M_SQRT1_2, x))));
  return b.sub(half_erfc, p);
}

// ndtri(p): a rational first guess (A&S 26.2.23 in the tails, erfinv in the
// middle) refined by Newton steps on Phi(x) = p.
Value ndtri(Builder& b, Value p) {
  Value lo = b.compare(Cmp::LT, p, k(b, 0.5, p));
  Value tail_p = b.select(lo, p, b.sub(k(b, 1, p), p));
  Value safe = b.max(tail_p, k(b, 1e-300, p));
  Value t = sqrt_(b, b.mul(k(b, -2, p), log_(b, safe)));
  Value num = b.add(k(b, 2.515517, t), b.mul(t, b.add(k(b, 0.802853, t), b.mul(t, k(b, 0.010328, t)))));
  Value den = b.add(k(b, 1, t),
                    b.mul(t, b.add(k(b, 1.432788, t), b.mul(t, b.add(k(b, 0.189269, t), b.mul(t, k(b, 0.001308, t)))))));
  Value tail = b.sub(t, b.div(num, den));
  tail = b.select(lo, b.neg(tail), tail);
  Value mid = b.mul(k(b, M_SQRT2, p), fn(b, "chlo.erf_inv", b.sub(b.mul(k(b, 2, p), p), k(b, 1, p))));
  Value central = b.compare(Cmp::LT, b.abs(b.sub(p, k(b, 0.5, p))), k(b, 0.45, p));
  Value x = b.select(central, mid, tail);
  for (int i = 0; i < 3; ++i) {
    Value pdf = b.mul(k(b, 1 / std::sqrt(2 * M_PI), x), exp_(b, b.mul(k(b, -0.5, x), b.mul(x, x))));
    Value step = b.div(ndtr_minus(b, x, p), pdf);
    x = b.select(b.is_finite(step), b.sub(x, step), x);
  }
  x = b.select(b.compare(Cmp::EQ, p, k(b, 0, p)), k(b, -INFINITY, p), x);
  x = b.select(b.compare(Cmp::EQ, p, k(b, 1, p)), k(b, INFINITY, p), x);
  Value outside = b.or_(b.compare(Cmp::LT, p, k(b, 0, p)), b.compare(Cmp::GT, p, k(b, 1, p)));
  return b.select(b.or_(outside, b.compare(Cmp::NE, p, p)), k(b, NAN, p), x);
}

// log(Phi(x)): from erfc where it is representable, from the continued
// fraction of Mills' ratio in the far left tail.
Value log_ndtr(Builder& b, Value x) {
  Value erfc_pos = fn(b, "chlo.erfc", b.mul(x, k(b, M_SQRT1_2, x)));
  Value right = fn(b, "stablehlo.log_plus_one", b.mul(k(b, -0.5, x), erfc_pos));
  Value middle = log_(b, b.mul(k(b, 0.5, x), fn(b, "chlo.erfc", b.mul(b.neg(x), k(b, M_SQRT1_2, x)))));
  // Phi(-z) = phi(z) / (z + 1/(z + 2/(z + 3/(z + ...)))) for z > 0.
  Value z = b.max(b.neg(x), k(b, 1, x));
  Value cf = z;
  for (int j = 60; j >= 1; --j) cf = b.add(z, b.div(k(b, j, z), cf));
  Value far = b.sub(b.sub(b.mul(k(b, -0.5, z), b.mul(z, z)), k(b, 0.5 * std::log(2 * M_PI), z)), log_(b, cf));
  Value r = b.select(b.compare(Cmp::GT, x, k(b, 0, x)), right, middle);
  return b.select(b.compare(Cmp::LT, x, k(b, -20, x)), far, r);
}

// ---- dispatch ------------------------------------------------------------------------------

// A float unary special function evaluated in float64.
template <typename F>
std::vector<Value> special_unary(Context& c, F f) {
  const at::ScalarType in = c.args.info(0).dtype;
  const at::ScalarType out = is_integral(in) ? default_float() : in;
  if (out == at::kDouble) unsupported(c, "float64 (the expansions are accurate to float32 only)");
  Builder& b = c.b;
  Value x = b.convert(c.args.tensor(0), DType::F64);
  return one(cast(b, f(b, x), out));
}

Value j_value(Builder& b, Value x, int n) {
  Value r = bessel_jy(b, b.abs(x), n).first;
  if (n == 1) r = b.select(b.compare(Cmp::LT, x, k(b, 0, x)), b.neg(r), r);  // J1 is odd
  return r;
}

Value y_value(Builder& b, Value x, int n) {
  Value pos = b.select(b.compare(Cmp::GT, x, k(b, 0, x)), x, k(b, 1, x));
  Value r = bessel_jy(b, pos, n).second;
  r = b.select(b.compare(Cmp::EQ, x, k(b, 0, x)), k(b, -INFINITY, x), r);
  return b.select(b.compare(Cmp::LT, x, k(b, 0, x)), k(b, NAN, x), r);
}

Value k_value(Builder& b, Value x, int n, bool scaled) {
  Value pos = b.select(b.compare(Cmp::GT, x, k(b, 0, x)), x, k(b, 1, x));
  ModifiedBessel m = bessel_ik(b, pos, n);
  Value r = scaled ? m.k_scaled : m.kk;
  r = b.select(b.compare(Cmp::EQ, x, k(b, 0, x)), k(b, INFINITY, x), r);
  return b.select(b.compare(Cmp::LT, x, k(b, 0, x)), k(b, NAN, x), r);
}

Value spherical_j0(Builder& b, Value x) {
  Value small = b.compare(Cmp::LT, b.abs(x), k(b, 1e-4, x));
  Value x2 = b.mul(x, x);
  Value series = b.sub(k(b, 1, x), b.div(x2, k(b, 6, x)));
  Value safe = b.select(small, k(b, 1, x), x);
  Value r = b.select(small, series, b.div(sin_(b, safe), safe));
  return b.select(b.compare(Cmp::EQ, b.abs(x), k(b, INFINITY, x)), k(b, 0, x), r);
}

}  // namespace

TPU_LOWERINGS(bessel) {
  reg("aten::special_bessel_j0", [](Context& c) { return special_unary(c, [](Builder& b, Value x) { return j_value(b, x, 0); }); });
  reg("aten::special_bessel_j1", [](Context& c) { return special_unary(c, [](Builder& b, Value x) { return j_value(b, x, 1); }); });
  reg("aten::special_bessel_y0", [](Context& c) { return special_unary(c, [](Builder& b, Value x) { return y_value(b, x, 0); }); });
  reg("aten::special_bessel_y1", [](Context& c) { return special_unary(c, [](Builder& b, Value x) { return y_value(b, x, 1); }); });
  reg("aten::special_modified_bessel_k0",
      [](Context& c) { return special_unary(c, [](Builder& b, Value x) { return k_value(b, x, 0, false); }); });
  reg("aten::special_modified_bessel_k1",
      [](Context& c) { return special_unary(c, [](Builder& b, Value x) { return k_value(b, x, 1, false); }); });
  reg("aten::special_scaled_modified_bessel_k0",
      [](Context& c) { return special_unary(c, [](Builder& b, Value x) { return k_value(b, x, 0, true); }); });
  reg("aten::special_scaled_modified_bessel_k1",
      [](Context& c) { return special_unary(c, [](Builder& b, Value x) { return k_value(b, x, 1, true); }); });
  reg("aten::special_spherical_bessel_j0", [](Context& c) { return special_unary(c, spherical_j0); });
  reg("aten::special_airy_ai", [](Context& c) { return special_unary(c, airy_ai); });
  reg("aten::special_ndtri", [](Context& c) { return special_unary(c, ndtri); });
  reg("aten::special_log_ndtr", [](Context& c) { return special_unary(c, log_ndtr); });
}

}  // namespace tpu::lowering
