// Element types and tensor types of StableHLO programs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tpu::hlo {

enum class DType : uint8_t {
  Pred, I8, I16, I32, I64, U8, U16, U32, U64, F16, BF16, F32, F64, C64, C128,
  // 8-bit floats: OCP's E4M3 (no infinities) and E5M2, and their FNUZ variants
  // (no infinities, no negative zero, one NaN).
  F8E4M3FN, F8E5M2, F8E4M3FNUZ, F8E5M2FNUZ,
};

// The MLIR spelling: i1, i8, ui8, bf16, f32, complex<f32>, ...
const char* mlir_name(DType t);
int bit_width(DType t);
inline int byte_width(DType t) { return t == DType::Pred ? 1 : bit_width(t) / 8; }
bool is_float(DType t);
bool is_float8(DType t);
bool is_complex(DType t);
bool is_signed_int(DType t);
bool is_unsigned_int(DType t);
inline bool is_int(DType t) { return is_signed_int(t) || is_unsigned_int(t); }
// The signed integer type of `bits` bits (8, 16, 32, 64): a float's bits.
inline DType int_type_of_width(int bits) {
  return bits == 8 ? DType::I8 : bits == 16 ? DType::I16 : bits == 32 ? DType::I32 : DType::I64;
}
// The real type of a complex type (f32 for c64); `t` itself otherwise.
DType real_type(DType t);

using Dims = std::vector<int64_t>;

struct Type {
  DType dtype = DType::F32;
  Dims dims;
  // Dims whose size is only bounded by `dims` (bit d: dim d), printed `?`
  // with #stablehlo.bounds. Only the entry and exit of a bucketed program
  // use them (docs/bounded_dynamism.md); every other value is static.
  uint64_t bounded = 0;

  int64_t rank() const { return static_cast<int64_t>(dims.size()); }
  int64_t numel() const;
  // tensor<2x3xf32>
  std::string str() const;
  void append_to(std::string& out) const;
  bool operator==(const Type& o) const { return dtype == o.dtype && dims == o.dims && bounded == o.bounded; }
  bool operator!=(const Type& o) const { return !(*this == o); }
};

std::string dims_str(const Dims& dims);

}  // namespace tpu::hlo
