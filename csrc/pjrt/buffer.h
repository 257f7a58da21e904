// RAII owners of PJRT events and device buffers.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "csrc/pjrt/api.h"

namespace tpu::pjrt {

class Device;

// Raised by a wait for the device that Ctrl-C (SIGINT) interrupted. The
// work it waited for still runs; Python raises its KeyboardInterrupt as
// soon as control returns to it.
class Interrupted : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Called by a wait that SIGINT interrupted: raises the caller's exception
// (torch_tpu installs one raising Python's KeyboardInterrupt), or returns to
// let the wait go on. Without one, the wait raises Interrupted.
void set_interrupt_hook(void (*hook)());

// A PJRT_Event: completion of an asynchronous transfer or execution.
class Event {
 public:
  Event(const Api* api, c::PJRT_Event* event) : api_(api), event_(event) {}
  ~Event();
  Event(Event&& other) noexcept : api_(other.api_), event_(other.event_) { other.event_ = nullptr; }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  // Block until the event is ready; throw the plugin's error if it failed.
  void await();
  // The same, but SIGINT ends the wait (the interrupt hook's exception, or
  // Interrupted): only for waits after which nothing still reads or writes
  // host memory of the caller's (a program's completion, a value's
  // readiness; never a transfer from or to host memory).
  void await_interruptible();
  bool is_ready();
  // Call `fn` once the event is ready (at once if it is), on whichever
  // thread completes it; an error of the event is dropped (await reports it).
  void on_ready(std::function<void()> fn);

 private:
  const Api* api_;
  c::PJRT_Event* event_;
};

// A device buffer. Buffers are immutable: an in-place update on the device
// produces a new buffer (possibly reusing this one's memory by donation).
class Buffer {
 public:
  Buffer(std::shared_ptr<const Api> api, c::PJRT_Buffer* buffer)
      : api_(std::move(api)), buffer_(buffer) {}
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  c::PJRT_Buffer* raw() const { return buffer_; }
  c::PJRT_Buffer_Type element_type() const;
  std::vector<int64_t> dims() const;
  size_t on_device_size_in_bytes() const;

  // Copy the buffer (dense, row-major) into `dst`, which holds `nbytes`.
  // Blocks until the data is there; surfaces errors of the computation that
  // produced the buffer.
  void to_host(void* dst, size_t nbytes) const;
  // Several reads at once: every copy is started before any is waited for,
  // so a plugin that copies on a worker thread (the CPU plugin does, even
  // for a ready buffer) wakes it once for all of them, not once per read.
  // Counted as one host read each.
  struct Read {
    const Buffer* buffer;
    void* dst;
    size_t nbytes;
  };
  static void to_host(const std::vector<Read>& reads);
  // Starts copying the buffer into `dst` once its value is there, without
  // waiting: returns the copy's completion (null: already done). `dst` must
  // stay valid until then. Not a host read: nothing waits.
  std::unique_ptr<Event> to_host_async(void* dst, size_t nbytes) const;
  // How many to_host reads the process made (each one waits for the device):
  // tests use it to prove a loop never synchronizes.
  static int64_t host_reads();
  // The calling thread's reads (a torch.compile capture with any is not replayed).
  static int64_t thread_host_reads();
  // While one lives, the thread's reads are bookkeeping (earlier ops' checks
  // read to keep a storage's list of them short), not values an op reads:
  // they still count in host_reads (they wait), not in thread_host_reads,
  // so a capture they happen in stays replayable.
  class BookkeepingReads {
   public:
    BookkeepingReads();
    ~BookkeepingReads();
    BookkeepingReads(const BookkeepingReads&) = delete;
    BookkeepingReads& operator=(const BookkeepingReads&) = delete;

   private:
    int64_t saved_;
  };

  // Block until the buffer's producer finished; throws its error if it
  // failed (Ctrl-C ends the wait: see Event::await_interruptible).
  void await_ready() const;

  // Whether a program may take this buffer's memory for an output
  // (donation). Not a buffer that aliases host memory (Client::adopt_host):
  // the output would live in the caller's host tensor.
  bool donatable() const { return donatable_; }
  void set_donatable(bool donatable) { donatable_ = donatable; }

  // A copy of this buffer on another device of the same client.
  std::unique_ptr<Buffer> copy_to_device(const Device& device) const;

 private:
  std::shared_ptr<const Api> api_;
  c::PJRT_Buffer* buffer_;
  bool donatable_ = true;
};

using BufferPtr = std::shared_ptr<Buffer>;

// Bytes per element of a PJRT buffer type (0 for types we do not use).
size_t element_size(c::PJRT_Buffer_Type type);

}  // namespace tpu::pjrt
