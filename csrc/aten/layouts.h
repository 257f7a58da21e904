// How PyTorch's CPU kernels lay out their results, where the meta kernels
// say otherwise: strides computed on meta tensors (no data), for eager
// programs to produce their results in CPU's layout (kernels.cpp's
// lay_out_like_pytorch). Each function names the op by its functional name
// ("aten::flip").
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>

#include <optional>
#include <string>
#include <vector>

namespace tpu {

// The dims of `sizes` from outermost to innermost in memory under `strides`,
// when those strides are a dense permutation of the contiguous ones (size-1
// dims may have any stride); nullopt otherwise.
std::optional<std::vector<int64_t>> memory_order(c10::IntArrayRef sizes, c10::IntArrayRef strides);

// A pointwise op's result as CPU's TensorIterator lays it out (nullopt: the
// meta kernel's layout stands).
std::optional<at::Tensor> iterator_layout(const c10::OperatorHandle& op, const std::string& functional,
                                          const std::vector<c10::IValue>& args);

// roll's result as CPU lays it out (nullopt: contiguous, as the meta kernel's).
std::optional<at::Tensor> roll_layout(const std::string& functional, const std::vector<c10::IValue>& args);

// empty_like(self) as CPU lays it out: self's strides when self is dense,
// else dense strides in self's order of strides; with `options`.
at::Tensor empty_like_layout(const at::Tensor& self, const at::TensorOptions& options);

// Corrects `meta` (the op's results on meta tensors) where CPU's kernels lay
// results out otherwise.
void cpu_kernel_layouts(const std::string& functional, const std::vector<c10::IValue>& args,
                        std::vector<at::Tensor>& meta);

// The results of an op that has no meta kernel, as empty meta tensors.
std::optional<std::vector<at::Tensor>> without_meta_kernel(const std::string& functional,
                                                           const std::vector<c10::IValue>& args);

}  // namespace tpu
