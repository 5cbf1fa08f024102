"""``shardwise.inventory`` and ``shardwise.info``: which chunks a store holds, and how
many bytes each takes, read from the shard indexes alone.

``inventory`` gives one array's inner chunk grid as an ``xarray.Dataset``: for every
inner chunk whether it is stored and its stored (compressed) size, and which shard holds
it; the totals (shards and inner chunks present, bytes, compression ratios) are its
attributes. ``info`` sums up a whole hierarchy the same way, as text or JSON
(``shardwise info PATH``). Every kind of store shardwise reads is covered: Zarr v3
(sharded or not, regular or rectilinear shard grids), Zarr v2 and the 2022 sharding
draft; an unsharded array's chunks count as shards of one inner chunk each.

What it costs: one listing of the array's keys (shards that are not stored cost
nothing), then for each stored shard one ranged read of its index (a suffix read for an
index at the end, a range for one at the start); chunk data is never read. An unsharded
array's chunk sizes come with the listing from local disk, fsspec (s3fs, gcsfs...) and
obstore stores; other stores (wrapping stores included) are asked each chunk's size.
Reads run concurrently (``shardwise.inventory-concurrency``, dask config, default 64
at a time); past ``shardwise.inventory-batch`` (default 1000) stored shards, batches of
that many run as dask tasks on the current scheduler, each returning the small arrays
of its shards' sizes.

``info`` costs that and no more: its totals are summed shard by shard, so an array
whose grid has 10**14 shards of which a few are stored costs a few index reads. An
``inventory`` is a Dataset with a cell per inner chunk of the *whole* grid: it is
refused (``shardwise.errors.TooLargeError``, before its indexes are read) when
the grid holds more than ``shardwise.inventory-cells`` (dask config, default 2**24:
about 17 bytes a cell, twice that while the grid is built, 0.5 GiB) inner chunks and
more than ``INVENTORY_SPARSITY`` times the inner chunks of the shards stored.

This module builds the Dataset and its totals and prints them (``summary``); what is
stored is found by ``shardwise.tools._stored`` (the listing and the index reads), the
hierarchy's summary is ``shardwise.tools.info``, and the words both print are
``shardwise.tools._text``'s.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

import shardwise._compat as _compat
import shardwise.config as config
from shardwise._html import ShardMap
from shardwise.codecs import codec_name
from shardwise.errors import ArrayChoiceError, TooLargeError
from shardwise.format.grid import INT64_MAX
from shardwise.format.index import IndexFormat
from shardwise.format.metadata import metadata_key
from shardwise.io.listing import list_sized
from shardwise.io.sources import Source, open_source
from shardwise.tools._stored import Sizes, Stored, index_format, probe, stored
from shardwise.tools._text import (
    byte_size,
    codec_chain,
    dims_text,
    percent,
    ratio_of,
    shape_list,
    store_name,
)

if TYPE_CHECKING:
    import xarray as xr

    from shardwise.format.grid import DimGrid
    from shardwise.format.metadata import ArrayInfo

__all__ = [
    "INVENTORY_SPARSITY",
    "inventories",
    "inventory",
    "totals_of",
    "select",
    "summary",
    "totals",
]

INVENTORY_SPARSITY = 64
"""Past ``shardwise.inventory-cells``, the grid of an ``inventory`` may have at most this
many inner chunks per inner chunk of the shards stored: its memory then stays in
proportion to what is stored (whose indexes are read anyway, 16 bytes a cell)."""


# -- the chunk grid -----------------------------------------------------------------------
@dataclass(frozen=True)
class _Axis:
    """The inner chunks along one dimension that hold part of the array (built only
    once the grid's size has been checked: these arrays are as long as the dimension
    has inner chunks)."""

    first: npt.NDArray[np.int64]  # per shard: its first inner chunk's number
    count: npt.NDArray[np.int64]  # per shard: how many of its inner chunks hold data
    start: npt.NDArray[np.int64]  # per inner chunk: where it starts in the array
    size: npt.NDArray[np.int64]  # per inner chunk: its (encoded) size
    shard: npt.NDArray[np.int64]  # per inner chunk: the shard holding it

    @classmethod
    def of(cls, dim: DimGrid) -> _Axis:
        n = dim.nshards
        starts = dim.starts()  # each below the extent: no sum here passes 2**63 - 1
        if isinstance(dim.shards, int):
            sizes = np.full(n, dim.shards, dtype=np.int64)
        else:
            sizes = np.asarray(dim.shards[:n], dtype=np.int64)
        inner = sizes if dim.inner is None else np.full(n, dim.inner, dtype=np.int64)
        count = -(-np.minimum(sizes, dim.extent - starts) // inner)
        first = np.cumsum(count) - count
        total = int(count.sum())
        local = np.arange(total, dtype=np.int64) - np.repeat(first, count)
        return cls(
            first=first,
            count=count,
            start=np.repeat(starts, count) + local * np.repeat(inner, count),
            size=np.repeat(inner, count),
            shard=np.repeat(np.arange(n, dtype=np.int64), count),
        )


def _total(values: npt.NDArray[np.int64]) -> int:
    """The sum of non-negative int64 values, exact (numpy's would wrap past 2**63)."""
    if not values.size:
        return 0
    if int(values.max()) <= INT64_MAX // values.size:
        return int(values.sum())
    return sum(values.tolist())


def _dim_names(info: ArrayInfo) -> list[str]:
    """A name per dimension: the array's own (``dim_<i>`` when it has none, or when
    names repeat)."""
    names = info.dimension_names or (None,) * info.ndim
    named = [n if isinstance(n, str) and n else None for n in names]
    if len({n for n in named if n is not None}) != sum(n is not None for n in named):
        named = [None] * info.ndim
    out: list[str] = []
    for i, n in enumerate(named):
        name = n if n is not None else f"dim_{i}"
        while name in out or name in named[i + 1 :]:
            name = f"{name}_{i}"
        out.append(name)
    return out


# -- inventory ----------------------------------------------------------------------------
def select(src: Source, variable: str | None) -> ArrayInfo:
    # a damaged document is no choice unless asked for by name (then its error is raised)
    choices = sorted([*src.arrays, *(p for p in src.unreadable if p not in src.damaged)])
    where = src.base or "/"
    if variable is None:
        if len(choices) != 1:
            raise ArrayChoiceError(
                "say which array" if choices else "no array in the group",
                expected="a group holding one array, or variable=<array path>",
                found=f"arrays {choices}" if choices else "no arrays",
                array=where,
                advice="Pass variable= one of the paths found (relative to the group), "
                "or use shardwise.tools.inventory.inventories for all of them.",
            )
        variable = choices[0]
    path = variable.strip("/")
    if path in src.unreadable:
        raise src.unreadable[path]
    if path not in src.arrays:
        raise ArrayChoiceError(
            "no such array",
            expected=f"one of {choices}" if choices else "an array",
            found=repr(variable),
            array=where,
            advice="Array paths are relative to the group given (group=...).",
        )
    return src.arrays[path]


def inventory(
    store: Any,
    variable: str | None = None,
    *,
    group: str | None = None,
    storage_options: dict[str, Any] | None = None,
    progress: bool = False,
) -> xr.Dataset:
    """Which inner chunks of one array are stored, and how many bytes each takes, from
    one listing and one index read per stored shard (no chunk data is read).

    Parameters
    ----------
    store : str, os.PathLike or zarr.abc.store.Store
        The store: a path, a URL (with ``storage_options``) or a zarr-python ``Store``;
        Zarr v3, Zarr v2 or a store of the 2022 sharding draft.
    variable : str, optional
        The array's path, relative to ``group``; may be left out when the group holds
        one array.
    group : str, optional
        The group the array is in; the store's root when None.
    storage_options : dict, optional
        Options of the fsspec file system a URL names (credentials, endpoint).
    progress : bool, default False
        Show a progress bar of the shards whose index is read.

    Returns
    -------
    xarray.Dataset
        One dimension per array dimension, ``<name>_chunk`` (``dim_<i>_chunk`` for
        unnamed dimensions), over the inner chunks that hold part of the array, with

        - ``stored_bytes`` (int64): the stored size of each inner chunk, 0 where absent;
        - ``present`` (bool): whether the inner chunk is stored (writers leave out
          chunks that hold only the fill value);
        - ``shard`` (int64): the flat (C order) number of the shard holding it, for
          ``groupby``;
        - coordinates ``<name>_start`` (where each inner chunk starts along the
          dimension) and ``<name>_shard`` (the shard's coordinate along it);
        - attributes: the array's geometry and codecs and the totals, JSON-ready.

        An unsharded array (Zarr v2, unsharded Zarr v3 or draft arrays) has one inner
        chunk per shard: its chunks.

    Raises
    ------
    shardwise.errors.ArrayChoiceError
        ``variable`` was left out and the group holds several arrays, or names none.
    shardwise.errors.TooLargeError
        Before any index is read: the grid is far larger than what is stored (more than
        ``shardwise.inventory-cells`` inner chunks, dask config, default 2**24, and
        more than ``INVENTORY_SPARSITY`` per inner chunk of the stored shards);
        ``shardwise.info`` gives its totals.
    shardwise.errors.CorruptShardError
        A shard's index is damaged (as a read would raise).

    Examples
    --------
    >>> ds = shardwise.inventory("data.zarr", "temperature")
    >>> ds.stored_bytes.sum()  # doctest: +SKIP
    """

    src = open_source(store, group, storage_options)
    return _inventory(src, select(src, variable), progress=progress)


def totals(
    store: Any,
    variable: str | None = None,
    *,
    group: str | None = None,
    storage_options: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The attributes of ``inventory`` (geometry, codecs and totals; what
    ``summary`` prints) without its Dataset: one listing and an index read per
    stored shard, whatever the size of the grid, so never refused for it."""

    src = open_source(store, group, storage_options)
    return totals_of(src, select(src, variable))


def inventories(
    store: Any,
    *,
    group: str | None = None,
    storage_options: dict[str, Any] | None = None,
) -> dict[str, xr.Dataset]:
    """The ``shardwise.inventory`` of every array under a group.

    Parameters
    ----------
    store : str, os.PathLike or zarr.abc.store.Store
        The store: a path, a URL (with ``storage_options``) or a zarr-python ``Store``.
    group : str, optional
        The group; the store's root when None.
    storage_options : dict, optional
        Options of the fsspec file system a URL names (credentials, endpoint).

    Returns
    -------
    dict of str to xarray.Dataset
        Each array's inventory by its path relative to ``group``. Arrays shardwise
        cannot read (strings...) are left out; ``shardwise.info`` lists them.
    """

    src = open_source(store, group, storage_options)
    return {path: _inventory(src, a) for path, a in src.arrays.items()}


def _found(src: Source, info: ArrayInfo) -> Stored:
    """The stored shards of an array: one listing."""

    keys, sizes = _compat.sync(list_sized(src.store, info.data_prefix))
    return stored(info, keys, sizes)


def totals_of(src: Source, info: ArrayInfo) -> dict[str, Any]:
    """An array's inventory totals (the attributes of its ``inventory``), from its
    stored shards alone: one listing and an index read per stored shard, never a pass
    over the grid."""
    found = _found(src, info)
    return _attrs(src, info, found, probe(src.store, info, found))


def summary_of(src: Source, info: ArrayInfo) -> tuple[dict[str, Any], ShardMap]:
    """:func:`totals_of`'s totals, and the map of the shards they were counted from
    (each stored shard with the share of its inner chunks stored), for a picture."""
    found = _found(src, info)
    probed = probe(src.store, info, found)
    shares = {}
    for shard, (sizes, _) in zip(found.shards, probed, strict=True):
        if sizes is not None:
            inside = _inside(info, shard, sizes)
            shares[shard] = float((inside >= 0).sum()) / max(inside.size, 1)
    return _attrs(src, info, found, probed), ShardMap.of(info, shares, shares=shares)


def _inside(info: ArrayInfo, shard: tuple[int, ...], sizes: Sizes) -> Sizes:
    """A shard's inner-chunk sizes (-1: absent) of the inner chunks inside the array
    (an edge shard reaching past the extent has others)."""
    dims = info.layout.dims
    return sizes[tuple(slice(0, d.inner_in_shard(s)) for d, s in zip(dims, shard, strict=True))]


def _inventory(src: Source, info: ArrayInfo, *, progress: bool = False) -> xr.Dataset:
    found = _found(src, info)
    _check_grid(info, found)
    return _dataset(src, info, found, probe(src.store, info, found, progress=progress))


def _check_grid(info: ArrayInfo, found: Stored) -> None:
    """Refuse an inventory whose grid is far larger than what is stored (see the module
    docstring), before its indexes are read or a cell of it is allocated."""

    layout = info.layout
    per_dim = layout.ninner
    # an empty dimension leaves no cells, but the others' coordinates are still listed
    cells = max(math.prod(per_dim), max(per_dim, default=0))
    limit = int(config.get("inventory-cells"))
    if cells <= limit:
        return
    in_stored = sum(math.prod(layout.chunks_per_shard(s)) for s in found.shards)
    if cells <= INVENTORY_SPARSITY * in_stored:
        return
    what = "inner chunks" if info.sharding is not None else "chunks"
    raise TooLargeError(
        f"an inventory has a cell per {what[:-1]} of the whole grid, and this grid is far "
        "larger than what is stored",
        expected=f"at most {limit:,} {what} (shardwise.inventory-cells), or at most "
        f"{INVENTORY_SPARSITY} per {what[:-1]} of the stored shards",
        found=f"{' x '.join(f'{n:,}' for n in per_dim)} = {math.prod(per_dim):,} {what}, "
        f"{len(found.shards):,} shards stored holding {in_stored:,}",
        array=info.name,
        key=metadata_key(info.path),
        advice="Use shardwise.info (or `shardwise info PATH`): its totals come from the "
        "stored shards alone. To build the inventory anyway, raise the limit with "
        "dask.config.set({'shardwise.inventory-cells': n}) (about 35 bytes per cell "
        "while it is built).",
    )


def _attrs(
    src: Source, info: ArrayInfo, found: Stored, probed: list[tuple[Sizes | None, int]]
) -> dict[str, Any]:
    """An inventory's attributes: the totals, summed over the stored shards only."""
    layout = info.layout
    sharded = info.sharding is not None
    shards_present = index_bytes = outside_bytes = object_bytes = 0
    chunks_present = chunk_bytes = raw_present = 0
    requests = 1  # the listing
    formats: dict[tuple[int, ...], IndexFormat] = {}
    for i, (shard, (sizes, n)) in enumerate(zip(found.shards, probed, strict=True)):
        requests += n
        if sizes is None:
            continue
        shards_present += 1
        if found.sizes is not None:
            object_bytes += found.sizes[i]
        if sharded:
            index_bytes += index_format(info, shard, formats).nbytes
        inside = _inside(info, shard, sizes)
        present = inside[inside >= 0]
        chunks_present += present.size
        inside_bytes = _total(present)
        chunk_bytes += inside_bytes
        outside_bytes += _total(sizes[sizes > 0]) - inside_bytes
        # the decoded size of the stored inner chunks: every inner chunk of a shard has
        # the shard's inner shape
        raw_present += present.size * math.prod(layout.inner_shape(shard))

    itemsize = info.dtype.itemsize
    raw_present *= itemsize
    raw_total = math.prod(info.shape) * itemsize
    total_bytes = chunk_bytes + index_bytes + outside_bytes
    chunks_total = math.prod(layout.ninner)
    codec = info.sharding
    return {
        "array": info.name,
        "format": src.kind,
        "store": store_name(src.store),
        "shape": list(info.shape),
        "dtype": str(info.dtype),
        "dimension_names": None if info.dimension_names is None else list(info.dimension_names),
        "sharded": sharded,
        "shard_shape": shape_list(info.shard_shape),
        "chunk_shape": shape_list(info.inner_chunk_shape or info.shard_shape),
        "codecs": codec_chain(info.codecs),
        "chunk_codecs": [codec_name(c) for c in (codec.codecs if codec else info.codecs)],
        "index_location": None if codec is None else _compat.literal(codec.index_location),
        "shards_present": shards_present,
        "shards_total": layout.nshards,
        "chunks_present": chunks_present,
        "chunks_total": chunks_total,
        "chunks_absent_fraction": round(1 - chunks_present / chunks_total, 6)
        if chunks_total
        else 0.0,
        "stored_bytes": chunk_bytes,
        "index_bytes": index_bytes,
        "outside_bytes": outside_bytes,
        "total_bytes": total_bytes,
        "object_bytes": object_bytes if found.sizes is not None else None,
        "raw_bytes_present": raw_present,
        "raw_bytes": raw_total,
        "compression_ratio": ratio_of(raw_present, chunk_bytes),
        "overall_ratio": ratio_of(raw_total, total_bytes),
        "stray_keys": len(found.strays),
        "requests": requests,
    }


def _dataset(
    src: Source, info: ArrayInfo, found: Stored, probed: list[tuple[Sizes | None, int]]
) -> xr.Dataset:
    """The inventory Dataset (its grid's size checked by ``_check_grid``)."""
    import xarray as xr

    layout = info.layout
    axes = [_Axis.of(d) for d in layout.dims]
    grid = tuple(len(a.start) for a in axes)
    sizes_of = np.full(grid, -1, dtype=np.int64)
    for shard, (sizes, _) in zip(found.shards, probed, strict=True):
        if sizes is None:
            continue
        counts = [int(a.count[s]) for a, s in zip(axes, shard, strict=True)]
        where = tuple(
            slice(int(a.first[s]), int(a.first[s]) + c)
            for a, s, c in zip(axes, shard, counts, strict=True)
        )
        sizes_of[where] = sizes[tuple(slice(0, c) for c in counts)]
    present = sizes_of >= 0
    stored_bytes = np.maximum(sizes_of, 0, out=sizes_of)  # in place: 0 where absent
    flat = np.zeros(grid, dtype=np.int64)
    for d, a in enumerate(axes):
        stride = math.prod(layout.grid_shape[d + 1 :])  # the grid's shards fit: checked
        flat += (a.shard * stride).reshape([-1 if i == d else 1 for i in range(len(grid))])

    names = _dim_names(info)
    dims = [f"{n}_chunk" for n in names]
    coords: dict[str, Any] = {}
    for name, dim, a in zip(names, dims, axes, strict=True):
        coords[f"{name}_start"] = (dim, a.start, {"long_name": f"first index along {name}"})
        coords[f"{name}_shard"] = (dim, a.shard, {"long_name": f"shard coordinate along {name}"})
    return xr.Dataset(
        {
            "stored_bytes": (dims, stored_bytes, {"long_name": "stored bytes", "units": "B"}),
            "present": (dims, present, {"long_name": "inner chunk stored"}),
            "shard": (dims, flat, {"long_name": "shard number (C order)"}),
        },
        coords=coords,
        attrs=_attrs(src, info, found, probed),
    )


# -- text ---------------------------------------------------------------------------------
def summary(ds: xr.Dataset | Mapping[str, Any]) -> str:
    """The text ``shardwise inventory`` prints for an ``inventory`` (or for its
    attributes, ``totals``)."""
    import xarray as xr

    a = ds.attrs if isinstance(ds, xr.Dataset) else ds  # (a Dataset is a Mapping too)
    cp, ct = a["chunks_present"], a["chunks_total"]
    sp, st = a["shards_present"], a["shards_total"]
    ratio = "-" if a["compression_ratio"] is None else f"{a['compression_ratio']:.2f}x"
    overall = "-" if a["overall_ratio"] is None else f"{a['overall_ratio']:.2f}x"
    names = a["dimension_names"]
    lines = [
        f"array    {a['array']}  {a['dtype']} {dims_text(a['shape'], names)}",
        f"store    {a['store']} ({a['format']})",
        f"codecs   {a['codecs']}",
    ]
    if a["sharded"]:
        lines += [
            f"shards   {dims_text(a['shard_shape'], None)}: {sp} of {st} stored "
            f"({percent(st - sp, st)} absent)",
            f"inner    {dims_text(a['chunk_shape'], None)}: {cp} of {ct} stored "
            f"({percent(ct - cp, ct)} absent)",
        ]
    else:
        lines.append(
            f"chunks   {dims_text(a['chunk_shape'], None)} (unsharded): {cp} of {ct} stored "
            f"({percent(ct - cp, ct)} absent)"
        )
    lines += [
        f"stored   {byte_size(a['stored_bytes'])} in chunks"
        + (f" + {byte_size(a['index_bytes'])} of indexes" if a["sharded"] else "")
        + (
            f" + {byte_size(a['outside_bytes'])} past the array's edge"
            if a["outside_bytes"]
            else ""
        )
        + f" = {byte_size(a['total_bytes'])}",
        f"raw      {byte_size(a['raw_bytes_present'])} in stored chunks ({ratio} compression), "
        f"{byte_size(a['raw_bytes'])} in the array ({overall} overall)",
    ]
    if a["object_bytes"] is not None and a["object_bytes"] > a["total_bytes"]:
        lines.append(
            f"unused   {byte_size(a['object_bytes'] - a['total_bytes'])} in the objects that "
            "no index entry points to"
        )
    if a["stray_keys"]:
        lines.append(f"strays   {a['stray_keys']} keys under the array that are none of its chunks")
    lines.append(f"requests {a['requests']} (1 listing + index or size reads)")
    return "\n".join(lines)
