// Elementwise ops: arithmetic, comparisons, math functions, selection.
//
// Most ops are one line: a generic rule (promotion, broadcasting, half
// precision computed in float) parameterized by the StableHLO op.
#include "csrc/lowering/common.h"

namespace tpu::lowering {

namespace {

// ---- generic rules -------------------------------------------------------------

// f(x) of a floating result: integers promote to the default float dtype;
// half and bfloat16 are computed in float (as PyTorch's CPU kernels do).
std::vector<Value> unary_float(Context& c, std::string_view op) {
  const at::ScalarType in = c.args.info(0).dtype;
  const at::ScalarType out = is_integral(in) ? default_float() : in;
  Value x = cast(c.b, c.args.tensor(0), opmath_type(out));
  return one(cast(c.b, c.b.unary(op, x), out));
}

// f(x) keeping the input dtype.
std::vector<Value> unary_same(Context& c, std::string_view op) {
  return one(c.b.unary(op, c.args.tensor(0)));
}

// f(a, b) over the promoted type of arguments 0 and 1 (tensors or Scalars).
std::vector<Value> binary_arith(Context& c, std::string_view op) {
  Promoted p = promote2(c, 0, 1, /*opmath=*/true);
  return one(cast(c.b, c.b.binary(op, p.a, p.b), p.type));
}

std::vector<Value> compare(Context& c, hlo::Cmp dir) {
  Promoted p = promote2(c, 0, 1, /*opmath=*/false);
  return one(c.b.compare(dir, p.a, p.b));
}

// a + alpha * b (alpha at argument `alpha_arg`), in opmath.
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

std::vector<Value> lower_sub(Context& c) {
  Promoted p = promote2(c, 0, 1, true);
  return one(cast(c.b, add_scaled(c, p.a, p.b, 2, p.compute, true), p.type));
}

// rsub(self, other, alpha) = other - alpha * self
std::vector<Value> lower_rsub(Context& c) {
  Promoted p = promote2(c, 0, 1, true);
  return one(cast(c.b, add_scaled(c, p.b, p.a, 2, p.compute, true), p.type));
}

std::vector<Value> lower_mul(Context& c) {
  Promoted p = promote2(c, 0, 1, true);
  Value r = p.compute == at::kBool ? c.b.and_(p.a, p.b) : c.b.mul(p.a, p.b);
  return one(cast(c.b, r, p.type));
}

Value trunc_float(Builder& b, Value x) {
  Value zero = b.zeros(b.type(x));
  return b.select(b.compare(hlo::Cmp::LT, x, zero), b.unary("stablehlo.ceil", x),
                  b.unary("stablehlo.floor", x));
}

// Python-style floor division of floats, as PyTorch computes it.
Value floor_div_float(Builder& b, Value a, Value d) {
  const Type t = b.type(a);
  Value zero = b.zeros(t);
  Value mod = b.rem(a, d);
  Value div = b.div(b.sub(a, mod), d);
  Value fix = b.and_(b.compare(hlo::Cmp::NE, mod, zero),
                     b.compare(hlo::Cmp::NE, b.compare(hlo::Cmp::LT, d, zero),
                               b.compare(hlo::Cmp::LT, mod, zero)));
  div = b.select(fix, b.sub(div, b.full(1, t.dtype, t.dims)), div);
  Value fl = b.unary("stablehlo.floor", div);
  fl = b.select(b.compare(hlo::Cmp::GT, b.sub(div, fl), b.full(0.5, t.dtype, t.dims)),
                b.add(fl, b.full(1, t.dtype, t.dims)), fl);
  // A zero quotient takes the sign of a / d.
  Value q = b.div(a, d);
  Value zero_div = b.compare(hlo::Cmp::EQ, div, zero);
  fl = b.select(zero_div, b.select(b.compare(hlo::Cmp::LT, q, zero), b.neg(zero), zero), fl);
  // Division by zero gives a / d (inf or nan), like C.
  return b.select(b.compare(hlo::Cmp::EQ, d, zero), q, fl);
}

Value floor_div_int(Builder& b, Value a, Value d) {
  const Type t = b.type(a);
  Value zero = b.zeros(t);
  Value q = b.div(a, d);
  Value r = b.rem(a, d);
  Value signs_differ = b.compare(hlo::Cmp::NE, b.compare(hlo::Cmp::LT, a, zero),
                                 b.compare(hlo::Cmp::LT, d, zero));
  Value adjust = b.and_(signs_differ, b.compare(hlo::Cmp::NE, r, zero));
  return b.select(adjust, b.sub(q, b.full_int(1, t.dtype, t.dims)), q);
}

std::vector<Value> divide(Context& c, const std::string& mode) {
  ResultType r;
  promote_arg(r, c, 0);
  promote_arg(r, c, 1);
  const at::ScalarType common = r.get();
  const Dims shape = broadcast_shapes(arg_shape(c, 0), arg_shape(c, 1));
  Builder& b = c.b;
  if (mode.empty()) {  // true division
    const at::ScalarType out = is_integral(common) ? default_float() : common;
    const at::ScalarType compute = opmath_type(out);
    Value q = b.div(operand(c, 0, compute, shape), operand(c, 1, compute, shape));
    return one(cast(b, q, out));
  }
  TORCH_CHECK(mode == "trunc" || mode == "floor",
              "div expected rounding_mode to be one of None, 'trunc', or 'floor' but found '", mode,
              "'");
  const at::ScalarType compute = opmath_type(common);
  Value a = operand(c, 0, compute, shape);
  Value d = operand(c, 1, compute, shape);
  Value q;
  if (is_integral(common)) {
    TORCH_CHECK(common != at::kBool, "\"div_", mode, "\" not implemented for 'Bool'");
    q = mode == "trunc" ? b.div(a, d) : floor_div_int(b, a, d);
  } else {
    q = mode == "trunc" ? trunc_float(b, b.div(a, d)) : floor_div_float(b, a, d);
  }
  return one(cast(b, q, common));
}

std::vector<Value> lower_div(Context& c) { return divide(c, ""); }
std::vector<Value> lower_div_mode(Context& c) {
  return divide(c, c.args.has(2) ? c.args.string(2) : "");
}

std::vector<Value> lower_where(Context& c) {
  ResultType r;
  promote_arg(r, c, 1);
  promote_arg(r, c, 2);
  const at::ScalarType t = r.get();
  const Dims shape =
      broadcast_shapes(broadcast_shapes(arg_shape(c, 0), arg_shape(c, 1)), arg_shape(c, 2));
  Value cond = operand(c, 0, at::kBool, shape);
  return one(c.b.select(cond, operand(c, 1, t, shape), operand(c, 2, t, shape)));
}

std::vector<Value> lower_relu(Context& c) {
  Builder& b = c.b;
  Value x = c.args.tensor(0);
  return one(b.max(x, b.zeros(b.type(x))));
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

}  // namespace

TPU_LOWERINGS(elementwise) {
  reg("aten::add.Tensor", lower_add);
  reg("aten::add.Scalar", lower_add);
  reg("aten::sub.Tensor", lower_sub);
  reg("aten::sub.Scalar", lower_sub);
  reg("aten::rsub.Tensor", lower_rsub);
  reg("aten::rsub.Scalar", lower_rsub);
  reg("aten::mul.Tensor", lower_mul);
  reg("aten::mul.Scalar", lower_mul);
  reg("aten::div.Tensor", lower_div);
  reg("aten::div.Scalar", lower_div);
  reg("aten::div.Tensor_mode", lower_div_mode);
  reg("aten::div.Scalar_mode", lower_div_mode);
  reg("aten::maximum", [](Context& c) { return binary_arith(c, "stablehlo.maximum"); });
  reg("aten::minimum", [](Context& c) { return binary_arith(c, "stablehlo.minimum"); });

  reg("aten::eq.Tensor", [](Context& c) { return compare(c, hlo::Cmp::EQ); });
  reg("aten::eq.Scalar", [](Context& c) { return compare(c, hlo::Cmp::EQ); });
  reg("aten::ne.Tensor", [](Context& c) { return compare(c, hlo::Cmp::NE); });
  reg("aten::ne.Scalar", [](Context& c) { return compare(c, hlo::Cmp::NE); });
  reg("aten::lt.Tensor", [](Context& c) { return compare(c, hlo::Cmp::LT); });
  reg("aten::lt.Scalar", [](Context& c) { return compare(c, hlo::Cmp::LT); });
  reg("aten::le.Tensor", [](Context& c) { return compare(c, hlo::Cmp::LE); });
  reg("aten::le.Scalar", [](Context& c) { return compare(c, hlo::Cmp::LE); });
  reg("aten::gt.Tensor", [](Context& c) { return compare(c, hlo::Cmp::GT); });
  reg("aten::gt.Scalar", [](Context& c) { return compare(c, hlo::Cmp::GT); });
  reg("aten::ge.Tensor", [](Context& c) { return compare(c, hlo::Cmp::GE); });
  reg("aten::ge.Scalar", [](Context& c) { return compare(c, hlo::Cmp::GE); });

  reg("aten::where.self", lower_where);
  reg("aten::relu", lower_relu);
  reg("aten::abs", lower_abs);
  reg("aten::neg", lower_neg);

  reg("aten::exp", [](Context& c) { return unary_float(c, "stablehlo.exponential"); });
  reg("aten::expm1", [](Context& c) { return unary_float(c, "stablehlo.exponential_minus_one"); });
  reg("aten::log", [](Context& c) { return unary_float(c, "stablehlo.log"); });
  reg("aten::log1p", [](Context& c) { return unary_float(c, "stablehlo.log_plus_one"); });
  reg("aten::sqrt", [](Context& c) { return unary_float(c, "stablehlo.sqrt"); });
  reg("aten::rsqrt", [](Context& c) { return unary_float(c, "stablehlo.rsqrt"); });
  reg("aten::sigmoid", [](Context& c) { return unary_float(c, "stablehlo.logistic"); });
  reg("aten::tanh", [](Context& c) { return unary_float(c, "stablehlo.tanh"); });
  reg("aten::sin", [](Context& c) { return unary_float(c, "stablehlo.sine"); });
  reg("aten::cos", [](Context& c) { return unary_float(c, "stablehlo.cosine"); });
  reg("aten::tan", [](Context& c) { return unary_float(c, "stablehlo.tan"); });
  reg("aten::erf", [](Context& c) { return unary_float(c, "chlo.erf"); });
}

}  // namespace tpu::lowering
