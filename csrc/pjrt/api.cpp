#include "csrc/pjrt/api.h"

#include <dlfcn.h>
#include <pthread.h>
#include <sys/stat.h>

#include <atomic>
#include <cctype>
#include <mutex>

namespace tpu::pjrt {

namespace {
std::atomic<bool> g_forked_child{false};
std::once_flag g_atfork_once;
}  // namespace

bool in_forked_child() { return g_forked_child.load(std::memory_order_relaxed); }

ForkedChildError::ForkedChildError(const std::string& call)
    : std::runtime_error(
          "Cannot re-initialize the tpu device in a forked subprocess (" + call +
          "): the parent process had started it, and a PJRT plugin does not survive fork(). To use tpu "
          "with multiprocessing, use the 'spawn' start method (multiprocessing.set_start_method('spawn'), "
          "torch.multiprocessing.spawn, or DataLoader(multiprocessing_context='spawn')), or start the "
          "device only in the children.") {}

const char* error_code_name(c::PJRT_Error_Code code) {
  static const char* const kNames[] = {
      "OK",        "CANCELLED",          "UNKNOWN",   "INVALID_ARGUMENT",
      "DEADLINE_EXCEEDED", "NOT_FOUND",  "ALREADY_EXISTS", "PERMISSION_DENIED",
      "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE",
      "UNIMPLEMENTED", "INTERNAL",       "UNAVAILABLE", "DATA_LOSS",
      "UNAUTHENTICATED"};
  auto i = static_cast<size_t>(code);
  return i < sizeof(kNames) / sizeof(kNames[0]) ? kNames[i] : "UNKNOWN_CODE";
}

Error::Error(std::string call, c::PJRT_Error_Code code, const std::string& message)
    : std::runtime_error(call + " failed (" + error_code_name(code) + "): " + message),
      call_(std::move(call)),
      code_(code) {}

bool Error::out_of_memory() const {
  if (code_ == c::PJRT_Error_Code_RESOURCE_EXHAUSTED) return true;
  std::string m(what());
  for (char& ch : m) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  for (const char* says : {"out of memory", "resource_exhausted", "resource exhausted", "oom while", "bad_alloc"}) {
    if (m.find(says) != std::string::npos) return true;
  }
  return false;
}

std::shared_ptr<Api> Api::load(const std::string& path) {
  const std::string how =
      " Set TORCH_TPU_PJRT_PLUGIN to the path of a PJRT plugin (a .so exporting "
      "GetPjrtApi), or install one: `pip install lammps-jax-pjrt-cpu` (CPU), "
      "`pip install jax-cuda13-pjrt` (NVIDIA GPU) or `pip install libtpu` (TPU).";
  struct stat st;
  if (path.empty() || stat(path.c_str(), &st) != 0) {
    throw PluginError("PJRT plugin not found at '" + path + "'." + how);
  }
  std::call_once(g_atfork_once, [] {
    pthread_atfork(nullptr, nullptr, [] { g_forked_child.store(true); });
  });
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    throw PluginError("could not load PJRT plugin '" + path + "': " +
                      (why ? why : "unknown dlopen error") + "." + how);
  }
  auto get = reinterpret_cast<c::GetPjrtApiFn>(dlsym(handle, "GetPjrtApi"));
  if (get == nullptr) {
    dlclose(handle);
    throw PluginError("'" + path + "' is not a PJRT plugin: it exports no GetPjrtApi." + how);
  }
  const c::PJRT_Api* api = get();
  if (api == nullptr) {
    dlclose(handle);
    throw PluginError("GetPjrtApi of '" + path + "' returned null." + how);
  }
  const int major = api->pjrt_api_version.major_version;
  const int minor = api->pjrt_api_version.minor_version;
  if (major != c::kApiMajor || minor < kMinMinor) {
    dlclose(handle);
    throw PluginError("PJRT plugin '" + path + "' implements PJRT C API " + std::to_string(major) +
                      "." + std::to_string(minor) + "; torch_tpu needs " +
                      std::to_string(c::kApiMajor) + ".x with x >= " + std::to_string(kMinMinor) +
                      " (written against " + std::to_string(c::kApiMajor) + "." +
                      std::to_string(c::kApiMinor) + "). Install a newer plugin." + how);
  }
  std::shared_ptr<Api> result(new Api(handle, api, path));
  if (result->has(offsetof(c::PJRT_Api, PJRT_Plugin_Initialize))) {
    auto args = make_args<c::PJRT_Plugin_Initialize_Args>();
    result->check(api->PJRT_Plugin_Initialize(&args), "PJRT_Plugin_Initialize");
  }
  return result;
}

bool Api::has(size_t offset) const {
  if (offset + sizeof(void*) > api_->struct_size) return false;
  void* slot;
  std::memcpy(&slot, reinterpret_cast<const char*>(api_) + offset, sizeof(void*));
  return slot != nullptr;
}

void Api::check(c::PJRT_Error* err, const char* call) const {
  if (err == nullptr) return;
  auto msg = make_args<c::PJRT_Error_Message_Args>();
  msg.error = err;
  api_->PJRT_Error_Message(&msg);
  std::string message(msg.message, msg.message_size);
  auto code_args = make_args<c::PJRT_Error_GetCode_Args>();
  code_args.error = err;
  c::PJRT_Error_Code code = c::PJRT_Error_Code_UNKNOWN;
  if (api_->PJRT_Error_GetCode(&code_args) == nullptr) code = code_args.code;
  auto destroy = make_args<c::PJRT_Error_Destroy_Args>();
  destroy.error = err;
  api_->PJRT_Error_Destroy(&destroy);
  throw Error(call, code, message);
}

Api::~Api() {
  // The plugin stays loaded: its threads may outlive us at process exit, and
  // unloading XLA is not supported by any plugin we know.
  (void)handle_;
}

}  // namespace tpu::pjrt
