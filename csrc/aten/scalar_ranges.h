// Scalar arguments that CPU's kernels convert to the op's dtype with a range
// check (c10::checked_convert): x.fill_(300) on a uint8 tensor, clamp(max=
// 2**31) of an int32 one or fill_(1e300) of a float32 one are CPU's
// RuntimeError "value cannot be converted to type ... without overflow".
// A Python number that meets a tensor as an operand (x + 2**63) becomes a
// wrapped 0-dim tensor instead and wraps (EagerProgram::scalar); so do the
// ops not listed here. Such Scalars are run-time operands of a kept
// program, so the check runs on every call, not when the program is built.
#pragma once

#include <ATen/core/ivalue.h>

#include <string>
#include <vector>

namespace tpu {

struct ScalarRangeRule {
  std::vector<size_t> scalars;  // the checked Scalar arguments
  std::vector<size_t> tensors;  // the tensors whose (promoted) dtype the Scalars are converted to
  // Whether a Scalar of a higher category (a float with an integer tensor)
  // promotes the result instead (TensorIterator's ops); fills truncate it.
  bool promotes = false;
  // sub's alpha: CPU adds -alpha times the other (so -2**31 fits an int32 tensor, 2**31 too).
  bool negated = false;
  // Converted to the dtype's opmath type (threshold: float for float16).
  bool opmath = false;
  // An integer is first taken as an int64 (pow's exponent, hardtanh's bounds).
  bool int64_first = false;
  // Not checked for float32 and float64 tensors (pow's exponent is a double there).
  bool float_unchecked = false;
};

// The rule of the op `functional` names, or null.
const ScalarRangeRule* scalar_range_rule(const std::string& functional);

// Raises CPU's error for a Scalar argument out of its dtype's range.
void check_scalar_ranges(const ScalarRangeRule& rule, const std::vector<c10::IValue>& args);

}  // namespace tpu
