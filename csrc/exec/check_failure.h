// How a failed device-side check (csrc/exec/runtime.h: Runtime::add_check)
// reaches Python: its exception type travels in its message.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

namespace tpu::exec {

// A device-side check failed (e.g. an index out of range). Raised to
// Python as IndexError, except, as on CPU, a RuntimeError for a message that
// starts with "ZeroDivisionError" (integer division by zero) or with
// kRuntimeErrorCheck (which is dropped from the message).
inline constexpr std::string_view kRuntimeErrorCheck = "RuntimeError: ";
class CheckFailure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
  bool is_index_error() const {
    const std::string_view m(what());
    return m.rfind("ZeroDivisionError", 0) != 0 && m.rfind(kRuntimeErrorCheck, 0) != 0;
  }
  // The message without the kind marker.
  std::string message() const {
    const std::string_view m(what());
    return std::string(m.rfind(kRuntimeErrorCheck, 0) == 0 ? m.substr(kRuntimeErrorCheck.size()) : m);
  }
};

}  // namespace tpu::exec
