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

// addmm(self, mat1, mat2, beta, alpha) = beta * self + alpha * (mat1 @ mat2)
std::vector<Value> lower_addmm(Context& c) {
  const TensorInfo& m1 = c.args.info(1);
  check_mm(m1, c.args.info(2), "addmm");
  const at::ScalarType t = m1.dtype;
  Builder& b = c.b;
  Value prod = contract(c, c.args.tensor(1), c.args.tensor(2), {}, 1, 0, t);
  const at::ScalarType compute = opmath_type(t);
  Value r = cast(b, prod, compute);
  const Dims& dims = b.dims(r);
  if (!c.args.scalar(4).equal(1)) r = b.mul(r, splat(b, c.args.scalar_value(4, to_hlo(compute)), dims));
  const c10::Scalar beta = c.args.scalar(3);
  broadcast_shapes(c.args.info(0).sizes, dims);
  if (!beta.equal(0)) {  // beta == 0 ignores self, nan and inf included
    Value self = b.broadcast_to(cast(b, c.args.tensor(0), compute), dims);
    if (!beta.equal(1)) self = b.mul(self, splat(b, c.args.scalar_value(3, to_hlo(compute)), dims));
    r = b.add(r, self);
  }
  return one(cast(b, r, t));
}

}  // namespace

TPU_LOWERINGS(linalg) {
  reg("aten::mm", lower_mm);
  reg("aten::bmm", lower_bmm);
  reg("aten::addmm", lower_addmm);
}

}  // namespace tpu::lowering
