"""Versioned reads over HTTP(S) through fsspec's HTTP file system (zarr-python's
``FsspecStore`` on ``http://`` and ``https://`` URLs): read-only, as a web server is
(see :mod:`shardwise.io.conditional`).

An object's version is its strong ``ETag``, else its ``Last-Modified`` date (a server
that gives neither gives no version: its indexes are read again for every read, as
zarr-python reads them). A read that must come from the version an index was read from
carries it as its condition on the same request: ``If-Match`` (a server answers 412
once the object is another), or ``If-Unmodified-Since`` for a date; every answer says
its version and, for a ranged read, the object's size (``Content-Range``). A server
that ignores ``Range`` (200 with the whole object) is read all the same: the range is
cut from the body. A date has a resolution of a second: an object replaced twice within
one second, the second time with bytes of the same size, cannot be told apart by it;
servers of public data give ETags.
"""

from __future__ import annotations

from typing import Any

from shardwise.errors import WriteError
from shardwise.io.retry import client_errors, retrying
from shardwise.io.versioned import (
    ABSENT,
    AsyncConditional,
    Got,
    Stale,
    Version,
    http_range,
    span,
    total_size,
)

__all__ = ["HttpConditional", "version_of"]


def version_of(headers: Any) -> Version | None:
    """The version a response's headers say: its strong ETag, else its Last-Modified
    date, else None (a weak ETag, ``W/"..."``, cannot be a condition of a ranged read)."""
    etag = headers.get("ETag")
    if etag and not etag.startswith("W/"):
        return Version(("etag", etag))
    modified = headers.get("Last-Modified")
    return Version(("modified", modified)) if modified else None


class HttpConditional(AsyncConditional):
    """Reads of an HTTP server with the version they are of (read-only: :meth:`put`
    and :meth:`delete` refuse)."""

    kind = "HTTP (fsspec)"

    def __init__(self, store: Any) -> None:
        self.store = store
        self.fs = store.fs

    def _url(self, key: str) -> str:
        return f"{self.store.path.rstrip('/')}/{key}" if self.store.path else key

    async def read(self, key: str, byte_range: Any = None, expected: Version | None = None) -> Got:
        headers: dict[str, str] = {}
        if byte_range is not None:
            headers["Range"] = http_range(byte_range)
        if expected is not None and not expected.absent:
            kind, value = expected.tag
            headers["If-Match" if kind == "etag" else "If-Unmodified-Since"] = value
        url = self._url(key)
        with client_errors(url):  # (a body cut short: the request again)
            status, answer, data = await retrying(lambda: self._get(url, headers))
        if status == 404:
            if expected is not None:
                raise Stale(key)
            return Got(None, ABSENT, None)
        if status == 412:  # (the object is another version now)
            raise Stale(key)
        version = version_of(answer)
        if expected is not None and version != expected:  # (one response: one version)
            raise Stale(key)
        if status == 416:  # a range past the object's end: nothing of it
            return Got(memoryview(b""), version, total_size(answer.get("Content-Range"), None))
        if byte_range is not None and status == 200:  # the server sent it all
            start, stop = span(byte_range, len(data))
            return Got(memoryview(data)[start:stop], version, len(data))
        size = total_size(answer.get("Content-Range"), None if byte_range else len(data))
        return Got(memoryview(data), version, size)

    async def _get(self, url: str, headers: dict[str, str]) -> tuple[int, Any, bytes]:
        """One GET with fsspec's session and its options: (status, headers, body)."""
        session = await self.fs.set_session()
        kwargs = dict(self.fs.kwargs)
        kwargs["headers"] = {**kwargs.get("headers", {}), **headers}
        async with session.get(self.fs.encode_url(url), **kwargs) as r:
            if r.status in (404, 412, 416):
                return r.status, r.headers, b""
            r.raise_for_status()
            return r.status, r.headers, await r.read()

    async def _put(self, key: str, data: Any, expected: Version | None) -> bool:
        raise self._read_only(key)

    async def _delete(self, key: str) -> None:
        raise self._read_only(key)

    def _read_only(self, key: str) -> WriteError:
        return WriteError(
            "an HTTP server is read-only",
            expected="a store that takes writes",
            found=f"an HTTP URL ({self._url(key)})",
            key=key,
            advice="Write to a local path or an object store, and serve that.",
        )
