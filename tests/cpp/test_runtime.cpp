// The PJRT wrappers and the executable cache, against a real plugin.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <vector>

#include "csrc/exec/executable_cache.h"
#include "csrc/exec/runtime.h"
#include "csrc/hlo/builder.h"
#include "tests/cpp/test_support.h"

namespace tpu {
namespace {

using hlo::Builder;
using hlo::DType;
using testing::client;
using testing::default_options;

TEST(Plugin, ReportsVersionAndDevices) {
  TPU_REQUIRE_PLUGIN();
  EXPECT_EQ(testing::plugin()->major(), 0);
  EXPECT_GE(testing::plugin()->minor(), pjrt::Api::kMinMinor);
  ASSERT_FALSE(client().devices().empty());
  EXPECT_FALSE(client().platform_name().empty());
  EXPECT_FALSE(client().devices()[0].kind().empty());
}

TEST(Plugin, MissingFileIsAClearError) {
  try {
    pjrt::Api::load("/nonexistent/libpjrt_plugin.so");
    FAIL() << "expected PluginError";
  } catch (const pjrt::PluginError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("not found"), std::string::npos) << msg;
    EXPECT_NE(msg.find("TORCH_TPU_PJRT_PLUGIN"), std::string::npos) << msg;
    EXPECT_NE(msg.find("pip install"), std::string::npos) << msg;
  }
}

TEST(Plugin, NonPluginFileIsAClearError) {
  const std::string path = ::testing::TempDir() + "/not_a_plugin.so";
  FILE* f = fopen(path.c_str(), "w");
  ASSERT_NE(f, nullptr);
  fputs("this is not a shared library", f);
  fclose(f);
  EXPECT_THROW(pjrt::Api::load(path), pjrt::PluginError);
}

TEST(Runtime, CompilesAndRuns) {
  TPU_REQUIRE_PLUGIN();
  Builder b;
  auto x = b.param({DType::F32, {2, 3}});
  auto y = b.param({DType::F32, {2, 3}});
  auto exe = client().compile(b.module({b.mul(b.add(x, y), y)}), default_options());
  EXPECT_EQ(exe->num_outputs(), 1u);
  const float a[6] = {1, 2, 3, 4, 5, 6}, c[6] = {10, 20, 30, 40, 50, 60};
  const auto& dev = client().devices()[0];
  auto ba = client().from_host(a, pjrt::c::PJRT_Buffer_Type_F32, {2, 3}, dev);
  auto bc = client().from_host(c, pjrt::c::PJRT_Buffer_Type_F32, {2, 3}, dev);
  auto out = exe->execute({ba->raw(), bc->raw()}, nullptr);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0]->dims(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(out[0]->element_type(), pjrt::c::PJRT_Buffer_Type_F32);
  float r[6];
  out[0]->to_host(r, sizeof(r));
  for (int i = 0; i < 6; ++i) EXPECT_FLOAT_EQ(r[i], (a[i] + c[i]) * c[i]);
}

TEST(Runtime, ErrorsNameTheCallAndCarryTheMessage) {
  TPU_REQUIRE_PLUGIN();
  try {
    client().compile("module { this is not mlir }", default_options());
    FAIL() << "expected pjrt::Error";
  } catch (const pjrt::Error& e) {
    EXPECT_EQ(e.call(), "PJRT_Client_Compile");
    EXPECT_NE(std::string(e.what()).find("PJRT_Client_Compile failed"), std::string::npos);
    EXPECT_GT(std::string(e.what()).size(), 40u);
  }
}

TEST(Runtime, HostRoundTripOfEveryType) {
  TPU_REQUIRE_PLUGIN();
  const auto& dev = client().devices()[0];
  const std::vector<pjrt::c::PJRT_Buffer_Type> types = {
      pjrt::c::PJRT_Buffer_Type_PRED, pjrt::c::PJRT_Buffer_Type_S8,  pjrt::c::PJRT_Buffer_Type_U8,
      pjrt::c::PJRT_Buffer_Type_S16,  pjrt::c::PJRT_Buffer_Type_S32, pjrt::c::PJRT_Buffer_Type_S64,
      pjrt::c::PJRT_Buffer_Type_F16,  pjrt::c::PJRT_Buffer_Type_BF16, pjrt::c::PJRT_Buffer_Type_F32,
      pjrt::c::PJRT_Buffer_Type_F64};
  for (auto t : types) {
    const size_t w = pjrt::element_size(t);
    std::vector<unsigned char> data(5 * w);
    for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<unsigned char>(t == pjrt::c::PJRT_Buffer_Type_PRED ? i % 2 : i * 7 + 1);
    auto buf = client().from_host(data.data(), t, {5}, dev);
    std::vector<unsigned char> back(data.size());
    buf->to_host(back.data(), back.size());
    EXPECT_EQ(back, data) << "type " << t;
  }
}

TEST(ExecutableCache, HitsInMemoryAndOnDisk) {
  TPU_REQUIRE_PLUGIN();
  const std::string dir = ::testing::TempDir() + "/tpu_cache_" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  Builder b;
  auto x = b.param({DType::F32, {4}});
  const std::string program = b.module({b.add(x, x)});
  {
    exec::ExecutableCache cache(&client(), "test-identity", dir);
    auto e1 = cache.get_or_compile(program, default_options());
    auto e2 = cache.get_or_compile(program, default_options());
    EXPECT_EQ(e1, e2);
    auto s = cache.stats();
    EXPECT_EQ(s.misses, 1);
    EXPECT_EQ(s.hits, 1);
    EXPECT_EQ(s.entries, 1);
  }
  exec::ExecutableCache fresh(&client(), "test-identity", dir);
  auto e3 = fresh.get_or_compile(program, default_options());
  auto s = fresh.stats();
  // The CPU plugin serializes executables; a plugin that cannot compiles again.
  EXPECT_EQ(s.disk_hits + s.misses, 1);
  const float in[4] = {1, 2, 3, 4};
  auto buf = client().from_host(in, pjrt::c::PJRT_Buffer_Type_F32, {4}, client().devices()[0]);
  float out[4];
  e3->execute({buf->raw()}, nullptr)[0]->to_host(out, sizeof(out));
  EXPECT_FLOAT_EQ(out[3], 8.0f);
  // Another identity (plugin version) must not reuse the entry.
  exec::ExecutableCache other(&client(), "other-identity", dir);
  other.get_or_compile(program, default_options());
  EXPECT_EQ(other.stats().disk_hits, 0);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tpu
