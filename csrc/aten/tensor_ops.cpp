#include "csrc/aten/tensor_ops.h"
#include "csrc/aten/bucketed.h"

#include <ATen/ExpandUtils.h>
#include <ATen/EmptyTensor.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/result_type.h>
#include <c10/core/DefaultDtype.h>
#include <c10/core/ScalarTypeToTypeMeta.h>
#include <c10/util/strides.h>

#include "csrc/aten/eager.h"
#include "csrc/aten/executor_scope.h"
#include "csrc/aten/op_memo.h"
#include "csrc/aten/storage.h"
#include "csrc/exec/runtime.h"
#include "csrc/lowering/lowering.h"

namespace tpu {

using hlo::DType;
using hlo::Type;
using hlo::Value;
using lowering::to_hlo;

namespace {

int device_index(std::optional<at::Device> device) {
  if (device && device->has_index()) return device->index();
  return current_device();
}

at::ScalarType checked_dtype(std::optional<at::ScalarType> dtype) {
  at::ScalarType t = dtype.value_or(c10::typeMetaToScalarType(c10::get_default_dtype()));
  TORCH_CHECK_TYPE(is_supported_dtype(t), "tpu: dtype ", t, " is not supported on the tpu device");
  return t;
}

// A tensor view covering its whole storage densely: its value is the storage value.
bool covers_storage(const at::Tensor& t) {
  return t.storage_offset() == 0 && t.is_contiguous() &&
         static_cast<size_t>(t.numel()) * t.element_size() == t.storage().nbytes();
}

int tpu_index(const at::Tensor& t) { return t.device().has_index() ? t.device().index() : 0; }

// A failed device-side check surfaces when the host reads a value that
// depends on it (device_check.h): the first failed one of `checks` is
// raised with PyTorch's exception type.
void verify(const exec::Checks& checks) {
  try {
    exec::verify_checks(checks);
  } catch (const exec::CheckFailure& e) {
    raise_check_failure(e);
  }
}

void verify_device_checks(const at::Tensor& t) { verify(storage_of(t).raw_value().checks); }

// Copies `buffer` into `dst` and verifies `checks`, with one wait for both.
void read_verified(const pjrt::Buffer& buffer, void* dst, size_t nbytes, const exec::Checks& checks) {
  try {
    exec::read_verified({&buffer, dst, nbytes}, checks);
  } catch (const exec::CheckFailure& e) {
    raise_check_failure(e);
  }
}

// dst (tpu) <- src (tpu, same device), converted and broadcast.
void copy_on_device(const at::Tensor& src, const at::Tensor& dst) {
  // A copy of a view onto the very same view is nothing (CPU returns before
  // any check: so copying an expanded tensor onto itself is allowed).
  if (dst.is_alias_of(src) && dst.storage_offset() == src.storage_offset() && dst.sizes().equals(src.sizes()) &&
      dst.strides().equals(src.strides()) && dst.scalar_type() == src.scalar_type() &&
      dst.is_conj() == src.is_conj() && dst.is_neg() == src.is_neg()) {
    return;
  }
  TORCH_CHECK(at::has_internal_overlap(dst) != at::MemOverlap::Yes,
              "unsupported operation: more than one element of the written-to tensor refers to a "
              "single memory location. Please clone() the tensor before performing the operation.");
  at::assert_no_partial_overlap(dst, src);  // CPU's copy_ refuses it too (TensorIterator)
  if (copy_bucketed(src, dst)) return;  // src is a growing tensor's (bucketed.h)
  if (write_window_from_padded(dst, src)) return;  // into a run of a persistent buffer
  // Copies repeat (optimizer states, .to(), clone): their plans are kept
  // like those of lowered ops.
  static const char kCopy = 0;
  const c10::IValue operands[2] = {src, dst};
  const std::optional<OpSignature> sig = signature_for(&kCopy, 0, operands);
  const int device = tpu_index(dst);
  if (run_kept_plan(sig, operands, device)) return;
  EagerProgram p(device, sig ? &*sig : nullptr);
  hlo::Builder& b = p.builder();
  Value v = b.convert(p.input(src, {0, -1}), to_hlo(dst.scalar_type()));
  const hlo::Dims dims = dst.sizes().vec();
  if (b.dims(v) != dims) {
    lowering::broadcast_shapes(b.dims(v), dims);  // PyTorch's error for a bad broadcast
    TORCH_CHECK(b.rank(v) <= static_cast<int64_t>(dims.size()), "copy_: source of shape ",
                src.sizes(), " cannot be broadcast to ", dst.sizes());
    v = b.broadcast_to(v, dims);
  }
  p.assign(dst, v, {1, -1});
  std::shared_ptr<const ProgramPlan> plan = p.finish({});
  if (sig && plan->replayable) keep_plan(*sig, operands, {}, plan);
  p.run();
}

// A host tensor of `dst`'s device, uploaded as is (no program).
at::Tensor upload(const at::Tensor& host, int device) {
  const auto& rt = exec::Runtime::get();
  const Type type{to_hlo(host.scalar_type()), host.sizes().vec()};
  pjrt::BufferPtr buf = rt.client().from_host(host.data_ptr(), exec::to_pjrt(type.dtype), type.dims, rt.device(device));
  return tensor_from_buffer(std::move(buf), type, host.sizes(), host.scalar_type(), device);
}

}  // namespace

// A contiguous run of a larger storage written by one program per storage
// size and power-of-two window (the whole storage where it is small),
// whatever the run's length and offset: the
// program writes the window's [lo, hi) at `start` (run-time operands) and
// keeps the rest. Staging buffers copied up a step's worth at a time (vLLM's
// copy_to_gpu(n), a pinned batch buffer's prefix) and the fill of a
// buffer's tail past a step's count would otherwise compile a program for
// every length.
namespace {

// The elements of a contiguous run of a larger storage: its length, the
// storage's, and its offset.
struct Run {
  int64_t n = 0, whole_n = 0, offset = 0;
};
std::optional<Run> run_of(const at::Tensor& t) {
  if (!bucketing_enabled() || t.is_complex() || t.is_conj() || t.is_neg() || !t.is_contiguous()) return std::nullopt;
  Run r{t.numel(), static_cast<int64_t>(t.storage().nbytes()) / static_cast<int64_t>(t.element_size()),
        t.storage_offset()};
  if (r.n == 0 || r.n >= r.whole_n) return std::nullopt;
  return r;
}

// dst's storage with `values` (a run-time operand: a window of window_n
// elements, or a scalar) written at [start + lo, start + hi), where
// `range` holds (start, lo, hi): one plan per storage type and window
// length (tagged by the window's log2, since a scalar's type does not show
// it). `past_end`: the window may pass the storage's end (the storage is
// padded past it for the write).
void write_window_values(const at::Tensor& dst, const Run& r, int64_t window_n, const at::Tensor& values,
                         int64_t start, int64_t lo, int64_t hi, bool past_end = false) {
  const int device = tpu_index(dst);
  at::Tensor range = at::empty({3}, at::kLong);
  range[0] = start;
  range[1] = lo;
  range[2] = hi;
  const c10::IValue operands[3] = {dst.as_strided({r.whole_n}, {1}, 0), values, upload(range, device)};
  static const char kWindow[2][64] = {};
  int log2 = 0;
  while ((int64_t{1} << log2) < window_n) ++log2;
  const std::optional<OpSignature> sig = signature_for(&kWindow[past_end][log2], 0, operands);
  if (run_kept_plan(sig, operands, device)) return;
  EagerProgram p(device, sig ? &*sig : nullptr);
  hlo::Builder& b = p.builder();
  const at::Tensor& whole = operands[0].toTensor();
  Value flat = p.input(whole, {0, -1});
  if (past_end) flat = b.pad(flat, b.zeros(Type{b.dtype(flat), {}}), {0}, {window_n});
  const Value bounds = p.input(operands[2].toTensor(), {2, -1});
  auto bound = [&](int64_t k) { return b.reshape(b.slice(bounds, {k}, {k + 1}), {}); };
  const Value at = bound(0);
  const Value i = b.iota(Type{DType::I64, {window_n}}, 0);
  const Value inside = b.and_(b.compare(hlo::Cmp::GE, i, b.broadcast_in_dim(bound(1), {window_n}, {})),
                              b.compare(hlo::Cmp::LT, i, b.broadcast_in_dim(bound(2), {window_n}, {})));
  const Value v = p.input(values, {1, -1});
  const Value kept = b.dynamic_slice(flat, {at}, {window_n});
  const Value written = b.select(inside, b.rank(v) == 0 ? b.broadcast_in_dim(v, {window_n}, {}) : b.reshape(v, {window_n}), kept);
  Value updated = b.dynamic_update_slice(flat, written, {at});
  if (past_end) updated = b.slice(updated, {0}, {r.whole_n});
  p.assign(whole, updated, {0, -1});
  std::shared_ptr<const ProgramPlan> plan = p.finish({});
  if (sig && plan->replayable) keep_plan(*sig, operands, {}, plan);
  p.run();
}

}  // namespace

bool write_window(const at::Tensor& dst, const at::Tensor* host, const c10::Scalar& fill) {
  const std::optional<Run> r = run_of(dst);
  if (!r) return false;
  int64_t window_n = 16;
  while (window_n < r->n) window_n *= 2;
  window_n = std::min(window_n, r->whole_n);
  // A small storage (vLLM's block table, per-request state) is written
  // whole, the run masked: one program for it, whatever the run's length.
  constexpr int64_t kWholeBytes = 64 << 10;
  if (r->whole_n * static_cast<int64_t>(dst.element_size()) <= kWholeBytes) window_n = r->whole_n;
  const int64_t start = std::min(r->offset, r->whole_n - window_n);
  const int64_t lo = r->offset - start;
  // The values: the host data at [lo, hi) of a window of its own, or the
  // fill's number (no host buffer of the run's size for it).
  at::Tensor values;
  if (host != nullptr) {
    values = at::empty({window_n}, dst.options().device(at::kCPU));
    values.narrow(0, 0, lo).zero_();
    values.narrow(0, lo + r->n, window_n - lo - r->n).zero_();
    values.narrow(0, lo, r->n).copy_(host->reshape(-1));
  } else {
    values = at::empty({}, dst.options().device(at::kCPU)).fill_(fill);
  }
  write_window_values(dst, *r, window_n, upload(values, tpu_index(dst)), start, lo, lo + r->n);
  return true;
}

bool write_window_from_padded(const at::Tensor& dst, const at::Tensor& src) {
  const std::optional<Run> r = run_of(dst);
  if (!r || src.scalar_type() != dst.scalar_type() || !src.sizes().equals(dst.sizes())) return false;
  const std::optional<at::Tensor> bucket = padded_value_of(src);
  if (!bucket || bucket->size(0) == src.size(0)) return false;
  for (int64_t d = 1; d < src.dim(); ++d) {
    if (bucket->size(d) != src.size(d)) return false;
  }
  const int64_t window_n = bucket->numel();
  write_window_values(dst, *r, window_n, *bucket, r->offset, 0, r->n, r->offset + window_n > r->whole_n);
  return true;
}

std::optional<at::Tensor> padded_window(const at::Tensor& t) {
  if (t.dim() < 1 || t.size(0) < 2 || storage_of(t).padded()) return std::nullopt;
  const std::optional<Run> r = run_of(t);
  if (!r) return std::nullopt;
  const int64_t row = r->n / t.size(0);
  std::vector<int64_t> bounds = t.sizes().vec();
  bounds[0] = bucket_of(t.size(0));
  const int64_t window_n = bounds[0] * row;
  if (!window_length_varies(t)) return std::nullopt;
  // A bucket that would pass the storage's end (a small buffer: a request
  // count's bucket beyond max_num_seqs) reads the storage padded past it.
  const bool past_end = r->offset + window_n > r->whole_n;
  const int device = tpu_index(t);
  at::Tensor start = at::empty({}, at::kLong).fill_(r->offset);
  const c10::IValue operands[2] = {t.as_strided({r->whole_n}, {1}, 0), upload(start, device)};
  static const char kTag[2] = {};
  const c10::IValue key[3] = {operands[0], operands[1], c10::IValue(c10::List<int64_t>(bounds))};
  const std::optional<OpSignature> sig = signature_for(&kTag[past_end], 0, key);
  std::optional<std::vector<at::Tensor>> got = run_kept_plan(sig, key, device);
  if (!got) {
    EagerProgram p(device, sig ? &*sig : nullptr);
    hlo::Builder& b = p.builder();
    Value flat = p.input(operands[0].toTensor(), {0, -1});
    if (past_end) flat = b.pad(flat, b.zeros(Type{b.dtype(flat), {}}), {0}, {window_n});
    const Value at = p.input(operands[1].toTensor(), {1, -1});
    std::shared_ptr<const ProgramPlan> plan = p.finish({b.reshape(b.dynamic_slice(flat, {at}, {window_n}), bounds)});
    if (sig && plan->replayable) keep_plan(*sig, key, {}, plan);
    got = p.run();
  }
  return bucketed_result((*got)[0], t.sizes(), std::move(bounds), device);
}

namespace {

// A value holding exactly the elements of `t` (contiguous, its dtype; in
// the value's own shape), computed if needed.
TpuStorage::Value dense_value(const at::Tensor& t) {
  TpuStorage::Value val = storage_of(t).value();
  const DType dt = to_hlo(t.scalar_type());
  if (val.buffer && covers_storage(t) && val.type.dtype == dt && val.type.numel() == t.numel() && !t.is_conj() &&
      !t.is_neg()) {
    return val;
  }
  EagerProgram p(tpu_index(t));
  p.finish({p.input(t)});
  return storage_of(p.run()[0]).value();
}

}  // namespace

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<at::ScalarType> dtype,
                               std::optional<at::Layout> layout, std::optional<at::Device> device,
                               std::optional<bool> pin_memory,
                               std::optional<at::MemoryFormat> memory_format) {
  TORCH_CHECK(!layout || *layout == at::kStrided, "tpu: only strided tensors are supported, got ",
              *layout);
  return empty_tpu(size, checked_dtype(dtype), device_index(device), memory_format);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride,
                         std::optional<at::ScalarType> dtype, std::optional<at::Layout> layout,
                         std::optional<at::Device> device, std::optional<bool> pin_memory) {
  TORCH_CHECK(!layout || *layout == at::kStrided, "tpu: only strided tensors are supported, got ",
              *layout);
  return empty_strided_tpu(size, stride, checked_dtype(dtype), device_index(device));
}

void resize_storage_bytes(const c10::Storage& storage, size_t nbytes) {
  TpuStorage& old = storage_of(storage);
  if (nbytes == old.nbytes()) return;
  TORCH_CHECK(storage.resizable(), "Trying to resize storage that is not resizable");
  const int device = old.device();
  TpuStorage::Value val = old.value();
  const int saved = current_device();
  set_current_device(device);
  c10::DataPtr dp = tpu_allocator()->allocate(nbytes);
  set_current_device(saved);
  if (val.buffer) {
    // Keep the leading bytes; new bytes are zero.
    hlo::Builder b;
    Value flat = b.reshape(b.param(val.type), {val.type.numel()});
    const int64_t w = hlo::byte_width(val.type.dtype);
    DType dt = val.type.dtype;
    if (nbytes % w != 0) {
      flat = reinterpret_flat(b, flat, DType::U8);
      dt = DType::U8;
    }
    const int64_t want = static_cast<int64_t>(nbytes) / hlo::byte_width(dt);
    const int64_t have = b.dims(flat)[0];
    Value out = want >= have ? b.pad(flat, b.zeros(Type{dt, {}}), {0}, {want - have})
                             : b.slice(flat, {0}, {want});
    auto bufs = exec::Runtime::get().run(b.module({out}), {val.buffer->raw()}, device);
    storage_of(dp).set_value(bufs[0], b.type(out), val.checks);
  }
  storage.set_data_ptr_noswap(std::move(dp));
  storage.set_nbytes(nbytes);
}

const at::Tensor& resize_(const at::Tensor& self, c10::IntArrayRef size,
                          std::optional<at::MemoryFormat> memory_format) {
  auto* impl = self.unsafeGetTensorImpl();
  // As on CPU, a resize to the same sizes keeps the strides (resize_as_ of
  // a transposed tensor stays transposed); a memory format restrides.
  if (self.sizes() != size) impl->set_sizes_contiguous(size);
  if (memory_format) impl->empty_tensor_restride(*memory_format);
  const size_t needed = at::detail::computeStorageNbytes(self.sizes(), self.strides(),
                                                         self.element_size(), self.storage_offset());
  if (needed > self.storage().nbytes()) resize_storage_bytes(self.storage(), needed);
  return self;
}

at::Tensor& set_storage(at::Tensor& self, at::Storage source, int64_t storage_offset,
                        c10::IntArrayRef size, c10::IntArrayRef stride_arg) {
  at::native::checkSetStorage(self, source, storage_offset, size, stride_arg);
  // As on CPU, strides left out (set_() and set_(storage, offset, size))
  // mean contiguous ones.
  const c10::DimVector contiguous =
      stride_arg.data() == nullptr ? c10::contiguous_strides(size) : c10::DimVector{};
  const c10::IntArrayRef stride = stride_arg.data() == nullptr ? c10::IntArrayRef(contiguous) : stride_arg;
  const size_t needed =
      at::detail::computeStorageNbytes(size, stride, self.element_size(), storage_offset);
  if (needed > self.storage().nbytes()) resize_storage_bytes(self.storage(), needed);
  self.unsafeGetTensorImpl()->set_sizes_and_strides(size, stride, storage_offset);
  // A tensor laid densely over a storage that holds raw bytes (torch.load
  // and other UntypedStorage copies write bytes): the storage takes the
  // tensor's typed value, as if the tensor had been made on the device. The
  // programs that read it are then those a training loop runs, so a resumed
  // checkpoint compiles nothing new and rounds exactly as the run it left
  // (XLA may fuse a program over bytes differently, changing last bits).
  const TpuStorage::Value raw = storage_of(self).raw_value();
  if (raw.buffer && raw.type.dtype == DType::U8 && raw.type.dims.size() == 1 && self.scalar_type() != at::kByte &&
      self.numel() > 0 && covers_storage(self) && !self.is_conj() && !self.is_neg()) {
    TpuStorage::Value typed = dense_value(self);
    storage_of(self).set_value(typed.buffer, typed.type, raw.checks);
  }
  return self;
}

at::Tensor& set_tensor(at::Tensor& self, const at::Tensor& source) {
  return set_storage(self, source.storage(), source.storage_offset(), source.sizes(),
                     source.strides());
}

at::Tensor& set_whole_storage(at::Tensor& self, at::Storage source) {
  const int64_t n = static_cast<int64_t>(source.nbytes()) / self.element_size();
  return set_storage(self, std::move(source), 0, {n}, {1});
}

at::Tensor& set_empty(at::Tensor& self) {
  const int saved = current_device();
  set_current_device(tpu_index(self));
  c10::Storage storage(c10::Storage::use_byte_size_t(), 0, tpu_allocator(), true);
  set_current_device(saved);
  return set_storage(self, storage, 0, {0}, {});
}

at::Tensor to_host(const at::Tensor& src, at::ScalarType dtype) {
  return to_host_into(src, at::empty(src.sizes(), at::TensorOptions().dtype(dtype)));
}

// A padded storage (bucketed.h) is read whole and sliced on the host: no
// program per size for the exact value. False when src is not on one.
bool read_padded_into(const at::Tensor& src, at::Tensor& out) {
  const std::shared_ptr<const TpuStorage::Padded> padded = storage_of(src).padded();
  if (!padded || to_hlo(src.scalar_type()) != padded->type.dtype || src.is_conj() || src.is_neg()) return false;
  const pjrt::BufferPtr buffer = padded->deferred ? padded->deferred->resolve() : padded->buffer;
  at::Tensor whole = at::empty(padded->bounds, at::TensorOptions().dtype(src.scalar_type()));
  read_verified(*buffer, whole.data_ptr(), whole.nbytes(), padded->checks);
  at::Tensor exact = whole;
  for (size_t d = 0; d < padded->sizes.size(); ++d) exact = exact.narrow(static_cast<int64_t>(d), 0, padded->sizes[d]);
  exact = exact.contiguous().view(-1);
  out.copy_(exact.as_strided(src.sizes(), src.strides(), src.storage_offset()));
  return true;
}

// Reads src's values into `out`, a contiguous host tensor of src's sizes.
at::Tensor to_host_into(const at::Tensor& src, at::Tensor out) {
  const at::ScalarType dtype = out.scalar_type();
  if (src.numel() == 0) {
    // Nothing to read, but the read still reports the failed checks of the
    // ops before it (an empty result's own op included), as a read of data
    // does: an error belongs to the read that follows its op.
    verify_device_checks(src);
    return out;
  }
  if (read_padded_into(src, out)) return out;
  TpuStorage::Value val = storage_of(src).value();
  if (!val.buffer) return out.zero_();  // never written: zero bytes are zero in every dtype
  at::Tensor t = src;
  if (dtype != src.scalar_type()) {
    EagerProgram p(tpu_index(src));
    p.finish({p.builder().convert(p.input(src), to_hlo(dtype))});
    t = p.run()[0];
  }
  const pjrt::BufferPtr dense = dense_value(t).buffer;
  read_verified(*dense, out.data_ptr(), out.nbytes(), storage_of(src).raw_value().checks);
  return out;
}

// Waits for the non-blocking reads still writing into host tensor t's
// storage: a transfer from or to it comes after them, as on one stream.
static void await_host_copies_into(const at::Tensor& t) {
  const c10::Storage& s = t.storage();
  if (s.data() != nullptr) exec::Runtime::get().await_host_copies_into(s.data(), s.nbytes());
}

// dst (pinned host memory, contiguous, of src's sizes) <- src without
// waiting (non_blocking=True), as on CUDA: torch.tpu.synchronize(), the
// stream's synchronize() and an Event recorded after the call wait for the
// copy; reading dst before that is the caller's race. False where the copy
// blocks instead, as on CUDA with pageable memory or CUDA_LAUNCH_BLOCKING:
// debug eager, a capture, a padded storage, memory not pinned.
static bool start_host_copy(const at::Tensor& src, const at::Tensor& dst) {
  const exec::ExecutionMode mode = current_executor().mode();
  if (mode == exec::ExecutionMode::Debug || mode == exec::ExecutionMode::Capture || !dst.is_contiguous() ||
      dst.sizes() != src.sizes() || !at::detail::getPrivateUse1Hooks().isPinnedPtr(dst.data_ptr()) ||
      storage_of(src).padded()) {
    return false;
  }
  if (!storage_of(src).value().buffer) return false;  // never written: zeros, at once
  at::Tensor t = src;
  if (dst.scalar_type() != src.scalar_type()) {
    EagerProgram p(tpu_index(src));
    p.finish({p.builder().convert(p.input(src), to_hlo(dst.scalar_type()))});
    t = p.run()[0];
  }
  const pjrt::BufferPtr dense = dense_value(t).buffer;
  std::unique_ptr<pjrt::Event> copy = dense->to_host_async(dst.data_ptr(), dst.nbytes());
  if (!copy) return true;
  // dst's storage is held by the runtime until the copy lands.
  std::shared_ptr<const void> keep(nullptr, [storage = dst.storage()](const void*) {});
  exec::Runtime::get().track_host_copy(tpu_index(src), std::shared_ptr<pjrt::Event>(std::move(copy)),
                                       dst.data_ptr(), dst.nbytes(), std::move(keep));
  return true;
}

at::Tensor copy_from(const at::Tensor& src, const at::Tensor& dst, bool non_blocking) {
  // src must broadcast to dst, empty or not (CPU's copy_ checks it first).
  TORCH_CHECK(at::is_expandable_to(src.sizes(), dst.sizes()), "The size of tensor a (", dst.sizes(),
              ") must match the size of tensor b (", src.sizes(), ") in copy_: ", src.sizes(),
              " cannot be broadcast to ", dst.sizes());
  const bool src_tpu = src.device().type() == c10::DeviceType::PrivateUse1;
  const bool dst_tpu = dst.device().type() == c10::DeviceType::PrivateUse1;
  if (dst.numel() == 0) {
    // A read of nothing still reports the failed checks before it, as
    // to_host_into does.
    if (src_tpu && !dst_tpu) verify_device_checks(src);
    return dst;
  }
  if (src_tpu && dst_tpu) {
    if (tpu_index(src) == tpu_index(dst)) {
      copy_on_device(src, dst);
    } else {
      const auto& rt = exec::Runtime::get();
      TpuStorage::Value dense = dense_value(src);
      std::shared_ptr<pjrt::Buffer> moved = dense.buffer->copy_to_device(rt.device(tpu_index(dst)));
      at::Tensor tmp = tensor_from_buffer(std::move(moved), dense.type, src.sizes(), src.scalar_type(), tpu_index(dst),
                                          {}, dense.checks);
      copy_on_device(tmp, dst);
    }
    return dst;
  }
  if (dst_tpu) {
    TORCH_CHECK(src.device().is_cpu(), "tpu: cannot copy from ", src.device(), " to ", dst.device());
    await_host_copies_into(src);  // (a non-blocking read into src lands first, as on one stream)
    at::Tensor host = src.to(dst.scalar_type()).expand(dst.sizes()).contiguous();
    if (pad_upload(dst, host) || (!covers_storage(dst) && write_window(dst, &host, {}))) return dst;
    if (!covers_storage(dst)) {
      copy_on_device(upload(host, tpu_index(dst)), dst);
      return dst;
    }
    const auto& rt = exec::Runtime::get();
    const Type type{to_hlo(dst.scalar_type()), dst.sizes().vec()};
    storage_of(dst).set_value(
        rt.client().from_host(host.data_ptr(), exec::to_pjrt(type.dtype), type.dims, rt.device(tpu_index(dst))), type);
    return dst;
  }
  TORCH_CHECK(dst.device().is_cpu(), "tpu: cannot copy from ", src.device(), " to ", dst.device());
  await_host_copies_into(dst);  // an earlier non-blocking read into dst lands first
  if (non_blocking && start_host_copy(src, dst)) return dst;
  if (dst.is_contiguous() && dst.sizes() == src.sizes()) {
    to_host_into(src, dst);  // straight into dst: one copy, not two
  } else {
    dst.copy_(to_host(src, dst.scalar_type()));
  }
  return dst;
}

void adopt_host(const at::Tensor& self, const at::Tensor& host) {
  TORCH_CHECK(self.device().type() == c10::DeviceType::PrivateUse1 && host.device().is_cpu(),
              "_adopt_host: expects a tpu tensor and a CPU tensor, got ", self.device(), " and ", host.device());
  TORCH_CHECK(host.is_contiguous() && host.sizes() == self.sizes() && host.scalar_type() == self.scalar_type(),
              "_adopt_host: the host tensor must be contiguous, of the tpu tensor's sizes and dtype");
  await_host_copies_into(host);
  const auto& rt = exec::Runtime::get();
  if (self.numel() == 0 || !covers_storage(self) || !self.is_contiguous() || self.is_conj() || self.is_neg() ||
      rt.client().platform_name() != "cpu") {
    copy_from(host, self, false);
    return;
  }
  const Type type{to_hlo(self.scalar_type()), self.sizes().vec()};
  // The buffer keeps host's storage alive for as long as it aliases it.
  pjrt::BufferPtr buf = rt.client().adopt_host(host.data_ptr(), exec::to_pjrt(type.dtype), type.dims,
                                               rt.device(tpu_index(self)), [keep = host.storage()] {});
  storage_of(self).set_value(std::move(buf), type);
}

at::Tensor copy_from_and_resize(const at::Tensor& src, const at::Tensor& dst) {
  if (dst.sizes() != src.sizes()) dst.resize_(src.sizes());
  return copy_from(src, dst, false);
}

at::Tensor clone(const at::Tensor& self, std::optional<at::MemoryFormat> memory_format) {
  at::Tensor out = at::empty_like(self, self.options(), memory_format);
  if (self.numel() > 0) copy_on_device(self, out);
  return out;
}

at::Tensor& conj_physical_(at::Tensor& self) {
  if (!self.is_complex() || self.numel() == 0) return self;
  EagerProgram p(tpu_index(self));
  hlo::Builder& b = p.builder();
  Value v = p.input(self);
  p.assign(self, b.complex(b.real(v), b.neg(b.imag(v))));
  p.finish({});
  p.run();
  return self;
}

bool equal(const at::Tensor& self, const at::Tensor& other) {
  TORCH_CHECK(self.device() == other.device(),
              "Expected all tensors to be on the same device, but found at least two devices, ",
              self.device(), " and ", other.device(), "!");
  if (self.sizes() != other.sizes()) return false;
  if (self.numel() == 0) return true;
  EagerProgram p(tpu_index(self));
  hlo::Builder& b = p.builder();
  const hlo::DType t = to_hlo(at::result_type(self, other));
  Value eq = b.compare(hlo::Cmp::EQ, b.convert(p.input(self), t), b.convert(p.input(other), t));
  hlo::Dims all;
  for (int64_t d = 0; d < self.dim(); ++d) all.push_back(d);
  Value r = all.empty() ? eq : b.reduce(eq, b.constant_bool(true), all, "stablehlo.and");
  return p.evaluate_int(r) != 0;
}

at::Scalar local_scalar_dense(const at::Tensor& self) {
  TORCH_CHECK(self.numel() == 1, "a Tensor with ", self.numel(),
              " elements cannot be converted to Scalar");
  return to_host(self, self.scalar_type()).item();
}

}  // namespace tpu
