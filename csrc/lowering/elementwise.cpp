// Elementwise ops: arithmetic, comparisons, math functions, selection.
//
// Most ops are one line: a generic rule (promotion, broadcasting, half
// precision computed in float) parameterized by the StableHLO op or by a small
// function of builder values.
#include <cmath>
#include <numeric>

#include "csrc/lowering/common.h"

namespace tpu::lowering {

namespace {

using hlo::Cmp;

// ---- generic rules -------------------------------------------------------------

// f(x) of a floating result: integers promote to the default float dtype;
// half and bfloat16 are computed in float (as PyTorch's CPU kernels do).
using FloatFn = Value (*)(Builder&, Value);

std::vector<Value> unary_float_with(Context& c, FloatFn f) {
  const at::ScalarType in = c.args.info(0).dtype;
  const at::ScalarType out = is_integral(in) ? default_float() : in;
  Value x = cast(c.b, c.args.tensor(0), opmath_type(out));
  return one(cast(c.b, f(c.b, x), out));
}

std::vector<Value> unary_float(Context& c, std::string_view op) {
  const at::ScalarType in = c.args.info(0).dtype;
  const at::ScalarType out = is_integral(in) ? default_float() : in;
  Value x = cast(c.b, c.args.tensor(0), opmath_type(out));
  return one(cast(c.b, c.b.unary(op, x), out));
}

// f(x) on floats, identity on integers and bool (floor, ceil, round, trunc).
std::vector<Value> rounding(Context& c, FloatFn f) {
  const at::ScalarType t = c.args.info(0).dtype;
  Value x = c.args.tensor(0);
  if (is_integral(t)) return one(x);
  return one(cast(c.b, f(c.b, cast(c.b, x, opmath_type(t))), t));
}

// f(a, b) over the promoted type of arguments 0 and 1 (tensors or Scalars),
// computed in opmath unless `opmath` is false (CPU kernels that compute in the
// tensor's own type, rounding each step); `float_result` promotes integers to
// the default float.
std::vector<Value> binary_with(Context& c, Value (*f)(Builder&, Value, Value), bool float_result,
                               bool opmath = true) {
  ResultType r;
  promote_arg(r, c, 0);
  promote_arg(r, c, 1);
  at::ScalarType t = r.get();
  if (float_result && is_integral(t)) t = default_float();
  const Dims shape = broadcast_shapes(arg_shape(c, 0), arg_shape(c, 1));
  const at::ScalarType compute = opmath ? opmath_type(t) : t;
  Value a = operand(c, 0, t, compute, shape);
  Value b = operand(c, 1, t, compute, shape);
  return one(cast(c.b, f(c.b, a, b), t));
}

std::vector<Value> binary_arith(Context& c, std::string_view op) {
  Promoted p = promote2(c, 0, 1, /*opmath=*/true);
  return one(cast(c.b, c.b.binary(op, p.a, p.b), p.type));
}

std::vector<Value> compare(Context& c, Cmp dir) {
  Promoted p = promote2(c, 0, 1, /*opmath=*/false);
  return one(c.b.compare(dir, p.a, p.b));
}

Value full_like(Builder& b, double v, Value like) {
  return b.full(v, b.dtype(like), b.dims(like));
}

Value is_nan(Builder& b, Value x) {
  if (!hlo::is_float(b.dtype(x))) return b.broadcast_in_dim(b.constant_bool(false), b.dims(x), {});
  return b.compare(Cmp::NE, x, x);
}

// ---- arithmetic ------------------------------------------------------------------

// a + alpha * b (alpha at argument `alpha_arg`).
Value add_scaled(Context& c, Value a, Value b, size_t alpha_arg, at::ScalarType compute, bool subtract) {
  Builder& bb = c.b;
  if (c.args.has(alpha_arg) && !c.args.scalar(alpha_arg).equal(1)) {
    b = bb.mul(b, splat(bb, c.args.scalar_value(alpha_arg, to_hlo(compute)), bb.dims(b)));
  }
  if (compute == at::kBool) return subtract ? bb.xor_(a, b) : bb.or_(a, b);
  return subtract ? bb.sub(a, b) : bb.add(a, b);
}

std::vector<Value> lower_add(Context& c) {
  Promoted p = promote2(c, 0, 1, true);
  return one(cast(c.b, add_scaled(c, p.a, p.b, 2, p.compute, false), p.type));
}

// CPU's sub_check: no bool operand (a Python bool is one too).
void check_sub_operands(Context& c) {
  auto is_bool = [&](size_t i) {
    return (c.args.is_tensor(i) ? c.args.info(i).dtype : c.args.scalar_kind(i)) == at::kBool;
  };
  TORCH_CHECK(!(is_bool(0) && is_bool(1)), "Subtraction, the `-` operator, with two bool tensors is not supported. "
              "Use the `^` or `logical_xor()` operator instead.");
  TORCH_CHECK(!is_bool(0) && !is_bool(1), "Subtraction, the `-` operator, with a bool tensor is not supported. "
              "If you are trying to invert a mask, use the `~` or `logical_not()` operator instead.");
}

std::vector<Value> lower_sub(Context& c) {
  check_sub_operands(c);
  Promoted p = promote2(c, 0, 1, true);
  return one(cast(c.b, add_scaled(c, p.a, p.b, 2, p.compute, true), p.type));
}

// rsub(self, other, alpha) = other - alpha * self
std::vector<Value> lower_rsub(Context& c) {
  check_sub_operands(c);
  Promoted p = promote2(c, 0, 1, true);
  return one(cast(c.b, add_scaled(c, p.b, p.a, 2, p.compute, true), p.type));
}

// A bool operand of a float product: XLA rewrites convert(pred) * x as
// select(pred, x, 0), which loses false * nan = nan and false * inf = nan
// (and -0.0); select(pred, x, x * 0) keeps IEEE's products.
Value mul_by_bool(Builder& b, Value pred, Value x) {
  return b.select(b.broadcast_to(pred, b.dims(x)), x, b.mul(x, b.zeros(b.type(x))));
}

std::vector<Value> lower_mul(Context& c) {
  Promoted p = promote2(c, 0, 1, true, /*exact_right=*/true);
  auto is_bool = [&](size_t i) { return c.args.is_tensor(i) && c.args.info(i).dtype == at::kBool; };
  Value r;
  if (p.compute == at::kBool) {
    r = c.b.and_(p.a, p.b);
  } else if (at::isFloatingType(p.compute) && is_bool(0) != is_bool(1)) {
    r = is_bool(0) ? mul_by_bool(c.b, c.args.tensor(0), p.b) : mul_by_bool(c.b, c.args.tensor(1), p.a);
  } else {
    r = c.b.mul(p.a, p.b);
  }
  return one(cast(c.b, r, p.type));
}

// mul_.Scalar, which PyTorch's own C++ composites call (the window
// functions, ...): CPU's in-place kernel rounds the number to a half or
// bfloat16 self's dtype first, where mul.Scalar and Python's x.mul_(s)
// (mul_.Tensor) multiply by it in float.
std::vector<Value> lower_mul_scalar_in_place(Context& c) {
  const at::ScalarType t = c.args.info(0).dtype;
  if (t != at::kHalf && t != at::kBFloat16) return lower_mul(c);
  Builder& b = c.b;
  Value s = b.convert(b.convert(c.args.scalar_value(1, DType::F32), to_hlo(t)), DType::F32);
  Value x = b.convert(c.args.tensor(0), DType::F32);
  return one(b.convert(b.mul(x, b.broadcast_in_dim(s, b.dims(x), {})), to_hlo(t)));
}

Value trunc_float(Builder& b, Value x) {
  Value zero = b.zeros(b.type(x));
  return b.select(b.compare(Cmp::LT, x, zero), b.unary("stablehlo.ceil", x),
                  b.unary("stablehlo.floor", x));
}

// Python-style floor division of floats, as PyTorch computes it.
Value floor_div_float(Builder& b, Value a, Value d) {
  Value zero = b.zeros(b.type(a));
  Value mod = b.rem(a, d);
  Value div = b.div(b.sub(a, mod), d);
  Value fix = b.and_(b.compare(Cmp::NE, mod, zero),
                     b.compare(Cmp::NE, b.compare(Cmp::LT, d, zero), b.compare(Cmp::LT, mod, zero)));
  div = b.select(fix, b.sub(div, full_like(b, 1, div)), div);
  Value fl = b.unary("stablehlo.floor", div);
  fl = b.select(b.compare(Cmp::GT, b.sub(div, fl), full_like(b, 0.5, div)), b.add(fl, full_like(b, 1, fl)), fl);
  Value q = b.div(a, d);
  // A zero quotient takes the sign of a / d (copysign(0, a / d)): q * 0 is
  // that zero, since |q| < 1 where div is 0 (a comparison would miss -0).
  fl = b.select(b.compare(Cmp::EQ, div, zero), b.mul(q, zero), fl);
  // Division by zero gives a / d (inf or nan), like C.
  return b.select(b.compare(Cmp::EQ, d, zero), q, fl);
}

Value floor_div_int(Builder& b, Value a, Value d) {
  Value zero = b.zeros(b.type(a));
  Value q = b.div(a, d);
  Value r = b.rem(a, d);
  Value signs_differ = b.compare(Cmp::NE, b.compare(Cmp::LT, a, zero), b.compare(Cmp::LT, d, zero));
  Value adjust = b.and_(signs_differ, b.compare(Cmp::NE, r, zero));
  return b.select(adjust, b.sub(q, b.full_int(1, b.dtype(a), b.dims(a))), q);
}

// Integer division by zero raises on CPU ("ZeroDivisionError", a
// RuntimeError): checked on the device, raised at the next wait.
void check_nonzero_divisor(Context& c, Value d) {
  Builder& b = c.b;
  if (b.type(d).numel() == 0) return;
  check_all(c, b.compare(Cmp::NE, d, b.zeros(b.type(d))), "ZeroDivisionError (an integer divided by zero)");
}

std::vector<Value> divide(Context& c, const std::string& mode) {
  ResultType r;
  promote_arg(r, c, 0);
  promote_arg(r, c, 1);
  const at::ScalarType common = r.get();
  const Dims shape = broadcast_shapes(arg_shape(c, 0), arg_shape(c, 1));
  Builder& b = c.b;
  // CPU's division kernels take a scalar divisor unrounded (as mul does).
  auto divisor = [&](at::ScalarType result, at::ScalarType compute) {
    return is_scalar_operand(c, 1) ? operand(c, 1, compute, shape) : operand(c, 1, result, compute, shape);
  };
  if (mode.empty()) {  // true division
    const at::ScalarType out = is_integral(common) ? default_float() : common;
    const at::ScalarType compute = opmath_type(out);
    Value q = b.div(operand(c, 0, out, compute, shape), divisor(out, compute));
    return one(cast(b, q, out));
  }
  TORCH_CHECK(mode == "trunc" || mode == "floor",
              "div expected rounding_mode to be one of None, 'trunc', or 'floor' but found '", mode, "'");
  const at::ScalarType compute = opmath_type(common);
  Value a = operand(c, 0, common, compute, shape);
  Value d = divisor(common, compute);
  Value q;
  if (is_integral(common)) {
    TORCH_CHECK_NOT_IMPLEMENTED(common != at::kBool, "\"div_", mode, "_cpu\" not implemented for 'Bool'");
    check_nonzero_divisor(c, d);
    q = mode == "trunc" ? b.div(a, d) : floor_div_int(b, a, d);
  } else {
    if (mode == "trunc") {
      // CPU truncates a bfloat16 or half quotient after rounding it (its
      // vectorized division returns the tensor's type), a scalar divisor's in opmath.
      Value quotient = b.div(a, d);
      if (compute != common && !is_scalar_operand(c, 1)) quotient = cast(b, cast(b, quotient, common), compute);
      q = trunc_float(b, quotient);
    } else {
      q = floor_div_float(b, a, d);
    }
  }
  return one(cast(b, q, common));
}

// remainder: the result has the sign of the divisor (Python's %).
Value python_mod(Builder& b, Value a, Value d) {
  Value zero = b.zeros(b.type(a));
  Value m = b.rem(a, d);
  Value fix = b.and_(b.compare(Cmp::NE, m, zero),
                     b.compare(Cmp::NE, b.compare(Cmp::LT, m, zero), b.compare(Cmp::LT, d, zero)));
  return b.select(fix, b.add(m, d), m);
}

std::vector<Value> lower_remainder(Context& c) {
  Promoted p = promote2(c, 0, 1, true);
  if (is_integral(p.compute) && p.compute != at::kBool) check_nonzero_divisor(c, p.b);
  return one(cast(c.b, python_mod(c.b, p.a, p.b), p.type));
}

std::vector<Value> lower_fmod(Context& c) {
  Promoted p = promote2(c, 0, 1, true);
  if (is_integral(p.compute) && p.compute != at::kBool) check_nonzero_divisor(c, p.b);
  return binary_arith(c, "stablehlo.remainder");
}

// x ** e of integers. XLA's integer pow reads only e's low 6 bits (x ** 64
// was 1, 0 ** 300 was 1), while CPU's wraps like repeated multiplication:
// exponents from 64 on are taken by squaring over their 64 bits. (Negative
// exponents: XLA's answer, 1, -1 or 0, as on CPU.)
Value integer_pow(Builder& b, Value x, Value e) {
  const Type t = b.type(x);
  Value one1 = b.full_int(1, t.dtype, t.dims);
  Value zero = b.zeros(t);
  Value large = b.compare(Cmp::GE, e, b.full_int(64, t.dtype, t.dims));
  // Unrolled over the exponent's (at most 64) bits rather than a while loop
  // (a loop of this failed XLA's dynamic_dimension_inference RET_CHECK in
  // some programs). Each value feeds the next step once: bit k is read from
  // the exponent itself and the running product is multiplied by base or 1,
  // never selected between two uses of itself, which made a DAG with 2^64
  // paths that XLA's dynamic-dimension passes walked path by path (a
  // bucketed program never finished compiling).
  Value result = one1, base = x, rest = b.select(large, e, zero);
  for (int bit = 0; bit < 64; ++bit) {
    Value shifted = bit == 0 ? rest : b.binary("stablehlo.shift_right_logical", rest, b.full_int(bit, t.dtype, t.dims));
    Value odd = b.compare(Cmp::NE, b.and_(shifted, one1), zero);
    result = b.mul(result, b.select(odd, base, one1));
    if (bit < 63) base = b.mul(base, base);
  }
  return b.select(large, result, b.pow(x, e));
}

std::vector<Value> lower_pow(Context& c) {
  if (c.op == "aten::pow.Tensor_Scalar" && is_integral(c.args.info(0).dtype) &&
      c.args.scalar_kind(1) == at::kLong) {
    TORCH_CHECK(c.args.scalar(1).toLong() >= 0, "Integers to negative integer powers are not allowed.");
  }
  Promoted p = promote2(c, 0, 1, true);
  Builder& b = c.b;
  if (p.compute == at::kBool) return one(b.or_(p.a, b.not_(p.b)));  // x^0 = 1, x^1 = x
  // CPU computes x ** 0.5 and x ** -0.5 as sqrt and rsqrt (but in float16):
  // NaN for -inf (pow gives inf and 0) and -0 -> -0, -inf. Its powers 2, 3,
  // -2 and -1 are products (x * x, x * x * x, 1 / (x * x), 1 / x), as here:
  // a pow of a runtime exponent is a libm call per element on XLA's CPU
  // backend, 100 times a product's time (RMSNorm squares every activation).
  const bool real_exponent = c.op == "aten::pow.Tensor_Scalar" && c10::isFloatingType(p.type) &&
                             !c.args.scalar(1).isComplex();
  if (real_exponent) {
    const double x = c.args.scalar(1).toDouble();
    if (p.type != at::kHalf && (x == 0.5 || x == -0.5)) {
      return one(cast(b, b.unary(x > 0 ? "stablehlo.sqrt" : "stablehlo.rsqrt", p.a), p.type));
    }
    if (x == 2 || x == 3 || x == -2 || x == -1) {
      Value sq = b.mul(p.a, p.a);
      // bfloat16 rounds the square (its vectorized products return bfloat16); float16 pows in float.
      if (p.type == at::kBFloat16) sq = cast(b, cast(b, sq, at::kBFloat16), p.compute);
      Value one_ = full_like(b, 1, p.a);
      Value r = x == 2 ? sq : x == 3 ? b.mul(sq, p.a) : x == -2 ? b.div(one_, sq) : b.div(one_, p.a);
      return one(cast(b, r, p.type));
    }
  }
  if (is_integral(p.compute)) return one(cast(b, integer_pow(b, p.a, p.b), p.type));
  return one(cast(b, b.pow(p.a, p.b), p.type));
}

Value lerp_value(Builder& b, Value self, Value end, Value w) {
  Value diff = b.sub(end, self);
  Value small = b.compare(Cmp::LT, b.abs(w), full_like(b, 0.5, w));
  return b.select(small, b.add(self, b.mul(w, diff)),
                  b.sub(end, b.mul(diff, b.sub(full_like(b, 1, w), w))));
}

// lerp(self, end, weight): weight is a Scalar or a tensor.
std::vector<Value> lower_lerp(Context& c) {
  const at::ScalarType t = c.args.info(0).dtype;
  TORCH_CHECK_NOT_IMPLEMENTED(c10::isFloatingType(t) || c10::isComplexType(t), "\"",
                              c.op == "aten::lerp.Tensor" ? "lerp_kernel_tensor" : "lerp_kernel_scalar",
                              "\" not implemented for '", c10::toString(t), "'");
  const at::ScalarType compute = opmath_type(t);
  Dims shape = broadcast_shapes(arg_shape(c, 0), arg_shape(c, 1));
  shape = broadcast_shapes(shape, arg_shape(c, 2));
  Builder& b = c.b;
  Value self = operand(c, 0, compute, shape);
  Value end = operand(c, 1, compute, shape);
  Value w = operand(c, 2, compute, shape);
  return one(cast(b, lerp_value(b, self, end, w), t));
}

// addcmul/addcdiv(self, t1, t2, value): self + value * t1 (* or /) t2
std::vector<Value> addc(Context& c, bool divide_) {
  ResultType r;
  for (size_t i = 0; i < 3; ++i) r.tensor(c.args.info(i));
  const at::ScalarType t = r.get();
  TORCH_CHECK(!(divide_ && is_integral(t)),
              "Integer division with addcdiv is no longer supported, and in a future release "
              "addcdiv will perform a true division of tensor1 and tensor2. The historic addcdiv "
              "behavior can be implemented as (input + value * torch.trunc(tensor1 / tensor2)).to(input.dtype) "
              "for integer inputs and as (input + value * tensor1 / tensor2) for float inputs. The future "
              "addcdiv behavior is just the latter implementation: (input + value * tensor1 / tensor2), for "
              "all dtypes.");
  const at::ScalarType compute = opmath_type(t);
  Dims shape = broadcast_shapes(arg_shape(c, 0), arg_shape(c, 1));
  shape = broadcast_shapes(shape, arg_shape(c, 2));
  Builder& b = c.b;
  Value t1 = operand(c, 1, t, compute, shape);
  Value t2 = operand(c, 2, t, compute, shape);
  // Always scaled (exact for value 1): Adam's step sizes change every step,
  // and a runtime operand keeps one program for all of them. In CPU's order:
  // (value * t1) * t2, or / t2.
  if (c.args.has(3)) t1 = b.mul(splat(b, c.args.scalar_value(3, to_hlo(compute)), shape), t1);
  Value prod = divide_ ? b.div(t1, t2) : b.mul(t1, t2);
  return one(cast(b, b.add(operand(c, 0, t, compute, shape), prod), t));
}

// ---- math functions ----------------------------------------------------------------

Value log2_(Builder& b, Value x) { return b.mul(b.unary("stablehlo.log", x), full_like(b, 1.0 / std::log(2.0), x)); }
Value log10_(Builder& b, Value x) { return b.mul(b.unary("stablehlo.log", x), full_like(b, 1.0 / std::log(10.0), x)); }
Value exp2_(Builder& b, Value x) { return b.pow(full_like(b, 2.0, x), x); }
Value reciprocal_(Builder& b, Value x) { return b.div(full_like(b, 1.0, x), x); }
Value sigmoid_(Builder& b, Value x) { return b.unary("stablehlo.logistic", x); }
Value frac_(Builder& b, Value x) { return b.sub(x, trunc_float(b, x)); }
Value floor_(Builder& b, Value x) { return b.unary("stablehlo.floor", x); }
Value ceil_(Builder& b, Value x) { return b.unary("stablehlo.ceil", x); }
Value round_(Builder& b, Value x) { return b.unary("stablehlo.round_nearest_even", x); }
Value deg2rad_(Builder& b, Value x) { return b.mul(x, full_like(b, M_PI / 180.0, x)); }
Value rad2deg_(Builder& b, Value x) { return b.mul(x, full_like(b, 180.0 / M_PI, x)); }
Value sinc_(Builder& b, Value x) {
  Value px = b.mul(x, full_like(b, M_PI, x));
  Value r = b.div(b.unary("stablehlo.sine", px), px);
  return b.select(b.compare(Cmp::EQ, x, b.zeros(b.type(x))), full_like(b, 1.0, x), r);
}
// exp(x^2) erfc(x): directly below 2 (where it stays finite, or overflows
// as it should for x < -9.3), by Laplace's continued fraction above, where
// exp(x^2) alone would overflow:
//   erfcx(x) = 1 / (sqrt(pi) (x + (1/2) / (x + (2/2) / (x + (3/2) / ...)))).
Value erfcx_(Builder& b, Value x) {
  Value direct = b.mul(b.unary("stablehlo.exponential", b.mul(x, x)), b.unary("chlo.erfc", x));
  Value large = b.compare(Cmp::GE, x, full_like(b, 2, x));
  Value z = b.select(large, x, full_like(b, 2, x));
  Value t = z;
  for (int j = 60; j >= 1; --j) t = b.add(z, b.div(full_like(b, j / 2.0, z), t));
  Value cf = b.div(full_like(b, 1 / std::sqrt(M_PI), t), t);
  return b.select(large, cf, direct);
}
Value ndtr_(Builder& b, Value x) {
  // 0.5 * erfc(-x / sqrt(2))
  Value z = b.mul(b.neg(x), full_like(b, M_SQRT1_2, x));
  return b.mul(full_like(b, 0.5, x), b.unary("chlo.erfc", z));
}
Value expit_(Builder& b, Value x) { return sigmoid_(b, x); }
Value entr_(Builder& b, Value x) {
  Value zero = b.zeros(b.type(x));
  Value r = b.neg(b.mul(x, b.unary("stablehlo.log", x)));
  r = b.select(b.compare(Cmp::EQ, x, zero), zero, r);
  r = b.select(b.compare(Cmp::LT, x, zero), full_like(b, -INFINITY, x), r);
  return b.select(is_nan(b, x), x, r);
}

// ---- comparisons and classification -------------------------------------------------

Value bool_of(Builder& b, Value x) {
  if (b.dtype(x) == DType::Pred) return x;
  return b.compare(Cmp::NE, x, b.zeros(b.type(x)));
}

std::vector<Value> classify(Context& c, Value (*f)(Builder&, Value)) {
  const at::ScalarType t = c.args.info(0).dtype;
  Builder& b = c.b;
  Value x = c.args.tensor(0);
  if (!c10::isFloatingType(t)) return one(b.broadcast_in_dim(b.constant_bool(false), b.dims(x), {}));
  return one(f(b, x));
}
Value isinf_(Builder& b, Value x) { return b.compare(Cmp::EQ, b.abs(x), full_like(b, INFINITY, b.abs(x))); }
Value isposinf_(Builder& b, Value x) { return b.compare(Cmp::EQ, x, full_like(b, INFINITY, x)); }
Value isneginf_(Builder& b, Value x) { return b.compare(Cmp::EQ, x, full_like(b, -INFINITY, x)); }

// The sign bit (negative zero and negative NaN included).
Value sign_bit(Builder& b, Value x) {
  const DType dt = b.dtype(x);
  if (hlo::is_unsigned_int(dt) || dt == DType::Pred) {
    return b.broadcast_in_dim(b.constant_bool(false), b.dims(x), {});
  }
  if (hlo::is_signed_int(dt)) return b.compare(Cmp::LT, x, b.zeros(b.type(x)));
  const DType it = dt == DType::F64 ? DType::I64 : dt == DType::F32 ? DType::I32 : DType::I16;
  Value bits = b.bitcast_convert(x, it);
  return b.compare(Cmp::LT, bits, b.zeros(b.type(bits)));
}

std::vector<Value> lower_signbit(Context& c) { return one(sign_bit(c.b, c.args.tensor(0))); }

std::vector<Value> lower_isfinite(Context& c) {
  const at::ScalarType t = c.args.info(0).dtype;
  Builder& b = c.b;
  Value x = c.args.tensor(0);
  if (!c10::isFloatingType(t)) return one(b.broadcast_in_dim(b.constant_bool(true), b.dims(x), {}));
  return one(b.is_finite(x));
}

std::vector<Value> lower_sign(Context& c) {
  const at::ScalarType t = c.args.info(0).dtype;
  Value x = c.args.tensor(0);
  if (t == at::kBool) return one(x);
  Builder& b = c.b;
  Value s = b.unary("stablehlo.sign", cast(b, x, opmath_type(t)));
  // sign(nan) = 0 and sign(-0) = +0 (stablehlo.sign gives nan and -0).
  if (c10::isFloatingType(t)) {
    s = b.select(b.or_(is_nan(b, x), b.compare(Cmp::EQ, x, b.zeros(b.type(x)))), b.zeros(b.type(s)), s);
  }
  return one(cast(b, s, t));
}

std::vector<Value> lower_logical(Context& c, std::string_view op) {
  const Dims shape = broadcast_shapes(arg_shape(c, 0), arg_shape(c, 1));
  Builder& b = c.b;
  Value a = b.broadcast_to(bool_of(b, c.args.tensor(0)), shape);
  Value d = b.broadcast_to(bool_of(b, c.args.tensor(1)), shape);
  return one(b.binary(op, a, d));
}

std::vector<Value> lower_logical_not(Context& c) {
  return one(c.b.not_(bool_of(c.b, c.args.tensor(0))));
}

std::vector<Value> lower_bitwise(Context& c, std::string_view op) {
  Promoted p = promote2(c, 0, 1, false);
  TORCH_CHECK_NOT_IMPLEMENTED(is_integral(p.type), "\"bitwise_", op.substr(10), "_cpu\" not implemented for '",
              c10::toString(p.type), "'");
  return one(c.b.binary(op, p.a, p.b));
}

std::vector<Value> lower_bitwise_not(Context& c) {
  const at::ScalarType t = c.args.info(0).dtype;
  TORCH_CHECK_NOT_IMPLEMENTED(is_integral(t), "\"bitwise_not_cpu\" not implemented for '", c10::toString(t), "'");
  return one(c.b.not_(c.args.tensor(0)));
}

// Arguments 0 and 1 promoted together, for an op CPU implements for
// integers only (its kernel `name` refuses the others, bool included).
Promoted integer_operands(Context& c, const char* name) {
  Promoted p = promote2(c, 0, 1, false);
  TORCH_CHECK_NOT_IMPLEMENTED(is_integral(p.type) && p.type != at::kBool, "\"", name, "_cpu\" not implemented for '",
                              c10::toString(p.type), "'");
  return p;
}

std::vector<Value> lower_shift(Context& c, bool left) {
  Promoted p = integer_operands(c, left ? "lshift" : "rshift");
  Builder& b = c.b;
  const DType dt = to_hlo(p.type);
  if (left) return one(b.binary("stablehlo.shift_left", p.a, p.b));
  return one(b.binary(hlo::is_unsigned_int(dt) ? "stablehlo.shift_right_logical"
                                               : "stablehlo.shift_right_arithmetic",
                      p.a, p.b));
}

// gcd and lcm as CPU's calc_gcd: Euclid's algorithm on |a| and |b|, every
// element at once (rounds until every remainder is 0: fewer than 100 for
// int64); lcm(a, b) = |a / gcd * b|, 0 where gcd is 0.
std::vector<Value> lower_gcd(Context& c, bool lcm) {
  Promoted p = integer_operands(c, lcm ? "lcm" : "gcd");
  Builder& b = c.b;
  const DType dt = to_hlo(p.type);
  const Dims shape = p.shape;
  const bool is_signed = !hlo::is_unsigned_int(dt);
  auto absolute = [&](Builder& rb, Value x) { return is_signed ? rb.abs(x) : x; };
  auto out = b.while_loop(
      {absolute(b, p.a), absolute(b, p.b)},
      [&](Builder& rb, const std::vector<Value>& v) {
        return std::vector<Value>{any_of(rb, rb.compare(Cmp::NE, v[0], rb.full_int(0, dt, shape)))};
      },
      [&](Builder& rb, const std::vector<Value>& v) {
        Value zero = rb.full_int(0, dt, shape);
        Value done = rb.compare(Cmp::EQ, v[0], zero);
        Value divisor = rb.select(done, rb.full_int(1, dt, shape), v[0]);
        return std::vector<Value>{rb.select(done, zero, rb.binary("stablehlo.remainder", v[1], divisor)),
                                  rb.select(done, v[1], v[0])};
      });
  Value g = out[1];
  if (!lcm) return one(g);
  Value zero = b.full_int(0, dt, shape);
  Value gz = b.compare(Cmp::EQ, g, zero);
  Value q = b.div(p.a, b.select(gz, b.full_int(1, dt, shape), g));
  // (C++ computes |q * b| of 8- and 16-bit operands in int, then truncates.)
  const bool narrow = hlo::byte_width(dt) < 4;
  const DType wt = narrow ? DType::I32 : dt;
  Value l = absolute(b, b.mul(b.convert(q, wt), b.convert(p.b, wt)));
  return one(b.select(gz, zero, b.convert(l, dt)));
}

// ---- min/max/clamp -------------------------------------------------------------------

// maximum/minimum propagate NaN.
Value nan_max(Builder& b, Value x, Value y, bool is_max) {
  Value r = is_max ? b.max(x, y) : b.min(x, y);
  if (!hlo::is_float(b.dtype(x))) return r;
  Value nan = b.add(x, y);  // nan when either is
  return b.select(b.or_(is_nan(b, x), is_nan(b, y)), nan, r);
}

std::vector<Value> lower_maxmin(Context& c, bool is_max) {
  Promoted p = promote2(c, 0, 1, false);
  Builder& b = c.b;
  if (p.type == at::kBool) return one(is_max ? b.or_(p.a, p.b) : b.and_(p.a, p.b));
  return one(nan_max(b, p.a, p.b, is_max));
}

// fmax/fmin ignore NaN (the other value wins).
std::vector<Value> lower_fmaxmin(Context& c, bool is_max) {
  Promoted p = promote2(c, 0, 1, false);
  Builder& b = c.b;
  Value r = is_max ? b.max(p.a, p.b) : b.min(p.a, p.b);
  if (hlo::is_float(to_hlo(p.compute))) {
    r = b.select(is_nan(b, p.a), p.b, b.select(is_nan(b, p.b), p.a, r));
  }
  return one(r);
}

// clamp(self, min, max) with Scalar or tensor bounds (either may be None).
std::vector<Value> lower_clamp(Context& c) {
  ResultType r;
  r.tensor(c.args.info(0));
  const bool has_min = c.args.has(1), has_max = c.args.has(2);
  TORCH_CHECK(has_min || has_max, "torch.clamp: At least one of 'min' or 'max' must not be None");
  if (has_min) promote_arg(r, c, 1);
  if (has_max) promote_arg(r, c, 2);
  const at::ScalarType t = r.get();
  Dims shape = arg_shape(c, 0);
  if (has_min) shape = broadcast_shapes(shape, arg_shape(c, 1));
  if (has_max) shape = broadcast_shapes(shape, arg_shape(c, 2));
  Builder& b = c.b;
  Value x = operand(c, 0, t, shape);
  if (has_min) x = nan_max(b, x, operand(c, 1, t, shape), true);
  if (has_max) x = nan_max(b, x, operand(c, 2, t, shape), false);
  return one(x);
}

std::vector<Value> clamp_one(Context& c, bool is_min) {
  Promoted p = promote2(c, 0, 1, false);
  return one(nan_max(c.b, p.a, p.b, is_min));
}

// ---- selection -----------------------------------------------------------------------

std::vector<Value> lower_where(Context& c) {
  const at::ScalarType ct = c.args.info(0).dtype;
  TORCH_CHECK(ct == at::kBool || ct == at::kByte,
              "where expected condition to be a boolean tensor, but got a tensor with dtype ", c10::toString(ct));
  if (ct == at::kByte) {
    TORCH_WARN_ONCE("where received a uint8 condition tensor. This behavior is deprecated and will be removed in a "
                    "future version of PyTorch. Use a boolean condition instead.");
  }
  ResultType r;
  promote_arg(r, c, 1);
  promote_arg(r, c, 2);
  const at::ScalarType t = r.get();
  const Dims shape =
      broadcast_shapes(broadcast_shapes(arg_shape(c, 0), arg_shape(c, 1)), arg_shape(c, 2));
  Value cond = operand(c, 0, at::kBool, shape);
  return one(c.b.select(cond, operand(c, 1, t, shape), operand(c, 2, t, shape)));
}

std::vector<Value> lower_abs(Context& c) {
  if (c.args.info(0).dtype == at::kBool) return one(c.args.tensor(0));
  return one(c.b.abs(c.args.tensor(0)));
}

std::vector<Value> lower_neg(Context& c) {
  TORCH_CHECK(c.args.info(0).dtype != at::kBool,
              "Negation, the `-` operator, on a bool tensor is not supported. If you are trying to "
              "invert a mask, use the `~` or `logical_not()` operator instead.");
  return one(c.b.neg(c.args.tensor(0)));
}

std::vector<Value> lower_round_decimals(Context& c) {
  const at::ScalarType t = c.args.info(0).dtype;
  const int64_t decimals = c.args.int_(1);
  Builder& b = c.b;
  Value x = c.args.tensor(0);
  if (is_integral(t)) return one(x);
  x = cast(b, x, opmath_type(t));
  const double ten = std::pow(10.0, static_cast<double>(std::abs(decimals)));
  Value scale = full_like(b, ten, x);
  Value r = decimals >= 0 ? b.div(round_(b, b.mul(x, scale)), scale)
                          : b.mul(round_(b, b.div(x, scale)), scale);
  return one(cast(b, r, t));
}

std::vector<Value> lower_nan_to_num(Context& c) {
  const at::ScalarType t = c.args.info(0).dtype;
  Builder& b = c.b;
  Value x = c.args.tensor(0);
  if (!c10::isFloatingType(t)) return one(x);
  const double big = t == at::kDouble   ? std::numeric_limits<double>::max()
                     : t == at::kFloat  ? std::numeric_limits<float>::max()
                     : t == at::kHalf   ? 65504.0
                                        : 3.3895313892515355e38;  // bfloat16
  Value nan = full_like(b, c.args.opt_double(1).value_or(0.0), x);
  Value pos = full_like(b, c.args.opt_double(2).value_or(big), x);
  Value neg = full_like(b, c.args.opt_double(3).value_or(-big), x);
  Value r = b.select(is_nan(b, x), nan, x);
  r = b.select(isposinf_(b, x), pos, r);
  return one(b.select(isneginf_(b, x), neg, r));
}

Value atan2_(Builder& b, Value y, Value x) { return b.binary("stablehlo.atan2", y, x); }
Value hypot_(Builder& b, Value x, Value y) { return b.unary("stablehlo.sqrt", b.add(b.mul(x, x), b.mul(y, y))); }
Value copysign_(Builder& b, Value x, Value y) {
  Value ax = b.abs(x);
  return b.select(sign_bit(b, y), b.neg(ax), ax);
}
Value logaddexp_(Builder& b, Value x, Value y) {
  Value m = b.max(x, y);
  Value r = b.add(m, b.unary("stablehlo.log_plus_one",
                             b.unary("stablehlo.exponential", b.neg(b.abs(b.sub(x, y))))));
  // Equal infinities: the difference would be nan.
  return b.select(b.and_(b.compare(Cmp::EQ, x, y), b.compare(Cmp::EQ, b.abs(x), full_like(b, INFINITY, x))), x, r);
}
Value logaddexp2_(Builder& b, Value x, Value y) {
  const double ln2 = std::log(2.0);
  Value m = b.max(x, y);
  Value d = b.mul(b.neg(b.abs(b.sub(x, y))), full_like(b, ln2, x));
  Value r = b.add(m, b.mul(b.unary("stablehlo.log_plus_one", b.unary("stablehlo.exponential", d)),
                           full_like(b, 1.0 / ln2, x)));
  return b.select(b.and_(b.compare(Cmp::EQ, x, y), b.compare(Cmp::EQ, b.abs(x), full_like(b, INFINITY, x))), x, r);
}
Value xlogy_(Builder& b, Value x, Value y) {
  Value zero = b.zeros(b.type(x));
  Value r = b.mul(x, b.unary("stablehlo.log", y));
  r = b.select(b.compare(Cmp::EQ, x, zero), zero, r);
  return b.select(is_nan(b, y), y, r);
}
Value xlog1py_(Builder& b, Value x, Value y) {
  Value zero = b.zeros(b.type(x));
  Value r = b.mul(x, b.unary("stablehlo.log_plus_one", y));
  r = b.select(b.compare(Cmp::EQ, x, zero), zero, r);
  return b.select(is_nan(b, y), y, r);
}
Value nextafter_(Builder& b, Value x, Value y) { return b.binary("chlo.next_after", x, y); }

std::vector<Value> lower_heaviside(Context& c) {
  Promoted p = promote2(c, 0, 1, false);
  Builder& b = c.b;
  Value zero = b.zeros(b.type(p.a));
  Value pos = b.convert(b.compare(Cmp::GT, p.a, zero), b.dtype(p.a));
  return one(b.select(b.compare(Cmp::EQ, p.a, zero), p.b, pos));
}

std::vector<Value> lower_logit(Context& c) {
  const at::ScalarType in = c.args.info(0).dtype;
  const at::ScalarType out = is_integral(in) ? default_float() : in;
  Builder& b = c.b;
  Value x = cast(b, c.args.tensor(0), opmath_type(out));
  if (auto eps = c.args.opt_double(1)) {
    x = b.clamp(full_like(b, *eps, x), x, full_like(b, 1.0 - *eps, x));
  }
  Value r = b.unary("stablehlo.log", b.div(x, b.sub(full_like(b, 1.0, x), x)));
  return one(cast(b, r, out));
}

std::vector<Value> lower_mvlgamma(Context& c) {
  const at::ScalarType t = c.args.info(0).dtype;
  const int64_t p = c.args.int_(1);
  Builder& b = c.b;
  Value x = cast(b, c.args.tensor(0), opmath_type(t));
  Value r = full_like(b, p * (p - 1) / 4.0 * std::log(M_PI), x);
  for (int64_t j = 0; j < p; ++j) {
    r = b.add(r, b.unary("chlo.lgamma", b.sub(x, full_like(b, j / 2.0, x))));
  }
  return one(cast(b, r, t));
}

// isin(elements, test_elements | test_element, assume_unique, invert)
std::vector<Value> lower_isin(Context& c) {
  Builder& b = c.b;
  ResultType r;
  promote_arg(r, c, 0);
  promote_arg(r, c, 1);
  const at::ScalarType t = r.get();
  Value e = c.args.is_tensor(0) ? cast(b, c.args.tensor(0), t) : c.args.scalar_value(0, to_hlo(t));
  const Dims shape = b.dims(e);
  Value test = c.args.is_tensor(1) ? cast(b, c.args.tensor(1), t) : c.args.scalar_value(1, to_hlo(t));
  const int64_t m = b.type(test).numel();
  Value found;
  if (m == 0) {
    found = b.broadcast_in_dim(b.constant_bool(false), shape, {});
  } else {
    // (e keeps its dims: a bucketed program's varying dims stay as they are)
    const int64_t rank = static_cast<int64_t>(shape.size());
    Dims pairs = shape;
    pairs.push_back(m);
    Dims e_dims(rank);
    std::iota(e_dims.begin(), e_dims.end(), 0);
    Value each_e = b.broadcast_in_dim(e, pairs, e_dims);
    Value each_t = b.broadcast_in_dim(b.reshape(test, {m}), pairs, {rank});
    found = b.reduce(b.compare(Cmp::EQ, each_e, each_t), b.constant_bool(false), {rank}, "stablehlo.or");
  }
  const bool invert = c.args.has(3) && c.args.bool_(3);
  return one(invert ? b.not_(found) : found);
}

}  // namespace

TPU_LOWERINGS(elementwise) {
  reg("aten::isin.Tensor_Tensor", lower_isin);
  reg("aten::isin.Tensor_Scalar", lower_isin);
  reg("aten::isin.Scalar_Tensor", lower_isin);
  // Arithmetic.
  reg("aten::add.Tensor", lower_add);
  reg("aten::add.Scalar", lower_add);
  reg("aten::sub.Tensor", lower_sub);
  reg("aten::sub.Scalar", lower_sub);
  reg("aten::rsub.Tensor", lower_rsub);
  reg("aten::rsub.Scalar", lower_rsub);
  reg("aten::mul.Tensor", lower_mul);
  reg("aten::mul.Scalar", lower_mul);
  reg("aten::mul_.Scalar", lower_mul_scalar_in_place);
  reg("aten::div.Tensor", [](Context& c) { return divide(c, ""); });
  reg("aten::div.Scalar", [](Context& c) { return divide(c, ""); });
  reg("aten::div.Tensor_mode", [](Context& c) { return divide(c, c.args.has(2) ? c.args.string(2) : ""); });
  reg("aten::div.Scalar_mode", [](Context& c) { return divide(c, c.args.has(2) ? c.args.string(2) : ""); });
  reg("aten::floor_divide", [](Context& c) { return divide(c, "floor"); });
  reg("aten::floor_divide.Scalar", [](Context& c) { return divide(c, "floor"); });
  // The in-place forms carry an overload name the functional op lacks, so
  // they are not found as its variants (x //= 2 reaches floor_divide_.Tensor).
  reg("aten::floor_divide_.Tensor", [](Context& c) { return divide(c, "floor"); });
  reg("aten::floor_divide_.Scalar", [](Context& c) { return divide(c, "floor"); });
  reg("aten::remainder.Tensor", lower_remainder);
  reg("aten::remainder.Scalar", lower_remainder);
  reg("aten::remainder.Scalar_Tensor", lower_remainder);
  reg("aten::fmod.Tensor", lower_fmod);
  reg("aten::fmod.Scalar", lower_fmod);
  reg("aten::pow.Tensor_Tensor", lower_pow);
  reg("aten::pow.Tensor_Scalar", lower_pow);
  reg("aten::pow.Scalar", lower_pow);
  reg("aten::lerp.Scalar", lower_lerp);
  reg("aten::lerp.Tensor", lower_lerp);
  reg("aten::addcmul", [](Context& c) { return addc(c, false); });
  reg("aten::addcdiv", [](Context& c) { return addc(c, true); });
  reg("aten::atan2", [](Context& c) { return binary_with(c, atan2_, true); });
  reg("aten::hypot", [](Context& c) { return binary_with(c, hypot_, true); });
  reg("aten::copysign.Tensor", [](Context& c) { return binary_with(c, copysign_, true); });
  reg("aten::copysign.Scalar", [](Context& c) { return binary_with(c, copysign_, true); });
  reg("aten::logaddexp", [](Context& c) { return binary_with(c, logaddexp_, true); });
  reg("aten::logaddexp2", [](Context& c) { return binary_with(c, logaddexp2_, true); });
  reg("aten::xlogy.Tensor", [](Context& c) { return binary_with(c, xlogy_, true, /*opmath=*/false); });
  reg("aten::xlogy.Scalar_Self", [](Context& c) { return binary_with(c, xlogy_, true, /*opmath=*/false); });
  reg("aten::xlogy.Scalar_Other", [](Context& c) { return binary_with(c, xlogy_, true, /*opmath=*/false); });
  reg("aten::special_xlog1py", [](Context& c) { return binary_with(c, xlog1py_, true, /*opmath=*/false); });
  reg("aten::nextafter", [](Context& c) { return binary_with(c, nextafter_, false, /*opmath=*/false); });
  reg("aten::heaviside", lower_heaviside);

  // Comparisons, logic, bits.
  reg("aten::eq.Tensor", [](Context& c) { return compare(c, Cmp::EQ); });
  reg("aten::eq.Scalar", [](Context& c) { return compare(c, Cmp::EQ); });
  reg("aten::ne.Tensor", [](Context& c) { return compare(c, Cmp::NE); });
  reg("aten::ne.Scalar", [](Context& c) { return compare(c, Cmp::NE); });
  reg("aten::lt.Tensor", [](Context& c) { return compare(c, Cmp::LT); });
  reg("aten::lt.Scalar", [](Context& c) { return compare(c, Cmp::LT); });
  reg("aten::le.Tensor", [](Context& c) { return compare(c, Cmp::LE); });
  reg("aten::le.Scalar", [](Context& c) { return compare(c, Cmp::LE); });
  reg("aten::gt.Tensor", [](Context& c) { return compare(c, Cmp::GT); });
  reg("aten::gt.Scalar", [](Context& c) { return compare(c, Cmp::GT); });
  reg("aten::ge.Tensor", [](Context& c) { return compare(c, Cmp::GE); });
  reg("aten::ge.Scalar", [](Context& c) { return compare(c, Cmp::GE); });
  reg("aten::logical_and", [](Context& c) { return lower_logical(c, "stablehlo.and"); });
  reg("aten::logical_or", [](Context& c) { return lower_logical(c, "stablehlo.or"); });
  reg("aten::logical_xor", [](Context& c) { return lower_logical(c, "stablehlo.xor"); });
  reg("aten::logical_not", lower_logical_not);
  reg("aten::bitwise_and.Tensor", [](Context& c) { return lower_bitwise(c, "stablehlo.and"); });
  reg("aten::bitwise_and.Scalar", [](Context& c) { return lower_bitwise(c, "stablehlo.and"); });
  reg("aten::bitwise_or.Tensor", [](Context& c) { return lower_bitwise(c, "stablehlo.or"); });
  reg("aten::bitwise_or.Scalar", [](Context& c) { return lower_bitwise(c, "stablehlo.or"); });
  reg("aten::bitwise_xor.Tensor", [](Context& c) { return lower_bitwise(c, "stablehlo.xor"); });
  reg("aten::bitwise_xor.Scalar", [](Context& c) { return lower_bitwise(c, "stablehlo.xor"); });
  reg("aten::bitwise_not", lower_bitwise_not);
  reg("aten::bitwise_left_shift.Tensor", [](Context& c) { return lower_shift(c, true); });
  reg("aten::bitwise_left_shift.Tensor_Scalar", [](Context& c) { return lower_shift(c, true); });
  reg("aten::bitwise_left_shift.Scalar_Tensor", [](Context& c) { return lower_shift(c, true); });
  reg("aten::bitwise_right_shift.Tensor", [](Context& c) { return lower_shift(c, false); });
  reg("aten::bitwise_right_shift.Tensor_Scalar", [](Context& c) { return lower_shift(c, false); });
  reg("aten::bitwise_right_shift.Scalar_Tensor", [](Context& c) { return lower_shift(c, false); });
  reg("aten::__lshift__.Tensor", [](Context& c) { return lower_shift(c, true); });
  reg("aten::gcd", [](Context& c) { return lower_gcd(c, false); });
  reg("aten::lcm", [](Context& c) { return lower_gcd(c, true); });
  reg("aten::__lshift__.Scalar", [](Context& c) { return lower_shift(c, true); });
  reg("aten::__rshift__.Tensor", [](Context& c) { return lower_shift(c, false); });
  reg("aten::__rshift__.Scalar", [](Context& c) { return lower_shift(c, false); });
  reg("aten::isnan", [](Context& c) { return classify(c, is_nan); });
  reg("aten::isinf", [](Context& c) { return classify(c, isinf_); });
  reg("aten::isposinf", [](Context& c) { return classify(c, isposinf_); });
  reg("aten::isneginf", [](Context& c) { return classify(c, isneginf_); });
  reg("aten::signbit", lower_signbit);

  // Min, max, clamp.
  reg("aten::maximum", [](Context& c) { return lower_maxmin(c, true); });
  reg("aten::minimum", [](Context& c) { return lower_maxmin(c, false); });
  reg("aten::fmax", [](Context& c) { return lower_fmaxmin(c, true); });
  reg("aten::fmin", [](Context& c) { return lower_fmaxmin(c, false); });
  reg("aten::clamp", lower_clamp);
  reg("aten::clamp.Tensor", lower_clamp);
  reg("aten::clamp_min", [](Context& c) { return clamp_one(c, true); });
  reg("aten::clamp_min.Tensor", [](Context& c) { return clamp_one(c, true); });
  reg("aten::clamp_max", [](Context& c) { return clamp_one(c, false); });
  reg("aten::clamp_max.Tensor", [](Context& c) { return clamp_one(c, false); });

  // Selection and sign.
  reg("aten::where.self", lower_where);
  reg("aten::abs", lower_abs);
  reg("aten::neg", lower_neg);
  reg("aten::sign", lower_sign);
  reg("aten::sgn", lower_sign);
  reg("aten::nan_to_num", lower_nan_to_num);

  // Rounding.
  reg("aten::floor", [](Context& c) { return rounding(c, floor_); });
  reg("aten::ceil", [](Context& c) { return rounding(c, ceil_); });
  reg("aten::round", [](Context& c) { return rounding(c, round_); });
  reg("aten::round.decimals", lower_round_decimals);
  reg("aten::trunc", [](Context& c) { return rounding(c, trunc_float); });
  reg("aten::frac", [](Context& c) { return rounding(c, frac_); });

  // Math functions.
  reg("aten::exp", [](Context& c) { return unary_float(c, "stablehlo.exponential"); });
  reg("aten::exp2", [](Context& c) { return unary_float_with(c, exp2_); });
  reg("aten::expm1", [](Context& c) { return unary_float(c, "stablehlo.exponential_minus_one"); });
  reg("aten::log", [](Context& c) { return unary_float(c, "stablehlo.log"); });
  reg("aten::log2", [](Context& c) { return unary_float_with(c, log2_); });
  reg("aten::log10", [](Context& c) { return unary_float_with(c, log10_); });
  reg("aten::log1p", [](Context& c) { return unary_float(c, "stablehlo.log_plus_one"); });
  reg("aten::sqrt", [](Context& c) { return unary_float(c, "stablehlo.sqrt"); });
  reg("aten::rsqrt", [](Context& c) { return unary_float(c, "stablehlo.rsqrt"); });
  reg("aten::reciprocal", [](Context& c) { return unary_float_with(c, reciprocal_); });
  reg("aten::sigmoid", [](Context& c) { return unary_float_with(c, sigmoid_); });
  reg("aten::tanh", [](Context& c) { return unary_float(c, "stablehlo.tanh"); });
  reg("aten::sin", [](Context& c) { return unary_float(c, "stablehlo.sine"); });
  reg("aten::cos", [](Context& c) { return unary_float(c, "stablehlo.cosine"); });
  reg("aten::tan", [](Context& c) { return unary_float(c, "stablehlo.tan"); });
  reg("aten::asin", [](Context& c) { return unary_float(c, "chlo.asin"); });
  reg("aten::acos", [](Context& c) { return unary_float(c, "chlo.acos"); });
  // Not chlo.atan: the XLA CPU plugin's vectorized atan is wrong past a few
  // dozen elements (errors of radians at 100), and it simplifies atan2(x, 1)
  // into that atan. atan2(x, one) with the one a runtime operand is exact.
  reg("aten::atan", [](Context& c) {
    const at::ScalarType in = c.args.info(0).dtype;
    const at::ScalarType out = is_integral(in) ? default_float() : in;
    Value x = cast(c.b, c.args.tensor(0), opmath_type(out));
    Value one_ = splat(c.b, c.args.runtime_scalar(1.0, c.b.dtype(x)), c.b.dims(x));
    return one(cast(c.b, c.b.binary("stablehlo.atan2", x, one_), out));
  });
  reg("aten::sinh", [](Context& c) { return unary_float(c, "chlo.sinh"); });
  reg("aten::cosh", [](Context& c) { return unary_float(c, "chlo.cosh"); });
  reg("aten::asinh", [](Context& c) { return unary_float(c, "chlo.asinh"); });
  reg("aten::acosh", [](Context& c) { return unary_float(c, "chlo.acosh"); });
  reg("aten::atanh", [](Context& c) { return unary_float(c, "chlo.atanh"); });
  reg("aten::erf", [](Context& c) { return unary_float(c, "chlo.erf"); });
  reg("aten::erfc", [](Context& c) { return unary_float(c, "chlo.erfc"); });
  // XLA's float32 erf_inv loses digits near +-1 (1e-4 at 0.9999): float32
  // evaluates it in float64 and rounds once, as accurate as the CPU.
  reg("aten::erfinv", [](Context& c) {
    return unary_float_with(c, [](Builder& b, Value x) {
      if (b.dtype(x) != DType::F32) return b.unary("chlo.erf_inv", x);
      return b.convert(b.unary("chlo.erf_inv", b.convert(x, DType::F64)), DType::F32);
    });
  });
  reg("aten::lgamma", [](Context& c) { return unary_float(c, "chlo.lgamma"); });
  reg("aten::mvlgamma", lower_mvlgamma);
  reg("aten::special_erfcx", [](Context& c) { return unary_float_with(c, erfcx_); });
  reg("aten::special_entr", [](Context& c) { return unary_float_with(c, entr_); });
  reg("aten::sinc", [](Context& c) { return unary_float_with(c, sinc_); });
  reg("aten::deg2rad", [](Context& c) { return unary_float_with(c, deg2rad_); });
  reg("aten::rad2deg", [](Context& c) { return unary_float_with(c, rad2deg_); });
  reg("aten::logit", lower_logit);
  (void)expit_;
  (void)ndtr_;
  (void)lower_isfinite;
}

}  // namespace tpu::lowering
