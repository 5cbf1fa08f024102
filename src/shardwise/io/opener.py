"""Opening a store: whatever the user passed (a local path, a URL, a zarr-python
``Store``, ``StorePath``, or an Icechunk session) as zarr-python's ``Store`` and a path
in it, and which format is there (Zarr v3, Zarr v2, the 2022 sharding draft). Apart
because every entry point opens stores (the reader, the hierarchy walk, the xarray
engine, the writers, ``verify``, ``migrate``, ``reshard``) and each should open them the
same way: :func:`store_path` is the one call of zarr-python's ``make_store_path`` and
:func:`open_store` the one place the format is worked out.

What the formats look like at a path ``p`` of a store whose own path is ``r``:

- the 2022 draft: a ``r/zarr.json`` whose ``zarr_format`` is the draft protocol URI
  (:data:`DRAFT_FORMAT`); the whole store is a draft store, whatever ``p`` is
  (:mod:`shardwise.io.draft` reads it);
- Zarr v3: a ``r/p/zarr.json`` (of an array or a group);
- Zarr v2: a ``r/p/.zgroup`` or ``r/p/.zarray``.

Opening reads as little as it can: the root document first (one request, which is all
a v3 or draft store at its root needs), then one existence check per document looked
for. It reads no metadata beyond telling formats apart.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from zarr.abc.store import Store

import shardwise._compat as _compat
from shardwise.format.metadata import metadata_key
from shardwise.io.capabilities import beneath, conditional, session_store
from shardwise.io.exit import watch
from shardwise.io.versioned import Conditional

__all__ = [
    "conditional_path",
    "DRAFT",
    "DRAFT_FORMAT",
    "FORMATS",
    "V2",
    "V3",
    "Opened",
    "has_zarr_json",
    "is_draft_root",
    "open_store",
    "readable",
    "store_path",
    "v3_first",
    "web_store",
]

V3 = "Zarr v3"
V2 = "Zarr v2"
DRAFT = "2022 sharding draft"
FORMATS = (V3, V2, DRAFT)
"""The formats shardwise reads, as messages and reports name them."""

DRAFT_FORMAT = "https://purl.org/zarr/spec/protocol/core/3.0"
"""The ``zarr_format`` of the root document of a store of the 2022 draft."""


def is_draft_root(raw: bytes | None) -> bool:
    """Whether a root ``zarr.json`` is the draft's entry point document."""
    if raw is None:
        return False
    try:
        doc = json.loads(raw)
    except (UnicodeDecodeError, ValueError):
        return False
    return isinstance(doc, dict) and doc.get("zarr_format") == DRAFT_FORMAT


def store_path(
    store: Any,
    storage_options: dict[str, Any] | None = None,
    *,
    mode: Literal["r", "r+", "a", "w", "w-"] = "r",
) -> Any:
    """zarr-python's ``StorePath`` (a ``Store`` and a path in it) for ``store``, a path,
    URL, ``Store``, ``StorePath`` or ``icechunk.Session`` (its store), opened as
    ``zarr.open`` would with ``mode`` (``"r"``: read-only; ``"r+"``, ``"a"``, ``"w"``,
    ``"w-"``: writable). ``FileNotFoundError`` when a local path does not exist and
    ``mode`` is ``"r"``. A writable ``Store`` with no read-only copy (``with_read_only``:
    zarr 3.1's ``WrapperStore`` and ``LoggingStore``, stores of other packages) is read
    through as it is, where ``make_store_path`` would refuse it in mode ``"r"``."""
    target = session_store(store)
    if mode == "r":
        target = readable(web_store(target, storage_options))
    found = _compat.sync(
        _compat.make_store_path(target, mode=mode, storage_options=storage_options)
    )
    watch(beneath(found.store))  # (a process that used obstore settles its threads at exit)
    return found


def web_store(target: Any, storage_options: dict[str, Any] | None = None) -> Any:
    """An ``http://`` or ``https://`` URL as obstore's ``HTTPStore`` in zarr-python's
    ``ObjectStore`` (read-only) when obstore is installed and ``storage_options`` is None;
    anything else unchanged (zarr-python opens a URL with fsspec's HTTP file system,
    which is what ``storage_options``, even ``{}``, asks for). The two read the same
    bytes under the same conditions (ETags); fsspec's needs aiohttp, whose import alone
    costs a fresh process 0.2 s, ten round trips of a remote store. Neither lists a
    folder of a plain web server (obstore asks WebDAV's ``PROPFIND``, fsspec reads the
    HTML index page a server may give): data without consolidated metadata is read over
    HTTP only through fsspec (``storage_options={}``) from a server that gives index
    pages."""
    if storage_options is not None or not isinstance(target, str):
        return target
    scheme = target.partition("://")[0].lower()
    if scheme not in ("http", "https"):
        return target
    try:
        from obstore.store import HTTPStore
    except ImportError:
        return target
    from zarr.storage import ObjectStore

    http = HTTPStore.from_url(target, client_options={"allow_http": scheme == "http"})
    return ObjectStore(http, read_only=True)


def v3_first[T](opener: Callable[..., T], **kwargs: Any) -> T:
    """``opener(**kwargs)`` (zarr-python's ``open_array`` or ``open_group``, or xarray's
    ``ZarrStore.open_group``) asked for Zarr v3 first when no ``zarr_format`` is given,
    then for either format if there is no v3 node: zarr-python asks for the documents of
    both formats at once (``zarr.json``, ``.zarray`` or ``.zgroup``, ``.zattrs``, and
    ``.zmetadata`` for a group), four requests where sharded data, always v3, needs one.
    A v2 node costs one round trip more."""
    if kwargs.get("zarr_format") is not None:
        return opener(**kwargs)
    try:
        return opener(**{**kwargs, "zarr_format": 3})
    except FileNotFoundError:
        return opener(**kwargs)


def readable(store: Any) -> Any:
    """``store`` as ``mode="r"`` reads it, asking the store once: a writable zarr-python
    ``Store``'s read-only copy (``with_read_only``), or, for one that cannot make one
    (zarr 3.1's ``WrapperStore`` and ``LoggingStore``, stores of other packages), the
    store itself in a ``StorePath``, which zarr-python reads as it is where it would
    refuse the store in mode ``"r"``. Anything else (a path, a URL, a read-only store, a
    ``StorePath``) unchanged."""
    from zarr.storage import StorePath

    if not isinstance(store, Store) or store.read_only:
        return store
    try:
        return store.with_read_only(True)
    except NotImplementedError:
        return StorePath(store)


@dataclass(frozen=True, slots=True)
class Opened:
    """A store opened read-only: ``store`` (zarr-python's ``Store``), ``root`` (the
    store's own path in it: where a draft store starts) and ``path`` (the node asked
    for, below ``root``: the full path in ``store``); both without slashes at the ends,
    ``""`` for the store's root. ``format`` is one of :data:`FORMATS`, or None when no
    Zarr metadata is at ``path``; ``document`` the name of the document that told
    (``"zarr.json"``, ``".zgroup"`` or ``".zarray"``; ``"zarr.json"`` at ``root`` for a
    draft store)."""

    store: Any
    root: str
    path: str
    format: str | None
    document: str | None

    @property
    def prefix(self) -> str:
        """``root`` as a key prefix (``"a/b/"``, or ``""``): where a draft store's keys
        start."""
        return f"{self.root}/" if self.root else ""


def has_zarr_json(store: Any, storage_options: dict[str, Any] | None = None) -> bool:
    """Whether a ``zarr.json`` lies at ``store``'s own path (one existence check): what a
    writer asks of its destination before ``mode="w-"`` refuses it. False when
    ``store`` is a local path that does not exist."""
    try:
        where = store_path(store, storage_options)
    except FileNotFoundError:
        return False
    exists: bool = _compat.sync(where.store.exists(metadata_key(where.path)))
    return exists


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


def open_store(
    store: Any,
    storage_options: dict[str, Any] | None = None,
    *,
    group: str | None = None,
    draft_only: bool = False,
) -> Opened | None:
    """Open ``store`` (a path, URL, zarr ``Store``, ``StorePath`` or Icechunk session)
    read-only and work
    out the format of the node at ``group`` in it (the store's own root when None). None
    when ``store`` is a local path that does not exist. ``draft_only``: only whether it
    is a draft store (one read of the root document; ``format`` None otherwise), for
    callers that ask nothing else."""
    try:
        where = store_path(store, storage_options)
    except FileNotFoundError:
        return None
    root = where.path.strip("/")
    path = "/".join(p for p in (root, (group or "").strip("/")) if p)
    found = _compat.sync(_format_at(where.store, root, path, draft_only))
    return Opened(where.store, root, path, *found)


async def _format_at(
    store: Any, root: str, path: str, draft_only: bool = False
) -> tuple[str | None, str | None]:
    """``(format, document)`` of the node at ``path`` of a store starting at ``root``."""
    from zarr.buffer import default_buffer_prototype

    buf = await store.get(metadata_key(root), prototype=default_buffer_prototype())
    raw = None if buf is None else buf.to_bytes()
    if is_draft_root(raw):
        return DRAFT, "zarr.json"
    if draft_only:
        return None, None
    if path == root and raw is not None:
        return V3, "zarr.json"
    under = f"{path}/" if path else ""
    for name, kind in (("zarr.json", V3), (".zgroup", V2), (".zarray", V2)):
        if (name != "zarr.json" or path != root) and await store.exists(under + name):
            return kind, name
    return None, None
