"""The arrays and groups of a store of any kind shardwise reads: Zarr v3 (sharded or
not, regular or rectilinear grids), Zarr v2, and stores of the 2022 sharding draft.

:func:`open_source` walks a hierarchy once and gives every array as an
:class:`~shardwise.metadata.ArrayInfo` (a :class:`~shardwise.v2.V2ArrayInfo` or
:class:`~shardwise.legacy.DraftArrayInfo` for the older formats) whose ``key`` names
its objects in the store, so the reader, ``inventory`` and ``reshard`` treat the kinds
alike. Arrays shardwise cannot read (strings, objects) are listed with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from shardwise.errors import NotAZarrStoreError, ShardwiseError
from shardwise.metadata import ArrayInfo

__all__ = ["Source", "open_source"]

KINDS = ("Zarr v3", "Zarr v2", "2022 sharding draft")


@dataclass
class Source:
    """A store's hierarchy from ``base`` down. Paths in ``groups``, ``arrays`` and
    ``unreadable`` are relative to ``base`` (``""`` is ``base`` itself); each
    ``ArrayInfo.path`` is the array's full path in ``store``."""

    kind: str
    store: Any  # zarr-python Store
    base: str  # the group walked, inside the store ("" for the root)
    groups: dict[str, dict[str, Any]] = field(default_factory=dict)  # path -> attributes
    arrays: dict[str, ArrayInfo] = field(default_factory=dict)
    unreadable: dict[str, ShardwiseError] = field(default_factory=dict)

    def relative(self, path: str) -> str:
        """``path`` (full, in the store) relative to ``base``."""
        path = path.strip("/")
        if self.base and (path == self.base or path.startswith(self.base + "/")):
            return path[len(self.base) :].strip("/")
        return path


def _join(*parts: str) -> str:
    return "/".join(p.strip("/") for p in parts if p.strip("/"))


def open_source(
    store: Any, group: str | None = None, storage_options: dict[str, Any] | None = None
) -> Source:
    """Walk the hierarchy under ``group`` of ``store`` (a path, URL or zarr ``Store``)."""
    import zarr

    from shardwise.legacy import DraftStore
    from shardwise.metadata import PARSE_ERRORS
    from shardwise.rectilinear import enabled
    from shardwise.v2 import array_info as v2_info

    base = (group or "").strip("/")
    draft = DraftStore.open(store, storage_options)
    if draft is not None:
        where = _join(draft.prefix, base)
        src = Source(KINDS[2], draft.store, where)
        todo = [base]
        while todo:
            g = todo.pop(0)
            src.groups[g[len(base) :].strip("/")] = draft.group_attributes(g)
            todo += [_join(g, c) for c in draft.groups(g)]
            for name in draft.arrays(g):
                path = _join(g, name)
                try:
                    src.arrays[src.relative(_join(draft.prefix, path))] = draft.info(path)
                except ShardwiseError as e:
                    src.unreadable[path[len(base) :].strip("/")] = e
        return src

    try:
        with enabled():
            root = zarr.open_group(
                store, path=base, mode="r", storage_options=storage_options, use_consolidated=False
            )
            members = list(root.members(max_depth=None))
    except (FileNotFoundError, *PARSE_ERRORS) as e:
        raise NotAZarrStoreError(
            "no Zarr group here",
            expected="a Zarr v3 zarr.json, a Zarr v2 .zgroup, or a store of the 2022 draft",
            found=f"{type(e).__name__}: {e}",
            array=base or "/",
            key=_join(base, "zarr.json") or "zarr.json",
            advice="Check the path and group; for one array give its parent group.",
        ) from e
    fmt = root.metadata.zarr_format
    src = Source(KINDS[0] if fmt == 3 else KINDS[1], root.store_path.store, root.store_path.path)
    src.groups[""] = dict(root.attrs)
    for _, node in sorted(members, key=lambda m: m[0]):
        rel = src.relative(node.path)
        if isinstance(node, zarr.Group):
            src.groups[rel] = dict(node.attrs)
            continue
        try:
            if node.metadata.zarr_format == 2:
                src.arrays[rel] = v2_info(node.metadata, node.path)
            else:
                src.arrays[rel] = ArrayInfo.from_metadata(node.metadata, node.path)
        except ShardwiseError as e:
            src.unreadable[rel] = e
    return src
