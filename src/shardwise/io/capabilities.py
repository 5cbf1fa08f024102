"""What a store can do: every question shardwise asks of a store, answered in one place.

shardwise reads and writes through zarr-python's store methods (``get``, ``set``,
``list_prefix``...). Some of its work goes past them, where the store allows it:

========================  ==============================================================
:func:`conditional`       puts made only if the object is the version that was read,
                          and reads that say which version they read (the guard of
                          independent jobs: :mod:`shardwise.io.conditional`)
:func:`local_root`        the folder whose files are the store's keys: a shard read
                          straight from its file, on the reading thread
:func:`sync_io`           zarr-python's synchronous ``get_sync``/``set_sync``/
                          ``delete_sync`` (zarr >= 3.3), called without a hop to zarr's
                          event loop
:func:`copies_out`        whether ``set`` is done with the bytes when it returns: a
                          shard handed over in the builder's reused memory
:func:`fsspec_store`,     the fsspec or obstore store below: listings with sizes,
:func:`obstore_of`        where a store is, what a URL names
:func:`in_memory`         whether the store has no location (tokens, overlap checks)
:func:`icechunk_session`, Icechunk sessions: writes through forks, and reads of a
:func:`immutable`         snapshot that cannot change (no version check needed)
========================  ==============================================================

The answers rest on zarr-python's public store classes (``LocalStore``, ``MemoryStore``,
``FsspecStore``, ``ObjectStore``, ``WrapperStore``) and its synchronous store protocol.
A store class is taken for what it is only where the methods the answer goes past are
that class's own: a subclass that changes ``get`` is read through ``get``.

**Wrapper stores answer through the store they wrap** (zarr-python's ``WrapperStore``
and ``LoggingStore``, and any subclass of them) wherever they pass the methods an answer
goes past on unchanged: a ``WrapperStore`` that does not override them, or a
``LoggingStore``, which only records them. A wrapper that changes what those methods do
(a cache, an overlay) is taken as a store of its own, with only zarr-python's methods.

A store class of another package (or a wrapper that counts or delays requests, as
``shardwise.testing``'s do) can give its own conditional reads and puts by implementing
:class:`SupportsConditional`.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from shardwise.errors import WriteError
from shardwise.io.azure_blob import AdlfsConditional
from shardwise.io.cloud import ObstoreConditional, S3fsConditional
from shardwise.io.conditional import LocalConditional, MemoryConditional
from shardwise.io.exit import watch
from shardwise.io.gcs import GcsfsConditional
from shardwise.io.http import HttpConditional
from shardwise.io.requests import Kind
from shardwise.io.versioned import Conditional

__all__ = [
    "SupportsConditional",
    "beneath",
    "conditional",
    "copies_out",
    "fsspec_store",
    "icechunk_session",
    "immutable",
    "in_memory",
    "local_root",
    "obstore_local_root",
    "obstore_of",
    "session_store",
    "sync_io",
]

DATA = ("get", "set", "delete")  # what a conditional read or put goes past


@runtime_checkable
class SupportsConditional(Protocol):
    """A store that gives its own conditional reads and puts (see
    :mod:`shardwise.io.conditional`): a :class:`~shardwise.io.versioned.Conditional`,
    or None when it has none. Asked before anything else, so a wrapper store can pass on
    what it wraps (``shardwise.io.capabilities.conditional(self._store)``) with its own
    counting or delay around it, or say None for a store whose objects must not be
    written past its ``set``."""

    def shardwise_conditional(self) -> Conditional | None: ...


def _own(store: Any, base: type, methods: Sequence[str]) -> bool:
    """Whether ``store`` is a ``base`` whose ``methods`` are ``base``'s own."""
    cls = type(store)
    return isinstance(store, base) and all(
        getattr(cls, m, None) is getattr(base, m, None) for m in methods
    )


def beneath(store: Any, methods: Sequence[str] = ()) -> Any:
    """The store that does ``methods`` for ``store``: ``store`` itself, or, through
    zarr-python wrapper stores that pass those methods on unchanged (see the module's
    description), the store they wrap. With no ``methods``, below every wrapper: where
    the data lies."""
    from zarr.storage import LoggingStore, WrapperStore

    while isinstance(store, WrapperStore) and (
        not methods or isinstance(store, LoggingStore) or _own(store, WrapperStore, methods)
    ):
        store = store._store
    return store


def local_root(store: Any, methods: Sequence[str] = ("get",)) -> Path | None:
    """The folder of a zarr-python ``LocalStore`` (below wrappers that pass ``methods``
    on unchanged) whose ``methods`` are its own: what they do may be done on its files
    directly. None for any other store."""
    from zarr.storage import LocalStore

    found = beneath(store, methods)
    return Path(found.root) if _own(found, LocalStore, methods) else None


def copies_out(store: Any) -> bool:
    """Whether ``store.set`` is done with the bytes it is given once it returns (it
    writes them out and keeps no reference): a zarr-python ``LocalStore``'s, through
    wrappers that pass ``set`` on. Other stores may keep the buffer they were given."""
    return local_root(store, ("set",)) is not None


def sync_io(store: Any) -> bool:
    """Whether to call ``store``'s synchronous ``get_sync``/``set_sync``/
    ``delete_sync`` (zarr-python's ``SupportsSyncStore``, zarr >= 3.3) in place of its
    async methods: where the store says it can, and each synchronous method does what
    its async one does: it is defined by the same class or one below it (a wrapper that
    overrides ``get`` but inherits ``WrapperStore.get_sync`` would be gone past)."""
    import zarr.abc.store as abc

    supports = getattr(abc, "_store_supports_sync_io", None)
    if supports is None or not supports(store):
        return False
    mro = type(store).__mro__
    for name in DATA:
        defines_sync = _defined_in(mro, f"{name}_sync")
        defines = _defined_in(mro, name)
        if defines_sync is None or defines is None or not issubclass(defines_sync, defines):
            return False
    return True


def _defined_in(mro: tuple[type, ...], name: str) -> type | None:
    return next((cls for cls in mro if name in vars(cls)), None)


def in_memory(store: Any) -> bool:
    """Whether ``store`` (below every wrapper) is a zarr-python ``MemoryStore``: it has no
    location, only its identity."""
    from zarr.storage import MemoryStore

    return isinstance(beneath(store), MemoryStore)


def store_kind(store: Any) -> Kind:
    """Where ``store``'s requests go: ``"network"`` (object stores, HTTP(S): each
    request waits a round trip, and many together make the bandwidth), ``"disk"``
    (local and shared file systems, zip files, and stores shardwise cannot tell) or
    ``"memory"``. What bounds its requests in flight and whether they are hedged
    (:mod:`shardwise.io.requests`)."""
    if in_memory(store):
        return "memory"
    if local_root(store) is not None:
        return "disk"
    fs = fsspec_store(store)
    if fs is not None:
        protocol = fs.fs.protocol
        protocols = {protocol} if isinstance(protocol, str) else set(protocol)
        if protocols & {"memory"}:
            return "memory"
        return "disk" if protocols & {"file", "local"} else "network"
    ob = obstore_of(store)
    if ob is not None:
        if obstore_local_root(ob) is not None:
            return "disk"
        module = sys.modules.get("obstore.store")
        memory = getattr(module, "MemoryStore", None)
        return "memory" if memory is not None and isinstance(ob, memory) else "network"
    return "disk"


def fsspec_store(store: Any, methods: Sequence[str] = ()) -> Any:
    """The zarr-python ``FsspecStore`` below ``store`` (through wrappers that pass
    ``methods`` on unchanged; with none, below every wrapper), else None."""
    from zarr.storage import FsspecStore

    found = beneath(store, methods)
    return found if _own(found, FsspecStore, methods) else None


def obstore_of(store: Any, methods: Sequence[str] = ()) -> Any:
    """The obstore store that a zarr-python ``ObjectStore`` below ``store`` (through
    wrappers that pass ``methods`` on unchanged) wraps, else None."""
    from zarr.storage import ObjectStore

    found = beneath(store, methods)
    return found.store if _own(found, ObjectStore, methods) else None


def obstore_local_root(obstore: Any) -> Path | None:
    """The directory of an obstore ``LocalStore`` (None for obstore's other stores):
    obstore's local store has no versioned put, so its files are handled as local
    files."""
    module = sys.modules.get("obstore.store")
    local = getattr(module, "LocalStore", None)
    if local is None or not isinstance(obstore, local):
        return None
    prefix = getattr(obstore, "prefix", None)
    return Path(str(prefix or "/"))  # (no prefix: keys are paths from the root)


def conditional(store: Any) -> Conditional | None:
    """The conditional reads and puts of a zarr-python store, or None when it has none
    (see :mod:`shardwise.io.conditional`): the store's own
    (:class:`SupportsConditional`), else by what lies below the wrappers that pass
    ``get``, ``set`` and ``delete`` on unchanged: local files (zarr-python's or
    obstore's), memory, S3 through an asynchronous s3fs, Google Cloud Storage through
    an asynchronous gcsfs, Azure Blob Storage through an asynchronous adlfs, HTTP(S)
    servers through fsspec's HTTP file system (reads only), or obstore's object stores."""
    from zarr.storage import MemoryStore

    watch(beneath(store))  # (a process that used obstore settles its threads at exit)
    if isinstance(store, SupportsConditional):
        return store.shardwise_conditional()
    found = beneath(store, DATA)
    if found is not store:
        return conditional(found)
    root = local_root(store, DATA)
    if root is not None:
        return LocalConditional(root)
    if _own(store, MemoryStore, DATA):
        return MemoryConditional(store)
    fsspec = fsspec_store(store, DATA)
    if fsspec is not None:
        fs = fsspec.fs
        s3fs = sys.modules.get("s3fs")
        if (
            s3fs is not None
            and isinstance(fs, s3fs.S3FileSystem)
            and getattr(fs, "asynchronous", False)
        ):
            return S3fsConditional(fsspec)
        if getattr(fs, "asynchronous", False):
            # (gcsfs.core's class: gcsfs.GCSFileSystem may be its experimental subclass,
            # and fsspec may hand out either)
            gcsfs, adlfs = sys.modules.get("gcsfs.core"), sys.modules.get("adlfs")
            if gcsfs is not None and isinstance(fs, gcsfs.GCSFileSystem):
                return GcsfsConditional(fsspec)
            if adlfs is not None and isinstance(fs, adlfs.AzureBlobFileSystem):
                return AdlfsConditional(fsspec)
            http = sys.modules.get("fsspec.implementations.http")
            if http is not None and isinstance(fs, http.HTTPFileSystem):
                return HttpConditional(fsspec)
        return None
    obstore = obstore_of(store, DATA)
    if obstore is not None:
        local = obstore_local_root(obstore)
        return LocalConditional(local) if local is not None else ObstoreConditional(obstore)
    return None


# -- Icechunk -------------------------------------------------------------------------------------
# (icechunk is not imported here: an Icechunk object exists only once it was imported)
def _icechunk(name: str) -> type | None:
    found = getattr(sys.modules.get("icechunk"), name, None)
    return found if isinstance(found, type) else None


def _is(store: Any, name: str) -> bool:
    cls = _icechunk(name)
    return cls is not None and isinstance(store, cls)


def icechunk_session(store: Any) -> Any:
    """The ``icechunk.Session`` that ``store`` is (or whose ``.store`` it is), else None;
    a fork session is refused (:class:`~shardwise.errors.WriteError`): the write forks
    the session itself."""
    if _is(store, "IcechunkStore"):
        return store.session
    if _is(store, "ForkSession"):
        raise WriteError(
            "a fork session was given",
            expected="the icechunk.Session the fork came from (or its store)",
            found="an icechunk ForkSession",
            advice="Pass the writable session: shardwise forks it and merges the changes "
            "back. Nothing was written.",
        )
    if _is(store, "Session"):
        return store
    return None


def session_store(store: Any) -> Any:
    """The zarr-python store of ``store`` when it is an ``icechunk.Session`` (its
    ``.store``); anything else unchanged (an ``IcechunkStore`` is a store already).
    Unlike :func:`icechunk_session` it refuses nothing: a read needs no writable
    session."""
    if _is(store, "Session") and not _is(store, "ForkSession"):
        return store.store
    return store


def immutable(store: Any) -> bool:
    """Whether ``store``'s objects cannot change while it is read: the store of a
    read-only Icechunk session (``repo.readonly_session(...)``), whose objects are those
    of one snapshot. A writable session's store is not (its own writes change it)."""
    store = beneath(store, ("get",))
    if not _is(store, "IcechunkStore"):
        return False
    session = getattr(store, "session", None)
    return bool(getattr(session, "read_only", False))
