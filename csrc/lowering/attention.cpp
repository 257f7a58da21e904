// Scaled dot-product attention as one program per direction.
//
// torch.nn.functional.scaled_dot_product_attention picks a backend per call;
// on tpu it picks "overrideable" (aten/registration.cpp) where these cover the
// arguments, so attention is one op forward and one backward instead of the
// dozen of the math decomposition (matmuls, a mask built on the device, a
// safe softmax), each recorded and differentiated separately. The forward
// keeps the row-wise logsumexp; the backward recomputes the probabilities from
// it, as flash attention does.
#include <cmath>
#include <limits>

#include "csrc/lowering/common.h"

namespace tpu::lowering {

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

struct Attention {
  Dims batch;  // the leading dims, shared by query, key and value
  int64_t n = 0, L = 0, S = 0;
  at::ScalarType dtype = at::kFloat;
  DType ct = DType::F32;  // what the arithmetic is carried out in
  bool highest = true;    // float32 matmul precision
};

Attention describe(Context& c, size_t q_arg, size_t k_arg, size_t v_arg) {
  const TensorInfo& q = c.args.info(q_arg);
  const TensorInfo& k = c.args.info(k_arg);
  const TensorInfo& v = c.args.info(v_arg);
  Attention a;
  a.n = q.dim();
  TORCH_CHECK(a.n >= 2 && k.dim() == a.n && v.dim() == a.n,
              "scaled_dot_product_attention: expected query, key and value of the same rank (at least 2), got ",
              dims_string(q.sizes), ", ", dims_string(k.sizes), " and ", dims_string(v.sizes));
  const Dims lead(q.sizes.begin(), q.sizes.end() - 2);
  TORCH_CHECK(Dims(k.sizes.begin(), k.sizes.end() - 2) == lead && Dims(v.sizes.begin(), v.sizes.end() - 2) == lead &&
                  k.sizes[a.n - 1] == q.sizes[a.n - 1] && v.sizes[a.n - 2] == k.sizes[a.n - 2],
              "scaled_dot_product_attention: query ", dims_string(q.sizes), ", key ", dims_string(k.sizes),
              " and value ", dims_string(v.sizes), " do not fit together");
  TORCH_CHECK(k.dtype == q.dtype && v.dtype == q.dtype && is_floating(q.dtype),
              "scaled_dot_product_attention: expected query, key and value of one floating dtype, got ", q.dtype,
              ", ", k.dtype, " and ", v.dtype);
  for (int64_t i = 0; i < a.n - 2; ++i) a.batch.push_back(i);
  a.L = q.sizes[a.n - 2];
  a.S = k.sizes[a.n - 2];
  a.dtype = q.dtype;
  a.ct = to_hlo(opmath_type(q.dtype));
  a.highest = c.precision() == MatmulPrecision::Highest || q.dtype == at::kDouble;
  return a;
}

double softmax_scale(Context& c, size_t scale_arg, size_t q_arg) {
  if (c.args.has(scale_arg)) return c.args.double_(scale_arg);
  return 1.0 / std::sqrt(static_cast<double>(c.args.info(q_arg).sizes.back()));
}

// The scaled scores q k^T * scale (+ bias), causal positions above the
// diagonal at -inf: [batch..., L, S] in the compute type.
Value scores(Context& c, const Attention& a, Value q, Value k, size_t bias_arg, bool causal, double scale) {
  Builder& b = c.b;
  Value s = b.dot_general(q, k, a.batch, a.batch, {a.n - 1}, {a.n - 1}, a.ct, a.highest);
  const Dims dims = b.dims(s);
  s = b.mul(s, b.full(scale, a.ct, dims));
  if (c.args.has(bias_arg)) {
    const TensorInfo& bias = c.args.info(bias_arg);
    TORCH_CHECK(bias.dtype == a.dtype || bias.dtype == at::kBool,
                "scaled_dot_product_attention: expected attn_mask dtype to be bool or ", a.dtype, ", but got ",
                bias.dtype);
    broadcast_shapes(bias.sizes, dims);
    Value m = b.broadcast_to(c.args.tensor(bias_arg), dims);
    s = bias.dtype == at::kBool ? b.select(m, s, b.full(kNegInf, a.ct, dims)) : b.add(s, b.convert(m, a.ct));
  }
  if (causal) {  // keep key j <= query i (top-left aligned, as tril(ones(L, S)))
    const Type pos{DType::I64, dims};
    Value keep = b.compare(hlo::Cmp::LE, b.iota(pos, a.n - 1), b.iota(pos, a.n - 2));
    s = b.select(keep, s, b.full(kNegInf, a.ct, dims));
  }
  return s;
}

// The row maximum, 0 for rows that are entirely -inf (fully masked).
Value safe_max(Builder& b, const Attention& a, Value s) {
  Value m = b.reduce(s, b.constant(kNegInf, a.ct), {a.n - 1}, "stablehlo.maximum");
  const Dims rows = b.dims(m);
  return b.select(b.compare(hlo::Cmp::EQ, m, b.full(kNegInf, a.ct, rows)), b.zeros(b.type(m)), m);
}

// Where a per-row value [batch..., L] sits in the scores [batch..., L, S].
Dims row_dims(const Attention& a) {
  Dims d = a.batch;
  d.push_back(a.n - 2);
  return d;
}

// torch_tpu::_sdpa_forward(query, key, value, attn_bias?, is_causal, scale?)
//   -> (output, logsumexp)
// Rows with every key masked give zeros (PyTorch's math backend uses a safe
// softmax) and a logsumexp of -inf.
std::vector<Value> lower_sdpa_forward(Context& c) {
  const Attention a = describe(c, 0, 1, 2);
  Builder& b = c.b;
  const bool causal = c.args.bool_(4);
  Value q = b.convert(c.args.tensor(0), a.ct), k = b.convert(c.args.tensor(1), a.ct);
  Value v = b.convert(c.args.tensor(2), a.ct);
  Value s = scores(c, a, q, k, 3, causal, softmax_scale(c, 5, 0));
  const Dims dims = b.dims(s);
  const Dims rows_of = row_dims(a);
  Value m = safe_max(b, a, s);
  Value e = b.unary("stablehlo.exponential", b.sub(s, b.broadcast_in_dim(m, dims, rows_of)));
  Value sum = sum_over(b, e, {a.n - 1});
  const Dims rows = b.dims(sum);
  Value empty = b.compare(hlo::Cmp::EQ, sum, b.zeros(b.type(sum)));
  Value safe_sum = b.select(empty, b.full(1.0, a.ct, rows), sum);
  Value p = b.div(e, b.broadcast_in_dim(safe_sum, dims, rows_of));
  Value out = b.dot_general(p, v, a.batch, a.batch, {a.n - 1}, {a.n - 2}, a.ct, a.highest);
  Value lse = b.select(empty, b.full(kNegInf, a.ct, rows), b.add(b.unary("stablehlo.log", safe_sum), m));
  return {cast(b, out, a.dtype), lse};
}

// _scaled_dot_product_fused_attention_overrideable_backward(grad_out, query,
//   key, value, attn_bias, grad_input_mask, out, logsumexp, cum_seq_q,
//   cum_seq_k, max_q, max_k, dropout_p, is_causal, philox_seed,
//   philox_offset, *, scale) -> (grad_query, grad_key, grad_value, grad_attn_bias)
std::vector<Value> lower_sdpa_backward(Context& c) {
  const Attention a = describe(c, 1, 2, 3);
  TORCH_CHECK(c.args.double_(12) == 0.0, "scaled_dot_product_attention on tpu: the fused backward has no dropout");
  Builder& b = c.b;
  const std::vector<int64_t> mask = c.args.ints(5);
  const double scale = softmax_scale(c, 16, 1);
  Value q = b.convert(c.args.tensor(1), a.ct), k = b.convert(c.args.tensor(2), a.ct);
  Value v = b.convert(c.args.tensor(3), a.ct);
  Value g = b.convert(c.args.tensor(0), a.ct), o = b.convert(c.args.tensor(6), a.ct);
  Value s = scores(c, a, q, k, 4, c.args.bool_(13), scale);
  const Dims dims = b.dims(s);
  const Dims rows_of = row_dims(a);
  // The probabilities again, from the saved logsumexp (0 in masked rows).
  Value lse = b.convert(c.args.tensor(7), a.ct);
  const Dims rows = b.dims(lse);
  Value masked_row = b.compare(hlo::Cmp::EQ, lse, b.full(kNegInf, a.ct, rows));
  Value shift = b.select(masked_row, b.zeros(b.type(lse)), lse);
  Value p = b.unary("stablehlo.exponential", b.sub(s, b.broadcast_in_dim(shift, dims, rows_of)));
  p = b.select(b.broadcast_in_dim(masked_row, dims, rows_of), b.zeros(b.type(p)), p);
  // dS = P * (dO V^T - rowsum(dO * O))
  Value dp = b.dot_general(g, v, a.batch, a.batch, {a.n - 1}, {a.n - 1}, a.ct, a.highest);
  Value d = sum_over(b, b.mul(g, o), {a.n - 1});
  Value ds = b.mul(p, b.sub(dp, b.broadcast_in_dim(d, dims, rows_of)));
  // Every input gets a gradient, as PyTorch's meta kernel says: zeros
  // where grad_input_mask asks for none.
  auto wanted = [&](size_t i) { return i < mask.size() && mask[i]; };
  auto zeros_like = [&](size_t arg) {
    return b.zeros(Type{to_hlo(c.args.info(arg).dtype), c.args.info(arg).sizes});
  };
  Value gq = zeros_like(1), gk = zeros_like(2), gv = zeros_like(3), gb;
  if (wanted(0)) {
    Value r = b.dot_general(ds, k, a.batch, a.batch, {a.n - 1}, {a.n - 2}, a.ct, a.highest);
    gq = cast(b, b.mul(r, b.full(scale, a.ct, b.dims(r))), a.dtype);
  }
  if (wanted(1)) {
    Value r = contract_major_dims(b, ds, q, a.batch, a.ct, a.highest);
    gk = cast(b, b.mul(r, b.full(scale, a.ct, b.dims(r))), a.dtype);
  }
  if (wanted(2)) {
    gv = cast(b, contract_major_dims(b, p, g, a.batch, a.ct, a.highest), a.dtype);
  }
  if (c.args.has(4)) {
    gb = zeros_like(4);
    if (wanted(3) && c.args.info(4).dtype != at::kBool) {
      // The bias was broadcast to the scores: sum its gradient back.
      const Dims& bias = c.args.info(4).sizes;
      const int64_t lead = static_cast<int64_t>(dims.size() - bias.size());
      Dims summed;
      for (int64_t i = 0; i < static_cast<int64_t>(dims.size()); ++i) {
        if (i < lead || (bias[i - lead] == 1 && dims[i] != 1)) summed.push_back(i);
      }
      gb = b.reshape(cast(b, sum_over(b, ds, summed), a.dtype), bias);
    }
  }
  return {gq, gk, gv, gb};
}

}  // namespace

TPU_LOWERINGS(attention) {
  reg("torch_tpu::_sdpa_forward", lower_sdpa_forward);
  reg("aten::_scaled_dot_product_fused_attention_overrideable_backward", lower_sdpa_backward);
}

}  // namespace tpu::lowering
