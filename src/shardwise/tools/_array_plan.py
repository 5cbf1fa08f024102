"""The plan of one array of a reshard (``shardwise.tools.reshard``): the target's grid
and codecs (given sizes checked against the source's dimensions, codec chains compared
to choose repack or re-encode), its attributes as xarray reads them, and its Zarr v3
metadata document."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

import shardwise._compat as _compat
from shardwise._flags import rectilinear_grids
from shardwise.errors import WriteError
from shardwise.format.grid import auto_chunks, auto_shards, check_write_geometry
from shardwise.format.metadata import ArrayInfo, metadata_key
from shardwise.format.v2 import V2ArrayInfo
from shardwise.graph.copy import recode_zlib
from shardwise.io.sources import KINDS

__all__ = ["Sizes", "array_names", "check_sizes", "plan_array", "plural"]

Sizes = Mapping[str, int] | str | None


def plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


# -- planning ----------------------------------------------------------------------------
def array_names(info: ArrayInfo) -> list[str]:
    dims = info.dimension_names
    if dims is None or any(d is None for d in dims):
        return [f"dim_{i}" for i in range(info.ndim)]
    return [str(d) for d in dims]


def _outer(info: ArrayInfo) -> list[int | tuple[int, ...]]:
    """The source's shard (or, unsharded, chunk) size per dimension."""
    return [d.shards for d in info.layout.dims]


def _inner(info: ArrayInfo) -> tuple[int, ...]:
    """The source's inner chunk (or, unsharded, chunk) shape."""
    inner = info.inner_chunk_shape
    if inner is not None:
        return inner
    return tuple(int(d.shards) for d in info.layout.dims)  # type: ignore[arg-type]


def _grid_blocks(inner: tuple[int, ...], shape: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
    """The inner chunk grid as dask-style block sizes (for ``auto_shards``)."""
    return tuple((c,) * max(1, -(-n // c)) for c, n in zip(inner, shape, strict=True))


def check_sizes(name: str, sizes: Sizes, known: set[str]) -> None:
    if sizes is None or sizes == "auto":
        return
    if isinstance(sizes, str) or not isinstance(sizes, Mapping):
        raise WriteError(
            f"{name} must be a mapping of dimension name to size, 'auto' or None",
            expected="e.g. {'time': 100}",
            found=repr(sizes),
        )
    for dim, n in sizes.items():
        if dim not in known:
            raise WriteError(
                f"{name} names a dimension no array has",
                expected=f"one of {sorted(known)}",
                found=repr(dim),
            )
        if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 1:
            raise WriteError(
                f"{name} sizes must be integers >= 1",
                expected="a positive integer",
                found=f"{dim}={n!r}",
            )


def _target_codecs(info: ArrayInfo, codecs: Any) -> tuple[tuple[Any, ...], str | None]:
    """The inner codec chain of the target: the source's (zlib as gzip: Zarr v3 has no
    zlib codec), or ``bytes`` and the codecs given; and what zlib became, if anything
    (``shardwise.graph.copy.recode_zlib``)."""
    from zarr.codecs import BytesCodec

    if codecs is None:
        sharding = info.sharding
        chain = tuple(info.codecs if sharding is None else sharding.codecs)
        return recode_zlib(chain)
    given = tuple(codecs) if isinstance(codecs, list | tuple) else (codecs,)
    if any(type(c).__name__ in ("BytesCodec", "ShardingCodec") for c in given):
        return given, None
    return (BytesCodec(), *given), None


def _same_chain(a: Sequence[Any], b: Sequence[Any]) -> bool:
    try:
        return [c.to_dict() for c in a] == [c.to_dict() for c in b]
    except Exception:
        return False


def _attributes(kind: str, info: ArrayInfo, same_grid: bool) -> tuple[dict[str, Any], list[str]]:
    """The target's attributes and dimension names, as xarray showed the source (an
    older format's ``_ARRAY_DIMENSIONS`` is the dimension names; its fill value becomes
    ``_FillValue``, replacing one the attributes hold in the same-grid mode, as
    zarr-python 2 read the 2022 draft)."""

    attributes = dict(info.attributes)
    if kind == KINDS[0]:
        return attributes, array_names(info)
    attributes.pop("_ARRAY_DIMENSIONS", None)
    fill = info.v2_fill_value if isinstance(info, V2ArrayInfo) else info.fill_value
    if fill is not None and (same_grid or "_FillValue" not in attributes):
        attributes["_FillValue"] = _compat.FillValueCoder.encode(fill, info.dtype)
    return attributes, array_names(info)


def plan_array(
    kind: str,
    info: ArrayInfo,
    rel: str,
    *,
    shards: Sizes,
    chunks: Sizes,
    codecs: Any,
    same_grid: bool = False,
) -> tuple[Any, bool, str | None]:
    """The target's zarr-python metadata, whether its chunks can be repacked, and what
    zlib became when they are repacked and recoded (see ``prepare``'s same-grid
    mode: the grid, the sharding or its absence and the codecs kept, zlib as gzip)."""
    names = array_names(info)
    itemsize = info.dtype.itemsize
    src_inner = _inner(info)
    if same_grid:
        chain, changed = _target_codecs(info, None)
        coded = [c.to_dict() for c in chain]
        if info.sharding is not None:
            coded = [_sharded(src_inner, chain)]
        kept = info.metadata.to_dict()["chunk_grid"]
        return _metadata(kind, info, kept, coded, same_grid=True), True, changed
    outer = _outer(info)
    sized_chunks = dict(chunks) if isinstance(chunks, Mapping) else {}
    sized_shards = dict(shards) if isinstance(shards, Mapping) else {}
    inner = tuple(
        max(1, min(int(sized_chunks.get(n, c)), max(e, 1)))
        for n, c, e in zip(names, src_inner, info.shape, strict=True)
    )
    grid: dict[str, Any] | None = None
    if shards is None and info.sharding is not None and chunks is None:
        grid = info.metadata.to_dict()["chunk_grid"]  # unchanged (regular or rectilinear)
    elif shards == "auto" or (shards is None and info.sharding is None):
        blocks = None if chunks == "auto" else _grid_blocks(inner, info.shape)
        shard_shape = auto_shards(info.shape, itemsize, blocks)
    else:
        shard_shape = tuple(
            int(sized_shards[n]) if n in sized_shards else (o if isinstance(o, int) else max(o))
            for n, o in zip(names, outer, strict=True)
        )
    if chunks == "auto":
        if grid is not None:  # a rectilinear grid kept: inner chunks divide every edge
            grid = None
            shard_shape = tuple(o if isinstance(o, int) else max(o) for o in outer)
        inner = auto_chunks(shard_shape, itemsize)
    if grid is None:
        grid = {"name": "regular", "configuration": {"chunk_shape": list(shard_shape)}}
    edges = grid["configuration"].get("chunk_shape") or _outer(info)
    # a dimension whose inner chunk was not chosen follows the shard sizes (a kept
    # grid's too: the source's inner chunk may have been cut to the array's extent)
    inner = tuple(
        c if n in sized_chunks else math.gcd(c, *_edges(e))
        for n, e, c in zip(names, edges, inner, strict=True)
    )
    # the source's document, where the sizes come from it rather than from the call
    key = None if sized_shards and sized_chunks else _document_key(info)
    for n, e, c in zip(names, edges, inner, strict=True):
        if s := next((s for s in _edges(e) if s % c), 0):
            raise WriteError(
                "the shard size is not a multiple of the inner chunk size",
                expected=f"a multiple of {c} along {n!r}",
                found=str(s),
                array=rel or "/",
                key=key,
                advice=f"Use shards {{{n!r}: {-(-s // c) * c}}} or an inner chunk "
                f"that divides {s}.",
            )
    check_write_geometry(edges, inner, itemsize, array=rel or "/", key=key)
    chain, _ = _target_codecs(info, codecs)
    metadata = _metadata(kind, info, grid, [_sharded(inner, chain)], same_grid=False)
    src_chain = info.codecs if info.sharding is None else info.sharding.codecs
    repack = inner == src_inner and _same_chain(chain, src_chain)
    return metadata, repack, None


def _document_key(info: ArrayInfo) -> str:
    """The store key of the source array's metadata document."""
    key = metadata_key(info.path)
    return key.removesuffix("zarr.json") + ".zarray" if isinstance(info, V2ArrayInfo) else key


def _edges(sizes: int | Sequence[int]) -> tuple[int, ...]:
    """The shard edges of one dimension: its size (regular) or every edge (rectilinear)."""
    return (sizes,) if isinstance(sizes, int) else tuple(sizes)


def _sharded(inner: tuple[int, ...], chain: tuple[Any, ...]) -> dict[str, Any]:
    """The ``sharding_indexed`` codec of the target, as JSON: the index at the end, with
    crc32c."""
    from zarr.codecs import BytesCodec, Crc32cCodec, ShardingCodec

    return ShardingCodec(
        chunk_shape=inner,
        codecs=chain,
        index_codecs=(BytesCodec(endian="little"), Crc32cCodec()),
        index_location="end",
    ).to_dict()


def _metadata(
    kind: str, info: ArrayInfo, grid: dict[str, Any], codecs: list[Any], *, same_grid: bool
) -> Any:
    """The target's zarr-python metadata: the source's with the shard ``grid``, the
    ``codecs`` (JSON), default chunk keys and the attributes and dimension names as
    xarray showed the source (``_attributes``)."""
    attributes, dims = _attributes(kind, info, same_grid)
    doc = info.metadata.to_dict()
    doc.update(
        chunk_grid=grid,
        chunk_key_encoding={"name": "default", "configuration": {"separator": "/"}},
        codecs=codecs,
        attributes=attributes,
        dimension_names=dims,
        storage_transformers=[],
    )
    try:
        with rectilinear_grids():
            return _compat.ArrayV3Metadata.from_dict(doc)
    except ValueError as e:  # (what the checks of plan_array did not foresee)
        raise WriteError(
            "zarr-python refuses the destination's metadata made from the source's",
            expected="an array document zarr-python accepts",
            found=f"{type(e).__name__}: {e}",
            array=info.path or "/",
            key=_document_key(info),
            advice="Give shards= and chunks= for this array (--shards, --chunks), or leave "
            "it out with variables=[...] (--var). Nothing was written.",
        ) from e
