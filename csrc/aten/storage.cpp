#include "csrc/aten/storage.h"
#include "csrc/exec/runtime.h"
#include "csrc/aten/eager.h"
#include "csrc/aten/op_memo.h"
#include "csrc/hlo/builder.h"

#include <c10/core/CachingDeviceAllocator.h>
#include <unistd.h>

#include <ATen/EmptyTensor.h>
#include <c10/core/DeviceGuard.h>
#include <sys/mman.h>

#include <atomic>
#include <map>
#include <vector>

#include "csrc/exec/runtime.h"

namespace tpu {

namespace {

constexpr int kMaxDevices = 64;
// Address space reserved per device: 1 TiB, or the most of it the process
// may map (a `ulimit -v` limit, valgrind), down to 1 GiB.
constexpr size_t kRegionBytes = size_t{1} << 40;
constexpr size_t kMinRegionBytes = size_t{1} << 30;
constexpr size_t kMinBlock = 512;

// Hands out unique, never-dereferenceable addresses per device: a reserved
// PROT_NONE region, cut into power-of-two blocks that are reused after free.
class AddressSpace {
 public:
  void* take(int device, size_t nbytes) {
    std::lock_guard<std::mutex> lock(mu_);
    Region& r = region(device);
    const size_t size = block_size(nbytes);
    auto& free_list = r.free[size];
    if (!free_list.empty()) {
      void* p = free_list.back();
      free_list.pop_back();
      return p;
    }
    TORCH_CHECK_WITH(OutOfMemoryError, r.next + size <= r.bytes,
                     "tpu: out of memory: tried to allocate ", nbytes, " bytes on tpu:", device,
                     ", whose address space holds at most ", r.bytes >> 30,
                     " GiB of live tensors. Free tensors you no longer need (del, or smaller batches).");
    void* p = r.base + r.next;
    r.next += size;
    return p;
  }

  void give_back(int device, void* p, size_t nbytes) {
    std::lock_guard<std::mutex> lock(mu_);
    regions_[device].free[block_size(nbytes)].push_back(p);
  }

  int device_of(const void* p) {
    std::lock_guard<std::mutex> lock(mu_);
    for (int d = 0; d < kMaxDevices; ++d) {
      const char* base = regions_[d].base;
      if (base != nullptr && p >= base && p < base + regions_[d].bytes) return d;
    }
    return -1;
  }

 private:
  struct Region {
    char* base = nullptr;
    size_t bytes = 0;
    size_t next = 0;
    std::map<size_t, std::vector<void*>> free;
  };
  static size_t block_size(size_t nbytes) {
    size_t s = kMinBlock;
    while (s < nbytes) s <<= 1;
    return s;
  }
  Region& region(int device) {
    TORCH_CHECK(device >= 0 && device < kMaxDevices, "tpu: invalid device index ", device);
    Region& r = regions_[device];
    for (size_t bytes = kRegionBytes; r.base == nullptr && bytes >= kMinRegionBytes; bytes >>= 1) {
      void* p = mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (p == MAP_FAILED) continue;
      r.base = static_cast<char*>(p);
      r.bytes = bytes;
    }
    TORCH_CHECK(r.base != nullptr, "tpu: could not reserve ", kMinRegionBytes >> 30,
                " GiB of address space for tpu:", device, " (is the process's virtual memory limited? see ulimit -v)");
    return r;
  }
  std::mutex mu_;
  Region regions_[kMaxDevices];
};

AddressSpace& address_space() {
  static AddressSpace* space = new AddressSpace();  // never destroyed
  return *space;
}

std::mutex g_mem_mu;
MemoryCounters g_mem[kMaxDevices];
int64_t g_mem_limit[kMaxDevices] = {};  // bytes of live storages allowed (0: no limit)

// Refuses an allocation that would take the device's live storages past the
// process's limit (torch.tpu.set_per_process_memory_fraction), as CUDA's
// caching allocator does: torch.OutOfMemoryError, nothing allocated.
void check_limit(int device, int64_t nbytes) {
  std::lock_guard<std::mutex> lock(g_mem_mu);
  const int64_t limit = g_mem_limit[device];
  const int64_t held = g_mem[device].bytes[MemoryCounters::kAll].current;
  if (limit == 0 || held + nbytes <= limit) return;
  ++g_mem[device].num_ooms;
  TORCH_CHECK_WITH(OutOfMemoryError, false, "tpu: out of memory: tried to allocate ", nbytes, " bytes on tpu:",
                   device, " with ", held, " bytes already held, past this process's limit of ", limit,
                   " bytes (torch.tpu.set_per_process_memory_fraction). Free tensors you no longer need or raise "
                   "the fraction.");
}

void count_alloc(int device, int64_t nbytes, bool freed) {
  std::lock_guard<std::mutex> lock(g_mem_mu);
  MemoryCounters& m = g_mem[device];
  const int pool = nbytes < MemoryCounters::kSmallSize ? MemoryCounters::kSmall : MemoryCounters::kLarge;
  for (int p : {static_cast<int>(MemoryCounters::kAll), pool}) {
    if (freed) {
      m.bytes[p].take(nbytes);
      m.allocations[p].take(1);
    } else {
      m.bytes[p].add(nbytes);
      m.allocations[p].add(1);
    }
  }
}

struct Context {
  TpuStorage storage;
  void* address;
  Context(size_t nbytes, int device, void* addr) : storage(nbytes, device), address(addr) {}
};

void delete_context(void* ctx) {
  auto* c = static_cast<Context*>(ctx);
  const int device = c->storage.device();
  const size_t nbytes = c->storage.nbytes();
  if (c->address != nullptr) address_space().give_back(device, c->address, nbytes);
  count_alloc(device, static_cast<int64_t>(nbytes), true);
  delete c;
}

thread_local int t_current_device = 0;

// The allocator of tpu storages. Storages own PJRT buffers, which are freed
// when their tensors die: nothing is cached, so emptying the cache does
// nothing and reserved bytes are the allocated ones. As a DeviceAllocator it
// answers torch.accelerator's memory queries.
class TpuAllocator final : public c10::DeviceAllocator {
 public:
  bool initialized() override { return true; }
  void emptyCache(c10::MempoolId_t) override {}
  // One in-order stream per device: a buffer is never reused early.
  void recordStream(const c10::DataPtr&, c10::Stream) override {}
  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    const MemoryCounters m = memory_counters(device);
    c10::CachingDeviceAllocator::DeviceStats stats;
    auto fill = [](c10::CachingDeviceAllocator::StatArray& a, const MemoryStat* by_pool) {
      using c10::CachingDeviceAllocator::StatType;
      for (auto [type, pool] : {std::pair{StatType::AGGREGATE, MemoryCounters::kAll},
                                std::pair{StatType::LARGE_POOL, MemoryCounters::kLarge},
                                std::pair{StatType::SMALL_POOL, MemoryCounters::kSmall}}) {
        auto& s = a[static_cast<size_t>(type)];
        s.current = by_pool[pool].current;
        s.peak = by_pool[pool].peak;
        s.allocated = by_pool[pool].allocated;
        s.freed = by_pool[pool].freed;
      }
    };
    // Nothing cached, nothing split: allocated = active = requested = reserved.
    for (auto* a : {&stats.allocated_bytes, &stats.reserved_bytes, &stats.active_bytes, &stats.requested_bytes}) {
      fill(*a, m.bytes);
    }
    for (auto* a : {&stats.allocation, &stats.segment, &stats.active}) fill(*a, m.allocations);
    stats.num_ooms = m.num_ooms;
    // Every storage is a device allocation of its own.
    stats.num_device_alloc = m.allocations[MemoryCounters::kAll].allocated;
    stats.num_device_free = m.allocations[MemoryCounters::kAll].freed;
    return stats;
  }
  void resetAccumulatedStats(c10::DeviceIndex device) override { reset_accumulated_memory(device); }
  void resetPeakStats(c10::DeviceIndex device) override { reset_peak_memory(device); }
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override {
    const DeviceMemory d = device_memory(device);
    return {static_cast<size_t>(d.free), static_cast<size_t>(d.total)};
  }

  c10::DataPtr allocate(size_t nbytes) override {
    const int device = current_device();
    check_limit(device, static_cast<int64_t>(nbytes));
    void* addr = nullptr;
    try {
      if (nbytes > 0) addr = address_space().take(device, nbytes);
    } catch (const c10::OutOfMemoryError&) {
      note_out_of_memory(device);
      throw;
    }
    auto* ctx = new Context(nbytes, device, addr);
    count_alloc(device, static_cast<int64_t>(nbytes), false);
    return c10::DataPtr(addr, ctx, &delete_context,
                        c10::Device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(device)));
  }
  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    TORCH_CHECK(false,
                "tpu storages cannot be copied as raw bytes on the host; copy the tensors "
                "instead (dst.copy_(src))");
  }
};

TpuAllocator g_allocator;

}  // namespace

c10::Allocator* tpu_allocator() { return &g_allocator; }

namespace {
thread_local int64_t t_materialized_writes = 0;
}  // namespace
int64_t thread_materialized_writes() { return t_materialized_writes; }
void note_materialized_write() { ++t_materialized_writes; }

REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &g_allocator);

TpuStorage& storage_of(const c10::DataPtr& dp) {
  TORCH_CHECK(dp.get_deleter() == &delete_context,
              "tpu: this tensor's storage was not allocated by torch_tpu (device ",
              dp.device(), "); create tpu tensors with torch_tpu factories or .to('tpu')");
  return static_cast<Context*>(dp.get_context())->storage;
}

MemoryCounters memory_counters(int device) {
  std::lock_guard<std::mutex> lock(g_mem_mu);
  TORCH_CHECK(device >= 0 && device < kMaxDevices, "tpu: invalid device index ", device);
  return g_mem[device];
}

void set_memory_limit(int device, int64_t bytes) {
  std::lock_guard<std::mutex> lock(g_mem_mu);
  TORCH_CHECK(device >= 0 && device < kMaxDevices, "tpu: invalid device index ", device);
  g_mem_limit[device] = std::max<int64_t>(bytes, 0);
}

void reset_peak_memory(int device) {
  std::lock_guard<std::mutex> lock(g_mem_mu);
  TORCH_CHECK(device >= 0 && device < kMaxDevices, "tpu: invalid device index ", device);
  MemoryCounters& m = g_mem[device];
  for (MemoryStat* stats : {m.bytes, m.allocations}) {
    for (int p = 0; p < 3; ++p) stats[p].peak = stats[p].current;
  }
}

void reset_accumulated_memory(int device) {
  std::lock_guard<std::mutex> lock(g_mem_mu);
  TORCH_CHECK(device >= 0 && device < kMaxDevices, "tpu: invalid device index ", device);
  MemoryCounters& m = g_mem[device];
  for (MemoryStat* stats : {m.bytes, m.allocations}) {
    for (int p = 0; p < 3; ++p) stats[p].allocated = stats[p].freed = 0;
  }
  m.num_ooms = 0;
}

void note_out_of_memory(int device) {
  std::lock_guard<std::mutex> lock(g_mem_mu);
  if (device >= 0 && device < kMaxDevices) ++g_mem[device].num_ooms;
}

namespace {
// "4.00 GiB (4294967296 bytes)" for the first "<n> bytes" in a plugin's message.
std::string size_named_in(const std::string& message) {
  for (size_t at = message.find(" bytes"); at != std::string::npos; at = message.find(" bytes", at + 1)) {
    size_t start = at;
    while (start > 0 && std::isdigit(static_cast<unsigned char>(message[start - 1]))) --start;
    if (start == at || at - start > 19) continue;
    const double n = std::stod(message.substr(start, at - start));
    const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    double v = n;
    for (; v >= 1024 && u < 4; ++u) v /= 1024;
    char buf[96];
    std::snprintf(buf, sizeof(buf), u == 0 ? "%.0f %s" : "%.2f %s (%s bytes)", v, units[u],
                  message.substr(start, at - start).c_str());
    return buf;
  }
  return {};
}
}  // namespace

void rethrow_out_of_memory_as_torch_error(int device, std::string_view where) {
  const std::string in = where.empty() ? std::string() : " in " + std::string(where);
  try {
    throw;
  } catch (const c10::OutOfMemoryError&) {
    throw;
  } catch (const pjrt::Error& err) {
    if (!err.out_of_memory()) throw;
    note_out_of_memory(device);
    const std::string size = size_named_in(err.what());
    TORCH_CHECK_WITH(OutOfMemoryError, false, "tpu: out of device memory on tpu:", device, in,
                     size.empty() ? "" : ": tried to allocate ", size,
                     ". Free tensors you no longer need (del, or smaller batches). The plugin said: ", err.what());
  } catch (const c10::Error& err) {
    // Host staging memory our kernels take from PyTorch's CPU allocator.
    if (std::string_view(err.what()).find("DefaultCPUAllocator: can't allocate memory") == std::string_view::npos) {
      throw;
    }
    note_out_of_memory(device);
    TORCH_CHECK_WITH(OutOfMemoryError, false, "tpu: out of host memory while working for tpu:", device, in, ": ",
                     err.what_without_backtrace());
  } catch (const std::bad_alloc& err) {
    note_out_of_memory(device);
    TORCH_CHECK_WITH(OutOfMemoryError, false, "tpu: out of host memory while working for tpu:", device, in,
                     " (", err.what(), "): the process could not allocate host memory. Free tensors you no longer "
                     "need, or raise the process's memory limit (ulimit -v).");
  }
}

DeviceMemory device_memory(int device) {
  DeviceMemory d;
  const int64_t used = memory_counters(device).bytes[MemoryCounters::kAll].current;
  if (auto s = exec::Runtime::get().device(device).memory_stats(); s && s->bytes_limit) {
    d.total = *s->bytes_limit;
    d.free = std::max<int64_t>(0, d.total - s->bytes_in_use);
    return d;
  }
  // The plugin reports no limit (the XLA CPU plugin: its memory is the
  // host's): the host's physical memory.
  const long pages = sysconf(_SC_PHYS_PAGES), avail = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  d.total = pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : 0;
  d.free = avail > 0 && page > 0 ? static_cast<int64_t>(avail) * page : std::max<int64_t>(0, d.total - used);
  return d;
}

int device_of_pointer(const void* ptr) { return address_space().device_of(ptr); }

int current_device() { return t_current_device; }
void set_current_device(int device) { t_current_device = device; }

namespace {
constexpr c10::DispatchKeySet kTpuKeys{c10::DispatchKey::PrivateUse1};

struct DeviceScope {
  int saved;
  explicit DeviceScope(int device) : saved(t_current_device) { t_current_device = device; }
  ~DeviceScope() { t_current_device = saved; }
};
}  // namespace

at::Tensor empty_tpu(c10::IntArrayRef sizes, at::ScalarType dtype, int device,
                     std::optional<c10::MemoryFormat> memory_format) {
  DeviceScope scope(device);
  return at::detail::empty_generic(sizes, &g_allocator, kTpuKeys, dtype, memory_format);
}

at::Tensor empty_strided_tpu(c10::IntArrayRef sizes, c10::IntArrayRef strides, at::ScalarType dtype,
                             int device) {
  DeviceScope scope(device);
  return at::detail::empty_strided_generic(sizes, strides, &g_allocator, kTpuKeys, dtype);
}

at::Tensor tensor_from_buffer(pjrt::BufferPtr buffer, const hlo::Type& type, c10::IntArrayRef sizes,
                              at::ScalarType dtype, int device, c10::IntArrayRef strides, exec::Checks checks) {
  at::Tensor t = strides.empty() ? empty_tpu(sizes, dtype, device) : empty_strided_tpu(sizes, strides, dtype, device);
  storage_of(t).set_value(std::move(buffer), type, std::move(checks));
  return t;
}

at::Tensor tensor_from_deferred(exec::DeferredPtr value, c10::IntArrayRef sizes, at::ScalarType dtype, int device,
                                c10::IntArrayRef strides, exec::Checks checks) {
  at::Tensor t = strides.empty() ? empty_tpu(sizes, dtype, device) : empty_strided_tpu(sizes, strides, dtype, device);
  storage_of(t).set_deferred(std::move(value), std::move(checks));
  return t;
}

uint64_t TpuStorage::next_serial() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

TpuStorage::Value TpuStorage::raw_value() const {
  std::shared_ptr<const Padded> padded;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!padded_ || value_.buffer || value_.deferred) return value_;
    padded = padded_;
  }
  // The exact value: the padded value's slice of the actual sizes,
  // flattened (a program per size, or a
  // call recorded beside the padded value in fused eager; made outside our
  // lock, kept unless the storage was written meanwhile).
  const int64_t n = static_cast<int64_t>(nbytes_) / hlo::byte_width(padded->type.dtype);
  auto b = std::make_shared<hlo::Builder>();
  const hlo::Value exact =
      b->reshape(b->slice(b->param(padded->type), hlo::Dims(padded->sizes.size(), 0), padded->sizes), {n});
  Value v = apply_program(b, exact, {padded->buffer, padded->type, padded->deferred, padded->checks}, device_);
  std::lock_guard<std::mutex> lock(mu_);
  if (padded_ == padded && !value_.buffer && !value_.deferred) value_ = std::move(v);
  return value_;
}

TpuStorage::Value TpuStorage::value() const {
  Value v = raw_value();
  if (!v.deferred) return v;
  try {
    v.buffer = v.deferred->resolve();  // runs the fused graph (outside our lock)
  } catch (...) {
    // A program that could not start for want of device memory (started
    // by the launcher thread, so it is raised here): as at the op itself.
    rethrow_out_of_memory_as_torch_error(device());
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (value_.deferred == v.deferred) {  // not overwritten meanwhile: keep the buffer
    value_.buffer = v.buffer;
    value_.deferred.reset();
  }
  v.deferred.reset();
  return v;
}

bool is_supported_dtype(at::ScalarType t) {
  switch (t) {
    case at::kBool: case at::kByte: case at::kChar: case at::kShort: case at::kInt:
    case at::kLong: case at::kUInt16: case at::kUInt32: case at::kUInt64: case at::kHalf:
    case at::kBFloat16: case at::kFloat: case at::kDouble: case at::kComplexFloat:
    case at::kComplexDouble: case at::kFloat8_e4m3fn: case at::kFloat8_e5m2: case at::kFloat8_e4m3fnuz:
    case at::kFloat8_e5m2fnuz:
      return true;
    default:
      return false;
  }
}

}  // namespace tpu
