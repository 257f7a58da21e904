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

#include <atomic>
#include <cstdint>
#include <exception>
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
class DeviceCheck;
class Runtime;

// A program that graphs record: a private function of their module.
struct Function {
  uint64_t fingerprint = 0;           // of its text (or structure): two texts never share one
  std::string name;                   // "op_<fingerprint>", "graph_<fingerprint>"
  std::function<std::string()> text;  // made only when a graph must be compiled
  std::vector<hlo::Type> results;
  std::vector<std::shared_ptr<const Function>> callees;  // the functions `text` calls
};
using FunctionPtr = std::shared_ptr<const Function>;

// A device value that a recorded program will produce.
class DeferredValue {
 public:
  const hlo::Type& type() const { return fn_->results[result_]; }
  // The buffer, running the graph first if it has not run yet; throws the
  // graph's error if it failed.
  pjrt::BufferPtr resolve();
  // Whether the value is still waiting in `graph` (in any graph).
  bool pending_in(const DeferredGraph* graph) const;
  bool pending() const { return graph_ != nullptr; }
  // A result of a program queued on the launcher thread (strict eager,
  // launcher.h); resolve() waits until the thread has started it.
  bool launched() const { return launch_ != 0; }
  // For donation: whether nothing but this value holds its buffer (true
  // while its program has not started: nothing can hold it yet).
  bool sole_holder_of_buffer() const;
  // A captured value (DeferredGraph::take_function) is computed by `to`:
  // whoever still holds it reads that.
  void forward_to(std::shared_ptr<DeferredValue> to) { forward_ = std::move(to); }

 private:
  friend class DeferredGraph;
  friend class Launcher;
  DeferredValue(DeferredGraph* graph, FunctionPtr fn, int call, int result)
      : graph_(graph), fn_(std::move(fn)), call_(call), result_(result) {}
  DeferredGraph* graph_;  // null once resolved or failed
  FunctionPtr fn_;        // the recorded program (its result types)
  int call_, result_;     // which recorded call produced it
  pjrt::BufferPtr buffer_;
  std::string error_;
  std::shared_ptr<DeferredValue> forward_;
  std::exception_ptr failure_;       // why its program could not start (launcher), as thrown
  uint64_t launch_ = 0;              // its program's number on the launcher (0: none)
  std::atomic<bool> started_{false};  // the launcher set buffer_ or error_ (release)
};
using DeferredPtr = std::shared_ptr<DeferredValue>;

// Where an argument's value came from, as the op that made it knew: what a
// captured graph (torch.compile) binds again at its next call. `ptr` names
// the storage (c10::StorageImpl*) or the CPU tensor (c10::TensorImpl*).
struct Origin {
  enum class Kind : uint8_t {
    Unknown,     // nothing to bind it from again (an upload, say)
    Storage,     // the value of storage `ptr`
    HostTensor,  // the number in CPU scalar tensor `ptr`, as `dtype` (`part` of a complex)
    Rng,         // a fresh key of the device's default generator for `count` values
    Constant,    // the same buffer every call (a number of the graph)
  };
  Kind kind = Kind::Unknown;
  int8_t part = -1;
  hlo::DType dtype = hlo::DType::F32;
  const void* ptr = nullptr;
  uint64_t count = 0;
  bool operator==(const Origin& o) const {
    return kind == o.kind && ptr == o.ptr && dtype == o.dtype && part == o.part && count == o.count;
  }
};

// An argument of a recorded program: a materialized buffer or a value the
// graph will produce.
struct ProgramArg {
  pjrt::BufferPtr buffer;
  DeferredPtr deferred;
  hlo::Type type;
  Origin origin;
};

// A recorded graph taken as one private function (torch.compile's capture):
// recording it into another graph later is one call instead of the ops.
struct CapturedFunction {
  // "graph_<fingerprint of the structure>"; its results: the values still
  // held, then the checks' values. Null for an empty capture.
  FunctionPtr function;
  std::vector<hlo::Type> param_types;
  std::vector<Origin> origins;          // per parameter
  std::vector<pjrt::BufferPtr> buffers;  // per parameter: its value when captured
  std::vector<std::pair<int, std::string>> checks;  // (result, message)
  // The values captured (results in order); valid until the capture is
  // bound to the tensors holding them.
  std::vector<DeferredPtr> values;
};

struct DeferredStats {
  int64_t recorded = 0;  // programs recorded
  int64_t flushes = 0;   // fused programs run
  int64_t graphs = 0;    // distinct structures among them (each compiled once, whatever the cache holds)
  int64_t donated = 0;   // parameter buffers they updated in place (donated to their successors)
};

class DeferredGraph {
 public:
  // `capture`: a graph that is never run by itself but taken as a function
  // (take_function); it has no size limit.
  DeferredGraph(Runtime& runtime, int device, bool capture = false)
      : runtime_(runtime), device_(device), capture_(capture) {}

  // Records a call of `fn` (see hlo::Builder::function) on `args`; returns
  // its results. Runs the graph once it holds `max_programs()` calls.
  // `fn->text` is called only if the graph's program must be compiled (the
  // executable cache misses).
  std::vector<DeferredPtr> record(const FunctionPtr& fn, const std::vector<ProgramArg>& args);
  // Records `fn` on `args` in the graph that `waiting` still waits in (one
  // of the args, say); empty when it waits in none.
  static std::vector<DeferredPtr> record_beside(const DeferredPtr& waiting, const FunctionPtr& fn,
                                                const std::vector<ProgramArg>& args);
  // A device-side check (rank-0 pred) verified after the graph ran.
  // (The check is the guard of the values computed from it: device_check.h.)
  std::shared_ptr<DeviceCheck> add_check(DeferredPtr ok, std::string message);
  // A storage that held `old` (maybe a parameter of this graph) or
  // `old_value` (maybe the successor of one) now holds `successor`: if
  // nothing else holds the parameter's buffer when the graph runs, it is
  // donated to its latest successor (an optimizer's updates of a parameter
  // or of its state, `mul_` then `addcdiv_` say, happen in place).
  void replaced(const pjrt::BufferPtr& old, const DeferredPtr& old_value, const DeferredPtr& successor);

  // Run everything recorded as one program and resolve the values still
  // held. Errors are thrown here and by every value of the failed graph.
  void flush();
  size_t size() const;

  // A capture graph's recording as one function (null if nothing was
  // recorded), leaving the graph empty. Its values wait for forward_to.
  // `why` is empty when the function can be bound again from its
  // parameters' origins at a later call, else it says why not.
  std::shared_ptr<CapturedFunction> take_function(std::string* why);

  static size_t max_programs();  // TORCH_TPU_FUSED_MAX_OPS, default 2000
  static DeferredStats stats();

 private:
  friend class DeferredValue;
  struct Ref {
    int call;  // -1: parameter `index`
    int index;
  };
  struct Call {
    FunctionPtr fn;
    std::vector<Ref> args;
  };
  // What was recorded since the graph last ran.
  struct Recording {
    std::vector<pjrt::BufferPtr> params;
    std::vector<hlo::Type> param_types;
    std::vector<Origin> origins;
    std::unordered_map<const pjrt::Buffer*, int> param_index;
    std::unordered_map<int, std::weak_ptr<DeferredValue>> successors;  // by parameter
    std::unordered_map<const DeferredValue*, int> succeeds;  // successor -> its parameter
    std::vector<Call> calls;
    std::vector<std::weak_ptr<DeferredValue>> produced;
    std::vector<std::shared_ptr<DeviceCheck>> checks;
    std::unordered_multimap<const pjrt::Buffer*, int> duplicates;  // capture: a buffer's other origins
  };
  Ref ref_for(const ProgramArg& a);
  void flush_locked();
  // The values something still holds, in recording order, then the checks'.
  static std::vector<DeferredPtr> live_values(const Recording& r);
  // The distinct functions `r` calls, each after the functions it calls.
  static std::vector<FunctionPtr> functions(const Recording& r);
  // The calls of `r` as function body text returning `live`.
  static void write_calls(const Recording& r, const std::vector<DeferredPtr>& live, std::string& body,
                          std::vector<std::string>& returned);
  // The structure of `r` returning `live` (parameters donated by `alias`).
  static std::string structure_key(const Recording& r, const std::vector<DeferredPtr>& live,
                                   const std::vector<int>& alias);

  Runtime& runtime_;
  const int device_;
  const bool capture_;
  bool ran_ = false;  // a capture graph that had to run by itself
  mutable std::recursive_mutex mu_;
  Recording rec_;
};

}  // namespace tpu::exec
