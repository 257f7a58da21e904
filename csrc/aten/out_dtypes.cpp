#include "csrc/aten/out_dtypes.h"

#include <c10/core/ScalarTypeToTypeMeta.h>
#include <c10/util/Exception.h>

#include <unordered_map>

namespace tpu {

namespace {

// A dtype as CPU's messages print a tensor's dtype() ("float", "long int").
std::string meta_name(at::ScalarType t) { return std::string(c10::scalarTypeToTypeMeta(t).name()); }

bool inexact(at::ScalarType t) { return c10::isFloatingType(t) || c10::isComplexType(t); }

// How CPU's kernel of an out= variant takes its out tensors' dtypes.
enum class Rule {
  Exact,         // the result's dtype only (structured kernels, generated out= wrappers)
  InputDtype,    // amax, amin: the input's
  ScalarType,    // cummax, cummin, logcumsumexp
  KthValue,
  Median,        // median.dim, nanmedian.dim
  Mode,
  Histogram,     // histc, histogram: the input's
  BoolResult,    // all, any: bool or uint8
  FloatResult,   // logsumexp: floating point or complex
  RealMoment,    // var, std of a real tensor: not into a complex one
  IndexSelect,
};

const std::unordered_map<std::string, Rule>& rules() {
  static const auto* m = new std::unordered_map<std::string, Rule>{
      {"aten::sum", Rule::Exact},
      {"aten::prod", Rule::Exact},
      {"aten::aminmax", Rule::Exact},
      {"aten::max.dim", Rule::Exact},
      {"aten::min.dim", Rule::Exact},
      {"aten::argmax", Rule::Exact},
      {"aten::argmin", Rule::Exact},
      {"aten::sort.stable", Rule::Exact},
      {"aten::topk", Rule::Exact},
      {"aten::count_nonzero.dim_IntList", Rule::Exact},
      {"aten::norm.Scalar", Rule::Exact},
      {"aten::norm.ScalarOpt_dim", Rule::Exact},
      {"aten::norm.ScalarOpt_dim_dtype", Rule::Exact},
      {"aten::norm.ScalarOpt_dtype", Rule::Exact},
      {"aten::linalg_vector_norm", Rule::Exact},
      {"aten::var_mean.correction", Rule::Exact},
      {"aten::std_mean.correction", Rule::Exact},
      {"aten::_softmax", Rule::Exact},
      {"aten::_log_softmax", Rule::Exact},
      {"aten::amax", Rule::InputDtype},
      {"aten::amin", Rule::InputDtype},
      {"aten::cummax", Rule::ScalarType},
      {"aten::cummin", Rule::ScalarType},
      {"aten::logcumsumexp", Rule::ScalarType},
      {"aten::kthvalue", Rule::KthValue},
      {"aten::median.dim", Rule::Median},
      {"aten::nanmedian.dim", Rule::Median},
      {"aten::mode", Rule::Mode},
      {"aten::histc", Rule::Histogram},
      {"aten::histogram.bin_ct", Rule::Histogram},
      {"aten::histogram.bins_tensor", Rule::Histogram},
      {"aten::all", Rule::BoolResult},
      {"aten::all.dim", Rule::BoolResult},
      {"aten::all.dims", Rule::BoolResult},
      {"aten::any", Rule::BoolResult},
      {"aten::any.dim", Rule::BoolResult},
      {"aten::any.dims", Rule::BoolResult},
      {"aten::logsumexp", Rule::FloatResult},
      {"aten::var.correction", Rule::RealMoment},
      {"aten::std.correction", Rule::RealMoment},
      {"aten::index_select", Rule::IndexSelect},
  };
  return *m;
}

// The ops that compute in their out tensor's dtype: the position of their
// dtype argument.
const std::unordered_map<std::string, size_t>& dtype_arguments() {
  static const auto* m = new std::unordered_map<std::string, size_t>{
      {"aten::sum.dim_IntList", 3}, {"aten::prod.dim_int", 3}, {"aten::mean.dim", 3}, {"aten::mean", 1},
      {"aten::nansum", 3},          {"aten::cumsum", 2},       {"aten::cumprod", 2},
  };
  return *m;
}

// "torch.FloatTensor" (or "CPUBoolType" for a dtype without a legacy
// tensor class), as CPU's legacy argument checks name a tensor's type.
std::string legacy_name(at::ScalarType t) {
  switch (t) {
    case at::kByte: case at::kChar: case at::kShort: case at::kInt: case at::kLong: case at::kHalf:
    case at::kFloat: case at::kDouble:
      return std::string("torch.") + c10::toString(t) + "Tensor";
    default:
      return std::string("CPU") + c10::toString(t) + "Type";
  }
}

}  // namespace

void out_dtype_as_argument(const std::string& functional, std::vector<c10::IValue>& args,
                           const std::vector<size_t>& out_args) {
  const auto it = dtype_arguments().find(functional);
  if (it == dtype_arguments().end() || out_args.empty() || !args[out_args[0]].isTensor() || !args[0].isTensor()) {
    return;
  }
  const at::ScalarType out = args[out_args[0]].toTensor().scalar_type();
  const at::ScalarType in = args[0].toTensor().scalar_type();
  c10::IValue& dtype = args[it->second];
  if (!dtype.isNone()) {
    TORCH_CHECK(dtype.toScalarType() == out, "Expected out tensor to have dtype ", meta_name(dtype.toScalarType()),
                ", but got ", meta_name(out), " instead");
    return;
  }
  // mean: the mean of a float tensor into an integer one is TensorIterator's
  // cast error (write_back), of an integer tensor mean's own.
  if ((functional == "aten::mean.dim" || functional == "aten::mean") && !(inexact(in) && inexact(out))) return;
  if (functional == "aten::nansum" && c10::isFloatingType(in)) {
    TORCH_CHECK_NOT_IMPLEMENTED(c10::isFloatingType(out), "\"nansum_cpu\" not implemented for '", c10::toString(out),
                                "'");
  }
  dtype = c10::IValue(static_cast<int64_t>(out));
}

void check_out_dtypes(const std::string& functional, const std::vector<c10::IValue>& args,
                      const std::vector<size_t>& out_args, const std::vector<at::ScalarType>& results) {
  const auto it = rules().find(functional);
  if (it == rules().end() || args.empty() || !args[0].isTensor()) return;
  const at::ScalarType in = args[0].toTensor().scalar_type();
  if ((it->second == Rule::Exact) == results.empty()) return;
  for (size_t k = 0; k < out_args.size(); ++k) {
    if (!args[out_args[k]].isTensor()) continue;
    const at::ScalarType out = args[out_args[k]].toTensor().scalar_type();
    const bool values = k == 0;
    // (the others' results: values of the input's dtype, int64 indices)
    const at::ScalarType want = k < results.size() ? results[k] : values ? in : at::kLong;
    switch (it->second) {
      case Rule::Exact:
        TORCH_CHECK(out == want, "Expected out tensor to have dtype ", meta_name(want), ", but got ", meta_name(out),
                    " instead");
        break;
      case Rule::InputDtype:
        TORCH_CHECK(out == in, "Expected the dtype for input and out to match, but got ", c10::toString(in),
                    " for input's dtype and ", c10::toString(out), " for out's dtype.");
        break;
      case Rule::ScalarType:
        TORCH_CHECK(out == want, "expected scalar_type ", c10::toString(want), " but found ", c10::toString(out));
        break;
      case Rule::KthValue:
        TORCH_CHECK(out == want, values ? "output values must be of same type as input"
                                        : "output indices must be of scalar type Long");
        break;
      case Rule::Median:
        if (values) {
          TORCH_CHECK(out == in, "Expected tensor for 'values' to have the same type as tensor for argument #2 "
                                 "'self'; but type ", legacy_name(out), " does not equal ", legacy_name(in),
                      " (while checking arguments for median)");
        } else {
          TORCH_CHECK(out == at::kLong, "Expected tensor for argument #1 'indices' to have scalar type Long; but got ",
                      legacy_name(out), " instead (while checking arguments for median)");
        }
        break;
      case Rule::Mode:
        TORCH_CHECK(out == want, "expected scalar type '", c10::toString(want), "' but got '", c10::toString(out),
                    "' for ", values ? "values" : "indices", " output");
        break;
      case Rule::Histogram:
        TORCH_CHECK(out == in, "torch.histogram: input tensor and ", values ? "hist" : "bin_edges",
                    " tensor should have the same dtype, but got input ", meta_name(in), " and ",
                    values ? "hist " : "bin_edges ", meta_name(out), values ? "" : " for dimension 0");
        break;
      case Rule::BoolResult:
        TORCH_CHECK(out == at::kBool || out == at::kByte, functional.rfind("aten::all", 0) == 0 ? "all" : "any",
                    " only supports bool tensor for result, got: ", c10::toString(out));
        break;
      case Rule::FloatResult:
        TORCH_CHECK(inexact(out), "logsumexp(): Expected floating point type for result tensor, but got: ",
                    c10::toString(out));
        break;
      case Rule::RealMoment:
        TORCH_CHECK_NOT_IMPLEMENTED(c10::isComplexType(in) || !c10::isComplexType(out),
                                    "\"std_cpu\" not implemented for '", c10::toString(out), "'");
        break;
      case Rule::IndexSelect:
        TORCH_CHECK(out == in, "index_select(): self and result must have the same scalar type");
        break;
    }
  }
}

}  // namespace tpu
