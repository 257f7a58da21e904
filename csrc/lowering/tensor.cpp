// Ops that build or rearrange whole tensors: fill, zero, cat, flip, roll,
// padding, tril/triu, factories (arange, linspace, eye).
#include <cmath>

#include "csrc/exec/check_failure.h"
#include "csrc/lowering/common.h"

namespace tpu::lowering {

namespace {

using hlo::Cmp;

std::vector<Value> lower_fill(Context& c) {
  const TensorInfo& self = c.args.info(0);
  Builder& b = c.b;
  Value v;
  if (c.args.is_tensor(1)) {
    TORCH_CHECK(c.args.info(1).dim() == 0, "fill_ only supports 0-dimension value tensor but got tensor with ",
                c.args.info(1).dim(), " dimensions.");
    v = cast(b, c.args.tensor(1), self.dtype);
  } else {
    v = c.args.scalar_value(1, to_hlo(self.dtype));
  }
  return one(splat(b, v, self.sizes));
}

// cat(tensors, dim): promotes to the common dtype; 1-D empty tensors are
// skipped (PyTorch's legacy behavior).
std::vector<Value> lower_cat(Context& c) {
  std::vector<TensorInfo> infos = c.args.infos(0);
  std::vector<Value> values = c.args.tensors(0);
  TORCH_CHECK(!infos.empty(), "torch.cat(): expected a non-empty list of Tensors");
  ResultType r;
  for (const TensorInfo& i : infos) r.tensor(i);
  const at::ScalarType t = r.get();
  std::vector<Value> parts;
  const TensorInfo* ref = nullptr;
  for (size_t i = 0; i < infos.size(); ++i) {
    if (infos[i].dim() == 1 && infos[i].sizes[0] == 0) continue;
    if (ref == nullptr) ref = &infos[i];
    parts.push_back(cast(c.b, values[i], t));
  }
  if (parts.empty()) return one(c.b.zeros(Type{to_hlo(t), infos[0].sizes}));
  TORCH_CHECK(ref->dim() > 0, "zero-dimensional tensor (at position 0) cannot be concatenated");
  const int64_t dim = wrap_dim(c.args.int_(1), ref->dim());
  for (size_t i = 0; i < parts.size(); ++i) {
    const Dims& d = c.b.dims(parts[i]);
    TORCH_CHECK(static_cast<int64_t>(d.size()) == ref->dim(),
                "Tensors must have same number of dimensions: got ", ref->dim(), " and ", d.size());
    for (int64_t k = 0; k < ref->dim(); ++k) {
      TORCH_CHECK(k == dim || d[k] == ref->sizes[k], "Sizes of tensors must match except in dimension ",
                  dim, ". Expected size ", ref->sizes[k], " but got size ", d[k], " for tensor number ",
                  i, " in the list.");
    }
  }
  return one(c.b.concatenate(parts, dim));
}

std::vector<Value> lower_flip(Context& c) {
  const TensorInfo& self = c.args.info(0);
  Dims dims = wrap_dims(c.args.ints(1), self.dim());
  Dims nontrivial;
  for (int64_t d : dims) if (self.dim() > 0) nontrivial.push_back(d);
  return one(c.b.reverse(c.args.tensor(0), nontrivial));
}

Value roll_dim(Builder& b, Value x, int64_t shift, int64_t dim) {
  const int64_t n = b.dims(x)[dim];
  if (n == 0) return x;
  int64_t s = ((shift % n) + n) % n;
  if (s == 0) return x;
  return b.concatenate({b.slice_dim(x, dim, n - s, n), b.slice_dim(x, dim, 0, n - s)}, dim);
}

std::vector<Value> lower_roll(Context& c) {
  const TensorInfo& self = c.args.info(0);
  std::vector<int64_t> shifts = c.args.ints(1);
  std::vector<int64_t> dims = c.args.has(2) ? c.args.ints(2) : std::vector<int64_t>{};
  Builder& b = c.b;
  Value x = c.args.tensor(0);
  if (dims.empty()) {
    TORCH_CHECK(shifts.size() == 1, "shifts and dimensions must align. shifts: ", shifts.size(), ", dims:0");
    Value flat = b.reshape(x, {self.numel()});
    return one(b.reshape(roll_dim(b, flat, shifts[0], 0), self.sizes));
  }
  TORCH_CHECK(shifts.size() == dims.size(), "shifts and dimensions must align. shifts: ", shifts.size(),
              ", dims:", dims.size());
  for (size_t i = 0; i < dims.size(); ++i) x = roll_dim(b, x, shifts[i], wrap_dim(dims[i], self.dim()));
  return one(x);
}

// PyTorch's pad list: pairs (low, high) starting from the last dimension.
std::pair<Dims, Dims> pad_amounts(const std::vector<int64_t>& pad, int64_t rank) {
  Dims lo(rank, 0), hi(rank, 0);
  for (size_t i = 0; i + 1 < pad.size() + 1 && i / 2 < static_cast<size_t>(rank); i += 2) {
    const int64_t d = rank - 1 - static_cast<int64_t>(i / 2);
    lo[d] = pad[i];
    hi[d] = i + 1 < pad.size() ? pad[i + 1] : 0;
  }
  return {lo, hi};
}

std::vector<Value> lower_constant_pad_nd(Context& c) {
  const TensorInfo& self = c.args.info(0);
  std::vector<int64_t> pad = c.args.ints(1);
  TORCH_CHECK(pad.size() % 2 == 0, "Length of pad must be even but instead it equals ", pad.size());
  TORCH_CHECK(static_cast<int64_t>(pad.size() / 2) <= self.dim(), "Length of pad should be no more than twice the number of dimensions of the input. Pad length is ",
              pad.size(), " while the input has ", self.dim(), " dimensions.");
  auto [lo, hi] = pad_amounts(pad, self.dim());
  for (int64_t d = 0; d < self.dim(); ++d) {
    TORCH_CHECK(self.sizes[d] + lo[d] + hi[d] >= 0, "The input size ", self.sizes[d], ", plus negative padding ",
                lo[d], " and ", hi[d], " resulted in a negative output size, which is invalid. Check dimension ",
                d, " of your input.");
  }
  Builder& b = c.b;
  Value value = c.args.has(2) ? c.args.scalar_value(2, to_hlo(self.dtype)) : b.zeros(Type{to_hlo(self.dtype), {}});
  return one(b.pad(c.args.tensor(0), value, lo, hi));
}

// Reflection (mirror without the edge) or replication (repeat the edge) of
// the last `k` dims by pad amounts.
Value edge_pad(Builder& b, Value x, const std::vector<int64_t>& pad, bool reflect) {
  const int64_t rank = b.rank(x);
  const int64_t k = static_cast<int64_t>(pad.size() / 2);
  for (int64_t i = 0; i < k; ++i) {
    const int64_t d = rank - 1 - i;
    const int64_t lo = pad[2 * i], hi = pad[2 * i + 1];
    const int64_t n = b.dims(x)[d];
    std::vector<Value> parts;
    if (lo > 0) {
      if (reflect) {
        TORCH_CHECK(lo < n, "Argument #4: Padding size should be less than the corresponding input dimension, but got: padding (",
                    lo, ", ", hi, ") at dimension ", d, " of input ", n);
        parts.push_back(b.reverse(b.slice_dim(x, d, 1, lo + 1), {d}));
      } else {
        Dims shape = b.dims(x);
        shape[d] = lo;
        parts.push_back(b.broadcast_to(b.slice_dim(x, d, 0, 1), shape));
      }
    }
    Value mid = x;
    if (lo < 0) mid = b.slice_dim(mid, d, -lo, b.dims(mid)[d]);
    if (hi < 0) mid = b.slice_dim(mid, d, 0, b.dims(mid)[d] + hi);
    parts.push_back(mid);
    if (hi > 0) {
      if (reflect) {
        TORCH_CHECK(hi < n, "Argument #6: Padding size should be less than the corresponding input dimension, but got: padding (",
                    lo, ", ", hi, ") at dimension ", d, " of input ", n);
        parts.push_back(b.reverse(b.slice_dim(x, d, n - 1 - hi, n - 1), {d}));
      } else {
        Dims shape = b.dims(x);
        shape[d] = hi;
        parts.push_back(b.broadcast_to(b.slice_dim(x, d, n - 1, n), shape));
      }
    }
    x = b.concatenate(parts, d);
  }
  return x;
}

std::vector<Value> lower_edge_pad(Context& c, bool reflect) {
  return one(edge_pad(c.b, c.args.tensor(0), c.args.ints(1), reflect));
}

// The adjoint of edge_pad: output position o of a padded dim reads input
// position map(o - lo) (mirrored or clamped into [0, n)); its gradient adds
// there. Negative pads crop, so their positions simply never appear.
std::vector<Value> lower_edge_pad_backward(Context& c, bool reflect) {
  // (grad_output, self, padding)
  Builder& b = c.b;
  const TensorInfo& self = c.args.info(1);
  std::vector<int64_t> pad = c.args.ints(2);
  const at::ScalarType t = c.args.info(0).dtype;
  Value g = cast(b, c.args.tensor(0), opmath_type(t));
  const int64_t rank = self.dim();
  const int64_t k = static_cast<int64_t>(pad.size() / 2);
  for (int64_t i = 0; i < k; ++i) {
    const int64_t d = rank - 1 - i;
    const int64_t lo = pad[2 * i], n = self.sizes[d];
    const int64_t total = b.dims(g)[d];
    std::vector<int64_t> src(total);
    for (int64_t o = 0; o < total; ++o) {
      int64_t j = o - lo;
      if (reflect) {
        if (j < 0) j = -j;
        if (j >= n) j = 2 * (n - 1) - j;
      } else {
        j = std::min(std::max<int64_t>(j, 0), n - 1);
      }
      src[o] = j;
    }
    g = total == 0 ? b.zeros(Type{b.dtype(g), [&] {
      Dims z = b.dims(g);
      z[d] = n;
      return z;
    }()}) : add_along(b, g, d, src, n);
  }
  return one(cast(b, g, t));
}

// x where (col - row) compared with diagonal holds, else 0.
std::vector<Value> lower_tri(Context& c, bool lower) {
  const TensorInfo& self = c.args.info(0);
  TORCH_CHECK(self.dim() >= 2, lower ? "tril" : "triu", ": input tensor must have at least 2 dimensions");
  const int64_t diag = c.args.has(1) ? c.args.int_(1) : 0;
  Builder& b = c.b;
  Value x = c.args.tensor(0);
  const Type it{DType::I64, self.sizes};
  Value row = b.iota(it, self.dim() - 2), col = b.iota(it, self.dim() - 1);
  Value diff = b.sub(col, row);
  Value keep = b.compare(lower ? Cmp::LE : Cmp::GE, diff, b.full_int(diag, DType::I64, self.sizes));
  return one(b.select(keep, x, b.zeros(b.type(x))));
}

std::vector<Value> lower_trace(Context& c) {
  const TensorInfo& self = c.args.info(0);
  TORCH_CHECK(self.dim() == 2, "trace: expected a matrix, but got tensor with dim ", self.dim());
  const at::ScalarType out = is_integral(self.dtype) ? at::kLong : self.dtype;
  Builder& b = c.b;
  Value x = cast(b, c.args.tensor(0), opmath_type(out));
  const Type it{DType::I64, self.sizes};
  Value diag = b.compare(Cmp::EQ, b.iota(it, 0), b.iota(it, 1));
  Value r = sum_over(b, b.select(diag, x, b.zeros(b.type(x))), {0, 1});
  return one(cast(b, r, out));
}

// arange.start_out(start, end, step, *, out). As on the CPU, an integral
// out dtype truncates start, end and step first (the int64 size rule works
// on the truncated values, the others' on the originals); floating dtypes
// step in double.
std::vector<Value> lower_arange_out(Context& c) {
  const c10::Scalar start = c.args.scalar(0), end = c.args.scalar(1);
  const c10::Scalar step = c.args.has(2) ? c.args.scalar(2) : c10::Scalar(1);
  const at::ScalarType t = c.args.out_dtype().value_or(at::kLong);
  Builder& b = c.b;
  int64_t n;
  if (is_integral(t)) {
    const int64_t s = start.toLong(), e = end.toLong(), st = step.toLong();
    TORCH_CHECK(st != 0, "step must be nonzero");
    TORCH_CHECK((st > 0 && e >= s) || (st < 0 && e <= s), "upper bound and lower bound inconsistent with step sign");
    n = t == at::kLong ? (e - s + st - (st > 0 ? 1 : -1)) / st
                       : static_cast<int64_t>(std::ceil((end.toDouble() - start.toDouble()) / step.toDouble()));
    Value i = b.iota(Type{DType::I64, {n}}, 0);
    Value v = b.add(b.full_int(s, DType::I64, {n}), b.mul(i, b.full_int(st, DType::I64, {n})));
    return one(cast(b, v, t));
  }
  const double s = start.toDouble(), e = end.toDouble(), st = step.toDouble();
  TORCH_CHECK(st != 0, "step must be nonzero");
  TORCH_CHECK(std::isfinite(s) && std::isfinite(e), "unsupported range: ", s, " -> ", e);
  TORCH_CHECK((st > 0 && e >= s) || (st < 0 && e <= s), "upper bound and lower bound inconsistent with step sign");
  n = static_cast<int64_t>(std::ceil((e - s) / st));
  Value i = b.convert(b.iota(Type{DType::I64, {n}}, 0), DType::F64);
  Value v = b.add(b.broadcast_in_dim(c.args.runtime_scalar(start, DType::F64), {n}, {}),
                  b.mul(i, b.broadcast_in_dim(c.args.runtime_scalar(step, DType::F64), {n}, {})));
  return one(cast(b, v, t));
}

// The points of linspace(start, end, steps) for out dtype t, symmetric from
// both ends as on the CPU: integral dtypes truncate start and end first and
// step in double; floating ones round start and end to their dtype and step
// in its opmath precision.
Value linspace_values(Context& c, int64_t steps, at::ScalarType t) {
  Builder& b = c.b;
  const bool integral = is_integral(t);
  const DType ct = integral ? DType::F64 : to_hlo(opmath_type(t));
  double s = c.args.scalar(0).toDouble(), e = c.args.scalar(1).toDouble();
  if (integral) {
    s = static_cast<double>(c.args.scalar(0).toLong());
    e = static_cast<double>(c.args.scalar(1).toLong());
  }
  auto endpoint = [&](double v, int64_t n) {
    return integral ? b.full(v, ct, {n}) : b.convert(b.full(v, to_hlo(t), {n}), ct);
  };
  if (steps == 0) return b.zeros(Type{ct, {0}});
  if (steps == 1) return b.full(s, ct, {1});  // a fill with start itself
  Value sv = endpoint(s, steps), ev = endpoint(e, steps);
  Value step = b.div(b.sub(ev, sv), b.full(static_cast<double>(steps - 1), ct, {steps}));
  Value i = b.convert(b.iota(Type{DType::I64, {steps}}, 0), ct);
  Value from_start = b.add(sv, b.mul(step, i));
  Value from_end = b.sub(ev, b.mul(step, b.sub(b.full(static_cast<double>(steps - 1), ct, {steps}), i)));
  Value first_half = b.compare(Cmp::LT, i, b.full(static_cast<double>(steps / 2), ct, {steps}));
  return b.select(first_half, from_start, from_end);
}

std::vector<Value> lower_linspace_out(Context& c) {
  const int64_t steps = c.args.int_(2);
  TORCH_CHECK(steps >= 0, "number of steps must be non-negative");
  const at::ScalarType t = c.args.out_dtype().value_or(default_float());
  return one(cast(c.b, linspace_values(c, steps, t), t));  // integral dtypes truncate each value
}

std::vector<Value> lower_logspace_out(Context& c) {
  // logspace.out(start, end, steps, base, *, out): base ** linspace(...),
  // the power in double for integral dtypes.
  const int64_t steps = c.args.int_(2);
  TORCH_CHECK(steps >= 0, "number of steps must be non-negative");
  const double base = c.args.double_(3);
  const at::ScalarType t = c.args.out_dtype().value_or(default_float());
  Builder& b = c.b;
  Value v = linspace_values(c, steps, t);
  return one(cast(b, b.pow(b.full(base, b.dtype(v), b.dims(v)), v), t));
}

std::vector<Value> eye(Context& c, int64_t n, int64_t m) {
  const at::ScalarType t = c.args.out_dtype().value_or(default_float());
  Builder& b = c.b;
  const Type it{DType::I64, {n, m}};
  Value diag = b.compare(Cmp::EQ, b.iota(it, 0), b.iota(it, 1));
  return one(b.convert(diag, to_hlo(t)));
}

// repeat_interleave.Tensor(repeats, *, output_size): i repeated repeats[i] times.
std::vector<Value> lower_repeat_interleave(Context& c) {
  Builder& b = c.b;
  const TensorInfo& rep = c.args.info(0);
  TORCH_CHECK(rep.dim() <= 1, "repeat_interleave only accept 1D vector as repeat");
  const int64_t k = rep.numel();
  Value r = b.convert(b.reshape(c.args.tensor(0), {k}), DType::I64);
  Value total = b.reduce(r, b.constant_int(0, DType::I64), {0}, "stablehlo.add");
  const int64_t n = c.args.has(1) ? c.args.int_(1) : c.args.host_int(total);
  if (n == 0 || k == 0) return one(b.zeros(Type{DType::I64, {0}}));
  // Inclusive cumsum of repeats; output j belongs to the first i with cum[i] > j.
  Value cum = b.reduce_window(r, b.constant_int(0, DType::I64), {k}, {1}, {1}, {1}, {{k - 1, 0}}, "stablehlo.add");
  Value j = b.broadcast_in_dim(b.iota(Type{DType::I64, {n}}, 0), {n, k}, {0});
  Value le = b.compare(Cmp::LE, b.broadcast_in_dim(cum, {n, k}, {1}), j);
  Value idx = b.reduce(b.convert(le, DType::I64), b.constant_int(0, DType::I64), {1}, "stablehlo.add");
  return one(idx);
}

// unfold_backward(grad_in, input_sizes, dim, size, step): sum the windows back.
std::vector<Value> lower_unfold_backward(Context& c) {
  Builder& b = c.b;
  const TensorInfo& g = c.args.info(0);
  const Dims in_sizes = c.args.ints(1);
  const int64_t rank = static_cast<int64_t>(in_sizes.size());
  const int64_t dim = wrap_dim(c.args.int_(2), rank);
  const int64_t size = c.args.int_(3), step = c.args.int_(4);
  const at::ScalarType t = g.dtype;
  const at::ScalarType compute = opmath_type(t);
  Value grad = cast(b, c.args.tensor(0), compute);  // in_sizes with dim -> windows, plus a last dim of `size`
  const int64_t windows = g.sizes[rank == 0 ? 0 : dim];
  Value out = b.zeros(Type{to_hlo(compute), rank == 0 ? Dims{1} : in_sizes});
  if (rank == 0) grad = b.reshape(grad, {1, size});
  const int64_t d = rank == 0 ? 0 : dim;
  for (int64_t j = 0; j < size; ++j) {
    // Element j of every window lands at position w * step + j.
    Value part = b.reshape(b.slice_dim(grad, b.rank(grad) - 1, j, j + 1), rank == 0 ? Dims{windows} : [&] {
      Dims s = g.sizes;
      s.pop_back();
      return s;
    }());
    Dims lo(b.rank(out), 0), hi(b.rank(out), 0), interior(b.rank(out), 0);
    lo[d] = j;
    interior[d] = step - 1;
    const int64_t n = b.dims(out)[d];
    const int64_t placed = windows == 0 ? 0 : (windows - 1) * step + 1;
    hi[d] = n - j - placed;
    if (windows == 0) continue;
    out = b.add(out, b.pad(part, b.zeros(Type{to_hlo(compute), {}}), lo, hi, interior));
  }
  return one(cast(b, rank == 0 ? b.reshape(out, {}) : out, t));
}

// channel_shuffle(self, groups): [N, g*k, *] -> [N, k*g, *] (the channels
// of each group interleaved).
std::vector<Value> lower_channel_shuffle(Context& c) {
  const TensorInfo& in = c.args.info(0);
  const int64_t g = c.args.int_(1);
  TORCH_CHECK(g > 0, "Number of groups to divide channels in must be positive. Value of groups:", g);
  TORCH_CHECK(in.dim() > 2, "channel_shuffle expects input to have at least 3 dimensions, but got input with sizes ",
              dims_string(in.sizes));
  TORCH_CHECK(in.sizes[1] % g == 0, "Number of channels must be divisible by groups. Got ", in.sizes[1],
              " channels and ", g, " groups.");
  Builder& b = c.b;
  Dims split = in.sizes;
  split[1] = in.sizes[1] / g;
  split.insert(split.begin() + 1, g);
  Dims perm;
  for (int64_t d = 0; d <= in.dim(); ++d) perm.push_back(d);
  std::swap(perm[1], perm[2]);
  return one(b.reshape(b.transpose(b.reshape(c.args.tensor(0), split), perm), in.sizes));
}

// pixel_shuffle(self, r): [*, C*r*r, H, W] -> [*, C, H*r, W*r], and
// pixel_unshuffle(self, r) its inverse: a reshape, a permutation, a reshape.
std::vector<Value> lower_pixel_shuffle(Context& c, bool shuffle) {
  const TensorInfo& in = c.args.info(0);
  const int64_t r = c.args.int_(1);
  const char* name = shuffle ? "pixel_shuffle" : "pixel_unshuffle";
  const char* factor = shuffle ? "upscale_factor" : "downscale_factor";
  TORCH_CHECK(in.dim() >= 3, name, " expects input to have at least 3 dimensions, but got input with ", in.dim(),
              " dimension(s)");
  TORCH_CHECK(r > 0, name, " expects a positive ", factor, ", but got ", r);
  const int64_t k = in.dim();
  const int64_t ch = in.sizes[k - 3], h = in.sizes[k - 2], w = in.sizes[k - 1];
  if (shuffle) {
    TORCH_CHECK(ch % (r * r) == 0, "pixel_shuffle expects its input's 'channel' dimension to be divisible by the "
                "square of upscale_factor, but input.size(-3)=", ch, " is not divisible by ", r * r);
  } else {
    TORCH_CHECK(h % r == 0, "pixel_unshuffle expects height to be divisible by downscale_factor, but input.size(-2)=",
                h, " is not divisible by ", r);
    TORCH_CHECK(w % r == 0, "pixel_unshuffle expects width to be divisible by downscale_factor, but input.size(-1)=",
                w, " is not divisible by ", r);
  }
  const Dims batch(in.sizes.begin(), in.sizes.end() - 3);
  const int64_t n = static_cast<int64_t>(batch.size());
  auto with_batch = [&](std::initializer_list<int64_t> tail) {
    Dims d = batch;
    d.insert(d.end(), tail);
    return d;
  };
  Dims perm;
  for (int64_t d = 0; d < n; ++d) perm.push_back(d);
  Dims split, out;
  if (shuffle) {  // [*, C, r, r, H, W] -> [*, C, H, r, W, r]
    split = with_batch({ch / (r * r), r, r, h, w});
    for (int64_t d : {0, 3, 1, 4, 2}) perm.push_back(n + d);
    out = with_batch({ch / (r * r), h * r, w * r});
  } else {  // [*, C, H, r, W, r] -> [*, C, r, r, H, W]
    split = with_batch({ch, h / r, r, w / r, r});
    for (int64_t d : {0, 2, 4, 1, 3}) perm.push_back(n + d);
    out = with_batch({ch * r * r, h / r, w / r});
  }
  Builder& b = c.b;
  return one(b.reshape(b.transpose(b.reshape(c.args.tensor(0), split), perm), out));
}

}  // namespace

TPU_LOWERINGS(tensor) {
  reg("aten::fill.Scalar", lower_fill);
  reg("aten::channel_shuffle", lower_channel_shuffle);
  reg("aten::pixel_shuffle", [](Context& c) { return lower_pixel_shuffle(c, true); });
  reg("aten::pixel_unshuffle", [](Context& c) { return lower_pixel_shuffle(c, false); });
  // _efficientzerotensor(size, *, dtype, ...): autograd's zero gradients
  // (a plain zero tensor here; PyTorch's ZeroTensor key is a CPU/CUDA nicety).
  reg("aten::_efficientzerotensor", [](Context& c) {
    const at::ScalarType t = c.args.opt_scalar_type(1).value_or(default_float());
    const std::vector<int64_t> size = c.args.ints(0);
    return one(c.b.zeros(Type{to_hlo(t), Dims(size.begin(), size.end())}));
  });
  reg("aten::fill.Tensor", lower_fill);
  // _assert_async(self[, msg]): a device-side check that the one value is
  // nonzero (torch.compile's runtime assertions; CUDA's device assert).
  auto assert_async = [](Context& c) -> std::vector<Value> {
    const TensorInfo& self = c.args.info(0);
    TORCH_CHECK(self.numel() != 0, "Boolean value of Tensor with no values is ambiguous");
    TORCH_CHECK(self.numel() < 2, "Boolean value of Tensor with more than one value is ambiguous");
    Builder& b = c.b;
    Value v = b.reshape(c.args.tensor(0), {});
    const hlo::DType dt = b.dtype(v);
    if (hlo::is_complex(dt)) v = b.or_(b.compare(hlo::Cmp::NE, b.real(v), b.zeros(Type{b.dtype(b.real(v)), {}})),
                                       b.compare(hlo::Cmp::NE, b.imag(v), b.zeros(Type{b.dtype(b.real(v)), {}})));
    else if (dt != hlo::DType::Pred) v = b.compare(hlo::Cmp::NE, v, b.zeros(Type{dt, {}}));
    const std::string message = c.args.size() > 1 && c.args.has(1) ? c.args.string(1)
                                                                   : "Expected Tensor with single nonzero value, but got zero";
    c.args.check(v, std::string(exec::kRuntimeErrorCheck) + message);
    return {};
  };
  reg("aten::_assert_async", assert_async);
  reg("aten::_assert_async.msg", assert_async);
  reg("aten::zero", [](Context& c) {
    const TensorInfo& self = c.args.info(0);
    return one(c.b.zeros(Type{to_hlo(self.dtype), self.sizes}));
  });
  reg("aten::cat", lower_cat);
  reg("aten::flip", lower_flip);
  reg("aten::roll", lower_roll);
  reg("aten::constant_pad_nd", lower_constant_pad_nd);
  reg("aten::reflection_pad1d", [](Context& c) { return lower_edge_pad(c, true); });
  reg("aten::reflection_pad2d", [](Context& c) { return lower_edge_pad(c, true); });
  reg("aten::reflection_pad3d", [](Context& c) { return lower_edge_pad(c, true); });
  reg("aten::replication_pad1d", [](Context& c) { return lower_edge_pad(c, false); });
  reg("aten::replication_pad2d", [](Context& c) { return lower_edge_pad(c, false); });
  reg("aten::replication_pad3d", [](Context& c) { return lower_edge_pad(c, false); });
  reg("aten::reflection_pad1d_backward", [](Context& c) { return lower_edge_pad_backward(c, true); });
  reg("aten::reflection_pad2d_backward", [](Context& c) { return lower_edge_pad_backward(c, true); });
  reg("aten::reflection_pad3d_backward", [](Context& c) { return lower_edge_pad_backward(c, true); });
  reg("aten::replication_pad1d_backward", [](Context& c) { return lower_edge_pad_backward(c, false); });
  reg("aten::replication_pad2d_backward", [](Context& c) { return lower_edge_pad_backward(c, false); });
  reg("aten::replication_pad3d_backward", [](Context& c) { return lower_edge_pad_backward(c, false); });
  reg("aten::tril", [](Context& c) { return lower_tri(c, true); });
  reg("aten::triu", [](Context& c) { return lower_tri(c, false); });
  reg("aten::trace", lower_trace);
  reg("aten::arange.start_out", lower_arange_out);
  reg("aten::linspace.out", lower_linspace_out);
  reg("aten::logspace.out", lower_logspace_out);
  reg("aten::eye.out", [](Context& c) { return eye(c, c.args.int_(0), c.args.int_(0)); });
  reg("aten::eye.m_out", [](Context& c) { return eye(c, c.args.int_(0), c.args.int_(1)); });
  reg("aten::repeat_interleave.Tensor", lower_repeat_interleave);
  reg("aten::unfold_backward", lower_unfold_backward);
}

}  // namespace tpu::lowering
