"""MkDocs hook: the build fails when a public name (of ``shardwise`` and of the
documented submodules ``shardwise.errors``, ``shardwise.cache`` and ``shardwise.array``)
has no docstring or no entry in the API reference at the path the documentation writes
(:func:`documented_at`: ``::: shardwise.to_zarr``, ``::: shardwise.errors.ChunksError``,
``::: shardwise.array.from_zarr``), or whose docstring lacks the numpydoc sections of
what it takes."""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path
from typing import Any

PUBLIC_MODULES = ("shardwise", "shardwise.errors", "shardwise.cache", "shardwise.array")
TOP_LEVEL = frozenset({"ShardwiseError"})
"""Names documented at the top level although a submodule holds them too: the base of
every error, which ``except`` clauses name."""


def documented_at(module_name: str, name: str) -> str | None:
    """The module whose path documents ``module_name.name``, or None when it is
    documented under another: a top-level name that a documented submodule holds too
    (the same object) is documented there (``shardwise.errors.ChunksError``,
    ``shardwise.array.from_zarr``), but the names of :data:`TOP_LEVEL`."""
    import shardwise

    if name in TOP_LEVEL and name in shardwise.__all__:
        return "shardwise" if module_name == "shardwise" else None
    if module_name != "shardwise":
        return module_name
    obj = getattr(shardwise, name)
    for other in PUBLIC_MODULES[1:]:
        module = importlib.import_module(other)
        if name in module.__all__ and getattr(module, name) is obj:
            return None
    return "shardwise"


def _numpydoc_missing(obj: Any) -> str | None:
    """The numpydoc section a public name's docstring lacks: a function that takes
    parameters needs ``Parameters``; a class, ``Parameters`` or ``Attributes`` (errors
    and warnings, which users catch rather than make, need neither)."""
    doc = inspect.getdoc(obj) or ""

    def has(section: str) -> bool:
        return f"{section}\n{'-' * len(section)}" in doc

    if isinstance(obj, type):
        if issubclass(obj, BaseException | Warning):
            return None
        return None if has("Parameters") or has("Attributes") else "Parameters or Attributes"
    if callable(obj) and inspect.signature(obj).parameters:
        return None if has("Parameters") else "Parameters"
    return None


def problems(docs_dir: str | Path) -> list[str]:
    """What the API reference in ``docs_dir`` lacks (see the module's description)."""
    api = (Path(docs_dir) / "api.md").read_text()
    found = []
    for module_name in PUBLIC_MODULES:
        module = importlib.import_module(module_name)
        for name in module.__all__:
            if name == "__version__":
                continue
            obj = getattr(module, name)
            where = documented_at(module_name, name)
            if where is None:
                continue  # documented at its other path
            if not (obj.__doc__ or "").strip():
                found.append(f"{where}.{name} has no docstring")
            if f"::: {where}.{name}\n" not in api:
                found.append(f"{where}.{name} is not in docs/api.md (add '::: {where}.{name}')")
            missing = _numpydoc_missing(obj)
            if missing:
                found.append(f"{where}.{name}'s docstring has no {missing} section (numpydoc)")
    return found


def on_pre_build(config: Any) -> None:
    from mkdocs.exceptions import PluginError

    found = problems(config["docs_dir"])
    if found:
        raise PluginError("undocumented public names: " + "; ".join(found))
