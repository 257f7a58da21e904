#include "csrc/aten/executor_scope.h"

#include <c10/util/Exception.h>
#include <c10/util/ThreadLocalDebugInfo.h>

#include <cstdint>
#include <memory>
#include <string_view>
#include <type_traits>
#include <vector>

#include "csrc/exec/runtime.h"

namespace tpu {

namespace {

// A ThreadLocalDebugInfo slot of our own. torch 2.13's DebugInfoKind is a
// class keyed by the address of a name; up to torch 2.11 it is a uint8_t enum
// whose slots are matched by value, so there we take values past torch's own.
template <class Kind = c10::DebugInfoKind>
constexpr Kind debug_info_kind(const std::string_view* name, uint8_t legacy_value) {
  if constexpr (std::is_enum_v<Kind>) {
    return static_cast<Kind>(legacy_value);
  } else {
    return Kind(name);
  }
}

constexpr std::string_view kExecutorInfoName = "TORCH_TPU_EXECUTOR";
const c10::DebugInfoKind kExecutorInfo = debug_info_kind(&kExecutorInfoName, 0xA0);

struct ExecutorInfo : c10::DebugInfoBase {
  explicit ExecutorInfo(std::shared_ptr<exec::Executor> e) : executor(std::move(e)) {}
  std::shared_ptr<exec::Executor> executor;
};

// Per thread: the debug info in force before each open scope, and whether
// the scope made its executor (a reused one is not flushed on exit).
struct Saved {
  std::shared_ptr<c10::ThreadLocalDebugInfo> previous;
  std::shared_ptr<exec::Executor> executor;
  bool fresh = false;
};
thread_local std::vector<Saved> t_scopes;

ExecutorInfo* scope_info() { return static_cast<ExecutorInfo*>(c10::ThreadLocalDebugInfo::get(kExecutorInfo)); }

constexpr std::string_view kPrecisionInfoName = "TORCH_TPU_MATMUL_PRECISION";
const c10::DebugInfoKind kPrecisionInfo = debug_info_kind(&kPrecisionInfoName, 0xA1);

struct PrecisionInfo : c10::DebugInfoBase {
  explicit PrecisionInfo(at::Float32MatmulPrecision p) : precision(p) {}
  at::Float32MatmulPrecision precision;
};
// Per thread: the debug info in force before each open precision scope.
thread_local std::vector<std::shared_ptr<c10::ThreadLocalDebugInfo>> t_precision_scopes;

}  // namespace

void enter_precision_scope(at::Float32MatmulPrecision precision) {
  t_precision_scopes.push_back(c10::ThreadLocalDebugInfo::current());
  c10::ThreadLocalDebugInfo::_push(kPrecisionInfo, std::make_shared<PrecisionInfo>(precision));
}

void exit_precision_scope() {
  TORCH_CHECK(!t_precision_scopes.empty(), "torch.tpu.precision: no precision scope to leave on this thread");
  c10::ThreadLocalDebugInfo::_forceCurrentDebugInfo(std::move(t_precision_scopes.back()));
  t_precision_scopes.pop_back();
}

std::optional<at::Float32MatmulPrecision> scoped_precision() {
  auto* info = static_cast<PrecisionInfo*>(c10::ThreadLocalDebugInfo::get(kPrecisionInfo));
  if (info == nullptr) return std::nullopt;
  return info->precision;
}

exec::Executor& current_executor() {
  if (ExecutorInfo* info = scope_info()) return *info->executor;
  return exec::Executor::process_default();
}

void enter_execution_scope(exec::ExecutionMode mode) {
  Saved saved;
  saved.previous = c10::ThreadLocalDebugInfo::current();
  ExecutorInfo* info = scope_info();
  if (info != nullptr && info->executor->mode() == mode && mode != exec::ExecutionMode::Capture) {
    saved.executor = info->executor;
  } else {
    saved.executor = std::make_shared<exec::Executor>(mode);
    saved.fresh = true;
  }
  c10::ThreadLocalDebugInfo::_push(kExecutorInfo, std::make_shared<ExecutorInfo>(saved.executor));
  t_scopes.push_back(std::move(saved));
}

void exit_execution_scope() {
  TORCH_CHECK(!t_scopes.empty(), "torch_tpu: no execution_mode scope to leave on this thread");
  Saved saved = std::move(t_scopes.back());
  t_scopes.pop_back();
  c10::ThreadLocalDebugInfo::_forceCurrentDebugInfo(saved.previous);
  // Leaving the scope leaves its mode: what it deferred runs now (errors
  // are raised here, and by the values concerned).
  if (saved.fresh) saved.executor->flush();
}

void synchronize_device(int device) {
  exec::Runtime& rt = exec::Runtime::get();
  rt.device(device);  // validates the index
  current_executor().flush(device);
  exec::Executor::process_default().flush(device);
  rt.synchronize(device);
}

}  // namespace tpu
