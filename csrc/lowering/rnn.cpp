// Fused LSTM and GRU cells and their backward ops.
//
// PyTorch's LSTM and GRU modules on an accelerator run each time step as
// `_thnn_fused_lstm_cell` / `_thnn_fused_gru_cell` on the precomputed gate
// projections (input @ W_ih^T and hidden @ W_hh^T), and autograd calls the
// matching backward op with the workspace the forward saved. The workspace
// is private to these lowerings; its shape follows CUDA's kernels
// ([B, 4H] activated LSTM gates; [B, 5H] for GRU: r, z, n, hx and the hidden
// part of the new gate). Arithmetic is in opmath (float for bfloat16 and
// half, as under autocast), results in the inputs' dtype.
#include "csrc/lowering/common.h"

namespace tpu::lowering {

namespace {

struct Cell {
  Builder& b;
  at::ScalarType dtype;
  DType ct;

  Value in(Value v) { return cast(b, v, opmath_type(dtype)); }
  Value out(Value v) { return cast(b, v, dtype); }
  Value one_like(Value v) { return b.full(1, ct, b.dims(v)); }
  Value sigmoid(Value v) { return b.unary("stablehlo.logistic", v); }
  Value tanh(Value v) { return b.unary("stablehlo.tanh", v); }
  // d sigmoid / dx expressed in the sigmoid's value s: s (1 - s).
  Value dsigmoid(Value s) { return b.mul(s, b.sub(one_like(s), s)); }
  // d tanh / dx in the tanh's value t: 1 - t^2.
  Value dtanh(Value t) { return b.sub(one_like(t), b.mul(t, t)); }
  // Chunk k of `n` equal chunks along dim 1.
  Value chunk(Value v, int64_t k, int64_t n) {
    const int64_t h = b.dims(v)[1] / n;
    return b.slice_dim(v, 1, k * h, (k + 1) * h);
  }
};

Cell cell_for(Context& c, size_t arg) {
  const at::ScalarType t = c.args.info(arg).dtype;
  return Cell{c.b, t, to_hlo(opmath_type(t))};
}

void check_gates(Context& c, const char* op, int64_t gates) {
  const TensorInfo& ig = c.args.info(0);
  const TensorInfo& hg = c.args.info(1);
  const TensorInfo& h = c.args.info(2);
  TORCH_CHECK(ig.dim() == 2 && ig.sizes == hg.sizes && h.dim() == 2 && h.sizes[0] == ig.sizes[0] &&
                  ig.sizes[1] == gates * h.sizes[1],
              op, ": expected input_gates and hidden_gates of shape [B, ", gates, "*H] and a state of shape [B, H], got ",
              dims_string(ig.sizes), ", ", dims_string(hg.sizes), " and ", dims_string(h.sizes));
  for (size_t i : {size_t{3}, size_t{4}}) {
    if (!c.args.has(i)) continue;
    TORCH_CHECK(c.args.info(i).sizes == Dims{ig.sizes[1]}, op, ": expected a bias of shape [", ig.sizes[1], "], got ",
                dims_string(c.args.info(i).sizes));
  }
}

// input_gates + hidden_gates (+ both biases, broadcast over the batch).
Value add_bias(Cell& k, Context& c, Value v, size_t bias_arg) {
  if (!c.args.has(bias_arg)) return v;
  return k.b.add(v, k.b.broadcast_in_dim(k.in(c.args.tensor(bias_arg)), k.b.dims(v), {1}));
}

// Column sums of a gate gradient: the bias gradient.
Value bias_grad(Cell& k, Value g) { return k.out(sum_over(k.b, g, {0})); }

// _thnn_fused_lstm_cell(input_gates, hidden_gates, cx, input_bias?, hidden_bias?) -> (hy, cy, workspace)
std::vector<Value> lstm_cell(Context& c) {
  check_gates(c, "_thnn_fused_lstm_cell", 4);
  Cell k = cell_for(c, 0);
  Builder& b = c.b;
  Value gates = b.add(k.in(c.args.tensor(0)), k.in(c.args.tensor(1)));
  gates = add_bias(k, c, add_bias(k, c, gates, 3), 4);
  Value i = k.sigmoid(k.chunk(gates, 0, 4)), f = k.sigmoid(k.chunk(gates, 1, 4));
  Value g = k.tanh(k.chunk(gates, 2, 4)), o = k.sigmoid(k.chunk(gates, 3, 4));
  Value cy = b.add(b.mul(f, k.in(c.args.tensor(2))), b.mul(i, g));
  Value hy = b.mul(o, k.tanh(cy));
  return {k.out(hy), k.out(cy), k.out(b.concatenate({i, f, g, o}, 1))};
}

// _thnn_fused_lstm_cell_backward_impl(grad_hy?, grad_cy?, cx, cy, workspace, has_bias)
//   -> (grad_gates, grad_cx, grad_bias)
std::vector<Value> lstm_cell_backward(Context& c) {
  Cell k = cell_for(c, 4);
  Builder& b = c.b;
  Value ws = k.in(c.args.tensor(4));
  Value i = k.chunk(ws, 0, 4), f = k.chunk(ws, 1, 4), g = k.chunk(ws, 2, 4), o = k.chunk(ws, 3, 4);
  Value cx = k.in(c.args.tensor(2)), cy = k.in(c.args.tensor(3));
  Value zero = b.zeros(b.type(cx));
  Value ghy = c.args.has(0) ? k.in(c.args.tensor(0)) : zero;
  Value gcy_in = c.args.has(1) ? k.in(c.args.tensor(1)) : zero;
  Value tcy = k.tanh(cy);
  Value gcy = b.add(gcy_in, b.mul(b.mul(ghy, o), k.dtanh(tcy)));
  Value di = b.mul(b.mul(gcy, g), k.dsigmoid(i));
  Value df = b.mul(b.mul(gcy, cx), k.dsigmoid(f));
  Value dg = b.mul(b.mul(gcy, i), k.dtanh(g));
  Value d_o = b.mul(b.mul(ghy, tcy), k.dsigmoid(o));
  Value grad_gates = b.concatenate({di, df, dg, d_o}, 1);
  Value grad_bias = c.args.bool_(5) ? bias_grad(k, grad_gates) : Value{};
  return {k.out(grad_gates), k.out(b.mul(gcy, f)), grad_bias};
}

// _thnn_fused_gru_cell(input_gates, hidden_gates, hx, input_bias?, hidden_bias?) -> (hy, workspace)
std::vector<Value> gru_cell(Context& c) {
  check_gates(c, "_thnn_fused_gru_cell", 3);
  Cell k = cell_for(c, 0);
  Builder& b = c.b;
  Value ig = add_bias(k, c, k.in(c.args.tensor(0)), 3);
  Value hg = add_bias(k, c, k.in(c.args.tensor(1)), 4);
  Value hx = k.in(c.args.tensor(2));
  Value r = k.sigmoid(b.add(k.chunk(ig, 0, 3), k.chunk(hg, 0, 3)));
  Value z = k.sigmoid(b.add(k.chunk(ig, 1, 3), k.chunk(hg, 1, 3)));
  Value hn = k.chunk(hg, 2, 3);
  Value n = k.tanh(b.add(k.chunk(ig, 2, 3), b.mul(r, hn)));
  Value hy = b.add(n, b.mul(z, b.sub(hx, n)));
  return {k.out(hy), k.out(b.concatenate({r, z, n, hx, hn}, 1))};
}

// _thnn_fused_gru_cell_backward(grad_hy, workspace, has_bias)
//   -> (grad_input_gates, grad_hidden_gates, grad_hx, grad_input_bias, grad_hidden_bias)
std::vector<Value> gru_cell_backward(Context& c) {
  Cell k = cell_for(c, 1);
  Builder& b = c.b;
  Value ws = k.in(c.args.tensor(1));
  Value r = k.chunk(ws, 0, 5), z = k.chunk(ws, 1, 5), n = k.chunk(ws, 2, 5), hx = k.chunk(ws, 3, 5),
        hn = k.chunk(ws, 4, 5);
  Value ghy = k.in(c.args.tensor(0));
  Value dz = b.mul(b.mul(ghy, b.sub(hx, n)), k.dsigmoid(z));
  Value dn = b.mul(b.mul(ghy, b.sub(k.one_like(z), z)), k.dtanh(n));
  Value dr = b.mul(b.mul(dn, hn), k.dsigmoid(r));
  Value g_input = b.concatenate({dr, dz, dn}, 1);
  Value g_hidden = b.concatenate({dr, dz, b.mul(dn, r)}, 1);
  const bool has_bias = c.args.bool_(2);
  return {k.out(g_input), k.out(g_hidden), k.out(b.mul(ghy, z)), has_bias ? bias_grad(k, g_input) : Value{},
          has_bias ? bias_grad(k, g_hidden) : Value{}};
}

}  // namespace

TPU_LOWERINGS(rnn) {
  reg("aten::_thnn_fused_lstm_cell", lstm_cell);
  reg("aten::_thnn_fused_lstm_cell_backward_impl", lstm_cell_backward);
  reg("aten::_thnn_fused_gru_cell", gru_cell);
  reg("aten::_thnn_fused_gru_cell_backward", gru_cell_backward);
}

}  // namespace tpu::lowering
