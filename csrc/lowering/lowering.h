// The lowering table: ATen op -> StableHLO.
//
// A lowering is a function that appends StableHLO to a builder, given the
// op's arguments (tensor inputs as typed program values, the rest as host
// values), and returns the op's results. Eager execution (one program per op)
// uses it today; fused eager and torch.compile replay the same functions over
// a larger program. Only the functional form of an op is lowered: in-place
// (`add_`) and out= (`add.out`) variants reuse it and write the result back.
//
// Lowerings see no ATen tensors, only `Args`, so they compile quickly and run
// unchanged under every execution mode.
#pragma once

#include <c10/core/Scalar.h>
#include <c10/core/ScalarType.h>
#include <c10/util/Exception.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "csrc/exec/check_failure.h"
#include "csrc/hlo/builder.h"

namespace tpu::lowering {

using hlo::Builder;
using hlo::Dims;
using hlo::DType;
using hlo::Type;
using hlo::Value;

// What a lowering knows of a tensor argument.
struct TensorInfo {
  at::ScalarType dtype = at::kFloat;
  Dims sizes;
  // A Python number turned into a 0-dim tensor: it takes part in type
  // promotion like a Scalar.
  bool wrapped_number = false;
  // Row-major contiguous: a few ops pick their algorithm by layout on the
  // CPU (linalg.solve and det factor A^T when A is contiguous), and their
  // backward formulas rely on that choice.
  bool contiguous = true;
  int64_t dim() const { return static_cast<int64_t>(sizes.size()); }
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t s : sizes) n *= s;
    return n;
  }
};

// In a check's message, the mark of dim `dim`'s size of argument i (a
// tensor, or entry `element` of a tensor list): each run replaces it with
// the size that tensor had (eager's name_sizes).
inline std::string size_mark(size_t i, int64_t dim, int element = -1) {
  return "\x01" + std::to_string(i) + "," + std::to_string(element) + "," + std::to_string(dim) + "\x01";
}
inline bool has_size_marks(const std::string& message) { return message.find('\x01') != std::string::npos; }

// The arguments of one op call, by schema position.
class Args {
 public:
  virtual ~Args() = default;
  virtual size_t size() const = 0;
  virtual bool is_none(size_t i) const = 0;
  // Whether argument i is a tensor (rather than a Scalar or other value).
  virtual bool is_tensor(size_t i) const = 0;

  // Tensor arguments: the value in the program, and its metadata.
  virtual Value tensor(size_t i) = 0;
  virtual const TensorInfo& info(size_t i) = 0;
  // Tensor[] (and Tensor?[], where undefined entries come back invalid).
  virtual std::vector<Value> tensors(size_t i) = 0;
  virtual std::vector<TensorInfo> infos(size_t i) = 0;

  // Host values. Reading a number's value (double_, scalar, doubles,
  // scalars) makes the op's program specific to that value: eager mode
  // reuses a program only for calls with the same values (see
  // aten/op_memo.h). Numbers that only feed the computation should go
  // through scalar_value instead, and type promotion needs only scalar_kind.
  virtual int64_t int_(size_t i) const = 0;
  virtual std::vector<int64_t> ints(size_t i) const = 0;
  virtual double double_(size_t i) const = 0;
  virtual bool bool_(size_t i) const = 0;
  virtual std::string string(size_t i) const = 0;
  virtual c10::Scalar scalar(size_t i) const = 0;
  virtual at::ScalarType scalar_type(size_t i) const = 0;
  virtual std::vector<double> doubles(size_t i) const = 0;
  // Scalar[] arguments.
  virtual std::vector<c10::Scalar> scalars(size_t i) const = 0;
  // Tensor[] / Tensor?[] and Scalar[] arguments.
  virtual bool is_tensor_list(size_t i) const = 0;
  virtual bool is_scalar_list(size_t i) const = 0;
  // The number of entries of a list argument.
  virtual size_t list_size(size_t i) const = 0;
  // The kind of number (kLong, kDouble, kComplexDouble, kBool) a Scalar
  // argument holds, or entry k of a Scalar[] argument, without its value.
  virtual at::ScalarType scalar_kind(size_t i) const = 0;
  virtual at::ScalarType element_kind(size_t i, size_t k) const = 0;

  // A Scalar argument as a rank-0 program value of `dtype`: a runtime operand
  // in eager mode, so that a changing learning rate does not recompile.
  virtual Value scalar_value(size_t i, DType dtype) = 0;
  // The same for entry k of a Scalar[] argument.
  virtual Value element_value(size_t i, size_t k, DType dtype) = 0;
  // Any host number as a runtime rank-0 operand of `dtype`.
  virtual Value runtime_scalar(const c10::Scalar& s, DType dtype) = 0;

  // A fresh ui64[2] random key (seed, offset) drawn from the Generator at
  // argument `i` (or the default generator of the device when it is None)
  // for an op drawing `count` values: the generator's offset moves past
  // them, so the next op draws from later positions of the stream.
  virtual Value rng_key(size_t i, uint64_t count) = 0;

  // Write `v` into tensor argument i, for ops that mutate arguments (batch
  // norm's running statistics, fused optimizers). `v` has the argument's
  // shape; it is converted to the argument's dtype.
  virtual void assign(size_t i, Value v) = 0;
  virtual void assign_list(size_t i, const std::vector<Value>& vs) = 0;

  // The value of an integer rank-0 `v`, computed now: ops whose output shape
  // depends on data (nonzero, masked_select, unique) wait for the device.
  virtual int64_t host_int(Value v) = 0;
  // Declares that the output shape depends on data (also on paths that need
  // no host_int, e.g. an empty input): PyTorch's meta kernels cannot check it.
  virtual void output_depends_on_data() = 0;

  // A check on the device: `ok` (rank-0 pred) must hold, else the op raises
  // IndexError(message) when the host next waits for the device (at once in
  // debug mode), like CUDA's device-side assertions; a message that starts
  // with exec::kRuntimeErrorCheck raises RuntimeError (what CPU raises for
  // gather's indices or invalid probabilities), one with
  // exec::kLinAlgErrorCheck torch.linalg.LinAlgError (LAPACK's failures).
  virtual void check(Value ok, const std::string& message) = 0;

  // For out= variants of factories (arange.start_out): the dtype of `out`.
  virtual std::optional<at::ScalarType> out_dtype() const = 0;

  // Whether dim `dim` of tensor argument i has a run-time size (a bucketed
  // program's padded operand: its static size is the bucket's), and that
  // size (i32, rank 0; a run-time operand). Messages name it by size_text.
  virtual bool varies(size_t i, int64_t dim) const { return false; }
  virtual Value run_time_size(size_t i, int64_t dim) {
    throw std::logic_error("run_time_size of a dim that does not vary");
  }
  // Dim `dim`'s size of tensor argument i as message text: the number, or a
  // mark that each run fills in with the size it had (see size_mark).
  std::string size_text(size_t i, int64_t dim) {
    return varies(i, dim) ? size_mark(i, dim) : std::to_string(static_size(i, dim));
  }
  // Its static size (a 0-dim tensor's dim 0: 1, as gather and scatter see it).
  int64_t static_size(size_t i, int64_t dim) {
    const TensorInfo& t = info(i);
    return t.dim() == 0 ? 1 : t.sizes.at(dim);
  }

  // Optional helpers.
  std::optional<int64_t> opt_int(size_t i) const {
    return i < size() && !is_none(i) ? std::optional<int64_t>(int_(i)) : std::nullopt;
  }
  std::optional<double> opt_double(size_t i) const {
    return i < size() && !is_none(i) ? std::optional<double>(double_(i)) : std::nullopt;
  }
  std::optional<at::ScalarType> opt_scalar_type(size_t i) const {
    return i < size() && !is_none(i) ? std::optional<at::ScalarType>(scalar_type(i)) : std::nullopt;
  }
  bool has(size_t i) const { return i < size() && !is_none(i); }
};

// A function made elsewhere (a JAX function exported to StableHLO), called
// by torch_tpu::_jax_call: `functions` holds its func.func definitions with
// every symbol spelled @__IMPORT__name (see Builder::call_imported).
struct ImportedKernel {
  std::string name;  // for messages: the Python function's name
  std::string functions;
  std::string entry;
  std::vector<Type> in_types, out_types;
};
int64_t register_imported(ImportedKernel kernel);
const ImportedKernel& imported_kernel(int64_t id);

// Raised by a lowering for a case it does not handle (a dtype, an argument
// combination): the op can still run through the CPU fallback. Other
// c10::NotImplementedErrors are PyTorch's own ("not implemented for 'Bool'").
class Unsupported : public c10::NotImplementedError {
 public:
  using c10::NotImplementedError::NotImplementedError;
};

// How precisely float32 matmuls and convolutions are computed
// (torch.set_float32_matmul_precision).
enum class MatmulPrecision { Highest, High, Medium };

struct Context {
  Builder& b;
  Args& args;
  std::string_view op;  // e.g. "aten::add.Tensor"
  // How the precision in force is looked up (Highest when none is given).
  MatmulPrecision (*lookup_precision)() = nullptr;
  // The precision, once a lowering asked for it: a program whose lowering
  // read it is kept for that precision only.
  std::optional<MatmulPrecision> precision_read = std::nullopt;
  MatmulPrecision precision() {
    if (!precision_read) precision_read = lookup_precision ? lookup_precision() : MatmulPrecision::Highest;
    return *precision_read;
  }
  // The op's device-side checks made through check_all, in order.
  std::vector<Value> checks;
  // How many of `checks` gate the op's write (skip_unless_checked): when any
  // of them fails, the result is self (argument 0) unchanged, so an in-place
  // call needs no guard of its own over the whole of self (eager.h).
  size_t gating_checks = 0;
};

using LoweringFn = std::vector<Value> (*)(Context&);

// Register `fn` as the lowering of the functional ATen op `name`
// ("aten::add.Tensor"). Called from static initializers (TPU_LOWERINGS).
void register_lowering(const char* name, LoweringFn fn);
LoweringFn find_lowering(std::string_view name);
std::vector<std::string> lowering_names();

struct LoweringRegistrar {
  explicit LoweringRegistrar(void (*fn)()) { fn(); }
};
#define TPU_LOWERINGS_CONCAT2(a, b) a##b
#define TPU_LOWERINGS_CONCAT(a, b) TPU_LOWERINGS_CONCAT2(a, b)
// TPU_LOWERINGS(family) { reg("aten::neg", lower_neg); ... }
#define TPU_LOWERINGS(family)                                                            \
  static void tpu_register_##family();                                                   \
  static ::tpu::lowering::LoweringRegistrar TPU_LOWERINGS_CONCAT(tpu_registrar_, family)( \
      &tpu_register_##family);                                                           \
  static void tpu_register_##family()

inline void reg(const char* name, LoweringFn fn) { register_lowering(name, fn); }

// ---- dtypes -----------------------------------------------------------------

DType to_hlo(at::ScalarType t);
at::ScalarType to_aten(DType t);

// The dtype arithmetic is carried out in: float for half and bfloat16 (as
// PyTorch's CPU kernels do), the dtype itself otherwise.
at::ScalarType opmath_type(at::ScalarType t);

// PyTorch's type promotion (torch.result_type) over tensors and scalars.
class ResultType {
 public:
  ResultType& tensor(const TensorInfo& info);
  ResultType& scalar(const c10::Scalar& s) { return scalar_kind(s.type()); }
  // A Scalar of this kind (kLong, kDouble, ...): its value does not matter.
  ResultType& scalar_kind(at::ScalarType kind);
  at::ScalarType get() const;

 private:
  at::ScalarType dim_ = at::ScalarType::Undefined;
  at::ScalarType zero_ = at::ScalarType::Undefined;
  at::ScalarType wrapped_ = at::ScalarType::Undefined;
};

// ---- shapes -----------------------------------------------------------------

// Broadcast shape of two shapes, with PyTorch's error for mismatches.
Dims broadcast_shapes(const Dims& a, const Dims& b);
// Normalize a possibly negative dim against rank (rank 0 accepts -1 and 0),
// raising IndexError as PyTorch does.
int64_t wrap_dim(int64_t dim, int64_t rank);
Dims wrap_dims(const std::vector<int64_t>& dims, int64_t rank);
std::string dims_string(const Dims& d);

}  // namespace tpu::lowering
