"""What one process keeps of shard indexes: the cache, the channel from index tasks to
readers, and the loads under way. Apart from :mod:`shardwise.io.stores` because it is the
store layer's only mutable state, and all of it has one owner.

That owner is :class:`ProcessIndexes`, one per process (:func:`process_indexes`):

- its **lifetime** is the process's. It is made when this module is imported; its cache
  is made on first use (a read, :func:`index_cache`, :func:`set_index_cache_size` or
  :func:`clear_index_cache`), reading ``SHARDWISE_INDEX_CACHE_BYTES`` then. A child
  process started by ``fork`` keeps the cached indexes (each keyed by the opened array
  it belongs to, so still right) but starts with no supplied indexes and no loads under
  way, and with fresh locks: the tasks and loads that held them ran in the parent's
  threads, which the child does not have.
- every part is **thread-safe**: dask's threaded scheduler reads from many threads,
  each with zarr-python's I/O loop or an event loop of its own, and all of them share
  the process's parts. Each part holds a lock only around its own bookkeeping, never
  while a request is under way.

:data:`SUPPLIED` and :data:`IN_FLIGHT` are the owner's parts under the names the reader
and the read graph import.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = [
    "ABSENT",
    "CACHE_BYTES_VARIABLE",
    "DEFAULT_CACHE_BYTES",
    "IN_FLIGHT",
    "SUPPLIED",
    "InFlight",
    "IndexCache",
    "ProcessIndexes",
    "SuppliedIndexes",
    "clear_index_cache",
    "index_cache",
    "process_indexes",
    "set_index_cache_size",
]

CACHE_BYTES_VARIABLE = "SHARDWISE_INDEX_CACHE_BYTES"
"""The environment variable bounding the cache (in bytes) when it is made."""

DEFAULT_CACHE_BYTES = 64 << 20
"""The cache's bound when the environment does not set one."""


class IndexCache:
    """A per-process LRU cache of decoded shard indexes, bounded in bytes.

    Thread-safe. Keyed by ``(reader token, shard key)``, the reader token naming the store
    and the opened array (an :class:`~shardwise.io.reader.ArrayReader` and its pickled copies
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

    def _after_fork(self) -> None:
        """In a child made by ``fork``: a new lock (the parent's may have been held by a
        thread the child does not have); the entries stay."""
        self._lock = threading.Lock()


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

    def _after_fork(self) -> None:
        """In a child made by ``fork``: nothing supplied (the tasks that supplied ran in
        the parent's threads), and a new lock."""
        self._entries = {}
        self._lock = threading.Lock()


class InFlight:
    """Deduplicates concurrent loads of one key on one event loop: the first caller
    loads, later callers await its result.

    Thread-safe: a reader runs on zarr-python's I/O loop or on the event loop of the
    thread that reads (``ArrayReader.read_async``), so several threads share the table
    of loads under way. Loads are keyed by their loop as well (a future belongs to the
    loop that made it); the lock guards the table, never an ``await``."""

    def __init__(self) -> None:
        self._pending: dict[Hashable, asyncio.Future[Any]] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._pending)

    async def run(self, key: Hashable, load: Callable[[], Awaitable[Any]]) -> Any:
        loop = asyncio.get_running_loop()
        key = (id(loop), key)
        with self._lock:
            fut = self._pending.get(key)
            if fut is None:
                fut = self._pending[key] = loop.create_future()
                first = True
            else:
                first = False
        if not first:
            return await asyncio.shield(fut)
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
            with self._lock:
                del self._pending[key]

    def _after_fork(self) -> None:
        """In a child made by ``fork``: no loads under way (their loops ran in the
        parent's threads), and a new lock."""
        self._pending = {}
        self._lock = threading.Lock()


class ProcessIndexes:
    """The owner of what this process keeps of shard indexes (see the module
    docstring for its lifetime and thread safety): ``cache``, the :class:`IndexCache`
    (made on first use, bounded by ``SHARDWISE_INDEX_CACHE_BYTES`` read then, 64 MiB
    by default); ``supplied``, the :class:`SuppliedIndexes` of the running read tasks;
    ``in_flight``, the :class:`InFlight` loads."""

    def __init__(self) -> None:
        self.supplied = SuppliedIndexes()
        self.in_flight = InFlight()
        self._cache: IndexCache | None = None
        self._lock = threading.Lock()

    @property
    def cache(self) -> IndexCache:
        cache = self._cache
        if cache is None:
            with self._lock:
                if self._cache is None:
                    bound = os.environ.get(CACHE_BYTES_VARIABLE, DEFAULT_CACHE_BYTES)
                    self._cache = IndexCache(int(bound))
                cache = self._cache
        return cache

    def _after_fork(self) -> None:
        self._lock = threading.Lock()
        if self._cache is not None:
            self._cache._after_fork()
        self.supplied._after_fork()
        self.in_flight._after_fork()


_PROCESS = ProcessIndexes()
if hasattr(os, "register_at_fork"):  # not on Windows, which does not fork
    os.register_at_fork(after_in_child=_PROCESS._after_fork)

SUPPLIED = _PROCESS.supplied
"""The shard indexes the running read tasks of this process supply to its readers."""

IN_FLIGHT = _PROCESS.in_flight
"""The shard-index loads under way in this process."""


def process_indexes() -> ProcessIndexes:
    """The owner of this process's shard-index cache, supplied indexes and loads."""
    return _PROCESS


def index_cache() -> IndexCache:
    """This process's shard-index cache (64 MiB by default, or the
    ``SHARDWISE_INDEX_CACHE_BYTES`` environment variable)."""
    return _PROCESS.cache


def set_index_cache_size(max_bytes: int) -> None:
    """Bound this process's shard-index cache to ``max_bytes`` (0 turns it off)."""
    _PROCESS.cache.resize(max_bytes)


def clear_index_cache() -> None:
    """Forget every cached shard index in this process."""
    _PROCESS.cache.clear()
