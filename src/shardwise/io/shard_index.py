"""Reading one shard's index from a store: the one piece of code that fetches, checks and
names what is wrong with a ``sharding_indexed`` index.

:func:`read_shard_index` fetches the index bytes (a range for an index at the start, a
suffix for one at the end), checks their length and checksum, parses the entries and
checks them against the object (:func:`~shardwise.format.index.check_entries`), raising
the error a read names: :class:`~shardwise.errors.TruncatedShardError`,
:class:`~shardwise.errors.CorruptShardError` or :class:`~shardwise.errors.ChecksumError`.
:class:`~shardwise.io.reader.ArrayReader` (which caches what it reads, and takes the
indexes a fan-out graph supplies, before it asks), ``shardwise.inventory`` (which reads
an index for every stored shard and fetches no chunk) and ``shardwise.verify`` (which
reports every problem rather than stopping at the first) all read indexes through it.

It is apart from the reader because those three want the same bytes and the same checks
with different surroundings: what the object's size is known to be, whether the entries
are about to be fetched, whether store errors are named as a read's, and what the reads
cost (:class:`Tally`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from shardwise.errors import TruncatedShardError, naming_io_errors
from shardwise.format.index import IndexFormat
from shardwise.io.cache import IndexEntry
from shardwise.io.capabilities import store_kind
from shardwise.io.conditional import Conditional, Got
from shardwise.io.requests import Kind, send

__all__ = ["Tally", "got_size", "naming", "range_nbytes", "read_index_bytes", "read_shard_index"]

Table = npt.NDArray[np.uint64]


@dataclass(slots=True)
class Tally:
    """What reading indexes cost: the store requests made (counted as they are made, so
    a read that failed is counted too) and the bytes they returned."""

    requests: int = 0
    nbytes: int = 0


def naming(array: str, key: str) -> contextlib.AbstractContextManager[None]:
    """An OSError of a read names the array and the shard's key (StoreIOError)."""
    return naming_io_errors(
        "reading a shard",
        array=array,
        key=key,
        advice="Check the store (the connection, credentials, permissions), then read again.",
    )


def range_nbytes(byte_range: Any) -> int | None:
    """The bytes a zarr ``ByteRequest`` asks for; None for the object's rest or whole."""
    from zarr.abc.store import RangeByteRequest, SuffixByteRequest

    if isinstance(byte_range, RangeByteRequest):
        return max(0, byte_range.end - byte_range.start)
    if isinstance(byte_range, SuffixByteRequest):
        return byte_range.suffix
    return None


def got_size(got: Got) -> int:
    """The bytes an answer holds."""
    return 0 if got.data is None else len(got.data)


async def read_shard_index(
    store: Any,
    key: str,
    fmt: IndexFormat,
    *,
    kind: Kind | None = None,
    versions: Conditional | None = None,
    array: str | None = None,
    size: int | None = None,
    max_nbytes: int | None = None,
    fetching: bool = True,
    sem: asyncio.Semaphore | None = None,
    name_errors: bool = False,
    tally: Tally | None = None,
) -> IndexEntry:
    """The checked index of the shard at ``key`` of ``store`` (``(offset, nbytes)`` pairs
    of shape ``fmt.chunks_per_shard + (2,)``), as an :class:`IndexEntry` whose ``table``
    is ``None`` when there is no such object. One ranged request (two for a store that
    refuses a suffix longer than the object); none when ``size`` tells the object is
    shorter than its index.

    With ``versions`` (the store's versioned reads, :mod:`shardwise.io.conditional`)
    the request returns the version of the object the index comes from, and its size:
    the entry carries both, and the entries are checked against that size (which
    overrides ``size``, a listing's, when the object changed since). Without, the
    entry's version is None.

    What is checked: the index's length and checksum (when its codecs have one: crc32c,
    or what zarr-python's codecs check for other chains,
    :func:`~shardwise.codecs.index_format_from_codecs`), then every entry
    (:func:`~shardwise.format.index.check_entries`): both fields empty or neither,
    no overlaps, outside the index and inside the object when its size is known. When
    it is not, ``fetching`` (a reader about to fetch the ranges) has each entry end
    inside the largest object a store can hold
    (:data:`~shardwise.format.index.MAX_OBJECT`, less an index at the end), a
    :class:`~shardwise.errors.TruncatedShardError` past it; without it (an inventory,
    which fetches none) an entry need only be smaller than any object, a
    :class:`~shardwise.errors.CorruptShardError` otherwise. ``max_nbytes`` is the most
    bytes an inner chunk's codecs make of it (a larger entry is a
    :class:`~shardwise.errors.CorruptShardError`; None: not checked).

    ``array`` names the array in errors; ``name_errors`` turns the store's OSErrors into
    :class:`~shardwise.errors.StoreIOError` naming the array and the key, as a read
    raises them (else they pass as the store raised them). ``sem`` bounds the requests
    in flight (besides the process's bound for the store's ``kind``, found when not
    given, :mod:`shardwise.io.requests`); ``tally`` counts them."""

    def check_size(size: int | None) -> None:
        if size is not None and size < fmt.nbytes:
            raise TruncatedShardError(
                "shard is shorter than its index",
                expected=f"at least {fmt.nbytes} bytes",
                found=f"{size} bytes",
                array=array,
                key=key,
                advice="The shard is truncated; rewrite it from its source.",
            )

    check_size(size)
    got: list[Got] = []
    if kind is None:
        kind = store_kind(store)

    async def request(byte_range: Any) -> Got:
        from zarr.buffer import default_buffer_prototype

        if versions is not None:
            return await versions.read(key, byte_range)
        buf = await store.get(key, default_buffer_prototype(), byte_range)
        view = None if buf is None else memoryview(buf.as_numpy_array()).cast("B")
        return Got(view, None, None)

    async def get(byte_range: Any) -> memoryview | None:
        if tally is not None:
            tally.requests += 1
        errors = naming(array or "", key) if name_errors else contextlib.nullcontext()
        with errors:
            async with sem if sem is not None else contextlib.nullcontext():
                answer = await send(
                    kind, lambda: request(byte_range), range_nbytes(byte_range), got_size
                )
                if versions is not None:
                    got.append(answer)
                view = answer.data
        if view is not None and tally is not None:
            tally.nbytes += len(view)
        return view

    raw = await read_index_bytes(get, fmt)
    version = got[-1].version if got else None
    if got and got[-1].size is not None:
        size = got[-1].size
    if raw is None:
        return IndexEntry(None, version)
    check_size(size)
    table = fmt.checked(
        raw, size=size, array=array, key=key, max_nbytes=max_nbytes, fetching=fetching
    )
    return IndexEntry(table, version, size)


async def read_index_bytes(
    get: Callable[[Any], Awaitable[memoryview | None]], fmt: IndexFormat
) -> memoryview | None:
    """The bytes of a shard's index, fetched with ``get(byte_range)`` (the object's
    bytes, or None when it is absent): one ranged request, the first ``fmt.nbytes``
    for an index at the start, a suffix for one at the end; for stores that refuse a
    suffix longer than the object, the whole (small) object, trimmed. None for an
    absent shard."""
    from zarr.abc.store import RangeByteRequest, SuffixByteRequest

    if fmt.location == "start":
        return await get(RangeByteRequest(0, fmt.nbytes))
    try:
        raw = await get(SuffixByteRequest(fmt.nbytes))
    except (OSError, ValueError):
        raw = await get(None)
    if raw is not None and len(raw) > fmt.nbytes:
        raw = raw[-fmt.nbytes :]
    return raw
