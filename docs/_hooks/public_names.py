"""MkDocs hook: the build fails when a name in ``shardwise.__all__`` has no docstring
or no entry (``::: module.name``) in the API reference."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError


def on_pre_build(config: Any) -> None:
    import shardwise

    api = (Path(config["docs_dir"]) / "api.md").read_text()
    problems = []
    for name in shardwise.__all__:
        if name == "__version__":
            continue
        obj = getattr(shardwise, name)
        if not (obj.__doc__ or "").strip():
            problems.append(f"shardwise.{name} has no docstring")
        if f"::: {obj.__module__}.{name}\n" not in api:
            problems.append(f"shardwise.{name} is not in docs/api.md (add '::: {obj.__module__}.{name}')")
    if problems:
        raise PluginError("undocumented public names: " + "; ".join(problems))
