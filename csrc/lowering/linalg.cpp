// Matrix products: mm, bmm, addmm.
#include "csrc/lowering/common.h"

namespace tpu::lowering {

namespace {

// lhs x rhs contracting lhs[lc] with rhs[rc] over batch dims; half and
// bfloat16 accumulate in float.
Value contract(Context& c, Value lhs, Value rhs, const Dims& batch, int64_t lc, int64_t rc,
               at::ScalarType t) {
  const at::ScalarType acc = t == at::kHalf || t == at::kBFloat16 ? at::kFloat : t;
  const bool highest = c.precision == MatmulPrecision::Highest || t == at::kDouble;
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

}  // namespace

TPU_LOWERINGS(linalg) {
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
                               to_hlo(acc), c.precision == MatmulPrecision::Highest);
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
  reg("aten::bmm", lower_bmm);
  reg("aten::addmm", lower_addmm);
}

}  // namespace tpu::lowering
