// Executors: what happens to an op's program once it is built.
//
// An op builds its plan the same way in every mode and hands it to the
// executor in force: run now (strict; debug also waits for it), or defer
// it into the executor's graph (fused eager), which later runs as one
// program. Which executor is in force is chosen per thread by a scope
// (csrc/aten/executor_scope.h: torch_tpu.execution_mode(...)); code outside
// every scope uses the process default, whose mode comes from the
// environment (TORCH_TPU_DEFER_AND_FUSE, TORCH_TPU_LAUNCH_BLOCKING) and
// set_execution_mode(). Nothing below aten/ asks which mode it is in: it is
// given an executor, or told whether to wait.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

namespace tpu::exec {

class DeferredGraph;

// Debug: wait for every program and surface its errors at the op that ran it.
// Strict: asynchronous; the host waits only when it reads a value.
// Fused: programs are recorded into a DeferredGraph and run together.
// Capture: recorded as in fused mode, into graphs that are taken as one
// function each (torch.compile replays a graph through them).
enum class ExecutionMode { Debug, Strict, Fused, Capture };

class Executor {
 public:
  explicit Executor(ExecutionMode mode) : mode_(mode) {}
  // Runs what is still deferred (errors are left to the values).
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  ExecutionMode mode() const { return mode_.load(std::memory_order_relaxed); }
  bool fused() const { return mode() == ExecutionMode::Fused || mode() == ExecutionMode::Capture; }
  // Debug mode: every program is waited for, every check verified at once.
  bool waits() const { return mode() == ExecutionMode::Debug; }
  // Leaving fused mode runs what was deferred.
  void set_mode(ExecutionMode m);

  // The graph this executor defers `device`'s programs into (made on first
  // use; it lives as long as the executor).
  DeferredGraph& graph(int device);
  // Run this executor's deferred graphs (all devices, or one), without
  // waiting for them.
  void flush();
  void flush(int device);

  // The executor of code outside every scope. Its initial mode is read from
  // the environment once.
  static Executor& process_default();

 private:
  std::atomic<ExecutionMode> mode_;
  std::mutex mu_;
  std::vector<std::unique_ptr<DeferredGraph>> graphs_;  // by device; null until used
};

ExecutionMode mode_from_environment();

}  // namespace tpu::exec
