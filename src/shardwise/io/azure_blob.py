"""Conditional reads and puts on Azure Blob Storage (see :mod:`shardwise.io.conditional`):
through adlfs (zarr-python's ``FsspecStore`` on ``az://`` and ``abfs://`` URLs), and the
way both adlfs and obstore's ``AzureStore`` read an object's end.

An object's version is its ETag: reads carry ``If-Match`` when they must come from the
version an index was read from (HTTP 412 when it changed: :class:`Stale`), puts carry
``If-Match: <etag>`` to replace only the version read, or ``If-None-Match: *`` to create
an object that must not exist (412 or 409 ``BlobAlreadyExists``: another writer won).
Azure Blob Storage enforces both on the server, atomically.

**The end of an object.** Azure has no suffix range (``Range: bytes=-N``): obstore
refuses one, and the service (Azurite too) answers it with the whole object. An index
stored at a shard's end is read with an ordinary range once the object's size is known,
and :class:`Ends` knows it without a request per shard: one listing of the shard's
folder gives the size and ETag of every shard in it (a request per 5,000 objects), and
every response adds what it says. The range is read with ``If-Match`` on the ETag the
size came with, so a size gone stale (the object replaced since) is never used: the
read is refused, and the object's properties (one request) give its size now. An
object not in the folder's listing (created since, or absent) costs that one request.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from shardwise.io.retry import client_errors, retrying
from shardwise.io.versioned import (
    ABSENT,
    FsspecConditional,
    Got,
    Stale,
    Version,
    total_size,
)

__all__ = ["AdlfsConditional", "Ends", "etag_version"]


def etag_version(etag: str | None) -> Version | None:
    """The version an ETag names, the same whether the service quoted it or not (its
    responses do, its listings do not)."""
    if not etag:
        return None
    return Version(("etag", '"' + etag.strip('"') + '"'))


@dataclass(frozen=True, slots=True)
class Known:
    size: int
    version: Version


# what reads one range of an object: (key, start, stop, expected) -> Got, raising Stale
# when ``expected`` no longer holds
RangeRead = Callable[[str, int, int, Version | None], Awaitable[Got]]
# an object's size and version now, None when it is absent (one request)
Properties = Callable[[str], Awaitable[Known | None]]
# the sizes and versions of every object under a folder (one listing)
Listing = Callable[[str], Awaitable[dict[str, Known]]]


class Ends:
    """Reads of an object's last bytes where the store has no suffix range: sizes
    learned from one listing per folder and from every response (see the module's
    description). Used on one event loop at a time (zarr-python's)."""

    def __init__(self, listing: Listing, properties: Properties) -> None:
        self._listing = listing
        self._properties = properties
        self._known: dict[str, Known] = {}
        self._listed: dict[str, asyncio.Future[None]] = {}
        self.listings = 0  # how many listings were made (for the tests' request counts)

    def learn(self, key: str, size: int | None, version: Version | None) -> None:
        if size is not None and version is not None:
            self._known[key] = Known(size, version)

    def forget(self, key: str) -> None:
        self._known.pop(key, None)

    async def _folder(self, key: str) -> None:
        """The folder of ``key`` listed once, by whichever read asks first."""
        folder = key.rpartition("/")[0]
        waiting = self._listed.get(folder)
        if waiting is None:
            waiting = self._listed[folder] = asyncio.get_running_loop().create_future()
            try:
                self.listings += 1
                found = await self._listing(f"{folder}/" if folder else "")
            except BaseException as e:
                del self._listed[folder]  # (the next read lists again)
                waiting.set_exception(e)
                waiting.exception()  # (retrieved: the callers see it raised below)
                raise
            for k, known in found.items():
                self._known.setdefault(k, known)
            waiting.set_result(None)
        else:
            await waiting

    async def read(self, key: str, suffix: int, expected: Version | None, ranged: RangeRead) -> Got:
        """The last ``suffix`` bytes of the object at ``key`` (only of ``expected`` when
        given), with its version and size."""
        known = self._known.get(key)
        listed = self._listed.get(key.rpartition("/")[0])
        if known is None and (listed is None or not listed.done()):
            await self._folder(key)  # (lists it, or waits for the listing under way)
            known = self._known.get(key)
        for _ in range(8):  # (the object replaced between the size and the read, again)
            if known is None or (expected is not None and known.version != expected):
                known = await self._properties(key)
                if known is None:
                    self.forget(key)
                    if expected is not None:
                        raise Stale(key)
                    return Got(None, ABSENT, None)
                self.learn(key, known.size, known.version)
                if expected is not None and known.version != expected:
                    raise Stale(key)
            start = max(known.size - suffix, 0)
            try:
                if known.size == 0:
                    return Got(memoryview(b""), known.version, 0)
                return await ranged(key, start, known.size, known.version)
            except Stale:
                if expected is not None:
                    raise
                self.forget(key)
                known = None
        raise ConnectionError(f"{key}: replaced at every read of its end (8 tries)")


# -- adlfs ---------------------------------------------------------------------------------
class AdlfsConditional(FsspecConditional):
    kind = "Azure Blob Storage (adlfs)"
    suffix_ranges = False

    def __init__(self, store: Any) -> None:
        super().__init__(store)
        self.ends = Ends(self._list, self._properties)

    def _blob(self, key: str) -> Any:
        container, blob = self._where(key)
        return self.fs.service_client.get_blob_client(container, blob)

    async def _download(
        self, key: str, start: int | None, stop: int | None, expected: Version | None
    ) -> Got:
        from azure.core import MatchConditions
        from azure.core.exceptions import ResourceModifiedError, ResourceNotFoundError

        condition: dict[str, Any] = {}
        if expected is not None:
            condition = {"etag": expected.tag[1], "match_condition": MatchConditions.IfNotModified}
        where: dict[str, Any] = {}
        if start is not None:
            where = {"offset": start, "length": None if stop is None else stop - start}

        async def download() -> tuple[Any, bytes]:
            downloader = await self._blob(key).download_blob(**where, **condition)
            return downloader, await downloader.readall()

        with client_errors(self._path(key)):
            try:  # (a body cut short: the whole request again)
                downloader, data = await retrying(download)
            except ResourceNotFoundError:
                if expected is not None:
                    raise Stale(key) from None
                return Got(None, ABSENT, None)
            except ResourceModifiedError:
                raise Stale(key) from None
        props = downloader.properties
        version = etag_version(props.etag)
        size = total_size(getattr(props, "content_range", None), None)
        if size is None and start is None:
            size = len(data)
        self.ends.learn(key, size, version)
        return Got(memoryview(data), version, size)

    async def _ranged(self, key: str, start: int, stop: int, expected: Version | None) -> Got:
        return await self._download(key, start, stop, expected)

    async def _properties(self, key: str) -> Known | None:
        from azure.core.exceptions import ResourceNotFoundError

        with client_errors(self._path(key)):
            try:
                props = await self._blob(key).get_blob_properties()
            except ResourceNotFoundError:
                return None
        version = etag_version(props.etag)
        assert version is not None
        return Known(int(props.size), version)

    async def _list(self, folder: str) -> dict[str, Known]:
        container, prefix = self._where(folder)
        base = self._where("")[1]
        client = self.fs.service_client.get_container_client(container)
        found: dict[str, Known] = {}
        with client_errors(f"{container}/{prefix}"):
            async for blob in client.list_blobs(name_starts_with=prefix):
                version = etag_version(blob.etag)
                if version is not None and blob.size is not None:
                    name = blob.name[len(base) :].lstrip("/") if base else blob.name
                    found[name] = Known(int(blob.size), version)
        return found

    async def read(self, key: str, byte_range: Any = None, expected: Version | None = None) -> Got:
        from zarr.abc.store import OffsetByteRequest, RangeByteRequest, SuffixByteRequest

        if isinstance(byte_range, SuffixByteRequest):
            return await self.ends.read(key, byte_range.suffix, expected, self._ranged)
        if isinstance(byte_range, RangeByteRequest):
            return await self._download(key, byte_range.start, byte_range.end, expected)
        if isinstance(byte_range, OffsetByteRequest):
            return await self._download(key, byte_range.offset, None, expected)
        if byte_range is None:
            return await self._download(key, None, None, expected)
        raise TypeError(f"unknown byte range {byte_range!r}")

    async def _put(self, key: str, data: Any, expected: Version | None) -> bool:
        from azure.core import MatchConditions
        from azure.core.exceptions import ResourceExistsError, ResourceModifiedError

        body = data if isinstance(data, bytes) else bytes(memoryview(data).cast("B"))
        condition: dict[str, Any] = {"overwrite": True}
        if expected is not None:
            condition = (
                {"overwrite": False}
                if expected.absent
                else {
                    "overwrite": True,
                    "etag": expected.tag[1],
                    "match_condition": MatchConditions.IfNotModified,
                }
            )
        try:
            with client_errors(self._path(key)):
                try:
                    answer = await self._blob(key).upload_blob(body, **condition)
                except (ResourceExistsError, ResourceModifiedError):
                    if expected is None:
                        raise
                    # Refused: another writer's version is there, or this one's (a put
                    # whose response was lost, made again by the client's retries, is
                    # refused by the very object it put): what the store holds says
                    self.ends.forget(key)
                    return await self._holds(key, body)
        finally:
            self.fs.invalidate_cache(self._path(key))
        self.ends.learn(key, len(body), etag_version(answer.get("etag")))
        return True

    async def _holds(self, key: str, body: bytes) -> bool:
        """Whether the object is now ``body``: its Content-MD5 (which the service gives
        a blob put in one request) against the body's, else its bytes."""
        from azure.core.exceptions import ResourceNotFoundError

        with client_errors(self._path(key)):
            try:
                props = await self._blob(key).get_blob_properties()
            except ResourceNotFoundError:
                return False
        md5 = getattr(props.content_settings, "content_md5", None)
        if md5:
            return bytes(md5) == hashlib.md5(body, usedforsecurity=False).digest()
        got = await self.read(key)
        return got.data is not None and bytes(got.data) == body

    async def _delete(self, key: str) -> None:
        from azure.core.exceptions import ResourceNotFoundError

        self.ends.forget(key)
        try:
            with client_errors(self._path(key)), contextlib.suppress(ResourceNotFoundError):
                await self._blob(key).delete_blob()
        finally:
            self.fs.invalidate_cache(self._path(key))
