// Ops that build or rearrange whole tensors: fill, zero, cat.
#include "csrc/lowering/common.h"

namespace tpu::lowering {

namespace {

std::vector<Value> lower_fill_scalar(Context& c) {
  const TensorInfo& self = c.args.info(0);
  return one(splat(c.b, c.args.scalar_value(1, to_hlo(self.dtype)), self.sizes));
}

std::vector<Value> lower_fill_tensor(Context& c) {
  const TensorInfo& self = c.args.info(0);
  const TensorInfo& value = c.args.info(1);
  TORCH_CHECK(value.dim() == 0, "fill_ only supports 0-dimension value tensor but got tensor with ",
              value.dim(), " dimensions.");
  return one(splat(c.b, cast(c.b, c.args.tensor(1), self.dtype), self.sizes));
}

std::vector<Value> lower_zero(Context& c) {
  const TensorInfo& self = c.args.info(0);
  return one(c.b.zeros(Type{to_hlo(self.dtype), self.sizes}));
}

// cat(tensors, dim): promotes to the common dtype; 1-D empty tensors are
// skipped (PyTorch's legacy behavior).
std::vector<Value> lower_cat(Context& c) {
  std::vector<TensorInfo> infos = c.args.infos(0);
  std::vector<Value> values = c.args.tensors(0);
  TORCH_CHECK(!infos.empty(), "torch.cat(): expected a non-empty list of Tensors");
  ResultType r;
  for (const TensorInfo& i : infos) r.tensor(i);
  const at::ScalarType t = r.get();
  std::vector<Value> parts;
  const TensorInfo* ref = nullptr;
  for (size_t i = 0; i < infos.size(); ++i) {
    if (infos[i].dim() == 1 && infos[i].sizes[0] == 0) continue;
    if (ref == nullptr) ref = &infos[i];
    parts.push_back(cast(c.b, values[i], t));
  }
  if (parts.empty()) return one(c.b.zeros(Type{to_hlo(t), infos[0].sizes}));
  const int64_t dim = wrap_dim(c.args.int_(1), ref->dim());
  for (size_t i = 0; i < parts.size(); ++i) {
    const Dims& d = c.b.dims(parts[i]);
    TORCH_CHECK(static_cast<int64_t>(d.size()) == ref->dim(),
                "Tensors must have same number of dimensions: got ", ref->dim(), " and ", d.size());
    for (int64_t k = 0; k < ref->dim(); ++k) {
      TORCH_CHECK(k == dim || d[k] == ref->sizes[k],
                  "Sizes of tensors must match except in dimension ", dim, ". Expected size ",
                  ref->sizes[k], " but got size ", d[k], " for tensor number ", i, " in the list.");
    }
  }
  return one(c.b.concatenate(parts, dim));
}

}  // namespace

TPU_LOWERINGS(tensor) {
  reg("aten::fill.Scalar", lower_fill_scalar);
  reg("aten::fill.Tensor", lower_fill_tensor);
  reg("aten::zero", lower_zero);
  reg("aten::cat", lower_cat);
}

}  // namespace tpu::lowering
