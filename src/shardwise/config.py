"""shardwise's settings, read in one place.

Every setting is a dask config key under ``shardwise.``, with its meaning and default in
``shardwise.yaml`` beside this module (dask's convention for libraries: the defaults
file is added with ``dask.config.update_defaults`` when this module is imported, under
anything the user set). So they are set as dask's own are: ``dask.config.set(...)`` for
a block of code, a YAML file in ``~/.config/dask/``, or environment variables through
dask's own mapping (``DASK_SHARDWISE__SHARD_BYTES="256 MiB"``, read when dask is
imported). ``SHARDWISE_INDEX_CACHE_BYTES`` is deprecated: read for this release only, with
a ``FutureWarning``; dask's ``DASK_SHARDWISE__INDEX_CACHE_BYTES`` sets the same bound.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

import dask.config
from dask.utils import parse_bytes

__all__ = ["CACHE_BYTES_VARIABLE", "DEFAULTS_FILE", "get", "get_bytes", "index_cache_bytes"]

DEFAULTS_FILE = "shardwise.yaml"
"""The defaults file, in the package."""

CACHE_BYTES_VARIABLE = "SHARDWISE_INDEX_CACHE_BYTES"
"""A deprecated environment variable bounding the index cache (in bytes), read for this
release only: when the cache is made, over ``shardwise.index-cache-bytes``, with a
``FutureWarning`` naming dask's ``DASK_SHARDWISE__INDEX_CACHE_BYTES`` instead."""


def defaults() -> dict[str, Any]:
    """The defaults file's settings: ``{"shardwise": {"shard-bytes": "128 MiB", ...}}``.
    Parsed by dask's own reader of configuration files (``dask.config.collect``, given this
    file and no environment), as dask's YAML files are."""
    loaded = dask.config.collect(paths=[str(Path(__file__).parent / DEFAULTS_FILE)], env={})
    assert isinstance(loaded.get("shardwise"), dict), loaded
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
    """The bound of the index cache: ``shardwise.index-cache-bytes`` (dask's
    ``DASK_SHARDWISE__INDEX_CACHE_BYTES`` sets it), unless the deprecated
    ``SHARDWISE_INDEX_CACHE_BYTES`` is set (a ``FutureWarning``)."""
    value = os.environ.get(CACHE_BYTES_VARIABLE)
    if value is None:
        return get_bytes("index-cache-bytes")
    warnings.warn(
        f"{CACHE_BYTES_VARIABLE} is deprecated and will not be read in the next release: "
        f"set DASK_SHARDWISE__INDEX_CACHE_BYTES={value!r} instead (dask's variable for the "
        "setting shardwise.index-cache-bytes), or "
        f"dask.config.set({{'shardwise.index-cache-bytes': {value!r}}}) before the first read",
        FutureWarning,
        stacklevel=2,
    )
    return int(value) if value.strip().isdigit() else int(parse_bytes(value))
