#include "csrc/aten/op_memo.h"
#include "csrc/exec/executable_cache.h"

#include <c10/core/DefaultDtype.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

namespace tpu {

namespace {

template <typename T>
void put(std::string& key, T v) {
  key.append(reinterpret_cast<const char*>(&v), sizeof(v));
}

void put_dims(std::string& key, c10::IntArrayRef dims) {
  put(key, static_cast<int8_t>(dims.size()));
  key.append(reinterpret_cast<const char*>(dims.data()), dims.size() * sizeof(int64_t));
}

void put_number(std::string& key, const c10::Scalar& s) {
  put(key, static_cast<int8_t>(s.type()));
  if (s.isComplex()) {
    put(key, s.toComplexDouble());
  } else if (s.isFloatingPoint()) {
    put(key, s.toDouble());
  } else if (s.isBoolean()) {
    put(key, s.toBool());
  } else if (s.type() == at::kUInt64) {
    put(key, s.toUInt64());  // (a Python int in [2**63, 2**64))
  } else {
    put(key, s.toLong());
  }
}

// The values of the numbers in `v` (the part of a signature that depends on
// which numbers a lowering read).
void put_numbers(std::string& key, const c10::IValue& v) {
  if (v.isTensor()) {
    const at::Tensor& t = v.toTensor();
    if (t.defined() && t.device().is_cpu() && t.dim() == 0) put_number(key, host_number(t));
  } else if (v.isDouble() || v.isComplexDouble() || v.isInt() || v.isBool()) {
    put_number(key, v.toScalar());
  } else if (v.isList()) {
    for (const c10::IValue& e : v.toListRef()) put_numbers(key, e);
  }
}

std::string numbers_key(const std::vector<bool>& read, bool precision, c10::ArrayRef<c10::IValue> args) {
  std::string key;
  if (precision) put(key, current_matmul_precision());
  for (size_t i = 0; i < read.size() && i < args.size(); ++i) {
    if (read[i]) {
      put(key, static_cast<int16_t>(i));
      put_numbers(key, args[i]);
    }
  }
  return key;
}

// Per structural signature: which arguments' numbers its lowering reads,
// and the plans by those numbers.
struct Node {
  std::vector<bool> read;
  bool precision = false;  // whether the lowering read the matmul precision
  std::unordered_map<std::string, std::shared_ptr<const ProgramPlan>> plans;
};

constexpr size_t kMaxNodes = 16384;     // signatures kept (then all are dropped)
constexpr size_t kMaxPlansPerNode = 64; // number values kept per signature

std::mutex g_mu;
std::unordered_map<std::string, Node> g_nodes;
size_t g_plans = 0;
std::atomic<int64_t> g_built{0}, g_reused{0};
std::atomic<int> g_enabled{-1};

}  // namespace

OpSignature::OpSignature(const void* op, uint32_t globals, c10::ArrayRef<c10::IValue> args, uint64_t numbers) {
  key_.reserve(32 + 40 * args.size());
  put(key_, op);
  put(key_, globals);
  for (size_t i = 0; i < args.size(); ++i) add(args[i], i < 64 && (numbers >> i & 1));
}

int OpSignature::group_of(const c10::StorageImpl* storage) const {
  if (!index_.empty()) {
    auto it = index_.find(storage);
    return it == index_.end() ? -1 : it->second;
  }
  for (size_t g = 0; g < storages_.size(); ++g) {
    if (storages_[g] == storage) return static_cast<int>(g);
  }
  return -1;
}

void OpSignature::add(const c10::IValue& v, bool number) {
  if (v.isTensor()) {
    add_tensor(v.toTensor());
  } else if (v.isNone()) {
    key_ += 'N';
  } else if (number && v.isInt()) {
    key_ += 'i';  // the value counts only where the lowering reads it
  } else if (v.isInt()) {
    key_ += 'I';
    put(key_, v.toInt());
  } else if (v.isBool()) {
    key_ += 'B';
    put(key_, v.toBool());
  } else if (v.isDouble()) {
    key_ += 'D';  // the value counts only where the lowering reads it
  } else if (v.isComplexDouble()) {
    key_ += 'Z';
  } else if (v.isSymInt()) {
    std::optional<int64_t> i = v.toSymInt().maybe_as_int();
    if (!i) {
      memoizable_ = false;
      return;
    }
    key_ += 'I';
    put(key_, *i);
  } else if (v.isString()) {
    const std::string& s = v.toStringRef();
    key_ += 'S';
    put(key_, s.size());
    key_ += s;
  } else if (v.isDevice()) {
    key_ += 'V';
    put(key_, static_cast<int16_t>(v.toDevice().type()));
    put(key_, static_cast<int16_t>(v.toDevice().index()));
  } else if (v.isGenerator()) {
    key_ += 'G';  // its keys are drawn at every call
  } else if (v.isList()) {
    c10::ArrayRef<c10::IValue> items = v.toListRef();
    key_ += 'L';
    put(key_, items.size());
    for (const c10::IValue& e : items) add(e);
  } else {
    memoizable_ = false;
  }
}

void OpSignature::add_tensor(const at::Tensor& t) {
  if (!t.defined()) {
    key_ += 'U';
    return;
  }
  const c10::Device device = t.device();
  const bool wrapped = t.unsafeGetTensorImpl()->is_wrapped_number();
  if (device.is_cpu()) {  // a scalar operand (its value only where read)
    key_ += 'C';
    put(key_, static_cast<int8_t>(t.scalar_type()));
    put(key_, wrapped);
    put_dims(key_, t.sizes());
    return;
  }
  if (device.type() != c10::DeviceType::PrivateUse1) {
    memoizable_ = false;
    return;
  }
  key_ += 'T';
  put(key_, static_cast<int8_t>(t.scalar_type()));
  put(key_, static_cast<int8_t>(device.has_index() ? device.index() : -1));
  put(key_, static_cast<uint8_t>(t.is_conj() | t.is_neg() << 1 | wrapped << 2));
  put_dims(key_, t.sizes());
  put_dims(key_, t.strides());
  put(key_, t.storage_offset() != 0);  // a nonzero offset is a runtime operand
  const c10::StorageImpl* impl = t.storage().unsafeGetStorageImpl();
  int group = group_of(impl);
  if (group >= 0) {
    put(key_, group);
    return;
  }
  group = static_cast<int>(storages_.size());
  storages_.push_back(impl);
  first_.push_back(&t);
  if (storages_.size() > 16) {  // _foreach ops: many storages
    if (index_.empty()) {
      for (size_t g = 0; g < storages_.size(); ++g) index_.emplace(storages_[g], static_cast<int>(g));
    } else {
      index_.emplace(impl, group);
    }
  }
  put(key_, group);
  // The storage: its size and the type of its value (none: never written).
  TpuStorage& s = storage_of(t);
  put(key_, s.nbytes());
  TpuStorage::Value value = s.raw_value();
  const bool has_value = value.buffer || value.deferred;
  put(key_, has_value);
  if (has_value) {
    put(key_, static_cast<int8_t>(value.type.dtype));
    put_dims(key_, value.type.dims);
  }
}

uint32_t lowering_globals() {
  const auto dtype = static_cast<uint8_t>(c10::typeMetaToScalarType(c10::get_default_dtype()));
  const auto complex = static_cast<uint8_t>(c10::typeMetaToScalarType(c10::get_default_complex_dtype()));
  return uint32_t{dtype} << 8 | uint32_t{complex} << 16;
}

std::optional<OpSignature> signature_for(const void* op, uint32_t globals, c10::ArrayRef<c10::IValue> args,
                                         uint64_t numbers) {
  std::optional<OpSignature> sig;
  if (!op_memo_enabled()) return sig;
  sig.emplace(op, globals, args, numbers);
  if (!sig->memoizable()) sig.reset();
  return sig;
}

std::optional<std::vector<at::Tensor>> run_kept_plan(const std::optional<OpSignature>& sig,
                                                     c10::ArrayRef<c10::IValue> args, int device) {
  if (!sig) return std::nullopt;
  std::shared_ptr<const ProgramPlan> plan = find_plan(*sig, args);
  if (!plan) return std::nullopt;
  BoundProgram bound = bind_plan(*plan, *sig, args, device);
  return launch(plan, bound, device);
}

std::shared_ptr<const ProgramPlan> find_plan(const OpSignature& sig, c10::ArrayRef<c10::IValue> args) {
  std::lock_guard<std::mutex> lock(g_mu);
  auto node = g_nodes.find(sig.key());
  if (node == g_nodes.end()) return nullptr;
  auto plan = node->second.plans.find(numbers_key(node->second.read, node->second.precision, args));
  if (plan == node->second.plans.end()) return nullptr;
  ++g_reused;
  return plan->second;
}

void keep_plan(const OpSignature& sig, c10::ArrayRef<c10::IValue> args, const std::vector<bool>& read,
               std::shared_ptr<const ProgramPlan> plan, bool read_precision) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_nodes.size() >= kMaxNodes) {
    g_nodes.clear();
    g_plans = 0;
  }
  Node& node = g_nodes[sig.key()];
  // The plans kept so far were told apart by fewer numbers: this lowering
  // read more (it branched on a value), so key them all by the union.
  bool grew = node.read.size() < read.size() || (read_precision && !node.precision);
  node.precision = node.precision || read_precision;
  if (grew) node.read.resize(read.size());
  for (size_t i = 0; i < read.size(); ++i) {
    if (read[i] && !node.read[i]) {
      node.read[i] = true;
      grew = true;
    }
  }
  if (grew || node.plans.size() >= kMaxPlansPerNode) {
    g_plans -= node.plans.size();
    node.plans.clear();
  }
  if (node.plans.emplace(numbers_key(node.read, node.precision, args), std::move(plan)).second) ++g_plans;
}

bool op_memo_enabled() {
  int v = g_enabled.load();
  if (v < 0) {
    const char* e = std::getenv("TORCH_TPU_OP_MEMO");
    v = e != nullptr && std::strcmp(e, "0") == 0 ? 0 : 1;
    g_enabled = v;
  }
  return v == 1;
}

void set_op_memo(bool enabled) { g_enabled = enabled ? 1 : 0; }

OpMemoStats op_memo_stats() {
  std::lock_guard<std::mutex> lock(g_mu);
  return {g_built.load(), g_reused.load(), static_cast<int64_t>(g_plans)};
}

void count_built_program() { ++g_built; }

void count_program_text(const std::string& text) {
  static std::mutex mu;
  static std::unordered_set<uint64_t> seen;
  const uint64_t f = exec::fingerprint64(text);
  std::lock_guard<std::mutex> lock(mu);
  if (seen.size() > 65536) seen.clear();
  if (seen.insert(f).second) ++g_built;
}

}  // namespace tpu
