"""The requests of this process: how many are in flight, what they take, and hedging.

Every read request shardwise makes of a store's shard objects (an index, a whole
shard, a range of inner chunks) goes through :func:`send`. On an event loop, one pool
per kind of store (``"network"``: object stores and HTTP; ``"disk"``: local and shared
file systems; ``"memory"``) holds:

- **the bound on requests in flight**: ``shardwise.concurrency.<kind>`` (64 over a
  network, where each request waits tens of milliseconds and many connections together
  make the bandwidth; 8 on disk). It is the process's, not a read's or a task's: the
  tasks of a dask worker that run at once share it, however many threads dask has;
- **the link's measure**: from the requests' sizes and times, the round trip
  (the median time of small requests) and the bandwidth of one connection (the median
  rate of large ones). :func:`link` answers with them, or the settings' guesses
  (``shardwise.network-latency``, ``shardwise.network-bandwidth``) until a few requests
  have been timed; the reader sizes its coalesced and split ranges by them;
- **hedging** (network only, ``shardwise.hedge``): a request that has waited past the
  95th percentile of its recent like (same size class), and at least twice their
  median, is sent again, and the first answer is taken (until eight like it have been
  timed: five times what the link's round trip and bandwidth say it takes). Hedged requests are bounded to
  ``shardwise.hedge-budget`` of all requests (a token bucket) and counted
  (:func:`stats`). A read is idempotent and carries the version it expects, so the
  second answer can only be the same bytes or the same refusal.

The pools are per event loop (an ``asyncio`` primitive belongs to one loop): zarr's
own loop, where every synchronous read's requests go, and any loop of the caller's
(``read_async``).
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
import weakref
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Literal

import shardwise.config as config

__all__ = ["Kind", "Link", "Stats", "link", "reset", "send", "stats"]

Kind = Literal["network", "disk", "memory"]

_SAMPLES = 128
"""Request times kept per size class."""
_SMALL = 256 << 10
"""Requests up to this size time the round trip; larger ones the bandwidth."""
_LARGE = 1 << 20
"""Requests of at least this size time the bandwidth."""
_MIN_SAMPLES = 8
"""Timed requests of a size class before it is hedged (its percentiles mean something)."""
_UNMEASURED = 0.25
"""The least a request waits before it is hedged while no request has timed the link:
the settings' guess of the round trip may be several times off (20 ms guessed, 100 ms
found), and hedging every request of a slow link is what the budget is not for."""


@dataclass(slots=True)
class Stats:
    """What the requests of this process did (:func:`stats`): counted since the
    process started, or since :func:`reset`.

    Attributes
    ----------
    requests : int
        Requests sent, hedges not counted.
    hedged : int
        Requests sent again because the first was slow.
    hedges_won : int
        Of those, how many answered before the request they hedged.
    nbytes : int
        Bytes the answers taken held.
    """

    requests: int = 0
    hedged: int = 0
    hedges_won: int = 0
    nbytes: int = 0


@dataclass(frozen=True, slots=True)
class Link:
    """A network's round trip (seconds) and one connection's bandwidth (bytes per
    second), measured or, until measured, the settings' guesses."""

    latency: float
    bandwidth: float
    measured: bool

    @property
    def gap(self) -> int:
        """Bytes one connection moves in one round trip: two ranges apart by less are
        cheaper read together (the bytes between cost less than a second request)."""
        return int(self.latency * self.bandwidth)

    @property
    def part(self) -> int:
        """The size ranges are cut into so that each takes eight round trips to move
        (a request's own round trip then costs a ninth of its time), at least 4 MiB
        and at most 64 MiB."""
        return int(min(max(8 * self.latency * self.bandwidth, 4 << 20), 64 << 20))


@dataclass(slots=True)
class _Pool:
    kind: Kind
    limit: int
    sem: asyncio.Semaphore
    # elapsed seconds of recent requests by size class, and (size, seconds) of recent ones
    times: dict[int, deque[float]] = field(default_factory=dict)
    sizes: deque[tuple[int, float]] = field(default_factory=lambda: deque(maxlen=_SAMPLES))
    tokens: float = 1.0

    def record(self, nbytes: int | None, elapsed: float) -> None:
        cls = _size_class(nbytes)
        self.times.setdefault(cls, deque(maxlen=_SAMPLES)).append(elapsed)
        if nbytes is not None:
            self.sizes.append((nbytes, elapsed))

    def hedge_after(self, nbytes: int | None, guess: Link) -> float:
        """How long a request of ``nbytes`` waits before it is hedged: past the 95th
        percentile of its recent like and twice their median; until enough like it
        have been timed, five times what the link says it takes (at least
        :data:`_UNMEASURED` while the link is the settings' guess)."""
        times = self.times.get(_size_class(nbytes))
        if times is None or len(times) < _MIN_SAMPLES:
            known = self.link(guess)
            wait = 5 * (known.latency + (nbytes or 0) / known.bandwidth)
            return wait if known.measured else max(wait, _UNMEASURED)
        ordered = sorted(times)
        p50 = ordered[len(ordered) // 2]
        p95 = ordered[min(len(ordered) - 1, math.ceil(0.95 * len(ordered)) - 1)]
        return max(p95, 2 * p50, 0.005)

    def link(self, guess: Link) -> Link:
        small = sorted(t for n, t in self.sizes if n <= _SMALL)
        if len(small) < _MIN_SAMPLES:
            return guess
        latency = small[len(small) // 2]
        rates = sorted(n / (t - latency) for n, t in self.sizes if n >= _LARGE and t > latency)
        bandwidth = rates[len(rates) // 2] if len(rates) >= 3 else guess.bandwidth
        return Link(latency, bandwidth, True)


def _size_class(nbytes: int | None) -> int:
    """Requests of like size: powers of 4 from 64 KiB; -1 for a whole object."""
    if nbytes is None:
        return -1
    return max(0, (max(nbytes, 1).bit_length() - 16) // 2)


_POOLS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[Kind, _Pool]] = (
    weakref.WeakKeyDictionary()
)
_LOCK = threading.Lock()
_STATS = Stats()


def _limit(kind: Kind) -> int:
    # (a mapping set whole may leave kinds out: those keep their defaults)
    value = config.get("concurrency").get(kind)
    if value is None:
        value = config.defaults()["shardwise"]["concurrency"][kind]
    value = int(value)
    if value < 1:
        raise ValueError(f"shardwise.concurrency.{kind} must be >= 1, got {value}")
    return value


def _pool(kind: Kind) -> _Pool:
    loop = asyncio.get_running_loop()
    limit = _limit(kind)
    with _LOCK:
        pools = _POOLS.setdefault(loop, {})
        pool = pools.get(kind)
        if pool is None or pool.limit != limit:  # (a setting changed: a new bound)
            old = pool
            pool = _Pool(kind, limit, asyncio.Semaphore(limit))
            if old is not None:
                pool.times, pool.sizes = old.times, old.sizes
            pools[kind] = pool
        return pool


def _guess() -> Link:
    return Link(
        float(config.get("network-latency")), float(config.get_bytes("network-bandwidth")), False
    )


def link() -> Link:
    """The network's round trip and one connection's bandwidth as the requests of the
    running event loop found them, else the settings' guesses."""
    guess = _guess()
    with _LOCK:
        pool = _POOLS.get(asyncio.get_running_loop(), {}).get("network")
    return guess if pool is None else pool.link(guess)


def stats() -> Stats:
    """A copy of what the requests of this process did (every event loop's)."""
    with _LOCK:
        return Stats(_STATS.requests, _STATS.hedged, _STATS.hedges_won, _STATS.nbytes)


def reset() -> None:
    """Forget what was counted and timed (to measure a cold start, say)."""
    global _STATS
    with _LOCK:
        _STATS = Stats()
        _POOLS.clear()


def _hedging() -> tuple[bool, float]:
    return bool(config.get("hedge")), float(config.get("hedge-budget"))


async def send[T](
    kind: Kind, call: Callable[[], Awaitable[T]], nbytes: int | None, size: Callable[[T], int]
) -> T:
    """``await call()``, one request of about ``nbytes`` (None: a whole object of
    unknown size), within this loop's bound for ``kind`` and hedged over a network;
    ``size`` tells the bytes an answer holds."""
    pool = _pool(kind)
    async with pool.sem:
        hedge, budget = _hedging() if kind == "network" else (False, 0.0)
        with _LOCK:
            _STATS.requests += 1
            pool.tokens = min(pool.tokens + budget, 10.0)
        start = time.monotonic()
        wait = pool.hedge_after(nbytes, _guess()) if hedge else None
        if wait is None:
            result = await call()
            _done(pool, nbytes, start, result, size)
            return result
        first = asyncio.ensure_future(call())
        try:
            done, _ = await asyncio.wait({first}, timeout=wait)
        except BaseException:
            _abandon(first)
            raise
        if done or not _take_token(pool):
            result = await first
            _done(pool, nbytes, start, result, size)
            return result
        return await _race(pool, first, call, nbytes, start, size)


def _take_token(pool: _Pool) -> bool:
    with _LOCK:
        if pool.tokens < 1.0:
            return False
        pool.tokens -= 1.0
        _STATS.hedged += 1
        return True


async def _race[T](
    pool: _Pool,
    first: asyncio.Future[T],
    call: Callable[[], Awaitable[T]],
    nbytes: int | None,
    start: float,
    size: Callable[[T], int],
) -> T:
    """The first answer of ``first`` and a second sending of ``call``: a value, or
    the error of the one that failed last (a failure waits for the other)."""
    second = asyncio.ensure_future(call())
    second_start = time.monotonic()
    pending: set[asyncio.Future[T]] = {first, second}
    error: BaseException | None = None
    try:
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for fut in done:
                if fut.exception() is None:
                    result = fut.result()
                    if fut is second:
                        with _LOCK:
                            _STATS.hedges_won += 1
                    _done(pool, nbytes, start if fut is first else second_start, result, size)
                    return result
                error = fut.exception()
        assert error is not None
        raise error
    finally:
        for fut in pending:
            _abandon(fut)


def _abandon[T](fut: asyncio.Future[T]) -> None:
    """Cancel a request no one waits for any more (its error, if it ends in one, is
    nobody's: taken so that asyncio does not report it)."""
    fut.cancel()
    fut.add_done_callback(lambda f: f.cancelled() or f.exception())


def _done[T](
    pool: _Pool, nbytes: int | None, start: float, result: T, size: Callable[[T], int]
) -> None:
    elapsed = time.monotonic() - start
    got = size(result)
    with _LOCK:
        _STATS.nbytes += got
        pool.record(nbytes, elapsed)
        if nbytes is None and got:
            pool.sizes.append((got, elapsed))
