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
// kRuntimeErrorCheck, and torch.linalg.LinAlgError for one that starts with
// kLinAlgErrorCheck (the markers are dropped from the message).
inline constexpr std::string_view kRuntimeErrorCheck = "RuntimeError: ";
inline constexpr std::string_view kLinAlgErrorCheck = "LinAlgError: ";
class CheckFailure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
  bool is_index_error() const {
    const std::string_view m(what());
    return m.rfind("ZeroDivisionError", 0) != 0 && m.rfind(kRuntimeErrorCheck, 0) != 0 && !is_linalg_error();
  }
  bool is_linalg_error() const { return std::string_view(what()).rfind(kLinAlgErrorCheck, 0) == 0; }
  // The message without the kind marker.
  std::string message() const {
    const std::string_view m(what());
    if (m.rfind(kRuntimeErrorCheck, 0) == 0) return std::string(m.substr(kRuntimeErrorCheck.size()));
    if (m.rfind(kLinAlgErrorCheck, 0) == 0) return std::string(m.substr(kLinAlgErrorCheck.size()));
    return std::string(m);
  }
};

}  // namespace tpu::exec
