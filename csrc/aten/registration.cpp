// Kernels of the tpu device that are not lowerings: factories, metadata-only
// views, resizing, storage swaps, copies, and the choice of attention
// kernel. Lowered ops are registered at import time by torch_tpu (see
// kernels.cpp); everything else reaches the fallback, which raises unless
// the CPU fallback is on.
#include <ATen/Context.h>
#include <algorithm>
#include <ATen/SDPBackend.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/_nested_tensor_size_native.h>
#include <ATen/ops/_nested_tensor_storage_offsets_native.h>
#include <ATen/ops/_nested_tensor_strides_native.h>
#include <ATen/ops/_nested_view_from_buffer_native.h>
#include <ATen/ops/to_padded_tensor_native.h>
#include <ATen/ops/unbind_native.h>
#include <ATen/ops/full_like_native.h>
#include <ATen/ops/ones_like_native.h>
#include <ATen/ops/zeros_like_native.h>

#include "csrc/lowering/lowering.h"
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <ATen/ops/view_native.h>
#include <torch/library.h>

#include "csrc/aten/bucketed.h"
#include "csrc/aten/tensor_ops.h"

namespace tpu {
namespace {

// A kernel whose failures for want of memory (the plugin's, the host's) are
// torch.OutOfMemoryError, naming the device of its first tpu tensor.
template <auto F>
struct MemoryChecked;
template <class R, class... A, R (*F)(A...)>
struct MemoryChecked<F> {
  static R call(A... args) {
    try {
      return F(std::forward<A>(args)...);
    } catch (...) {
      int device = current_device();
      bool found = false;
      auto look = [&](const auto& arg) {
        if constexpr (std::is_same_v<std::decay_t<decltype(arg)>, at::Tensor>) {
          if (!found && arg.defined() && arg.device().type() == c10::DeviceType::PrivateUse1) {
            device = arg.device().has_index() ? arg.device().index() : device;
            found = true;
          }
        }
      };
      (look(args), ...);
      rethrow_out_of_memory_as_torch_error(device);
    }
  }
};
#define TPU_KERNEL(fn) TORCH_FN(MemoryChecked<&fn>::call)

at::Tensor& set_storage_offset(at::Tensor& self, at::Storage source, c10::SymInt offset,
                               c10::SymIntArrayRef size, c10::SymIntArrayRef stride) {
  return set_storage(self, std::move(source), offset.expect_int(), C10_AS_INTARRAYREF_SLOW(size),
                     C10_AS_INTARRAYREF_SLOW(stride));
}

// zeros_like, ones_like, full_like: PyTorch's kernels (empty_like, then a
// fill), whose fill mirrors the source's padding (LikeFill).
at::Tensor zeros_like(const at::Tensor& self, std::optional<at::ScalarType> dtype, std::optional<at::Layout> layout,
                      std::optional<at::Device> device, std::optional<bool> pin_memory,
                      std::optional<at::MemoryFormat> memory_format) {
  LikeFill like(self);
  return at::native::zeros_like(self, dtype, layout, device, pin_memory, memory_format);
}
at::Tensor ones_like(const at::Tensor& self, std::optional<at::ScalarType> dtype, std::optional<at::Layout> layout,
                     std::optional<at::Device> device, std::optional<bool> pin_memory,
                     std::optional<at::MemoryFormat> memory_format) {
  LikeFill like(self);
  return at::native::ones_like(self, dtype, layout, device, pin_memory, memory_format);
}
at::Tensor full_like(const at::Tensor& self, const at::Scalar& value, std::optional<at::ScalarType> dtype,
                     std::optional<at::Layout> layout, std::optional<at::Device> device,
                     std::optional<bool> pin_memory, std::optional<at::MemoryFormat> memory_format) {
  LikeFill like(self);
  return at::native::full_like(self, value, dtype, layout, device, pin_memory, memory_format);
}

// Whether `param.data = from` may swap a tensor's implementation in place.
// PyTorch's own answer admits only its built-in dense backends, so without
// this `module.to("tpu")` would replace every parameter by a new one and
// silently untie shared weights (a language model's embedding and output
// layer). A strided tensor on the CPU and one on tpu are interchangeable.
bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  auto dense = [](const at::Tensor& t) {
    return t.layout() == at::kStrided && (t.is_cpu() || t.device().type() == c10::DeviceType::PrivateUse1);
  };
  return self.unsafeGetTensorImpl()->has_compatible_shallow_copy_type(from.key_set()) ||
         (dense(self) && dense(from));
}

// scaled_dot_product_attention's backend on tpu: one fused program per
// direction ("overrideable": torch_tpu::_sdpa_forward and the overrideable
// backward, lowering/attention.cpp) where those cover the call, otherwise
// PyTorch's math decomposition (dropout, grouped-query heads, broadcast
// batch dims, nested tensors), which also raises PyTorch's errors.
int64_t fused_sdp_choice(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                         const std::optional<at::Tensor>& mask, double dropout_p, bool is_causal,
                         std::optional<double> /*scale*/, bool /*enable_gqa*/) {
  const auto math = static_cast<int64_t>(at::SDPBackend::math);
  if (!at::globalContext().userEnabledOverrideableSDP()) return math;
  const int64_t n = q.dim();
  if (q.is_nested() || k.is_nested() || v.is_nested() || n < 2 || k.dim() != n || v.dim() != n) return math;
  if (dropout_p > 0.0 || (is_causal && mask.has_value() && mask->defined())) return math;
  const at::ScalarType t = q.scalar_type();
  if (!c10::isFloatingType(t) || k.scalar_type() != t || v.scalar_type() != t) return math;
  // Symbolic sizes (torch.compile with dynamic shapes) are compared as such:
  // equal symbols answer without a guard, so no dimension is specialized.
  const auto qs = q.sym_sizes(), ks = k.sym_sizes(), vs = v.sym_sizes();
  for (int64_t d = 0; d < n - 2; ++d) {
    if (ks[d] != qs[d] || vs[d] != qs[d]) return math;
  }
  if (ks[n - 1] != qs[n - 1] || vs[n - 2] != ks[n - 2]) return math;
  if (mask.has_value() && mask->defined()) {
    const at::Tensor& m = *mask;
    if ((m.scalar_type() != at::kBool && m.scalar_type() != t) || m.dim() > n) return math;
    const auto ms = m.sym_sizes();
    for (int64_t i = 1; i <= m.dim(); ++i) {
      const c10::SymInt& want = i == 1 ? ks[n - 2] : i == 2 ? qs[n - 2] : qs[n - i];
      const c10::SymInt& have = ms[m.dim() - i];
      if (have != 1 && have != want) return math;
    }
  }
  return static_cast<int64_t>(at::SDPBackend::overrideable);
}

// The overrideable forward: our op computes the output and the logsumexp the
// backward needs; the rest (sequence offsets, dropout seeds, debug mask)
// belongs to other kernels and stays undefined.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, c10::SymInt, c10::SymInt, at::Tensor, at::Tensor, at::Tensor>
sdpa_overrideable(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const std::optional<at::Tensor>& bias,
                  double dropout_p, bool is_causal, bool return_debug_mask, std::optional<double> scale) {
  TORCH_CHECK(dropout_p == 0.0 && !return_debug_mask,
              "_scaled_dot_product_fused_attention_overrideable on tpu: dropout and the debug mask are not "
              "supported (dropout_p=", dropout_p, "); scaled_dot_product_attention runs the math backend for them");
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("torch_tpu::_sdpa_forward", "")
                             .typed<std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&,
                                                                        const at::Tensor&, const std::optional<at::Tensor>&,
                                                                        bool, std::optional<double>)>();
  auto [out, lse] = op.call(q, k, v, bias, is_causal, scale);
  // Seed and offset are (unused) tensors, as PyTorch's meta kernel makes
  // them: torch.compile saves them for the backward.
  const at::Tensor seed = at::empty({}, q.options().dtype(at::kLong));
  const at::Tensor offset = at::empty({}, q.options().dtype(at::kLong));
  return {out, lse, at::Tensor(), at::Tensor(), q.sym_size(-2), k.sym_size(-2), seed, offset, at::Tensor()};
}

// The meta kernel of torch_tpu::_sdpa_forward (shapes for torch.compile's
// tracing, and the layout the eager kernel gives its output): the output
// in the query's memory order of its leading dims, the feature dim
// innermost, as CPU's attention lays it out (so `out.transpose(1, 2).view(B,
// T, C)` works as on other devices, and a query with transposed last dims
// still gives a result dense in its features); the logsumexp contiguous, in
// the compute type.
std::tuple<at::Tensor, at::Tensor> sdpa_forward_meta(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                                     const std::optional<at::Tensor>& bias, bool is_causal,
                                                     std::optional<double> scale) {
  TORCH_CHECK(q.dim() > 0 && v.dim() > 0, "_sdpa_forward: query and value need at least one dimension");
  std::vector<c10::SymInt> shape = q.sym_sizes().vec();
  shape.back() = v.sym_size(-1);
  std::vector<int64_t> order(shape.size());
  for (size_t d = 0; d < order.size(); ++d) order[d] = static_cast<int64_t>(d);
  std::stable_sort(order.begin(), order.end() - 1,
                   [&](int64_t a, int64_t b) { return q.sym_stride(a) > q.sym_stride(b); });
  std::vector<c10::SymInt> strides(shape.size());
  c10::SymInt running = 1;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    strides[*it] = running;
    running *= shape[*it];
  }
  at::Tensor out = at::empty_strided_symint(shape, strides, q.options());
  const at::ScalarType ct = q.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  at::Tensor lse = at::empty_symint(q.sym_sizes().slice(0, q.dim() - 1), q.options().dtype(ct));
  return {out, lse};
}

// Imported functions (torch_tpu.pallas): `ranks` splits the flat `dims`.
std::vector<hlo::Type> types_of(const std::vector<int64_t>& ranks, const std::vector<int64_t>& dims,
                                const std::vector<int64_t>& dtypes) {
  TORCH_CHECK(ranks.size() == dtypes.size(), "_jax_register: ranks and dtypes differ in length");
  std::vector<hlo::Type> types;
  size_t at = 0;
  for (size_t i = 0; i < ranks.size(); ++i) {
    TORCH_CHECK(at + ranks[i] <= dims.size(), "_jax_register: too few dims");
    types.push_back({lowering::to_hlo(static_cast<at::ScalarType>(dtypes[i])),
                     hlo::Dims(dims.begin() + at, dims.begin() + at + ranks[i])});
    at += ranks[i];
  }
  return types;
}

int64_t jax_register(std::string name, std::string functions, std::string entry, std::vector<int64_t> in_ranks,
                     std::vector<int64_t> in_dims, std::vector<int64_t> in_dtypes, std::vector<int64_t> out_ranks,
                     std::vector<int64_t> out_dims, std::vector<int64_t> out_dtypes) {
  return lowering::register_imported({std::move(name), std::move(functions), std::move(entry),
                                      types_of(in_ranks, in_dims, in_dtypes), types_of(out_ranks, out_dims, out_dtypes)});
}

std::vector<at::Tensor> jax_call_meta(at::TensorList args, int64_t kernel) {
  const lowering::ImportedKernel& k = lowering::imported_kernel(kernel);
  std::vector<at::Tensor> outs;
  for (const hlo::Type& t : k.out_types) {
    outs.push_back(at::empty(t.dims, at::TensorOptions().device(at::kMeta).dtype(lowering::to_aten(t.dtype))));
  }
  return outs;
}

}  // namespace

// Nested (strided) tensors of tpu buffers, as far as nn.TransformerEncoder's
// inference fast path takes them: PyTorch's device-generic kernels for
// making, reading and padding them (the layer itself is in _fastpath.py).
TORCH_LIBRARY_IMPL(aten, NestedTensorPrivateUse1, m) {
  m.impl("unbind.int", TORCH_FN(at::native::NestedTensor_unbind));
  m.impl("to_padded_tensor", TORCH_FN(at::native::NestedTensor_to_padded_tensor_generic));
  m.impl("_nested_tensor_size", TORCH_FN(at::native::_nested_tensor_size));
  m.impl("_nested_tensor_strides", TORCH_FN(at::native::_nested_tensor_strides));
  m.impl("_nested_tensor_storage_offsets", TORCH_FN(at::native::_nested_tensor_storage_offsets));
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_nested_view_from_buffer", TORCH_FN(at::native::_nested_view_from_buffer));
}

TORCH_LIBRARY_IMPL(torch_tpu, Meta, m) {
  m.impl("_sdpa_forward", TORCH_FN(sdpa_forward_meta));
  m.impl("_jax_call", TORCH_FN(jax_call_meta));
}

TORCH_LIBRARY_FRAGMENT(torch_tpu, m) {
  m.def("_jax_register(str name, str functions, str entry, int[] in_ranks, int[] in_dims, int[] in_dtypes, "
        "int[] out_ranks, int[] out_dims, int[] out_dtypes) -> int",
        &jax_register);
  m.def("_jax_call(Tensor[] args, int kernel) -> Tensor[]");
  m.def("_sdpa_forward(Tensor query, Tensor key, Tensor value, Tensor? attn_bias, bool is_causal, float? scale) "
        "-> (Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_fused_sdp_choice", TORCH_FN(fused_sdp_choice));
  m.impl("_scaled_dot_product_fused_attention_overrideable", TPU_KERNEL(sdpa_overrideable));
  m.impl("_has_compatible_shallow_copy_type", TORCH_FN(has_compatible_shallow_copy_type));
  m.impl("empty.memory_format", TPU_KERNEL(empty_memory_format));
  m.impl("zeros_like", TPU_KERNEL(zeros_like));
  m.impl("ones_like", TPU_KERNEL(ones_like));
  m.impl("full_like", TPU_KERNEL(full_like));
  m.impl("empty_strided", TPU_KERNEL(empty_strided));
  m.impl("resize_", TPU_KERNEL(resize_));
  m.impl("set_.source_Storage_storage_offset", TPU_KERNEL(set_storage_offset));
  m.impl("set_.source_Storage", TPU_KERNEL(set_whole_storage));
  m.impl("set_.source_Tensor", TPU_KERNEL(set_tensor));
  m.impl("set_", TPU_KERNEL(set_empty));
  m.impl("_copy_from", TPU_KERNEL(copy_from));
  m.impl("_copy_from_and_resize", TPU_KERNEL(copy_from_and_resize));
  m.impl("_local_scalar_dense", TPU_KERNEL(local_scalar_dense));
  m.impl("clone", TPU_KERNEL(clone));
  m.impl("equal", TPU_KERNEL(equal));
  m.impl("conj_physical_", TPU_KERNEL(conj_physical_));
  // Views share the storage; only metadata changes.
  m.impl("view", TORCH_FN(at::native::view));
  m.impl("as_strided", TORCH_FN(at::native::as_strided_tensorimpl));
  m.impl("_reshape_alias", TORCH_FN(at::native::_reshape_alias));
  m.impl("unfold", TORCH_FN(at::native::unfold));
  m.impl("view_as_real", TORCH_FN(at::native::view_as_real));
  m.impl("view_as_complex", TORCH_FN(at::native::view_as_complex));
}

}  // namespace tpu

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &tpu::fused_sdp_choice)
}  // namespace at::native

namespace tpu {

// _copy_from's schema does not mark `dst` as written, so the conjugate and
// negative-bit fallbacks would copy into a resolved clone of a conj() or
// neg view and lose the write. Our kernel applies the bits itself
// (EagerProgram::assign), so those keys pass straight through.
TORCH_LIBRARY_IMPL(aten, Conjugate, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}
TORCH_LIBRARY_IMPL(aten, Negative, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

}  // namespace tpu
