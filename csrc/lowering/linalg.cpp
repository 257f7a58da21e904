// Matrix products: mm, bmm, addmm.
#include <algorithm>
#include <cmath>
#include <optional>

#include "csrc/lowering/common.h"

namespace tpu::lowering {

namespace {

// A matrix product whose lhs is a transposed matrix (x.t() @ y, the weight
// gradient of a linear layer, A.t() @ v): XLA's CPU backend folds the
// transpose into the product, contracting the lhs along its major dim, which
// is slow in one orientation (contract_major_dims picks the other). With a
// transposed rhs too, S^T R^T = (R S)^T is a plain product. Batch dims lead
// (mm, bmm, mv, addmm, baddbmm).
std::optional<Value> contract_transposed_lhs(Builder& b, Value lhs, Value rhs, const Dims& batch, int64_t lc,
                                             int64_t rc, DType acc, bool highest) {
  const int64_t nb = static_cast<int64_t>(batch.size());
  for (int64_t i = 0; i < nb; ++i) {
    if (batch[i] != i) return std::nullopt;
  }
  Value source, rsource;
  Dims perm, rperm;
  // (a transpose of rank nb + 2 that keeps the batch dims swaps the last two)
  auto swaps_last_two = [&](const Dims& p) { return std::equal(p.begin(), p.begin() + nb, batch.begin()); };
  if (b.rank(lhs) != nb + 2 || lc != nb + 1 || rc != nb || !b.transposed(lhs, &source, &perm) ||
      !swaps_last_two(perm)) {
    return std::nullopt;
  }
  if (b.rank(rhs) == nb + 2 && b.transposed(rhs, &rsource, &rperm) && swaps_last_two(rperm)) {
    return product_transposed(b, b.dot_general(rsource, source, batch, batch, {nb + 1}, {nb}, acc, highest), nb);
  }
  return contract_major_dims(b, source, rhs, batch, acc, highest);
}

// lhs x rhs contracting lhs[lc] with rhs[rc] over batch dims; half and
// bfloat16 accumulate in float.
Value contract(Context& c, Value lhs, Value rhs, const Dims& batch, int64_t lc, int64_t rc,
               at::ScalarType t) {
  // CPU's kernels have no bool product (each names its kernel).
  TORCH_CHECK_NOT_IMPLEMENTED(t != at::kBool, "\"",
                              c.op == "aten::bmm" || c.op == "aten::baddbmm" ? "bmm"
                              : c.op == "aten::dot"                         ? "dot"
                              : c.op == "aten::mv" || c.op == "aten::addmv" ? "addmv_impl_cpu"
                                                                            : "addmm_impl_cpu_",
                              "\" not implemented for 'Bool'");
  const at::ScalarType acc = opmath_type(t);  // (half, bfloat16 and the 8-bit floats accumulate in float)
  const bool highest = c.precision() == MatmulPrecision::Highest || t == at::kDouble;
  if (std::optional<Value> r = contract_transposed_lhs(c.b, lhs, rhs, batch, lc, rc, to_hlo(acc), highest)) {
    return cast(c.b, *r, t);
  }
  Value r = c.b.dot_general(lhs, rhs, batch, batch, {lc}, {rc}, to_hlo(acc), highest);
  return cast(c.b, r, t);
}

void check_mm(const TensorInfo& a, const TensorInfo& b, const char* name) {
  TORCH_CHECK(a.dim() == 2, "self must be a matrix");
  TORCH_CHECK(b.dim() == 2, "mat2 must be a matrix");
  TORCH_CHECK(a.sizes[1] == b.sizes[0], "mat1 and mat2 shapes cannot be multiplied (", a.sizes[0],
              "x", a.sizes[1], " and ", b.sizes[0], "x", b.sizes[1], ")");
  TORCH_CHECK(a.dtype == b.dtype, "expected m1 and m2 to have the same dtype, but got: ", a.dtype,
              " != ", b.dtype);
}

std::vector<Value> lower_mm(Context& c) {
  const TensorInfo& a = c.args.info(0);
  check_mm(a, c.args.info(1), "mm");
  return one(contract(c, c.args.tensor(0), c.args.tensor(1), {}, 1, 0, a.dtype));
}

// _int_mm(int8 [M, K], int8 [K, N]) -> int32 [M, N] (torchao's int8
// dynamic quantization): the products accumulated exactly in int32.
std::vector<Value> lower_int_mm(Context& c) {
  const TensorInfo& a = c.args.info(0);
  const TensorInfo& m = c.args.info(1);
  TORCH_CHECK(a.dim() == 2 && m.dim() == 2, "_int_mm: expected 2-d self and mat2, got ", a.dim(), "-d and ", m.dim(),
              "-d");
  TORCH_CHECK(a.sizes[1] == m.sizes[0], "_int_mm: self.size(1) (", a.sizes[1], ") must match mat2.size(0) (",
              m.sizes[0], ")");
  TORCH_CHECK(a.dtype == at::kChar && m.dtype == at::kChar, "_int_mm: expected int8 self and mat2, got ", a.dtype,
              " and ", m.dtype);
  return one(c.b.dot_general(c.args.tensor(0), c.args.tensor(1), {}, {}, {1}, {0}, DType::I32));
}

// _scaled_mm(self, mat2, scale_a, scale_b, bias, scale_result, out_dtype,
// use_fast_accum): 8-bit float matrices, each times its float32 scales (one
// per tensor, or one per row of self and per column of mat2), multiplied and
// accumulated in float32, plus bias; an 8-bit result is divided by
// scale_result first. Accumulation is always full precision (use_fast_accum
// is a CUDA speed hint).
std::vector<Value> lower_scaled_mm(Context& c) {
  Builder& b = c.b;
  const TensorInfo& a = c.args.info(0);
  const TensorInfo& m = c.args.info(1);
  const TensorInfo& sa = c.args.info(2);
  const TensorInfo& sb = c.args.info(3);
  TORCH_CHECK(a.dim() == 2 && m.dim() == 2, "_scaled_mm: expected 2-d self and mat2, got ", a.dim(), "-d and ",
              m.dim(), "-d");
  TORCH_CHECK(a.sizes[1] == m.sizes[0], "mat_a and mat_b shapes cannot be multiplied (", a.sizes[0], "x", a.sizes[1],
              " and ", m.sizes[0], "x", m.sizes[1], ")");
  const int64_t M = a.sizes[0], N = m.sizes[1];
  const bool floats = c10::isFloat8Type(a.dtype) && c10::isFloat8Type(m.dtype) && sa.dtype == at::kFloat &&
                      sb.dtype == at::kFloat;
  const bool tensorwise = sa.numel() == 1 && sb.numel() == 1;
  const bool rowwise = sa.sizes == Dims{M, 1} && sb.sizes == Dims{1, N} && sa.contiguous && sb.contiguous;
  TORCH_CHECK_VALUE(floats && (tensorwise || rowwise),
                    "_scaled_mm: invalid scaling configuration: self and mat2 must be 8-bit floats and the scales "
                    "float32, either one element each (tensor-wise) or scale_a of shape [", M,
                    ", 1] and scale_b of shape [1, ", N, "] (row-wise); got self ", a.dtype, " ",
                    dims_string(a.sizes), ", mat2 ", m.dtype, " ", dims_string(m.sizes), ", scale_a ", sa.dtype, " ",
                    dims_string(sa.sizes), ", scale_b ", sb.dtype, " ", dims_string(sb.sizes));
  const at::ScalarType out = c.args.opt_scalar_type(6).value_or(a.dtype);
  const Dims mk{M, a.sizes[1]}, kn{m.sizes[0], N}, mn{M, N};
  // Operand i (dims d) in float32 times its scale (argument i + 2), whose
  // row-wise entries run along dim `along`.
  auto scaled = [&](size_t i, const Dims& d, int64_t along) {
    const Dims sd = tensorwise ? Dims{} : Dims{d[along]};
    Value scale = b.broadcast_in_dim(b.reshape(c.args.tensor(i + 2), sd), d, tensorwise ? Dims{} : Dims{along});
    return b.mul(b.convert(c.args.tensor(i), DType::F32), scale);
  };
  Value r = b.dot_general(scaled(0, mk, 0), scaled(1, kn, 1), {}, {}, {1}, {0}, DType::F32, true);
  if (c.args.has(4)) {
    const TensorInfo& bias = c.args.info(4);
    TORCH_CHECK(bias.numel() == N, "_scaled_mm: bias must have ", N, " elements, got ", dims_string(bias.sizes));
    r = b.add(r, b.broadcast_in_dim(b.reshape(b.convert(c.args.tensor(4), DType::F32), {N}), mn, {1}));
  }
  if (c10::isFloat8Type(out) && c.args.has(5)) {
    r = b.div(r, b.broadcast_in_dim(b.reshape(b.convert(c.args.tensor(5), DType::F32), {}), mn, {}));
  }
  return one(b.convert(r, to_hlo(out)));
}

std::vector<Value> lower_bmm(Context& c) {
  const TensorInfo& a = c.args.info(0);
  const TensorInfo& m = c.args.info(1);
  TORCH_CHECK(a.dim() == 3, "batch1 must be a 3D tensor");
  TORCH_CHECK(m.dim() == 3, "batch2 must be a 3D tensor");
  TORCH_CHECK(a.sizes[0] == m.sizes[0] && a.sizes[2] == m.sizes[1],
              "Expected size for first two dimensions of batch2 tensor to be: [", a.sizes[0], ", ",
              a.sizes[2], "] but got: [", m.sizes[0], ", ", m.sizes[1], "].");
  TORCH_CHECK(a.dtype == m.dtype, "expected scalar type ", a.dtype, " but found ", m.dtype);
  return one(contract(c, c.args.tensor(0), c.args.tensor(1), {0}, 2, 1, a.dtype));
}

Value scaled_sum(Context& c, Value prod, at::ScalarType t, size_t self_arg, size_t beta_arg,
                 size_t alpha_arg);

// addmm(self, mat1, mat2, beta, alpha) = beta * self + alpha * (mat1 @ mat2)
std::vector<Value> lower_addmm(Context& c) {
  const TensorInfo& m1 = c.args.info(1);
  check_mm(m1, c.args.info(2), "addmm");
  Value prod = contract(c, c.args.tensor(1), c.args.tensor(2), {}, 1, 0, m1.dtype);
  return one(scaled_sum(c, prod, m1.dtype, 0, 3, 4));
}

// beta * self + alpha * prod, with beta == 0 ignoring self (nan included).
Value scaled_sum(Context& c, Value prod, at::ScalarType t, size_t self_arg, size_t beta_arg,
                 size_t alpha_arg) {
  Builder& b = c.b;
  const at::ScalarType compute = opmath_type(t);
  Value r = cast(b, prod, compute);
  const Dims dims = b.dims(r);
  if (c.args.has(alpha_arg) && !c.args.scalar(alpha_arg).equal(1)) {
    r = b.mul(r, splat(b, c.args.scalar_value(alpha_arg, to_hlo(compute)), dims));
  }
  broadcast_shapes(c.args.info(self_arg).sizes, dims);
  const c10::Scalar beta = c.args.has(beta_arg) ? c.args.scalar(beta_arg) : c10::Scalar(1);
  if (!beta.equal(0)) {
    Value self = b.broadcast_to(cast(b, c.args.tensor(self_arg), compute), dims);
    if (!beta.equal(1)) self = b.mul(self, splat(b, c.args.scalar_value(beta_arg, to_hlo(compute)), dims));
    r = b.add(r, self);
  }
  return cast(b, r, t);
}

std::vector<Value> lower_dot(Context& c) {
  const TensorInfo& a = c.args.info(0);
  const TensorInfo& v = c.args.info(1);
  TORCH_CHECK(a.dim() == 1 && v.dim() == 1, "1D tensors expected, but got ", a.dim(), "D and ",
              v.dim(), "D tensors");
  TORCH_CHECK(a.dtype == v.dtype, "dot : expected both vectors to have same dtype, but found ",
              c10::toString(a.dtype), " and ", c10::toString(v.dtype));
  TORCH_CHECK(a.sizes[0] == v.sizes[0], "inconsistent tensor size, expected tensor [", a.sizes[0],
              "] and src [", v.sizes[0], "] to have the same number of elements, but got ",
              a.sizes[0], " and ", v.sizes[0], " elements respectively");
  return one(contract(c, c.args.tensor(0), c.args.tensor(1), {}, 0, 0, a.dtype));
}

std::vector<Value> lower_mv(Context& c) {
  const TensorInfo& m = c.args.info(0);
  const TensorInfo& v = c.args.info(1);
  TORCH_CHECK(m.dim() == 2 && v.dim() == 1, "vector + matrix @ vector expected, got ", m.dim(),
              ", ", v.dim());
  TORCH_CHECK(m.sizes[1] == v.sizes[0], "size mismatch, got input (", m.sizes[0], "), mat (",
              m.sizes[0], "x", m.sizes[1], "), vec (", v.sizes[0], ")");
  return one(contract(c, c.args.tensor(0), c.args.tensor(1), {}, 1, 0, m.dtype));
}

// linalg_cross(self, other, dim): the 3-vector cross product along dim.
std::vector<Value> lower_cross(Context& c) {
  ResultType r;
  r.tensor(c.args.info(0)).tensor(c.args.info(1));
  const at::ScalarType t = r.get();
  const Dims shape = broadcast_shapes(c.args.info(0).sizes, c.args.info(1).sizes);
  const int64_t dim = wrap_dim(c.args.int_(2), static_cast<int64_t>(shape.size()));
  TORCH_CHECK(shape[dim] == 3, "linalg.cross: inputs dimension ", dim, " must have length 3. Got ",
              c.args.info(0).sizes.empty() ? 0 : shape[dim], " and ", shape[dim]);
  Builder& b = c.b;
  Value x = b.broadcast_to(cast(b, c.args.tensor(0), t), shape);
  Value y = b.broadcast_to(cast(b, c.args.tensor(1), t), shape);
  auto part = [&](Value v, int64_t i) { return b.slice_dim(v, dim, i, i + 1); };
  Value c0 = b.sub(b.mul(part(x, 1), part(y, 2)), b.mul(part(x, 2), part(y, 1)));
  Value c1 = b.sub(b.mul(part(x, 2), part(y, 0)), b.mul(part(x, 0), part(y, 2)));
  Value c2 = b.sub(b.mul(part(x, 0), part(y, 1)), b.mul(part(x, 1), part(y, 0)));
  return one(b.concatenate({c0, c1, c2}, dim));
}

// Pairwise |x1_i - x2_j| over the last dim: [..., P, R, M].
Value pairwise_diff(Builder& b, Value x1, Value x2) {
  const Dims& d1 = b.dims(x1);
  const Dims& d2 = b.dims(x2);
  const int64_t r = b.rank(x1);
  Dims out(d1.begin(), d1.end() - 2);
  out.push_back(d1[r - 2]);
  out.push_back(d2[r - 2]);
  out.push_back(d1[r - 1]);
  Dims map1, map2;
  for (int64_t i = 0; i < r - 2; ++i) {
    map1.push_back(i);
    map2.push_back(i);
  }
  map1.push_back(r - 2);
  map1.push_back(r);
  map2.push_back(r - 1);
  map2.push_back(r);
  return b.sub(b.broadcast_in_dim(x1, out, map1), b.broadcast_in_dim(x2, out, map2));
}

// The p-norm distance from per-component differences (last dim).
Value p_distance(Builder& b, Value diff, double p) {
  const int64_t last = b.rank(diff) - 1;
  Value a = b.abs(diff);
  const DType dt = b.dtype(a);
  if (p == 0) return sum_over(b, b.convert(b.compare(hlo::Cmp::NE, a, b.zeros(b.type(a))), dt), {last});
  if (std::isinf(p)) return b.reduce(a, b.zeros(Type{dt, {}}), {last}, "stablehlo.maximum");
  if (p == 1) return sum_over(b, a, {last});
  if (p == 2) return b.unary("stablehlo.sqrt", sum_over(b, b.mul(a, a), {last}));
  Value s = sum_over(b, b.pow(a, b.full(p, dt, b.dims(a))), {last});
  return b.pow(s, b.full(1.0 / p, dt, b.dims(s)));
}

// x1 [.., P, M] and x2 [.., R, M] with their batch dims broadcast together.
std::pair<Value, Value> cdist_operands(Builder& b, Value x1, Value x2) {
  const Dims& d1 = b.dims(x1);
  const Dims& d2 = b.dims(x2);
  Dims batch = broadcast_shapes(Dims(d1.begin(), d1.end() - 2), Dims(d2.begin(), d2.end() - 2));
  Dims f1 = batch, f2 = batch;
  f1.insert(f1.end(), d1.end() - 2, d1.end());
  f2.insert(f2.end(), d2.end() - 2, d2.end());
  return {b.broadcast_to(x1, f1), b.broadcast_to(x2, f2)};
}

// _cdist_forward(x1 [.., P, M], x2 [.., R, M], p, compute_mode)
std::vector<Value> lower_cdist(Context& c) {
  const TensorInfo& a = c.args.info(0);
  const TensorInfo& bi = c.args.info(1);
  const double p = c.args.double_(2);
  TORCH_CHECK(p >= 0, "cdist only supports non-negative p values");
  const int64_t mode = c.args.has(3) ? c.args.int_(3) : 0;
  Builder& b = c.b;
  const at::ScalarType t = a.dtype;
  const DType ct = to_hlo(opmath_type(t));
  auto [x1, x2] = cdist_operands(b, b.convert(c.args.tensor(0), ct), b.convert(c.args.tensor(1), ct));
  const int64_t r = b.rank(x1);
  const int64_t P = a.sizes[r - 2], R = bi.sizes[r - 2];
  const bool use_mm = p == 2 && (mode == 1 || (mode == 0 && (P > 25 || R > 25)));
  if (use_mm) {
    // |x1|^2 - 2 x1.x2 + |x2|^2, clamped at 0 (PyTorch's formulation).
    Dims batch;
    for (int64_t i = 0; i < r - 2; ++i) batch.push_back(i);
    Value n1 = sum_over(b, b.mul(x1, x1), {r - 1});
    Value n2 = sum_over(b, b.mul(x2, x2), {r - 1});
    Value dot = b.dot_general(x1, x2, batch, batch, {r - 1}, {r - 1}, ct, true);
    const Dims& od = b.dims(dot);
    Dims b1 = batch, b2 = batch;
    b1.push_back(r - 2);
    b2.push_back(r - 1);
    Value sq = b.add(b.sub(b.broadcast_in_dim(n1, od, b1), b.mul(b.full(2, ct, od), dot)), b.broadcast_in_dim(n2, od, b2));
    return one(cast(b, b.unary("stablehlo.sqrt", b.max(sq, b.zeros(Type{ct, od}))), t));
  }
  return one(cast(b, p_distance(b, pairwise_diff(b, x1, x2), p), t));
}

// d dist / d x1 for distances `dist` [.., P, R]: sum_j g_ij * f(diff_ij, dist_ij).
Value cdist_grad(Builder& b, Value g, Value x1, Value x2, Value dist, double p) {
  Value diff = pairwise_diff(b, x1, x2);
  const Dims& dd = b.dims(diff);
  const int64_t r = b.rank(diff);
  Dims keep;
  for (int64_t i = 0; i < r - 1; ++i) keep.push_back(i);
  Value gb = b.broadcast_in_dim(g, dd, keep);
  Value db = b.broadcast_in_dim(dist, dd, keep);
  Value zero = b.zeros(b.type(diff));
  Value sign = b.unary("stablehlo.sign", diff);
  Value a = b.abs(diff);
  Value f;
  if (p == 0) {
    f = zero;
  } else if (p == 1) {
    f = sign;
  } else if (std::isinf(p)) {
    f = b.select(b.compare(hlo::Cmp::EQ, a, db), sign, zero);
  } else if (p == 2) {
    f = b.div(diff, db);
  } else {
    f = b.div(b.mul(sign, b.pow(a, b.full(p - 1, b.dtype(a), dd))), b.pow(db, b.full(p - 1, b.dtype(a), dd)));
  }
  f = b.select(b.compare(hlo::Cmp::EQ, db, zero), zero, f);
  return sum_over(b, b.mul(gb, f), {r - 2});
}

// _cdist_backward(grad, x1, x2, p, cdist) -> grad of x1
std::vector<Value> lower_cdist_backward(Context& c) {
  const at::ScalarType t = c.args.info(1).dtype;
  Builder& b = c.b;
  const DType ct = to_hlo(opmath_type(t));
  Value g = b.convert(c.args.tensor(0), ct);
  if (b.type(g).numel() == 0 || c.args.info(1).sizes.back() == 0) {
    return one(b.zeros(Type{to_hlo(t), c.args.info(1).sizes}));  // as the CPU: zeros like x1
  }
  auto [x1, x2] = cdist_operands(b, b.convert(c.args.tensor(1), ct), b.convert(c.args.tensor(2), ct));
  Value r = cdist_grad(b, g, x1, x2, b.convert(c.args.tensor(4), ct), c.args.double_(3));
  return one(cast(b, r, t));  // in the broadcast shape: autograd sums it back
}

// Row-major pairs (i, j), i < j, of n points.
void upper_pairs(int64_t n, std::vector<int64_t>* rows, std::vector<int64_t>* cols) {
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = i + 1; j < n; ++j) {
      rows->push_back(i);
      cols->push_back(j);
    }
  }
}

// _pdist_forward(self [N, M], p) -> [N (N - 1) / 2]
std::vector<Value> lower_pdist(Context& c) {
  const TensorInfo& in = c.args.info(0);
  TORCH_CHECK(in.dim() == 2, "pdist only supports 2D tensors, got: ", in.dim(), "D");
  const double p = c.args.double_(1);
  Builder& b = c.b;
  const at::ScalarType t = in.dtype;
  const DType ct = to_hlo(opmath_type(t));
  const int64_t n = in.sizes[0];
  std::vector<int64_t> rows, cols;
  upper_pairs(n, &rows, &cols);
  const int64_t k = static_cast<int64_t>(rows.size());
  if (k == 0) return one(b.zeros(Type{to_hlo(t), {0}}));
  Value x = b.convert(c.args.tensor(0), ct);
  Value full = p_distance(b, pairwise_diff(b, x, x), p);  // [N, N]
  Value coords = b.concatenate({b.constant_i64s(rows, {k, 1}), b.constant_i64s(cols, {k, 1})}, 1);
  Builder::GatherDims dn;
  dn.collapsed_slice_dims = {0, 1};
  dn.start_index_map = {0, 1};
  dn.index_vector_dim = 1;
  return one(cast(b, b.gather(full, coords, dn, {1, 1}, {k}), t));
}

// _pdist_backward(grad, self, p, pdist)
std::vector<Value> lower_pdist_backward(Context& c) {
  const TensorInfo& in = c.args.info(1);
  const double p = c.args.double_(2);
  Builder& b = c.b;
  const at::ScalarType t = in.dtype;
  const DType ct = to_hlo(opmath_type(t));
  const int64_t n = in.sizes[0];
  std::vector<int64_t> rows, cols;
  upper_pairs(n, &rows, &cols);
  const int64_t k = static_cast<int64_t>(rows.size());
  Value x = b.convert(c.args.tensor(1), ct);
  if (k == 0) return one(cast(b, b.zeros(b.type(x)), t));
  // Symmetric [N, N] matrices of the gradients and distances.
  Builder::ScatterDims dn;
  dn.inserted_window_dims = {0, 1};
  dn.scatter_dims_to_operand_dims = {0, 1};
  dn.index_vector_dim = 1;
  auto symmetric = [&](Value v) {
    Value upper = b.concatenate({b.constant_i64s(rows, {k, 1}), b.constant_i64s(cols, {k, 1})}, 1);
    Value lower = b.concatenate({b.constant_i64s(cols, {k, 1}), b.constant_i64s(rows, {k, 1})}, 1);
    Value m = b.scatter(b.zeros(Type{ct, {n, n}}), upper, v, dn, nullptr);
    return b.scatter(m, lower, v, dn, nullptr);
  };
  Value g = symmetric(b.convert(c.args.tensor(0), ct));
  Value d = symmetric(b.convert(c.args.tensor(3), ct));
  return one(cast(b, cdist_grad(b, g, x, x, d, p), t));
}

Value triangular_solve_value(Builder& b, Value a, Value rhs, bool left, bool lower, bool unit, bool transpose) {
  std::string attrs = std::string("left_side = ") + (left ? "true" : "false") +
                      ", lower = " + (lower ? "true" : "false") +
                      ", transpose_a = #stablehlo<transpose " + (transpose ? "TRANSPOSE" : "NO_TRANSPOSE") +
                      ">, unit_diagonal = " + (unit ? "true" : "false");
  return b.emit1("stablehlo.triangular_solve", {a, rhs}, b.type(rhs), attrs);
}

// Broadcast the batch dims of A [.., n, n] and B [.., n, k] together.
std::pair<Value, Value> batch_pair(Builder& b, Value a, Value rhs) {
  const Dims& da = b.dims(a);
  const Dims& db = b.dims(rhs);
  Dims ba(da.begin(), da.end() - 2), bb(db.begin(), db.end() - 2);
  Dims batch = broadcast_shapes(ba, bb);
  Dims fa = batch, fb = batch;
  fa.insert(fa.end(), da.end() - 2, da.end());
  fb.insert(fb.end(), db.end() - 2, db.end());
  return {b.broadcast_to(a, fa), b.broadcast_to(rhs, fb)};
}

}  // namespace

TPU_LOWERINGS(linalg) {
  reg("aten::linalg_cross", lower_cross);
  reg("aten::_cdist_forward", lower_cdist);
  reg("aten::_cdist_backward", lower_cdist_backward);
  reg("aten::_pdist_forward", lower_pdist);
  reg("aten::_pdist_backward", lower_pdist_backward);
  // triangular_solve(self=B, A, upper, transpose, unitriangular) -> (X, A)
  reg("aten::triangular_solve", [](Context& c) {
    auto [a, rhs] = batch_pair(c.b, c.args.tensor(1), c.args.tensor(0));
    Value x = triangular_solve_value(c.b, a, rhs, true, !c.args.bool_(2), c.args.bool_(4), c.args.bool_(3));
    return std::vector<Value>{x, a};
  });
  // linalg_solve_triangular(A, B, *, upper, left, unitriangular)
  reg("aten::linalg_solve_triangular", [](Context& c) {
    auto [a, rhs] = batch_pair(c.b, c.args.tensor(0), c.args.tensor(1));
    const bool left = !c.args.has(3) || c.args.bool_(3);
    return one(triangular_solve_value(c.b, a, rhs, left, !c.args.bool_(2), c.args.has(4) && c.args.bool_(4), false));
  });
  reg("aten::dot", lower_dot);
  reg("aten::vdot", lower_dot);
  reg("aten::mv", lower_mv);
  reg("aten::addmv", [](Context& c) {
    // addmv(self, mat, vec, beta, alpha)
    const TensorInfo& m = c.args.info(1);
    Value prod = contract(c, c.args.tensor(1), c.args.tensor(2), {}, 1, 0, m.dtype);
    return one(scaled_sum(c, prod, m.dtype, 0, 3, 4));
  });
  reg("aten::baddbmm", [](Context& c) {
    // baddbmm(self, batch1, batch2, beta, alpha)
    const TensorInfo& a = c.args.info(1);
    Value prod = contract(c, c.args.tensor(1), c.args.tensor(2), {0}, 2, 1, a.dtype);
    return one(scaled_sum(c, prod, a.dtype, 0, 3, 4));
  });
  reg("aten::addbmm", [](Context& c) {
    // addbmm(self, batch1, batch2, beta, alpha): the batch products summed
    const TensorInfo& a = c.args.info(1);
    Builder& b = c.b;
    const at::ScalarType acc = a.dtype == at::kHalf || a.dtype == at::kBFloat16 ? at::kFloat : a.dtype;
    Value prod = b.dot_general(c.args.tensor(1), c.args.tensor(2), {}, {}, {0, 2}, {0, 1},
                               to_hlo(acc), c.precision() == MatmulPrecision::Highest);
    return one(scaled_sum(c, cast(b, prod, a.dtype), a.dtype, 0, 3, 4));
  });
  reg("aten::addr", [](Context& c) {
    // addr(self, vec1, vec2, beta, alpha): outer product
    ResultType r;
    for (size_t i = 0; i < 3; ++i) r.tensor(c.args.info(i));
    const at::ScalarType t = r.get();
    Builder& b = c.b;
    Value v1 = cast(b, c.args.tensor(1), t), v2 = cast(b, c.args.tensor(2), t);
    const Dims dims{b.dims(v1)[0], b.dims(v2)[0]};
    Value prod = t == at::kBool ? b.and_(b.broadcast_in_dim(v1, dims, {0}), b.broadcast_in_dim(v2, dims, {1}))
                                : b.mul(b.broadcast_in_dim(v1, dims, {0}), b.broadcast_in_dim(v2, dims, {1}));
    if (t == at::kBool) {
      Value self = b.broadcast_to(cast(b, c.args.tensor(0), t), dims);
      return one(c.args.scalar(3).equal(0) ? prod : b.or_(self, prod));
    }
    return one(scaled_sum(c, prod, t, 0, 3, 4));
  });
  reg("aten::mm", lower_mm);
  reg("aten::_int_mm", lower_int_mm);
  reg("aten::_scaled_mm", lower_scaled_mm);
  reg("aten::bmm", lower_bmm);
  reg("aten::addmm", lower_addmm);
}

}  // namespace tpu::lowering
