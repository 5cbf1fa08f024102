"""What a store's conditional reads and puts offer, whatever the store: the
:class:`Version` of an object, a read's answer (:class:`Got`), :class:`Stale`, and the
:class:`Conditional` interface that :mod:`shardwise.io.conditional` gives per kind of
store (local, memory) and :mod:`shardwise.io.cloud` for object stores."""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import shardwise._compat as _compat

__all__ = [
    "ABSENT",
    "AsyncConditional",
    "Conditional",
    "FsspecConditional",
    "Got",
    "Stale",
    "Version",
    "distinct",
    "span",
    "http_range",
    "total_size",
]


@dataclass(frozen=True, slots=True)
class Version:
    """One state of an object as it was read: ``tag`` says which (an ETag, a file's
    identity, the object itself), ``None`` that there was no object."""

    tag: Any = None
    # what keeps the version meaningful while it is held (a local file kept open, so
    # that its inode is not reused); not part of the comparison
    pin: Any = field(default=None, compare=False, repr=False)

    @property
    def absent(self) -> bool:
        return self.tag is None

    def __reduce__(self) -> tuple[Any, ...]:
        # the pin stays in this process (an open file means nothing in another)
        return (Version, (self.tag,))


ABSENT = Version()


class Stale(Exception):
    """A read made against one version of an object found another version, or none:
    what was cached of the object (its shard index) is out of date. Never raised to
    users: the reader reads the object again."""


class Got(NamedTuple):
    """What a versioned read returned: the bytes (None: there is no object), the
    version of the object they come from (``None``: the store said none), and the
    whole object's size when the store said it."""

    data: memoryview | None
    version: Version | None
    size: int | None


def span(byte_range: Any, size: int) -> tuple[int, int]:
    """``(start, stop)`` of a zarr-python ``ByteRequest`` (None: everything) in an
    object of ``size`` bytes, clipped to it."""
    from zarr.abc.store import OffsetByteRequest, RangeByteRequest, SuffixByteRequest

    if byte_range is None:
        return 0, size
    if isinstance(byte_range, RangeByteRequest):
        return min(byte_range.start, size), min(byte_range.end, size)
    if isinstance(byte_range, SuffixByteRequest):
        return max(size - byte_range.suffix, 0), size
    if isinstance(byte_range, OffsetByteRequest):
        return min(byte_range.offset, size), size
    raise TypeError(f"unknown byte range {byte_range!r}")


class Conditional:
    """A store's conditional reads and puts (see the module's description).

    :meth:`get` returns an object's bytes with the version they are; :meth:`put` stores
    bytes if the object is still ``expected`` (``ABSENT``: there is none) and says
    whether it did, or stores them whatever is there with ``expected=None``. Neither
    raises on a conflict; store errors propagate. A refused put is settled by what the
    store holds: when it holds the bytes put, the put was this writer's own (applied,
    its response lost, and its retry refused by it), and counts as made; documents
    that another writer could put alike are made :func:`distinct` first."""

    kind = ""
    # whether plain puts and deletes of a guarded write must go through :meth:`put` and
    # :meth:`delete` too, to be ordered with the conditional ones (a local directory's
    # lock, memory's): False where the server orders every request itself (S3)
    plain_puts_here = False
    # whether the store answers a suffix range (``bytes=-N``); where not (Azure), the
    # conditional reads read an object's end by its size (:class:`~shardwise.io.azure_blob.Ends`)
    # and every read of the store goes through them
    suffix_ranges = True

    def get(self, key: str) -> tuple[bytes | memoryview | None, Version]:
        raise NotImplementedError

    def put(self, key: str, data: Any, expected: Version | None) -> bool:
        raise NotImplementedError

    def delete(self, key: str) -> None:
        """Delete an object whatever version it is (nothing when there is none)."""
        raise NotImplementedError

    async def read(self, key: str, byte_range: Any = None, expected: Version | None = None) -> Got:
        """Bytes of the object at ``key`` (``byte_range``: a zarr-python
        ``ByteRequest``, None for all of it), with the version they are of and the
        object's size, in one request. With ``expected``, only from that version:
        :class:`Stale` when the object is another version or gone (the condition
        rides on the same request: ``If-Match`` on S3, the open file's identity on a
        local file system)."""
        raise NotImplementedError


class AsyncConditional(Conditional):
    """A :class:`Conditional` of an asynchronous client (s3fs, gcsfs, adlfs), whose
    requests run on zarr-python's event loop: :meth:`get`, :meth:`put` and
    :meth:`delete` run the coroutines :meth:`read`, :meth:`_put` and :meth:`_delete`
    there."""

    def get(self, key: str) -> tuple[bytes | None, Version]:
        got = _compat.sync(self.read(key))
        return (None if got.data is None else bytes(got.data)), got.version or ABSENT

    def put(self, key: str, data: Any, expected: Version | None) -> bool:
        return bool(_compat.sync(self._put(key, data, expected)))

    def delete(self, key: str) -> None:
        _compat.sync(self._delete(key))

    async def _put(self, key: str, data: Any, expected: Version | None) -> bool:
        raise NotImplementedError

    async def _delete(self, key: str) -> None:
        raise NotImplementedError


class FsspecConditional(AsyncConditional):
    """An :class:`AsyncConditional` of the fsspec file system (``store.fs``) below
    zarr-python's ``FsspecStore``: an object is named by the store's path and the key,
    the first part of it the bucket (or container)."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.fs = store.fs

    def _where(self, key: str) -> tuple[str, str]:
        """(bucket, object name) of ``key``."""
        path = f"{self.store.path.rstrip('/')}/{key}" if self.store.path else key
        bucket, _, name = path.partition("/")
        return bucket, name

    def _path(self, key: str) -> str:
        """``bucket/object`` of ``key``, as the file system names it."""
        bucket, name = self._where(key)
        return f"{bucket}/{name}"


def http_range(byte_range: Any) -> str:
    """An HTTP ``Range`` header for a zarr-python ``ByteRequest`` (not empty)."""
    from zarr.abc.store import OffsetByteRequest, RangeByteRequest, SuffixByteRequest

    if isinstance(byte_range, RangeByteRequest):
        if byte_range.end <= byte_range.start:
            raise ValueError(f"an empty byte range cannot be requested: {byte_range}")
        return f"bytes={byte_range.start}-{byte_range.end - 1}"
    if isinstance(byte_range, SuffixByteRequest):
        return f"bytes=-{byte_range.suffix}"
    if isinstance(byte_range, OffsetByteRequest):
        return f"bytes={byte_range.offset}-"
    raise TypeError(f"unknown byte range {byte_range!r}")


def total_size(content_range: Any, length: int | None) -> int | None:
    """The whole object's size from a response's ``Content-Range`` (``bytes a-b/total``),
    else ``length`` (that of a response that was not ranged, or None)."""
    if content_range:
        total = str(content_range).rpartition("/")[2]
        return int(total) if total.isdigit() else None
    return length


def distinct(document: bytes) -> bytes:
    """A JSON document (a ``zarr.json``) made unlike any other put: a random 64-bit
    token after it, as white space (spaces and tabs), which JSON ignores. A conditional
    put whose outcome is settled by what the store holds (:meth:`Conditional.put`) then
    never takes another writer's document for its own, where two jobs would write the
    same bytes (two appends of as many rows grow an array to the same document)."""
    bits = secrets.randbits(64)
    token = "".join(" \t"[(bits >> i) & 1] for i in range(64))
    return document.rstrip() + b"\n" + token.encode("ascii") + b"\n"
