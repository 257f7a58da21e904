// Loading a PJRT plugin and calling its C API safely.
//
// `Api` owns the dlopen'ed plugin. Every call goes through `Api::call`, which
// turns a returned PJRT_Error into a `pjrt::Error` exception carrying the
// plugin's message, its error code and the name of the call that failed.
#pragma once

#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>

#include "csrc/pjrt/pjrt_c_api.h"

namespace tpu::pjrt {

// An error reported by the plugin (or by our loader) for a named PJRT call.
class Error : public std::runtime_error {
 public:
  Error(std::string call, c::PJRT_Error_Code code, const std::string& message);
  const std::string& call() const { return call_; }
  c::PJRT_Error_Code code() const { return code_; }
  // Whether memory ran out: RESOURCE_EXHAUSTED, or a plugin's message saying
  // so under another code (the CPU plugin fails a program whose output it
  // cannot allocate, at its completion event, as INTERNAL "Error dispatching
  // computation: Out of memory allocating N bytes").
  bool out_of_memory() const;

 private:
  std::string call_;
  c::PJRT_Error_Code code_;
};

// A plugin could not be found, loaded, or is of an unsupported version.
class PluginError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

const char* error_code_name(c::PJRT_Error_Code code);

// True in a child made by fork() after a plugin was loaded. A plugin's
// threads do not survive fork(), so a call into it from the child would wait
// forever: every call raises ForkedChildError instead, and handles are
// leaked rather than destroyed.
bool in_forked_child();
class ForkedChildError : public std::runtime_error {
 public:
  explicit ForkedChildError(const std::string& call);
};

// Zero-initialized args struct with `struct_size` set: the one way every
// args struct in this project is made.
template <typename T>
T make_args() {
  T args;
  std::memset(static_cast<void*>(&args), 0, sizeof(T));
  args.struct_size = sizeof(T);
  return args;
}

class Api {
 public:
  // Oldest plugin API we accept; slots newer than the plugin's version are
  // checked with `has()` before use.
  static constexpr int kMinMinor = 40;

  // dlopen `path`, call GetPjrtApi, check the version, initialize the plugin.
  // Throws PluginError with what was looked for and how to fix it.
  static std::shared_ptr<Api> load(const std::string& path);

  const c::PJRT_Api* raw() const { return api_; }
  const std::string& path() const { return path_; }
  int major() const { return api_->pjrt_api_version.major_version; }
  int minor() const { return api_->pjrt_api_version.minor_version; }

  // Whether the plugin's table is long enough to hold the slot at `offset`
  // (offsetof(PJRT_Api, PJRT_X)) and the slot is filled in.
  bool has(size_t offset) const;

  // Throw a pjrt::Error for `err` (if non-null), destroying it.
  void check(c::PJRT_Error* err, const char* call) const;

  ~Api();
  Api(const Api&) = delete;
  Api& operator=(const Api&) = delete;

 private:
  Api(void* handle, const c::PJRT_Api* api, std::string path)
      : handle_(handle), api_(api), path_(std::move(path)) {}
  void* handle_;
  const c::PJRT_Api* api_;
  std::string path_;
};

// Call slot PJRT_<name> of `api` with `args`, converting errors. Checks that
// the plugin provides the slot.
#define TPU_PJRT_CALL(api, name, args)                                         \
  do {                                                                         \
    const ::tpu::pjrt::Api& tpu_api_ = (api);                                  \
    if (::tpu::pjrt::in_forked_child()) {                                      \
      throw ::tpu::pjrt::ForkedChildError("PJRT_" #name);                      \
    }                                                                          \
    if (!tpu_api_.has(offsetof(::tpu::pjrt::c::PJRT_Api, PJRT_##name))) {      \
      throw ::tpu::pjrt::Error("PJRT_" #name,                                  \
                               ::tpu::pjrt::c::PJRT_Error_Code_UNIMPLEMENTED,  \
                               "this plugin (PJRT API " +                      \
                                   std::to_string(tpu_api_.major()) + "." +    \
                                   std::to_string(tpu_api_.minor()) +          \
                                   ") does not provide this call");            \
    }                                                                          \
    tpu_api_.check(tpu_api_.raw()->PJRT_##name(&(args)), "PJRT_" #name);       \
  } while (0)

// Destroy a handle from a destructor: never throws; does nothing in a
// forked child (see in_forked_child).
#define TPU_PJRT_DESTROY(api, name, args)                                      \
  do {                                                                         \
    if (::tpu::pjrt::in_forked_child()) break;                                 \
    try {                                                                      \
      (api).check((api).raw()->PJRT_##name(&(args)), "PJRT_" #name);           \
    } catch (...) {                                                            \
    }                                                                          \
  } while (0)

#define TPU_PJRT_HAS(api, name) (api).has(offsetof(::tpu::pjrt::c::PJRT_Api, PJRT_##name))

}  // namespace tpu::pjrt
