// Eager execution of one op: a program that reads tensors from their
// storages' device values, runs a lowering, and writes results back.
//
// Building the program (EagerProgram) yields a ProgramPlan: the program and,
// for each of its parameters, where the value comes from (a storage, a
// number argument, a constant, a random key). Running a plan binds those
// values (BoundProgram) and hands the results to tensors and storages. The
// op memo (op_memo.h) keeps plans, so a repeated op skips the building.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/Generator.h>

#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "csrc/aten/storage.h"
#include "csrc/exec/deferred.h"
#include "csrc/exec/runtime.h"
#include "csrc/exec/strided.h"
#include "csrc/hlo/builder.h"

namespace tpu {

class OpSignature;

// Where a parameter of a plan gets its value.
struct ParamSource {
  enum class Kind : uint8_t {
    Storage,   // the value of storage group `index` (see OpSignature)
    Arg,       // number argument `index` (entry `element` of a list, or -1)
    Constant,  // `bits`
    Rng,       // a fresh key from the Generator at argument `index` (-1: the default one) for `bits` values
    Offset,    // the storage offset of the tensor at argument `index` (entry `element`)
    Stride,    // stride `part` of the tensor at argument `index` (entry `element`)
    ViewSize,  // size `part` of the tensor at argument `index` (entry `element`), i32
    PaddedSize,  // size `part` of the tensor the padded storage of that tensor holds, i64
  };
  Kind kind = Kind::Constant;
  int index = -1;
  int element = -1;
  int part = -1;  // Arg of a complex128 program value: 0 real, 1 imaginary half
  hlo::DType dtype = hlo::DType::F32;
  uint64_t bits = 0;
};

// An op's program, built once.
struct ProgramPlan {
  std::shared_ptr<const hlo::Builder> builder;
  std::vector<hlo::Value> outputs;      // the op's defined results, written storages, checks
  std::vector<hlo::Type> output_types;
  std::vector<int> results;             // per op result: its index in outputs, -1 if undefined
  std::vector<hlo::Dims> result_sizes;  // per op result: its shape
  // Per op result: its strides when they are not the contiguous ones (the
  // output value is then the result in that physical order, as PyTorch's
  // kernel lays it out); empty otherwise.
  std::vector<std::vector<int64_t>> result_strides;
  std::vector<int> written;             // per written storage: its storage group (-1 unknown)
  std::vector<std::string> checks;      // messages of the device-side checks
  bool sized_checks = false;            // some message names run-time sizes (lowering::size_mark)
  // Per written storage: it keeps its old value when a check fails (an
  // in-place op that fails leaves its target as it was, as on CPU).
  std::vector<bool> guarded;
  std::vector<std::pair<int, int>> donations;  // (param, output) pairs that may share a buffer
  std::vector<ParamSource> params;
  // out= tensors resized to their results' shapes before the program runs
  // (the signature fixes both the old and the new shape).
  struct Resize {
    int arg = -1, element = -1;
    std::vector<int64_t> sizes;
  };
  std::vector<Resize> resizes;
  std::string text;                     // the module, without donations
  uint64_t fingerprint = 0;             // of text
  exec::FunctionPtr function;           // "op_<fingerprint>": what fused eager records
  bool replayable = true;               // every parameter's source is known

  // The module that donates the parameters of the donations selected by
  // `mask`, and its executable-cache key (made once per mask).
  struct Variant {
    std::vector<bool> mask;
    std::string text, key;
  };
  const Variant& variant(const std::vector<bool>& mask) const;

 private:
  mutable std::mutex mu_;
  mutable std::deque<Variant> variants_;
};

// The values a plan runs on for one call.
struct BoundProgram {
  std::vector<exec::ProgramArg> args;  // per plan parameter
  std::vector<TpuStorage*> written;    // per plan.written
  exec::Checks checks;                 // those of the storage values read
  // The plan's check messages with this call's sizes (when it has
  // sized_checks; else empty: the plan's own).
  std::vector<std::string> messages;
};

// Fills in `bound.messages` from the sizes of the tensors in `args` (the
// op's arguments at this call) where the plan's messages name them.
void name_sizes(const ProgramPlan& plan, BoundProgram& bound, c10::ArrayRef<c10::IValue> args);

// Run (or, in fused eager, record) `plan` on `bound`; returns the op's
// results as new tensors and swaps the written storages' values.
std::vector<at::Tensor> launch(const std::shared_ptr<const ProgramPlan>& plan, BoundProgram& bound, int device);

// Bind `plan` to the arguments of another call with the same signature
// (resizing its out= tensors as the plan's first call did).
BoundProgram bind_plan(const ProgramPlan& plan, const OpSignature& sig, c10::ArrayRef<c10::IValue> args, int device);

// The value of storage `s` as a program operand: deferred values stay in
// fused eager's graph; others are materialized (running that graph).
TpuStorage::Value operand_value(TpuStorage& s, int device);

// A fresh key of `device`'s default generator as a program operand, for a
// random op drawing `count` values (the generator moves past them).
exec::ProgramArg rng_key_operand(int device, uint64_t count);

// The program of `b` returning `outputs` (its text's fingerprint given) as
// a function that fused graphs call.
exec::FunctionPtr function_of(const std::shared_ptr<const hlo::Builder>& b, const std::vector<hlo::Value>& outputs,
                              uint64_t fingerprint);

// `b`'s one-parameter program returning `out`, applied to `in`: recorded in
// the fused graph that `in` still waits in (its result waits there too),
// else run now. (The paddings of bucketed programs: bucketed.h.)
TpuStorage::Value apply_program(const std::shared_ptr<const hlo::Builder>& b, hlo::Value out,
                                const TpuStorage::Value& in, int device);

// `b`'s program of no parameters returning `out`: recorded in the calling
// thread's fused graph in fused eager, else run now.
TpuStorage::Value make_value(const std::shared_ptr<const hlo::Builder>& b, hlo::Value out, int device);

// Where an argument tensor sits in the op's arguments (for CPU scalars).
struct ArgPosition {
  int arg = -1, element = -1;
};

class EagerProgram {
 public:
  // `sig` (optional) names the storage groups of the op's arguments, so
  // that the plan can be bound to other arguments later.
  explicit EagerProgram(int device, const OpSignature* sig = nullptr);

  hlo::Builder& builder() { return *b_; }
  int device() const { return device_; }

  // Bucketed programs (docs/bounded_dynamism.md): `proxy` is a contiguous
  // tensor of bucket sizes whose storage holds a padded value (the flat
  // buffer of those sizes' element count) of a tensor of `sizes`, the
  // argument the proxy stands for (its sizes that differ from the proxy's
  // are run-time operands). The program reads it as a value of the proxy's
  // sizes whose dims XLA knows to hold `sizes` elements. Call before the
  // proxy is read.
  void dynamic_storage(const at::Tensor& proxy, std::vector<int64_t> sizes);
  // `proxy` (a tensor on a dynamic_storage proxy's storage) stands for
  // `view`, another view of the padded storage, of the same sizes except
  // in the dims whose bit is set in `varying`, where the proxy has the
  // bucket's: read with its offset (and strides) and varying sizes as
  // run-time operands (taken from the arguments). `map` says, per view dim,
  // which dims of the storage's tensor it ranges over (one, or a run of
  // static dims it merges whole; kBroadcast, kUnit: none): the view is then
  // sliced, reshaped, transposed and broadcast from the padded value;
  // without a map it is gathered at its run-time strides.
  static constexpr int kBroadcast = -1, kUnit = -2;
  struct ViewDim {
    int first = kUnit, last = kUnit;  // dims first..last
  };
  // `dims`: the storage tensor's dims the map refers to, when they are
  // not its own: its static dims split further (sizes and bounds per dim,
  // and the storage dim each comes from, -1 for a piece of a split one;
  // only static dims are split). `rows`: its merged dims are reshaped as
  // the padded value holds them (the padding rows in between; see
  // BucketedOperands::rows_of).
  struct Dims {
    std::vector<int64_t> sizes, bounds;
    std::vector<int> origin;
  };
  void dynamic_view(const at::Tensor& proxy, const at::Tensor& view, uint64_t varying,
                    std::vector<ViewDim> map = {}, Dims dims = {}, bool rows = false);

  // The value of `t` in the program: a tpu tensor of this program's device,
  // or a 0-dim CPU tensor (a scalar operand) found at `pos` of the arguments.
  hlo::Value input(const at::Tensor& t, ArgPosition pos = {});
  // A runtime rank-0 operand holding `s` converted to `dtype`; `pos` names
  // the number argument it comes from (none: a constant of this program),
  // `host` the CPU scalar tensor it was read from.
  hlo::Value scalar(const c10::Scalar& s, hlo::DType dtype, ArgPosition pos = {}, const at::Tensor* host = nullptr);
  // A fresh ui64[2] key (seed, offset) from the Generator at argument `arg`
  // (-1: none, the device's default generator) for `count` values.
  hlo::Value rng_key(const std::optional<at::Generator>& gen, int arg, uint64_t count);

  // A device-side check (see lowering::Args::check).
  void check(hlo::Value ok, const std::string& message) { checks_.emplace_back(ok, message); }
  size_t check_count() const { return checks_.size(); }

  // Write `value` (dims = dst sizes, dtype = dst dtype) into the view `dst`
  // (found at `pos` of the arguments).
  void assign(const at::Tensor& dst, hlo::Value value, ArgPosition pos = {});
  // Declares that `dst`'s storage, written once so far (by `assign`), holds
  // what it received whenever any check of the program fails: its write
  // was gated by all of them (lowering::skip_unless_checked). Its value then
  // needs no guard, which would be a pass over the whole storage.
  void unchanged_unless_checked(const at::Tensor& dst);

  // Run what was built so far and return the value of `v` (rank 0, integer).
  int64_t evaluate_int(hlo::Value v);

  // The plan returning `outputs` (plus the storages written by assign and
  // the checks). The builder belongs to the plan afterwards.
  std::shared_ptr<const ProgramPlan> finish(const std::vector<hlo::Value>& outputs);
  // Result `index` (of finish's outputs) has these sizes and (non-contiguous,
  // dense) strides: its output value holds the elements in that order.
  void result_layout(size_t index, hlo::Dims sizes, std::vector<int64_t> strides);
  // Run the finished plan on this program's operands; `args`: the op's
  // arguments, whose sizes the check messages name (when those differ from
  // what the program read: a bucketed program's).
  std::vector<at::Tensor> run(c10::ArrayRef<c10::IValue> args = {});
  // Whether dim `dim` of `t` (an operand) has a run-time size: a bucketed
  // operand's varying dim.
  bool varies(const at::Tensor& t, int64_t dim) const;
  // That size (i32, rank 0), read from the argument at `pos` at each run.
  hlo::Value run_time_size(const at::Tensor& t, int64_t dim, ArgPosition pos);
  // This program cannot run again for other arguments (its parameters
  // depend on something the signature does not describe).
  void not_replayable() { replayable_ = false; }
  // The out= tensor at `pos` was resized to `sizes` (a replay resizes it too).
  void resized(ArgPosition pos, std::vector<int64_t> sizes);

 private:
  struct Dynamic {  // a dynamic_storage call
    const c10::StorageImpl* storage;
    std::vector<int64_t> sizes, bounds;
  };
  struct Slot {
    c10::Storage storage;      // keeps the storage alive while we run
    TpuStorage* tpu = nullptr;
    int group = -1;            // storage group in the signature
    hlo::Type type;            // of the storage value the program receives
    int param = -1;            // builder parameter index (-1: zeros); also args_ index
    hlo::Value flat;           // current value, rank 1, of `flat_dtype`
    hlo::DType flat_dtype;
    hlo::Value full;           // the storage value as received, or as last written densely
    hlo::Value received;       // the storage value as received (invalid: not a parameter)
    bool written = false;
    int writes = 0;
    bool unchanged_unless_checked = false;  // (see the method of that name)
    const Dynamic* dynamic = nullptr;  // a bucketed operand (dynamic_storage)
    hlo::Value full_dynamic;   // its full view, made on first read
  };
  Slot& slot_for(const at::Tensor& t);
  hlo::Value stored_value(const Slot& s);
  hlo::Value dynamic_entry(Slot& s, const Dynamic& d, ArgPosition pos);
  hlo::Value padded_index(hlo::Value logical, const Dynamic& dyn, ArgPosition pos);
  hlo::Value padded_size(const Dynamic& dyn, size_t j, ArgPosition pos);
  hlo::Value view_operand(ParamSource::Kind kind, hlo::DType dtype, int64_t value, ArgPosition pos, int part);
  hlo::Value flat_as(Slot& s, hlo::DType dtype);
  exec::Offset offset_of(const at::Tensor& t, ArgPosition pos);
  hlo::Value apply_math_bits(const at::Tensor& t, hlo::Value v);
  hlo::Value add_param(const hlo::Type& type, exec::ProgramArg arg, ParamSource source);

  int device_;
  const OpSignature* sig_;
  std::shared_ptr<hlo::Builder> b_;
  std::vector<exec::ProgramArg> args_;
  std::vector<ParamSource> sources_;
  std::deque<Slot> slots_;  // stable references
  std::vector<std::pair<hlo::Value, std::string>> checks_;
  std::deque<Dynamic> dynamic_;  // see dynamic_storage (stable references)
  struct DynamicView {
    const c10::TensorImpl* proxy;
    at::Tensor view;
    uint64_t varying;
    std::vector<ViewDim> map;
    Dims dims;
    bool rows;
  };
  hlo::Value mapped_view(Slot& s, const DynamicView& dv, const hlo::Dims& sizes, ArgPosition pos);
  // The dynamic_storage `t` holds whole (its proxy), or null with `*view`
  // set to the dynamic_view it is; null for neither.
  const Dynamic* dynamic_of(const at::Tensor& t, const DynamicView** view) const;
  std::vector<DynamicView> dynamic_views_;  // see dynamic_view
  bool replayable_ = true;
  std::vector<ProgramPlan::Resize> resizes_;
  std::vector<std::pair<hlo::Dims, std::vector<int64_t>>> layouts_;  // by result index (empty: contiguous)
  std::shared_ptr<const ProgramPlan> plan_;
  BoundProgram bound_;
};

// Raise a failed device-side check with PyTorch's exception type.
[[noreturn]] void raise_check_failure(const exec::CheckFailure& e);

// Bytes <-> elements reinterpretation of a rank-1 value (x.view(dtype)).
hlo::Value reinterpret_flat(hlo::Builder& b, hlo::Value flat, hlo::DType to);

// The bits of `s` converted to `dtype` (its little-endian bytes), as a
// rank-0 operand holds them.
uint64_t scalar_bits(const c10::Scalar& s, hlo::DType dtype);
// A number argument: a Scalar, or the value of a 0-dim tensor.
c10::Scalar number_of(const c10::IValue& v);
// The value of a one-element tensor (a CPU one read in place).
c10::Scalar host_number(const at::Tensor& t);
// A tensor on a tpu device.
inline bool is_tpu(const at::Tensor& t) {
  return t.defined() && t.device().type() == c10::DeviceType::PrivateUse1;
}

}  // namespace tpu
