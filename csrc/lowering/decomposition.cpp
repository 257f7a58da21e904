// Matrix decompositions and the linear algebra built on them, as StableHLO
// loops rather than plugin-specific custom calls (LAPACK on the CPU plugin,
// cuSOLVER on GPU), so the same program runs on every PJRT device:
//
//   LU with partial pivoting (LAPACK getrf's pivots and info): lu_factor,
//     lu, lu_unpack, lu_solve, solve, inv, det, slogdet;
//   Householder QR (geqrf's reflectors and tau): geqrf, qr,
//     householder_product (orgqr), ormqr;
//   the symmetric eigendecomposition by cyclic Jacobi rotations: eigh;
//   the general eigendecomposition by LAPACK geev's steps (balancing,
//     Hessenberg form, double-shift QR for real and single-shift QR for
//     complex matrices, back substitution): eig, eigvals;
//   the SVD by one-sided (Hestenes) Jacobi: svd;
//   Cholesky (potrf's info: the order of the first leading minor that is not
//     positive-definite), cholesky_solve and cholesky_inverse.
//
// Every routine works on batches [..., m, n] at once; a loop step costs a
// few passes over the matrix. Eigenvectors and singular vectors are unique
// up to sign only; LAPACK's signs are arbitrary too.
#include <cmath>
#include <functional>
#include <tuple>

#include "csrc/lowering/common.h"

namespace tpu::lowering {

namespace {

using hlo::Cmp;

Dims seq(int64_t from, int64_t to) {
  Dims d;
  for (int64_t i = from; i < to; ++i) d.push_back(i);
  return d;
}

Dims cat(Dims a, std::initializer_list<int64_t> tail) {
  a.insert(a.end(), tail.begin(), tail.end());
  return a;
}

Dims batch_of(const Dims& d) { return Dims(d.begin(), d.end() - 2); }

Value zeros_like(Builder& b, Value x) { return b.zeros(b.type(x)); }
Value scalar0(Builder& b, DType dt) { return b.zeros(Type{dt, {}}); }

// v [B..., k] spread over the rows (row i gets v[i]) / columns of `dims`.
Value along_rows(Builder& b, Value v, const Dims& dims) {
  const int64_t r = static_cast<int64_t>(dims.size());
  return b.broadcast_in_dim(v, dims, cat(seq(0, r - 2), {r - 2}));
}
Value along_cols(Builder& b, Value v, const Dims& dims) {
  const int64_t r = static_cast<int64_t>(dims.size());
  return b.broadcast_in_dim(v, dims, cat(seq(0, r - 2), {r - 1}));
}
// A per-batch value [B...] (or a rank-0 one) over `dims`.
Value per_batch(Builder& b, Value s, const Dims& dims) {
  return b.rank(s) == 0 ? b.broadcast_in_dim(s, dims, {}) : b.broadcast_in_dim(s, dims, seq(0, b.rank(s)));
}

Value sum_dim(Builder& b, Value x, int64_t dim) {
  return b.reduce(x, scalar0(b, b.dtype(x)), {dim}, "stablehlo.add");
}

// x[..., i, :] and x[..., :, j] for a rank-0 or per-batch index.
Value take_row(Builder& b, Value x, Value i) {
  const Dims& d = b.dims(x);
  const int64_t r = b.rank(x);
  Value hit = b.compare(Cmp::EQ, b.iota(Type{DType::I64, d}, r - 2), per_batch(b, i, d));
  return sum_dim(b, b.select(hit, x, zeros_like(b, x)), r - 2);
}
Value take_col(Builder& b, Value x, Value j) {
  const Dims& d = b.dims(x);
  const int64_t r = b.rank(x);
  Value hit = b.compare(Cmp::EQ, b.iota(Type{DType::I64, d}, r - 1), per_batch(b, j, d));
  return sum_dim(b, b.select(hit, x, zeros_like(b, x)), r - 1);
}
// v[..., i] of a vector batch [B..., k].
Value take_elem(Builder& b, Value v, Value i) {
  const Dims& d = b.dims(v);
  const int64_t r = b.rank(v);
  Value hit = b.compare(Cmp::EQ, b.iota(Type{DType::I64, d}, r - 1), per_batch(b, i, d));
  return sum_dim(b, b.select(hit, v, zeros_like(b, v)), r - 1);
}

Value mT(Builder& b, Value x) {
  const int64_t r = b.rank(x);
  Dims p = seq(0, r);
  std::swap(p[r - 1], p[r - 2]);
  return b.transpose(x, p);
}

Value matmul(Builder& b, Value x, Value y) {
  const int64_t r = b.rank(x);
  return b.dot_general(x, y, seq(0, r - 2), seq(0, r - 2), {r - 1}, {r - 2}, b.dtype(x), true);
}

Value eye(Builder& b, DType dt, const Dims& batch, int64_t m, int64_t n) {
  const Dims d = cat(batch, {m, n});
  const int64_t r = static_cast<int64_t>(d.size());
  Value on = b.compare(Cmp::EQ, b.iota(Type{DType::I64, d}, r - 2), b.iota(Type{DType::I64, d}, r - 1));
  return b.convert(on, dt);
}

// Keep the lower (upper) triangle from diagonal `k` on; zero the rest.
Value band(Builder& b, Value x, bool lower, int64_t k) {
  const Dims& d = b.dims(x);
  const int64_t r = b.rank(x);
  Value diff = b.sub(b.iota(Type{DType::I64, d}, r - 1), b.iota(Type{DType::I64, d}, r - 2));
  Value keep = lower ? b.compare(Cmp::LE, diff, b.full_int(k, DType::I64, d))
                     : b.compare(Cmp::GE, diff, b.full_int(k, DType::I64, d));
  return b.select(keep, x, zeros_like(b, x));
}

Value diagonal(Builder& b, Value x) {
  const Dims& d = b.dims(x);
  const int64_t r = b.rank(x);
  const int64_t k = std::min(d[r - 2], d[r - 1]);
  Value sq = b.slice(x, Dims(r, 0), cat(batch_of(d), {k, k}));
  Value on = b.compare(Cmp::EQ, b.iota(Type{DType::I64, b.dims(sq)}, r - 2), b.iota(Type{DType::I64, b.dims(sq)}, r - 1));
  return sum_dim(b, b.select(on, sq, zeros_like(b, sq)), r - 1);
}

// Rows idx[..., i] of x [B..., m, k] -> [B..., len(idx), k].
Value take_rows(Builder& b, Value x, Value idx) {
  const Dims& d = b.dims(x);
  const int64_t r = b.rank(x);
  const int64_t nb = r - 2;
  Builder::GatherDims dn;
  dn.offset_dims = {r - 1};
  dn.collapsed_slice_dims = {nb};
  dn.operand_batching_dims = seq(0, nb);
  dn.start_indices_batching_dims = seq(0, nb);
  dn.start_index_map = {nb};
  dn.index_vector_dim = nb + 1;
  Dims slice(r, 1);
  slice[r - 1] = d[r - 1];
  Dims out = b.dims(idx);
  out.push_back(d[r - 1]);
  if (b.type(x).numel() == 0 || b.type(idx).numel() == 0) return b.zeros(Type{b.dtype(x), out});
  return b.gather(x, b.convert(idx, DType::I64), dn, slice, out);
}

// The inverse of a batch of permutations [B..., m].
Value invert_permutation(Builder& b, Value perm) {
  const int64_t last = b.rank(perm) - 1;
  auto r = b.sort({perm, b.iota(Type{DType::I64, b.dims(perm)}, last)}, last, true,
                  [](Builder& rb, const std::vector<Value>& a) {
                    return std::vector<Value>{rb.compare(Cmp::LT, a[0], a[1])};
                  });
  return r[1];
}

// The matrices of argument i: float32 / float64 as LAPACK has them.
Value matrix_arg(Context& c, size_t i, const char* api, bool square, bool complex_ok = false) {
  const TensorInfo& in = c.args.info(i);
  TORCH_CHECK(in.dim() >= 2, api, ": The input tensor A must have at least 2 dimensions.");
  if (square) {
    TORCH_CHECK(in.sizes[in.dim() - 1] == in.sizes[in.dim() - 2], api,
                ": A must be batches of square matrices, but they are ", in.sizes[in.dim() - 2], " by ",
                in.sizes[in.dim() - 1], " matrices");
  }
  TORCH_CHECK(c10::isFloatingType(in.dtype) || c10::isComplexType(in.dtype), api,
              ": Expected a floating point or complex tensor as input. Got ", c10::toString(in.dtype));
  if (c10::isComplexType(in.dtype) && !complex_ok) unsupported(c, "complex matrices");
  TORCH_CHECK_NOT_IMPLEMENTED(in.dtype == at::kFloat || in.dtype == at::kDouble || (complex_ok &&
                              (in.dtype == at::kComplexFloat || in.dtype == at::kComplexDouble)), api, ": not implemented for '",
                              c10::toString(in.dtype), "'");
  return c.args.tensor(i);
}

// Broadcast the batch dims of x [.., a, b] and y [.., c, d] together.
std::pair<Value, Value> common_batch(Builder& b, Value x, Value y) {
  const Dims& dx = b.dims(x);
  const Dims& dy = b.dims(y);
  Dims batch = broadcast_shapes(batch_of(dx), batch_of(dy));
  Dims fx = batch, fy = batch;
  fx.insert(fx.end(), dx.end() - 2, dx.end());
  fy.insert(fy.end(), dy.end() - 2, dy.end());
  return {b.broadcast_to(x, fx), b.broadcast_to(y, fy)};
}

// ---- LU ---------------------------------------------------------------------------------

struct Lu {
  Value lu;      // [B..., m, n]: L below the diagonal (unit diagonal implied), U on and above
  Value pivots;  // i32 [B..., k], 1-based: row j was swapped with row pivots[j] - 1
  Value perm;    // i64 [B..., m]: row i of L U is row perm[i] of A
  Value info;    // i32 [B...]: 1 + the first zero pivot's index, 0 if none
};

// Right-looking LU with partial pivoting, one column per loop step; the
// first row of largest magnitude is the pivot, as LAPACK's idamax picks it.
Lu lu_factor(Builder& b, Value a) {
  const Dims d = b.dims(a);
  const int64_t r = static_cast<int64_t>(d.size());
  const int64_t nb = r - 2, m = d[r - 2], n = d[r - 1], k = std::min(m, n);
  const Dims batch = batch_of(d), md = cat(batch, {m}), kd = cat(batch, {k}), nd = cat(batch, {n});
  Value piv0 = b.zeros(Type{DType::I32, kd});
  Value perm0 = b.iota(Type{DType::I64, md}, nb);
  Value info0 = b.zeros(Type{DType::I32, batch});
  if (k == 0) return {a, piv0, perm0, info0};
  auto out = b.while_loop(
      {b.constant_int(0, DType::I64), a, piv0, perm0, info0},
      [k](Builder& rb, const std::vector<Value>& v) {
        return std::vector<Value>{rb.compare(Cmp::LT, v[0], rb.constant_int(k, DType::I64))};
      },
      [=](Builder& rb, const std::vector<Value>& v) {
        Value j = v[0], A = v[1], piv = v[2], perm = v[3], info = v[4];
        const DType dt = rb.dtype(A);
        const Type it{DType::I64, d};
        Value rows = rb.iota(it, r - 2), cols = rb.iota(it, r - 1), jd = rb.broadcast_in_dim(j, d, {});
        Value rid = rb.iota(Type{DType::I64, md}, nb), jm = rb.broadcast_in_dim(j, md, {});
        // The pivot: the first row i >= j of largest |A[i, j]| (of |re| + |im|
        // for complex A, as izamax measures).
        const DType rdt = hlo::real_type(dt);
        Value cj = take_col(rb, A, j);
        Value size = hlo::is_complex(dt) ? rb.add(rb.abs(rb.real(cj)), rb.abs(rb.imag(cj))) : rb.abs(cj);
        Value mag = rb.select(rb.compare(Cmp::GE, rid, jm), size, rb.full(-1, rdt, md));
        Value best = rb.reduce(mag, rb.constant(-1, rdt), {nb}, "stablehlo.maximum");
        Value at_best = rb.compare(Cmp::EQ, mag, per_batch(rb, best, md));
        Value p = rb.reduce(rb.select(at_best, rid, rb.full_int(m, DType::I64, md)), rb.constant_int(m, DType::I64),
                            {nb}, "stablehlo.minimum");
        p = rb.select(rb.compare(Cmp::GE, p, rb.full_int(m, DType::I64, batch)), rb.broadcast_in_dim(j, batch, {}), p);
        Value kid = rb.iota(Type{DType::I64, kd}, nb);
        Value p1 = rb.convert(rb.add(p, rb.full_int(1, DType::I64, batch)), DType::I32);
        piv = rb.select(rb.compare(Cmp::EQ, kid, rb.broadcast_in_dim(j, kd, {})), per_batch(rb, p1, kd), piv);
        // Swap rows j and p (of A and of the permutation).
        Value rj = take_row(rb, A, j), rp = take_row(rb, A, p);
        Value is_j = rb.compare(Cmp::EQ, rows, jd), is_p = rb.compare(Cmp::EQ, rows, per_batch(rb, p, d));
        A = rb.select(is_j, along_cols(rb, rp, d), rb.select(is_p, along_cols(rb, rj, d), A));
        Value qj = take_elem(rb, perm, j), qp = take_elem(rb, perm, p);
        perm = rb.select(rb.compare(Cmp::EQ, rid, jm), per_batch(rb, qp, md),
                         rb.select(rb.compare(Cmp::EQ, rid, per_batch(rb, p, md)), per_batch(rb, qj, md), perm));
        // Eliminate below the pivot (a zero pivot leaves its column as is).
        Value pivot = take_elem(rb, rp, j);
        Value zero = rb.compare(Cmp::EQ, pivot, rb.zeros(Type{dt, batch}));
        Value first_zero = rb.and_(zero, rb.compare(Cmp::EQ, info, rb.zeros(Type{DType::I32, batch})));
        info = rb.select(first_zero, rb.broadcast_in_dim(rb.convert(rb.add(j, rb.constant_int(1, DType::I64)), DType::I32),
                                                         batch, {}),
                         info);
        Value recip = rb.div(rb.full(1, dt, batch), pivot);
        Value below = rb.and_(rb.compare(Cmp::GT, rid, jm), rb.not_(per_batch(rb, zero, md)));
        Value l = rb.select(below, rb.mul(take_col(rb, A, j), per_batch(rb, recip, md)), rb.zeros(Type{dt, md}));
        Value lower = rb.compare(Cmp::GT, rows, jd);
        Value trailing = rb.and_(lower, rb.compare(Cmp::GT, cols, jd));
        A = rb.select(trailing, rb.sub(A, rb.mul(along_rows(rb, l, d), along_cols(rb, rp, d))), A);
        Value in_col = rb.and_(rb.and_(lower, rb.compare(Cmp::EQ, cols, jd)), rb.not_(per_batch(rb, zero, d)));
        A = rb.select(in_col, along_rows(rb, l, d), A);
        return std::vector<Value>{rb.add(j, rb.constant_int(1, DType::I64)), A, piv, perm, info};
      });
  (void)nd;
  return {out[1], out[2], out[3], out[4]};
}

// The row permutation of LAPACK-style pivots [B..., k] for m rows.
Value permutation_of(Builder& b, Value pivots, int64_t m) {
  const Dims& pd = b.dims(pivots);
  const int64_t nb = static_cast<int64_t>(pd.size()) - 1;
  const int64_t k = pd.back();
  const Dims batch(pd.begin(), pd.end() - 1), md = cat(batch, {m});
  Value perm0 = b.iota(Type{DType::I64, md}, nb);
  if (k == 0 || m == 0) return perm0;
  Value piv = b.sub(b.convert(pivots, DType::I64), b.full_int(1, DType::I64, pd));
  auto out = b.while_loop(
      {b.constant_int(0, DType::I64), perm0, piv},
      [k](Builder& rb, const std::vector<Value>& v) {
        return std::vector<Value>{rb.compare(Cmp::LT, v[0], rb.constant_int(k, DType::I64))};
      },
      [=](Builder& rb, const std::vector<Value>& v) {
        Value j = v[0], perm = v[1];
        Value p = rb.clamp(rb.zeros(Type{DType::I64, batch}), take_elem(rb, v[2], j), rb.full_int(m - 1, DType::I64, batch));
        Value rid = rb.iota(Type{DType::I64, md}, nb);
        Value qj = take_elem(rb, perm, j), qp = take_elem(rb, perm, p);
        perm = rb.select(rb.compare(Cmp::EQ, rid, rb.broadcast_in_dim(j, md, {})), per_batch(rb, qp, md),
                         rb.select(rb.compare(Cmp::EQ, rid, per_batch(rb, p, md)), per_batch(rb, qj, md), perm));
        return std::vector<Value>{rb.add(j, rb.constant_int(1, DType::I64)), perm, v[2]};
      });
  return out[1];
}

Value trsm(Builder& b, Value a, Value rhs, bool lower, bool unit, bool transpose) {
  std::string attrs = std::string("left_side = true, lower = ") + (lower ? "true" : "false") +
                      ", transpose_a = #stablehlo<transpose " + (transpose ? "TRANSPOSE" : "NO_TRANSPOSE") +
                      ">, unit_diagonal = " + (unit ? "true" : "false");
  return b.emit1("stablehlo.triangular_solve", {a, rhs}, b.type(rhs), attrs);
}

// Solve M X = B (or M^T X = B) with M's LU factors; LU, perm and B share
// their batch dims. M = P^T L U with (P A)[i] = A[perm[i]].
Value lu_solve_left(Builder& b, Value lu, Value perm, Value rhs, bool transpose) {
  if (!transpose) {
    Value y = take_rows(b, rhs, perm);
    y = trsm(b, lu, y, true, true, false);
    return trsm(b, lu, y, false, false, false);
  }
  Value z = trsm(b, lu, rhs, false, false, true);  // U^T z = B
  z = trsm(b, lu, z, true, true, true);            // L^T w = z
  return take_rows(b, z, invert_permutation(b, perm));
}

// linalg_lu_solve's four cases on M's factors: left/right, adjoint or not.
Value lu_solve(Builder& b, Value lu, Value perm, Value rhs, bool left, bool adjoint) {
  if (!left) {
    // X M = B  <=>  M^T X^T = B^T
    rhs = mT(b, rhs);
    adjoint = !adjoint;
  }
  // Broadcast the factors' batch dims against B's.
  auto [f, x] = common_batch(b, lu, rhs);
  Dims pd = b.dims(f);
  pd.pop_back();
  Value out = lu_solve_left(b, f, b.broadcast_to(perm, pd), x, adjoint);
  return left ? out : mT(b, out);
}

// det(P) for the pivots: -1 for an odd number of swaps.
Value pivot_sign(Builder& b, Value pivots, DType dt) {
  const Dims& pd = b.dims(pivots);
  const int64_t last = static_cast<int64_t>(pd.size()) - 1;
  Value ident = b.add(b.iota(Type{DType::I32, pd}, last), b.full_int(1, DType::I32, pd));
  Value swaps = b.reduce(b.convert(b.compare(Cmp::NE, pivots, ident), DType::I32), b.constant_int(0, DType::I32),
                         {last}, "stablehlo.add");
  Dims batch(pd.begin(), pd.end() - 1);
  Value odd = b.compare(Cmp::EQ, b.rem(swaps, b.full_int(2, DType::I32, batch)), b.full_int(1, DType::I32, batch));
  return b.select(odd, b.full(-1, dt, batch), b.full(1, dt, batch));
}

// The factorization det and slogdet use: of A^T when A is contiguous (the
// CPU's choice, which their backward formulas mirror).
Lu lu_for(Context& c, size_t arg, Value a) {
  return lu_factor(c.b, c.args.info(arg).contiguous ? mT(c.b, a) : a);
}

void check_info(Context& c, Value info, const std::string& message) {
  Builder& b = c.b;
  Value bad = b.rank(info) == 0 ? info : b.reduce(info, b.constant_int(0, DType::I32), seq(0, b.rank(info)),
                                                  "stablehlo.maximum");
  const int64_t first = c.args.host_int(bad);
  TORCH_CHECK_LINALG(first == 0, message, " (at pivot ", first, ")");
}

// linalg_lu_factor_ex(A, *, pivot, check_errors) -> (LU, pivots, info)
std::vector<Value> lower_lu_factor_ex(Context& c) {
  Value a = matrix_arg(c, 0, "torch.linalg.lu_factor", false);
  TORCH_CHECK(c.args.bool_(1), "linalg.lu_factor: LU without pivoting is not implemented on the tpu device");
  Lu f = lu_factor(c.b, a);
  if (c.args.bool_(2)) {
    check_info(c, f.info, "torch.linalg.lu_factor_ex: U is singular: a diagonal element is zero");
  }
  return {f.lu, f.pivots, f.info};
}

// P, L, U of A = P L U from packed factors.
std::vector<Value> unpack_lu(Builder& b, Value lu, Value perm, bool data, bool pivots) {
  const Dims& d = b.dims(lu);
  const int64_t r = b.rank(lu);
  const int64_t m = d[r - 2], n = d[r - 1], k = std::min(m, n);
  const Dims batch = batch_of(d);
  const DType dt = b.dtype(lu);
  Value P = b.zeros(Type{dt, {0}}), L = P, U = P;
  if (pivots) {
    // P[perm[c], c] = 1
    const Dims pd = cat(batch, {m, m});
    Value hit = b.compare(Cmp::EQ, b.iota(Type{DType::I64, pd}, r - 2), along_cols(b, perm, pd));
    P = b.convert(hit, dt);
  }
  if (data) {
    Value lpart = b.slice(lu, Dims(r, 0), cat(batch, {m, k}));
    L = b.add(band(b, lpart, true, -1), eye(b, dt, batch, m, k));
    U = band(b, b.slice(lu, Dims(r, 0), cat(batch, {k, n})), false, 0);
  }
  return {P, L, U};
}

// linalg_lu(A, *, pivot) -> (P, L, U)
std::vector<Value> lower_linalg_lu(Context& c) {
  Value a = matrix_arg(c, 0, "torch.linalg.lu", false);
  TORCH_CHECK(c.args.bool_(1), "linalg.lu: LU without pivoting is not implemented on the tpu device");
  Lu f = lu_factor(c.b, a);
  return unpack_lu(c.b, f.lu, f.perm, true, true);
}

// lu_unpack(LU_data, LU_pivots, unpack_data, unpack_pivots) -> (P, L, U)
std::vector<Value> lower_lu_unpack(Context& c) {
  Builder& b = c.b;
  const TensorInfo& lu = c.args.info(0);
  TORCH_CHECK(lu.dim() >= 2, "torch.lu_unpack: Expected tensor with 2 or more dimensions. Got size: ",
              dims_string(lu.sizes), " instead");
  TORCH_CHECK(c.args.info(1).dtype == at::kInt, "torch.lu_unpack: LU_pivots is expected to be a contiguous tensor "
              "of torch.int32 dtype.");
  const int64_t m = lu.sizes[lu.dim() - 2];
  const bool data = c.args.bool_(2), pivots = c.args.bool_(3);
  Value perm = pivots ? permutation_of(b, c.args.tensor(1), m) : Value();
  return unpack_lu(b, c.args.tensor(0), perm, data, pivots);
}

// linalg_lu_solve(LU, pivots, B, *, left, adjoint)
std::vector<Value> lower_lu_solve(Context& c) {
  Builder& b = c.b;
  Value lu = matrix_arg(c, 0, "torch.linalg.lu_solve", true);
  const int64_t m = c.args.info(0).sizes[c.args.info(0).dim() - 2];
  Value perm = permutation_of(b, c.args.tensor(1), m);
  Value rhs = cast(b, c.args.tensor(2), c.args.info(0).dtype);
  return one(lu_solve(b, lu, perm, rhs, c.args.bool_(3), c.args.bool_(4)));
}

// Whether B is a (batch of) vector(s) for A (linalg.solve's NumPy rule).
bool vector_rhs(const TensorInfo& a, const TensorInfo& rhs) {
  if (rhs.dim() == 1) return true;
  return rhs.dim() == a.dim() - 1 && Dims(a.sizes.begin(), a.sizes.end() - 1) == rhs.sizes;
}

// _linalg_solve_ex(A, B, *, left, check_errors) -> (result, LU, pivots, info)
std::vector<Value> lower_solve_ex(Context& c) {
  Builder& b = c.b;
  Value a = matrix_arg(c, 0, "torch.linalg.solve", true, true);
  const TensorInfo& ai = c.args.info(0);
  const TensorInfo& bi = c.args.info(1);
  const bool left = c.args.bool_(2);
  TORCH_CHECK(ai.dtype == bi.dtype, "linalg.solve: Expected A and B to have the same dtype, but found A of type ",
              c10::toString(ai.dtype), " and B of type ", c10::toString(bi.dtype), " instead");
  const bool vec = vector_rhs(ai, bi);
  TORCH_CHECK(left || !vec, "linalg.solve: Vector broadcasting of the left hand side is not supported for left=False. "
              "In this case linalg.solve is equivalent to B / A.squeeze(-1)");
  Value rhs = c.args.tensor(1);
  if (vec) rhs = b.reshape(rhs, cat(bi.sizes, {1}));
  const int64_t n = ai.sizes[ai.dim() - 1];
  TORCH_CHECK(b.dims(rhs)[b.rank(rhs) - (left ? 2 : 1)] == n, "linalg.solve: Incompatible shapes of A and B for the "
              "equation ", left ? "AX = B" : "XA = B", " (", dims_string(ai.sizes), " and ", dims_string(bi.sizes), ")");
  // PyTorch 2.13's CPU kernel factors A itself (det and slogdet factor A^T);
  // the backward formula solves with these factors.
  Lu f = lu_factor(b, a);
  if (c.args.bool_(3)) check_info(c, f.info, "torch.linalg.solve_ex: The solver failed because the input matrix is singular.");
  Value x = lu_solve(b, f.lu, f.perm, rhs, left, false);
  if (vec) {
    Dims d = b.dims(x);
    d.pop_back();
    x = b.reshape(x, d);
  }
  return {x, f.lu, f.pivots, f.info};
}

// linalg_inv_ex(A, *, check_errors) -> (inverse, info)
std::vector<Value> lower_inv_ex(Context& c) {
  Builder& b = c.b;
  Value a = matrix_arg(c, 0, "torch.linalg.inv", true, true);
  const Dims& d = c.args.info(0).sizes;
  const int64_t n = d.back();
  Lu f = lu_factor(b, a);
  if (c.args.bool_(1)) check_info(c, f.info, "torch.linalg.inv_ex: The diagonal element is zero, the inversion could "
                                              "not be completed because the input matrix is singular.");
  Value id = eye(b, b.dtype(a), batch_of(d), n, n);
  return {n == 0 ? a : lu_solve_left(b, f.lu, f.perm, id, false), f.info};
}

// det and slogdet from the LU factors of A^T (A when not contiguous): the
// diagonal of U and the permutation's sign.
struct DetParts {
  Lu f;
  Value diag, perm_sign;
  DType dt;
  int64_t last;  // the diagonal's dim
};

DetParts det_parts(Context& c, const char* api) {
  Builder& b = c.b;
  Value a = matrix_arg(c, 0, api, true);
  Lu f = lu_for(c, 0, a);
  const DType dt = b.dtype(a);
  return {f, diagonal(b, f.lu), pivot_sign(b, f.pivots, dt), dt, b.rank(a) - 2};
}

// _linalg_det(A) -> (det, LU, pivots)
std::vector<Value> lower_det(Context& c) {
  Builder& b = c.b;
  DetParts p = det_parts(c, "linalg.det");
  Value prod = b.reduce(p.diag, b.constant(1, p.dt), {p.last}, "stablehlo.multiply");
  return {b.mul(p.perm_sign, prod), p.f.lu, p.f.pivots};
}

// _linalg_slogdet(A) -> (sign, logabsdet, LU, pivots)
std::vector<Value> lower_slogdet(Context& c) {
  Builder& b = c.b;
  DetParts p = det_parts(c, "linalg.slogdet");
  Value sgn = b.reduce(b.unary("stablehlo.sign", p.diag), b.constant(1, p.dt), {p.last}, "stablehlo.multiply");
  Value logabs = sum_dim(b, b.unary("stablehlo.log", b.abs(p.diag)), p.last);
  return {b.mul(p.perm_sign, sgn), logabs, p.f.lu, p.f.pivots};
}

// ---- Cholesky -------------------------------------------------------------------------

Value conj_of(Builder& b, Value x) {
  return hlo::is_complex(b.dtype(x)) ? b.complex(b.real(x), b.neg(b.imag(x))) : x;
}

struct Cholesky {
  Value l;     // [B..., n, n], lower triangular (zero above the diagonal)
  Value info;  // i32 [B...]: the order of the first leading minor that is not positive-definite, 0 if none
};

// Right-looking Cholesky, one column per loop step, reading the lower
// triangle of `a`. The first non-positive (or NaN) pivot sets info and
// freezes the matrix, as LAPACK's potrf stops there. (stablehlo.cholesky
// fills a failed factor with NaN everywhere, which loses the order.)
Cholesky cholesky_factor(Builder& b, Value a) {
  const Dims d = b.dims(a);
  const int64_t r = static_cast<int64_t>(d.size());
  const int64_t nb = r - 2, n = d[r - 1];
  const Dims batch = batch_of(d), nd = cat(batch, {n});
  Value info0 = b.zeros(Type{DType::I32, batch});
  if (n == 0) return {a, info0};
  auto out = b.while_loop(
      {b.constant_int(0, DType::I64), a, info0},
      [n](Builder& rb, const std::vector<Value>& v) {
        return std::vector<Value>{rb.compare(Cmp::LT, v[0], rb.constant_int(n, DType::I64))};
      },
      [=](Builder& rb, const std::vector<Value>& v) {
        Value j = v[0], A = v[1], info = v[2];
        const DType dt = rb.dtype(A);
        const bool cplx = hlo::is_complex(dt);
        const Type it{DType::I64, d};
        Value rows = rb.iota(it, r - 2), cols = rb.iota(it, r - 1), jd = rb.broadcast_in_dim(j, d, {});
        Value col = take_col(rb, A, j);  // [B..., n]
        Value pivot = take_elem(rb, col, j);
        Value pr = cplx ? rb.real(pivot) : pivot;
        const DType rt = rb.dtype(pr);
        // !(pivot > 0) also catches NaN.
        Value bad = rb.not_(rb.compare(Cmp::GT, pr, rb.zeros(Type{rt, batch})));
        Value ok = rb.compare(Cmp::EQ, info, rb.zeros(Type{DType::I32, batch}));
        Value j1 = rb.broadcast_in_dim(rb.convert(rb.add(j, rb.constant_int(1, DType::I64)), DType::I32), batch, {});
        info = rb.select(rb.and_(ok, bad), j1, info);
        Value go = rb.and_(ok, rb.not_(bad));  // this matrix takes the step
        Value s = rb.unary("stablehlo.sqrt", rb.select(go, pr, rb.full(1, rt, batch)));
        Value sc = cplx ? rb.complex(s, rb.zeros(Type{rt, batch})) : s;
        Value rid = rb.iota(Type{DType::I64, nd}, nb), jn = rb.broadcast_in_dim(j, nd, {});
        Value lcol = rb.select(rb.compare(Cmp::GE, rid, jn), rb.div(col, per_batch(rb, sc, nd)), rb.zeros(Type{dt, nd}));
        Value lower = rb.compare(Cmp::GT, rows, jd);
        Value trailing = rb.and_(lower, rb.compare(Cmp::GT, cols, jd));
        Value update = rb.sub(A, rb.mul(along_rows(rb, lcol, d), along_cols(rb, conj_of(rb, lcol), d)));
        Value stepped = rb.select(trailing, update, A);
        stepped = rb.select(rb.compare(Cmp::EQ, cols, jd), along_rows(rb, lcol, d), stepped);
        A = rb.select(per_batch(rb, go, d), stepped, A);
        return std::vector<Value>{rb.add(j, rb.constant_int(1, DType::I64)), A, info};
      });
  return {band(b, out[1], true, 0), out[2]};
}

Value cholesky_upper(Builder& b, Value l) { return conj_of(b, mT(b, l)); }

// linalg_cholesky_ex(self, upper, check_errors) -> (L, info)
std::vector<Value> lower_cholesky_ex(Context& c) {
  const TensorInfo& in = c.args.info(0);
  TORCH_CHECK(in.dim() >= 2 && in.sizes[in.dim() - 1] == in.sizes[in.dim() - 2],
              "linalg.cholesky: A must be batches of square matrices, but they are ",
              in.sizes[in.dim() - 2], " by ", in.sizes[in.dim() - 1], " matrices");
  TORCH_CHECK(!c.args.bool_(2), "linalg.cholesky_ex with check_errors=True");
  Cholesky f = cholesky_factor(c.b, c.args.tensor(0));
  return {c.args.bool_(1) ? cholesky_upper(c.b, f.l) : f.l, f.info};
}

// cholesky(self, upper): the deprecated form, without info.
std::vector<Value> lower_cholesky(Context& c) {
  Value a = matrix_arg(c, 0, "cholesky", true);
  Cholesky f = cholesky_factor(c.b, a);
  return one(c.args.bool_(1) ? cholesky_upper(c.b, f.l) : f.l);
}

// ---- Cholesky-based solves ----------------------------------------------------------

Value cholesky_solve_value(Builder& b, Value factor, Value rhs, bool upper) {
  if (upper) {
    Value y = trsm(b, factor, rhs, false, false, true);  // U^T y = B
    return trsm(b, factor, y, false, false, false);      // U x = y
  }
  Value y = trsm(b, factor, rhs, true, false, false);  // L y = B
  return trsm(b, factor, y, true, false, true);        // L^T x = y
}

// _cholesky_solve_helper(self=B, A=factor, upper)
std::vector<Value> lower_cholesky_solve(Context& c) {
  Value factor = matrix_arg(c, 1, "cholesky_solve", true);
  auto [f, rhs] = common_batch(c.b, factor, cast(c.b, c.args.tensor(0), c.args.info(1).dtype));
  return one(cholesky_solve_value(c.b, f, rhs, c.args.bool_(2)));
}

// cholesky_inverse(factor, upper): (L L^T)^-1
std::vector<Value> lower_cholesky_inverse(Context& c) {
  Builder& b = c.b;
  Value factor = matrix_arg(c, 0, "cholesky_inverse", true);
  const Dims& d = c.args.info(0).sizes;
  if (d.back() == 0) return one(factor);
  Value id = eye(b, b.dtype(factor), batch_of(d), d.back(), d.back());
  return one(cholesky_solve_value(b, factor, id, c.args.bool_(1)));
}

// ---- Householder QR -------------------------------------------------------------------

struct Qr {
  Value a;    // R on and above the diagonal, the reflectors' tails below
  Value tau;  // [B..., k]
};

// sqrt(x^2 + y^2) without undue overflow (LAPACK's dlapy2).
Value hypot2(Builder& b, Value x, Value y) {
  Value ax = b.abs(x), ay = b.abs(y);
  Value w = b.max(ax, ay), z = b.min(ax, ay);
  Value zero = b.compare(Cmp::EQ, w, zeros_like(b, w));
  Value q = b.div(z, b.select(zero, b.full(1, b.dtype(w), b.dims(w)), w));
  Value r = b.mul(w, b.unary("stablehlo.sqrt", b.add(b.full(1, b.dtype(q), b.dims(q)), b.mul(q, q))));
  return b.select(zero, zeros_like(b, w), r);
}

// geqrf: one Householder reflector per column (LAPACK's dgeqr2 / dlarfg):
// H = I - tau v v^T with v[j] = 1, beta = -sign(alpha) ||x||.
Qr geqrf(Builder& b, Value a) {
  const Dims d = b.dims(a);
  const int64_t r = static_cast<int64_t>(d.size());
  const int64_t nb = r - 2, m = d[r - 2], n = d[r - 1], k = std::min(m, n);
  const Dims batch = batch_of(d), md = cat(batch, {m}), kd = cat(batch, {k});
  const DType dt = b.dtype(a);
  Value tau0 = b.zeros(Type{dt, kd});
  if (k == 0) return {a, tau0};
  auto out = b.while_loop(
      {b.constant_int(0, DType::I64), a, tau0},
      [k](Builder& rb, const std::vector<Value>& v) {
        return std::vector<Value>{rb.compare(Cmp::LT, v[0], rb.constant_int(k, DType::I64))};
      },
      [=](Builder& rb, const std::vector<Value>& v) {
        Value j = v[0], A = v[1], tau = v[2];
        const Type it{DType::I64, d};
        Value rows = rb.iota(it, r - 2), cols = rb.iota(it, r - 1), jd = rb.broadcast_in_dim(j, d, {});
        Value rid = rb.iota(Type{DType::I64, md}, nb), jm = rb.broadcast_in_dim(j, md, {});
        Value col = take_col(rb, A, j);
        Value alpha = take_elem(rb, col, j);
        Value tail = rb.select(rb.compare(Cmp::GT, rid, jm), col, rb.zeros(Type{dt, md}));
        Value xnorm = rb.unary("stablehlo.sqrt", sum_dim(rb, rb.mul(tail, tail), nb));
        Value nz = rb.compare(Cmp::NE, xnorm, rb.zeros(Type{dt, batch}));
        Value norm = hypot2(rb, alpha, xnorm);
        Value beta = rb.select(rb.compare(Cmp::GE, alpha, rb.zeros(Type{dt, batch})), rb.neg(norm), norm);
        Value safe_beta = rb.select(nz, beta, rb.full(1, dt, batch));
        Value tj = rb.select(nz, rb.div(rb.sub(beta, alpha), safe_beta), rb.zeros(Type{dt, batch}));
        Value scale = rb.select(nz, rb.div(rb.full(1, dt, batch), rb.sub(alpha, safe_beta)), rb.zeros(Type{dt, batch}));
        Value vv = rb.select(rb.compare(Cmp::EQ, rid, jm), rb.full(1, dt, md),
                             rb.mul(tail, per_batch(rb, scale, md)));
        // Apply H to the columns right of j: A -= tau v (v^T A).
        Value w = sum_dim(rb, rb.mul(along_rows(rb, vv, d), A), r - 2);
        Value right = rb.and_(rb.compare(Cmp::GE, rows, jd), rb.compare(Cmp::GT, cols, jd));
        Value upd = rb.mul(per_batch(rb, tj, d), rb.mul(along_rows(rb, vv, d), along_cols(rb, w, d)));
        A = rb.select(right, rb.sub(A, upd), A);
        // Column j: beta on the diagonal, v's tail below.
        Value is_col = rb.compare(Cmp::EQ, cols, jd);
        Value diag = rb.and_(rb.and_(is_col, rb.compare(Cmp::EQ, rows, jd)), per_batch(rb, nz, d));
        A = rb.select(diag, per_batch(rb, beta, d), A);
        A = rb.select(rb.and_(is_col, rb.compare(Cmp::GT, rows, jd)), along_rows(rb, vv, d), A);
        Value kid = rb.iota(Type{DType::I64, kd}, nb);
        tau = rb.select(rb.compare(Cmp::EQ, kid, rb.broadcast_in_dim(j, kd, {})), per_batch(rb, tj, kd), tau);
        return std::vector<Value>{rb.add(j, rb.constant_int(1, DType::I64)), A, tau};
      });
  return {out[1], out[2]};
}

// Q = H_0 H_1 ... H_{k-1} (the first n columns) from reflectors [B..., m, n]
// and tau [B..., k] (LAPACK's orgqr).
Value householder_product(Builder& b, Value v, Value tau) {
  const Dims d = b.dims(v);
  const int64_t r = static_cast<int64_t>(d.size());
  const int64_t nb = r - 2, m = d[r - 2], n = d[r - 1];
  const int64_t k = b.dims(tau).back();
  const Dims batch = batch_of(d), md = cat(batch, {m});
  const DType dt = b.dtype(v);
  Value q0 = eye(b, dt, batch, m, n);
  if (k == 0) return q0;
  auto out = b.while_loop(
      {b.constant_int(k - 1, DType::I64), q0, v, tau},
      [](Builder& rb, const std::vector<Value>& s) {
        return std::vector<Value>{rb.compare(Cmp::GE, s[0], rb.constant_int(0, DType::I64))};
      },
      [=](Builder& rb, const std::vector<Value>& s) {
        Value i = s[0], Q = s[1];
        Value rid = rb.iota(Type{DType::I64, md}, nb), im = rb.broadcast_in_dim(i, md, {});
        Value col = take_col(rb, s[2], i);
        Value vv = rb.select(rb.compare(Cmp::EQ, rid, im), rb.full(1, dt, md),
                             rb.select(rb.compare(Cmp::GT, rid, im), col, rb.zeros(Type{dt, md})));
        Value t = take_elem(rb, s[3], i);
        Value w = sum_dim(rb, rb.mul(along_rows(rb, vv, d), Q), r - 2);
        Q = rb.sub(Q, rb.mul(per_batch(rb, t, d), rb.mul(along_rows(rb, vv, d), along_cols(rb, w, d))));
        return std::vector<Value>{rb.sub(i, rb.constant_int(1, DType::I64)), Q, s[2], s[3]};
      });
  return out[1];
}

// The full m x m Q of reflectors [B..., m, c] (c columns hold reflectors).
Value full_q(Builder& b, Value v, Value tau) {
  const Dims& d = b.dims(v);
  const int64_t r = b.rank(v);
  const int64_t m = d[r - 2], cols = d[r - 1];
  if (cols >= m) return householder_product(b, b.slice(v, Dims(r, 0), cat(batch_of(d), {m, m})), tau);
  Dims hi(r, 0);
  hi[r - 1] = m - cols;
  return householder_product(b, b.pad(v, scalar0(b, b.dtype(v)), Dims(r, 0), hi), tau);
}

// geqrf(self) -> (a, tau)
std::vector<Value> lower_geqrf(Context& c) {
  Qr f = geqrf(c.b, matrix_arg(c, 0, "geqrf", false));
  return {f.a, f.tau};
}

// linalg_householder_product(input, tau)
std::vector<Value> lower_householder_product(Context& c) {
  Value v = matrix_arg(c, 0, "torch.linalg.householder_product", false);
  const TensorInfo& in = c.args.info(0);
  const TensorInfo& tau = c.args.info(1);
  const int64_t m = in.sizes[in.dim() - 2], n = in.sizes[in.dim() - 1];
  TORCH_CHECK(m >= n, "torch.linalg.householder_product: input.shape[-2] must be greater than or equal to "
              "input.shape[-1]");
  TORCH_CHECK(tau.dim() >= 1 && tau.sizes.back() <= n, "torch.linalg.householder_product: input.shape[-1] must be "
              "greater than or equal to tau.shape[-1]");
  TORCH_CHECK(tau.dim() == in.dim() - 1, "torch.linalg.householder_product: Expected tau to have one dimension less "
              "than input, but got tau.ndim equal to ", tau.dim(), " and input.ndim is equal to ", in.dim());
  return one(householder_product(c.b, v, cast(c.b, c.args.tensor(1), in.dtype)));
}

// linalg_qr(A, mode) -> (Q, R)
std::vector<Value> lower_qr(Context& c) {
  Builder& b = c.b;
  Value a = matrix_arg(c, 0, "linalg.qr", false);
  const std::string mode = c.args.has(1) ? c.args.string(1) : "reduced";
  TORCH_CHECK(mode == "reduced" || mode == "complete" || mode == "r", "qr received unrecognized mode '", mode,
              "' but expected one of 'reduced' (default), 'r', or 'complete'");
  const Dims& d = c.args.info(0).sizes;
  const int64_t r = static_cast<int64_t>(d.size());
  const int64_t m = d[r - 2], n = d[r - 1], k = std::min(m, n);
  const Dims batch = batch_of(d);
  Qr f = geqrf(b, a);
  const bool complete = mode == "complete";
  Value R = band(b, complete ? f.a : b.slice(f.a, Dims(r, 0), cat(batch, {k, n})), false, 0);
  if (mode == "r") return {b.zeros(Type{b.dtype(a), {0}}), R};
  Value Q = complete ? full_q(b, f.a, f.tau)
                     : householder_product(b, b.slice(f.a, Dims(r, 0), cat(batch, {m, k})), f.tau);
  return {Q, R};
}

// ormqr(input, tau, other, left, transpose): op(Q) C or C op(Q).
std::vector<Value> lower_ormqr(Context& c) {
  Builder& b = c.b;
  Value v = matrix_arg(c, 0, "torch.ormqr", false);
  const TensorInfo& in = c.args.info(0);
  Value Q = full_q(b, v, cast(b, c.args.tensor(1), in.dtype));
  if (c.args.bool_(4)) Q = mT(b, Q);
  Value other = cast(b, c.args.tensor(2), in.dtype);
  const bool left = c.args.bool_(3);
  auto [q, o] = common_batch(b, Q, other);
  return one(left ? matmul(b, q, o) : matmul(b, o, q));
}

// ---- Jacobi: symmetric eigendecomposition and SVD ---------------------------------------

// The pairs (p, q), p < q, of a cyclic sweep over n indices.
std::pair<Value, Value> pair_tables(Builder& b, int64_t n) {
  std::vector<int64_t> ps, qs;
  for (int64_t p = 0; p < n; ++p) {
    for (int64_t q = p + 1; q < n; ++q) {
      ps.push_back(p);
      qs.push_back(q);
    }
  }
  const int64_t np = static_cast<int64_t>(ps.size());
  return {b.constant_i64s(ps, {np}), b.constant_i64s(qs, {np})};
}

Value table_at(Builder& b, Value table, Value t) {
  return b.reshape(b.dynamic_slice(table, {t}, {1}), {});
}

// The Jacobi rotation (c, s) that zeroes the off-diagonal of the symmetric
// 2x2 [[app, apq], [apq, aqq]]: t = sign(theta) / (|theta| + sqrt(theta^2 + 1)).
std::pair<Value, Value> jacobi_rotation(Builder& b, Value app, Value aqq, Value apq, Value skip) {
  const DType dt = b.dtype(app);
  const Dims& d = b.dims(app);
  auto k = [&](double v) { return b.full(v, dt, d); };
  Value safe = b.select(skip, k(1), apq);
  Value theta = b.div(b.sub(aqq, app), b.mul(k(2), safe));
  Value sgn = b.select(b.compare(Cmp::GE, theta, k(0)), k(1), k(-1));
  Value at = b.abs(theta);
  // For huge theta, t ~ 1 / (2 theta) (avoids overflow of theta^2).
  Value big = b.compare(Cmp::GT, at, k(1e18));
  Value root = b.unary("stablehlo.sqrt", b.add(b.mul(theta, theta), k(1)));
  Value t = b.select(big, b.div(k(0.5), theta), b.div(sgn, b.add(at, root)));
  t = b.select(skip, k(0), t);
  Value cs = b.unary("stablehlo.rsqrt", b.add(b.mul(t, t), k(1)));
  return {cs, b.mul(t, cs)};
}

// Rotate columns p and q of x: (x_p, x_q) <- (c x_p - s x_q, s x_p + c x_q).
Value rotate_cols(Builder& b, Value x, Value p, Value q, Value cs, Value sn) {
  const Dims& d = b.dims(x);
  const int64_t r = b.rank(x);
  const Dims rowsd(d.begin(), d.end() - 1);
  Value xp = take_col(b, x, p), xq = take_col(b, x, q);
  Value c1 = per_batch(b, cs, rowsd), s1 = per_batch(b, sn, rowsd);
  Value np = b.sub(b.mul(c1, xp), b.mul(s1, xq));
  Value nq = b.add(b.mul(s1, xp), b.mul(c1, xq));
  Value cols = b.iota(Type{DType::I64, d}, r - 1);
  return b.select(b.compare(Cmp::EQ, cols, b.broadcast_in_dim(p, d, {})), along_rows(b, np, d),
                  b.select(b.compare(Cmp::EQ, cols, b.broadcast_in_dim(q, d, {})), along_rows(b, nq, d), x));
}

// ||A||_F per matrix [B...].
Value frobenius(Builder& b, Value a) {
  const int64_t r = b.rank(a);
  return b.unary("stablehlo.sqrt", b.reduce(b.mul(a, a), scalar0(b, b.dtype(a)), {r - 2, r - 1}, "stablehlo.add"));
}

// Sweep bookkeeping: whether any rotation happened in this sweep so far,
// and whether the loop is done (a sweep ended without one).
std::pair<Value, Value> sweep_progress(Builder& b, Value skip, Value slot, int64_t np, Value rotated_before) {
  Value none = b.rank(skip) == 0 ? skip : b.reduce(skip, b.constant_bool(true), seq(0, b.rank(skip)), "stablehlo.and");
  Value rotated = b.or_(rotated_before, b.not_(none));
  Value end = b.compare(Cmp::EQ, slot, b.constant_int(np - 1, DType::I64));
  return {b.and_(rotated, b.not_(end)), b.and_(end, b.not_(rotated))};
}

double jacobi_tolerance(DType dt) { return dt == DType::F64 ? 2.220446049250313e-16 : 1.1920928955078125e-07; }
constexpr int64_t kMaxSweeps = 40;

// One Jacobi rotation of the pair (p, q) applied to the state (M, V) under
// `threshold`; returns the new M and V and where (per batch) it was skipped.
using JacobiRotate = std::function<std::tuple<Value, Value, Value>(Builder&, Value M, Value V, Value p, Value q,
                                                                   Value threshold)>;

// Cyclic Jacobi sweeps over the column pairs of n columns, one pair per loop
// step, until a sweep rotates nothing (or kMaxSweeps sweeps). Returns (M, V).
std::pair<Value, Value> cyclic_jacobi(Builder& b, int64_t n, Value M, Value V, Value threshold,
                                      const JacobiRotate& rotate) {
  if (n < 2) return {M, V};
  auto [ptab, qtab] = pair_tables(b, n);
  const int64_t np = n * (n - 1) / 2;
  auto out = b.while_loop(
      {b.constant_int(0, DType::I64), M, V, b.constant_bool(false), b.constant_bool(false), threshold, ptab, qtab},
      [=](Builder& rb, const std::vector<Value>& v) {
        Value more = rb.compare(Cmp::LT, v[0], rb.constant_int(kMaxSweeps * np, DType::I64));
        return std::vector<Value>{rb.and_(more, rb.not_(v[4]))};
      },
      [=](Builder& rb, const std::vector<Value>& v) {
        Value slot = rb.rem(v[0], rb.constant_int(np, DType::I64));
        Value p = table_at(rb, v[6], slot), q = table_at(rb, v[7], slot);
        auto [M2, V2, skip] = rotate(rb, v[1], v[2], p, q, v[5]);
        auto [any_rot, done] = sweep_progress(rb, skip, slot, np, v[3]);
        return std::vector<Value>{rb.add(v[0], rb.constant_int(1, DType::I64)), M2, V2, any_rot, done, v[5], v[6], v[7]};
      });
  return {out[1], out[2]};
}

// The eigendecomposition of symmetric A [B..., n, n]: (w ascending, V).
std::pair<Value, Value> jacobi_eigh(Builder& b, Value a) {
  const Dims d = b.dims(a);
  const int64_t r = static_cast<int64_t>(d.size());
  const int64_t n = d[r - 1];
  const Dims batch = batch_of(d);
  const DType dt = b.dtype(a);
  Value V = eye(b, dt, batch, n, n);
  // A rotation is due where |a_pq| exceeds eps ||A||_F (rounding noise
  // stays below); the loop ends after a sweep without one.
  Value thr = b.mul(frobenius(b, a), b.full(jacobi_tolerance(dt), dt, batch));
  std::tie(a, V) = cyclic_jacobi(b, n, a, V, thr, [=](Builder& rb, Value A, Value Vs, Value p, Value q, Value th) {
    Value rp = take_row(rb, A, p), rq = take_row(rb, A, q);
    Value app = take_elem(rb, rp, p), apq = take_elem(rb, rp, q), aqq = take_elem(rb, rq, q);
    Value skip = rb.not_(rb.compare(Cmp::GT, rb.abs(apq), th));
    auto [cs, sn] = jacobi_rotation(rb, app, aqq, apq, skip);
    // A <- J^T A J, then the exact 2x2 block.
    A = rotate_cols(rb, A, p, q, cs, sn);
    A = mT(rb, rotate_cols(rb, mT(rb, A), p, q, cs, sn));
    Value tt = rb.select(skip, rb.zeros(Type{dt, batch}), rb.div(sn, cs));
    const Type it{DType::I64, d};
    Value rows = rb.iota(it, r - 2), cols = rb.iota(it, r - 1);
    Value pd = rb.broadcast_in_dim(p, d, {}), qd = rb.broadcast_in_dim(q, d, {});
    Value is_pq = rb.or_(rb.and_(rb.compare(Cmp::EQ, rows, pd), rb.compare(Cmp::EQ, cols, qd)),
                         rb.and_(rb.compare(Cmp::EQ, rows, qd), rb.compare(Cmp::EQ, cols, pd)));
    Value rotated = per_batch(rb, rb.not_(skip), d);
    A = rb.select(rb.and_(is_pq, rotated), rb.zeros(Type{dt, d}), A);
    Value is_pp = rb.and_(rb.compare(Cmp::EQ, rows, pd), rb.compare(Cmp::EQ, cols, pd));
    Value is_qq = rb.and_(rb.compare(Cmp::EQ, rows, qd), rb.compare(Cmp::EQ, cols, qd));
    A = rb.select(rb.and_(is_pp, rotated), per_batch(rb, rb.sub(app, rb.mul(tt, apq)), d),
                  rb.select(rb.and_(is_qq, rotated), per_batch(rb, rb.add(aqq, rb.mul(tt, apq)), d), A));
    return std::make_tuple(A, rotate_cols(rb, Vs, p, q, cs, sn), skip);
  });
  // Ascending eigenvalues; the eigenvectors follow.
  Value w = diagonal(b, a);
  const int64_t last = r - 2;
  auto sorted = b.sort({w, b.iota(Type{DType::I64, b.dims(w)}, last)}, last, true,
                       [](Builder& rb, const std::vector<Value>& s) {
                         return std::vector<Value>{rb.compare(Cmp::LT, s[0], s[1])};
                       });
  V = mT(b, take_rows(b, mT(b, V), sorted[1]));
  return {sorted[0], V};
}

// The symmetric matrix whose `lower` (or upper) triangle A holds.
Value symmetrize(Builder& b, Value a, bool lower) {
  Value tri = band(b, a, lower, 0);
  Value strict = band(b, a, lower, lower ? -1 : 1);
  return b.add(tri, mT(b, strict));
}

// _linalg_eigh(A, UPLO, compute_v) -> (eigenvalues, eigenvectors)
std::vector<Value> lower_eigh(Context& c) {
  Builder& b = c.b;
  Value a = matrix_arg(c, 0, "linalg.eigh", true);
  const std::string uplo = c.args.has(1) ? c.args.string(1) : "L";
  TORCH_CHECK(uplo == "L" || uplo == "U" || uplo == "l" || uplo == "u",
              "Expected UPLO argument to be 'L' or 'U', but got ", uplo);
  const bool compute_v = !c.args.has(2) || c.args.bool_(2);
  auto [w, V] = jacobi_eigh(b, symmetrize(b, a, uplo == "L" || uplo == "l"));
  return {w, compute_v ? V : b.zeros(Type{b.dtype(a), {0}})};
}

// The SVD of A [B..., m, n] with m >= n by one-sided Jacobi: rotate column
// pairs of W = A V until they are orthogonal; then S = |W_j|, U = W / S.
// Returns (U [m, n], S [n] descending, V [n, n]).
std::vector<Value> jacobi_svd_tall(Builder& b, Value a) {
  const Dims d = b.dims(a);
  const int64_t r = static_cast<int64_t>(d.size());
  const int64_t m = d[r - 2], n = d[r - 1];
  const Dims batch = batch_of(d), nd = cat(batch, {n});
  const DType dt = b.dtype(a);
  Value W = a, V = eye(b, dt, batch, n, n);
  const double eps = jacobi_tolerance(dt) * std::sqrt(static_cast<double>(std::max<int64_t>(m, 1)));
  // Columns below eps ||A||_F are rounding noise: never rotated.
  Value tiny = b.mul(frobenius(b, a), b.full(jacobi_tolerance(dt), dt, batch));
  tiny = b.mul(tiny, tiny);
  std::tie(W, V) = cyclic_jacobi(b, n, W, V, tiny, [=](Builder& rb, Value Ws, Value Vs, Value p, Value q, Value th) {
    Value wp = take_col(rb, Ws, p), wq = take_col(rb, Ws, q);
    Value alpha = sum_dim(rb, rb.mul(wp, wp), r - 2), beta = sum_dim(rb, rb.mul(wq, wq), r - 2);
    Value gamma = sum_dim(rb, rb.mul(wp, wq), r - 2);
    Value norms = rb.unary("stablehlo.sqrt", rb.mul(alpha, beta));
    // Rotate where the columns' cosine exceeds eps (and neither is noise).
    Value skip = rb.or_(rb.not_(rb.compare(Cmp::GT, rb.abs(gamma), rb.mul(rb.full(eps, dt, batch), norms))),
                        rb.compare(Cmp::LE, rb.min(alpha, beta), th));
    auto [cs, sn] = jacobi_rotation(rb, alpha, beta, gamma, skip);
    return std::make_tuple(rotate_cols(rb, Ws, p, q, cs, sn), rotate_cols(rb, Vs, p, q, cs, sn), skip);
  });
  Value S = b.unary("stablehlo.sqrt", sum_dim(b, b.mul(W, W), r - 2));
  // Columns at the noise level stand for zero singular values.
  Value noise = b.mul(frobenius(b, a), b.full(jacobi_tolerance(dt), dt, batch));
  Value live = b.compare(Cmp::GT, S, per_batch(b, noise, nd));
  Value U = b.div(W, along_cols(b, b.select(live, S, b.full(1, dt, nd)), d));
  // Descending singular values; the vectors follow.
  const int64_t last = r - 2;
  auto sorted = b.sort({S, b.iota(Type{DType::I64, nd}, last), live}, last, true,
                       [](Builder& rb, const std::vector<Value>& s) {
                         return std::vector<Value>{rb.compare(Cmp::GT, s[0], s[1])};
                       });
  U = mT(b, take_rows(b, mT(b, U), sorted[1]));
  V = mT(b, take_rows(b, mT(b, V), sorted[1]));
  // U's columns for zero singular values: an orthonormal completion of the
  // others (from the Householder QR of U, whose dead columns are zero).
  U = b.select(along_cols(b, sorted[2], d), U, b.zeros(Type{dt, d}));
  Qr f = geqrf(b, U);
  Value Q = householder_product(b, f.a, f.tau);
  U = b.select(along_cols(b, sorted[2], d), U, Q);
  return {U, sorted[0], V};
}

// U [m, k] with orthonormal columns completed to an m x m orthogonal matrix.
Value complete_basis(Builder& b, Value U) {
  const Dims& d = b.dims(U);
  const int64_t r = b.rank(U);
  const int64_t m = d[r - 2], k = d[r - 1];
  if (k >= m) return U;
  Qr f = geqrf(b, U);
  Value Q = full_q(b, f.a, f.tau);
  Value rest = b.slice(Q, cat(Dims(r - 2, 0), {0, k}), cat(batch_of(d), {m, m}));
  return b.concatenate({U, rest}, r - 1);
}

// The reduced SVD of A [B..., m, n]: (U [m, k], S [k] descending, V [n, k]).
std::vector<Value> svd_reduced(Builder& b, Value a) {
  const Dims& d = b.dims(a);
  const int64_t r = b.rank(a);
  const bool wide = d[r - 2] < d[r - 1];
  std::vector<Value> usv = jacobi_svd_tall(b, wide ? mT(b, a) : a);
  if (wide) std::swap(usv[0], usv[2]);  // A^T = U' S V'^T  =>  A = V' S U'^T
  return usv;
}

// linalg_lstsq(A, B, rcond, *, driver) -> (solution, residuals, rank,
// singular_values): the minimum-norm least-squares solution from the SVD,
// singular values below rcond * s_max treated as zero (what gelsy, gelsd
// and gelss compute, and gels for full-rank A). The other results follow
// LAPACK's per-driver conventions, as on the CPU.
std::vector<Value> lower_lstsq(Context& c) {
  Builder& b = c.b;
  Value a = matrix_arg(c, 0, "torch.linalg.lstsq", false);
  const TensorInfo& ai = c.args.info(0);
  const TensorInfo& bi = c.args.info(1);
  TORCH_CHECK(ai.dtype == bi.dtype, "torch.linalg.lstsq: Expected input and other to have the same dtype, but got "
              "input with dtype ", c10::toString(ai.dtype), " and other with dtype ", c10::toString(bi.dtype));
  const std::string driver = c.args.has(3) ? c.args.string(3) : "gelsy";
  TORCH_CHECK(driver == "gels" || driver == "gelsy" || driver == "gelsd" || driver == "gelss",
              "torch.linalg.lstsq: parameter `driver` should be one of (gels, gelsy, gelsd, gelss)");
  const int64_t r = ai.dim();
  const int64_t m = ai.sizes[r - 2], n = ai.sizes[r - 1], k = std::min(m, n);
  const bool vec = bi.dim() == ai.dim() - 1;
  Value rhs = vec ? b.reshape(c.args.tensor(1), cat(bi.sizes, {1})) : c.args.tensor(1);
  TORCH_CHECK(b.dims(rhs)[b.rank(rhs) - 2] == m, "torch.linalg.lstsq: input.size(-2) should match other.size(-2)");
  auto [A, Bm] = common_batch(b, a, rhs);
  const Dims& ad = b.dims(A);
  const Dims batch = batch_of(ad);
  const DType dt = b.dtype(A);
  const double eps = dt == DType::F64 ? 2.220446049250313e-16 : 1.1920928955078125e-07;
  const double rcond = c.args.has(2) && c.args.double_(2) > 0 ? c.args.double_(2) : eps * std::max(m, n);
  Value solution, rank, S;
  const int64_t nrhs = b.dims(Bm).back();
  if (k == 0) {
    solution = b.zeros(Type{dt, cat(batch, {n, nrhs})});
    rank = b.zeros(Type{DType::I64, batch});
    S = b.zeros(Type{dt, cat(batch, {0})});
  } else {
    std::vector<Value> usv = svd_reduced(b, A);
    S = usv[1];
    const Dims kd = cat(batch, {k});
    Value smax = b.reduce(S, scalar0(b, dt), {r - 2}, "stablehlo.maximum");
    Value keep = b.compare(Cmp::GT, S, b.mul(per_batch(b, smax, kd), b.full(rcond, dt, kd)));
    Value inv = b.select(keep, b.div(b.full(1, dt, kd), S), b.zeros(Type{dt, kd}));
    Value utb = matmul(b, mT(b, usv[0]), Bm);  // [k, nrhs]
    utb = b.mul(utb, along_rows(b, inv, b.dims(utb)));
    solution = matmul(b, usv[2], utb);
    rank = b.reduce(b.convert(keep, DType::I64), b.constant_int(0, DType::I64), {r - 2}, "stablehlo.add");
  }
  // Residuals: for tall A (not gelsy), |A x - B|^2 per column, when every
  // matrix has full rank (always assumed by gels).
  Value residuals = b.zeros(Type{dt, {0}});
  if (m > n && driver != "gelsy") {
    bool full_rank = true;
    if (driver != "gels" && k > 0) {
      c.args.output_depends_on_data();
      Value all_full = b.reduce(b.compare(Cmp::EQ, rank, b.full_int(n, DType::I64, b.dims(rank))), b.constant_bool(true),
                                seq(0, b.rank(rank)), "stablehlo.and");
      full_rank = c.args.host_int(b.convert(all_full, DType::I64)) != 0;
    }
    if (full_rank) {
      Value diff = b.sub(matmul(b, A, solution), Bm);
      residuals = sum_dim(b, b.mul(diff, diff), r - 2);
      if (vec) residuals = b.reshape(residuals, batch);
    }
  }
  if (vec) {
    Dims sd = b.dims(solution);
    sd.pop_back();
    solution = b.reshape(solution, sd);
  }
  const bool has_rank = driver != "gels", has_s = driver == "gelsd" || driver == "gelss";
  return {solution, residuals, has_rank ? rank : b.zeros(Type{DType::I64, {0}}), has_s ? S : b.zeros(Type{dt, {0}})};
}

// linalg_matrix_exp(A): Taylor series of degree 18 after scaling A by
// 2^-s (s per matrix, so that ||A / 2^s||_1 <= theta), then s squarings.
// theta bounds the truncation error below the dtype's resolution
// (theta^19 / 19! < eps): fewer squarings amplify less rounding.
std::vector<Value> lower_matrix_exp(Context& c) {
  Builder& b = c.b;
  const TensorInfo& in = c.args.info(0);
  TORCH_CHECK(in.dim() >= 2 && in.sizes[in.dim() - 1] == in.sizes[in.dim() - 2],
              "linalg.matrix_exp: A must be batches of square matrices, but they are ",
              in.dim() >= 2 ? in.sizes[in.dim() - 2] : 0, " by ", in.dim() >= 1 ? in.sizes[in.dim() - 1] : 0,
              " matrices");
  TORCH_CHECK(c10::isFloatingType(in.dtype) || c10::isComplexType(in.dtype),
              "linalg.matrix_exp: Expected a floating point or complex tensor as input. Got ", c10::toString(in.dtype));
  if (c10::isComplexType(in.dtype)) unsupported(c, "complex matrices");
  const int64_t r = in.dim(), n = in.sizes[r - 1];
  if (n == 0) return one(c.args.tensor(0));
  const DType dt = to_hlo(opmath_type(in.dtype));
  Value a = b.convert(c.args.tensor(0), dt);
  const Dims& d = b.dims(a);
  const Dims batch = batch_of(d);
  Value norm1 = b.reduce(sum_dim(b, b.abs(a), r - 2), scalar0(b, dt), {r - 2}, "stablehlo.maximum");
  // s = ceil(log2(norm / theta)) where norm > theta.
  const double theta = dt == DType::F64 ? 1.0 : 3.0;
  Value logn = b.div(b.unary("stablehlo.log", b.max(b.div(norm1, b.full(theta, dt, batch)), b.full(1, dt, batch))),
                     b.full(std::log(2.0), dt, batch));
  Value s = b.convert(b.unary("stablehlo.ceil", logn), DType::I64);
  s = b.select(b.is_finite(logn), s, b.zeros(Type{DType::I64, batch}));
  Value scale = b.unary("stablehlo.exponential", b.mul(b.convert(s, dt), b.full(-std::log(2.0), dt, batch)));
  Value x = b.mul(a, per_batch(b, scale, d));
  // Horner: I + x/1 (I + x/2 (I + ... (I + x/18)))
  Value id = eye(b, dt, batch, n, n);
  Value t = id;
  for (int j = 18; j >= 1; --j) t = b.add(id, b.div(matmul(b, x, t), b.full(j, dt, d)));
  Value top = batch.empty() ? s : b.reduce(s, b.constant_int(0, DType::I64), seq(0, r - 2), "stablehlo.maximum");
  auto out = b.while_loop(
      {b.constant_int(0, DType::I64), t, s, top},
      [](Builder& rb, const std::vector<Value>& v) {
        return std::vector<Value>{rb.compare(Cmp::LT, v[0], v[3])};
      },
      [d](Builder& rb, const std::vector<Value>& v) {
        Value more = rb.compare(Cmp::LT, per_batch(rb, v[0], d), per_batch(rb, v[2], d));
        Value sq = matmul(rb, v[1], v[1]);
        return std::vector<Value>{rb.add(v[0], rb.constant_int(1, DType::I64)), rb.select(more, sq, v[1]), v[2], v[3]};
      });
  return one(cast(b, out[1], in.dtype));
}

// ---- The eigendecomposition of a general matrix --------------------------
// LAPACK geev's steps, so that the eigenvalues come in CPU's order (the
// order in which the QR iteration deflates them) and the eigenvectors with
// its scaling and phase:
//   gebal  isolate eigenvalues by permutations, then scale rows and columns
//          by powers of 2 (balance_permute, balance_scale);
//   gehrd  Householder reduction to upper Hessenberg form (hessenberg);
//   lahqr  Francis double-shift QR to real Schur form, with the Ahues and
//          Tisseur deflation test and exceptional shifts (real_schur); for
//          a complex matrix zlahqr's single-shift QR with Wilkinson's shift
//          to triangular form (complex_schur);
//   trevc  back substitution for the eigenvectors of the quasi-triangular
//          Schur form, here in complex arithmetic (schur_eigenvectors);
//   gebak  undo the balancing; then each vector gets unit norm and, for a
//          complex pair, a real largest component (geev's normalization;
//          zgeev's makes the largest component real and positive).
// The loops are data-dependent, so the matrices of a batch run in turn.
struct GeneralEig {
  Builder& b;
  int64_t n;
  DType dt, ct;    // the real dtype and its complex one
  double ulp;      // LAPACK's dlamch('P')
  double safmin;   // dlamch('S')

  GeneralEig(Builder& b_, int64_t n_, DType dt_)
      : b(b_), n(n_), dt(dt_), ct(dt_ == DType::F32 ? DType::C64 : DType::C128),
        ulp(dt_ == DType::F32 ? 1.1920928955078125e-07 : 2.220446049250313e-16),
        safmin(dt_ == DType::F32 ? 1.1754943508222875e-38 : 2.2250738585072014e-308) {}

  // Scalars and index vectors (made in the frame that uses them).
  Value i64(int64_t v) { return b.constant_int(v, DType::I64); }
  Value f(double v) { return b.constant(v, dt); }
  Value fv(double v) { return b.full(v, dt, {n}); }
  Value idx() { return b.iota(Type{DType::I64, {n}}, 0); }
  Value rows() { return b.iota(Type{DType::I64, {n, n}}, 0); }
  Value cols() { return b.iota(Type{DType::I64, {n, n}}, 1); }
  Value vec(Value s) { return b.broadcast_in_dim(s, {n}, {}); }
  Value mat(Value s) { return b.broadcast_in_dim(s, {n, n}, {}); }
  Value down_rows(Value v) { return b.broadcast_in_dim(v, {n, n}, {0}); }  // m[r, c] = v[r]
  Value across_cols(Value v) { return b.broadcast_in_dim(v, {n, n}, {1}); }  // m[r, c] = v[c]
  Value lt(Value x, Value y) { return b.compare(Cmp::LT, x, y); }
  Value le(Value x, Value y) { return b.compare(Cmp::LE, x, y); }
  Value eq(Value x, Value y) { return b.compare(Cmp::EQ, x, y); }
  Value ne(Value x, Value y) { return b.compare(Cmp::NE, x, y); }
  Value sel(Value p, Value x, Value y) { return b.select(p, x, y); }
  Value sqrt(Value x) { return b.unary("stablehlo.sqrt", x); }
  Value max_of(Value x) { return b.reduce(x, b.lowest(b.dtype(x)), {0}, "stablehlo.maximum"); }
  Value min_of(Value x) { return b.reduce(x, b.highest(b.dtype(x)), {0}, "stablehlo.minimum"); }
  Value sum_of(Value x) { return b.reduce(x, b.zeros(Type{b.dtype(x), {}}), {0}, "stablehlo.add"); }
  Value any_of(Value x) { return b.reduce(x, b.constant_bool(false), {0}, "stablehlo.or"); }
  Value max0(Value i) { return b.max(i, i64(0)); }
  // sign(a, b): |a| with b's sign (Fortran's SIGN).
  Value sign(Value a, Value s) { return sel(lt(s, b.zeros(b.type(s))), b.neg(b.abs(a)), b.abs(a)); }
  // sqrt(x^2 + y^2) without overflow (dlapy2).
  Value hypot(Value x, Value y) {
    Value ax = b.abs(x), ay = b.abs(y);
    Value w = b.max(ax, ay), z = b.min(ax, ay);
    Value zero = b.zeros(b.type(w)), one = b.full(1, dt, b.dims(w));
    Value q = b.div(z, sel(eq(w, zero), one, w));
    return sel(eq(w, zero), zero, b.mul(w, sqrt(b.add(one, b.mul(q, q)))));
  }

  // |x|^2 elementwise, x (real or complex) times the real scalar s, and
  // complex helpers.
  Value sq(Value x) {
    if (!hlo::is_complex(b.dtype(x))) return b.mul(x, x);
    Value re = b.real(x), im = b.imag(x);
    return b.add(b.mul(re, re), b.mul(im, im));
  }
  Value scale_by(Value x, Value s) {
    Value v = b.broadcast_in_dim(s, b.dims(x), {});
    return b.mul(x, hlo::is_complex(b.dtype(x)) ? b.complex(v, b.zeros(b.type(v))) : v);
  }
  Value cabs1(Value z) { return b.add(b.abs(b.real(z)), b.abs(b.imag(z))); }
  Value conj(Value z) { return b.complex(b.real(z), b.neg(b.imag(z))); }
  Value cx(Value re) { return b.complex(re, b.zeros(b.type(re))); }
  Value cvec(Value s) { return b.broadcast_in_dim(s, {n}, {}); }

  // Elements, rows and columns at runtime indices (in range).
  Value at(Value m, Value i, Value j) { return b.reshape(b.dynamic_slice(m, {i, j}, {1, 1}), {}); }
  Value put(Value m, Value i, Value j, Value v) { return b.dynamic_update_slice(m, b.reshape(v, {1, 1}), {i, j}); }
  Value elem(Value v, Value i) { return b.reshape(b.dynamic_slice(v, {i}, {1}), {}); }
  Value put_elem(Value v, Value i, Value x) { return b.dynamic_update_slice(v, b.reshape(x, {1}), {i}); }
  Value row(Value m, Value i) { return b.reshape(b.dynamic_slice(m, {i, i64(0)}, {1, n}), {n}); }
  Value col(Value m, Value j) { return b.reshape(b.dynamic_slice(m, {i64(0), j}, {n, 1}), {n}); }
  Value set_row(Value m, Value i, Value r) { return b.dynamic_update_slice(m, b.reshape(r, {1, n}), {i, i64(0)}); }
  Value set_col(Value m, Value j, Value c) { return b.dynamic_update_slice(m, b.reshape(c, {n, 1}), {i64(0), j}); }
  // v[k + s] (0 outside the vector).
  Value shifted(Value v, int64_t s) {
    Value z = b.zeros(Type{b.dtype(v), {}});
    if (std::abs(s) >= n) return b.zeros(b.type(v));
    if (s > 0) return b.pad(b.slice(v, {s}, {n}), z, {0}, {s});
    return b.pad(b.slice(v, {0}, {n + s}), z, {-s}, {0});
  }
  // The diagonals of m: d[k] = m[k, k], sub[k] = m[k, k-1], sup[k] = m[k-1, k].
  Value diag_of(Value m, int64_t off) {
    Value on = eq(b.sub(rows(), cols()), b.full_int(off, DType::I64, {n, n}));
    Value z = b.zeros(b.type(m));
    // sub (off 1) is indexed by row, sup (off -1) by column.
    return b.reduce(sel(on, m, z), b.zeros(Type{b.dtype(m), {}}), {off >= 0 ? 1 : 0}, "stablehlo.add");
  }
  Value vecmat(Value u, Value m) { return b.dot_general(u, m, {}, {}, {0}, {0}, b.dtype(m), true); }
  Value matvec(Value m, Value u) { return b.dot_general(m, u, {}, {}, {1}, {0}, b.dtype(m), true); }
  Value outer(Value u, Value v) { return b.mul(down_rows(u), across_cols(v)); }
  // The matrix with rows (and columns) i and j swapped.
  Value swap_sym(Value m, Value i, Value j) {
    Value k = idx();
    Value perm = sel(eq(k, vec(i)), vec(j), sel(eq(k, vec(j)), vec(i), k));
    Value p = take_rows(b, m, perm);
    return mT(b, take_rows(b, mT(b, p), perm));
  }

  // ---- gebal ---------------------------------------------------------------
  // Push rows isolating an eigenvalue down, then columns isolating one left.
  // Returns {A, scale (the permutation record), ilo, ihi}.
  std::vector<Value> balance_permute(Value a) {
    // State: A, scale, k, l, phase (0 rows, 1 columns, 2 done).
    auto out = b.while_loop(
        {a, b.zeros(Type{dt, {n}}), i64(0), i64(n - 1), i64(0)},
        [this](Builder&, const std::vector<Value>& s) { return std::vector<Value>{lt(s[4], i64(2))}; },
        [this](Builder&, const std::vector<Value>& s) {
          Value A = s[0], sc = s[1], k = s[2], l = s[3], phase = s[4];
          Value r = rows(), c = cols(), ix = idx();
          Value nz = b.and_(ne(A, b.zeros(b.type(A))), ne(r, c));
          // A row j <= l without off-diagonal nonzeros in columns <= l; the last.
          Value row_has = b.reduce(b.and_(nz, le(c, mat(l))), b.constant_bool(false), {1}, "stablehlo.or");
          Value row_cand = b.and_(b.not_(row_has), le(ix, vec(l)));
          Value jr = max_of(sel(row_cand, ix, b.full_int(-1, DType::I64, {n})));
          // A column k <= j <= l without off-diagonal nonzeros in rows k..l; the first.
          Value in_kl = b.and_(le(mat(k), r), le(r, mat(l)));
          Value col_has = b.reduce(b.and_(nz, in_kl), b.constant_bool(false), {0}, "stablehlo.or");
          Value col_cand = b.and_(b.and_(b.not_(col_has), le(vec(k), ix)), le(ix, vec(l)));
          col_cand = b.and_(col_cand, vec(lt(k, l)));
          Value jc = min_of(sel(col_cand, ix, b.full_int(n, DType::I64, {n})));
          Value by_row = eq(phase, i64(0));
          Value found = sel(by_row, le(i64(0), jr), lt(jc, i64(n)));
          Value j = sel(by_row, jr, jc), m = sel(by_row, l, k);
          Value jj = sel(found, j, i64(0)), mm = sel(found, m, i64(0));
          A = sel(mat(found), swap_sym(A, jj, mm), A);
          sc = sel(found, put_elem(sc, mm, b.convert(jj, dt)), sc);
          Value last = b.and_(by_row, eq(l, i64(0)));
          Value next_phase = sel(found, sel(last, i64(2), phase), b.add(phase, i64(1)));
          Value nl = sel(b.and_(found, b.and_(by_row, b.not_(last))), b.sub(l, i64(1)), l);
          Value nk = sel(b.and_(found, b.not_(by_row)), b.add(k, i64(1)), k);
          return std::vector<Value>{A, sc, nk, nl, next_phase};
        });
    return {out[0], out[1], out[2], out[3]};
  }

  // Scale row and column i of the block ilo..ihi by powers of 2 until their
  // norms are within a factor of 2 (LAPACK's test and bounds).
  std::vector<Value> balance_scale(Value a, Value scale, Value ilo, Value ihi) {
    const double sfmin1 = safmin / ulp, sfmax1 = 1 / sfmin1, sfmin2 = sfmin1 * 2, sfmax2 = 1 / sfmin2;
    {
      Value ix = idx();
      scale = sel(b.and_(le(vec(ilo), ix), le(ix, vec(ihi))), fv(1), scale);
    }
    // Outer state: A, scale, ilo, ihi, again, sweeps.
    auto out = b.while_loop(
        {a, scale, ilo, ihi, b.constant_bool(true), i64(0)},
        [this](Builder&, const std::vector<Value>& s) {
          return std::vector<Value>{b.and_(s[4], lt(s[5], i64(1000)))};
        },
        [=](Builder&, const std::vector<Value>& s) {
          // Inner state: A, scale, i, ihi, ilo, changed.
          auto in = b.while_loop(
              {s[0], s[1], s[2], s[3], s[2], b.constant_bool(false)},
              [this](Builder&, const std::vector<Value>& t) { return std::vector<Value>{le(t[2], t[3])}; },
              [=](Builder&, const std::vector<Value>& t) {
                Value A = t[0], sc = t[1], i = t[2], hi = t[3], lo = t[4];
                Value ix = idx();
                Value cv = col(A, i), rv = row(A, i);
                Value in_blk = b.and_(le(vec(lo), ix), le(ix, vec(hi)));
                Value zv = fv(0);
                Value c = sqrt(sum_of(sel(in_blk, sq(cv), zv)));
                Value r = sqrt(sum_of(sel(in_blk, sq(rv), zv)));
                Value ca = max_of(sel(le(ix, vec(hi)), b.abs(cv), zv));
                Value ra = max_of(sel(le(vec(lo), ix), b.abs(rv), zv));
                Value skip = b.or_(eq(c, f(0)), eq(r, f(0)));
                Value s0 = b.add(c, r);
                // Up: f *= 2 while c < r / 2^(steps+1), within range.
                auto up = b.while_loop(
                    {f(1), c, ca, r, b.div(r, f(2)), ra, skip},
                    [=](Builder&, const std::vector<Value>& u) {
                      Value stop = b.or_(b.or_(b.compare(Cmp::GE, u[1], u[4]),
                                               b.compare(Cmp::GE, b.max(b.max(u[0], u[1]), u[2]), f(sfmax2))),
                                         le(b.min(b.min(u[3], u[4]), u[5]), f(sfmin2)));
                      Value finite = b.is_finite(b.add(b.add(u[0], u[1]), b.add(u[3], u[4])));
                      return std::vector<Value>{b.and_(b.and_(b.not_(stop), finite), b.not_(u[6]))};
                    },
                    [=](Builder&, const std::vector<Value>& u) {
                      Value two = f(2);
                      return std::vector<Value>{b.mul(u[0], two), b.mul(u[1], two), b.mul(u[2], two),
                                                b.div(u[3], two), b.div(u[4], two), b.div(u[5], two), u[6]};
                    });
                auto down = b.while_loop(
                    {up[0], up[1], up[2], up[3], b.div(up[1], f(2)), up[5], skip},
                    [=](Builder&, const std::vector<Value>& u) {
                      Value stop = b.or_(b.or_(lt(u[4], u[3]), b.compare(Cmp::GE, b.max(u[3], u[5]), f(sfmax2))),
                                         le(b.min(b.min(u[0], u[1]), b.min(u[4], u[2])), f(sfmin2)));
                      Value finite = b.is_finite(b.add(b.add(u[0], u[1]), b.add(u[3], u[4])));
                      return std::vector<Value>{b.and_(b.and_(b.not_(stop), finite), b.not_(u[6]))};
                    },
                    [=](Builder&, const std::vector<Value>& u) {
                      Value two = f(2);
                      return std::vector<Value>{b.div(u[0], two), b.div(u[1], two), b.div(u[2], two),
                                                b.mul(u[3], two), b.div(u[4], two), b.mul(u[5], two), u[6]};
                    });
                Value fac = down[0], cc = down[1], rr = down[3];
                Value sci = elem(sc, i);
                skip = b.or_(skip, b.compare(Cmp::GE, b.add(cc, rr), b.mul(f(0.95), s0)));
                skip = b.or_(skip, b.and_(b.and_(lt(fac, f(1)), lt(sci, f(1))), le(b.mul(fac, sci), f(sfmin1))));
                skip = b.or_(skip, b.and_(b.and_(lt(f(1), fac), lt(f(1), sci)),
                                          b.compare(Cmp::GE, sci, b.div(f(sfmax1), fac))));
                skip = b.or_(skip, b.not_(b.is_finite(fac)));
                Value g = b.div(f(1), fac);
                Value A2 = set_row(A, i, sel(le(vec(lo), ix), scale_by(rv, g), rv));
                Value cv2 = col(A2, i);
                A2 = set_col(A2, i, sel(le(ix, vec(hi)), scale_by(cv2, fac), cv2));
                A = sel(mat(skip), A, A2);
                sc = sel(skip, sc, put_elem(sc, i, b.mul(sci, fac)));
                return std::vector<Value>{A, sc, b.add(i, i64(1)), hi, lo, b.or_(t[5], b.not_(skip))};
              });
          return std::vector<Value>{in[0], in[1], s[2], s[3], in[5], b.add(s[5], i64(1))};
        });
    return {out[0], out[1]};
  }

  // ---- lanv2 -------------------------------------------------------------------
  // The standardized Schur factorization of [[a, b], [c, d]]: returns
  // {a, b, c, d, rt1r, rt1i, rt2r, rt2i, cs, sn}.
  std::vector<Value> lanv2(Value a, Value bb, Value c, Value d) {
    Value zero = f(0), one = f(1), half = f(0.5);
    Value sgn_b = sign(one, bb), sgn_c = sign(one, c);
    // Case 1: c == 0. Case 2: b == 0 (swap). Case 3: a == d, signs differ.
    Value c_zero = eq(c, zero);
    Value b_zero = b.and_(b.not_(c_zero), eq(bb, zero));
    Value done3 = b.and_(b.and_(b.not_(c_zero), b.not_(b_zero)),
                         b.and_(eq(b.sub(a, d), zero), ne(sgn_b, sgn_c)));
    Value general = b.not_(b.or_(b.or_(c_zero, b_zero), done3));
    // The general case.
    Value temp = b.sub(a, d);
    Value p = b.mul(half, temp);
    Value bcmax = b.max(b.abs(bb), b.abs(c));
    Value bcmis = b.mul(b.mul(b.min(b.abs(bb), b.abs(c)), sgn_b), sgn_c);
    Value scale = b.max(b.abs(p), bcmax);
    Value safe_scale = sel(eq(scale, zero), one, scale);
    Value z = b.add(b.mul(b.div(p, safe_scale), p), b.mul(b.div(bcmax, safe_scale), bcmis));
    Value real_ev = b.compare(Cmp::GE, z, f(4 * ulp));
    // Real eigenvalues.
    Value zr = b.add(p, sign(b.mul(sqrt(scale), sqrt(b.max(z, zero))), p));
    Value safe_zr = sel(eq(zr, zero), one, zr);
    Value ra = b.add(d, zr);
    Value rd = b.sub(d, b.mul(b.div(bcmax, safe_zr), bcmis));
    Value rtau = hypot(c, zr);
    Value safe_rtau = sel(eq(rtau, zero), one, rtau);
    Value rcs = b.div(zr, safe_rtau), rsn = b.div(c, safe_rtau);
    Value rb = b.sub(bb, c);
    // Complex or nearly equal eigenvalues: equal diagonals.
    Value sigma = b.add(bb, c);
    Value ctau = hypot(sigma, temp);
    Value safe_ctau = sel(eq(ctau, zero), one, ctau);
    Value ccs = sqrt(b.mul(half, b.add(one, b.div(b.abs(sigma), safe_ctau))));
    Value csn = b.mul(b.neg(b.div(p, b.mul(safe_ctau, ccs))), sign(one, sigma));
    Value aa = b.add(b.mul(a, ccs), b.mul(bb, csn));
    Value bb2 = b.add(b.mul(b.neg(a), csn), b.mul(bb, ccs));
    Value cc = b.add(b.mul(c, ccs), b.mul(d, csn));
    Value dd = b.add(b.mul(b.neg(c), csn), b.mul(d, ccs));
    Value cb = b.add(b.mul(bb2, ccs), b.mul(dd, csn));
    Value cc2 = b.add(b.mul(b.neg(aa), csn), b.mul(cc, ccs));
    Value ctemp = b.mul(half, b.add(b.add(b.mul(aa, ccs), b.mul(cc, csn)), b.add(b.mul(b.neg(bb2), csn), b.mul(dd, ccs))));
    Value ca = ctemp, cd = ctemp;
    // Sub-cases once the diagonals are equal.
    Value c2_nz = ne(cc2, zero), b2_nz = ne(cb, zero);
    Value same = eq(sign(one, cb), sign(one, cc2));
    Value tri = b.and_(b.and_(c2_nz, b2_nz), same);  // real after all: triangularize
    Value flip = b.and_(c2_nz, b.not_(b2_nz));        // b == 0: swap
    Value sab = sqrt(b.abs(cb)), sac = sqrt(b.abs(cc2));
    Value tp = sign(b.mul(sab, sac), cc2);
    Value ttau = b.div(one, sqrt(sel(tri, b.abs(b.add(cb, cc2)), one)));
    Value cs1 = b.mul(sab, ttau), sn1 = b.mul(sac, ttau);
    Value tcs = b.sub(b.mul(ccs, cs1), b.mul(csn, sn1));
    Value tsn = b.add(b.mul(ccs, sn1), b.mul(csn, cs1));
    Value xa = sel(tri, b.add(ctemp, tp), ca);
    Value xd = sel(tri, b.sub(ctemp, tp), cd);
    Value xb = sel(tri, b.sub(cb, cc2), sel(flip, b.neg(cc2), cb));
    Value xc = sel(b.or_(tri, flip), zero, cc2);
    Value xcs = sel(tri, tcs, sel(flip, b.neg(csn), ccs));
    Value xsn = sel(tri, tsn, sel(flip, ccs, csn));
    // Pick the general case's branch.
    Value ga = sel(real_ev, ra, xa), gb = sel(real_ev, rb, xb), gc = sel(real_ev, zero, xc), gd = sel(real_ev, rd, xd);
    Value gcs = sel(real_ev, rcs, xcs), gsn = sel(real_ev, rsn, xsn);
    // And the case.
    Value oa = sel(general, ga, sel(b_zero, d, a));
    Value ob = sel(general, gb, sel(b_zero, b.neg(c), bb));
    Value oc = sel(general, gc, sel(b_zero, zero, c));
    Value od = sel(general, gd, sel(b_zero, a, d));
    Value ocs = sel(general, gcs, sel(b_zero, zero, one));
    Value osn = sel(general, gsn, sel(b_zero, one, zero));
    Value im = sel(eq(oc, zero), zero, b.mul(sqrt(b.abs(ob)), sqrt(b.abs(oc))));
    // A real pair's imaginary parts are +0 (LAPACK's ZERO), not -0.
    return {oa, ob, oc, od, oa, im, od, sel(eq(oc, zero), zero, b.neg(im)), ocs, osn};
  }

  // x' = cs x + sn y, y' = cs y - sn x where `mask`.
  std::pair<Value, Value> rot(Value x, Value y, Value cs, Value sn, Value mask) {
    Value c = vec(cs), s = vec(sn);
    Value x2 = b.add(b.mul(c, x), b.mul(s, y)), y2 = b.sub(b.mul(c, y), b.mul(s, x));
    return {sel(mask, x2, x), sel(mask, y2, y)};
  }

  // ---- lahqr ---------------------------------------------------------------------
  // State of the QR iteration.
  enum { kH, kZ, kWr, kWi, kI, kL, kDefl, kIts, kFail, kLo, kHi, kNState };

  // Returns {T, Z, wr, wi, failed}.
  std::vector<Value> real_schur(Value h, Value z, Value ilo, Value ihi) {
    Value wr = diag_of(h, 0), wi = b.zeros(Type{dt, {n}});
    auto out = b.while_loop(
        {h, z, wr, wi, ihi, ilo, i64(0), i64(0), b.constant_bool(false), ilo, ihi},
        [this](Builder&, const std::vector<Value>& s) {
          return std::vector<Value>{b.and_(le(s[kLo], s[kI]), b.not_(s[kFail]))};
        },
        [this](Builder&, const std::vector<Value>& s) { return qr_step(s); });
    return {out[kH], out[kZ], out[kWr], out[kWi], out[kFail]};
  }

  std::vector<Value> qr_step(const std::vector<Value>& s) {
    Value H = s[kH], Z = s[kZ], wr = s[kWr], wi = s[kWi], i = s[kI], l = s[kL];
    Value lo = s[kLo], hi = s[kHi];
    Value ix = idx();
    Value nh = b.convert(b.add(b.sub(hi, lo), i64(1)), dt);
    Value smlnum = b.mul(f(safmin), b.div(nh, f(ulp)));
    // A single negligible subdiagonal element: the last k in (l, i].
    Value k;
    {
      Value d = diag_of(H, 0), sub = diag_of(H, 1), sup = diag_of(H, -1);
      Value hk = b.abs(sub), dprev = shifted(d, -1);
      Value tst = b.add(b.abs(dprev), b.abs(d));
      Value tz = eq(tst, fv(0));
      Value extra = b.add(sel(le(vec(lo), b.sub(ix, b.full_int(2, DType::I64, {n}))), b.abs(shifted(sub, -1)), fv(0)),
                          sel(le(b.add(ix, b.full_int(1, DType::I64, {n})), vec(hi)), b.abs(shifted(sub, 1)), fv(0)));
      tst = sel(tz, b.add(tst, extra), tst);
      Value ab = b.max(hk, b.abs(sup)), ba = b.min(hk, b.abs(sup));
      Value dd = b.abs(b.sub(dprev, d));
      Value aa = b.max(b.abs(d), dd), bb = b.min(b.abs(d), dd);
      Value ss = b.add(aa, ab);
      Value safe_ss = sel(eq(ss, fv(0)), fv(1), ss);
      Value small = b.and_(le(hk, b.mul(fv(ulp), tst)),
                           le(b.mul(ba, b.div(ab, safe_ss)),
                              b.max(vec(smlnum), b.mul(fv(ulp), b.mul(bb, b.div(aa, safe_ss))))));
      Value ok = b.or_(le(hk, vec(smlnum)), small);
      ok = b.and_(ok, b.and_(lt(vec(l), ix), le(ix, vec(i))));
      k = b.max(max_of(sel(ok, ix, b.full_int(-1, DType::I64, {n}))), l);
    }
    l = k;
    {
      Value lm1 = max0(b.sub(l, i64(1)));
      Value cur = at(H, l, lm1);
      H = put(H, l, lm1, sel(lt(lo, l), f(0), cur));
    }
    Value im1 = max0(b.sub(i, i64(1)));
    Value deflate = le(b.sub(i, i64(1)), l);
    Value one_ev = b.and_(deflate, eq(l, i));
    Value two_ev = b.and_(deflate, eq(l, b.sub(i, i64(1))));
    // ---- a 1x1 or 2x2 block has split off
    {
      Value hii = at(H, i, i);
      wr = sel(one_ev, put_elem(wr, i, hii), wr);
      wi = sel(one_ev, put_elem(wi, i, f(0)), wi);
      auto sv = lanv2(at(H, im1, im1), at(H, im1, i), at(H, i, im1), hii);
      Value H2 = put(put(put(put(H, im1, im1, sv[0]), im1, i, sv[1]), i, im1, sv[2]), i, i, sv[3]);
      Value cs = sel(two_ev, sv[8], f(1)), sn = sel(two_ev, sv[9], f(0));
      auto [r1, r2] = rot(row(H2, im1), row(H2, i), cs, sn, lt(vec(i), ix));
      H2 = set_row(set_row(H2, im1, r1), i, r2);
      auto [c1, c2] = rot(col(H2, im1), col(H2, i), cs, sn, lt(ix, vec(im1)));
      H2 = set_col(set_col(H2, im1, c1), i, c2);
      auto [z1, z2] = rot(col(Z, im1), col(Z, i), cs, sn, le(ix, ix));
      Value Z2 = set_col(set_col(Z, im1, z1), i, z2);
      H = sel(mat(two_ev), H2, H);
      Z = sel(mat(two_ev), Z2, Z);
      Value w2r = put_elem(put_elem(wr, im1, sv[4]), i, sv[6]);
      Value w2i = put_elem(put_elem(wi, im1, sv[5]), i, sv[7]);
      wr = sel(two_ev, w2r, wr);
      wi = sel(two_ev, w2i, wi);
    }
    // ---- else a double-shift QR sweep on rows and columns l..i
    Value kdefl = b.add(s[kDefl], i64(1));
    Value rt1r, rt1i, rt2r, rt2i;
    {
      Value exc_i = eq(b.rem(kdefl, i64(12)), i64(0));
      Value exc_l = b.and_(b.not_(exc_i), eq(b.rem(kdefl, i64(6)), i64(0)));
      Value im2 = max0(b.sub(i, i64(2)));
      Value l1 = b.min(b.add(l, i64(1)), i64(n - 1)), l2 = b.min(b.add(l, i64(2)), i64(n - 1));
      Value s_i = b.add(b.abs(at(H, i, im1)), b.abs(at(H, im1, im2)));
      Value s_l = b.add(b.abs(at(H, l1, l)), b.abs(at(H, l2, l1)));
      Value se = sel(exc_i, s_i, s_l);
      Value exc = b.or_(exc_i, exc_l);
      Value e11 = b.add(b.mul(f(0.75), se), sel(exc_i, at(H, i, i), at(H, l, l)));
      Value h11 = sel(exc, e11, at(H, im1, im1));
      Value h12 = sel(exc, b.mul(f(-0.4375), se), at(H, im1, i));
      Value h21 = sel(exc, se, at(H, i, im1));
      Value h22 = sel(exc, e11, at(H, i, i));
      Value ss = b.add(b.add(b.abs(h11), b.abs(h12)), b.add(b.abs(h21), b.abs(h22)));
      Value szero = eq(ss, f(0));
      Value safe = sel(szero, f(1), ss);
      h11 = b.div(h11, safe);
      h21 = b.div(h21, safe);
      h12 = b.div(h12, safe);
      h22 = b.div(h22, safe);
      Value tr = b.div(b.add(h11, h22), f(2));
      Value det = b.sub(b.mul(b.sub(h11, tr), b.sub(h22, tr)), b.mul(h12, h21));
      Value rtdisc = sqrt(b.abs(det));
      Value cplx = b.compare(Cmp::GE, det, f(0));
      Value r1 = b.add(tr, rtdisc), r2 = b.sub(tr, rtdisc);
      Value pick1 = le(b.abs(b.sub(r1, h22)), b.abs(b.sub(r2, h22)));
      Value rreal = b.mul(sel(pick1, r1, r2), ss);
      rt1r = sel(szero, f(0), sel(cplx, b.mul(tr, ss), rreal));
      rt2r = rt1r;
      rt1i = sel(b.or_(szero, b.not_(cplx)), f(0), b.mul(rtdisc, ss));
      rt2i = b.neg(rt1i);
    }
    // Where to start: the last m in [l, i-2] where H(m, m-1) is negligible
    // with the bulge's first column; v is that column.
    Value m, v1, v2, v3;
    {
      Value d = diag_of(H, 0), sub = diag_of(H, 1), sup = diag_of(H, -1);
      Value h21 = shifted(sub, 1), h12 = shifted(sup, 1), dup = shifted(d, 1), h32 = shifted(sub, 2);
      Value s1 = b.add(b.add(b.abs(b.sub(d, vec(rt2r))), vec(b.abs(rt2i))), b.abs(h21));
      s1 = sel(eq(s1, fv(0)), fv(1), s1);
      Value h21s = b.div(h21, s1);
      Value w1 = b.sub(b.add(b.mul(h21s, h12), b.mul(b.sub(d, vec(rt1r)), b.div(b.sub(d, vec(rt2r)), s1))),
                       b.mul(vec(rt1i), b.div(vec(rt2i), s1)));
      Value w2 = b.mul(h21s, b.sub(b.sub(b.add(d, dup), vec(rt1r)), vec(rt2r)));
      Value w3 = b.mul(h21s, h32);
      Value s2 = b.add(b.add(b.abs(w1), b.abs(w2)), b.abs(w3));
      s2 = sel(eq(s2, fv(0)), fv(1), s2);
      w1 = b.div(w1, s2);
      w2 = b.div(w2, s2);
      w3 = b.div(w3, s2);
      Value test = le(b.mul(b.abs(sub), b.add(b.abs(w2), b.abs(w3))),
                      b.mul(b.mul(fv(ulp), b.abs(w1)), b.add(b.add(b.abs(shifted(d, -1)), b.abs(d)), b.abs(dup))));
      Value okm = b.and_(b.or_(eq(ix, vec(l)), test), b.and_(le(vec(l), ix), le(ix, vec(b.sub(i, i64(2))))));
      m = b.max(max_of(sel(okm, ix, b.full_int(-1, DType::I64, {n}))), l);
      m = b.min(m, i64(n - 1));
      v1 = elem(w1, m);
      v2 = elem(w2, m);
      v3 = elem(w3, m);
    }
    // The bulge chase: k = m .. i-1 (nothing when a block split off).
    Value kstart = sel(deflate, i, m);
    auto sweep = b.while_loop(
        {H, Z, kstart, v1, v2, v3, m, l, i},
        [this](Builder&, const std::vector<Value>& t) { return std::vector<Value>{lt(t[2], t[8])}; },
        [this](Builder&, const std::vector<Value>& t) { return chase(t); });
    H = sweep[0];
    Z = sweep[1];
    Value its = b.add(s[kIts], i64(1));
    Value itmax = b.mul(i64(30), b.max(i64(10), b.add(b.sub(hi, lo), i64(1))));
    Value fail = b.and_(b.not_(deflate), lt(itmax, its));
    return {H,
            Z,
            wr,
            wi,
            sel(deflate, b.sub(l, i64(1)), i),
            sel(deflate, lo, l),
            sel(deflate, i64(0), kdefl),
            sel(deflate, i64(0), its),
            fail,
            lo,
            hi};
  }

  // One reflector of the bulge chase (dlahqr's loop 130).
  std::vector<Value> chase(const std::vector<Value>& t) {
    Value H = t[0], Z = t[1], k = t[2], v1 = t[3], v2 = t[4], v3 = t[5], m = t[6], l = t[7], i = t[8];
    Value ix = idx();
    Value nr3 = le(i64(2), b.sub(i, k));  // nr = min(3, i - k + 1) == 3
    Value km1 = max0(b.sub(k, i64(1)));
    Value after = lt(m, k);
    {
      Value padded = b.pad(col(H, km1), f(0), {0}, {2});
      Value w = b.dynamic_slice(padded, {k}, {3});
      v1 = sel(after, b.reshape(b.slice(w, {0}, {1}), {}), v1);
      v2 = sel(after, b.reshape(b.slice(w, {1}, {2}), {}), v2);
      v3 = sel(after, b.reshape(b.slice(w, {2}, {3}), {}), v3);
    }
    v3 = sel(nr3, v3, f(0));
    // dlarfg(nr, v1, (v2, v3)).
    Value xnorm = hypot(v2, v3);
    Value zero = eq(xnorm, f(0));
    Value beta = b.neg(sign(hypot(v1, xnorm), v1));
    Value t1 = sel(zero, f(0), b.div(b.sub(beta, v1), sel(zero, f(1), beta)));
    Value scal = sel(zero, f(1), b.div(f(1), sel(zero, f(1), b.sub(v1, beta))));
    Value x2 = b.mul(v2, scal), x3 = b.mul(v3, scal);
    beta = sel(zero, v1, beta);
    // Column k-1: the bulge's column becomes (beta, 0, 0).
    {
      Value c = col(H, km1);
      Value k1 = b.add(k, i64(1)), k2 = b.add(k, i64(2));
      Value ck = sel(after, beta, sel(lt(l, m), b.mul(elem(c, k), b.sub(f(1), t1)), elem(c, k)));
      Value cn = sel(eq(ix, vec(k)), vec(ck), c);
      cn = sel(b.and_(vec(after), eq(ix, vec(k1))), fv(0), cn);
      cn = sel(b.and_(vec(b.and_(after, lt(k, b.sub(i, i64(1))))), eq(ix, vec(k2))), fv(0), cn);
      H = set_col(H, km1, cn);
    }
    Value u = sel(eq(ix, vec(k)), fv(1),
                  sel(eq(ix, vec(b.add(k, i64(1)))), vec(x2),
                      sel(b.and_(vec(nr3), eq(ix, vec(b.add(k, i64(2))))), vec(x3), fv(0))));
    Value tu = b.mul(u, vec(t1));
    // From the left on columns k.., from the right on rows ..min(k+3, i).
    Value left = b.sub(H, outer(tu, vecmat(u, H)));
    H = sel(le(mat(k), cols()), left, H);
    Value top = b.min(b.add(k, i64(3)), i);
    Value right = b.sub(H, outer(matvec(H, u), tu));
    H = sel(le(rows(), mat(top)), right, H);
    Z = b.sub(Z, outer(matvec(Z, u), tu));
    return {H, Z, b.add(k, i64(1)), v1, v2, v3, m, l, i};
  }

  // ---- trevc ---------------------------------------------------------------------
  // The eigenvectors of the real quasi-triangular T (column e for eigenvalue
  // e), by back substitution in complex arithmetic from trevc's starting
  // values: x_e = 1 for a real eigenvalue; for a pair at (e, e+1), the first
  // one's vector starts (1, i wi / T(e, e+1)) or (-wi / T(e+1, e), i),
  // whichever divides by the larger element. The second one's is its
  // conjugate.
  // T complex (triangular) has no pairs: every x_e starts at 1.
  Value schur_eigenvectors(Value T, Value wr, Value wi) {
    const bool pairs = !hlo::is_complex(b.dtype(T));
    Value second = pairs ? lt(wi, fv(0)) : ne(idx(), idx());
    if (!pairs) {
      auto out = b.while_loop(
          {T, b.convert(eye(b, dt, {}, n, n), ct), i64(n - 1), wr, wi, second},
          [this](Builder&, const std::vector<Value>& s) { return std::vector<Value>{le(i64(0), s[2])}; },
          [this](Builder&, const std::vector<Value>& s) { return back_substitute(s); });
      return out[1];
    }
    Value sub = diag_of(T, 1), sup = diag_of(T, -1);
    Value te1 = shifted(sup, 1), t1e = shifted(sub, 1);  // T(e, e+1), T(e+1, e)
    Value first = lt(fv(0), wi);
    Value by_sup = b.compare(Cmp::GE, b.abs(te1), b.abs(t1e));
    Value zc = b.zeros(Type{dt, {n}});
    Value safe_te1 = sel(eq(te1, zc), fv(1), te1), safe_t1e = sel(eq(t1e, zc), fv(1), t1e);
    Value d0 = sel(b.and_(first, b.not_(by_sup)), b.complex(b.neg(b.div(wi, safe_t1e)), zc), b.complex(fv(1), zc));
    Value d1 = sel(by_sup, b.complex(zc, b.div(wi, safe_te1)), b.complex(zc, fv(1)));
    d1 = sel(first, d1, b.zeros(Type{ct, {n}}));
    Value r = rows(), c = cols();
    Value X = sel(eq(r, c), across_cols(d0),
                  sel(eq(r, b.add(c, b.full_int(1, DType::I64, {n, n}))), across_cols(d1), b.zeros(Type{ct, {n, n}})));
    auto out = b.while_loop(
        {T, X, i64(n - 1), wr, wi, second},
        [this](Builder&, const std::vector<Value>& s) { return std::vector<Value>{le(i64(0), s[2])}; },
        [this](Builder&, const std::vector<Value>& s) { return back_substitute(s); });
    X = out[1];
    // The second of a pair: the conjugate of the first.
    Value Xt = mT(b, X);  // rows are vectors
    Value prev_rows = b.pad(b.slice(Xt, {0, 0}, {n - 1, n}), b.zeros(Type{ct, {}}), {1, 0}, {0, 0});
    Value conj_prev = b.complex(b.real(prev_rows), b.neg(b.imag(prev_rows)));
    Xt = sel(down_rows(second), conj_prev, Xt);
    return mT(b, Xt);
  }

  // One row (or 2x2 block of rows) j of the back substitution, for every
  // vector whose eigenvalue lies below it.
  std::vector<Value> back_substitute(const std::vector<Value>& s) {
    Value T = s[0], X = s[1], j = s[2], wr = s[3], wi = s[4], second = s[5];
    Value ix = idx();
    Value jm1 = max0(b.sub(j, i64(1)));
    Value two = b.and_(lt(i64(0), j), ne(at(T, j, jm1), b.zeros(Type{b.dtype(T), {}})));
    Value sr = sel(two, jm1, j);
    Value n_ = b.full(static_cast<double>(n), dt, {});
    Value smlnum = b.mul(f(safmin), b.div(n_, f(ulp)));
    Value lam = b.complex(wr, wi);
    Value smin = b.max(b.mul(fv(ulp), b.add(b.abs(wr), b.abs(wi))), vec(smlnum));
    Value Tc = hlo::is_complex(b.dtype(T)) ? T : cx(T);
    Value rj = vecmat(row(Tc, j), X), rs = vecmat(row(Tc, sr), X);
    Value tjj = vec(at(Tc, j, j)), tss = vec(at(Tc, sr, sr));
    Value tsj = vec(at(Tc, sr, j)), tjs = vec(at(Tc, j, sr));
    // 1x1: (T(j,j) - lambda) x_j = -r_j, the pivot at least smin.
    Value dj = b.sub(tjj, lam);
    dj = sel(lt(cabs1(dj), smin), cx(smin), dj);
    Value x1 = b.neg(b.div(rj, dj));
    // 2x2 by Cramer's rule.
    Value a = b.sub(tss, lam), dd = b.sub(tjj, lam);
    Value det = b.sub(b.mul(a, dd), b.mul(tsj, tjs));
    det = sel(lt(cabs1(det), b.mul(smin, smin)), cx(b.mul(smin, smin)), det);
    Value xs2 = b.div(b.add(b.neg(b.mul(dd, rs)), b.mul(tsj, rj)), det);
    Value xj2 = b.div(b.sub(b.mul(tjs, rs), b.mul(a, rj)), det);
    Value solve = b.and_(lt(vec(j), ix), b.not_(second));
    Value newj = sel(vec(two), xj2, x1);
    Value rowj = sel(solve, newj, row(X, j));
    X = set_row(X, j, rowj);
    Value rows_ = sel(solve, xs2, row(X, sr));
    X = sel(mat(two), set_row(X, sr, rows_), X);
    // Keep the vectors' scale bounded (trevc rescales too).
    Value mag = b.reduce(cabs1(X), b.zeros(Type{dt, {}}), {0}, "stablehlo.maximum");
    Value big = b.compare(Cmp::GT, mag, fv(1 / (ulp * ulp)));
    Value scale = sel(big, b.div(fv(1), mag), fv(1));
    X = b.mul(X, across_cols(cx(scale)));
    return {T, X, b.sub(sr, i64(1)), wr, wi, second};
  }

  // ---- gebak and geev's normalization --------------------------------------------
  Value back_transform(Value V, Value scale, Value ilo, Value ihi) {
    Value ix = idx();
    Value in_blk = b.and_(b.and_(le(vec(ilo), ix), le(ix, vec(ihi))), vec(lt(ilo, ihi)));
    V = b.mul(V, down_rows(b.complex(sel(in_blk, scale, fv(1)), fv(0))));
    // Undo the permutations: i = ilo-1 .. 0, then ihi+1 .. n-1.
    auto out = b.while_loop(
        {V, scale, i64(0), ilo, ihi},
        [this](Builder&, const std::vector<Value>& s) {
          Value count = b.add(s[3], b.sub(i64(n - 1), s[4]));
          return std::vector<Value>{lt(s[2], count)};
        },
        [this](Builder&, const std::vector<Value>& s) {
          Value t = s[2], lo = s[3], hi = s[4];
          Value i = sel(lt(t, lo), b.sub(b.sub(lo, i64(1)), t), b.add(b.add(hi, i64(1)), b.sub(t, lo)));
          Value k = b.clamp(i64(0), b.convert(elem(s[1], i), DType::I64), i64(n - 1));
          Value ix = idx();
          Value perm = sel(eq(ix, vec(i)), vec(k), sel(eq(ix, vec(k)), vec(i), ix));
          return std::vector<Value>{take_rows(b, s[0], perm), s[1], b.add(t, i64(1)), lo, hi};
        });
    return out[0];
  }

  // Unit norm; a complex pair's first vector turned so that its largest
  // component (the first of them) is real, by lartg's rotation; the second
  // is its conjugate.
  Value normalize(Value V, Value wi) {
    Value re = b.real(V), im = b.imag(V);
    Value mag2 = b.add(b.mul(re, re), b.mul(im, im));
    Value nrm = sqrt(b.reduce(mag2, b.zeros(Type{dt, {}}), {0}, "stablehlo.add"));
    nrm = sel(eq(nrm, fv(0)), fv(1), nrm);
    re = b.div(re, across_cols(nrm));
    im = b.div(im, across_cols(nrm));
    mag2 = b.add(b.mul(re, re), b.mul(im, im));
    Value mx = b.reduce(mag2, b.lowest(dt), {0}, "stablehlo.maximum");
    Value r = rows();
    Value kk = b.reduce(sel(eq(mag2, across_cols(mx)), r, b.full_int(n, DType::I64, {n, n})),
                        b.highest(DType::I64), {0}, "stablehlo.minimum");
    Value hit = eq(r, across_cols(kk));
    Value zm = b.zeros(Type{dt, {n, n}});
    Value fr = b.reduce(sel(hit, re, zm), b.zeros(Type{dt, {}}), {0}, "stablehlo.add");
    Value gi = b.reduce(sel(hit, im, zm), b.zeros(Type{dt, {}}), {0}, "stablehlo.add");
    Value rr = hypot(fr, gi);
    Value safe = sel(eq(rr, fv(0)), fv(1), rr);
    Value cs = b.div(fr, safe), sn = b.div(gi, safe);
    // The rotation's sign: MKL's sgeev takes the sign of the real part
    // (LAPACK 3.10's lartg), its dgeev only where that part is the larger
    // (the older lartg); measured on random matrices against CPU PyTorch.
    Value neg = lt(cs, fv(0));
    if (dt == DType::F64) neg = b.and_(neg, lt(b.abs(gi), b.abs(fr)));
    cs = sel(neg, b.neg(cs), cs);
    sn = sel(neg, b.neg(sn), sn);
    Value g0 = eq(gi, fv(0)), f0 = b.and_(b.not_(g0), eq(fr, fv(0)));
    cs = sel(g0, fv(1), sel(f0, fv(0), cs));
    sn = sel(g0, fv(0), sel(f0, dt == DType::F64 ? fv(1) : sign(fv(1), gi), sn));
    Value first = lt(fv(0), wi);
    cs = sel(first, cs, fv(1));
    sn = sel(first, sn, fv(0));
    // (re + i im)(cs - i sn)
    Value C = across_cols(cs), S = across_cols(sn);
    Value nre = b.add(b.mul(re, C), b.mul(im, S));
    Value nim = b.sub(b.mul(im, C), b.mul(re, S));
    nim = sel(b.and_(hit, across_cols(first)), zm, nim);
    nim = sel(across_cols(eq(wi, fv(0))), zm, nim);
    // One value for both vectors of a pair: without the barrier XLA may
    // fuse (and round, with or without FMA) each copy differently.
    Value Vt = mT(b, b.emit1("stablehlo.optimization_barrier", {b.complex(nre, nim)}, Type{ct, {n, n}}));
    Value prev_rows = b.pad(b.slice(Vt, {0, 0}, {n - 1, n}), b.zeros(Type{ct, {}}), {1, 0}, {0, 0});
    Value conj_prev = b.complex(b.real(prev_rows), b.neg(b.imag(prev_rows)));
    Vt = sel(down_rows(lt(wi, fv(0))), conj_prev, Vt);
    return mT(b, Vt);
  }

  // ---- the complex path (zgeev: zgehrd, zlahqr, ztrevc) ---------------------------
  // The type of `like` for x: a real x as complex where `like` is complex.
  Value lift(Value x, Value like) {
    return hlo::is_complex(b.dtype(like)) && !hlo::is_complex(b.dtype(x)) ? cx(x) : x;
  }
  Value conj_if(Value z) { return hlo::is_complex(b.dtype(z)) ? conj(z) : z; }

  // larfg(alpha, x) for real or complex alpha: {beta (real, in alpha's
  // type), tau, the scale for x}; tau = 0 (and x kept) when there is nothing
  // to annihilate.
  std::vector<Value> larfg(Value alpha, Value xnorm) {
    const Type t = b.type(alpha);
    Value ar = b.real(alpha), ai = b.imag(alpha);
    Value zero = b.and_(eq(xnorm, f(0)), eq(ai, f(0)));
    Value beta = b.neg(sign(hypot(hypot(ar, ai), xnorm), ar));
    Value sb = sel(zero, f(1), beta);
    Value tr = b.div(b.sub(beta, ar), sb);
    Value tau = sel(zero, b.zeros(t), hlo::is_complex(t.dtype) ? b.complex(tr, b.neg(b.div(ai, sb))) : tr);
    Value one = b.constant(1, t.dtype);
    Value scal = sel(zero, one, b.div(one, sel(zero, one, b.sub(alpha, lift(beta, alpha)))));
    return {sel(zero, alpha, lift(beta, alpha)), tau, scal};
  }

  // ---- gehrd / orghr ---------------------------------------------------------
  // A := H^H A H with H = I - tau v v^H for columns ilo..ihi-1 (for complex
  // A the last one only makes its subdiagonal element real); returns {H, Q}.
  std::pair<Value, Value> hessenberg(Value a, Value ilo, Value ihi) {
    const DType mt = b.dtype(a);
    Value q = b.convert(eye(b, dt, {}, n, n), mt);
    auto out = b.while_loop(
        {a, q, ilo, ihi},
        [this](Builder&, const std::vector<Value>& s) { return std::vector<Value>{lt(s[2], s[3])}; },
        [this, mt](Builder&, const std::vector<Value>& s) {
          Value H = s[0], Q = s[1], i = s[2], hi = s[3];
          Value ix = idx();
          Value x = col(H, i);
          Value i1 = b.add(i, i64(1));
          Value alpha = elem(x, i1);
          Value tail = b.and_(le(vec(b.add(i, i64(2))), ix), le(ix, vec(hi)));
          Value xnorm = sqrt(sum_of(sel(tail, sq(x), fv(0))));
          auto g = larfg(alpha, xnorm);
          Value zc = b.zeros(Type{mt, {n}});
          Value v = sel(eq(ix, vec(i1)), b.full(1, mt, {n}), sel(tail, b.mul(x, cvec(g[2])), zc));
          Value vh = conj_if(v);
          // From the left with conj(tau), from the right with tau.
          H = b.sub(H, outer(b.mul(v, cvec(conj_if(g[1]))), vecmat(vh, H)));
          H = b.sub(H, outer(matvec(H, v), b.mul(vh, cvec(g[1]))));
          Q = b.sub(Q, outer(matvec(Q, v), b.mul(vh, cvec(g[1]))));
          Value cnew = col(H, i);
          cnew = sel(eq(ix, vec(i1)), cvec(g[0]), sel(tail, zc, cnew));
          H = set_col(H, i, cnew);
          return std::vector<Value>{H, Q, i1, hi};
        });
    // Below the subdiagonal only rounding is left (and exact zeros outside ilo..ihi).
    Value H = sel(le(rows(), b.add(cols(), b.full_int(1, DType::I64, {n, n}))), out[0], b.zeros(Type{mt, {n, n}}));
    return {H, out[1]};
  }

  // Returns {T, Z, w, failed}.
  std::vector<Value> complex_schur(Value h, Value z, Value ilo, Value ihi) {
    Value w = diag_of(h, 0);
    auto out = b.while_loop(
        {h, z, w, w, ihi, ilo, i64(0), i64(0), b.constant_bool(false), ilo, ihi},
        [this](Builder&, const std::vector<Value>& s) {
          return std::vector<Value>{b.and_(le(s[kLo], s[kI]), b.not_(s[kFail]))};
        },
        [this](Builder&, const std::vector<Value>& s) { return zqr_step(s); });
    return {out[kH], out[kZ], out[kWr], out[kFail]};
  }

  std::vector<Value> zqr_step(const std::vector<Value>& s) {
    Value H = s[kH], Z = s[kZ], w = s[kWr], i = s[kI], l = s[kL];
    Value lo = s[kLo], hi = s[kHi];
    Value ix = idx();
    Value nh = b.convert(b.add(b.sub(hi, lo), i64(1)), dt);
    Value smlnum = b.mul(f(safmin), b.div(nh, f(ulp)));
    {
      Value d = diag_of(H, 0), sub = diag_of(H, 1), sup = diag_of(H, -1);
      Value hk = cabs1(sub), dprev = shifted(d, -1);
      Value tst = b.add(cabs1(dprev), cabs1(d));
      Value extra = b.add(sel(le(vec(lo), b.sub(ix, b.full_int(2, DType::I64, {n}))), b.abs(b.real(shifted(sub, -1))), fv(0)),
                          sel(le(b.add(ix, b.full_int(1, DType::I64, {n})), vec(hi)), b.abs(b.real(shifted(sub, 1))), fv(0)));
      tst = sel(eq(tst, fv(0)), b.add(tst, extra), tst);
      Value ab = b.max(hk, cabs1(sup)), ba = b.min(hk, cabs1(sup));
      Value dd = cabs1(b.sub(dprev, d));
      Value aa = b.max(cabs1(d), dd), bb = b.min(cabs1(d), dd);
      Value ss = b.add(aa, ab);
      Value safe_ss = sel(eq(ss, fv(0)), fv(1), ss);
      Value small = b.and_(le(b.abs(b.real(sub)), b.mul(fv(ulp), tst)),
                           le(b.mul(ba, b.div(ab, safe_ss)),
                              b.max(vec(smlnum), b.mul(fv(ulp), b.mul(bb, b.div(aa, safe_ss))))));
      Value ok = b.or_(le(hk, vec(smlnum)), small);
      ok = b.and_(ok, b.and_(lt(vec(l), ix), le(ix, vec(i))));
      l = b.max(max_of(sel(ok, ix, b.full_int(-1, DType::I64, {n}))), l);
    }
    Value czero = b.zeros(Type{ct, {}});
    {
      Value lm1 = max0(b.sub(l, i64(1)));
      H = put(H, l, lm1, sel(lt(lo, l), czero, at(H, l, lm1)));
    }
    Value deflate = le(i, l);
    w = sel(deflate, put_elem(w, i, at(H, i, i)), w);
    Value im1 = max0(b.sub(i, i64(1)));
    Value kdefl = b.add(s[kDefl], i64(1));
    // The shift.
    Value t;
    {
      Value exc_i = eq(b.rem(kdefl, i64(20)), i64(0));
      Value exc_l = b.and_(b.not_(exc_i), eq(b.rem(kdefl, i64(10)), i64(0)));
      Value l1 = b.min(b.add(l, i64(1)), i64(n - 1));
      Value ei = b.add(cx(b.mul(f(0.75), b.abs(b.real(at(H, i, im1))))), at(H, i, i));
      Value el = b.add(cx(b.mul(f(0.75), b.abs(b.real(at(H, l1, l))))), at(H, l, l));
      // Wilkinson's.
      Value tw = at(H, i, i);
      Value u = b.mul(sqrt(at(H, im1, i)), sqrt(at(H, i, im1)));
      Value su = cabs1(u);
      Value x = b.mul(b.constant(0.5, ct), b.sub(at(H, im1, im1), tw));
      Value sx = cabs1(x);
      Value sm = b.max(su, sx);
      Value safe_sm = cx(sel(eq(sm, f(0)), f(1), sm));
      Value xs = b.div(x, safe_sm), us = b.div(u, safe_sm);
      Value y = b.mul(safe_sm, sqrt(b.add(b.mul(xs, xs), b.mul(us, us))));
      Value xsx = b.div(x, cx(sel(eq(sx, f(0)), f(1), sx)));
      Value flip = b.and_(lt(f(0), sx), lt(b.add(b.mul(b.real(xsx), b.real(y)), b.mul(b.imag(xsx), b.imag(y))), f(0)));
      y = sel(flip, b.neg(y), y);
      Value xy = b.add(x, y);
      Value wil = sel(eq(su, f(0)), tw, b.sub(tw, b.mul(u, b.div(u, sel(eq(xy, czero), b.constant(1, ct), xy)))));
      t = sel(exc_i, ei, sel(exc_l, el, wil));
    }
    // Where to start: the last m in (l, i-1] where H(m, m-1) is negligible
    // with the bulge's first column, else l.
    Value m, v1, v2;
    {
      Value d = diag_of(H, 0), sub = diag_of(H, 1);
      Value dup = shifted(d, 1);
      Value h11s = b.sub(d, cvec(t));
      Value h21 = b.real(shifted(sub, 1));
      Value ss = b.add(cabs1(h11s), b.abs(h21));
      ss = sel(eq(ss, fv(0)), fv(1), ss);
      h11s = b.div(h11s, cx(ss));
      h21 = b.div(h21, ss);
      Value test = le(b.mul(b.abs(b.real(sub)), b.abs(h21)), b.mul(fv(ulp), b.mul(cabs1(h11s), b.add(cabs1(d), cabs1(dup)))));
      Value okm = b.and_(b.or_(eq(ix, vec(l)), test), b.and_(le(vec(l), ix), le(ix, vec(im1))));
      m = b.min(b.max(max_of(sel(okm, ix, b.full_int(-1, DType::I64, {n}))), l), i64(n - 1));
      v1 = elem(h11s, m);
      v2 = cx(elem(h21, m));
    }
    Value kstart = sel(deflate, i, m);
    auto sweep = b.while_loop(
        {H, Z, kstart, v1, v2, m, l, i},
        [this](Builder&, const std::vector<Value>& u) { return std::vector<Value>{lt(u[2], u[7])}; },
        [this](Builder&, const std::vector<Value>& u) { return zchase(u); });
    H = sweep[0];
    Z = sweep[1];
    // Make H(i, i-1) real.
    {
      Value tmp = at(H, i, im1);
      Value fix = b.and_(b.not_(deflate), ne(b.imag(tmp), f(0)));
      Value rt = b.abs(tmp);
      Value ph = b.div(tmp, cx(sel(eq(rt, f(0)), f(1), rt)));
      Value H2 = put(H, i, im1, cx(rt));
      Value r = row(H2, i);
      H2 = set_row(H2, i, sel(lt(vec(i), ix), b.mul(r, cvec(conj(ph))), r));
      Value c = col(H2, i);
      H2 = set_col(H2, i, sel(lt(ix, vec(i)), b.mul(c, cvec(ph)), c));
      Value Z2 = set_col(Z, i, b.mul(col(Z, i), cvec(ph)));
      H = sel(fix, H2, H);
      Z = sel(fix, Z2, Z);
    }
    Value its = b.add(s[kIts], i64(1));
    Value itmax = b.mul(i64(30), b.max(i64(10), b.add(b.sub(hi, lo), i64(1))));
    Value fail = b.and_(b.not_(deflate), lt(itmax, its));
    return {H, Z, w, s[kWi], sel(deflate, b.sub(l, i64(1)), i), sel(deflate, lo, l),
            sel(deflate, i64(0), kdefl), sel(deflate, i64(0), its), fail, lo, hi};
  }

  // One 2-element reflector of the single-shift bulge chase (zlahqr's loop 120).
  std::vector<Value> zchase(const std::vector<Value>& u) {
    Value H = u[0], Z = u[1], k = u[2], v1 = u[3], v2 = u[4], m = u[5], l = u[6], i = u[7];
    Value ix = idx();
    Value km1 = max0(b.sub(k, i64(1)));
    Value k1 = b.add(k, i64(1));
    Value after = lt(m, k);
    Value czero = b.zeros(Type{ct, {}});
    {
      Value padded = b.pad(col(H, km1), czero, {0}, {1});
      Value w = b.dynamic_slice(padded, {k}, {2});
      v1 = sel(after, b.reshape(b.slice(w, {0}, {1}), {}), v1);
      v2 = sel(after, b.reshape(b.slice(w, {1}, {2}), {}), v2);
    }
    auto g = larfg(v1, b.abs(v2));
    Value t1 = g[1];
    Value x2 = b.mul(v2, g[2]);
    {
      Value c = col(H, km1);
      Value cn = sel(b.and_(vec(after), eq(ix, vec(k))), cvec(g[0]), c);
      cn = sel(b.and_(vec(after), eq(ix, vec(k1))), b.zeros(Type{ct, {n}}), cn);
      H = set_col(H, km1, cn);
    }
    Value t2 = cx(b.real(b.mul(t1, x2)));
    // Rows k, k+1 from the left (columns k..), columns k, k+1 from the right
    // (rows ..min(k+2, i)), and Z.
    Value zc = b.zeros(Type{ct, {n}});
    Value ek = sel(eq(ix, vec(k)), b.full(1, ct, {n}), zc);
    Value ek1 = sel(eq(ix, vec(k1)), b.full(1, ct, {n}), zc);
    Value lw = b.add(b.mul(cvec(conj(t1)), row(H, k)), b.mul(cvec(t2), row(H, k1)));  // sum per column
    Value left = b.sub(H, b.add(outer(ek, lw), outer(b.mul(ek1, cvec(x2)), lw)));
    H = sel(le(mat(k), cols()), left, H);
    Value top = b.min(b.add(k, i64(2)), i);
    Value rw = b.add(b.mul(cvec(t1), col(H, k)), b.mul(cvec(t2), col(H, k1)));  // sum per row
    Value right = b.sub(H, b.add(outer(rw, ek), outer(rw, b.mul(ek1, cvec(conj(x2))))));
    H = sel(le(rows(), mat(top)), right, H);
    Value zw = b.add(b.mul(cvec(t1), col(Z, k)), b.mul(cvec(t2), col(Z, k1)));
    Z = b.sub(Z, b.add(outer(zw, ek), outer(zw, b.mul(ek1, cvec(conj(x2))))));
    // A sweep started at m > l rescales to keep H(m, m-1) real.
    {
      Value fix = b.and_(eq(k, m), lt(l, m));
      Value tmp = b.sub(b.constant(1, ct), t1);
      Value at_ = b.abs(tmp);
      tmp = b.div(tmp, cx(sel(eq(at_, f(0)), f(1), at_)));
      Value m1 = b.add(m, i64(1)), m2 = b.add(m, i64(2));
      Value r = rows(), c = cols();
      Value in_set = b.and_(b.and_(le(vec(m), ix), le(ix, vec(i))), ne(ix, vec(m1)));
      Value row_scale = b.and_(down_rows(in_set), lt(r, c));    // H(j, j+1..) *= tmp
      Value col_scale = b.and_(across_cols(in_set), lt(r, c));  // H(..j-1, j) *= conj(tmp)
      Value one = b.full(1, ct, {n, n});
      Value fac = b.mul(sel(row_scale, b.broadcast_in_dim(tmp, {n, n}, {}), one),
                        sel(col_scale, b.broadcast_in_dim(conj(tmp), {n, n}, {}), one));
      fac = sel(b.and_(eq(r, mat(m1)), eq(c, mat(m))), b.broadcast_in_dim(conj(tmp), {n, n}, {}), fac);
      fac = sel(b.and_(b.and_(eq(r, mat(m2)), eq(c, mat(m1))), mat(le(m2, i))), b.broadcast_in_dim(tmp, {n, n}, {}), fac);
      Value zfac = sel(across_cols(in_set), b.broadcast_in_dim(conj(tmp), {n, n}, {}), one);
      H = sel(fix, b.mul(H, fac), H);
      Z = sel(fix, b.mul(Z, zfac), Z);
    }
    return {H, Z, k1, v1, v2, m, l, i};
  }

  // zgeev's normalization: unit norm, then the largest component (the first
  // of them) made real and positive.
  Value normalize_c(Value V) {
    Value mag2 = sq(V);
    Value nrm = sqrt(b.reduce(mag2, b.zeros(Type{dt, {}}), {0}, "stablehlo.add"));
    nrm = sel(eq(nrm, fv(0)), fv(1), nrm);
    V = b.div(V, across_cols(cx(nrm)));
    mag2 = sq(V);
    Value mx = b.reduce(mag2, b.lowest(dt), {0}, "stablehlo.maximum");
    Value r = rows();
    Value kk = b.reduce(sel(eq(mag2, across_cols(mx)), r, b.full_int(n, DType::I64, {n, n})), b.highest(DType::I64), {0},
                        "stablehlo.minimum");
    Value hit = eq(r, across_cols(kk));
    Value vk = b.reduce(sel(hit, V, b.zeros(Type{ct, {n, n}})), b.zeros(Type{ct, {}}), {0}, "stablehlo.add");
    Value ak = sqrt(sq(vk));
    Value ph = b.div(conj(vk), cx(sel(eq(ak, fv(0)), fv(1), ak)));
    V = b.mul(V, across_cols(ph));
    return sel(hit, cx(b.real(V)), V);
  }

  // One matrix, real or complex: {eigenvalues [n] complex, eigenvectors
  // [n, n] complex (or none), failed}.
  std::vector<Value> run(Value a, bool vectors) {
    const bool complex_in = hlo::is_complex(b.dtype(a));
    auto p = balance_permute(a);
    auto sc = balance_scale(p[0], p[1], p[2], p[3]);
    Value ilo = p[2], ihi = p[3];
    auto [H, Q] = hessenberg(sc[0], ilo, ihi);
    Value T, Z, wr, wi, failed;
    if (complex_in) {
      auto schur = complex_schur(H, Q, ilo, ihi);
      T = schur[0], Z = schur[1], wr = b.real(schur[2]), wi = b.imag(schur[2]), failed = schur[3];
    } else {
      auto schur = real_schur(H, Q, ilo, ihi);
      T = schur[0], Z = cx(schur[1]), wr = schur[2], wi = schur[3], failed = schur[4];
    }
    Value w = b.complex(wr, wi);
    if (!vectors) return {w, Value{}, failed};
    Value V = b.dot_general(Z, schur_eigenvectors(T, wr, wi), {}, {}, {1}, {0}, ct, true);
    V = back_transform(V, sc[1], ilo, ihi);
    return {w, complex_in ? normalize_c(V) : normalize(V, wi), failed};
  }
};

// Eigenvalues (and vectors) of every matrix of a [B..., n, n] batch, one
// matrix per loop step; the check for non-finite input and for a QR
// iteration that did not converge is asynchronous.
std::vector<Value> general_eig(Context& c, bool vectors) {
  Builder& b = c.b;
  const char* api = vectors ? "linalg.eig" : "linalg.eigvals";
  Value a = matrix_arg(c, 0, api, true, true);
  const Dims d = b.dims(a);
  const int64_t r = static_cast<int64_t>(d.size());
  const int64_t n = d[r - 1];
  const Dims batch = batch_of(d);
  const bool complex_in = hlo::is_complex(b.dtype(a));
  const DType dt = hlo::real_type(b.dtype(a));
  const DType ct = dt == DType::F32 ? DType::C64 : DType::C128;
  int64_t nb = 1;
  for (int64_t s : batch) nb *= s;
  const Dims wd = cat(batch, {n});
  if (nb == 0 || n == 0) return {b.zeros(Type{ct, wd}), b.zeros(Type{ct, d})};
  Value fin = complex_in ? b.and_(b.is_finite(b.real(a)), b.is_finite(b.imag(a))) : b.is_finite(a);
  Value finite = b.reduce(fin, b.constant_bool(true), seq(0, r), "stablehlo.and");
  c.args.check(finite, std::string(exec::kRuntimeErrorCheck) + "torch." + api +
                           ": input tensor should not contain infs or NaNs.");
  Value flat = b.reshape(a, {nb, n, n});
  // Non-finite input would not converge: run on zeros instead.
  flat = b.select(finite, flat, b.zeros(b.type(flat)));
  auto out = b.while_loop(
      {flat, b.zeros(Type{ct, {nb, n}}), b.zeros(Type{ct, {nb, n, n}}), b.constant_bool(false),
       b.constant_int(0, DType::I64)},
      [nb](Builder& rb, const std::vector<Value>& s) {
        return std::vector<Value>{rb.compare(Cmp::LT, s[4], rb.constant_int(nb, DType::I64))};
      },
      [n, dt, vectors](Builder& rb, const std::vector<Value>& s) {
        GeneralEig e(rb, n, dt);
        Value z = e.i64(0);
        Value m = rb.reshape(rb.dynamic_slice(s[0], {s[4], z, z}, {1, n, n}), {n, n});
        auto res = e.run(m, vectors);
        Value W = rb.dynamic_update_slice(s[1], rb.reshape(res[0], {1, n}), {s[4], z});
        Value V = vectors ? rb.dynamic_update_slice(s[2], rb.reshape(res[1], {1, n, n}), {s[4], z, z}) : s[2];
        return std::vector<Value>{s[0], W, V, rb.or_(s[3], res[2]), rb.add(s[4], e.i64(1))};
      });
  c.args.check(b.not_(out[3]), std::string(exec::kRuntimeErrorCheck) + "torch." + api +
                                   ": The algorithm failed to converge because the input matrix is ill-conditioned "
                                   "or has too many repeated eigenvalues.");
  return {b.reshape(out[1], wd), b.reshape(out[2], d)};
}

// linalg_eig(A) -> (eigenvalues, eigenvectors)
std::vector<Value> lower_eig(Context& c) { return general_eig(c, true); }

// _linalg_eigvals(A) -> eigenvalues
std::vector<Value> lower_eigvals(Context& c) { return {general_eig(c, false)[0]}; }

// _linalg_svd(A, full_matrices, compute_uv, *, driver) -> (U, S, Vh)
std::vector<Value> lower_svd(Context& c) {
  Builder& b = c.b;
  Value a = matrix_arg(c, 0, "linalg.svd", false);
  const bool full = c.args.bool_(1);
  const bool compute_uv = c.args.bool_(2);
  const Dims& d = c.args.info(0).sizes;
  const int64_t r = static_cast<int64_t>(d.size());
  const int64_t m = d[r - 2], n = d[r - 1];
  (void)m;
  (void)n;
  std::vector<Value> usv = svd_reduced(b, a);
  Value U = usv[0], S = usv[1], V = usv[2];
  if (!compute_uv) return {b.zeros(Type{b.dtype(a), {0}}), S, b.zeros(Type{b.dtype(a), {0}})};
  if (full) {
    U = complete_basis(b, U);
    V = complete_basis(b, V);
  }
  return {U, S, mT(b, V)};
}

}  // namespace

TPU_LOWERINGS(decomposition) {
  reg("aten::linalg_lu_factor_ex", lower_lu_factor_ex);
  reg("aten::linalg_lu", lower_linalg_lu);
  reg("aten::lu_unpack", lower_lu_unpack);
  reg("aten::linalg_lu_solve", lower_lu_solve);
  reg("aten::_linalg_solve_ex", lower_solve_ex);
  reg("aten::linalg_inv_ex", lower_inv_ex);
  reg("aten::_linalg_det", lower_det);
  reg("aten::_linalg_slogdet", lower_slogdet);
  reg("aten::linalg_cholesky_ex", lower_cholesky_ex);
  reg("aten::cholesky", lower_cholesky);
  reg("aten::_cholesky_solve_helper", lower_cholesky_solve);
  reg("aten::cholesky_inverse", lower_cholesky_inverse);
  reg("aten::geqrf", lower_geqrf);
  reg("aten::linalg_householder_product", lower_householder_product);
  reg("aten::linalg_qr", lower_qr);
  reg("aten::ormqr", lower_ormqr);
  reg("aten::_linalg_eigh", lower_eigh);
  reg("aten::_linalg_svd", lower_svd);
  reg("aten::linalg_eig", lower_eig);
  reg("aten::_linalg_eigvals", lower_eigvals);
  reg("aten::linalg_lstsq", lower_lstsq);
  reg("aten::linalg_matrix_exp", lower_matrix_exp);
}

}  // namespace tpu::lowering
