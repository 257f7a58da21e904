#include "csrc/pjrt/buffer.h"

#include <signal.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>

#include "csrc/pjrt/client.h"

namespace tpu::pjrt {

Event::~Event() {
  if (event_ == nullptr) return;
  auto args = make_args<c::PJRT_Event_Destroy_Args>();
  args.event = event_;
  TPU_PJRT_DESTROY(*api_, Event_Destroy, args);
}

namespace {

// Ctrl-C while the host waits for the device: our SIGINT handler notes it
// and passes the signal on to the handler it replaced (Python's, which
// raises KeyboardInterrupt once the interpreter runs again), so a wait
// returns at once instead of when the device finishes.
std::atomic<int> g_sigint{0};
std::atomic<void (*)()> g_interrupt_hook{nullptr};
struct sigaction g_previous;

void on_sigint(int sig, siginfo_t* info, void* context) {
  g_sigint.store(1);
  if (g_previous.sa_flags & SA_SIGINFO) {
    if (g_previous.sa_sigaction) g_previous.sa_sigaction(sig, info, context);
  } else if (g_previous.sa_handler == SIG_DFL) {
    signal(SIGINT, SIG_DFL);  // what Ctrl-C did before: end the process
    raise(SIGINT);
  } else if (g_previous.sa_handler != SIG_IGN && g_previous.sa_handler) {
    g_previous.sa_handler(sig);
  }
}

// Whether SIGINT can interrupt waits (installing our handler in front of
// the current one if it is not there: Python may have replaced it).
bool watch_sigint() {
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  struct sigaction current;
  if (sigaction(SIGINT, nullptr, &current) != 0) return false;
  if ((current.sa_flags & SA_SIGINFO) && current.sa_sigaction == &on_sigint) return true;
  if (!(current.sa_flags & SA_SIGINFO) && current.sa_handler == SIG_IGN) return false;
  g_previous = current;
  struct sigaction ours {};
  ours.sa_sigaction = &on_sigint;
  ours.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&ours.sa_mask);
  return sigaction(SIGINT, &ours, nullptr) == 0;
}

struct WaitState {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
};

}  // namespace

void set_interrupt_hook(void (*hook)()) { g_interrupt_hook.store(hook); }

void Event::await_interruptible() {
  if (!is_ready() && watch_sigint()) {
    g_sigint.store(0);
    auto state = std::make_shared<WaitState>();
    on_ready([state] {
      std::lock_guard<std::mutex> lock(state->mu);
      state->done = true;
      state->cv.notify_all();
    });
    std::unique_lock<std::mutex> lock(state->mu);
    while (!state->cv.wait_for(lock, std::chrono::milliseconds(20), [&] { return state->done; })) {
      if (g_sigint.exchange(0)) {
        void (*hook)() = g_interrupt_hook.load();
        if (hook == nullptr) {
          throw Interrupted("tpu: interrupted (SIGINT) while waiting for the device; the programs already "
                            "started still run to completion on the device");
        }
        lock.unlock();
        hook();  // raises KeyboardInterrupt, or returns (not the main thread)
        lock.lock();
      }
    }
  }
  await();
}

void Event::await() {
  auto args = make_args<c::PJRT_Event_Await_Args>();
  args.event = event_;
  TPU_PJRT_CALL(*api_, Event_Await, args);
  auto err = make_args<c::PJRT_Event_Error_Args>();
  err.event = event_;
  TPU_PJRT_CALL(*api_, Event_Error, err);
}

bool Event::is_ready() {
  auto args = make_args<c::PJRT_Event_IsReady_Args>();
  args.event = event_;
  TPU_PJRT_CALL(*api_, Event_IsReady, args);
  return args.is_ready;
}

namespace {
struct ReadyCallback {
  const Api* api;
  std::function<void()> fn;
};
void run_ready_callback(c::PJRT_Error* error, void* arg) {
  std::unique_ptr<ReadyCallback> cb(static_cast<ReadyCallback*>(arg));
  if (error != nullptr) {
    auto destroy = make_args<c::PJRT_Error_Destroy_Args>();
    destroy.error = error;
    cb->api->raw()->PJRT_Error_Destroy(&destroy);
  }
  cb->fn();
}
}  // namespace

void Event::on_ready(std::function<void()> fn) {
  auto args = make_args<c::PJRT_Event_OnReady_Args>();
  args.event = event_;
  args.callback = &run_ready_callback;
  auto* cb = new ReadyCallback{api_, std::move(fn)};
  args.user_arg = cb;
  try {
    TPU_PJRT_CALL(*api_, Event_OnReady, args);
  } catch (...) {
    delete cb;
    throw;
  }
}

Buffer::~Buffer() {
  if (buffer_ == nullptr) return;
  auto args = make_args<c::PJRT_Buffer_Destroy_Args>();
  args.buffer = buffer_;
  TPU_PJRT_DESTROY(*api_, Buffer_Destroy, args);
}

c::PJRT_Buffer_Type Buffer::element_type() const {
  auto args = make_args<c::PJRT_Buffer_ElementType_Args>();
  args.buffer = buffer_;
  TPU_PJRT_CALL(*api_, Buffer_ElementType, args);
  return args.type;
}

std::vector<int64_t> Buffer::dims() const {
  auto args = make_args<c::PJRT_Buffer_Dimensions_Args>();
  args.buffer = buffer_;
  TPU_PJRT_CALL(*api_, Buffer_Dimensions, args);
  return std::vector<int64_t>(args.dims, args.dims + args.num_dims);
}

size_t Buffer::on_device_size_in_bytes() const {
  auto args = make_args<c::PJRT_Buffer_OnDeviceSizeInBytes_Args>();
  args.buffer = buffer_;
  TPU_PJRT_CALL(*api_, Buffer_OnDeviceSizeInBytes, args);
  return args.on_device_size_in_bytes;
}

namespace {
std::atomic<int64_t> g_host_reads{0};
thread_local int64_t t_host_reads = 0;
}  // namespace

int64_t Buffer::host_reads() { return g_host_reads.load(); }
int64_t Buffer::thread_host_reads() { return t_host_reads; }
Buffer::BookkeepingReads::BookkeepingReads() : saved_(t_host_reads) {}
Buffer::BookkeepingReads::~BookkeepingReads() { t_host_reads = saved_; }

void Buffer::to_host(void* dst, size_t nbytes) const { to_host({{this, dst, nbytes}}); }

void Buffer::to_host(const std::vector<Read>& reads) {
  g_host_reads += static_cast<int64_t>(reads.size());
  t_host_reads += static_cast<int64_t>(reads.size());
  // Ctrl-C may end the wait for the values; the copies into the
  // destinations start only once the values are there, and are always
  // waited for, even after one failed (the caller frees the destinations
  // once we return).
  for (const Read& r : reads) r.buffer->await_ready();
  std::vector<Event> copies;
  copies.reserve(reads.size());
  std::exception_ptr first;
  try {
    for (const Read& r : reads) {
      auto args = make_args<c::PJRT_Buffer_ToHostBuffer_Args>();
      args.src = r.buffer->buffer_;
      args.dst = r.dst;
      args.dst_size = r.nbytes;
      TPU_PJRT_CALL(*r.buffer->api_, Buffer_ToHostBuffer, args);
      if (args.event != nullptr) copies.emplace_back(r.buffer->api_.get(), args.event);
    }
  } catch (...) {
    first = std::current_exception();
  }
  for (Event& e : copies) {
    try {
      e.await();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

std::unique_ptr<Event> Buffer::to_host_async(void* dst, size_t nbytes) const {
  auto args = make_args<c::PJRT_Buffer_ToHostBuffer_Args>();
  args.src = buffer_;
  args.dst = dst;
  args.dst_size = nbytes;
  TPU_PJRT_CALL(*api_, Buffer_ToHostBuffer, args);
  return args.event != nullptr ? std::make_unique<Event>(api_.get(), args.event) : nullptr;
}

void Buffer::await_ready() const {
  auto args = make_args<c::PJRT_Buffer_ReadyEvent_Args>();
  args.buffer = buffer_;
  TPU_PJRT_CALL(*api_, Buffer_ReadyEvent, args);
  if (args.event != nullptr) Event(api_.get(), args.event).await_interruptible();
}

std::unique_ptr<Buffer> Buffer::copy_to_device(const Device& device) const {
  auto args = make_args<c::PJRT_Buffer_CopyToDevice_Args>();
  args.buffer = buffer_;
  args.dst_device = device.raw();
  TPU_PJRT_CALL(*api_, Buffer_CopyToDevice, args);
  return std::make_unique<Buffer>(api_, args.dst_buffer);
}

size_t element_size(c::PJRT_Buffer_Type type) {
  switch (type) {
    case c::PJRT_Buffer_Type_PRED:
    case c::PJRT_Buffer_Type_S8:
    case c::PJRT_Buffer_Type_U8:
    case c::PJRT_Buffer_Type_F8E5M2:
    case c::PJRT_Buffer_Type_F8E4M3FN:
    case c::PJRT_Buffer_Type_F8E4M3B11FNUZ:
    case c::PJRT_Buffer_Type_F8E5M2FNUZ:
    case c::PJRT_Buffer_Type_F8E4M3FNUZ:
      return 1;
    case c::PJRT_Buffer_Type_S16:
    case c::PJRT_Buffer_Type_U16:
    case c::PJRT_Buffer_Type_F16:
    case c::PJRT_Buffer_Type_BF16:
      return 2;
    case c::PJRT_Buffer_Type_S32:
    case c::PJRT_Buffer_Type_U32:
    case c::PJRT_Buffer_Type_F32:
      return 4;
    case c::PJRT_Buffer_Type_S64:
    case c::PJRT_Buffer_Type_U64:
    case c::PJRT_Buffer_Type_F64:
    case c::PJRT_Buffer_Type_C64:
      return 8;
    case c::PJRT_Buffer_Type_C128:
      return 16;
    default:
      return 0;
  }
}

}  // namespace tpu::pjrt
