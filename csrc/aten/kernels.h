// The boxed kernel that runs every lowered ATen op on the tpu device, and
// the CPU fallback for ops without a lowering.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

#include <string>
#include <vector>

namespace tpu {

enum class VariantKind : int64_t { Functional = 0, Inplace = 1, Out = 2 };

// Register the kernel for `variant` ("aten::add_.Tensor"), lowered through
// the functional op `functional` ("aten::add.Tensor").
void register_variant(const std::string& variant, const std::string& functional, VariantKind kind);

// Ops run on the CPU by the fallback since start (name -> count).
std::vector<std::pair<std::string, int64_t>> fallback_counts();
void set_cpu_fallback(bool enabled);
bool cpu_fallback_enabled();

// The process state lowerings read now (see lowering_globals in op_memo.h).
uint32_t current_lowering_globals();

void fallback_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack);

}  // namespace tpu
