// The tpu device as PyTorch sees it: the device guard (current device,
// streams, events) and the PrivateUse1 hooks (availability, generators,
// pointers, storage resizing, pinned host memory).
#include <ATen/core/CachingHostAllocator.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/library.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "csrc/aten/generator.h"
#include "csrc/aten/storage.h"
#include "csrc/aten/tensor_ops.h"
#include "csrc/aten/executor_scope.h"
#include "csrc/exec/runtime.h"

namespace tpu {

namespace {

int device_count_or_zero() noexcept {
  try {
    return exec::Runtime::get().device_count();
  } catch (...) {
    return 0;  // no plugin: the device is unavailable, not an error here
  }
}

struct TpuEvent {
  int device = 0;
  std::shared_ptr<pjrt::Event> done;                   // null: nothing was pending when recorded
  std::vector<std::shared_ptr<pjrt::Event>> copies;    // host copies in flight when recorded
  std::shared_ptr<std::atomic<int64_t>> completed_ns;  // steady clock at completion (0 until then)

  bool ready() const {
    if (done && !done->is_ready()) return false;
    for (const auto& c : copies) {
      if (!c->is_ready()) return false;
    }
    return true;
  }
  void await() const {
    if (done) done->await_interruptible();
    // (Ctrl-C may end the wait: a copy's destination is held until it lands.)
    for (const auto& c : copies) c->await_interruptible();
  }
};

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

int64_t steady_now_ns() { return now_ns(); }

// Events recorded on the same completion share one time, so two events
// recorded with no work between them are 0 ms apart, never the order their
// callbacks ran.
std::shared_ptr<std::atomic<int64_t>> completion_time(int device, const std::shared_ptr<pjrt::Event>& done) {
  static std::mutex mu;
  static std::vector<std::pair<std::weak_ptr<pjrt::Event>, std::shared_ptr<std::atomic<int64_t>>>> last;
  std::lock_guard<std::mutex> lock(mu);
  if (last.size() <= static_cast<size_t>(device)) last.resize(device + 1);
  auto& [event, at] = last[device];
  if (done && at && event.lock() == done) return at;
  at = std::make_shared<std::atomic<int64_t>>(0);
  event = done;
  if (!done || done->is_ready()) {
    at->store(now_ns());
  } else {
    std::shared_ptr<std::atomic<int64_t>> when = at;
    done->on_ready([when] { when->store(now_ns()); });
  }
  return at;
}

namespace {

// When the program completion `done` and the host copies `copies` have all
// completed (as completion_time; the latest of them).
std::shared_ptr<std::atomic<int64_t>> completion_time_with(int device, const std::shared_ptr<pjrt::Event>& done,
                                                           const std::vector<std::shared_ptr<pjrt::Event>>& copies) {
  if (copies.empty()) return completion_time(device, done);
  auto at = std::make_shared<std::atomic<int64_t>>(0);
  auto left = std::make_shared<std::atomic<size_t>>(copies.size() + 1);
  auto one_more = [at, left] {
    if (left->fetch_sub(1) == 1) at->store(now_ns());
  };
  if (done) {
    done->on_ready(one_more);
  } else {
    one_more();
  }
  for (const auto& c : copies) c->on_ready(one_more);
  return at;
}

double elapsed_ms(TpuEvent* a, TpuEvent* b) {
  TORCH_CHECK(a != nullptr && b != nullptr && a->completed_ns && b->completed_ns,
              "elapsed_time: both events must be recorded before asking for the time between them");
  for (TpuEvent* e : {a, b}) {
    e->await();
    while (e->completed_ns->load() == 0) std::this_thread::yield();  // the callback runs just after
  }
  return static_cast<double>(b->completed_ns->load() - a->completed_ns->load()) / 1e6;
}

// torch.Event.elapsed_time accepts only torch.Event itself as its argument,
// not a subclass (torch.tpu.Event): this op serves the subclass.
double event_elapsed_ms(int64_t start, int64_t end) {
  return elapsed_ms(reinterpret_cast<TpuEvent*>(start), reinterpret_cast<TpuEvent*>(end));
}

// One in-order stream per device: PJRT runs a device's programs in the order
// they were started, and the host waits only on reads or synchronize().
class TpuGuardImpl final : public c10::impl::DeviceGuardImplInterface {
 public:
  static constexpr c10::DeviceType kType = c10::DeviceType::PrivateUse1;

  c10::DeviceType type() const override { return kType; }
  c10::Device exchangeDevice(c10::Device d) const override {
    c10::Device old = getDevice();
    setDevice(d);
    return old;
  }
  c10::Device getDevice() const override {
    return c10::Device(kType, static_cast<c10::DeviceIndex>(current_device()));
  }
  void setDevice(c10::Device d) const override {
    TORCH_CHECK(d.type() == kType, "tpu guard: expected a tpu device, got ", d);
    if (d.has_index()) set_current_device(d.index());
  }
  void uncheckedSetDevice(c10::Device d) const noexcept override {
    if (d.has_index()) set_current_device(d.index());
  }
  c10::Stream getStream(c10::Device d) const noexcept override {
    return c10::Stream(c10::Stream::DEFAULT, d);
  }
  c10::Stream getDefaultStream(c10::Device d) const override {
    return c10::Stream(c10::Stream::DEFAULT, d);
  }
  c10::Stream exchangeStream(c10::Stream s) const noexcept override {
    return c10::Stream(c10::Stream::DEFAULT, s.device());
  }
  c10::DeviceIndex deviceCount() const noexcept override {
    return static_cast<c10::DeviceIndex>(device_count_or_zero());
  }
  // Streams: one in-order stream per device; a "new" stream is that one
  // (work on it is ordered with everything else, which is always correct).
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool) const override {
    return c10::Stream(c10::Stream::DEFAULT, with_index(d));
  }
  c10::Stream getNewStream(c10::Device d, int) const override {
    return c10::Stream(c10::Stream::DEFAULT, with_index(d));
  }

  // Events: recording takes the completion of the latest program started
  // on the device (running the calling thread's deferred graph first) and
  // of the host copies in flight (non_blocking reads), so an event is
  // complete exactly when everything issued before it is.
  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex device_index,
              const c10::EventFlag flag) const override {
    const int device = device_index >= 0          ? device_index
                       : stream.device_index() >= 0 ? stream.device_index()
                                                    : current_device();
    auto* e = static_cast<TpuEvent*>(*event);
    if (e == nullptr) {
      e = new TpuEvent();
      *event = e;
    }
    current_executor().flush(device);
    exec::Executor::process_default().flush(device);
    e->device = device;
    e->done = exec::Runtime::get().last_event(device);
    e->copies = exec::Runtime::get().host_copies(device);
    e->completed_ns = completion_time_with(device, e->done, e->copies);
  }

  void block(void* event, const c10::Stream& stream) const override {}  // one stream: already ordered
  bool queryEvent(void* event) const override {
    auto* e = static_cast<TpuEvent*>(event);
    return e == nullptr || e->ready();
  }
  void destroyEvent(void* event, const c10::DeviceIndex device_index) const noexcept override {
    delete static_cast<TpuEvent*>(event);
  }
  bool queryStream(const c10::Stream& stream) const override {
    const int device = stream.device_index() >= 0 ? stream.device_index() : current_device();
    std::shared_ptr<pjrt::Event> last = exec::Runtime::get().last_event(device);
    return (!last || last->is_ready()) && exec::Runtime::get().host_copies(device).empty();
  }
  void synchronizeStream(const c10::Stream& stream) const override {
    const int device = stream.device_index() >= 0 ? stream.device_index() : current_device();
    try {
      synchronize_device(device);
    } catch (...) {
      rethrow_out_of_memory_as_torch_error(device);
    }
  }
  void synchronizeEvent(void* event) const override {
    auto* e = static_cast<TpuEvent*>(event);
    try {
      if (e != nullptr) e->await();
    } catch (...) {
      rethrow_out_of_memory_as_torch_error(e->device);
    }
  }
  void synchronizeDevice(const c10::DeviceIndex device_index) const override {
    const int device = device_index >= 0 ? device_index : current_device();
    try {
      synchronize_device(device);
    } catch (...) {
      rethrow_out_of_memory_as_torch_error(device);
    }
  }
  // Milliseconds between the completions of two recorded events.
  double elapsedTime(void* start, void* end, const c10::DeviceIndex device_index) const override {
    return elapsed_ms(static_cast<TpuEvent*>(start), static_cast<TpuEvent*>(end));
  }

 private:
  static c10::Device with_index(c10::Device d) {
    return d.has_index() ? d : c10::Device(kType, static_cast<c10::DeviceIndex>(current_device()));
  }
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, TpuGuardImpl);

// tensor.record_stream(stream) (DDP, FSDP and data loaders call it): a
// no-op, and a correct one. CUDA's caching allocator needs it so that memory
// freed on one stream is not handed out while another stream's kernels may
// still read it. Here a storage's memory is its own PJRT buffer (the address
// the allocator reuses names no device memory), a device has one in-order
// stream, and a buffer dropped while a started program still reads it
// (Launcher::start lets go of a program's arguments once it is started; a
// fused graph holds its inputs until it runs) is only released by PJRT once
// that program is done (PJRT_Buffer_Destroy: memory is freed lazily, after
// the pending uses complete). No memory can be reused under a reader.
void record_stream(at::Tensor& self, c10::Stream stream) {
  TORCH_CHECK(stream.device_type() == c10::DeviceType::PrivateUse1,
              "record_stream: expected a stream of the tpu device, but got a stream of ", stream.device());
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("record_stream", TORCH_FN(record_stream));
}

TORCH_LIBRARY_FRAGMENT(torch_tpu, m) {
  m.def("_event_elapsed_ms(int start, int end) -> float", &event_elapsed_ms);
}

// Host memory for pin_memory() (a DataLoader's pin_memory=True, empty(...,
// pin_memory=True)): page-aligned allocations, recorded so that is_pinned()
// answers for any pointer inside one, as CUDA's host allocator does.
// Transfers from it are the same as from any host memory (the plugin copies
// the bytes before the call returns); what pinning gives is PyTorch's API.
// Pinned host memory: page-aligned host blocks the device's copies read and
// write directly. It is also the device's host allocator for
// torch.accelerator (empty_host_cache, host memory stats): nothing is
// cached, so emptying the cache frees nothing, and a block is freed when its
// last tensor goes (a non_blocking copy holds its destination until it lands).
class PinnedAllocator final : public at::HostAllocator {
 public:
  c10::DataPtr allocate(size_t n) override {
    void* p = nullptr;
    if (n > 0) {
      if (posix_memalign(&p, kPage, n) != 0 || p == nullptr) {
        TORCH_CHECK_WITH(OutOfMemoryError, false, "tpu: could not allocate ", n, " bytes of pinned host memory");
      }
      std::lock_guard<std::mutex> lock(mu());
      live()[reinterpret_cast<uintptr_t>(p)] = n;
      auto& st = stats();
      st.active_requests.increase(1);
      st.allocations.increase(1);
      st.active_bytes.increase(static_cast<int64_t>(n));
      st.allocated_bytes.increase(static_cast<int64_t>(n));
      st.num_host_alloc++;
    }
    return {p, p, &release, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }

  bool record_event(void* ptr, void* /*ctx*/, c10::Stream /*stream*/) override { return contains(ptr); }
  void empty_cache() override {}
  at::HostStats get_stats() override {
    std::lock_guard<std::mutex> lock(mu());
    return stats();
  }
  void reset_accumulated_stats() override {
    std::lock_guard<std::mutex> lock(mu());
    auto& st = stats();
    for (auto* s : {&st.active_requests, &st.active_bytes, &st.allocations, &st.allocated_bytes}) {
      s->reset_accumulated();
    }
    st.num_host_alloc = st.num_host_free = 0;
  }
  void reset_peak_stats() override {
    std::lock_guard<std::mutex> lock(mu());
    auto& st = stats();
    for (auto* s : {&st.active_requests, &st.active_bytes, &st.allocations, &st.allocated_bytes}) {
      s->reset_peak();
    }
  }

  static bool contains(const void* data) {
    const auto at = reinterpret_cast<uintptr_t>(data);
    std::lock_guard<std::mutex> lock(mu());
    auto it = live().upper_bound(at);
    if (it == live().begin()) return false;
    --it;
    return at < it->first + it->second;
  }

 private:
  static constexpr size_t kPage = 4096;
  static std::mutex& mu() {
    static std::mutex m;
    return m;
  }
  static std::map<uintptr_t, size_t>& live() {
    static auto* m = new std::map<uintptr_t, size_t>();  // (outlives tensors freed at exit)
    return *m;
  }
  static at::HostStats& stats() {
    static auto* s = new at::HostStats();
    return *s;
  }
  static void release(void* p) {
    if (p == nullptr) return;
    {
      std::lock_guard<std::mutex> lock(mu());
      auto it = live().find(reinterpret_cast<uintptr_t>(p));
      if (it != live().end()) {
        auto& st = stats();
        st.active_requests.decrease(1);
        st.allocations.decrease(1);
        st.active_bytes.decrease(static_cast<int64_t>(it->second));
        st.allocated_bytes.decrease(static_cast<int64_t>(it->second));
        st.num_host_free++;
        live().erase(it);
      }
    }
    std::free(p);
  }
};

PinnedAllocator& pinned_allocator() {
  static auto* a = new PinnedAllocator();
  return *a;
}

class TpuHooks final : public at::PrivateUse1HooksInterface {
 public:
  void init() const override { exec::Runtime::get(); }
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return device_count_or_zero() > 0; }
  bool hasPrimaryContext(c10::DeviceIndex device_index) const override { return true; }
  c10::DeviceIndex deviceCount() const override {
    return static_cast<c10::DeviceIndex>(device_count_or_zero());
  }
  void setCurrentDevice(c10::DeviceIndex device) const override { set_current_device(device); }
  c10::DeviceIndex getCurrentDevice() const override {
    return static_cast<c10::DeviceIndex>(current_device());
  }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex device) const override {
    auto old = static_cast<c10::DeviceIndex>(current_device());
    set_current_device(device);
    return old;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex device) const override {
    return exchangeDevice(device);
  }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex device_index) const override {
    return default_generator(device_index);
  }
  at::Generator getNewGenerator(c10::DeviceIndex device_index) const override {
    return new_generator(device_index);
  }
  at::Device getDeviceFromPtr(void* data) const override {
    const int d = device_of_pointer(data);
    TORCH_CHECK(d >= 0, "tpu: pointer ", data, " does not belong to a tpu storage");
    return at::Device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(d));
  }
  bool isPinnedPtr(const void* data) const override { return PinnedAllocator::contains(data); }
  at::Allocator* getPinnedMemoryAllocator() const override { return &pinned_allocator(); }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override {
    resize_storage_bytes(storage, newsize);
  }
};

struct RegisterHooks {
  RegisterHooks() {
    at::RegisterPrivateUse1HooksInterface(new TpuHooks());
    at::setHostAllocator(c10::DeviceType::PrivateUse1, &pinned_allocator());
  }
} register_hooks;

}  // namespace

}  // namespace tpu
