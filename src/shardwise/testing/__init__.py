"""Helpers for testing code that uses shardwise (shipped, like ``zarr.testing``).

:class:`CountingStore` wraps any zarr-python ``Store`` and records every request, so
tests and benchmarks can say exactly how many reads and writes a job cost.
:class:`LatencyStore` adds a fixed delay to every request, the way an object store's
round trip does, so benchmarks on local disk show what request counts cost.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Self

from zarr.abc.store import ByteRequest, RangeByteRequest, Store, SuffixByteRequest
from zarr.storage import WrapperStore

from shardwise.io.capabilities import conditional
from shardwise.io.conditional import Conditional, Got, Version

__all__ = ["CountingStore", "LatencyStore", "Overlap", "Request", "RequestLog"]


@dataclass(frozen=True, slots=True)
class Request:
    """One store call: ``op`` is "get", "set", "delete" or "size" (``getsize``);
    ``byte_range`` describes a ranged read ("whole", "[a, b)", "last n", "from a")."""

    op: str
    key: str
    byte_range: str = "whole"


@dataclass
class RequestLog:
    """A thread-safe list of :class:`Request`, shared by every copy of a CountingStore."""

    requests: list[Request] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, request: Request) -> None:
        with self._lock:
            self.requests.append(request)

    def clear(self) -> None:
        with self._lock:
            self.requests.clear()

    def gets(self, suffix: str = "") -> list[Request]:
        """Reads of keys ending in ``suffix`` (metadata reads excluded unless asked for)."""
        with self._lock:
            return [
                r
                for r in self.requests
                if r.op == "get"
                and r.key.endswith(suffix)
                and (suffix.endswith("zarr.json") or not r.key.endswith("zarr.json"))
            ]

    def sets(self) -> list[Request]:
        with self._lock:
            return [r for r in self.requests if r.op == "set"]

    def per_key(self, op: str = "get") -> Counter[str]:
        with self._lock:
            return Counter(
                r.key for r in self.requests if r.op == op and not r.key.endswith("zarr.json")
            )


def _describe(byte_range: ByteRequest | None) -> str:
    if byte_range is None:
        return "whole"
    if isinstance(byte_range, RangeByteRequest):
        return f"[{byte_range.start}, {byte_range.end})"
    if isinstance(byte_range, SuffixByteRequest):
        return f"last {byte_range.suffix}"
    return f"from {byte_range.offset}"


class CountingStore(WrapperStore[Store]):
    """A store that records every get/set/delete it passes to the store it wraps.

    Copies made by zarr-python (``with_read_only``) share one :class:`RequestLog`.
    """

    def __init__(self, store: Store, log: RequestLog | None = None) -> None:
        super().__init__(store)
        self.log = log if log is not None else RequestLog()

    def _with_store(self, store: Store) -> Self:
        return type(self)(store, self.log)

    def with_read_only(self, read_only: bool = False) -> Self:
        # (zarr-python's WrapperStore has it from 3.2 on; 3.1's opens need it for mode "r")
        return self._with_store(self._store.with_read_only(read_only))

    def __str__(self) -> str:
        return f"counting-{self._store}"

    def __getstate__(self) -> dict[str, Any]:
        return {"store": self._store}

    def __setstate__(self, state: dict[str, Any]) -> None:
        # the log does not travel between processes: a copy counts on its own
        self.__init__(state["store"])  # type: ignore[misc]

    async def get(self, key: str, prototype: Any, byte_range: ByteRequest | None = None) -> Any:
        self.log.add(Request("get", key, _describe(byte_range)))
        return await self._store.get(key, prototype, byte_range)

    def get_sync(
        self, key: str, *, prototype: Any = None, byte_range: ByteRequest | None = None
    ) -> Any:
        self.log.add(Request("get", key, _describe(byte_range)))
        return super().get_sync(key, prototype=prototype, byte_range=byte_range)

    async def get_partial_values(
        self, prototype: Any, key_ranges: Iterable[tuple[str, ByteRequest | None]]
    ) -> list[Any]:
        key_ranges = list(key_ranges)
        for key, byte_range in key_ranges:
            self.log.add(Request("get", key, _describe(byte_range)))
        return await self._store.get_partial_values(prototype, key_ranges)

    def get_ranges(self, key: str, byte_ranges: Any, **kwargs: Any) -> Any:
        # zarr-python's default, which issues (and so counts) one get per merged range
        kwargs = {k: v for k, v in kwargs.items() if v is not None}
        return Store.get_ranges(self, key, byte_ranges, **kwargs)

    async def getsize(self, key: str) -> int:
        # the wrapped store's own (a stat, a HEAD), not zarr-python's default of
        # reading the whole value
        self.log.add(Request("size", key))
        return await self._store.getsize(key)

    async def set(self, key: str, value: Any) -> None:
        self.log.add(Request("set", key))
        await self._store.set(key, value)

    async def set_if_not_exists(self, key: str, value: Any) -> None:
        self.log.add(Request("set", key))
        await self._store.set_if_not_exists(key, value)

    async def _set_many(self, values: Iterable[tuple[str, Any]]) -> None:
        for key, value in values:  # zarr-python writes metadata documents this way
            await self.set(key, value)

    def set_sync(self, key: str, value: Any) -> None:
        self.log.add(Request("set", key))
        super().set_sync(key, value)

    async def delete(self, key: str) -> None:
        self.log.add(Request("delete", key))
        await self._store.delete(key)

    def delete_sync(self, key: str) -> None:
        self.log.add(Request("delete", key))
        super().delete_sync(key)

    def shardwise_conditional(self) -> Conditional | None:
        """The wrapped store's conditional and versioned reads and puts, counted here
        too (a versioned read as the ``get`` of its byte range)."""
        inner = conditional(self._store)
        log = self.log

        def count(op: str, key: str, byte_range: ByteRequest | None = None) -> None:
            log.add(Request(op, key, _describe(byte_range)))

        return None if inner is None else _PassedOn(inner, count)


class _PassedOn(Conditional):
    """A wrapped store's conditional and versioned reads and puts, each announced
    first to ``before(op, key, byte_range)`` (``op``: "get", "set" or "delete"):
    counted; and each after ``delay`` seconds (asleep on the event loop for the
    versioned reads, which go out concurrently, counted in ``overlap``)."""

    def __init__(
        self,
        inner: Conditional,
        before: Callable[..., None] | None = None,
        delay: float = 0.0,
        overlap: Overlap | None = None,
    ) -> None:
        self.inner = inner
        self.before = before
        self.delay = delay
        self.overlap = overlap
        self.kind = inner.kind
        self.plain_puts_here = inner.plain_puts_here

    def _announce(self, op: str, key: str, byte_range: ByteRequest | None = None) -> None:
        if self.before is not None:
            self.before(op, key, byte_range)

    def get(self, key: str) -> tuple[Any, Version]:
        self._announce("get", key)
        time.sleep(self.delay)
        return self.inner.get(key)

    def put(self, key: str, data: Any, expected: Version | None) -> bool:
        self._announce("set", key)
        time.sleep(self.delay)
        return self.inner.put(key, data, expected)

    def delete(self, key: str) -> None:
        self._announce("delete", key)
        time.sleep(self.delay)
        self.inner.delete(key)

    async def read(
        self, key: str, byte_range: ByteRequest | None = None, expected: Version | None = None
    ) -> Got:
        self._announce("get", key, byte_range)
        o = self.overlap
        if o is not None:
            o.now += 1
            o.peak = max(o.peak, o.now)
        try:
            if self.delay:
                await asyncio.sleep(self.delay)
            return await self.inner.read(key, byte_range, expected)
        finally:
            if o is not None:
                o.now -= 1


class Overlap:
    """How many requests a :class:`LatencyStore` (and the copies zarr-python makes of
    it) has under way now, and the most it had at once."""

    __slots__ = ("now", "peak")

    def __init__(self) -> None:
        self.now = 0
        self.peak = 0

    def __repr__(self) -> str:
        return f"Overlap(now={self.now}, peak={self.peak})"


class LatencyStore(WrapperStore[Store]):
    """Wraps a store and waits ``delay`` seconds (asynchronously, so concurrent requests
    overlap as they would over a network) before every get, set, delete, existence
    check and listing. ``overlap`` (an :class:`Overlap`, shared with zarr-python's
    copies of the store) counts the requests under way at once in this process.
    Picklable: copies on dask workers keep the delay (and count their own overlap)."""

    def __init__(self, store: Store, delay: float = 0.02, overlap: Overlap | None = None) -> None:
        super().__init__(store)
        self.delay = float(delay)
        self.overlap = overlap if overlap is not None else Overlap()

    def _with_store(self, store: Store) -> Self:
        return type(self)(store, self.delay, self.overlap)

    def with_read_only(self, read_only: bool = False) -> Self:
        # (zarr-python's WrapperStore has it from 3.2 on; 3.1's opens need it for mode "r")
        return self._with_store(self._store.with_read_only(read_only))

    def __str__(self) -> str:
        return f"latency{self.delay:g}s-{self._store}"

    def __getstate__(self) -> dict[str, Any]:
        return {"store": self._store, "delay": self.delay}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["store"], state["delay"])  # type: ignore[misc]

    @property
    def _supports_sync_io(self) -> bool:
        return False  # every request goes through the delayed async methods

    async def _wait(self) -> None:
        await asyncio.sleep(self.delay)

    def shardwise_conditional(self) -> Conditional | None:
        """The wrapped store's conditional and versioned reads and puts, each after
        the delay."""
        inner = conditional(self._store)
        return None if inner is None else _PassedOn(inner, delay=self.delay, overlap=self.overlap)

    async def get(self, key: str, prototype: Any, byte_range: ByteRequest | None = None) -> Any:
        o = self.overlap
        o.now += 1
        o.peak = max(o.peak, o.now)
        try:
            await self._wait()
            return await self._store.get(key, prototype, byte_range)
        finally:
            o.now -= 1

    async def get_partial_values(
        self, prototype: Any, key_ranges: Iterable[tuple[str, ByteRequest | None]]
    ) -> list[Any]:
        return list(await asyncio.gather(*(self.get(key, prototype, r) for key, r in key_ranges)))

    def get_ranges(self, key: str, byte_ranges: Any, **kwargs: Any) -> Any:
        # zarr-python's default, which issues (and so delays) one get per merged range
        kwargs = {k: v for k, v in kwargs.items() if v is not None}
        return Store.get_ranges(self, key, byte_ranges, **kwargs)

    async def exists(self, key: str) -> bool:
        await self._wait()
        return await self._store.exists(key)

    async def getsize(self, key: str) -> int:
        await self._wait()
        return await self._store.getsize(key)

    async def set(self, key: str, value: Any) -> None:
        await self._wait()
        await self._store.set(key, value)

    async def set_if_not_exists(self, key: str, value: Any) -> None:
        await self._wait()
        await self._store.set_if_not_exists(key, value)

    async def _set_many(self, values: Iterable[tuple[str, Any]]) -> None:
        await asyncio.gather(*(self.set(k, v) for k, v in values))

    async def delete(self, key: str) -> None:
        await self._wait()
        await self._store.delete(key)

    async def list_prefix(self, prefix: str) -> Any:
        await self._wait()
        async for key in self._store.list_prefix(prefix):
            yield key

    async def list_dir(self, prefix: str) -> Any:
        await self._wait()
        async for key in self._store.list_dir(prefix):
            yield key
