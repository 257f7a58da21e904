// tpu storages: an ordinary c10::StorageImpl whose DataPtr context owns the
// device value (a PJRT buffer). The data pointer is a unique address in a
// reserved, inaccessible range, so `data_ptr()` comparisons and offsets work
// as on CUDA while any host dereference faults instead of corrupting memory.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Allocator.h>

#include <mutex>
#include <string_view>

#include "csrc/exec/deferred.h"
#include "csrc/exec/device_check.h"
#include "csrc/hlo/types.h"
#include "csrc/pjrt/buffer.h"

namespace tpu {

// Values stored materialized (not by a recorded program) by the calling
// thread: a torch.compile capture during which any was is not replayed.
int64_t thread_materialized_writes();
void note_materialized_write();

class TpuStorage {
 public:
  TpuStorage(size_t nbytes, int device) : nbytes_(nbytes), device_(device), serial_(next_serial()) {}

  size_t nbytes() const { return nbytes_; }
  // Unique to this storage in the process (an address may be reused).
  uint64_t serial() const { return serial_; }
  int device() const { return device_; }

  // A consistent snapshot of the device value. `buffer` is null while the
  // storage was never written: its bytes are zero (torch.empty never exposes
  // uninitialized device memory). In fused eager the value may still be
  // `deferred`: a result of a recorded program.
  struct Value {
    pjrt::BufferPtr buffer;
    hlo::Type type;  // of `buffer`; its row-major bytes are the storage bytes
    exec::DeferredPtr deferred;
    exec::Checks checks;  // the device-side checks this value depends on (device_check.h)
  };
  // The materialized value: runs the fused graph first if it is deferred.
  Value value() const;
  // The value as it is, possibly deferred (fused eager reads it in the graph).
  // A padded storage's exact value is made (and kept) on first request.
  Value raw_value() const;
  void set_value(pjrt::BufferPtr buffer, hlo::Type type, exec::Checks checks = {}) {
    note_materialized_write();
    std::lock_guard<std::mutex> lock(mu_);
    value_.buffer = std::move(buffer);
    value_.type = std::move(type);
    value_.deferred.reset();
    value_.checks = std::move(checks);
    padded_.reset();
  }
  void set_deferred(exec::DeferredPtr v, exec::Checks checks = {}) {
    std::lock_guard<std::mutex> lock(mu_);
    value_.buffer.reset();
    value_.type = v->type();
    value_.deferred = std::move(v);
    value_.checks = std::move(checks);
    padded_.reset();
  }

  // A padded value (docs/bounded_dynamism.md): a value of `bounds` whose
  // first `sizes` elements along every dim are this storage's, those of a
  // contiguous tensor of `sizes`; the rest is padding, of any value.
  // Bucketed programs read it as it is, with the sizes as run-time
  // operands, so that one program serves every size up to the bounds.
  // Every other reader gets the exact value (raw_value() slices it once).
  struct Padded {
    pjrt::BufferPtr buffer;
    exec::DeferredPtr deferred;   // instead of `buffer` in fused eager
    hlo::Type type;               // {dtype, bounds}
    std::vector<int64_t> sizes;   // the contiguous tensor the storage holds
    std::vector<int64_t> bounds;  // per dim: its bucket, or its size where static
    exec::Checks checks;
  };
  std::shared_ptr<const Padded> padded() const {
    std::lock_guard<std::mutex> lock(mu_);
    return padded_;
  }
  void set_padded(std::shared_ptr<const Padded> p) {
    if (p->buffer) note_materialized_write();
    std::lock_guard<std::mutex> lock(mu_);
    value_ = Value{};
    padded_ = std::move(p);
  }

 private:
  static uint64_t next_serial();
  mutable std::mutex mu_;
  size_t nbytes_;
  int device_;
  uint64_t serial_;
  mutable Value value_;
  std::shared_ptr<const Padded> padded_;
};

// The allocator of `tpu` storages (registered for PrivateUse1).
c10::Allocator* tpu_allocator();

// The TpuStorage of a tpu tensor/storage; throws if it is not one of ours.
TpuStorage& storage_of(const c10::DataPtr& data_ptr);
inline TpuStorage& storage_of(const c10::Storage& storage) { return storage_of(storage.data_ptr()); }
inline TpuStorage& storage_of(const at::Tensor& t) { return storage_of(t.storage()); }

// One statistic of the device's storages, with CUDA's caching allocator's
// meanings: the value now, its peak since the last reset_peak_memory, and
// what was added to / taken from it since the last reset_accumulated_memory.
struct MemoryStat {
  int64_t current = 0;
  int64_t peak = 0;
  int64_t allocated = 0;
  int64_t freed = 0;
  void add(int64_t n) {
    current += n;
    peak = std::max(peak, current);
    allocated += n;
  }
  void take(int64_t n) {
    current -= n;
    freed += n;
  }
};

// The live tpu storages of `device`. Nothing is cached (each storage is its
// own device buffer), so every storage is one allocation, one segment and
// active; CUDA's pools are kept by size as its allocator splits them (small:
// under 1 MiB, large: the rest), index 0 being all of them.
struct MemoryCounters {
  static constexpr int64_t kSmallSize = int64_t{1} << 20;
  enum Pool { kAll = 0, kLarge = 1, kSmall = 2 };
  MemoryStat bytes[3];        // bytes of live storages
  MemoryStat allocations[3];  // live storages
  int64_t num_ooms = 0;       // out-of-memory errors raised (since the last reset_accumulated_memory)
};
MemoryCounters memory_counters(int device);
// Resets every statistic's peak to its current value (reset_peak_memory_stats).
void reset_peak_memory(int device);
// Live storage bytes the process may hold on the device (0: no limit).
void set_memory_limit(int device, int64_t bytes);
// Resets what was allocated and freed, and the OOM count.
void reset_accumulated_memory(int device);
// Counts an out-of-memory error raised for `device` (torch.tpu.memory_stats's num_ooms).
void note_out_of_memory(int device);
// Inside a catch block: rethrows the exception being handled, except that
// memory running out (a plugin's RESOURCE_EXHAUSTED or out-of-memory
// message, std::bad_alloc on the host) becomes torch.OutOfMemoryError
// naming the size (when the plugin says it), the device and `where` (an op,
// or empty), counted in the device's num_ooms.
[[noreturn]] void rethrow_out_of_memory_as_torch_error(int device, std::string_view where = {});

// The device's memory: its limit as the plugin reports it, else (the CPU
// plugin) the host's physical memory; and what is free of it.
struct DeviceMemory {
  int64_t total = 0;
  int64_t free = 0;
};
DeviceMemory device_memory(int device);

// Device of a data pointer handed out by tpu_allocator(), or -1.
int device_of_pointer(const void* ptr);

// A new contiguous tpu tensor (zeros until written) on `device`.
at::Tensor empty_tpu(c10::IntArrayRef sizes, at::ScalarType dtype, int device,
                     std::optional<c10::MemoryFormat> memory_format = std::nullopt);
at::Tensor empty_strided_tpu(c10::IntArrayRef sizes, c10::IntArrayRef strides,
                             at::ScalarType dtype, int device);

// A tpu tensor of `sizes` and `dtype` whose storage holds `buffer` (of
// `type`: the same elements in storage order, possibly in another shape);
// contiguous, or with `strides` (dense, non-overlapping) where given.
at::Tensor tensor_from_buffer(pjrt::BufferPtr buffer, const hlo::Type& type, c10::IntArrayRef sizes,
                              at::ScalarType dtype, int device, c10::IntArrayRef strides = {},
                              exec::Checks checks = {});
// The same for a deferred value (fused eager).
at::Tensor tensor_from_deferred(exec::DeferredPtr value, c10::IntArrayRef sizes, at::ScalarType dtype, int device,
                                c10::IntArrayRef strides = {}, exec::Checks checks = {});

bool is_supported_dtype(at::ScalarType t);

// Current tpu device of this thread (the device guard's state).
int current_device();
void set_current_device(int device);

}  // namespace tpu
