// Fused eager: programs recorded instead of run, flushed as one program.
//
// In fused mode an op's program (built exactly as in strict mode) is not
// executed: it becomes a private function of a growing module, and its
// results become DeferredValues. A later op that reads such a value takes it
// straight from the graph; the graph runs as one program (`main` calling the
// recorded functions, which XLA inlines and fuses) when a value is needed on
// the host, the user synchronizes, the graph reaches its size limit, or an
// op cannot be deferred. Only values something still holds at that point
// become outputs; the rest stay internal, so intermediates never
// materialize. The module text depends only on the recorded structure, so a
// training loop compiles its step once and then hits the executable cache.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "csrc/hlo/types.h"
#include "csrc/pjrt/buffer.h"

namespace tpu::exec {

class DeferredGraph;
class Runtime;

// A device value that a recorded program will produce.
class DeferredValue {
 public:
  const hlo::Type& type() const { return type_; }
  // The buffer, running the graph first if it has not run yet; throws the
  // graph's error if it failed.
  pjrt::BufferPtr resolve();
  // Whether the value is still waiting in `graph` (in any graph).
  bool pending_in(const DeferredGraph* graph) const;
  bool pending() const { return graph_ != nullptr; }

 private:
  friend class DeferredGraph;
  DeferredValue(DeferredGraph* graph, hlo::Type type, int call, int result)
      : graph_(graph), type_(std::move(type)), call_(call), result_(result) {}
  DeferredGraph* graph_;  // null once resolved or failed
  hlo::Type type_;
  int call_, result_;     // which recorded program produced it
  pjrt::BufferPtr buffer_;
  std::string error_;
};
using DeferredPtr = std::shared_ptr<DeferredValue>;

// An argument of a recorded program: a materialized buffer or a value the
// graph will produce.
struct ProgramArg {
  pjrt::BufferPtr buffer;
  DeferredPtr deferred;
  hlo::Type type;
};

struct DeferredStats {
  int64_t recorded = 0;  // programs recorded
  int64_t flushes = 0;   // fused programs run
};

class DeferredGraph {
 public:
  DeferredGraph(Runtime& runtime, int device) : runtime_(runtime), device_(device) {}

  // Records the program `function_text` (a private function named `name`,
  // see hlo::Builder::function) applied to `args`; returns its results.
  // Runs the graph once it holds `max_programs()` programs.
  // `function_text` is called only if the graph's program must be compiled
  // (the executable cache misses), so it must stay valid until then.
  std::vector<DeferredPtr> record(const std::string& name, const std::function<std::string()>& function_text,
                                  const std::vector<ProgramArg>& args, const std::vector<hlo::Type>& results);
  // A device-side check (rank-0 pred) verified after the graph ran.
  void add_check(DeferredPtr ok, std::string message);
  // A storage that held `old` (maybe a parameter of this graph) now holds
  // `successor`: if nothing else holds `old` when the graph runs, its
  // buffer is donated to `successor` (an optimizer's parameter update
  // happens in place).
  void replaced(const pjrt::BufferPtr& old, const DeferredPtr& successor);

  // Run everything recorded as one program and resolve the values still
  // held. Errors are thrown here and by every value of the failed graph.
  void flush();
  size_t size() const;

  static size_t max_programs();  // TORCH_TPU_FUSED_MAX_OPS, default 2000
  static DeferredStats stats();

 private:
  friend class DeferredValue;
  struct Ref {
    int call;  // -1: parameter `index`
    int index;
  };
  struct Call {
    std::string name;
    std::vector<Ref> args;
    std::vector<hlo::Type> results;
  };
  Ref ref_for(const ProgramArg& a);
  void flush_locked();

  Runtime& runtime_;
  const int device_;
  mutable std::recursive_mutex mu_;
  std::vector<pjrt::BufferPtr> params_;
  std::vector<hlo::Type> param_types_;
  std::unordered_map<const pjrt::Buffer*, int> param_index_;
  std::unordered_map<int, std::weak_ptr<DeferredValue>> successors_;  // by parameter
  std::vector<Call> calls_;
  std::vector<std::string> function_order_;
  std::unordered_map<std::string, std::function<std::string()>> functions_;  // texts, made on a miss
  std::vector<std::weak_ptr<DeferredValue>> produced_;
  std::vector<std::pair<DeferredPtr, std::string>> checks_;
};

}  // namespace tpu::exec
