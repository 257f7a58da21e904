// Reading and writing strided views of a storage value.
//
// A tpu storage holds one immutable device value; a tensor is a strided view
// of it (sizes, strides, storage offset), exactly as on CPU. Reading a view
// lowers to pad/slice/reshape/transpose/broadcast of the flat storage value
// where the strides allow it, and to a gather otherwise. Writing a view
// computes the whole new storage value (dynamic_update_slice or scatter).
//
// The storage offset may be a runtime operand (`Offset::dynamic`), so that
// `x[i]` for many i is one program, not one per i.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "csrc/hlo/builder.h"

namespace tpu::exec {

struct Offset {
  int64_t value = 0;     // used when `dynamic` is not valid
  hlo::Value dynamic;    // rank-0 i64 operand
  bool is_static() const { return !dynamic.valid(); }
};

// The view (sizes, strides, offset) of `flat`, a rank-1 value.
hlo::Value read_strided(hlo::Builder& b, hlo::Value flat, const hlo::Dims& sizes,
                        const hlo::Dims& strides, const Offset& offset);

// The view of `flat` whose strides and offset are run-time values (rank-0
// i64; `strides[k]` is unused where sizes[k] <= 1): one gather. `place`,
// when given, maps the view's element indices (i64, of the view's dims) to
// where `flat` holds those elements (a padded value: bucketed programs).
hlo::Value read_strided_at_run_time(hlo::Builder& b, hlo::Value flat, const hlo::Dims& sizes,
                                    const std::vector<hlo::Value>& strides, hlo::Value offset,
                                    const std::function<hlo::Value(hlo::Value)>& place = {});

// `flat` with the view (sizes, strides, offset) replaced by `values` (whose
// dims are `sizes`). Views with stride-0 (expanded) dimensions of size > 1
// cannot be written (as in PyTorch, the elements would alias).
hlo::Value write_strided(hlo::Builder& b, hlo::Value flat, hlo::Value values,
                         const hlo::Dims& sizes, const hlo::Dims& strides, const Offset& offset);

// Whether a view with these sizes/strides covers its storage densely from 0
// in row-major order (no data movement needed beyond a reshape).
bool is_dense_row_major(const hlo::Dims& sizes, const hlo::Dims& strides);

}  // namespace tpu::exec
