// Matrix decompositions and the linear algebra built on them, as StableHLO
// loops rather than plugin-specific custom calls (LAPACK on the CPU plugin,
// cuSOLVER on GPU), so the same program runs on every PJRT device:
//
//   LU with partial pivoting (LAPACK getrf's pivots and info): lu_factor,
//     lu, lu_unpack, lu_solve, solve, inv, det, slogdet;
//   Householder QR (geqrf's reflectors and tau): geqrf, qr,
//     householder_product (orgqr), ormqr;
//   the symmetric eigendecomposition by cyclic Jacobi rotations: eigh (the
//     general one, by LAPACK geev's steps, is eig.cpp);
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
#include "csrc/lowering/matrix.h"

namespace tpu::lowering {

using hlo::Cmp;

// Matrix helpers, some shared with eig.cpp (matrix.h).
namespace matrix {

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

// The matrices of argument i: float32 / float64 as LAPACK has them (and
// complex where complex_ok).
Value matrix_arg(Context& c, size_t i, const char* api, bool square, bool complex_ok) {
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

}  // namespace matrix

using namespace matrix;

namespace {

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
        // for complex A, as izamax measures). As idamax compares, a NaN is
        // never larger: it is passed over, unless it is A[j, j], the first
        // one, which then nothing beats (and its NaNs spread over the rest
        // of the factors, as in LAPACK).
        const DType rdt = hlo::real_type(dt);
        Value cj = take_col(rb, A, j);
        Value size = hlo::is_complex(dt) ? rb.add(rb.abs(rb.real(cj)), rb.abs(rb.imag(cj))) : rb.abs(cj);
        Value candidate = rb.compare(Cmp::GE, rid, jm);
        Value mag = rb.select(rb.and_(candidate, rb.compare(Cmp::EQ, size, size)), size, rb.full(-1, rdt, md));
        Value best = rb.reduce(mag, rb.constant(-1, rdt), {nb}, "stablehlo.maximum");
        Value at_best = rb.and_(candidate, rb.compare(Cmp::EQ, mag, per_batch(rb, best, md)));
        Value p = rb.reduce(rb.select(at_best, rid, rb.full_int(m, DType::I64, md)), rb.constant_int(m, DType::I64),
                            {nb}, "stablehlo.minimum");
        Value first = take_elem(rb, size, j);
        Value keep_j = rb.or_(rb.compare(Cmp::NE, first, first),
                              rb.compare(Cmp::GE, p, rb.full_int(m, DType::I64, batch)));
        p = rb.select(keep_j, rb.broadcast_in_dim(j, batch, {}), p);
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
  Value signs = b.unary("stablehlo.sign", p.diag);
  // (a NaN's sign is 0, as torch.sign gives it: CPU's sign of a matrix holding NaN)
  if (!hlo::is_complex(p.dt)) signs = b.select(b.compare(Cmp::NE, p.diag, p.diag), zeros_like(b, signs), signs);
  Value sgn = b.reduce(signs, b.constant(1, p.dt), {p.last}, "stablehlo.multiply");
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

// A NaN in `a` is LAPACK's error (CPU's torch.linalg.LinAlgError), raised
// by a device-side check when the result is read.
void check_no_nan(Context& c, Value a, const std::string& message) {
  Builder& b = c.b;
  if (b.type(a).numel() == 0) return;
  Value nan = b.reduce(b.compare(Cmp::NE, a, a), b.constant_bool(false), seq(0, b.rank(a)), "stablehlo.or");
  c.args.check(b.not_(nan), std::string(exec::kLinAlgErrorCheck) + message);
}

// Per matrix of a [B..., m, n]: whether every element is finite ([B...]).
Value all_finite(Builder& b, Value a) {
  const int64_t r = b.rank(a);
  return b.reduce(b.is_finite(a), b.constant_bool(true), {r - 2, r - 1}, "stablehlo.and");
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
  const bool lower = uplo == "L" || uplo == "l";
  // A NaN in the triangle read is LAPACK's failure to converge (syevd's info > 0).
  check_no_nan(c, band(b, a, lower, 0),
               "linalg.eigh: The algorithm failed to converge because the input matrix is ill-conditioned or has "
               "too many repeated eigenvalues.");
  auto [w, V] = jacobi_eigh(b, symmetrize(b, a, lower));
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
    // (A holding inf or NaN: no solution, NaN, as CPU's gelsy leaves it)
    solution = b.select(per_batch(b, all_finite(b, A), b.dims(solution)), solution, b.full(NAN, dt, b.dims(solution)));
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
  // A matrix holding inf or NaN: NaN everywhere, as on CPU (whose scaling by
  // an infinite norm leaves nothing finite).
  Value result = b.select(per_batch(b, all_finite(b, a), d), out[1], b.full(NAN, dt, d));
  return one(cast(b, result, in.dtype));
}

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
  check_no_nan(c, a, "linalg.svd: The algorithm failed to converge because the input matrix contained non-finite "
                     "values.");
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
  reg("aten::linalg_lstsq", lower_lstsq);
  reg("aten::linalg_matrix_exp", lower_matrix_exp);
}

}  // namespace tpu::lowering
