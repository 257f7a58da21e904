// A builder of StableHLO programs, emitted as MLIR text in the generic op
// syntax that every PJRT plugin's compiler accepts:
//
//   %v3 = "stablehlo.add"(%v1, %v2) : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
//
// Each helper infers its result type and checks its operands, so a lowering
// bug is reported where it happens (as a std::logic_error naming the op and
// the types) instead of as a parse error of the finished module.
#pragma once

#include <deque>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "csrc/hlo/module.h"
#include "csrc/hlo/types.h"

namespace tpu::hlo {

struct Value {
  int id = -1;
  bool valid() const { return id >= 0; }
  bool operator==(const Value& o) const { return id == o.id; }
};

enum class Cmp { EQ, NE, LT, LE, GT, GE };

// Emitted as "#stablehlo<rng_algorithm ...>".
enum class RngAlgorithm { Default, ThreeFry, Philox };

class Builder {
 public:
  Builder();

  // ---- program structure --------------------------------------------------
  // A new argument of the main function.
  Value param(const Type& type);
  int num_params() const { return static_cast<int>(params_.size()); }
  const Type& type(Value v) const;
  const Dims& dims(Value v) const { return type(v).dims; }
  DType dtype(Value v) const { return type(v).dtype; }
  int64_t rank(Value v) const { return type(v).rank(); }

  // The finished module returning `results`. Each (param, output) pair of
  // `donations` lets the output reuse the parameter's buffer (the argument
  // attribute tf.aliasing_output); both must have the same type.
  std::string module(const std::vector<Value>& results,
                     const std::vector<std::pair<int, int>>& donations = {},
                     const ModuleAttributes& attributes = {}) const;
  // The program as a private function `@name` (no aliasing attributes), for
  // a module that calls it: fused eager composes recorded ops this way.
  std::string function(const std::string& name, const std::vector<Value>& results) const;

  // ---- imported functions ---------------------------------------------------
  // Calls `entry` of `functions`, the text of one or more `func.func`
  // definitions made elsewhere (a JAX function exported to StableHLO), in
  // which every function symbol is spelled `@__IMPORT__name`. The program
  // carries the text and gives its symbols a prefix of its own, so several
  // programs importing the same functions can share one module.
  std::vector<Value> call_imported(const std::string& functions, const std::string& entry,
                                   const std::vector<Value>& operands, const std::vector<Type>& results);

  // ---- generic emission ---------------------------------------------------
  // Appends `op` with the given operands, result types, attribute dictionary
  // body (without braces) and regions (from `region`).
  std::vector<Value> emit(std::string_view op, const std::vector<Value>& operands,
                          const std::vector<Type>& results, std::string_view attrs = {},
                          const std::vector<std::string>& regions = {});
  Value emit1(std::string_view op, const std::vector<Value>& operands, const Type& result,
              std::string_view attrs = {}, const std::vector<std::string>& regions = {});

  // A region with one block whose arguments have `arg_types`; `body` returns
  // the values the block returns (stablehlo.return).
  using RegionBody = std::function<std::vector<Value>(Builder&, const std::vector<Value>&)>;
  std::string region(const std::vector<Type>& arg_types, const RegionBody& body);

  // ---- constants ------------------------------------------------------------
  // A scalar (rank-0) constant; for floats of 16 bits the value is rounded
  // from f32. Integers are given in `ivalue` (exact for 64 bits).
  Value constant(double value, DType dtype);
  Value constant_int(int64_t value, DType dtype);
  Value constant_bool(bool value);
  // `value` broadcast to `dims`.
  Value full(double value, DType dtype, const Dims& dims);
  Value full_int(int64_t value, DType dtype, const Dims& dims);
  Value zeros(const Type& type);
  // A constant with the given elements (row-major), for small index tables.
  Value constant_i64s(const std::vector<int64_t>& values, const Dims& dims, DType dtype = DType::I64);
  // A float constant with the given elements (row-major), rank <= 1.
  Value constant_floats(const std::vector<double>& values, const Dims& dims, DType dtype);
  // The most negative / positive value of a dtype (-inf / inf for floats).
  Value lowest(DType dtype);
  Value highest(DType dtype);
  Value iota(const Type& type, int64_t dim);

  // ---- elementwise ----------------------------------------------------------
  // Operands must have equal types (use broadcast/convert first).
  Value unary(std::string_view op, Value x);                 // result type = x's
  Value binary(std::string_view op, Value x, Value y);       // result type = x's
  Value add(Value x, Value y) { return binary("stablehlo.add", x, y); }
  Value sub(Value x, Value y) { return binary("stablehlo.subtract", x, y); }
  Value mul(Value x, Value y) { return binary("stablehlo.multiply", x, y); }
  // x / y, correctly rounded (see the definition).
  Value div(Value x, Value y);
  Value rem(Value x, Value y) { return binary("stablehlo.remainder", x, y); }
  Value max(Value x, Value y) { return binary("stablehlo.maximum", x, y); }
  Value min(Value x, Value y) { return binary("stablehlo.minimum", x, y); }
  Value pow(Value x, Value y) { return binary("stablehlo.power", x, y); }
  Value and_(Value x, Value y) { return binary("stablehlo.and", x, y); }
  Value or_(Value x, Value y) { return binary("stablehlo.or", x, y); }
  Value xor_(Value x, Value y) { return binary("stablehlo.xor", x, y); }
  Value neg(Value x) { return unary("stablehlo.negate", x); }
  Value not_(Value x) { return unary("stablehlo.not", x); }
  Value abs(Value x);
  Value compare(Cmp dir, Value x, Value y);
  Value select(Value pred, Value on_true, Value on_false);
  Value clamp(Value lo, Value x, Value hi);
  Value convert(Value x, DType to);
  // Parts of complex values (real() and imag() of a real value: x and 0).
  Value real(Value x);
  Value imag(Value x);
  Value complex(Value re, Value im);
  Value bitcast_convert(Value x, DType to);
  Value is_finite(Value x);

  // ---- shapes ---------------------------------------------------------------
  Value reshape(Value x, const Dims& dims);
  Value transpose(Value x, const Dims& perm);
  // x, unseen through by XLA's rewrites (stablehlo.optimization_barrier).
  Value barrier(Value x);

  // ---- bounded dynamic dimensions (docs/bounded_dynamism.md) ------------------
  // x whose dim `dim` holds `size` (i32, rank 0) elements at run time; the
  // result's type is x's, made static: XLA tracks the size and masks the rest.
  Value set_dimension_size(Value x, Value size, int64_t dim);
  // x (whose run-time size is known) reshaped to the run-time `shape` (i32,
  // rank 1); `result` bounds its dims (Type::bounded).
  Value dynamic_reshape(Value x, Value shape, const Type& result);
  // x as `to`, a type of the same dtype and dims differing only in which
  // dims are bounded.
  Value retype(Value x, const Type& to);
  // Whether `v` was made by transpose(): then its operand and permutation.
  bool transposed(Value v, Value* source, Dims* perm) const;
  Value broadcast_in_dim(Value x, const Dims& dims, const Dims& broadcast_dimensions);
  // NumPy-style: align trailing dimensions of x with `dims`.
  Value broadcast_to(Value x, const Dims& dims);
  Value slice(Value x, const Dims& start, const Dims& limit, const Dims& strides = {});
  // Take `[start, start + size)` of dimension `dim`, step `step`.
  Value slice_dim(Value x, int64_t dim, int64_t start, int64_t limit, int64_t step = 1);
  Value dynamic_slice(Value x, const std::vector<Value>& starts, const Dims& sizes);
  Value dynamic_update_slice(Value x, Value update, const std::vector<Value>& starts);
  Value concatenate(const std::vector<Value>& xs, int64_t dim);
  Value pad(Value x, Value pad_value, const Dims& low, const Dims& high, const Dims& interior = {});
  Value reverse(Value x, const Dims& dims);

  // ---- contractions, reductions, windows ------------------------------------
  Value dot_general(Value lhs, Value rhs, const Dims& lhs_batch, const Dims& rhs_batch,
                    const Dims& lhs_contract, const Dims& rhs_contract, DType out,
                    bool highest_precision = true);
  // Reduce `inputs` (same dims) over `dims` with `body` taking 2*n scalars.
  std::vector<Value> reduce(const std::vector<Value>& inputs, const std::vector<Value>& inits,
                            const Dims& dims, const RegionBody& body);
  // Single-input reduction with a binary stablehlo op as combiner.
  Value reduce(Value x, Value init, const Dims& dims, std::string_view combiner);
  // The cross-replica reduction of `x` with `combiner` over each group of
  // replica ids (a program of several replicas).
  Value all_reduce(Value x, std::string_view combiner, const std::vector<std::vector<int64_t>>& replica_groups);
  Value reduce_window(Value x, Value init, const Dims& window, const Dims& strides,
                      const Dims& base_dilation, const Dims& window_dilation,
                      const std::vector<std::pair<int64_t, int64_t>>& padding,
                      std::string_view combiner);
  // Sort `inputs` along `dim`; `comparator` gets 2*n scalars, a (lhs, rhs)
  // pair per input: (lhs_0, rhs_0, lhs_1, rhs_1, ...).
  std::vector<Value> sort(const std::vector<Value>& inputs, int64_t dim, bool stable,
                          const RegionBody& comparator);
  Value convolution(Value lhs, Value rhs, const Dims& strides,
                    const std::vector<std::pair<int64_t, int64_t>>& padding,
                    const Dims& lhs_dilation, const Dims& rhs_dilation, int64_t feature_groups,
                    int64_t batch_groups, DType out);

  // ---- indexing ---------------------------------------------------------------
  struct GatherDims {
    Dims offset_dims, collapsed_slice_dims, operand_batching_dims, start_indices_batching_dims,
        start_index_map;
    int64_t index_vector_dim = 0;
  };
  Value gather(Value operand, Value indices, const GatherDims& dn, const Dims& slice_sizes,
               const Dims& result_dims);
  struct ScatterDims {
    Dims update_window_dims, inserted_window_dims, input_batching_dims,
        scatter_indices_batching_dims, scatter_dims_to_operand_dims;
    int64_t index_vector_dim = 0;
  };
  // Scatter with a combiner region over (old, update) scalars; nullptr body
  // means "replace".
  Value scatter(Value operand, Value indices, Value updates, const ScatterDims& dn,
                const RegionBody& combiner);

  // A loop: `cond` maps the carried values to a rank-0 pred, `body` to their
  // next values (same types).
  std::vector<Value> while_loop(const std::vector<Value>& init, const RegionBody& cond, const RegionBody& body);

  // ---- random ---------------------------------------------------------------
  // Returns {new_state, bits}; `state` is ui64[2] for ThreeFry/Philox.
  std::pair<Value, Value> rng_bit_generator(Value state, const Type& bits, RngAlgorithm alg);

 private:
  struct Frame {
    std::string text;
  };
  Value new_value(const Type& t);
  std::string& out() { return frames_.back().text; }
  void write_operands(const std::vector<Value>& operands);
  void check(bool ok, std::string_view op, const std::string& what) const;

  std::deque<Type> types_;  // a deque: references stay valid as values are added
  std::unordered_set<int> broadcast_;  // values made by broadcast_in_dim (see div)
  std::unordered_map<int, std::pair<Value, Dims>> transposes_;  // values made by transpose, their operands
  std::vector<Value> params_;
  // The main function's parameters, and the types and names of `results`.
  std::vector<Parameter> parameters() const;
  void signature_of(const std::vector<Value>& results, std::vector<Type>& types, std::vector<std::string>& names) const;
  std::vector<Frame> frames_;
  std::vector<std::string> imports_;  // texts of call_imported's functions, by index
  // `text` with the placeholders of imported symbols given `prefix`, and the
  // imported functions (so prefixed) appended to `functions`.
  std::string with_imports(std::string text, const std::string& prefix, std::string& functions) const;
  int indent_ = 2;
};

// "array<i64: 1, 2>" / "array<i64>"
std::string array_attr(const Dims& values);
// "[1, 2]"
std::string list_attr(const Dims& values);

}  // namespace tpu::hlo
