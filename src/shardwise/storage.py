"""Byte I/O over zarr-python's ``Store`` API: options, range coalescing, the per-process
shard-index cache, and opening stores from paths and URLs.

All requests are coroutines run on zarr-python's I/O event loop (``zarr.core.sync``), so
independent requests go out concurrently while the caller's thread does the decoding.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections import OrderedDict
from collections.abc import Hashable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

__all__ = [
    "ABSENT",
    "SUPPLIED",
    "ByteRange",
    "IndexCache",
    "SuppliedIndexes",
    "ReadOptions",
    "clear_index_cache",
    "coalesce",
    "index_cache",
    "read_only_store_path",
    "set_index_cache_size",
    "store_token",
]


@dataclass(frozen=True, slots=True)
class ReadOptions:
    """How shardwise turns a selection into store requests.

    - ``coalesce_gap``: two byte ranges of one shard separated by at most this many bytes
      are fetched with one request.
    - ``coalesce_max``: no coalesced request grows past this many bytes (a single inner
      chunk larger than this is still fetched whole).
    - ``whole_shard_fraction``: when a selection needs at least this fraction of a
      shard's inner chunks and the shard's index is not cached, the whole object is read
      in one request (index included) instead of index + ranges; ``float("inf")``
      never reads whole shards.
    - ``index_cache``: keep decoded shard indexes in the per-process cache
      (:func:`index_cache`). The cache assumes shards do not change while they are being
      read; turn it off when another process rewrites the shards you read.
    - ``concurrency``: requests in flight at once per read.
    """

    coalesce_gap: int = 1 << 20
    coalesce_max: int = 64 << 20
    whole_shard_fraction: float = 0.5
    index_cache: bool = True
    concurrency: int = 64

    def __post_init__(self) -> None:
        if self.coalesce_gap < 0 or self.coalesce_max < 1:
            raise ValueError(
                f"coalesce_gap must be >= 0 and coalesce_max >= 1, got "
                f"{self.coalesce_gap} and {self.coalesce_max}"
            )
        fraction = self.whole_shard_fraction
        if not (0.0 <= fraction <= 1.0 or fraction == float("inf")):
            raise ValueError(
                f"whole_shard_fraction must be in [0, 1], or inf to never read whole "
                f"shards, got {fraction}"
            )
        if self.concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {self.concurrency}")


class ByteRange(NamedTuple):
    start: int
    stop: int


def coalesce(
    ranges: Sequence[ByteRange], *, gap: int, max_size: int
) -> list[tuple[ByteRange, list[int]]]:
    """Group byte ranges into fewer requests.

    Returns ``(request, members)`` pairs, ``members`` being indices into ``ranges``.
    Ranges are merged, in offset order, while the hole between them is at most ``gap``
    bytes and the merged request stays within ``max_size`` bytes.
    """
    order = sorted(range(len(ranges)), key=lambda i: ranges[i].start)
    groups: list[tuple[ByteRange, list[int]]] = []
    cur_start = cur_stop = 0
    members: list[int] = []
    for i in order:
        r = ranges[i]
        if members and r.start - cur_stop <= gap and max(cur_stop, r.stop) - cur_start <= max_size:
            cur_stop = max(cur_stop, r.stop)
            members.append(i)
            continue
        if members:
            groups.append((ByteRange(cur_start, cur_stop), members))
        cur_start, cur_stop, members = r.start, r.stop, [i]
    if members:
        groups.append((ByteRange(cur_start, cur_stop), members))
    return groups


class IndexCache:
    """A per-process LRU cache of decoded shard indexes, bounded in bytes.

    Thread-safe. Keyed by ``(reader token, shard key)``, the reader token naming the store
    and the opened array (an :class:`~shardwise.reader.ArrayReader` and its pickled copies
    on dask workers share one), so an array opened again after its shards were rewritten
    starts with no cached indexes. Within one opened array it assumes shards do not change
    (use ``ReadOptions(index_cache=False)`` when they are rewritten under a reader).
    """

    def __init__(self, max_bytes: int) -> None:
        self._max = int(max_bytes)
        self._entries: OrderedDict[Hashable, npt.NDArray[np.uint64]] = OrderedDict()
        self._size = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    @property
    def max_bytes(self) -> int:
        return self._max

    @property
    def nbytes(self) -> int:
        return self._size

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: Hashable) -> npt.NDArray[np.uint64] | None:
        with self._lock:
            value = self._entries.get(key)
            if value is None:
                self.misses += 1
                return None
            self._entries.move_to_end(key)
            self.hits += 1
            return value

    def put(self, key: Hashable, table: npt.NDArray[np.uint64]) -> None:
        nbytes = int(table.nbytes)
        if nbytes > self._max:
            return
        table.flags.writeable = False
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._size -= int(old.nbytes)
            self._entries[key] = table
            self._size += nbytes
            while self._size > self._max:
                _, evicted = self._entries.popitem(last=False)
                self._size -= int(evicted.nbytes)

    def discard(self, key: Hashable) -> None:
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._size -= int(old.nbytes)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._size = 0
            self.hits = self.misses = 0

    def resize(self, max_bytes: int) -> None:
        with self._lock:
            self._max = int(max_bytes)
            while self._size > self._max and self._entries:
                _, evicted = self._entries.popitem(last=False)
                self._size -= int(evicted.nbytes)


_DEFAULT_CACHE_BYTES = int(os.environ.get("SHARDWISE_INDEX_CACHE_BYTES", 64 << 20))
_CACHE = IndexCache(_DEFAULT_CACHE_BYTES)


def index_cache() -> IndexCache:
    """This process's shard-index cache (64 MiB by default, or the
    ``SHARDWISE_INDEX_CACHE_BYTES`` environment variable)."""
    return _CACHE


def set_index_cache_size(max_bytes: int) -> None:
    """Bound this process's shard-index cache to ``max_bytes`` (0 turns it off)."""
    _CACHE.resize(max_bytes)


def clear_index_cache() -> None:
    """Forget every cached shard index in this process."""
    _CACHE.clear()


def read_only_store_path(store: Any, storage_options: dict[str, Any] | None = None) -> Any:
    """zarr-python's ``StorePath`` (a ``Store`` and a path in it) for ``store``, a path,
    URL or ``Store``, opened read-only as ``zarr.open`` would. ``FileNotFoundError`` when
    a local path does not exist."""
    from zarr.core.sync import sync
    from zarr.storage._common import make_store_path  # zarr's own, not public

    return sync(make_store_path(store, mode="r", storage_options=storage_options))


def store_token(store: Any) -> str:
    """A string naming a store's location, the same in every process."""
    return f"{type(store).__module__}.{type(store).__qualname__}:{store}"


class _Absent:
    """The index of a shard that does not exist (every inner chunk is the fill value)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "ABSENT"

    def __reduce__(self) -> str:
        return "ABSENT"


ABSENT = _Absent()


class SuppliedIndexes:
    """Shard indexes handed to this process by the index tasks of a fan-out read graph.

    A read task supplies the indexes it received for as long as it reads
    (:meth:`supply`), and the reader takes them from here before it would read an index
    itself. Unlike :class:`IndexCache` nothing stays behind: an entry lives while some
    task holds it (counted, so tasks of one shard on several threads share it), and it
    does not depend on ``ReadOptions.index_cache``. Thread-safe.
    """

    def __init__(self) -> None:
        self._entries: dict[Hashable, list[Any]] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: Hashable) -> npt.NDArray[np.uint64] | _Absent | None:
        """The supplied index (or :data:`ABSENT`), or ``None`` when none was supplied."""
        with self._lock:
            entry = self._entries.get(key)
        return None if entry is None else entry[0]

    @contextmanager
    def supply(self, tables: Mapping[Any, npt.NDArray[np.uint64] | None]) -> Iterator[None]:
        """Make ``tables`` (cache key -> index, ``None`` for a missing shard) visible to
        readers in this process until the block ends."""
        with self._lock:
            for key, table in tables.items():
                entry = self._entries.get(key)
                if entry is None:
                    self._entries[key] = [ABSENT if table is None else table, 1]
                else:
                    entry[1] += 1
        try:
            yield
        finally:
            with self._lock:
                for key in tables:
                    entry = self._entries[key]
                    entry[1] -= 1
                    if entry[1] == 0:
                        del self._entries[key]


SUPPLIED = SuppliedIndexes()


class InFlight:
    """Deduplicates concurrent loads of one key on one event loop: the first caller
    loads, later callers await its result."""

    def __init__(self) -> None:
        self._pending: dict[Hashable, asyncio.Future[Any]] = {}

    async def run(self, key: Hashable, load: Any) -> Any:
        loop = asyncio.get_running_loop()
        key = (id(loop), key)
        fut = self._pending.get(key)
        if fut is not None:
            return await asyncio.shield(fut)
        fut = loop.create_future()
        self._pending[key] = fut
        try:
            value = await load()
        except BaseException as e:
            fut.set_exception(e)
            # nobody may be waiting: mark the exception as retrieved
            fut.exception()
            raise
        else:
            fut.set_result(value)
            return value
        finally:
            del self._pending[key]


# one per process; only touched from zarr-python's I/O loop thread
IN_FLIGHT = InFlight()
