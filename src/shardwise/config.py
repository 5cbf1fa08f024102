"""shardwise's settings, read in one place.

Every setting is a dask config key under ``shardwise.``, with its meaning and default in
``shardwise.yaml`` beside this module (dask's convention for libraries: the defaults
file is added with ``dask.config.update_defaults`` when this module is imported, under
anything the user set). So they are set as dask's own are: ``dask.config.set(...)`` for
a block of code, a YAML file in ``~/.config/dask/``, or environment variables through
dask's own mapping (``DASK_SHARDWISE__SHARD_BYTES="256 MiB"``, read when dask is
imported). ``SHARDWISE_INDEX_CACHE_BYTES`` is also read, for the index cache's bound.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import dask.config
from dask.utils import parse_bytes

__all__ = ["CACHE_BYTES_VARIABLE", "DEFAULTS_FILE", "get", "get_bytes", "index_cache_bytes"]

DEFAULTS_FILE = "shardwise.yaml"
"""The defaults file, in the package."""

CACHE_BYTES_VARIABLE = "SHARDWISE_INDEX_CACHE_BYTES"
"""The environment variable bounding the index cache (in bytes) when it is made; it wins
over ``shardwise.index-cache-bytes``."""


def defaults() -> dict[str, Any]:
    """The defaults file's settings: ``{"shardwise": {"shard-bytes": "128 MiB", ...}}``."""
    import yaml  # type: ignore[import-untyped]

    text = (Path(__file__).parent / DEFAULTS_FILE).read_text(encoding="utf-8")
    loaded = yaml.safe_load(text)
    assert isinstance(loaded, dict) and isinstance(loaded.get("shardwise"), dict)
    return loaded


# (added when this module is imported, as dask libraries do: not on a first read, which
# may come in a reader thread holding a lock the others wait on)
dask.config.update_defaults(defaults())


def get(name: str) -> Any:
    """The setting ``shardwise.<name>``: what the user set, else its default."""
    return dask.config.get(f"shardwise.{name}")


def get_bytes(name: str) -> int:
    """A size setting in bytes (``"128 MiB"`` or a number)."""
    value = get(name)
    return int(parse_bytes(value) if isinstance(value, str) else value)


def index_cache_bytes() -> int:
    """The bound of the index cache: ``SHARDWISE_INDEX_CACHE_BYTES`` when set, else
    ``shardwise.index-cache-bytes``."""
    value = os.environ.get(CACHE_BYTES_VARIABLE)
    if value is None:
        return get_bytes("index-cache-bytes")
    return int(value) if value.strip().isdigit() else int(parse_bytes(value))
