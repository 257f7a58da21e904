// Complex numbers and FFTs: _fft_r2c / _fft_c2r / _fft_c2c over any dims
// (stablehlo.fft works on the trailing dims, so the FFT dims move last and
// back), conj_physical, complex, polar, angle.
#include <cmath>

#include "csrc/lowering/common.h"

namespace tpu::lowering {

namespace {

enum class FftType { FFT, IFFT, RFFT, IRFFT };

const char* fft_name(FftType t) {
  switch (t) {
    case FftType::FFT: return "FFT";
    case FftType::IFFT: return "IFFT";
    case FftType::RFFT: return "RFFT";
    case FftType::IRFFT: return "IRFFT";
  }
  return "FFT";
}

// Moves `dims` (sorted, unique) to the end; returns the permutation used.
Dims dims_last(int64_t rank, const Dims& dims) {
  Dims perm;
  for (int64_t i = 0; i < rank; ++i) {
    if (std::find(dims.begin(), dims.end(), i) == dims.end()) perm.push_back(i);
  }
  perm.insert(perm.end(), dims.begin(), dims.end());
  return perm;
}

Dims inverse(const Dims& perm) {
  Dims inv(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) inv[perm[i]] = static_cast<int64_t>(i);
  return inv;
}

Value fft_op(Builder& b, Value x, FftType type, const Dims& lengths) {
  Dims out = b.dims(x);
  DType dt = b.dtype(x);
  const size_t r = out.size();
  if (type == FftType::RFFT) {
    out[r - 1] = lengths.back() / 2 + 1;
    dt = dt == DType::F64 ? DType::C128 : DType::C64;
  } else if (type == FftType::IRFFT) {
    out[r - 1] = lengths.back();
    dt = hlo::real_type(dt);
  }
  return b.emit1("stablehlo.fft", {x}, Type{dt, out},
                 std::string("fft_type = #stablehlo<fft_type ") + fft_name(type) +
                     ">, fft_length = " + hlo::array_attr(lengths));
}

// An FFT over the trailing lengths.size() dims of x. stablehlo.fft takes at
// most 3: more are successive transforms (a multi-dim FFT is separable), the
// leading dims moved last for theirs; a real transform's halved dim is in
// the step that makes it (r2c: first) or reads it (c2r: last). XLA's
// inverses divide by their lengths: the steps' product is the whole n.
Value fft_any(Builder& b, Value x, FftType type, const Dims& lengths) {
  const size_t k = lengths.size();
  if (k <= 3) return fft_op(b, x, type, lengths);
  const int64_t r = b.rank(x);
  const int64_t lead = static_cast<int64_t>(k) - 3;
  const int64_t first = r - static_cast<int64_t>(k);
  const Dims lead_lengths(lengths.begin(), lengths.begin() + lead), tail(lengths.begin() + lead, lengths.end());
  auto over_leading = [&](Value v, FftType t) {
    Dims perm;
    for (int64_t d = 0; d < r; ++d) {
      if (d < first || d >= first + lead) perm.push_back(d);
    }
    for (int64_t d = first; d < first + lead; ++d) perm.push_back(d);
    return b.transpose(fft_any(b, b.transpose(v, perm), t, lead_lengths), inverse(perm));
  };
  switch (type) {
    case FftType::RFFT:
      return over_leading(fft_op(b, x, FftType::RFFT, tail), FftType::FFT);
    case FftType::IRFFT:
      return fft_op(b, over_leading(x, FftType::IFFT), FftType::IRFFT, tail);
    default:
      return over_leading(fft_op(b, x, type, tail), type);
  }
}

// PyTorch's normalization modes: 0 none, 1 1/sqrt(n), 2 1/n.
Value normalize(Builder& b, Value x, int64_t mode, double n) {
  if (mode == 0 || n == 0) return x;
  const double scale = mode == 1 ? 1.0 / std::sqrt(n) : 1.0 / n;
  return b.mul(x, b.full(scale, b.dtype(x), b.dims(x)));
}

struct FftDims {
  Dims dims, perm, lengths;
  double n = 1;
};

FftDims fft_dims(Context& c, int64_t rank, const Dims& sizes) {
  FftDims f;
  f.dims = wrap_dims(c.args.ints(1), rank);
  // The last dim given is the halved one of a real transform (r2c, c2r):
  // it stays last, the others in order.
  if (!f.dims.empty()) std::sort(f.dims.begin(), f.dims.end() - 1);
  f.perm = dims_last(rank, f.dims);
  for (int64_t d : f.dims) {
    f.lengths.push_back(sizes[d]);
    f.n *= static_cast<double>(sizes[d]);
  }
  return f;
}

DType complex_of(at::ScalarType t) { return t == at::kDouble || t == at::kComplexDouble ? DType::C128 : DType::C64; }

// _fft_r2c(self, dim, normalization, onesided)
std::vector<Value> lower_fft_r2c(Context& c) {
  const TensorInfo& in = c.args.info(0);
  TORCH_CHECK(c10::isFloatingType(in.dtype), "fft: expected a real input tensor, got ", c10::toString(in.dtype));
  Builder& b = c.b;
  FftDims f = fft_dims(c, in.dim(), in.sizes);
  const bool onesided = c.args.bool_(3);
  const DType rt = in.dtype == at::kDouble ? DType::F64 : DType::F32;
  Value x = b.transpose(b.convert(c.args.tensor(0), rt), f.perm);
  Value y = onesided ? fft_any(b, x, FftType::RFFT, f.lengths)
                     : fft_any(b, b.complex(x, b.zeros(b.type(x))), FftType::FFT, f.lengths);
  y = normalize(b, y, c.args.int_(2), f.n);
  return one(b.transpose(y, inverse(f.perm)));
}

// _fft_c2c(self, dim, normalization, forward)
std::vector<Value> lower_fft_c2c(Context& c) {
  const TensorInfo& in = c.args.info(0);
  Builder& b = c.b;
  FftDims f = fft_dims(c, in.dim(), in.sizes);
  const bool forward = c.args.bool_(3);
  Value x = b.transpose(b.convert(c.args.tensor(0), complex_of(in.dtype)), f.perm);
  Value y = fft_any(b, x, forward ? FftType::FFT : FftType::IFFT, f.lengths);
  // XLA's inverse FFT divides by n; PyTorch's normalization decides instead.
  if (!forward) y = b.mul(y, b.full(f.n, b.dtype(y), b.dims(y)));
  y = normalize(b, y, c.args.int_(2), f.n);
  return one(b.transpose(y, inverse(f.perm)));
}

// _fft_c2r(self, dim, normalization, last_dim_size)
std::vector<Value> lower_fft_c2r(Context& c) {
  const TensorInfo& in = c.args.info(0);
  Builder& b = c.b;
  FftDims f = fft_dims(c, in.dim(), in.sizes);
  const int64_t last = c.args.int_(3);
  f.n = f.n / static_cast<double>(f.lengths.back()) * static_cast<double>(last);
  f.lengths.back() = last;
  Value x = b.transpose(b.convert(c.args.tensor(0), complex_of(in.dtype)), f.perm);
  // IRFFT reads last / 2 + 1 entries of the last dim.
  const int64_t want = last / 2 + 1;
  const int64_t have = b.dims(x).back();
  const int64_t r = b.rank(x);
  if (have > want) {
    x = b.slice_dim(x, r - 1, 0, want);
  } else if (have < want) {
    Dims lo(r, 0), hi(r, 0);
    hi[r - 1] = want - have;
    x = b.pad(x, b.zeros(Type{b.dtype(x), {}}), lo, hi);
  }
  Value y = fft_any(b, x, FftType::IRFFT, f.lengths);
  y = b.mul(y, b.full(f.n, b.dtype(y), b.dims(y)));
  y = normalize(b, y, c.args.int_(2), f.n);
  return one(b.transpose(y, inverse(f.perm)));
}

std::vector<Value> lower_conj_physical(Context& c) {
  Builder& b = c.b;
  Value x = c.args.tensor(0);
  if (!hlo::is_complex(b.dtype(x))) return one(x);
  return one(b.complex(b.real(x), b.neg(b.imag(x))));
}

}  // namespace

TPU_LOWERINGS(fft) {
  reg("aten::_fft_r2c", lower_fft_r2c);
  reg("aten::_fft_c2c", lower_fft_c2c);
  reg("aten::_fft_c2r", lower_fft_c2r);
  reg("aten::_conj_physical", lower_conj_physical);
  reg("aten::complex", [](Context& c) {
    Promoted p = promote2(c, 0, 1, false);
    TORCH_CHECK(p.type == at::kFloat || p.type == at::kDouble,
                "Expected both inputs to be Half, Float or Double tensors but got ", c10::toString(c.args.info(0).dtype),
                " and ", c10::toString(c.args.info(1).dtype));
    return one(c.b.complex(p.a, p.b));
  });
  reg("aten::polar", [](Context& c) {
    Promoted p = promote2(c, 0, 1, false);
    Builder& b = c.b;
    return one(b.complex(b.mul(p.a, b.unary("stablehlo.cosine", p.b)), b.mul(p.a, b.unary("stablehlo.sine", p.b))));
  });
  reg("aten::angle", [](Context& c) {
    const at::ScalarType t = c.args.info(0).dtype;
    Builder& b = c.b;
    Value x = c.args.tensor(0);
    if (hlo::is_complex(b.dtype(x))) return one(b.binary("stablehlo.atan2", b.imag(x), b.real(x)));
    const at::ScalarType out = is_integral(t) ? default_float() : t;
    Value xf = cast(b, x, opmath_type(out));
    // pi for negative numbers, 0 otherwise, nan stays nan
    Value zero = b.zeros(b.type(xf));
    Value r = b.select(b.compare(hlo::Cmp::LT, xf, zero), b.full(M_PI, b.dtype(xf), b.dims(xf)), zero);
    r = b.select(b.compare(hlo::Cmp::NE, xf, xf), xf, r);
    return one(cast(b, r, out));
  });
}

}  // namespace tpu::lowering
