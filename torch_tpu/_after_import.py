"""Run a function on a module right after it is first imported.

torch_tpu adapts a few modules that keep a fixed list of the devices they
know (accelerate's device choice, FlexAttention's device check) without
importing them itself: importing them at ``import torch_tpu`` would cost
every user their import time. ``after_import(name, fn)`` calls ``fn(module)``
now if the module is loaded, else once, just after it executes. A module
still executing when ``after_import`` is called (its body imported torch,
which imported torch_tpu) is handled at the first import after it finishes.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from typing import Callable

_pending: dict[str, list[Callable]] = {}
# Modules that were still executing when their functions were registered.
_partial: dict[str, list[Callable]] = {}


def _initializing(module) -> bool:
    return bool(getattr(getattr(module, "__spec__", None), "_initializing", False))


def _run_finished() -> None:
    for name in list(_partial):
        module = sys.modules.get(name)
        if module is None:  # its import failed: wait for the next one
            _pending.setdefault(name, []).extend(_partial.pop(name))
        elif not _initializing(module):
            for fn in _partial.pop(name):
                fn(module)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if _partial:
            _run_finished()
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
    module = sys.modules.get(name)
    if module is not None and not _initializing(module):
        fn(module)
        return
    (_partial if module is not None else _pending).setdefault(name, []).append(fn)
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
