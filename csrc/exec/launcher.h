// Strict eager's launcher thread: programs started off the calling thread.
//
// Starting a program (PJRT execute) costs the calling thread as much as the
// rest of an op together: some 2.6 us on the CPU plugin, more on an
// accelerator's. In a burst of ops (ops in quick succession, with no wait
// for the device between them) strict eager hands each op's compiled
// program to one launcher thread, as CUDA hands kernels to its driver's
// queue: the op returns at once with results that are DeferredValues, which
// the thread fills in order when it starts their program. A later op takes
// such a value as its argument without waiting (the queue is in order, so
// its producer has started by then); anything that needs the buffer itself
// (a read, a synchronize, an event, a fused graph) waits until its program
// has started, then for the device as before. A caller that needs a program
// the thread has not got to starts it (and those before it) itself rather
// than wait for another thread to wake; and an op that is not part of a
// burst (one between two reads) starts on the calling thread at once.
//
// Donation stays what starting on the calling thread would decide (see
// donation_mask in aten/eager.cpp): where the queue's own references to a
// value could change the answer, the caller waits for the thread to let go
// of them first, so a program's text, and so the executable cache, never
// depends on timing.
//
// Debug eager (TORCH_TPU_LAUNCH_BLOCKING=1) and a recording profiler (which
// links each program to the op on the launching thread) start programs on
// the calling thread; TORCH_TPU_ASYNC_LAUNCH=0 does so always.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "csrc/exec/deferred.h"
#include "csrc/pjrt/client.h"

namespace tpu::exec {

class Runtime;

class Launcher {
 public:
  // The process's launcher; its thread starts on first use.
  static Launcher& get();
  // Whether strict eager launches through the thread now.
  static bool enabled();
  // Programs start on the calling thread while a hold is in force (a
  // recording profiler). Holds nest.
  static void hold_inline(bool on);
  // TORCH_TPU_ASYNC_LAUNCH's setting, changed for the process: "0", "1" or
  // "always" (every strict program through the thread: tests). Returns the
  // one it replaces.
  static std::string set_mode(const std::string& mode);
  // Whether programs were queued that the thread has not started and let go of.
  static bool busy();
  // Waits until the thread started every program queued before this call
  // and dropped its references to their arguments (nothing when idle).
  static void drain();

  // Queues `exe` on `args` (buffers, or results of programs queued earlier)
  // for `device`: its results, of `fn`'s types, are filled when the thread
  // starts it (with the error, if starting it failed).
  std::vector<DeferredPtr> launch(Runtime& runtime, const FunctionPtr& fn, pjrt::ExecutablePtr exe,
                                  std::vector<ProgramArg> args, int device);
  // Tests: the next program the thread starts fails as if the plugin had
  // refused it with `code` (a PJRT_Error_Code) and `message`.
  static void fail_next_start(int code, std::string message);

  // Waits until the program numbered `seq` has been started.
  void wait_for(uint64_t seq);
  // Whether the caller should start its program itself, at once: nothing
  // is queued and ops are not coming in a burst (ops in quick succession,
  // with no wait for the device between them). An op between two reads
  // then pays no hand-off to another thread, which may have to wake first
  // (tens of microseconds on a loaded machine); the third op of a burst
  // queues, and wakes the thread.
  bool start_here();
  // The host waits for the device (a read, a synchronize): a burst ends.
  static void host_waits();

 private:
  Launcher();
  struct Item {
    uint64_t seq = 0;
    Runtime* runtime = nullptr;
    pjrt::ExecutablePtr exe;
    std::vector<ProgramArg> args;
    std::vector<std::weak_ptr<DeferredValue>> results;  // (not holders: donation counts holders)
    int device = 0;
  };
  void loop();
  // Wakes the thread if it sleeps (a burst begins).
  void wake();
  // Starts queued programs in order until `seq` is finished (or the queue is
  // empty); the caller holds start_mu_.
  void start_until(uint64_t seq);
  static void start(Item& item);
  void stop();

  std::mutex mu_;                 // the queue
  std::condition_variable work_;  // the thread waits for items
  std::deque<Item> queue_;        // under mu_
  bool sleeping_ = false;         // under mu_
  bool wake_ = false;             // under mu_: wake() asked the thread to wake
  std::atomic<bool> awake_{true};  // not sleeping nor about to
  std::atomic<bool> wake_asked_{false};  // since it last went to sleep
  std::atomic<int64_t> last_launch_ns_{0};
  std::atomic<int> burst_{0};  // ops, each soon after the one before
  bool stopping_ = false;         // under mu_
  // Held by whoever starts queued programs: the thread, or a caller that
  // needs a value before the thread got to it (it starts them itself rather
  // than wait for another thread to wake).
  std::mutex start_mu_;
  std::atomic<uint64_t> queued_{0};    // the number of the last program queued
  std::atomic<uint64_t> finished_{0};  // ... started and let go of, in order
  std::thread thread_;
};

}  // namespace tpu::exec
