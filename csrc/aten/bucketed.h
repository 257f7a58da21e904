// Bucketed programs (docs/bounded_dynamism.md).
//
// A tensor whose size keeps changing (the sequence dimension of a growing
// concatenation: generate's input_ids and attention mask, a KV cache) would
// compile its ops once per size. Instead its storage holds a padded value
// (TpuStorage::Padded: the tensor padded along its varying dims to the
// bucket of its size), and the ops that may run at bucket shapes read it
// as it is, the actual sizes, strides and offsets being run-time operands:
// one program per bucket. XLA tracks the sizes through the program and
// masks the padding. Every other reader of such a storage gets its exact
// value (TpuStorage::raw_value).
#pragma once

#include <ATen/core/List.h>
#include <ATen/core/Tensor.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "csrc/aten/eager.h"

namespace tpu {

class OpSignature;

// Whether bucketed programs run now: in every eager mode (fused eager
// records them, and padded values are deferred there), with the op memo on
// and TORCH_TPU_BUCKETING not 0; not in a torch.compile capture.
bool bucketing_enabled();
// TORCH_TPU_BUCKETING=explain: say on stderr why an op that reads a padded
// tensor runs at its exact sizes, and which new tensors are padded.
bool bucketing_explained();
// Under explain: op `op` read a padded tensor but runs at its exact sizes
// (a program per size), because `why`.
void explain_exact(const std::string& op, const std::string& why);

// Whether the lowering of `functional` may run at bucket shapes (a checked
// list: it bakes no operand size into its program beyond its shapes).
bool bucketable_op(const std::string& functional);

// perm's inverse (perm[i] = j: the result's [j] = i).
std::vector<int64_t> inverse_permutation(const std::vector<int64_t>& perm);

// A dim's bucket: the next power of two above it (at least 16). Strictly
// above, so that a varying dim's bucket always differs from its size.
int64_t bucket_of(int64_t n);

// The bounds of a tensor of `sizes` whose dims in `varying` vary.
std::vector<int64_t> bounds_of(c10::IntArrayRef sizes, const std::vector<bool>& varying);

// Strides for a tensor of `sizes` laid out densely in the order of t's
// strides (0 kept where t is expanded): a proxy for a view of t keeps its
// layout (so PyTorch's layout rules see a transpose as one).
std::vector<int64_t> dense_strides_like(const at::Tensor& t, c10::IntArrayRef sizes);

// The operands of one bucketed call: each tensor on a padded storage is
// replaced by a proxy (a tensor of the bucket's sizes holding the padded
// value, or a tensor of a view's sizes standing for that view), which the
// lowering reads like any tensor.
class BucketedOperands {
 public:
  explicit BucketedOperands(int device) : device_(device) {}

  // t, or the proxy standing for it.
  at::Tensor substitute(const at::Tensor& t);
  // Some operand was replaced.
  bool any() const { return !proxies_.empty(); }
  // Every replaced operand can be read in a bucketed program.
  bool usable() const { return usable_; }
  // Whether `proxy` stands for a view whose dim 0 merges static dims with
  // a varying one innermost (a linear layer's flattened batch and
  // sequence) and no other proxy exists: if so, marks it to be read as
  // rows, the merge
  // reshaping the padded value as it is (the padding rows in between, not
  // moved behind), for an op that computes each row of its result from
  // that row alone (a matrix product's rows).
  bool rows_of(const at::Tensor& proxy);
  // What tells the programs of these proxies apart beyond their signature:
  // which dims vary, and which of them have equal actual sizes.
  void describe(c10::List<int64_t>& key) const;

  // The varying sizes: distinct actual sizes of the varying dims ("symbols",
  // in order of appearance), each with its bucket.
  struct Symbol {
    int64_t actual, bound;
  };
  const std::vector<Symbol>& symbols() const { return symbols_; }
  // The sizes a proxy would have with the dims of `symbol` one below their
  // bucket (shape inference probes how outputs vary); nullopt for a tensor
  // that is no proxy or has none of them.
  std::optional<std::vector<int64_t>> probe_sizes(const at::Tensor& proxy, size_t symbol) const;
  // A proxy dim whose size is `multiplier` times the symbol's (the first
  // one found), to read its run-time size from.
  struct SymbolDim {
    at::Tensor proxy;
    int64_t dim, multiplier;
  };
  std::optional<SymbolDim> symbol_dim(size_t symbol) const;
  // Whether some proxy dim merges the symbol's dim, outermost, with static
  // dims of `multiplier` elements (the rows i * multiplier + j of a
  // flattened (n, multiplier) index): a result dim of that slope is then
  // held as (n, multiplier), which the views splitting it so read by
  // slicing, not as (multiplier, n).
  bool varies_outermost(size_t symbol, int64_t multiplier) const;
  // Runs the bucketed program of the call keyed by `key` (the proxies and
  // whatever else tells programs apart; `tag` names the op, `numbers` its
  // Scalar arguments as OpSignature takes them): the plan kept
  // for it, bound to the `actual` arguments (same positions: the sizes,
  // strides and offsets of what the proxies stand for are read there), or the one `build` makes on the
  // program it is given (it calls finish() and keep_plan(), or returns
  // false when the op cannot run bucketed). Its results, or nullopt.
  using Build = std::function<bool(EagerProgram& p, const OpSignature& sig)>;
  std::optional<std::vector<at::Tensor>> run(const void* tag, uint32_t globals, uint64_t numbers,
                                             c10::ArrayRef<c10::IValue> key,
                                             c10::ArrayRef<c10::IValue> actual, const Build& build) const;

 private:
  struct Proxy {
    const c10::StorageImpl* storage;
    std::shared_ptr<const TpuStorage::Padded> padded;
    at::Tensor tensor;
  };
  int device_;
  bool usable_ = true;
  std::vector<Proxy> proxies_;
  struct View {
    at::Tensor proxy, view;  // (the view the proxy stands for)
    uint64_t varying;        // the dims of the view that vary (the proxy has their bucket)
    std::vector<EagerProgram::ViewDim> map;  // see EagerProgram::dynamic_view (empty: read by a gather)
    EagerProgram::Dims dims;  // the tensor's dims the map refers to (empty: as the storage holds them)
    bool rows = false;       // see rows_of
  };
  std::vector<View> views_;
  std::vector<Symbol> symbols_;
  // Per proxy tensor (a whole or a view): the symbol of each dim (-1:
  // static), and the static factor its size has beyond the symbol's (a
  // dim merging batch and sequence: the batch).
  struct DimSymbol {
    int symbol = -1;
    int64_t multiplier = 1;
    bool outer = false;  // (a merge whose outermost dim is the varying one)
  };
  std::vector<std::pair<const c10::TensorImpl*, std::vector<DimSymbol>>> dim_symbols_;
  std::vector<DimSymbol> note_dims(const std::vector<int64_t>& actual, const std::vector<int64_t>& bucket,
                                   const std::vector<int64_t>& multiplier, const std::vector<bool>& outer = {});
};

// A bucketed call's output: its sizes (in memory order), and the tensor
// its padded storage holds (the same, or with dim `split` held as two).
struct OutputShape {
  std::vector<int64_t> sizes;
  std::vector<int64_t> held, bounds;
  int split = -1;      // the dim held as (its slope, the symbol's size)
  bool outer = false;  // (held as (the symbol's size, its slope) instead)
  size_t symbol = 0;
};

// `v` (of the output's bucket sizes, its one varying dim XLA-sized at
// slope × n) reshaped to the dims its padded storage holds: that dim split
// into (slope, n), or (n, slope) when outer, n varying.
hlo::Value split_exit(hlo::Builder& b, hlo::Value v, const OutputShape& o, hlo::Value n);

// `v` leaving a bucketed program: a static value of `bounds` (of v's rank)
// whose dims hold v's elements first, at their run-time sizes.
hlo::Value padded_exit(hlo::Builder& b, hlo::Value v, const std::vector<int64_t>& bounds);

// A bucketed program's result `r` (of `bounds`) as the tensor of `sizes`:
// padded where `bounds` differ from them, else exact.
at::Tensor bucketed_result(const at::Tensor& r, c10::IntArrayRef sizes, std::vector<int64_t> bounds, int device);

// For kernels written against buckets (the sparse kernels in Python): the
// padded value of `t`'s storage as a tensor of its bounds (its elements
// first along every dim, then padding holding anything), sharing the
// device value (no program runs), when bucketing is on and `t` is all of a
// padded storage, contiguous, at the storage's sizes (up to dims of size 1)
// and dtype. nullopt otherwise.
std::optional<at::Tensor> padded_value_of(const at::Tensor& t);

// The converse: a tensor of `sizes` whose storage holds `bucket` (all of
// its storage, contiguous) as its padded value, sharing the device value.
// Each dim of `sizes` equals `bucket`'s, or is at least 2 with `bucket`
// holding its bucket (bucket_of) there. Throws otherwise.
at::Tensor as_padded(const at::Tensor& bucket, c10::IntArrayRef sizes);

// dst <- src (same sizes) in a bucketed program, when src is on a padded
// storage and dst covers its own storage; false otherwise.
bool copy_bucketed(const at::Tensor& src, const at::Tensor& dst);

// A concatenation onto one of its own recent results (the same dtype, dim,
// input count and other sizes: a sequence grown step by step, as generate
// grows input_ids, its attention mask and a KV cache) gives a padded result,
// so that the next concatenation onto it, and the ops reading it, run
// bucketed. `first` is the concatenation's first input.
void pad_if_growing(at::Tensor& result, int64_t dim, size_t num_inputs, const at::Tensor& first);

// New tensors whose sizes keep changing from call to call (masks and
// positions made at each length of a sequence, the token ids of prompts of
// several lengths) are padded from the third distinct size of a kind of
// tensor (its dtype and rank), in the dims that took three sizes while the
// others stayed: the ops reading them then run bucketed.
//
// On this thread, new tensors are never padded by these rules while `on`
// (the serving engine's uploads go straight into programs compiled for
// their exact sizes); returns the previous setting.
bool set_exact_new_tensors(bool on);

// While alive, on this thread: the fills of zeros_like, ones_like and
// full_like of `source`. Such a fill mirrors its source (grow_fill): padded
// to the source's bounds where the source's storage is padded, else exact.
// A tensor made like another (an optimizer's state, a gradient buffer) never
// pads by the sizes of its neighbours at that line.
class LikeFill {
 public:
  explicit LikeFill(const at::Tensor& source);
  ~LikeFill();
  LikeFill(const LikeFill&) = delete;
  LikeFill& operator=(const LikeFill&) = delete;

 private:
  const at::Tensor* previous_;
};

// fill_(self, value) or zero_(self) on a tensor covering its own storage:
// `self` holds a padded value, one program per bucket and dtype (the number
// is a run-time operand), where it is a fill of an integer or bool tensor
// whose sizes keep changing (torch.ones((n, n), dtype=torch.bool) at each
// length) or one mirroring a padded source (ones_like of growing token ids;
// LikeFill). False otherwise (the op runs as usual).
bool grow_fill(c10::ArrayRef<c10::IValue> args);

// `host` (contiguous, of dst's sizes and dtype) copied into `dst` (a new
// tensor covering its storage), when dst holds token ids or a mask (int64
// or bool, rank 3 at most): padded on the host, the transfer is the only
// work; the same for a 1-D float upload (per-sample weights). False
// otherwise (the caller copies as usual).
bool pad_upload(const at::Tensor& dst, const at::Tensor& host);

// Whether `window` (a run of whole rows of a larger storage, read by an
// op) is one whose length keeps changing at the Python line reading it,
// from the same buffer: the rule of new tensors (three distinct lengths,
// the other sizes equal), kept apart from theirs.
bool window_length_varies(const at::Tensor& window);

// For an op reading `t`, a run of whole rows (dim 0) of a larger storage
// that holds an exact value, at a length that keeps changing
// (window_length_varies: a serving engine's positions[:n] and
// query_start_loc[1:r + 1] read each step): a padded tensor of t's sizes
// and values, its bucket read from the storage at t's offset (one program
// per storage size, dtype and bucket), so that the op runs bucketed.
// nullopt otherwise.
std::optional<at::Tensor> padded_window(const at::Tensor& t);

// `host` (contiguous, of dst's sizes and dtype), or else the number `fill`,
// written into `dst`, a contiguous run of a larger storage (a prefix or a
// tail of a staging buffer): one program per storage size, dtype and
// power-of-two window, not per length and offset (tensor_ops.cpp). False
// otherwise (the caller writes as usual).
bool write_window(const at::Tensor& dst, const at::Tensor* host, const c10::Scalar& fill);
// The same for `src`, a tensor held padded (only dim 0 varying) of dst's
// sizes and dtype: its bucket is the window (a serving engine's
// positions[:n] = ... of a bucketed result).
bool write_window_from_padded(const at::Tensor& dst, const at::Tensor& src);

// arange.start_out(0, n, 1, out): torch.arange(n) into `out` (a new
// contiguous tensor of n elements covering its storage): one iota program
// per bucket. False otherwise (the op runs as usual).
bool grow_arange(c10::ArrayRef<c10::IValue> args);

}  // namespace tpu
