// Matrix helpers of the decompositions (decomposition.cpp) that the general
// eigendecomposition (eig.cpp) shares.
#pragma once

#include <cstdint>
#include <initializer_list>

#include "csrc/lowering/common.h"

namespace tpu::lowering::matrix {

Dims seq(int64_t from, int64_t to);                            // from, ..., to - 1
Dims cat(Dims a, std::initializer_list<int64_t> tail);         // a followed by tail
Dims batch_of(const Dims& d);                                  // all dims but the last two
Value mT(Builder& b, Value x);                                 // the last two dims swapped
Value eye(Builder& b, DType dt, const Dims& batch, int64_t m, int64_t n);
// Rows idx[..., i] of x [B..., m, k] -> [B..., len(idx), k].
Value take_rows(Builder& b, Value x, Value idx);
// The matrices of argument i (float32 / float64, or complex where
// complex_ok), with PyTorch's errors for other inputs.
Value matrix_arg(Context& c, size_t i, const char* api, bool square, bool complex_ok = false);

}  // namespace tpu::lowering::matrix
