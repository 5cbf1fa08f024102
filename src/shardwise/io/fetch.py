"""Fetching the encoded inner chunks of one shard: the index, then coalesced byte ranges,
every range read from the version of the shard its index came from.

:class:`ShardFetcher` is the part of an :class:`~shardwise.io.reader.ArrayReader` that
talks to the store. Its one rule: **an inner chunk's bytes are read only from the
version of the shard whose index located them.** A shard's index is read with the
version of the object it came from (an ETag on S3 and obstore's stores, the open file's
identity on a local file system, the object itself in memory:
:mod:`shardwise.io.conditional`), cached with it (:class:`~shardwise.io.cache.IndexEntry`),
and every range read that uses it carries the version as its condition, on the same
request. A shard that another job replaced meanwhile fails the condition
(:class:`~shardwise.io.conditional.Stale`): the index is read again and the ranges
with it, up to :data:`CHANGES` times, after which
:class:`~shardwise.errors.ChangingShardError` says the shard kept changing. A
corruption error is raised only where one version's index and bytes disagree.

``ReadOptions.recheck_cached_data`` says when a cached index is trusted without a
request: ``True`` never (a read needing only empty inner chunks reads the index again;
absent shards are not cached); a number of seconds, up to that age; ``"open"``
always, with no conditions at all (the data are known not to change), which is also
the only way a store with no versions caches indexes. Reads from a store with no
versions pair the index and the ranges as zarr-python does, in two unconditional
requests; when what they find is inconsistent, the index is read again, and the
error raised only if it is unchanged.
"""

from __future__ import annotations

import asyncio
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

import numpy as np

from shardwise.codecs import ShardDecoder
from shardwise.errors import (
    ChangingShardError,
    CorruptShardError,
    ShardwiseError,
    StoreIOError,
    TruncatedShardError,
)
from shardwise.format.index import EMPTY
from shardwise.io.cache import IN_FLIGHT, IndexEntry, index_cache
from shardwise.io.capabilities import conditional, immutable, store_kind
from shardwise.io.conditional import Conditional, Got, Stale, Version
from shardwise.io.icechunk import out_of_bounds
from shardwise.io.requests import link, send
from shardwise.io.shard_index import got_size, naming, range_nbytes, read_shard_index
from shardwise.io.stores import ByteRange, ReadOptions, coalesce

__all__ = ["CHANGES", "Bytes", "Fetched", "ShardFetcher"]

Bytes = memoryview
# what a shard fetch yields: None for a missing shard, else inner chunk -> bytes or None
Fetched = dict[tuple[int, ...], Bytes | None] | None

CHANGES = 10
"""How many times one read of a shard tries when it keeps finding the shard changed
since its index was read, before :class:`~shardwise.errors.ChangingShardError`."""


def _pause(attempt: int) -> float:
    """The pause before try ``attempt`` (from 1) of a changed shard: none for the first
    (the index is simply read again), then a random time up to 10 ms doubled per try,
    at most 1 s, so that a reader does not keep meeting the same writer in step."""
    if attempt <= 1:
        return 0.0
    return random.uniform(0, min(1.0, 0.01 * 2 ** (attempt - 2)))


@dataclass(frozen=True, slots=True)
class _RangeRead:
    """The range reads of one shard: its ``key``, the version every range is read
    against (``expected``; None: no condition), and the inner chunks to read
    (``wanted``) with the byte range of each (``ranges``, in the same order)."""

    key: str
    expected: Version | None
    wanted: list[tuple[int, ...]]
    ranges: list[ByteRange]


def _located(
    table: Any, needed: list[tuple[int, ...]]
) -> tuple[dict[tuple[int, ...], Bytes | None], list[tuple[int, ...]], list[ByteRange]]:
    """The ``needed`` inner chunks that ``table`` says are empty (as None), and the
    others with their byte ranges, to read."""
    empty: dict[tuple[int, ...], Bytes | None] = {}
    wanted: list[tuple[int, ...]] = []
    ranges: list[ByteRange] = []
    for inner in needed:
        offset, nbytes = table[inner]
        if offset == EMPTY:
            empty[inner] = None
        else:
            wanted.append(inner)
            ranges.append(ByteRange(int(offset), int(offset) + int(nbytes)))
    return empty, wanted, ranges


def _read_on(
    decoder: ShardDecoder, entry: IndexEntry, groups: Sequence[tuple[ByteRange, list[int]]]
) -> tuple[int, int]:
    """How many bytes the group reaching furthest is read on by, and which group that
    is (-1: none makes a request). With the index at the end, read by a suffix request
    from a store that did not say the object's size, an entry pointing into the index
    would pass every check: that group is read on by the index's length, so a short
    read tells where the data end (still one request; ``index.nbytes`` more bytes).
    Where the size is known, the entries were checked against it (no read-on)."""
    tail = decoder.index.nbytes if decoder.index.location == "end" and entry.size is None else 0
    last = max(  # (zero-length groups make no request)
        range(len(groups)),
        key=lambda g: (groups[g][0].stop > groups[g][0].start, groups[g][0].stop),
        default=-1,
    )
    return tail, last


class ShardFetcher:
    """Reads shards' indexes and inner chunks of one opened array (see the module
    docstring). ``token`` names the opened array in the index cache's keys; ``name``
    names it in errors."""

    def __init__(
        self, store: Any, name: str, token: str, options: ReadOptions, *, itemsize: int = 1
    ) -> None:
        self.store = store
        self.itemsize = itemsize
        self.name = name
        self.token = token
        self.options = options
        self.kind = store_kind(store)
        # the stored sizes of the shards seen (their sum and count): what the next one
        # is expected to take
        self._seen = [0, 0]
        recheck = options.recheck_cached_data
        # trusted: no condition, no check (the data do not change while open)
        self.trusted = immutable(store) or recheck == "open"
        # the store's versioned reads, used unless trusted, and where the store has no
        # suffix range (Azure) in any case: they read an index at a shard's end by the
        # object's size, known from a listing, not by a request for it per shard
        found = conditional(store)
        keep = found is not None and (not self.trusted or not found.suffix_ranges)
        self.versions: Conditional | None = found if keep else None
        self.caching = options.index_cache and (self.trusted or self.versions is not None)
        # how old a cached index may be to answer without a request (None: any age)
        self.max_age: float | None = (
            None if self.trusted else 0.0 if recheck is True else float(recheck)
        )

    def typical_size(self, nominal: int) -> int:
        """The stored size of a shard (of ``nominal`` bytes decoded) as the shards seen
        so far had it on average; ``nominal`` before any."""
        total, count = self._seen
        return total // count if count else nominal

    # -- the cache -----------------------------------------------------------------------
    def remember(self, key: str, entry: IndexEntry) -> None:
        """Cache ``entry`` when the options and what it carries allow: a version to
        read against (or trusted data), and for an absent shard a staleness bound."""
        size = entry.size if entry.size is not None else entry.data_end()
        if size:
            self._seen[0] += size
            self._seen[1] += 1
        if not self.caching:
            return
        if entry.version is None and not self.trusted:
            return
        if entry.table is None and self.max_age == 0.0:
            return  # (it would be read again at once)
        index_cache().put((self.token, key), entry)

    def cached(self, key: str, needed: Sequence[tuple[int, ...]] | None) -> IndexEntry | None:
        """The cached index of ``key`` when it may answer a read of ``needed``
        (:meth:`usable`); any cached index with ``needed=None``."""
        if not self.caching:
            return None
        entry = index_cache().get((self.token, key))
        if entry is None or (needed is not None and not self.usable(entry, needed)):
            return None
        return entry

    def usable(self, entry: IndexEntry, needed: Sequence[tuple[int, ...]]) -> bool:
        """Whether a cached ``entry`` may answer a read of the ``needed`` inner chunks:
        always when some of them are stored (their reads will carry its version), or
        when the data are trusted; when none are (nothing to read, so nothing that
        would find the shard changed), only as long as ``recheck_cached_data`` trusts
        an index that old."""
        if self.max_age is None:
            return True
        table = entry.table
        if table is not None and any(table[inner][0] != EMPTY for inner in needed):
            return True
        return entry.age() <= self.max_age

    def forget(self, key: str, entry: IndexEntry | None) -> None:
        """Drop ``entry`` (found out of date) from the cache, if it is still there."""
        if entry is not None:
            index_cache().discard((self.token, key), entry)

    # -- requests ------------------------------------------------------------------------
    async def get(
        self,
        key: str,
        sem: asyncio.Semaphore,
        byte_range: Any = None,
        expected: Version | None = None,
    ) -> Got:
        """One request: bytes of ``key`` with their version (when the store has
        versions and the data are not trusted), only from ``expected`` when given."""
        from zarr.buffer import default_buffer_prototype

        versions = self.versions

        async def request() -> Got:
            if versions is not None:
                return await versions.read(key, byte_range, expected)
            buf = await self.store.get(key, default_buffer_prototype(), byte_range)
            if buf is None:
                return Got(None, None, None)
            return Got(memoryview(buf.as_numpy_array()).cast("B"), None, None)

        with naming(self.name, key):
            async with sem:
                return await send(self.kind, request, range_nbytes(byte_range), got_size)

    async def index(self, key: str, decoder: ShardDecoder, sem: asyncio.Semaphore) -> IndexEntry:
        """Read (:func:`~shardwise.io.shard_index.read_shard_index`), check and cache one
        shard's index, with the version it came from; concurrent loads of one shard in
        this process share one request."""

        async def load() -> IndexEntry:
            entry = await read_shard_index(
                self.store,
                key,
                decoder.index,
                kind=self.kind,
                versions=self.versions,
                array=self.name,
                max_nbytes=decoder.chunk.max_encoded,
                sem=sem,
                name_errors=True,
            )
            self.remember(key, entry)
            return entry

        entry: IndexEntry = await IN_FLIGHT.run((self.token, key), load)
        return entry

    # -- one shard -----------------------------------------------------------------------
    async def fetch(
        self,
        key: str,
        decoder: ShardDecoder,
        needed: list[tuple[int, ...]],
        sem: asyncio.Semaphore,
        supplied: IndexEntry | None = None,
    ) -> Fetched:
        """The encoded bytes of the ``needed`` inner chunks of the shard at ``key``
        (None for an empty one), or None when the shard does not exist: each from the
        version of the shard its index came from. ``supplied``: the shard's index as an
        index task of a fan-out graph read it (:class:`~shardwise.io.cache.SuppliedIndexes`)."""
        entry = supplied
        for attempt in range(CHANGES):
            if attempt:
                await asyncio.sleep(_pause(attempt))
            try:
                return await self._fetch(key, decoder, needed, sem, entry)
            except Stale:
                entry = None  # read the index again
        raise ChangingShardError(
            "the shard kept changing while it was read",
            expected="a version of the shard that stays while its index and inner chunks are read",
            found=f"another version each of {CHANGES} times its index was read (another "
            "job is rewriting it)",
            array=self.name,
            key=key,
            advice="Nothing is wrong with the data; read again when the other job has written it.",
        )

    async def _fetch(
        self,
        key: str,
        decoder: ShardDecoder,
        needed: list[tuple[int, ...]],
        sem: asyncio.Semaphore,
        supplied: IndexEntry | None,
    ) -> Fetched:
        # an index task's index read for this computation answers everything; one it
        # took from its cache, as a cached one here would
        entry = supplied
        if entry is not None and entry.cached and not self.usable(entry, needed):
            entry = None
        if entry is None:
            entry = self.cached(key, needed)
        if entry is None and self.wants_whole(decoder, needed) and not self._too_big(decoder):
            got = await self.get(key, sem)
            if got.data is None:
                self.remember(key, IndexEntry(None, got.version))
                return None
            return self.chunks_of_whole(decoder, got.data, key, needed, got.version)
        if entry is None:
            entry = await self.index(key, decoder, sem)
        try:
            return await self._ranges(key, decoder, needed, sem, entry)
        except Stale:
            self.forget(key, entry)
            raise
        except CorruptShardError as e:
            if self.versions is None and not self.trusted:
                await self._confirm(key, decoder, entry, e, sem)
            raise

    async def _confirm(
        self,
        key: str,
        decoder: ShardDecoder,
        entry: IndexEntry,
        error: CorruptShardError,
        sem: asyncio.Semaphore,
    ) -> None:
        """On a store with no versions, an index and ranges that disagree may be two
        versions of a shard replaced between the two requests: :class:`Stale` when the
        index reads differently now; else the error stands (this returns)."""
        try:
            again = await read_shard_index(
                self.store,
                key,
                decoder.index,
                array=self.name,
                max_nbytes=decoder.chunk.max_encoded,
                sem=sem,
                name_errors=True,
            )
        except ShardwiseError:
            raise Stale(key) from error  # (a damaged index now: read it as one, again)
        if again.table is None or entry.table is None:
            raise Stale(key) from error
        if not np.array_equal(again.table, entry.table):
            raise Stale(key) from error

    def _too_big(self, decoder: ShardDecoder) -> bool:
        """Whether a shard is expected to be so large, over a network, that reading it
        as several ranges on as many connections (after its index) beats one request:
        larger than two of the parts ranges are cut into (``coalesce_max``)."""
        if self.kind != "network":
            return False
        nominal = math.prod(decoder.shard_shape) * self.itemsize
        return self.typical_size(nominal) > 2 * self.sizes()[1]

    def sizes(self) -> tuple[int, int]:
        """The most bytes between two ranges read as one, and the most one request
        reads (``ReadOptions.coalesce_gap`` and ``coalesce_max``; by default over a
        network the link's: :class:`~shardwise.io.requests.Link`)."""
        opts = self.options
        gap, most = opts.coalesce_gap, opts.coalesce_max
        if gap is None or most is None:
            measured = link() if self.kind == "network" else None
            if gap is None:
                gap = measured.gap if measured is not None else 1 << 20
            if most is None:
                most = measured.part if measured is not None else 64 << 20
        return gap, most

    def wants_whole(self, decoder: ShardDecoder, needed: list[tuple[int, ...]]) -> bool:
        """Whether to read a shard whole: most of its inner chunks are wanted."""
        return len(needed) >= self.options.whole_shard_fraction * decoder.index.nchunks

    def chunks_of_whole(
        self,
        decoder: ShardDecoder,
        whole: Any,
        key: str,
        needed: list[tuple[int, ...]],
        version: Version | None,
    ) -> dict[tuple[int, ...], Bytes | None]:
        """The wanted inner chunks of a whole shard object held in memory (one version,
        read in one request); its index is checked and cached with that version."""
        view, table = decoder.parse(whole, key=key)
        self.remember(key, IndexEntry(table, version, len(view)))
        return {inner: decoder.entry(view, table, inner) for inner in needed}

    async def _ranges(
        self,
        key: str,
        decoder: ShardDecoder,
        needed: list[tuple[int, ...]],
        sem: asyncio.Semaphore,
        entry: IndexEntry,
    ) -> Fetched:
        """The ``needed`` inner chunks located by ``entry``, read as coalesced byte
        ranges, each against ``entry``'s version."""
        table = entry.table
        if table is None:
            return None
        result, wanted, ranges = _located(table, needed)
        read = _RangeRead(key, None if self.trusted else entry.version, wanted, ranges)
        gap, most = self.sizes()
        groups = coalesce(ranges, gap=gap, max_size=most)
        tail, last = _read_on(decoder, entry, groups)
        fetched = await asyncio.gather(
            *(
                self._fetch_group(read, sem, req, members, tail if g == last else 0)
                for g, (req, members) in enumerate(groups)
            )
        )
        for pieces in fetched:
            result.update(pieces)
        return result

    async def _fetch_group(
        self,
        read: _RangeRead,
        sem: asyncio.Semaphore,
        req: ByteRange,
        members: list[int],
        extra: int,
    ) -> dict[tuple[int, ...], Bytes | None]:
        """The inner chunks ``members`` (places in ``read``'s lists) read in one
        request, ``req`` read on by ``extra`` bytes (:func:`_read_on`); zero-length
        chunks need none. A shard deleted since its index was read is :class:`Stale`."""
        from zarr.abc.store import RangeByteRequest

        if req.stop == req.start:  # zero-length chunks need no request
            return {read.wanted[m]: memoryview(b"") for m in members}
        try:
            got = await self.get(
                read.key, sem, RangeByteRequest(req.start, req.stop + extra), read.expected
            )
        except Stale:
            raise
        except Exception as error:
            await self._range_failed(read, req, members, extra, error)
        buf = got.data
        if buf is None:  # gone since its index was read: another job deleted it
            raise Stale(read.key)
        if extra:
            self._check_data_end(
                read.key, req, buf, extra, [(read.ranges[m], read.wanted[m]) for m in members]
            )
            buf = buf[: req.stop - req.start]
        return self._pieces(read, req, buf, members)

    async def _range_failed(
        self, read: _RangeRead, req: ByteRange, members: list[int], extra: int, error: Exception
    ) -> NoReturn:
        """Raise the error of a range read that failed: :class:`TruncatedShardError`
        where the range reaches past the object's end, else the store's ``error``."""
        # the store's own error (StoreIOError keeps it as the cause)
        e = error.__cause__ if isinstance(error, StoreIOError) else error
        assert isinstance(e, Exception)
        if not (extra and out_of_bounds(e)):
            if isinstance(e, OSError | ValueError) and not isinstance(e, ShardwiseError):
                # a file system that refuses the seek (ext4 past 16 TiB) where the
                # index points past any file: the object's size tells
                await self._past_the_end(read.key, req, extra, members, read.ranges, read.wanted, e)
            raise error
        # a store that refuses a range past the object's end (Icechunk) rather
        # than return it short: the object ends before the read-on's end, so the
        # range reaching furthest lies in the index's bytes, or past the end
        r, inner = max(((read.ranges[m], read.wanted[m]) for m in members), key=lambda x: x[0].stop)
        raise TruncatedShardError(
            "inner chunk lies outside the shard object's data",
            expected=f"offset + nbytes at least {extra} bytes (the index) before the object's end",
            found=f"bytes [{r.start}, {r.stop}), and the object ends before byte "
            f"{req.stop + extra} ({type(e).__name__}: {str(e).splitlines()[0]})",
            array=self.name,
            key=read.key,
            chunk=inner,
            advice="The shard index is corrupt or the shard truncated; rewrite the "
            "shard from its source.",
        ) from e

    def _pieces(
        self, read: _RangeRead, req: ByteRange, buf: Bytes, members: list[int]
    ) -> dict[tuple[int, ...], Bytes | None]:
        """Each of the inner chunks ``members`` cut out of ``buf`` (the bytes of
        ``req``); one the object ends before is a :class:`TruncatedShardError`."""
        out: dict[tuple[int, ...], Bytes | None] = {}
        for m in members:
            r = read.ranges[m]
            piece = buf[r.start - req.start : r.stop - req.start]
            if len(piece) != r.stop - r.start:
                raise TruncatedShardError(
                    "inner chunk lies past the end of the shard object",
                    expected=f"bytes [{r.start}, {r.stop})",
                    found=f"the object ends at byte {req.start + len(buf)}",
                    array=self.name,
                    key=read.key,
                    chunk=read.wanted[m],
                    advice="The shard is truncated; rewrite it from its source.",
                )
            out[read.wanted[m]] = piece
        return out

    async def _past_the_end(
        self,
        key: str,
        req: ByteRange,
        extra: int,
        members: list[int],
        ranges: Sequence[ByteRange],
        wanted: Sequence[tuple[int, ...]],
        error: Exception,
    ) -> None:
        """Raise :class:`TruncatedShardError` when a ranged read failed because its
        range reaches past the object's end (the store's ``error`` kept as the cause);
        return when the object's size is unknown or the range lies inside it."""
        try:
            size = await self.store.getsize(key)
        except Exception:  # the size cannot be had: the store's own error stands
            return
        if req.stop + extra <= size:
            return
        r, inner = max(((ranges[m], wanted[m]) for m in members), key=lambda x: x[0].stop)
        raise TruncatedShardError(
            "inner chunk lies outside the shard object",
            expected=f"byte ranges within the object's {size} bytes",
            found=f"bytes [{r.start}, {r.stop}) ({type(error).__name__}: "
            f"{str(error).splitlines()[0] if str(error) else ''})",
            array=self.name,
            key=key,
            chunk=inner,
            advice="The shard index is corrupt; rewrite the shard from its source.",
        ) from error

    def _check_data_end(
        self,
        key: str,
        req: ByteRange,
        buf: memoryview,
        extra: int,
        members: list[tuple[ByteRange, tuple[int, ...]]],
    ) -> None:
        """``buf`` is ``req`` read on by ``extra`` (the index's length): when it comes back
        short the object ends there, and no inner chunk may reach into its last ``extra``
        bytes (the index)."""
        if len(buf) >= req.stop - req.start + extra:
            return  # the object goes on past the index's length: every range is data
        size = req.start + len(buf)
        data_stop = size - extra
        for r, inner in members:
            if r.stop > data_stop:
                raise TruncatedShardError(
                    "inner chunk lies outside the shard object's data",
                    expected=f"offset + nbytes <= {data_stop} (the index takes the last "
                    f"{extra} bytes)",
                    found=f"bytes [{r.start}, {r.stop}) of a {size}-byte object",
                    array=self.name,
                    key=key,
                    chunk=inner,
                    advice="The shard index is corrupt or the shard truncated; rewrite the "
                    "shard from its source.",
                )
