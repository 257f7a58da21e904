#include "csrc/aten/kernels.h"
#include "csrc/aten/layouts.h"
#include "csrc/aten/executor_scope.h"

#include <ATen/Context.h>
#include <ATen/ExpandUtils.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/core/Tensor.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/empty_strided.h>
#include <c10/util/strides.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <unordered_map>
#include <unordered_set>

#include "csrc/aten/bucketed.h"
#include "csrc/aten/eager.h"
#include "csrc/aten/eager_args.h"
#include "csrc/aten/op_memo.h"
#include "csrc/aten/out_dtypes.h"
#include "csrc/aten/scalar_ranges.h"
#include "csrc/exec/executable_cache.h"
#include "csrc/lowering/lowering.h"

namespace tpu {

using hlo::Value;
using lowering::to_aten;
using lowering::to_hlo;

namespace {

struct Entry {
  lowering::LoweringFn fn = nullptr;
  VariantKind kind = VariantKind::Functional;
  std::string functional;
  size_t num_functional_args = 0;
  std::vector<size_t> out_args;  // Out: positions of the out arguments
  // The op refuses written tensors that share any memory with an input,
  // even fully (CPU's ops that gather, scatter or concatenate call
  // assert_no_overlap; elementwise ops only refuse partial overlap).
  bool refuses_full_overlap = false;
  // Advanced indexing: index tensors may be on the CPU (move_cpu_indices).
  bool takes_cpu_indices = false;
  // The lowering bakes no operand size into its program beyond its shapes,
  // so it may run at bucket shapes (bucketed programs, below).
  bool bucketable = false;
  char bucketed_tag = 0;  // its address names the op's bucketed programs in the memo
  uint64_t numbers = 0;   // bit i: argument i is a Scalar (OpSignature)
  bool grows_arange = false;  // arange.start_out: a growing arange is padded (grow_arange)
  bool grows_fill = false;    // fill_.Scalar: a fill at changing sizes is padded (grow_fill)
  int rows_operand = -1;      // mm, addmm: the matrix whose rows make the result's (BucketedOperands::rows_of)
  const ScalarRangeRule* scalar_ranges = nullptr;  // Scalars CPU converts with a range check (scalar_ranges.h)
};

// Ops whose CPU kernels refuse an output that is also an input.
bool refuses_full_overlap(const std::string& functional) {
  static const char* const kOps[] = {"cat", "stack", "index_select", "gather", "take", "masked_select", "index_add",
                                     "index_copy", "scatter", "scatter_add", "scatter_reduce", "put"};
  std::string base = functional.substr(functional.find("::") == std::string::npos ? 0 : functional.find("::") + 2);
  base = base.substr(0, base.find('.'));
  for (const char* op : kOps) {
    if (base == op) return true;
  }
  return false;
}

std::mutex g_entries_mu;
std::unordered_map<c10::OperatorName, Entry>& entries() {
  static auto* m = new std::unordered_map<c10::OperatorName, Entry>();
  return *m;
}

// The PrivateUse1 kernels of namespace `ns` ("aten", or "torch_tpu" for our
// own ops). Called under g_entries_mu.
torch::Library& library_for(const std::string& ns) {
  static auto* libs = new std::map<std::string, std::unique_ptr<torch::Library>>();
  auto& lib = (*libs)[ns];
  if (!lib) lib = std::make_unique<torch::Library>(torch::Library::IMPL, ns, c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
  return *lib;
}

// ---- devices -------------------------------------------------------------------

// (EagerArgs, the arguments as a lowering reads them: eager_args.h)

void for_each_tensor(const c10::IValue& v, const std::function<void(const at::Tensor&)>& f) {
  if (v.isTensor()) {
    f(v.toTensor());
  } else if (v.isTensorList()) {
    for (const at::Tensor& t : v.toTensorVector()) f(t);
  } else if (v.isList()) {
    for (const c10::IValue& e : v.toListRef()) {
      if (e.isTensor()) f(e.toTensor());
    }
  }
}

int op_device(const std::vector<c10::IValue>& args) {
  int device = -1;
  for (const c10::IValue& v : args) {
    for_each_tensor(v, [&](const at::Tensor& t) {
      if (device < 0 && is_tpu(t)) device = t.device().has_index() ? t.device().index() : 0;
    });
    if (device >= 0) return device;
  }
  for (const c10::IValue& v : args) {
    if (v.isDevice() && v.toDevice().type() == c10::DeviceType::PrivateUse1) {
      return v.toDevice().has_index() ? v.toDevice().index() : current_device();
    }
  }
  return current_device();
}

// ---- validation against PyTorch's meta kernels -------------------------------------

c10::IValue to_meta(const c10::IValue& v) {
  auto meta = [](const at::Tensor& t) -> at::Tensor {
    if (!t.defined() || !is_tpu(t)) return t;
    at::Tensor m = at::empty_strided(t.sizes(), t.strides(),
                                     at::TensorOptions().dtype(t.scalar_type()).device(at::kMeta));
    if (t.storage_offset() != 0) m = m.as_strided(t.sizes(), t.strides(), t.storage_offset());
    return m;
  };
  if (v.isTensor()) return meta(v.toTensor());
  if (v.isTensorList()) {
    c10::List<at::Tensor> out;
    for (const at::Tensor& t : v.toTensorVector()) out.push_back(meta(t));
    return out;
  }
  if (v.isList() && v.toList().elementType()->kind() == c10::TypeKind::OptionalType) {
    c10::List<std::optional<at::Tensor>> out;
    for (const c10::IValue& e : v.toListRef()) {
      out.push_back(e.isNone() ? std::nullopt : std::optional<at::Tensor>(meta(e.toTensor())));
    }
    return out;
  }
  if (v.isGenerator()) return c10::IValue();
  if (v.isDevice() && v.toDevice().type() == c10::DeviceType::PrivateUse1) return c10::Device(at::kMeta);
  return v;
}

// Runs the op on meta tensors: raises PyTorch's own error for invalid
// arguments and returns PyTorch's output shapes and dtypes. nullopt when the
// op has no meta kernel.
std::optional<std::vector<at::Tensor>> run_on_meta(const c10::OperatorHandle& op,
                                                   const std::vector<c10::IValue>& args) {
  torch::jit::Stack ms;
  ms.reserve(args.size());
  for (const c10::IValue& v : args) ms.push_back(to_meta(v));
  try {
    op.callBoxed(ms);
  } catch (const c10::NotImplementedError&) {
    return std::nullopt;
  }
  std::vector<at::Tensor> out;
  for (const c10::IValue& v : ms) for_each_tensor(v, [&](const at::Tensor& t) { out.push_back(t); });
  return out;
}

// PyTorch's meta kernels of the fused RNN cells read the optional biases
// unconditionally (an AttributeError for an LSTM without bias), _scaled_mm's
// asks for CUDA's multiples of 16 that CPU does not, and where's refuses the
// uint8 condition CPU still takes (deprecated); these lowerings check their
// arguments themselves.
bool meta_is_broken(const Entry& e, const std::vector<c10::IValue>& args) {
  // (and all's and any's out= refuse a bool out tensor for a uint8 input)
  const bool all_any = e.functional.rfind("aten::all", 0) == 0 || e.functional.rfind("aten::any", 0) == 0;
  if (e.functional == "aten::where.self" || (e.kind == VariantKind::Out && all_any)) {
    return !args.empty() && args[0].isTensor() && args[0].toTensor().scalar_type() == at::kByte;
  }
  return e.functional == "aten::_thnn_fused_lstm_cell" || e.functional == "aten::_thnn_fused_gru_cell" ||
         e.functional == "aten::_scaled_mm";
}


// Each result in PyTorch's layout (its meta kernel's strides: TensorIterator
// keeps the inputs' memory format, attention returns a transposed output,
// ...): where that is a dense permutation other than the contiguous one, the
// op produces the result in that order, so that strides, views, reshapes
// and later in-place writes behave as on CPU.
void lay_out_as(EagerProgram& p, const std::vector<at::Tensor>& meta, std::vector<Value>& outputs);

void lay_out_like_pytorch(const c10::OperatorHandle& op, const std::vector<c10::IValue>& args, const Entry& e,
                          EagerProgram& p, std::vector<Value>& outputs) {
  if (meta_is_broken(e, args)) return;
  std::optional<std::vector<at::Tensor>> meta;
  try {
    meta = run_on_meta(op, args);
  } catch (const std::exception&) {
    return;  // validate_once reports PyTorch's error
  }
  if (!meta) meta = without_meta_kernel(e.functional, args);
  if (!meta || meta->size() != outputs.size()) return;
  if (meta->size() == 1) {
    if (std::optional<at::Tensor> m = iterator_layout(op, e.functional, args)) (*meta)[0] = *m;
    if (std::optional<at::Tensor> m = roll_layout(e.functional, args)) (*meta)[0] = *m;
  }
  cpu_kernel_layouts(e.functional, args, *meta);
  lay_out_as(p, *meta, outputs);
}

// Lays each output out as its meta tensor's strides say (see
// lay_out_like_pytorch).
void lay_out_as(EagerProgram& p, const std::vector<at::Tensor>& meta, std::vector<Value>& outputs) {
  hlo::Builder& b = p.builder();
  for (size_t i = 0; i < outputs.size() && i < meta.size(); ++i) {
    const at::Tensor& m = meta[i];
    if (!outputs[i].valid() || !m.defined() || m.dim() < 1) continue;
    // The strides themselves, not is_contiguous(): that ignores the strides
    // of size-1 dims (and of every dim of an empty tensor), which CPU's
    // results keep and later broadcasting ops' layouts depend on.
    if (m.strides() == c10::IntArrayRef(c10::contiguous_strides(m.sizes()))) continue;
    if (m.sizes().vec() != b.dims(outputs[i])) continue;  // validate_once reports it
    std::optional<std::vector<int64_t>> order = memory_order(m.sizes(), m.strides());
    if (!order) continue;
    outputs[i] = b.transpose(outputs[i], *order);
    p.result_layout(i, m.sizes().vec(), m.strides().vec());
  }
}

std::mutex g_validated_mu;
std::unordered_set<uint64_t> g_validated;

// On the first run of each (op, program): check that PyTorch accepts these
// arguments and that our results have PyTorch's shapes and dtypes. A lowering
// bug becomes an error here instead of a wrong answer.
void validate_once(const c10::OperatorHandle& op, const std::vector<c10::IValue>& args,
                   const Entry& e, uint64_t program, const hlo::Builder& b, const std::vector<Value>& outputs) {
  const uint64_t key = program * 31 + std::hash<c10::OperatorName>()(op.operator_name());
  {
    std::lock_guard<std::mutex> lock(g_validated_mu);
    if (g_validated.count(key)) return;
  }
  if (meta_is_broken(e, args)) return;
  auto meta = run_on_meta(op, args);
  if (meta && e.kind == VariantKind::Functional) {
    TORCH_CHECK(meta->size() == outputs.size(), "torch_tpu internal error: the lowering of ",
                e.functional, " returned ", outputs.size(), " results; PyTorch returns ",
                meta->size());
    for (size_t i = 0; i < outputs.size(); ++i) {
      const at::Tensor& m = (*meta)[i];
      if (!outputs[i].valid() || !m.defined()) {
        TORCH_CHECK(outputs[i].valid() == m.defined(), "torch_tpu internal error: the lowering of ",
                    e.functional, " result ", i, " is ", outputs[i].valid() ? "defined" : "undefined",
                    " where PyTorch's is not");
        continue;
      }
      const hlo::Type& t = b.type(outputs[i]);
      // The saved statistics of batch and layer norm follow the CPU: in the
      // parameters' dtype (and empty in batch norm's evaluation); CUDA and
      // meta keep float (and batch norm's running statistics).
      const bool norm_stats = e.functional.find("batch_norm") != std::string::npos ||
                              e.functional == "aten::native_layer_norm";
      if (i > 0 && norm_stats && (t.numel() == 0 || m.sizes().vec() == t.dims)) continue;
      // multilabel_margin_loss of a 1-d input, reduction='none': CPU returns
      // a 0-d loss, the meta kernel a [1] one.
      if (i == 0 && e.functional == "aten::multilabel_margin_loss_forward" && t.dims.empty() &&
          m.sizes().vec() == std::vector<int64_t>{1})
        continue;
      TORCH_CHECK(m.sizes().vec() == t.dims && m.scalar_type() == to_aten(t.dtype),
                  "torch_tpu internal error: the lowering of ", e.functional, " produced result ",
                  i, " of shape ", lowering::dims_string(t.dims), " and dtype ", to_aten(t.dtype),
                  "; PyTorch expects shape ", m.sizes(), " and dtype ", m.scalar_type(),
                  ". Please report this; meanwhile the op can run on the CPU with "
                  "torch_tpu.set_cpu_fallback(True).");
    }
  }
  std::lock_guard<std::mutex> lock(g_validated_mu);
  g_validated.insert(key);
}

// ---- results -------------------------------------------------------------------------

// The tensors argument i writes (a tensor or a list of them), with their positions.
struct Target {
  at::Tensor tensor;
  ArgPosition pos;
};
void add_targets(std::vector<Target>& out, const std::vector<c10::IValue>& args, size_t i) {
  const c10::IValue& v = args[i];
  if (v.isTensor()) {
    out.push_back({v.toTensor(), {static_cast<int>(i), -1}});
  } else if (v.isList()) {
    int k = 0;
    for (const c10::IValue& e : v.toListRef()) {
      if (e.isTensor()) out.push_back({e.toTensor(), {static_cast<int>(i), k}});
      ++k;
    }
  }
}

// fill_(self, number) or zero_(self) of a contiguous run of a larger
// storage (a buffer's tail past a step's count): bucketed.h's write_window.
bool fill_window(c10::ArrayRef<c10::IValue> args) {
  if (args.empty() || args.size() > 2 || !args[0].isTensor() || (args.size() == 2 && !args[1].isScalar())) return false;
  const at::Tensor& self = args[0].toTensor();
  if (!self.defined() || self.device().type() != c10::DeviceType::PrivateUse1) return false;
  return write_window(self, nullptr, args.size() == 2 ? args[1].toScalar() : c10::Scalar(0));
}

// Whether an in-place op writes one number wherever it writes (masked_fill_,
// index_put_ of a single value without accumulate): into an expanded
// tensor, every alias of a location then writes the same value, and CPU
// allows it (with a deprecation warning).
bool writes_one_value(const std::string& functional, const std::vector<c10::IValue>& args) {
  if (functional == "aten::masked_fill.Scalar" || functional == "aten::masked_fill.Tensor") return true;
  if (functional != "aten::index_put" || args.size() < 4) return false;
  return args[2].isTensor() && args[2].toTensor().numel() == 1 && args[3].isBool() && !args[3].toBool();
}

void write_back(EagerProgram& p, at::Tensor& dst, Value v, bool inplace, ArgPosition pos,
                const std::string& functional, bool one_value = false) {
  hlo::Builder& b = p.builder();
  const at::ScalarType rt = to_aten(b.dtype(v));
  if (!c10::canCast(rt, dst.scalar_type())) {
    // (CPU's cat raises a TypeError for it, every other op a RuntimeError)
    TORCH_CHECK_TYPE(functional != "aten::cat", "torch.cat(): input types can't be cast to the desired output type ",
                     dst.scalar_type());
    TORCH_CHECK(false, "result type ", rt, " can't be cast to the desired output type ", dst.scalar_type());
  }
  if (dst.sizes().vec() != b.dims(v)) {
    TORCH_CHECK(!inplace, "output with shape ", dst.sizes(), " doesn't match the broadcast shape ",
                lowering::dims_string(b.dims(v)));
    at::native::resize_output(dst, b.dims(v));
    p.resized(pos, b.dims(v));
  }
  // A write where several elements share memory (an expanded tensor) is
  // refused, as TensorIterator refuses it, except a fill with one number
  // (fill_ of a Scalar, zero_), which CPU allows: every alias gets the same
  // value, so writing one element of each expanded dimension is the write.
  if (at::has_internal_overlap(dst) == at::MemOverlap::Yes) {
    const bool masked = one_value && !dst.is_complex();
    TORCH_CHECK(functional == "aten::fill.Scalar" || functional == "aten::zero" || masked,
                "unsupported operation: more than one element of the written-to tensor refers to a "
                "single memory location. Please clone() the tensor before performing the operation.");
    at::Tensor once = dst;
    Value vonce = v;
    hlo::Dims aliased;
    for (int64_t d = 0; d < dst.dim(); ++d) {
      if (dst.stride(d) == 0 && dst.size(d) > 1) {
        once = once.narrow(d, 0, 1);
        vonce = b.slice_dim(vonce, d, 0, 1);
        aliased.push_back(d);
      }
    }
    p.not_replayable();  // the view written is not the argument's own
    const hlo::DType dt = to_hlo(dst.scalar_type());
    if (masked) {
      // CPU (with a deprecation warning) writes the value wherever any
      // alias of a location is written: every write is the same number, so
      // a location holds it if any of its aliases differs from the old one.
      TORCH_WARN_ONCE("Use of ", functional == "aten::index_put" ? "index_put_" : "masked_fill_",
                      " on expanded tensors is deprecated. Please clone() the tensor before performing this "
                      "operation. This also applies to advanced indexing e.g. tensor[mask] = scalar");
      const Value vd = b.convert(v, dt);
      const Value old = p.input(once, pos);
      const Value old_all = b.broadcast_to(old, b.dims(vd));
      const bool is_pred = dt == hlo::DType::Pred;
      const hlo::DType bits_t = is_pred ? hlo::DType::Pred : hlo::int_type_of_width(hlo::bit_width(dt));
      auto bits = [&](Value x) { return is_pred || hlo::is_int(dt) ? x : b.bitcast_convert(x, bits_t); };
      const Value changed = b.compare(hlo::Cmp::NE, bits(vd), bits(old_all));
      const Value any = b.reshape(b.reduce(changed, b.constant_bool(false), aliased, "stablehlo.or"), b.dims(old));
      Value written;
      if (is_pred) {
        written = b.not_(old);
      } else {
        const Value low = b.lowest(bits_t);
        const Value picked = b.select(changed, bits(vd), b.broadcast_to(low, b.dims(vd)));
        written = b.reshape(b.reduce(picked, low, aliased, "stablehlo.maximum"), b.dims(old));
        if (!hlo::is_int(dt)) written = b.bitcast_convert(written, dt);
      }
      p.assign(once, b.select(any, written, old), pos);
      return;
    }
    p.assign(once, b.convert(vonce, dt), pos);
    return;
  }
  p.assign(dst, b.convert(v, to_hlo(dst.scalar_type())), pos);
}

// The thread's torch.tpu.precision scope, else the process default. (Op
// programs and fused graphs are memoized with it: op_memo.cpp.)
lowering::MatmulPrecision matmul_precision() {
  switch (scoped_precision().value_or(at::globalContext().float32MatmulPrecision())) {
    case at::Float32MatmulPrecision::HIGH: return lowering::MatmulPrecision::High;
    case at::Float32MatmulPrecision::MEDIUM: return lowering::MatmulPrecision::Medium;
    default: return lowering::MatmulPrecision::Highest;
  }
}

// ---- the CPU fallback ------------------------------------------------------------------

std::atomic<int> g_fallback_enabled{-1};  // -1: read TORCH_TPU_CPU_FALLBACK
std::mutex g_fallback_mu;
std::map<std::string, int64_t> g_fallback_counts;

std::string fallback_hint() {
  return "Enable the CPU fallback to run it on the host (slow: the data moves between host and "
         "device) with TORCH_TPU_CPU_FALLBACK=1 or torch_tpu.set_cpu_fallback(True).";
}

void run_cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  {
    std::lock_guard<std::mutex> lock(g_fallback_mu);
    ++g_fallback_counts[c10::toString(op.operator_name())];
  }
  at::native::cpu_fallback(op, stack);
}

// Replaces the op's arguments on the stack by its returns.
void push_returns(torch::jit::Stack* stack, const c10::FunctionSchema& schema, const Entry& e,
                  const std::vector<c10::IValue>& args, std::vector<at::Tensor> tensors) {
  torch::jit::drop(*stack, schema.arguments().size());
  const auto& returns = schema.returns();
  if (e.kind == VariantKind::Functional) {
    if (returns.size() == 1 && returns[0].type()->kind() == c10::TypeKind::ListType) {
      stack->emplace_back(c10::List<at::Tensor>(tensors));
    } else {
      for (at::Tensor& t : tensors) stack->emplace_back(std::move(t));
    }
  } else if (e.kind == VariantKind::Inplace) {
    if (!returns.empty()) stack->push_back(args[0]);
  } else {
    for (size_t k = 0; k < returns.size() && k < e.out_args.size(); ++k) {
      stack->push_back(args[e.out_args[k]]);
    }
  }
}

// CPU's rules for tensors an op writes (checked on every call, before any
// program runs, so a refused call writes nothing): an input that partially
// overlaps a written tensor is refused (TensorIterator's
// assert_no_partial_overlap; overlaps too hard to decide are allowed, as on
// CPU), and for the ops of refuses_full_overlap() any shared memory is.
void check_overlaps(const Entry& e, const std::vector<c10::IValue>& args, const c10::OperatorName& name) {
  // The tensors written (copies: for_each_tensor may hand out temporaries);
  // their storages are looked up linearly unless there are many (_foreach).
  std::vector<at::Tensor> written;
  auto add = [&](const at::Tensor& t) {
    if (t.defined() && t.has_storage()) written.push_back(t);
  };
  if (e.kind == VariantKind::Inplace) {
    for_each_tensor(args[0], add);
  } else {
    for (size_t k : e.out_args) for_each_tensor(args[k], add);
  }
  if (written.empty()) return;
  std::unordered_set<const c10::StorageImpl*> many;
  if (written.size() > 8) {
    for (const at::Tensor& w : written) many.insert(w.storage().unsafeGetStorageImpl());
  }
  auto is_written = [&](const c10::StorageImpl* s) {
    if (!many.empty()) return many.count(s) != 0;
    for (const at::Tensor& w : written) {
      if (w.storage().unsafeGetStorageImpl() == s) return true;
    }
    return false;
  };
  const size_t first = e.kind == VariantKind::Inplace ? 1 : 0;  // self is read and written
  for (size_t i = first; i < e.num_functional_args && i < args.size(); ++i) {
    for_each_tensor(args[i], [&](const at::Tensor& t) {
      if (!t.defined() || !t.has_storage() || !is_written(t.storage().unsafeGetStorageImpl())) return;
      for (const at::Tensor& w : written) {
        const at::MemOverlapStatus status = at::get_overlap_status(w, t);
        TORCH_CHECK(status != at::MemOverlapStatus::Partial &&
                        (status != at::MemOverlapStatus::Full || !e.refuses_full_overlap),
                    "unsupported operation: some elements of the input tensor and the written-to tensor refer to a "
                    "single memory location. Please clone() the tensor before performing the operation. (", name,
                    ": argument ", i, " overlaps the tensor it writes)");
      }
    });
  }
}

// index_put_ into a tensor with expanded (stride-0) dimensions, of values
// that differ (one value is write_back's masked case). CPU writes each value
// in turn, in the order of the indexing result, to the location its index
// names: a location shared by several elements ends with the last value
// written to any of them, or with accumulate, with all of them added. That
// is the same write into the tensor with one element of each expanded
// dimension: indices into those dimensions become 0 (the writes keep their
// order, and the last wins), and along the expanded dimensions that are not
// indexed the values keep their last (accumulate: their sum). Returns false
// where that does not apply (the caller's checks then decide).
bool index_put_into_expanded(const Entry& e, const std::vector<c10::IValue>& args) {
  if (e.kind != VariantKind::Inplace || args.size() < 4 || writes_one_value(e.functional, args)) return false;
  if (e.functional != "aten::index_put" && e.functional != "aten::_index_put_impl") return false;
  if (!args[0].isTensor() || !args[2].isTensor() || !args[3].isBool()) return false;
  const at::Tensor self = args[0].toTensor();
  if (at::has_internal_overlap(self) != at::MemOverlap::Yes) return false;
  at::Tensor once = self;
  std::vector<bool> aliased(self.dim(), false);
  for (int64_t d = 0; d < self.dim(); ++d) {
    if (self.stride(d) == 0 && self.size(d) > 1) {
      once = once.narrow(d, 0, 1);
      aliased[d] = true;
    }
  }
  if (at::has_internal_overlap(once) != at::MemOverlap::No) return false;  // (overlap of another kind)
  at::Tensor values = args[2].toTensor();
  TORCH_CHECK(values.scalar_type() == self.scalar_type(),
              "Index put requires the source and destination dtypes match, got ", self.scalar_type(),
              " for the destination and ", values.scalar_type(), " for the source.");
  const bool accumulate = args[3].toBool();
  // The indices per dimension of self, masks as the coordinates of their
  // true elements (as CPU expands them).
  std::vector<std::optional<at::Tensor>> per_dim;
  for (const c10::IValue& v : args[1].toListRef()) {
    if (!v.isTensor() || !v.toTensor().defined()) {
      per_dim.emplace_back();
      continue;
    }
    const at::Tensor idx = v.toTensor();
    if (idx.scalar_type() != at::kBool && idx.scalar_type() != at::kByte) {
      per_dim.emplace_back(idx);
      continue;
    }
    const int64_t first = static_cast<int64_t>(per_dim.size());
    for (int64_t j = 0; j < idx.dim(); ++j) {
      TORCH_CHECK_INDEX(first + j < self.dim() && idx.size(j) == self.size(first + j), "The shape of the mask ",
                        idx.sizes(), " at index ", j, " does not match the shape of the indexed tensor ",
                        self.sizes(), " at index ", first + j);
    }
    const at::Tensor coords = idx.nonzero();
    for (int64_t j = 0; j < idx.dim(); ++j) per_dim.emplace_back(coords.select(1, j));
  }
  TORCH_CHECK_INDEX(static_cast<int64_t>(per_dim.size()) <= self.dim(), "too many indices for tensor of dimension ",
                    self.dim(), " (got ", per_dim.size(), ")");
  per_dim.resize(self.dim());
  // The indexing result's shape and where self's other dims sit in it.
  std::vector<at::Tensor> defined;
  int64_t lo = -1, hi = -1;
  bool adjacent = true;
  for (int64_t d = 0; d < self.dim(); ++d) {
    if (!per_dim[d]) continue;
    if (hi >= 0 && hi != d - 1) adjacent = false;
    if (lo < 0) lo = d;
    hi = d;
    defined.push_back(*per_dim[d]);
  }
  if (defined.empty()) return false;
  std::vector<int64_t> shape = defined[0].sizes().vec();
  for (size_t k = 1; k < defined.size(); ++k) shape = at::infer_size(shape, defined[k].sizes());
  std::vector<int64_t> result, position(self.dim(), -1);
  if (!adjacent) result = shape;
  for (int64_t d = 0; d < self.dim(); ++d) {
    if (adjacent && d == lo) result.insert(result.end(), shape.begin(), shape.end());
    if (per_dim[d]) continue;
    position[d] = static_cast<int64_t>(result.size());
    result.push_back(self.size(d));
  }
  TORCH_CHECK(values.dim() <= static_cast<int64_t>(result.size()) &&
                  at::infer_size(values.sizes(), result) == result,
              "shape mismatch: value tensor of shape ", values.sizes(),
              " cannot be broadcast to indexing result of shape ", c10::IntArrayRef(result));
  TORCH_WARN_ONCE("Use of index_put_ on expanded tensors is deprecated. Please clone() the tensor before performing "
                  "this operation. This also applies to advanced indexing e.g. tensor[indices] = tensor");
  values = values.expand(result);
  c10::List<std::optional<at::Tensor>> indices;
  for (int64_t d = 0; d < self.dim(); ++d) {
    std::optional<at::Tensor> idx = per_dim[d];
    if (aliased[d] && idx) {
      // In range: 0. Out of range: kept, so that the write raises CPU's error.
      const int64_t n = self.size(d);
      idx = idx->new_zeros({}).where(idx->ge(-n).logical_and(idx->lt(n)), *idx);
    } else if (aliased[d]) {
      const int64_t at = position[d];
      values = accumulate ? (values.scalar_type() == at::kBool ? values.any(at, true) : values.sum(at, true, values.scalar_type()))
                          : values.narrow(at, self.size(d) - 1, 1);
    }
    indices.push_back(idx);
  }
  once.index_put_(indices, values, accumulate);
  return true;
}

void run_lowered(const Entry& e, const c10::OperatorHandle& op, torch::jit::Stack* stack);

// ---- bucketed programs (bucketed.h) ----------------------------------------------------

// What PyTorch's meta kernel says of a bucketed call's outputs, found once
// per bucketed signature: at the bucket sizes, and how each output dim
// moves when each varying size does (probing each one below its bucket).
// The whitelisted ops' output sizes are sums of input sizes, so an output
// at the actual sizes is its bucket size less, per varying size, its slope
// times the size's distance to its bucket. (Null: the call cannot run
// bucketed, e.g. an operand of an actual size meets a padded one.)
struct BucketShapes {
  struct Output {
    at::ScalarType dtype;
    std::vector<int64_t> perm;          // dims in memory order (PyTorch's layout)
    std::vector<int64_t> bucket_sizes;  // at the bucket sizes, in logical order
    std::vector<int64_t> sizes;         // the same, in memory order
    std::vector<std::vector<int64_t>> slopes;  // [memory-order dim][symbol]
  };
  std::vector<Output> outputs;
};

// `v` with each tensor it holds (itself, or the entries of a Tensor[] or
// Tensor?[] list) replaced by f(tensor); nullopt when it holds none.
template <typename F>
std::optional<c10::IValue> map_tensors(const c10::IValue& v, F f) {
  if (v.isTensor()) return c10::IValue(f(v.toTensor()));
  if (v.isTensorList()) {
    c10::List<at::Tensor> l;
    for (const at::Tensor& t : v.toTensorVector()) l.push_back(f(t));
    return c10::IValue(std::move(l));
  }
  if (v.isList()) {
    const auto opt = v.toList().elementType()->cast<c10::OptionalType>();
    if (opt && opt->getElementType()->kind() == c10::TypeKind::TensorType) {
      c10::List<std::optional<at::Tensor>> l;
      for (const c10::IValue& e : v.toListRef()) {
        l.push_back(e.isTensor() ? std::optional<at::Tensor>(f(e.toTensor())) : std::nullopt);
      }
      return c10::IValue(std::move(l));
    }
  }
  return std::nullopt;
}

std::vector<c10::IValue> probe_args(const std::vector<c10::IValue>& pargs, const BucketedOperands& ops, size_t symbol) {
  auto meta = [&](const at::Tensor& t) -> at::Tensor {
    std::optional<std::vector<int64_t>> sizes;
    if (t.defined() && is_tpu(t)) sizes = ops.probe_sizes(t, symbol);
    if (!sizes) return to_meta(t).toTensor();
    return at::empty_strided(*sizes, dense_strides_like(t, *sizes),
                             at::TensorOptions().dtype(t.scalar_type()).device(at::kMeta));
  };
  std::vector<c10::IValue> out;
  for (const c10::IValue& v : pargs) {
    std::optional<c10::IValue> m = map_tensors(v, meta);
    out.push_back(m ? std::move(*m) : to_meta(v));
  }
  return out;
}

std::shared_ptr<const BucketShapes> bucket_shapes(const Entry& e, const c10::OperatorHandle& op,
                                                  const std::vector<c10::IValue>& pargs, const c10::List<int64_t>& described,
                                                  const BucketedOperands& ops) {
  std::vector<c10::IValue> keyed = pargs;
  keyed.emplace_back(described);
  const std::optional<OpSignature> sig = signature_for(&e.bucketed_tag, lowering_globals(), keyed, e.numbers);
  if (!sig) return nullptr;
  static std::mutex mu;
  static std::unordered_map<std::string, std::shared_ptr<const BucketShapes>> known;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = known.find(sig->key());
    if (it != known.end()) return it->second;
  }
  auto run_meta = [&](const std::vector<c10::IValue>& margs) -> std::optional<std::vector<at::Tensor>> {
    try {
      return run_on_meta(op, margs);  // (meta arguments pass through to_meta)
    } catch (const std::exception&) {
      return std::nullopt;
    }
  };
  auto shapes = std::make_shared<BucketShapes>();
  const std::optional<std::vector<at::Tensor>> at_bucket = run_meta(probe_args(pargs, ops, ops.symbols().size()));
  bool ok = at_bucket.has_value();
  for (size_t k = 0; ok && k < at_bucket->size(); ++k) {
    const at::Tensor& m = (*at_bucket)[k];
    BucketShapes::Output o;
    o.dtype = m.scalar_type();
    o.bucket_sizes = m.sizes().vec();
    o.perm.resize(m.dim());
    std::iota(o.perm.begin(), o.perm.end(), 0);
    std::stable_sort(o.perm.begin(), o.perm.end(), [&](int64_t x, int64_t y) { return m.stride(x) > m.stride(y); });
    for (int64_t d : o.perm) o.sizes.push_back(m.size(d));
    // (a layout that is not a dense permutation, or one the sort cannot tell)
    ok = m.is_non_overlapping_and_dense() &&
         at::empty(o.sizes, at::TensorOptions().device(at::kMeta)).permute(inverse_permutation(o.perm)).strides() ==
             m.strides();
    o.slopes.assign(m.dim(), std::vector<int64_t>(ops.symbols().size(), 0));
    shapes->outputs.push_back(std::move(o));
  }
  for (size_t s = 0; ok && s < ops.symbols().size(); ++s) {
    const std::optional<std::vector<at::Tensor>> probed = run_meta(probe_args(pargs, ops, s));
    ok = probed && probed->size() == at_bucket->size();
    for (size_t k = 0; ok && k < probed->size(); ++k) {
      BucketShapes::Output& o = shapes->outputs[k];
      const at::Tensor& m = (*probed)[k];
      ok = m.dim() == static_cast<int64_t>(o.perm.size()) && m.scalar_type() == o.dtype;
      for (size_t d = 0; ok && d < o.perm.size(); ++d) o.slopes[d][s] = o.sizes[d] - m.size(o.perm[d]);
    }
  }
  std::shared_ptr<const BucketShapes> result = ok ? shapes : nullptr;
  std::lock_guard<std::mutex> lock(mu);
  if (known.size() > 16384) known.clear();
  known.emplace(sig->key(), result);
  return result;
}

bool any_padded(const std::vector<c10::IValue>& args) {
  bool any = false;
  for (const c10::IValue& v : args) {
    for_each_tensor(v, [&](const at::Tensor& t) { any = any || (t.defined() && is_tpu(t) && storage_of(t).padded()); });
  }
  return any;
}

// `t` covers all of a padded storage, densely (in any shape).
bool padded_whole(const at::Tensor& t) {
  return t.defined() && is_tpu(t) && t.storage_offset() == 0 && t.is_contiguous() && storage_of(t).padded() &&
         static_cast<size_t>(t.numel()) * t.element_size() == t.storage().nbytes();
}

// Where tensor `t` is among `args` (itself, or an entry of a list).
ArgPosition position_of(c10::ArrayRef<c10::IValue> args, const at::Tensor& t) {
  for (size_t i = 0; i < args.size(); ++i) {
    const c10::IValue& v = args[i];
    if (v.isTensor() && v.toTensor().unsafeGetTensorImpl() == t.unsafeGetTensorImpl()) return {static_cast<int>(i), -1};
    if (!v.isList()) continue;
    c10::ArrayRef<c10::IValue> l = v.toListRef();
    for (size_t j = 0; j < l.size(); ++j) {
      if (l[j].isTensor() && l[j].toTensor().unsafeGetTensorImpl() == t.unsafeGetTensorImpl()) {
        return {static_cast<int>(i), static_cast<int>(j)};
      }
    }
  }
  return {};
}

// Runs a bucketable op at bucket shapes when an operand has a padded
// storage; false when it cannot (the op then runs as usual, on exact values).
bool run_bucketed(const Entry& e, const c10::OperatorHandle& op, const std::vector<c10::IValue>& given, int device,
                  torch::jit::Stack* stack) {
  if (e.kind == VariantKind::Out || !bucketing_enabled()) return false;
  if (!e.bucketable) {
    if (bucketing_explained() && any_padded(given)) explain_exact(e.functional, "its lowering is not checked for bucket shapes");
    return false;
  }
  // (an in-place op runs as its functional op when it writes all of a
  // padded tensor: the result's padded value becomes the tensor's)
  const bool inplace = e.kind == VariantKind::Inplace;
  if (inplace && (given.empty() || !given[0].isTensor() || !padded_whole(given[0].toTensor()))) return false;
  // A functional op's operands that are runs of a persistent buffer read at
  // lengths that keep changing enter as padded tensors (padded_window).
  std::vector<c10::IValue> windowed;
  bool any_window = false;
  for (size_t i = 0; i < given.size() && !inplace; ++i) {
    std::optional<c10::IValue> m = map_tensors(given[i], [&](const at::Tensor& t) {
      std::optional<at::Tensor> w = is_tpu(t) ? padded_window(t) : std::nullopt;
      any_window = any_window || w.has_value();
      return w ? *w : t;
    });
    windowed.push_back(m ? std::move(*m) : given[i]);
  }
  const std::vector<c10::IValue>& args = any_window ? windowed : given;
  BucketedOperands ops(device);
  std::vector<c10::IValue> pargs;
  pargs.reserve(args.size() + 1);
  for (const c10::IValue& v : args) {
    std::optional<c10::IValue> p = map_tensors(v, [&](const at::Tensor& t) { return ops.substitute(t); });
    pargs.push_back(p ? std::move(*p) : v);
  }
  if (!ops.any()) return false;
  if (!ops.usable()) {
    explain_exact(e.functional, "an operand is a view of another dtype, a math bit, or a varying dim of size 1");
    return false;
  }
  // A matrix product of a flattened sequence by a static matrix: each row
  // alone makes its row of the result, so the padding rows may stay where
  // they are, and the result is in the bucket layout as it comes.
  const bool rows = e.rows_operand >= 0 && pargs[e.rows_operand].isTensor() &&
                    ops.rows_of(pargs[e.rows_operand].toTensor());
  c10::List<int64_t> described;
  ops.describe(described);
  const std::shared_ptr<const BucketShapes> shapes = bucket_shapes(e, op, pargs, described, ops);
  if (!shapes) {
    explain_exact(e.functional, "its output shapes at the buckets could not be found (an operand of an actual size "
                                "meets a padded one, or two varying sizes must match)");
    return false;
  }
  // Per output: its sizes at the actual sizes (in memory order), and the
  // tensor its padded storage holds.
  const std::vector<BucketedOperands::Symbol>& symbols = ops.symbols();
  std::vector<OutputShape> out;
  for (const BucketShapes::Output& o : shapes->outputs) {
    OutputShape r;
    r.sizes = o.sizes;
    std::vector<bool> varying(r.sizes.size());
    for (size_t d = 0; d < r.sizes.size(); ++d) {
      for (size_t k = 0; k < symbols.size(); ++k) {
        r.sizes[d] -= o.slopes[d][k] * (symbols[k].bound - symbols[k].actual);
        varying[d] = varying[d] || o.slopes[d][k] != 0;
      }
      if (r.sizes[d] < 0) return false;
    }
    r.held = r.sizes;
    r.bounds = bounds_of(r.sizes, varying);
    // One varying dim that is a static size times a varying one (a linear
    // layer's flattened batch and sequence): held split in two, so that
    // the views splitting it again read it by slicing. The varying size
    // goes inside (batch, sequence), or outside where an operand merged it
    // outermost with static dims of that size (a gather by a flattened
    // (n, 16) index: its rows i * 16 + j).
    if (std::count(varying.begin(), varying.end(), true) == 1) {
      const size_t d = std::find(varying.begin(), varying.end(), true) - varying.begin();
      for (size_t k = 0; k < symbols.size(); ++k) {
        const int64_t slope = o.slopes[d][k];
        if (slope > 1 && o.sizes[d] == slope * symbols[k].bound &&
            std::count(o.slopes[d].begin(), o.slopes[d].end(), 0) + 1 == static_cast<std::ptrdiff_t>(symbols.size())) {
          r.split = static_cast<int>(d);
          r.symbol = k;
          r.outer = !rows && ops.varies_outermost(k, slope);
          const size_t n_at = d + (r.outer ? 0 : 1);
          r.held[d] = slope;
          r.held.insert(r.held.begin() + n_at, symbols[k].actual);
          r.bounds = r.held;
          r.bounds[n_at] = symbols[k].bound;
        }
      }
    }
    for (int64_t b : r.bounds) described.push_back(b);
    described.push_back(r.split * 2 + r.outer);
    out.push_back(std::move(r));
  }
  pargs.emplace_back(std::move(described));  // (keys the plan; not an argument of the op)

  // (run-time strides and offsets are read from the actual views)
  std::optional<std::vector<at::Tensor>> results =
      ops.run(&e.bucketed_tag, lowering_globals(), e.numbers, pargs, args, [&](EagerProgram& p, const OpSignature& sig) {
        EagerArgs a(p, c10::ArrayRef<c10::IValue>(pargs).slice(0, e.num_functional_args), std::nullopt, e.numbers);
        lowering::Context ctx{p.builder(), a, e.functional, &matmul_precision};
        std::vector<Value> outputs;
        try {
          outputs = e.fn(ctx);
        } catch (const std::exception& ex) {
          if (bucketing_explained()) {
            const std::string what = ex.what();
            std::string why = "its lowering refused the bucket shapes: ";
            why.append(what, 0, what.find('\n'));
            explain_exact(e.functional, why);
          }
          return false;  // (the usual path raises the error, or runs the op)
        }
        if (a.data_dependent() || outputs.size() != shapes->outputs.size()) return false;
        hlo::Builder& b = p.builder();
        for (size_t k = 0; k < outputs.size(); ++k) {
          const BucketShapes::Output& o = shapes->outputs[k];
          if (!outputs[k].valid() || b.dims(outputs[k]) != o.bucket_sizes || b.dtype(outputs[k]) != to_hlo(o.dtype)) {
            explain_exact(e.functional, "its lowering gave other shapes at the buckets");
            return false;
          }
          const std::vector<int64_t>& perm = shapes->outputs[k].perm;
          if (!std::is_sorted(perm.begin(), perm.end())) outputs[k] = b.transpose(outputs[k], perm);
          if (rows) {
            // (a product's rows split as its operand's: anything else would
            // hold the padding rows in between as elements)
            if (out[k].split != 0 || b.dims(outputs[k])[0] != out[k].bounds[0] * out[k].bounds[1]) return false;
            outputs[k] = b.reshape(outputs[k], out[k].bounds);
          } else if (out[k].split >= 0) {
            const std::optional<BucketedOperands::SymbolDim> from = ops.symbol_dim(out[k].symbol);
            const ArgPosition pos = from ? position_of(pargs, from->proxy) : ArgPosition{};
            if (pos.arg < 0) return false;
            Value n = p.run_time_size(from->proxy, from->dim, pos);
            if (from->multiplier != 1) n = b.div(n, b.constant_int(from->multiplier, hlo::DType::I32));
            outputs[k] = split_exit(b, outputs[k], out[k], n);
          }
          outputs[k] = padded_exit(b, outputs[k], out[k].bounds);
        }
        std::shared_ptr<const ProgramPlan> plan = p.finish(outputs);
        if (plan->replayable) keep_plan(sig, pargs, a.numbers_read(), plan, ctx.precision_read.has_value());
        return true;
      });
  if (!results) return false;
  for (size_t k = 0; k < results->size(); ++k) {
    (*results)[k] = bucketed_result((*results)[k], out[k].held, std::move(out[k].bounds), device);
    if (out[k].split >= 0) (*results)[k] = (*results)[k].view(out[k].sizes);
    const std::vector<int64_t>& perm = shapes->outputs[k].perm;
    if (!std::is_sorted(perm.begin(), perm.end())) (*results)[k] = (*results)[k].permute(inverse_permutation(perm));
  }
  if (inplace) {
    const at::Tensor& self = args[0].toTensor();
    const at::Tensor& r = (*results)[0];
    std::shared_ptr<const TpuStorage::Padded> held = storage_of(r).padded();
    // (the same sizes, dtype and layout, padded alike: else the op runs as usual)
    if (results->size() != 1 || !held || r.scalar_type() != self.scalar_type() || !r.sizes().equals(self.sizes()) ||
        !r.is_contiguous()) {
      explain_exact(e.functional, "the in-place op's result is not padded as its tensor");
      return false;
    }
    storage_of(self).set_padded(std::move(held));
    results->clear();
  }
  push_returns(stack, op.schema(), e, args, std::move(*results));
  return true;
}

void pad_growing_concatenation(const Entry& e, const std::vector<c10::IValue>& args, std::vector<at::Tensor>& results) {
  if (e.functional == "aten::cat" && e.kind == VariantKind::Functional && results.size() == 1) {
    c10::ArrayRef<c10::IValue> inputs = args[0].toListRef();
    if (!inputs.empty() && inputs[0].isTensor()) pad_if_growing(results[0], args[1].toInt(), inputs.size(), inputs[0].toTensor());
  }
}

// The boxed kernel of every lowered op, holding the op's entry (registered
// once per op: no lookup by name on each call). A plugin that runs out of
// device memory says RESOURCE_EXHAUSTED: that is torch.OutOfMemoryError, as
// on CUDA (the process goes on; freeing tensors and retrying can succeed).
class LoweredKernel final : public c10::OperatorKernel {
 public:
  explicit LoweredKernel(const Entry& e) : e_(e) {}
  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) const {
    try {
      run_lowered(e_, op, stack);
    } catch (...) {
      rethrow_out_of_memory_as_torch_error(current_device(), c10::toString(op.operator_name()));
    }
  }

 private:
  const Entry& e_;  // (entries are never removed; a map's nodes do not move)
};

// Advanced indexing takes index tensors on the CPU for a tensor on any
// device (PyTorch's AdvancedIndex moves them to self's device): x[cpu_idx],
// x[cpu_mask] and x[cpu_idx] = v, as on CUDA. Only these ops: others want
// their tensors on one device.
bool takes_cpu_indices(const std::string& functional) {
  static const std::unordered_set<std::string> ops = {"aten::index.Tensor", "aten::_unsafe_index.Tensor",
                                                      "aten::index_put", "aten::_index_put_impl",
                                                      "aten::_unsafe_index_put"};
  return ops.count(functional) != 0;
}

void move_cpu_indices(const Entry& e, std::vector<c10::IValue>& args, int device) {
  if (!e.takes_cpu_indices || args.size() < 2 || !args[1].isList()) return;
  bool any = false;
  for (const c10::IValue& v : args[1].toListRef()) {
    any = any || (v.isTensor() && v.toTensor().defined() && v.toTensor().device().is_cpu());
  }
  if (!any) return;
  c10::List<std::optional<at::Tensor>> moved;
  const c10::Device to(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(device));
  for (const c10::IValue& v : args[1].toListRef()) {
    if (!v.isTensor()) {
      moved.push_back(std::nullopt);
    } else {
      const at::Tensor& t = v.toTensor();
      moved.push_back(t.defined() && t.device().is_cpu() ? t.to(to) : t);
    }
  }
  args[1] = std::move(moved);
}

void run_lowered(const Entry& e, const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const c10::FunctionSchema& schema = op.schema();
  const size_t n = schema.arguments().size();
  // (moved: the stack's entries are dropped unread, or moved back for the
  // CPU fallback)
  std::vector<c10::IValue> args(std::make_move_iterator(stack->end() - n), std::make_move_iterator(stack->end()));
  const int device = op_device(args);
  move_cpu_indices(e, args, device);
  for (const c10::IValue& v : args) {
    for_each_tensor(v, [&](const at::Tensor& t) {
      if (!t.defined()) return;
      const bool ok = is_tpu(t) ? (t.device().has_index() ? t.device().index() : 0) == device
                                : t.device().is_cpu() && t.dim() == 0;
      TORCH_CHECK(ok, "Expected all tensors to be on the same device, but found at least two devices, tpu:",
                  device, " and ", t.device(), "! (", op.operator_name(), ")");
    });
  }

  if (e.scalar_ranges != nullptr) check_scalar_ranges(*e.scalar_ranges, args);
  if (e.kind != VariantKind::Functional) check_overlaps(e, args, op.operator_name());
  if (index_put_into_expanded(e, args)) return push_returns(stack, op.schema(), e, args, {});

  if (run_bucketed(e, op, args, device, stack)) return;
  if ((e.grows_arange && grow_arange(args)) || (e.grows_fill && (grow_fill(args) || fill_window(args)))) {
    return push_returns(stack, schema, e, args, {});
  }
  const std::optional<OpSignature> sig = signature_for(&e, lowering_globals(), args, e.numbers);
  if (auto results = run_kept_plan(sig, args, device)) {
    pad_growing_concatenation(e, args, *results);
    return push_returns(stack, schema, e, args, std::move(*results));
  }

  EagerProgram p(device, sig ? &*sig : nullptr);
  if (e.kind == VariantKind::Out) {
    check_out_dtypes(e.functional, args, e.out_args, {});
    out_dtype_as_argument(e.functional, args, e.out_args);
  }
  std::optional<at::ScalarType> out_dtype;
  if (e.kind == VariantKind::Out && !e.out_args.empty()) {
    for_each_tensor(args[e.out_args[0]], [&](const at::Tensor& t) {
      if (!out_dtype) out_dtype = t.scalar_type();
    });
  }
  EagerArgs a(p, c10::ArrayRef<c10::IValue>(args).slice(0, e.num_functional_args), out_dtype, e.numbers);
  lowering::Context ctx{p.builder(), a, e.functional, &matmul_precision};
  std::vector<Value> results;
  try {
    results = e.fn(ctx);
  } catch (const lowering::Unsupported& err) {
    if (cpu_fallback_enabled()) {
      std::move(args.begin(), args.end(), stack->end() - n);
      return run_cpu_fallback(op, stack);
    }
    TORCH_CHECK_NOT_IMPLEMENTED(false, err.msg(), " ", fallback_hint());
  } catch (const c10::Error&) {
    throw;  // the lowering's own check, worded like PyTorch's CPU kernels
  } catch (const std::logic_error& err) {
    // A builder check failed: invalid arguments the lowering did not catch
    // get PyTorch's error from the meta kernel; otherwise it is our bug.
    run_on_meta(op, args);
    TORCH_CHECK(false, "torch_tpu internal error while lowering ", e.functional, ": ", err.what(),
                ". Please report this; meanwhile torch_tpu.set_cpu_fallback(True) runs the op on the CPU.");
  }

  std::vector<Value> outputs;
  if (e.kind == VariantKind::Functional) {
    outputs = results;
    if (!a.data_dependent()) {
      lay_out_like_pytorch(op, args, e, p, outputs);
    } else if ((e.functional == "aten::index_put" || e.functional == "aten::_index_put_impl") && outputs.size() == 1 &&
               args[0].isTensor()) {
      // A mask index reads its count on the host, but the result is still
      // CPU's clone of self, laid out as self.
      const at::Tensor& self = args[0].toTensor();
      lay_out_as(p, {empty_like_layout(self, self.options().device(at::kMeta))}, outputs);
    } else if (e.functional == "aten::nonzero" && outputs.size() == 1) {
      // No meta kernel knows the count: CPU's nonzero is [count, rank]
      // laid out column by column (strides 1, count).
      hlo::Builder& b = p.builder();
      const hlo::Dims dims = b.dims(outputs[0]);
      if (dims.size() == 2) {  // (also the degenerate counts and ranks: CPU's strides are still (1, count))
        outputs[0] = b.transpose(outputs[0], {1, 0});
        p.result_layout(0, dims, {1, dims[0]});
      }
    }
  } else {
    std::vector<Target> dsts;
    if (e.kind == VariantKind::Inplace) {
      add_targets(dsts, args, 0);
    } else {
      for (size_t k : e.out_args) add_targets(dsts, args, k);
    }
    // No results: the lowering wrote its outputs itself (Args::assign).
    if (!results.empty()) {
      TORCH_CHECK(dsts.size() == results.size(), "torch_tpu internal error: ", e.functional,
                  " returned ", results.size(), " results for ", dsts.size(), " outputs");
      if (e.kind == VariantKind::Out) {
        std::vector<at::ScalarType> types;
        for (const Value& v : results) types.push_back(to_aten(p.builder().dtype(v)));
        check_out_dtypes(e.functional, args, e.out_args, types);
      }
      for (size_t k = 0; k < dsts.size(); ++k) {
        write_back(p, dsts[k].tensor, results[k], e.kind == VariantKind::Inplace, dsts[k].pos, e.functional,
                   e.kind == VariantKind::Inplace && writes_one_value(e.functional, args));
      }
      // An in-place scatter whose indices every check gates (index_copy_,
      // index_put_, scatter_, ...) leaves self as it was when one fails, by
      // itself: no guard over all of self for the few rows it writes.
      if (e.kind == VariantKind::Inplace && dsts.size() == 1 && ctx.gating_checks > 0 &&
          ctx.gating_checks == p.check_count() && at::has_internal_overlap(dsts[0].tensor) != at::MemOverlap::Yes) {
        p.unchanged_unless_checked(dsts[0].tensor);
      }
    }
  }
  std::shared_ptr<const ProgramPlan> plan = p.finish(outputs);
  // (validated on the results as the lowering made them, before any layout)
  if (!a.data_dependent()) {
    validate_once(op, args, e, plan->fingerprint, *plan->builder, e.kind == VariantKind::Functional ? results : outputs);
  }
  if (sig && plan->replayable && !a.data_dependent()) keep_plan(*sig, args, a.numbers_read(), plan, ctx.precision_read.has_value());
  std::vector<at::Tensor> returned = p.run();
  pad_growing_concatenation(e, args, returned);
  push_returns(stack, schema, e, args, std::move(returned));
}

}  // namespace

void register_variant(const std::string& variant, const std::string& functional, VariantKind kind) {
  lowering::LoweringFn fn = lowering::find_lowering(functional);
  TORCH_CHECK(fn != nullptr, "torch_tpu: no lowering named ", functional);
  // "ns::name.overload" (no namespace: aten) -> namespace, operator name.
  auto split = [](const std::string& full) {
    const auto colons = full.find("::");
    const std::string ns = colons == std::string::npos ? "aten" : full.substr(0, colons);
    const std::string name = colons == std::string::npos ? full : full.substr(colons + 2);
    const auto dot = name.find('.');
    c10::OperatorName op(ns + "::" + name.substr(0, dot), dot == std::string::npos ? "" : name.substr(dot + 1));
    return std::make_pair(ns, op);
  };
  auto [ns, opname] = split(variant);
  auto handle = c10::Dispatcher::singleton().findSchema(opname);
  TORCH_CHECK(handle.has_value(), "torch_tpu: unknown op ", variant);
  auto fhandle = c10::Dispatcher::singleton().findSchema(split(functional).second);
  TORCH_CHECK(fhandle.has_value(), "torch_tpu: unknown op ", functional);

  Entry e;
  e.fn = fn;
  e.kind = kind;
  e.functional = functional;
  e.num_functional_args = fhandle->schema().arguments().size();
  e.refuses_full_overlap = refuses_full_overlap(functional);
  e.takes_cpu_indices = takes_cpu_indices(functional);
  e.bucketable = bucketable_op(functional);
  e.grows_arange = functional == "aten::arange.start_out" && kind == VariantKind::Out;
  e.grows_fill = (functional == "aten::fill.Scalar" || functional == "aten::zero") && kind == VariantKind::Inplace;
  e.rows_operand = functional == "aten::mm" ? 0 : functional == "aten::addmm" ? 1 : -1;
  e.scalar_ranges = scalar_range_rule(functional);
  // (the variant's own arguments: an out= variant's come first, as the functional op's)
  const auto& params = handle->schema().arguments();
  for (size_t i = 0; i < params.size() && i < 64; ++i) {
    c10::TypePtr t = params[i].type();
    if (t->kind() == c10::TypeKind::OptionalType) t = t->castRaw<c10::OptionalType>()->getElementType();
    if (t->kind() == c10::TypeKind::NumberType) e.numbers |= uint64_t{1} << i;
  }
  if (kind == VariantKind::Out) {
    // Out arguments come last; the others are the functional op's.
    const auto& arguments = handle->schema().arguments();
    e.num_functional_args = 0;
    for (size_t i = 0; i < arguments.size(); ++i) {
      if (arguments[i].is_out()) {
        e.out_args.push_back(i);
      } else {
        ++e.num_functional_args;
      }
    }
  }
  std::lock_guard<std::mutex> lock(g_entries_mu);
  auto [it, added] = entries().emplace(opname, std::move(e));
  if (!added) return;  // already registered
  library_for(ns).impl(c10::toString(opname).c_str(),
                       torch::CppFunction::makeFromBoxedFunctor(std::make_unique<LoweredKernel>(it->second)));
}

std::vector<std::pair<std::string, int64_t>> fallback_counts() {
  std::lock_guard<std::mutex> lock(g_fallback_mu);
  return {g_fallback_counts.begin(), g_fallback_counts.end()};
}

void set_cpu_fallback(bool enabled) { g_fallback_enabled = enabled ? 1 : 0; }

bool cpu_fallback_enabled() {
  int v = g_fallback_enabled.load();
  if (v < 0) {
    const char* e = std::getenv("TORCH_TPU_CPU_FALLBACK");
    v = e != nullptr && std::string(e) != "0" && std::string(e) != "" ? 1 : 0;
    g_fallback_enabled = v;
  }
  return v == 1;
}

void fallback_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  if (cpu_fallback_enabled()) {
    try {
      return run_cpu_fallback(op, stack);
    } catch (...) {
      rethrow_out_of_memory_as_torch_error(current_device(), c10::toString(op.operator_name()));
    }
  }
  TORCH_CHECK_NOT_IMPLEMENTED(false, "The operator '", op.operator_name(),
                              "' has no lowering for the tpu device. ", fallback_hint());
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&fallback_kernel>());
}

}  // namespace tpu

namespace tpu {

uint8_t current_matmul_precision() { return static_cast<uint8_t>(matmul_precision()); }

uint32_t current_lowering_globals() { return lowering_globals() | current_matmul_precision(); }

}  // namespace tpu
