#include "csrc/hlo/builder.h"

#include <algorithm>
#include <charconv>
#include <cinttypes>
#include <cmath>
#include <cstring>
#include <stdexcept>

namespace tpu::hlo {

namespace {

void append_int(std::string& out, int64_t v) {
  char buf[24];
  auto r = std::to_chars(buf, buf + sizeof(buf), v);
  out.append(buf, r.ptr);
}

void append_value(std::string& out, Value v) {
  out += "%v";
  append_int(out, v.id);
}

const char* cmp_name(Cmp c) {
  switch (c) {
    case Cmp::EQ: return "EQ";
    case Cmp::NE: return "NE";
    case Cmp::LT: return "LT";
    case Cmp::LE: return "LE";
    case Cmp::GT: return "GT";
    case Cmp::GE: return "GE";
  }
  return "EQ";
}

std::string padding_attr(const std::vector<std::pair<int64_t, int64_t>>& padding) {
  std::string s = "dense<";
  if (padding.empty()) {
    s += "> : tensor<0x2xi64>";
    return s;
  }
  s += "[";
  for (size_t i = 0; i < padding.size(); ++i) {
    if (i) s += ", ";
    s += "[" + std::to_string(padding[i].first) + ", " + std::to_string(padding[i].second) + "]";
  }
  s += "]> : tensor<" + std::to_string(padding.size()) + "x2xi64>";
  return s;
}

Dims ones(size_t n) { return Dims(n, 1); }

}  // namespace

std::string array_attr(const Dims& values) {
  std::string s = "array<i64";
  for (size_t i = 0; i < values.size(); ++i) {
    s += i ? ", " : ": ";
    append_int(s, values[i]);
  }
  return s + ">";
}

std::string list_attr(const Dims& values) { return dims_str(values); }

Builder::Builder() { frames_.emplace_back(); }

void Builder::check(bool ok, std::string_view op, const std::string& what) const {
  if (!ok) throw std::logic_error("StableHLO builder: " + std::string(op) + ": " + what);
}

Value Builder::new_value(const Type& t) {
  types_.push_back(t);
  return Value{static_cast<int>(types_.size()) - 1};
}

const Type& Builder::type(Value v) const {
  if (v.id < 0 || v.id >= static_cast<int>(types_.size())) {
    throw std::logic_error("StableHLO builder: use of an invalid value");
  }
  return types_[v.id];
}

Value Builder::param(const Type& type) {
  Value v = new_value(type);
  params_.push_back(v);
  return v;
}

void Builder::write_operands(const std::vector<Value>& operands) {
  std::string& o = out();
  o += '(';
  for (size_t i = 0; i < operands.size(); ++i) {
    if (i) o += ", ";
    append_value(o, operands[i]);
  }
  o += ')';
}

std::vector<Value> Builder::emit(std::string_view op, const std::vector<Value>& operands,
                                 const std::vector<Type>& results, std::string_view attrs,
                                 const std::vector<std::string>& regions) {
  for (Value v : operands) type(v);  // validates
  std::vector<Value> vals;
  vals.reserve(results.size());
  for (const Type& t : results) vals.push_back(new_value(t));
  std::string& o = out();
  o.append(indent_ * 2, ' ');
  for (size_t i = 0; i < vals.size(); ++i) {
    if (i) o += ", ";
    append_value(o, vals[i]);
  }
  if (!vals.empty()) o += " = ";
  o += '"';
  o += op;
  o += '"';
  write_operands(operands);
  std::string& o2 = out();
  if (!regions.empty()) {
    o2 += " (";
    for (size_t i = 0; i < regions.size(); ++i) {
      if (i) o2 += ", ";
      o2 += regions[i];
    }
    o2 += ")";
  }
  if (!attrs.empty()) {
    o2 += " {";
    o2 += attrs;
    o2 += '}';
  }
  o2 += " : (";
  for (size_t i = 0; i < operands.size(); ++i) {
    if (i) o2 += ", ";
    types_[operands[i].id].append_to(o2);
  }
  o2 += ") -> ";
  if (results.size() != 1) o2 += '(';
  for (size_t i = 0; i < results.size(); ++i) {
    if (i) o2 += ", ";
    results[i].append_to(o2);
  }
  if (results.size() != 1) o2 += ')';
  o2 += '\n';
  return vals;
}

Value Builder::emit1(std::string_view op, const std::vector<Value>& operands, const Type& result,
                     std::string_view attrs, const std::vector<std::string>& regions) {
  return emit(op, operands, {result}, attrs, regions)[0];
}

std::string Builder::region(const std::vector<Type>& arg_types, const RegionBody& body) {
  frames_.emplace_back();
  ++indent_;
  std::vector<Value> args;
  std::string header = "{\n";
  header.append((indent_ - 1) * 2, ' ');
  header += "^bb0(";
  for (size_t i = 0; i < arg_types.size(); ++i) {
    Value a = new_value(arg_types[i]);
    args.push_back(a);
    if (i) header += ", ";
    append_value(header, a);
    header += ": ";
    arg_types[i].append_to(header);
  }
  header += "):\n";
  std::vector<Value> results;
  try {
    results = body(*this, args);
    std::vector<Type> none;
    emit("stablehlo.return", results, none);
  } catch (...) {
    --indent_;
    frames_.pop_back();
    throw;
  }
  std::string text = header + out();
  --indent_;
  frames_.pop_back();
  text.append(indent_ * 2, ' ');
  text += "}";
  return text;
}

std::vector<Value> Builder::call_imported(const std::string& functions, const std::string& entry,
                                          const std::vector<Value>& operands, const std::vector<Type>& results) {
  const std::string placeholder = "@__IMPORT__";
  check(functions.find(placeholder + entry + "(") != std::string::npos, "call_imported",
        "the imported functions do not define " + placeholder + entry);
  const size_t k = imports_.size();
  imports_.push_back(functions);
  // Import k's symbols are spelled @__IMPORT<k>__name in this program's text.
  return emit("func.call", operands, results, "callee = @__IMPORT" + std::to_string(k) + "__" + entry);
}

namespace {
void replace_all(std::string& s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) {
    s.replace(at, from.size(), to);
  }
}
}  // namespace

std::string Builder::with_imports(std::string text, const std::string& prefix, std::string& functions) const {
  for (size_t k = 0; k < imports_.size(); ++k) {
    const std::string mine = "@" + prefix + "i" + std::to_string(k) + "_";
    replace_all(text, "@__IMPORT" + std::to_string(k) + "__", mine);
    std::string f = imports_[k];
    replace_all(f, "@__IMPORT__", mine);
    functions += f;
    if (!f.empty() && f.back() != '\n') functions += '\n';
  }
  return text;
}

std::string Builder::module(const std::vector<Value>& results, const std::vector<std::pair<int, int>>& donations,
                            const ModuleAttributes& attributes) const {
  Module m("tpu_program", attributes);
  std::vector<Parameter> params = parameters();
  for (const auto& [p, o] : donations) params.at(p).alias = o;
  std::vector<Type> types;
  std::vector<std::string> returned;
  signature_of(results, types, returned);
  std::string imported;
  std::string body = with_imports(frames_[0].text, "", imported);
  if (!imported.empty()) m.add_function("imported", [imported] { return imported; });
  m.set_main(params, types, std::move(body), std::move(returned));
  return m.text();
}

std::string Builder::function(const std::string& name, const std::vector<Value>& results) const {
  std::string out;
  out.reserve(frames_[0].text.size() + 256);
  std::vector<Type> types;
  std::vector<std::string> returned;
  signature_of(results, types, returned);
  std::string imported;
  std::string body = imports_.empty() ? std::string() : with_imports(frames_[0].text, name + "_", imported);
  write_function(out, "func.func private @" + name, parameters(), types, imports_.empty() ? frames_[0].text : body,
                 returned);
  return out + imported;
}

std::vector<Parameter> Builder::parameters() const {
  std::vector<Parameter> params;
  params.reserve(params_.size());
  for (Value p : params_) params.push_back({"v" + std::to_string(p.id), types_[p.id], -1});
  return params;
}

void Builder::signature_of(const std::vector<Value>& results, std::vector<Type>& types,
                           std::vector<std::string>& names) const {
  for (Value r : results) {
    types.push_back(type(r));
    names.push_back("v" + std::to_string(r.id));
  }
}

// ---- constants ---------------------------------------------------------------

Value Builder::constant(double value, DType dtype) {
  if (is_complex(dtype)) {
    const DType rt = real_type(dtype);
    return emit1("stablehlo.complex", {constant(value, rt), constant(0, rt)}, Type{dtype, {}});
  }
  if (dtype == DType::F16 || dtype == DType::BF16 || is_float8(dtype)) {
    return convert(constant(value, DType::F32), dtype);
  }
  if (is_int(dtype)) return constant_int(static_cast<int64_t>(value), dtype);
  if (dtype == DType::Pred) return constant_bool(value != 0);
  check(dtype == DType::F32 || dtype == DType::F64, "constant", "unsupported dtype");
  Type t{dtype, {}};
  std::string attr = "value = dense<";
  char buf[32];
  if (dtype == DType::F32) {
    float f = static_cast<float>(value);
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    snprintf(buf, sizeof(buf), "0x%08" PRIX32, bits);
  } else {
    uint64_t bits;
    std::memcpy(&bits, &value, 8);
    snprintf(buf, sizeof(buf), "0x%016" PRIX64, bits);
  }
  attr += buf;
  attr += "> : " + t.str();
  return emit1("stablehlo.constant", {}, t, attr);
}

Value Builder::constant_int(int64_t value, DType dtype) {
  if (is_float(dtype) || is_complex(dtype)) return constant(static_cast<double>(value), dtype);
  if (dtype == DType::Pred) return constant_bool(value != 0);
  check(is_int(dtype), "constant", "unsupported dtype");
  Type t{dtype, {}};
  std::string attr = "value = dense<";
  if (dtype == DType::U64) {
    attr += std::to_string(static_cast<uint64_t>(value));
  } else if (is_unsigned_int(dtype)) {
    uint64_t mask = (uint64_t{1} << bit_width(dtype)) - 1;
    attr += std::to_string(static_cast<uint64_t>(value) & mask);
  } else {
    append_int(attr, value);
  }
  attr += "> : " + t.str();
  return emit1("stablehlo.constant", {}, t, attr);
}

Value Builder::constant_bool(bool value) {
  Type t{DType::Pred, {}};
  return emit1("stablehlo.constant", {}, t,
               std::string("value = dense<") + (value ? "true" : "false") + "> : tensor<i1>");
}

Value Builder::full(double value, DType dtype, const Dims& dims) {
  return broadcast_in_dim(constant(value, dtype), dims, {});
}

Value Builder::full_int(int64_t value, DType dtype, const Dims& dims) {
  return broadcast_in_dim(constant_int(value, dtype), dims, {});
}

Value Builder::zeros(const Type& type) {
  if (type.dtype == DType::Pred) return broadcast_in_dim(constant_bool(false), type.dims, {});
  return full_int(0, type.dtype, type.dims);
}

Value Builder::constant_i64s(const std::vector<int64_t>& values, const Dims& dims, DType dtype) {
  Type t{dtype, dims};
  check(static_cast<int64_t>(values.size()) == t.numel(), "constant", "element count mismatch");
  if (dims.size() > 1) return reshape(constant_i64s(values, {t.numel()}, dtype), dims);
  std::string attr = "value = dense<";
  if (dims.empty()) {
    append_int(attr, values[0]);
  } else {
    attr += '[';
    for (size_t i = 0; i < values.size(); ++i) {
      if (i) attr += ", ";
      append_int(attr, values[i]);
    }
    attr += ']';
  }
  attr += "> : " + t.str();
  return emit1("stablehlo.constant", {}, t, attr);
}

Value Builder::constant_floats(const std::vector<double>& values, const Dims& dims, DType dtype) {
  Type t{dtype, dims};
  check(static_cast<int64_t>(values.size()) == t.numel(), "constant", "element count mismatch");
  if (dtype == DType::F16 || dtype == DType::BF16 || is_float8(dtype)) {
    return convert(constant_floats(values, dims, DType::F32), dtype);
  }
  check(dtype == DType::F32 || dtype == DType::F64, "constant", "unsupported dtype");
  if (dims.size() > 1) return reshape(constant_floats(values, {t.numel()}, dtype), dims);
  std::string attr = "value = dense<";
  if (!dims.empty()) attr += '[';
  char buf[32];
  for (size_t i = 0; i < values.size(); ++i) {
    if (i) attr += ", ";
    if (dtype == DType::F32) {
      float f = static_cast<float>(values[i]);
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      snprintf(buf, sizeof(buf), "0x%08" PRIX32, bits);
    } else {
      uint64_t bits;
      std::memcpy(&bits, &values[i], 8);
      snprintf(buf, sizeof(buf), "0x%016" PRIX64, bits);
    }
    attr += buf;
  }
  if (!dims.empty()) attr += ']';
  attr += "> : " + t.str();
  return emit1("stablehlo.constant", {}, t, attr);
}

Value Builder::lowest(DType dtype) {
  switch (dtype) {
    case DType::Pred: return constant_bool(false);
    case DType::I8: return constant_int(INT8_MIN, dtype);
    case DType::I16: return constant_int(INT16_MIN, dtype);
    case DType::I32: return constant_int(INT32_MIN, dtype);
    case DType::I64: return constant_int(INT64_MIN, dtype);
    case DType::U8: case DType::U16: case DType::U32: case DType::U64: return constant_int(0, dtype);
    case DType::F8E4M3FN: return constant(-448, dtype);  // (no infinities)
    case DType::F8E4M3FNUZ: return constant(-240, dtype);
    case DType::F8E5M2FNUZ: return constant(-57344, dtype);
    default: return constant(-INFINITY, dtype);
  }
}

Value Builder::highest(DType dtype) {
  switch (dtype) {
    case DType::Pred: return constant_bool(true);
    case DType::I8: return constant_int(INT8_MAX, dtype);
    case DType::I16: return constant_int(INT16_MAX, dtype);
    case DType::I32: return constant_int(INT32_MAX, dtype);
    case DType::I64: return constant_int(INT64_MAX, dtype);
    case DType::U8: return constant_int(UINT8_MAX, dtype);
    case DType::U16: return constant_int(UINT16_MAX, dtype);
    case DType::U32: return constant_int(UINT32_MAX, dtype);
    case DType::U64: return constant_int(-1, dtype);
    case DType::F8E4M3FN: return constant(448, dtype);
    case DType::F8E4M3FNUZ: return constant(240, dtype);
    case DType::F8E5M2FNUZ: return constant(57344, dtype);
    default: return constant(INFINITY, dtype);
  }
}

Value Builder::iota(const Type& type, int64_t dim) {
  check(dim >= 0 && dim < type.rank(), "iota", "dimension out of range");
  return emit1("stablehlo.iota", {}, type, "iota_dimension = " + std::to_string(dim) + " : i64");
}

// ---- elementwise -------------------------------------------------------------

Value Builder::unary(std::string_view op, Value x) { return emit1(op, {x}, type(x)); }

Value Builder::binary(std::string_view op, Value x, Value y) {
  check(type(x) == type(y), op, "operand types differ: " + type(x).str() + " vs " + type(y).str());
  return emit1(op, {x, y}, type(x));
}

Value Builder::div(Value x, Value y) {
  // XLA rewrites a division by a broadcast value into a multiplication by
  // its reciprocal, which is not correctly rounded (5.125 / 5.125 becomes
  // 0.99999994, and trunc-division then yields 0). An optimization barrier
  // on such a divisor keeps the division IEEE, as PyTorch computes it.
  if (is_float(dtype(y)) && broadcast_.count(y.id)) {
    y = emit1("stablehlo.optimization_barrier", {y}, type(y));
  }
  return binary("stablehlo.divide", x, y);
}

Value Builder::abs(Value x) {
  Type t = type(x);
  t.dtype = real_type(t.dtype);
  return emit1("stablehlo.abs", {x}, t);
}

Value Builder::compare(Cmp dir, Value x, Value y) {
  check(type(x) == type(y), "compare", "operand types differ: " + type(x).str() + " vs " + type(y).str());
  DType d = dtype(x);
  const char* ct = is_float(d) || is_complex(d) ? "FLOAT" : is_signed_int(d) ? "SIGNED" : "UNSIGNED";
  std::string attrs = "comparison_direction = #stablehlo<comparison_direction ";
  attrs += cmp_name(dir);
  attrs += ">, compare_type = #stablehlo<comparison_type ";
  attrs += ct;
  attrs += ">";
  return emit1("stablehlo.compare", {x, y}, Type{DType::Pred, dims(x)}, attrs);
}

Value Builder::select(Value pred, Value on_true, Value on_false) {
  check(type(on_true) == type(on_false), "select",
        "branch types differ: " + type(on_true).str() + " vs " + type(on_false).str());
  check(dtype(pred) == DType::Pred && (rank(pred) == 0 || dims(pred) == dims(on_true)), "select",
        "predicate " + type(pred).str() + " does not match " + type(on_true).str());
  return emit1("stablehlo.select", {pred, on_true, on_false}, type(on_true));
}

Value Builder::clamp(Value lo, Value x, Value hi) {
  auto ok = [&](Value b) { return dtype(b) == dtype(x) && (rank(b) == 0 || dims(b) == dims(x)); };
  check(ok(lo) && ok(hi), "clamp", "bounds do not match operand " + type(x).str());
  return emit1("stablehlo.clamp", {lo, x, hi}, type(x));
}

Value Builder::real(Value x) {
  if (!is_complex(dtype(x))) return x;
  return emit1("stablehlo.real", {x}, Type{real_type(dtype(x)), dims(x)});
}

Value Builder::imag(Value x) {
  if (!is_complex(dtype(x))) return zeros(type(x));
  return emit1("stablehlo.imag", {x}, Type{real_type(dtype(x)), dims(x)});
}

Value Builder::complex(Value re, Value im) {
  check(type(re) == type(im) && (dtype(re) == DType::F32 || dtype(re) == DType::F64), "complex",
        "parts must be f32 or f64 of one shape");
  return emit1("stablehlo.complex", {re, im}, Type{dtype(re) == DType::F32 ? DType::C64 : DType::C128, dims(re)});
}

Value Builder::convert(Value x, DType to) {
  const DType from = dtype(x);
  if (from == to) return x;
  // Complex to real keeps the real part (as PyTorch's casts do).
  if (is_complex(from) && !is_complex(to)) return convert(real(x), to);
  // PyTorch's 8-bit floats convert through float: a double or an integer is
  // rounded to float first, then to 8 bits (rounding twice, as CPU does), and
  // an 8-bit float reaches integers and other types from its float value.
  if (is_float8(to) && from != DType::F32) {
    return convert(convert(x, DType::F32), to);
  }
  if (is_float8(from) && to != DType::F32 && to != DType::Pred) return convert(convert(x, DType::F32), to);
  // PyTorch's casts to float8_e4m3fn saturate: beyond +-448 (infinities
  // included) they give +-448; NaN stays NaN. (The other 8-bit types give
  // an infinity, or NaN where they have none.) Built against torch before
  // 2.13 (CMake defines TORCH_TPU_FLOAT8_E4M3FN_OVERFLOW_IS_NAN), they
  // don't: what rounds past 448 becomes NaN, as stablehlo.convert gives it.
#ifndef TORCH_TPU_FLOAT8_E4M3FN_OVERFLOW_IS_NAN
  if (to == DType::F8E4M3FN) {
    Value hi = full(448, from, dims(x)), lo = full(-448, from, dims(x));
    x = select(compare(Cmp::GT, x, hi), hi, select(compare(Cmp::LT, x, lo), lo, x));
  }
#endif
  // Float to integers as the host's casts give them (x86): NaN and values
  // out of a signed 32/64-bit range become its lowest value, and narrow or
  // unsigned integers wrap from such a wide signed integer instead of
  // saturating.
  if (is_float(from) && is_int(to)) {
    const DType wide = to == DType::I64 || to == DType::U32 || to == DType::U64 ? DType::I64 : DType::I32;
    const double limit = wide == DType::I64 ? 9223372036854775808.0 : 2147483648.0;
    Value in_range = and_(compare(Cmp::GE, x, full(-limit, from, dims(x))), compare(Cmp::LT, x, full(limit, from, dims(x))));
    Value w = select(in_range, emit1("stablehlo.convert", {x}, Type{wide, dims(x)}),
                     full_int(wide == DType::I64 ? INT64_MIN : INT32_MIN, wide, dims(x)));
    return wide == to ? w : emit1("stablehlo.convert", {w}, Type{to, dims(x)});
  }
  return emit1("stablehlo.convert", {x}, Type{to, dims(x)});
}

Value Builder::bitcast_convert(Value x, DType to) {
  if (dtype(x) == to) return x;
  const int from_bits = bit_width(dtype(x));
  const int to_bits = bit_width(to);
  Dims d = dims(x);
  if (to_bits < from_bits) {
    d.push_back(from_bits / to_bits);
  } else if (to_bits > from_bits) {
    check(!d.empty() && d.back() == to_bits / from_bits, "bitcast_convert",
          "last dimension must be " + std::to_string(to_bits / from_bits));
    d.pop_back();
  }
  return emit1("stablehlo.bitcast_convert", {x}, Type{to, d});
}

Value Builder::is_finite(Value x) {
  return emit1("stablehlo.is_finite", {x}, Type{DType::Pred, dims(x)});
}

// ---- shapes ---------------------------------------------------------------------

Value Builder::reshape(Value x, const Dims& d) {
  if (dims(x) == d) return x;
  Type t{dtype(x), d};
  check(t.numel() == type(x).numel(), "reshape",
        "cannot reshape " + type(x).str() + " to " + t.str());
  return emit1("stablehlo.reshape", {x}, t);
}

Value Builder::transpose(Value x, const Dims& perm) {
  check(static_cast<int64_t>(perm.size()) == rank(x), "transpose", "permutation rank mismatch");
  bool identity = true;
  Dims d(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) {
    check(perm[i] >= 0 && perm[i] < rank(x), "transpose", "permutation out of range");
    d[i] = dims(x)[perm[i]];
    identity &= perm[i] == static_cast<int64_t>(i);
  }
  if (identity) return x;
  Value v = emit1("stablehlo.transpose", {x}, Type{dtype(x), d}, "permutation = " + array_attr(perm));
  transposes_.emplace(v.id, std::make_pair(x, perm));
  return v;
}

Value Builder::barrier(Value x) { return emit1("stablehlo.optimization_barrier", {x}, type(x)); }

Value Builder::set_dimension_size(Value x, Value size, int64_t dim) {
  check(dim >= 0 && dim < rank(x), "set_dimension_size", "dimension out of range for " + type(x).str());
  check(type(size) == Type{DType::I32, {}}, "set_dimension_size", "the size must be tensor<i32>");
  Type result = type(x);
  result.bounded = 0;
  return emit1("stablehlo.set_dimension_size", {x, size}, result, "dimension = " + std::to_string(dim) + " : i64");
}

Value Builder::dynamic_reshape(Value x, Value shape, const Type& result) {
  check(result.dtype == dtype(x), "dynamic_reshape", "the result's dtype must be the operand's");
  check(type(shape) == Type{DType::I32, {result.rank()}}, "dynamic_reshape", "the shape must be i32 of the result's rank");
  return emit1("stablehlo.dynamic_reshape", {x, shape}, result);
}

Value Builder::retype(Value x, const Type& to) {
  check(to.dtype == dtype(x) && to.dims == dims(x), "retype", type(x).str() + " to " + to.str());
  return emit1("stablehlo.convert", {x}, to);
}

bool Builder::transposed(Value v, Value* source, Dims* perm) const {
  auto it = transposes_.find(v.id);
  if (it == transposes_.end()) return false;
  *source = it->second.first;
  *perm = it->second.second;
  return true;
}

Value Builder::broadcast_in_dim(Value x, const Dims& d, const Dims& bdims) {
  check(static_cast<int64_t>(bdims.size()) == rank(x), "broadcast_in_dim",
        "broadcast_dimensions must name every operand dimension of " + type(x).str());
  for (size_t i = 0; i < bdims.size(); ++i) {
    check(bdims[i] >= 0 && bdims[i] < static_cast<int64_t>(d.size()) &&
              (dims(x)[i] == 1 || dims(x)[i] == d[bdims[i]]),
          "broadcast_in_dim", "cannot broadcast " + type(x).str() + " to " + dims_str(d));
  }
  if (dims(x) == d) {
    bool identity = true;
    for (size_t i = 0; i < bdims.size(); ++i) identity &= bdims[i] == static_cast<int64_t>(i);
    if (identity) return x;
  }
  Value r = emit1("stablehlo.broadcast_in_dim", {x}, Type{dtype(x), d}, "broadcast_dimensions = " + array_attr(bdims));
  broadcast_.insert(r.id);
  return r;
}

Value Builder::broadcast_to(Value x, const Dims& d) {
  const int64_t r = rank(x);
  const int64_t out_rank = static_cast<int64_t>(d.size());
  check(r <= out_rank, "broadcast", "cannot broadcast " + type(x).str() + " to " + dims_str(d));
  Dims bdims(r);
  for (int64_t i = 0; i < r; ++i) bdims[i] = out_rank - r + i;
  return broadcast_in_dim(x, d, bdims);
}

Value Builder::slice(Value x, const Dims& start, const Dims& limit, const Dims& strides_in) {
  Dims strides = strides_in.empty() ? ones(start.size()) : strides_in;
  check(static_cast<int64_t>(start.size()) == rank(x) && limit.size() == start.size() &&
            strides.size() == start.size(),
        "slice", "index rank mismatch for " + type(x).str());
  Dims d(start.size());
  bool identity = true;
  for (size_t i = 0; i < start.size(); ++i) {
    check(start[i] >= 0 && start[i] <= limit[i] && limit[i] <= dims(x)[i] && strides[i] >= 1,
          "slice", "bounds out of range for " + type(x).str());
    d[i] = (limit[i] - start[i] + strides[i] - 1) / strides[i];
    identity &= start[i] == 0 && limit[i] == dims(x)[i] && strides[i] == 1;
  }
  if (identity) return x;
  return emit1("stablehlo.slice", {x}, Type{dtype(x), d},
               "start_indices = " + array_attr(start) + ", limit_indices = " + array_attr(limit) +
                   ", strides = " + array_attr(strides));
}

Value Builder::slice_dim(Value x, int64_t dim, int64_t start, int64_t limit, int64_t step) {
  Dims s(rank(x), 0), l = dims(x), st(rank(x), 1);
  s[dim] = start;
  l[dim] = limit;
  st[dim] = step;
  return slice(x, s, l, st);
}

Value Builder::dynamic_slice(Value x, const std::vector<Value>& starts, const Dims& sizes) {
  check(static_cast<int64_t>(starts.size()) == rank(x) && sizes.size() == starts.size(),
        "dynamic_slice", "index rank mismatch for " + type(x).str());
  std::vector<Value> ops{x};
  ops.insert(ops.end(), starts.begin(), starts.end());
  return emit1("stablehlo.dynamic_slice", ops, Type{dtype(x), sizes},
               "slice_sizes = " + array_attr(sizes));
}

Value Builder::dynamic_update_slice(Value x, Value update, const std::vector<Value>& starts) {
  check(static_cast<int64_t>(starts.size()) == rank(x) && rank(update) == rank(x) &&
            dtype(update) == dtype(x),
        "dynamic_update_slice", "update " + type(update).str() + " does not fit " + type(x).str());
  std::vector<Value> ops{x, update};
  ops.insert(ops.end(), starts.begin(), starts.end());
  return emit1("stablehlo.dynamic_update_slice", ops, type(x));
}

Value Builder::concatenate(const std::vector<Value>& xs, int64_t dim) {
  check(!xs.empty(), "concatenate", "no operands");
  if (xs.size() == 1) return xs[0];
  Type t = type(xs[0]);
  t.dims[dim] = 0;
  for (Value x : xs) {
    check(rank(x) == t.rank() && dtype(x) == t.dtype, "concatenate",
          "operand " + type(x).str() + " does not match " + type(xs[0]).str());
    t.dims[dim] += dims(x)[dim];
  }
  return emit1("stablehlo.concatenate", xs, t, "dimension = " + std::to_string(dim) + " : i64");
}

Value Builder::pad(Value x, Value pad_value, const Dims& low, const Dims& high, const Dims& interior_in) {
  Dims interior = interior_in.empty() ? Dims(rank(x), 0) : interior_in;
  check(static_cast<int64_t>(low.size()) == rank(x) && high.size() == low.size() &&
            interior.size() == low.size() && rank(pad_value) == 0,
        "pad", "padding rank mismatch for " + type(x).str());
  Dims d(rank(x));
  bool identity = true;
  for (int64_t i = 0; i < rank(x); ++i) {
    int64_t n = dims(x)[i];
    d[i] = low[i] + high[i] + n + (n > 0 ? (n - 1) * interior[i] : 0);
    check(d[i] >= 0, "pad", "negative result size");
    identity &= low[i] == 0 && high[i] == 0 && interior[i] == 0;
  }
  if (identity) return x;
  return emit1("stablehlo.pad", {x, pad_value}, Type{dtype(x), d},
               "edge_padding_low = " + array_attr(low) + ", edge_padding_high = " +
                   array_attr(high) + ", interior_padding = " + array_attr(interior));
}

Value Builder::reverse(Value x, const Dims& d) {
  if (d.empty()) return x;
  return emit1("stablehlo.reverse", {x}, type(x), "dimensions = " + array_attr(d));
}

// ---- contractions, reductions, windows ------------------------------------------

Value Builder::dot_general(Value lhs, Value rhs, const Dims& lb, const Dims& rb, const Dims& lc,
                           const Dims& rc, DType out, bool highest_precision) {
  check(lb.size() == rb.size() && lc.size() == rc.size(), "dot_general", "dimension lists differ");
  Dims d;
  for (size_t i = 0; i < lb.size(); ++i) {
    check(dims(lhs)[lb[i]] == dims(rhs)[rb[i]], "dot_general",
          "batch sizes differ: " + type(lhs).str() + " vs " + type(rhs).str());
    d.push_back(dims(lhs)[lb[i]]);
  }
  for (size_t i = 0; i < lc.size(); ++i) {
    check(dims(lhs)[lc[i]] == dims(rhs)[rc[i]], "dot_general",
          "contracting sizes differ: " + type(lhs).str() + " vs " + type(rhs).str());
  }
  auto free_dims = [&](Value v, const Dims& batch, const Dims& contract) {
    for (int64_t i = 0; i < rank(v); ++i) {
      if (std::find(batch.begin(), batch.end(), i) == batch.end() &&
          std::find(contract.begin(), contract.end(), i) == contract.end()) {
        d.push_back(dims(v)[i]);
      }
    }
  };
  free_dims(lhs, lb, lc);
  free_dims(rhs, rb, rc);
  std::string attrs = "dot_dimension_numbers = #stablehlo.dot<";
  std::string sep;
  auto field = [&](const char* name, const Dims& v) {
    if (v.empty()) return;
    attrs += sep + name + " = " + list_attr(v);
    sep = ", ";
  };
  field("lhs_batching_dimensions", lb);
  field("rhs_batching_dimensions", rb);
  field("lhs_contracting_dimensions", lc);
  field("rhs_contracting_dimensions", rc);
  attrs += ">";
  const char* p = highest_precision ? "HIGHEST" : "DEFAULT";
  attrs += std::string(", precision_config = [#stablehlo<precision ") + p +
           ">, #stablehlo<precision " + p + ">]";
  return emit1("stablehlo.dot_general", {lhs, rhs}, Type{out, d}, attrs);
}

std::vector<Value> Builder::reduce(const std::vector<Value>& inputs, const std::vector<Value>& inits,
                                   const Dims& rdims, const RegionBody& body) {
  check(!inputs.empty() && inputs.size() == inits.size(), "reduce", "inputs and inits differ");
  Dims kept;
  for (int64_t i = 0; i < rank(inputs[0]); ++i) {
    if (std::find(rdims.begin(), rdims.end(), i) == rdims.end()) kept.push_back(dims(inputs[0])[i]);
  }
  std::vector<Type> arg_types, result_types;
  for (Value init : inits) {
    check(rank(init) == 0, "reduce", "init values must be scalars");
    arg_types.push_back(type(init));
  }
  for (Value init : inits) arg_types.push_back(type(init));
  for (Value init : inits) result_types.push_back(Type{dtype(init), kept});
  Dims sorted = rdims;
  std::sort(sorted.begin(), sorted.end());
  std::string r = region(arg_types, body);
  std::vector<Value> ops = inputs;
  ops.insert(ops.end(), inits.begin(), inits.end());
  return emit("stablehlo.reduce", ops, result_types, "dimensions = " + array_attr(sorted), {r});
}

Value Builder::reduce(Value x, Value init, const Dims& rdims, std::string_view combiner) {
  std::string op(combiner);
  return reduce({x}, {init}, rdims, [op](Builder& b, const std::vector<Value>& a) {
    return std::vector<Value>{b.binary(op, a[0], a[1])};
  })[0];
}

Value Builder::all_reduce(Value x, std::string_view combiner, const std::vector<std::vector<int64_t>>& replica_groups) {
  std::string op(combiner);
  std::string reg = region({Type{dtype(x), {}}, Type{dtype(x), {}}}, [op](Builder& b, const std::vector<Value>& a) {
    return std::vector<Value>{b.binary(op, a[0], a[1])};
  });
  const size_t width = replica_groups.empty() ? 0 : replica_groups[0].size();
  std::string groups = "dense<[";
  for (size_t g = 0; g < replica_groups.size(); ++g) {
    check(replica_groups[g].size() == width, "all_reduce", "replica groups of different sizes");
    if (g) groups += ", ";
    groups += "[";
    for (size_t k = 0; k < width; ++k) groups += (k ? ", " : "") + std::to_string(replica_groups[g][k]);
    groups += "]";
  }
  groups += "]> : tensor<" + std::to_string(replica_groups.size()) + "x" + std::to_string(width) + "xi64>";
  return emit1("stablehlo.all_reduce", {x}, type(x), "replica_groups = " + groups, {reg});
}

Value Builder::reduce_window(Value x, Value init, const Dims& window, const Dims& strides,
                             const Dims& base_dilation, const Dims& window_dilation,
                             const std::vector<std::pair<int64_t, int64_t>>& padding,
                             std::string_view combiner) {
  const size_t r = static_cast<size_t>(rank(x));
  check(window.size() == r && strides.size() == r && base_dilation.size() == r &&
            window_dilation.size() == r && padding.size() == r,
        "reduce_window", "attribute rank mismatch for " + type(x).str());
  Dims d(r);
  for (size_t i = 0; i < r; ++i) {
    int64_t base = dims(x)[i] == 0 ? 0 : (dims(x)[i] - 1) * base_dilation[i] + 1;
    int64_t padded = base + padding[i].first + padding[i].second;
    int64_t win = (window[i] - 1) * window_dilation[i] + 1;
    d[i] = padded < win ? 0 : (padded - win) / strides[i] + 1;
  }
  std::string op(combiner);
  std::string reg = region({Type{dtype(init), {}}, Type{dtype(init), {}}},
                           [op](Builder& b, const std::vector<Value>& a) {
                             return std::vector<Value>{b.binary(op, a[0], a[1])};
                           });
  std::string attrs = "window_dimensions = " + array_attr(window) +
                      ", window_strides = " + array_attr(strides) +
                      ", base_dilations = " + array_attr(base_dilation) +
                      ", window_dilations = " + array_attr(window_dilation) +
                      ", padding = " + padding_attr(padding);
  return emit1("stablehlo.reduce_window", {x, init}, Type{dtype(init), d}, attrs, {reg});
}

std::vector<Value> Builder::sort(const std::vector<Value>& inputs, int64_t dim, bool stable,
                                 const RegionBody& comparator) {
  std::vector<Type> arg_types, result_types;
  for (Value v : inputs) {
    arg_types.push_back(Type{dtype(v), {}});
    arg_types.push_back(Type{dtype(v), {}});
    result_types.push_back(type(v));
  }
  std::string r = region(arg_types, comparator);
  return emit("stablehlo.sort", inputs, result_types,
              "dimension = " + std::to_string(dim) + " : i64, is_stable = " +
                  (stable ? "true" : "false"),
              {r});
}

Value Builder::convolution(Value lhs, Value rhs, const Dims& strides,
                           const std::vector<std::pair<int64_t, int64_t>>& padding,
                           const Dims& lhs_dilation, const Dims& rhs_dilation,
                           int64_t feature_groups, int64_t batch_groups, DType out) {
  const int64_t nsp = rank(lhs) - 2;
  check(nsp >= 1 && rank(rhs) == rank(lhs) && static_cast<int64_t>(strides.size()) == nsp &&
            static_cast<int64_t>(padding.size()) == nsp,
        "convolution", "rank mismatch: " + type(lhs).str() + " * " + type(rhs).str());
  Dims d{dims(lhs)[0] / batch_groups, dims(rhs)[0]};
  std::string spatial;
  for (int64_t i = 0; i < nsp; ++i) {
    int64_t in = dims(lhs)[2 + i];
    int64_t in_d = in == 0 ? 0 : (in - 1) * lhs_dilation[i] + 1;
    int64_t k = (dims(rhs)[2 + i] - 1) * rhs_dilation[i] + 1;
    int64_t padded = in_d + padding[i].first + padding[i].second;
    d.push_back(padded < k ? 0 : (padded - k) / strides[i] + 1);
    spatial += ", " + std::to_string(i);
  }
  std::string attrs = "batch_group_count = " + std::to_string(batch_groups) +
                      " : i64, dimension_numbers = #stablehlo.conv<[b, f" + spatial + "]x[o, i" +
                      spatial + "]->[b, f" + spatial + "]>, feature_group_count = " +
                      std::to_string(feature_groups) + " : i64, lhs_dilation = " +
                      array_attr(lhs_dilation) + ", padding = " + padding_attr(padding) +
                      ", rhs_dilation = " + array_attr(rhs_dilation) +
                      ", window_strides = " + array_attr(strides) +
                      ", precision_config = [#stablehlo<precision HIGHEST>, #stablehlo<precision HIGHEST>]";
  return emit1("stablehlo.convolution", {lhs, rhs}, Type{out, d}, attrs);
}

// ---- indexing -----------------------------------------------------------------

Value Builder::gather(Value operand, Value indices, const GatherDims& dn, const Dims& slice_sizes,
                      const Dims& result_dims) {
  // Nothing to gather, or nothing to gather from (XLA rejects a slice of a
  // zero-size operand; any index into one is out of range, which the
  // lowering's own checks report): the result is zeros of its type.
  if (Type{dtype(operand), result_dims}.numel() == 0 || type(operand).numel() == 0) {
    return zeros(Type{dtype(operand), result_dims});
  }
  std::string attrs = "dimension_numbers = #stablehlo.gather<";
  std::string sep;
  auto field = [&](const char* name, const Dims& v) {
    if (v.empty()) return;
    attrs += sep + name + " = " + list_attr(v);
    sep = ", ";
  };
  field("offset_dims", dn.offset_dims);
  field("collapsed_slice_dims", dn.collapsed_slice_dims);
  field("operand_batching_dims", dn.operand_batching_dims);
  field("start_indices_batching_dims", dn.start_indices_batching_dims);
  field("start_index_map", dn.start_index_map);
  attrs += sep + "index_vector_dim = " + std::to_string(dn.index_vector_dim) + ">";
  attrs += ", indices_are_sorted = false, slice_sizes = " + array_attr(slice_sizes);
  return emit1("stablehlo.gather", {operand, indices}, Type{dtype(operand), result_dims}, attrs);
}

Value Builder::scatter(Value operand, Value indices, Value updates, const ScatterDims& dn,
                       const RegionBody& combiner) {
  std::string attrs = "scatter_dimension_numbers = #stablehlo.scatter<";
  std::string sep;
  auto field = [&](const char* name, const Dims& v) {
    if (v.empty()) return;
    attrs += sep + name + " = " + list_attr(v);
    sep = ", ";
  };
  field("update_window_dims", dn.update_window_dims);
  field("inserted_window_dims", dn.inserted_window_dims);
  field("input_batching_dims", dn.input_batching_dims);
  field("scatter_indices_batching_dims", dn.scatter_indices_batching_dims);
  field("scatter_dims_to_operand_dims", dn.scatter_dims_to_operand_dims);
  attrs += sep + "index_vector_dim = " + std::to_string(dn.index_vector_dim) + ">";
  attrs += ", indices_are_sorted = false, unique_indices = false";
  // No updates, or nothing to update: the operand as it is.
  if (type(updates).numel() == 0 || type(operand).numel() == 0) return operand;
  Type scalar{dtype(operand), {}};
  RegionBody body = combiner ? combiner : RegionBody([](Builder&, const std::vector<Value>& a) {
    return std::vector<Value>{a[1]};
  });
  std::string r = region({scalar, scalar}, body);
  return emit1("stablehlo.scatter", {operand, indices, updates}, type(operand), attrs, {r});
}

std::vector<Value> Builder::while_loop(const std::vector<Value>& init, const RegionBody& cond,
                                      const RegionBody& body) {
  std::vector<Type> types;
  for (Value v : init) types.push_back(type(v));
  std::string c = region(types, cond);
  std::string bd = region(types, body);
  return emit("stablehlo.while", init, types, {}, {c, bd});
}

// ---- random -----------------------------------------------------------------------

std::pair<Value, Value> Builder::rng_bit_generator(Value state, const Type& bits, RngAlgorithm alg) {
  const char* name = alg == RngAlgorithm::ThreeFry ? "THREE_FRY"
                     : alg == RngAlgorithm::Philox ? "PHILOX"
                                                   : "DEFAULT";
  auto r = emit("stablehlo.rng_bit_generator", {state}, {type(state), bits},
                std::string("rng_algorithm = #stablehlo<rng_algorithm ") + name + ">");
  return {r[0], r[1]};
}

}  // namespace tpu::hlo
