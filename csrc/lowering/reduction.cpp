// Reductions: sum, mean.
#include "csrc/lowering/common.h"

namespace tpu::lowering {

namespace {

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
              "mean(): could not infer output dtype. ",
              dtype ? "Optional" : "Input", " dtype must be either a floating point or complex "
              "dtype. Got: ", out);
  Builder& b = c.b;
  const at::ScalarType compute = opmath_type(out);
  Value s = sum_over(b, cast(b, c.args.tensor(0), compute), dims);
  const double n = static_cast<double>(count_over(in.sizes, dims));
  Value m = b.div(s, b.full(n, to_hlo(compute), b.dims(s)));
  return cast(b, keep_dims(b, m, in.sizes, dims, keepdim), out);
}

std::vector<Value> lower_sum_dim(Context& c) {
  Dims dims = reduce_dims(c, 1, c.args.info(0).dim());
  return one(sum_impl(c, dims, c.args.bool_(2), c.args.opt_scalar_type(3)));
}

std::vector<Value> lower_sum(Context& c) {
  Dims dims = reduce_dims(c, 99, c.args.info(0).dim());
  return one(sum_impl(c, dims, false, c.args.opt_scalar_type(1)));
}

std::vector<Value> lower_mean_dim(Context& c) {
  Dims dims = reduce_dims(c, 1, c.args.info(0).dim());
  return one(mean_impl(c, dims, c.args.bool_(2), c.args.opt_scalar_type(3)));
}

std::vector<Value> lower_mean(Context& c) {
  Dims dims = reduce_dims(c, 99, c.args.info(0).dim());
  return one(mean_impl(c, dims, false, c.args.opt_scalar_type(1)));
}

}  // namespace

TPU_LOWERINGS(reduction) {
  reg("aten::sum.dim_IntList", lower_sum_dim);
  reg("aten::sum", lower_sum);
  reg("aten::mean.dim", lower_mean_dim);
  reg("aten::mean", lower_mean);
}

}  // namespace tpu::lowering
