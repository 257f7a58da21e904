// Collectives across the devices of this process as one program: a module
// of N replicas (mhlo.num_replicas) whose replica r runs on device r, with
// a StableHLO all_reduce over the replicas. This is how plugins that run
// programs across devices (the CPU plugin's local devices, TPU chips, GPUs)
// reduce without a round trip through the host.
#include <ATen/core/Tensor.h>
#include <torch/library.h>

#include <string>
#include <vector>

#include "csrc/aten/storage.h"
#include "csrc/exec/runtime.h"
#include "csrc/hlo/builder.h"
#include "csrc/lowering/lowering.h"

namespace tpu {

namespace {

std::string combiner_of(const std::string& op, at::ScalarType dtype) {
  if (op == "sum") return dtype == at::kBool ? "stablehlo.or" : "stablehlo.add";
  if (op == "product") return dtype == at::kBool ? "stablehlo.and" : "stablehlo.multiply";
  if (op == "max") return dtype == at::kBool ? "stablehlo.or" : "stablehlo.maximum";
  if (op == "min") return dtype == at::kBool ? "stablehlo.and" : "stablehlo.minimum";
  TORCH_CHECK(false, "all_reduce_local: unknown op '", op, "'; expected 'sum', 'product', 'max' or 'min'");
}

// tensors[r] on tpu:r (r = 0..n-1), all of one shape and dtype: each
// result is their reduction, on the tensor's device.
std::vector<at::Tensor> all_reduce_local(std::vector<at::Tensor> tensors, std::string op) {
  const int n = static_cast<int>(tensors.size());
  TORCH_CHECK(n >= 1, "all_reduce_local: expected one tensor per device, got none");
  exec::Runtime& rt = exec::Runtime::get();
  TORCH_CHECK(n <= rt.device_count(), "all_reduce_local: ", n, " tensors for ", rt.device_count(),
              " tpu device(s); pass one tensor per device tpu:0..tpu:", rt.device_count() - 1);
  const at::Tensor& first = tensors[0];
  for (int r = 0; r < n; ++r) {
    const at::Tensor& t = tensors[r];
    TORCH_CHECK(t.defined() && t.device().type() == c10::DeviceType::PrivateUse1 && t.device().index() == r,
                "all_reduce_local: tensor ", r, " must be on tpu:", r, " (one tensor per device, in device order), "
                "got ", t.defined() ? t.device().str() : std::string("an undefined tensor"));
    TORCH_CHECK(t.sizes() == first.sizes() && t.scalar_type() == first.scalar_type(),
                "all_reduce_local: every tensor must have the shape and dtype of the first (", first.sizes(), " ",
                first.scalar_type(), "), tensor ", r, " is ", t.sizes(), " ", t.scalar_type());
  }
  const std::string combiner = combiner_of(op, first.scalar_type());
  if (first.numel() == 0) {
    std::vector<at::Tensor> empty;
    for (const at::Tensor& t : tensors) empty.push_back(t.clone());
    return empty;
  }
  // Each replica's operand: its tensor's elements, densely (a contiguous
  // clone: one program made every replica's value, so all have one type).
  std::vector<at::Tensor> dense(n);
  std::vector<std::vector<pjrt::c::PJRT_Buffer*>> args(n);
  hlo::Type type;
  exec::Checks checks;  // every result depends on every operand
  for (int r = 0; r < n; ++r) {
    dense[r] = tensors[r].contiguous().clone();
    TpuStorage::Value v = storage_of(dense[r]).value();
    exec::merge_checks(checks, v.checks);
    TORCH_CHECK(v.buffer, "torch_tpu internal error: all_reduce_local of a tensor with no device value");
    if (r == 0) type = v.type;
    TORCH_CHECK(v.type == type, "torch_tpu internal error: all_reduce_local operands of types ", type.str(),
                " and ", v.type.str());
    args[r].push_back(v.buffer->raw());
  }
  hlo::Builder b;
  hlo::Value x = b.param(type);
  std::vector<int64_t> group(n);
  for (int r = 0; r < n; ++r) group[r] = r;
  hlo::Value reduced = b.all_reduce(x, combiner, {group});
  hlo::ModuleAttributes attributes;
  attributes.num_replicas = n;
  std::vector<std::vector<pjrt::BufferPtr>> outs = rt.run_replicated(b.module({reduced}, {}, attributes), args);
  std::vector<at::Tensor> results;
  for (int r = 0; r < n; ++r) {
    results.push_back(tensor_from_buffer(outs[r][0], type, first.sizes(), first.scalar_type(), r, {}, checks));
  }
  return results;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(torch_tpu, m) {
  m.def("_all_reduce_local(Tensor[] tensors, str op) -> Tensor[]", &all_reduce_local);
}

}  // namespace tpu
