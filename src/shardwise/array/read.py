"""``shardwise.from_zarr``: one Zarr array read as a ``dask.array.Array`` with the fan-out
graph of :mod:`shardwise.graph.read`, and the ``chunks=`` words and per-axis sizes that
group whole inner chunks into dask chunks.

Apart from the write path (:mod:`shardwise.array.api`), which it shares nothing with but
how axis numbers are read (:func:`shardwise.array.plan.axis_of`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from shardwise.array.plan import axis_of, no_axis
from shardwise.errors import ChunksError
from shardwise.graph.read import block_sizes, fanout_array
from shardwise.io.reader import ArrayReader
from shardwise.io.stores import ReadOptions

__all__ = ["from_zarr"]

_WORDS = ("shards", "inner", "auto")


def from_zarr(
    store: Any,
    path: str = "",
    *,
    chunks: str | Mapping[int, Any] | Sequence[Any] = "shards",
    storage_options: dict[str, Any] | None = None,
    read_options: Any = None,
) -> Any:
    """Read the Zarr array at ``path`` of ``store`` (a path, URL or zarr ``Store``) as a
    ``dask.array.Array`` with the fan-out graph: one index task per shard that several
    dask chunks share, and below it one task per dask chunk reading its inner chunks as
    coalesced byte ranges.

    ``chunks``: ``"shards"`` (default: one dask chunk per shard), ``"inner"`` (one per
    inner chunk), ``"auto"`` (whole shards or inner chunks toward dask's
    ``array.chunk-size``), or per axis (a tuple, or a dict by axis number) any of
    those, an int size, a tuple of sizes, ``-1`` (the whole axis) or ``None`` (shards).
    Sizes that cut inner chunks move to inner-chunk boundaries with a
    :class:`~shardwise.ChunkRoundingWarning`. Zarr v2 arrays and 2022 sharding drafts
    are read too. ``read_options``: a :class:`~shardwise.ReadOptions` or a dict.
    """
    if isinstance(read_options, Mapping):
        read_options = ReadOptions(**read_options)
    reader = ArrayReader.open(store, path, storage_options=storage_options, options=read_options)
    name = path.strip("/") or "/"
    by_axis = _chunks_by_axis(chunks, reader.ndim, name)
    sizes = block_sizes(reader, tuple(range(reader.ndim)), by_axis, name=name)
    return fanout_array(reader, reader, sizes, name=name, dtype=reader.dtype)


def _chunks_by_axis(chunks: Any, ndim: int, name: str) -> Any:
    if isinstance(chunks, str):
        if chunks not in _WORDS:
            raise ChunksError(
                "unknown chunks",
                expected='"shards", "inner", "auto", or sizes per axis (a tuple or a dict)',
                found=repr(chunks),
                array=name,
                advice='Use chunks="shards" for one dask chunk per shard.',
            )
        return chunks
    if isinstance(chunks, Mapping):
        items = list(chunks.items())
    elif isinstance(chunks, Sequence):
        if len(chunks) != ndim:
            raise ChunksError(
                "chunks have the wrong number of axes",
                expected=f"{ndim} entries, one per axis",
                found=f"{len(chunks)}: {tuple(chunks)!r}",
                array=name,
            )
        items = list(enumerate(chunks))
    else:
        raise ChunksError(
            "unknown chunks",
            expected='"shards", "inner", "auto", or sizes per axis (a tuple or a dict)',
            found=f"{type(chunks).__name__} {chunks!r}",
            array=name,
        )
    out: dict[int, Any] = {}
    for value, size in items:
        if (axis := axis_of(value, ndim)) is None:
            raise no_axis(ChunksError, "a key of chunks", value, ndim, name)
        out[axis] = size
    return out
