#include "csrc/exec/runtime.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <iterator>

#include "csrc/exec/launcher.h"
#include "csrc/hlo/builder.h"
#include "csrc/pjrt/compile_options.h"

namespace tpu::exec {

namespace {
std::mutex g_mu;
RuntimeConfig g_config;
Runtime* g_runtime = nullptr;

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}
}  // namespace

pjrt::c::PJRT_Buffer_Type to_pjrt(hlo::DType t) {
  using namespace pjrt::c;
  switch (t) {
    case hlo::DType::Pred: return PJRT_Buffer_Type_PRED;
    case hlo::DType::I8: return PJRT_Buffer_Type_S8;
    case hlo::DType::I16: return PJRT_Buffer_Type_S16;
    case hlo::DType::I32: return PJRT_Buffer_Type_S32;
    case hlo::DType::I64: return PJRT_Buffer_Type_S64;
    case hlo::DType::U8: return PJRT_Buffer_Type_U8;
    case hlo::DType::U16: return PJRT_Buffer_Type_U16;
    case hlo::DType::U32: return PJRT_Buffer_Type_U32;
    case hlo::DType::U64: return PJRT_Buffer_Type_U64;
    case hlo::DType::F16: return PJRT_Buffer_Type_F16;
    case hlo::DType::BF16: return PJRT_Buffer_Type_BF16;
    case hlo::DType::F32: return PJRT_Buffer_Type_F32;
    case hlo::DType::F64: return PJRT_Buffer_Type_F64;
    case hlo::DType::C64: return PJRT_Buffer_Type_C64;
    case hlo::DType::C128: return PJRT_Buffer_Type_C128;
    case hlo::DType::F8E4M3FN: return PJRT_Buffer_Type_F8E4M3FN;
    case hlo::DType::F8E5M2: return PJRT_Buffer_Type_F8E5M2;
    case hlo::DType::F8E4M3FNUZ: return PJRT_Buffer_Type_F8E4M3FNUZ;
    case hlo::DType::F8E5M2FNUZ: return PJRT_Buffer_Type_F8E5M2FNUZ;
  }
  return PJRT_Buffer_Type_INVALID;
}

void Runtime::configure(const RuntimeConfig& config) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_runtime != nullptr) return;  // too late: the runtime already started
  g_config = config;
}

bool Runtime::started() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_runtime != nullptr;
}

Runtime& Runtime::get() {
  // Fast path without the lock once started; the pointer is never reset
  // (the runtime lives until the process exits).
  Runtime* rt = __atomic_load_n(&g_runtime, __ATOMIC_ACQUIRE);
  if (rt != nullptr) return *rt;
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_runtime == nullptr) {
    __atomic_store_n(&g_runtime, new Runtime(g_config), __ATOMIC_RELEASE);
  }
  return *g_runtime;
}

Runtime::Runtime(const RuntimeConfig& config) {
  plugin_path_ = env("TORCH_TPU_PJRT_PLUGIN");
  if (plugin_path_.empty()) plugin_path_ = config.plugin_path;
  if (plugin_path_.empty()) {
    throw pjrt::PluginError(
        "no PJRT plugin found: TORCH_TPU_PJRT_PLUGIN is not set and no TPU (libtpu), GPU "
        "(jax-cuda13-pjrt / jax-cuda12-pjrt) or CPU (lammps-jax-pjrt-cpu) plugin is installed. "
        "Install one, e.g. `pip install lammps-jax-pjrt-cpu`, or point TORCH_TPU_PJRT_PLUGIN at a "
        "PJRT plugin .so.");
  }
  api_ = pjrt::Api::load(plugin_path_);
  client_ = pjrt::Client::create(api_);
  if (client_->platform_name() == "cpu") {
    // The XLA CPU client simulates several devices; we default to one (the
    // `tpu` device of a machine without accelerator), TORCH_TPU_CPU_DEVICES
    // asks for more (multi-device tests).
    int64_t n = config.cpu_device_count;
    const std::string e = env("TORCH_TPU_CPU_DEVICES");
    if (!e.empty()) n = std::max<int64_t>(1, std::atoll(e.c_str()));
    if (static_cast<int64_t>(client_->devices().size()) != n) {
      client_.reset();
      client_ = pjrt::Client::create(api_, {{"cpu_device_count", n}});
    }
  }
  if (client_->devices().empty()) {
    throw pjrt::PluginError("PJRT plugin '" + plugin_path_ + "' reports no addressable devices.");
  }
  pjrt::CompileOptions co;
  co.portable = portable_ = client_->devices().size() > 1;
  compile_options_ = co.serialize();
  pending_.resize(client_->devices().size());
  copies_.resize(client_->devices().size());
  checks_.resize(client_->devices().size());
  // TORCH_TPU_CACHE_DIR: a directory, or "0"/"off" for none (torch_tpu
  // passes the resolved choice, defaulting to the user's cache directory).
  std::string cache_dir = config.cache_dir;
  if (const char* e = std::getenv("TORCH_TPU_CACHE_DIR")) cache_dir = e;
  if (cache_dir == "0" || cache_dir == "off") cache_dir.clear();
  // A positive count from the environment, or `fallback`.
  auto env_count = [](const char* name, size_t fallback) {
    const std::string v = env(name);
    return v.empty() ? fallback : static_cast<size_t>(std::max<long long>(1, std::atoll(v.c_str())));
  };
  const size_t capacity = env_count("TORCH_TPU_CACHE_MAX_ENTRIES", 4096);
  // XLA_FLAGS changes what the plugin compiles, so it is part of the key.
  const std::string identity = plugin_path_ + "|" + client_->platform_name() + "|" +
                               client_->platform_version() + "|" + std::to_string(api_->minor()) +
                               "|" + std::to_string(client_->devices().size()) + "|" + env("XLA_FLAGS");
  // TORCH_TPU_CACHE_MAX_MAPS: the process's memory mappings above which
  // cached executables go (default: half of vm.max_map_count).
  cache_ = std::make_unique<ExecutableCache>(client_.get(), identity, cache_dir, capacity, config.session,
                                             env_count("TORCH_TPU_CACHE_MAX_MAPS", 0));
}

const pjrt::Device& Runtime::device(int index) const {
  if (index < 0 || index >= device_count()) {
    throw std::out_of_range("tpu device index " + std::to_string(index) + " is out of range: " +
                            std::to_string(device_count()) + " device(s) available");
  }
  return client_->devices()[index];
}

namespace {
std::atomic<Runtime::ExecutionObserver> g_observer{nullptr};
}  // namespace

void Runtime::set_execution_observer(ExecutionObserver observer) { g_observer.store(observer); }

std::vector<pjrt::BufferPtr> Runtime::run(const std::string& program,
                                          const std::vector<pjrt::c::PJRT_Buffer*>& args,
                                          int device_index, bool wait) {
  return run(program, [&] { return program; }, args, device_index, wait);
}

std::vector<pjrt::BufferPtr> Runtime::run(const std::string& key, const std::function<std::string()>& program,
                                          const std::vector<pjrt::c::PJRT_Buffer*>& args,
                                          int device_index, bool wait) {
  pjrt::ExecutablePtr exe = cache_->get_or_compile(key, program, compile_options_);
  ++executions_;
  return start(exe, args, device_index, wait, key.compare(0, 6, "fused:") == 0);
}

std::vector<pjrt::BufferPtr> Runtime::start(const pjrt::ExecutablePtr& exe,
                                            const std::vector<pjrt::c::PJRT_Buffer*>& args, int device_index,
                                            bool wait, bool fused) {
  const pjrt::Device* dev = portable_ ? &device(device_index) : nullptr;
  std::unique_ptr<pjrt::Event> completion;
  std::vector<pjrt::BufferPtr> out = exe->execute(args, dev, &completion);
  if (!completion) return out;
  std::shared_ptr<pjrt::Event> done(std::move(completion));
  if (ExecutionObserver observe = g_observer.load(std::memory_order_acquire)) observe(device_index, done, fused);
  if (wait) {
    done->await_interruptible();
    return out;
  }
  std::lock_guard<std::mutex> lock(pending_mu_);
  auto& list = pending_[device_index];
  if (list.size() >= 256) {  // drop the finished ones; errors surface on reads
    std::vector<std::shared_ptr<pjrt::Event>> keep;
    for (auto& e : list) {
      if (!e->is_ready()) keep.push_back(std::move(e));
    }
    list.swap(keep);
  }
  list.push_back(std::move(done));
  return out;
}

std::vector<std::vector<pjrt::BufferPtr>> Runtime::run_replicated(
    const std::string& program, const std::vector<std::vector<pjrt::c::PJRT_Buffer*>>& args) {
  const int n = static_cast<int>(args.size());
  if (n < 1 || n > device_count()) {
    throw std::out_of_range("a replicated program needs 1 to " + std::to_string(device_count()) +
                            " replicas, not " + std::to_string(n));
  }
  // Compiled for n replicas on the default device assignment (replica r
  // on device r); the options are part of the cache key.
  pjrt::CompileOptions co;
  co.num_replicas = n;
  co.portable = false;
  pjrt::ExecutablePtr exe = cache_->get_or_compile(program, co.serialize());
  executions_ += 1;
  std::vector<std::unique_ptr<pjrt::Event>> done;
  std::vector<std::vector<pjrt::BufferPtr>> out = exe->execute_replicated(args, &done);
  std::lock_guard<std::mutex> lock(pending_mu_);
  for (int r = 0; r < n && r < static_cast<int>(done.size()); ++r) {
    if (done[r]) pending_[r].push_back(std::shared_ptr<pjrt::Event>(std::move(done[r])));
  }
  return out;
}

void Runtime::synchronize(int device_index) {
  device(device_index);  // validates
  Launcher::drain();     // (programs still queued have not started)
  std::vector<std::shared_ptr<pjrt::Event>> events;
  {
    std::lock_guard<std::mutex> lock(pending_mu_);
    events.swap(pending_[device_index]);
  }
  for (size_t k = 0; k < events.size(); ++k) {
    try {
      events[k]->await_interruptible();
    } catch (...) {
      // Ctrl-C ended the wait (the program has not finished): the programs
      // not waited for stay pending, so a later synchronize waits for them
      // and reports their errors. (A program's error is reported once.)
      if (!events[k]->is_ready()) {
        std::lock_guard<std::mutex> lock(pending_mu_);
        auto& list = pending_[device_index];
        list.insert(list.begin(), events.begin() + static_cast<std::ptrdiff_t>(k), events.end());
      }
      throw;
    }
  }
  // Then the host copies (each after the program that made its value).
  std::vector<HostCopy> copies;
  {
    std::lock_guard<std::mutex> lock(pending_mu_);
    copies.swap(copies_[device_index]);
  }
  for (size_t k = 0; k < copies.size(); ++k) {
    try {
      // (Ctrl-C may end the wait: the destination is kept until the copy lands.)
      copies[k].done->await_interruptible();
    } catch (...) {
      // The copies not waited for stay tracked (a copy's error is reported once).
      const size_t from = copies[k].done->is_ready() ? k + 1 : k;
      std::lock_guard<std::mutex> lock(pending_mu_);
      auto& list = copies_[device_index];
      list.insert(list.begin(), std::make_move_iterator(copies.begin() + static_cast<std::ptrdiff_t>(from)),
                  std::make_move_iterator(copies.end()));
      throw;
    }
  }
  copies.clear();
  verify_checks(device_index);
}

namespace {
// Moves the copies that have landed out of `list` into `landed` (whose
// destinations the caller lets go after unlocking: a tensor's storage may
// take the GIL to go).
template <class Copy>
void take_landed(std::vector<Copy>& list, std::vector<Copy>& landed) {
  auto keep = std::stable_partition(list.begin(), list.end(), [](const Copy& c) { return !c.done->is_ready(); });
  std::move(keep, list.end(), std::back_inserter(landed));
  list.erase(keep, list.end());
}
}  // namespace

void Runtime::track_host_copy(int device_index, std::shared_ptr<pjrt::Event> done, const void* dst, size_t nbytes,
                              std::shared_ptr<const void> keep) {
  device(device_index);  // validates
  const auto begin = reinterpret_cast<uintptr_t>(dst);
  std::vector<HostCopy> landed;
  std::lock_guard<std::mutex> lock(pending_mu_);
  take_landed(copies_[device_index], landed);
  copies_[device_index].push_back({std::move(done), begin, begin + nbytes, std::move(keep)});
  copies_in_flight_ = 1;
}

std::vector<std::shared_ptr<pjrt::Event>> Runtime::host_copies(int device_index) {
  device(device_index);  // validates
  std::vector<std::shared_ptr<pjrt::Event>> out;
  if (copies_in_flight_.load() == 0) return out;
  std::vector<HostCopy> landed;
  std::lock_guard<std::mutex> lock(pending_mu_);
  take_landed(copies_[device_index], landed);
  for (const HostCopy& c : copies_[device_index]) out.push_back(c.done);
  return out;
}

void Runtime::await_host_copies_into(const void* p, size_t n) {
  if (copies_in_flight_.load() == 0 || n == 0) return;
  const auto begin = reinterpret_cast<uintptr_t>(p), end = begin + n;
  std::vector<std::shared_ptr<pjrt::Event>> overlapping;
  std::vector<HostCopy> landed;
  {
    std::lock_guard<std::mutex> lock(pending_mu_);
    bool any = false;
    for (auto& list : copies_) {
      take_landed(list, landed);
      for (const HostCopy& c : list) {
        if (c.begin < end && begin < c.end) overlapping.push_back(c.done);
      }
      any = any || !list.empty();
    }
    if (!any) copies_in_flight_ = 0;
  }
  // Errors are left to synchronize (and to the reads of the failed values).
  for (const auto& done : overlapping) {
    try {
      done->await();
    } catch (const pjrt::Error&) {
    }
  }
}

std::shared_ptr<pjrt::Event> Runtime::last_event(int device_index) {
  device(device_index);  // validates
  Launcher::drain();
  std::lock_guard<std::mutex> lock(pending_mu_);
  const auto& list = pending_[device_index];
  return list.empty() ? nullptr : list.back();
}

CheckPtr Runtime::add_check(int device_index, pjrt::BufferPtr ok, std::string message, bool verify_now) {
  auto check = std::make_shared<DeviceCheck>(std::move(message), !verify_now);
  check->set_result(std::move(ok));
  if (!verify_now) track_check(device_index, check);
  return check;
}

CheckPtr Runtime::add_check(int device_index, DeferredPtr ok, std::string message) {
  auto check = std::make_shared<DeviceCheck>(std::move(message), true);
  check->set_result(std::move(ok));
  track_check(device_index, check);
  return check;
}

void Runtime::track_check(int device_index, CheckPtr check) {
  std::vector<CheckPtr> backlog;
  {
    std::lock_guard<std::mutex> lock(checks_mu_);
    auto& list = checks_.at(device_index);
    list.push_back(std::move(check));
    if (list.size() < 1024) return;
    backlog.swap(list);  // bounded: a long backlog is read now
  }
  std::vector<DeviceCheck*> all;
  for (const CheckPtr& c : backlog) all.push_back(c.get());
  DeviceCheck::read_all(all);
  std::vector<CheckPtr> keep;
  for (CheckPtr& c : backlog) {
    if (c->failed() && !c->reported) keep.push_back(std::move(c));  // for synchronize to report
  }
  if (keep.size() > 256) keep.erase(keep.begin(), keep.end() - 256);  // (their values still raise when read)
  std::lock_guard<std::mutex> lock(checks_mu_);
  auto& list = checks_.at(device_index);
  list.insert(list.begin(), keep.begin(), keep.end());
}

void Runtime::verify_checks(int device_index) {
  std::vector<CheckPtr> checks;
  {
    std::lock_guard<std::mutex> lock(checks_mu_);
    checks.swap(checks_.at(device_index));
  }
  // The first failure is raised; the others are not (as CUDA reports one
  // error), though reading their values still raises them.
  std::vector<DeviceCheck*> open;
  for (const CheckPtr& c : checks) {
    if (!c->reported) open.push_back(c.get());
  }
  DeviceCheck::read_all(open);
  for (const CheckPtr& c : checks) {
    if (c->reported || !c->failed() || c->reported.exchange(true)) continue;
    throw c->error();
  }
}

pjrt::BufferPtr Runtime::scalar_buffer(hlo::DType dtype, uint64_t bits, int device_index) {
  std::string key(1, static_cast<char>(dtype));
  key += static_cast<char>(device_index);
  key.append(reinterpret_cast<const char*>(&bits), sizeof(bits));
  {
    std::lock_guard<std::mutex> lock(scalar_mu_);
    auto it = scalars_.find(key);
    if (it != scalars_.end()) return it->second;
  }
  auto buf = client_->from_host(&bits, to_pjrt(dtype), {}, device(device_index));
  std::lock_guard<std::mutex> lock(scalar_mu_);
  if (scalars_.size() > 4096) scalars_.clear();  // bounded: values seen once drop out
  scalars_.emplace(std::move(key), buf);
  return buf;
}

}  // namespace tpu::exec
