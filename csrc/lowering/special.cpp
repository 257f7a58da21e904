// Special functions without a StableHLO/CHLO op: the modified Bessel
// functions of order 0 and 1 (Abramowitz & Stegun 9.8.1-9.8.4, relative error
// below 2e-7, so float64 inputs are left to the CPU fallback) and frexp.
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

std::vector<Value> bessel(Context& c, int n, bool scaled) {
  const at::ScalarType in = c.args.info(0).dtype;
  const at::ScalarType out = is_integral(in) ? default_float() : in;
  if (out == at::kDouble) unsupported(c, "float64 (the approximation is accurate to float32 only)");
  Builder& b = c.b;
  Value x = cast(b, c.args.tensor(0), opmath_type(out));
  Value r = bessel_ie(b, x, n);
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

}  // namespace

TPU_LOWERINGS(special) {
  reg("aten::i0", [](Context& c) { return bessel(c, 0, false); });
  reg("aten::special_i0e", [](Context& c) { return bessel(c, 0, true); });
  reg("aten::special_i1", [](Context& c) { return bessel(c, 1, false); });
  reg("aten::special_i1e", [](Context& c) { return bessel(c, 1, true); });
  reg("aten::frexp.Tensor", lower_frexp);
}

}  // namespace tpu::lowering
