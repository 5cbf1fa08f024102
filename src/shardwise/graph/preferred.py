"""The dask chunks a read gives by default (``chunks={}`` of the engine, the default
chunks of ``shardwise.open_dataset`` and ``shardwise.array.from_zarr``): whole shards, one per
shard from local disk and memory, several together toward dask's ``array.chunk-size``
over a network, and never more than :data:`PREFERRED_MAX_CHUNKS` chunks."""

from __future__ import annotations

import math
from typing import Any

__all__ = ["PREFERRED_MAX_CHUNKS", "preferred_chunks", "shard_sizes"]


def preferred_chunks(info: Any, kind: str) -> tuple[int | tuple[int, ...], ...]:
    """The dask chunks ``chunks={}`` gives: one per shard from local disk and memory.
    From a store over a ``kind="network"`` (object stores, HTTP), whole shards, as
    many taken together as make about dask's ``array.chunk-size`` (one where a shard is
    that big): a task then has several shards' requests in flight at once, where one
    shard a task would leave dask's few threads waiting a round trip each. An int per
    regular dimension, the sizes (clipped at the array's end) along a rectilinear
    one. Where that would still give more than :data:`PREFERRED_MAX_CHUNKS` dask
    chunks, more are taken together (doubling along the dimension with the most
    chunks until the count is under it)."""
    import dask
    from dask.utils import parse_bytes

    extents = [dim.extent for dim in info.layout.dims]
    sizes = shard_sizes(info)
    if kind == "network":
        target = int(parse_bytes(dask.config.get("array.chunk-size")))
        sizes = _grouped(list(sizes), extents, info.dtype.itemsize, target)
    return _coarsened(list(sizes), extents)


def shard_sizes(info: Any) -> tuple[int | tuple[int, ...], ...]:
    """Shard sizes per dimension as dask wants them: an int along a regular dimension,
    the sizes (clipped at the array's end) along a rectilinear one."""
    out: list[int | tuple[int, ...]] = []
    for dim in info.layout.dims:
        if dim.regular:
            out.append(dim.shards)
        else:
            sizes = []
            start = 0
            for s in dim.shards:
                n = min(s, dim.extent - start)
                if n <= 0:
                    break
                sizes.append(n)
                start += s
            out.append(tuple(sizes) if sizes else (0,))
    return tuple(out)


PREFERRED_MAX_CHUNKS = 1_000_000
"""The most dask chunks ``chunks={}`` gives one variable of the engine (a million: a
point read from it takes about two seconds, most of them dask culling its graph; dask
spends more than a minute on a hundred million, the shards of a 10**7 x 10**7 array in
1000 x 1000 shards)."""

Sizes = list[int | tuple[int, ...]]


def _chunks_along(size: int | tuple[int, ...], extent: int, k: int) -> int:
    """Chunks along a dimension of ``extent`` in ``size`` with ``k`` taken together."""
    n = len(size) if isinstance(size, tuple) else -(-extent // max(size, 1))
    return max(1, -(-n // k))


def _longest(size: int | tuple[int, ...], extent: int, k: int) -> int:
    """The longest chunk along a dimension with ``k`` of ``size`` taken together."""
    if isinstance(size, tuple):
        return max((sum(size[i : i + k]) for i in range(0, len(size), k)), default=0)
    return min(size * k, max(extent, size))


def _grouped(
    sizes: Sizes, extents: list[int], itemsize: int, target: int
) -> tuple[int | tuple[int, ...], ...]:
    """``sizes`` with whole ones taken together toward ``target`` bytes a chunk: the
    factor along the dimension whose chunk is shortest (of those with more than one
    chunk) doubled while the chunk stays within ``target``; of equally short ones, the
    last dimension's first, so that a chunk spans whole rows of the array in C order as
    far as it can (its bytes one block of the whole: putting chunks together copies
    blocks, not strided rows)."""
    factors = [1] * len(sizes)

    def nbytes(fs: list[int]) -> int:
        return itemsize * math.prod(
            _longest(s, e, k) for s, e, k in zip(sizes, extents, fs, strict=True)
        )

    while True:
        open_dims = [
            d
            for d, (s, e, k) in enumerate(zip(sizes, extents, factors, strict=True))
            if _chunks_along(s, e, k) > 1
        ]
        if not open_dims:
            break
        d = min(open_dims, key=lambda d: (_longest(sizes[d], extents[d], factors[d]), -d))
        trial = [k * 2 if i == d else k for i, k in enumerate(factors)]
        if nbytes(trial) > target:
            break
        factors = trial
    return _applied(sizes, extents, factors)


def _applied(
    sizes: Sizes, extents: list[int], factors: list[int]
) -> tuple[int | tuple[int, ...], ...]:
    out: list[int | tuple[int, ...]] = []
    for size, extent, k in zip(sizes, extents, factors, strict=True):
        if k == 1:
            out.append(size)
        elif isinstance(size, tuple):
            out.append(tuple(sum(size[i : i + k]) for i in range(0, len(size), k)))
        else:
            out.append(min(size * k, max(extent, size)))
    return tuple(out)


def _coarsened(sizes: Sizes, extents: list[int]) -> tuple[int | tuple[int, ...], ...]:
    """``sizes`` (per dimension: one size, or the sizes along it) with ``k`` shards taken
    together along each dimension, the factors doubled where the chunks are most, until
    at most :data:`PREFERRED_MAX_CHUNKS` chunks remain."""
    factors = [1] * len(sizes)
    while True:
        counts = [_chunks_along(s, e, k) for s, e, k in zip(sizes, extents, factors, strict=True)]
        if math.prod(counts) <= PREFERRED_MAX_CHUNKS:
            break
        factors[counts.index(max(counts))] *= 2
    return _applied(sizes, extents, factors)
