#include "csrc/exec/executor.h"

#include <cstdlib>
#include <string>

#include "csrc/exec/deferred.h"
#include "csrc/exec/runtime.h"

namespace tpu::exec {

ExecutionMode mode_from_environment() {
  auto set = [](const char* name) {
    const char* v = std::getenv(name);
    return v != nullptr && *v != '\0' && std::string(v) != "0";
  };
  if (set("TORCH_TPU_LAUNCH_BLOCKING")) return ExecutionMode::Debug;
  if (set("TORCH_TPU_DEFER_AND_FUSE")) return ExecutionMode::Fused;
  return ExecutionMode::Strict;
}

Executor& Executor::process_default() {
  // Never destroyed: values deferred at exit are simply dropped.
  static Executor* e = new Executor(mode_from_environment());
  return *e;
}

Executor::~Executor() {
  try {
    flush();
  } catch (...) {
    // A failed graph leaves its error in every value it would have made.
  }
}

void Executor::set_mode(ExecutionMode m) {
  const ExecutionMode old = mode_.exchange(m);
  if (old == ExecutionMode::Fused && m != ExecutionMode::Fused) flush();
}

DeferredGraph& Executor::graph(int device) {
  std::lock_guard<std::mutex> lock(mu_);
  if (graphs_.empty()) graphs_.resize(Runtime::get().device_count());
  std::unique_ptr<DeferredGraph>& g = graphs_.at(device);
  if (!g) g = std::make_unique<DeferredGraph>(Runtime::get(), device, mode() == ExecutionMode::Capture);
  return *g;
}

void Executor::flush() {
  std::vector<DeferredGraph*> graphs;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& g : graphs_) {
      if (g) graphs.push_back(g.get());
    }
  }
  for (DeferredGraph* g : graphs) g->flush();
}

void Executor::flush(int device) {
  DeferredGraph* g = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (device >= 0 && static_cast<size_t>(device) < graphs_.size()) g = graphs_[device].get();
  }
  if (g) g->flush();
}

}  // namespace tpu::exec
