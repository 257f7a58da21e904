// Strided views of a storage value: reads and writes against a host
// reference, for the structured (slice/reshape/transpose) and gather paths.
#include <numeric>
#include <vector>

#include "csrc/exec/strided.h"
#include "tests/cpp/test_support.h"

namespace tpu {
namespace {

using hlo::Builder;
using hlo::Dims;
using hlo::DType;
using testing::client;

struct View {
  Dims sizes, strides;
  int64_t offset;
};

std::vector<float> storage(int64_t n) {
  std::vector<float> s(n);
  std::iota(s.begin(), s.end(), 1.0f);
  return s;
}

// Visit every index of `sizes` in row-major order.
template <typename F>
void for_each_index(const Dims& sizes, F f) {
  int64_t total = 1;
  for (int64_t s : sizes) total *= s;
  Dims idx(sizes.size(), 0);
  for (int64_t n = 0; n < total; ++n) {
    f(idx);
    for (int64_t d = static_cast<int64_t>(sizes.size()) - 1; d >= 0; --d) {
      if (++idx[d] < sizes[d]) break;
      idx[d] = 0;
    }
  }
}

int64_t element(const View& v, const Dims& idx) {
  int64_t e = v.offset;
  for (size_t k = 0; k < idx.size(); ++k) e += idx[k] * v.strides[k];
  return e;
}

std::vector<float> run(const std::string& program, const std::vector<float>& flat, int64_t offset,
                       bool dynamic, size_t out_elems) {
  const auto& dev = client().devices()[0];
  auto exe = client().compile(program, testing::default_options());
  auto buf = client().from_host(flat.data(), pjrt::c::PJRT_Buffer_Type_F32, {static_cast<int64_t>(flat.size())}, dev);
  std::vector<pjrt::c::PJRT_Buffer*> args{buf->raw()};
  pjrt::BufferPtr off;
  if (dynamic) {
    off = client().from_host(&offset, pjrt::c::PJRT_Buffer_Type_S64, {}, dev);
    args.push_back(off->raw());
  }
  std::vector<float> out(out_elems);
  exe->execute(args, nullptr)[0]->to_host(out.data(), out.size() * sizeof(float));
  return out;
}

class StridedTest : public ::testing::TestWithParam<std::tuple<View, bool>> {};

TEST_P(StridedTest, ReadMatchesHost) {
  TPU_REQUIRE_PLUGIN();
  const auto& [v, dynamic] = GetParam();
  const int64_t n = 64;
  Builder b;
  auto flat = b.param({DType::F32, {n}});
  exec::Offset off;
  off.value = v.offset;
  if (dynamic) off.dynamic = b.param({DType::I64, {}});
  auto r = exec::read_strided(b, flat, v.sizes, v.strides, off);
  EXPECT_EQ(b.dims(r), v.sizes);
  std::vector<float> want;
  auto s = storage(n);
  for_each_index(v.sizes, [&](const Dims& idx) { want.push_back(s[element(v, idx)]); });
  EXPECT_EQ(run(b.module({r}), s, v.offset, dynamic, want.size()), want);
}

TEST_P(StridedTest, WriteMatchesHost) {
  TPU_REQUIRE_PLUGIN();
  const auto& [v, dynamic] = GetParam();
  for (size_t k = 0; k < v.sizes.size(); ++k) {
    if (v.strides[k] == 0 && v.sizes[k] > 1) GTEST_SKIP() << "expanded views are not writable";
  }
  // Overlapping views are not writable either (PyTorch refuses them too).
  std::vector<int64_t> seen;
  bool overlap = false;
  for_each_index(v.sizes, [&](const Dims& idx) {
    int64_t e = element(v, idx);
    overlap |= std::find(seen.begin(), seen.end(), e) != seen.end();
    seen.push_back(e);
  });
  if (overlap) GTEST_SKIP() << "overlapping view";
  const int64_t n = 64;
  Builder b;
  auto flat = b.param({DType::F32, {n}});
  exec::Offset off;
  off.value = v.offset;
  if (dynamic) off.dynamic = b.param({DType::I64, {}});
  auto values = b.full(-1, DType::F32, v.sizes);
  auto r = exec::write_strided(b, flat, values, v.sizes, v.strides, off);
  auto want = storage(n);
  for_each_index(v.sizes, [&](const Dims& idx) { want[element(v, idx)] = -1; });
  EXPECT_EQ(run(b.module({r}), storage(n), v.offset, dynamic, n), want);
}

INSTANTIATE_TEST_SUITE_P(
    Views, StridedTest,
    ::testing::Combine(
        ::testing::Values(View{{4, 8}, {8, 1}, 0},          // contiguous
                          View{{3, 5}, {8, 1}, 9},          // row slice with offset
                          View{{8, 4}, {1, 8}, 0},          // transpose
                          View{{2, 3, 4}, {1, 2, 6}, 3},    // permuted
                          View{{5}, {9}, 2},                // diagonal-like stride
                          View{{3, 4}, {0, 2}, 1},          // expanded (stride 0)
                          View{{3, 3}, {1, 1}, 0},          // overlapping windows (gather)
                          View{{4, 3}, {5, 3}, 1},          // non-nested strides (gather)
                          View{{1, 5, 1}, {100, 3, 7}, 4},  // unit dims with odd strides
                          View{{0, 3}, {3, 1}, 0},          // empty
                          View{{}, {}, 17}),                // scalar
        ::testing::Bool()),
    [](const ::testing::TestParamInfo<std::tuple<View, bool>>& info) {
      const View& v = std::get<0>(info.param);
      std::string name = "s";
      for (int64_t s : v.sizes) name += std::to_string(s) + "_";
      name += "st";
      for (int64_t s : v.strides) name += std::to_string(s) + "_";
      name += "off" + std::to_string(v.offset) + (std::get<1>(info.param) ? "_dynamic" : "_static");
      return name;
    });

}  // namespace
}  // namespace tpu
