"""The tpu backend's compiled graphs as PyTorch's compiled artifacts.

AOTAutograd's cache and ``torch.compile(...).aot_compile`` (which vLLM uses
by default) keep and serialize what a backend's graph compiler returns as
an ``OutputCode``. Ours is the ATen graph itself, pickled with FX's graph
pickler; loading it builds the graph's runner again (``compiler._Graph``),
whose programs come from the executable cache (memory or disk) at their
first call, so a loaded artifact compiles nothing that was compiled before.

A module of its own: ``torch._inductor.output_code`` is imported only once a
graph is compiled, not at ``import torch_tpu``."""

from __future__ import annotations

from torch._dynamo.aot_compile_types import BundledAOTAutogradSerializableCallable, SerializableCallable
from torch._inductor.output_code import OutputCode

from .compiler import _execution_scope


class GraphCode(OutputCode):
    def __init__(self, graph):
        # AOTAutograd calls it with one list of arguments. (An attribute of
        # the instance: AOTAutograd's wrappers copy the instance's, and call
        # a wrapper whose copy lacks it with the arguments spread.)
        self._boxed_call = True
        self.graph = graph  # compiler._Graph
        self.serialized: bytes | None = None

    def __call__(self, args: list):
        return self.graph(*args)

    def prepare_for_serialization(self) -> None:
        # Called on a copy of the live artifact, which keeps running.
        from torch.fx._graph_pickler import GraphPickler, Options

        if self.graph is not None:
            # Every op by its qualified name: ours (torch.ops.torch_tpu) and
            # the model's custom ops (vLLM's) resolve again once their
            # packages are imported.
            self.serialized = GraphPickler.dumps(self.graph.gm, Options(ops_filter=None))
        self.graph = None

    def post_compile(self, example_inputs, constants, graph_kwargs) -> None:
        if self.graph is not None:
            return
        from torch._guards import detect_fake_mode
        from torch._subclasses import FakeTensorMode
        from torch.fx._graph_pickler import GraphPickler

        from .compiler import _Graph

        gm = GraphPickler.loads(self.serialized, detect_fake_mode(example_inputs) or FakeTensorMode())
        gm.recompile()
        self.graph = _Graph(gm)

    def set_triton_bundle(self, triton_bundle) -> None:
        pass  # no Triton kernels


class CompiledFunction(SerializableCallable):
    """What the tpu backend returns for one Dynamo graph: AOTAutograd's
    compiled function (forward and backward), run in the calling scope's
    program, and serializable as ``torch.compile(...).aot_compile`` expects
    (the AOTAutograd entry, with each ATen graph as its ``GraphCode``)."""

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, *args):
        # AOTAutograd's runtime wrapper writes mutated inputs back (an
        # optimizer's parameters and state) after the graph: in the same
        # scope, those copies join the graph's program instead of running
        # as one program each.
        with _execution_scope():
            return self.fn(*args)

    @classmethod
    def serialize_compile_artifacts(cls, fn: "CompiledFunction") -> bytes:
        if not hasattr(fn.fn, "serialize"):
            raise RuntimeError("torch.compile (tpu backend): this function was not compiled for serialization; "
                               "compile it with torch.compile(...).aot_compile(...)")
        return BundledAOTAutogradSerializableCallable.serialize_compile_artifacts(
            BundledAOTAutogradSerializableCallable(fn.fn))

    @classmethod
    def deserialize_compile_artifacts(cls, data: bytes) -> "CompiledFunction":
        return cls(BundledAOTAutogradSerializableCallable.deserialize_compile_artifacts(data))

    def finalize_loading(self, vllm_config=None) -> None:
        """Called by vLLM on a loaded artifact; a tpu graph needs nothing more
        (its programs come from the executable cache at the first call)."""
