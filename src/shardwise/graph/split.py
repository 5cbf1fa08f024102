"""Few large shards written on many threads: the dask chunks that split each shard's
encoding into parts (``encode_split``) and the parts cut from their blocks without a
copy. One task per shard still lays the parts out and makes the single put
(:mod:`shardwise.graph.write`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

import shardwise.config as config
from shardwise.graph.write_plan import check_encode_split, plan_write, split_dim

if TYPE_CHECKING:
    from shardwise.format.grid import ShardLayout

__all__ = ["SPLIT_BYTES", "current_client", "encode_split_chunks", "split_source"]

SPLIT_BYTES = 8 * 2**20  # encode_split="auto" makes no part of a shard smaller than this


def _threads() -> int:
    """The threads that will run the graph: the distributed cluster's in scope, else
    the local scheduler's."""
    import dask.config

    client = current_client()
    if client is not None:
        return max(1, sum(client.nthreads().values()))
    scheduler = dask.config.get("scheduler", None)
    if scheduler in ("sync", "synchronous", "single-threaded"):
        return 1
    import os

    return int(dask.config.get("num_workers", None) or os.cpu_count() or 1)


def encode_split_chunks(
    chunks: tuple[tuple[int, ...], ...],
    layout: ShardLayout,
    offset: Sequence[int] | None,
    value: int | str | None,
    itemsize: int = 4,
) -> tuple[tuple[int, ...], ...] | None:
    """The dask chunks that split the encoding of each shard into about ``value``
    tasks (None: no split). Blocks are cut only at inner chunk boundaries, first along
    the first dimension (so each part is a contiguous slice of its block), then the
    next, so every part holds whole inner chunks: the part's task encodes them, and
    one task per shard lays them out and makes the single put, as for any shard that
    several blocks touch.

    ``"auto"`` splits only where the shards written are fewer than the threads that
    will run the graph (a distributed client's, or the local scheduler's), into about
    ``2 * threads / shards`` parts per shard, each of at least :data:`SPLIT_BYTES`: few
    large shards then keep every thread busy, while a write of more shards than
    threads, or of small shards, is left as it is (one task per block)."""

    check_encode_split(value)
    if value is None:
        value = config.get("encode-split")
        check_encode_split(value)
    if not layout.sharded or any(0 in c for c in chunks):
        return None
    offset = tuple(offset) if offset is not None else (0,) * len(chunks)
    if value == "auto":
        threads = _threads()
        nshards = plan_write(layout, chunks, offset).nshards
        if nshards >= threads:
            return None
        shard = layout.shard_shape((0,) * layout.ndim)
        nbytes = math.prod(shard) * itemsize
        # two parts per thread: a worker encodes its first part while the next travels
        parts = min(-(-2 * threads // max(nshards, 1)), nbytes // SPLIT_BYTES)
    else:
        parts = int(value)
    if parts < 2:
        return None
    new = list(chunks)
    for d, dim in enumerate(layout.dims):
        if parts < 2:
            break
        per = min(parts, dim.inner_per_shard(0))  # (taking the first shard's)
        if per < 2:
            continue
        new[d] = split_dim(chunks[d], dim, offset[d], per)
        parts = -(-parts // per)
    out = tuple(tuple(c) for c in new)
    return None if out == chunks else out


def split_source(source: Any, cut: tuple[tuple[int, ...], ...]) -> Any:
    """``source`` with its blocks cut into the finer ``cut`` (which refines its chunks):
    each part a task slicing its block, so a part is a view of the block where it lies
    (no copy, as dask's rechunk would make) and only the part travels to another
    worker."""
    import operator

    import dask.array as da
    from dask.base import tokenize
    from dask.highlevelgraph import HighLevelGraph
    from dask.task_spec import Task, TaskRef

    name = f"shardwise-part-{tokenize(source.name, cut)}"
    per_dim = []
    for old, new in zip(source.chunks, cut, strict=True):
        where: list[tuple[int, slice]] = []
        block, used = 0, 0
        for n in new:
            if used == old[block]:
                block, used = block + 1, 0
            where.append((block, slice(used, used + n)))
            used += n
        per_dim.append(where)
    layer: dict[Any, Any] = {}
    for idx in np.ndindex(*(len(c) for c in cut)):
        parts = [per_dim[d][i] for d, i in enumerate(idx)]
        key = (name, *idx)
        parent = TaskRef((source.name, *(b for b, _ in parts)))
        layer[key] = Task(key, operator.getitem, parent, tuple(sl for _, sl in parts))
    graph = HighLevelGraph.from_collections(name, layer, dependencies=[source])
    return da.Array(graph, name, cut, meta=source._meta)


def current_client() -> Any:
    """The ``distributed.Client`` in scope, or None (no client, or no distributed)."""
    try:
        from distributed import get_client

        return get_client()
    except (ImportError, ValueError):
        return None
