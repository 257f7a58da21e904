#include "csrc/aten/layouts.h"

#include <ATen/ExpandUtils.h>
#include <ATen/TensorIterator.h>
#include <ATen/native/ConvUtils.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>

#include <algorithm>
#include <numeric>
#include <unordered_map>
#include <unordered_set>

namespace tpu {

// The dims of `sizes` from outermost to innermost in memory under `strides`,
// when those strides are a dense permutation of the contiguous ones (size-1
// dims may have any stride); nullopt otherwise.
std::optional<std::vector<int64_t>> memory_order(c10::IntArrayRef sizes, c10::IntArrayRef strides) {
  // Dims of size 1 do not order anything: the others by decreasing stride,
  // then the size-1 ones.
  const int64_t r = static_cast<int64_t>(sizes.size());
  std::vector<int64_t> perm, ones;
  for (int64_t d = 0; d < r; ++d) (sizes[d] == 1 ? ones : perm).push_back(d);
  std::stable_sort(perm.begin(), perm.end(), [&](int64_t a, int64_t b) { return strides[a] > strides[b]; });
  perm.insert(perm.end(), ones.begin(), ones.end());
  int64_t running = 1;
  for (int64_t k = r - 1; k >= 0; --k) {
    if (sizes[perm[k]] != 1 && strides[perm[k]] != running) return std::nullopt;
    running *= sizes[perm[k]];
  }
  return perm;
}

// The result of a binary op whose meta kernel does not lay it out as its
// CPU kernel does (those build a TensorIterator over the operands; the meta
// kernels of these are decompositions that make a contiguous result, or
// follow the other operand): the same iterator over meta operands.
// Also every other pointwise op with a CPU kernel, of one tensor or several: their meta
// kernels are often Python's elementwise rule, which gives size-1 dims other
// strides than TensorIterator (it copies the input's strides where
// TensorIterator's fast set-up makes a contiguous result, and the reverse
// when a 0-dim operand such as a Python number takes the fast set-up away),
// and orders them differently when strides tie. The strides of size-1 dims
// matter: a later broadcasting op orders its result's dims by them.
std::optional<at::Tensor> iterator_layout(const c10::OperatorHandle& op, const std::string& functional,
                                          const std::vector<c10::IValue>& args) {
  static const std::unordered_set<std::string> kOps = {
      "aten::floor_divide", "aten::logical_and", "aten::logical_or", "aten::logical_xor",
      "aten::copysign.Tensor", "aten::xlogy.Tensor", "aten::heaviside"};
  auto meta = [](const at::Tensor& t) {
    return at::empty_strided(t.sizes(), t.strides(), at::TensorOptions().dtype(t.scalar_type()).device(at::kMeta));
  };
  const bool listed = kOps.count(functional) != 0;
  if (listed) {
    if (args.size() < 2 || !args[0].isTensor() || !args[1].isTensor()) return std::nullopt;
    try {
      at::Tensor out;
      const at::Tensor a = meta(args[0].toTensor()), b = meta(args[1].toTensor());
      at::TensorIterator iter = at::TensorIterator::binary_op(out, a, b);
      return iter.output();
    } catch (const std::exception&) {
      return std::nullopt;
    }
  }
  if (!op.hasTag(at::Tag::pointwise)) return std::nullopt;
  // Composite ops (no CPU kernel of their own) qualify where CPU runs them as
  // one iterator over the same operands: the Scalar overloads (add.Scalar,
  // xlogy.Scalar_Self, the polynomials' x_scalar), which wrap the number,
  // and these (isinf compares abs(self) with a wrapped number: two
  // iterators). Others,
  // such as mvlgamma, are laid out by the ops they are made of, as their
  // meta results are.
  static const std::unordered_map<std::string, int> kComposite = {
      {"aten::abs", 0}, {"aten::logical_not", 0}, {"aten::square", 0}, {"aten::clip", 0},
      {"aten::clip.Tensor", 0}, {"aten::isinf", 1}};
  const c10::OperatorName& name = op.operator_name();
  const bool wraps = name.overload_name.find("calar") != std::string::npos;
  auto composite = kComposite.find(functional);
  if (!op.hasKernelForDispatchKey(c10::DispatchKey::CPU) && !wraps && composite == kComposite.end()) {
    return std::nullopt;
  }
  // (0-dim operands count: a shape other than the result's takes the fast
  // set-up away, as on CPU.)
  std::vector<at::Tensor> inputs;
  bool shaped = false;
  for (const c10::IValue& v : args) {
    if (v.isTensor() && v.toTensor().defined()) {
      inputs.push_back(meta(v.toTensor()));
      shaped = shaped || v.toTensor().dim() > 0;
    }
  }
  if (!shaped) return std::nullopt;
  const at::Tensor number = at::empty({}, at::TensorOptions().dtype(at::kDouble).device(at::kMeta));
  // The number of a Scalar overload (eq.Scalar, bitwise_and.Scalar_Tensor,
  // special_zeta.self_scalar) is a 0-dim operand on CPU; a Scalar parameter
  // (lerp's weight, clamp's bounds, pow.Tensor_Scalar's exponent) is none.
  if (wraps) {
    for (const c10::Argument& a : op.schema().arguments()) {
      const std::string& n = a.name();
      if (a.type()->kind() == c10::TypeKind::NumberType && (n == "other" || n == "self" || n == "x" || n == "n")) {
        inputs.push_back(number);
      }
    }
  }
  auto iterate = [](const std::vector<at::Tensor>& operands) {
    at::TensorIteratorConfig config;
    config.set_check_mem_overlap(false).check_all_same_dtype(false).promote_inputs_to_common_dtype(true);
    config.add_owned_output(at::Tensor());
    for (const at::Tensor& t : operands) config.add_owned_const_input(t);
    at::TensorIterator iter = config.build();
    return iter.output();
  };
  try {
    if (composite != kComposite.end() && composite->second == 1) inputs = {iterate(inputs), number};
    return iterate(inputs);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// roll's result as CPU lays it out: CPU rolls one dim at a time as a cat of
// two narrows of the input, and cat keeps a channels-last format that both
// parts share (a roll by a multiple of the size has an empty part, so it
// is contiguous, as is a roll of the flattened tensor). The meta kernel's
// result is always contiguous.
std::optional<at::Tensor> roll_layout(const std::string& functional, const std::vector<c10::IValue>& args) {
  if (functional != "aten::roll" || args.size() < 3 || !args[0].isTensor()) return std::nullopt;
  const at::Tensor& self = args[0].toTensor();
  if (self.dim() != 4 && self.dim() != 5) return std::nullopt;
  const std::vector<int64_t> shifts = args[1].toIntVector();
  const std::vector<int64_t> dims = args[2].toIntVector();
  if (dims.empty() || dims.size() != shifts.size() || self.numel() == 0) return std::nullopt;
  at::MemoryFormat format = self.suggest_memory_format();
  for (size_t k = 0; k < dims.size(); ++k) {
    const int64_t d = c10::maybe_wrap_dim(dims[k], self.dim());
    if (shifts[k] % self.size(d) == 0) format = at::MemoryFormat::Contiguous;
  }
  if (format == at::MemoryFormat::Contiguous) return std::nullopt;
  return at::empty(self.sizes(), at::TensorOptions().dtype(self.scalar_type()).device(at::kMeta).memory_format(format));
}

namespace {

// A CPU tensor with t's sizes, strides and dtype and no memory: enough for
// PyTorch's CPU convolution to choose its backend, which reads only these.
at::Tensor cpu_shell(const at::Tensor& t) {
  c10::Storage storage(c10::Storage::use_byte_size_t(), 0, c10::DataPtr(nullptr, c10::Device(c10::kCPU)), nullptr,
                       false);
  auto impl = c10::make_intrusive<c10::TensorImpl>(std::move(storage), c10::DispatchKeySet(c10::DispatchKey::CPU),
                                                   t.dtype());
  impl->set_sizes_and_strides(t.sizes(), t.strides());
  return at::Tensor(std::move(impl));
}

// The memory format of a 2-d or 3-d convolution's results on CPU (forward and
// backward): that of the backend CPU PyTorch would choose for these operands
// (oneDNN and the 2-d fallbacks keep channels-last input or weight; the
// 3-d fallback, e.g. for float64, is contiguous). The choice is made as for a
// call that needs no backward (one program serves both).
at::MemoryFormat cpu_convolution_format(const at::Tensor& input, const at::Tensor& weight,
                                        const std::vector<c10::IValue>& args, size_t stride_at, bool has_bias_sizes) {
  const at::Tensor in = cpu_shell(input), w = cpu_shell(weight);
  const std::vector<int64_t> stride = args[stride_at].toIntVector(), padding = args[stride_at + 1].toIntVector(),
                             dilation = args[stride_at + 2].toIntVector(),
                             output_padding = args[stride_at + 4].toIntVector();
  std::optional<std::vector<int64_t>> bias_sizes;
  if (has_bias_sizes && stride_at > 0 && args[stride_at - 1].isIntList()) bias_sizes = args[stride_at - 1].toIntVector();
  at::native::ConvBackend backend = at::native::select_conv_backend(
      in, w, std::nullopt, c10::fromIntArrayRefSlow(stride), c10::fromIntArrayRefSlow(padding),
      c10::fromIntArrayRefSlow(dilation), args[stride_at + 3].toBool(), c10::fromIntArrayRefSlow(output_padding),
      c10::SymInt(args[stride_at + 5].toInt()),
      bias_sizes ? at::OptionalSymIntArrayRef(c10::fromIntArrayRefSlow(*bias_sizes)) : at::OptionalSymIntArrayRef());
  return at::native::_determine_backend_memory_format(in, w, backend);
}

// The ops whose CPU kernels give their first result the suggested memory
// format of one input: that argument's position.
std::optional<size_t> follows_input_format(const std::string& f) {
  static const std::unordered_map<std::string, size_t> table = {
      {"aten::native_batch_norm", 0},          {"aten::_native_batch_norm_legit", 0},
      {"aten::_native_batch_norm_legit.no_stats", 0}, {"aten::_native_batch_norm_legit_no_training", 0},
      {"aten::_batch_norm_with_update", 0},    {"aten::_batch_norm_no_update", 0},
      {"aten::reflection_pad2d", 0},           {"aten::reflection_pad3d", 0},
      {"aten::replication_pad2d", 0},          {"aten::replication_pad3d", 0},
      {"aten::reflection_pad2d_backward", 1},  {"aten::reflection_pad3d_backward", 1},
      {"aten::replication_pad2d_backward", 1}, {"aten::replication_pad3d_backward", 1},
      {"aten::max_unpool2d", 0},               {"aten::channel_shuffle", 0},
      {"aten::pixel_shuffle", 0},              {"aten::pixel_unshuffle", 0},
  };
  auto it = table.find(f);
  if (it == table.end()) return std::nullopt;
  return it->second;
}

}  // namespace

// empty_like(self) as CPU lays it out (the meta device's empty_like is
// Python's, which differs): self's strides exactly (those of size-1 dims
// too) when self is dense, else dense strides in self's order of strides.
at::Tensor empty_like_layout(const at::Tensor& self, const at::TensorOptions& options) {
  if (self.is_non_overlapping_and_dense()) return at::empty_strided(self.sizes(), self.strides(), options);
  return at::empty_strided(self.sizes(), at::infer_dense_strides(self.sizes(), self.strides()), options);
}

namespace {

// Ops whose CPU kernels make their result contiguous where their meta
// kernels follow the input (Python's elementwise rule keeps the strides of
// its size-1 dims): tril and triu (an empty result of the input's sizes),
// masked_fill (a contiguous clone of self), log_softmax, a number to the
// power of a tensor, rrelu, the gamma, Poisson and binomial samplers, weight
// norm.
bool contiguous_result(const std::string& f) {
  static const std::unordered_set<std::string> ops = {"aten::tril", "aten::triu", "aten::masked_fill.Scalar",
                                                      "aten::masked_fill.Tensor", "aten::_log_softmax",
                                                      "aten::pow.Scalar", "aten::float_power.Scalar",
                                                      "aten::rrelu_with_noise",
                                                      "aten::_standard_gamma", "aten::poisson", "aten::binomial",
                                                      "aten::_weight_norm_interface"};
  return ops.count(f) != 0;
}

// Ops whose CPU kernels allocate their result as empty_like(self)
// (empty_like_layout), where the meta kernels make the result contiguous or
// follow TensorIterator's rule
// (hardtanh, and relu6 through it, deg2rad and rad2deg write into
// empty_like(self); frexp's two results both are).
bool preserves_input_strides(const std::string& f) {
  static const std::unordered_set<std::string> ops = {"aten::flip",    "aten::nan_to_num", "aten::hardtanh",
                                                      "aten::relu6",   "aten::frexp.Tensor", "aten::deg2rad",
                                                      "aten::rad2deg"};
  return ops.count(f) != 0;
}

// The strides of an FFT's result on CPU (MKL's _exec_fft): the dims not
// transformed outermost, in the order std::partition leaves them, sorted by
// the input's strides (std::sort: ties fall as on CPU), then the transformed
// dims in `signal` order, the whole dense.
std::vector<int64_t> fft_strides(c10::IntArrayRef in_strides, c10::IntArrayRef out_sizes,
                                 const std::vector<int64_t>& signal) {
  const int64_t ndim = static_cast<int64_t>(out_sizes.size());
  std::vector<int64_t> perm(ndim);
  std::iota(perm.begin(), perm.end(), int64_t{0});
  std::vector<bool> transformed(ndim, false);
  for (int64_t d : signal) transformed[d] = true;
  auto batch_end = std::partition(perm.begin(), perm.end(), [&](int64_t d) { return !transformed[d]; });
  std::sort(perm.begin(), batch_end, [&](int64_t a, int64_t b) { return in_strides[a] > in_strides[b]; });
  std::copy(signal.begin(), signal.end(), batch_end);
  const int64_t batch_dims = batch_end - perm.begin();
  std::vector<int64_t> strides(ndim);
  int64_t run = 1;
  for (int64_t i = ndim - 1; i >= batch_dims; --i) {
    strides[perm[i]] = run;
    run *= std::max<int64_t>(out_sizes[perm[i]], 1);
  }
  int64_t batch = 1;
  for (int64_t i = batch_dims - 1; i >= 0; --i) {
    strides[perm[i]] = batch * run;
    batch *= out_sizes[perm[i]];
  }
  return strides;
}

// The result of _fft_c2c, _fft_r2c or _fft_c2r as CPU lays it out. CPU
// transforms the dims in order of the input's strides, except that the
// halved dim of a real transform (the last one given) stays innermost; a
// c2r of several dims is a c2c of all but the last, then a c2r of that one.
at::Tensor fft_layout(const std::string& f, const std::vector<c10::IValue>& args, const at::Tensor& m) {
  const at::Tensor& self = args[0].toTensor();
  std::vector<int64_t> dim = args[1].toIntVector();
  for (int64_t& d : dim) d = c10::maybe_wrap_dim(d, self.dim());
  auto by_stride = [](c10::IntArrayRef strides, std::vector<int64_t> dims) {
    std::stable_sort(dims.begin(), dims.end(), [&](int64_t a, int64_t b) { return strides[a] > strides[b]; });
    return dims;
  };
  if (dim.empty()) return empty_like_layout(self, m.options());  // a clone
  if (f == "aten::_fft_c2c") return at::empty_strided(m.sizes(), fft_strides(self.strides(), m.sizes(), by_stride(self.strides(), dim)), m.options());
  const int64_t last = dim.back();
  dim.pop_back();
  if (f == "aten::_fft_r2c") {
    std::vector<int64_t> signal = by_stride(self.strides(), dim);
    signal.push_back(last);
    return at::empty_strided(m.sizes(), fft_strides(self.strides(), m.sizes(), signal), m.options());
  }
  const std::vector<int64_t> in_strides =
      dim.empty() ? self.strides().vec() : fft_strides(self.strides(), self.sizes(), by_stride(self.strides(), dim));
  return at::empty_strided(m.sizes(), fft_strides(in_strides, m.sizes(), {last}), m.options());
}

}  // namespace

// Results whose CPU kernels lay them out otherwise than their meta kernels:
//  - linalg_eig's eigenvectors, _linalg_svd's Vh and geqrf's a: column-major
//    per matrix, as LAPACK writes them (the meta kernels' are row-major);
//  - the ops of contiguous_result and preserves_input_strides;
//  - the FFTs (fft_layout);
//  - normal of tensor means or stds: contiguous (the meta kernel follows the
//    operands' layout);
//  - batch norm's output, the reflection and replication pads' outputs and
//    input gradients, max_unpool2d's, channel_shuffle's and pixel_shuffle's
//    outputs: in the (forward) input's suggested memory format, channels-last
//    or contiguous (the meta kernels say contiguous or keep any permutation);
//  - a 2-d or 3-d convolution's output, input gradient and weight gradient:
//    in the memory format of CPU's backend for the operands (the meta
//    kernels' are contiguous);
//  - a 1-d convolution's output: CPU convolves a contiguous input viewed as
//    2-d, so the output is channels-last exactly when the weight viewed as
//    2-d is (the meta kernel follows the input).
void cpu_kernel_layouts(const std::string& f, const std::vector<c10::IValue>& args, std::vector<at::Tensor>& meta) {
  if (meta.empty()) return;
  auto contiguous_like = [](const at::Tensor& m, at::MemoryFormat format) {
    return at::empty(m.sizes(), m.options().memory_format(format));
  };
  if ((f == "aten::convolution_backward" || f == "aten::convolution_backward_overrideable") && args.size() >= 10 &&
      args[1].isTensor() && args[2].isTensor() && (args[1].toTensor().dim() == 4 || args[1].toTensor().dim() == 5)) {
    const bool overrideable = f == "aten::convolution_backward_overrideable";
    const at::MemoryFormat format = cpu_convolution_format(args[1].toTensor(), args[2].toTensor(), args,
                                                           overrideable ? 3 : 4, !overrideable);
    for (size_t i = 0; i < 2 && i < meta.size(); ++i) {
      if (meta[i].defined()) meta[i] = contiguous_like(meta[i], format);
    }
    return;
  }
  if (!meta[0].defined()) return;
  // A batch of column-major matrices, as LAPACK writes them.
  auto column_major = [](const at::Tensor& m) {
    const int64_t r = m.dim();
    std::vector<int64_t> strides(r);
    int64_t next = 1;
    for (int64_t d : {r - 2, r - 1}) {
      strides[d] = next;
      next *= std::max<int64_t>(m.size(d), 1);
    }
    for (int64_t d = r - 3; d >= 0; --d) {
      strides[d] = next;
      next *= std::max<int64_t>(m.size(d), 1);
    }
    return at::empty_strided(m.sizes(), strides, m.options());
  };
  if (f == "aten::geqrf" && meta[0].dim() >= 2) {
    meta[0] = column_major(meta[0]);
  } else if (contiguous_result(f) || (f == "aten::angle" && !args.empty() && args[0].isTensor() &&
                                      args[0].toTensor().is_complex())) {
    // (CPU's angle of a complex tensor writes into an empty out= tensor)
    meta[0] = contiguous_like(meta[0], at::MemoryFormat::Contiguous);
  } else if (preserves_input_strides(f) && !args.empty() && args[0].isTensor() &&
             args[0].toTensor().sizes() == meta[0].sizes()) {
    const at::Tensor& self = args[0].toTensor();
    for (at::Tensor& m : meta) {
      if (m.defined() && m.sizes() == self.sizes()) m = empty_like_layout(self, m.options());
    }
  } else if ((f == "aten::_fft_c2c" || f == "aten::_fft_r2c" || f == "aten::_fft_c2r") && args.size() >= 2 &&
             args[0].isTensor() && args[1].isIntList() && meta[0].dim() == args[0].toTensor().dim()) {
    meta[0] = fft_layout(f, args, meta[0]);
  } else if (f == "aten::linalg_eig" && meta.size() == 2 && meta[1].dim() >= 2) {
    meta[1] = column_major(meta[1]);
  } else if (f == "aten::_linalg_svd" && meta.size() == 3 && meta[2].defined() && meta[2].dim() >= 2) {
    meta[2] = column_major(meta[2]);  // (the meta kernel's Vh is row-major)
  } else if (f == "aten::normal.Tensor_Tensor" || f == "aten::normal.Tensor_float" || f == "aten::normal.float_Tensor") {
    meta[0] = contiguous_like(meta[0], at::MemoryFormat::Contiguous);
  } else if (std::optional<size_t> like = follows_input_format(f); like && *like < args.size() && args[*like].isTensor()) {
    meta[0] = contiguous_like(meta[0], args[*like].toTensor().suggest_memory_format());
  } else if ((f == "aten::convolution" || f == "aten::convolution_overrideable") &&
             (meta[0].dim() == 4 || meta[0].dim() == 5) && args.size() >= 9 && args[0].isTensor() &&
             args[1].isTensor()) {
    meta[0] = contiguous_like(meta[0], cpu_convolution_format(args[0].toTensor(), args[1].toTensor(), args, 3, false));
  } else if ((f == "aten::convolution" || f == "aten::convolution_overrideable") && meta[0].dim() == 3 &&
             args.size() > 1 && args[1].isTensor() && args[1].toTensor().dim() == 3) {
    const bool cl = args[1].toTensor().unsqueeze(2).suggest_memory_format() == at::MemoryFormat::ChannelsLast;
    const at::Tensor& m = meta[0];
    meta[0] = cl ? at::empty_strided(m.sizes(), {m.size(1) * m.size(2), 1, m.size(1)}, m.options())
                 : contiguous_like(m, at::MemoryFormat::Contiguous);
  }
}

// The results of an op that has no meta kernel, as empty meta tensors (for
// cpu_kernel_layouts to lay out): geqrf's a and tau.
std::optional<std::vector<at::Tensor>> without_meta_kernel(const std::string& functional,
                                                           const std::vector<c10::IValue>& args) {
  if (functional != "aten::geqrf" || args.empty() || !args[0].isTensor() || args[0].toTensor().dim() < 2) {
    return std::nullopt;
  }
  const at::Tensor& self = args[0].toTensor();
  const at::TensorOptions options = at::TensorOptions().dtype(self.scalar_type()).device(at::kMeta);
  std::vector<int64_t> tau(self.sizes().begin(), self.sizes().end() - 1);
  tau.back() = std::min(self.size(-2), self.size(-1));
  return std::vector<at::Tensor>{at::empty(self.sizes(), options), at::empty(tau, options)};
}

}  // namespace tpu
