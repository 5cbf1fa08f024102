"""Conditional puts: store an object only if it is still the version that was read.

Independent jobs (two scripts, two clusters, pods each writing its own region) that
merge their rows into one shard each read the shard, merge and put it back; with plain
puts the last one wins and the other's rows are lost. With a conditional put the second
finds the shard changed, reads it again and merges again (optimistic concurrency, as
tensorstore does). :func:`conditional` gives a store's way of doing it, per kind:

- **Local file systems** (zarr-python's ``LocalStore``, obstore's ``LocalStore``): an
  object's version is its inode, size and change times, taken from the open file it is
  read through; the file stays open until the put that compares with it (or until the
  version is dropped), so that its inode cannot be reused by another file meanwhile
  and a replaced object can never look unchanged. A put writes a temporary file beside the object, then, holding an
  exclusive ``flock`` on the object's directory only for the comparison and the rename,
  replaces the object if its version is unchanged. Two processes cannot both win:
  every put shardwise makes takes the lock (plain puts too, in a write that guards
  against other jobs), and the rename is atomic, as before. The lock is the kernel's:
  a process that dies holding it releases it.
- **In memory** (zarr-python's ``MemoryStore``): the object itself is its version,
  compared by identity under a process-wide lock.
- **S3 and S3-compatible stores** through s3fs (zarr-python's ``FsspecStore``): the
  ETag of the ``GetObject`` response that returned the bytes, and ``PutObject`` with
  ``If-Match: <etag>``, or ``If-None-Match: *`` to create an object that must not
  exist; HTTP 412 (precondition failed) or 409 (a conditional request in progress)
  means another writer won.
- **obstore** stores (zarr-python's ``ObjectStore``: S3, GCS, Azure, memory): the
  ``e_tag`` and ``version`` the get returned, and obstore's put modes (an update
  version, or ``"create"``).

Other stores (``ZipStore``, fsspec file systems other than S3, wrappers) have no such
put: :func:`conditional` returns None and the writer refuses what needs one. A store
class may give its own by defining ``__shardwise_conditional__(self)``, returning a
:class:`Conditional` (or None): a wrapper store that passes keys and bytes through
unchanged can return its wrapped store's, as ``shardwise.testing.CountingStore`` does.
Icechunk sessions are not handled here: a session's writes are private to it until
its commit, which Icechunk checks for conflicts itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import itertools
import os
import re
import secrets
import threading
import uuid
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, cast

import numpy as np

import shardwise._compat as _compat
from shardwise.io.open import store_path
from shardwise.io.retry import count as count_retry
from shardwise.io.retry import policy as retry_policy
from shardwise.io.retry import retrying, transient

__all__ = [
    "ABSENT",
    "Conditional",
    "Got",
    "Stale",
    "Version",
    "conditional",
    "conditional_path",
    "distinct",
    "file_version",
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


def distinct(document: bytes) -> bytes:
    """A JSON document (a ``zarr.json``) made unlike any other put: a random 64-bit
    token after it, as white space (spaces and tabs), which JSON ignores. A conditional
    put whose outcome is settled by what the store holds (:meth:`Conditional.put`) then
    never takes another writer's document for its own, where two jobs would write the
    same bytes (two appends of as many rows grow an array to the same document)."""
    bits = secrets.randbits(64)
    token = "".join(" \t"[(bits >> i) & 1] for i in range(64))
    return document.rstrip() + b"\n" + token.encode("ascii") + b"\n"


def conditional(store: Any) -> Conditional | None:
    """The conditional reads and puts of a zarr-python store, or None when it has none
    (see the module's description)."""
    from zarr.storage import FsspecStore, LocalStore, MemoryStore

    hook = getattr(type(store), "__shardwise_conditional__", None)
    if hook is not None:
        given: Conditional | None = hook(store)
        return given
    if type(store) is LocalStore:
        return _Local(Path(store.root))
    if type(store) is MemoryStore:
        return _Memory(store)
    if type(store) is FsspecStore:
        fs = store.fs
        if type(fs).__name__ == "S3FileSystem" and getattr(fs, "asynchronous", False):
            return _S3fs(store)
        return None
    obstore = _obstore_of(store)
    if obstore is not None:
        local = _obstore_local_root(obstore)
        if local is not None:
            return _Local(local)
        return _Obstore(obstore)
    return None


def conditional_path(store: Any, storage_options: Any = None) -> tuple[Any, Conditional] | None:
    """What a user passed as ``store`` (a path, URL, zarr-python store...) opened as a
    ``StorePath``, with its store's conditional reads and puts; None when it does not
    exist yet or has none."""
    try:
        base = store_path(store, storage_options)
    except FileNotFoundError:
        return None
    guard = conditional(base.store)
    return None if guard is None else (base, guard)


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


class _Local(Conditional):
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


class _Memory(Conditional):
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


# -- S3 through s3fs ---------------------------------------------------------------------------
_CONFLICT_STATUSES = (409, 412)


def _is_conflict(error: BaseException, update: bool) -> bool:
    """Whether a botocore error is a failed precondition (412), a conditional request
    conflicting with another in progress (409), or (``update``: a put with ``If-Match``)
    the object gone since it was read (404 ``NoSuchKey``)."""
    response = getattr(error, "response", None)
    if not isinstance(response, dict):
        return False
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    code = response.get("Error", {}).get("Code")
    if update and (status == 404 or code == "NoSuchKey"):
        return True
    return status in _CONFLICT_STATUSES or code in (
        "PreconditionFailed",
        "ConditionalRequestConflict",
    )


def _status(error: Any) -> tuple[int | None, str | None]:
    """(HTTP status, error code) of a botocore ``ClientError``."""
    response = getattr(error, "response", None) or {}
    return (
        response.get("ResponseMetadata", {}).get("HTTPStatusCode"),
        response.get("Error", {}).get("Code"),
    )


def _http_range(byte_range: Any) -> str:
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


def _object_size(response: dict[str, Any]) -> int | None:
    """The whole object's size from a ``GetObject`` response: the total of its
    ``Content-Range`` (``bytes a-b/total``), else (not ranged) its length."""
    content_range = response.get("ContentRange")
    if content_range:
        total = str(content_range).rpartition("/")[2]
        return int(total) if total.isdigit() else None
    length = response.get("ContentLength")
    return int(length) if isinstance(length, int) else None


class _S3fs(Conditional):
    kind = "S3 (s3fs)"

    def __init__(self, store: Any) -> None:
        self.store = store
        self.fs = store.fs

    def _where(self, key: str) -> tuple[str, str]:
        path = f"{self.store.path.rstrip('/')}/{key}" if self.store.path else key
        bucket, _, obj = path.partition("/")
        return bucket, obj

    def get(self, key: str) -> tuple[bytes | None, Version]:
        return _compat.sync(self._get(key))

    async def _get(self, key: str) -> tuple[bytes | None, Version]:
        got = await self.read(key)
        return (None if got.data is None else bytes(got.data)), got.version or ABSENT

    def put(self, key: str, data: Any, expected: Version | None) -> bool:
        return _compat.sync(self._put(key, data, expected))

    async def _put(self, key: str, data: Any, expected: Version | None) -> bool:
        bucket, obj = self._where(key)
        client = await _compat.s3fs_client(self.fs, bucket)
        condition: dict[str, str] = {}
        if expected is not None:
            condition = {"IfNoneMatch": "*"} if expected.absent else {"IfMatch": expected.tag[1]}
        body = data if isinstance(data, bytes) else bytes(memoryview(data).cast("B"))
        refused: list[bool] = []

        async def put() -> None:
            try:
                await client.put_object(Bucket=bucket, Key=obj, Body=body, **condition)
            except Exception as e:
                if condition and _is_conflict(e, update="IfMatch" in condition):
                    refused.append(True)
                    return
                raise

        try:
            await self._call(put, f"{bucket}/{obj}")
        finally:
            self.fs.invalidate_cache(f"{bucket}/{obj}")
        if not refused:
            return True
        # Refused: another writer's version is there, or this one's. A put whose
        # response was lost is applied, and its retry (botocore's own, or ours after a
        # fault) is refused by the very object it put: what the store holds says.
        return await self._holds(client, key, body)

    async def _holds(self, client: Any, key: str, body: bytes) -> bool:
        """Whether the object is now ``body``: its ETag against the body's MD5 where
        the ETag is one (a single put without KMS), else its bytes."""
        bucket, obj = self._where(key)
        try:
            head = await self._call(
                lambda: client.head_object(Bucket=bucket, Key=obj), f"{bucket}/{obj}"
            )
        except FileNotFoundError:
            return False
        etag = str(head.get("ETag", "")).strip('"')
        if _MD5.fullmatch(etag):
            return etag == hashlib.md5(body, usedforsecurity=False).hexdigest()
        got = await self.read(key)
        return got.data is not None and bytes(got.data) == body

    async def _call(self, call: Any, path: str) -> Any:
        """``await call()`` with the transient faults retried (:mod:`shardwise.io.retry`);
        what is left raised as the ``OSError`` s3fs would raise (an unexpected client
        error) or a ``ConnectionError`` (a fault that outlasted the retries), so that a
        write or read names the array and key it was for."""
        from botocore.exceptions import ClientError

        try:
            return await retrying(call)
        except ClientError as e:
            raise _compat.s3fs_os_error(e, path) from e
        except OSError:
            raise
        except Exception as e:
            if transient(e):
                raise ConnectionError(
                    f"{path}: {type(e).__name__}: {e} (after the retries the policy allows)"
                ) from e
            raise

    def delete(self, key: str) -> None:
        _compat.sync(self._delete(key))

    async def read(self, key: str, byte_range: Any = None, expected: Version | None = None) -> Got:
        from botocore.exceptions import ClientError

        bucket, obj = self._where(key)
        client = await _compat.s3fs_client(self.fs, bucket)
        request: dict[str, str] = {}
        if byte_range is not None:
            request["Range"] = _http_range(byte_range)
        if expected is not None:
            request["IfMatch"] = expected.tag[1]

        async def get() -> Got:
            try:
                response = await client.get_object(Bucket=bucket, Key=obj, **request)
            except ClientError as e:
                status, code = _status(e)
                if status == 404 or code in ("NoSuchKey", "404"):
                    if expected is not None:
                        raise Stale(key) from None
                    return Got(None, ABSENT, None)
                if status == 412 or code == "PreconditionFailed":
                    raise Stale(key) from None
                raise
            # (a body cut short raises here, and the whole request is tried again)
            async with response["Body"] as body:
                data = await body.read()
            return Got(
                memoryview(data), Version(("etag", response["ETag"])), _object_size(response)
            )

        got: Got = await self._call(get, f"{bucket}/{obj}")
        return got

    async def _delete(self, key: str) -> None:
        bucket, obj = self._where(key)
        client = await _compat.s3fs_client(self.fs, bucket)
        try:
            await self._call(
                lambda: client.delete_object(Bucket=bucket, Key=obj), f"{bucket}/{obj}"
            )
        finally:
            self.fs.invalidate_cache(f"{bucket}/{obj}")


_MD5 = re.compile(r"[0-9a-f]{32}")


# -- obstore -----------------------------------------------------------------------------------
def _obstore_of(store: Any) -> Any:
    """The obstore store a zarr-python ``ObjectStore`` wraps (None for other stores)."""
    if type(store).__name__ != "ObjectStore" or not hasattr(store, "store"):
        return None
    return store.store


def _obstore_local_root(obstore: Any) -> Path | None:
    """The directory of an obstore ``LocalStore`` (None for other obstore stores):
    obstore's local store has no versioned put, so its files are handled as local
    files."""
    if type(obstore).__name__ != "LocalStore":
        return None
    prefix = getattr(obstore, "prefix", None)
    return None if prefix is None else Path(str(prefix))


class _Obstore(Conditional):
    kind = "obstore"

    def __init__(self, store: Any) -> None:
        self.store = store

    def get(self, key: str) -> tuple[bytes | None, Version]:
        return _compat.sync(self._get(key))

    async def _get(self, key: str) -> tuple[bytes | None, Version]:
        import obstore
        from obstore.exceptions import NotFoundError

        try:
            result = await obstore.get_async(self.store, key)
        except (NotFoundError, FileNotFoundError):
            return None, ABSENT
        meta = result.meta
        data = await result.bytes_async()
        return bytes(data), Version(("obstore", meta.get("e_tag"), meta.get("version")))

    def put(self, key: str, data: Any, expected: Version | None) -> bool:
        return _compat.sync(self._put(key, data, expected))

    async def _put(self, key: str, data: Any, expected: Version | None) -> bool:
        import obstore
        from obstore.exceptions import AlreadyExistsError, NotFoundError, PreconditionError

        mode: Any = "overwrite"
        if expected is not None:
            if expected.absent:
                mode = "create"
            else:  # (obstore takes no None for either)
                _, e_tag, version = expected.tag
                mode = {"e_tag": e_tag} if version is None else {"e_tag": e_tag, "version": version}
        body = data if isinstance(data, bytes) else bytes(memoryview(data).cast("B"))
        rules = retry_policy()
        loop = asyncio.get_running_loop()
        start, attempt = loop.time(), 0
        while True:
            try:
                await obstore.put_async(self.store, key, body, mode=mode)
            except (AlreadyExistsError, PreconditionError, FileExistsError):
                if expected is None:
                    raise
            except (NotFoundError, FileNotFoundError):  # gone since it was read
                if expected is None or expected.absent:
                    raise
            except Exception as e:
                # No answer (obstore's GenericError: a connection reset or closed, a
                # timeout; obstore sends a conditional put only once): the put may have
                # landed. What the store holds says, and the put is made again only
                # where the object is still the one it was conditioned on.
                attempt += 1
                if not _obstore_unknown(e):
                    raise
                now = await self._settle(key, body, expected)
                if now is not None:
                    return now
                if attempt >= rules.attempts or loop.time() - start >= rules.seconds:
                    raise ConnectionError(
                        f"{key}: {type(e).__name__}: {e} (after the retries the policy allows)"
                    ) from e
                count_retry(e)
                await asyncio.sleep(rules.pause(attempt))
                continue
            else:
                return True
            # Refused: another writer's version is there, or this one's (a put whose
            # response was lost, made again, is refused by what it put)
            got = await self.read(key)
            return got.data is not None and bytes(got.data) == body

    async def _settle(self, key: str, body: bytes, expected: Version | None) -> bool | None:
        """After a put with no answer: True when the object holds ``body`` (the put
        landed), False when it holds another writer's version, None when it is still
        the one the put was conditioned on (it did not land: make it again)."""
        got = await retrying(lambda: self.read(key), retry_on=_obstore_unknown)
        if got.data is not None and bytes(got.data) == body:
            return True
        if expected is None:  # an unconditional put: make it again
            return None
        if expected.absent:
            return None if got.data is None else False
        return None if got.version == expected else False

    async def read(self, key: str, byte_range: Any = None, expected: Version | None = None) -> Got:
        import obstore
        from obstore.exceptions import NotFoundError, PreconditionError
        from zarr.abc.store import OffsetByteRequest, RangeByteRequest, SuffixByteRequest

        options: dict[str, Any] = {}
        if isinstance(byte_range, RangeByteRequest):
            options["range"] = (byte_range.start, byte_range.end)
        elif isinstance(byte_range, SuffixByteRequest):
            options["range"] = {"suffix": byte_range.suffix}
        elif isinstance(byte_range, OffsetByteRequest):
            options["range"] = {"offset": byte_range.offset}
        if expected is not None and expected.tag[1] is not None:
            options["if_match"] = expected.tag[1]  # (no body when it changed)
        try:
            result = await obstore.get_async(self.store, key, options=cast(Any, options))
        except (NotFoundError, FileNotFoundError):
            if expected is not None:
                raise Stale(key) from None
            return Got(None, ABSENT, None)
        except PreconditionError:
            raise Stale(key) from None
        meta = result.meta
        data = await result.bytes_async()
        e_tag, version = meta.get("e_tag"), meta.get("version")
        found = None if e_tag is None and version is None else Version(("obstore", e_tag, version))
        if expected is not None and found != expected:  # (one response: one version)
            raise Stale(key)
        return Got(memoryview(data), found, meta.get("size"))

    def delete(self, key: str) -> None:
        import obstore
        from obstore.exceptions import NotFoundError

        async def delete() -> None:  # (obstore's call needs the running loop)
            await obstore.delete_async(self.store, key)

        with contextlib.suppress(NotFoundError, FileNotFoundError):
            _compat.sync(delete())


def _obstore_unknown(error: BaseException) -> bool:
    """Whether obstore's ``error`` leaves a request's outcome unknown: its generic error
    (a connection reset or closed early, a timeout, a server error after its own
    retries) or one of :func:`shardwise.io.retry.transient`'s faults; not its refusals
    (not found, precondition, permission...)."""
    if type(error).__name__ == "GenericError" and type(error).__module__.startswith("obstore"):
        return True
    return transient(error)
