// Device-side checks (an index in range, a divisor not zero) and the values
// they guard.
//
// A check is a rank-0 pred an op's program computes next to its results.
// Like CUDA's device-side assertions it is verified when the host waits;
// unlike them it belongs to the values it guards: every storage value
// carries the checks of the ops it came from (`Checks`, passed on from
// inputs to results), and reading a tensor verifies those only. A failed
// check fails every read of the values it produced, while unrelated tensors
// read normally; `synchronize` reports every failure not reported yet.
//
// Reading checks waits for the device, and the CPU plugin copies even a ready
// value on a worker thread (some 20-30 us a read): checks are read together
// (`DeviceCheck::read_all`, one wait for the lot), and a fused program that
// computes several returns their preds also as one pred[N] (`CheckBatch`).
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "csrc/exec/check_failure.h"
#include "csrc/exec/deferred.h"
#include "csrc/pjrt/buffer.h"

namespace tpu::exec {

// The preds of several checks one fused program computed, as one pred[N]
// result: one transfer answers them all.
struct CheckBatch {
  explicit CheckBatch(pjrt::BufferPtr p) : preds(std::move(p)) {}
  pjrt::BufferPtr preds;
  std::mutex mu;
  std::vector<uint8_t> bits;  // once read
};

class DeviceCheck {
 public:
  // `asynchronous`: verified after its op returned (the message says so).
  DeviceCheck(std::string message, bool asynchronous) : message_(std::move(message)), asynchronous_(asynchronous) {}
  // Its pred: a buffer, or a value of a fused graph not run yet.
  void set_result(pjrt::BufferPtr ok);
  void set_result(DeferredPtr ok);
  // Its pred is also element `index` of `batch` (read that instead).
  void set_batch(std::shared_ptr<CheckBatch> batch, size_t index);
  DeferredPtr deferred() const;
  const std::string& message() const { return message_; }
  bool asynchronous() const { return asynchronous_; }
  // Whether it failed: reads the pred (waits for the program computing it,
  // running a pending fused graph). Known answers are not read again.
  bool failed();
  // Reads the answers of those of `checks` not known yet with one wait for
  // the device (pjrt::Buffer::to_host of all their preds at once), not one
  // per check; the pending fused graphs that compute them are run.
  static void read_all(const std::vector<DeviceCheck*>& checks) { read_all(checks, {}); }
  // The same, with `also` (a value's read) copied in the same wait.
  static void read_all(const std::vector<DeviceCheck*>& checks, std::vector<pjrt::Buffer::Read> also);
  bool passed() const { return state_.load(std::memory_order_acquire) == kPassed; }
  // Whether reading it runs no pending fused graph.
  bool readable() const;
  // The error (for a failed check).
  CheckFailure error() const;
  // Raised to the user once (by a read or synchronize).
  std::atomic<bool> reported{false};

 private:
  enum { kUnknown = 0, kPassed = 1, kFailed = 2 };
  mutable std::mutex mu_;
  pjrt::BufferPtr ok_;
  DeferredPtr deferred_;
  std::shared_ptr<CheckBatch> batch_;
  size_t batch_index_ = 0;
  std::string message_;
  bool asynchronous_;
  std::atomic<int> state_{kUnknown};
};
using CheckPtr = std::shared_ptr<DeviceCheck>;

// The checks a storage value depends on. `once`: the value itself is sound
// whatever the check found (an in-place op whose check failed left the old
// value), so the failure is raised by one read only; otherwise the value is
// the failed op's garbage and every read raises.
struct Guard {
  CheckPtr check;
  bool once = false;
};
using Checks = std::vector<Guard>;

// Adds the guards of `more` to `into` (checks known to have passed drop
// out). A long list has its oldest checks settled (read) first.
void merge_checks(Checks& into, const Checks& more);
// The same for an op's own checks, each guarding `once` or not.
void merge_checks(Checks& into, const std::vector<CheckPtr>& more, bool once = false);
// Throws the CheckFailure of the first failed check a read must raise.
void verify_checks(const Checks& checks);
// Reads `value` to the host and verifies `checks` with one wait for the
// device (a read of a tensor: its data and the checks of the ops it came
// from).
void read_verified(const pjrt::Buffer::Read& value, const Checks& checks);

}  // namespace tpu::exec
