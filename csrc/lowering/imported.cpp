// Functions made elsewhere (JAX functions exported to StableHLO by
// torch_tpu.pallas) called as ops: torch_tpu::_jax_call(args, kernel) calls
// the registered kernel's entry function on its arguments. The functions'
// text travels with the op's program, so the call runs in strict eager,
// fuses with its neighbours in fused eager and sits inside compiled graphs.
#include <mutex>

#include "csrc/lowering/lowering.h"

namespace tpu::lowering {

namespace {

std::mutex g_imported_mu;
std::vector<ImportedKernel>& imported_kernels() {
  static auto* k = new std::vector<ImportedKernel>();
  return *k;
}

}  // namespace

int64_t register_imported(ImportedKernel kernel) {
  std::lock_guard<std::mutex> lock(g_imported_mu);
  auto& ks = imported_kernels();
  ks.push_back(std::move(kernel));
  return static_cast<int64_t>(ks.size()) - 1;
}

const ImportedKernel& imported_kernel(int64_t id) {
  std::lock_guard<std::mutex> lock(g_imported_mu);
  auto& ks = imported_kernels();
  TORCH_CHECK(id >= 0 && id < static_cast<int64_t>(ks.size()), "torch_tpu: no imported kernel ", id);
  return ks[id];  // entries are never removed; the vector grows only under the lock
}

namespace {

// (Tensor[] args, int kernel)
std::vector<Value> lower_jax_call(Context& c) {
  const ImportedKernel& k = imported_kernel(c.args.int_(1));
  std::vector<Value> args = c.args.tensors(0);
  TORCH_CHECK(args.size() == k.in_types.size(), k.name, ": expects ", k.in_types.size(), " tensors, got ",
              args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    const Type& want = k.in_types[i];
    TORCH_CHECK(c.b.type(args[i]) == want, k.name, ": argument ", i, " is ", to_aten(c.b.dtype(args[i])),
                c10::IntArrayRef(c.b.dims(args[i])), ", the function was exported for ", to_aten(want.dtype),
                c10::IntArrayRef(want.dims));
  }
  return c.b.call_imported(k.functions, k.entry, args, k.out_types);
}

}  // namespace

TPU_LOWERINGS(imported) { reg("torch_tpu::_jax_call", lower_jax_call); }

}  // namespace tpu::lowering
