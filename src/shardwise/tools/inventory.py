"""``shardwise.inventory`` and ``shardwise.info``: which chunks a store holds, and how
many bytes each takes, read from the shard indexes alone.

:func:`inventory` gives one array's inner chunk grid as an ``xarray.Dataset``: for every
inner chunk whether it is stored and its stored (compressed) size, and which shard holds
it; the totals (shards and inner chunks present, bytes, compression ratios) are its
attributes. :func:`info` sums up a whole hierarchy the same way, as text or JSON
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

:func:`info` costs that and no more: its totals are summed shard by shard, so an array
whose grid has 10**14 shards of which a few are stored costs a few index reads. An
:func:`inventory` is a Dataset with a cell per inner chunk of the *whole* grid: it is
refused (:class:`~shardwise.errors.TooLargeError`, before its indexes are read) when
the grid holds more than ``shardwise.inventory-cells`` (dask config, default
:data:`INVENTORY_CELLS`) inner chunks and more than :data:`INVENTORY_SPARSITY` times
the inner chunks of the shards stored.
"""

from __future__ import annotations

import asyncio
import math
import os
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

import shardwise._compat as _compat
from shardwise.errors import CorruptShardError, ShardwiseError, TooLargeError, TruncatedShardError
from shardwise.format.grid import INT64_MAX, check_chunks_per_shard
from shardwise.format.index import EMPTY, IndexFormat, check_entries
from shardwise.format.metadata import metadata_key
from shardwise.io.sources import open_source

if TYPE_CHECKING:
    import xarray as xr

    from shardwise.format.grid import DimGrid
    from shardwise.format.metadata import ArrayInfo
    from shardwise.io.sources import Source

__all__ = [
    "INVENTORY_CELLS",
    "INVENTORY_SPARSITY",
    "ArrayChoiceError",
    "ArraySummary",
    "Info",
    "Stored",
    "codec_chain",
    "index_format",
    "info",
    "inventories",
    "inventory",
    "probe",
    "stored",
    "summary",
    "totals",
]

DEFAULT_BATCH = 1000  # stored shards per dask task (dask config "shardwise.inventory-batch")
DEFAULT_CONCURRENCY = 64  # requests in flight per batch ("shardwise.inventory-concurrency")
INVENTORY_CELLS = 2**24
"""Inner chunks an :func:`inventory`'s grid may always have ("shardwise.inventory-cells"
in dask config): its Dataset takes about 17 bytes a cell (``stored_bytes``, ``present``,
``shard``), twice that while it is built: 0.5 GiB at this size."""
INVENTORY_SPARSITY = 64
"""Past :data:`INVENTORY_CELLS`, the grid of an :func:`inventory` may have at most this
many inner chunks per inner chunk of the shards stored: its memory then stays in
proportion to what is stored (whose indexes are read anyway, 16 bytes a cell)."""
# documents that live beside an array's chunks and are none of them
_DOCUMENTS = frozenset({"zarr.json", ".zarray", ".zattrs", ".zgroup", ".zmetadata"})
Sizes = npt.NDArray[np.int64]  # stored bytes per inner chunk of a shard, -1 where absent


class ArrayChoiceError(ShardwiseError, ValueError):
    """``inventory`` was not told which array, and the group holds several, or was told
    one the group does not hold."""


# -- listing: which shards are stored ------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Stored:
    """The stored shards (chunks, for an unsharded array) of one array, from a listing:
    their keys, grid coordinates and object sizes (``None`` when the store's listing
    does not give sizes), and the keys under the array that are no shard of it."""

    keys: tuple[str, ...]
    shards: tuple[tuple[int, ...], ...]
    sizes: tuple[int, ...] | None
    strays: tuple[str, ...] = ()


def stored(info: ArrayInfo, keys: Sequence[str], sizes: Sequence[int] | None = None) -> Stored:
    """Sort the keys listed under an array into its shards and strays (pure)."""
    found: list[tuple[tuple[int, ...], str, int]] = []
    strays: list[str] = []
    for i, key in enumerate(keys):
        shard = info.coords(key)
        if shard is not None:
            found.append((shard, key, -1 if sizes is None else int(sizes[i])))
        elif key.rsplit("/", 1)[-1] not in _DOCUMENTS:
            strays.append(key)
    found.sort()
    return Stored(
        keys=tuple(k for _, k, _ in found),
        shards=tuple(s for s, _, _ in found),
        sizes=None if sizes is None else tuple(n for _, _, n in found),
        strays=tuple(sorted(strays)),
    )


async def _listing(store: Any, prefix: str) -> tuple[list[str], list[int] | None]:
    """The keys under ``prefix``, with their sizes where the store's listing has them
    (local files, fsspec filesystems, obstore); one listing either way."""
    from zarr.storage import FsspecStore, LocalStore, ObjectStore

    if isinstance(store, LocalStore):
        return await asyncio.to_thread(_walk, str(store.root), prefix.rstrip("/"))
    if isinstance(store, FsspecStore) and hasattr(store.fs, "_find"):
        root = store.path.rstrip("/")
        where = f"{root}/{prefix}" if root else prefix
        try:
            found = await store.fs._find(where, maxdepth=None, withdirs=False, detail=True)
        except FileNotFoundError:
            return [], []
        if all(isinstance(v, dict) and v.get("size") is not None for v in found.values()):
            keys = [k.removeprefix(f"{root}/") if root else k.removeprefix("/") for k in found]
            return keys, [int(v["size"]) for v in found.values()]
    elif isinstance(store, ObjectStore):
        import obstore

        keys, sizes = [], []
        async for batch in obstore.list(store.store, prefix=prefix):
            for meta in batch:
                keys.append(meta["path"])
                sizes.append(int(meta["size"]))
        return keys, sizes
    return [k async for k in store.list_prefix(prefix)], None


def _walk(root: str, prefix: str) -> tuple[list[str], list[int]]:
    """Files under ``root/prefix`` as store keys, with their sizes."""
    keys: list[str] = []
    sizes: list[int] = []
    strip = len(root.rstrip(os.sep)) + 1
    todo = [os.path.join(root, prefix) if prefix else root]
    while todo:
        try:
            entries = os.scandir(todo.pop())
        except (FileNotFoundError, NotADirectoryError):
            continue
        with entries:
            for e in entries:
                if e.is_dir():
                    todo.append(e.path)
                elif e.is_file():
                    keys.append(e.path[strip:].replace(os.sep, "/"))
                    sizes.append(e.stat().st_size)
    return keys, sizes


# -- probing: one index read per stored shard ---------------------------------------------
def index_format(
    info: ArrayInfo, shard: tuple[int, ...], cache: dict[tuple[int, ...], IndexFormat] | None = None
) -> IndexFormat:
    """The index format of one shard of a sharded array (shards of a rectilinear grid
    hold different numbers of inner chunks); ``cache`` keeps one per shape."""
    from shardwise.codecs import index_format_from_codecs

    codec = info.sharding
    assert codec is not None
    per_shard = info.layout.chunks_per_shard(shard)
    fmt = None if cache is None else cache.get(per_shard)
    if fmt is None:
        check_chunks_per_shard(per_shard, array=info.name, key=metadata_key(info.path))
        fmt = index_format_from_codecs(
            codec.index_codecs, per_shard, str(codec.index_location), array=info.name
        )
        if cache is not None:
            cache[per_shard] = fmt
    return fmt


async def _probe_one(
    store: Any,
    info: ArrayInfo,
    key: str,
    shard: tuple[int, ...],
    size: int | None,
    sem: asyncio.Semaphore,
    formats: dict[tuple[int, ...], IndexFormat],
) -> tuple[Sizes | None, int]:
    """(stored bytes per inner chunk, -1 where absent; requests made) of one stored
    shard; None when it disappeared since the listing."""
    from zarr.buffer import default_buffer_prototype

    from shardwise.io.reader import read_index_region

    ones = (1,) * info.ndim
    if info.sharding is None:  # a chunk: its size is all there is to know
        if size is not None:
            return np.full(ones, size, dtype=np.int64), 0
        try:
            async with sem:
                size = await store.getsize(key)
        except FileNotFoundError:
            return None, 1
        return np.full(ones, size, dtype=np.int64), 1

    fmt = index_format(info, shard, formats)
    if size is not None and size < fmt.nbytes:
        raise TruncatedShardError(
            "shard is shorter than its index",
            expected=f"at least {fmt.nbytes} bytes",
            found=f"{size} bytes",
            array=info.name,
            key=key,
            advice="The shard is truncated; rewrite it from its source.",
        )

    async def get(byte_range: Any) -> memoryview | None:
        buf = await store.get(key, default_buffer_prototype(), byte_range)
        return None if buf is None else memoryview(buf.as_numpy_array()).cast("B")

    async with sem:
        raw, requests = await read_index_region(get, fmt)
    if raw is None:
        return None, requests
    table = fmt.decode(raw, array=info.name, key=key)
    start, stop = fmt.data_bounds(size)
    check_entries(table, data_start=start, data_stop=stop, array=info.name, key=key)
    empty = table[..., 0] == EMPTY
    huge = ~empty & (table[..., 1] > np.uint64(INT64_MAX))
    if huge.any():  # only an object of unknown size can claim it: no such chunk exists
        at = tuple(int(x) for x in np.argwhere(huge)[0])
        raise CorruptShardError(
            "shard index entry claims an inner chunk larger than any object",
            expected="nbytes < 2**63",
            found=f"nbytes={int(table[at][1])}",
            array=info.name,
            key=key,
            chunk=at,
            advice="The shard index is corrupt; rewrite the shard from its source.",
        )
    sizes = table[..., 1].astype(np.int64)
    sizes[empty] = -1
    return sizes, requests


async def _probe(
    store: Any,
    info: ArrayInfo,
    items: Sequence[tuple[str, tuple[int, ...], int | None]],
    concurrency: int,
) -> list[tuple[Sizes | None, int]]:
    sem = asyncio.Semaphore(concurrency)
    formats: dict[tuple[int, ...], IndexFormat] = {}
    return list(
        await asyncio.gather(*(_probe_one(store, info, k, s, n, sem, formats) for k, s, n in items))
    )


def _probe_batch(
    target: tuple[Any, ArrayInfo],
    items: Sequence[tuple[str, tuple[int, ...], int | None]],
    concurrency: int,
) -> list[tuple[Sizes | None, int]]:
    """One batch of shards, in this process (the body of a dask task)."""

    store, info = target
    result: list[tuple[Sizes | None, int]] = _compat.sync(_probe(store, info, items, concurrency))
    return result


def probe(store: Any, info: ArrayInfo, found: Stored) -> list[tuple[Sizes | None, int]]:
    """Per stored shard of ``found``: its inner chunks' stored sizes and the requests
    it took. In this process up to ``shardwise.inventory-batch`` shards, else one dask
    task per batch on the current scheduler; ``shardwise.inventory-concurrency``
    requests in flight per batch."""
    import dask
    import dask.config

    batch = max(1, int(dask.config.get("shardwise.inventory-batch", DEFAULT_BATCH)))
    concurrency = int(dask.config.get("shardwise.inventory-concurrency", DEFAULT_CONCURRENCY))
    if concurrency < 1:
        raise ValueError(f"shardwise.inventory-concurrency must be >= 1, got {concurrency}")
    sizes: Sequence[int | None] = found.sizes or [None] * len(found.keys)
    items = list(zip(found.keys, found.shards, sizes, strict=True))
    if info.sharding is None and found.sizes is not None:
        batch = max(batch, len(items))  # no requests to make: no tasks either
    if len(items) <= batch:
        return _probe_batch((store, info), items, concurrency)
    token = uuid.uuid4().hex
    target = dask.delayed((store, info), name=f"shardwise-inventory-array-{token}")
    tasks = [
        dask.delayed(_probe_batch, pure=False)(
            target,
            items[i : i + batch],
            concurrency,
            dask_key_name=f"shardwise-inventory-{token}-{i // batch}",
        )
        for i in range(0, len(items), batch)
    ]
    return [r for part in dask.compute(*tasks) for r in part]


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


def _codec_name(codec: Any) -> str:
    try:
        return str(codec.to_dict()["name"])
    except Exception:
        return type(codec).__name__


def codec_chain(codecs: Sequence[Any]) -> str:
    """A codec chain as text, e.g. ``sharding_indexed(bytes > zstd; index at end: bytes
    > crc32c)``."""
    from zarr.codecs import ShardingCodec

    parts = []
    for c in codecs:
        if isinstance(c, ShardingCodec):
            parts.append(
                f"sharding_indexed({codec_chain(c.codecs)}; index at {c.index_location}: "
                f"{codec_chain(c.index_codecs)})"
            )
        else:
            parts.append(_codec_name(c))
    return " > ".join(parts)


def _shape(shape: Sequence[int | Sequence[int]]) -> list[Any]:
    return [int(n) if isinstance(n, int | np.integer) else [int(m) for m in n] for n in shape]


def _store_name(store: Any) -> str:
    from zarr.storage import FsspecStore

    if isinstance(store, FsspecStore):
        protocol = store.fs.protocol
        protocol = protocol[0] if isinstance(protocol, tuple | list) else protocol
        return f"{protocol}://{store.path}"
    return str(store)


def _ratio(raw: int, stored: int) -> float | None:
    return round(raw / stored, 4) if stored else None


# -- inventory ----------------------------------------------------------------------------
def _select(src: Source, variable: str | None) -> ArrayInfo:
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
                "or use shardwise.inventories for all of them.",
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
) -> xr.Dataset:
    """The inner chunks of one array of ``store`` (a path, URL or zarr ``Store``):
    which are stored and how many bytes each takes, from one listing and one index read
    per stored shard (no chunk data).

    ``variable`` is the array's path relative to ``group``; it may be left out when the
    group holds one array. The result has one dimension per array dimension,
    ``<name>_chunk`` (``dim_<i>_chunk`` for unnamed dimensions), over the inner chunks
    that hold part of the array, and:

    - ``stored_bytes`` (int64): the stored size of each inner chunk, 0 where absent;
    - ``present`` (bool): whether the inner chunk is stored (writers leave out chunks
      that are all fill value);
    - ``shard`` (int64): the flat (C order) number of the shard holding it, for
      ``groupby``;
    - coordinates ``<name>_start`` (where each inner chunk starts along the dimension)
      and ``<name>_shard`` (the shard's coordinate along it);
    - attributes with the array's geometry and codecs and the totals (see
      :func:`summary`), JSON-ready.

    An unsharded array (Zarr v2, unsharded Zarr v3 or draft arrays) has one inner
    chunk per shard: its chunks. Raises the error a read would for a damaged index, and
    :class:`~shardwise.errors.TooLargeError` (before any index is read) for a grid far
    larger than what is stored: more than ``shardwise.inventory-cells`` (dask config,
    default :data:`INVENTORY_CELLS`) inner chunks and more than
    :data:`INVENTORY_SPARSITY` per inner chunk of the stored shards; :func:`info` gives
    its totals.
    """

    src = open_source(store, group, storage_options)
    return _inventory(src, _select(src, variable))


def totals(
    store: Any,
    variable: str | None = None,
    *,
    group: str | None = None,
    storage_options: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The attributes of :func:`inventory` (geometry, codecs and totals; what
    :func:`summary` prints) without its Dataset: one listing and an index read per
    stored shard, whatever the size of the grid, so never refused for it."""

    src = open_source(store, group, storage_options)
    return _scan(src, _select(src, variable))


def inventories(
    store: Any,
    group: str | None = None,
    *,
    storage_options: dict[str, Any] | None = None,
) -> dict[str, xr.Dataset]:
    """:func:`inventory` of every array under ``group``, by path relative to it. Arrays
    shardwise cannot read (strings...) are left out; :func:`info` lists them."""

    src = open_source(store, group, storage_options)
    return {path: _inventory(src, a) for path, a in src.arrays.items()}


def _found(src: Source, info: ArrayInfo) -> Stored:
    """The stored shards of an array: one listing."""

    keys, sizes = _compat.sync(_listing(src.store, info.data_prefix))
    return stored(info, keys, sizes)


def _scan(src: Source, info: ArrayInfo) -> dict[str, Any]:
    """An array's inventory totals (the attributes of its :func:`inventory`), from its
    stored shards alone: one listing and an index read per stored shard, never a pass
    over the grid."""
    found = _found(src, info)
    return _attrs(src, info, found, probe(src.store, info, found))


def _inventory(src: Source, info: ArrayInfo) -> xr.Dataset:
    found = _found(src, info)
    _check_grid(info, found)
    return _dataset(src, info, found, probe(src.store, info, found))


def _check_grid(info: ArrayInfo, found: Stored) -> None:
    """Refuse an inventory whose grid is far larger than what is stored (see the module
    docstring), before its indexes are read or a cell of it is allocated."""
    import dask.config

    layout = info.layout
    per_dim = layout.ninner
    # an empty dimension leaves no cells, but the others' coordinates are still listed
    cells = max(math.prod(per_dim), max(per_dim, default=0))
    limit = int(dask.config.get("shardwise.inventory-cells", INVENTORY_CELLS))
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
        inside = sizes[
            tuple(slice(0, d.inner_in_shard(s)) for d, s in zip(layout.dims, shard, strict=True))
        ]
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
        "store": _store_name(src.store),
        "shape": list(info.shape),
        "dtype": str(info.dtype),
        "dimension_names": None if info.dimension_names is None else list(info.dimension_names),
        "sharded": sharded,
        "shard_shape": _shape(info.shard_shape),
        "chunk_shape": _shape(info.inner_chunk_shape or info.shard_shape),
        "codecs": codec_chain(info.codecs),
        "chunk_codecs": [_codec_name(c) for c in (codec.codecs if codec else info.codecs)],
        "index_location": None if codec is None else str(codec.index_location),
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
        "compression_ratio": _ratio(raw_present, chunk_bytes),
        "overall_ratio": _ratio(raw_total, total_bytes),
        "stray_keys": len(found.strays),
        "requests": requests,
    }


def _dataset(
    src: Source, info: ArrayInfo, found: Stored, probed: list[tuple[Sizes | None, int]]
) -> xr.Dataset:
    """The inventory Dataset (its grid's size checked by :func:`_check_grid`)."""
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
def _bytes(n: int | None) -> str:
    if n is None:
        return "?"
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"):
        if size < 1024 or unit == "EiB":
            return f"{int(size)} B" if unit == "B" else f"{size:.2f} {unit}"
        size /= 1024
    raise AssertionError  # pragma: no cover


def _dims_text(shape: Sequence[Any], names: Sequence[str | None] | None) -> str:
    def one(n: Any) -> str:
        if isinstance(n, list | tuple):
            return "[" + ", ".join(map(str, n)) + "]"
        return str(n)

    if names is None:
        return "(" + ", ".join(one(n) for n in shape) + ")"
    return "(" + ", ".join(f"{d}: {one(n)}" for d, n in zip(names, shape, strict=True)) + ")"


def _percent(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "-"


@dataclass(frozen=True, slots=True)
class ArraySummary:
    """One array in :class:`Info`: its geometry and codecs, and (``error`` None) what
    its inventory counted."""

    path: str
    shape: tuple[int, ...]
    dtype: str
    dimension_names: tuple[str | None, ...] | None
    shard_shape: tuple[Any, ...] | None  # None: unsharded
    chunk_shape: tuple[Any, ...]  # inner chunks (the chunks of an unsharded array)
    codecs: str
    raw_bytes: int
    stored_bytes: int | None = None  # inner chunks, indexes included
    ratio: float | None = None  # raw_bytes / stored_bytes
    shards_present: int | None = None
    shards_total: int | None = None
    chunks_present: int | None = None
    chunks_total: int | None = None
    error: str | None = None

    @classmethod
    def of(cls, path: str, info: ArrayInfo, totals: Mapping[str, Any] | None) -> ArraySummary:
        """The summary of an array; ``totals`` are its inventory's attributes (None when
        it was not scanned)."""
        a = totals
        return cls(
            path=path,
            shape=info.shape,
            dtype=str(info.dtype),
            dimension_names=info.dimension_names,
            shard_shape=None if info.sharding is None else tuple(_shape(info.shard_shape)),
            chunk_shape=tuple(_shape(info.inner_chunk_shape or info.shard_shape)),
            codecs=codec_chain(info.codecs),
            raw_bytes=math.prod(info.shape) * info.dtype.itemsize,
            stored_bytes=None if a is None else a["total_bytes"],
            ratio=None if a is None else a["overall_ratio"],
            shards_present=None if a is None else a["shards_present"],
            shards_total=info.layout.nshards,
            chunks_present=None if a is None else a["chunks_present"],
            chunks_total=None if a is None else a["chunks_total"],
        )

    def to_dict(self) -> dict[str, Any]:
        def plain(v: Any) -> Any:
            return [plain(x) for x in v] if isinstance(v, tuple | list) else v

        return {k: plain(getattr(self, k)) for k in self.__dataclass_fields__}

    def lines(self) -> list[str]:
        out = [
            f"{self.path or '/'}  {self.dtype} {_dims_text(self.shape, self.dimension_names)}",
            f"  codecs   {self.codecs}",
        ]
        if self.shard_shape is None:
            chunks = f"  chunks   {_dims_text(self.chunk_shape, None)} (unsharded)"
        else:
            chunks = (
                f"  shards   {_dims_text(self.shard_shape, None)} of inner chunks "
                f"{_dims_text(self.chunk_shape, None)}"
            )
        out.append(chunks)
        if self.error is not None:
            out.append(f"  error    {self.error}")
            return out
        if self.shards_present is not None:
            cp, ct = self.chunks_present or 0, self.chunks_total or 0
            stored = (
                f"  stored   {cp} of {ct} chunks ({_percent(ct - cp, ct)} absent)"
                if self.shard_shape is None
                else f"  stored   {self.shards_present} of {self.shards_total} shards, "
                f"{cp} of {ct} inner chunks ({_percent(ct - cp, ct)} absent)"
            )
            ratio = "-" if self.ratio is None else f"{self.ratio:.2f}x"
            out += [
                stored,
                f"  bytes    {_bytes(self.stored_bytes)} stored for {_bytes(self.raw_bytes)} "
                f"raw: {ratio}",
            ]
        return out


@dataclass(frozen=True, slots=True)
class Info:
    """A hierarchy at a glance (:func:`info`); ``str()`` is the text ``shardwise info``
    prints, :meth:`to_dict` its JSON."""

    store: str
    format: str
    group: str
    groups: tuple[str, ...]
    arrays: tuple[ArraySummary, ...]
    unreadable: tuple[tuple[str, str], ...] = field(default=())  # (path, why)
    damaged: tuple[str, ...] = field(default=())  # of those, documents no reader opens

    @property
    def stored_bytes(self) -> int | None:
        sizes = [a.stored_bytes for a in self.arrays]
        return None if any(s is None for s in sizes) else sum(s or 0 for s in sizes)

    @property
    def raw_bytes(self) -> int:
        return sum(a.raw_bytes for a in self.arrays)

    def to_dict(self) -> dict[str, Any]:
        stored_ = self.stored_bytes
        return {
            "store": self.store,
            "format": self.format,
            "group": self.group,
            "groups": list(self.groups),
            "stored_bytes": stored_,
            "raw_bytes": self.raw_bytes,
            "ratio": None if stored_ is None else _ratio(self.raw_bytes, stored_),
            "arrays": [a.to_dict() for a in self.arrays],
            "unreadable": [{"path": p, "error": e} for p, e in self.unreadable],
            "damaged": list(self.damaged),
        }

    def __str__(self) -> str:
        stored_ = self.stored_bytes
        groups = ", ".join(g or "/" for g in self.groups)
        head = [
            f"store    {self.store}",
            f"format   {self.format}",
            f"group    {self.group or '/'}",
            f"groups   {len(self.groups)}: {groups}",
            f"arrays   {len(self.arrays)}"
            + (f" (and {len(self.unreadable)} shardwise cannot read)" if self.unreadable else ""),
        ]
        if stored_ is not None and self.arrays:
            ratio = _ratio(self.raw_bytes, stored_)
            head.append(
                f"bytes    {_bytes(stored_)} stored for {_bytes(self.raw_bytes)} raw"
                + ("" if ratio is None else f": {ratio:.2f}x")
            )
        body = [line for a in self.arrays for line in ["", *a.lines()]]
        for path, why in self.unreadable:
            what = "damaged document" if path in self.damaged else "cannot be read by shardwise"
            body += ["", f"{path or '/'}  ({what})", f"  error    {why}"]
        return "\n".join(head + body)


def info(
    store: Any,
    *,
    group: str | None = None,
    storage_options: dict[str, Any] | None = None,
    scan: bool = True,
) -> Info:
    """The hierarchy under ``group`` of ``store`` (a path, URL or zarr ``Store``): its
    kind, groups and arrays, each with its shape, data type, shards, inner chunks and
    codecs and (``scan``, the default) its :func:`inventory` totals: shards and inner
    chunks stored, stored bytes and compression ratio. ``scan=False`` reads the
    metadata only. An array whose inventory fails (a damaged index) is listed with its
    error. The totals are summed over the stored shards alone: what a scan costs
    follows the shards stored (a listing and an index read each), whatever the size of
    the grid."""

    src = open_source(store, group, storage_options)
    arrays = []
    for path, a in src.arrays.items():
        if not scan:
            arrays.append(ArraySummary.of(path, a, None))
            continue
        try:
            arrays.append(ArraySummary.of(path, a, _scan(src, a)))
        except ShardwiseError as e:
            failed = ArraySummary.of(path, a, None)
            arrays.append(
                ArraySummary(
                    **{k: getattr(failed, k) for k in failed.__dataclass_fields__ if k != "error"},
                    error=f"{type(e).__name__}: {e}",
                )
            )
    return Info(
        store=_store_name(src.store),
        format=src.kind,
        group=src.base,
        groups=tuple(sorted(src.groups)),
        arrays=tuple(arrays),
        unreadable=tuple(
            (p, f"{type(e).__name__}: {e}") for p, e in sorted(src.unreadable.items())
        ),
        damaged=tuple(sorted(src.damaged)),
    )


def summary(ds: xr.Dataset | Mapping[str, Any]) -> str:
    """The text ``shardwise inventory`` prints for an :func:`inventory` (or for its
    attributes, :func:`totals`)."""
    import xarray as xr

    a = ds.attrs if isinstance(ds, xr.Dataset) else ds  # (a Dataset is a Mapping too)
    cp, ct = a["chunks_present"], a["chunks_total"]
    sp, st = a["shards_present"], a["shards_total"]
    ratio = "-" if a["compression_ratio"] is None else f"{a['compression_ratio']:.2f}x"
    overall = "-" if a["overall_ratio"] is None else f"{a['overall_ratio']:.2f}x"
    names = a["dimension_names"]
    lines = [
        f"array    {a['array']}  {a['dtype']} {_dims_text(a['shape'], names)}",
        f"store    {a['store']} ({a['format']})",
        f"codecs   {a['codecs']}",
    ]
    if a["sharded"]:
        lines += [
            f"shards   {_dims_text(a['shard_shape'], None)}: {sp} of {st} stored "
            f"({_percent(st - sp, st)} absent)",
            f"inner    {_dims_text(a['chunk_shape'], None)}: {cp} of {ct} stored "
            f"({_percent(ct - cp, ct)} absent)",
        ]
    else:
        lines.append(
            f"chunks   {_dims_text(a['chunk_shape'], None)} (unsharded): {cp} of {ct} stored "
            f"({_percent(ct - cp, ct)} absent)"
        )
    lines += [
        f"stored   {_bytes(a['stored_bytes'])} in chunks"
        + (f" + {_bytes(a['index_bytes'])} of indexes" if a["sharded"] else "")
        + (f" + {_bytes(a['outside_bytes'])} past the array's edge" if a["outside_bytes"] else "")
        + f" = {_bytes(a['total_bytes'])}",
        f"raw      {_bytes(a['raw_bytes_present'])} in stored chunks ({ratio} compression), "
        f"{_bytes(a['raw_bytes'])} in the array ({overall} overall)",
    ]
    if a["object_bytes"] is not None and a["object_bytes"] > a["total_bytes"]:
        lines.append(
            f"unused   {_bytes(a['object_bytes'] - a['total_bytes'])} in the objects that "
            "no index entry points to"
        )
    if a["stray_keys"]:
        lines.append(f"strays   {a['stray_keys']} keys under the array that are none of its chunks")
    lines.append(f"requests {a['requests']} (1 listing + index or size reads)")
    return "\n".join(lines)
