"""Run a function on a module right after it is first imported.

torch_tpu adapts a few modules that keep a fixed list of the devices they
know (accelerate's device choice, FlexAttention's device check) without
importing them itself: importing them at ``import torch_tpu`` would cost
every user their import time. ``after_import(name, fn)`` calls ``fn(module)``
now if the module is loaded, else once, just after it executes.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from typing import Callable

_pending: dict[str, list[Callable]] = {}


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        fns = _pending.pop(name, None)
        if fns is None:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            for fn in fns:
                fn(module)

        spec.loader.exec_module = exec_module
        return spec


def after_import(name: str, fn: Callable) -> None:
    if name in sys.modules:
        fn(sys.modules[name])
        return
    _pending.setdefault(name, []).append(fn)
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
