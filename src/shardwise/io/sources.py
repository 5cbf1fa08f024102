"""The arrays and groups of a store of any kind shardwise reads: Zarr v3 (sharded or
not, regular or rectilinear grids), Zarr v2, and stores of the 2022 sharding draft.

:func:`open_source` walks a hierarchy once and gives every array as an
:class:`~shardwise.format.metadata.ArrayInfo` (a :class:`~shardwise.format.v2.V2ArrayInfo` or
:class:`~shardwise.io.draft.DraftArrayInfo` for the older formats) whose ``key`` names
its objects in the store, so the reader, ``inventory`` and ``reshard`` treat the kinds
alike. Arrays shardwise cannot read (strings, objects) are listed with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import shardwise._compat as _compat
from shardwise._flags import rectilinear_grids
from shardwise.errors import NotAZarrStoreError, ShardwiseError
from shardwise.format.metadata import PARSE_ERRORS, ArrayInfo, parse_document
from shardwise.format.names import node_name, node_path
from shardwise.format.v2 import array_info as v2_info
from shardwise.format.v2 import parse_documents
from shardwise.io.draft import DraftStore
from shardwise.io.listing import list_names
from shardwise.io.opener import DRAFT, FORMATS, V2, V3, open_store, store_path
from shardwise.io.stores import metadata_error

__all__ = ["Source", "draft_source", "open_source"]

KINDS = FORMATS
"""The kinds of store a :class:`Source` is (:data:`shardwise.io.opener.FORMATS`)."""


@dataclass
class Source:
    """A store's hierarchy from ``base`` down. Paths in ``groups``, ``arrays`` and
    ``unreadable`` are relative to ``base`` (``""`` is ``base`` itself); each
    ``ArrayInfo.path`` is the array's full path in ``store``.

    ``unreadable`` holds, for each array (or node) shardwise cannot read, the error
    naming it, its document and what is wrong; the rest of the hierarchy is listed
    all the same. ``damaged`` are the paths among them whose documents no reader can
    open (not JSON, not valid metadata, an unknown codec; for a store of the 2022
    draft, which only shardwise reads, every one): zarr-python cannot copy those either,
    unlike the arrays it reads and shardwise does not (strings, objects)."""

    kind: str
    store: Any  # zarr-python Store
    base: str  # the group walked, inside the store ("" for the root)
    groups: dict[str, dict[str, Any]] = field(default_factory=dict)  # path -> attributes
    arrays: dict[str, ArrayInfo] = field(default_factory=dict)
    unreadable: dict[str, ShardwiseError] = field(default_factory=dict)
    damaged: set[str] = field(default_factory=set)

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
    """Walk the hierarchy under ``group`` of ``store`` (a path, URL or zarr ``Store``).

    Every node name found is checked (:mod:`shardwise.format.names`): a store holding a name
    that could reach outside its root (``..``, an empty name, a backslash...) is refused
    with :class:`~shardwise.errors.UnsafeNameError` naming it and where it was found, and
    so is a ``group`` breaking the same rules. A damaged document of an array or group
    below ``group`` goes into ``unreadable`` (and ``damaged``); the root's own document
    damaged is a refusal naming it."""
    import zarr

    base = node_path((group or "").strip("/"))
    opened = open_store(store, storage_options)
    if opened is not None and opened.format == DRAFT:
        return draft_source(DraftStore(opened.store, opened.prefix), base)

    try:
        with rectilinear_grids():
            root = zarr.open_group(
                store, path=base, mode="r", storage_options=storage_options, use_consolidated=False
            )
    except (FileNotFoundError, *PARSE_ERRORS) as e:
        if not isinstance(e, FileNotFoundError):
            named = _root_problem(store, base, storage_options, e)
            if named is not e:
                raise named from e
        raise NotAZarrStoreError(
            "no Zarr group here",
            expected="a Zarr v3 zarr.json, a Zarr v2 .zgroup, or a store of the 2022 draft",
            found=f"{type(e).__name__}: {e}",
            array=base or "/",
            key=_join(base, "zarr.json") or "zarr.json",
            advice="Check the path and group; for one array give its parent group.",
        ) from e
    fmt = root.metadata.zarr_format
    src = Source(V3 if fmt == 3 else V2, root.store_path.store, root.store_path.path)
    src.groups[""] = dict(root.attrs)
    _walk(src, fmt)
    return src


def draft_source(draft: DraftStore, base: str = "") -> Source:
    """The hierarchy under ``base`` (a checked path) of the draft store ``draft``, walked
    breadth first (a group's attributes, its groups, its arrays' documents): the
    groups and arrays in that order. A damaged document of an array or group below
    ``base`` goes into ``unreadable`` (and ``damaged``); ``base``'s own is a refusal.
    Apart from :func:`open_source` for ``migrate``, which opens the draft store itself
    (to refuse other kinds of store in its own words) and walks it with one open."""

    src = Source(DRAFT, draft.store, _join(draft.prefix, base))
    todo = [base]
    while todo:
        g = todo.pop(0)
        rel = g[len(base) :].strip("/")
        try:
            src.groups[rel] = draft.group_attributes(g)
        except ShardwiseError as e:
            if not rel:
                raise  # the group asked for: a refusal naming its document
            src.unreadable[rel] = e  # its members are listed all the same
            src.damaged.add(rel)
        todo += [_join(g, c) for c in draft.groups(g)]
        for name in draft.arrays(g):
            path = _join(g, name)
            try:
                src.arrays[src.relative(_join(draft.prefix, path))] = draft.info(path)
            except ShardwiseError as e:
                rel = path[len(base) :].strip("/")
                src.unreadable[rel] = e
                src.damaged.add(rel)
    return src


def _root_problem(
    store: Any, base: str, storage_options: dict[str, Any] | None, error: BaseException
) -> BaseException:
    """The error naming the document of the group at ``base`` that zarr-python failed
    to read with ``error`` (its ``zarr.json``, or its Zarr v2 ``.zgroup`` or
    ``.zattrs``), or ``error`` itself when every document reads."""
    from zarr.buffer import default_buffer_prototype

    named = metadata_error(store, base, error, storage_options=storage_options)
    if named is not error:
        return named
    try:
        where = store_path(store, storage_options)
        full = _join(where.path, base)
        docs = [
            _compat.sync(where.store.get(_join(full, n), prototype=default_buffer_prototype()))
            for n in (".zarray", ".zgroup", ".zattrs")
        ]
        parse_documents(full, *(None if d is None else d.to_bytes() for d in docs))
    except ShardwiseError as problem:
        return problem
    except Exception:  # looking for the culprit must not hide the error itself
        return error
    return error


# what a child of a group is: ("group", attributes), ("array", ArrayInfo),
# ("unreadable", error) or ("damaged", error: its documents cannot be read at all)
_Node = tuple[str, Any]

_DOCUMENTS = {3: ("zarr.json",), 2: (".zattrs", ".zgroup", ".zarray", ".zmetadata")}


def _walk(src: Source, fmt: int) -> None:
    """List the hierarchy below ``src.base`` into ``src``, one level at a time (the
    listings of a level, then the documents of their children, concurrently)."""

    _compat.sync(_walk_async(src, fmt))


async def _walk_async(src: Source, fmt: int) -> None:
    import asyncio

    import zarr

    limit = asyncio.Semaphore(int(zarr.config.get("async.concurrency") or 10))
    found: dict[str, _Node] = {}
    level = [""]
    while level:
        listings = await asyncio.gather(
            *(_children(src.store, _join(src.base, g), fmt, limit) for g in level)
        )
        children = [
            _join(g, name) for g, names in zip(level, listings, strict=True) for name in names
        ]
        nodes = await asyncio.gather(
            *(_node(src.store, _join(src.base, rel), fmt, limit) for rel in children)
        )
        level = []
        for rel, node in zip(children, nodes, strict=True):
            if node is not None:
                found[rel] = node
                if node[0] == "group":
                    level.append(rel)
    for rel, (what, value) in sorted(found.items()):
        if what == "group":
            src.groups[rel] = value
        elif what == "array":
            src.arrays[rel] = value
        else:
            src.unreadable[rel] = value
            if what == "damaged":
                src.damaged.add(rel)


async def _children(store: Any, full: str, fmt: int, limit: Any) -> list[str]:
    """The names listed directly under the group at ``full`` (its own documents left
    out), each checked against the node-name rules."""

    under = f"{full}/" if full else ""
    async with limit:
        names = await list_names(store, full)
    return sorted(
        node_name(name, document=f"{under}{name}") for name in names if name not in _DOCUMENTS[fmt]
    )


async def _node(store: Any, full: str, fmt: int, limit: Any) -> _Node | None:
    """What is at ``full`` (a checked path): ``("group", attributes)``, ``("array",
    info)``, ``("unreadable", error)``, ``("damaged", error)``, or None when it holds no
    Zarr node (a stray object)."""
    import asyncio

    from zarr.buffer import default_buffer_prototype

    proto = default_buffer_prototype()

    async def get(key: str) -> bytes | None:
        async with limit:
            buf = await store.get(key, prototype=proto)
        return None if buf is None else buf.to_bytes()

    try:
        if fmt == 3:
            key = f"{full}/zarr.json"
            raw = await get(key)
            metadata = None if raw is None else parse_document(raw, key)
        else:
            docs = await asyncio.gather(
                *(get(f"{full}/{n}") for n in (".zarray", ".zgroup", ".zattrs"))
            )
            metadata = parse_documents(full, *docs)
    except ShardwiseError as e:
        return ("damaged", e)
    if metadata is None:
        return None
    if isinstance(metadata, _compat.GroupMetadata):
        return ("group", dict(metadata.attributes))
    try:
        if fmt == 2:
            return ("array", v2_info(metadata, full))
        return ("array", ArrayInfo.from_metadata(metadata, full))
    except ShardwiseError as e:
        return ("unreadable", e)
