// The process-wide device runtime: one PJRT plugin, one client, its devices,
// and the executable cache. Created lazily on first use. How programs are
// run (at once, waited for, or deferred) is the executor's business
// (executor.h), not the runtime's.
#pragma once

#include <string_view>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>

#include "csrc/exec/check_failure.h"
#include <string>
#include <unordered_map>
#include <vector>

#include "csrc/exec/deferred.h"
#include "csrc/exec/device_check.h"
#include "csrc/exec/executable_cache.h"
#include "csrc/exec/executor.h"
#include "csrc/hlo/types.h"
#include "csrc/pjrt/client.h"

namespace tpu::exec {

// Set before the runtime starts (from Python: torch_tpu picks the plugin).
struct RuntimeConfig {
  std::string plugin_path;        // TORCH_TPU_PJRT_PLUGIN wins over this
  int64_t cpu_device_count = 1;   // devices of the CPU plugin (TORCH_TPU_CPU_DEVICES)
  std::string cache_dir;          // persistent compile cache (TORCH_TPU_CACHE_DIR)
  std::string session;            // names the workload for warm starts (ExecutableCache)
};

class Runtime {
 public:
  static void configure(const RuntimeConfig& config);
  static Runtime& get();  // starts the runtime on first call; throws PluginError
  static bool started();

  const pjrt::Client& client() const { return *client_; }
  int device_count() const { return static_cast<int>(client_->devices().size()); }
  const pjrt::Device& device(int index) const;
  ExecutableCache& cache() { return *cache_; }
  const std::string& plugin_path() const { return plugin_path_; }
  const std::string& compile_options() const { return compile_options_; }
  // Whether executables are compiled for any device (chosen at execution).
  bool portable() const { return portable_; }

  // Compile (or find) `program` and run it on device `index`; `wait`: until
  // it has finished (debug eager), surfacing its errors here.
  std::vector<pjrt::BufferPtr> run(const std::string& program,
                                   const std::vector<pjrt::c::PJRT_Buffer*>& args, int device, bool wait = false);
  // The same for a program known by `key` (see ExecutableCache).
  std::vector<pjrt::BufferPtr> run(const std::string& key, const std::function<std::string()>& program,
                                   const std::vector<pjrt::c::PJRT_Buffer*>& args, int device, bool wait = false);

  // Start `exe` on device `index` on this thread (the two run()s above, and
  // the launcher thread): tells the execution observer, and tracks its
  // completion for synchronize (or waits for it: `wait`). `fused`: it is a
  // fused graph. (Not counted in executions(): the caller counts it.)
  std::vector<pjrt::BufferPtr> start(const pjrt::ExecutablePtr& exe, const std::vector<pjrt::c::PJRT_Buffer*>& args,
                                     int device, bool wait, bool fused);
  // Counts a program started (or queued to start) for executions().
  void count_execution() { ++executions_; }

  // Run `program`, a module of `args.size()` replicas (mhlo.num_replicas),
  // as one execution across devices 0..n-1: replica r on device r with
  // args[r]. Returns each replica's outputs.
  std::vector<std::vector<pjrt::BufferPtr>> run_replicated(
      const std::string& program, const std::vector<std::vector<pjrt::c::PJRT_Buffer*>>& args);

  // A rank-0 device buffer holding `bits` (the value's bytes, little endian)
  // of `dtype`; cached, so a scalar used every step is uploaded once.
  pjrt::BufferPtr scalar_buffer(hlo::DType dtype, uint64_t bits, int device);

  // Wait until every program started on `device` finished; throws the
  // first error one of them reported, then the first failed check (below).
  // (Deferred programs have not started: the caller runs its executors'
  // graphs first.)
  void synchronize(int device);

  // Checks computed on the device (an index in range, a target in bounds):
  // `ok` is a rank-0 pred buffer. The check guards the values of its op
  // (device_check.h): reading them verifies it. Returns it, tracked for
  // synchronize; with `verify_now` (debug eager) the caller verifies it
  // once it stored what the op wrote.
  CheckPtr add_check(int device, pjrt::BufferPtr ok, std::string message, bool verify_now = false);
  // The same for a pred that a queued program computes (launcher.h).
  CheckPtr add_check(int device, DeferredPtr ok, std::string message);
  // Tracks `check` (of a fused graph that ran) for synchronize.
  void track_check(int device, CheckPtr check);
  // Throws CheckFailure for the first failed check of `device` not reported
  // yet (synchronize).
  void verify_checks(int device);

  // The completion of the latest program started on `device`: done once
  // everything started before it is (one in-order stream per device). Null
  // when nothing is pending.
  std::shared_ptr<pjrt::Event> last_event(int device);

  // A device-to-host copy into host memory [dst, dst + nbytes) started on
  // `device` (Buffer::to_host_async), and its completion: synchronize waits
  // for it, and host_copies lists it until it has landed. `keep` (what owns
  // the destination) is held until then, and let go on a caller's thread,
  // never on the plugin's. (PJRT keeps the source's memory itself.)
  void track_host_copy(int device, std::shared_ptr<pjrt::Event> done, const void* dst, size_t nbytes,
                       std::shared_ptr<const void> keep);
  // The host copies of `device` that may not have landed yet.
  std::vector<std::shared_ptr<pjrt::Event>> host_copies(int device);
  // Waits for the copies (to any device's host memory) still writing into
  // [p, p + n): a transfer about to read or write that memory comes after
  // them, as it would on one stream.
  void await_host_copies_into(const void* p, size_t n);

  // Executions started (for tests and statistics).
  int64_t executions() const { return executions_; }

  // Told of every program started, on the launching thread (the profiler's
  // device activity, csrc/aten/profiler.cpp): its device, its completion,
  // and whether it is a fused graph. One observer; null: none.
  using ExecutionObserver = void (*)(int device, const std::shared_ptr<pjrt::Event>& done, bool fused);
  static void set_execution_observer(ExecutionObserver observer);

 private:
  Runtime(const RuntimeConfig& config);
  std::shared_ptr<pjrt::Api> api_;
  std::unique_ptr<pjrt::Client> client_;
  std::unique_ptr<ExecutableCache> cache_;
  std::string plugin_path_;
  std::string compile_options_;
  bool portable_ = true;
  std::mutex scalar_mu_;
  std::unordered_map<std::string, pjrt::BufferPtr> scalars_;
  std::atomic<int64_t> executions_{0};
  // Completion events of programs not yet known to be finished, per device.
  std::mutex pending_mu_;
  std::vector<std::vector<std::shared_ptr<pjrt::Event>>> pending_;
  struct HostCopy {
    std::shared_ptr<pjrt::Event> done;
    uintptr_t begin, end;  // its destination
    std::shared_ptr<const void> keep;  // what owns the destination
  };
  std::atomic<int64_t> copies_in_flight_{0};  // (a hint: none, no lock to take)
  std::vector<std::vector<HostCopy>> copies_;  // per device, guarded by pending_mu_
  std::mutex checks_mu_;
  std::vector<std::vector<CheckPtr>> checks_;  // per device: not known to have passed, not reported
};

pjrt::c::PJRT_Buffer_Type to_pjrt(hlo::DType t);

}  // namespace tpu::exec
