#include "csrc/aten/eager.h"

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <cstdio>
#include <cstring>

#include "csrc/aten/generator.h"
#include "csrc/exec/runtime.h"
#include "csrc/lowering/lowering.h"

namespace tpu {

using hlo::DType;
using hlo::Type;
using hlo::Value;
using lowering::to_aten;
using lowering::to_hlo;

namespace {

// A complex rank-1 value as its interleaved (real, imag) parts, and back.
Value complex_to_pairs(hlo::Builder& b, Value flat) {
  const int64_t n = b.dims(flat)[0];
  Value re = b.reshape(b.real(flat), {n, 1}), im = b.reshape(b.imag(flat), {n, 1});
  return b.reshape(b.concatenate({re, im}, 1), {2 * n});
}

Value pairs_to_complex(hlo::Builder& b, Value flat) {
  const int64_t n = b.dims(flat)[0] / 2;
  Value pairs = b.reshape(b.slice(flat, {0}, {2 * n}), {n, 2});
  return b.complex(b.reshape(b.slice_dim(pairs, 1, 0, 1), {n}), b.reshape(b.slice_dim(pairs, 1, 1, 2), {n}));
}

// Bytes of `flat` as ui8[n * width].
Value to_bytes(hlo::Builder& b, Value flat) {
  if (hlo::is_complex(b.dtype(flat))) flat = complex_to_pairs(b, flat);
  const DType dt = b.dtype(flat);
  if (dt == DType::U8) return flat;
  if (dt == DType::Pred || dt == DType::I8) return b.convert(flat, DType::U8);
  const int64_t n = b.dims(flat)[0];
  Value bytes = b.bitcast_convert(flat, DType::U8);  // [n, width]
  return b.reshape(bytes, {n * hlo::byte_width(dt)});
}

Value from_bytes(hlo::Builder& b, Value bytes, DType to) {
  if (hlo::is_complex(to)) return pairs_to_complex(b, from_bytes(b, bytes, hlo::real_type(to)));
  if (to == DType::U8) return bytes;
  if (to == DType::Pred) {
    return b.compare(hlo::Cmp::NE, bytes, b.zeros(b.type(bytes)));
  }
  if (to == DType::I8) return b.bitcast_convert(bytes, to);
  const int64_t w = hlo::byte_width(to);
  int64_t n = b.dims(bytes)[0] / w;
  if (n * w != b.dims(bytes)[0]) bytes = b.slice(bytes, {0}, {n * w});
  return b.bitcast_convert(b.reshape(bytes, {n, w}), to);
}

uint64_t scalar_bits(const c10::Scalar& s, DType dtype) {
  uint64_t bits = 0;
  auto put = [&](auto v) { std::memcpy(&bits, &v, sizeof(v)); };
  const bool is_float_scalar = s.isFloatingPoint();
  switch (dtype) {
    case DType::Pred: put(static_cast<uint8_t>(s.toBool() ? 1 : 0)); break;
    case DType::F64: put(s.toDouble()); break;
    case DType::F32: put(static_cast<float>(s.toDouble())); break;
    case DType::F16: put(c10::Half(static_cast<float>(s.toDouble())).x); break;
    case DType::BF16: put(c10::BFloat16(static_cast<float>(s.toDouble())).x); break;
    case DType::C64: {
      const c10::complex<double> z = s.toComplexDouble();
      const float parts[2] = {static_cast<float>(z.real()), static_cast<float>(z.imag())};
      std::memcpy(&bits, parts, 8);
      break;
    }
    default: {
      TORCH_CHECK(hlo::is_int(dtype), "tpu: cannot pass a ", s.type(), " scalar as ",
                  hlo::mlir_name(dtype));
      // C conversion semantics (truncation toward zero, two's complement wrap).
      int64_t v = is_float_scalar ? static_cast<int64_t>(s.toDouble())
                  : s.isBoolean()  ? static_cast<int64_t>(s.toBool())
                                   : s.toLong();
      bits = static_cast<uint64_t>(v);
      const int w = hlo::bit_width(dtype);
      if (w < 64) bits &= (uint64_t{1} << w) - 1;
    }
  }
  return bits;
}

}  // namespace

Value reinterpret_flat(hlo::Builder& b, Value flat, DType to) {
  const DType from = b.dtype(flat);
  if (from == to) return flat;
  if (hlo::is_complex(from) && to == hlo::real_type(from)) return complex_to_pairs(b, flat);
  if (hlo::is_complex(to) && from == hlo::real_type(to)) return pairs_to_complex(b, flat);
  if (hlo::byte_width(from) == hlo::byte_width(to) && from != DType::Pred && to != DType::Pred &&
      !hlo::is_complex(from) && !hlo::is_complex(to)) {
    return b.bitcast_convert(flat, to);
  }
  return from_bytes(b, to_bytes(b, flat), to);
}

EagerProgram::Slot& EagerProgram::slot_for(const at::Tensor& t) {
  c10::StorageImpl* impl = t.storage().unsafeGetStorageImpl();
  for (Slot& s : slots_) {
    if (s.storage.unsafeGetStorageImpl() == impl) return s;
  }
  Slot s;
  s.storage = t.storage();
  s.tpu = &storage_of(s.storage);
  TpuStorage::Value snapshot = s.tpu->raw_value();
  if (snapshot.deferred && !(fused() && snapshot.deferred->pending_in(&exec::Runtime::get().graph(device_)))) {
    snapshot = s.tpu->value();  // materialize: runs the graph it waits in
  }
  if (snapshot.buffer || snapshot.deferred) {
    s.type = snapshot.type;
    Value p = b_.param(s.type);
    s.param = b_.num_params() - 1;
    args_.push_back({std::move(snapshot.buffer), std::move(snapshot.deferred), s.type});
    s.full = p;
    s.flat = b_.reshape(p, {s.type.numel()});
    s.flat_dtype = s.type.dtype;
  } else {
    // Never written: zeros, in the dtype of the first access.
    const DType dt = to_hlo(t.scalar_type());
    const int64_t n = static_cast<int64_t>(s.tpu->nbytes()) / hlo::byte_width(dt);
    s.flat = b_.zeros(Type{dt, {n}});
    s.flat_dtype = dt;
  }
  slots_.push_back(std::move(s));
  return slots_.back();
}

Value EagerProgram::flat_as(Slot& s, DType dtype) {
  return s.flat_dtype == dtype ? s.flat : reinterpret_flat(b_, s.flat, dtype);
}

exec::Offset EagerProgram::offset_of(const at::Tensor& t) {
  exec::Offset off;
  off.value = t.storage_offset();
  if (off.value != 0) off.dynamic = scalar(c10::Scalar(off.value), DType::I64);
  return off;
}

Value EagerProgram::input(const at::Tensor& t) {
  TORCH_CHECK(t.defined(), "tpu: an op received an undefined tensor");
  if (t.device().is_cpu()) {
    TORCH_CHECK(t.dim() == 0,
                "Expected all tensors to be on the same device, but found at least two devices, "
                "tpu:", device_, " and cpu! (move the CPU tensor with .to('tpu'))");
    return scalar(t.item(), to_hlo(t.scalar_type()));
  }
  TORCH_CHECK(t.device().type() == c10::DeviceType::PrivateUse1 && t.device().index() == device_,
              "Expected all tensors to be on the same device, but found at least two devices, tpu:",
              device_, " and ", t.device(), "!");
  Slot& s = slot_for(t);
  const DType dt = to_hlo(t.scalar_type());
  const Type& st = s.type;
  Value v;
  if (!s.written && s.param >= 0 && st.dtype == dt && t.storage_offset() == 0 &&
      t.sizes().vec() == st.dims && t.is_contiguous()) {
    v = s.full;  // the storage value itself
  } else {
    v = exec::read_strided(b_, flat_as(s, dt), t.sizes().vec(), t.strides().vec(), offset_of(t));
  }
  return apply_math_bits(t, v);
}

// Conjugate and negative views (x.conj(), x.imag of a conjugate) carry a bit
// instead of new data: reading applies it, writing applies its inverse.
Value EagerProgram::apply_math_bits(const at::Tensor& t, Value v) {
  if (t.is_conj() && hlo::is_complex(b_.dtype(v))) v = b_.complex(b_.real(v), b_.neg(b_.imag(v)));
  if (t.is_neg()) v = b_.neg(v);
  return v;
}

Value EagerProgram::scalar(const c10::Scalar& s, DType dtype) {
  if (dtype == DType::C128) {  // 16 bytes: two f64 operands
    const c10::complex<double> z = s.toComplexDouble();
    return b_.complex(scalar(z.real(), DType::F64), scalar(z.imag(), DType::F64));
  }
  Value v = b_.param(Type{dtype, {}});
  args_.push_back({exec::Runtime::get().scalar_buffer(dtype, scalar_bits(s, dtype), device_), nullptr,
                   Type{dtype, {}}});
  return v;
}

Value EagerProgram::rng_key(const std::optional<at::Generator>& gen) {
  at::Generator g = gen.has_value() && gen->defined()
                        ? *gen
                        : default_generator(static_cast<c10::DeviceIndex>(device_));
  std::pair<uint64_t, uint64_t> key;
  {
    std::lock_guard<std::mutex> lock(g.mutex());
    key = at::check_generator<TpuGenerator>(g)->next_key();
  }
  uint64_t words[2] = {key.first, key.second};
  Value v = b_.param(Type{DType::U64, {2}});
  const auto& rt = exec::Runtime::get();
  args_.push_back(
      {rt.client().from_host(words, exec::to_pjrt(DType::U64), {2}, rt.device(device_)), nullptr, Type{DType::U64, {2}}});
  return v;
}

void EagerProgram::assign(const at::Tensor& dst, Value value) {
  TORCH_CHECK(dst.device().type() == c10::DeviceType::PrivateUse1 && dst.device().index() == device_,
              "tpu: cannot write a tpu:", device_, " result into a tensor on ", dst.device());
  Slot& s = slot_for(dst);
  const DType dt = to_hlo(dst.scalar_type());
  value = apply_math_bits(dst, value);  // both bits are involutions
  Value flat = flat_as(s, dt);
  s.flat = exec::write_strided(b_, flat, value, dst.sizes().vec(), dst.strides().vec(),
                               offset_of(dst));
  s.flat_dtype = dt;
  s.written = true;
  const bool covers = dst.storage_offset() == 0 && dst.is_contiguous() &&
                      static_cast<size_t>(dst.numel()) * dst.element_size() == s.tpu->nbytes();
  s.full = covers ? value : Value{};
}

bool EagerProgram::fused() const { return exec::Runtime::get().mode() == exec::ExecutionMode::Fused; }

std::vector<pjrt::c::PJRT_Buffer*> EagerProgram::raw_args() {
  std::vector<pjrt::c::PJRT_Buffer*> raw;
  raw.reserve(args_.size());
  for (auto& a : args_) {
    if (!a.buffer) {
      a.buffer = a.deferred->resolve();  // a value still in the fused graph: run it
      a.deferred.reset();
    }
    raw.push_back(a.buffer->raw());
  }
  return raw;
}

int64_t EagerProgram::evaluate_int(Value v) {
  Value as_i64 = b_.convert(v, DType::I64);
  std::vector<pjrt::c::PJRT_Buffer*> raw = raw_args();
  auto outs = exec::Runtime::get().run(b_.module({as_i64}), raw, device_);
  int64_t result = 0;
  outs[0]->to_host(&result, sizeof(result));
  return result;
}

const std::string& EagerProgram::text(const std::vector<Value>& outputs) {
  // Invalid values are undefined results (e.g. masked-off gradients).
  std::vector<Value> all;
  for (Value v : outputs) {
    if (v.valid()) all.push_back(v);
  }
  outputs_ = outputs;
  written_.clear();
  for (size_t i = 0; i < slots_.size(); ++i) {
    Slot& s = slots_[i];
    if (!s.written) continue;
    Value out = s.full.valid() ? s.full : s.flat;
    // Donate the old buffer when nothing else can still read it: the storage
    // and this program's argument are its only owners, and the new value has
    // its type.
    // (Fused eager donates when the whole graph runs instead.)
    if (!fused() && s.param >= 0 && args_[s.param].buffer && args_[s.param].buffer.use_count() <= 2 &&
        b_.type(out) == s.type) {
      b_.alias(s.param, static_cast<int>(all.size()));
    }
    written_.push_back(i);
    all.push_back(out);
  }
  for (const auto& [ok, message] : checks_) all.push_back(ok);
  text_ = b_.module(all);
  text_hash_.reset();
  all_outputs_ = std::move(all);
  return text_;
}

uint64_t EagerProgram::fingerprint() {
  if (!text_hash_) text_hash_ = exec::fingerprint64(text_);
  return *text_hash_;
}

std::vector<at::Tensor> EagerProgram::defer() {
  exec::DeferredGraph& graph = exec::Runtime::get().graph(device_);
  std::string name = "op_";
  {
    char buf[17];
    snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(fingerprint()));
    name += buf;
  }
  std::vector<Type> types;
  types.reserve(all_outputs_.size());
  for (Value v : all_outputs_) types.push_back(b_.type(v));
  std::vector<exec::DeferredPtr> outs =
      graph.record(name, [&] { return b_.function(name, all_outputs_); }, args_, types);
  args_.clear();  // the graph holds what it needs
  return deliver(
      outs, [&](const exec::DeferredPtr& d, const Type& t) { return tensor_from_deferred(d, to_aten(t.dtype), device_); },
      [](Slot& s, const exec::DeferredPtr& d) { s.tpu->set_deferred(d); },
      [&](const exec::DeferredPtr& d, const std::string& message) { graph.add_check(d, message); });
}

template <typename Out, typename MakeTensor, typename Store, typename Check>
std::vector<at::Tensor> EagerProgram::deliver(const std::vector<Out>& outs, MakeTensor make_tensor, Store store,
                                              Check check) {
  std::vector<at::Tensor> results;
  results.reserve(outputs_.size());
  size_t next = 0;
  for (Value v : outputs_) {
    if (!v.valid()) {
      results.emplace_back();
      continue;
    }
    results.push_back(make_tensor(outs[next++], b_.type(v)));
  }
  for (size_t k = 0; k < written_.size(); ++k) store(slots_[written_[k]], outs[next + k]);
  next += written_.size();
  for (size_t k = 0; k < checks_.size(); ++k) {
    try {
      check(outs[next + k], checks_[k].second);
    } catch (const exec::CheckFailure& e) {
      TORCH_CHECK_INDEX(false, e.what());
    }
  }
  return results;
}

std::vector<at::Tensor> EagerProgram::run() {
  if (fused()) return defer();
  std::vector<pjrt::c::PJRT_Buffer*> raw = raw_args();
  std::vector<pjrt::BufferPtr> outs = exec::Runtime::get().run(text_, raw, device_);
  return deliver(
      outs, [&](const pjrt::BufferPtr& b, const Type& t) { return tensor_from_buffer(b, t, to_aten(t.dtype), device_); },
      [&](Slot& s, const pjrt::BufferPtr& b) { s.tpu->set_value(b, b_.type(s.full.valid() ? s.full : s.flat)); },
      [&](const pjrt::BufferPtr& b, const std::string& message) { exec::Runtime::get().add_check(device_, b, message); });
}

}  // namespace tpu
