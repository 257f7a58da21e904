"""``torch_tpu._loader.load()``: what Ray Train calls for its ``tpu_dist``
backend (TorchTPU's name for it) before ``init_process_group``. Importing
torch_tpu already registered the device and the ``tpu``/``tpu_dist``
backends, so there is nothing left to load."""


def load() -> None:
    import torch_tpu  # noqa: F401
