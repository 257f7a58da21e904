// CPU's rules for the dtypes of an out= variant's outputs where they are not
// TensorIterator's (any dtype the result can be cast to: write_back's rule).
// Reductions and scans that compute in the out tensor's dtype take it as
// their dtype argument (torch.sum(x_float, 0, out=long_tensor) sums the
// values cast to int64); most other reductions, sorts and selections refuse
// an out tensor of any dtype but their result's, each with CPU's message.
#pragma once

#include <ATen/core/ivalue.h>

#include <string>
#include <vector>

namespace tpu {

// Before the lowering of `functional`'s out= variant: where CPU computes in
// the out tensor's dtype, `args` (the variant's) get it as their dtype
// argument; a dtype argument that differs from it is CPU's error.
void out_dtype_as_argument(const std::string& functional, std::vector<c10::IValue>& args,
                           const std::vector<size_t>& out_args);

// Raises CPU's error where the out tensors' dtypes are refused: before the
// lowering (`results` empty) the rules that depend on the input's dtype only,
// which CPU checks before anything else; after it, with the results' dtypes
// (one per out tensor, in order), the rule that they be the out tensors'.
void check_out_dtypes(const std::string& functional, const std::vector<c10::IValue>& args,
                      const std::vector<size_t>& out_args, const std::vector<at::ScalarType>& results);

}  // namespace tpu
