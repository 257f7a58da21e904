// Activation functions and their backward ops.
//
// Each activation is a function of builder values in opmath (float for half
// and bfloat16); `act` and `act_backward` apply the dtype rules once.
#include <cmath>

#include "csrc/lowering/common.h"

namespace tpu::lowering {

namespace {

using hlo::Cmp;

Value k(Builder& b, double v, Value like) { return b.full(v, b.dtype(like), b.dims(like)); }
Value gt(Builder& b, Value x, double v) { return b.compare(Cmp::GT, x, k(b, v, x)); }
Value le(Builder& b, Value x, double v) { return b.compare(Cmp::LE, x, k(b, v, x)); }
Value lt(Builder& b, Value x, double v) { return b.compare(Cmp::LT, x, k(b, v, x)); }
Value exp_(Builder& b, Value x) { return b.unary("stablehlo.exponential", x); }
Value sigmoid(Builder& b, Value x) { return b.unary("stablehlo.logistic", x); }
Value zero_like(Builder& b, Value x) { return b.zeros(b.type(x)); }

// self at argument 0; f computes on opmath values with the op's Context.
template <typename F>
std::vector<Value> act(Context& c, F f) {
  const at::ScalarType t = c.args.info(0).dtype;
  Value x = cast(c.b, c.args.tensor(0), opmath_type(t));
  return one(cast(c.b, f(c.b, x), t));
}

// grad at argument 0, the saved input/output at argument 1.
template <typename F>
std::vector<Value> act_backward(Context& c, F f) {
  const at::ScalarType t = c.args.info(0).dtype;
  const at::ScalarType compute = opmath_type(t);
  const Dims shape = broadcast_shapes(c.args.info(0).sizes, c.args.info(1).sizes);
  Value g = c.b.broadcast_to(cast(c.b, c.args.tensor(0), compute), shape);
  Value x = c.b.broadcast_to(cast(c.b, c.args.tensor(1), compute), shape);
  return one(cast(c.b, f(c.b, g, x), t));
}

double dbl(Context& c, size_t i, double dflt) {
  return c.args.has(i) ? c.args.scalar(i).toDouble() : dflt;
}

// ---- gelu -------------------------------------------------------------------------

constexpr double kSqrt2OverPi = 0.7978845608028654;
constexpr double kCoeff = 0.044715;

Value gelu_value(Builder& b, Value x, bool tanh_approx) {
  if (tanh_approx) {
    Value inner = b.mul(k(b, kSqrt2OverPi, x), b.add(x, b.mul(k(b, kCoeff, x), b.mul(x, b.mul(x, x)))));
    return b.mul(b.mul(k(b, 0.5, x), x), b.add(k(b, 1, x), b.unary("stablehlo.tanh", inner)));
  }
  Value cdf = b.mul(k(b, 0.5, x), b.add(k(b, 1, x), b.unary("chlo.erf", b.mul(x, k(b, M_SQRT1_2, x)))));
  return b.mul(x, cdf);
}

Value gelu_grad(Builder& b, Value g, Value x, bool tanh_approx) {
  if (tanh_approx) {
    Value x2 = b.mul(x, x);
    Value inner = b.mul(k(b, kSqrt2OverPi, x), b.add(x, b.mul(k(b, kCoeff, x), b.mul(x2, x))));
    Value th = b.unary("stablehlo.tanh", inner);
    Value left = b.mul(k(b, 0.5, x), b.add(k(b, 1, x), th));
    Value dinner = b.mul(k(b, kSqrt2OverPi, x), b.add(k(b, 1, x), b.mul(k(b, 3 * kCoeff, x), x2)));
    Value right = b.mul(b.mul(k(b, 0.5, x), x), b.mul(b.sub(k(b, 1, x), b.mul(th, th)), dinner));
    return b.mul(g, b.add(left, right));
  }
  Value cdf = b.mul(k(b, 0.5, x), b.add(k(b, 1, x), b.unary("chlo.erf", b.mul(x, k(b, M_SQRT1_2, x)))));
  Value pdf = b.mul(k(b, 0.3989422804014327, x), exp_(b, b.mul(k(b, -0.5, x), b.mul(x, x))));
  return b.mul(g, b.add(cdf, b.mul(x, pdf)));
}

bool tanh_mode(Context& c, size_t i) {
  const std::string mode = c.args.has(i) ? c.args.string(i) : "none";
  TORCH_CHECK(mode == "none" || mode == "tanh", "approximate argument must be either none or tanh.");
  return mode == "tanh";
}

// ---- softplus / elu / leaky relu ------------------------------------------------------

Value softplus_value(Builder& b, Value x, double beta, double threshold) {
  Value bx = b.mul(x, k(b, beta, x));
  Value soft = b.div(b.unary("stablehlo.log_plus_one", exp_(b, bx)), k(b, beta, x));
  return b.select(gt(b, bx, threshold), x, soft);
}

Value log_sigmoid_value(Builder& b, Value x) {
  // min(x, 0) - log1p(exp(-|x|))
  Value z = exp_(b, b.neg(b.abs(x)));
  return b.sub(b.min(x, zero_like(b, x)), b.unary("stablehlo.log_plus_one", z));
}

std::vector<Value> lower_elu(Context& c) {
  const double alpha = dbl(c, 1, 1), scale = dbl(c, 2, 1), in_scale = dbl(c, 3, 1);
  return act(c, [&](Builder& b, Value x) {
    Value neg = b.mul(k(b, scale * alpha, x), b.unary("stablehlo.exponential_minus_one", b.mul(x, k(b, in_scale, x))));
    return b.select(gt(b, x, 0), b.mul(x, k(b, scale, x)), neg);
  });
}

// elu_backward(grad_output, alpha, scale, input_scale, is_result, self_or_result)
std::vector<Value> lower_elu_backward(Context& c) {
  const double alpha = dbl(c, 1, 1), scale = dbl(c, 2, 1), in_scale = dbl(c, 3, 1);
  const bool is_result = c.args.bool_(4);
  const at::ScalarType t = c.args.info(0).dtype;
  Builder& b = c.b;
  const at::ScalarType compute = opmath_type(t);
  Value g = cast(b, c.args.tensor(0), compute);
  Value x = cast(b, c.args.tensor(5), compute);
  Value neg;
  if (is_result) {  // d/dx = input_scale * (out + alpha * scale)
    neg = b.mul(g, b.mul(k(b, in_scale, x), b.add(x, k(b, alpha * scale, x))));
  } else {
    neg = b.mul(g, b.mul(k(b, in_scale * alpha * scale, x), exp_(b, b.mul(x, k(b, in_scale, x)))));
  }
  Value pos = b.mul(g, k(b, scale, g));
  return one(cast(b, b.select(is_result ? gt(b, x, 0) : gt(b, x, 0), pos, neg), t));
}

}  // namespace

TPU_LOWERINGS(activation) {
  reg("aten::relu", [](Context& c) {
    Value x = c.args.tensor(0);
    return one(c.b.max(x, c.b.zeros(c.b.type(x))));
  });
  reg("aten::threshold", [](Context& c) {
    // x <= threshold ? value : x
    Promoted p = promote2(c, 0, 1, false);
    Value value = operand(c, 2, p.type, p.shape);
    return one(c.b.select(c.b.compare(Cmp::LE, p.a, p.b), value, p.a));
  });
  reg("aten::threshold_backward", [](Context& c) {
    // (grad_output, self, threshold): self <= threshold ? 0 : grad
    const at::ScalarType t = c.args.info(0).dtype;
    const Dims shape = broadcast_shapes(c.args.info(0).sizes, c.args.info(1).sizes);
    Builder& b = c.b;
    Value g = b.broadcast_to(c.args.tensor(0), shape);
    Value x = b.broadcast_to(cast(b, c.args.tensor(1), t), shape);
    Value th = splat(b, c.args.scalar_value(2, to_hlo(t)), shape);
    return one(b.select(b.compare(Cmp::LE, x, th), b.zeros(b.type(g)), g));
  });
  reg("aten::gelu", [](Context& c) {
    const bool th = tanh_mode(c, 1);
    return act(c, [&](Builder& b, Value x) { return gelu_value(b, x, th); });
  });
  reg("aten::gelu_backward", [](Context& c) {
    const bool th = tanh_mode(c, 2);
    return act_backward(c, [&](Builder& b, Value g, Value x) { return gelu_grad(b, g, x, th); });
  });
  reg("aten::silu", [](Context& c) {
    return act(c, [](Builder& b, Value x) { return b.mul(x, sigmoid(b, x)); });
  });
  reg("aten::mish", [](Context& c) {
    return act(c, [](Builder& b, Value x) {
      return b.mul(x, b.unary("stablehlo.tanh", softplus_value(b, x, 1, 20)));
    });
  });
  reg("aten::sigmoid_backward", [](Context& c) {
    // (grad_output, output): g * y * (1 - y)
    return act_backward(c, [](Builder& b, Value g, Value y) {
      return b.mul(g, b.mul(y, b.sub(k(b, 1, y), y)));
    });
  });
  reg("aten::tanh_backward", [](Context& c) {
    return act_backward(c, [](Builder& b, Value g, Value y) {
      return b.mul(g, b.sub(k(b, 1, y), b.mul(y, y)));
    });
  });
  reg("aten::logit_backward", [](Context& c) {
    std::optional<double> eps = c.args.opt_double(2);
    return act_backward(c, [&](Builder& b, Value g, Value x) {
      Value r = b.div(g, b.mul(x, b.sub(k(b, 1, x), x)));
      if (eps) {
        Value out = b.or_(lt(b, x, *eps), gt(b, x, 1 - *eps));
        r = b.select(out, zero_like(b, r), r);
      } else {
        Value out = b.or_(lt(b, x, 0), gt(b, x, 1));
        r = b.select(out, k(b, NAN, r), r);
      }
      return r;
    });
  });
  reg("aten::hardtanh", [](Context& c) {
    const DType t = to_hlo(c.args.info(0).dtype);
    Builder& b = c.b;
    Value x = c.args.tensor(0);
    // (the bounds as given: an int64 bound read as a double would round)
    auto bound = [&](size_t i, double dflt) {
      return splat(b, c.args.has(i) ? c.args.scalar_value(i, t) : c.args.runtime_scalar(dflt, t), b.dims(x));
    };
    return one(b.min(b.max(x, bound(1, -1)), bound(2, 1)));
  });
  reg("aten::hardtanh_backward", [](Context& c) {
    const double lo = dbl(c, 2, -1), hi = dbl(c, 3, 1);
    return act_backward(c, [&](Builder& b, Value g, Value x) {
      Value out = b.or_(le(b, x, lo), b.compare(Cmp::GE, x, k(b, hi, x)));
      return b.select(out, zero_like(b, g), g);
    });
  });
  reg("aten::leaky_relu", [](Context& c) {
    const double slope = dbl(c, 1, 0.01);
    return act(c, [&](Builder& b, Value x) {
      return b.select(gt(b, x, 0), x, b.mul(x, k(b, slope, x)));
    });
  });
  reg("aten::leaky_relu_backward", [](Context& c) {
    const double slope = dbl(c, 2, 0.01);
    return act_backward(c, [&](Builder& b, Value g, Value x) {
      return b.select(gt(b, x, 0), g, b.mul(g, k(b, slope, g)));
    });
  });
  reg("aten::elu", lower_elu);
  reg("aten::elu_backward", lower_elu_backward);
  reg("aten::softplus", [](Context& c) {
    const double beta = dbl(c, 1, 1), threshold = dbl(c, 2, 20);
    return act(c, [&](Builder& b, Value x) { return softplus_value(b, x, beta, threshold); });
  });
  reg("aten::softplus_backward", [](Context& c) {
    const double beta = dbl(c, 2, 1), threshold = dbl(c, 3, 20);
    return act_backward(c, [&](Builder& b, Value g, Value x) {
      Value z = exp_(b, b.mul(x, k(b, beta, x)));
      Value soft = b.mul(g, b.div(z, b.add(z, k(b, 1, z))));
      return b.select(gt(b, b.mul(x, k(b, beta, x)), threshold), g, soft);
    });
  });
  reg("aten::hardsigmoid", [](Context& c) {
    return act(c, [](Builder& b, Value x) {
      return b.div(b.min(b.max(b.add(x, k(b, 3, x)), zero_like(b, x)), k(b, 6, x)), k(b, 6, x));
    });
  });
  reg("aten::hardsigmoid_backward", [](Context& c) {
    return act_backward(c, [](Builder& b, Value g, Value x) {
      Value in = b.and_(gt(b, x, -3), lt(b, x, 3));
      return b.select(in, b.div(g, k(b, 6, g)), zero_like(b, g));
    });
  });
  reg("aten::hardswish", [](Context& c) {
    return act(c, [](Builder& b, Value x) {
      Value r6 = b.min(b.max(b.add(x, k(b, 3, x)), zero_like(b, x)), k(b, 6, x));
      return b.div(b.mul(x, r6), k(b, 6, x));
    });
  });
  reg("aten::hardswish_backward", [](Context& c) {
    return act_backward(c, [](Builder& b, Value g, Value x) {
      Value mid = b.mul(g, b.add(b.div(x, k(b, 3, x)), k(b, 0.5, x)));
      return b.select(lt(b, x, -3), zero_like(b, g), b.select(le(b, x, 3), mid, g));
    });
  });
  reg("aten::hardshrink", [](Context& c) {
    const double l = dbl(c, 1, 0.5);
    return act(c, [&](Builder& b, Value x) {
      return b.select(b.and_(b.compare(Cmp::GE, x, k(b, -l, x)), le(b, x, l)), zero_like(b, x), x);
    });
  });
  reg("aten::hardshrink_backward", [](Context& c) {
    const double l = dbl(c, 2, 0.5);
    return act_backward(c, [&](Builder& b, Value g, Value x) {
      return b.select(b.and_(b.compare(Cmp::GE, x, k(b, -l, x)), le(b, x, l)), zero_like(b, g), g);
    });
  });
  reg("aten::softshrink", [](Context& c) {
    const double l = dbl(c, 1, 0.5);
    return act(c, [&](Builder& b, Value x) {
      // NaN stays NaN (CPU's band is x * 0 in its scalar kernel, +0 or NaN
      // in its vectorized one: the sign of a zero differs between the two).
      Value r = b.select(gt(b, x, l), b.sub(x, k(b, l, x)), b.select(b.compare(Cmp::NE, x, x), x, zero_like(b, x)));
      return b.select(lt(b, x, -l), b.add(x, k(b, l, x)), r);
    });
  });
  reg("aten::softshrink_backward", [](Context& c) {
    const double l = dbl(c, 2, 0.5);
    return act_backward(c, [&](Builder& b, Value g, Value x) {
      return b.select(b.and_(b.compare(Cmp::GE, x, k(b, -l, x)), le(b, x, l)), zero_like(b, g), g);
    });
  });
  reg("aten::log_sigmoid_forward", [](Context& c) {
    const at::ScalarType t = c.args.info(0).dtype;
    Builder& b = c.b;
    Value x = cast(b, c.args.tensor(0), opmath_type(t));
    Value out = cast(b, log_sigmoid_value(b, x), t);
    Value buffer = cast(b, exp_(b, b.neg(b.abs(x))), t);
    return std::vector<Value>{out, buffer};
  });
  reg("aten::log_sigmoid_backward", [](Context& c) {
    // (grad_output, self, buffer): g * (max_deriv - sign * z / (1 + z))
    return act_backward(c, [](Builder& b, Value g, Value x) {
      Value neg = lt(b, x, 0);
      Value z = exp_(b, b.neg(b.abs(x)));
      Value max_deriv = b.select(neg, k(b, 1, x), zero_like(b, x));
      Value sign = b.select(neg, k(b, 1, x), k(b, -1, x));
      return b.mul(g, b.sub(max_deriv, b.mul(sign, b.div(z, b.add(k(b, 1, z), z)))));
    });
  });
  reg("aten::_prelu_kernel", [](Context& c) {
    Promoted p = promote2(c, 0, 1, true);
    Builder& b = c.b;
    return one(cast(b, b.select(gt(b, p.a, 0), p.a, b.mul(p.b, p.a)), p.type));
  });
  reg("aten::_prelu_kernel_backward", [](Context& c) {
    // (grad_output, self, weight) -> (grad_self, grad_weight), weight broadcast
    const at::ScalarType t = c.args.info(1).dtype;
    const at::ScalarType compute = opmath_type(t);
    const Dims shape = broadcast_shapes(c.args.info(1).sizes, c.args.info(2).sizes);
    Builder& b = c.b;
    Value g = b.broadcast_to(cast(b, c.args.tensor(0), compute), shape);
    Value x = b.broadcast_to(cast(b, c.args.tensor(1), compute), shape);
    Value w = b.broadcast_to(cast(b, c.args.tensor(2), compute), shape);
    Value pos = gt(b, x, 0);
    Value gx = b.select(pos, g, b.mul(w, g));
    Value gw = b.select(pos, zero_like(b, g), b.mul(x, g));
    return std::vector<Value>{cast(b, gx, t), cast(b, gw, t)};
  });
  reg("aten::glu", [](Context& c) {
    const TensorInfo& in = c.args.info(0);
    const int64_t dim = wrap_dim(c.args.int_(1), in.dim());
    TORCH_CHECK(in.sizes[dim] % 2 == 0, "Halving dimension must be even, but dimension ", dim,
                " is size ", in.sizes[dim]);
    Builder& b = c.b;
    const at::ScalarType t = in.dtype;
    Value x = cast(b, c.args.tensor(0), opmath_type(t));
    const int64_t h = in.sizes[dim] / 2;
    Value a = b.slice_dim(x, dim, 0, h), g = b.slice_dim(x, dim, h, 2 * h);
    return one(cast(b, b.mul(a, sigmoid(b, g)), t));
  });
  reg("aten::glu_backward", [](Context& c) {
    // (grad_output, self, dim)
    const TensorInfo& in = c.args.info(1);
    const int64_t dim = wrap_dim(c.args.int_(2), in.dim());
    Builder& b = c.b;
    const at::ScalarType t = in.dtype;
    const at::ScalarType compute = opmath_type(t);
    Value x = cast(b, c.args.tensor(1), compute);
    Value go = cast(b, c.args.tensor(0), compute);
    const int64_t h = in.sizes[dim] / 2;
    Value a = b.slice_dim(x, dim, 0, h), gate = b.slice_dim(x, dim, h, 2 * h);
    Value s = sigmoid(b, gate);
    Value ga = b.mul(go, s);
    Value gg = b.mul(b.mul(go, a), b.mul(s, b.sub(k(b, 1, s), s)));
    return one(cast(b, b.concatenate({ga, gg}, dim), t));
  });
}

}  // namespace tpu::lowering
