// Shared helpers of the C++ tests that need a PJRT plugin.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "csrc/pjrt/client.h"
#include "csrc/pjrt/compile_options.h"

namespace tpu::testing {

// The plugin under test (TORCH_TPU_PJRT_PLUGIN), loaded once.
inline std::shared_ptr<pjrt::Api> plugin() {
  static std::shared_ptr<pjrt::Api> api = [] {
    const char* path = std::getenv("TORCH_TPU_PJRT_PLUGIN");
    return path && *path ? pjrt::Api::load(path) : nullptr;
  }();
  return api;
}

inline pjrt::Client& client() {
  static std::unique_ptr<pjrt::Client> c = pjrt::Client::create(plugin());
  return *c;
}

#define TPU_REQUIRE_PLUGIN()                                                       \
  if (!::tpu::testing::plugin()) GTEST_SKIP() << "TORCH_TPU_PJRT_PLUGIN is not set"

inline std::string default_options() { return pjrt::CompileOptions{}.serialize(); }

}  // namespace tpu::testing
