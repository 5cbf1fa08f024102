"""shardwise: Zarr v3 sharding for dask and xarray.

``xr.open_dataset(store, engine="shardwise", chunks={})`` reads sharded Zarr v3 stores
with one dask chunk per shard (several over a network); ``shardwise.open_dataset(store,
chunks=...)`` reads with an explicit fan-out graph (one index task per shard, read tasks
of whole inner chunks below it); ``shardwise.to_zarr(ds, store, ...)`` writes xarray
Datasets, DataArrays and DataTrees with one dask task per shard. Dask arrays without
xarray: :mod:`shardwise.array` (``to_zarr`` and ``from_zarr``, dask's names). Outside
dask: ``shardwise.ArrayReader``. For data that exist already: ``shardwise.reshard``,
``shardwise.verify``, ``shardwise.inventory`` and ``shardwise.info`` (more in
:mod:`shardwise.tools`' modules); the ``shardwise`` command runs them. Settings are dask
config keys under ``shardwise.`` (:mod:`shardwise.config`); every error class is in
:mod:`shardwise.errors`, all subclasses of ``shardwise.ShardwiseError``. The names load
lazily, so importing shardwise (as xarray does when it lists engines) stays light.
"""

from __future__ import annotations

import importlib
import warnings
from typing import TYPE_CHECKING, Any

from shardwise.errors import ShardwiseError

if TYPE_CHECKING:
    from shardwise import array, config, errors
    from shardwise.io.reader import ArrayReader
    from shardwise.io.stores import ReadOptions
    from shardwise.tools.info import info
    from shardwise.tools.inventory import inventory
    from shardwise.tools.reshard import reshard
    from shardwise.tools.verify import verify
    from shardwise.xarray.open import open_dataset
    from shardwise.xarray.to_zarr import to_zarr

__version__ = "0.1.0.dev0"

__all__ = [
    # writing and reading
    "to_zarr",
    "open_dataset",
    "ArrayReader",
    "ReadOptions",
    # data that exist
    "reshard",
    "verify",
    "info",
    "inventory",
    # the base of every error (the classes: shardwise.errors)
    "ShardwiseError",
    # submodules: dask arrays, settings, errors
    "array",
    "config",
    "errors",
]

_LAZY = {
    "to_zarr": "shardwise.xarray.to_zarr",
    "open_dataset": "shardwise.xarray.open",
    "ArrayReader": "shardwise.io.reader",
    "ReadOptions": "shardwise.io.stores",
    "reshard": "shardwise.tools.reshard",
    "verify": "shardwise.tools.verify",
    "info": "shardwise.tools.info",
    "inventory": "shardwise.tools.inventory",
}

# submodules, imported when first named (``shardwise.cache``); the documented ones
# besides those at the top: cache (the shard-index cache), regions (planning region
# writes of several jobs), testing (helpers for users' tests)
_SUBMODULES = frozenset({"array", "cache", "config", "errors", "regions", "testing", "tools"})

# names that moved (kept for one release, with a FutureWarning): where each is now
_MOVED = {
    "from_zarr": "shardwise.array",
    "check_regions": "shardwise.regions",
    "shared_shards": "shardwise.regions",
    "migrate": "shardwise.tools.migrate",
    "MigrationReport": "shardwise.tools.migrate",
    "ReshardReport": "shardwise.tools.reshard",
    "VerifyReport": "shardwise.tools.verify",
    "Info": "shardwise.tools.info",
    "inventories": "shardwise.tools.inventory",
    "shard_view": "shardwise.tools.views",
    "shard_grid": "shardwise.tools.views",
    "ShardGrid": "shardwise.tools.views",
    "WriteError": "shardwise.errors",
    "ChunksError": "shardwise.errors",
    "StoreIOError": "shardwise.errors",
    "ConflictError": "shardwise.errors",
    "CorruptShardError": "shardwise.errors",
    "ChecksumError": "shardwise.errors",
    "TruncatedShardError": "shardwise.errors",
}


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f"shardwise.{name}")
    module = _LAZY.get(name)
    if module is not None:
        value = getattr(importlib.import_module(module), name)
        globals()[name] = value
        return value
    moved = _MOVED.get(name)
    if moved is not None:  # (not kept in globals(): every use warns)
        warnings.warn(
            f"shardwise.{name} is now {moved}.{name}; the old name will be removed in "
            "the next release",
            FutureWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(moved), name)
    raise AttributeError(f"module 'shardwise' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
