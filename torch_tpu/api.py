"""The public API shared with TorchTPU."""

from __future__ import annotations

import torch


def tpu_device(index: int | None = None) -> torch.device:
    """The ``tpu`` device (the current one when ``index`` is None). Asking
    for it starts the device (``torch.tpu.is_initialized()`` is then True)."""
    torch.tpu.init()
    if index is None:
        index = torch.tpu.current_device()
    return torch.device("tpu", index)
