#include "csrc/aten/call_site.h"

#include <c10/core/CPUAllocator.h>
#include <dlfcn.h>

#include <string>
#include <unordered_map>

namespace tpu {

namespace {

// The few CPython functions needed, found in the process at run time: the
// library links no Python (it is loaded by torch into a Python process,
// and by nothing else that calls this).
struct PythonApi {
  using Ensure = int (*)();
  using Release = void (*)(int);
  using ThisThreadState = void* (*)();
  using GetFrame = void* (*)();
  using FrameCode = void* (*)(void*);
  using FrameLine = int (*)(void*);
  using DecRef = void (*)(void*);
  using GetAttr = void* (*)(void*, const char*);
  using AsUtf8 = const char* (*)(void*);
  Ensure ensure = nullptr;
  Release release = nullptr;
  ThisThreadState this_thread_state = nullptr;
  GetFrame get_frame = nullptr;
  FrameCode frame_code = nullptr;
  FrameLine frame_line = nullptr;
  DecRef decref = nullptr;
  GetAttr get_attr = nullptr;
  AsUtf8 as_utf8 = nullptr;
  bool ok = false;

  PythonApi() {
    auto find = [](const char* name) { return dlsym(RTLD_DEFAULT, name); };
    ensure = reinterpret_cast<Ensure>(find("PyGILState_Ensure"));
    release = reinterpret_cast<Release>(find("PyGILState_Release"));
    this_thread_state = reinterpret_cast<ThisThreadState>(find("PyGILState_GetThisThreadState"));
    get_frame = reinterpret_cast<GetFrame>(find("PyEval_GetFrame"));
    frame_code = reinterpret_cast<FrameCode>(find("PyFrame_GetCode"));
    frame_line = reinterpret_cast<FrameLine>(find("PyFrame_GetLineNumber"));
    decref = reinterpret_cast<DecRef>(find("Py_DecRef"));
    get_attr = reinterpret_cast<GetAttr>(find("PyObject_GetAttrString"));
    as_utf8 = reinterpret_cast<AsUtf8>(find("PyUnicode_AsUTF8"));
    ok = ensure && release && this_thread_state && get_frame && frame_code && frame_line && decref && get_attr &&
         as_utf8;
  }
};

// The torch package's directory, with a trailing slash: two levels above
// the library that holds c10 (torch/lib/libc10.so). Empty if unknown.
const std::string& torch_dir() {
  static const std::string dir = [] {
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(&c10::GetCPUAllocator), &info) == 0 || info.dli_fname == nullptr) return std::string();
    std::string path = info.dli_fname;
    for (int up = 0; up < 2; ++up) {
      const size_t slash = path.rfind('/');
      if (slash == std::string::npos) return std::string();
      path.resize(slash);
    }
    return path + "/";
  }();
  return dir;
}

// Whether `code` (a code object) is in a file of the torch package; the
// answer is kept per code object (called with the GIL held). A freed code
// object's address reused by another can give the other a stale answer:
// it then decides padded or exact wrongly, which costs compiles or memory,
// never values.
bool code_in_torch(const PythonApi& api, void* code) {
  static std::unordered_map<void*, bool> known;
  auto it = known.find(code);
  if (it != known.end()) return it->second;
  bool in = false;
  if (void* name = api.get_attr(code, "co_filename")) {
    const char* utf8 = api.as_utf8(name);
    in = utf8 != nullptr && !torch_dir().empty() && std::string(utf8).rfind(torch_dir(), 0) == 0;
    api.decref(name);
  }
  if (known.size() > 4096) known.clear();
  known.emplace(code, in);
  return in;
}

}  // namespace

uint64_t python_call_site(bool* in_torch) {
  static const PythonApi api;
  if (in_torch != nullptr) *in_torch = false;
  // (a thread Python never ran on has no frame to look at)
  if (!api.ok || api.this_thread_state() == nullptr) return 0;
  const int gil = api.ensure();
  uint64_t site = 0;
  if (void* frame = api.get_frame()) {
    void* code = api.frame_code(frame);
    const uint64_t line = static_cast<uint64_t>(api.frame_line(frame));
    site = (reinterpret_cast<uintptr_t>(code) * 0x9E3779B97F4A7C15ull) ^ (line + 1);
    if (in_torch != nullptr) *in_torch = code_in_torch(api, code);
    api.decref(code);
  }
  api.release(gil);
  return site;
}

}  // namespace tpu
