"""A write whose metadata lands after its data, so that a failure leaves nothing a
reader opens.

xarray's metadata step creates a Dataset's arrays (and writes its numpy variables)
before the dask data is written: a write that fails in between leaves arrays of fill
values that every reader opens as if they were data. :class:`StagedWrite` runs that step
on a copy-on-write view of the store (:class:`~shardwise.io.overlay.OverlayStore`) and
puts what it held in three steps around the data:

1. :meth:`StagedWrite.before_data`: what the step deleted (``mode="w"`` replaces the
   group), then the objects that are no metadata documents (the numpy variables'
   chunks and shards), which no reader finds without their documents;
2. the dask data, into arrays bound to the real store (:meth:`StagedWrite.bind`);
3. :meth:`StagedWrite.after_data`: the metadata documents, each node's after those
   below it (arrays before their group, the group at the write's path last), so that a
   reader that finds the group finds everything in it written.

When anything fails before the last document is put, :meth:`StagedWrite.undo` removes
the arrays the write created (as far as the store still answers): the store holds no
node the write made, and the same call can run again. Without transactions a store
cannot do better: ``mode="w"`` has removed the old group by then (removing it last would
leave old and new shards mixed), and arrays that existed are written in place.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import shardwise._compat as _compat
from shardwise.errors import naming_io_errors
from shardwise.format.metadata import node_document
from shardwise.io.opener import store_path
from shardwise.io.overlay import OverlayStore

__all__ = ["StagedWrite", "around_data", "metadata_order", "staged_write"]

_LEAF_ORDER = {".zattrs": 0, ".zarray": 1, "zarr.json": 1, ".zgroup": 2, ".zmetadata": 3}
"""Within a node's folder: attributes before the array or group document they belong
to, consolidated metadata last."""

_PUTS_AT_ONCE = 32


def _leaf(key: str) -> str:
    return key.rsplit("/", 1)[-1]


def _is_array_document(key: str, value: bytes) -> bool:
    leaf = _leaf(key)
    return leaf == ".zarray" or (leaf == "zarr.json" and node_document(value, "array") is not None)


def metadata_order(keys: Iterable[str]) -> list[str]:
    """Metadata documents in the order they are put: deeper folders first (an array's
    before its group's, a group's before its parent's), within a folder attributes, the
    node's document, then consolidated metadata."""
    return sorted(keys, key=lambda k: (-k.count("/"), _LEAF_ORDER[_leaf(k)], k))


class StagedWrite:
    """The staging of one write on ``base`` (zarr-python's ``StorePath`` of the real
    store). ``replaces``: the path in the store of the group the write replaces
    (``mode="w"``), which :meth:`undo` removes; ``existing``: the arrays (by path in the
    store) there before the write, which it leaves."""

    def __init__(
        self, base: Any, *, replaces: str | None = None, existing: Iterable[str] = ()
    ) -> None:
        self.base = base
        self.overlay = OverlayStore(base.store)
        self.replaces = replaces
        self.existing = set(existing)

    def view(self) -> Any:
        """The ``StorePath`` the metadata step runs on."""
        from zarr.storage import StorePath

        return StorePath(self.overlay, self.base.path)

    def bind(self, target: Any) -> Any:
        """A zarr array created on the view (``target``), on the real store: what the
        data step writes into (its metadata is not there yet)."""
        from zarr.storage import StorePath

        return _compat.array_with_metadata(
            target, target.metadata, StorePath(self.base.store, target.path)
        )

    # -- the puts around the data ------------------------------------------------------------
    def _metadata(self) -> dict[str, bytes]:
        return {k: v.to_bytes() for k, v in self.overlay.written.items() if _leaf(k) in _LEAF_ORDER}

    @functools.cached_property
    def _nodes(self) -> list[str]:
        """The folders of the nodes the metadata step wrote (once it has run), deepest
        first: where an error names the node of a key."""
        return sorted({k.rpartition("/")[0] for k in self._metadata()}, key=len, reverse=True)

    def before_data(self) -> None:
        """What the metadata step deleted, then what it wrote that is no metadata."""
        store = self.base.store
        prefixes, keys = self.overlay.deleted
        for prefix in prefixes:
            self._naming(prefix or "/", lambda p=prefix: store.delete_dir(p.rstrip("/")))
        for key in keys:
            self._naming(key, lambda k=key: store.delete(k))
        chunks = [(k, v) for k, v in self.overlay.written.items() if _leaf(k) not in _LEAF_ORDER]
        for start in range(0, len(chunks), _PUTS_AT_ONCE):
            batch = chunks[start : start + _PUTS_AT_ONCE]

            async def put_all(batch: list[tuple[str, Any]] = batch) -> None:
                await asyncio.gather(*(store.set(k, v) for k, v in batch))

            self._naming(batch[0][0], put_all)

    def after_data(self) -> None:
        """The metadata documents, in :func:`metadata_order`; then the view reads
        through to the real store (which holds everything now)."""
        store = self.base.store
        written = self.overlay.written
        for key in metadata_order(self._metadata()):
            self._naming(key, lambda k=key: store.set(k, written[k]))
        self.overlay.settle()

    def undo(self) -> list[str]:
        """After a failure: the folders of the arrays this write created removed (the
        group at ``base`` itself, when it replaced it), as far as the store answers.
        Returns what could not be removed."""
        store = self.base.store
        metadata = self._metadata()
        folders = sorted(
            {
                key.rpartition("/")[0]
                for key, value in metadata.items()
                if _is_array_document(key, value) and key.rpartition("/")[0] not in self.existing
            }
        )
        if self.replaces is not None:
            folders = [self.replaces]
        left = []
        for folder in folders:
            try:
                _compat.sync(store.delete_dir(folder))
            except Exception:  # (the store failing still: say what is left)
                left.append(folder or "/")
        return left

    def _naming(self, key: str, call: Any) -> None:
        """``call()`` run, a store's error naming ``key`` and the node it is in."""
        node = next((f for f in self._nodes if not f or key.startswith(f"{f}/")), "")
        with naming_io_errors(
            "writing a dataset",
            array=node or "/",
            key=key,
            advice="No reader sees this write yet: the metadata of the arrays it creates "
            "is put after their data. Run the write again.",
        ):
            _compat.sync(call())


def staged_write(
    store: Any,
    storage_options: Any,
    folder: str | None,
    *,
    replaces: bool,
    existing: Iterable[str] = (),
) -> StagedWrite:
    """The :class:`StagedWrite` of a write into ``folder`` (a group's or an array's path
    below ``store``'s own), which it ``replaces`` (``mode="w"``) or adds to, where the
    arrays named ``existing`` (below ``folder``) are."""
    base = store_path(store, storage_options, mode="a")
    where = "/".join(p for p in (base.path.strip("/"), (folder or "").strip("/")) if p)
    arrays = {f"{where}/{name}" if where else name for name in existing}
    return StagedWrite(base, replaces=where if replaces else None, existing=arrays)


@contextmanager
def around_data(staged: StagedWrite | None) -> Iterator[None]:
    """The block (a write's data step) between :meth:`StagedWrite.before_data` and
    :meth:`StagedWrite.after_data`; a failure anywhere undoes what the write created,
    and says so on the error. Nothing when ``staged`` is None."""
    if staged is None:
        yield
        return
    try:
        staged.before_data()
        yield
        staged.after_data()
    except BaseException as e:
        left = staged.undo()
        e.add_note(
            "shardwise: the arrays this write creates are not on the store: their "
            "metadata was to be put after their data"
            + (f" (could not remove {', '.join(left)}: remove them before reading)" if left else "")
            + ". Run the write again."
        )
        raise
