// Normalization: layer, group and batch norm (with their running
// statistics), SyncBatchNorm's per-rank pieces, and weight norm, forward and
// backward. Statistics are computed in opmath (float for half and bfloat16).
#include <cmath>

#include "csrc/lowering/common.h"

namespace tpu::lowering {

namespace {

// native_layer_norm(input, normalized_shape, weight?, bias?, eps) -> (out, mean, rstd)
std::vector<Value> lower_layer_norm(Context& c) {
  const TensorInfo& in = c.args.info(0);
  const Dims normalized = c.args.ints(1);
  const int64_t axis = in.dim() - static_cast<int64_t>(normalized.size());
  TORCH_CHECK(axis >= 0, "Given normalized_shape=", dims_string(normalized),
              ", expected input with shape [*, ...] but got input of size", dims_string(in.sizes));
  for (size_t i = 0; i < normalized.size(); ++i) {
    TORCH_CHECK(in.sizes[axis + i] == normalized[i], "Given normalized_shape=", dims_string(normalized),
                ", expected input with shape [*, ", dims_string(normalized).substr(1), ", but got input of size",
                dims_string(in.sizes));
  }
  const double eps = c.args.double_(4);
  Builder& b = c.b;
  const at::ScalarType t = in.dtype;
  const DType ct = to_hlo(opmath_type(t));
  Value x = b.convert(c.args.tensor(0), ct);
  const Dims red = range(axis, in.dim());
  const Dims keep = range(0, axis);
  const double n = static_cast<double>(count_over(in.sizes, red));
  Dims stat_dims(in.sizes.begin(), in.sizes.begin() + axis);
  Value mean = b.div(sum_over(b, x, red), b.full(n, ct, stat_dims));
  Value xc = b.sub(x, b.broadcast_in_dim(mean, in.sizes, keep));
  Value var = b.div(sum_over(b, b.mul(xc, xc), red), b.full(n, ct, stat_dims));
  Value rstd = b.unary("stablehlo.rsqrt", b.add(var, b.full(eps, ct, stat_dims)));
  Value y = b.mul(xc, b.broadcast_in_dim(rstd, in.sizes, keep));
  if (c.args.has(2)) y = b.mul(y, b.broadcast_to(b.convert(c.args.tensor(2), ct), in.sizes));
  if (c.args.has(3)) y = b.add(y, b.broadcast_to(b.convert(c.args.tensor(3), ct), in.sizes));
  Dims kept = stat_dims;
  for (int64_t i = axis; i < in.dim(); ++i) kept.push_back(1);
  // The statistics have the parameters' dtype on the CPU (float when half
  // or bfloat16 input comes with float parameters); CUDA and meta use float.
  bool mixed = false;
  for (size_t i : {size_t{2}, size_t{3}}) mixed |= c.args.has(i) && c.args.info(i).dtype != t;
  const at::ScalarType stat_t = mixed ? opmath_type(t) : t;
  return {cast(b, y, t), cast(b, b.reshape(mean, kept), stat_t), cast(b, b.reshape(rstd, kept), stat_t)};
}

// native_layer_norm_backward(grad_out, input, normalized_shape, mean, rstd,
//   weight?, bias?, output_mask) -> (grad_input, grad_weight, grad_bias)
std::vector<Value> lower_layer_norm_backward(Context& c) {
  const TensorInfo& in = c.args.info(1);
  const Dims normalized = c.args.ints(2);
  const int64_t axis = in.dim() - static_cast<int64_t>(normalized.size());
  std::vector<int64_t> mask = c.args.ints(7);
  Builder& b = c.b;
  const at::ScalarType t = in.dtype;
  const DType ct = to_hlo(opmath_type(t));
  const Dims red = range(axis, in.dim());
  const Dims lead = range(0, axis);
  const double n = static_cast<double>(count_over(in.sizes, red));
  Value g = b.convert(c.args.tensor(0), ct);
  Value x = b.convert(c.args.tensor(1), ct);
  Value mean = b.broadcast_to(b.convert(c.args.tensor(3), ct), in.sizes);
  Value rstd = b.broadcast_to(b.convert(c.args.tensor(4), ct), in.sizes);
  Value xhat = b.mul(b.sub(x, mean), rstd);
  Value gw = c.args.has(5) ? b.mul(g, b.broadcast_to(b.convert(c.args.tensor(5), ct), in.sizes)) : g;
  Value gi, gwt, gbs;
  Dims stat_dims(in.sizes.begin(), in.sizes.begin() + axis);
  // The sums over the normalized dims and over the leading ones, as products
  // with a vector of ones: XLA's CPU reductions of a [rows, columns] value
  // take 3-4x CPU PyTorch's time, its matrix-vector products less (the
  // backward of a (32, 64, 128) layer norm: about a quarter less time).
  const int64_t R = count_over(in.sizes, lead), C = static_cast<int64_t>(n);
  auto sum_red = [&](Value v) {
    Value r = b.dot_general(b.reshape(v, {R, C}), b.full(1.0, ct, {C}), {}, {}, {1}, {0}, ct, true);
    return b.reshape(r, stat_dims);
  };
  auto sum_lead = [&](Value v) {
    Value r = b.dot_general(b.full(1.0, ct, {R}), b.reshape(v, {R, C}), {}, {}, {0}, {0}, ct, true);
    return b.reshape(r, Dims(in.sizes.begin() + axis, in.sizes.end()));
  };
  if (mask[0]) {
    Value s1 = b.broadcast_in_dim(sum_red(gw), in.sizes, lead);
    Value s2 = b.broadcast_in_dim(sum_red(b.mul(gw, xhat)), in.sizes, lead);
    Value inner = b.sub(b.sub(b.mul(gw, b.full(n, ct, in.sizes)), s1), b.mul(xhat, s2));
    gi = cast(b, b.mul(b.div(rstd, b.full(n, ct, in.sizes)), inner), t);
  }
  if (mask.size() > 1 && mask[1] && c.args.has(5)) {
    gwt = cast(b, sum_lead(b.mul(g, xhat)), c.args.info(5).dtype);
  }
  if (mask.size() > 2 && mask[2] && c.args.has(6)) {
    gbs = cast(b, sum_lead(g), c.args.info(6).dtype);
  }
  return {gi, gwt, gbs};
}

// native_group_norm(input, weight?, bias?, N, C, HxW, group, eps) -> (out, mean[N,G], rstd[N,G])
std::vector<Value> lower_group_norm(Context& c) {
  const TensorInfo& in = c.args.info(0);
  const int64_t N = c.args.int_(3), C = c.args.int_(4), HW = c.args.int_(5), G = c.args.int_(6);
  const double eps = c.args.double_(7);
  TORCH_CHECK(C % G == 0, "Expected number of channels in input to be divisible by num_groups, but got input of shape ",
              dims_string(in.sizes), " and num_groups=", G);
  Builder& b = c.b;
  const at::ScalarType t = in.dtype;
  const DType ct = to_hlo(opmath_type(t));
  const Dims grouped{N, G, C / G * HW};
  Value x = b.reshape(b.convert(c.args.tensor(0), ct), grouped);
  const double n = static_cast<double>(C / G * HW);
  Value mean = b.div(sum_over(b, x, {2}), b.full(n, ct, {N, G}));
  Value xc = b.sub(x, b.broadcast_in_dim(mean, grouped, {0, 1}));
  Value var = b.div(sum_over(b, b.mul(xc, xc), {2}), b.full(n, ct, {N, G}));
  Value rstd = b.unary("stablehlo.rsqrt", b.add(var, b.full(eps, ct, {N, G})));
  Value y = b.reshape(b.mul(xc, b.broadcast_in_dim(rstd, grouped, {0, 1})), {N, C, HW});
  if (c.args.has(1)) y = b.mul(y, b.broadcast_in_dim(b.convert(c.args.tensor(1), ct), {N, C, HW}, {1}));
  if (c.args.has(2)) y = b.add(y, b.broadcast_in_dim(b.convert(c.args.tensor(2), ct), {N, C, HW}, {1}));
  return {cast(b, b.reshape(y, in.sizes), t), cast(b, mean, t), cast(b, rstd, t)};
}

// native_group_norm_backward(grad_out, input, mean, rstd, weight?, N, C, HxW, group, output_mask)
std::vector<Value> lower_group_norm_backward(Context& c) {
  const TensorInfo& in = c.args.info(1);
  const int64_t N = c.args.int_(5), C = c.args.int_(6), HW = c.args.int_(7), G = c.args.int_(8);
  std::vector<int64_t> mask = c.args.ints(9);
  Builder& b = c.b;
  const at::ScalarType t = in.dtype;
  const DType ct = to_hlo(opmath_type(t));
  const Dims flat{N, C, HW};
  const Dims grouped{N, G, C / G * HW};
  Value g = b.reshape(b.convert(c.args.tensor(0), ct), flat);
  Value x = b.reshape(b.convert(c.args.tensor(1), ct), flat);
  Value mean = b.convert(c.args.tensor(2), ct), rstd = b.convert(c.args.tensor(3), ct);
  auto per_channel = [&](Value stat) {  // [N, G] -> [N, C, HW]
    Value e = b.broadcast_in_dim(stat, {N, G, C / G, HW}, {0, 1});
    return b.reshape(e, flat);
  };
  Value xhat = b.mul(b.sub(x, per_channel(mean)), per_channel(rstd));
  Value gw = c.args.has(4) ? b.mul(g, b.broadcast_in_dim(b.convert(c.args.tensor(4), ct), flat, {1})) : g;
  Value gi, gwt, gbs;
  if (mask[0]) {
    const double n = static_cast<double>(C / G * HW);
    Value gwg = b.reshape(gw, grouped), xg = b.reshape(xhat, grouped);
    Value s1 = b.broadcast_in_dim(sum_over(b, gwg, {2}), grouped, {0, 1});
    Value s2 = b.broadcast_in_dim(sum_over(b, b.mul(gwg, xg), {2}), grouped, {0, 1});
    Value inner = b.sub(b.sub(b.mul(gwg, b.full(n, ct, grouped)), s1), b.mul(xg, s2));
    Value r = b.mul(b.div(b.broadcast_in_dim(rstd, grouped, {0, 1}), b.full(n, ct, grouped)), inner);
    gi = cast(b, b.reshape(r, in.sizes), t);
  }
  if (mask.size() > 1 && mask[1]) gwt = cast(b, sum_over(b, b.mul(g, xhat), {0, 2}), t);
  if (mask.size() > 2 && mask[2]) gbs = cast(b, sum_over(b, g, {0, 2}), t);
  return {gi, gwt, gbs};
}

// The channels (dim 1) of a batch norm's input and what is reduced per channel.
struct Channels {
  Dims red;  // every dim but the channels' (1)
  int64_t C;
  double n;  // elements per channel
};
Channels channels_of(const TensorInfo& in, const char* op) {
  TORCH_CHECK(in.dim() >= 2, op, ": expected an input with at least 2 dims, got ", in.dim());
  Channels ch{{0}, in.sizes[1], 0};
  for (int64_t i = 2; i < in.dim(); ++i) ch.red.push_back(i);
  ch.n = static_cast<double>(count_over(in.sizes, ch.red));
  return ch;
}

// native_batch_norm(input, weight?, bias?, running_mean?, running_var?,
//   training, momentum, eps) -> (out, save_mean, save_invstd); updates the
// running statistics in training mode.
// Batch norm's saved statistics have the parameters' dtype: float when half
// or bfloat16 input comes with float parameters, else the input's (CPU).
at::ScalarType stats_dtype(Context& c, at::ScalarType t, std::initializer_list<std::optional<size_t>> params) {
  for (std::optional<size_t> i : params) {
    if (i && c.args.has(*i) && c.args.info(*i).dtype != t) return opmath_type(t);
  }
  return t;
}

std::vector<Value> batch_norm(Context& c, size_t w_arg, size_t b_arg, std::optional<size_t> rm_arg,
                              std::optional<size_t> rv_arg, bool training, double momentum, double eps) {
  const TensorInfo& in = c.args.info(0);
  const Channels ch = channels_of(in, "batch_norm");
  const Dims& red = ch.red;
  const int64_t C = ch.C;
  Builder& b = c.b;
  const at::ScalarType t = in.dtype;
  const DType ct = to_hlo(opmath_type(t));
  Value x = b.convert(c.args.tensor(0), ct);
  const bool has_rm = rm_arg && c.args.has(*rm_arg), has_rv = rv_arg && c.args.has(*rv_arg);
  Value mean, invstd;
  if (training) {
    const double n = ch.n;
    TORCH_CHECK(n > 1 || !training, "Expected more than 1 value per channel when training, got input size ",
                dims_string(in.sizes));
    mean = b.div(sum_over(b, x, red), b.full(n, ct, {C}));
    Value xc = b.sub(x, b.broadcast_in_dim(mean, in.sizes, {1}));
    Value ss = sum_over(b, b.mul(xc, xc), red);
    Value var = b.div(ss, b.full(n, ct, {C}));
    invstd = b.unary("stablehlo.rsqrt", b.add(var, b.full(eps, ct, {C})));
    if (has_rm) {
      Value rm = b.convert(c.args.tensor(*rm_arg), ct);
      c.args.assign(*rm_arg, b.add(b.mul(b.full(1 - momentum, ct, {C}), rm), b.mul(b.full(momentum, ct, {C}), mean)));
    }
    if (has_rv) {
      Value rv = b.convert(c.args.tensor(*rv_arg), ct);
      Value unbiased = b.div(ss, b.full(n - 1, ct, {C}));
      c.args.assign(*rv_arg, b.add(b.mul(b.full(1 - momentum, ct, {C}), rv), b.mul(b.full(momentum, ct, {C}), unbiased)));
    }
  } else {
    TORCH_CHECK(has_rm && has_rv, "running_mean and running_var must be defined in evaluation mode");
    mean = b.convert(c.args.tensor(*rm_arg), ct);
    invstd = b.unary("stablehlo.rsqrt", b.add(b.convert(c.args.tensor(*rv_arg), ct), b.full(eps, ct, {C})));
  }
  Value y = b.mul(b.sub(x, b.broadcast_in_dim(mean, in.sizes, {1})), b.broadcast_in_dim(invstd, in.sizes, {1}));
  if (c.args.has(w_arg)) y = b.mul(y, b.broadcast_in_dim(b.convert(c.args.tensor(w_arg), ct), in.sizes, {1}));
  if (c.args.has(b_arg)) y = b.add(y, b.broadcast_in_dim(b.convert(c.args.tensor(b_arg), ct), in.sizes, {1}));
  if (!training) {
    // As on CPU, evaluation returns no saved statistics (the backward uses
    // the running ones). PyTorch's meta kernels follow CUDA here instead.
    Value none = b.zeros(Type{to_hlo(stats_dtype(c, t, {w_arg, b_arg, rm_arg, rv_arg})), {0}});
    return {cast(b, y, t), none, none};
  }
  const at::ScalarType st = stats_dtype(c, t, {w_arg, b_arg, rm_arg, rv_arg});
  return {cast(b, y, t), cast(b, mean, st), cast(b, invstd, st)};
}

// native_batch_norm_backward(grad_out, input, weight?, running_mean?, running_var?,
//   save_mean?, save_invstd?, train, eps, output_mask)
std::vector<Value> lower_batch_norm_backward(Context& c) {
  const TensorInfo& in = c.args.info(1);
  const bool train = c.args.bool_(7);
  const double eps = c.args.double_(8);
  std::vector<int64_t> mask = c.args.ints(9);
  const Channels ch = channels_of(in, "batch_norm_backward");
  const Dims& red = ch.red;
  const int64_t C = ch.C;
  const double n = ch.n;
  Builder& b = c.b;
  const at::ScalarType t = in.dtype;
  const DType ct = to_hlo(opmath_type(t));
  Value g = b.convert(c.args.tensor(0), ct);
  Value x = b.convert(c.args.tensor(1), ct);
  Value mean, invstd;
  if (train) {
    mean = b.convert(c.args.tensor(5), ct);
    invstd = b.convert(c.args.tensor(6), ct);
  } else {
    mean = b.convert(c.args.tensor(3), ct);
    invstd = b.unary("stablehlo.rsqrt", b.add(b.convert(c.args.tensor(4), ct), b.full(eps, ct, {C})));
  }
  auto bc = [&](Value v) { return b.broadcast_in_dim(v, in.sizes, {1}); };
  Value gsum = sum_over(b, g, red);
  Value xc = b.sub(x, bc(mean));
  Value dot = sum_over(b, b.mul(g, xc), red);
  Value scale = c.args.has(2) ? b.mul(invstd, b.convert(c.args.tensor(2), ct)) : invstd;
  Value gi, gw, gbias;
  if (mask[0]) {
    if (train) {
      Value proj = b.mul(xc, bc(b.mul(b.div(dot, b.full(n, ct, {C})), b.mul(invstd, invstd))));
      Value gmean = bc(b.div(gsum, b.full(n, ct, {C})));
      gi = b.mul(b.sub(b.sub(g, proj), gmean), bc(scale));
    } else {
      gi = b.mul(g, bc(scale));
    }
    gi = cast(b, gi, t);
  }
  const at::ScalarType wt = c.args.has(2) ? c.args.info(2).dtype : t;
  if (mask.size() > 1 && mask[1]) gw = cast(b, b.mul(dot, invstd), wt);
  if (mask.size() > 2 && mask[2]) gbias = cast(b, gsum, wt);
  return {gi, gw, gbias};
}

// _weight_norm_interface(v, g, dim): w = v * (g / ||v||), the norm over
// every dim but `dim`, in g's shape (float for reduced-precision operands,
// as CPU's kernel keeps it); the fused form weight_norm takes for dim 0 and
// the last dim.
struct WeightNorm {
  Dims over;  // the dims the norm runs over
  Dims keep;  // the rest (the broadcast dims of a per-`dim` value)
};
WeightNorm weight_norm_dims(int64_t rank, int64_t dim) {
  WeightNorm w;
  if (rank > 0 && dim < 0) dim += rank;
  for (int64_t d = 0; d < rank; ++d) (d == dim ? w.keep : w.over).push_back(d);
  return w;
}

// The per-`dim` values of x (a [v's shape] value reduced over wn.over),
// broadcast back to v's shape.
Value along_dim(Builder& b, Value reduced, const Dims& shape, const WeightNorm& wn) {
  return b.broadcast_in_dim(reduced, shape, wn.keep);
}

std::vector<Value> lower_weight_norm_interface(Context& c) {
  const TensorInfo& v = c.args.info(0);
  const TensorInfo& g = c.args.info(1);
  Builder& b = c.b;
  const DType vt = to_hlo(v.dtype), ct = to_hlo(opmath_type(v.dtype));
  const WeightNorm wn = weight_norm_dims(v.dim(), c.args.int_(2));
  Value x = b.convert(c.args.tensor(0), ct);
  Value norm = b.unary("stablehlo.sqrt", sum_over(b, b.mul(x, x), wn.over));  // [v.sizes[dim]] (or rank 0)
  const int64_t keep_n = count_over(v.sizes, wn.keep);
  TORCH_CHECK(g.numel() == keep_n, "_weight_norm_interface: g of shape ", dims_string(g.sizes), " for v of shape ", dims_string(v.sizes),
              " along dim ", c.args.int_(2), ": g must have ", keep_n, " elements");
  Value gv = b.reshape(b.convert(c.args.tensor(1), ct), b.dims(norm));
  Value w = b.mul(x, along_dim(b, b.div(gv, norm), v.sizes, wn));
  const DType nt = (v.dtype == at::kHalf || v.dtype == at::kBFloat16) ? DType::F32 : to_hlo(g.dtype);
  return {b.convert(w, vt), b.convert(b.reshape(norm, g.sizes), nt)};
}

// _weight_norm_interface_backward(grad_w, saved_v, saved_g, saved_norms, dim):
// grad_g = sum(grad_w * v) / norm, grad_v = (g / norm) * (grad_w - v * grad_g / norm).
std::vector<Value> lower_weight_norm_interface_backward(Context& c) {
  const TensorInfo& v = c.args.info(1);
  const TensorInfo& g = c.args.info(2);
  Builder& b = c.b;
  const DType ct = to_hlo(opmath_type(v.dtype));
  const WeightNorm wn = weight_norm_dims(v.dim(), c.args.int_(4));
  Value gw = b.convert(c.args.tensor(0), ct), x = b.convert(c.args.tensor(1), ct);
  Value dot = sum_over(b, b.mul(gw, x), wn.over);
  const Dims& per = b.dims(dot);
  Value norm = b.reshape(b.convert(c.args.tensor(3), ct), per);
  Value gv = b.reshape(b.convert(c.args.tensor(2), ct), per);
  Value grad_g = b.div(dot, norm);
  Value grad_v = b.mul(along_dim(b, b.div(gv, norm), v.sizes, wn),
                       b.sub(gw, b.mul(x, along_dim(b, b.div(grad_g, norm), v.sizes, wn))));
  return {b.convert(grad_v, to_hlo(v.dtype)), b.convert(b.reshape(grad_g, g.sizes), to_hlo(g.dtype))};
}


// ---- SyncBatchNorm's pieces (torch.nn.SyncBatchNorm in distributed training) ----
// Each rank's statistics, their combination over the ranks' counts, the
// normalization, and the backward's per-channel sums and input gradient, as
// CUDA's kernels define them (statistics in float for half and bfloat16).

// batch_norm_stats(input, eps) -> (mean, invstd)
std::vector<Value> lower_batch_norm_stats(Context& c) {
  const TensorInfo& in = c.args.info(0);
  const Channels ch = channels_of(in, "batch_norm_stats");
  Builder& b = c.b;
  const DType ct = to_hlo(opmath_type(in.dtype));
  Value x = b.convert(c.args.tensor(0), ct);
  Value mean = b.div(sum_over(b, x, ch.red), b.full(ch.n, ct, {ch.C}));
  Value xc = b.sub(x, b.broadcast_in_dim(mean, in.sizes, {1}));
  Value var = b.div(sum_over(b, b.mul(xc, xc), ch.red), b.full(ch.n, ct, {ch.C}));
  return {mean, b.unary("stablehlo.rsqrt", b.add(var, b.full(c.args.double_(1), ct, {ch.C})))};
}

// batch_norm_gather_stats_with_counts(input, mean [R, C], invstd [R, C],
//   running_mean?, running_var?, momentum, eps, counts [R]) -> (mean, invstd):
// the ranks' statistics combined by their counts; the running statistics
// updated (the variance unbiased).
std::vector<Value> lower_batch_norm_gather_stats_with_counts(Context& c) {
  const TensorInfo& mi = c.args.info(1);
  TORCH_CHECK(mi.dim() == 2, "batch_norm_gather_stats_with_counts: mean must be [ranks, channels], got ",
              dims_string(mi.sizes));
  const int64_t R = mi.sizes[0], C = mi.sizes[1];
  const double momentum = c.args.double_(5), eps = c.args.double_(6);
  Builder& b = c.b;
  const DType ct = to_hlo(opmath_type(mi.dtype));
  Value m = b.convert(c.args.tensor(1), ct), inv = b.convert(c.args.tensor(2), ct);
  Value cnt = b.broadcast_in_dim(b.convert(b.reshape(c.args.tensor(7), {R}), ct), {R, C}, {0});
  Value n = sum_over(b, cnt, {0});
  Value mean = b.div(sum_over(b, b.mul(cnt, m), {0}), n);
  Value var_r = b.sub(b.div(b.full(1, ct, {R, C}), b.mul(inv, inv)), b.full(eps, ct, {R, C}));
  Value d = b.sub(m, b.broadcast_in_dim(mean, {R, C}, {1}));
  Value var_n = sum_over(b, b.mul(cnt, b.add(var_r, b.mul(d, d))), {0});
  Value invstd = b.unary("stablehlo.rsqrt", b.add(b.div(var_n, n), b.full(eps, ct, {C})));
  auto blend = [&](size_t arg, Value v) {
    if (!c.args.has(arg)) return;
    const DType rt = to_hlo(c.args.info(arg).dtype);
    Value old = b.convert(c.args.tensor(arg), ct);
    c.args.assign(arg, b.convert(b.add(b.mul(b.full(1 - momentum, ct, {C}), old), b.mul(b.full(momentum, ct, {C}), v)), rt));
  };
  blend(3, mean);
  blend(4, b.div(var_n, b.sub(n, b.full(1, ct, {C}))));
  const DType ot = to_hlo(mi.dtype);
  return {b.convert(mean, ot), b.convert(invstd, ot)};
}

// batch_norm_elemt(input, weight?, bias?, mean, invstd, eps)
std::vector<Value> lower_batch_norm_elemt(Context& c) {
  const TensorInfo& in = c.args.info(0);
  channels_of(in, "batch_norm_elemt");
  Builder& b = c.b;
  const DType ct = to_hlo(opmath_type(in.dtype));
  auto bc = [&](size_t arg) { return b.broadcast_in_dim(b.convert(c.args.tensor(arg), ct), in.sizes, {1}); };
  Value y = b.mul(b.sub(b.convert(c.args.tensor(0), ct), bc(3)), bc(4));
  if (c.args.has(1)) y = b.mul(y, bc(1));
  if (c.args.has(2)) y = b.add(y, bc(2));
  return one(b.convert(y, to_hlo(in.dtype)));
}

// batch_norm_backward_reduce(grad_out, input, mean, invstd, weight?, input_g,
//   weight_g, bias_g) -> (sum_dy, sum_dy_xmu, grad_weight, grad_bias), each
// only where its flag asks.
std::vector<Value> lower_batch_norm_backward_reduce(Context& c) {
  const TensorInfo& in = c.args.info(1);
  const Channels ch = channels_of(in, "batch_norm_backward_reduce");
  Builder& b = c.b;
  const DType ct = to_hlo(opmath_type(in.dtype));
  Value g = b.convert(c.args.tensor(0), ct), x = b.convert(c.args.tensor(1), ct);
  Value xc = b.sub(x, b.broadcast_in_dim(b.convert(c.args.tensor(2), ct), in.sizes, {1}));
  Value sum_dy = sum_over(b, g, ch.red), sum_dy_xmu = sum_over(b, b.mul(g, xc), ch.red);
  const DType st = to_hlo(c.args.info(2).dtype);
  const DType wt = c.args.has(4) ? to_hlo(c.args.info(4).dtype) : to_hlo(in.dtype);
  Value invstd = b.convert(c.args.tensor(3), ct);
  const bool input_g = c.args.bool_(5), weight_g = c.args.bool_(6), bias_g = c.args.bool_(7);
  return {input_g ? b.convert(sum_dy, st) : Value{}, input_g ? b.convert(sum_dy_xmu, st) : Value{},
          weight_g ? b.convert(b.mul(sum_dy_xmu, invstd), wt) : Value{}, bias_g ? b.convert(sum_dy, wt) : Value{}};
}

// batch_norm_backward_elemt(grad_out, input, mean, invstd, weight?, sum_dy,
//   sum_dy_xmu, count [R] (int)): the input gradient from the sums over
// every rank's batch.
std::vector<Value> lower_batch_norm_backward_elemt(Context& c) {
  const TensorInfo& in = c.args.info(1);
  const Channels ch = channels_of(in, "batch_norm_backward_elemt");
  Builder& b = c.b;
  const DType ct = to_hlo(opmath_type(in.dtype));
  const int64_t C = ch.C;
  Value total = b.convert(sum_over(b, b.convert(c.args.tensor(7), DType::I64), range(0, c.args.info(7).dim())), ct);
  Value norm = b.div(b.full(1, ct, {C}), b.broadcast_in_dim(total, {C}, {}));
  Value mean_dy = b.mul(b.convert(c.args.tensor(5), ct), norm);
  Value mean_dy_xmu = b.mul(b.convert(c.args.tensor(6), ct), norm);
  Value invstd = b.convert(c.args.tensor(3), ct);
  Value f1 = b.mul(b.mul(invstd, invstd), mean_dy_xmu);
  Value f2 = c.args.has(4) ? b.mul(b.convert(c.args.tensor(4), ct), invstd) : invstd;
  auto bc = [&](Value v) { return b.broadcast_in_dim(v, in.sizes, {1}); };
  Value xc = b.sub(b.convert(c.args.tensor(1), ct), bc(b.convert(c.args.tensor(2), ct)));
  Value gi = b.mul(b.sub(b.sub(b.convert(c.args.tensor(0), ct), bc(mean_dy)), b.mul(xc, bc(f1))), bc(f2));
  return one(b.convert(gi, to_hlo(in.dtype)));
}

}  // namespace

TPU_LOWERINGS(normalization) {
  reg("aten::native_layer_norm", lower_layer_norm);
  reg("aten::_weight_norm_interface", lower_weight_norm_interface);
  reg("aten::_weight_norm_interface_backward", lower_weight_norm_interface_backward);
  reg("aten::native_layer_norm_backward", lower_layer_norm_backward);
  reg("aten::native_group_norm", lower_group_norm);
  reg("aten::native_group_norm_backward", lower_group_norm_backward);
  reg("aten::native_batch_norm", [](Context& c) {
    return batch_norm(c, 1, 2, 3, 4, c.args.bool_(5), c.args.double_(6), c.args.double_(7));
  });
  reg("aten::_native_batch_norm_legit", [](Context& c) {
    return batch_norm(c, 1, 2, 3, 4, c.args.bool_(5), c.args.double_(6), c.args.double_(7));
  });
  reg("aten::_native_batch_norm_legit.no_stats", [](Context& c) {
    return batch_norm(c, 1, 2, std::nullopt, std::nullopt, c.args.bool_(3), c.args.double_(4), c.args.double_(5));
  });
  reg("aten::_native_batch_norm_legit_no_training", [](Context& c) {
    return batch_norm(c, 1, 2, 3, 4, false, c.args.double_(5), c.args.double_(6));
  });
  // The forms torch.nn.functional.batch_norm takes since 2.4: a fourth
  // result, the (empty) reserve, for backends with cuDNN-like kernels.
  reg("aten::_batch_norm_with_update", [](Context& c) {
    std::vector<Value> r = batch_norm(c, 1, 2, 3, 4, true, c.args.double_(5), c.args.double_(6));
    r.push_back(c.b.zeros(Type{DType::U8, {0}}));
    return r;
  });
  reg("aten::_batch_norm_no_update", [](Context& c) {
    std::vector<Value> r = batch_norm(c, 1, 2, 3, 4, false, c.args.double_(5), c.args.double_(6));
    r.push_back(c.b.zeros(Type{DType::U8, {0}}));
    return r;
  });
  reg("aten::native_batch_norm_backward", lower_batch_norm_backward);
  // SyncBatchNorm's pieces
  reg("aten::batch_norm_stats", lower_batch_norm_stats);
  reg("aten::batch_norm_gather_stats_with_counts", lower_batch_norm_gather_stats_with_counts);
  reg("aten::batch_norm_elemt", lower_batch_norm_elemt);
  reg("aten::batch_norm_backward_reduce", lower_batch_norm_backward_reduce);
  reg("aten::batch_norm_backward_elemt", lower_batch_norm_backward_elemt);
  reg("aten::batch_norm_backward", lower_batch_norm_backward);
}

}  // namespace tpu::lowering
