"""shardwise: Zarr v3 sharding for dask and xarray.

``xr.open_dataset(store, engine="shardwise", chunks={})`` reads sharded Zarr v3 stores
with one dask chunk per shard; ``shardwise.open_dataset(store, chunks=...)`` reads with
an explicit fan-out graph (one index task per shard, read tasks of whole inner chunks
below it); ``shardwise.to_zarr(ds, store, ...)`` writes with one dask task per shard.
Without xarray: ``shardwise.to_zarr(x, store, path=...)`` writes one dask array and
``shardwise.from_zarr(store, path)`` reads one with the fan-out graph.
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
    CorruptShardError,
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
    WriteError,
)

# functions named like their module are bound now (their modules import little at
# load): bound lazily, a later ``import shardwise.migrate`` (dask unpickling a task)
# would replace the function by the module
from shardwise.migrate import MigrationReport, migrate
from shardwise.reshard import ReshardReport, reshard

if TYPE_CHECKING:
    from shardwise.api import open_dataset, to_zarr
    from shardwise.arrays import from_zarr
    from shardwise.catalog import ArrayChoiceError, Info, info, inventories, inventory
    from shardwise.fanout import ChunkRoundingWarning
    from shardwise.integrity import VerifyReport, verify
    from shardwise.metadata import ArrayInfo
    from shardwise.reader import ArrayReader
    from shardwise.regions import check_regions, shared_shards
    from shardwise.storage import (
        ReadOptions,
        clear_index_cache,
        index_cache,
        set_index_cache_size,
    )

__version__ = "0.1.0.dev0"

__all__ = [
    "ArrayChoiceError",
    "ArrayInfo",
    "ArrayReader",
    "ChecksumError",
    "ChunkRoundingWarning",
    "ChunksError",
    "CorruptShardError",
    "Info",
    "MigrationReport",
    "NotAZarrStoreError",
    "OverlapError",
    "ReadOptions",
    "RegionConflictError",
    "ReshardReport",
    "ShardwiseError",
    "StoreExistsError",
    "StoreIOError",
    "TooLargeError",
    "TruncatedShardError",
    "UnsafeNameError",
    "UnsupportedArrayError",
    "UnsupportedCodecError",
    "VerifyReport",
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
    "shared_shards",
    "to_zarr",
    "verify",
]

_LAZY = {
    "ArrayChoiceError": "shardwise.catalog",
    "Info": "shardwise.catalog",
    "info": "shardwise.catalog",
    "inventories": "shardwise.catalog",
    "inventory": "shardwise.catalog",
    "ArrayInfo": "shardwise.metadata",
    "ArrayReader": "shardwise.reader",
    "ChunkRoundingWarning": "shardwise.fanout",
    "check_regions": "shardwise.regions",
    "shared_shards": "shardwise.regions",
    "open_dataset": "shardwise.api",
    "from_zarr": "shardwise.arrays",
    "ReadOptions": "shardwise.storage",
    "clear_index_cache": "shardwise.storage",
    "index_cache": "shardwise.storage",
    "set_index_cache_size": "shardwise.storage",
    "to_zarr": "shardwise.api",
    "VerifyReport": "shardwise.integrity",
    "verify": "shardwise.integrity",
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
