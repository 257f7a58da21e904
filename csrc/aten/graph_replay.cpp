// torch.compile's graphs, captured once and replayed (torch_tpu/compiler.py).
//
// The first call of a compiled FX graph with a given signature runs its ops
// as usual, under a capture executor: every op is recorded (as in fused
// eager) into a graph of its own, and each program argument carries its
// origin (a placeholder's storage, a CPU scalar, the generator, a
// constant). That graph becomes one private function; the call records it
// into the caller's fused graph, and keeps it, with how to bind each of its
// parameters again and where each of its results goes (a new output
// tensor, or a placeholder's storage that the graph mutated). A later call
// with the same signature binds the new arguments and records the one
// function: no op runs through the dispatcher and nothing is lowered again.
//
// A capture is only kept when it can be bound again exactly: no value read
// on the host (data-dependent shapes), nothing uploaded or stored outside
// the recorded programs, every operand's origin known, every result held
// by an output or a placeholder. Otherwise that signature runs its ops each
// call (still one program per call).
//
// The signature holds what the recorded ops turned into constants: shapes,
// strides, exact storage offsets, the values of integer and floating-point
// placeholders (numbers Dynamo made dynamic). A graph that keeps meeting
// new ones stops capturing after kMaxEntries and runs its ops.
#include <ATen/core/Tensor.h>
#include <ATen/autocast_mode.h>
#include <torch/library.h>

#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "csrc/aten/eager.h"
#include "csrc/aten/executor_scope.h"
#include "csrc/aten/kernels.h"
#include "csrc/aten/op_memo.h"
#include "csrc/aten/storage.h"
#include "csrc/exec/runtime.h"
#include "csrc/lowering/lowering.h"

namespace tpu {

namespace {

using exec::Origin;
using hlo::DType;

struct Position {
  int arg = -1, element = -1;
};

// How a parameter of the captured function gets its value at a call.
struct Binding {
  enum class Kind : uint8_t { Placeholder, Storage, Host, Rng, Constant };
  Kind kind = Kind::Constant;
  Position pos;            // Placeholder: the tensor whose storage it reads
  int host = -1;           // Host: index of the host value
  int8_t part = -1;        // Host: part of a complex number
  DType dtype = DType::F32;  // Host
  uint64_t count = 0;      // Rng: the values the op draws
  c10::Storage storage;    // Storage: a tensor constant of the graph
  pjrt::BufferPtr buffer;  // Constant
  hlo::Type type;
};

struct OutStorage {
  size_t nbytes = 0;
  int value = -1;  // the function result it holds (-1: never written)
  Position placeholder;  // or a placeholder's storage
};

struct OutTensor {
  int storage = -1;
  std::vector<int64_t> sizes, strides;
  int64_t offset = 0;
  at::ScalarType dtype = at::kFloat;
};

struct Captured {
  int device = 0;
  std::shared_ptr<exec::CapturedFunction> fn;
  std::vector<Binding> bindings;
  std::vector<OutStorage> storages;
  std::vector<OutTensor> outputs;
  std::vector<std::pair<Position, int>> writes;  // placeholder storage <- function result
};

constexpr int kRunsOps = -2;      // graph_lookup: a signature that cannot be replayed
constexpr size_t kMaxEntries = 64;  // signatures kept per graph

struct GraphEntries {
  std::mutex mu;
  std::unordered_map<std::string, int> by_key;
  std::vector<std::shared_ptr<const Captured>> entries;
  bool saturated = false;  // new signatures run their ops
};

std::mutex g_mu;
std::unordered_map<int64_t, std::shared_ptr<GraphEntries>> g_graphs;
int64_t g_next_handle = 1;

std::shared_ptr<GraphEntries> entries_of(int64_t handle) {
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = g_graphs.find(handle);
  TORCH_CHECK(it != g_graphs.end(), "torch_tpu: unknown compiled graph ", handle);
  return it->second;
}

template <typename F>
void for_each_tensor_at(c10::ArrayRef<c10::IValue> args, F f) {
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i].isTensor()) {
      f(args[i].toTensor(), Position{static_cast<int>(i), -1});
    } else if (args[i].isTensorList() || args[i].isList()) {
      c10::ArrayRef<c10::IValue> items = args[i].toListRef();
      for (size_t j = 0; j < items.size(); ++j) {
        if (items[j].isTensor()) f(items[j].toTensor(), Position{static_cast<int>(i), static_cast<int>(j)});
      }
    }
  }
}

const at::Tensor& tensor_at(c10::ArrayRef<c10::IValue> args, Position p) {
  const c10::IValue& a = args[p.arg];
  return (p.element >= 0 ? a.toListRef()[p.element] : a).toTensor();
}

// The signature a capture is kept under: the op memo's description of the
// arguments (dtypes, sizes, strides, storage sharing and value types, the
// globals lowerings read) plus what the ops of a graph turn into
// constants: exact storage offsets and the values of floating-point
// numbers.
std::optional<std::string> graph_key(const GraphEntries* graph, c10::ArrayRef<c10::IValue> args) {
  OpSignature sig(graph, current_lowering_globals(), args);
  if (!sig.memoizable()) return std::nullopt;
  std::string key = sig.key();
  auto put = [&](auto v) { key.append(reinterpret_cast<const char*>(&v), sizeof(v)); };
  for_each_tensor_at(args, [&](const at::Tensor& t, Position) {
    if (is_tpu(t)) put(t.storage_offset());
  });
  for (const c10::IValue& v : args) {
    if (v.isDouble()) put(v.toDouble());
    if (v.isComplexDouble()) put(v.toComplexDouble());
  }
  put(at::autocast::is_autocast_enabled(c10::DeviceType::PrivateUse1));
  return key;
}

int device_of(c10::ArrayRef<c10::IValue> args) {
  int device = -1;
  for_each_tensor_at(args, [&](const at::Tensor& t, Position) {
    if (device < 0 && is_tpu(t)) device = t.device().has_index() ? t.device().index() : current_device();
  });
  return device < 0 ? current_device() : device;
}

// A tpu tensor viewing `storage`.
at::Tensor view_of(const c10::Storage& storage, const OutTensor& o, int device) {
  auto impl = c10::make_intrusive<c10::TensorImpl>(c10::Storage(storage),
                                                   c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                                   caffe2::TypeMeta::fromScalarType(o.dtype));
  impl->set_sizes_and_strides(o.sizes, o.strides, o.offset);
  return at::Tensor(std::move(impl));
}

c10::Storage new_storage(size_t nbytes, int device) {
  const int saved = current_device();
  set_current_device(device);
  c10::Storage s(c10::Storage::use_byte_size_t(), nbytes, tpu_allocator(), /*resizable=*/true);
  set_current_device(saved);
  return s;
}

// Records `c.fn` applied to `args` into the calling thread's fused graph.
std::vector<exec::DeferredPtr> record(const Captured& c, const std::vector<exec::ProgramArg>& args) {
  exec::Executor& ex = current_executor();
  TORCH_CHECK(ex.fused(), "torch_tpu internal error: a compiled graph ran outside a fused scope");
  return ex.graph(c.device).record(c.fn->function, args);
}

// The checks the replay's values depend on: its own and those of what it
// read (`read`).
exec::Checks replay_checks(const Captured& c, const std::vector<exec::DeferredPtr>& results, exec::Checks read) {
  if (!c.fn || c.fn->checks.empty()) return read;
  exec::DeferredGraph& graph = current_executor().graph(c.device);
  std::vector<exec::CheckPtr> own;
  for (const auto& [value, message] : c.fn->checks) own.push_back(graph.add_check(results[value], message));
  exec::merge_checks(read, own);
  return read;
}

// Its results' other duty: values for placeholders' storages.
void finish(const Captured& c, c10::ArrayRef<c10::IValue> args, const std::vector<exec::DeferredPtr>& results,
            const exec::Checks& checks) {
  if (!c.fn) return;
  exec::DeferredGraph& graph = current_executor().graph(c.device);
  for (const auto& [pos, value] : c.writes) {
    TpuStorage& s = storage_of(tensor_at(args, pos));
    const TpuStorage::Value old = s.raw_value();
    graph.replaced(old.buffer, old.deferred, results[value]);
    s.set_deferred(results[value], checks);
  }
}

// ---- capture --------------------------------------------------------------------------

struct CaptureState {
  int64_t host_reads = 0, writes = 0;
  std::optional<std::string> key;  // the signature the call was looked up by
  // Each placeholder storage's value when the capture began.
  std::unordered_map<const c10::StorageImpl*, TpuStorage::Value> before;
};
thread_local std::vector<CaptureState> t_captures;

// Whether `s` still holds `before` (maybe now materialized).
bool holds(const TpuStorage& s, const TpuStorage::Value& before) {
  TpuStorage::Value v = s.raw_value();
  if (v.buffer == before.buffer && v.deferred == before.deferred) return true;
  return before.deferred && !v.deferred && !before.deferred->pending() && v.buffer == before.deferred->resolve();
}

void capture_begin(int64_t handle, c10::List<c10::IValue> placeholders) {
  std::vector<c10::IValue> args(placeholders.begin(), placeholders.end());
  CaptureState st;
  st.key = graph_key(entries_of(handle).get(), args);
  for_each_tensor_at(args, [&](const at::Tensor& t, Position) {
    if (is_tpu(t)) st.before.emplace(t.storage().unsafeGetStorageImpl(), storage_of(t).raw_value());
  });
  enter_execution_scope(exec::ExecutionMode::Capture);
  st.host_reads = pjrt::Buffer::thread_host_reads();
  st.writes = thread_materialized_writes();
  t_captures.push_back(std::move(st));
}

// Leaves a failed capture: what it recorded runs as one program.
void capture_abort() {
  TORCH_CHECK(!t_captures.empty(), "torch_tpu internal error: no capture to abort");
  t_captures.pop_back();
  exit_execution_scope();
}

// Ends the capture begun by capture_begin(handle, placeholders): the recorded graph
// is recorded into the caller's graph as one function, and `outputs` (the
// graph's tpu results) and the placeholders' storages take its values.
// Keeps it for replays under the placeholders' signature when it can be
// bound again. `host` names the CPU scalar tensors that host values are
// read from at replays (their TensorImpl addresses, by host value index);
// `constants` the graph's tensor attributes. Returns the entry kept (-1:
// none) and why not.
std::tuple<int64_t, std::string> capture_end(int64_t handle, c10::List<c10::IValue> placeholders, std::vector<at::Tensor> outputs,
                        std::vector<int64_t> host, std::vector<at::Tensor> constants, bool keep) {
  TORCH_CHECK(!t_captures.empty(), "torch_tpu internal error: no capture to end");
  CaptureState st = std::move(t_captures.back());
  t_captures.pop_back();
  std::vector<c10::IValue> args(placeholders.begin(), placeholders.end());
  const int device = device_of(args);

  std::string why;
  std::shared_ptr<exec::CapturedFunction> fn;
  {
    exec::Executor& ex = current_executor();
    const int n = exec::Runtime::get().device_count();
    for (int d = 0; d < n; ++d) {
      if (d != device && ex.graph(d).size() != 0) why = "the graph uses more than one device";
    }
    fn = ex.graph(device).take_function(&why);
    if (why.empty() && pjrt::Buffer::thread_host_reads() != st.host_reads) {
      why = "an op read a device value on the host (a data-dependent shape or value)";
    }
    if (why.empty() && thread_materialized_writes() != st.writes) {
      why = "a value was stored outside the graph's programs (an upload or a CPU fallback)";
    }
  }
  exit_execution_scope();  // the capture executor (now empty, unless another device was used)
  auto result = [](std::string reason) { return std::tuple<int64_t, std::string>(-1, std::move(reason)); };

  auto c = std::make_shared<Captured>();
  c->device = device;
  c->fn = fn;  // null: the graph ran no program (views only)
  if (!fn) fn = std::make_shared<exec::CapturedFunction>();

  // This call: the function applied to the buffers it was captured with.
  std::vector<exec::DeferredPtr> results;
  if (c->fn) {
    std::vector<exec::ProgramArg> now;
    now.reserve(fn->buffers.size());
    for (size_t i = 0; i < fn->buffers.size(); ++i) now.push_back({fn->buffers[i], nullptr, fn->param_types[i]});
    results = record(*c, now);
  }
  std::unordered_map<const exec::DeferredValue*, int> result_of;
  for (size_t k = 0; k < fn->values.size(); ++k) {
    result_of.emplace(fn->values[k].get(), static_cast<int>(k));
    fn->values[k]->forward_to(results[k]);
  }
  std::vector<bool> attributed(fn->values.size(), false);
  for (const auto& [value, message] : fn->checks) attributed[value] = true;
  exec::DeferredGraph& graph = current_executor().graph(device);
  auto take = [&](TpuStorage& s) -> int {  // the function result `s` holds now (rebinding it), or -1
    TpuStorage::Value v = s.raw_value();
    if (!v.deferred) return -1;
    auto it = result_of.find(v.deferred.get());
    if (it == result_of.end()) return -1;
    s.set_deferred(results[it->second], v.checks);  // (its checks' values forward to the results too)
    attributed[it->second] = true;
    return it->second;
  };

  // Placeholders: which storage each parameter reads; which storages the
  // graph wrote.
  std::unordered_map<const c10::StorageImpl*, Position> placeholder_of;
  for_each_tensor_at(args, [&](const at::Tensor& t, Position p) {
    if (is_tpu(t)) placeholder_of.emplace(t.storage().unsafeGetStorageImpl(), p);
  });
  std::unordered_map<const c10::StorageImpl*, size_t> param_of;
  for (size_t i = 0; i < fn->origins.size(); ++i) {
    if (fn->origins[i].kind == Origin::Kind::Storage) param_of.emplace(static_cast<const c10::StorageImpl*>(fn->origins[i].ptr), i);
  }
  for (const auto& [impl, pos] : placeholder_of) {
    TpuStorage& s = storage_of(tensor_at(args, pos));
    const int value = take(s);
    if (value >= 0) {
      c->writes.emplace_back(pos, value);
      auto p = param_of.find(impl);
      if (p != param_of.end()) graph.replaced(fn->buffers[p->second], nullptr, results[value]);
    } else if (!holds(s, st.before[impl]) && why.empty()) {
      why = "an input's storage was given a value outside the graph's programs";
    }
  }
  for (const auto& [value, message] : fn->checks) graph.add_check(results[value], message);

  // Outputs.
  std::unordered_map<const c10::StorageImpl*, int> out_storage;
  for (const at::Tensor& t : outputs) {
    TORCH_CHECK(is_tpu(t), "torch_tpu internal error: a captured output is not a tpu tensor");
    const c10::StorageImpl* impl = t.storage().unsafeGetStorageImpl();
    auto [it, fresh] = out_storage.emplace(impl, static_cast<int>(c->storages.size()));
    if (fresh) {
      OutStorage o;
      o.nbytes = t.storage().nbytes();
      auto p = placeholder_of.find(impl);
      if (p != placeholder_of.end()) {
        o.placeholder = p->second;
      } else {
        TpuStorage& s = storage_of(t);
        o.value = take(s);
        const bool written = s.raw_value().buffer || s.raw_value().deferred;
        if (o.value < 0 && written && why.empty()) why = "an output holds a value made outside the graph's programs";
      }
      c->storages.push_back(o);
    }
    c->outputs.push_back({it->second, t.sizes().vec(), t.strides().vec(), t.storage_offset(), t.scalar_type()});
  }
  for (size_t k = 0; k < attributed.size() && why.empty(); ++k) {
    if (!attributed[k]) why = "a value of the graph is held outside its outputs and inputs";
  }

  // Bindings for later calls.
  std::unordered_map<const void*, int> host_index;
  for (size_t i = 0; i < host.size(); ++i) host_index.emplace(reinterpret_cast<const void*>(host[i]), static_cast<int>(i));
  std::unordered_map<const c10::StorageImpl*, const at::Tensor*> constant_of;
  for (const at::Tensor& t : constants) {
    if (is_tpu(t)) constant_of.emplace(t.storage().unsafeGetStorageImpl(), &t);
  }
  for (size_t i = 0; i < fn->origins.size() && why.empty(); ++i) {
    const Origin& o = fn->origins[i];
    Binding b;
    b.type = fn->param_types[i];
    switch (o.kind) {
      case Origin::Kind::Storage: {
        const auto* impl = static_cast<const c10::StorageImpl*>(o.ptr);
        if (auto p = placeholder_of.find(impl); p != placeholder_of.end()) {
          b.kind = Binding::Kind::Placeholder;
          b.pos = p->second;
        } else if (auto k = constant_of.find(impl); k != constant_of.end()) {
          b.kind = Binding::Kind::Storage;
          b.storage = k->second->storage();
        } else {
          why = "an op read a tensor that is neither an input nor a constant of the graph";
        }
        break;
      }
      case Origin::Kind::HostTensor: {
        auto h = host_index.find(o.ptr);
        if (h == host_index.end()) {
          why = "an op read a CPU scalar made inside an op";
          break;
        }
        b.kind = Binding::Kind::Host;
        b.host = h->second;
        b.dtype = o.dtype;
        b.part = o.part;
        break;
      }
      case Origin::Kind::Rng:
        b.kind = Binding::Kind::Rng;
        b.count = o.count;
        break;
      case Origin::Kind::Constant:
        b.kind = Binding::Kind::Constant;
        b.buffer = fn->buffers[i];
        break;
      case Origin::Kind::Unknown: why = "an operand was made outside the graph's programs"; break;
    }
    c->bindings.push_back(std::move(b));
  }
  fn->values.clear();
  fn->buffers.clear();  // the bindings keep the constants

  if (why.empty() && !keep) why = "not kept";
  std::shared_ptr<GraphEntries> g = entries_of(handle);
  if (!st.key) return result(why.empty() ? "the graph's inputs cannot be described for a replay" : why);
  std::lock_guard<std::mutex> lock(g->mu);
  if (g->entries.size() >= kMaxEntries || g->by_key.size() >= 4 * kMaxEntries) {
    // Numbers that change every call (they are part of the signature): stop capturing.
    g->saturated = true;
    return result(why.empty() ? "this graph keeps no more signatures" : why);
  }
  if (!why.empty()) {
    g->by_key.emplace(std::move(*st.key), kRunsOps);  // this signature runs its ops each call
    return result(why);
  }
  const int entry = static_cast<int>(g->entries.size());
  g->by_key.emplace(std::move(*st.key), entry);
  g->entries.push_back(std::move(c));
  return {entry, ""};
}

// ---- replay ---------------------------------------------------------------------------

int64_t graph_new() {
  std::lock_guard<std::mutex> lock(g_mu);
  const int64_t h = g_next_handle++;
  g_graphs.emplace(h, std::make_shared<GraphEntries>());
  return h;
}

void graph_release(int64_t handle) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_graphs.erase(handle);
}

// The capture kept for these placeholders' signature; -1: none yet (capture
// it); kRunsOps: it cannot be replayed (run the ops).
int64_t graph_lookup(int64_t handle, c10::List<c10::IValue> placeholders) {
  std::shared_ptr<GraphEntries> g = entries_of(handle);
  std::vector<c10::IValue> args(placeholders.begin(), placeholders.end());
  std::optional<std::string> key = graph_key(g.get(), args);
  if (!key) return kRunsOps;
  std::lock_guard<std::mutex> lock(g->mu);
  auto it = g->by_key.find(*key);
  if (it != g->by_key.end()) return it->second;
  return g->saturated ? kRunsOps : -1;
}

std::vector<at::Tensor> graph_replay(int64_t handle, int64_t entry, c10::List<c10::IValue> placeholders,
                                     std::vector<c10::Scalar> host) {
  std::shared_ptr<const Captured> c;
  {
    std::shared_ptr<GraphEntries> g = entries_of(handle);
    std::lock_guard<std::mutex> lock(g->mu);
    c = g->entries.at(entry);
  }
  std::vector<c10::IValue> args(placeholders.begin(), placeholders.end());
  const int device = c->device;
  std::vector<exec::ProgramArg> bound;
  bound.reserve(c->bindings.size());
  exec::Checks read;
  auto& rt = exec::Runtime::get();
  for (const Binding& b : c->bindings) {
    switch (b.kind) {
      case Binding::Kind::Placeholder:
      case Binding::Kind::Storage: {
        TpuStorage& s = b.kind == Binding::Kind::Storage ? storage_of(b.storage) : storage_of(tensor_at(args, b.pos));
        TpuStorage::Value v = operand_value(s, device);
        exec::merge_checks(read, v.checks);
        bound.push_back({std::move(v.buffer), std::move(v.deferred), std::move(v.type)});
        break;
      }
      case Binding::Kind::Host: {
        c10::Scalar s = host.at(b.host);
        if (b.part >= 0) s = b.part == 0 ? s.toComplexDouble().real() : s.toComplexDouble().imag();
        bound.push_back({rt.scalar_buffer(b.dtype, scalar_bits(s, b.dtype), device), nullptr, b.type});
        break;
      }
      case Binding::Kind::Rng: bound.push_back(rng_key_operand(device, b.count)); break;
      case Binding::Kind::Constant: bound.push_back({b.buffer, nullptr, b.type}); break;
    }
  }
  std::vector<exec::DeferredPtr> results;
  if (c->fn) results = record(*c, bound);  // (none: the graph makes views only)
  bound.clear();
  const exec::Checks checks = replay_checks(*c, results, std::move(read));
  std::vector<c10::Storage> storages;
  storages.reserve(c->storages.size());
  for (const OutStorage& o : c->storages) {
    if (o.placeholder.arg >= 0) {
      storages.push_back(tensor_at(args, o.placeholder).storage());
      continue;
    }
    storages.push_back(new_storage(o.nbytes, device));
    if (o.value >= 0) storage_of(storages.back()).set_deferred(results[o.value], checks);
  }
  finish(*c, args, results, checks);
  std::vector<at::Tensor> out;
  out.reserve(c->outputs.size());
  for (const OutTensor& o : c->outputs) out.push_back(view_of(storages[o.storage], o, device));
  return out;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(torch_tpu, m) {
  m.def("_graph_new() -> int", &graph_new);
  m.def("_graph_release(int handle) -> ()", &graph_release);
  m.def("_graph_capture_begin(int handle, Any[] placeholders) -> ()", &capture_begin);
  m.def("_graph_capture_abort() -> ()", &capture_abort);
  m.def("_graph_capture_end(int handle, Any[] placeholders, Tensor[] outputs, int[] host, Tensor[] constants, "
        "bool keep) -> (int, str)",
        &capture_end);
  m.def("_graph_lookup(int handle, Any[] placeholders) -> int", &graph_lookup);
  m.def("_graph_replay(int handle, int entry, Any[] placeholders, Scalar[] host) -> Tensor[]", &graph_replay);
}

}  // namespace tpu
