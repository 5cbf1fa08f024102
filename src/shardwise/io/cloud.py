"""Conditional reads and puts on object stores (see :mod:`shardwise.io.conditional`):
S3 and S3-compatible stores through s3fs, and obstore's stores (S3, GCS, Azure) through
its put modes."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import re
import sys
from typing import Any, cast

import shardwise._compat as _compat
from shardwise.io.azure_blob import Ends, Known
from shardwise.io.retry import count as count_retry
from shardwise.io.retry import policy as retry_policy
from shardwise.io.retry import retrying, transient
from shardwise.io.versioned import (
    ABSENT,
    Conditional,
    FsspecConditional,
    Got,
    Stale,
    Version,
    http_range,
    total_size,
)

__all__ = ["ObstoreConditional", "S3fsConditional"]


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


def _object_size(response: dict[str, Any]) -> int | None:
    """The whole object's size from a ``GetObject`` response: the total of its
    ``Content-Range`` (``bytes a-b/total``), else (not ranged) its length."""
    length = response.get("ContentLength")
    return total_size(response.get("ContentRange"), length if isinstance(length, int) else None)


class S3fsConditional(FsspecConditional):
    kind = "S3 (s3fs)"

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

    async def read(self, key: str, byte_range: Any = None, expected: Version | None = None) -> Got:
        from botocore.exceptions import ClientError

        bucket, obj = self._where(key)
        client = await _compat.s3fs_client(self.fs, bucket)
        request: dict[str, str] = {}
        if byte_range is not None:
            request["Range"] = http_range(byte_range)
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
class ObstoreConditional(Conditional):
    kind = "obstore"

    def __init__(self, store: Any) -> None:
        self.store = store
        azure = getattr(sys.modules.get("obstore.store"), "AzureStore", None)
        # Azure has no suffix range: the end of an object is read by its size
        # (:class:`~shardwise.io.azure_blob.Ends`)
        self.ends: Ends | None = None
        if azure is not None and isinstance(store, azure):
            self.suffix_ranges = False
            self.ends = Ends(self._list, self._properties)

    async def _list(self, folder: str) -> dict[str, Known]:
        import obstore

        found: dict[str, Known] = {}
        async for page in obstore.list(self.store, prefix=folder or None):
            for meta in page:
                # (Azure's listings give an ETag unquoted, its responses quoted)
                e_tag = meta.get("e_tag")
                e_tag = None if e_tag is None else f'"{e_tag.strip(chr(34))}"'
                version = _obstore_version(e_tag, meta.get("version"))
                if version is not None:
                    found[meta["path"]] = Known(int(meta["size"]), version)
        return found

    async def _properties(self, key: str) -> Known | None:
        import obstore
        from obstore.exceptions import NotFoundError

        try:
            meta = await obstore.head_async(self.store, key)
        except (NotFoundError, FileNotFoundError):
            return None
        version = _obstore_version(meta.get("e_tag"), meta.get("version"))
        if version is None:
            raise OSError(f"{key}: the store gave neither an ETag nor a version")
        return Known(int(meta["size"]), version)

    async def _ranged(self, key: str, start: int, stop: int, expected: Version | None) -> Got:
        from zarr.abc.store import RangeByteRequest

        return await self._read(key, RangeByteRequest(start, stop), expected)

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
        found = _obstore_version(meta.get("e_tag"), meta.get("version"))
        return bytes(data), found or Version(("obstore", None, None))

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
        if self.ends is not None:
            self.ends.forget(key)
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
        from zarr.abc.store import SuffixByteRequest

        if self.ends is not None and isinstance(byte_range, SuffixByteRequest):
            return await self.ends.read(key, byte_range.suffix, expected, self._ranged)
        return await self._read(key, byte_range, expected)

    async def _read(self, key: str, byte_range: Any, expected: Version | None) -> Got:
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
        if expected is not None and expected.tag[2] is not None:
            # that very version (GCS: the generation, whose ETag, its bytes' MD5, a
            # rewrite of the same bytes keeps; S3 and Azure: a version id)
            options["version"] = expected.tag[2]
        try:
            result = await obstore.get_async(self.store, key, options=cast(Any, options))
        except (NotFoundError, FileNotFoundError):
            if expected is not None:
                raise Stale(key) from None
            return Got(None, ABSENT, None)
        except PreconditionError:
            raise Stale(key) from None
        except Exception as e:
            if _precondition_failed(e):
                raise Stale(key) from None
            raise
        meta = result.meta
        data = await result.bytes_async()
        found = _obstore_version(meta.get("e_tag"), meta.get("version"))
        if expected is not None and found != expected:  # (one response: one version)
            raise Stale(key)
        if self.ends is not None:
            self.ends.learn(key, meta.get("size"), found)
        return Got(memoryview(data), found, meta.get("size"))

    def delete(self, key: str) -> None:
        import obstore
        from obstore.exceptions import NotFoundError

        async def delete() -> None:  # (obstore's call needs the running loop)
            await obstore.delete_async(self.store, key)

        with contextlib.suppress(NotFoundError, FileNotFoundError):
            _compat.sync(delete())


def _precondition_failed(error: BaseException) -> bool:
    """Whether obstore reported a 412 as a generic error: its HTTP store (``HTTPStore``)
    does in obstore 0.6, where later releases raise ``PreconditionError``."""
    return type(error).__name__ == "GenericError" and "412 Precondition Failed" in str(error)


def _obstore_version(e_tag: str | None, version: str | None) -> Version | None:
    """The version of obstore's metadata, its ETag as the store gave it (what the
    store's conditions compare with)."""
    if e_tag is None and version is None:
        return None
    return Version(("obstore", e_tag, version))


def _obstore_unknown(error: BaseException) -> bool:
    """Whether obstore's ``error`` leaves a request's outcome unknown: its generic error
    (a connection reset or closed early, a timeout, a server error after its own
    retries) or one of :func:`shardwise.io.retry.transient`'s faults; not its refusals
    (not found, precondition, permission...)."""
    if type(error).__name__ == "GenericError" and type(error).__module__.startswith("obstore"):
        return True
    return transient(error)
