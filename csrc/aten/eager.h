// Eager execution of one op: a program that reads tensors from their
// storages' device values, runs a lowering, and writes results back.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/Generator.h>

#include <deque>
#include <optional>
#include <vector>

#include "csrc/aten/storage.h"
#include "csrc/exec/deferred.h"
#include "csrc/exec/strided.h"
#include "csrc/hlo/builder.h"

namespace tpu {

class EagerProgram {
 public:
  explicit EagerProgram(int device) : device_(device) {}

  hlo::Builder& builder() { return b_; }
  int device() const { return device_; }

  // The value of `t` in the program: a tpu tensor of this program's device,
  // or a 0-dim CPU tensor (a scalar operand).
  hlo::Value input(const at::Tensor& t);
  // A runtime rank-0 operand holding `s` converted to `dtype`.
  hlo::Value scalar(const c10::Scalar& s, hlo::DType dtype);
  // A fresh ui64[2] key from `gen` (the device's default generator if none).
  hlo::Value rng_key(const std::optional<at::Generator>& gen);

  // A device-side check (see lowering::Args::check).
  void check(hlo::Value ok, const std::string& message) { checks_.emplace_back(ok, message); }

  // Write `value` (dims = dst sizes, dtype = dst dtype) into the view `dst`.
  void assign(const at::Tensor& dst, hlo::Value value);

  // Run what was built so far and return the value of `v` (rank 0, integer).
  int64_t evaluate_int(hlo::Value v);

  // The program's text for `outputs` (plus the storages written by assign).
  const std::string& text(const std::vector<hlo::Value>& outputs);
  // exec::fingerprint64 of that text (computed once, when first asked).
  uint64_t fingerprint();
  // Compile (cached) and run; returns the outputs as new contiguous tensors
  // and swaps the written storages' values. `text` must have been called.
  // In fused eager the program is recorded instead (see exec/deferred.h).
  std::vector<at::Tensor> run();

 private:
  struct Slot {
    c10::Storage storage;      // keeps the storage alive while we run
    TpuStorage* tpu = nullptr;
    hlo::Type type;            // of the storage value the program receives
    int param = -1;            // builder parameter index (-1: zeros); also args_ index
    hlo::Value flat;           // current value, rank 1, of `flat_dtype`
    hlo::DType flat_dtype;
    hlo::Value full;           // when the last write covered the storage densely
    bool written = false;
  };
  Slot& slot_for(const at::Tensor& t);
  hlo::Value flat_as(Slot& s, hlo::DType dtype);
  exec::Offset offset_of(const at::Tensor& t);
  hlo::Value apply_math_bits(const at::Tensor& t, hlo::Value v);
  std::vector<pjrt::c::PJRT_Buffer*> raw_args();
  std::vector<at::Tensor> defer();
  // Hands the program's outputs, in text()'s order (results, written
  // storages, checks), to new tensors, the storages and the checks.
  template <typename Out, typename MakeTensor, typename Store, typename Check>
  std::vector<at::Tensor> deliver(const std::vector<Out>& outs, MakeTensor make_tensor, Store store, Check check);
  bool fused() const;

  int device_;
  hlo::Builder b_;
  std::vector<exec::ProgramArg> args_;
  std::vector<hlo::Value> all_outputs_;  // outputs_ (valid ones), written storages, checks
  std::deque<Slot> slots_;  // stable references
  std::vector<hlo::Value> outputs_;
  std::vector<size_t> written_;  // indices into slots_, in output order
  std::vector<std::pair<hlo::Value, std::string>> checks_;
  std::string text_;
  std::optional<uint64_t> text_hash_;
};

// Bytes <-> elements reinterpretation of a rank-1 value (x.view(dtype)).
hlo::Value reinterpret_flat(hlo::Builder& b, hlo::Value flat, hlo::DType to);

}  // namespace tpu
