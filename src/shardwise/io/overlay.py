"""A copy-on-write view of a store, for dry runs that must not change the real one.

:class:`OverlayStore` reads through to the wrapped store, keeps every write and delete
in memory, and answers later reads and listings as if they had happened. ``to_zarr``
runs xarray's whole metadata step against it first, so every error xarray, zarr-python
or shardwise would raise is raised before the real store is touched.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Sequence
from typing import Any

from zarr.abc.buffer import Buffer, BufferPrototype
from zarr.abc.store import ByteRequest, OffsetByteRequest, RangeByteRequest, Store
from zarr.storage import WrapperStore

__all__ = ["OverlayStore"]


def _slice(buf: Buffer, byte_range: ByteRequest | None) -> Buffer:
    if byte_range is None:
        return buf
    n = len(buf)
    if isinstance(byte_range, RangeByteRequest):
        return buf[byte_range.start : min(byte_range.end, n)]
    if isinstance(byte_range, OffsetByteRequest):
        return buf[byte_range.offset :]
    return buf[max(n - byte_range.suffix, 0) :]


class OverlayStore(WrapperStore[Store]):
    """Reads fall through to ``store``; writes and deletes stay in this object."""

    def __init__(self, store: Store) -> None:
        super().__init__(store)
        self._written: dict[str, Buffer] = {}
        self._deleted_keys: set[str] = set()
        self._deleted_prefixes: set[str] = set()

    # -- what the overlay changed --------------------------------------------------------
    def _hidden(self, key: str) -> bool:
        """Deleted in the overlay (and not written again since)."""
        if key in self._written:
            return False
        return key in self._deleted_keys or any(key.startswith(p) for p in self._deleted_prefixes)

    @property
    def changed(self) -> list[str]:
        """Keys written in the overlay (for tests and error messages)."""
        return sorted(self._written)

    # -- Store API -----------------------------------------------------------------------
    @property
    def read_only(self) -> bool:
        return False

    def _check_writable(self) -> None:
        return None

    @property
    def supports_writes(self) -> bool:
        return True

    @property
    def supports_deletes(self) -> bool:
        return True

    @property
    def supports_listing(self) -> bool:
        return True

    @property
    def _supports_sync_io(self) -> bool:
        return False

    def __eq__(self, other: object) -> bool:
        return self is other

    def __hash__(self) -> int:
        return id(self)

    async def get(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        if key in self._written:
            return _slice(self._written[key], byte_range)
        if self._hidden(key):
            return None
        return await self._store.get(key, prototype, byte_range)

    async def get_partial_values(
        self,
        prototype: BufferPrototype,
        key_ranges: Iterable[tuple[str, ByteRequest | None]],
    ) -> list[Buffer | None]:
        return [await self.get(k, prototype, r) for k, r in key_ranges]

    async def get_ranges(
        self,
        key: str,
        byte_ranges: Sequence[ByteRequest | None],
        *,
        prototype: BufferPrototype,
        **kwargs: Any,
    ) -> AsyncIterator[Sequence[tuple[int, Buffer | None]]]:
        yield [(i, await self.get(key, prototype, r)) for i, r in enumerate(byte_ranges)]

    async def exists(self, key: str) -> bool:
        if key in self._written:
            return True
        if self._hidden(key):
            return False
        return await self._store.exists(key)

    async def set(self, key: str, value: Buffer) -> None:
        self._written[key] = value
        self._deleted_keys.discard(key)

    async def set_if_not_exists(self, key: str, value: Buffer) -> None:
        if not await self.exists(key):
            await self.set(key, value)

    async def _set_many(self, values: Iterable[tuple[str, Buffer]]) -> None:
        for k, v in values:
            await self.set(k, v)

    async def delete(self, key: str) -> None:
        self._written.pop(key, None)
        self._deleted_keys.add(key)

    async def delete_dir(self, prefix: str) -> None:
        prefix = f"{prefix.rstrip('/')}/" if prefix else ""
        for k in [k for k in self._written if k.startswith(prefix)]:
            del self._written[k]
        self._deleted_prefixes.add(prefix)

    async def clear(self) -> None:
        await self.delete_dir("")

    async def is_empty(self, prefix: str) -> bool:
        async for _ in self.list_prefix(prefix):
            return False
        return True

    async def list(self) -> AsyncIterator[str]:
        async for k in self.list_prefix(""):
            yield k

    async def list_prefix(self, prefix: str) -> AsyncIterator[str]:
        seen = set()
        async for k in self._store.list_prefix(prefix):
            if not self._hidden(k):
                seen.add(k)
                yield k
        for k in sorted(self._written):
            if k.startswith(prefix) and k not in seen:
                yield k

    async def list_dir(self, prefix: str) -> AsyncIterator[str]:
        base = f"{prefix.rstrip('/')}/" if prefix else ""
        names = {k[len(base) :].split("/", 1)[0] for k in self._written if k.startswith(base)}
        if not any(base.startswith(p) for p in self._deleted_prefixes):
            async for name in self._store.list_dir(prefix):
                key = base + name
                gone = key in self._deleted_keys or any(
                    f"{key}/".startswith(p) for p in self._deleted_prefixes
                )
                if not gone:
                    names.add(name)
        for name in sorted(names):
            yield name

    def get_sync(self, key: str, **kwargs: Any) -> Buffer | None:
        raise TypeError("OverlayStore has no synchronous I/O")

    def set_sync(self, key: str, value: Buffer) -> None:
        raise TypeError("OverlayStore has no synchronous I/O")

    def delete_sync(self, key: str) -> None:
        raise TypeError("OverlayStore has no synchronous I/O")

    async def _get_many(  # type: ignore[override]
        self, requests: Iterable[tuple[str, BufferPrototype, ByteRequest | None]]
    ) -> AsyncIterator[tuple[str, Buffer | None]]:
        for key, prototype, byte_range in requests:
            yield key, await self.get(key, prototype, byte_range)
