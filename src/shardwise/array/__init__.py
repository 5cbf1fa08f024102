"""The dask-array API: :func:`to_zarr` / :func:`from_zarr` for one dask array (the
counterparts of ``dask.array.to_zarr`` and ``dask.array.from_zarr``), and the write
primitive the xarray layer builds on (:mod:`shardwise.array.store`).

    import shardwise.array
    shardwise.array.to_zarr(x, "out.zarr", path="t", shards=(1000, 1000))
    y = shardwise.array.from_zarr("out.zarr", "t")
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from shardwise.array.api import to_zarr
    from shardwise.array.read import from_zarr

__all__ = ["from_zarr", "to_zarr"]


_LAZY = {"to_zarr": "shardwise.array.api", "from_zarr": "shardwise.array.read"}


def __getattr__(name: str) -> Any:
    # (bound on first use: the engine imports the read side of this layer alone)
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'shardwise.array' has no attribute {name!r}")
