#include "csrc/distributed/process_group.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/reducer_timer.hpp>
#include <torch/version.h>

#include <algorithm>
#include <mutex>
#include <sstream>
#include <thread>

namespace tpu::dist {

ProcessGroupTPU::~ProcessGroupTPU() = default;

namespace {

bool on_host(const at::Tensor& t) { return t.device().is_cpu(); }

// Writes `host` (a staging tensor nothing writes again) into the tpu tensor
// `device`; on the CPU plugin the device buffer adopts host's memory.
void write_back(const at::Tensor& device, const at::Tensor& host) {
  static auto adopt = c10::Dispatcher::singleton()
                          .findSchemaOrThrow("torch_tpu::_adopt_host", "")
                          .typed<void(const at::Tensor&, const at::Tensor&)>();
  if (device.is_contiguous() && device.scalar_type() == host.scalar_type() && device.sizes() == host.sizes()) {
    adopt.call(device, host);
  } else {
    device.copy_(host);
  }
}

bool contains(const std::string& s, const char* what) { return s.find(what) != std::string::npos; }

std::string message_of(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const c10::Error& err) {
    return err.what_without_backtrace();
  } catch (const std::exception& err) {
    return err.what();
  } catch (...) {
    return "unknown error";
  }
}

std::exception_ptr backend_error(const std::string& msg) {
  return std::make_exception_ptr(c10::DistBackendError(
      c10::SourceLocation{__func__, __FILE__, static_cast<uint32_t>(__LINE__)}, msg));
}

// PREMUL_SUM scales each input on the device, then sums (the host transport
// has no PREMUL_SUM); every other reduction goes to the transport as it is.
c10d::ReduceOp host_reduction(const c10d::ReduceOp& op) {
  return op.op_ == c10d::ReduceOp::PREMUL_SUM ? c10d::ReduceOp(c10d::ReduceOp::SUM) : op;
}

// torch 2.13 renamed NCCLPreMulSumSupplement (2.11's only name) to
// PreMulSumSupplement, keeping the old name as an alias.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 13)
using PreMulSumSupplement = c10d::PreMulSumSupplement;
#else
using PreMulSumSupplement = c10d::NCCLPreMulSumSupplement;
#endif

at::Tensor prescaled(const c10d::ReduceOp& op, const at::Tensor& t) {
  if (op.op_ != c10d::ReduceOp::PREMUL_SUM) return t;
  auto* s = dynamic_cast<PreMulSumSupplement*>(op.supplement_.get());
  TORCH_CHECK(s != nullptr, "tpu: PREMUL_SUM without a factor");
  return s->tensor_factor.defined() ? t * s->tensor_factor.to(t.device()) : t * s->double_factor;
}

// The options of a reduction as the host transport takes them.
template <typename Options>
Options for_host(const Options& opts) {
  Options o = opts;
  o.reduceOp = host_reduction(opts.reduceOp);
  return o;
}

}  // namespace

// Host staging tensors, reused: a pooled tensor is free again once nothing
// but the pool refers to it or its storage (the transport is done with it and
// no device buffer aliases it any more). Reuse matters: fresh memory costs a
// page fault per 4 KB, more than the copy itself.
class ProcessGroupTPU::HostPool {
 public:
  at::Tensor take(at::IntArrayRef sizes, at::ScalarType dtype) {
    const int64_t nbytes = c10::multiply_integers(sizes) * static_cast<int64_t>(c10::elementSize(dtype));
    if (nbytes == 0) return at::empty(sizes, at::TensorOptions().dtype(dtype));
    std::lock_guard<std::mutex> lock(mu_);
    at::Tensor bytes;
    for (const auto& e : pool_) {
      if (e.numel() == nbytes && is_free(e)) {
        bytes = e;
        break;
      }
    }
    if (!bytes.defined()) {
      if (pool_.size() >= kMaxEntries) std::erase_if(pool_, [](const at::Tensor& e) { return is_free(e); });
      bytes = at::empty({nbytes}, at::TensorOptions().dtype(at::kByte));
      if (pool_.size() < kMaxEntries) pool_.push_back(bytes);
    }
    return bytes.view(dtype).view(sizes);
  }

 private:
  static constexpr size_t kMaxEntries = 64;
  static bool is_free(const at::Tensor& e) { return e.use_count() == 1 && e.storage().use_count() == 1; }
  std::mutex mu_;
  std::vector<at::Tensor> pool_;
};

// One call in flight: the host tensors the transport reads and writes, and
// which tpu tensor each host result is written back into.
struct ProcessGroupTPU::Call {
  Call(const char* op, c10d::OpType type, HostPool& pool) : op(op), type(type), pool(pool) {}
  at::NoGradGuard no_grad;  // staging copies are not part of any graph
  const char* op;
  c10d::OpType type;
  HostPool& pool;
  std::vector<std::pair<at::Tensor, at::Tensor>> writeback;  // (tpu tensor, host tensor)
  std::vector<at::Tensor> outputs;                           // what the Future holds

  // The host tensor the transport reads for `values`; when `written` is
  // given, the transport's result in it goes back into `written`.
  at::Tensor in(const at::Tensor& values, const at::Tensor* written = nullptr) {
    if (on_host(values) && (written == nullptr || on_host(*written))) {
      if (written != nullptr) outputs.push_back(*written);
      return written != nullptr ? *written : values;
    }
    // A PJRT transfer: it waits for the ops that produce the values (and runs
    // what fused eager deferred), so the call is ordered after them.
    at::Tensor host = pool.take(values.sizes(), values.scalar_type());
    host.copy_(values);
    if (written != nullptr) {
      writeback.emplace_back(*written, host);
      outputs.push_back(*written);
    }
    return host;
  }
  at::Tensor inout(const at::Tensor& t) { return in(t, &t); }
  // A host tensor for the transport to fill, written back into `t`.
  at::Tensor out(const at::Tensor& t) {
    outputs.push_back(t);
    if (on_host(t)) return t;
    at::Tensor host = pool.take(t.sizes(), t.scalar_type());
    writeback.emplace_back(t, host);
    return host;
  }
  std::vector<at::Tensor> in(const std::vector<at::Tensor>& ts) {
    std::vector<at::Tensor> r;
    for (const auto& t : ts) r.push_back(in(t));
    return r;
  }
  std::vector<at::Tensor> inout(const std::vector<at::Tensor>& ts) {
    std::vector<at::Tensor> r;
    for (const auto& t : ts) r.push_back(inout(t));
    return r;
  }
  std::vector<at::Tensor> out(const std::vector<at::Tensor>& ts) {
    std::vector<at::Tensor> r;
    for (const auto& t : ts) r.push_back(out(t));
    return r;
  }
  std::vector<std::vector<at::Tensor>> out(const std::vector<std::vector<at::Tensor>>& ts) {
    std::vector<std::vector<at::Tensor>> r;
    for (const auto& l : ts) r.push_back(out(l));
    return r;
  }
  std::vector<std::vector<at::Tensor>> in(const std::vector<std::vector<at::Tensor>>& ts) {
    std::vector<std::vector<at::Tensor>> r;
    for (const auto& l : ts) r.push_back(in(l));
    return r;
  }
  // Inputs of the reduction `op` (PREMUL_SUM's factor applied on the device);
  // reduced() also writes each result back into its input.
  std::vector<at::Tensor> scaled(const std::vector<at::Tensor>& ts, const c10d::ReduceOp& op) {
    std::vector<at::Tensor> r;
    for (const auto& t : ts) r.push_back(in(prescaled(op, t)));
    return r;
  }
  std::vector<at::Tensor> reduced(const std::vector<at::Tensor>& ts, const c10d::ReduceOp& op) {
    std::vector<at::Tensor> r;
    for (const auto& t : ts) r.push_back(in(prescaled(op, t), &t));
    return r;
  }
};

namespace {

// A Work of this backend: it completes once the host work has, and its
// results are written back to the tpu tensors.
class TpuWork final : public c10d::Work {
 public:
  TpuWork(c10::intrusive_ptr<ProcessGroupTPU> group, uint64_t seq, std::string op, c10d::OpType type,
          c10::intrusive_ptr<c10d::Work> host, std::vector<std::pair<at::Tensor, at::Tensor>> writeback,
          std::vector<at::Tensor> outputs)
      : Work(group->getRank(), type),
        group_(std::move(group)),
        seq_(seq),
        op_(std::move(op)),
        host_(std::move(host)),
        writeback_(std::move(writeback)),
        outputs_(std::move(outputs)),
        future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {}

  // A collective completes from its host work's Future, on the transport's
  // thread, or, where the host work has no Future, on a thread that waits
  // for it. A point-to-point work completes when it is waited for or polled,
  // on the caller's thread (Gloo's p2p works take one waiter).
  void start(bool p2p) {
    via_future_ = !p2p;
    if (p2p) return;
    c10::intrusive_ptr<TpuWork> self = c10::intrusive_ptr<TpuWork>::reclaim_copy(this);
    c10::intrusive_ptr<c10::ivalue::Future> host_future;
    try {
      host_future = host_->getFuture();
    } catch (const c10::Error&) {
      std::thread([self]() mutable {
        try {
          self->host_->wait();
          self->complete(nullptr);
        } catch (...) {
          self->complete(std::current_exception());
        }
        retire(std::move(self));
      }).detach();
      return;
    }
    host_future->addCallback([self](c10::ivalue::Future& f) mutable {
      self->complete(f.hasError() ? f.exception_ptr() : nullptr);
      retire(std::move(self));
    });
  }

  // A thread of the transport must never drop the last reference to a Work:
  // its tensors may own Python objects, and taking the GIL on such a thread
  // while the interpreter exits kills the process. It hands the reference
  // to the graveyard instead, which callers of collectives (Python threads)
  // empty; what is left at exit is never destroyed.
  static void retire(c10::intrusive_ptr<TpuWork> work) {
    std::lock_guard<std::mutex> lock(graveyard().mu);
    graveyard().works.push_back(std::move(work));
  }
  static void bury_retired() {
    std::vector<c10::intrusive_ptr<TpuWork>> dead;
    {
      std::lock_guard<std::mutex> lock(graveyard().mu);
      dead.swap(graveyard().works);
    }
  }

  bool isCompleted() override {
    if (!via_future_ && host_->isCompleted()) complete(host_->exception());
    return Work::isCompleted();
  }
  bool wait(std::chrono::milliseconds timeout) override {
    if (!via_future_) {
      try {
        host_->wait(timeout);
        complete(nullptr);
      } catch (...) {
        complete(std::current_exception());
      }
    }
    return Work::wait(timeout);
  }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }
  std::vector<at::Tensor> result() override { return outputs_; }
  uint64_t getSequencenumber() const override { return seq_; }
  int sourceRank() const override { return host_->sourceRank(); }

 private:
  void complete(std::exception_ptr error) {
    std::call_once(done_, [&] {
      if (!error) {
        try {
          at::NoGradGuard no_grad;
          for (auto& [device, host] : writeback_) write_back(device, host);
        } catch (...) {
          error = std::current_exception();
        }
      }
      writeback_.clear();
      if (error) error = backend_error(group_->describe_failure(seq_, op_, message_of(error)));
      finish(error);
      if (error) {
        future_->setError(error);
      } else {
        future_->markCompleted(c10::IValue(outputs_));
      }
    });
  }

  c10::intrusive_ptr<ProcessGroupTPU> group_;
  uint64_t seq_;
  std::string op_;
  c10::intrusive_ptr<c10d::Work> host_;
  std::vector<std::pair<at::Tensor, at::Tensor>> writeback_;
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  bool via_future_ = true;
  std::once_flag done_;

  struct Graveyard {
    std::mutex mu;
    std::vector<c10::intrusive_ptr<TpuWork>> works;
  };
  static Graveyard& graveyard() {
    static auto* g = new Graveyard();  // never destroyed: see retire()
    return *g;
  }
};

}  // namespace

ProcessGroupTPU::ProcessGroupTPU(c10::intrusive_ptr<c10d::Store> store, int rank, int size,
                                 std::chrono::milliseconds timeout, c10::intrusive_ptr<c10d::Backend> host,
                                 std::string group_name, std::vector<int64_t> global_ranks)
    : Backend(rank, size),
      store_(std::move(store)),
      host_(std::move(host)),
      timeout_(timeout),
      group_name_(std::move(group_name)),
      global_ranks_(std::move(global_ranks)),
      pool_(std::make_unique<HostPool>()) {
  TORCH_CHECK(host_, "tpu: the c10d backend needs a host transport");
}

void ProcessGroupTPU::setTimeout(std::chrono::milliseconds timeout) {
  timeout_ = timeout;
  host_->setTimeout(timeout);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTPU::run(
    Call& call, const std::function<c10::intrusive_ptr<c10d::Work>()>& issue) {
  TpuWork::bury_retired();
  const uint64_t seq = ++seq_;
  c10::intrusive_ptr<c10d::Work> host = issue();  // bad arguments raise here, as the transport's errors
  auto work = c10::make_intrusive<TpuWork>(c10::intrusive_ptr<ProcessGroupTPU>::reclaim_copy(this), seq,
                                           call.op, call.type, std::move(host), std::move(call.writeback),
                                           std::move(call.outputs));
  work->start(c10d::isP2POp(call.type));
  return work;
}

std::string ProcessGroupTPU::describe_failure(uint64_t seq, const std::string& op, const std::string& cause) {
  auto global = [&](int r) { return r < static_cast<int>(global_ranks_.size()) ? global_ranks_[r] : r; };
  std::ostringstream msg;
  msg << "tpu: " << op << " (collective #" << seq << " of process group '" << group_name_ << "', rank "
      << global(getRank()) << " of " << getSize() << ") failed: " << cause;
  const bool timed_out = contains(cause, "imed out") || contains(cause, "imeout");
  const bool lost_peer = contains(cause, "onnection closed") || contains(cause, "onnection reset") ||
                         contains(cause, "Broken pipe");
  if (timed_out) {
    // Post that this rank reached the collective; every rank that reached it
    // and timed out does the same, so the ranks missing after a short grace
    // period never got there.
    const std::string prefix = "tpu_timeout/" + std::to_string(seq) + "/";
    std::vector<int> missing;
    try {
      store_->set(prefix + std::to_string(getRank()), std::vector<uint8_t>(op.begin(), op.end()));
      const auto grace = std::min<std::chrono::milliseconds>(std::chrono::seconds(2), timeout_);
      const auto deadline = std::chrono::steady_clock::now() + grace;
      std::vector<int> pending;
      for (int r = 0; r < getSize(); ++r) {
        if (r != getRank()) pending.push_back(r);
      }
      while (!pending.empty()) {
        std::erase_if(pending, [&](int r) { return store_->check({prefix + std::to_string(r)}); });
        if (pending.empty() || std::chrono::steady_clock::now() >= deadline) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      missing = pending;
    } catch (const std::exception& e) {
      msg << " (the store could not say which ranks were missing: " << e.what() << ")";
    }
    if (!missing.empty()) {
      msg << ". Rank(s) that never reached this collective: [";
      for (size_t i = 0; i < missing.size(); ++i) msg << (i ? ", " : "") << global(missing[i]);
      msg << "]: every rank of the group must call the same collectives in the same order";
    }
  } else if (lost_peer) {
    msg << ". A peer closed its connection: its process may have exited or crashed";
  }
  return msg.str();
}

// The collectives. Each stages its tensors and issues the same collective on
// the host copies.

c10::intrusive_ptr<c10d::Work> ProcessGroupTPU::broadcast(std::vector<at::Tensor>& tensors,
                                                          const c10d::BroadcastOptions& opts) {
  Call c("broadcast", c10d::OpType::BROADCAST, *pool_);
  auto host = c.inout(tensors);
  return run(c, [&] { return host_->broadcast(host, opts); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTPU::allreduce(std::vector<at::Tensor>& tensors,
                                                          const c10d::AllreduceOptions& opts) {
  Call c("all_reduce", c10d::OpType::ALLREDUCE, *pool_);
  auto host = c.reduced(tensors, opts.reduceOp);
  const c10d::AllreduceOptions o = for_host(opts);
  return run(c, [&] { return host_->allreduce(host, o); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTPU::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                                    const c10d::AllreduceCoalescedOptions& opts) {
  Call c("all_reduce_coalesced", c10d::OpType::ALLREDUCE_COALESCED, *pool_);
  auto host = c.reduced(tensors, opts.reduceOp);
  const c10d::AllreduceCoalescedOptions o = for_host(opts);
  return run(c, [&] { return host_->allreduce_coalesced(host, o); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTPU::reduce(std::vector<at::Tensor>& tensors,
                                                       const c10d::ReduceOptions& opts) {
  Call c("reduce", c10d::OpType::REDUCE, *pool_);
  auto host = c.reduced(tensors, opts.reduceOp);
  const c10d::ReduceOptions o = for_host(opts);
  return run(c, [&] { return host_->reduce(host, o); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTPU::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                          std::vector<at::Tensor>& inputs,
                                                          const c10d::AllgatherOptions& opts) {
  Call c("all_gather", c10d::OpType::ALLGATHER, *pool_);
  auto in = c.in(inputs);
  auto out = c.out(outputs);
  return run(c, [&] { return host_->allgather(out, in, opts); });
}

// The one-tensor gathers and scatters take the world's parts as one
// tensor of world x the part's elements, whatever its shape ((world * n),
// (world, n), (1, world * n) as SyncBatchNorm passes): Gloo splits along
// dim 0, so both go to it flat.
void check_concatenated(const char* op, const at::Tensor& whole, const at::Tensor& part, int world) {
  TORCH_CHECK_VALUE(whole.numel() == part.numel() * world, op, ": the output/input tensor of ", whole.numel(),
                    " elements must hold world_size (", world, ") times the ", part.numel(), " of the other");
}

at::Tensor flat(const at::Tensor& host) { return host.is_contiguous() ? host.view({-1}) : host; }

c10::intrusive_ptr<c10d::Work> ProcessGroupTPU::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                                const c10d::AllgatherOptions& opts) {
  Call c("all_gather_into_tensor", c10d::OpType::_ALLGATHER_BASE, *pool_);
  check_concatenated("all_gather_into_tensor", output, input, getSize());
  at::Tensor in = flat(c.in(input));
  at::Tensor out = flat(c.out(output));
  return run(c, [&] { return host_->_allgather_base(out, in, opts); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTPU::allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                                    std::vector<at::Tensor>& inputs,
                                                                    const c10d::AllgatherOptions& opts) {
  Call c("all_gather_coalesced", c10d::OpType::ALLGATHER_COALESCED, *pool_);
  auto in = c.in(inputs);
  auto out = c.out(outputs);
  return run(c, [&] { return host_->allgather_coalesced(out, in, opts); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTPU::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs, const c10d::AllgatherOptions& opts) {
  Call c("all_gather_into_tensor_coalesced", c10d::OpType::COALESCED, *pool_);
  auto in = c.in(inputs);
  auto out = c.out(outputs);
  return run(c, [&] { return host_->allgather_into_tensor_coalesced(out, in, opts); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTPU::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                       std::vector<at::Tensor>& inputs,
                                                       const c10d::GatherOptions& opts) {
  Call c("gather", c10d::OpType::GATHER, *pool_);
  auto in = c.in(inputs);
  auto out = c.out(outputs);
  return run(c, [&] { return host_->gather(out, in, opts); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTPU::scatter(std::vector<at::Tensor>& outputs,
                                                        std::vector<std::vector<at::Tensor>>& inputs,
                                                        const c10d::ScatterOptions& opts) {
  Call c("scatter", c10d::OpType::SCATTER, *pool_);
  auto in = c.in(inputs);
  auto out = c.out(outputs);
  return run(c, [&] { return host_->scatter(out, in, opts); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTPU::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                               std::vector<std::vector<at::Tensor>>& inputs,
                                                               const c10d::ReduceScatterOptions& opts) {
  Call c("reduce_scatter", c10d::OpType::REDUCE_SCATTER, *pool_);
  std::vector<std::vector<at::Tensor>> in;
  for (auto& l : inputs) in.push_back(c.scaled(l, opts.reduceOp));
  auto out = c.out(outputs);
  const c10d::ReduceScatterOptions o = for_host(opts);
  return run(c, [&] { return host_->reduce_scatter(out, in, o); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTPU::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                                     const c10d::ReduceScatterOptions& opts) {
  Call c("reduce_scatter_tensor", c10d::OpType::_REDUCE_SCATTER_BASE, *pool_);
  check_concatenated("reduce_scatter_tensor", input, output, getSize());
  at::Tensor in = flat(c.in(prescaled(opts.reduceOp, input)));
  at::Tensor out = flat(c.out(output));
  const c10d::ReduceScatterOptions o = for_host(opts);
  return run(c, [&] { return host_->_reduce_scatter_base(out, in, o); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTPU::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs, const c10d::ReduceScatterOptions& opts) {
  Call c("reduce_scatter_tensor_coalesced", c10d::OpType::COALESCED, *pool_);
  auto in = c.scaled(inputs, opts.reduceOp);
  auto out = c.out(outputs);
  const c10d::ReduceScatterOptions o = for_host(opts);
  return run(c, [&] { return host_->reduce_scatter_tensor_coalesced(out, in, o); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTPU::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                              std::vector<int64_t>& output_splits,
                                                              std::vector<int64_t>& input_splits,
                                                              const c10d::AllToAllOptions& opts) {
  Call c("all_to_all_single", c10d::OpType::ALLTOALL_BASE, *pool_);
  at::Tensor in = c.in(input);
  at::Tensor out = c.out(output);
  return run(c, [&] { return host_->alltoall_base(out, in, output_splits, input_splits, opts); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTPU::alltoall(std::vector<at::Tensor>& outputs,
                                                         std::vector<at::Tensor>& inputs,
                                                         const c10d::AllToAllOptions& opts) {
  Call c("all_to_all", c10d::OpType::ALLTOALL, *pool_);
#if TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR < 13
  // torch 2.11's Gloo has no list all_to_all ("Backend gloo does not support
  // alltoall"): the lists go as one all_to_all_single of their elements,
  // flattened and concatenated, each tensor's elements one split.
  TORCH_CHECK_VALUE(!inputs.empty() && inputs.size() == outputs.size(),
                    "all_to_all: expects as many output as input tensors, one per rank");
  std::vector<at::Tensor> parts;
  std::vector<int64_t> input_splits, output_splits;
  for (const auto& t : inputs) {
    parts.push_back(t.reshape({-1}));
    input_splits.push_back(t.numel());
  }
  int64_t total = 0;
  for (const auto& t : outputs) {
    output_splits.push_back(t.numel());
    total += t.numel();
  }
  at::Tensor in = c.in(at::cat(parts));
  at::Tensor out = pool_->take({total}, outputs.front().scalar_type());
  int64_t offset = 0;
  for (size_t j = 0; j < outputs.size(); ++j) {
    c.writeback.emplace_back(outputs[j], out.narrow(0, offset, output_splits[j]).view(outputs[j].sizes()));
    c.outputs.push_back(outputs[j]);
    offset += output_splits[j];
  }
  return run(c, [&] { return host_->alltoall_base(out, in, output_splits, input_splits, opts); });
#else
  auto in = c.in(inputs);
  auto out = c.out(outputs);
  return run(c, [&] { return host_->alltoall(out, in, opts); });
#endif
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTPU::send(std::vector<at::Tensor>& tensors, int dst, int tag) {
  Call c("send", c10d::OpType::SEND, *pool_);
  auto host = c.in(tensors);
  return run(c, [&] { return host_->send(host, dst, tag); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTPU::recv(std::vector<at::Tensor>& tensors, int src, int tag) {
  Call c("recv", c10d::OpType::RECV, *pool_);
  auto host = c.out(tensors);
  return run(c, [&] { return host_->recv(host, src, tag); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTPU::recvAnysource(std::vector<at::Tensor>& tensors, int tag) {
  Call c("recv", c10d::OpType::RECVANYSOURCE, *pool_);
  auto host = c.out(tensors);
  return run(c, [&] { return host_->recvAnysource(host, tag); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTPU::barrier(const c10d::BarrierOptions& opts) {
  Call c("barrier", c10d::OpType::BARRIER, *pool_);
  c10d::BarrierOptions o = opts;
  o.device.reset();  // the transport's barrier runs on the host
  return run(c, [&] { return host_->barrier(o); });
}

void ProcessGroupTPU::monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) {
  host_->monitoredBarrier(opts, wait_all_ranks);
}

// DDP's timer for tpu modules (DDP asks the registry for one per device
// type): host clock times of the reducer's events. Device work is
// asynchronous, so compute spans are those the host saw.
class TpuTimer final : public c10d::Timer {
 public:
  explicit TpuTimer(c10::Device) {}
  std::optional<int64_t> measureDifference(Event start, Event end) override {
    const int64_t a = getTimeRef(start), b = getTimeRef(end);
    if (a == c10d::kUnsetTime || b == c10d::kUnsetTime || b < a) return std::nullopt;
    return b - a;
  }
};

}  // namespace tpu::dist

namespace c10d {
C10_REGISTER_TYPED_CLASS(TimerRegistry, c10::kPrivateUse1, tpu::dist::TpuTimer);
}  // namespace c10d
