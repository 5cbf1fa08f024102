"""Conditional puts: store an object only if it is still the version that was read.

Independent jobs (two scripts, two clusters, pods each writing its own region) that
merge their rows into one shard each read the shard, merge and put it back; with plain
puts the last one wins and the other's rows are lost. With a conditional put the second
finds the shard changed, reads it again and merges again (optimistic concurrency, as
tensorstore does). :func:`shardwise.io.capabilities.conditional` gives a store's way of
doing it, per kind:

- **Local file systems** (zarr-python's ``LocalStore``, obstore's ``LocalStore``): an
  object's version is its inode, size and change times, taken from the open file it is
  read through; the file stays open until the put that compares with it (or until the
  version is dropped), so that its inode cannot be reused by another file meanwhile
  and a replaced object can never look unchanged. A put writes a temporary file beside the object, then, holding an
  exclusive ``flock`` on the object's directory only for the comparison and the rename,
  replaces the object if its version is unchanged. Two processes cannot both win:
  every put shardwise makes takes the lock (plain puts too, in a write that guards
  against other jobs), and the rename is atomic. The lock is the kernel's:
  a process that dies holding it releases it.
- **In memory** (zarr-python's ``MemoryStore``): the object itself is its version,
  compared by identity under a process-wide lock.
- **S3 and S3-compatible stores** through s3fs (zarr-python's ``FsspecStore``): the
  ETag of the ``GetObject`` response that returned the bytes, and ``PutObject`` with
  ``If-Match: <etag>``, or ``If-None-Match: *`` to create an object that must not
  exist; HTTP 412 (precondition failed) or 409 (a conditional request in progress)
  means another writer won.
- **Google Cloud Storage** through gcsfs: the object's generation, and a multipart
  upload with ``ifGenerationMatch`` (:mod:`shardwise.io.gcs`).
- **Azure Blob Storage** through adlfs: the ETag, and ``If-Match`` /
  ``If-None-Match: *`` (:mod:`shardwise.io.azure_blob`).
- **obstore** stores (zarr-python's ``ObjectStore``: S3, GCS, Azure, memory): the
  ``e_tag`` and ``version`` the get returned, and obstore's put modes (an update
  version, or ``"create"``).

The base (:class:`Version`, :class:`Conditional`) is in :mod:`shardwise.io.versioned`,
S3's and obstore's ways in :mod:`shardwise.io.cloud`, Google Cloud Storage's in
:mod:`shardwise.io.gcs`, Azure's in :mod:`shardwise.io.azure_blob`; this module holds
the local and in-memory ways. Which way a store has is :mod:`shardwise.io.capabilities`' question.

Other stores (``ZipStore``, fsspec file systems other than S3, GCS and Azure, wrappers that change
what they pass on) have none. Icechunk sessions are not handled here: a session's
writes are private to it until its commit, which Icechunk checks for conflicts itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import itertools
import os
import threading
import uuid
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

import shardwise._compat as _compat
from shardwise.io.versioned import ABSENT, Conditional, Got, Stale, Version, distinct, span

__all__ = [
    "ABSENT",
    "Conditional",
    "Got",
    "Stale",
    "LocalConditional",
    "MemoryConditional",
    "Version",
    "distinct",
    "file_version",
    "span",
]


# -- local file systems ----------------------------------------------------------------------
def file_version(st: os.stat_result) -> Version:
    return Version(("file", st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_dev))


@contextlib.contextmanager
def _locked(directory: Path) -> Iterator[None]:
    """An exclusive ``flock`` on ``directory`` for the block (the kernel releases it if
    the process dies)."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # (closing releases the lock)


class _Pin:
    """An open file descriptor, closed by :meth:`close` or when dropped."""

    __slots__ = ("fd",)

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def close(self) -> None:
        fd, self.fd = self.fd, -1
        if fd >= 0:
            os.close(fd)

    def __del__(self) -> None:
        self.close()


class LocalConditional(Conditional):
    kind = "local file system"
    plain_puts_here = True

    def __init__(self, root: Path) -> None:
        self.root = root

    def get(self, key: str) -> tuple[bytes | None, Version]:
        try:
            fd = os.open(self.root / key, os.O_RDONLY)
        except (FileNotFoundError, NotADirectoryError):
            return None, ABSENT
        pin = _Pin(fd)  # (closes the file when dropped, if no put did)
        st = os.fstat(fd)
        with open(fd, "rb", closefd=False) as f:
            data = f.read()
        # (the file stays open with the version: see the module's description)
        return data, Version(file_version(st).tag, pin=pin)

    def put(self, key: str, data: Any, expected: Version | None) -> bool:
        path = self.root / key
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{uuid.uuid4().hex}.partial")
        try:
            with open(tmp, "wb") as f:
                f.write(memoryview(data).cast("B") if not isinstance(data, bytes) else data)
            with _locked(path.parent):
                if expected is not None and self._version(path) != expected:
                    return False
                os.replace(tmp, path)
                return True
        finally:
            tmp.unlink(missing_ok=True)
            if expected is not None and expected.pin is not None:
                expected.pin.close()

    def delete(self, key: str) -> None:
        path = self.root / key
        if not path.parent.is_dir():
            return
        with _locked(path.parent):
            path.unlink(missing_ok=True)

    @staticmethod
    def _version(path: Path) -> Version:
        try:
            return file_version(os.stat(path))
        except (FileNotFoundError, NotADirectoryError):
            return ABSENT

    async def read(self, key: str, byte_range: Any = None, expected: Version | None = None) -> Got:
        return await asyncio.to_thread(self.read_sync, key, byte_range, expected)

    def read_sync(self, key: str, byte_range: Any = None, expected: Version | None = None) -> Got:
        """:meth:`read` on this thread: the bytes come from the open file whose
        identity (``fstat`` on the same descriptor) is the version, so a file replaced
        meanwhile is either the one read whole or not read at all."""
        try:
            fd = os.open(self.root / key, os.O_RDONLY)
        except (FileNotFoundError, NotADirectoryError):
            if expected is not None and not expected.absent:
                raise Stale(key) from None
            return Got(None, ABSENT, None)
        try:
            st = os.fstat(fd)
            version = file_version(st)
            if expected is not None and version != expected:
                raise Stale(key)
            start, stop = span(byte_range, st.st_size)
            buf = np.empty(stop - start, dtype=np.uint8)
            view = memoryview(buf)
            n = 0
            while n < len(buf) and (got := os.preadv(fd, [view[n:]], start + n)):
                n += got
            return Got(view[:n], version, st.st_size)
        finally:
            os.close(fd)


# -- memory ------------------------------------------------------------------------------------
_MEMORY_LOCK = threading.Lock()
# An object's version in memory is a serial number given to the object (a Buffer, which
# the store replaces, never changes) the first time it is seen, forgotten when it is
# freed: unlike its id, never given to another object. The nonce tells this process's
# numbers from another's (a forked child draws a new one).
_SERIALS: dict[int, int] = {}
_COUNTER = itertools.count(1)
_NONCE = uuid.uuid4().hex


def _memory_version(buf: Any) -> Version:
    """The version of an in-memory object (call with ``_MEMORY_LOCK`` held)."""
    if buf is None:
        return ABSENT
    serial = _SERIALS.get(id(buf))
    if serial is None:
        serial = _SERIALS[id(buf)] = next(_COUNTER)
        weakref.finalize(buf, _SERIALS.pop, id(buf), None)
    return Version(("memory", _NONCE, serial))


def _new_nonce() -> None:
    global _NONCE
    _NONCE = uuid.uuid4().hex


os.register_at_fork(after_in_child=_new_nonce)


class MemoryConditional(Conditional):
    kind = "memory"
    plain_puts_here = True

    def __init__(self, store: Any) -> None:
        self.store = store

    def get(self, key: str) -> tuple[memoryview | None, Version]:
        with _MEMORY_LOCK:
            buf = _compat.memory_store_dict(self.store).get(key)
            version = _memory_version(buf)
        if buf is None:
            return None, ABSENT
        return memoryview(buf.as_numpy_array()).cast("B"), version

    def put(self, key: str, data: Any, expected: Version | None) -> bool:
        from zarr.buffer import default_buffer_prototype

        buf = default_buffer_prototype().buffer.from_bytes(bytes(memoryview(data).cast("B")))
        with _MEMORY_LOCK:
            current = _compat.memory_store_dict(self.store).get(key)
            if expected is not None and _memory_version(current) != expected:
                return False
            _compat.memory_store_dict(self.store)[key] = buf
            return True

    async def read(self, key: str, byte_range: Any = None, expected: Version | None = None) -> Got:
        with _MEMORY_LOCK:
            buf = _compat.memory_store_dict(self.store).get(key)
            version = _memory_version(buf)
        if expected is not None and version != expected:
            raise Stale(key)
        if buf is None:
            return Got(None, ABSENT, None)
        whole = memoryview(buf.as_numpy_array()).cast("B")
        start, stop = span(byte_range, len(whole))
        return Got(whole[start:stop], version, len(whole))

    def delete(self, key: str) -> None:
        with _MEMORY_LOCK:
            _compat.memory_store_dict(self.store).pop(key, None)
