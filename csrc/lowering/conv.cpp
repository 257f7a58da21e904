// Convolution (1d/2d/3d, strided, padded, dilated, grouped, transposed) and
// its backward, as stablehlo.convolution in NCHW / OIHW layout; im2col and
// col2im (nn.Unfold / nn.Fold), which move the same sliding windows.
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
  TORCH_CHECK(in.dtype == w.dtype, "expected scalar type ", in.dtype, " but found ", w.dtype);
  if (c.args.has(2)) {
    TORCH_CHECK(c.args.info(2).dtype == in.dtype, "Input type (", in.dtype, ") and bias type (",
                c.args.info(2).dtype, ") should be the same");
  }
  const int64_t channels = p.transposed ? w.sizes[0] : w.sizes[1] * p.groups;
  TORCH_CHECK(in.sizes[1] == channels, "Given ", p.transposed ? "transposed=1" : "groups=" + std::to_string(p.groups),
              ", weight of size ", dims_string(w.sizes), ", expected input", dims_string(in.sizes), " to have ",
              channels, " channels, but got ", in.sizes[1], " channels instead");
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

// The sliding-window geometry of im2col/col2im over a 2-D image.
struct Patches {
  Dims kernel, dilation, padding, stride;
  Dims image;  // H, W
  Dims blocks; // blocks along H and W
  int64_t count() const { return blocks[0] * blocks[1]; }
};

Patches patches(Context& c, const char* op, const Dims& image, size_t kernel_arg) {
  Patches p;
  const char* names[] = {"kernel_size", "dilation", "padding", "stride"};
  Dims* fields[] = {&p.kernel, &p.dilation, &p.padding, &p.stride};
  for (size_t i = 0; i < 4; ++i) {
    std::vector<int64_t> v = c.args.ints(kernel_arg + i);
    TORCH_CHECK(v.size() == 2, op, ": It is expected ", names[i], " equals to 2, but got size ", v.size());
    *fields[i] = Dims(v.begin(), v.end());
    const bool ok = i == 2 ? v[0] >= 0 && v[1] >= 0 : v[0] > 0 && v[1] > 0;
    TORCH_CHECK(ok, op, ": expected ", names[i], " to be ", i == 2 ? "non-negative" : "greater than zero",
                ", but got ", names[i], "=", dims_string(*fields[i]));
  }
  p.image = image;
  for (int64_t d = 0; d < 2; ++d) {
    const int64_t span = p.dilation[d] * (p.kernel[d] - 1) + 1;
    p.blocks.push_back((image[d] + 2 * p.padding[d] - span) / p.stride[d] + 1);
    TORCH_CHECK(image[d] + 2 * p.padding[d] >= span && p.blocks[d] >= 1, op,
                ": given input with spatial size ", dims_string(image), ", kernel_size=", dims_string(p.kernel),
                ", dilation=", dims_string(p.dilation), ", padding=", dims_string(p.padding),
                ", calculated shape of the array of sliding blocks as ", p.blocks[0], "x",
                (image[1] + 2 * p.padding[1] - (p.dilation[1] * (p.kernel[1] - 1) + 1)) / p.stride[1] + 1,
                ", but its components must be at least one.");
  }
  return p;
}

// im2col(self, kernel_size, dilation, padding, stride): [N, C, H, W] ->
// [N, C*kh*kw, L], one column per sliding block.
std::vector<Value> lower_im2col(Context& c) {
  const TensorInfo& in = c.args.info(0);
  TORCH_CHECK((in.dim() == 3 || in.dim() == 4) && in.sizes[in.dim() - 1] > 0 && in.sizes[in.dim() - 2] > 0 &&
                  in.sizes[in.dim() - 3] > 0,
              "im2col: Expected 3D or 4D (batch mode) tensor with possibly 0 batch size and other non-zero "
              "dimensions for input, but got: ", dims_string(in.sizes));
  Builder& b = c.b;
  const bool batched = in.dim() == 4;
  Value x = batched ? c.args.tensor(0) : b.reshape(c.args.tensor(0), {1, in.sizes[0], in.sizes[1], in.sizes[2]});
  const Dims& d = b.dims(x);
  const int64_t n = d[0], ch = d[1];
  Patches p = patches(c, "im2col", {d[2], d[3]}, 1);
  x = b.pad(x, b.zeros(Type{b.dtype(x), {}}), {0, 0, p.padding[0], p.padding[1]},
            {0, 0, p.padding[0], p.padding[1]});
  std::vector<Value> taps;
  for (int64_t i = 0; i < p.kernel[0]; ++i) {
    for (int64_t j = 0; j < p.kernel[1]; ++j) {
      const int64_t h0 = i * p.dilation[0], w0 = j * p.dilation[1];
      Value tap = b.slice(x, {0, 0, h0, w0},
                          {n, ch, h0 + (p.blocks[0] - 1) * p.stride[0] + 1, w0 + (p.blocks[1] - 1) * p.stride[1] + 1},
                          {1, 1, p.stride[0], p.stride[1]});
      taps.push_back(b.reshape(tap, {n, ch, 1, p.count()}));
    }
  }
  const int64_t k = p.kernel[0] * p.kernel[1];
  Value cols = b.reshape(b.concatenate(taps, 2), {n, ch * k, p.count()});
  return one(batched ? cols : b.reshape(cols, {ch * k, p.count()}));
}

// col2im(self, output_size, kernel_size, dilation, padding, stride): the
// adjoint of im2col; overlapping blocks add up.
std::vector<Value> lower_col2im(Context& c) {
  const TensorInfo& in = c.args.info(0);
  const std::vector<int64_t> out = c.args.ints(1);
  TORCH_CHECK(out.size() == 2, "col2im: It is expected output_size equals to 2, but got size ", out.size());
  TORCH_CHECK((in.dim() == 2 || in.dim() == 3) && in.sizes[in.dim() - 1] > 0 && in.sizes[in.dim() - 2] > 0,
              "col2im: Expected 2D or 3D (batch mode) tensor for input with possibly 0 batch size and non-zero "
              "dimensions for input, but got: ", dims_string(in.sizes));
  Builder& b = c.b;
  const bool batched = in.dim() == 3;
  Value x = batched ? c.args.tensor(0) : b.reshape(c.args.tensor(0), {1, in.sizes[0], in.sizes[1]});
  const Dims& d = b.dims(x);
  const int64_t n = d[0];
  Patches p = patches(c, "col2im", {out[0], out[1]}, 2);
  const int64_t k = p.kernel[0] * p.kernel[1];
  TORCH_CHECK(d[1] % k == 0, "col2im: Expected size of input's dimension 1 to be divisible by the product of "
              "kernel_size, but got input.size(1)=", d[1], " and kernel_size=", dims_string(p.kernel));
  TORCH_CHECK(d[2] == p.count(), "col2im: Given output_size=", dims_string(p.image), ", kernel_size=",
              dims_string(p.kernel), ", dilation=", dims_string(p.dilation), ", padding=", dims_string(p.padding),
              ", stride=", dims_string(p.stride), ", expected size of input's dimension 2 to match the calculated "
              "number of sliding blocks ", p.blocks[0], " * ", p.blocks[1], " = ", p.count(),
              ", but got input.size(2)=", d[2], ".");
  const int64_t ch = d[1] / k;
  const DType ct = to_hlo(opmath_type(in.dtype));
  Value cols = b.reshape(b.convert(x, ct), {n, ch, k, p.blocks[0], p.blocks[1]});
  const int64_t ph = out[0] + 2 * p.padding[0], pw = out[1] + 2 * p.padding[1];
  Value sum = b.zeros(Type{ct, {n, ch, ph, pw}});
  for (int64_t i = 0; i < p.kernel[0]; ++i) {
    for (int64_t j = 0; j < p.kernel[1]; ++j) {
      const int64_t t = i * p.kernel[1] + j;
      Value tap = b.reshape(b.slice(cols, {0, 0, t, 0, 0}, {n, ch, t + 1, p.blocks[0], p.blocks[1]}),
                            {n, ch, p.blocks[0], p.blocks[1]});
      // Spread the blocks `stride` apart and place them at the tap's offset.
      const int64_t h0 = i * p.dilation[0], w0 = j * p.dilation[1];
      const int64_t hspan = (p.blocks[0] - 1) * p.stride[0] + 1, wspan = (p.blocks[1] - 1) * p.stride[1] + 1;
      Value placed = b.pad(tap, b.zeros(Type{ct, {}}), {0, 0, h0, w0}, {0, 0, ph - h0 - hspan, pw - w0 - wspan},
                           {0, 0, p.stride[0] - 1, p.stride[1] - 1});
      sum = b.add(sum, placed);
    }
  }
  Value r = b.slice(sum, {0, 0, p.padding[0], p.padding[1]}, {n, ch, p.padding[0] + out[0], p.padding[1] + out[1]});
  r = cast(b, r, in.dtype);
  return one(batched ? r : b.reshape(r, {ch, out[0], out[1]}));
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
  reg("aten::im2col", lower_im2col);
  reg("aten::col2im", lower_col2im);
}

}  // namespace tpu::lowering
