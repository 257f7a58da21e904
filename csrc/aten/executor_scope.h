// Which executor (csrc/exec/executor.h) the calling thread's ops go to.
//
// A scope (torch_tpu.execution_mode(...)) pushes an executor onto PyTorch's
// thread-local debug info, which PyTorch carries into the threads that run
// work on the thread's behalf: autograd's device threads run a backward
// under the state of the thread that called backward(), so a fused
// forward, its backward and the optimizer step land in one graph. Code
// outside every scope uses the process default executor.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>

#include <ATen/Context.h>

#include "csrc/exec/executor.h"
#include "csrc/pjrt/buffer.h"

namespace tpu {

exec::Executor& current_executor();

// Enter a scope running in `mode` on the calling thread: a fresh executor
// (its own fused graphs), or the current one when it is already a scope's
// in that mode. Scopes nest; exit_execution_scope() leaves the innermost
// (running what it deferred when it leaves fused mode).
void enter_execution_scope(exec::ExecutionMode mode);
void exit_execution_scope();

// torch.tpu.precision's scope: the float32 matmul precision (an
// at::Float32MatmulPrecision) of the calling thread's ops, carried into the
// autograd threads working for it as execution scopes are. Scopes nest;
// outside every scope a thread uses the process default
// (torch.set_float32_matmul_precision), and so does a new thread.
void enter_precision_scope(at::Float32MatmulPrecision precision);
void exit_precision_scope();
// The innermost scope's precision; nullopt outside every scope.
std::optional<at::Float32MatmulPrecision> scoped_precision();

// When `done` (a program's completion on `device`, or null: nothing
// pending) completed, on the steady clock (steady_now_ns); 0 until then.
// Markers recorded on the same completion share one time.
std::shared_ptr<std::atomic<int64_t>> completion_time(int device, const std::shared_ptr<pjrt::Event>& done);
int64_t steady_now_ns();

// Run the deferred graphs of `device` that this thread can reach (its
// executor's and the process default's), then wait for the device.
void synchronize_device(int device);

}  // namespace tpu
