// _foreach_* ops and the fused optimizers: a whole parameter list becomes one
// program. Each _foreach op reuses the lowering of its per-tensor op through
// ElementArgs, a view of the arguments that picks element k of every list.
#include <cmath>
#include <map>

#include "csrc/lowering/common.h"

namespace tpu::lowering {

namespace {

using hlo::Cmp;

// Arguments of element k of a _foreach call: Tensor[] and Scalar[] args
// become their k-th entry; other args pass through.
class ElementArgs final : public Args {
 public:
  ElementArgs(Args& parent, size_t k, const std::vector<std::vector<Value>>& values,
              const std::vector<std::vector<TensorInfo>>& infos)
      : p_(parent), k_(k), values_(values), infos_(infos) {}

  size_t size() const override { return p_.size(); }
  bool is_none(size_t i) const override { return p_.is_none(i); }
  bool is_tensor(size_t i) const override { return p_.is_tensor_list(i) || p_.is_tensor(i); }
  Value tensor(size_t i) override { return p_.is_tensor_list(i) ? values_[i].at(k_) : p_.tensor(i); }
  const TensorInfo& info(size_t i) override { return p_.is_tensor_list(i) ? infos_[i].at(k_) : p_.info(i); }
  std::vector<Value> tensors(size_t i) override { return p_.tensors(i); }
  std::vector<TensorInfo> infos(size_t i) override { return p_.infos(i); }
  int64_t int_(size_t i) const override { return p_.int_(i); }
  std::vector<int64_t> ints(size_t i) const override { return p_.ints(i); }
  double double_(size_t i) const override { return scalar(i).toDouble(); }
  bool bool_(size_t i) const override { return p_.bool_(i); }
  std::string string(size_t i) const override { return p_.string(i); }
  c10::Scalar scalar(size_t i) const override {
    return p_.is_scalar_list(i) ? p_.scalars(i).at(k_) : p_.scalar(i);
  }
  at::ScalarType scalar_type(size_t i) const override { return p_.scalar_type(i); }
  std::vector<double> doubles(size_t i) const override { return p_.doubles(i); }
  std::vector<c10::Scalar> scalars(size_t i) const override { return p_.scalars(i); }
  bool is_tensor_list(size_t i) const override { return false; }
  bool is_scalar_list(size_t i) const override { return false; }
  size_t list_size(size_t i) const override { return p_.list_size(i); }
  at::ScalarType scalar_kind(size_t i) const override {
    return p_.is_scalar_list(i) ? p_.element_kind(i, k_) : p_.scalar_kind(i);
  }
  at::ScalarType element_kind(size_t i, size_t k) const override { return p_.element_kind(i, k); }
  Value scalar_value(size_t i, DType dtype) override {
    return p_.is_scalar_list(i) ? p_.element_value(i, k_, dtype) : p_.scalar_value(i, dtype);
  }
  Value element_value(size_t i, size_t k, DType dtype) override { return p_.element_value(i, k, dtype); }
  Value runtime_scalar(const c10::Scalar& s, DType dtype) override { return p_.runtime_scalar(s, dtype); }
  Value rng_key(size_t i, uint64_t count) override { return p_.rng_key(i, count); }
  void assign(size_t i, Value v) override { p_.assign(i, v); }
  void assign_list(size_t i, const std::vector<Value>& vs) override { p_.assign_list(i, vs); }
  int64_t host_int(Value v) override { return p_.host_int(v); }
  void output_depends_on_data() override { p_.output_depends_on_data(); }
  std::optional<at::ScalarType> out_dtype() const override { return p_.out_dtype(); }
  void check(Value ok, const std::string& message) override { p_.check(ok, message); }

 private:
  Args& p_;
  size_t k_;
  const std::vector<std::vector<Value>>& values_;
  const std::vector<std::vector<TensorInfo>>& infos_;
};

// _foreach op -> the lowering of its per-tensor op.
std::map<std::string, std::string, std::less<>>& element_ops() {
  static auto* m = new std::map<std::string, std::string, std::less<>>();
  return *m;
}

std::vector<Value> lower_foreach(Context& c) {
  auto it = element_ops().find(c.op);
  TORCH_CHECK(it != element_ops().end(), "torch_tpu: no element op for ", c.op);
  LoweringFn fn = find_lowering(it->second);
  TORCH_CHECK(fn != nullptr, "torch_tpu: no lowering for ", it->second);
  std::vector<std::vector<Value>> values(c.args.size());
  std::vector<std::vector<TensorInfo>> infos(c.args.size());
  size_t n = 0;
  for (size_t i = 0; i < c.args.size(); ++i) {
    if (!c.args.is_tensor_list(i)) continue;
    values[i] = c.args.tensors(i);
    infos[i] = c.args.infos(i);
    if (i == 0) n = values[i].size();
    TORCH_CHECK(values[i].size() == n, "Tensor lists must have the same number of tensors, got ", n, " and ",
                values[i].size());
  }
  for (size_t i = 0; i < c.args.size(); ++i) {
    if (c.args.is_scalar_list(i)) {
      TORCH_CHECK(c.args.list_size(i) == n, "Tensor list must have same number of elements as scalar list, got ",
                  n, " and ", c.args.list_size(i));
    }
  }
  std::vector<Value> out;
  for (size_t k = 0; k < n; ++k) {
    ElementArgs ea(c.args, k, values, infos);
    Context ec{c.b, ea, it->second, c.lookup_precision, c.precision_read};
    std::vector<Value> r = fn(ec);
    c.precision_read = ec.precision_read;
    out.push_back(r.at(0));
  }
  return out;
}

// _foreach_norm.Scalar(self[], ord, dtype?)
std::vector<Value> lower_foreach_norm(Context& c) {
  std::vector<Value> xs = c.args.tensors(0);
  std::vector<TensorInfo> infos = c.args.infos(0);
  const double ord = c.args.has(1) ? c.args.scalar(1).toDouble() : 2.0;
  Builder& b = c.b;
  std::vector<Value> out;
  for (size_t k = 0; k < xs.size(); ++k) {
    const at::ScalarType t = c.args.opt_scalar_type(2).value_or(infos[k].dtype);
    const DType ct = to_hlo(opmath_type(t));
    Value a = b.abs(b.convert(xs[k], ct));
    Dims all;
    for (int64_t d = 0; d < infos[k].dim(); ++d) all.push_back(d);
    Value r;
    if (std::isinf(ord)) {
      r = ord > 0 ? b.reduce(a, b.zeros(Type{ct, {}}), all, "stablehlo.maximum")
                  : b.reduce(a, b.highest(ct), all, "stablehlo.minimum");
    } else if (ord == 1) {
      r = sum_over(b, a, all);
    } else if (ord == 2) {
      r = b.unary("stablehlo.sqrt", sum_over(b, b.mul(a, a), all));
    } else {
      r = sum_over(b, b.pow(a, b.full(ord, ct, b.dims(a))), all);
      r = b.pow(r, b.full(1.0 / ord, ct, {}));
    }
    out.push_back(b.convert(r, to_hlo(t)));
  }
  return out;
}

// _foreach_copy(self[], src[], non_blocking) -> src converted to self's dtypes.
std::vector<Value> lower_foreach_copy(Context& c) {
  std::vector<Value> src = c.args.tensors(1);
  std::vector<TensorInfo> dst = c.args.infos(0);
  std::vector<Value> out;
  for (size_t k = 0; k < src.size(); ++k) {
    out.push_back(c.b.broadcast_to(cast(c.b, src[k], dst[k].dtype), dst[k].sizes));
  }
  return out;
}

// Whether to skip the step (found_inf != 0), as a rank-0 pred; invalid when
// there is no found_inf.
Value skip_step(Context& c, size_t found_inf_arg) {
  if (!c.args.has(found_inf_arg)) return Value{};
  Builder& b = c.b;
  Value f = b.reshape(b.convert(c.args.tensor(found_inf_arg), DType::F32), {});
  return b.compare(Cmp::NE, f, b.constant(0, DType::F32));
}

Value keep_if(Builder& b, Value skip, Value old_v, Value new_v) {
  if (!skip.valid()) return new_v;
  return b.select(b.broadcast_in_dim(skip, b.dims(new_v), {}), old_v, new_v);
}

// The learning rate (a number, or a one-element tensor: the tensor_lr
// overloads) over `shape`.
Value learning_rate(Context& c, size_t arg, DType ct, const Dims& shape) {
  Builder& b = c.b;
  Value lr = c.args.is_tensor(arg) ? b.reshape(b.convert(c.args.tensor(arg), ct), {}) : c.args.scalar_value(arg, ct);
  return b.broadcast_in_dim(lr, shape, {});
}

// The gradient `g` divided by the GradScaler's grad_scale (argument
// `scale_arg`, when given). The unscaled gradient is also appended to
// `unscaled`, to be written back as CPU and CUDA do (a skipped step keeps
// the scaled one).
Value unscale(Context& c, size_t scale_arg, Value skip, Value grad, Value g, const Dims& shape,
              std::vector<Value>& unscaled) {
  if (!c.args.has(scale_arg)) return g;
  Builder& b = c.b;
  const DType ct = b.dtype(g);
  g = b.div(g, b.broadcast_in_dim(b.reshape(b.convert(c.args.tensor(scale_arg), ct), {}), shape, {}));
  unscaled.push_back(keep_if(b, skip, b.convert(grad, ct), g));
  return g;
}

// _fused_adam_ / _fused_adamw_(self[], grads[], exp_avgs[], exp_avg_sqs[],
//   max_exp_avg_sqs[], state_steps[], *, lr, beta1, beta2, weight_decay, eps,
//   amsgrad, maximize, grad_scale?, found_inf?)
std::vector<Value> fused_adam(Context& c, bool adamw) {
  Builder& b = c.b;
  std::vector<Value> params = c.args.tensors(0), grads = c.args.tensors(1), avgs = c.args.tensors(2),
                     sqs = c.args.tensors(3), maxs = c.args.tensors(4), steps = c.args.tensors(5);
  std::vector<TensorInfo> pinfo = c.args.infos(0);
  const double beta1 = c.args.double_(7), beta2 = c.args.double_(8), wd = c.args.double_(9), eps = c.args.double_(10);
  const bool amsgrad = c.args.bool_(11), maximize = c.args.bool_(12);
  Value skip = skip_step(c, 14);
  std::vector<Value> new_p, new_g, new_a, new_s, new_m;
  for (size_t k = 0; k < params.size(); ++k) {
    const at::ScalarType t = pinfo[k].dtype;
    const DType ct = to_hlo(opmath_type(t));
    const Dims& shape = pinfo[k].sizes;
    auto full = [&](Value scalar) { return b.broadcast_in_dim(scalar, shape, {}); };
    auto num = [&](double v) { return b.full(v, ct, shape); };
    Value p = b.convert(params[k], ct), g = b.convert(grads[k], ct);
    Value m = b.convert(avgs[k], ct), v = b.convert(sqs[k], ct);
    Value lr = learning_rate(c, 6, ct, shape);
    g = unscale(c, 13, skip, grads[k], g, shape, new_g);
    if (maximize) g = b.neg(g);
    Value p0 = p;
    if (wd != 0) {
      if (adamw) {
        p = b.mul(p, b.sub(num(1), b.mul(lr, full(c.args.runtime_scalar(wd, ct)))));
      } else {
        g = b.add(g, b.mul(p, full(c.args.runtime_scalar(wd, ct))));
      }
    }
    m = b.add(m, b.mul(b.sub(g, m), full(c.args.runtime_scalar(1 - beta1, ct))));
    v = b.add(b.mul(v, full(c.args.runtime_scalar(beta2, ct))),
              b.mul(b.mul(g, g), full(c.args.runtime_scalar(1 - beta2, ct))));
    Value step = full(b.reshape(b.convert(steps[k], ct), {}));
    Value bc1 = b.sub(num(1), b.pow(full(c.args.runtime_scalar(beta1, ct)), step));
    Value bc2 = b.sub(num(1), b.pow(full(c.args.runtime_scalar(beta2, ct)), step));
    Value step_size = b.div(lr, bc1);
    Value bc2_sqrt = b.unary("stablehlo.sqrt", bc2);
    Value denom_src = v;
    if (amsgrad) {
      Value mx = b.max(b.convert(maxs[k], ct), v);
      new_m.push_back(keep_if(b, skip, b.convert(maxs[k], ct), mx));
      denom_src = mx;
    }
    Value denom = b.add(b.div(b.unary("stablehlo.sqrt", denom_src), bc2_sqrt), full(c.args.runtime_scalar(eps, ct)));
    p = b.sub(p, b.mul(step_size, b.div(m, denom)));
    new_p.push_back(keep_if(b, skip, p0, p));
    new_a.push_back(keep_if(b, skip, b.convert(avgs[k], ct), m));
    new_s.push_back(keep_if(b, skip, b.convert(sqs[k], ct), v));
  }
  c.args.assign_list(0, new_p);
  if (!new_g.empty()) c.args.assign_list(1, new_g);  // unscaled in place, as CPU and CUDA do
  c.args.assign_list(2, new_a);
  c.args.assign_list(3, new_s);
  if (amsgrad) c.args.assign_list(4, new_m);
  return {};
}

// _fused_sgd_(self[], grads[], momentum_buffer_list[], *, weight_decay,
//   momentum, lr, dampening, nesterov, maximize, is_first_step, grad_scale?, found_inf?)
std::vector<Value> fused_sgd(Context& c) {
  Builder& b = c.b;
  std::vector<Value> params = c.args.tensors(0), grads = c.args.tensors(1), bufs = c.args.tensors(2);
  std::vector<TensorInfo> pinfo = c.args.infos(0);
  const double wd = c.args.double_(3), momentum = c.args.double_(4), dampening = c.args.double_(6);
  const bool nesterov = c.args.bool_(7), maximize = c.args.bool_(8), first = c.args.bool_(9);
  Value skip = skip_step(c, 11);
  std::vector<Value> new_p, new_g, new_b;
  for (size_t k = 0; k < params.size(); ++k) {
    const at::ScalarType t = pinfo[k].dtype;
    const DType ct = to_hlo(opmath_type(t));
    const Dims& shape = pinfo[k].sizes;
    auto full = [&](Value scalar) { return b.broadcast_in_dim(scalar, shape, {}); };
    Value p = b.convert(params[k], ct), g = b.convert(grads[k], ct);
    Value lr = learning_rate(c, 5, ct, shape);
    g = unscale(c, 10, skip, grads[k], g, shape, new_g);
    if (maximize) g = b.neg(g);
    if (wd != 0) g = b.add(g, b.mul(p, full(c.args.runtime_scalar(wd, ct))));
    if (momentum != 0) {
      Value buf;
      if (first) {
        buf = g;
      } else {
        buf = b.add(b.mul(b.convert(bufs[k], ct), full(c.args.runtime_scalar(momentum, ct))),
                    b.mul(g, full(c.args.runtime_scalar(1 - dampening, ct))));
      }
      new_b.push_back(keep_if(b, skip, b.convert(bufs[k], ct), buf));
      g = nesterov ? b.add(g, b.mul(buf, full(c.args.runtime_scalar(momentum, ct)))) : buf;
    }
    new_p.push_back(keep_if(b, skip, p, b.sub(p, b.mul(lr, g))));
  }
  c.args.assign_list(0, new_p);
  if (!new_g.empty()) c.args.assign_list(1, new_g);  // unscaled in place, as CPU and CUDA do
  if (momentum != 0) c.args.assign_list(2, new_b);
  return {};
}

// _fused_adagrad_(self[], grads[], state_sums[], state_steps[], *, lr,
//   lr_decay, weight_decay, eps, maximize, grad_scale?, found_inf?): the
//   steps were already advanced by the optimizer.
std::vector<Value> fused_adagrad(Context& c) {
  Builder& b = c.b;
  std::vector<Value> params = c.args.tensors(0), grads = c.args.tensors(1), sums = c.args.tensors(2),
                     steps = c.args.tensors(3);
  std::vector<TensorInfo> pinfo = c.args.infos(0);
  const double lr_decay = c.args.double_(5), wd = c.args.double_(6);
  const bool maximize = c.args.bool_(8);
  Value skip = skip_step(c, 10);
  std::vector<Value> new_p, new_g, new_s;
  for (size_t k = 0; k < params.size(); ++k) {
    const DType ct = to_hlo(opmath_type(pinfo[k].dtype));
    const Dims& shape = pinfo[k].sizes;
    auto full = [&](Value scalar) { return b.broadcast_in_dim(scalar, shape, {}); };
    Value p = b.convert(params[k], ct), g = b.convert(grads[k], ct), sum = b.convert(sums[k], ct);
    Value lr = learning_rate(c, 4, ct, shape);
    g = unscale(c, 9, skip, grads[k], g, shape, new_g);
    if (maximize) g = b.neg(g);
    if (wd != 0) g = b.add(g, b.mul(p, full(c.args.runtime_scalar(wd, ct))));
    Value step = full(b.reshape(b.convert(steps[k], ct), {}));
    Value one_ = b.full(1, ct, shape);
    Value clr = b.div(lr, b.add(one_, b.mul(b.sub(step, one_), full(c.args.runtime_scalar(lr_decay, ct)))));
    sum = b.add(sum, b.mul(g, g));
    Value stdev = b.add(b.unary("stablehlo.sqrt", sum), full(c.args.runtime_scalar(c.args.double_(7), ct)));
    new_p.push_back(keep_if(b, skip, p, b.sub(p, b.mul(clr, b.div(g, stdev)))));
    new_s.push_back(keep_if(b, skip, b.convert(sums[k], ct), sum));
  }
  c.args.assign_list(0, new_p);
  if (!new_g.empty()) c.args.assign_list(1, new_g);  // unscaled in place, as CPU and CUDA do
  c.args.assign_list(2, new_s);
  return {};
}

// ---- the gradient scaler (torch.amp.GradScaler) ---------------------------------------

// Rank-0 float32 of a one-element tensor argument.
Value scalar_f32(Context& c, size_t i) {
  return c.b.reshape(c.b.convert(c.args.tensor(i), DType::F32), {});
}

// _amp_foreach_non_finite_check_and_unscale_(self[], found_inf, inv_scale):
// multiplies every gradient by inv_scale and sets found_inf to 1 if any
// element of any of them is infinite or NaN.
std::vector<Value> amp_unscale(Context& c) {
  Builder& b = c.b;
  std::vector<Value> grads = c.args.tensors(0);
  std::vector<TensorInfo> infos = c.args.infos(0);
  const TensorInfo& found_info = c.args.info(1);
  TORCH_CHECK(found_info.numel() == 1 && c.args.info(2).numel() == 1,
              "_amp_foreach_non_finite_check_and_unscale_: found_inf and inv_scale must be one-element tensors, "
              "got shapes ", dims_string(found_info.sizes), " and ", dims_string(c.args.info(2).sizes));
  Value inv = scalar_f32(c, 2);
  Value bad = b.constant_bool(false);
  std::vector<Value> scaled;
  for (size_t k = 0; k < grads.size(); ++k) {
    TORCH_CHECK(is_floating(infos[k].dtype), "_amp_foreach_non_finite_check_and_unscale_: expected floating-point "
                "gradients, got ", infos[k].dtype);
    Value g = b.convert(grads[k], DType::F32);
    bad = b.or_(bad, any_of(b, b.not_(b.is_finite(g))));
    scaled.push_back(b.mul(g, b.broadcast_in_dim(inv, infos[k].sizes, {})));
  }
  c.args.assign_list(0, scaled);
  Value found = b.select(bad, b.constant(1, DType::F32), scalar_f32(c, 1));
  c.args.assign(1, b.reshape(found, found_info.sizes));
  return {};
}

// _amp_update_scale_(self, growth_tracker, found_inf, growth_factor, backoff_factor, growth_interval):
// backs the scale off after a step with non-finite gradients; grows it after
// growth_interval clean steps in a row (unless that would overflow).
std::vector<Value> amp_update_scale(Context& c) {
  Builder& b = c.b;
  TORCH_CHECK(c.args.info(0).numel() == 1 && c.args.info(1).numel() == 1 && c.args.info(2).numel() == 1,
              "_amp_update_scale_: scale, growth_tracker and found_inf must be one-element tensors");
  TORCH_CHECK(c.args.info(0).dtype == at::kFloat, "_amp_update_scale_: the scale must be a float tensor, got ",
              c.args.info(0).dtype);
  Value scale = scalar_f32(c, 0);
  Value tracker = b.reshape(b.convert(c.args.tensor(1), DType::I32), {});
  Value found = b.compare(Cmp::NE, scalar_f32(c, 2), b.constant(0, DType::F32));
  Value growth = c.args.runtime_scalar(c.args.double_(3), DType::F32);
  Value backoff = c.args.runtime_scalar(c.args.double_(4), DType::F32);
  Value interval = c.args.runtime_scalar(c.args.int_(5), DType::I32);
  Value zero = b.constant_int(0, DType::I32);
  Value successful = b.add(tracker, b.constant_int(1, DType::I32));
  Value grow = b.compare(Cmp::EQ, successful, interval);
  Value grown = b.mul(scale, growth);
  grown = b.select(b.is_finite(grown), grown, scale);
  Value new_scale = b.select(found, b.mul(scale, backoff), b.select(grow, grown, scale));
  Value new_tracker = b.select(found, zero, b.select(grow, zero, successful));
  c.args.assign(0, b.reshape(new_scale, c.args.info(0).sizes));
  c.args.assign(1, b.reshape(new_tracker, c.args.info(1).sizes));
  return {};
}

void foreach_op(const std::string& name, const std::string& element) {
  element_ops().emplace(name, element);
  register_lowering(name.c_str(), lower_foreach);
}

}  // namespace

TPU_LOWERINGS(foreach) {
  for (const char* op : {"add", "sub", "mul", "div"}) {
    const std::string base = std::string("aten::_foreach_") + op;
    const std::string elem = std::string("aten::") + op;
    auto add = [&](const std::string& suffix, const std::string& element) {
      foreach_op(base + suffix, element);
    };
    add(".Scalar", elem + ".Scalar");
    add(".List", elem + ".Tensor");
    add(".ScalarList", elem + ".Scalar");
    if (std::string(op) != "sub") add(".Tensor", elem + ".Tensor");
  }
  foreach_op("aten::_foreach_addcmul.Scalar", "aten::addcmul");
  foreach_op("aten::_foreach_addcmul.ScalarList", "aten::addcmul");
  foreach_op("aten::_foreach_addcdiv.Scalar", "aten::addcdiv");
  foreach_op("aten::_foreach_addcdiv.ScalarList", "aten::addcdiv");
  foreach_op("aten::_foreach_lerp.Scalar", "aten::lerp.Scalar");
  foreach_op("aten::_foreach_lerp.List", "aten::lerp.Tensor");
  foreach_op("aten::_foreach_lerp.ScalarList", "aten::lerp.Scalar");
  foreach_op("aten::_foreach_maximum.Scalar", "aten::clamp_min");
  foreach_op("aten::_foreach_maximum.List", "aten::maximum");
  foreach_op("aten::_foreach_maximum.ScalarList", "aten::clamp_min");
  foreach_op("aten::_foreach_minimum.Scalar", "aten::clamp_max");
  foreach_op("aten::_foreach_minimum.List", "aten::minimum");
  foreach_op("aten::_foreach_minimum.ScalarList", "aten::clamp_max");
  foreach_op("aten::_foreach_clamp_min.Scalar", "aten::clamp_min");
  foreach_op("aten::_foreach_clamp_min.List", "aten::clamp_min.Tensor");
  foreach_op("aten::_foreach_clamp_min.ScalarList", "aten::clamp_min");
  foreach_op("aten::_foreach_clamp_max.Scalar", "aten::clamp_max");
  foreach_op("aten::_foreach_clamp_max.List", "aten::clamp_max.Tensor");
  foreach_op("aten::_foreach_clamp_max.ScalarList", "aten::clamp_max");
  foreach_op("aten::_foreach_pow.List", "aten::pow.Tensor_Tensor");
  foreach_op("aten::_foreach_pow.Scalar", "aten::pow.Tensor_Scalar");
  foreach_op("aten::_foreach_pow.ScalarList", "aten::pow.Tensor_Scalar");
  for (const char* op : {"abs", "acos", "asin", "atan", "ceil", "cos", "cosh", "erf", "erfc", "exp", "expm1",
                         "floor", "frac", "lgamma", "log", "log10", "log1p", "log2", "neg", "reciprocal", "round",
                         "sigmoid", "sign", "sin", "sinh", "sqrt", "tan", "tanh", "trunc", "rsqrt", "zero"}) {
    foreach_op(std::string("aten::_foreach_") + op, std::string("aten::") + op);
  }
  reg("aten::_foreach_norm.Scalar", lower_foreach_norm);
  reg("aten::_foreach_copy", lower_foreach_copy);
  reg("aten::_fused_adam_", [](Context& c) { return fused_adam(c, false); });
  reg("aten::_fused_adam_.tensor_lr", [](Context& c) { return fused_adam(c, false); });
  reg("aten::_fused_adamw_", [](Context& c) { return fused_adam(c, true); });
  reg("aten::_fused_adamw_.tensor_lr", [](Context& c) { return fused_adam(c, true); });
  reg("aten::_fused_sgd_", fused_sgd);
  reg("aten::_fused_adagrad_", fused_adagrad);
  reg("aten::_fused_adagrad_.tensor_lr", fused_adagrad);
  reg("aten::_fused_sgd_.tensor_lr", fused_sgd);
  reg("aten::_amp_foreach_non_finite_check_and_unscale_", amp_unscale);
  reg("aten::_amp_update_scale_", amp_update_scale);
}

}  // namespace tpu::lowering
