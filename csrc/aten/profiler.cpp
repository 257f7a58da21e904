// Device activity for torch.profiler: each program the runtime runs on a
// tpu device becomes a kernel span on that device's row, linked to the op
// (or the flush) that started it, as Kineto shows CUDA kernels.
//
// A Kineto child profiler (libkineto's IActivityProfiler, the interface
// Kineto has for backends' own activity) is registered with the profiler
// that torch links in. While one of its sessions records, the runtime's
// execution observer stamps each program: it starts when it is launched
// or when the device finishes the previous one, and ends when its
// completion event fires. The correlation id
// of the CPU op in progress on the launching thread links the span to the
// op, so `key_averages()` has device times per op and a trace shows the
// programs under their ops.
#include <ATen/core/Tensor.h>
#include <torch/library.h>

#include <c10/util/ApproximateClock.h>
#include <torch/csrc/profiler/stubs/base.h>

#include <kineto/libkineto.h>
#include <kineto/output_base.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "csrc/aten/executor_scope.h"
#include "csrc/aten/storage.h"
#include "csrc/exec/launcher.h"
#include "csrc/exec/runtime.h"

namespace tpu {

namespace {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

struct Span {
  int device = 0;
  bool fused = false;
  int64_t launched = 0;
  std::atomic<int64_t> end{0};  // set by the completion callback (another thread)
  uint64_t correlation = 0;
  std::shared_ptr<pjrt::Event> done;
};

// What the recording sessions collect (one at a time).
struct Recorder {
  std::mutex mu;
  std::vector<std::shared_ptr<Span>> spans;
};
std::atomic<bool> g_recording{false};
Recorder g_recorder;
thread_local std::vector<uint64_t> t_correlation;

void observe(int device, const std::shared_ptr<pjrt::Event>& done, bool fused) {
  if (!g_recording.load(std::memory_order_relaxed)) return;
  auto span = std::make_shared<Span>();
  span->device = device;
  span->fused = fused;
  span->launched = now_ns();
  span->correlation = t_correlation.empty() ? 0 : t_correlation.back();
  span->done = done;
  {
    std::lock_guard<std::mutex> lock(g_recorder.mu);
    g_recorder.spans.push_back(span);
  }
  done->on_ready([span] { span->end = now_ns(); });
}

class Session : public libkineto::IActivityProfilerSession {
 public:
  void start() override {
    {
      std::lock_guard<std::mutex> lock(g_recorder.mu);
      g_recorder.spans.clear();
    }
    // Programs start on the op's own thread while recording (the span links
    // to the op in progress there), not on the launcher thread.
    if (!holding_launches_) exec::Launcher::hold_inline(true);
    holding_launches_ = true;
    g_recording = true;
    status_ = libkineto::TraceStatus::RECORDING;
  }

  void stop() override {
    g_recording = false;
    if (holding_launches_) exec::Launcher::hold_inline(false);
    holding_launches_ = false;
    {
      std::lock_guard<std::mutex> lock(g_recorder.mu);
      spans_.swap(g_recorder.spans);
    }
    // Programs still running finish first (their spans need an end). A
    // program's completion callback may run on the plugin's thread after a
    // wait for it returned: a span whose callback has not run yet ends now.
    for (const auto& s : spans_) {
      try {
        s->done->await();
      } catch (...) {
      }
      int64_t unset = 0;
      s->end.compare_exchange_strong(unset, now_ns());
      s->done.reset();
    }
    status_ = libkineto::TraceStatus::PROCESSING;
  }

  std::vector<std::string> errors() override { return {}; }

  void processTrace(libkineto::ActivityLogger& logger) override {
    processTrace(logger, nullptr, 0, 0);
  }

  void processTrace(libkineto::ActivityLogger& logger, libkineto::getLinkedActivityCallback linked, int64_t,
                    int64_t) override {
    buffer_ = std::make_unique<libkineto::CpuTraceBuffer>();
    std::vector<int64_t> free_at;  // per device: when its previous program ended
    for (const auto& s : spans_) {
      const int64_t end = s->end.load();
      if (static_cast<size_t>(s->device) >= free_at.size()) free_at.resize(s->device + 1, 0);
      // A program waits for the device's previous ones (a device runs them
      // in order, though independent ones may finish out of order).
      int64_t start = s->launched;
      if (free_at[s->device] <= end) start = std::max(start, free_at[s->device]);
      free_at[s->device] = std::max(free_at[s->device], end);
      buffer_->emplace_activity(buffer_->span, libkineto::ActivityType::CONCURRENT_KERNEL,
                                s->fused ? "tpu fused program" : "tpu program");
      libkineto::GenericTraceActivity& a = *buffer_->activities.back();
      a.startTime = start;
      a.endTime = std::max(start, end);
      a.id = static_cast<int32_t>(s->correlation);
      a.device = s->device;
      a.resource = 0;
      if (linked && s->correlation != 0) a.linked = linked(static_cast<int32_t>(s->correlation));
      logger.handleActivity(a);
    }
    status_ = libkineto::TraceStatus::READY;
  }

  std::unique_ptr<libkineto::DeviceInfo> getDeviceInfo() override {
    return std::make_unique<libkineto::DeviceInfo>(libkineto::DeviceInfo{0, 0, "tpu", "tpu:0"});
  }

  std::vector<libkineto::ResourceInfo> getResourceInfos() override { return {}; }

  std::unique_ptr<libkineto::CpuTraceBuffer> getTraceBuffer() override { return std::move(buffer_); }

  void pushCorrelationId(uint64_t id) override { t_correlation.push_back(id); }
  void popCorrelationId() override {
    if (!t_correlation.empty()) t_correlation.pop_back();
  }

 private:
  bool holding_launches_ = false;
  std::vector<std::shared_ptr<Span>> spans_;
  std::unique_ptr<libkineto::CpuTraceBuffer> buffer_;
};

class TpuActivityProfiler : public libkineto::IActivityProfiler {
 public:
  const std::string& name() const override { return name_; }
  const std::set<libkineto::ActivityType>& availableActivities() const override { return types_; }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(const std::set<libkineto::ActivityType>& types,
                                                                 const libkineto::Config&) override {
    if (!types.count(libkineto::ActivityType::CONCURRENT_KERNEL)) return nullptr;
    return std::make_unique<Session>();
  }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(int64_t, int64_t,
                                                                 const std::set<libkineto::ActivityType>& types,
                                                                 const libkineto::Config& config) override {
    return configure(types, config);
  }

 private:
  std::string name_ = "torch_tpu";
  std::set<libkineto::ActivityType> types_ = {libkineto::ActivityType::CONCURRENT_KERNEL};
};

// The legacy profiler (torch.autograd.profiler.profile(use_device="tpu"))
// times each op on the device between two markers: from when the op began
// on the host to the completion of the latest program started on the
// device when it ended. (Programs that do not depend on each other may
// finish out of order, so two completions are not subtracted.)
struct Marker {
  int64_t recorded = steady_now_ns();
  std::shared_ptr<pjrt::Event> done;         // the latest program's completion (null: none pending)
  std::shared_ptr<std::atomic<int64_t>> at;  // its time (completion_time)
};

struct LegacyStubs : torch::profiler::impl::ProfilerStubs {
  void record(c10::DeviceIndex* device, torch::profiler::impl::ProfilerVoidEventStub* event,
              int64_t* cpu_ns) const override {
    const int d = current_device();
    if (device) *device = static_cast<c10::DeviceIndex>(d);
    auto m = std::make_shared<Marker>();
    if (exec::Runtime::started()) m->done = exec::Runtime::get().last_event(d);
    m->at = completion_time(d, m->done);
    if (cpu_ns) *cpu_ns = c10::getTime();
    *event = m;
  }
  float elapsed(const torch::profiler::impl::ProfilerVoidEventStub* start,
                const torch::profiler::impl::ProfilerVoidEventStub* end) const override {
    auto* a = static_cast<Marker*>(start->get());
    auto* b = static_cast<Marker*>(end->get());
    if (b->done) {
      try {
        b->done->await();
      } catch (...) {
      }
    }
    while (b->at->load() == 0) std::this_thread::yield();  // the callback runs just after
    return static_cast<float>(std::max<int64_t>(0, b->at->load() - a->recorded)) / 1000.0f;  // microseconds
  }
  void mark(const char*) const override {}
  void rangePush(const char*) const override {}
  void rangePop() const override {}
  bool enabled() const override { return true; }
  void onEachDevice(std::function<void(int)> op) const override {
    const int saved = current_device();
    const int n = exec::Runtime::started() ? exec::Runtime::get().device_count() : 1;
    for (int d = 0; d < n; ++d) {
      set_current_device(d);
      op(d);
    }
    set_current_device(saved);
  }
  void synchronize() const override {
    if (!exec::Runtime::started()) return;
    for (int d = 0; d < exec::Runtime::get().device_count(); ++d) synchronize_device(d);
  }
};

// Registers the child profiler with Kineto (once), the legacy profiler's
// stubs, and the runtime's observer.
void register_profiler() {
  static std::once_flag once;
  std::call_once(once, [] {
    libkineto::api().registerProfilerFactory([] { return std::make_unique<TpuActivityProfiler>(); });
    static LegacyStubs stubs;
    torch::profiler::impl::registerPrivateUse1Methods(&stubs);
    exec::Runtime::set_execution_observer(&observe);
  });
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(torch_tpu, m) { m.def("_register_profiler() -> ()", &register_profiler); }

}  // namespace tpu
