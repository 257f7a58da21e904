// The classical orthogonal polynomials of torch.special: Chebyshev T, U, V, W
// (and their shifted forms on [0, 1]), Hermite H and He, Laguerre L and
// Legendre P, evaluated at x for integer degrees n.
//
// As on the CPU, each runs its three-term recurrence up to the element's
// degree, after the closed forms for special points (|x| = 1, x = 0) and, for
// the Chebyshev kinds inside (-1, 1) at high degree, the trigonometric form.
// On the device the recurrence is one while loop over the tensor, running to
// the largest degree that needs it; elements whose degree is reached stop
// changing.
#include <cmath>

#include "csrc/lowering/common.h"

namespace tpu::lowering {

namespace {

using hlo::Cmp;

enum class Kind { T, U, V, W, H, He, L, P };

struct Poly {
  Kind kind;
  bool shifted = false;  // evaluate at 2x - 1
};

Value k(Builder& b, double v, Value like) { return b.full(v, b.dtype(like), b.dims(like)); }

// P_1(y).
Value first_degree(Builder& b, Kind kind, Value y) {
  switch (kind) {
    case Kind::T: case Kind::He: case Kind::P: return y;
    case Kind::U: case Kind::H: return b.add(y, y);
    case Kind::V: return b.sub(b.add(y, y), k(b, 1, y));
    case Kind::W: return b.add(b.add(y, y), k(b, 1, y));
    case Kind::L: return b.sub(k(b, 1, y), y);
  }
  return y;
}

// P_m(y) from p = P_{m-2} and q = P_{m-1}; j = m - 1 as a float like y.
Value step(Builder& b, Kind kind, Value y, Value p, Value q, Value j) {
  switch (kind) {
    case Kind::T: case Kind::U: case Kind::V: case Kind::W:
      return b.sub(b.mul(b.add(y, y), q), p);
    case Kind::H:  // 2y q - 2j p
      return b.sub(b.mul(b.add(y, y), q), b.mul(b.add(j, j), p));
    case Kind::He:  // y q - j p
      return b.sub(b.mul(y, q), b.mul(j, p));
    case Kind::L:  // ((2j + (1 - y)) q - j p) / (j + 1)
      return b.div(b.sub(b.mul(b.add(b.add(j, j), b.sub(k(b, 1, y), y)), q), b.mul(j, p)), b.add(j, k(b, 1, j)));
    case Kind::P:  // ((2j + 1) y q - j p) / (j + 1)
      return b.div(b.sub(b.mul(b.mul(b.add(b.add(j, j), k(b, 1, j)), y), q), b.mul(j, p)), b.add(j, k(b, 1, j)));
  }
  return q;
}

// The recurrence from degree 2 up to n (elements with n < 2 keep P_1).
Value recurrence(Builder& b, Kind kind, Value y, Value n, Value need) {
  const DType ct = b.dtype(y);
  const Dims& shape = b.dims(y);
  Dims all;
  for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d) all.push_back(d);
  Value todo = b.select(need, n, b.zeros(b.type(n)));
  Value top = all.empty() ? todo : b.reduce(todo, b.constant_int(0, DType::I64), all, "stablehlo.maximum");
  // state: (m, P_{m-2}, P_{m-1}, y, n, top)
  auto r = b.while_loop(
      {b.constant_int(2, DType::I64), b.full(1, ct, shape), first_degree(b, kind, y), y, n, top},
      [](Builder& rb, const std::vector<Value>& v) {
        return std::vector<Value>{rb.compare(Cmp::LE, v[0], v[5])};
      },
      [kind](Builder& rb, const std::vector<Value>& v) {
        const Dims& sh = rb.dims(v[3]);
        Value m = rb.broadcast_in_dim(v[0], sh, {});
        Value j = rb.convert(rb.sub(m, rb.full_int(1, DType::I64, sh)), rb.dtype(v[3]));
        Value r = step(rb, kind, v[3], v[1], v[2], j);
        Value go = rb.compare(Cmp::LE, m, v[4]);
        return std::vector<Value>{rb.add(v[0], rb.constant_int(1, DType::I64)), rb.select(go, v[2], v[1]),
                                  rb.select(go, r, v[2]), v[3], v[4], v[5]};
      });
  return r[2];
}

std::vector<Value> lower_polynomial(Context& c, Poly poly) {
  ResultType rt;
  promote_arg(rt, c, 0);
  promote_arg(rt, c, 1);
  at::ScalarType out = rt.get();
  if (is_integral(out)) out = default_float();
  const at::ScalarType compute = opmath_type(out);
  const Dims shape = broadcast_shapes(arg_shape(c, 0), arg_shape(c, 1));
  Builder& b = c.b;
  Value x = operand(c, 0, out, compute, shape);
  // The degree, truncated to an integer as the CPU kernel does.
  Value n = c.args.is_tensor(1) && is_integral(c.args.info(1).dtype)
                ? b.convert(operand(c, 1, at::kLong, shape), DType::I64)
                : b.convert(operand(c, 1, compute, shape), DType::I64);
  Value nf = b.convert(n, b.dtype(x));
  const Kind kind = poly.kind;
  Value y = poly.shifted ? b.sub(b.add(x, x), k(b, 1, x)) : x;
  auto eq = [&](Value v, double w) { return b.compare(Cmp::EQ, v, k(b, w, v)); };
  auto n_is = [&](int64_t w) { return b.compare(Cmp::EQ, n, b.full_int(w, DType::I64, shape)); };
  Value even = b.compare(Cmp::EQ, b.rem(n, b.full_int(2, DType::I64, shape)), b.zeros(b.type(n)));
  Value one_ = k(b, 1, x);
  Value n1 = b.add(nf, one_);            // n + 1
  Value n2 = b.add(b.add(nf, nf), one_);  // 2n + 1
  auto sign = [&](Value v) { return b.select(even, v, b.neg(v)); };
  // The value at y = 1 and y = -1 (x = 1 and x = 0 when shifted).
  Value at_pos = one_, at_neg = sign(one_);
  switch (kind) {
    case Kind::U: at_pos = n1; at_neg = sign(n1); break;
    case Kind::V: at_neg = sign(n2); break;
    case Kind::W: at_pos = n2; at_neg = sign(one_); break;
    default: break;
  }
  Value is_pos = poly.shifted ? eq(x, 1) : eq(y, 1);
  Value is_neg = poly.shifted ? eq(x, 0) : eq(y, -1);
  const bool chebyshev = kind == Kind::T || kind == Kind::U || kind == Kind::V || kind == Kind::W;
  const bool ends = chebyshev || kind == Kind::P;  // closed forms at |y| = 1

  Value need = b.compare(Cmp::GE, n, b.full_int(2, DType::I64, shape));
  Value trig_region;
  Value trig;
  if (chebyshev) {
    // Above this degree and inside (-1, 1) the CPU uses the trigonometric form.
    int64_t above = kind == Kind::T ? 6 : 8;
    if (poly.shifted) above = kind == Kind::W ? 4 : 6;
    trig_region = b.and_(b.compare(Cmp::GT, n, b.full_int(above, DType::I64, shape)),
                         b.compare(Cmp::LT, b.abs(y), one_));
    // At high degree the result amplifies any error of acos and of the
    // reduction of large arguments: like the CPU's correctly rounded libm,
    // float32 evaluates each function in float64 and rounds it once.
    auto precise = [&](const char* op, Value v) {
      if (b.dtype(v) != DType::F32) return b.unary(op, v);
      return b.convert(b.unary(op, b.convert(v, DType::F64)), DType::F32);
    };
    Value t = precise("chlo.acos", b.select(trig_region, y, b.zeros(b.type(y))));
    Value half = b.div(t, k(b, 2, t));
    auto cos = [&](Value v) { return precise("stablehlo.cosine", v); };
    auto sin = [&](Value v) { return precise("stablehlo.sine", v); };
    Value nh = b.add(nf, k(b, 0.5, nf));
    switch (kind) {
      case Kind::T: trig = cos(b.mul(nf, t)); break;
      case Kind::U:
        trig = b.select(b.compare(Cmp::NE, sin(t), b.zeros(b.type(t))), b.div(sin(b.mul(n1, t)), sin(t)),
                        b.div(b.mul(n1, cos(b.mul(n1, t))), y));
        break;
      case Kind::V:
        trig = b.select(b.compare(Cmp::NE, sin(half), one_),
                        b.div(cos(b.mul(nh, t)), cos(half)), sign(n2));
        break;
      case Kind::W:
        trig = b.select(b.compare(Cmp::NE, cos(half), one_), b.div(sin(b.mul(nh, t)), sin(half)),
                        poly.shifted ? sign(one_) : b.select(b.compare(Cmp::GT, y, b.zeros(b.type(y))), n2, sign(one_)));
        break;
      default: break;
    }
    need = b.and_(need, b.not_(trig_region));
  }
  if (ends) need = b.and_(need, b.not_(b.or_(is_pos, is_neg)));
  if (kind == Kind::L) need = b.and_(need, b.not_(eq(x, 0)));
  if (kind == Kind::H || kind == Kind::He) {
    // Beyond this degree the CPU returns NaN (the recurrence overflows).
    const int64_t limit = b.dtype(x) == DType::F64 ? 512 : 128;
    need = b.and_(need, b.compare(Cmp::LE, n, b.full_int(limit, DType::I64, shape)));
  }

  Value r = recurrence(b, kind, y, n, need);  // P_n for n >= 1 where needed, P_1 elsewhere
  if (kind == Kind::H || kind == Kind::He) {
    const int64_t limit = b.dtype(x) == DType::F64 ? 512 : 128;
    r = b.select(b.compare(Cmp::GT, n, b.full_int(limit, DType::I64, shape)), k(b, NAN, x), r);
  }
  if (chebyshev) r = b.select(trig_region, trig, r);
  r = b.select(n_is(0), one_, r);
  if (ends) r = b.select(is_neg, at_neg, b.select(is_pos, at_pos, r));
  if (kind == Kind::L) r = b.select(eq(x, 0), one_, r);
  r = b.select(b.compare(Cmp::LT, n, b.zeros(b.type(n))), b.zeros(b.type(r)), r);
  return one(cast(b, r, out));
}

}  // namespace

TPU_LOWERINGS(polynomial) {
  struct Entry {
    const char* name;
    Poly poly;
  };
  static const Entry entries[] = {
      {"chebyshev_polynomial_t", {Kind::T}},
      {"chebyshev_polynomial_u", {Kind::U}},
      {"chebyshev_polynomial_v", {Kind::V}},
      {"chebyshev_polynomial_w", {Kind::W}},
      {"shifted_chebyshev_polynomial_t", {Kind::T, true}},
      {"shifted_chebyshev_polynomial_u", {Kind::U, true}},
      {"shifted_chebyshev_polynomial_v", {Kind::V, true}},
      {"shifted_chebyshev_polynomial_w", {Kind::W, true}},
      {"hermite_polynomial_h", {Kind::H}},
      {"hermite_polynomial_he", {Kind::He}},
      {"laguerre_polynomial_l", {Kind::L}},
      {"legendre_polynomial_p", {Kind::P}},
  };
  // Lowering functions are plain pointers: one per entry, by index.
  static LoweringFn fns[] = {
#define TPU_POLY(i) [](Context& c) { return lower_polynomial(c, entries[i].poly); }
      TPU_POLY(0), TPU_POLY(1), TPU_POLY(2), TPU_POLY(3), TPU_POLY(4),  TPU_POLY(5),
      TPU_POLY(6), TPU_POLY(7), TPU_POLY(8), TPU_POLY(9), TPU_POLY(10), TPU_POLY(11),
#undef TPU_POLY
  };
  for (size_t i = 0; i < std::size(entries); ++i) {
    for (const char* overload : {"", ".x_scalar", ".n_scalar"}) {
      reg((std::string("aten::special_") + entries[i].name + overload).c_str(), fns[i]);
    }
  }
}

}  // namespace tpu::lowering
