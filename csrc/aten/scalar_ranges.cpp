#include "csrc/aten/scalar_ranges.h"

#include <ATen/OpMathType.h>
#include <ATen/native/TypeProperties.h>
#include <ATen/ops/scalar_tensor_native.h>
#include <c10/core/DefaultDtype.h>
#include <c10/core/ScalarTypeToTypeMeta.h>
#include <torch/library.h>

#include <unordered_map>

namespace tpu {

const ScalarRangeRule* scalar_range_rule(const std::string& functional) {
  static const auto* rules = new std::unordered_map<std::string, ScalarRangeRule>{
      {"aten::fill.Scalar", {{1}, {0}}},
      {"aten::masked_fill.Scalar", {{2}, {0}}},
      {"aten::index_fill.int_Scalar", {{3}, {0}}},
      {"aten::scatter.value", {{3}, {0}}},
      {"aten::threshold", {{1, 2}, {0}, false, false, /*opmath=*/true}},
      {"aten::hardtanh", {{1, 2}, {0}, false, false, false, /*int64_first=*/true}},
      {"aten::clamp", {{1, 2}, {0}, /*promotes=*/true}},
      {"aten::clamp_min", {{1}, {0}, true}},
      {"aten::clamp_max", {{1}, {0}, true}},
      {"aten::pow.Tensor_Scalar", {{1}, {0}, true, false, false, /*int64_first=*/true, /*float_unchecked=*/true}},
      {"aten::add.Tensor", {{2}, {0, 1}, true}},  // alpha
      {"aten::sub.Tensor", {{2}, {0, 1}, true, /*negated=*/true}},
      {"aten::rsub.Tensor", {{2}, {0, 1}, true, true}},
      {"aten::add.Scalar", {{2}, {0}, true}},
      {"aten::sub.Scalar", {{2}, {0}, true, true}},
      {"aten::rsub.Scalar", {{2}, {0}, true, true}},
      {"aten::addcmul", {{3}, {0, 1, 2}, true}},  // value
      {"aten::addcdiv", {{3}, {0, 1, 2}, true}},
  };
  const auto it = rules->find(functional);
  return it == rules->end() ? nullptr : &it->second;
}

namespace {

// 0 bool, 1 integer, 2 floating point, 3 complex (type promotion's categories).
int category(at::ScalarType t) {
  if (t == at::kBool) return 0;
  if (c10::isIntegralType(t, false)) return 1;
  return c10::isComplexType(t) ? 3 : 2;
}
int category(const c10::Scalar& s) {
  if (s.isBoolean()) return 0;
  if (s.isIntegral(false)) return 1;
  return s.isComplex() ? 3 : 2;
}

// Scalar::to<T> is CPU's checked conversion (and its message).
void check_fits(const c10::Scalar& s, at::ScalarType t) {
  switch (t) {
    case at::kByte: (void)s.to<uint8_t>(); break;
    case at::kChar: (void)s.to<int8_t>(); break;
    case at::kShort: (void)s.to<int16_t>(); break;
    case at::kInt: (void)s.to<int32_t>(); break;
    case at::kLong: (void)s.to<int64_t>(); break;
    case at::kHalf: (void)s.to<at::Half>(); break;
    case at::kBFloat16: (void)s.to<at::BFloat16>(); break;
    case at::kFloat: (void)s.to<float>(); break;
    default: break;  // (double, bool, complex: every Python number fits)
  }
}

}  // namespace

void check_scalar_ranges(const ScalarRangeRule& rule, const std::vector<c10::IValue>& args) {
  // (the common case, add's alpha=1 or fill_(0): a small int fits every dtype)
  bool small = true;
  for (size_t i : rule.scalars) {
    if (i >= args.size() || args[i].isNone() || args[i].isBool()) continue;
    small = small && args[i].isInt() && args[i].toInt() >= -127 && args[i].toInt() <= 127;
  }
  if (small) return;
  at::native::ResultTypeState state;
  bool any = false;
  for (size_t i : rule.tensors) {
    if (i < args.size() && args[i].isTensor() && args[i].toTensor().defined()) {
      state = at::native::update_result_type_state(args[i].toTensor(), state);
      any = true;
    }
  }
  if (!any) return;
  const at::ScalarType t = at::native::result_type(state);
  if (rule.float_unchecked && (t == at::kFloat || t == at::kDouble)) return;
  for (size_t i : rule.scalars) {
    // (a Python int in [2**63, 2**64) is an unsigned IValue, not isScalar())
    if (i >= args.size() || !(args[i].isScalar() || args[i].isUnsigned())) continue;
    c10::Scalar s = args[i].toScalar();
    if (rule.negated && s.isIntegral(false)) s = -s;
    if (rule.promotes && category(s) > category(t)) continue;  // (the result takes the Scalar's category)
    if (rule.int64_first && s.isIntegral(false) && c10::isIntegralType(t, false)) (void)s.toLong();
    check_fits(s, rule.opmath ? at::toOpMathType(t) : t);
  }
}

namespace {

// torch.scalar_tensor (torch.where(mask, x, -1e9) makes its number one):
// CPU converts the number to a float16 or bfloat16 tensor unchecked (-1e9
// is -inf), to other dtypes with fill_'s check.
at::Tensor scalar_tensor(const at::Scalar& s, std::optional<at::ScalarType> dtype, std::optional<at::Layout> layout,
                         std::optional<at::Device> device, std::optional<bool> pin_memory) {
  const at::ScalarType t = dtype.value_or(c10::typeMetaToScalarType(c10::get_default_dtype()));
  at::Scalar v = s;
  if ((t == at::kHalf || t == at::kBFloat16) && (s.isFloatingPoint() || s.isIntegral(false))) {
    const float f = static_cast<float>(s.toDouble());
    v = t == at::kHalf ? static_cast<double>(static_cast<float>(c10::Half(f)))
                       : static_cast<double>(static_cast<float>(c10::BFloat16(f)));
  }
  return at::native::scalar_tensor(v, dtype, layout, device, pin_memory);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("scalar_tensor", TORCH_FN(scalar_tensor));
}

}  // namespace tpu
