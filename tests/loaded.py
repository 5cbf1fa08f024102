"""Load a Python file that is not an importable module of the package (a docs hook, a
benchmark script) as a module, for the tests that check it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def module_at(path: Path, name: str) -> ModuleType:
    """The module of the file ``path``, registered as ``name`` in ``sys.modules`` (as
    dataclasses and pickling look a class's module up there)."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
