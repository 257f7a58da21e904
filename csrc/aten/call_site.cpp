#include "csrc/aten/call_site.h"

#include <dlfcn.h>

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
  Ensure ensure = nullptr;
  Release release = nullptr;
  ThisThreadState this_thread_state = nullptr;
  GetFrame get_frame = nullptr;
  FrameCode frame_code = nullptr;
  FrameLine frame_line = nullptr;
  DecRef decref = nullptr;
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
    ok = ensure && release && this_thread_state && get_frame && frame_code && frame_line && decref;
  }
};

}  // namespace

uint64_t python_call_site() {
  static const PythonApi api;
  // (a thread Python never ran on has no frame to look at)
  if (!api.ok || api.this_thread_state() == nullptr) return 0;
  const int gil = api.ensure();
  uint64_t site = 0;
  if (void* frame = api.get_frame()) {
    void* code = api.frame_code(frame);
    const uint64_t line = static_cast<uint64_t>(api.frame_line(frame));
    site = (reinterpret_cast<uintptr_t>(code) * 0x9E3779B97F4A7C15ull) ^ (line + 1);
    api.decref(code);
  }
  api.release(gil);
  return site;
}

}  // namespace tpu
