"""A copy-on-write view of a store, for dry runs that must not change the real one.

:class:`OverlayStore` reads through to the wrapped store, keeps every write and delete
in memory, and answers later reads and listings as if they had happened. ``to_zarr``
runs xarray's whole metadata step against it first, so every error xarray, zarr-python
or shardwise would raise is raised before the real store is touched.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from typing import Any

from zarr.abc.buffer import Buffer, BufferPrototype
from zarr.abc.store import ByteRequest, OffsetByteRequest, RangeByteRequest, Store
from zarr.storage import WrapperStore

from shardwise.errors import ConflictError, naming_metadata_errors
from shardwise.format.metadata import node_document
from shardwise.io.conditional import distinct

__all__ = ["CommitConflict", "GuardedOverlay", "OverlayStore", "without_consolidated"]


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

    @property
    def written(self) -> dict[str, Buffer]:
        """What the overlay holds: key -> the object written."""
        return dict(self._written)

    @property
    def deleted(self) -> tuple[list[str], list[str]]:
        """The folders (prefixes ending in ``/``, or ``""``: everything) and keys
        deleted in the overlay."""
        return sorted(self._deleted_prefixes), sorted(self._deleted_keys)

    def settle(self) -> None:
        """Forget every change: the wrapped store holds them now (see
        :class:`~shardwise.io.staged.StagedWrite`), and reads go through to it."""
        self._written.clear()
        self._deleted_keys.clear()
        self._deleted_prefixes.clear()

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


class CommitConflict(Exception):
    """A :meth:`GuardedOverlay.commit` found its first object changed by another
    writer: nothing was committed (plan again from what is stored now)."""


class GuardedOverlay(OverlayStore):
    """An :class:`OverlayStore` whose reads of the wrapped store go through a
    :class:`~shardwise.io.conditional.Conditional` and remember the version each object
    had (and its bytes: a later read of it in the same try sees the same), so that :meth:`commit` can put what was written only where nothing changed
    since: an optimistic transaction over several objects (the ``zarr.json`` documents
    a Dataset append grows; its data is written afterwards, with conditional merges)."""

    def __init__(
        self,
        store: Store,
        guard: Any,
        prefix: str = "",
        shown: Mapping[str, Callable[[bytes], bytes]] | None = None,
        rebase: Callable[[bytes, bytes | None, bytes | None], bytes | None] | None = None,
    ) -> None:
        super().__init__(store)
        self.guard = guard
        self.prefix = prefix  # where the wrapped store's keys are, for the guard
        self._versions: dict[str, Any] = {}
        self._snapshot: dict[str, bytes | None] = {}  # every object as first read
        # objects this try sees otherwise than they are: key -> what it sees of them
        self._shown = dict(shown or {})
        # an array's document changed by another job in a way this commit may go over:
        # rebase(ours, as read, as it is now) -> what to put instead, or None (a conflict)
        self._rebase = rebase

    def first_reads(self) -> dict[str, bytes]:
        """The objects this try has read, as it first read them (as shown)."""
        return {k: v for k, v in self._snapshot.items() if v is not None}

    def amend(self, change: Callable[[str, bytes, bytes | None], bytes | None]) -> list[str]:
        """Change the ``zarr.json`` documents written here before they are committed:
        ``change(key, written, first_read)`` returns the bytes to commit instead, or
        None to keep them. Returns the keys changed."""
        changed = []
        for key, value in list(self._written.items()):
            if _leaf(key) != "zarr.json":
                continue
            new = change(key, value.to_bytes(), self._snapshot.get(key))
            if new is not None:
                self._written[key] = type(value).from_bytes(new)
                changed.append(key)
        return changed

    async def get(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        if key in self._written or self._hidden(key):
            return await super().get(key, prototype, byte_range)
        if key in self._versions:  # read once: the try sees the version it remembers
            data: Any = self._snapshot[key]
        else:
            # (the guard's calls are synchronous: off this event loop, which they may use)
            with _naming(self.prefix + key, "Nothing of this append was written; run it again."):
                data, version = await asyncio.to_thread(self.guard.get, self.prefix + key)
            data = None if data is None else bytes(data)
            if data is not None and key in self._shown:
                data = self._shown[key](data)
            self._versions[key] = version
            self._snapshot[key] = data
        if data is None:
            return None
        return _slice(prototype.buffer.from_bytes(data), byte_range)

    def commit(self, skip: Iterable[str] = (), *, consolidation: bool = False) -> list[str]:
        """Put every object written here into the wrapped store (but those in
        ``skip``), each only if it is still the version read (plainly, if it was never
        read). A group's consolidated metadata is kept as read, unless this commits a
        ``consolidation``. The
        ``zarr.json`` documents first, in key order, then the rest; a document written
        back as it was read is not put. Raises :class:`CommitConflict` when the first
        put finds its object changed (nothing was put); a later conflict, unless the
        object now holds what this would put, raises :class:`~shardwise.errors.ConflictError` naming
        what was put already. Returns the keys put."""
        # arrays' documents first (the first put must be a conditional one, of what
        # the try read), then the groups' and the other metadata, then the rest
        skipped = set(skip)
        keys = sorted(
            (k for k in self._written if k not in skipped),
            key=lambda k: (_rank(k, self._written[k]), k),
        )
        done: list[str] = []
        for key in keys:
            data = self._written[key].to_bytes()
            read = self._snapshot.get(key)
            if _leaf(key) == "zarr.json" and read is not None and not consolidation:
                # a group's consolidated metadata stays as it was read (a try runs
                # without it; it is brought up to date once the data is written)
                data = _keep_consolidated(data, read) or data
                if _same_json(read, data):
                    continue  # written back unchanged (xarray rewrites a group's attributes)
            # (an object the try never read was written whole, whatever it held: a
            # plain put; zarr-python reads what it merges into, and checks what it
            # creates, so those are conditional)
            expected = self._versions.get(key)
            if expected is not None and _leaf(key) in _METADATA:
                data = distinct(data)  # (never taken for another job's put of the same)
            advice = (
                "Nothing of this append was written; run it again."
                if not done
                else f"{', '.join(map(repr, done))} were written already: check the arrays' "
                "lengths along the append dimension, trim the longer ones "
                "(zarr.open_array(...).resize(...)) and run the append again."
            )
            with _naming(self.prefix + key, advice):
                stored = self.guard.put(self.prefix + key, data, expected)
            if stored:
                done.append(key)
                continue
            if not done:
                raise CommitConflict(key)
            if self._settle(key, data):
                done.append(key)
                continue
            raise ConflictError(
                "another job changed an object of this write's metadata while it was "
                "being committed",
                expected="the objects unchanged since they were read",
                found=f"{key!r} changed, after {', '.join(map(repr, done))} were written",
                key=key,
                advice="Another job appended at the same moment. Check the arrays' "
                "lengths along the append dimension and run the append again.",
            )
        if self._deleted_prefixes:  # (an append deletes no folder)
            raise AssertionError("a guarded commit of deleted folders")
        for key in sorted(self._deleted_keys):
            self.guard.delete(self.prefix + key)
            done.append(key)
        return done

    def _settle(self, key: str, data: bytes) -> bool:
        """After the first put of a commit, ``key`` was found changed by another job:
        True when what this commit puts there is settled anyway: the object holds it
        already, or (a group's ``zarr.json``, which other jobs rewrite with their
        consolidated metadata) it was put again over the current document, keeping that
        document's consolidated metadata, which the consolidation after the commit
        brings up to date."""
        for _ in range(100):
            current, version = self.guard.get(self.prefix + key)
            if current is not None and bytes(current) == data:
                return True
            merged = _keep_consolidated(data, current)
            if merged is None and self._rebase is not None:
                now = None if current is None else bytes(current)
                merged = self._rebase(data, self._snapshot.get(key), now)
            if merged is None:
                return False
            if merged == (None if current is None else bytes(current)):
                return True
            if self.guard.put(self.prefix + key, merged, version):
                return True
        return False


def _naming(key: str, advice: str) -> contextlib.AbstractContextManager[None]:
    return naming_metadata_errors("an append's metadata step", key, advice)


_ARRAY_DOCUMENTS = (".zarray",)
_METADATA = ("zarr.json", ".zarray", ".zattrs", ".zgroup", ".zmetadata")


def _leaf(key: str) -> str:
    return key.rsplit("/", 1)[-1]


def _rank(key: str, value: Buffer) -> int:
    """Where a written object goes in a commit: 0 an array's metadata document, 1 any
    other metadata document (a group's, attributes), 2 the rest (chunks)."""
    leaf = _leaf(key)
    if leaf in _ARRAY_DOCUMENTS:
        return 0
    if leaf == "zarr.json":
        return 0 if _node_type(value.to_bytes()) == "array" else 1
    return 1 if leaf in _METADATA else 2


def _node_type(document: bytes) -> Any:
    doc = node_document(document)
    return None if doc is None else doc.get("node_type")


def without_consolidated(document: bytes) -> bytes:
    """A group's ``zarr.json`` without its consolidated metadata (any other document as
    it is)."""
    import json

    metadata = node_document(document, "group")
    if metadata is None or metadata.pop("consolidated_metadata", None) is None:
        return document
    return json.dumps(metadata, indent=2).encode()


def _same_json(a: bytes, b: bytes) -> bool:
    """Whether two JSON documents hold the same values (however laid out)."""
    import json

    if a == b:
        return True
    try:
        return bool(json.loads(a) == json.loads(b))
    except ValueError:
        return False


def _keep_consolidated(ours: bytes, current: Any) -> bytes | None:
    """A group's ``zarr.json`` as this commit writes it, with the consolidated metadata
    of the ``current`` one in place of its own (None when either is no group
    document)."""
    import json

    mine = node_document(ours, "group")
    theirs = node_document(current, "group")
    if mine is None or (current is not None and theirs is None):
        return None
    mine.pop("consolidated_metadata", None)
    if theirs is not None and "consolidated_metadata" in theirs:  # (null: zarr 3.1's none)
        mine["consolidated_metadata"] = theirs["consolidated_metadata"]
    return json.dumps(mine, indent=2).encode()
