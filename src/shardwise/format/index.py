"""The ``sharding_indexed`` shard index: binary format, pure (no I/O).

The index is an array of ``(offset, nbytes)`` uint64 pairs in C order over the chunks
per shard, ``2**64 - 1`` in both fields for an empty inner chunk, stored at the start or
the end of the shard through its index codecs. :class:`IndexFormat` reads and writes the
chains every writer uses (``bytes`` in either endianness, optionally followed by
``crc32c``) with numpy alone; other chains of a fixed encoded size go through
zarr-python's codecs in a subclass with the same methods
(``shardwise.codecs._index.ZarrIndexFormat``), which everything taking an
:class:`IndexFormat` accepts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, NoReturn

import google_crc32c
import numpy as np
import numpy.typing as npt

from shardwise.errors import ChecksumError, CorruptShardError, TruncatedShardError

__all__ = ["EMPTY", "MAX_OBJECT", "IndexFormat", "Table", "check_entries", "crc32c"]

EMPTY = np.uint64(2**64 - 1)
"""Offset and nbytes of an empty inner chunk."""

MAX_OBJECT = 2**63 - 1
"""The most bytes any store object can hold: file offsets are signed 64-bit integers
(``off_t``; Python refuses to seek further), and object stores allow far less. An index
entry reaching past it lies outside its shard whatever the shard's size."""

Table = npt.NDArray[np.uint64]


def crc32c(data: bytes | memoryview | npt.NDArray[np.uint8]) -> int:
    """The CRC-32C (Castagnoli) of ``data``, as the ``crc32c`` codec stores it. Computed by
    google-crc32c, which takes read-only buffers only (bytes, numpy arrays): any other
    buffer (a memoryview, a bytearray) is handed over as a numpy view of the same memory,
    not copied."""
    if not isinstance(data, bytes | np.ndarray):
        data = np.frombuffer(data, dtype=np.uint8)
    return int(google_crc32c.value(data))


@dataclass(frozen=True, slots=True)
class IndexFormat:
    """How one shard's index is laid out: its shape, place, byte order and checksum.

    Subclasses (other index codecs) override :attr:`nbytes`, :meth:`decode` and
    :meth:`encode`; the rest works from those."""

    chunks_per_shard: tuple[int, ...]
    location: Literal["start", "end"] = "end"
    endian: Literal["little", "big"] = "little"
    checksum: bool = True

    def __post_init__(self) -> None:
        if self.location not in ("start", "end"):
            raise ValueError(f"index_location must be 'start' or 'end', got {self.location!r}")
        if self.endian not in ("little", "big"):
            raise ValueError(f"endian must be 'little' or 'big', got {self.endian!r}")

    @property
    def nchunks(self) -> int:
        return math.prod(self.chunks_per_shard)

    @property
    def nbytes(self) -> int:
        """Encoded size of the index."""
        return 16 * self.nchunks + (4 if self.checksum else 0)

    @property
    def _dtype(self) -> np.dtype[np.uint64]:
        return np.dtype("<u8" if self.endian == "little" else ">u8")

    def split(self, shard: bytes | memoryview | npt.NDArray[np.uint8]) -> memoryview:
        """The index bytes of a whole shard object."""
        view = memoryview(shard).cast("B")
        return view[: self.nbytes] if self.location == "start" else view[-self.nbytes :]

    def decode(
        self,
        raw: bytes | memoryview | npt.NDArray[np.uint8],
        *,
        array: str | None = None,
        key: str | None = None,
    ) -> Table:
        """Decode the index bytes (exactly :attr:`nbytes` of them) into a table of shape
        ``chunks_per_shard + (2,)``, native uint64. Checks length and checksum."""
        view = self._sized(raw, array=array, key=key)
        body = view[: 16 * self.nchunks]
        if self.checksum:
            stored = int.from_bytes(view[-4:], "little")
            actual = crc32c(body)
            if stored != actual:
                raise ChecksumError(
                    "shard index crc32c mismatch",
                    expected=f"{stored:#010x}",
                    found=f"{actual:#010x}",
                    array=array,
                    key=key,
                    advice="The index bytes are corrupt; rewrite the shard from its source.",
                )
        table = np.frombuffer(body, dtype=self._dtype).astype(np.uint64)
        return table.reshape((*self.chunks_per_shard, 2))

    def encode(self, table: Table) -> bytes:
        """Encode a table of shape ``chunks_per_shard + (2,)``."""
        body = np.ascontiguousarray(self._shaped(table), dtype=self._dtype).tobytes()
        if self.checksum:
            body += crc32c(body).to_bytes(4, "little")
        return body

    def _sized(
        self,
        raw: bytes | memoryview | npt.NDArray[np.uint8],
        *,
        array: str | None,
        key: str | None,
    ) -> memoryview:
        """``raw`` as bytes, checked to be exactly :attr:`nbytes` long."""
        view = memoryview(raw).cast("B")
        if len(view) != self.nbytes:
            raise TruncatedShardError(
                "shard index has the wrong size",
                expected=f"{self.nbytes} bytes",
                found=f"{len(view)} bytes",
                array=array,
                key=key,
                advice="The shard object is truncated or not a sharding_indexed shard; "
                "rewrite it from its source.",
            )
        return view

    def _shaped(self, table: Table) -> Table:
        """``table`` as uint64, checked to have the shape ``chunks_per_shard + (2,)``."""
        table = np.asarray(table, dtype=np.uint64)
        if table.shape != (*self.chunks_per_shard, 2):
            raise ValueError(
                f"index table has shape {table.shape}, expected {(*self.chunks_per_shard, 2)}"
            )
        return table

    def empty_table(self) -> Table:
        return np.full((*self.chunks_per_shard, 2), EMPTY, dtype=np.uint64)

    def data_bounds(self, shard_nbytes: int | None) -> tuple[int, int | None]:
        """The byte range ``[start, stop)`` where inner chunks may lie (``stop`` is
        ``None`` when the shard's size is unknown)."""
        if self.location == "start":
            return self.nbytes, shard_nbytes
        return 0, None if shard_nbytes is None else shard_nbytes - self.nbytes

    def checked(
        self,
        raw: bytes | memoryview | npt.NDArray[np.uint8],
        *,
        size: int | None,
        array: str | None,
        key: str | None,
        max_nbytes: int | None,
        fetching: bool = True,
    ) -> Table:
        """Decode a shard's index (``raw``, as :meth:`decode`) and check every entry
        (:func:`check_entries`): inside the shard's data when its ``size`` is known; when
        it is not and the caller is ``fetching`` the ranges, ending inside the largest
        object a store can hold (:data:`MAX_OBJECT`, less an index at the end); when it
        is neither (an inventory), each smaller than any object. ``max_nbytes``: the most
        bytes an inner chunk's codecs make of it (None: not checked). The one check of
        an index, whether the shard is held whole or only its index was fetched: a table
        this returns turns into byte ranges that neither overflow nor ask for more than
        one chunk's worth of bytes each."""
        table = self.decode(raw, array=array, key=key)
        start, stop = self.data_bounds(size)
        check_entries(
            table,
            data_start=start,
            data_stop=stop,
            array=array,
            key=key,
            max_stop=MAX_OBJECT - (self.nbytes if self.location == "end" else 0)
            if fetching
            else None,
            max_nbytes=max_nbytes,
        )
        if size is None and not fetching:
            _check_sizes(table, array=array, key=key)
        return table


def check_entries(
    table: Table,
    *,
    data_start: int,
    data_stop: int | None,
    array: str | None = None,
    key: str | None = None,
    max_stop: int | None = None,
    max_nbytes: int | None = None,
) -> None:
    """Check every index entry: both fields empty or neither, inside ``[data_start,
    data_stop)`` (the upper bound only when the shard's size is known), and no two chunks
    partly overlapping (identical entries, as deduplicating writers make, are allowed).

    When the shard's size is not known, ``max_stop`` bounds where entries may end (the
    largest object a store can hold, :data:`MAX_OBJECT`, less an index at the end):
    past it an entry is a :class:`TruncatedShardError` before any request is made.
    ``max_nbytes`` is the most bytes an inner chunk's codecs make of it: a larger entry
    is a :class:`CorruptShardError` (it would have the reader fetch, and hold, that
    much). Every check runs on exact integers: ``offset + nbytes`` is checked for
    overflow before it is computed in 64 bits."""
    flat = table.reshape(-1, 2)
    cps = table.shape[:-1]
    offsets, nbytes = flat[:, 0], flat[:, 1]
    bad = _half_empty(offsets, nbytes)
    if bad is not None:
        bad.throw(bad.at, cps, array=array, key=key)
    present = np.flatnonzero(offsets != EMPTY)
    if not present.size:
        return
    o = offsets[present]
    n = nbytes[present]
    bad = (
        _overflowing(o, n)
        or _outside(o, n, data_start=data_start, data_stop=data_stop, max_stop=max_stop)
        or _too_large(o, n, max_nbytes)
        or _overlapping(o, n)
    )
    if bad is not None:
        bad.throw(int(present[bad.at]), cps, array=array, key=key)


@dataclass(frozen=True, slots=True)
class _Bad:
    """The first entry that fails one check of :func:`check_entries`: its place among
    the entries checked (``at``) and what the error says of it."""

    at: int
    problem: str
    expected: str
    found: str
    cls: type[CorruptShardError] = CorruptShardError

    def throw(
        self, i: int, cps: tuple[int, ...], *, array: str | None, key: str | None
    ) -> NoReturn:
        """Raise the error of the ``i``-th entry of a table of ``cps`` inner chunks."""
        raise self.cls(
            self.problem,
            expected=self.expected,
            found=self.found,
            array=array,
            key=key,
            chunk=tuple(int(x) for x in np.unravel_index(i, cps)),
            advice="The shard index is corrupt; rewrite the shard from its source.",
        )


def _first(mask: npt.NDArray[np.bool_]) -> int | None:
    """Where ``mask`` is first true, or None."""
    hits = np.flatnonzero(mask)
    return int(hits[0]) if hits.size else None


def _entry(o: npt.NDArray[np.uint64], n: npt.NDArray[np.uint64], j: int) -> str:
    """The ``j``-th entry, as an error shows it."""
    return f"offset={int(o[j])}, nbytes={int(n[j])}"


def _half_empty(offsets: npt.NDArray[np.uint64], nbytes: npt.NDArray[np.uint64]) -> _Bad | None:
    """The first entry with one field empty and the other set."""
    j = _first((offsets == EMPTY) != (nbytes == EMPTY))
    if j is None:
        return None
    return _Bad(
        j,
        "half-empty shard index entry",
        "offset and nbytes both 2**64-1 or both set",
        _entry(offsets, nbytes, j),
    )


def _overflowing(o: npt.NDArray[np.uint64], n: npt.NDArray[np.uint64]) -> _Bad | None:
    """The first entry whose ``offset + nbytes`` would not fit 64 bits."""
    j = _first(n > (EMPTY - o))
    if j is None:
        return None
    return _Bad(j, "shard index entry overflows", "offset + nbytes < 2**64", _entry(o, n, j))


def _outside(
    o: npt.NDArray[np.uint64],
    n: npt.NDArray[np.uint64],
    *,
    data_start: int,
    data_stop: int | None,
    max_stop: int | None,
) -> _Bad | None:
    """The first entry starting before ``data_start`` (in the index); else the first
    ending past ``data_stop``, or, when that is not known, past ``max_stop``."""
    j = _first(o < np.uint64(data_start))
    if j is not None:
        return _Bad(
            j,
            "inner chunk overlaps the shard index",
            f"offset >= {data_start}",
            f"offset={int(o[j])}",
        )
    end = o + n
    if data_stop is not None:
        j = _first(end > np.uint64(max(data_stop, 0)))
        if j is not None:
            return _Bad(
                j,
                "inner chunk lies outside the shard object",
                f"offset + nbytes <= {data_stop}",
                _entry(o, n, j),
                TruncatedShardError,
            )
    elif max_stop is not None:
        j = _first(end > np.uint64(min(max(max_stop, 0), 2**64 - 1)))
        if j is not None:
            return _Bad(
                j,
                "inner chunk lies past the end of any shard object",
                f"offset + nbytes <= {max_stop} (no store object holds more than 2**63 - 1 "
                "bytes, the index included)",
                _entry(o, n, j),
                TruncatedShardError,
            )
    return None


def _too_large(
    o: npt.NDArray[np.uint64], n: npt.NDArray[np.uint64], max_nbytes: int | None
) -> _Bad | None:
    """The first entry of more than ``max_nbytes`` (None, or 2**64 - 1: not checked)."""
    if max_nbytes is None or max_nbytes >= 2**64 - 1:
        return None
    j = _first(n > np.uint64(max_nbytes))
    if j is None:
        return None
    return _Bad(
        j,
        "inner chunk is larger than its codecs make one",
        f"nbytes <= {max_nbytes} (the chunk's shape and data type through its codecs, "
        "with room to spare)",
        _entry(o, n, j),
    )


def _overlapping(o: npt.NDArray[np.uint64], n: npt.NDArray[np.uint64]) -> _Bad | None:
    """The first entry, in order of offset, that starts inside an earlier one it is not
    identical to (identical entries, as deduplicating writers make, are allowed)."""
    if o.size < 2:
        return None
    end = o + n
    order = np.lexsort((n, o))
    so, sn, se = o[order], n[order], end[order]
    same = (so[1:] == so[:-1]) & (sn[1:] == sn[:-1])
    running_end = np.maximum.accumulate(se)[:-1]
    k = _first((so[1:] < running_end) & ~same)
    if k is None:
        return None
    k += 1
    return _Bad(
        int(order[k]),
        "inner chunks overlap in the shard",
        "disjoint byte ranges",
        f"[{int(so[k])}, {int(se[k])}) starts before {int(running_end[k - 1])}",
    )


def _check_sizes(table: Table, *, array: str | None, key: str | None) -> None:
    """No entry claims more bytes than any object holds: the bound on an index read
    without its object's size and not about to be fetched (the others bound where
    entries end), so that its sizes fit int64."""
    empty = table[..., 0] == EMPTY
    huge = ~empty & (table[..., 1] > np.uint64(MAX_OBJECT))
    if huge.any():
        at = tuple(int(x) for x in np.argwhere(huge)[0])
        raise CorruptShardError(
            "shard index entry claims an inner chunk larger than any object",
            expected="nbytes < 2**63",
            found=f"nbytes={int(table[at][1])}",
            array=array,
            key=key,
            chunk=at,
            advice="The shard index is corrupt; rewrite the shard from its source.",
        )
