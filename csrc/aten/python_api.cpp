// The control surface the Python package calls, as ops of the `torch_tpu`
// library (torch.ops.torch_tpu.*): no pybind11, so the extension is a plain
// shared library loaded with torch.ops.load_library.
#include <ATen/core/Tensor.h>
#include <chrono>
#include <torch/library.h>

#include "csrc/aten/bucketed.h"
#include "csrc/aten/eager.h"
#include "csrc/aten/executor_scope.h"
#include "csrc/aten/generator.h"
#include "csrc/aten/kernels.h"
#include "csrc/aten/op_memo.h"
#include "csrc/aten/storage.h"
#include "csrc/aten/tensor_ops.h"
#include "csrc/exec/launcher.h"
#include "csrc/exec/runtime.h"
#include "csrc/lowering/lowering.h"

namespace tpu {

std::string abi_layout();  // abi_layout.cpp

namespace {

void configure(std::string plugin_path, int64_t cpu_devices, std::string cache_dir, std::string session) {
  exec::RuntimeConfig c;
  c.plugin_path = std::move(plugin_path);
  c.cpu_device_count = cpu_devices;
  c.cache_dir = std::move(cache_dir);
  c.session = std::move(session);
  exec::Runtime::configure(c);
}

// Starts the runtime; raises RuntimeError with the loader's message.
exec::Runtime& runtime() {
  try {
    return exec::Runtime::get();
  } catch (const pjrt::PluginError& e) {
    TORCH_CHECK(false, e.what());
  } catch (const pjrt::Error& e) {
    TORCH_CHECK(false, "tpu: starting the PJRT client failed: ", e.what());
  }
}

int64_t device_count() { return runtime().device_count(); }
int64_t get_current_device() { return current_device(); }
void set_device(int64_t device) {
  const int n = runtime().device_count();
  TORCH_CHECK(device >= 0 && device < n, "tpu device index ", device, " is out of range: ", n,
              " device(s) available");
  set_current_device(static_cast<int>(device));
}
bool started() { return exec::Runtime::started(); }

bool in_forked_child() { return pjrt::in_forked_child(); }

// The function a device wait calls after Ctrl-C (torch_tpu._C_distributed's,
// which raises KeyboardInterrupt): its address.
void set_interrupt_hook(int64_t address) {
  pjrt::set_interrupt_hook(reinterpret_cast<void (*)()>(static_cast<intptr_t>(address)));
}

std::vector<std::string> runtime_info() {
  exec::Runtime& rt = runtime();
  const auto& api = rt.client().api();
  return {rt.plugin_path(), rt.client().platform_name(), rt.client().platform_version(),
          std::to_string(api.major()) + "." + std::to_string(api.minor())};
}

std::string device_name(int64_t device) { return runtime().device(static_cast<int>(device)).kind(); }

void synchronize(int64_t device) {
  try {
    synchronize_device(static_cast<int>(device));
  } catch (const pjrt::Error& e) {
    if (e.out_of_memory()) rethrow_out_of_memory_as_torch_error(static_cast<int>(device));
    TORCH_CHECK(false, "tpu: a program failed on the device: ", e.what());
  } catch (const exec::CheckFailure& e) {
    raise_check_failure(e);
  }
}

std::vector<double> cache_stats() {
  exec::CacheStats s = runtime().cache().stats();
  return {static_cast<double>(s.hits), static_cast<double>(s.misses),
          static_cast<double>(s.disk_hits), static_cast<double>(s.entries), s.compile_seconds,
          static_cast<double>(s.evictions), s.load_seconds, static_cast<double>(s.preloaded)};
}
int64_t clear_cache(bool disk) {
  runtime().cache().clear();
  return disk ? static_cast<int64_t>(runtime().cache().clear_disk()) : 0;
}
std::string cache_dir() { return runtime().cache().disk_dir(); }
int64_t executions() { return runtime().executions(); }
int64_t host_reads() { return pjrt::Buffer::host_reads(); }
std::vector<int64_t> op_memo_counts() {
  OpMemoStats s = op_memo_stats();
  return {s.built, s.reused, s.plans};
}
void set_op_memo_enabled(bool enabled) { set_op_memo(enabled); }

// Start strict eager's programs on the calling thread (on), or on the
// launcher thread again (off): benchmarks compare the two in one run.
void hold_inline_launches(bool on) { exec::Launcher::hold_inline(on); }

// Tests: the launcher thread's next program fails to start, out of memory
// (RESOURCE_EXHAUSTED) or with an internal error.
void fail_next_launch(bool out_of_memory, const std::string& message) {
  exec::Launcher::fail_next_start(
      out_of_memory ? pjrt::c::PJRT_Error_Code_RESOURCE_EXHAUSTED : pjrt::c::PJRT_Error_Code_INTERNAL, message);
}

std::string set_async_launch(const std::string& mode) {
  try {
    return exec::Launcher::set_mode(mode);
  } catch (const std::invalid_argument& e) {
    TORCH_CHECK_VALUE(false, e.what());
  }
}

exec::ExecutionMode parse_mode(const std::string& mode) {
  TORCH_CHECK(mode == "debug" || mode == "strict" || mode == "fused", "tpu: unknown execution mode '", mode,
              "'; expected 'debug', 'strict' or 'fused'");
  return mode == "debug" ? exec::ExecutionMode::Debug
         : mode == "fused" ? exec::ExecutionMode::Fused
                           : exec::ExecutionMode::Strict;
}
// The mode of the calling thread's executor: its innermost scope's, or
// (outside every scope) the process default's.
void set_execution_mode(std::string mode) { current_executor().set_mode(parse_mode(mode)); }
std::string execution_mode() {
  switch (current_executor().mode()) {
    case exec::ExecutionMode::Debug: return "debug";
    case exec::ExecutionMode::Fused:
    case exec::ExecutionMode::Capture: return "fused";
    default: return "strict";
  }
}
void enter_execution_mode(std::string mode) { enter_execution_scope(parse_mode(mode)); }
void exit_execution_mode() { exit_execution_scope(); }
// Run the calling thread's deferred graphs (fused eager), without waiting.
void flush() {
  if (!exec::Runtime::started()) return;
  current_executor().flush();
  exec::Executor::process_default().flush();
}
int64_t fused_max_ops() { return static_cast<int64_t>(exec::DeferredGraph::max_programs()); }
std::vector<int64_t> fused_stats() {
  exec::DeferredStats s = exec::DeferredGraph::stats();
  return {s.recorded, s.flushes, s.graphs, s.donated};
}

std::vector<int64_t> memory_stats(int64_t device) {
  MemoryCounters m = memory_counters(static_cast<int>(device));
  int64_t limit = -1, in_use = -1;
  if (auto s = runtime().device(static_cast<int>(device)).memory_stats()) {
    in_use = s->bytes_in_use;
    limit = s->bytes_limit.value_or(-1);
  }
  const MemoryStat& bytes = m.bytes[MemoryCounters::kAll];
  return {bytes.current, bytes.peak, m.allocations[MemoryCounters::kAll].allocated, in_use, limit};
}
void reset_peak_memory_stats(int64_t device) { reset_peak_memory(static_cast<int>(device)); }
void set_memory_limit_bytes(int64_t device, int64_t bytes) { set_memory_limit(static_cast<int>(device), bytes); }
void set_dump_on_cache_miss(bool on) { exec::ExecutableCache::set_dump_on_miss(on); }
bool dump_on_cache_miss() { return exec::ExecutableCache::dump_on_miss(); }

at::Float32MatmulPrecision parse_precision(const std::string& name) {
  if (name == "highest") return at::Float32MatmulPrecision::HIGHEST;
  if (name == "high") return at::Float32MatmulPrecision::HIGH;
  TORCH_CHECK(name == "medium", "torch.tpu.precision: unknown precision '", name,
              "'; expected 'highest', 'high' or 'medium' (Precision.HIGHEST, HIGH, DEFAULT)");
  return at::Float32MatmulPrecision::MEDIUM;
}
void enter_precision(std::string name) { enter_precision_scope(parse_precision(name)); }
void exit_precision() { exit_precision_scope(); }
// The calling thread's scoped precision ("" outside every scope).
std::string current_scoped_precision() {
  auto p = scoped_precision();
  if (!p) return "";
  switch (*p) {
    case at::Float32MatmulPrecision::HIGHEST: return "highest";
    case at::Float32MatmulPrecision::HIGH: return "high";
    default: return "medium";
  }
}

bool exact_new_tensors(bool on) { return set_exact_new_tensors(on); }
std::vector<at::Tensor> padded_value(const at::Tensor& t) {
  std::optional<at::Tensor> v = padded_value_of(t);
  return v ? std::vector<at::Tensor>{*v} : std::vector<at::Tensor>{};
}
at::Tensor as_padded_tensor(const at::Tensor& bucket, std::vector<int64_t> sizes) { return as_padded(bucket, sizes); }
bool bucketing_on() { return bucketing_enabled(); }
int64_t bucket_size(int64_t n) { return bucket_of(n); }
void reset_accumulated_memory_stats(int64_t device) { reset_accumulated_memory(static_cast<int>(device)); }
std::vector<int64_t> mem_get_info(int64_t device) {
  DeviceMemory d = device_memory(static_cast<int>(device));
  return {d.free, d.total};
}

void manual_seed(int64_t device, int64_t seed) {
  at::Generator g = default_generator(static_cast<c10::DeviceIndex>(device));
  std::lock_guard<std::mutex> lock(g.mutex());
  g.set_current_seed(static_cast<uint64_t>(seed));
}
int64_t initial_seed(int64_t device) {
  return static_cast<int64_t>(default_generator(static_cast<c10::DeviceIndex>(device)).current_seed());
}
int64_t seed(int64_t device) {
  at::Generator g = default_generator(static_cast<c10::DeviceIndex>(device));
  std::lock_guard<std::mutex> lock(g.mutex());
  return static_cast<int64_t>(g.seed());
}
at::Tensor get_rng_state(int64_t device) {
  at::Generator g = default_generator(static_cast<c10::DeviceIndex>(device));
  std::lock_guard<std::mutex> lock(g.mutex());
  return g.get_state();
}
void set_rng_state(int64_t device, const at::Tensor& state) {
  at::Generator g = default_generator(static_cast<c10::DeviceIndex>(device));
  std::lock_guard<std::mutex> lock(g.mutex());
  g.set_state(state);
}

void register_kernels(std::vector<std::string> variants, std::vector<std::string> functionals,
                      std::vector<int64_t> kinds) {
  TORCH_CHECK(variants.size() == functionals.size() && variants.size() == kinds.size(),
              "register_kernels: list lengths differ");
  for (size_t i = 0; i < variants.size(); ++i) {
    register_variant(variants[i], functionals[i], static_cast<VariantKind>(kinds[i]));
  }
}

std::vector<std::string> lowering_names() { return lowering::lowering_names(); }

void set_fallback(bool enabled) { set_cpu_fallback(enabled); }
bool fallback_enabled() { return cpu_fallback_enabled(); }
std::tuple<std::vector<std::string>, std::vector<int64_t>> fallback_counts_op() {
  std::vector<std::string> names;
  std::vector<int64_t> counts;
  for (auto& [n, c] : fallback_counts()) {
    names.push_back(n);
    counts.push_back(c);
  }
  return {names, counts};
}

// The floor under strict eager's per-op cost (benchmarks/eager_basics.py):
// the plugin alone running `x + 1` on x's device value `n` times from C++,
// launched as strict eager launches an op (asynchronously, asking for its
// completion event), nothing of ours in between. Seconds per execution.
double execute_floor(const at::Tensor& x, int64_t n) {
  TORCH_CHECK(x.device().type() == c10::DeviceType::PrivateUse1 && n > 0,
              "_execute_floor: expected a tpu tensor and a positive count, got ", x.device(), " and ", n);
  TpuStorage::Value v = storage_of(x).value();
  TORCH_CHECK(v.buffer, "_execute_floor: the tensor was never written");
  hlo::Builder b;
  const hlo::Value p = b.param(v.type);
  const std::string text = b.module({b.add(p, b.broadcast_in_dim(b.constant(1, v.type.dtype), v.type.dims, {}))});
  auto& rt = runtime();
  pjrt::ExecutablePtr exe = rt.cache().get_or_compile(text, rt.compile_options());
  const pjrt::Device* device = rt.portable() ? &rt.device(x.device().has_index() ? x.device().index() : 0) : nullptr;
  const std::vector<pjrt::c::PJRT_Buffer*> args{v.buffer->raw()};
  std::unique_ptr<pjrt::Event> last;
  auto run = [&](int64_t count) {
    for (int64_t i = 0; i < count; ++i) {
      std::unique_ptr<pjrt::Event> done;
      std::vector<pjrt::BufferPtr> out = exe->execute(args, device, &done);
      last = std::move(done);
    }
    if (last) last->await();
  };
  run(std::min<int64_t>(n, 50));  // warm up
  const auto start = std::chrono::steady_clock::now();
  run(n);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / static_cast<double>(n);
}

// Debugging aid: what a tensor's storage holds on the device.
// What a tpu tensor's storage holds, without running anything: a buffer, a
// value a deferred graph will produce, or nothing yet (zeros).
std::string storage_info(const at::Tensor& t) {
  if (auto padded = storage_of(t).padded()) {  // (its exact value may not exist yet)
    return "padded " + padded->type.str() + " holding " + c10::str(c10::IntArrayRef(padded->sizes)) + " of bucket " +
           c10::str(c10::IntArrayRef(padded->bounds)) + ", nbytes=" + std::to_string(storage_of(t).nbytes());
  }
  TpuStorage::Value v = storage_of(t).raw_value();
  const std::string what = v.deferred && v.deferred->pending() ? "deferred " + v.type.str()
                           : v.deferred            ? "buffer " + v.type.str()
                           : v.buffer ? "buffer " + v.type.str()
                                      : std::string("zeros (never written)");
  return what + ", nbytes=" + std::to_string(storage_of(t).nbytes());
}

}  // namespace

TORCH_LIBRARY(torch_tpu, m) {
  m.def("_configure(str plugin_path, int cpu_devices, str cache_dir, str session) -> ()", &configure);
  m.def("_started() -> bool", &started);
  m.def("_in_forked_child() -> bool", &in_forked_child);
  m.def("_set_interrupt_hook(int address) -> ()", &set_interrupt_hook);
  m.def("_runtime_info() -> str[]", &runtime_info);
  m.def("_register_kernels(str[] variants, str[] functionals, int[] kinds) -> ()", &register_kernels);
  m.def("_lowering_names() -> str[]", &lowering_names);
  m.def("_abi_layout() -> str", &abi_layout);
  m.def("_storage_info(Tensor t) -> str", &storage_info);
  m.def("_adopt_host(Tensor(a!) self, Tensor host) -> ()", &adopt_host);
  m.def("device_count() -> int", &device_count);
  m.def("current_device() -> int", &get_current_device);
  m.def("set_device(int device) -> ()", &set_device);
  m.def("device_name(int device) -> str", &device_name);
  m.def("synchronize(int device) -> ()", &synchronize);
  m.def("cache_stats() -> float[]", &cache_stats);
  m.def("clear_cache(bool disk) -> int", &clear_cache);
  m.def("cache_dir() -> str", &cache_dir);
  m.def("executions() -> int", &executions);
  m.def("_execute_floor(Tensor x, int n) -> float", &execute_floor);
  m.def("host_reads() -> int", &host_reads);
  m.def("op_memo_counts() -> int[]", &op_memo_counts);
  m.def("set_op_memo(bool enabled) -> ()", &set_op_memo_enabled);
  m.def("_hold_inline_launches(bool on) -> ()", &hold_inline_launches);
  m.def("_set_async_launch(str mode) -> str", &set_async_launch);
  m.def("_fail_next_launch(bool out_of_memory, str message) -> ()", &fail_next_launch);
  m.def("set_execution_mode(str mode) -> ()", &set_execution_mode);
  m.def("execution_mode() -> str", &execution_mode);
  m.def("_enter_execution_mode(str mode) -> ()", &enter_execution_mode);
  m.def("_exit_execution_mode() -> ()", &exit_execution_mode);
  m.def("flush() -> ()", &flush);
  m.def("fused_stats() -> int[]", &fused_stats);
  m.def("fused_max_ops() -> int", &fused_max_ops);
  m.def("memory_stats(int device) -> int[]", &memory_stats);
  m.def("reset_peak_memory_stats(int device) -> ()", &reset_peak_memory_stats);
  m.def("_set_memory_limit(int device, int bytes) -> ()", &set_memory_limit_bytes);
  m.def("reset_accumulated_memory_stats(int device) -> ()", &reset_accumulated_memory_stats);
  m.def("mem_get_info(int device) -> int[]", &mem_get_info);
  m.def("_set_dump_on_cache_miss(bool on) -> ()", &set_dump_on_cache_miss);
  m.def("_get_dump_on_cache_miss() -> bool", &dump_on_cache_miss);
  m.def("_enter_precision(str precision) -> ()", &enter_precision);
  m.def("_exit_precision() -> ()", &exit_precision);
  m.def("_scoped_precision() -> str", &current_scoped_precision);
  m.def("_exact_new_tensors(bool on) -> bool", &exact_new_tensors);
  m.def("_padded_value(Tensor t) -> Tensor[]", &padded_value);
  m.def("_as_padded(Tensor bucket, int[] sizes) -> Tensor", &as_padded_tensor);
  m.def("_bucketing() -> bool", &bucketing_on);
  m.def("_bucket_of(int n) -> int", &bucket_size);
  m.def("manual_seed(int device, int seed) -> ()", &manual_seed);
  m.def("initial_seed(int device) -> int", &initial_seed);
  m.def("seed(int device) -> int", &seed);
  m.def("get_rng_state(int device) -> Tensor", &get_rng_state);
  m.def("set_rng_state(int device, Tensor state) -> ()", &set_rng_state);
  m.def("set_cpu_fallback(bool enabled) -> ()", &set_fallback);
  m.def("cpu_fallback_enabled() -> bool", &fallback_enabled);
  m.def("cpu_fallback_counts() -> (str[], int[])", &fallback_counts_op);
}

}  // namespace tpu
