#include "csrc/exec/launcher.h"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

#include "csrc/exec/runtime.h"

namespace tpu::exec {

namespace {

std::atomic<Launcher*> g_launcher{nullptr};
std::atomic<int> g_inline_holds{0};
std::atomic<bool> g_stopped{false};  // the process is exiting

// fail_next_start's failure, taken by the next program the thread starts.
std::mutex g_fail_mu;
std::exception_ptr g_fail_next;

// TORCH_TPU_ASYNC_LAUNCH: 0 (start on the calling thread), 1 (the default),
// or "always" (never start_here: what tests of the launcher run under).
int async_from_environment() {
  const char* e = std::getenv("TORCH_TPU_ASYNC_LAUNCH");
  if (e == nullptr) return 1;
  if (std::strcmp(e, "always") == 0) return 2;
  return std::strcmp(e, "0") != 0 ? 1 : 0;
}
std::atomic<int> g_async_mode{async_from_environment()};

// Spins for up to `us` microseconds until `ready()`; false if it never was.
// It yields the core as it spins: on a machine with few cores the thread it
// waits for may be waiting for this very core (and with the CPU plugin the
// device's own work runs on the same cores).
template <typename Ready>
bool spin(Ready ready, int us) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(us);
  for (int k = 0;; ++k) {
    if (ready()) return true;
    std::this_thread::yield();
    if ((k & 7) == 7 && std::chrono::steady_clock::now() > until) return ready();
  }
}

// A queue longer than this makes the caller wait for the thread (each
// queued program holds its arguments' memory).
constexpr uint64_t kMaxQueued = 4096;

// Ops closer together than this are a burst (start_here).
constexpr int64_t kBurstGapNs = 20000;

// How long the thread spins for the next op after its last one, and a
// caller for the thread to finish the programs it is starting, before
// sleeping (or taking the programs over).
constexpr int kThreadSpinUs = 30;
constexpr int kCallerSpinUs = 20;

}  // namespace

Launcher::Launcher() : thread_([this] { loop(); }) {}

Launcher& Launcher::get() {
  Launcher* l = g_launcher.load(std::memory_order_acquire);
  if (l != nullptr) return *l;
  static std::once_flag once;
  std::call_once(once, [] {
    // (Never destroyed: it may be used while the process exits. At exit the
    // thread starts what was queued and stops, before the plugin's own
    // teardown. A forked child, which has no such thread, starts programs
    // on its calling threads.)
    g_launcher.store(new Launcher(), std::memory_order_release);
    std::atexit([] { g_launcher.load()->stop(); });
  });
  return *g_launcher.load(std::memory_order_acquire);
}

bool Launcher::enabled() {
  return g_async_mode.load(std::memory_order_relaxed) != 0 && g_inline_holds.load(std::memory_order_relaxed) == 0 &&
         !pjrt::in_forked_child() && !g_stopped.load(std::memory_order_relaxed);
}

void Launcher::fail_next_start(int code, std::string message) {
  std::lock_guard<std::mutex> lock(g_fail_mu);
  g_fail_next = std::make_exception_ptr(
      pjrt::Error("PJRT_LoadedExecutable_Execute", static_cast<pjrt::c::PJRT_Error_Code>(code), message));
}

void Launcher::hold_inline(bool on) { g_inline_holds.fetch_add(on ? 1 : -1); }

std::string Launcher::set_mode(const std::string& mode) {
  if (mode != "0" && mode != "1" && mode != "always") {
    throw std::invalid_argument("tpu: unknown launch mode '" + mode + "'; expected '0', '1' or 'always'");
  }
  const int before = g_async_mode.exchange(mode == "always" ? 2 : mode == "1" ? 1 : 0);
  return before == 2 ? "always" : before == 1 ? "1" : "0";
}

bool Launcher::busy() {
  Launcher* l = g_launcher.load(std::memory_order_acquire);
  return l != nullptr && !pjrt::in_forked_child() &&
         l->finished_.load(std::memory_order_acquire) != l->queued_.load(std::memory_order_acquire);
}

void Launcher::drain() {
  host_waits();
  if (busy()) {
    Launcher& l = *g_launcher.load(std::memory_order_acquire);
    l.wait_for(l.queued_.load(std::memory_order_acquire));
  }
}

std::vector<DeferredPtr> Launcher::launch(Runtime& runtime, const FunctionPtr& fn, pjrt::ExecutablePtr exe,
                                          std::vector<ProgramArg> args, int device) {
  for (ProgramArg& a : args) {
    if (a.deferred && !a.deferred->launched()) {  // a value of a fused graph: run it now
      a.buffer = a.deferred->resolve();
      a.deferred.reset();
    }
  }
  const uint64_t behind = queued_.load(std::memory_order_relaxed);
  if (behind - finished_.load(std::memory_order_acquire) >= kMaxQueued) wait_for(behind - kMaxQueued / 2);
  const size_t n = fn->results.size();
  std::vector<DeferredPtr> out;
  out.reserve(n);
  Item item;
  item.runtime = &runtime;
  item.exe = std::move(exe);
  item.args = std::move(args);
  item.device = device;
  item.results.reserve(n);
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    item.seq = queued_.load(std::memory_order_relaxed) + 1;
    for (size_t r = 0; r < n; ++r) {
      DeferredPtr v(new DeferredValue(nullptr, fn, 0, static_cast<int>(r)));
      v->launch_ = item.seq;
      item.results.push_back(v);
      out.push_back(std::move(v));
    }
    queue_.push_back(std::move(item));
    queued_.store(queue_.back().seq, std::memory_order_release);
    wake = sleeping_;
  }
  if (wake) work_.notify_one();
  return out;
}

bool Launcher::start_here() {
  if (g_async_mode.load(std::memory_order_relaxed) == 2) return false;
  const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::steady_clock::now().time_since_epoch())
                          .count();
  const bool soon = now - last_launch_ns_.exchange(now, std::memory_order_relaxed) < kBurstGapNs;
  const int burst = soon ? burst_.fetch_add(1, std::memory_order_relaxed) + 1 : (burst_.store(0), 0);
  if (queued_.load(std::memory_order_acquire) != finished_.load(std::memory_order_acquire)) {
    return false;  // it starts after what is queued
  }
  if (burst < 2) return true;
  if (awake_.load(std::memory_order_acquire)) return false;
  // A burst, and the thread sleeps: it takes tens of microseconds to wake,
  // and the device would wait that long for the op. Start it here, and wake
  // the thread for the ops after it.
  wake();
  return true;
}

void Launcher::host_waits() {
  if (Launcher* l = g_launcher.load(std::memory_order_acquire)) l->burst_.store(0, std::memory_order_relaxed);
}

void Launcher::wait_for(uint64_t seq) {
  burst_.store(0, std::memory_order_relaxed);
  auto reached = [&] { return finished_.load(std::memory_order_acquire) >= seq; };
  if (reached()) return;
  if (pjrt::in_forked_child()) {
    throw std::runtime_error("tpu: this value was computed by the parent process before fork(); a forked child "
                             "cannot use the parent's tpu tensors");
  }
  for (int round = 0; !reached(); ++round) {
    // Start what the thread has not got to; while it is starting programs
    // itself, it is a few microseconds from done: spin, and after a while
    // (it may have been preempted) take the lock in turn.
    std::unique_lock<std::mutex> lock(start_mu_, std::defer_lock);
    if (round < 8 ? lock.try_lock() : (lock.lock(), true)) {
      start_until(seq);
    } else {
      spin(reached, kCallerSpinUs);
    }
  }
}

void Launcher::start_until(uint64_t seq) {
  while (finished_.load(std::memory_order_relaxed) < seq) {
    Item item;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (queue_.empty()) return;
      item = std::move(queue_.front());
      queue_.pop_front();
    }
    start(item);
    const uint64_t done = item.seq;
    item = Item{};  // lets go of its arguments before it counts as finished
    finished_.store(done, std::memory_order_release);
  }
}

void Launcher::start(Item& item) {
  std::vector<pjrt::c::PJRT_Buffer*> raw;
  raw.reserve(item.args.size());
  std::exception_ptr failure;
  for (const ProgramArg& a : item.args) {
    if (a.buffer) {
      raw.push_back(a.buffer->raw());
      continue;
    }
    // A result of a program queued earlier: started by now (this thread,
    // in order), so its buffer or its failure is set. A failed argument
    // fails this program's results the same way.
    const DeferredValue& d = *a.deferred;
    if (d.failure_) {
      failure = d.failure_;
      break;
    }
    raw.push_back(d.buffer_->raw());
  }
  if (!failure) {
    std::lock_guard<std::mutex> lock(g_fail_mu);
    std::swap(failure, g_fail_next);
  }
  std::vector<pjrt::BufferPtr> outs;
  if (!failure) {
    try {
      outs = item.runtime->start(item.exe, raw, item.device, false, false);
    } catch (...) {
      failure = std::current_exception();  // raised by whoever reads the results
    }
  }
  for (size_t r = 0; r < item.results.size(); ++r) {
    DeferredPtr v = item.results[r].lock();
    if (!v) continue;  // nothing holds it: its buffer goes now
    if (failure) {
      v->failure_ = failure;
    } else {
      v->buffer_ = std::move(outs.at(r));
    }
    v->started_.store(true, std::memory_order_release);
  }
}

void Launcher::loop() {
  for (;;) {
    // Awake (woken for a burst, or done with programs): spin briefly for
    // the next op before sleeping. Ops of a burst come a few microseconds
    // apart, and waking a sleeping thread costs tens.
    spin([&] { return queued_.load(std::memory_order_acquire) != finished_.load(std::memory_order_acquire); },
         kThreadSpinUs);
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (queue_.empty() && !stopping_) {
        sleeping_ = true;
        wake_asked_.store(false, std::memory_order_release);
        awake_.store(false, std::memory_order_release);
        work_.wait(lock, [&] { return !queue_.empty() || wake_ || stopping_; });
        wake_ = false;
        sleeping_ = false;
        awake_.store(true, std::memory_order_release);
      }
      if (queue_.empty()) {
        if (stopping_) return;  // with nothing left
        continue;               // woken for a burst: its ops come next
      }
    }
    std::lock_guard<std::mutex> lock(start_mu_);
    start_until(UINT64_MAX);
  }
}

void Launcher::wake() {
  if (wake_asked_.exchange(true, std::memory_order_acq_rel)) return;  // (once per sleep)
  std::lock_guard<std::mutex> lock(mu_);
  if (sleeping_ && !wake_) {
    wake_ = true;
    work_.notify_one();
  }
}

void Launcher::stop() {
  g_stopped.store(true);
  if (pjrt::in_forked_child()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  work_.notify_one();
  if (thread_.joinable()) thread_.join();
}

}  // namespace tpu::exec
