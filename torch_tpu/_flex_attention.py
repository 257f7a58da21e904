"""FlexAttention (``torch.nn.attention.flex_attention``) on the tpu device.

PyTorch's ``flex_attention`` checks its inputs' device against a fixed set
(cuda, cpu, xpu, hpu, mps) before anything else runs, and raises ValueError
for every other device, although the rest of it is device-generic: the
block mask is built with ordinary tensor ops, eager calls run the
higher-order op's dense implementation (the full score matrix, with
``score_mod`` and ``mask_mod`` vmapped over it), and under ``torch.compile``
the op and its backward are traced into the graph like any other.

So when that module is first imported, its device check is wrapped: inputs
on the tpu device pass (backward included: the dense backward runs on the
device as it does for CUDA's fallback), every other device gets PyTorch's
own answer. Eager calls materialize the scores, as on CPU; under
``torch.compile(backend="tpu")`` the whole attention is one XLA program
that XLA fuses.
"""

from __future__ import annotations

from ._after_import import after_import

_MODULE = "torch.nn.attention.flex_attention"


def _patch(module) -> None:
    check = getattr(module, "_validate_device", None)
    if check is None or getattr(check, "_torch_tpu", False):
        return

    def _validate_device(query, key, value):
        if query.device.type == "tpu":
            return None
        return check(query, key, value)

    _validate_device._torch_tpu = True
    _validate_device.__doc__ = check.__doc__
    module._validate_device = _validate_device


def install() -> None:
    after_import(_MODULE, _patch)
