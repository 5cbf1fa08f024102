"""Conditional reads and puts on Google Cloud Storage through gcsfs (zarr-python's
``FsspecStore`` on ``gs://`` URLs), on its JSON API (see :mod:`shardwise.io.conditional`).

An object's version is its generation, a number the service gives each write of it:

- a read that must come from the version an index was read from asks for that
  generation (``generation=G``): the bytes are that generation's or none (404 once it
  is replaced, in a bucket that does not keep old versions: :class:`Stale`); every
  read returns the generation it is of (``X-Goog-Generation``) and the object's size
  (``Content-Range``);
- a put replaces only the generation read (``ifGenerationMatch=G``), or creates an
  object that must not exist (``ifGenerationMatch=0``); HTTP 412 means another writer
  won. The put is one multipart upload request, which the service checks atomically.

gcsfs retries throttling, server errors and dropped connections itself; a conditional
put applied whose response was lost is refused when it is made again, by the very
object it put, and the object's MD5 (its metadata, one request) tells it was this
writer's.
"""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any
from urllib.parse import quote

from shardwise.io.retry import client_errors, retrying
from shardwise.io.versioned import (
    ABSENT,
    FsspecConditional,
    Got,
    Stale,
    Version,
    http_range,
    total_size,
)

__all__ = ["GcsfsConditional"]

_BOUNDARY = "==shardwise-part=="


class GcsfsConditional(FsspecConditional):
    kind = "Google Cloud Storage (gcsfs)"

    def _object_url(self, key: str) -> str:
        bucket, obj = self._where(key)
        return f"{self.fs._location}/storage/v1/b/{quote(bucket, safe='')}/o/{quote(obj, safe='')}"

    async def read(self, key: str, byte_range: Any = None, expected: Version | None = None) -> Got:
        params: dict[str, Any] = {"alt": "media"}
        if expected is not None and not expected.absent:
            params["generation"] = str(expected.tag[1])
        headers: dict[str, str] = {}
        if byte_range is not None:
            headers["Range"] = http_range(byte_range)
        try:
            with client_errors(self._path(key)):  # (a body cut short: the request again)
                answer, data = await retrying(
                    lambda: self.fs._call("GET", self._object_url(key), headers=headers, **params)
                )
        except FileNotFoundError:
            if expected is not None:
                raise Stale(key) from None
            return Got(None, ABSENT, None)
        generation = answer.get("X-Goog-Generation")
        version = None if generation is None else Version(("generation", int(generation)))
        if expected is not None and version != expected:  # (one response: one version)
            raise Stale(key)
        size = total_size(answer.get("Content-Range"), None if headers else len(data))
        return Got(memoryview(data), version, size)

    async def _put(self, key: str, data: Any, expected: Version | None) -> bool:
        bucket, obj = self._where(key)
        body = data if isinstance(data, bytes) else bytes(memoryview(data).cast("B"))
        condition: dict[str, str] = {}
        if expected is not None:
            condition["ifGenerationMatch"] = "0" if expected.absent else str(expected.tag[1])
        metadata = json.dumps({"name": obj}).encode()
        payload = b"".join(
            (
                f"--{_BOUNDARY}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n".encode(),
                metadata,
                f"\r\n--{_BOUNDARY}\r\nContent-Type: application/octet-stream\r\n\r\n".encode(),
                body,
                f"\r\n--{_BOUNDARY}--".encode(),
            )
        )
        try:
            with client_errors(f"{bucket}/{obj}"):
                await self.fs._call(
                    "POST",
                    f"{self.fs._location}/upload/storage/v1/b/{quote(bucket, safe='')}/o",
                    uploadType="multipart",
                    headers={"Content-Type": f'multipart/related; boundary="{_BOUNDARY}"'},
                    data=payload,
                    json_out=True,
                    **condition,
                )
        except FileExistsError:  # (gcsfs's name for 412: a precondition failed)
            if expected is None:
                raise
            # Refused: another writer's version is there, or this one's (a put applied
            # whose response was lost, made again by gcsfs's retries): the store says
            return await self._holds(key, body)
        finally:
            self.fs.invalidate_cache(f"{bucket}/{obj}")
        return True

    async def _holds(self, key: str, body: bytes) -> bool:
        """Whether the object is now ``body``: its MD5 (its metadata) against the
        body's, else its bytes."""
        try:
            with client_errors(self._path(key)):
                meta = await self.fs._call("GET", self._object_url(key), json_out=True)
        except FileNotFoundError:
            return False
        md5 = meta.get("md5Hash")
        if md5:
            mine = base64.b64encode(hashlib.md5(body, usedforsecurity=False).digest()).decode()
            return bool(md5 == mine)
        got = await self.read(key)
        return got.data is not None and bytes(got.data) == body

    async def _delete(self, key: str) -> None:
        bucket, obj = self._where(key)
        try:
            with client_errors(f"{bucket}/{obj}"):
                await self.fs._call("DELETE", self._object_url(key))
        except FileNotFoundError:
            pass
        finally:
            self.fs.invalidate_cache(f"{bucket}/{obj}")
