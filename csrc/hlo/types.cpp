#include "csrc/hlo/types.h"

#include <charconv>

namespace tpu::hlo {

const char* mlir_name(DType t) {
  switch (t) {
    case DType::Pred: return "i1";
    case DType::I8: return "i8";
    case DType::I16: return "i16";
    case DType::I32: return "i32";
    case DType::I64: return "i64";
    case DType::U8: return "ui8";
    case DType::U16: return "ui16";
    case DType::U32: return "ui32";
    case DType::U64: return "ui64";
    case DType::F16: return "f16";
    case DType::BF16: return "bf16";
    case DType::F32: return "f32";
    case DType::F64: return "f64";
    case DType::C64: return "complex<f32>";
    case DType::C128: return "complex<f64>";
    case DType::F8E4M3FN: return "f8E4M3FN";
    case DType::F8E5M2: return "f8E5M2";
    case DType::F8E4M3FNUZ: return "f8E4M3FNUZ";
    case DType::F8E5M2FNUZ: return "f8E5M2FNUZ";
  }
  return "?";
}

int bit_width(DType t) {
  switch (t) {
    case DType::Pred: return 1;
    case DType::I8: case DType::U8: return 8;
    case DType::F8E4M3FN: case DType::F8E5M2: case DType::F8E4M3FNUZ: case DType::F8E5M2FNUZ: return 8;
    case DType::I16: case DType::U16: case DType::F16: case DType::BF16: return 16;
    case DType::I32: case DType::U32: case DType::F32: return 32;
    case DType::I64: case DType::U64: case DType::F64: case DType::C64: return 64;
    case DType::C128: return 128;
  }
  return 0;
}

bool is_float(DType t) {
  return t == DType::F16 || t == DType::BF16 || t == DType::F32 || t == DType::F64 || is_float8(t);
}
bool is_float8(DType t) {
  return t == DType::F8E4M3FN || t == DType::F8E5M2 || t == DType::F8E4M3FNUZ || t == DType::F8E5M2FNUZ;
}
bool is_complex(DType t) { return t == DType::C64 || t == DType::C128; }
bool is_signed_int(DType t) {
  return t == DType::I8 || t == DType::I16 || t == DType::I32 || t == DType::I64;
}
bool is_unsigned_int(DType t) {
  return t == DType::U8 || t == DType::U16 || t == DType::U32 || t == DType::U64;
}
DType real_type(DType t) {
  if (t == DType::C64) return DType::F32;
  if (t == DType::C128) return DType::F64;
  return t;
}

int64_t Type::numel() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

void Type::append_to(std::string& out) const {
  out += "tensor<";
  char buf[24];
  for (size_t i = 0; i < dims.size(); ++i) {
    if (bounded >> i & 1) {
      out += '?';
    } else {
      auto r = std::to_chars(buf, buf + sizeof(buf), dims[i]);
      out.append(buf, r.ptr);
    }
    out += 'x';
  }
  out += mlir_name(dtype);
  if (bounded != 0) {
    out += ", #stablehlo.bounds<";
    for (size_t i = 0; i < dims.size(); ++i) {
      if (i) out += ", ";
      if (bounded >> i & 1) {
        auto r = std::to_chars(buf, buf + sizeof(buf), dims[i]);
        out.append(buf, r.ptr);
      } else {
        out += '?';
      }
    }
    out += '>';
  }
  out += '>';
}

std::string Type::str() const {
  std::string s;
  append_to(s);
  return s;
}

std::string dims_str(const Dims& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(dims[i]);
  }
  return s + "]";
}

}  // namespace tpu::hlo
