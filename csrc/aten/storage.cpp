#include "csrc/aten/storage.h"

#include <ATen/EmptyTensor.h>
#include <c10/core/DeviceGuard.h>
#include <sys/mman.h>

#include <map>
#include <vector>

namespace tpu {

namespace {

constexpr int kMaxDevices = 64;
constexpr size_t kRegionBytes = size_t{1} << 40;  // address space per device
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
    TORCH_CHECK(r.next + size <= kRegionBytes,
                "tpu: out of device address space (more than 1 TiB live on tpu:", device, ")");
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
      if (base != nullptr && p >= base && p < base + kRegionBytes) return d;
    }
    return -1;
  }

 private:
  struct Region {
    char* base = nullptr;
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
    if (r.base == nullptr) {
      void* p = mmap(nullptr, kRegionBytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                     -1, 0);
      TORCH_CHECK(p != MAP_FAILED, "tpu: could not reserve device address space");
      r.base = static_cast<char*>(p);
    }
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

void count_alloc(int device, int64_t nbytes) {
  std::lock_guard<std::mutex> lock(g_mem_mu);
  MemoryCounters& m = g_mem[device];
  m.allocated += nbytes;
  m.peak = std::max(m.peak, m.allocated);
  if (nbytes > 0) ++m.num_allocs;
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
  count_alloc(device, -static_cast<int64_t>(nbytes));
  delete c;
}

thread_local int t_current_device = 0;

class TpuAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    const int device = current_device();
    void* addr = nbytes > 0 ? address_space().take(device, nbytes) : nullptr;
    auto* ctx = new Context(nbytes, device, addr);
    count_alloc(device, static_cast<int64_t>(nbytes));
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

void reset_peak_memory(int device) {
  std::lock_guard<std::mutex> lock(g_mem_mu);
  TORCH_CHECK(device >= 0 && device < kMaxDevices, "tpu: invalid device index ", device);
  g_mem[device].peak = g_mem[device].allocated;
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
                              at::ScalarType dtype, int device, c10::IntArrayRef strides) {
  at::Tensor t = strides.empty() ? empty_tpu(sizes, dtype, device) : empty_strided_tpu(sizes, strides, dtype, device);
  storage_of(t).set_value(std::move(buffer), type);
  return t;
}

at::Tensor tensor_from_deferred(exec::DeferredPtr value, c10::IntArrayRef sizes, at::ScalarType dtype, int device,
                                c10::IntArrayRef strides) {
  at::Tensor t = strides.empty() ? empty_tpu(sizes, dtype, device) : empty_strided_tpu(sizes, strides, dtype, device);
  storage_of(t).set_deferred(std::move(value));
  return t;
}

TpuStorage::Value TpuStorage::value() const {
  Value v = raw_value();
  if (!v.deferred) return v;
  v.buffer = v.deferred->resolve();  // runs the fused graph (outside our lock)
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
    case at::kComplexDouble:
      return true;
    default:
      return false;
  }
}

}  // namespace tpu
