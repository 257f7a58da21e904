"""The public API shared with TorchTPU."""

from __future__ import annotations

import torch


def tpu_device(index: int | None = None) -> torch.device:
    """The ``tpu`` device (the current one when ``index`` is None)."""
    if index is None:
        index = torch.tpu.current_device()
    return torch.device("tpu", index)
