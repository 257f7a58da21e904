// Convolution (1d/2d/3d, strided, padded, dilated, grouped, transposed) and
// its backward, as stablehlo.convolution in NCHW / OIHW layout.
#include "csrc/lowering/common.h"

namespace tpu::lowering {

namespace {

// An int[] argument expanded to `n` values (a single value repeats).
Dims expand_param(const std::vector<int64_t>& v, int64_t n, int64_t dflt) {
  if (v.empty()) return Dims(n, dflt);
  if (v.size() == 1) return Dims(n, v[0]);
  TORCH_CHECK(static_cast<int64_t>(v.size()) == n, "expected ", n, " values, got ", v.size());
  return Dims(v.begin(), v.end());
}

Dims perm_swap01(int64_t rank) {
  Dims p(rank);
  for (int64_t i = 0; i < rank; ++i) p[i] = i;
  std::swap(p[0], p[1]);
  return p;
}

Dims spatial(int64_t nsp) {
  Dims d(nsp);
  for (int64_t i = 0; i < nsp; ++i) d[i] = 2 + i;
  return d;
}

// Weight of a transposed convolution [Cin, Cout/G, k] as the kernel of the
// equivalent convolution: [Cout, Cin/G, k], flipped spatially. Also the
// kernel of a convolution's input gradient.
Value transposed_kernel(Builder& b, Value w, int64_t groups) {
  const Dims d = b.dims(w);
  const int64_t cin = d[0], cout_g = d[1];
  const int64_t nsp = static_cast<int64_t>(d.size()) - 2;
  Dims grouped{groups, cin / groups, cout_g};
  grouped.insert(grouped.end(), d.begin() + 2, d.end());
  Value g = b.reshape(w, grouped);
  Dims perm{0, 2, 1};
  for (int64_t i = 0; i < nsp; ++i) perm.push_back(3 + i);
  g = b.transpose(g, perm);
  Dims out{groups * cout_g, cin / groups};
  out.insert(out.end(), d.begin() + 2, d.end());
  return b.reverse(b.reshape(g, out), spatial(nsp));
}

struct ConvParams {
  Dims stride, padding, dilation, output_padding;
  bool transposed = false;
  int64_t groups = 1;
};

ConvParams conv_params(Context& c, size_t first, int64_t nsp) {
  // (stride, padding, dilation, transposed, output_padding, groups) from `first`
  ConvParams p;
  p.stride = expand_param(c.args.ints(first), nsp, 1);
  p.padding = expand_param(c.args.ints(first + 1), nsp, 0);
  p.dilation = expand_param(c.args.ints(first + 2), nsp, 1);
  p.transposed = c.args.bool_(first + 3);
  p.output_padding = expand_param(c.args.ints(first + 4), nsp, 0);
  p.groups = c.args.int_(first + 5);
  return p;
}

Value conv_forward(Builder& b, Value x, Value w, const ConvParams& p, DType out) {
  const int64_t nsp = b.rank(x) - 2;
  std::vector<std::pair<int64_t, int64_t>> pad;
  if (!p.transposed) {
    for (int64_t i = 0; i < nsp; ++i) pad.emplace_back(p.padding[i], p.padding[i]);
    return b.convolution(x, w, p.stride, pad, Dims(nsp, 1), p.dilation, p.groups, 1, out);
  }
  const Dims& wd = b.dims(w);
  for (int64_t i = 0; i < nsp; ++i) {
    const int64_t k = p.dilation[i] * (wd[2 + i] - 1);
    pad.emplace_back(k - p.padding[i], k - p.padding[i] + p.output_padding[i]);
  }
  return b.convolution(x, transposed_kernel(b, w, p.groups), Dims(nsp, 1), pad, p.stride, p.dilation,
                       p.groups, 1, out);
}

// d(out)/d(input) of a regular convolution: a transposed convolution of the
// gradient with the same kernel, sized back to `in_sizes`.
Value conv_input_grad(Builder& b, Value dy, Value w, const Dims& in_sizes, const Dims& stride,
                      const Dims& padding, const Dims& dilation, int64_t groups, DType out) {
  const int64_t nsp = b.rank(dy) - 2;
  const Dims& wd = b.dims(w);
  const Dims& od = b.dims(dy);
  // The kernel of the adjoint: [Cout, Cin/G, k] -> [Cin, Cout/G, k], flipped
  // (the same regrouping as a transposed convolution's kernel).
  Value kernel = transposed_kernel(b, w, groups);
  std::vector<std::pair<int64_t, int64_t>> pad;
  for (int64_t i = 0; i < nsp; ++i) {
    const int64_t k = dilation[i] * (wd[2 + i] - 1);
    const int64_t lo = k - padding[i];
    const int64_t covered = (od[2 + i] - 1) * stride[i] + 1 + k - 2 * padding[i];
    pad.emplace_back(lo, lo + (in_sizes[2 + i] - covered));
  }
  return b.convolution(dy, kernel, Dims(nsp, 1), pad, stride, dilation, groups, 1, out);
}

// d(out)/d(weight) of a regular convolution of x giving dy: a convolution
// with batch and features swapped (groups as batch groups); [Cout, Cin/G, k].
Value conv_weight_grad(Builder& b, Value x, Value dy, const Dims& k_sizes, const Dims& stride,
                       const Dims& padding, const Dims& dilation, int64_t groups, DType out) {
  const int64_t rank = b.rank(x);
  const int64_t nsp = rank - 2;
  Value lhs = b.transpose(x, perm_swap01(rank));   // [Cin, N, in]
  Value rhs = b.transpose(dy, perm_swap01(rank));  // [Cout, N, out]
  const Dims& in = b.dims(x);
  const Dims& od = b.dims(dy);
  std::vector<std::pair<int64_t, int64_t>> pad;
  for (int64_t i = 0; i < nsp; ++i) {
    const int64_t hi = (k_sizes[i] - 1) * dilation[i] - in[2 + i] - padding[i] + (od[2 + i] - 1) * stride[i] + 1;
    pad.emplace_back(padding[i], hi);
  }
  Value r = b.convolution(lhs, rhs, dilation, pad, Dims(nsp, 1), stride, 1, groups, out);
  return b.transpose(r, perm_swap01(rank));  // [Cout, Cin/G, k]
}

DType compute_type(at::ScalarType t) { return to_hlo(opmath_type(t)); }

// convolution(input, weight, bias?, stride, padding, dilation, transposed,
// output_padding, groups); also convolution_overrideable.
std::vector<Value> lower_convolution(Context& c) {
  const TensorInfo& in = c.args.info(0);
  const TensorInfo& w = c.args.info(1);
  TORCH_CHECK(in.dim() >= 3 && in.dim() == w.dim(), "Expected ", w.dim(),
              "-dimensional input for ", w.dim(), "-dimensional weight ", dims_string(w.sizes),
              ", but got ", in.dim(), "-dimensional input of size ", dims_string(in.sizes), " instead");
  const int64_t nsp = in.dim() - 2;
  ConvParams p = conv_params(c, 3, nsp);
  Builder& b = c.b;
  const DType ct = compute_type(in.dtype);
  Value x = b.convert(c.args.tensor(0), ct);
  Value wt = b.convert(c.args.tensor(1), ct);
  Value y = conv_forward(b, x, wt, p, ct);
  if (c.args.has(2)) {
    Value bias = b.convert(c.args.tensor(2), ct);
    y = b.add(y, b.broadcast_in_dim(bias, b.dims(y), {1}));
  }
  return one(cast(b, y, in.dtype));
}

// The gradients of a convolution; `mask` says which of (input, weight, bias).
std::vector<Value> conv_backward(Context& c, size_t go, size_t x_arg, size_t w_arg, size_t params,
                                 size_t mask_arg) {
  const TensorInfo& in = c.args.info(x_arg);
  const TensorInfo& w = c.args.info(w_arg);
  const int64_t nsp = in.dim() - 2;
  ConvParams p = conv_params(c, params, nsp);
  std::vector<int64_t> mask = c.args.ints(mask_arg);
  Builder& b = c.b;
  const DType ct = compute_type(in.dtype);
  Value dy = b.convert(c.args.tensor(go), ct);
  Value x = b.convert(c.args.tensor(x_arg), ct);
  Value wt = b.convert(c.args.tensor(w_arg), ct);
  Dims k_sizes(w.sizes.begin() + 2, w.sizes.end());
  Value gi, gw, gb;
  if (mask.size() > 0 && mask[0]) {
    gi = p.transposed
             ? b.convolution(dy, wt, p.stride,
                             [&] {
                               std::vector<std::pair<int64_t, int64_t>> pad;
                               for (int64_t i = 0; i < nsp; ++i) pad.emplace_back(p.padding[i], p.padding[i]);
                               return pad;
                             }(),
                             Dims(nsp, 1), p.dilation, p.groups, 1, ct)
             : conv_input_grad(b, dy, wt, in.sizes, p.stride, p.padding, p.dilation, p.groups, ct);
    if (b.dims(gi) != in.sizes) gi = b.slice(gi, Dims(in.dim(), 0), in.sizes);
    gi = cast(b, gi, in.dtype);
  }
  if (mask.size() > 1 && mask[1]) {
    gw = p.transposed ? conv_weight_grad(b, dy, x, k_sizes, p.stride, p.padding, p.dilation, p.groups, ct)
                      : conv_weight_grad(b, x, dy, k_sizes, p.stride, p.padding, p.dilation, p.groups, ct);
    gw = cast(b, gw, w.dtype);
  }
  if (mask.size() > 2 && mask[2]) {
    Dims red{0};
    for (int64_t i = 0; i < nsp; ++i) red.push_back(2 + i);
    gb = cast(b, sum_over(b, dy, red), in.dtype);
  }
  return {gi, gw, gb};
}

}  // namespace

TPU_LOWERINGS(conv) {
  reg("aten::convolution", lower_convolution);
  reg("aten::convolution_overrideable", lower_convolution);
  // convolution_backward(grad_output, input, weight, bias_sizes?, stride,
  //   padding, dilation, transposed, output_padding, groups, output_mask)
  reg("aten::convolution_backward", [](Context& c) { return conv_backward(c, 0, 1, 2, 4, 10); });
  // convolution_backward_overrideable(grad_output, input, weight, stride,
  //   padding, dilation, transposed, output_padding, groups, output_mask)
  reg("aten::convolution_backward_overrideable", [](Context& c) { return conv_backward(c, 0, 1, 2, 3, 9); });
}

}  // namespace tpu::lowering
