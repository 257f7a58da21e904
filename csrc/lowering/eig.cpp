// The eigendecomposition of a general (real or complex) matrix as StableHLO
// loops: linalg_eig and _linalg_eigvals.
#include <cmath>
#include <string>
#include <vector>

#include "csrc/lowering/common.h"
#include "csrc/lowering/matrix.h"

namespace tpu::lowering {

namespace {

using hlo::Cmp;
using namespace matrix;

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

}  // namespace

TPU_LOWERINGS(eig) {
  reg("aten::linalg_eig", lower_eig);
  reg("aten::_linalg_eigvals", lower_eigvals);
}

}  // namespace tpu::lowering
