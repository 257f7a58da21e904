#include "csrc/lowering/lowering.h"

#include <c10/core/DefaultDtype.h>
#include <c10/core/ScalarTypeToTypeMeta.h>

#include <map>
#include <mutex>

namespace tpu::lowering {

namespace {
std::map<std::string, LoweringFn, std::less<>>& table() {
  static auto* t = new std::map<std::string, LoweringFn, std::less<>>();
  return *t;
}
}  // namespace

void register_lowering(const char* name, LoweringFn fn) {
  auto [it, inserted] = table().emplace(name, fn);
  if (!inserted) {
    throw std::logic_error(std::string("torch_tpu: two lowerings registered for ") + name);
  }
}

LoweringFn find_lowering(std::string_view name) {
  auto it = table().find(name);
  return it == table().end() ? nullptr : it->second;
}

std::vector<std::string> lowering_names() {
  std::vector<std::string> names;
  for (const auto& [name, fn] : table()) names.push_back(name);
  return names;
}

DType to_hlo(at::ScalarType t) {
  switch (t) {
    case at::kBool: return DType::Pred;
    case at::kByte: return DType::U8;
    case at::kChar: return DType::I8;
    case at::kShort: return DType::I16;
    case at::kInt: return DType::I32;
    case at::kLong: return DType::I64;
    case at::kUInt16: return DType::U16;
    case at::kUInt32: return DType::U32;
    case at::kUInt64: return DType::U64;
    case at::kHalf: return DType::F16;
    case at::kBFloat16: return DType::BF16;
    case at::kFloat: return DType::F32;
    case at::kDouble: return DType::F64;
    case at::kComplexFloat: return DType::C64;
    case at::kComplexDouble: return DType::C128;
    case at::kFloat8_e4m3fn: return DType::F8E4M3FN;
    case at::kFloat8_e5m2: return DType::F8E5M2;
    case at::kFloat8_e4m3fnuz: return DType::F8E4M3FNUZ;
    case at::kFloat8_e5m2fnuz: return DType::F8E5M2FNUZ;
    default:
      TORCH_CHECK_TYPE(false, "tpu: dtype ", t, " is not supported on the tpu device");
  }
}

at::ScalarType to_aten(DType t) {
  switch (t) {
    case DType::Pred: return at::kBool;
    case DType::U8: return at::kByte;
    case DType::I8: return at::kChar;
    case DType::I16: return at::kShort;
    case DType::I32: return at::kInt;
    case DType::I64: return at::kLong;
    case DType::U16: return at::kUInt16;
    case DType::U32: return at::kUInt32;
    case DType::U64: return at::kUInt64;
    case DType::F16: return at::kHalf;
    case DType::BF16: return at::kBFloat16;
    case DType::F32: return at::kFloat;
    case DType::F64: return at::kDouble;
    case DType::C64: return at::kComplexFloat;
    case DType::C128: return at::kComplexDouble;
    case DType::F8E4M3FN: return at::kFloat8_e4m3fn;
    case DType::F8E5M2: return at::kFloat8_e5m2;
    case DType::F8E4M3FNUZ: return at::kFloat8_e4m3fnuz;
    case DType::F8E5M2FNUZ: return at::kFloat8_e5m2fnuz;
  }
  return at::kFloat;
}

at::ScalarType opmath_type(at::ScalarType t) {
  return t == at::kHalf || t == at::kBFloat16 || c10::isFloat8Type(t) ? at::kFloat : t;
}

namespace {
at::ScalarType promote_skip_undefined(at::ScalarType a, at::ScalarType b) {
  if (a == at::ScalarType::Undefined) return b;
  if (b == at::ScalarType::Undefined) return a;
  return c10::promoteTypes(a, b);
}

at::ScalarType combine_categories(at::ScalarType higher, at::ScalarType lower) {
  if (c10::isComplexType(higher)) return higher;
  if (c10::isComplexType(lower)) {
    return c10::isFloatingType(higher) ? c10::toComplexType(higher) : lower;
  }
  if (c10::isFloatingType(higher)) return higher;
  if (higher == at::kBool || c10::isFloatingType(lower)) return promote_skip_undefined(higher, lower);
  if (higher != at::ScalarType::Undefined) return higher;
  return lower;
}

at::ScalarType wrapped_type(at::ScalarType t) {
  if (c10::isComplexType(t)) return c10::typeMetaToScalarType(c10::get_default_complex_dtype());
  if (c10::isFloatingType(t)) return c10::typeMetaToScalarType(c10::get_default_dtype());
  return t;
}
}  // namespace

ResultType& ResultType::tensor(const TensorInfo& info) {
  if (info.wrapped_number) {
    wrapped_ = promote_skip_undefined(wrapped_, wrapped_type(info.dtype));
  } else if (info.dim() > 0) {
    dim_ = promote_skip_undefined(dim_, info.dtype);
  } else {
    zero_ = promote_skip_undefined(zero_, info.dtype);
  }
  return *this;
}

ResultType& ResultType::scalar_kind(at::ScalarType kind) {
  wrapped_ = promote_skip_undefined(wrapped_, wrapped_type(kind));
  return *this;
}

at::ScalarType ResultType::get() const {
  return combine_categories(dim_, combine_categories(zero_, wrapped_));
}

std::string dims_string(const Dims& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(d[i]);
  }
  return s + "]";
}

Dims broadcast_shapes(const Dims& a, const Dims& b) {
  const size_t n = std::max(a.size(), b.size());
  Dims out(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    TORCH_CHECK(da == db || da == 1 || db == 1, "The size of tensor a (", da,
                ") must match the size of tensor b (", db, ") at non-singleton dimension ", i);
    out[i] = da == 1 ? db : da;
  }
  return out;
}

int64_t wrap_dim(int64_t dim, int64_t rank) {
  const int64_t r = rank == 0 ? 1 : rank;
  TORCH_CHECK_INDEX(dim >= -r && dim < r, "Dimension out of range (expected to be in range of [",
                    -r, ", ", r - 1, "], but got ", dim, ")");
  return dim < 0 ? dim + r : dim;
}

Dims wrap_dims(const std::vector<int64_t>& dims, int64_t rank) {
  Dims out;
  for (int64_t d : dims) {
    int64_t w = wrap_dim(d, rank);
    TORCH_CHECK(std::find(out.begin(), out.end(), w) == out.end(), "dim ", w,
                " appears multiple times in the list of dims");
    out.push_back(w);
  }
  return out;
}

}  // namespace tpu::lowering
