// Where in the user's Python code the current op was called from.
#pragma once

#include <cstdint>

namespace tpu {

// An id of the Python line that made the current call (its code object
// and line), or 0 when there is none: a thread without Python (autograd's
// device threads), or a process without Python (the C++ tests). Costs
// taking the GIL when this thread has released it; call it only on paths
// that decide something once per new tensor, not per op.
// With `in_torch`: whether that line is PyTorch's own code (a file of the
// torch package: module.to moving a module's buffers, torch.load, an
// optimizer making its state).
uint64_t python_call_site(bool* in_torch = nullptr);

}  // namespace tpu
