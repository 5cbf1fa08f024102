"""What one process keeps of shard indexes: the cache, the channel from index tasks to
readers, and the loads under way. Apart from ``shardwise.io.stores`` because it is the
store layer's only mutable state, and all of it has one owner.

That owner is ``ProcessIndexes``, one per process (``process_indexes``):

- its **lifetime** is the process's. It is made when this module is imported; its cache
  is made on first use (a read, ``index_cache``, ``set_index_cache_size`` or
  ``clear_index_cache``), reading its bound then (``shardwise.config.index_cache_bytes``). A child
  process started by ``fork`` keeps the cached indexes (each keyed by the opened array
  it belongs to, so still right) but starts with no loads under way, and with fresh
  locks: the tasks and loads that held them ran in the parent's
  threads, which the child does not have.
- every part is **thread-safe**: dask's threaded scheduler reads from many threads,
  each with zarr-python's I/O loop or an event loop of its own, and all of them share
  the process's parts. Each part holds a lock only around its own bookkeeping, never
  while a request is under way.

``SUPPLIED`` and ``IN_FLIGHT`` are the owner's parts under the names the reader
and the read graph import.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

import shardwise.config as config

if TYPE_CHECKING:
    from shardwise.io.conditional import Version

__all__ = [
    "IN_FLIGHT",
    "SUPPLIED",
    "InFlight",
    "IndexCache",
    "IndexEntry",
    "ProcessIndexes",
    "SuppliedIndexes",
    "clear_index_cache",
    "index_cache",
    "process_indexes",
    "set_index_cache_size",
]


@dataclass(frozen=True, slots=True)
class IndexEntry:
    """A shard's index as it was read, with what it is only as good as.

    ``table``: the checked ``(offset, nbytes)`` pairs, or None when there was no
    object (every inner chunk is the fill value). ``version``: the version of the
    object the index was read from (an ETag, a file's identity: see
    ``shardwise.io.conditional``); every read that uses the index is made against
    it. None when the store has no versions (or the reader trusts the data not to
    change). ``size``: the object's size when the store said it. ``read_at``: when it
    was read (``time.time()``, so that it means the same on the worker a fan-out graph
    hands it to). ``cached``: taken from a cache rather than read just now (what a
    fan-out graph's index task says of the index it hands on)."""

    table: npt.NDArray[np.uint64] | None
    version: Version | None = None
    size: int | None = None
    read_at: float = field(default_factory=time.time, compare=False)
    cached: bool = field(default=False, compare=False)

    @property
    def absent(self) -> bool:
        return self.table is None

    @property
    def nbytes(self) -> int:
        """What the entry costs the cache's bound (an absent shard's: a nominal 64)."""
        return 64 if self.table is None else int(self.table.nbytes) + 64

    def age(self) -> float:
        """Seconds since it was read."""
        return time.time() - self.read_at

    def data_end(self) -> int:
        """Where the stored inner chunks end (0 for none): about the object's size."""
        if self.table is None:
            return 0
        pairs = self.table.reshape(-1, 2)
        stored = pairs[pairs[:, 0] != np.uint64(2**64 - 1)]
        return int((stored[:, 0] + stored[:, 1]).max()) if len(stored) else 0


class IndexCache:
    """A per-process LRU cache of shard indexes (``IndexEntry``), bounded in bytes.

    Thread-safe. Keyed by ``(reader token, shard key)``, the reader token naming the store
    and the opened array (an ``shardwise.io.reader.ArrayReader`` and its pickled copies
    on dask workers share one). Each entry carries the version of the shard it was read
    from, and the reader reads only against that version: a shard rewritten by another
    job is found changed on the next read of it, and its index read again
    (``ReadOptions.recheck_cached_data`` says when what needs no request, an empty inner
    chunk or an absent shard, is checked again).

    Parameters
    ----------
    max_bytes : int
        The bound, in bytes of cached indexes (0: nothing is kept).

    Attributes
    ----------
    max_bytes, nbytes : int
        The bound, and the bytes cached now; ``len()`` is the number of indexes.
    hits, misses : int
        The lookups answered from the cache, and those that were not.
    """

    def __init__(self, max_bytes: int) -> None:
        self._max = int(max_bytes)
        self._entries: OrderedDict[Hashable, IndexEntry] = OrderedDict()
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

    def get(self, key: Hashable) -> IndexEntry | None:
        with self._lock:
            value = self._entries.get(key)
            if value is None:
                self.misses += 1
                return None
            self._entries.move_to_end(key)
            self.hits += 1
            return value

    def put(self, key: Hashable, entry: IndexEntry) -> None:
        nbytes = entry.nbytes
        if nbytes > self._max:
            return
        if entry.table is not None:
            entry.table.flags.writeable = False
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._size -= old.nbytes
            self._entries[key] = entry
            self._size += nbytes
            while self._size > self._max:
                _, evicted = self._entries.popitem(last=False)
                self._size -= evicted.nbytes

    def discard(self, key: Hashable, entry: IndexEntry | None = None) -> None:
        """Forget the entry of ``key`` (only if it is ``entry``, or of its version, when
        given: a newer one another thread put stays)."""
        with self._lock:
            old = self._entries.get(key)
            if old is None:
                return
            if entry is not None and old is not entry and not _same_version(old, entry):
                return
            del self._entries[key]
            self._size -= old.nbytes

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
                self._size -= evicted.nbytes

    def _after_fork(self) -> None:
        """In a child made by ``fork``: a new lock (the parent's may have been held by a
        thread the child does not have); the entries stay."""
        self._lock = threading.Lock()


def _same_version(a: IndexEntry, b: IndexEntry) -> bool:
    return a.version is not None and a.version == b.version


_NONE: Mapping[Hashable, IndexEntry] = MappingProxyType({})
_SUPPLIED: ContextVar[Mapping[Hashable, IndexEntry]] = ContextVar(
    "shardwise_supplied", default=_NONE
)


class SuppliedIndexes:
    """Shard indexes handed to a read task by the index tasks of a fan-out read graph.

    A read task supplies the indexes it received for as long as it reads
    (``supply``), and the reader takes them (``current``, in the thread that
    reads, before its requests go to an event loop) before it would read an index
    itself, reading against the version each came with. They are held in a context
    variable: seen by the reads of the task that supplied them and of no other task
    (another thread, another task's context), and gone when the block ends. Unlike
    ``IndexCache`` nothing stays behind, and it does not depend on
    ``ReadOptions.index_cache``.
    """

    def current(self) -> Mapping[Hashable, IndexEntry]:
        """The indexes supplied to this thread's (this context's) reads: cache key ->
        index."""
        return _SUPPLIED.get()

    def get(self, key: Hashable) -> IndexEntry | None:
        """The supplied index, or ``None`` when none was supplied."""
        return _SUPPLIED.get().get(key)

    @contextmanager
    def supply(self, entries: Mapping[Any, IndexEntry]) -> Iterator[None]:
        """Make ``entries`` (cache key -> index) visible to the reads of this thread
        (this context) until the block ends."""
        token = _SUPPLIED.set(MappingProxyType({**_SUPPLIED.get(), **entries}))
        try:
            yield
        finally:
            _SUPPLIED.reset(token)


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
    docstring for its lifetime and thread safety): ``cache``, the ``IndexCache``
    (made on first use, bounded by dask config ``shardwise.index-cache-bytes`` read then,
    64 MiB by default); ``supplied``, the ``SuppliedIndexes`` of the running read tasks;
    ``in_flight``, the ``InFlight`` loads."""

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
                    self._cache = IndexCache(config.index_cache_bytes())
                cache = self._cache
        return cache

    def _after_fork(self) -> None:
        self._lock = threading.Lock()
        if self._cache is not None:
            self._cache._after_fork()
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
    """This process's shard-index cache (64 MiB by default, or dask config
    ``shardwise.index-cache-bytes``: ``DASK_SHARDWISE__INDEX_CACHE_BYTES`` in the
    environment)."""
    return _PROCESS.cache


def set_index_cache_size(max_bytes: int) -> None:
    """Bound this process's shard-index cache.

    Parameters
    ----------
    max_bytes : int
        The bound, in bytes of cached indexes; 0 turns the cache off.
    """
    _PROCESS.cache.resize(max_bytes)


def clear_index_cache() -> None:
    """Forget every cached shard index in this process."""
    _PROCESS.cache.clear()
