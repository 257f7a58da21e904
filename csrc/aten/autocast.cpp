// Mixed precision on tpu: torch.autocast("tpu").
//
// The AutocastPrivateUse1 dispatch key gets PyTorch's own autocast op lists
// (the ones CUDA uses): matmuls, convolutions, the fused RNN cells and
// attention run in the autocast dtype (bfloat16 by default, the TPU's native
// matmul type); numerically sensitive ops (exp/log/pow, norms, softmax,
// reductions, losses) run in float32; mixed-dtype ops (addcmul, index_put,
// ...) promote to the widest input. Every other op passes straight through.
#include <ATen/Operators.h>
#include <ATen/autocast_mode.h>
#include <torch/library.h>
#include <torch/version.h>

namespace tpu {
namespace {

#if TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR < 13
// torch 2.11's AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE names DimnameList
// unqualified (sum.dim_DimnameList); 2.13 has no named tensors.
using at::DimnameList;
#endif
using at::IntArrayRef;
using at::Scalar;
using at::ScalarType;
using at::Tensor;
using at::TensorList;

// torch.autocast("tpu") without a dtype means bfloat16 (CUDA's default is
// float16, which TPUs do not compute natively).
const bool g_default_dtype = [] {
  at::autocast::set_autocast_dtype(c10::DeviceType::PrivateUse1, at::kBFloat16);
  return true;
}();

}  // namespace

TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
#define TPU_AUTOCAST_LOWER(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
#define TPU_AUTOCAST_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
#define TPU_AUTOCAST_FP32_OPT(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
#define TPU_AUTOCAST_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)
  AT_FORALL_LOWER_PRECISION_FP(TPU_AUTOCAST_LOWER)
  AT_FORALL_FP32(TPU_AUTOCAST_FP32)
  AT_FORALL_FP32_SET_OPT_DTYPE(TPU_AUTOCAST_FP32_OPT)
  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE)
  AT_FORALL_PROMOTE(TPU_AUTOCAST_PROMOTE)
#undef TPU_AUTOCAST_LOWER
#undef TPU_AUTOCAST_FP32
#undef TPU_AUTOCAST_FP32_OPT
#undef TPU_AUTOCAST_PROMOTE
}

}  // namespace tpu
