"""shardwise: Zarr v3 sharding for dask and xarray.

``xr.open_dataset(store, engine="shardwise", chunks={})`` reads sharded Zarr v3 stores
with one dask chunk per shard; ``shardwise.open_dataset(store, chunks=...)`` reads with
an explicit fan-out graph (one index task per shard, read tasks of whole inner chunks
below it); ``shardwise.to_zarr(ds, store, ...)`` writes with one dask task per shard.
Without xarray: ``shardwise.array.to_zarr(x, store, path)`` (or ``shardwise.to_zarr``,
which passes a dask array on to it) writes one dask array and
``shardwise.from_zarr(store, path)`` reads one with the fan-out graph. Settings are dask
config keys under ``shardwise.`` (:mod:`shardwise.config`); the errors and warnings are in
:mod:`shardwise.errors` (the ones caught most also here), the shard-index cache in
:mod:`shardwise.cache`.
For data that exists already: ``shardwise.reshard`` (Zarr v2, v3 and 2022 draft stores
to sharded Zarr v3, chunks moved as bytes where the codecs allow), ``shardwise.migrate``
(draft stores), ``shardwise.inventory`` and ``shardwise.info`` (what the shard indexes
say is stored), ``shardwise.verify``; the ``shardwise`` command runs them. The names
below load lazily, so importing shardwise (as xarray does when it lists engines) stays
light.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from shardwise.errors import (
    ChecksumError,
    ChunksError,
    ConflictError,
    CorruptShardError,
    ShardwiseError,
    StoreIOError,
    TruncatedShardError,
    WriteError,
)

if TYPE_CHECKING:
    from shardwise.array.read import from_zarr
    from shardwise.graph.regions import check_regions, shared_shards
    from shardwise.io.reader import ArrayReader
    from shardwise.io.stores import ReadOptions
    from shardwise.tools.info import Info, info
    from shardwise.tools.inventory import inventories, inventory
    from shardwise.tools.migrate import MigrationReport, migrate
    from shardwise.tools.reshard import ReshardReport, reshard
    from shardwise.tools.verify import VerifyReport, verify
    from shardwise.tools.views import ShardGrid, shard_grid, shard_view
    from shardwise.xarray.open import open_dataset
    from shardwise.xarray.to_zarr import to_zarr

__version__ = "0.1.0.dev0"

__all__ = [
    # reading
    "open_dataset",
    "from_zarr",
    "ArrayReader",
    "ReadOptions",
    # writing
    "to_zarr",
    "check_regions",
    "shared_shards",
    # tools for data that exist
    "reshard",
    "ReshardReport",
    "migrate",
    "MigrationReport",
    "verify",
    "VerifyReport",
    "inventory",
    "inventories",
    "info",
    "Info",
    "shard_view",
    "shard_grid",
    "ShardGrid",
    # errors users catch most (the rest: shardwise.errors)
    "ShardwiseError",
    "WriteError",
    "ChunksError",
    "StoreIOError",
    "ConflictError",
    "CorruptShardError",
    "ChecksumError",
    "TruncatedShardError",
    "__version__",
]

_LAZY = {
    "MigrationReport": "shardwise.tools.migrate",
    "migrate": "shardwise.tools.migrate",
    "ReshardReport": "shardwise.tools.reshard",
    "reshard": "shardwise.tools.reshard",
    "Info": "shardwise.tools.info",
    "info": "shardwise.tools.info",
    "inventories": "shardwise.tools.inventory",
    "inventory": "shardwise.tools.inventory",
    "ArrayReader": "shardwise.io.reader",
    "check_regions": "shardwise.graph.regions",
    "shared_shards": "shardwise.graph.regions",
    "open_dataset": "shardwise.xarray.open",
    "from_zarr": "shardwise.array.read",
    "ReadOptions": "shardwise.io.stores",
    "to_zarr": "shardwise.xarray.to_zarr",
    "VerifyReport": "shardwise.tools.verify",
    "verify": "shardwise.tools.verify",
    "ShardGrid": "shardwise.tools.views",
    "shard_grid": "shardwise.tools.views",
    "shard_view": "shardwise.tools.views",
}


# documented submodules, imported when first named (``shardwise.cache``)
_SUBMODULES = frozenset({"array", "cache", "config", "errors", "testing"})


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f"shardwise.{name}")
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'shardwise' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
