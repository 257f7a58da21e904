// Helpers shared by the lowering families.
#pragma once

#include <functional>

#include "csrc/lowering/lowering.h"

namespace tpu::lowering {

inline std::vector<Value> one(Value v) { return {v}; }

inline Value cast(Builder& b, Value v, at::ScalarType t) { return b.convert(v, to_hlo(t)); }

inline bool is_integral(at::ScalarType t) { return c10::isIntegralType(t, /*includeBool=*/true); }
// A dtype as CPU messages that print a tensor's dtype() name it ("float",
// "long int", "c10::Half"), not as ScalarType names it ("Float").
std::string type_meta_name(at::ScalarType t);
inline bool is_floating(at::ScalarType t) { return c10::isFloatingType(t); }

// The default float dtype (torch.get_default_dtype()).
at::ScalarType default_float();

// Shape of argument i: a tensor's sizes, {} for a Scalar.
Dims arg_shape(Context& c, size_t i);
// Add argument i (tensor or Scalar) to a type promotion.
ResultType& promote_arg(ResultType& r, Context& c, size_t i);
// Argument i (tensor or Scalar) converted to `t` and broadcast to `dims`.
Value operand(Context& c, size_t i, at::ScalarType t, const Dims& dims);
// Argument i as CPU's TensorIterator hands it to a kernel of result type
// `result` that computes in `compute` (its opmath type): first converted to
// `result`, then widened. A 0-dim float32 tensor or a Python float meeting a
// bfloat16 tensor is rounded to bfloat16 before the arithmetic, as on CPU.
Value operand(Context& c, size_t i, at::ScalarType result, at::ScalarType compute, const Dims& dims);
// Whether argument i is what CPU's mul and div kernels take at full opmath
// precision when it is their right operand: a Scalar or a 0-dim tensor.
bool is_scalar_operand(Context& c, size_t i);

// Arguments i and j promoted to their result type and broadcast together.
struct Promoted {
  Value a, b;
  at::ScalarType type;     // the result type (torch.result_type)
  at::ScalarType compute;  // the type the values are in (opmath of `type` if requested)
  Dims shape;
};
// With `opmath`, the values are computed in opmath after rounding to `type`
// (see operand); `exact_right` keeps a scalar argument j unrounded, as CPU's
// mul and div kernels do.
Promoted promote2(Context& c, size_t i, size_t j, bool opmath, bool exact_right = false);

// Reduction helpers.
Dims reduce_dims(Context& c, size_t dim_arg, int64_t rank);  // dim=None/[] -> all
Dims kept_shape(const Dims& sizes, const Dims& dims, bool keepdim);
Value sum_over(Builder& b, Value x, const Dims& dims);

// x^T y for x [batch..., K, M] and y [batch..., K, N] (or a vector y
// [batch..., K]), batch dims leading: [batch..., M, N] (or [batch..., M]),
// accumulated in `acc`. Both are contracted along their major matrix dim;
// XLA's CPU kernel for that is fast only when the lhs has the fewer free
// rows (2048x512 against a vector: 2.2 ms, swapped 0.09), so the operand
// with the fewer goes first and the product is transposed back.
Value contract_major_dims(Builder& b, Value x, Value y, const Dims& batch, DType acc, bool highest);
// A product [batch..., N, M] transposed to [batch..., M, N], kept from
// being folded back into the product by XLA (which would swap its operands).
Value product_transposed(Builder& b, Value product, int64_t batch_dims);
// Re-insert reduced dims as size 1 (keepdim=True).
Value keep_dims(Builder& b, Value reduced, const Dims& in_sizes, const Dims& dims, bool keepdim);

// Numbers of elements along `dims`.
int64_t count_over(const Dims& sizes, const Dims& dims);

// The dims from, from + 1, ..., to - 1.
Dims range(int64_t from, int64_t to);
// Whether any element of the pred `p` holds (a rank-0 pred).
Value any_of(Builder& b, Value p);

// Per-element iterations as one loop (samplers' rejection rounds, series
// summed until each element's terms are negligible): `body` maps the round
// number n (1, 2, ...: a rank-0 i64) and the carried values to their next
// values; carried[done] is a pred of the elements' shape, and rounds run
// while any element's is false, at most `cap` of them. Returns the carried
// values.
using RoundBody = std::function<std::vector<Value>(Builder&, Value n, const std::vector<Value>&)>;
std::vector<Value> rounds_until_done(Builder& b, const std::vector<Value>& init, size_t done, int64_t cap,
                                     const RoundBody& body);

// x converted to `t`, broadcast to `dims` (a rank-0 or same-rank value).
Value splat(Builder& b, Value x, const Dims& dims);

// Inclusive scan along `dim` with the binary stablehlo `op` and its identity
// (cumsum: "stablehlo.add", 0).
Value scan(Builder& b, Value x, int64_t dim, std::string_view op, double identity);
// The same with any associative `combine(later, earlier)` and its identity
// (a rank-0 value of x's dtype).
Value scan(Builder& b, Value x, int64_t dim, const std::function<Value(Value, Value)>& combine, Value identity);

// Host-indexed gathers and scatter-adds along one dim: take_along picks the
// slices x[..., idx[j], ...]; add_along adds the slices of g into positions
// idx[j] of a dim of length n (its adjoint).
Value take_along(Builder& b, Value x, int64_t d, const std::vector<int64_t>& idx);
// Element-wise gather: out[i...] = x[coords[i...]], coords [..., rank(x)].
Value gather_points(Builder& b, Value x, Value coords);
Value add_along(Builder& b, Value g, int64_t d, const std::vector<int64_t>& idx, int64_t n);

[[noreturn]] void unsupported(Context& c, const std::string& what);

// Checks on the device that every integer in `idx` lies in [-size, size)
// (or [0, size) without `allow_negative`); IndexError(message) otherwise.
// A device-side check that `ok` holds everywhere (see Args::check); the
// message gets the op's name.
void check_all(Context& c, Value ok, const std::string& message);
void check_index_range(Context& c, Value idx, int64_t size, bool allow_negative, const std::string& message);
// The same against a run-time size (i64, rank 0).
void check_index_range(Context& c, Value idx, Value size, bool allow_negative, const std::string& message);
// Scatter coordinates (or indices) that address nothing when any of the
// op's checks so far fails: XLA drops a scatter's out-of-range windows, so
// the scatter then leaves self as it was (Context::gating_checks).
Value skip_unless_checked(Context& c, Value coords);
// Dim `dim`'s size of tensor argument i (i64, rank 0; a 0-dim tensor's is
// 1): a constant, or read at run time where it varies (Args::varies).
Value dim_size(Context& c, size_t i, int64_t dim);

}  // namespace tpu::lowering
