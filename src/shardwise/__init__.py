"""shardwise: Zarr v3 sharding for dask and xarray.

``xr.open_dataset(store, engine="shardwise", chunks={})`` reads sharded Zarr v3 stores
with one dask chunk per shard; ``shardwise.open_dataset(store, chunks=...)`` reads with
an explicit fan-out graph (one index task per shard, read tasks of whole inner chunks
below it); ``shardwise.to_zarr(ds, store, ...)`` writes with one dask task per shard.
Without xarray: ``shardwise.array.to_zarr(x, store, path)`` (or ``shardwise.to_zarr``,
which passes a dask array on to it) writes one dask array and
``shardwise.from_zarr(store, path)`` reads one with the fan-out graph. Settings are dask
config keys under ``shardwise.`` (:mod:`shardwise.config`).
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
    ArgumentError,
    ChangingShardError,
    ChecksumError,
    ChunksError,
    ConflictError,
    CorruptShardError,
    IncompleteAppendError,
    NotAZarrStoreError,
    OverlapError,
    RegionConflictError,
    ShardwiseError,
    StoreExistsError,
    StoreIOError,
    TooLargeError,
    TruncatedShardError,
    UnsafeNameError,
    UnsupportedArrayError,
    UnsupportedCodecError,
    VersionError,
    WriteError,
)

if TYPE_CHECKING:
    from shardwise.array.read import from_zarr
    from shardwise.format.metadata import ArrayInfo
    from shardwise.graph.fanout import ChunkRoundingWarning
    from shardwise.graph.regions import check_regions, shared_shards
    from shardwise.io.cache import clear_index_cache, index_cache, set_index_cache_size
    from shardwise.io.reader import ArrayReader
    from shardwise.io.stores import ReadOptions
    from shardwise.tools.info import Info, info
    from shardwise.tools.inventory import ArrayChoiceError, inventories, inventory
    from shardwise.tools.migrate import MigrationReport, migrate
    from shardwise.tools.reshard import ReshardReport, reshard
    from shardwise.tools.verify import VerifyReport, verify
    from shardwise.tools.views import ShardGrid, shard_grid, shard_view
    from shardwise.xarray.open import open_dataset
    from shardwise.xarray.to_zarr import to_zarr

__version__ = "0.1.0.dev0"

__all__ = [
    "ArgumentError",
    "ArrayChoiceError",
    "ArrayInfo",
    "ArrayReader",
    "ChangingShardError",
    "ChecksumError",
    "ChunkRoundingWarning",
    "ChunksError",
    "ConflictError",
    "CorruptShardError",
    "Info",
    "MigrationReport",
    "NotAZarrStoreError",
    "OverlapError",
    "ReadOptions",
    "RegionConflictError",
    "ReshardReport",
    "ShardGrid",
    "ShardwiseError",
    "StoreExistsError",
    "IncompleteAppendError",
    "StoreIOError",
    "TooLargeError",
    "TruncatedShardError",
    "UnsafeNameError",
    "UnsupportedArrayError",
    "UnsupportedCodecError",
    "VerifyReport",
    "VersionError",
    "WriteError",
    "__version__",
    "check_regions",
    "clear_index_cache",
    "from_zarr",
    "index_cache",
    "info",
    "inventories",
    "inventory",
    "migrate",
    "open_dataset",
    "reshard",
    "set_index_cache_size",
    "shard_grid",
    "shard_view",
    "shared_shards",
    "to_zarr",
    "verify",
]

_LAZY = {
    "MigrationReport": "shardwise.tools.migrate",
    "migrate": "shardwise.tools.migrate",
    "ReshardReport": "shardwise.tools.reshard",
    "reshard": "shardwise.tools.reshard",
    "ArrayChoiceError": "shardwise.tools.inventory",
    "Info": "shardwise.tools.info",
    "info": "shardwise.tools.info",
    "inventories": "shardwise.tools.inventory",
    "inventory": "shardwise.tools.inventory",
    "ArrayInfo": "shardwise.format.metadata",
    "ArrayReader": "shardwise.io.reader",
    "ChunkRoundingWarning": "shardwise.graph.fanout",
    "check_regions": "shardwise.graph.regions",
    "shared_shards": "shardwise.graph.regions",
    "open_dataset": "shardwise.xarray.open",
    "from_zarr": "shardwise.array.read",
    "ReadOptions": "shardwise.io.stores",
    "clear_index_cache": "shardwise.io.cache",
    "index_cache": "shardwise.io.cache",
    "set_index_cache_size": "shardwise.io.cache",
    "to_zarr": "shardwise.xarray.to_zarr",
    "VerifyReport": "shardwise.tools.verify",
    "verify": "shardwise.tools.verify",
    "ShardGrid": "shardwise.tools.views",
    "shard_grid": "shardwise.tools.views",
    "shard_view": "shardwise.tools.views",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'shardwise' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
