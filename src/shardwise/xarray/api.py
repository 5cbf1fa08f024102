"""The xarray layer's public functions in one place, as ``shardwise.xarray.api`` has
always offered them: ``to_zarr`` (:mod:`shardwise.xarray.to_zarr`), ``open_dataset``
(:mod:`shardwise.xarray.open`), and the shard and inner chunk shapes ``shards="auto"``
and ``chunks="auto"`` pick (:mod:`shardwise.format.grid`).

Nothing is defined here: the write path, its metadata step, the encodings it plans and
the read path each have their own module; ``shardwise`` itself loads them lazily
straight from there.
"""

from __future__ import annotations

from shardwise.format.grid import auto_chunks, auto_shards
from shardwise.xarray.open import open_dataset
from shardwise.xarray.to_zarr import to_zarr

__all__ = ["auto_chunks", "auto_shards", "open_dataset", "to_zarr"]
