"""Rectilinear shard grids on the write side: dask's own chunks as shards.

A rectilinear grid (zarr-extensions ``chunk-grids/rectilinear``) lists the shard sizes
along each dimension, either as one integer (a regular dimension) or as a list of
edges. Inner chunks stay regular and must divide every shard, so the last edge of a
dimension is padded up to a multiple of the inner chunk (the grid may reach past the
array's end, as the spec allows).

This module is arithmetic on edges, pure as the rest of the format layer: the scoped
switch of zarr-python's ``array.rectilinear_chunks`` flag, around the zarr-python
calls that read or write such a grid, is :func:`shardwise._flags.rectilinear_grids`.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from typing import Any

import shardwise._compat as _compat
from shardwise.errors import VersionError, WriteError
from shardwise.format.grid import auto_chunks

__all__ = [
    "MAX_SHARDS",
    "Edges",
    "appended",
    "check_supported",
    "extend",
    "grid_of",
    "pad",
]

MAX_SHARDS = 10_000_000
"""The most shards a rectilinear grid written by shardwise may have: every edge is
listed in the array's ``zarr.json``, which every reader parses whole."""

Edges = int | tuple[int, ...]
"""One dimension of a rectilinear grid: a regular size, or the list of shard sizes."""


# -- edges ---------------------------------------------------------------------------------
def is_regular(sizes: Sequence[int]) -> bool:
    """Dask chunk sizes a regular grid can hold: all equal but a shorter last one."""
    return bool(sizes) and all(s == sizes[0] for s in sizes[:-1]) and sizes[-1] <= sizes[0]


def pad(edges: Sequence[int], inner: int) -> tuple[int, ...]:
    """``edges`` with the last one rounded up to a multiple of ``inner``."""
    out = tuple(int(e) for e in edges)
    return (*out[:-1], -(-out[-1] // inner) * inner)


def single(edges: tuple[int, ...]) -> Edges:
    """One edge as a regular size (the same grid, and regular for other readers)."""
    return edges[0] if len(edges) == 1 else edges


def expand(edges: Edges, extent: int) -> tuple[int, ...]:
    """The explicit shard sizes of a dimension covering ``extent``."""
    if isinstance(edges, int):
        return (edges,) * max(1, -(-extent // edges)) if extent else ()
    return tuple(edges)


def extend(
    old: Edges, old_extent: int, new_extent: int, blocks: Sequence[int], inner: int
) -> tuple[int, ...]:
    """The edges after appending data in dask chunks ``blocks`` (sizes) at
    ``old_extent``: the existing edges stay; every dask chunk boundary beyond the end of
    the last existing shard starts a new shard; the new last edge is padded to a
    multiple of ``inner``. When the stored array ends inside its last shard, the first
    appended values fill that shard."""
    edges = expand(old, old_extent)
    end = sum(edges)
    cuts, pos = [], old_extent
    for b in blocks:
        pos += int(b)
        if pos > end:
            cuts.append(pos)
    if pos != new_extent:
        raise ValueError(f"blocks add up to {pos - old_extent}, not {new_extent - old_extent}")
    new = []
    for c in cuts:
        new.append(c - end)
        end = c
    return pad(edges + tuple(new), inner) if new else edges


def grid_of(edges: Sequence[Edges]) -> Any:
    """zarr-python's metadata of the grid with these dimensions (a regular grid when
    every dimension is one size)."""

    if all(isinstance(e, int) for e in edges):
        return _compat.RegularChunkGridMetadata(chunk_shape=tuple(int(e) for e in edges))  # type: ignore[arg-type]
    return _compat.RectilinearChunkGridMetadata(
        chunk_shapes=tuple(int(e) if isinstance(e, int) else tuple(map(int, e)) for e in edges)
    )


def appended(
    metadata: Any, name: Hashable, dims: Sequence[Hashable], axis: int, blocks: Sequence[int]
) -> list[Edges]:
    """The grid of a Zarr v3 array (``metadata``; regular or rectilinear) once dask
    chunks of sizes ``blocks`` are appended along ``axis``, each a shard of its own
    (:func:`extend`), checked against the inner chunks (:func:`check_inner`)."""

    grid = metadata.chunk_grid
    if isinstance(grid, _compat.RectilinearChunkGridMetadata):
        old = tuple(grid.chunk_shapes)
    else:
        old = tuple(grid.chunk_shape)
    sharding = _compat.sharding_codec(metadata)
    inner = tuple(sharding.chunk_shape) if sharding is not None else (1,) * len(old)
    n = metadata.shape[axis]
    edges = list(old)
    edges[axis] = extend(old[axis], n, n + sum(blocks), blocks, inner[axis])
    shape = list(metadata.shape)
    shape[axis] += sum(blocks)
    check_inner(name, dims, edges, inner, shape)
    check_supported(name, edges)
    return edges


def nshards(edges: Sequence[Edges], shape: Sequence[int]) -> int:
    return math.prod(len(expand(e, n)) or 1 for e, n in zip(edges, shape, strict=True))


# -- checks and choices --------------------------------------------------------------------
def check_supported(name: Hashable, edges: Sequence[Edges], *, xarray: bool = False) -> None:
    """A grid of ``edges`` that is rectilinear (a dimension of more than one listed
    edge) needs zarr-python 3.2 (and, written through xarray's metadata step,
    ``xarray``, xarray 2026.9): refused on older releases, naming the release."""
    if all(isinstance(e, int) or len(e) == 1 for e in edges):
        return
    for feature in ("rectilinear", "xarray-rectilinear") if xarray else ("rectilinear",):
        if not _compat.has(feature):
            raise VersionError(
                "irregular dask chunks become rectilinear shards, which this installation "
                "cannot write",
                expected=_compat.needed(feature),
                found=f"shards {tuple(e if isinstance(e, int) else list(e) for e in edges)}",
                array=str(name),
                advice="Upgrade it, or rechunk to regular sizes first (all equal but a "
                "shorter last one: ds.chunk({...}), x.rechunk(...)), or give shards=. "
                "Nothing was written.",
            )


def check_blocks(name: Hashable, dims: Sequence[Hashable], blocks: Sequence[Sequence[int]]) -> None:
    """Dask chunks of size 0 cannot be shards."""
    for dim, sizes in zip(dims, blocks, strict=True):
        if any(s == 0 for s in sizes) and sum(sizes) > 0:
            raise WriteError(
                "a dask chunk of size 0 cannot become a shard",
                expected=f"dask chunks of at least 1 element along {dim!r}",
                found=f"chunk sizes {tuple(sizes)}",
                array=str(name),
                advice=f"Drop the empty chunks first: ds.chunk({{{str(dim)!r}: "
                f"{tuple(s for s in sizes if s)}}}) (it moves no data), or give "
                "regular shards with shards={...}.",
            )


def interior(edges: Edges) -> tuple[int, ...]:
    """The edges an inner chunk must divide: all but the (padded) last, or the regular
    size."""
    return (edges,) if isinstance(edges, int) else tuple(edges[:-1])


def check_inner(
    name: Hashable,
    dims: Sequence[Hashable],
    edges: Sequence[Edges],
    inner: Sequence[int],
    shape: Sequence[int],
) -> None:
    """Inner chunks must divide every shard edge but the last of each dimension; the
    grid must stay under :data:`MAX_SHARDS` shards."""
    for dim, e, c in zip(dims, edges, inner, strict=True):
        if not isinstance(c, int) or isinstance(c, bool) or c < 1:
            raise WriteError(
                "inner chunk sizes must be positive integers",
                expected="an int >= 1 per dimension",
                found=f"{c!r} along {dim!r}",
                array=str(name),
            )
        bad = next((x for x in interior(e) if x % c), None)
        if bad is not None:
            g = math.gcd(*interior(e))
            raise WriteError(
                "the inner chunk size does not divide a shard edge of the rectilinear grid",
                expected=f"an inner chunk size along {dim!r} that divides every shard "
                f"size but the last (their greatest common divisor is {g})",
                found=f"inner chunk {c} and shard size {bad} along {dim!r} "
                f"(shard sizes {_short(e)})",
                array=str(name),
                advice=f"Use an inner chunk size that divides {g} along {dim!r} (e.g. {g}), "
                "or leave `chunks` out and shardwise picks one.",
            )
    n = nshards(edges, shape)
    if n > MAX_SHARDS:
        raise WriteError(
            "the rectilinear grid has too many shards",
            expected=f"at most {MAX_SHARDS:,} shards (every edge is listed in zarr.json)",
            found=f"{n:,} shards of sizes {tuple(_short(e) for e in edges)}",
            array=str(name),
            advice="Use larger dask chunks (ds.chunk(...)), or regular shards with shards={...}.",
        )


def auto_inner(
    name: Hashable,
    dims: Sequence[Hashable],
    edges: Sequence[Edges],
    shape: Sequence[int],
    itemsize: int,
    target: int,
) -> tuple[int, ...]:
    """The largest inner chunk toward ``target`` bytes that divides every interior
    edge: a divisor of their greatest common divisor along each dimension. Warns when
    that falls below 1/16 of the target while the shards are larger than that, naming
    the dimensions whose edges are to blame."""
    import warnings

    unit = []
    for e, n in zip(edges, shape, strict=True):
        inside = interior(e)
        unit.append(math.gcd(*inside) if inside else max(1, n))
    inner = auto_chunks(tuple(unit), itemsize, None, target)
    size = math.prod(inner) * itemsize
    smallest = math.prod(min(interior(e), default=n) for e, n in zip(edges, shape, strict=True))
    if size < target / 16 <= smallest * itemsize:  # the shards could hold larger chunks
        blame = [
            f"{d!r} (shard sizes {_short(e)}, greatest common divisor {u})"
            for d, e, u in zip(dims, edges, unit, strict=True)
            if not isinstance(e, int) and u < max(interior(e), default=u)
        ]
        warnings.warn(
            f"variable {str(name)!r}: the inner chunks {inner} ({size:,} bytes) that divide "
            f"every shard are far below the {target:,} bytes aimed at, because of the "
            f"edges along {', '.join(blame) or 'its dimensions'}. Reads of one inner chunk "
            "will be small; pass chunks={...} to choose, or rechunk to sizes with a "
            "larger common divisor.",
            UserWarning,
            stacklevel=6,  # the caller of shardwise.to_zarr
        )
    return inner


def _short(e: Edges) -> str:
    if isinstance(e, int):
        return str(e)
    return str(tuple(e)) if len(e) <= 8 else f"({', '.join(map(str, e[:8]))}, ... {len(e)} in all)"
