"""What an array has stored, for ``inventory`` and ``info``: its shards (from one listing
of its keys) and the stored sizes of their inner chunks (from one index read per shard).

:func:`~shardwise.io.listing.list_sized` lists the keys under an array, with their sizes
where the store's listing has them; :func:`stored` sorts them into the array's shards and its strays;
:func:`probe` reads each stored shard's index through
:func:`~shardwise.io.shard_index.read_shard_index` (an unsharded array's chunk needs only
its size), ``shardwise.inventory-concurrency`` requests in flight at a time, batches of
``shardwise.inventory-batch`` shards as dask tasks past that many.

Apart from :mod:`shardwise.tools.inventory` because it is the part that touches the
store: what it returns (keys, coordinates, sizes per inner chunk) is all the inventory's
Dataset and totals are built from.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

import shardwise._compat as _compat
import shardwise.config as config
from shardwise.codecs import index_format_from_codecs
from shardwise.errors import CorruptShardError
from shardwise.format.grid import check_chunks_per_shard
from shardwise.format.index import EMPTY, IndexFormat
from shardwise.format.metadata import metadata_key
from shardwise.graph.progress import bar_class
from shardwise.graph.progress import compute as compute_with_progress
from shardwise.io.capabilities import conditional
from shardwise.io.conditional import Conditional
from shardwise.io.shard_index import Tally, read_shard_index

if TYPE_CHECKING:
    from shardwise.format.metadata import ArrayInfo

__all__ = [
    "Sizes",
    "Stored",
    "index_format",
    "probe",
    "stored",
]

# documents that live beside an array's chunks and are none of them
_DOCUMENTS = frozenset({"zarr.json", ".zarray", ".zattrs", ".zgroup", ".zmetadata"})
Sizes = npt.NDArray[np.int64]  # stored bytes per inner chunk of a shard, -1 where absent


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


# -- probing: one index read per stored shard ---------------------------------------------
def index_format(
    info: ArrayInfo, shard: tuple[int, ...], cache: dict[tuple[int, ...], IndexFormat] | None = None
) -> IndexFormat:
    """The index format of one shard of a sharded array (shards of a rectilinear grid
    hold different numbers of inner chunks); ``cache`` keeps one per shape."""
    codec = info.sharding
    assert codec is not None
    per_shard = info.layout.chunks_per_shard(shard)
    fmt = None if cache is None else cache.get(per_shard)
    if fmt is None:
        check_chunks_per_shard(per_shard, array=info.name, key=metadata_key(info.path))
        fmt = index_format_from_codecs(
            codec.index_codecs, per_shard, _compat.literal(codec.index_location), array=info.name
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
    versions: Conditional | None,
) -> tuple[Sizes | None, int]:
    """(stored bytes per inner chunk, -1 where absent; requests made) of one stored
    shard; None when it disappeared since the listing. A damaged index raises the error
    a read would: checked against the object's size (from the read of the index, when
    the store has ``versions`` and so tells the size of the version read; else the
    listing's, asked again when the two disagree, since the shard may have been
    replaced after it was listed); its entries are not fetched, so an entry need only
    be smaller than any object."""
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
    tally = Tally()

    async def read(size: int | None) -> npt.NDArray[np.uint64] | None:
        entry = await read_shard_index(
            store,
            key,
            fmt,
            versions=versions,
            array=info.name,
            size=size,
            fetching=False,
            sem=sem,
            tally=tally,
        )
        return entry.table

    if versions is not None:
        # the object's size comes with its index, from one version: the listing's may
        # be another's (the shard replaced since it was listed)
        table = await read(None)
    else:
        try:
            table = await read(size)
        except CorruptShardError:
            if size is None:
                raise
            # the listing's size may be an older version's: checked again against the
            # size the object has now (the error stands if the two still disagree)
            try:
                tally.requests += 1
                async with sem:
                    size = await store.getsize(key)
            except FileNotFoundError:
                return None, tally.requests
            table = await read(size)
    if table is None:
        return None, tally.requests
    sizes = table[..., 1].astype(np.int64)
    sizes[table[..., 0] == EMPTY] = -1
    return sizes, tally.requests


async def _probe(
    store: Any,
    info: ArrayInfo,
    items: Sequence[tuple[str, tuple[int, ...], int | None]],
    concurrency: int,
) -> list[tuple[Sizes | None, int]]:
    sem = asyncio.Semaphore(concurrency)
    formats: dict[tuple[int, ...], IndexFormat] = {}
    versions = conditional(store)
    return list(
        await asyncio.gather(
            *(_probe_one(store, info, k, s, n, sem, formats, versions) for k, s, n in items)
        )
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


def probe(
    store: Any, info: ArrayInfo, found: Stored, *, progress: bool = False
) -> list[tuple[Sizes | None, int]]:
    """Per stored shard of ``found``: its inner chunks' stored sizes and the requests
    it took. In this process up to ``shardwise.inventory-batch`` shards, else one dask
    task per batch on the current scheduler; ``shardwise.inventory-concurrency``
    requests in flight per batch. ``progress``: a bar of the shards (in this process)
    or of the tasks (see :func:`shardwise.graph.progress.compute`)."""
    import dask
    import dask.config

    batch = max(1, int(config.get("inventory-batch")))
    concurrency = int(config.get("inventory-concurrency"))
    if concurrency < 1:
        raise ValueError(f"shardwise.inventory-concurrency must be >= 1, got {concurrency}")
    sizes: Sequence[int | None] = found.sizes or [None] * len(found.keys)
    items = list(zip(found.keys, found.shards, sizes, strict=True))
    if info.sharding is None and found.sizes is not None:
        batch = max(batch, len(items))  # no requests to make: no tasks either
    if len(items) <= batch:
        if not progress:
            return _probe_batch((store, info), items, concurrency)
        tqdm = bar_class()
        out: list[tuple[Sizes | None, int]] = []
        step = max(1, 4 * concurrency)  # (the bar moves between steps of reads)
        with tqdm(total=len(items), desc="inventory", unit="shard") as bar:
            for i in range(0, len(items), step):
                out += _probe_batch((store, info), items[i : i + step], concurrency)
                bar.update(len(items[i : i + step]))
        return out
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
    parts = compute_with_progress(*tasks, progress=progress, desc="inventory")
    return [r for part in parts for r in part]
