// The op memo: an op's program is built once per signature.
//
// Building an eager op's program (running the lowering, emitting its text,
// hashing it) costs tens of microseconds; a small op runs in a few. The
// program depends only on the op's signature:
//   - the op, each tensor's device, dtype, sizes, strides, whether its
//     storage offset is zero, conjugate/negative bits, which tensors share a
//     storage, and each storage's size and current value type;
//   - the values of integer, boolean, string, device and similar arguments;
//   - the values of the floating-point numbers and CPU scalar tensors that
//     the lowering read on the host (lowering::Args tracks them).
// Numbers that a lowering only passes on as runtime operands (a learning
// rate, the 0.5 of x * 0.5, a view's storage offset) are not part of it: the plan records which
// argument each operand comes from, and every call binds its own values.
// A plan whose lowering waited for device data (nonzero) is never kept.
#pragma once

#include <ATen/core/ivalue.h>
#include <c10/util/SmallVector.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "csrc/aten/eager.h"

namespace tpu {

class OpSignature {
 public:
  // `op` names the operation (any address that stays valid), `globals` the
  // process state its lowering reads (see lowering_globals()). Bit i of
  // `numbers`: argument i is a Scalar, whose value (an int as a float)
  // counts only where the lowering reads it (x == 3 and x == 4 share a
  // program); other ints (dims, sizes) are part of the signature.
  OpSignature(const void* op, uint32_t globals, c10::ArrayRef<c10::IValue> args, uint64_t numbers = 0);

  // Whether the arguments can be described (no exotic argument kinds).
  bool memoizable() const { return memoizable_; }
  const std::string& key() const { return key_; }

  // Storage groups: the distinct storages of the tpu tensor arguments, in
  // order of first appearance; -1 for a storage not among them.
  int group_of(const c10::StorageImpl* storage) const;
  const at::Tensor& group_tensor(int group) const { return *first_[group]; }

 private:
  void add(const c10::IValue& v, bool number = false);
  void add_tensor(const at::Tensor& t);

  std::string key_;
  bool memoizable_ = true;
  c10::SmallVector<const c10::StorageImpl*, 4> storages_;
  c10::SmallVector<const at::Tensor*, 4> first_;  // into the arguments
  std::unordered_map<const c10::StorageImpl*, int> index_;  // of storages_, once there are many
};

// The signature of a call, or none when the memo is off or the arguments
// cannot be described.
std::optional<OpSignature> signature_for(const void* op, uint32_t globals, c10::ArrayRef<c10::IValue> args,
                                         uint64_t numbers = 0);

// The global state every lowering may read, packed for a signature: the
// default float and complex dtypes (torch.set_default_dtype). A plan built
// under other globals is never replayed. (The matmul precision in force is
// read by few lowerings: a plan whose lowering read it is keyed by it too,
// and other ops do not look it up.)
uint32_t lowering_globals();
// torch.get_float32_matmul_precision() as lowering::MatmulPrecision's value.
uint8_t current_matmul_precision();
// Runs the plan kept for this call, if there is one; its results.
std::optional<std::vector<at::Tensor>> run_kept_plan(const std::optional<OpSignature>& sig,
                                                     c10::ArrayRef<c10::IValue> args, int device);

// The plan built for this signature and these number values, if any.
std::shared_ptr<const ProgramPlan> find_plan(const OpSignature& sig, c10::ArrayRef<c10::IValue> args);
// Keep `plan`, built for `args`, whose lowering read the numbers of the
// arguments marked in `read` (and the matmul precision, if
// `read_precision`).
void keep_plan(const OpSignature& sig, c10::ArrayRef<c10::IValue> args, const std::vector<bool>& read,
               std::shared_ptr<const ProgramPlan> plan, bool read_precision = false);

// TORCH_TPU_OP_MEMO=0 (or set_op_memo(false)) builds every op's program
// anew: for debugging the memo.
bool op_memo_enabled();
void set_op_memo(bool enabled);

struct OpMemoStats {
  int64_t built = 0;   // programs built by running a lowering
  int64_t reused = 0;  // calls that ran a kept plan
  int64_t plans = 0;   // plans kept now
};
OpMemoStats op_memo_stats();
void count_built_program();
// Counts a program built outside the memo (a padding's) the first time its
// text is seen.
void count_program_text(const std::string& text);

}  // namespace tpu
