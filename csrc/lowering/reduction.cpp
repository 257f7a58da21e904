// Reductions and scans: sum, mean, prod, amax/amin, max/min with indices,
// argmax/argmin, var/std, norms, logsumexp, all/any, cumsum/cumprod,
// softmax and log_softmax.
#include <cmath>

#include "csrc/lowering/common.h"

namespace tpu::lowering {

namespace {

using hlo::Cmp;

Value k(Builder& b, double v, Value like) { return b.full(v, b.dtype(like), b.dims(like)); }

// sum(self, dims, keepdim, dtype): integers accumulate in int64, half and
// bfloat16 in float.
Value sum_impl(Context& c, const Dims& dims, bool keepdim, std::optional<at::ScalarType> dtype) {
  const TensorInfo& in = c.args.info(0);
  const at::ScalarType out = dtype.value_or(is_integral(in.dtype) ? at::kLong : in.dtype);
  Builder& b = c.b;
  Value x = cast(b, c.args.tensor(0), opmath_type(out));
  Value r = keep_dims(b, sum_over(b, x, dims), in.sizes, dims, keepdim);
  return cast(b, r, out);
}

Value mean_impl(Context& c, const Dims& dims, bool keepdim, std::optional<at::ScalarType> dtype) {
  const TensorInfo& in = c.args.info(0);
  const at::ScalarType out = dtype.value_or(in.dtype);
  TORCH_CHECK(c10::isFloatingType(out) || c10::isComplexType(out),
              "mean(): could not infer output dtype. ", dtype ? "Optional" : "Input",
              " dtype must be either a floating point or complex dtype. Got: ", c10::toString(out));
  Builder& b = c.b;
  const at::ScalarType compute = opmath_type(out);
  Value s = sum_over(b, cast(b, c.args.tensor(0), compute), dims);
  // A bucketed operand's varying dims count at their run-time sizes.
  double n = 1;
  for (int64_t d : dims) {
    if (c.args.varies(0, d)) {
      Value size = b.broadcast_in_dim(b.convert(c.args.run_time_size(0, d), to_hlo(compute)), b.dims(s), {});
      s = b.div(s, size);
    } else {
      n *= static_cast<double>(in.sizes[d]);
    }
  }
  Value m = b.div(s, k(b, n, s));
  return cast(b, keep_dims(b, m, in.sizes, dims, keepdim), out);
}

Value prod_impl(Context& c, const Dims& dims, bool keepdim, std::optional<at::ScalarType> dtype) {
  const TensorInfo& in = c.args.info(0);
  const at::ScalarType out = dtype.value_or(is_integral(in.dtype) ? at::kLong : in.dtype);
  Builder& b = c.b;
  const at::ScalarType compute = opmath_type(out);
  Value x = cast(b, c.args.tensor(0), compute);
  Value r = dims.empty() ? x
                         : (compute == at::kBool
                                ? b.reduce(x, b.constant_bool(true), dims, "stablehlo.and")
                                : b.reduce(x, b.constant(1, to_hlo(compute)), dims, "stablehlo.multiply"));
  return cast(b, keep_dims(b, r, in.sizes, dims, keepdim), out);
}

// Max or min over dims, propagating NaN.
Value extreme(Builder& b, Value x, const Dims& dims, bool is_max) {
  if (dims.empty()) return x;
  const DType dt = b.dtype(x);
  if (dt == DType::Pred) {
    return b.reduce(x, b.constant_bool(!is_max), dims, is_max ? "stablehlo.or" : "stablehlo.and");
  }
  Value init = is_max ? b.lowest(dt) : b.highest(dt);
  Value r = b.reduce(x, init, dims, is_max ? "stablehlo.maximum" : "stablehlo.minimum");
  if (!hlo::is_float(dt)) return r;
  // A NaN anywhere makes the result NaN.
  Value nans = b.reduce(b.compare(Cmp::NE, x, x), b.constant_bool(false), dims, "stablehlo.or");
  return b.select(nans, b.full(NAN, dt, b.dims(r)), r);
}

void check_nonempty(const TensorInfo& in, const Dims& dims, const char* name) {
  for (int64_t d : dims) {
    TORCH_CHECK_INDEX(in.sizes[d] != 0, name, "(): Expected reduction dim ", d,
                      " to have non-zero size.");
  }
  if (in.dim() == 0) return;
}

std::vector<Value> lower_amax_amin(Context& c, bool is_max) {
  const TensorInfo& in = c.args.info(0);
  // No dims: all of them; an empty input then has nothing to reduce (CPU's RuntimeError).
  TORCH_CHECK(in.numel() > 0 || (c.args.has(1) && !c.args.ints(1).empty()), is_max ? "amax" : "amin",
              "(): Expected reduction dim to be specified for input.numel() == 0.");
  Dims dims = reduce_dims(c, 1, in.dim());
  check_nonempty(in, dims, is_max ? "amax" : "amin");
  const bool keepdim = c.args.has(2) && c.args.bool_(2);
  Builder& b = c.b;
  return one(keep_dims(b, extreme(b, c.args.tensor(0), dims, is_max), in.sizes, dims, keepdim));
}

std::vector<Value> lower_max_all(Context& c, bool is_max) {
  const TensorInfo& in = c.args.info(0);
  TORCH_CHECK(in.numel() > 0, is_max ? "max" : "min",
              "(): Expected reduction dim to be specified for input.numel() == 0. Specify the reduction dim with the 'dim' argument.");
  Dims dims = reduce_dims(c, 99, in.dim());
  return one(extreme(c.b, c.args.tensor(0), dims, is_max));
}

// (value, index) reduction along `dim`: the first index of the max (min);
// NaN counts as the largest (smallest) value, as in PyTorch.
std::pair<Value, Value> arg_reduce(Builder& b, Value x, int64_t dim, bool is_max) {
  const Type t = b.type(x);
  const DType dt = t.dtype;
  Value idx = b.iota(Type{DType::I64, t.dims}, dim);
  Value init = dt == DType::Pred ? b.constant_bool(!is_max) : (is_max ? b.lowest(dt) : b.highest(dt));
  const bool is_float = hlo::is_float(dt);
  auto r = b.reduce({x, idx}, {init, b.constant_int(0, DType::I64)}, {dim},
                    [is_max, is_float, dt](Builder& rb, const std::vector<Value>& a) {
                      Value av = a[0], ai = a[1], bv = a[2], bi = a[3];
                      Value better, same;
                      if (dt == DType::Pred) {
                        better = is_max ? rb.and_(av, rb.not_(bv)) : rb.and_(rb.not_(av), bv);
                        same = rb.compare(Cmp::EQ, av, bv);
                      } else {
                        better = rb.compare(is_max ? Cmp::GT : Cmp::LT, av, bv);
                        same = rb.compare(Cmp::EQ, av, bv);
                      }
                      if (is_float) {
                        Value anan = rb.compare(Cmp::NE, av, av), bnan = rb.compare(Cmp::NE, bv, bv);
                        better = rb.or_(rb.and_(anan, rb.not_(bnan)), rb.and_(better, rb.not_(bnan)));
                        same = rb.or_(same, rb.and_(anan, bnan));
                      }
                      Value pick_a = rb.or_(better, rb.and_(same, rb.compare(Cmp::LT, ai, bi)));
                      return std::vector<Value>{rb.select(pick_a, av, bv), rb.select(pick_a, ai, bi)};
                    });
  return {r[0], r[1]};
}

std::vector<Value> lower_max_dim(Context& c, bool is_max) {
  const TensorInfo& in = c.args.info(0);
  const int64_t dim = wrap_dim(c.args.int_(1), in.dim());
  const bool keepdim = c.args.bool_(2);
  Builder& b = c.b;
  Value x = c.args.tensor(0);
  if (in.dim() == 0) return {x, b.constant_int(0, DType::I64)};
  TORCH_CHECK_INDEX(in.sizes[dim] != 0, is_max ? "max" : "min", "(): Expected reduction dim ", dim,
                    " to have non-zero size.");
  auto [v, i] = arg_reduce(b, x, dim, is_max);
  return {keep_dims(b, v, in.sizes, {dim}, keepdim), keep_dims(b, i, in.sizes, {dim}, keepdim)};
}

std::vector<Value> lower_argmax(Context& c, bool is_max) {
  const TensorInfo& in = c.args.info(0);
  TORCH_CHECK(in.dtype != at::kBool, is_max ? "argmax" : "argmin", "(): does not support bool input");
  const bool keepdim = c.args.has(2) && c.args.bool_(2);
  Builder& b = c.b;
  Value x = c.args.tensor(0);
  if (!c.args.has(1)) {
    TORCH_CHECK_INDEX(in.numel() > 0, is_max ? "argmax" : "argmin",
                "(): Expected reduction dim to be specified for input.numel() == 0.");
    Value flat = b.reshape(x, {in.numel()});
    Value i = arg_reduce(b, flat, 0, is_max).second;
    if (keepdim) i = b.reshape(i, Dims(in.dim(), 1));
    return one(i);
  }
  const int64_t dim = wrap_dim(c.args.int_(1), in.dim());
  if (in.dim() == 0) return one(b.constant_int(0, DType::I64));
  TORCH_CHECK_INDEX(in.sizes[dim] != 0, is_max ? "argmax" : "argmin",
                    "(): Expected reduction dim ", dim, " to have non-zero size.");
  Value i = arg_reduce(b, x, dim, is_max).second;
  return one(keep_dims(b, i, in.sizes, {dim}, keepdim));
}

// var/std with `correction` (Bessel's: 1). Two passes, in opmath. CPU
// accumulates in double: where the deviations' largest magnitude is outside
// [2^-50, 2^50], their squares are summed divided by it (a float32 square of
// 1e20 is inf, of 1e-30 is 0) and the result scaled back; inside, the scale
// is 1 and changes no bit. Complex: the real and imaginary parts' variances
// summed, as CPU computes it.
struct Moments {
  Value mean, var, std;
};
Moments moments(Context& c, const Dims& dims, double correction, at::ScalarType compute) {
  const TensorInfo& in = c.args.info(0);
  Builder& b = c.b;
  Value x = cast(b, c.args.tensor(0), compute);
  const double n = static_cast<double>(count_over(in.sizes, dims));
  const Dims kept = kept_shape(in.sizes, dims, false);
  Value mean = b.div(sum_over(b, x, dims), b.full(n, to_hlo(compute), kept));
  Dims bdims;
  for (int64_t i = 0; i < in.dim(); ++i) {
    if (std::find(dims.begin(), dims.end(), i) == dims.end()) bdims.push_back(i);
  }
  Value centered = b.sub(x, b.broadcast_in_dim(mean, in.sizes, bdims));
  const double denom = std::max(0.0, n - correction);
  // The variance of a real deviation, divided by scale * scale; the scale.
  auto scaled_var = [&](Value d) -> std::pair<Value, Value> {
    const DType dt = b.dtype(d);
    Value scale = b.full(1.0, dt, kept);
    if (dt == DType::F32 && !dims.empty()) {
      Value m = b.reduce(b.abs(d), b.zeros(Type{dt, {}}), dims, "stablehlo.maximum");
      Value outside = b.or_(b.compare(Cmp::LT, m, b.full(std::ldexp(1.0, -50), dt, kept)),
                            b.compare(Cmp::GT, m, b.full(std::ldexp(1.0, 50), dt, kept)));
      Value usable = b.and_(b.is_finite(m), b.compare(Cmp::GT, m, b.zeros(b.type(m))));
      scale = b.select(b.and_(outside, usable), m, scale);
      d = b.div(d, b.broadcast_in_dim(scale, in.sizes, bdims));
    }
    return {b.div(sum_over(b, b.mul(d, d), dims), b.full(denom, dt, kept)), scale};
  };
  if (!hlo::is_complex(to_hlo(compute))) {
    auto [v, scale] = scaled_var(centered);
    return {mean, b.mul(b.mul(v, scale), scale), b.mul(b.unary("stablehlo.sqrt", v), scale)};
  }
  auto [vr, sr] = scaled_var(b.real(centered));
  auto [vi, si] = scaled_var(b.imag(centered));
  Value var = b.add(b.mul(b.mul(vr, sr), sr), b.mul(b.mul(vi, si), si));
  return {mean, var, b.unary("stablehlo.sqrt", var)};
}

double correction_arg(Context& c, size_t i) {
  return c.args.has(i) ? c.args.scalar(i).toDouble() : 1.0;
}

std::vector<Value> lower_var_std(Context& c, bool is_std, bool with_mean) {
  // var.correction(self, dim?, *, correction?, keepdim=False)
  const TensorInfo& in = c.args.info(0);
  const at::ScalarType t = in.dtype;
  TORCH_CHECK(c10::isFloatingType(t) || c10::isComplexType(t),
              with_mean ? (is_std ? "std_mean" : "var_mean") : "std and var",
              " only support floating point and complex dtypes");
  Dims dims = reduce_dims(c, 1, in.dim());
  const bool keepdim = c.args.has(3) && c.args.bool_(3);
  Builder& b = c.b;
  Moments m = moments(c, dims, correction_arg(c, 2), opmath_type(t));
  // (complex input: a real variance, a complex mean)
  const Value v = cast(b, keep_dims(b, is_std ? m.std : m.var, in.sizes, dims, keepdim), c10::toRealValueType(t));
  if (!with_mean) return one(v);
  return {v, cast(b, keep_dims(b, m.mean, in.sizes, dims, keepdim), t)};
}

std::vector<Value> lower_logsumexp(Context& c) {
  const TensorInfo& in = c.args.info(0);
  Dims dims = reduce_dims(c, 1, in.dim());
  const bool keepdim = c.args.has(2) && c.args.bool_(2);
  // (computed in the dtype of a floating out= tensor, as CPU's kernel does)
  const std::optional<at::ScalarType> into = c.args.out_dtype();
  const at::ScalarType out = into && c10::isFloatingType(*into) ? *into
                             : is_integral(in.dtype)             ? default_float()
                                                                 : in.dtype;
  Builder& b = c.b;
  Value x = cast(b, c.args.tensor(0), opmath_type(out));
  if (dims.empty()) return one(cast(b, x, out));
  Value m = b.reduce(x, b.lowest(b.dtype(x)), dims, "stablehlo.maximum");
  // Infinite maxima are replaced by 0 so that inf - inf does not give nan.
  Value finite = b.is_finite(m);
  m = b.select(finite, m, b.zeros(b.type(m)));
  Dims bdims;
  for (int64_t i = 0; i < in.dim(); ++i) {
    if (std::find(dims.begin(), dims.end(), i) == dims.end()) bdims.push_back(i);
  }
  Value e = b.unary("stablehlo.exponential", b.sub(x, b.broadcast_in_dim(m, in.sizes, bdims)));
  Value r = b.add(b.unary("stablehlo.log", sum_over(b, e, dims)), m);
  return one(cast(b, keep_dims(b, r, in.sizes, dims, keepdim), out));
}

// all/any: bool results (uint8 for uint8 inputs).
std::vector<Value> lower_all_any(Context& c, bool is_all, bool has_dims) {
  const TensorInfo& in = c.args.info(0);
  Dims dims = has_dims ? reduce_dims(c, 1, in.dim()) : reduce_dims(c, 99, in.dim());
  if (has_dims && c.args.has(1) && !c.args.is_tensor(1) && c.args.ints(1).empty()) {
    dims = reduce_dims(c, 99, in.dim());  // dim=[] means all dims
  }
  const bool keepdim = has_dims && c.args.has(2) && c.args.bool_(2);
  Builder& b = c.b;
  Value x = c.args.tensor(0);
  // (into a uint8 out= tensor, CPU tests the values cast to uint8: 0.5 is false)
  if (c.args.out_dtype() == at::kByte && in.dtype != at::kByte) x = b.convert(x, DType::U8);
  Value p = b.dtype(x) == DType::Pred ? x : b.compare(Cmp::NE, x, b.zeros(b.type(x)));
  Value r = dims.empty() ? p
                         : b.reduce(p, b.constant_bool(is_all), dims, is_all ? "stablehlo.and" : "stablehlo.or");
  r = keep_dims(b, r, in.sizes, dims, keepdim);
  // (into a bool out= tensor, uint8's answer is a bool)
  return one(in.dtype == at::kByte && c.args.out_dtype() != at::kBool ? b.convert(r, DType::U8) : r);
}

std::vector<Value> lower_cumulative(Context& c, bool is_sum) {
  const TensorInfo& in = c.args.info(0);
  const int64_t dim = wrap_dim(c.args.int_(1), in.dim());
  std::optional<at::ScalarType> dtype = c.args.opt_scalar_type(2);
  const at::ScalarType out = dtype.value_or(is_integral(in.dtype) ? at::kLong : in.dtype);
  TORCH_CHECK_NOT_IMPLEMENTED(out != at::kBool, "\"", is_sum ? "cumsum" : "cumprod",
                              "_out_cpu\" not implemented for 'Bool'");
  Builder& b = c.b;
  Value x = cast(b, c.args.tensor(0), opmath_type(out));
  if (in.dim() == 0) return one(cast(b, x, out));
  Value r = scan(b, x, dim, is_sum ? "stablehlo.add" : "stablehlo.multiply", is_sum ? 0 : 1);
  return one(cast(b, r, out));
}

std::vector<Value> lower_logcumsumexp(Context& c) {
  const TensorInfo& in = c.args.info(0);
  const int64_t dim = wrap_dim(c.args.int_(1), in.dim());
  const at::ScalarType t = in.dtype;
  TORCH_CHECK_NOT_IMPLEMENTED(c10::isFloatingType(t) || c10::isComplexType(t),
                              "\"logcumsumexp_out_cpu\" not implemented for '", c10::toString(t), "'");
  Builder& b = c.b;
  Value x = cast(b, c.args.tensor(0), opmath_type(t));
  if (in.dim() == 0) return one(cast(b, x, t));
  if (hlo::is_complex(b.dtype(x))) {
    // exp-sum-log relative to the largest real part along dim keeps the scan a sum.
    Value m = b.reduce(b.real(x), b.lowest(b.dtype(b.real(x))), {dim}, "stablehlo.maximum");
    m = b.select(b.is_finite(m), m, b.zeros(b.type(m)));
    Dims bdims;
    for (int64_t i = 0; i < in.dim(); ++i) if (i != dim) bdims.push_back(i);
    Value mb = b.convert(b.broadcast_in_dim(m, in.sizes, bdims), b.dtype(x));
    Value s = scan(b, b.unary("stablehlo.exponential", b.sub(x, mb)), dim, "stablehlo.add", 0);
    return one(cast(b, b.add(b.unary("stablehlo.log", s), mb), t));
  }
  // A scan of log-add-exp: each step adds the smaller term relative to the
  // larger one, so no entry is lost however far apart they are (a shift by
  // one global maximum underflows every entry ~88 below it in float32).
  auto logaddexp = [&](Value p, Value q) {
    Value hi = b.max(p, q), lo = b.min(p, q);
    Value sum = b.add(hi, b.unary("stablehlo.log_plus_one", b.unary("stablehlo.exponential", b.sub(lo, hi))));
    // -inf + anything and inf + inf: the larger term alone (inf - inf is nan).
    auto splat_of = [&](Value c) { return b.broadcast_in_dim(c, b.dims(lo), {}); };
    Value alone = b.or_(b.compare(Cmp::EQ, lo, splat_of(b.lowest(b.dtype(lo)))),
                        b.compare(Cmp::EQ, hi, splat_of(b.highest(b.dtype(hi)))));
    Value nan = b.or_(b.compare(Cmp::NE, p, p), b.compare(Cmp::NE, q, q));
    return b.select(nan, b.add(p, q), b.select(alone, hi, sum));
  };
  return one(cast(b, scan(b, x, dim, logaddexp, b.lowest(b.dtype(x))), t));
}

// cummax/cummin helpers: (values, indices); the latest index wins ties.
std::vector<Value> lower_cum_extreme(Context& c, bool is_max) {
  const TensorInfo& in = c.args.info(0);
  const int64_t dim = wrap_dim(c.args.int_(1), in.dim());
  Builder& b = c.b;
  Value x = c.args.tensor(0);
  if (in.dim() == 0) return {x, b.constant_int(0, DType::I64)};
  const int64_t n = in.sizes[dim];
  Value idx = b.iota(Type{DType::I64, in.sizes}, dim);
  const DType dt = b.dtype(x);
  const bool is_float = hlo::is_float(dt);
  for (int64_t shift = 1; shift < n; shift <<= 1) {
    Dims lo(in.dim(), 0), hi(in.dim(), 0);
    lo[dim] = shift;
    Value pv = b.slice_dim(b.pad(x, is_max ? b.lowest(dt) : b.highest(dt), lo, hi), dim, 0, n);
    Value pi = b.slice_dim(b.pad(idx, b.constant_int(-1, DType::I64), lo, hi), dim, 0, n);
    // Keep the current element unless the earlier one is strictly better.
    Value better = dt == DType::Pred ? (is_max ? b.and_(pv, b.not_(x)) : b.and_(b.not_(pv), x))
                                     : b.compare(is_max ? Cmp::GT : Cmp::LT, pv, x);
    if (is_float) {
      Value pnan = b.compare(Cmp::NE, pv, pv), xnan = b.compare(Cmp::NE, x, x);
      better = b.or_(b.and_(pnan, b.not_(xnan)), b.and_(better, b.not_(xnan)));
    }
    x = b.select(better, pv, x);
    idx = b.select(better, pi, idx);
  }
  return {x, idx};
}

// softmax family: computed in opmath, max-subtracted.
// (log_)softmax of x (in its opmath type) along dim.
Value softmax_along(Builder& b, Value x, int64_t dim, bool log) {
  const Dims sizes = b.dims(x);
  if (sizes.empty()) {  // one entry: x - max(x) is 0, or NaN for an infinite or NaN x
    Value shifted = b.sub(x, x);
    return log ? shifted : b.unary("stablehlo.exponential", shifted);
  }
  Dims bdims;
  for (int64_t i = 0; i < static_cast<int64_t>(sizes.size()); ++i) if (i != dim) bdims.push_back(i);
  // As on the CPU, an infinite maximum (a +inf entry, or a row of -inf)
  // makes the row NaN.
  Value m = b.reduce(x, b.lowest(b.dtype(x)), {dim}, "stablehlo.maximum");
  Value shifted = b.sub(x, b.broadcast_in_dim(m, sizes, bdims));
  Value e = b.unary("stablehlo.exponential", shifted);
  Value s = b.broadcast_in_dim(sum_over(b, e, {dim}), sizes, bdims);
  return log ? b.sub(shifted, b.unary("stablehlo.log", s)) : b.div(e, s);
}

std::vector<Value> lower_softmax(Context& c, bool log) {
  const TensorInfo& in = c.args.info(0);
  TORCH_CHECK_NOT_IMPLEMENTED(!is_integral(in.dtype), "\"", log ? "log_softmax" : "softmax",
                              "_lastdim_kernel_impl\" not implemented for '", c10::toString(in.dtype), "'");
  const int64_t dim = wrap_dim(c.args.int_(1), in.dim());
  const bool half_to_float = c.args.bool_(2);
  const at::ScalarType out = half_to_float ? at::kFloat : in.dtype;
  Builder& b = c.b;
  Value x = cast(b, c.args.tensor(0), opmath_type(in.dtype));
  return one(cast(b, softmax_along(b, x, in.dim() == 0 ? 0 : dim, log), out));
}

// _safe_softmax(self, dim, dtype): softmax (in `dtype` where given), except
// that a row of -inf gives zeros, not NaN (attention over a fully masked
// row). One program instead of PyTorch's five-op decomposition.
std::vector<Value> lower_safe_softmax(Context& c) {
  const TensorInfo& in = c.args.info(0);
  const int64_t dim = wrap_dim(c.args.int_(1), in.dim());
  const at::ScalarType out = c.args.opt_scalar_type(2).value_or(in.dtype);
  TORCH_CHECK_NOT_IMPLEMENTED(!is_integral(out), "\"softmax_lastdim_kernel_impl\" not implemented for '",
                              c10::toString(out), "'");
  Builder& b = c.b;
  Value x = cast(b, cast(b, c.args.tensor(0), out), opmath_type(out));
  Value r = cast(b, softmax_along(b, x, in.dim() == 0 ? 0 : dim, false), out);
  Value masked = b.compare(Cmp::EQ, x, b.broadcast_to(b.constant(-INFINITY, b.dtype(x)), b.dims(x)));
  if (in.dim() > 0) {
    Dims bdims;
    for (int64_t i = 0; i < in.dim(); ++i) if (i != dim) bdims.push_back(i);
    masked = b.broadcast_in_dim(b.reduce(masked, b.constant_bool(true), {dim}, "stablehlo.and"), in.sizes, bdims);
  }
  return one(b.select(masked, b.zeros(b.type(r)), r));
}

// _softmax_backward_data(grad_output, output, dim, input_dtype)
std::vector<Value> lower_softmax_backward(Context& c, bool log) {
  const TensorInfo& go = c.args.info(0);
  const int64_t dim = wrap_dim(c.args.int_(2), go.dim());
  const at::ScalarType in_dtype = c.args.scalar_type(3);
  Builder& b = c.b;
  const at::ScalarType compute = opmath_type(go.dtype);
  Value g = cast(b, c.args.tensor(0), compute);
  Value y = cast(b, c.args.tensor(1), compute);
  if (go.dim() == 0) {  // the output is a constant (1 or 0): no gradient
    return one(cast(b, b.zeros(b.type(g)), in_dtype));
  }
  Dims bdims;
  for (int64_t i = 0; i < go.dim(); ++i) if (i != dim) bdims.push_back(i);
  Value r;
  if (log) {
    Value s = b.broadcast_in_dim(sum_over(b, g, {dim}), go.sizes, bdims);
    r = b.sub(g, b.mul(b.unary("stablehlo.exponential", y), s));
  } else {
    Value s = b.broadcast_in_dim(sum_over(b, b.mul(g, y), {dim}), go.sizes, bdims);
    r = b.mul(y, b.sub(g, s));
  }
  return one(cast(b, r, in_dtype));
}

// The ord-norm of `x` over `dims` (|x| for integer inputs is an error, as in
// PyTorch), computed in opmath and returned in `out`.
Value vector_norm(Context& c, Value x, const TensorInfo& in, double ord, const Dims& dims, bool keepdim,
                  at::ScalarType out) {
  TORCH_CHECK(c10::isFloatingType(out) || c10::isComplexType(out),
              "linalg.vector_norm: Expected a floating point or complex tensor as input. Got ",
              c10::toString(in.dtype));
  Builder& b = c.b;
  const at::ScalarType compute = opmath_type(out);
  Value a = b.abs(cast(b, x, compute));
  Value r;
  if (std::isinf(ord)) {
    if (in.numel() == 0) {
      TORCH_CHECK(ord > 0, "linalg.vector_norm cannot compute the -inf norm on an empty tensor "
                           "because the operation does not have an identity");
    }
    r = ord > 0 ? b.reduce(a, b.zeros(Type{b.dtype(a), {}}), dims, "stablehlo.maximum")
                : b.reduce(a, b.highest(b.dtype(a)), dims, "stablehlo.minimum");
    Value nans = b.reduce(b.compare(Cmp::NE, a, a), b.constant_bool(false), dims, "stablehlo.or");
    r = b.select(nans, b.full(NAN, b.dtype(r), b.dims(r)), r);
  } else if (ord == 0) {
    r = sum_over(b, b.convert(b.compare(Cmp::NE, a, b.zeros(b.type(a))), b.dtype(a)), dims);
  } else if (ord == 1) {
    r = sum_over(b, a, dims);
  } else if (ord == 2) {
    r = b.unary("stablehlo.sqrt", sum_over(b, b.mul(a, a), dims));
  } else {
    r = sum_over(b, b.pow(a, k(b, ord, a)), dims);
    r = b.pow(r, k(b, 1.0 / ord, r));
  }
  return cast(b, keep_dims(b, r, in.sizes, dims, keepdim), out);
}

// linalg_vector_norm(self, ord, dim?, keepdim, *, dtype?)
std::vector<Value> lower_vector_norm(Context& c) {
  const TensorInfo& in = c.args.info(0);
  const double ord = c.args.has(1) ? c.args.scalar(1).toDouble() : 2.0;
  Dims dims = reduce_dims(c, 2, in.dim());
  const bool keepdim = c.args.has(3) && c.args.bool_(3);
  const at::ScalarType out = c.args.opt_scalar_type(4).value_or(in.dtype);
  return one(vector_norm(c, c.args.tensor(0), in, ord, dims, keepdim, out));
}

// norm.Scalar(self, p) / norm.ScalarOpt_dim(self, p?, dim, keepdim) /
// norm.ScalarOpt_dim_dtype(..., dtype) / norm.ScalarOpt_dtype(self, p?, dtype)
std::vector<Value> lower_norm(Context& c, size_t dim_arg, size_t keepdim_arg, size_t dtype_arg) {
  const TensorInfo& in = c.args.info(0);
  TORCH_CHECK(!is_integral(in.dtype), "norm(): input dtype should be either floating point or complex. Got ",
              c10::toString(in.dtype), " instead.");
  const double p = c.args.has(1) ? c.args.scalar(1).toDouble() : 2.0;
  Dims dims = reduce_dims(c, dim_arg, in.dim());
  const bool keepdim = keepdim_arg < c.args.size() && c.args.bool_(keepdim_arg);
  const at::ScalarType out = dtype_arg < c.args.size() && c.args.has(dtype_arg) ? c.args.scalar_type(dtype_arg) : in.dtype;
  return one(vector_norm(c, c.args.tensor(0), in, p, dims, keepdim, out));
}

// maxnorm / (norm + 1e-7) where norm exceeds maxnorm, else 1 (renorm and
// embedding's max_norm).
Value renorm_factor(Builder& b, Value norm, double maxnorm) {
  return b.select(b.compare(Cmp::GT, norm, k(b, maxnorm, norm)),
                  b.div(k(b, maxnorm, norm), b.add(norm, k(b, 1e-7, norm))), k(b, 1, norm));
}

// renorm(self, p, dim, maxnorm): slices along dim with a larger norm are
// scaled down to maxnorm.
std::vector<Value> lower_renorm(Context& c) {
  const TensorInfo& in = c.args.info(0);
  const double p = c.args.scalar(1).toDouble();
  const int64_t dim = wrap_dim(c.args.int_(2), in.dim());
  const double maxnorm = c.args.scalar(3).toDouble();
  TORCH_CHECK(p > 0, "renorm: non-positive-norm not supported");
  TORCH_CHECK(maxnorm >= 0, "renorm: expected maxnorm to be >= 0 but got ", maxnorm);
  Dims others;
  for (int64_t d = 0; d < in.dim(); ++d) if (d != dim) others.push_back(d);
  Builder& b = c.b;
  const at::ScalarType compute = opmath_type(in.dtype);
  Value x = cast(b, c.args.tensor(0), compute);
  Value norm = vector_norm(c, x, TensorInfo{compute, in.sizes, false}, p, others, true, compute);
  return one(cast(b, b.mul(x, b.broadcast_to(renorm_factor(b, norm, maxnorm), in.sizes)), in.dtype));
}

// embedding_renorm_(self, indices, max_norm, norm_type): the rows of the
// embedding table that `indices` name are scaled down to max_norm.
std::vector<Value> lower_embedding_renorm(Context& c) {
  const TensorInfo& in = c.args.info(0);
  const TensorInfo& idx = c.args.info(1);
  TORCH_CHECK(in.dim() == 2, "embedding_renorm_: expected a 2-D weight, got ", dims_string(in.sizes));
  TORCH_CHECK(idx.dtype == at::kLong || idx.dtype == at::kInt,
              "embedding_renorm_: expected indices of type Long or Int, got ", c10::toString(idx.dtype));
  Builder& b = c.b;
  const at::ScalarType compute = opmath_type(in.dtype);
  Value x = cast(b, c.args.tensor(0), compute);
  const int64_t rows = in.sizes[0];
  if (idx.numel() == 0 || in.numel() == 0) return one(c.args.tensor(0));
  Value flat = b.convert(b.reshape(c.args.tensor(1), {idx.numel()}), DType::I64);
  check_index_range(c, flat, rows, false, "embedding_renorm_: index out of range in self");
  // used[r] = any(indices == r)
  Value eq = b.compare(Cmp::EQ, b.broadcast_in_dim(flat, {rows, idx.numel()}, {1}),
                       b.iota(Type{DType::I64, {rows, idx.numel()}}, 0));
  Value used = b.reduce(eq, b.constant_bool(false), {1}, "stablehlo.or");
  Value norm = vector_norm(c, x, TensorInfo{compute, in.sizes, false}, c.args.double_(3), {1}, false, compute);
  Value factor = b.select(used, renorm_factor(b, norm, c.args.double_(2)), k(b, 1, norm));
  return one(cast(b, b.mul(x, b.broadcast_in_dim(factor, in.sizes, {0})), in.dtype));
}

// histc(self, bins, min, max): min == max uses the data's range. Integer
// inputs are accepted as CUDA accepts them (Transformers' mixture-of-experts
// routers count tokens per expert with histc on integers); their bins are
// computed in float64, which gives CUDA's integer arithmetic exactly.
// A range that is not finite is CPU's RuntimeError: for a range taken from
// the data (holding inf or NaN) a device-side check, raised when the result
// is read.
std::vector<Value> lower_histc(Context& c) {
  const TensorInfo& in = c.args.info(0);
  TORCH_CHECK_NOT_IMPLEMENTED(c10::isFloatingType(in.dtype) || (c10::isIntegralType(in.dtype, false)),
                              "\"histc\" not implemented for '", c10::toString(in.dtype), "'");
  const int64_t bins = c.args.int_(1);
  TORCH_CHECK(bins > 0, "torch.histogramdd(): bins must be > 0, but got ", bins, " for dimension 0");
  double lo = c.args.scalar(2).toDouble(), hi = c.args.scalar(3).toDouble();
  Builder& b = c.b;
  const DType ct = c10::isFloatingType(in.dtype) ? to_hlo(opmath_type(in.dtype)) : DType::F64;
  const int64_t n = in.numel();
  Value x = b.reshape(b.convert(c.args.tensor(0), ct), {n});
  Value vlo, vhi;
  if (lo == hi && n > 0) {
    vlo = b.reduce(x, b.highest(ct), {0}, "stablehlo.minimum");
    vhi = b.reduce(x, b.lowest(ct), {0}, "stablehlo.maximum");
    Value same = b.compare(Cmp::EQ, vlo, vhi);
    vlo = b.select(same, b.sub(vlo, b.full(1, ct, {})), vlo);
    vhi = b.select(same, b.add(vhi, b.full(1, ct, {})), vhi);
    if (c10::isFloatingType(in.dtype)) {
      // (every element finite: XLA's min and max may drop a NaN that CPU's aminmax keeps)
      c.args.check(b.reduce(b.is_finite(x), b.constant_bool(true), {0}, "stablehlo.and"),
                   std::string(exec::kRuntimeErrorCheck) +
                       "torch.histc: range of [min, max] is not finite: the input holds inf or NaN, and min and "
                       "max are taken from it");
    }
  } else {
    if (lo == hi) {
      lo -= 1;
      hi += 1;
    }
    TORCH_CHECK(std::isfinite(lo) && std::isfinite(hi), "torch.histc: range of [", lo, ", ", hi, "] is not finite");
    TORCH_CHECK(lo < hi, "torch.histc: max must be larger than min");
    vlo = b.full(lo, ct, {});
    vhi = b.full(hi, ct, {});
  }
  if (n == 0) return one(b.zeros(Type{to_hlo(in.dtype), {bins}}));
  Value blo = b.broadcast_in_dim(vlo, {n}, {}), bhi = b.broadcast_in_dim(vhi, {n}, {});
  Value pos = b.div(b.mul(b.sub(x, blo), b.full(static_cast<double>(bins), ct, {n})), b.sub(bhi, blo));
  Value idx = b.convert(b.unary("stablehlo.floor", pos), DType::I64);
  idx = b.min(idx, b.full_int(bins - 1, DType::I64, {n}));
  Value valid = b.and_(b.compare(Cmp::GE, x, blo), b.compare(Cmp::LE, x, bhi));
  Builder::ScatterDims dn;
  dn.inserted_window_dims = {0};
  dn.scatter_dims_to_operand_dims = {0};
  dn.index_vector_dim = 1;
  Value counts = b.scatter(b.zeros(Type{ct, {bins}}), b.reshape(b.select(valid, idx, b.zeros(Type{DType::I64, {n}})), {n, 1}),
                           b.convert(valid, ct), dn,
                           [](Builder& rb, const std::vector<Value>& a) { return std::vector<Value>{rb.add(a[0], a[1])}; });
  return one(cast(b, counts, in.dtype));
}

// bincount(self, weights?, minlength): the output's length, max(self) + 1
// (at least minlength), is read from the device, as nonzero reads its count.
std::vector<Value> lower_bincount(Context& c) {
  const TensorInfo& in = c.args.info(0);
  TORCH_CHECK_NOT_IMPLEMENTED(c10::isIntegralType(in.dtype, false), "\"bincount_cpu\" not implemented for '",
                              c10::toString(in.dtype), "'");
  TORCH_CHECK(in.dim() == 1, "bincount only supports 1-d non-negative integral inputs.");
  const int64_t minlength = c.args.int_(2);
  TORCH_CHECK(minlength >= 0, "minlength should be >= 0");
  const bool weighted = c.args.has(1);
  at::ScalarType out = at::kLong;
  if (weighted) {
    const TensorInfo& w = c.args.info(1);
    TORCH_CHECK(w.dim() == 1 && w.numel() == in.numel(), "weights should be 1-d and have the same length as input");
    out = w.dtype == at::kFloat ? at::kFloat : at::kDouble;  // CPU's: other weights count in double
  }
  Builder& b = c.b;
  c.args.output_depends_on_data();
  const int64_t n = in.numel();
  int64_t length = minlength;
  Value x;
  if (n > 0) {
    x = b.convert(c.args.tensor(0), DType::I64);
    const int64_t lo = c.args.host_int(b.reduce(x, b.highest(DType::I64), {0}, "stablehlo.minimum"));
    TORCH_CHECK(lo >= 0, "bincount only supports 1-d non-negative integral inputs.");
    length = std::max(length, c.args.host_int(b.reduce(x, b.lowest(DType::I64), {0}, "stablehlo.maximum")) + 1);
  }
  const DType ot = to_hlo(out);
  if (n == 0 || length == 0) return one(b.zeros(Type{ot, {length}}));
  Value add = weighted ? b.convert(c.args.tensor(1), ot) : b.full_int(1, ot, {n});
  Builder::ScatterDims dn;
  dn.inserted_window_dims = {0};
  dn.scatter_dims_to_operand_dims = {0};
  dn.index_vector_dim = 1;
  return one(b.scatter(b.zeros(Type{ot, {length}}), b.reshape(x, {n, 1}), add, dn,
                       [](Builder& rb, const std::vector<Value>& a) { return std::vector<Value>{rb.add(a[0], a[1])}; }));
}

std::vector<Value> lower_count_nonzero(Context& c) {
  const TensorInfo& in = c.args.info(0);
  Dims dims = reduce_dims(c, 1, in.dim());
  Builder& b = c.b;
  Value x = c.args.tensor(0);
  Value nz = b.convert(b.dtype(x) == DType::Pred ? x : b.compare(Cmp::NE, x, b.zeros(b.type(x))), DType::I64);
  return one(sum_over(b, nz, dims));
}

std::vector<Value> lower_nansum(Context& c) {
  const TensorInfo& in = c.args.info(0);
  Dims dims = reduce_dims(c, 1, in.dim());
  const bool keepdim = c.args.has(2) && c.args.bool_(2);
  const at::ScalarType out = c.args.opt_scalar_type(3).value_or(is_integral(in.dtype) ? at::kLong : in.dtype);
  TORCH_CHECK_NOT_IMPLEMENTED(!c10::isComplexType(out) || is_integral(in.dtype), "\"nansum_cpu\" not implemented for '",
                              c10::toString(out), "'");
  Builder& b = c.b;
  Value x = cast(b, c.args.tensor(0), opmath_type(out));
  if (hlo::is_float(b.dtype(x))) x = b.select(b.compare(Cmp::NE, x, x), b.zeros(b.type(x)), x);
  return one(cast(b, keep_dims(b, sum_over(b, x, dims), in.sizes, dims, keepdim), out));
}

std::vector<Value> lower_aminmax(Context& c) {
  const TensorInfo& in = c.args.info(0);
  Dims dims = c.args.has(1) ? Dims{wrap_dim(c.args.int_(1), in.dim())} : reduce_dims(c, 99, in.dim());
  if (in.dim() == 0) dims = {};
  const bool keepdim = c.args.has(2) && c.args.bool_(2);
  Builder& b = c.b;
  Value x = c.args.tensor(0);
  Value mn = keep_dims(b, extreme(b, x, dims, false), in.sizes, dims, keepdim);
  Value mx = keep_dims(b, extreme(b, x, dims, true), in.sizes, dims, keepdim);
  return {mn, mx};
}

// A histogram of x [n] over the bins of `edges` [nb + 1] (ascending): an
// element lands in the last bin whose left edge it reaches (the last bin
// also keeps its right edge); weights add instead of ones; density divides
// by the total and the bin widths. As the CPU's histogramdd kernel.
Value histogram_counts(Builder& b, Value x, Value edges, std::optional<Value> weight, bool density) {
  const DType ct = b.dtype(x);
  const int64_t n = b.dims(x)[0], ne = b.dims(edges)[0], nb = ne - 1;
  Value first = b.reshape(b.slice(edges, {0}, {1}), {}), last = b.reshape(b.slice(edges, {ne - 1}, {ne}), {});
  Value inside = b.and_(b.compare(Cmp::GE, x, b.broadcast_in_dim(first, {n}, {})),
                        b.compare(Cmp::LE, x, b.broadcast_in_dim(last, {n}, {})));
  Value le = b.compare(Cmp::LE, b.broadcast_in_dim(edges, {n, ne}, {1}), b.broadcast_in_dim(x, {n, ne}, {0}));
  Value pos = b.sub(b.reduce(b.convert(le, DType::I64), b.constant_int(0, DType::I64), {1}, "stablehlo.add"),
                    b.full_int(1, DType::I64, {n}));
  pos = b.clamp(b.zeros(Type{DType::I64, {n}}), pos, b.full_int(nb - 1, DType::I64, {n}));
  Value w = weight ? *weight : b.full(1, ct, {n});
  w = b.select(inside, w, b.zeros(Type{ct, {n}}));
  Builder::ScatterDims dn;
  dn.inserted_window_dims = {0};
  dn.scatter_dims_to_operand_dims = {0};
  dn.index_vector_dim = 1;
  Value hist = b.scatter(b.zeros(Type{ct, {nb}}), b.reshape(pos, {n, 1}), w, dn,
                         [](Builder& rb, const std::vector<Value>& a) { return std::vector<Value>{rb.add(a[0], a[1])}; });
  if (density) {
    Value total = b.reduce(hist, b.zeros(Type{ct, {}}), {0}, "stablehlo.add");
    Value widths = b.sub(b.slice(edges, {1}, {ne}), b.slice(edges, {0}, {nb}));
    hist = b.div(hist, b.mul(widths, b.broadcast_in_dim(total, {nb}, {})));
  }
  return hist;
}

// histogram.bin_ct(self, bins, *, range, weight, density) -> (hist, bin_edges)
// histogram.bins_tensor(self, bins, *, weight, density) -> (hist, bin_edges)
std::vector<Value> lower_histogram(Context& c, bool bin_count) {
  const TensorInfo& in = c.args.info(0);
  TORCH_CHECK(c10::isFloatingType(in.dtype), "torch.histogram: input tensor and bins tensors should have the same "
              "dtype, a floating point one; got ", c10::toString(in.dtype));
  Builder& b = c.b;
  const DType dt = to_hlo(in.dtype), ct = to_hlo(opmath_type(in.dtype));
  const int64_t n = in.numel();
  Value x = b.reshape(b.convert(c.args.tensor(0), ct), {n});
  const size_t weight_arg = bin_count ? 3 : 2;
  std::optional<Value> weight;
  if (c.args.has(weight_arg)) weight = b.reshape(cast(b, c.args.tensor(weight_arg), opmath_type(in.dtype)), {n});
  const bool density = c.args.bool_(weight_arg + 1);
  Value edges;
  if (bin_count) {
    const int64_t bins = c.args.int_(1);
    TORCH_CHECK(bins > 0, "torch.histogram(): bins must be > 0, but got ", bins, " for dimension 0");
    Value lo, hi;
    if (c.args.has(2)) {
      std::vector<double> range = c.args.doubles(2);
      TORCH_CHECK(range.size() == 2, "torch.histogram(): range should have 2 elements, got ", range.size());
      TORCH_CHECK(std::isfinite(range[0]) && std::isfinite(range[1]), "torch.histogramdd: dimension 0's range [",
                  range[0], ", ", range[1], "] is not finite");
      TORCH_CHECK(range[0] <= range[1], "torch.histogram(): min should not exceed max, but got min ", range[0],
                  " max ", range[1], " for dimension 0");
      lo = b.full(range[0], DType::F64, {});
      hi = b.full(range[1], DType::F64, {});
    } else if (n > 0) {
      lo = b.convert(b.reduce(x, b.highest(ct), {0}, "stablehlo.minimum"), DType::F64);
      hi = b.convert(b.reduce(x, b.lowest(ct), {0}, "stablehlo.maximum"), DType::F64);
      // (a range taken from data holding inf or NaN: CPU's error, as histc's)
      c.args.check(b.reduce(b.is_finite(x), b.constant_bool(true), {0}, "stablehlo.and"),
                   std::string(exec::kRuntimeErrorCheck) +
                       "torch.histogramdd: dimension 0's range [min, max] is not finite: the input holds inf or NaN, "
                       "and the range is taken from it");
    } else {
      lo = b.full(0, DType::F64, {});
      hi = b.full(1, DType::F64, {});
    }
    // An empty range widens to +-0.5, as NumPy does.
    Value same = b.compare(Cmp::EQ, lo, hi);
    lo = b.select(same, b.sub(lo, b.full(0.5, DType::F64, {})), lo);
    hi = b.select(same, b.add(hi, b.full(0.5, DType::F64, {})), hi);
    // linspace(lo, hi, bins + 1) in the input dtype, symmetric from both ends.
    const int64_t ne = bins + 1;
    Value sv = b.convert(b.convert(b.broadcast_in_dim(lo, {ne}, {}), dt), ct);
    Value ev = b.convert(b.convert(b.broadcast_in_dim(hi, {ne}, {}), dt), ct);
    Value step = b.div(b.sub(ev, sv), b.full(static_cast<double>(bins), ct, {ne}));
    Value i = b.convert(b.iota(Type{DType::I64, {ne}}, 0), ct);
    Value from_start = b.add(sv, b.mul(step, i));
    Value from_end = b.sub(ev, b.mul(step, b.sub(b.full(static_cast<double>(bins), ct, {ne}), i)));
    edges = b.select(b.compare(Cmp::LT, i, b.full(static_cast<double>(ne / 2), ct, {ne})), from_start, from_end);
    edges = b.convert(b.convert(edges, dt), ct);
  } else {
    const TensorInfo& bi = c.args.info(1);
    TORCH_CHECK(bi.dim() == 1, "torch.histogram(): bins tensor should have one dimension, but got ", bi.dim(),
                " dimensions in the bins tensor");
    TORCH_CHECK(bi.numel() > 0, "torch.histogram(): bins tensor should have at least 1 element, but got ",
                bi.numel(), " elements");
    edges = cast(b, c.args.tensor(1), opmath_type(in.dtype));
  }
  Value hist = b.dims(edges)[0] > 1 ? histogram_counts(b, x, edges, weight, density)
                                    : b.zeros(Type{ct, {0}});
  return {b.convert(hist, dt), b.convert(edges, dt)};
}

}  // namespace

TPU_LOWERINGS(reduction) {
  reg("aten::sum.dim_IntList", [](Context& c) {
    Dims dims = reduce_dims(c, 1, c.args.info(0).dim());
    return one(sum_impl(c, dims, c.args.bool_(2), c.args.opt_scalar_type(3)));
  });
  reg("aten::sum", [](Context& c) {
    return one(sum_impl(c, reduce_dims(c, 99, c.args.info(0).dim()), false, c.args.opt_scalar_type(1)));
  });
  reg("aten::mean.dim", [](Context& c) {
    Dims dims = reduce_dims(c, 1, c.args.info(0).dim());
    return one(mean_impl(c, dims, c.args.bool_(2), c.args.opt_scalar_type(3)));
  });
  reg("aten::mean", [](Context& c) {
    return one(mean_impl(c, reduce_dims(c, 99, c.args.info(0).dim()), false, c.args.opt_scalar_type(1)));
  });
  reg("aten::prod", [](Context& c) {
    return one(prod_impl(c, reduce_dims(c, 99, c.args.info(0).dim()), false, c.args.opt_scalar_type(1)));
  });
  reg("aten::prod.dim_int", [](Context& c) {
    const TensorInfo& in = c.args.info(0);
    Dims dims = in.dim() == 0 ? Dims{} : Dims{wrap_dim(c.args.int_(1), in.dim())};
    return one(prod_impl(c, dims, c.args.bool_(2), c.args.opt_scalar_type(3)));
  });
  reg("aten::amax", [](Context& c) { return lower_amax_amin(c, true); });
  reg("aten::amin", [](Context& c) { return lower_amax_amin(c, false); });
  reg("aten::max", [](Context& c) { return lower_max_all(c, true); });
  reg("aten::min", [](Context& c) { return lower_max_all(c, false); });
  reg("aten::max.dim", [](Context& c) { return lower_max_dim(c, true); });
  reg("aten::min.dim", [](Context& c) { return lower_max_dim(c, false); });
  reg("aten::argmax", [](Context& c) { return lower_argmax(c, true); });
  reg("aten::argmin", [](Context& c) { return lower_argmax(c, false); });
  reg("aten::aminmax", lower_aminmax);
  reg("aten::var.correction", [](Context& c) { return lower_var_std(c, false, false); });
  reg("aten::std.correction", [](Context& c) { return lower_var_std(c, true, false); });
  reg("aten::var_mean.correction", [](Context& c) { return lower_var_std(c, false, true); });
  reg("aten::std_mean.correction", [](Context& c) { return lower_var_std(c, true, true); });
  reg("aten::logsumexp", lower_logsumexp);
  reg("aten::all", [](Context& c) { return lower_all_any(c, true, false); });
  reg("aten::all.dim", [](Context& c) { return lower_all_any(c, true, true); });
  reg("aten::all.dims", [](Context& c) { return lower_all_any(c, true, true); });
  reg("aten::any", [](Context& c) { return lower_all_any(c, false, false); });
  reg("aten::any.dim", [](Context& c) { return lower_all_any(c, false, true); });
  reg("aten::any.dims", [](Context& c) { return lower_all_any(c, false, true); });
  reg("aten::cumsum", [](Context& c) { return lower_cumulative(c, true); });
  reg("aten::cumprod", [](Context& c) { return lower_cumulative(c, false); });
  reg("aten::logcumsumexp", lower_logcumsumexp);
  reg("aten::cummax", [](Context& c) { return lower_cum_extreme(c, true); });
  reg("aten::cummin", [](Context& c) { return lower_cum_extreme(c, false); });
  reg("aten::_softmax", [](Context& c) { return lower_softmax(c, false); });
  reg("aten::_safe_softmax", lower_safe_softmax);
  reg("aten::_log_softmax", [](Context& c) { return lower_softmax(c, true); });
  reg("aten::_softmax_backward_data", [](Context& c) { return lower_softmax_backward(c, false); });
  reg("aten::_log_softmax_backward_data", [](Context& c) { return lower_softmax_backward(c, true); });
  reg("aten::linalg_vector_norm", lower_vector_norm);
  reg("aten::norm.Scalar", [](Context& c) { return lower_norm(c, 99, 99, 99); });
  reg("aten::norm.ScalarOpt_dim", [](Context& c) { return lower_norm(c, 2, 3, 99); });
  reg("aten::norm.ScalarOpt_dim_dtype", [](Context& c) { return lower_norm(c, 2, 3, 4); });
  reg("aten::norm.ScalarOpt_dtype", [](Context& c) { return lower_norm(c, 99, 99, 2); });
  reg("aten::renorm", lower_renorm);
  reg("aten::histogram.bin_ct", [](Context& c) { return lower_histogram(c, true); });
  reg("aten::histogram.bins_tensor", [](Context& c) { return lower_histogram(c, false); });
  reg("aten::embedding_renorm_", lower_embedding_renorm);
  reg("aten::histc", lower_histc);
  reg("aten::bincount", lower_bincount);
  reg("aten::count_nonzero.dim_IntList", lower_count_nonzero);
  reg("aten::nansum", lower_nansum);
  reg("aten::_is_all_true", [](Context& c) { return lower_all_any(c, true, false); });
  reg("aten::_is_any_true", [](Context& c) { return lower_all_any(c, false, false); });
}

}  // namespace tpu::lowering
