// The c10d backend of the tpu device: torch.distributed collectives on tpu
// tensors.
//
// How data moves depends on what the PJRT plugin can do. The XLA CPU plugin
// cannot run one program across processes (its C API client takes no
// key-value store and knows no other process), so this backend moves data
// through a host transport: torch's own Gloo process group, with a PJRT
// transfer on both ends. Each collective
//   1. copies its inputs to the host when it is called (which orders it after
//      every op already issued on them, in every execution mode),
//   2. runs the same collective on the host copies through Gloo, and
//   3. when Gloo completes, writes the host results into the tpu outputs and
//      completes its Work and Future.
// Work::wait(), isCompleted() and the Future (what DDP waits on) follow step
// 3. CPU tensors given to this backend go to the host transport directly.
//
// Failures say which collective failed: its name, its sequence number in the
// group and, when it timed out, which ranks had not reached it (each failing
// rank posts how far it got to the group's store).
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace tpu::dist {

class ProcessGroupTPU final : public c10d::Backend {
 public:
  // `host` is the transport (a ProcessGroupGloo over the same ranks);
  // `store` is this group's store, `global_ranks` its members' global ranks.
  ProcessGroupTPU(c10::intrusive_ptr<c10d::Store> store, int rank, int size,
                  std::chrono::milliseconds timeout, c10::intrusive_ptr<c10d::Backend> host,
                  std::string group_name, std::vector<int64_t> global_ranks);
  ~ProcessGroupTPU() override;

  const std::string getBackendName() const override { return "tpu"; }
  void setTimeout(std::chrono::milliseconds timeout) override;

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                     const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_splits,
                                               std::vector<int64_t>& input_splits,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) override;

  void setSequenceNumberForGroup() override {}
  uint64_t getSequenceNumberForGroup() override { return seq_.load(); }

  // Post-mortem of a failed collective, run by the Work that saw it fail:
  // the message names the collective and, for a timeout, the ranks that had
  // not reached it.
  std::string describe_failure(uint64_t seq, const std::string& op, const std::string& cause);

 private:
  struct Call;
  class HostPool;
  // Runs one call: stages the tpu tensors to the host, issues `issue` on the
  // host copies, and writes the host results back into the tpu outputs when
  // the host work completes.
  c10::intrusive_ptr<c10d::Work> run(Call& call,
                                     const std::function<c10::intrusive_ptr<c10d::Work>()>& issue);

  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<c10d::Backend> host_;
  std::chrono::milliseconds timeout_;
  std::string group_name_;
  std::vector<int64_t> global_ranks_;
  std::atomic<uint64_t> seq_{0};
  std::unique_ptr<HostPool> pool_;
};

}  // namespace tpu::dist
