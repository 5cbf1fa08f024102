"""MkDocs hook: the build fails when a public name (of ``shardwise``, of its documented
submodules and of the tools' modules, each with the report its function returns) has no
docstring or no entry in the API reference at the path users write
(``::: shardwise.to_zarr``), or whose docstring lacks the numpydoc sections of what it
takes. The submodules at the top (``shardwise.array``...) are documented by their names."""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path
from typing import Any

PUBLIC_MODULES = (
    "shardwise",
    "shardwise.errors",
    "shardwise.cache",
    "shardwise.array",
    "shardwise.regions",
)
# the tools' modules: the names beside the top level's reshard, verify, inventory, info
TOOLS = {
    "shardwise.tools.reshard": ("ReshardReport",),
    "shardwise.tools.migrate": ("migrate", "MigrationReport"),
    "shardwise.tools.verify": ("VerifyReport", "Problem"),
    "shardwise.tools.inventory": ("inventories",),
    "shardwise.tools.info": ("Info", "ArraySummary"),
    "shardwise.tools.views": ("shard_view", "shard_grid", "ShardGrid"),
}


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
    import shardwise

    api = (Path(docs_dir) / "api.md").read_text()
    found = []
    public = {m: tuple(importlib.import_module(m).__all__) for m in PUBLIC_MODULES}
    for module_name, names in (public | TOOLS).items():
        module = importlib.import_module(module_name)
        for name in names:
            obj = getattr(module, name)
            if inspect.ismodule(obj):
                continue
            where = "shardwise" if name in shardwise.__all__ else module_name
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
