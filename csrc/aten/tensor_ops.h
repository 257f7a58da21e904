// The ops that move data or metadata rather than compute: factories,
// resizing, storage swaps, copies between host and device.
#pragma once

#include <ATen/core/Tensor.h>

namespace tpu {

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<at::ScalarType> dtype,
                               std::optional<at::Layout> layout, std::optional<at::Device> device,
                               std::optional<bool> pin_memory,
                               std::optional<at::MemoryFormat> memory_format);
at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride,
                         std::optional<at::ScalarType> dtype, std::optional<at::Layout> layout,
                         std::optional<at::Device> device, std::optional<bool> pin_memory);

const at::Tensor& resize_(const at::Tensor& self, c10::IntArrayRef size,
                          std::optional<at::MemoryFormat> memory_format);
// Grow or shrink a tpu storage to `nbytes`, keeping its leading bytes.
void resize_storage_bytes(const c10::Storage& storage, size_t nbytes);

at::Tensor& set_storage(at::Tensor& self, at::Storage source, int64_t storage_offset,
                        c10::IntArrayRef size, c10::IntArrayRef stride);
at::Tensor& set_tensor(at::Tensor& self, const at::Tensor& source);
at::Tensor& set_whole_storage(at::Tensor& self, at::Storage source);
at::Tensor& set_empty(at::Tensor& self);

// dst.copy_(src) where either side is a tpu tensor.
at::Tensor copy_from(const at::Tensor& src, const at::Tensor& dst, bool non_blocking);
at::Tensor copy_from_and_resize(const at::Tensor& src, const at::Tensor& dst);
// A copy with `memory_format`'s strides (preserve: self's, where dense).
at::Tensor clone(const at::Tensor& self, std::optional<at::MemoryFormat> memory_format);
at::Scalar local_scalar_dense(const at::Tensor& self);
// In-place complex conjugation (the conjugate-bit fallback uses it to
// resolve in-place ops on x.conj() views).
at::Tensor& conj_physical_(at::Tensor& self);
// torch.equal: same shape and equal values (after type promotion).
bool equal(const at::Tensor& self, const at::Tensor& other);

// A contiguous CPU copy of a tpu tensor (in `dtype`).
at::Tensor to_host(const at::Tensor& src, at::ScalarType dtype);
at::Tensor to_host_into(const at::Tensor& src, at::Tensor out);
// Moves the values of `host` (a contiguous CPU tensor of self's sizes and
// dtype that nobody writes again) into `self`: on the CPU plugin the device
// buffer aliases host's memory instead of copying it (torch_tpu::_adopt_host;
// the c10d backend's results come back this way).
void adopt_host(const at::Tensor& self, const at::Tensor& host);

}  // namespace tpu
