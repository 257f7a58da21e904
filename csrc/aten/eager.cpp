#include "csrc/aten/eager.h"

#include "csrc/aten/executor_scope.h"

#include <ATen/native/Resize.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Float8_e4m3fn.h>
#include <c10/util/Float8_e4m3fnuz.h>
#include <c10/util/Float8_e5m2.h>
#include <c10/util/Float8_e5m2fnuz.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <numeric>
#include <cstring>
#include <mutex>

#include "csrc/aten/generator.h"
#include "csrc/aten/op_memo.h"
#include "csrc/exec/launcher.h"
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
    // (checked as CPU's kernels check a scalar: one out of range is an error)
    case DType::F8E4M3FN: put(s.to<c10::Float8_e4m3fn>().x); break;
    case DType::F8E5M2: put(s.to<c10::Float8_e5m2>().x); break;
    case DType::F8E4M3FNUZ: put(s.to<c10::Float8_e4m3fnuz>().x); break;
    case DType::F8E5M2FNUZ: put(s.to<c10::Float8_e5m2fnuz>().x); break;
    case DType::C64: {
      const c10::complex<double> z = s.toComplexDouble();
      const float parts[2] = {static_cast<float>(z.real()), static_cast<float>(z.imag())};
      std::memcpy(&bits, parts, 8);
      break;
    }
    default: {
      TORCH_CHECK(hlo::is_int(dtype), "tpu: cannot pass a ", s.type(), " scalar as ",
                  hlo::mlir_name(dtype));
      // C conversion semantics (truncation toward zero, two's complement
      // wrap): a Python int in [2**63, 2**64) is a uint64 Scalar, and
      // x.add_(2**63) wraps it as CPU does.
      int64_t v = is_float_scalar                ? static_cast<int64_t>(s.toDouble())
                  : s.isBoolean()                ? static_cast<int64_t>(s.toBool())
                  : s.type() == at::kUInt64      ? static_cast<int64_t>(s.toUInt64())
                                                 : s.toLong();
      bits = static_cast<uint64_t>(v);
      const int w = hlo::bit_width(dtype);
      if (w < 64) bits &= (uint64_t{1} << w) - 1;
    }
  }
  return bits;
}

c10::Scalar host_number(const at::Tensor& t) {
  // A CPU number read in place (item() goes through the dispatcher: a few
  // hundred instructions on every op with a Python number operand).
  if (t.device().is_cpu() && t.numel() == 1 && !t.is_conj() && !t.is_neg()) {
    const void* p = t.const_data_ptr();
    switch (t.scalar_type()) {
      case at::kDouble: return *static_cast<const double*>(p);
      case at::kFloat: return *static_cast<const float*>(p);
      case at::kLong: return *static_cast<const int64_t*>(p);
      case at::kInt: return *static_cast<const int32_t*>(p);
      case at::kBool: return *static_cast<const bool*>(p);
      case at::kComplexDouble: return *static_cast<const c10::complex<double>*>(p);
      default: break;
    }
  }
  return t.item();
}

c10::Scalar number_of(const c10::IValue& v) { return v.isTensor() ? host_number(v.toTensor()) : v.toScalar(); }

TpuStorage::Value operand_value(TpuStorage& s, int device) {
  TpuStorage::Value v = s.raw_value();
  if (v.deferred) {
    // A value of the thread's fused graph stays there, and one the launcher
    // makes is taken as it is by strict eager's next program (queued after
    // it); anything else is run first.
    exec::Executor& ex = current_executor();
    const bool stays = ex.fused() ? v.deferred->pending_in(&ex.graph(device))
                                  : v.deferred->launched() && !ex.waits() && exec::Launcher::enabled();
    if (!stays) v = s.value();  // runs the graph it waits in
  }
  return v;
}

namespace {

using Origin = exec::Origin;

exec::ProgramArg scalar_operand(DType dtype, uint64_t bits, int device) {
  return {exec::Runtime::get().scalar_buffer(dtype, bits, device), nullptr, Type{dtype, {}}, {Origin::Kind::Constant}};
}

// A number read from CPU scalar tensor `t` (a captured graph reads it again
// at its next call; a wrapped Python number is a constant of the graph).
Origin host_origin(const at::Tensor& t, DType dtype, int part) {
  const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  if (impl->is_wrapped_number()) return {Origin::Kind::Constant};
  Origin o{Origin::Kind::HostTensor, static_cast<int8_t>(part), dtype, impl};
  return o;
}

Origin storage_origin(const at::Tensor& t) {
  return {Origin::Kind::Storage, -1, DType::F32, t.storage().unsafeGetStorageImpl()};
}

exec::ProgramArg rng_operand(const std::optional<at::Generator>& gen, int device, uint64_t count) {
  at::Generator g = gen.has_value() && gen->defined() ? *gen
                                                      : default_generator(static_cast<c10::DeviceIndex>(device));
  std::pair<uint64_t, uint64_t> key;
  {
    std::lock_guard<std::mutex> lock(g.mutex());
    key = at::check_generator<TpuGenerator>(g)->next_key(count);
  }
  uint64_t words[2] = {key.first, key.second};
  const auto& rt = exec::Runtime::get();
  const Type type{DType::U64, {2}};
  // An explicit generator's keys are not bound again (its state is the caller's).
  Origin origin{gen.has_value() && gen->defined() ? Origin::Kind::Unknown : Origin::Kind::Rng};
  origin.count = count;
  return {rt.client().from_host(words, exec::to_pjrt(DType::U64), {2}, rt.device(device)), nullptr, type, origin};
}

}  // namespace

exec::ProgramArg rng_key_operand(int device, uint64_t count) { return rng_operand(std::nullopt, device, count); }

namespace {

// The argument (or list entry) a parameter source names.
const c10::IValue& arg_at(c10::ArrayRef<c10::IValue> args, const ParamSource& src) {
  const c10::IValue& a = args[src.index];
  return src.element >= 0 ? a.toListRef()[src.element] : a;
}

std::vector<pjrt::c::PJRT_Buffer*> raw_args(std::vector<exec::ProgramArg>& args) {
  std::vector<pjrt::c::PJRT_Buffer*> raw;
  raw.reserve(args.size());
  for (auto& a : args) {
    if (!a.buffer) {
      a.buffer = a.deferred->resolve();  // a value still in the fused graph: run it
      a.deferred.reset();
    }
    raw.push_back(a.buffer->raw());
  }
  return raw;
}

// Hands a plan's outputs (in its order: results, written storages, checks)
// to the checks, new tensors and the written storages. The results depend
// on the op's checks and on those of what it read; a guarded written
// storage kept its value if a check failed, so only one read raises it.
// Debug eager raises a failed check here, once the written storages hold
// their values (a donated buffer is gone).
template <typename Out, typename MakeTensor, typename Store, typename Check>
std::vector<at::Tensor> deliver(const ProgramPlan& plan, const BoundProgram& bound, const std::vector<Out>& outs,
                                MakeTensor make_tensor, Store store, Check check) {
  const size_t first_check = outs.size() - plan.checks.size();
  std::vector<exec::CheckPtr> own;
  own.reserve(plan.checks.size());
  const std::vector<std::string>& messages = bound.messages.empty() ? plan.checks : bound.messages;
  for (size_t k = 0; k < plan.checks.size(); ++k) own.push_back(check(outs[first_check + k], messages[k]));
  // (Without checks of its own, the op's values all carry what it read.)
  exec::Checks guards = bound.checks;
  exec::Checks guards_once;
  if (!own.empty()) {
    guards_once = guards;
    exec::merge_checks(guards, own);
    exec::merge_checks(guards_once, own, /*once=*/true);
  }
  std::vector<at::Tensor> results;
  results.reserve(plan.results.size());
  size_t next = 0;
  for (size_t k = 0; k < plan.results.size(); ++k) {
    const int r = plan.results[k];
    if (r < 0) {
      results.emplace_back();
      continue;
    }
    results.push_back(make_tensor(outs[r], plan.output_types[r], plan.result_sizes[k], plan.result_strides[k], guards));
    ++next;
  }
  for (size_t k = 0; k < plan.written.size(); ++k, ++next) {
    const bool guarded = !own.empty() && k < plan.guarded.size() && plan.guarded[k];
    store(*bound.written[k], outs[next], plan.output_types[next], guarded ? guards_once : guards);
  }
  std::vector<exec::DeviceCheck*> now;
  for (const exec::CheckPtr& c : own) {
    if (!c->asynchronous()) now.push_back(c.get());
  }
  exec::DeviceCheck::read_all(now);
  for (const exec::CheckPtr& c : own) {
    if (!c->asynchronous() && c->failed()) {
      c->reported = true;
      raise_check_failure(c->error());
    }
  }
  return results;
}

}  // namespace

void raise_check_failure(const exec::CheckFailure& e) {
  if (e.is_index_error()) TORCH_CHECK_INDEX(false, e.what());
  if (e.is_linalg_error()) TORCH_CHECK_LINALG(false, e.message());
  TORCH_CHECK(false, e.message());
}

const ProgramPlan::Variant& ProgramPlan::variant(const std::vector<bool>& mask) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const Variant& v : variants_) {
    if (v.mask == mask) return v;
  }
  std::vector<std::pair<int, int>> chosen;
  for (size_t k = 0; k < mask.size(); ++k) {
    if (mask[k]) chosen.push_back(donations[k]);
  }
  Variant v;
  v.mask = mask;
  v.text = chosen.empty() ? text : builder->module(outputs, chosen);
  v.key = exec::program_key(v.text);
  variants_.push_back(std::move(v));
  return variants_.back();
}

namespace {

// Whether the old value `a` of a written storage can be donated: nothing
// but the storage and this call holds it.
bool donatable(const exec::ProgramArg& a) {
  if (a.buffer) return a.buffer.use_count() <= 2 && a.buffer->donatable();
  return a.deferred && a.deferred->launched() && a.deferred.use_count() <= 2 && a.deferred->sole_holder_of_buffer();
}

// Which of `plan`'s donations to make: those of old values nothing else can
// still read. Decided as if every program queued on the launcher had
// started and let go of its arguments (as when programs start on the
// calling thread), so that the program, and so the executable cache, never
// depends on how far behind the launcher is. (Fused eager donates when the
// whole graph runs instead.)
std::vector<bool> donation_mask(const ProgramPlan& plan, const std::vector<exec::ProgramArg>& args) {
  std::vector<bool> mask(plan.donations.size());
  bool doubt = false;
  for (size_t k = 0; k < mask.size(); ++k) {
    mask[k] = donatable(args[plan.donations[k].first]);
    doubt = doubt || !mask[k];
  }
  if (doubt && exec::Launcher::busy()) {  // its references may be what holds a value
    exec::Launcher::drain();
    for (size_t k = 0; k < mask.size(); ++k) mask[k] = donatable(args[plan.donations[k].first]);
  }
  return mask;
}

}  // namespace

std::vector<at::Tensor> launch(const std::shared_ptr<const ProgramPlan>& kept, BoundProgram& bound, int device) {
  const ProgramPlan& plan = *kept;
  auto& rt = exec::Runtime::get();
  exec::Executor& ex = current_executor();
  // A result that is a value still to be computed (fused eager), or still
  // to be started (the launcher thread).
  auto deferred_tensor = [&](const exec::DeferredPtr& d, const Type& t, const hlo::Dims& sizes,
                             const std::vector<int64_t>& strides, const exec::Checks& checks) {
    return tensor_from_deferred(d, sizes, to_aten(t.dtype), device, strides, checks);
  };
  if (ex.fused()) {
    exec::DeferredGraph& graph = ex.graph(device);
    std::vector<exec::DeferredPtr> outs = graph.record(plan.function, bound.args);
    bound.args.clear();  // the graph holds what it needs
    return deliver(
        plan, bound, outs, deferred_tensor,
        [&](TpuStorage& s, const exec::DeferredPtr& d, const Type&, const exec::Checks& checks) {
          const TpuStorage::Value old = s.raw_value();
          graph.replaced(old.buffer, old.deferred, d);
          s.set_deferred(d, checks);
        },
        [&](const exec::DeferredPtr& d, const std::string& message) { return graph.add_check(d, message); });
  }
  const ProgramPlan::Variant& program = plan.variant(donation_mask(plan, bound.args));
  const bool wait = ex.waits();
  if (!wait && exec::Launcher::enabled() && !exec::Launcher::get().start_here()) {
    // Started by the launcher thread (launcher.h); the results are its values.
    pjrt::ExecutablePtr exe = rt.cache().get_or_compile(program.key, [&] { return program.text; }, rt.compile_options());
    rt.count_execution();
    std::vector<exec::DeferredPtr> outs =
        exec::Launcher::get().launch(rt, plan.function, std::move(exe), std::move(bound.args), device);
    return deliver(
        plan, bound, outs, deferred_tensor,
        [](TpuStorage& s, const exec::DeferredPtr& d, const Type&, const exec::Checks& checks) { s.set_deferred(d, checks); },
        [&](const exec::DeferredPtr& d, const std::string& message) { return rt.add_check(device, d, message); });
  }
  std::vector<pjrt::c::PJRT_Buffer*> raw = raw_args(bound.args);
  std::vector<pjrt::BufferPtr> outs = rt.run(program.key, [&] { return program.text; }, raw, device, wait);
  return deliver(
      plan, bound, outs,
      [&](const pjrt::BufferPtr& b, const Type& t, const hlo::Dims& sizes, const std::vector<int64_t>& strides,
          const exec::Checks& checks) { return tensor_from_buffer(b, t, sizes, to_aten(t.dtype), device, strides, checks); },
      [](TpuStorage& s, const pjrt::BufferPtr& b, const Type& t, const exec::Checks& checks) { s.set_value(b, t, checks); },
      [&](const pjrt::BufferPtr& b, const std::string& message) { return rt.add_check(device, b, message, wait); });
}

BoundProgram bind_plan(const ProgramPlan& plan, const OpSignature& sig, c10::ArrayRef<c10::IValue> args, int device) {
  for (const ProgramPlan::Resize& r : plan.resizes) {
    const c10::IValue& a = args[r.arg];
    at::native::resize_output((r.element >= 0 ? a.toListRef()[r.element] : a).toTensor(), r.sizes);
  }
  BoundProgram bound;
  bound.args.reserve(plan.params.size());
  for (const ParamSource& src : plan.params) {
    switch (src.kind) {
      case ParamSource::Kind::Storage: {
        const at::Tensor& t = sig.group_tensor(src.index);
        TpuStorage::Value v = operand_value(storage_of(t), device);
        exec::merge_checks(bound.checks, v.checks);
        bound.args.push_back({std::move(v.buffer), std::move(v.deferred), std::move(v.type), storage_origin(t)});
        break;
      }
      case ParamSource::Kind::Arg: {
        const c10::IValue& a = arg_at(args, src);
        c10::Scalar s = number_of(a);
        if (src.part >= 0) s = src.part == 0 ? s.toComplexDouble().real() : s.toComplexDouble().imag();
        bound.args.push_back(scalar_operand(src.dtype, scalar_bits(s, src.dtype), device));
        if (a.isTensor()) bound.args.back().origin = host_origin(a.toTensor(), src.dtype, src.part);
        break;
      }
      case ParamSource::Kind::Constant:
        bound.args.push_back(scalar_operand(src.dtype, src.bits, device));
        break;
      case ParamSource::Kind::Offset: {
        const int64_t offset = arg_at(args, src).toTensor().storage_offset();
        bound.args.push_back(scalar_operand(DType::I64, static_cast<uint64_t>(offset), device));
        break;
      }
      case ParamSource::Kind::Rng: {
        std::optional<at::Generator> gen;
        if (src.index >= 0) gen = args[src.index].toGenerator();
        bound.args.push_back(rng_operand(gen, device, src.bits));
        break;
      }
      case ParamSource::Kind::Stride: {
        const int64_t stride = arg_at(args, src).toTensor().stride(src.part);
        bound.args.push_back(scalar_operand(DType::I64, static_cast<uint64_t>(stride), device));
        break;
      }
      case ParamSource::Kind::ViewSize: {
        const int64_t n = arg_at(args, src).toTensor().size(src.part);
        bound.args.push_back(scalar_operand(DType::I32, static_cast<uint64_t>(n), device));
        break;
      }
      case ParamSource::Kind::PaddedSize: {
        std::shared_ptr<const TpuStorage::Padded> padded = storage_of(arg_at(args, src).toTensor()).padded();
        TORCH_CHECK(padded, "torch_tpu internal error: a bucketed plan bound to a storage that is not padded");
        bound.args.push_back(scalar_operand(DType::I64, static_cast<uint64_t>(padded->sizes[src.part]), device));
        break;
      }
    }
  }
  bound.written.reserve(plan.written.size());
  for (int g : plan.written) bound.written.push_back(&storage_of(sig.group_tensor(g)));
  name_sizes(plan, bound, args);
  return bound;
}

exec::FunctionPtr function_of(const std::shared_ptr<const hlo::Builder>& b, const std::vector<Value>& outputs,
                              uint64_t fingerprint) {
  char name[24];
  std::snprintf(name, sizeof(name), "op_%016llx", static_cast<unsigned long long>(fingerprint));
  auto function = std::make_shared<exec::Function>();
  function->fingerprint = fingerprint;
  function->name = name;
  for (Value v : outputs) function->results.push_back(b->type(v));
  // (made only if a fused graph calling it must be compiled)
  function->text = [b, name = function->name, outputs] { return b->function(name, outputs); };
  return function;
}

namespace {

// `b`'s program returning `out`, on `in` (none, or one value): recorded in
// `graph` (when given), else run now.
TpuStorage::Value small_program(const std::shared_ptr<const hlo::Builder>& b, Value out, const TpuStorage::Value* in,
                                exec::DeferredGraph* graph, int device) {
  const std::string text = b->module({out});
  count_program_text(text);
  TpuStorage::Value r{nullptr, b->type(out), nullptr, in ? in->checks : exec::Checks{}};
  if (graph != nullptr || (in && in->deferred)) {
    std::vector<exec::ProgramArg> args;
    if (in) args.push_back({nullptr, in->deferred, in->type, {}});
    exec::FunctionPtr fn = function_of(b, {out}, exec::fingerprint64(text));
    std::vector<exec::DeferredPtr> outs =
        graph ? graph->record(fn, args) : exec::DeferredGraph::record_beside(in->deferred, fn, args);
    if (!outs.empty()) {
      r.deferred = std::move(outs[0]);
      return r;
    }
  }
  std::vector<pjrt::c::PJRT_Buffer*> raw;
  pjrt::BufferPtr buffer;
  if (in) {
    buffer = in->deferred ? in->deferred->resolve() : in->buffer;
    raw.push_back(buffer->raw());
  }
  r.buffer = exec::Runtime::get().run(text, raw, device)[0];
  return r;
}

}  // namespace

TpuStorage::Value make_value(const std::shared_ptr<const hlo::Builder>& b, Value out, int device) {
  exec::Executor& ex = current_executor();
  return small_program(b, out, nullptr, ex.fused() ? &ex.graph(device) : nullptr, device);
}

TpuStorage::Value apply_program(const std::shared_ptr<const hlo::Builder>& b, Value out, const TpuStorage::Value& in,
                                int device) {
  return small_program(b, out, &in, nullptr, device);
}

// ---- building ------------------------------------------------------------------------

EagerProgram::EagerProgram(int device, const OpSignature* sig)
    : device_(device), sig_(sig), b_(std::make_shared<hlo::Builder>()) {}

Value EagerProgram::add_param(const Type& type, exec::ProgramArg arg, ParamSource source) {
  Value v = b_->param(type);
  args_.push_back(std::move(arg));
  sources_.push_back(source);
  return v;
}

EagerProgram::Slot& EagerProgram::slot_for(const at::Tensor& t) {
  c10::StorageImpl* impl = t.storage().unsafeGetStorageImpl();
  for (Slot& s : slots_) {
    if (s.storage.unsafeGetStorageImpl() == impl) return s;
  }
  Slot s;
  s.storage = t.storage();
  s.tpu = &storage_of(s.storage);
  s.group = sig_ ? sig_->group_of(impl) : -1;
  if (s.group < 0) replayable_ = false;
  TpuStorage::Value snapshot = operand_value(*s.tpu, device_);
  exec::merge_checks(bound_.checks, snapshot.checks);
  if (snapshot.buffer || snapshot.deferred) {
    s.type = snapshot.type;
    ParamSource src;
    src.kind = ParamSource::Kind::Storage;
    src.index = s.group;
    s.param = static_cast<int>(args_.size());
    Value p = add_param(s.type, {std::move(snapshot.buffer), std::move(snapshot.deferred), s.type, storage_origin(t)},
                        src);
    s.full = p;
    s.received = p;
    s.flat = s.type.dims.size() == 1 ? p : b_->reshape(p, {s.type.numel()});
    s.flat_dtype = s.type.dtype;
    for (const Dynamic& d : dynamic_) {
      if (d.storage == impl) s.dynamic = &d;
    }
  } else {
    // Never written: zeros, in the dtype of the first access.
    const DType dt = to_hlo(t.scalar_type());
    const int64_t n = static_cast<int64_t>(s.tpu->nbytes()) / hlo::byte_width(dt);
    s.flat = b_->zeros(Type{dt, {n}});
    s.flat_dtype = dt;
  }
  slots_.push_back(std::move(s));
  return slots_.back();
}

void EagerProgram::dynamic_storage(const at::Tensor& proxy, std::vector<int64_t> sizes) {
  TORCH_CHECK(proxy.is_contiguous() && proxy.storage_offset() == 0 && proxy.dim() == static_cast<int64_t>(sizes.size()),
              "torch_tpu internal error: a bucketed operand must be a contiguous tensor of its bucket's sizes");
  dynamic_.push_back({proxy.storage().unsafeGetStorageImpl(), std::move(sizes), proxy.sizes().vec()});
}

void EagerProgram::dynamic_view(const at::Tensor& proxy, const at::Tensor& view, uint64_t varying,
                                std::vector<ViewDim> map, Dims dims, bool rows) {
  dynamic_views_.push_back({proxy.unsafeGetTensorImpl(), view, varying, std::move(map), std::move(dims), rows});
}

// A view read through its map (dynamic_view): the padded value sliced at
// the view's run-time start in each dim (its offset unravelled by the
// actual sizes), its merged dims reshaped, transposed into the view's
// order and broadcast to its `sizes` (the proxy's: bucket sizes where it
// varies).
Value EagerProgram::mapped_view(Slot& s, const DynamicView& dv, const hlo::Dims& sizes, ArgPosition pos) {
  hlo::Builder& b = *b_;
  const Dynamic& dyn = *s.dynamic;
  // (the storage tensor's dims as the map refers to them: maybe split)
  const bool split = !dv.dims.sizes.empty();
  const size_t rank = split ? dv.dims.bounds.size() : dyn.bounds.size();
  auto bound = [&](size_t j) { return split ? dv.dims.bounds[j] : dyn.bounds[j]; };
  auto varies = [&](size_t j) {
    const int o = split ? dv.dims.origin[j] : static_cast<int>(j);
    return o >= 0 && dyn.sizes[o] != dyn.bounds[o];
  };
  auto size_of = [&](size_t j) {  // (i64)
    return varies(j) ? padded_size(dyn, split ? dv.dims.origin[j] : j, pos) : b.constant_int(bound(j), DType::I64);
  };
  std::vector<int> by_dim(rank, -1);  // the view dim ranging over each dim
  std::vector<bool> merged(rank);     // part of a run of dims a view dim merges
  for (size_t k = 0; k < dv.map.size(); ++k) {
    for (int j = dv.map[k].first; j >= 0 && j <= dv.map[k].last; ++j) {
      by_dim[j] = static_cast<int>(k);
      merged[j] = dv.map[k].first != dv.map[k].last;
    }
  }
  Value rest = view_operand(ParamSource::Kind::Offset, DType::I64, dv.view.storage_offset(), pos, -1);
  std::vector<Value> starts(rank);
  hlo::Dims slice(rank, 1);
  for (size_t j = rank; j-- > 0;) {
    const int k = by_dim[j];
    if (k >= 0) slice[j] = merged[j] ? bound(j) : sizes[k];
    if (bound(j) == 1) {
      starts[j] = b.constant_int(0, DType::I64);
      continue;
    }
    Value n = size_of(j);
    starts[j] = j == 0 ? rest : b.rem(rest, n);
    if (j > 0) rest = b.div(rest, n);
  }
  // (a view from the storage's start over all of the bucket: the value itself;
  // the plan's key tells a zero offset apart)
  const Value whole = split ? b.reshape(s.full, dv.dims.bounds) : s.full;
  Value v = dv.view.storage_offset() == 0 && slice == b.dims(whole) ? whole : b.dynamic_slice(whole, starts, slice);
  // A varying dim merged with static ones: its run-time size set before
  // the reshape (XLA moves the merged dim's elements first).
  for (size_t j = 0; j < rank && !dv.rows; ++j) {
    if (merged[j] && varies(j)) v = b.set_dimension_size(v, b.convert(size_of(j), DType::I32), static_cast<int64_t>(j));
  }
  // The view's dims in the storage's order, then in its own.
  hlo::Dims kept, order;
  for (size_t j = 0; j < rank; ++j) {
    if (by_dim[j] < 0) continue;
    if (!order.empty() && order.back() == by_dim[j]) {
      kept.back() *= slice[j];  // (a merged run)
    } else {
      kept.push_back(slice[j]);
      order.push_back(by_dim[j]);
    }
  }
  if (kept != slice) v = b.reshape(v, kept);
  hlo::Dims perm(order.size());
  std::iota(perm.begin(), perm.end(), 0);
  std::sort(perm.begin(), perm.end(), [&](int64_t x, int64_t y) { return order[x] < order[y]; });
  hlo::Dims placed(order.begin(), order.end());
  std::sort(placed.begin(), placed.end());
  if (!std::is_sorted(order.begin(), order.end())) v = b.transpose(v, perm);
  if (placed.size() != sizes.size()) v = b.broadcast_in_dim(v, sizes, placed);
  return v;
}

// Dim j's size of the tensor a padded value holds (i64): a run-time
// operand where it varies (read from the argument at `pos`), else its bound.
Value EagerProgram::padded_size(const Dynamic& dyn, size_t j, ArgPosition pos) {
  if (dyn.sizes[j] == dyn.bounds[j]) return b_->constant_int(dyn.bounds[j], DType::I64);
  return view_operand(ParamSource::Kind::PaddedSize, DType::I64, dyn.sizes[j], pos, static_cast<int>(j));
}

// The padded value (of the proxy's bucket sizes) with each varying dim
// set to the run-time size of the argument the proxy stands for: XLA
// tracks the sizes and masks the rest. No data moves.
Value EagerProgram::dynamic_entry(Slot& s, const Dynamic& dyn, ArgPosition pos) {
  TORCH_CHECK(s.type.dims == dyn.bounds, "torch_tpu internal error: a padded value of ", s.type.str(),
              " for bucket ", dyn.bounds);
  if (pos.arg < 0) replayable_ = false;
  Value v = s.full;
  for (size_t d = 0; d < dyn.bounds.size(); ++d) {
    if (dyn.sizes[d] == dyn.bounds[d]) continue;
    v = b_->set_dimension_size(v, view_operand(ParamSource::Kind::ViewSize, DType::I32, dyn.sizes[d], pos,
                                               static_cast<int>(d)), static_cast<int64_t>(d));
  }
  return v;
}

// The padded value's flat index of each element of the tensor it holds,
// given their index `logical` in that (contiguous) tensor: its dims' sizes
// (the varying ones are run-time operands read from the argument at
// `pos`) unravel it, the bucket's dims ravel it again.
Value EagerProgram::padded_index(Value logical, const Dynamic& dyn, ArgPosition pos) {
  hlo::Builder& b = *b_;
  const hlo::Dims dims = b.dims(logical);
  Value rest = logical, index;
  int64_t stride = 1;
  for (size_t j = dyn.bounds.size(); j-- > 0;) {
    if (dyn.bounds[j] == 1) continue;  // (a varying dim's bound is at least 16)
    Value n = b.broadcast_in_dim(padded_size(dyn, j, pos), dims, {});
    Value digit = j == 0 ? rest : b.rem(rest, n);
    Value part = b.mul(digit, b.broadcast_in_dim(b.constant_int(stride, DType::I64), dims, {}));
    index = index.valid() ? b.add(index, part) : part;
    if (j > 0) rest = b.div(rest, n);
    stride *= dyn.bounds[j];
  }
  return index.valid() ? index : b.zeros(Type{DType::I64, dims});
}

// A run-time operand read from the tensor argument at `pos` (a bucketed
// operand's size, stride or offset).
Value EagerProgram::view_operand(ParamSource::Kind kind, DType dtype, int64_t value, ArgPosition pos, int part) {
  ParamSource src;
  src.kind = kind;
  src.index = pos.arg;
  src.element = pos.element;
  src.part = part;
  src.dtype = dtype;
  return add_param(Type{dtype, {}}, scalar_operand(dtype, static_cast<uint64_t>(value), device_), src);
}

Value EagerProgram::flat_as(Slot& s, DType dtype) {
  return s.flat_dtype == dtype ? s.flat : reinterpret_flat(*b_, s.flat, dtype);
}

// A nonzero storage offset is a runtime operand: x[i] for every i is one
// program (and one plan: the signature only tells zero from nonzero).
exec::Offset EagerProgram::offset_of(const at::Tensor& t, ArgPosition pos) {
  exec::Offset off;
  off.value = t.storage_offset();
  if (off.value == 0) return off;
  ParamSource src;
  src.dtype = DType::I64;
  src.bits = static_cast<uint64_t>(off.value);
  if (pos.arg >= 0) {
    src.kind = ParamSource::Kind::Offset;
    src.index = pos.arg;
    src.element = pos.element;
  } else {
    replayable_ = false;  // the offset would become a constant
  }
  off.dynamic = add_param(Type{DType::I64, {}}, scalar_operand(DType::I64, src.bits, device_), src);
  return off;
}

Value EagerProgram::input(const at::Tensor& t, ArgPosition pos) {
  TORCH_CHECK(t.defined(), "tpu: an op received an undefined tensor");
  if (t.device().is_cpu()) {
    TORCH_CHECK(t.dim() == 0,
                "Expected all tensors to be on the same device, but found at least two devices, "
                "tpu:", device_, " and cpu! (move the CPU tensor with .to('tpu'))");
    if (pos.arg < 0) replayable_ = false;  // its value would become a constant
    return scalar(host_number(t), to_hlo(t.scalar_type()), pos, &t);
  }
  TORCH_CHECK(t.device().type() == c10::DeviceType::PrivateUse1 && t.device().index() == device_,
              "Expected all tensors to be on the same device, but found at least two devices, tpu:",
              device_, " and ", t.device(), "!");
  Slot& s = slot_for(t);
  const DType dt = to_hlo(t.scalar_type());
  const Type& st = s.type;
  if (s.dynamic) {
    TORCH_CHECK(!s.written && !t.is_conj() && !t.is_neg() && s.type.dtype == dt,
                "torch_tpu internal error: a bucketed operand read as ", t.scalar_type());
    for (const DynamicView& dv : dynamic_views_) {
      if (dv.proxy != t.unsafeGetTensorImpl()) continue;
      // Its strides, offset and varying sizes are operands.
      if (pos.arg < 0) replayable_ = false;
      const at::Tensor& view = dv.view;
      Value v;
      if (!dv.map.empty()) {
        v = mapped_view(s, dv, t.sizes().vec(), pos);
      } else {
        std::vector<Value> strides(view.dim());
        for (int64_t k = 0; k < view.dim(); ++k) {
          if (t.size(k) > 1) strides[k] = view_operand(ParamSource::Kind::Stride, DType::I64, view.stride(k), pos, k);
        }
        Value offset = view_operand(ParamSource::Kind::Offset, DType::I64, view.storage_offset(), pos, -1);
        v = exec::read_strided_at_run_time(*b_, s.flat, t.sizes().vec(), strides, offset,
                                           [&](Value logical) { return padded_index(logical, *s.dynamic, pos); });
      }
      for (int64_t k = 0; k < view.dim(); ++k) {
        const bool merged = !dv.map.empty() && dv.map[k].first != dv.map[k].last;  // (sized by its merge)
        if ((dv.varying >> k & 1) && !merged) {
          v = b_->set_dimension_size(v, view_operand(ParamSource::Kind::ViewSize, DType::I32, view.size(k), pos, k), k);
        }
      }
      return v;
    }
    if (!s.full_dynamic.valid()) s.full_dynamic = dynamic_entry(s, *s.dynamic, pos);
    TORCH_CHECK(t.storage_offset() == 0 && t.is_contiguous() && b_->dims(s.full_dynamic) == t.sizes().vec(),
                "torch_tpu internal error: a bucketed operand read through another view");
    return s.full_dynamic;
  }
  Value v;
  if (!s.written && s.param >= 0 && st.dtype == dt && t.storage_offset() == 0 && t.numel() == st.numel() &&
      t.is_contiguous()) {
    v = t.sizes().vec() == st.dims ? s.full : b_->reshape(s.full, t.sizes().vec());  // the storage value itself
  } else {
    v = exec::read_strided(*b_, flat_as(s, dt), t.sizes().vec(), t.strides().vec(), offset_of(t, pos));
  }
  return apply_math_bits(t, v);
}

// Conjugate and negative views (x.conj(), x.imag of a conjugate) carry a bit
// instead of new data: reading applies it, writing applies its inverse.
Value EagerProgram::apply_math_bits(const at::Tensor& t, Value v) {
  if (t.is_conj() && hlo::is_complex(b_->dtype(v))) v = b_->complex(b_->real(v), b_->neg(b_->imag(v)));
  if (t.is_neg()) v = b_->neg(v);
  return v;
}

Value EagerProgram::scalar(const c10::Scalar& s, DType dtype, ArgPosition pos, const at::Tensor* host) {
  auto operand = [&](const c10::Scalar& x, DType dt, int part) {
    ParamSource src;
    src.dtype = dt;
    src.bits = scalar_bits(x, dt);
    if (pos.arg >= 0) {
      src.kind = ParamSource::Kind::Arg;
      src.index = pos.arg;
      src.element = pos.element;
      src.part = part;
    }
    exec::ProgramArg arg = scalar_operand(dt, src.bits, device_);
    if (host) arg.origin = host_origin(*host, dt, part);
    return add_param(Type{dt, {}}, std::move(arg), src);
  };
  if (dtype == DType::C128) {  // 16 bytes: two f64 operands
    const c10::complex<double> z = s.toComplexDouble();
    return b_->complex(operand(z.real(), DType::F64, 0), operand(z.imag(), DType::F64, 1));
  }
  return operand(s, dtype, -1);
}

Value EagerProgram::rng_key(const std::optional<at::Generator>& gen, int arg, uint64_t count) {
  ParamSource src;
  src.kind = ParamSource::Kind::Rng;
  src.index = arg;
  src.bits = count;
  return add_param(Type{DType::U64, {2}}, rng_operand(gen, device_, count), src);
}

void EagerProgram::assign(const at::Tensor& dst, Value value, ArgPosition pos) {
  TORCH_CHECK(dst.device().type() == c10::DeviceType::PrivateUse1 && dst.device().index() == device_,
              "tpu: cannot write a tpu:", device_, " result into a tensor on ", dst.device());
  Slot& s = slot_for(dst);
  const DType dt = to_hlo(dst.scalar_type());
  value = apply_math_bits(dst, value);  // both bits are involutions
  Value flat = flat_as(s, dt);
  s.flat = exec::write_strided(*b_, flat, value, dst.sizes().vec(), dst.strides().vec(), offset_of(dst, pos));
  s.flat_dtype = dt;
  s.written = true;
  ++s.writes;
  s.unchanged_unless_checked = false;
  const bool covers = dst.storage_offset() == 0 && dst.is_contiguous() &&
                      static_cast<size_t>(dst.numel()) * dst.element_size() == s.tpu->nbytes();
  s.full = covers ? value : Value{};
}

void EagerProgram::unchanged_unless_checked(const at::Tensor& dst) {
  Slot& s = slot_for(dst);
  s.unchanged_unless_checked = s.writes == 1 && s.received.valid();
}

int64_t EagerProgram::evaluate_int(Value v) {
  Value as_i64 = b_->convert(v, DType::I64);
  std::vector<pjrt::c::PJRT_Buffer*> raw = raw_args(args_);
  auto outs = exec::Runtime::get().run(b_->module({as_i64}), raw, device_);
  int64_t result = 0;
  outs[0]->to_host(&result, sizeof(result));
  return result;
}

// What a written storage holds afterwards. A storage keeps the type of the
// value it had (a bias gradient made by a keepdim sum stays [1, N] when an
// in-place add writes it through an [N] view), so the programs reading it
// see one type from step to step; a fresh storage takes its first write's.
Value EagerProgram::stored_value(const Slot& s) {
  if (s.param >= 0 && s.flat_dtype == s.type.dtype) {
    if (s.full.valid() && b_->dims(s.full) == s.type.dims) return s.full;
    return s.type.dims.size() == 1 ? s.flat : b_->reshape(s.flat, s.type.dims);
  }
  return s.full.valid() ? s.full : s.flat;
}

void EagerProgram::result_layout(size_t index, hlo::Dims sizes, std::vector<int64_t> strides) {
  if (layouts_.size() <= index) layouts_.resize(index + 1);
  layouts_[index] = {std::move(sizes), std::move(strides)};
}

std::shared_ptr<const ProgramPlan> EagerProgram::finish(const std::vector<Value>& outputs) {
  auto plan = std::make_shared<ProgramPlan>();
  // Invalid values are undefined results (e.g. masked-off gradients).
  for (size_t k = 0; k < outputs.size(); ++k) {
    const Value v = outputs[k];
    const bool laid_out = k < layouts_.size() && !layouts_[k].second.empty();
    plan->results.push_back(v.valid() ? static_cast<int>(plan->outputs.size()) : -1);
    plan->result_sizes.push_back(!v.valid() ? hlo::Dims{} : laid_out ? layouts_[k].first : b_->dims(v));
    plan->result_strides.push_back(laid_out ? layouts_[k].second : std::vector<int64_t>{});
    if (v.valid()) plan->outputs.push_back(v);
  }
  // All the checks passed (written storages keep their values otherwise).
  Value all_ok;
  for (const auto& [ok, message] : checks_) all_ok = all_ok.valid() ? b_->and_(all_ok, ok) : ok;
  for (Slot& s : slots_) {
    if (!s.written) continue;
    Value out = stored_value(s);
    // (A write gated by every check keeps the value by itself.)
    const bool guarded = all_ok.valid() && s.received.valid() && b_->type(out) == b_->type(s.received);
    if (guarded && !s.unchanged_unless_checked) {
      out = b_->select(b_->broadcast_to(all_ok, b_->dims(out)), out, s.received);
    }
    if (s.param >= 0 && b_->type(out) == s.type) {
      plan->donations.emplace_back(s.param, static_cast<int>(plan->outputs.size()));
    }
    plan->guarded.push_back(guarded);
    plan->written.push_back(s.group);
    bound_.written.push_back(s.tpu);
    plan->outputs.push_back(out);
  }
  for (const auto& [ok, message] : checks_) {
    plan->outputs.push_back(ok);
    plan->checks.push_back(message);
    plan->sized_checks = plan->sized_checks || lowering::has_size_marks(message);
  }
  for (Value v : plan->outputs) plan->output_types.push_back(b_->type(v));
  plan->text = b_->module(plan->outputs);
  plan->fingerprint = exec::fingerprint64(plan->text);
  plan->function = function_of(b_, plan->outputs, plan->fingerprint);
  plan->params = std::move(sources_);
  plan->resizes = std::move(resizes_);
  plan->replayable = replayable_;
  plan->builder = b_;
  bound_.args = std::move(args_);
  plan_ = plan;
  count_built_program();
  return plan;
}

void EagerProgram::resized(ArgPosition pos, std::vector<int64_t> sizes) {
  if (pos.arg < 0) {
    not_replayable();
    return;
  }
  resizes_.push_back({pos.arg, pos.element, std::move(sizes)});
}

std::vector<at::Tensor> EagerProgram::run(c10::ArrayRef<c10::IValue> args) {
  TORCH_CHECK(plan_, "torch_tpu internal error: EagerProgram::run before finish");
  if (!args.empty()) name_sizes(*plan_, bound_, args);
  return launch(plan_, bound_, device_);
}

// The dynamic_storage or dynamic_view `t` is read through, if any.
const EagerProgram::Dynamic* EagerProgram::dynamic_of(const at::Tensor& t, const DynamicView** view) const {
  for (const DynamicView& dv : dynamic_views_) {
    if (dv.proxy != t.unsafeGetTensorImpl()) continue;
    *view = &dv;
    return nullptr;
  }
  const c10::StorageImpl* impl = t.storage().unsafeGetStorageImpl();
  for (const Dynamic& d : dynamic_) {
    if (d.storage == impl && t.storage_offset() == 0 && t.sizes().vec() == d.bounds) return &d;
  }
  return nullptr;
}

bool EagerProgram::varies(const at::Tensor& t, int64_t dim) const {
  const DynamicView* view = nullptr;
  const Dynamic* d = dynamic_of(t, &view);
  if (view != nullptr) return dim < 64 && (view->varying >> dim & 1);
  return d != nullptr && d->sizes[dim] != d->bounds[dim];
}

Value EagerProgram::run_time_size(const at::Tensor& t, int64_t dim, ArgPosition pos) {
  TORCH_CHECK(varies(t, dim), "torch_tpu internal error: the run-time size of a dim that does not vary");
  if (pos.arg < 0) replayable_ = false;
  const DynamicView* view = nullptr;
  const Dynamic* d = dynamic_of(t, &view);
  const int64_t n = view != nullptr ? view->view.size(dim) : d->sizes[dim];
  return view_operand(ParamSource::Kind::ViewSize, DType::I32, n, pos, static_cast<int>(dim));
}

void name_sizes(const ProgramPlan& plan, BoundProgram& bound, c10::ArrayRef<c10::IValue> args) {
  if (!plan.sized_checks) return;
  bound.messages.clear();
  for (const std::string& m : plan.checks) {
    std::string out;
    size_t at = 0;
    for (size_t open; (open = m.find('\x01', at)) != std::string::npos;) {
      const size_t close = m.find('\x01', open + 1);
      if (close == std::string::npos) break;
      int arg = -1, element = -1;
      int64_t dim = -1;
      std::sscanf(m.c_str() + open + 1, "%d,%d,%" SCNd64, &arg, &element, &dim);
      out.append(m, at, open - at);
      if (arg >= 0 && static_cast<size_t>(arg) < args.size()) {
        const c10::IValue& a = args[arg];
        const c10::IValue& v = element >= 0 ? a.toListRef()[element] : a;
        out += std::to_string(v.toTensor().size(dim));
      }
      at = close + 1;
    }
    out.append(m, at, std::string::npos);
    bound.messages.push_back(std::move(out));
  }
}

}  // namespace tpu
