"""shardwise: Zarr v3 sharding for dask and xarray.

``xr.open_dataset(store, engine="shardwise", chunks={})`` reads sharded Zarr v3 stores
with one dask chunk per shard; ``shardwise.open_dataset(store, chunks=...)`` reads with
an explicit fan-out graph (one index task per shard, read tasks of whole inner chunks
below it); ``shardwise.to_zarr(ds, store, ...)`` writes with one dask task per shard. The names below load lazily, so importing shardwise (as
xarray does when it lists engines) stays light.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from shardwise.errors import (
    ChecksumError,
    ChunksError,
    CorruptShardError,
    NotAZarrStoreError,
    RegionConflictError,
    ShardwiseError,
    StoreExistsError,
    TruncatedShardError,
    UnsupportedArrayError,
    UnsupportedCodecError,
    WriteError,
)

if TYPE_CHECKING:
    from shardwise.api import open_dataset, to_zarr
    from shardwise.fanout import ChunkRoundingWarning
    from shardwise.integrity import VerifyReport, verify
    from shardwise.metadata import ArrayInfo
    from shardwise.migrate import MigrationReport, migrate
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
    "ArrayInfo",
    "ArrayReader",
    "ChecksumError",
    "ChunkRoundingWarning",
    "ChunksError",
    "CorruptShardError",
    "MigrationReport",
    "NotAZarrStoreError",
    "ReadOptions",
    "RegionConflictError",
    "ShardwiseError",
    "StoreExistsError",
    "TruncatedShardError",
    "UnsupportedArrayError",
    "UnsupportedCodecError",
    "VerifyReport",
    "WriteError",
    "__version__",
    "check_regions",
    "clear_index_cache",
    "index_cache",
    "migrate",
    "open_dataset",
    "set_index_cache_size",
    "shared_shards",
    "to_zarr",
    "verify",
]

_LAZY = {
    "ArrayInfo": "shardwise.metadata",
    "ArrayReader": "shardwise.reader",
    "ChunkRoundingWarning": "shardwise.fanout",
    "check_regions": "shardwise.regions",
    "migrate": "shardwise.migrate",
    "MigrationReport": "shardwise.migrate",
    "shared_shards": "shardwise.regions",
    "open_dataset": "shardwise.api",
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
