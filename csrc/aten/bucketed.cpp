#include "csrc/aten/bucketed.h"

#include <ATen/native/Resize.h>
#include <c10/util/strides.h>

#include <algorithm>
#include <cstdlib>
#include <array>
#include <mutex>
#include <numeric>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "csrc/aten/call_site.h"
#include "csrc/aten/executor_scope.h"
#include "csrc/aten/op_memo.h"
#include "csrc/exec/runtime.h"
#include "csrc/lowering/lowering.h"

namespace tpu {

using hlo::Value;
using lowering::to_hlo;

bool bucketing_explained() {
  static const bool on = [] {
    const char* v = std::getenv("TORCH_TPU_BUCKETING");
    return v != nullptr && std::string(v) == "explain";
  }();
  return on;
}

bool bucketing_enabled() {
  static const bool on = [] {  // TORCH_TPU_BUCKETING=0 turns it off (every size compiles, as before)
    const char* v = std::getenv("TORCH_TPU_BUCKETING");
    return v == nullptr || std::string(v) != "0";
  }();
  // (A torch.compile capture binds its graph's operands again by origin:
  // it sees every size.)
  return on && current_executor().mode() != exec::ExecutionMode::Capture && op_memo_enabled();
}

// The lowerings checked to run at bucket shapes: they concatenate,
// broadcast, select, combine elementwise, reduce, contract (XLA masks
// the padding of reductions and contractions) and gather (advanced
// indexing wraps and checks its indices by run-time sizes; an embedding
// bag pools by scattering its gathered rows); none slices an
// operand's dims, bakes a count into a constant, or scans.
bool bucketable_op(const std::string& functional) {
  static const std::unordered_set<std::string> ops = {
      "aten::cat", "aten::add.Tensor", "aten::add.Scalar", "aten::sub.Tensor", "aten::sub.Scalar",
      "aten::rsub.Tensor", "aten::rsub.Scalar", "aten::mul.Tensor", "aten::mul.Scalar", "aten::eq.Tensor",
      "aten::eq.Scalar", "aten::ne.Tensor", "aten::ne.Scalar", "aten::lt.Tensor", "aten::lt.Scalar",
      "aten::le.Tensor", "aten::le.Scalar", "aten::gt.Tensor", "aten::gt.Scalar", "aten::ge.Tensor",
      "aten::ge.Scalar", "aten::logical_and", "aten::logical_or", "aten::logical_not", "aten::bitwise_and.Tensor",
      "aten::bitwise_or.Tensor", "aten::bitwise_not", "aten::where.self", "aten::masked_fill.Scalar",
      "aten::masked_fill.Tensor", "aten::neg", "aten::isin.Tensor_Tensor", "aten::isneginf", "aten::isposinf",
      "aten::isnan", "aten::all.dim", "aten::any.dim", "aten::all", "aten::any", "aten::_softmax",
      "aten::_log_softmax", "aten::_safe_softmax", "aten::bmm", "aten::mm", "aten::sum", "aten::sum.dim_IntList",
      "torch_tpu::_sdpa_forward", "aten::index.Tensor", "aten::_unsafe_index.Tensor", "aten::gather",
      "aten::scatter.src", "aten::scatter.value", "aten::div.Tensor", "aten::div.Scalar", "aten::clamp",
      "aten::clamp.Tensor", "aten::clamp_min", "aten::clamp_max", "aten::abs", "aten::exp", "aten::log",
      "aten::sqrt", "aten::rsqrt", "aten::tanh", "aten::sigmoid", "aten::reciprocal", "aten::maximum",
      "aten::minimum", "aten::remainder.Tensor", "aten::remainder.Scalar", "aten::bitwise_xor.Tensor",
      "aten::index_select", "aten::addmm", "aten::mean.dim", "aten::mean", "aten::pow.Tensor_Scalar",
      "aten::pow.Tensor_Tensor", "aten::cos", "aten::sin", "aten::silu", "aten::gelu", "aten::relu", "aten::tril",
      "aten::triu", "aten::cumsum", "aten::native_layer_norm", "aten::argmax", "aten::argmin", "aten::max.dim",
      "aten::min.dim", "aten::amax", "aten::amin", "aten::max", "aten::min", "aten::_embedding_bag",
      "aten::_embedding_bag_forward_only"};
  return ops.count(functional) != 0;
}

std::vector<int64_t> inverse_permutation(const std::vector<int64_t>& perm) {
  std::vector<int64_t> inv(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) inv[perm[i]] = static_cast<int64_t>(i);
  return inv;
}

int64_t bucket_of(int64_t n) {
  int64_t b = 16;
  while (b <= n) b *= 2;
  return b;
}

std::vector<int64_t> bounds_of(c10::IntArrayRef sizes, const std::vector<bool>& varying) {
  std::vector<int64_t> b = sizes.vec();
  for (size_t d = 0; d < b.size(); ++d) {
    if (varying[d]) b[d] = bucket_of(b[d]);
  }
  return b;
}

void explain_exact(const std::string& op, const std::string& why) {
  if (bucketing_explained()) std::fprintf(stderr, "torch_tpu bucketing: %s ran at exact sizes: %s\n", op.c_str(), why.c_str());
}

namespace {

void explain_padded(const char* what, c10::IntArrayRef sizes, const std::vector<int64_t>& bounds) {
  if (bucketing_explained()) {
    std::fprintf(stderr, "torch_tpu bucketing: %s of sizes %s padded to %s\n", what, c10::str(sizes).c_str(),
                 c10::str(c10::IntArrayRef(bounds)).c_str());
  }
}

// A full, contiguous view of a padded storage: read as the padded value.
bool full_view(const at::Tensor& t, const TpuStorage::Padded& p) {
  return t.storage_offset() == 0 && t.sizes().vec() == p.sizes && t.is_contiguous();
}

// A tensor of `sizes` whose storage holds `padded`.
at::Tensor padded_tensor(std::shared_ptr<TpuStorage::Padded> padded, at::ScalarType dtype, int device) {
  at::Tensor t = empty_tpu(padded->sizes, dtype, device);
  storage_of(t).set_padded(std::move(padded));
  return t;
}

// `v` (flat, of `bounds`' element count; maybe deferred) as the padded
// value of a tensor of `sizes`.
std::shared_ptr<TpuStorage::Padded> make_padded(TpuStorage::Value v, std::vector<int64_t> sizes,
                                                std::vector<int64_t> bounds) {
  auto p = std::make_shared<TpuStorage::Padded>();
  p->type = std::move(v.type);
  p->buffer = std::move(v.buffer);
  p->deferred = std::move(v.deferred);
  p->sizes = std::move(sizes);
  p->bounds = std::move(bounds);
  p->checks = std::move(v.checks);
  return p;
}

// The dims of a padded storage's tensor as view `t` reads them: its static
// dims split where the view's strides fall inside them (a linear layer's
// features read as heads × head dims), its varying dims whole.
EagerProgram::Dims refined_dims(const at::Tensor& t, const TpuStorage::Padded& p) {
  EagerProgram::Dims r;
  const c10::DimVector cstrides = c10::contiguous_strides(p.sizes);
  for (size_t j = 0; j < p.sizes.size(); ++j) {
    const int64_t cs = cstrides[j], hi = cs * p.sizes[j];
    std::vector<int64_t> cuts;  // strides strictly inside the dim's span, on its grid
    if (p.sizes[j] == p.bounds[j]) {
      for (int64_t k = 0; k < t.dim(); ++k) {
        const int64_t st = t.stride(k);
        if (t.size(k) > 1 && st > cs && st < hi && st % cs == 0 && hi % st == 0) cuts.push_back(st);
      }
    }
    std::sort(cuts.begin(), cuts.end(), std::greater<>());
    cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
    int64_t upper = hi;
    for (int64_t c : cuts) {
      if (upper % c != 0) continue;
      r.sizes.push_back(upper / c);
      r.bounds.push_back(upper / c);
      r.origin.push_back(-1);
      upper = c;
    }
    r.sizes.push_back(upper / cs);
    r.bounds.push_back(p.sizes[j] == p.bounds[j] ? upper / cs : p.bounds[j]);
    r.origin.push_back(static_cast<int>(j));
  }
  return r;
}

// How view `t` of a padded storage's tensor takes its elements, when each
// of its dims is a range of one of the tensor's dims as `dims` splits them
// (a slice, a select, a transpose, an expansion, an unsqueeze of it) or
// merges a run of them whole (a reshape), at most one of them varying:
// per view dim, those dims, or kBroadcast (stride 0) or kUnit (size 1).
// Empty when it is not so (a step, a range past a dim's end, two varying
// dims merged).
std::vector<EagerProgram::ViewDim> view_map(const at::Tensor& t, const EagerProgram::Dims& dims, uint64_t varying) {
  using ViewDim = EagerProgram::ViewDim;
  const std::vector<int64_t>& canon = dims.sizes;
  const std::vector<int64_t>& bounds = dims.bounds;
  const c10::DimVector cstrides = c10::contiguous_strides(canon);
  // where the view starts in each dim of the tensor
  std::vector<int64_t> start(canon.size());
  int64_t rest = t.storage_offset();
  for (size_t j = canon.size(); j-- > 0;) {
    start[j] = canon[j] > 0 ? rest % canon[j] : 0;
    rest = canon[j] > 0 ? rest / canon[j] : 0;
  }
  if (rest != 0 || t.dim() >= 64) return {};
  std::vector<ViewDim> map(t.dim());
  std::vector<bool> used(canon.size());
  for (int64_t k = 0; k < t.dim(); ++k) {
    if (t.size(k) == 1 && !(varying >> k & 1)) {
      map[k] = {EagerProgram::kUnit, EagerProgram::kUnit};
    } else if (t.stride(k) == 0) {
      map[k] = {EagerProgram::kBroadcast, EagerProgram::kBroadcast};
    } else {
      int j = 0;
      const int rank = static_cast<int>(canon.size());
      while (j < rank && !(canon[j] > 1 && cstrides[j] == t.stride(k))) ++j;
      if (j == rank || used[j]) return {};
      int first = j;
      if (start[j] + t.size(k) > canon[j]) {  // a run of whole dims, merged
        int64_t merged = canon[j];
        while (merged < t.size(k) && first > 0) merged *= canon[--first];
        if (merged != t.size(k)) return {};
        int varying_dims = 0;  // (XLA merges one varying dim with static ones, its elements first)
        for (int i = first; i <= j; ++i) {
          if (used[i] || start[i] != 0) return {};
          varying_dims += canon[i] != bounds[i];
        }
        if (varying_dims > 1) return {};
      }
      // (a varying dim of the view is all of its dim: it keeps the bucket)
      if ((varying >> k & 1) && start[j] != 0) return {};
      for (int i = first; i <= j; ++i) used[i] = true;
      map[k] = {first, j};
    }
  }
  return map;
}

}  // namespace

at::Tensor BucketedOperands::substitute(const at::Tensor& t) {
  if (!t.defined() || t.device().type() != c10::DeviceType::PrivateUse1) return t;
  const c10::StorageImpl* impl = t.storage().unsafeGetStorageImpl();
  std::shared_ptr<const TpuStorage::Padded> padded = storage_of(t).padded();
  if (!padded) return t;
  if (to_hlo(t.scalar_type()) != padded->type.dtype || t.is_conj() || t.is_neg()) {
    usable_ = false;  // another dtype's view, or a math bit
    return t;
  }
  const Proxy* proxy = nullptr;
  for (const Proxy& p : proxies_) {
    if (p.storage == impl) proxy = &p;
  }
  if (proxy == nullptr) {
    at::Tensor whole = padded->deferred ? tensor_from_deferred(padded->deferred, padded->bounds, t.scalar_type(),
                                                               device_, {}, padded->checks)
                                        : tensor_from_buffer(padded->buffer, padded->type, padded->bounds,
                                                             t.scalar_type(), device_, {}, padded->checks);
    proxies_.push_back({impl, padded, whole});
    proxy = &proxies_.back();
  }
  if (full_view(t, *padded)) {
    // A varying dim of size 1 would broadcast at its actual size only.
    for (size_t d = 0; d < padded->sizes.size(); ++d) {
      if (padded->sizes[d] != padded->bounds[d] && padded->sizes[d] <= 1) usable_ = false;
    }
    const c10::TensorImpl* whole = proxy->tensor.unsafeGetTensorImpl();
    if (std::none_of(dim_symbols_.begin(), dim_symbols_.end(), [&](const auto& e) { return e.first == whole; })) {
      dim_symbols_.emplace_back(whole, note_dims(padded->sizes, padded->bounds, {}));
    }
    return proxy->tensor;
  }
  // Another view (the last position of a growing sequence, a transpose or
  // an expansion of a growing tensor): read at its strides and offset, which
  // are run-time operands. A dim of it that spans a varying dim of the
  // storage's tensor (its size and contiguous stride) varies too: the proxy
  // has the bucket's size there. Its other sizes are the proxy's (so a view
  // whose sizes vary otherwise still compiles per size).
  const std::vector<int64_t>& canon = padded->sizes;
  const c10::DimVector cstrides = c10::contiguous_strides(canon);
  std::vector<int64_t> sizes = t.sizes().vec();
  uint64_t varying = 0;
  for (int64_t k = 0; k < t.dim() && k < 64; ++k) {
    for (size_t j = 0; j < canon.size(); ++j) {
      if (canon[j] != padded->bounds[j] && canon[j] > 1 && t.size(k) == canon[j] && t.stride(k) == cstrides[j]) {
        sizes[k] = padded->bounds[j];
        varying |= uint64_t{1} << k;
      }
    }
  }
  EagerProgram::Dims dims = refined_dims(t, *padded);
  std::vector<EagerProgram::ViewDim> map = view_map(t, dims, varying);
  if (dims.sizes.size() == canon.size()) dims = {};  // (nothing split)
  const std::vector<int64_t>& rsizes = dims.sizes.empty() ? canon : dims.sizes;
  const std::vector<int64_t>& rbounds = dims.sizes.empty() ? padded->bounds : dims.bounds;
  // A dim merging a varying dim with static ones (batch and sequence, as a
  // linear layer flattens them) varies with it: the proxy has the merged
  // bounds, the symbol is the varying dim's, times the static sizes.
  std::vector<int64_t> multiplier(t.dim(), 1);
  std::vector<bool> outer(t.dim(), false);
  for (size_t k = 0; k < map.size(); ++k) {
    if (map[k].first < 0 || map[k].first == map[k].last) continue;
    int64_t bound = 1, static_part = 1;
    bool any = false;
    for (int i = map[k].first; i <= map[k].last; ++i) {
      bound *= rbounds[i];
      if (rsizes[i] != rbounds[i]) {
        any = true;
        outer[k] = i == map[k].first;
      } else {
        static_part *= rsizes[i];
      }
    }
    if (!any) continue;
    sizes[k] = bound;
    varying |= uint64_t{1} << k;
    multiplier[k] = static_part;
  }
  // Its own strides keep the view's layout; the program reads the actual ones.
  std::vector<int64_t> strides = dense_strides_like(t, sizes);
  int64_t extent = 1;
  for (size_t d = 0; d < sizes.size(); ++d) extent += (sizes[d] - 1) * strides[d];
  if (extent > padded->type.numel()) std::fill(strides.begin(), strides.end(), 0);  // (cannot pass the storage)
  at::Tensor v = proxy->tensor.as_strided(sizes, strides, 0);
  views_.push_back({v, t, varying, std::move(map), std::move(dims)});
  dim_symbols_.emplace_back(v.unsafeGetTensorImpl(), note_dims(t.sizes().vec(), sizes, multiplier, outer));
  return v;
}

std::vector<int64_t> dense_strides_like(const at::Tensor& t, c10::IntArrayRef sizes) {
  std::vector<int64_t> order(t.dim());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) { return t.stride(x) < t.stride(y); });
  std::vector<int64_t> strides(t.dim(), 0);
  int64_t next = 1;
  for (int64_t d : order) {
    if (t.stride(d) == 0 && t.size(d) > 1) continue;
    strides[d] = next;
    next *= sizes[d];
  }
  return strides;
}

std::vector<BucketedOperands::DimSymbol> BucketedOperands::note_dims(const std::vector<int64_t>& actual,
                                                                      const std::vector<int64_t>& bucket,
                                                                      const std::vector<int64_t>& multiplier,
                                                                      const std::vector<bool>& outer) {
  std::vector<DimSymbol> out(actual.size());
  for (size_t d = 0; d < actual.size(); ++d) {
    if (actual[d] == bucket[d]) continue;
    const int64_t m = multiplier.empty() ? 1 : multiplier[d];
    size_t s = 0;
    while (s < symbols_.size() && symbols_[s].actual != actual[d] / m) ++s;
    if (s == symbols_.size()) symbols_.push_back({actual[d] / m, bucket[d] / m});
    out[d] = {static_cast<int>(s), m, !outer.empty() && outer[d] && m > 1};
  }
  return out;
}

bool BucketedOperands::varies_outermost(size_t symbol, int64_t multiplier) const {
  for (const auto& [impl, dims] : dim_symbols_) {
    for (const DimSymbol& s : dims) {
      if (s.symbol == static_cast<int>(symbol) && s.multiplier == multiplier && s.outer) return true;
    }
  }
  return false;
}

std::optional<BucketedOperands::SymbolDim> BucketedOperands::symbol_dim(size_t symbol) const {
  for (const auto& [impl, dims] : dim_symbols_) {
    for (size_t d = 0; d < dims.size(); ++d) {
      if (dims[d].symbol != static_cast<int>(symbol)) continue;
      for (const Proxy& p : proxies_) {
        if (p.tensor.unsafeGetTensorImpl() == impl) return SymbolDim{p.tensor, static_cast<int64_t>(d), dims[d].multiplier};
      }
      for (const View& v : views_) {
        if (v.proxy.unsafeGetTensorImpl() == impl) return SymbolDim{v.proxy, static_cast<int64_t>(d), dims[d].multiplier};
      }
    }
  }
  return std::nullopt;
}

std::optional<std::vector<int64_t>> BucketedOperands::probe_sizes(const at::Tensor& proxy, size_t symbol) const {
  for (const auto& [impl, dims] : dim_symbols_) {
    if (impl != proxy.unsafeGetTensorImpl()) continue;
    std::vector<int64_t> sizes = proxy.sizes().vec();
    bool any = false;
    for (size_t d = 0; d < dims.size(); ++d) {
      if (dims[d].symbol == static_cast<int>(symbol)) {
        sizes[d] -= dims[d].multiplier;
        any = true;
      }
    }
    if (any) return sizes;
    return std::nullopt;
  }
  return std::nullopt;
}

bool BucketedOperands::rows_of(const at::Tensor& proxy) {
  if (views_.size() != 1 || proxies_.size() != 1 || views_[0].proxy.unsafeGetTensorImpl() != proxy.unsafeGetTensorImpl()) {
    return false;
  }
  View& v = views_[0];
  if (v.map.empty() || !(v.varying & 1) || v.map[0].first == v.map[0].last || v.varying != 1) return false;
  // The varying dim must be the merge's innermost (batch, then sequence):
  // only then are the padded value's rows, as they lie, the bucket layout
  // of (the static dims, the varying one). A sequence-major merge has its
  // padding rows after the static ones' and is read compacted.
  const TpuStorage::Padded& p = *proxies_[0].padded;
  const bool refined = !v.dims.sizes.empty();
  const int last = v.map[0].last;
  const int64_t size = refined ? v.dims.sizes[last] : p.sizes[last];
  const int64_t bound = refined ? v.dims.bounds[last] : p.bounds[last];
  if (size == bound) return false;
  v.rows = true;
  return true;
}

void BucketedOperands::describe(c10::List<int64_t>& key) const {
  for (const Proxy& p : proxies_) {
    for (size_t d = 0; d < p.padded->sizes.size(); ++d) key.push_back(p.padded->sizes[d] != p.padded->bounds[d]);
    key.push_back(-1);
  }
  for (const View& v : views_) {
    key.push_back(static_cast<int64_t>(v.varying) * 4 + v.rows * 2 + (v.view.storage_offset() == 0));
    key.push_back(static_cast<int64_t>(v.map.size()));
    for (const EagerProgram::ViewDim& d : v.map) {
      key.push_back(d.first);
      key.push_back(d.last);
    }
    for (size_t d = 0; d < v.dims.bounds.size(); ++d) {  // (the split, in the map's terms)
      key.push_back(v.dims.bounds[d]);
      key.push_back(v.dims.origin[d]);
    }
    key.push_back(-4);
  }
  key.push_back(-2);
  for (const auto& [impl, dims] : dim_symbols_) {
    for (const DimSymbol& s : dims) {
      key.push_back(s.symbol);
      if (s.symbol >= 0) key.push_back(s.multiplier * 2 + s.outer);
    }
    key.push_back(-3);
  }
}

std::optional<std::vector<at::Tensor>> BucketedOperands::run(const void* tag, uint32_t globals, uint64_t numbers,
                                                             c10::ArrayRef<c10::IValue> key,
                                                             c10::ArrayRef<c10::IValue> actual,
                                                             const Build& build) const {
  const std::optional<OpSignature> sig = signature_for(tag, globals, key, numbers);
  if (!sig) return std::nullopt;
  if (std::shared_ptr<const ProgramPlan> kept = find_plan(*sig, key)) {
    BoundProgram bound = bind_plan(*kept, *sig, actual, device_);
    return launch(kept, bound, device_);
  }
  EagerProgram p(device_, &*sig);
  for (const Proxy& px : proxies_) p.dynamic_storage(px.tensor, px.padded->sizes);
  for (const View& v : views_) p.dynamic_view(v.proxy, v.view, v.varying, v.map, v.dims, v.rows);
  if (!build(p, *sig)) return std::nullopt;
  return p.run(actual);
}

Value split_exit(hlo::Builder& b, Value v, const OutputShape& o, Value n) {
  const size_t varying = static_cast<size_t>(o.split) + (o.outer ? 0 : 1);
  std::vector<Value> dims;
  for (size_t d = 0; d < o.bounds.size(); ++d) {
    dims.push_back(b.reshape(d == varying ? n : b.constant_int(o.bounds[d], hlo::DType::I32), {1}));
  }
  hlo::Type bounded{b.dtype(v), o.bounds};
  bounded.bounded = uint64_t{1} << varying;
  return b.retype(b.dynamic_reshape(v, b.concatenate(dims, 0), bounded), hlo::Type{b.dtype(v), o.bounds});
}

Value padded_exit(hlo::Builder& b, Value v, const std::vector<int64_t>& bounds) {
  // A value whose dims vary leaves through a bounded type set to its bound
  // (a static type alone would leave a dynamic buffer no later program
  // accepts): an ordinary buffer, each dim's elements first.
  const hlo::Type t = b.type(v);
  for (int64_t d = 0; d < t.rank(); ++d) {
    hlo::Type bounded = t;
    bounded.bounded = uint64_t{1} << d;
    v = b.set_dimension_size(b.retype(v, bounded), b.constant_int(t.dims[d], hlo::DType::I32), d);
  }
  hlo::Dims high(t.rank(), 0);
  bool pads = false;
  for (int64_t d = 0; d < t.rank(); ++d) {
    if (bounds[d] < t.dims[d]) v = b.slice_dim(v, d, 0, bounds[d]);
    if (bounds[d] > t.dims[d]) {
      high[d] = bounds[d] - t.dims[d];
      pads = true;
    }
  }
  if (pads) v = b.pad(v, b.zeros(hlo::Type{t.dtype, {}}), hlo::Dims(t.rank(), 0), high);
  return v;
}

at::Tensor bucketed_result(const at::Tensor& r, c10::IntArrayRef sizes, std::vector<int64_t> bounds, int device) {
  if (bounds == sizes.vec()) return r.view(sizes);
  return padded_tensor(make_padded(storage_of(r).raw_value(), sizes.vec(), std::move(bounds)), r.scalar_type(),
                       device);
}

std::optional<at::Tensor> padded_value_of(const at::Tensor& t) {
  if (!bucketing_enabled() || !t.defined() || t.device().type() != c10::DeviceType::PrivateUse1) return std::nullopt;
  std::shared_ptr<const TpuStorage::Padded> p = storage_of(t).padded();
  if (!p || t.storage_offset() != 0 || !t.is_contiguous() || to_hlo(t.scalar_type()) != p->type.dtype ||
      t.is_conj() || t.is_neg()) {
    return std::nullopt;
  }
  // t's sizes are the storage tensor's, up to dims of size 1 (a flat
  // index list read as [1, n]); its bounds are theirs in t's shape.
  std::vector<int64_t> bounds;
  size_t j = 0;
  for (int64_t d = 0; d < t.dim(); ++d) {
    while (j < p->sizes.size() && p->sizes[j] == 1 && p->bounds[j] == 1 && t.size(d) != 1) ++j;
    if (j < p->sizes.size() && p->sizes[j] == t.size(d)) {
      bounds.push_back(p->bounds[j++]);
    } else if (t.size(d) == 1) {
      bounds.push_back(1);
    } else {
      return std::nullopt;
    }
  }
  while (j < p->sizes.size() && p->sizes[j] == 1 && p->bounds[j] == 1) ++j;
  if (j != p->sizes.size()) return std::nullopt;
  const int device = t.device().has_index() ? t.device().index() : 0;
  return p->deferred ? tensor_from_deferred(p->deferred, bounds, t.scalar_type(), device, {}, p->checks)
                     : tensor_from_buffer(p->buffer, p->type, bounds, t.scalar_type(), device, {}, p->checks);
}

at::Tensor as_padded(const at::Tensor& bucket, c10::IntArrayRef sizes) {
  TORCH_CHECK(bucket.defined() && bucket.device().type() == c10::DeviceType::PrivateUse1 &&
                  bucket.storage_offset() == 0 && bucket.is_contiguous() && !bucket.is_conj() && !bucket.is_neg() &&
                  static_cast<size_t>(bucket.numel()) * bucket.element_size() == bucket.storage().nbytes(),
              "torch_tpu._as_padded: the bucket must be a contiguous tpu tensor covering its storage");
  TORCH_CHECK(static_cast<int64_t>(sizes.size()) == bucket.dim(), "torch_tpu._as_padded: sizes ", sizes,
              " and the bucket ", bucket.sizes(), " differ in rank");
  std::vector<int64_t> bounds = bucket.sizes().vec();
  for (size_t d = 0; d < bounds.size(); ++d) {
    TORCH_CHECK(sizes[d] == bounds[d] || (sizes[d] >= 2 && bucket_of(sizes[d]) == bounds[d]),
                "torch_tpu._as_padded: dim ", d, " of size ", sizes[d], " cannot be held in a bucket of ", bounds[d],
                " (its bucket is ", bucket_of(sizes[d]), ")");
  }
  const int device = bucket.device().has_index() ? bucket.device().index() : 0;
  return bucketed_result(bucket, sizes, std::move(bounds), device);
}

bool copy_bucketed(const at::Tensor& src, const at::Tensor& dst) {
  if (!bucketing_enabled() || !src.sizes().equals(dst.sizes()) || src.is_complex() || dst.is_complex() ||
      dst.storage_offset() != 0 || !dst.is_contiguous() || dst.is_conj() || dst.is_neg() ||
      static_cast<size_t>(dst.numel()) * dst.element_size() != dst.storage().nbytes() || dst.is_alias_of(src)) {
    return false;
  }
  const int device = dst.device().has_index() ? dst.device().index() : 0;
  BucketedOperands ops(device);
  const at::Tensor proxy = ops.substitute(src);
  if (!ops.any() || !ops.usable()) return false;
  // The result varies where the source does: its bounds are the proxy's.
  std::vector<bool> varying(dst.dim());
  for (int64_t d = 0; d < dst.dim(); ++d) varying[d] = proxy.size(d) != src.size(d);
  std::vector<int64_t> bounds = bounds_of(dst.sizes(), varying);
  c10::List<int64_t> described;
  ops.describe(described);
  static const char kTag = 0;  // names these programs in the memo
  const c10::IValue key[3] = {proxy, static_cast<int64_t>(dst.scalar_type()), std::move(described)};
  const c10::IValue actual[3] = {src, key[1], key[2]};
  std::optional<std::vector<at::Tensor>> results =
      ops.run(&kTag, 0, 0, key, actual, [&](EagerProgram& p, const OpSignature& sig) {
        hlo::Builder& b = p.builder();
        Value v = b.convert(p.input(proxy, {0, -1}), to_hlo(dst.scalar_type()));
        auto plan = p.finish({padded_exit(b, v, bounds)});
        if (plan->replayable) keep_plan(sig, key, {}, plan);
        return true;
      });
  if (!results) return false;
  at::Tensor r = bucketed_result((*results)[0], dst.sizes(), std::move(bounds), device);
  // dst takes the result's value (its storage is all of dst).
  TpuStorage& from = storage_of(r);
  if (auto padded = from.padded()) {
    storage_of(dst).set_padded(padded);
  } else {
    TpuStorage::Value v = from.raw_value();
    if (v.deferred) {
      storage_of(dst).set_deferred(std::move(v.deferred), std::move(v.checks));
    } else {
      storage_of(dst).set_value(std::move(v.buffer), std::move(v.type), std::move(v.checks));
    }
  }
  return true;
}

namespace {

thread_local bool exact_new = false;  // set_exact_new_tensors
constexpr int kWindowRead = 3;        // recent_varying_dims' kind for runs read by ops
thread_local const at::Tensor* like_source = nullptr;  // LikeFill

// The kind of a new tensor: what makes it (`kind`), its dtype, rank and
// device, and the Python line that asked for it (a batch index and a
// sequence's positions are both aranges, from different lines).
// `in_torch`: the line is PyTorch's own code.
int64_t recent_key(int kind, const at::Tensor& t, bool* in_torch) {
  const int device = t.device().has_index() ? t.device().index() : 0;
  const int64_t what =
      ((static_cast<int64_t>(kind) * 64 + static_cast<int64_t>(t.scalar_type())) * 16 + t.dim()) * 4096 + device;
  // (runs read from a buffer: of the same buffer, a persistent one; a new
  // tensor's runs read at new lengths are new shapes, not a buffer's steps)
  const uint64_t buffer = kind == kWindowRead ? storage_of(t).serial() * 0x9e3779b97f4a7c15ULL : 0;
  return static_cast<int64_t>(python_call_site(in_torch) ^ static_cast<uint64_t>(what) ^ buffer);
}

// Which dims of new tensor `t` (made by `kind`) vary, from the last sizes
// seen of its kind (recent_key): those that two recent tensors and this
// one give three sizes, agreeing on every other dim (a mask made at each
// length of a sequence, the token ids of prompts of several lengths). A
// lone new size, tensors of unrelated shapes and tensors made by PyTorch's
// own code stay exact; a size seen recently keeps its answer unless it was
// exact and sizes now vary around it. None: empty.
std::vector<bool> recent_varying_dims(int kind, const at::Tensor& t) {
  const c10::IntArrayRef sizes = t.sizes();
  const size_t rank = sizes.size();
  if (rank == 0 || rank > 8 || exact_new) return {};
  bool in_torch = false;
  const int64_t key = recent_key(kind, t, &in_torch);  // (only now: it looks at the Python frame)
  // What PyTorch's own code makes or moves is state, not a sequence's
  // inputs: a module's buffers under module.to, a checkpoint's tensors
  // under torch.load, an optimizer's state.
  if (in_torch) return {};
  struct Seen {
    std::array<int64_t, 8> sizes{};  // (zero-filled past the rank; all zero: none)
    uint8_t varying = 0;             // what was decided for them
  };
  using Ring = std::array<Seen, 8>;  // the last distinct sizes, most recent first
  static std::mutex mu;
  static std::unordered_map<int64_t, Ring> recent;
  std::array<int64_t, 8> now{};
  std::copy(sizes.begin(), sizes.end(), now.begin());
  auto as_bits = [&](uint8_t bits) {
    std::vector<bool> v;
    for (size_t d = 0; d < rank && bits != 0; ++d) v.push_back(bits >> d & 1);
    if (bits != 0) v.resize(rank);
    return v;
  };
  std::lock_guard<std::mutex> lock(mu);
  if (recent.size() > 4096) recent.clear();
  Ring& ring = recent[key];
  // Which dims vary among `now` and two distinct sizes of the ring
  // (other than entry `skip`) that agree with it on every other dim.
  auto three_sizes = [&](size_t skip) {
    uint8_t varying = 0;
    for (size_t i = 0; i < ring.size() && ring[i].sizes[0] > 0; ++i) {
      for (size_t j = i + 1; j < ring.size() && ring[j].sizes[0] > 0; ++j) {
        if (i == skip || j == skip) continue;
        uint8_t three = 0;
        bool related = true;
        for (size_t d = 0; d < rank && related; ++d) {
          const int64_t x = now[d], y = ring[i].sizes[d], z = ring[j].sizes[d];
          const bool differ = x != y && y != z && x != z && x > 1;
          if (differ) three |= uint8_t(1) << d;
          related = differ || (x == y && y == z);
        }
        if (related && three != 0) varying = three;
      }
    }
    return varying;
  };
  // A size seen recently keeps a padded answer (a mask of the token ids'
  // length is padded as they are) and an exact one while nothing else
  // varies (a batch index made at every step); an exact size becomes padded
  // once the sizes around it vary (a length seen once in an earlier loop,
  // met again in a loop that grows through it).
  auto seen = std::find_if(ring.begin(), ring.end(), [&](const Seen& e) { return e.sizes == now; });
  if (seen != ring.end()) {
    if (seen->varying == 0) seen->varying = three_sizes(static_cast<size_t>(seen - ring.begin()));
    std::rotate(ring.begin(), seen, seen + 1);
    return as_bits(ring[0].varying);
  }
  const uint8_t varying = three_sizes(ring.size());
  std::rotate(ring.rbegin(), ring.rbegin() + 1, ring.rend());
  ring[0] = {now, varying};
  return as_bits(varying);
}

}  // namespace

bool window_length_varies(const at::Tensor& window) {
  const std::vector<bool> varying = recent_varying_dims(kWindowRead, window);
  return !varying.empty() && varying[0] && std::count(varying.begin(), varying.end(), true) == 1;
}

namespace {

// A new tensor that holds its whole storage, densely.
bool covers_own_storage(const at::Tensor& t) {
  return t.numel() > 0 && t.storage_offset() == 0 && t.is_contiguous() && !t.is_complex() &&
         static_cast<size_t>(t.numel()) * t.element_size() == t.storage().nbytes() && !storage_of(t).padded();
}

}  // namespace

bool grow_arange(c10::ArrayRef<c10::IValue> args) {
  if (!bucketing_enabled() || args.size() != 4 || !args[3].isTensor() || !args[0].isInt() || !args[1].isInt() ||
      !args[2].isInt() || args[0].toInt() != 0 || args[2].toInt() != 1) {
    return false;
  }
  const at::Tensor& out = args[3].toTensor();
  const int64_t n = args[1].toInt();
  const at::ScalarType dtype = out.scalar_type();
  if (n < 2 || !(dtype == at::kLong || dtype == at::kInt) || out.dim() != 1 || (out.size(0) != n && out.numel() != 0)) {
    return false;
  }
  if (out.size(0) != n) at::native::resize_output(out, {n});  // (torch.arange hands over an empty tensor)
  if (out.size(0) != n ||
      out.storage_offset() != 0 || out.stride(0) != 1 || static_cast<size_t>(n) * out.element_size() != out.storage().nbytes()) {
    return false;
  }
  // (a sequence's positions at each length of it: at the third length)
  if (recent_varying_dims(2, out).empty()) return false;
  const int device = out.device().has_index() ? out.device().index() : 0;
  // Its first n elements are 0, ..., n - 1 whatever n is: iota at the bucket.
  const int64_t bound = bucket_of(n);
  auto b = std::make_shared<hlo::Builder>();
  const Value v = b->iota(hlo::Type{to_hlo(dtype), {bound}}, 0);
  storage_of(out).set_padded(make_padded(make_value(b, v, device), {n}, {bound}));
  explain_padded("an arange", out.sizes(), {bound});
  return true;
}

bool set_exact_new_tensors(bool on) {
  const bool was = exact_new;
  exact_new = on;
  return was;
}

LikeFill::LikeFill(const at::Tensor& source) : previous_(like_source) { like_source = &source; }
LikeFill::~LikeFill() { like_source = previous_; }

bool grow_fill(c10::ArrayRef<c10::IValue> args) {
  if (!bucketing_enabled() || args.empty() || args.size() > 2 || !args[0].isTensor() ||
      (args.size() == 2 && !args[1].isScalar())) {
    return false;
  }
  const at::Tensor& self = args[0].toTensor();
  if (!covers_own_storage(self)) return false;
  std::vector<int64_t> bounds;
  if (like_source != nullptr) {
    // Padded as its source is, or exact.
    const at::Tensor& source = *like_source;
    if (source.device() != self.device() || source.storage_offset() != 0 || !source.is_contiguous()) return false;
    const auto padded = storage_of(source).padded();
    if (padded == nullptr || padded->sizes != self.sizes()) return false;
    bounds = padded->bounds;
  } else {
    // (A float fill at changing sizes is as often a long-lived buffer, a
    // parameter's shard or an optimizer's state, as a mask: it stays exact.)
    if (!(c10::isIntegralType(self.scalar_type(), /*includeBool=*/true))) return false;
    const std::vector<bool> varying = recent_varying_dims(0, self);
    if (varying.empty()) return false;
    bounds = bounds_of(self.sizes(), varying);
  }
  // The same number everywhere, whatever the sizes: a value of the bounds,
  // the number a run-time operand (one program per bucket and dtype).
  const int device = self.device().has_index() ? self.device().index() : 0;
  const hlo::Type scalar{to_hlo(self.scalar_type()), {}};
  TpuStorage::Value number{exec::Runtime::get().scalar_buffer(
                               scalar.dtype, scalar_bits(args.size() == 2 ? args[1].toScalar() : c10::Scalar(0), scalar.dtype), device),
                           scalar, nullptr, {}};
  auto b = std::make_shared<hlo::Builder>();
  const Value v = b->broadcast_in_dim(b->param(scalar), bounds, {});
  storage_of(self).set_padded(make_padded(apply_program(b, v, number, device), self.sizes().vec(), bounds));
  explain_padded("a fill", self.sizes(), bounds);
  return true;
}

bool pad_upload(const at::Tensor& dst, const at::Tensor& host) {
  // Token ids and masks; and 1-D floats (an embedding bag's per-sample
  // weights, beside its padded ids). A float upload of more dims at
  // changing sizes is as often a batch of a model's inputs whose ops are
  // not bucketable as one that is: it stays exact.
  const bool ids = dst.scalar_type() == at::kLong || dst.scalar_type() == at::kBool;
  const bool weights = c10::isFloatingType(dst.scalar_type()) && dst.dim() == 1;
  if (!bucketing_enabled() || !(ids || weights) ||
      dst.dim() > 3 || !covers_own_storage(dst) || !host.is_contiguous() || host.sizes() != dst.sizes() ||
      host.scalar_type() != dst.scalar_type()) {
    return false;
  }
  const std::vector<bool> varying = recent_varying_dims(1, dst);
  if (varying.empty()) return false;
  // Padded on the host: the transfer is the only work.
  const std::vector<int64_t> bounds = bounds_of(dst.sizes(), varying);
  at::Tensor padded = at::zeros(bounds, host.options());
  at::Tensor inner = padded;
  for (int64_t d = 0; d < dst.dim(); ++d) inner = inner.narrow(d, 0, dst.size(d));
  inner.copy_(host);
  const auto& rt = exec::Runtime::get();
  const int device = dst.device().has_index() ? dst.device().index() : 0;
  const hlo::Type type{to_hlo(dst.scalar_type()), bounds};
  pjrt::BufferPtr buf = rt.client().from_host(padded.data_ptr(), exec::to_pjrt(type.dtype), type.dims, rt.device(device));
  storage_of(dst).set_padded(make_padded(TpuStorage::Value{std::move(buf), type, nullptr, {}}, dst.sizes().vec(), bounds));
  explain_padded("an upload", dst.sizes(), bounds);
  return true;
}

void pad_if_growing(at::Tensor& r, int64_t dim, size_t num_inputs, const at::Tensor& first) {
  if (!bucketing_enabled() || !r.defined() || r.dim() == 0 || r.numel() == 0 || !r.is_contiguous() ||
      r.storage_offset() != 0 || r.is_complex() || !first.defined() ||
      first.device().type() != c10::DeviceType::PrivateUse1) {
    return;
  }
  dim = c10::maybe_wrap_dim(dim, r.dim());
  std::string key = std::to_string(static_cast<int>(r.scalar_type())) + ":" + std::to_string(dim) + ":" +
                    std::to_string(num_inputs);
  for (int64_t d = 0; d < r.dim(); ++d) {
    key += ',';
    if (d == dim) {
      key += '*';
    } else {
      key += std::to_string(r.size(d));
    }
  }
  // Per key, the storages of its last results and their sizes along dim. A
  // concatenation onto one of them, or onto a tensor of one of their sizes
  // (a result reordered in between: a beam search's index_select of its
  // KV cache), grows a sequence.
  struct Result {
    uint64_t storage = 0;
    int64_t size = -1;
  };
  static std::mutex mu;
  static std::unordered_map<std::string, std::array<Result, 8>> recent;
  const uint64_t onto = storage_of(first).serial();
  const int64_t onto_size = first.dim() == r.dim() ? first.size(dim) : -2;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (recent.size() > 4096) recent.clear();
    std::array<Result, 8>& ring = recent[key];
    const bool grows = std::any_of(ring.begin(), ring.end(), [&](const Result& x) {
      return x.storage == onto || x.size == onto_size;
    });
    if (!grows) {  // (a padded result is a new storage)
      std::rotate(ring.rbegin(), ring.rbegin() + 1, ring.rend());
      ring[0] = {storage_of(r).serial(), r.size(dim)};
      return;
    }
  }
  std::vector<bool> varying(r.dim());
  varying[dim] = true;
  std::vector<int64_t> bounds = bounds_of(r.sizes(), varying);
  TpuStorage::Value v = storage_of(r).raw_value();
  if (!v.buffer && !v.deferred) return;
  auto b = std::make_shared<hlo::Builder>();
  Value value = b->reshape(b->param(v.type), r.sizes().vec());
  hlo::Dims high(r.dim(), 0);
  high[dim] = bounds[dim] - r.size(dim);
  value = b->pad(value, b->zeros(hlo::Type{v.type.dtype, {}}), hlo::Dims(r.dim(), 0), high);
  const int device = r.device().has_index() ? r.device().index() : 0;
  explain_padded("a growing concatenation", r.sizes(), bounds);
  r = padded_tensor(make_padded(apply_program(b, value, v, device), r.sizes().vec(), std::move(bounds)),
                    r.scalar_type(), device);
}

}  // namespace tpu
