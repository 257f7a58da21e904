// torch_tpu._C_distributed: the Python face of the tpu c10d backend. A
// small pybind11 module of its own (the main library has no pybind11), so
// that torch.distributed sees the backend as a subclass of its Backend. It
// also holds the runtime's one need of Python: Ctrl-C during a wait for the
// device raising KeyboardInterrupt from the op that waited.
#include <pybind11/chrono.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/utils/pybind.h>

#include "csrc/distributed/process_group.h"

namespace py = pybind11;

namespace {

// Called by a device wait that SIGINT interrupted (csrc/pjrt/buffer.cpp):
// on the main thread Python's handlers run, and if one raised
// (KeyboardInterrupt) the wait ends with that exception, which torch's
// bindings hand back to Python as it is. Elsewhere the wait goes on.
void raise_if_interrupted() {
  py::gil_scoped_acquire gil;
  if (PyErr_CheckSignals() == 0) return;
  python_error e;
  e.persist();
  throw e;
}

}  // namespace

PYBIND11_MODULE(_C_distributed, m) {
  m.doc() = "The tpu device's c10d backend (torch_tpu.distributed registers it)";
  m.def("_interrupt_hook", [] { return reinterpret_cast<intptr_t>(&raise_if_interrupted); });
  py::object backend = py::module_::import("torch._C._distributed_c10d").attr("Backend");
  py::class_<tpu::dist::ProcessGroupTPU, c10::intrusive_ptr<tpu::dist::ProcessGroupTPU>>(m, "ProcessGroupTPU",
                                                                                          backend)
      .def(py::init([](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                       std::chrono::milliseconds timeout, const c10::intrusive_ptr<c10d::Backend>& host,
                       std::string group_name, std::vector<int64_t> global_ranks) {
             return c10::make_intrusive<tpu::dist::ProcessGroupTPU>(store, rank, size, timeout, host,
                                                                    std::move(group_name),
                                                                    std::move(global_ranks));
           }),
           py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"), py::arg("host"),
           py::arg("group_name") = "", py::arg("global_ranks") = std::vector<int64_t>{},
           py::call_guard<py::gil_scoped_release>());
}
