"""Byte I/O over zarr-python's ``Store`` API: options, range coalescing, where a store is
(overlap checks between a source and a destination) and naming the document that could
not be read. The per-process shard-index cache and the index channel are owned by
``shardwise.io.cache``, opening stores is ``shardwise.io.opener`` and listing them
``shardwise.io.listing``.

All requests are coroutines run on zarr-python's I/O event loop (``zarr.core.sync``), so
independent requests go out concurrently while the caller's thread does the decoding.
"""

from __future__ import annotations

import os
import uuid
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import shardwise._compat as _compat
from shardwise.errors import OverlapError, ShardwiseError, WriteError
from shardwise.format.metadata import metadata_key, read_document
from shardwise.format.rectilinear import Edges, grid_of
from shardwise.io.capabilities import (
    beneath,
    fsspec_store,
    in_memory,
    local_root,
    obstore_local_root,
    obstore_of,
)
from shardwise.io.listing import metadata_keys
from shardwise.io.opener import store_path

__all__ = [
    "ByteRange",
    "Location",
    "ReadOptions",
    "check_apart",
    "check_replaceable",
    "coalesce",
    "location",
    "metadata_error",
    "store_token",
    "write_grid",
]


@dataclass(frozen=True, slots=True)
class ReadOptions:
    """How shardwise turns a selection into store requests.

    Parameters
    ----------
    coalesce_gap : int, optional
        Two byte ranges of one shard separated by at most this many bytes are fetched
        with one request. None (default): over a network (object stores, HTTP), what one
        connection moves in a round trip, as this process's requests measured them
        (:func:`shardwise.io.requests.link`); 1 MiB elsewhere.
    coalesce_max : int, optional
        No coalesced request grows past this many bytes (a single inner chunk larger
        than this is still fetched whole): a large range goes as several requests at
        once, on as many connections. None (default): over a network, what one
        connection moves in eight round trips (4-64 MiB); 64 MiB elsewhere.
    whole_shard_fraction : float, default 0.5
        When a selection needs at least this fraction of a shard's inner chunks and the
        shard's index is not cached, the whole object is read in one request (index
        included) instead of index and ranges; ``float("inf")`` never reads whole
        shards.
    index_cache : bool, default True
        Keep decoded shard indexes in the process's cache
        (``shardwise.cache.index_cache``). Each cached index carries the version of
        the shard it was read from (an ETag, a generation, a file's identity), and
        every read that uses it is made against that version: a shard another job
        rewrote is found changed, its index read again and the read made again, never
        paired with the old index. On stores that have no versions no index is cached
        unless ``recheck_cached_data="open"``. False: every read reads the indexes it
        needs again (its ranges still against the version it read).
    recheck_cached_data : bool, "open" or float, default True
        When what a cached index says is checked against the store again
        (tensorstore's option of that name). True: on every read; reads of stored
        inner chunks are made against the cached index's version at no cost (the
        condition rides on the same request: ``If-Match`` or the generation on object
        stores, an ``fstat`` of the open file on a local file system); a read that
        would need no request (only empty inner chunks, or a shard that was absent)
        reads the index again, and absent shards are not cached. ``"open"``: never:
        the data are known not to change while the array is open (a published
        archive); the cheapest (no condition, no check, absent shards cached too, and
        indexes cached on stores without versions), but a shard that does change is
        then read with the wrong index. A number of seconds: reads of stored inner
        chunks are checked as with True; what needs no request is answered from a
        cached index (or a cached absent shard) up to this old, so new data in empty
        places shows within that time.
    concurrency : int, default 64
        Requests in flight at once per read (the process's own bound for all reads
        together is the setting ``shardwise.concurrency``).
    threads : int, optional
        Threads that fetch and decode the shards of one read outside dask
        (``ArrayReader[...]``, xarray's ``.values``/``.load()`` of a variable opened
        without ``chunks``). None (default): every core the process may use when the
        read is called from the main thread of a process that is no worker (a script,
        a notebook), one otherwise (a dask task's read stays one thread: the
        parallelism is dask's).

    Examples
    --------
    >>> ds = xr.open_dataset(
    ...     "data.zarr", engine="shardwise", chunks={},
    ...     read_options=shardwise.ReadOptions(recheck_cached_data="open"),
    ... )  # doctest: +SKIP
    """

    coalesce_gap: int | None = None
    coalesce_max: int | None = None
    whole_shard_fraction: float = 0.5
    index_cache: bool = True
    recheck_cached_data: bool | str | float = True
    concurrency: int = 64
    threads: int | None = None

    def __post_init__(self) -> None:
        if (self.coalesce_gap is not None and self.coalesce_gap < 0) or (
            self.coalesce_max is not None and self.coalesce_max < 1
        ):
            raise ValueError(
                f"coalesce_gap must be >= 0 and coalesce_max >= 1, got "
                f"{self.coalesce_gap} and {self.coalesce_max}"
            )
        fraction = self.whole_shard_fraction
        if not (0.0 <= fraction <= 1.0 or fraction == float("inf")):
            raise ValueError(
                f"whole_shard_fraction must be in [0, 1], or inf to never read whole "
                f"shards, got {fraction}"
            )
        recheck = self.recheck_cached_data
        if not (
            recheck is True
            or recheck == "open"
            or (
                isinstance(recheck, int | float)
                and not isinstance(recheck, bool)
                and 0 <= recheck < float("inf")
            )
        ):
            raise ValueError(
                "recheck_cached_data must be True (check on every read), 'open' (the "
                "data do not change while open) or a number of seconds >= 0 (the most "
                f"a cached index may be trusted for), got {recheck!r}"
            )
        if self.concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {self.concurrency}")
        if self.threads is not None and (
            isinstance(self.threads, bool) or not isinstance(self.threads, int) or self.threads < 1
        ):
            raise ValueError(f"threads must be None or an int >= 1, got {self.threads!r}")


class ByteRange(NamedTuple):
    start: int
    stop: int


def coalesce(
    ranges: Sequence[ByteRange], *, gap: int, max_size: int
) -> list[tuple[ByteRange, list[int]]]:
    """Group byte ranges into fewer requests.

    Returns ``(request, members)`` pairs, ``members`` being indices into ``ranges``.
    Ranges are merged, in offset order, while the hole between them is at most ``gap``
    bytes and the merged request stays within ``max_size`` bytes.
    """
    order = sorted(range(len(ranges)), key=lambda i: ranges[i].start)
    groups: list[tuple[ByteRange, list[int]]] = []
    cur_start = cur_stop = 0
    members: list[int] = []
    for i in order:
        r = ranges[i]
        if members and r.start - cur_stop <= gap and max(cur_stop, r.stop) - cur_start <= max_size:
            cur_stop = max(cur_stop, r.stop)
            members.append(i)
            continue
        if members:
            groups.append((ByteRange(cur_start, cur_stop), members))
        cur_start, cur_stop, members = r.start, r.stop, [i]
    if members:
        groups.append((ByteRange(cur_start, cur_stop), members))
    return groups


def store_token(store: Any) -> str:
    """A string naming a store's location, the same in every process; for an in-memory
    store (which has no location), one that no other store object gets, ever."""
    if in_memory(store):
        return f"{type(store).__module__}.{type(store).__qualname__}:{_memory_id(store)}"
    return f"{type(store).__module__}.{type(store).__qualname__}:{store}"


_MEMORY: dict[int, str] = {}


def _memory_id(store: Any) -> str:
    """A name of its own for an in-memory store: ``str(MemoryStore)`` shows the ``id``
    of its dict, which Python hands to another object once it is freed."""
    key = id(store)
    name = _MEMORY.get(key)
    if name is None:
        name = _MEMORY[key] = uuid.uuid4().hex
        weakref.finalize(store, _MEMORY.pop, key, None)
    return name


# -- where a store is: sources and destinations must not overlap ---------------------------
_ALIASES = {"s3a": "s3", "gcs": "gs", "abfs": "az", "abfss": "az", "adl": "az", "local": "file"}


@dataclass(frozen=True, slots=True)
class Location:
    """Where a store (and a path in it) lies, the same however it was spelled.

    ``scheme`` is ``"file"`` for a local folder (``parts`` are the components of its real
    path: symbolic links, ``./`` and trailing slashes resolved), an object-store protocol
    (``"s3"``, ``"gs"``, ``"az"``...: ``root`` is the endpoint and ``parts`` start with the
    bucket), or the kind of a store object that has no address (a ``MemoryStore``, an
    Icechunk session: ``root`` names that one object). ``text`` is what the user gave,
    for messages."""

    scheme: str
    root: str
    parts: tuple[str, ...]
    text: str

    def joined(self, path: str | None) -> Location:
        """This location with ``path`` (a group or array path in the store) below it."""
        extra = _components(path or "")
        if not extra:
            return self
        text = f"{self.text.rstrip('/')}/{'/'.join(extra)}"
        return Location(self.scheme, self.root, self.parts + extra, text)

    def within(self, other: Location) -> bool:
        """Whether this location is ``other`` or lies inside it."""
        if (self.scheme, self.root) != (other.scheme, other.root):
            return False
        if self.parts[: len(other.parts)] == other.parts:
            return True
        if self.scheme == "file":  # one folder by another name (a case-folding filesystem)
            return _inside_on_disk(self.parts, other.parts)
        return False


def _components(path: str) -> tuple[str, ...]:
    """``path``'s components with empty ones and ``.`` dropped and ``..`` taken back, as
    a filesystem would resolve them (for an object store that is the cautious reading:
    a key spelled with ``..`` is taken to be where it would lead)."""
    out: list[str] = []
    for part in path.replace("\\", "/").split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if out:
                out.pop()
            continue
        out.append(part)
    return tuple(out)


def _local(path: str | os.PathLike[str], text: str) -> Location:
    real = os.path.realpath(os.path.expanduser(os.fspath(path)))
    return Location("file", "", _components(real), text)


def _inside_on_disk(parts: tuple[str, ...], outer: tuple[str, ...]) -> bool:
    """Whether the folder ``outer`` is the folder ``parts`` or one of its parents, by
    identity on disk (device and inode): two spellings of one folder on a filesystem
    that folds case, or a bind mount."""
    try:
        target = os.stat("/" + "/".join(outer))
    except OSError:
        return False
    for n in range(len(parts), -1, -1):
        try:
            st = os.stat("/" + "/".join(parts[:n]))
        except OSError:
            continue
        if (st.st_dev, st.st_ino) == (target.st_dev, target.st_ino):
            return True
    return False


def _endpoint(options: Mapping[str, Any] | None) -> str:
    if not options:
        return ""
    client = options.get("client_kwargs") or {}
    found = options.get("endpoint_url") or client.get("endpoint_url") or options.get("endpoint")
    return str(found or "").rstrip("/")


def _url(url: str, options: Mapping[str, Any] | None) -> Location:
    url = url.rsplit("::", 1)[-1]  # a chained URL: the last one holds the data
    scheme, _, rest = url.partition("://")
    scheme = _ALIASES.get(scheme.lower(), scheme.lower())
    if scheme == "file":
        return _local(rest, url)
    if scheme == "memory":  # fsspec's memory filesystem: one per process
        return Location("memory", "fsspec", _components(rest), url)
    return Location(scheme, _endpoint(options), _components(rest), url)


def location(
    store: Any, path: str | None = None, storage_options: Mapping[str, Any] | None = None
) -> Location:
    """The ``Location`` of ``store`` (a local path, a URL, a zarr-python ``Store``,
    ``StorePath``, group or array, or any other store object), with ``path`` below it."""
    if isinstance(store, os.PathLike):
        return _local(store, os.fspath(store)).joined(path)
    if isinstance(store, str):
        found = _url(store, storage_options) if "://" in store else _local(store, store)
        return found.joined(path)
    node_store_path = getattr(store, "store_path", None)  # a zarr Group or Array
    if node_store_path is not None:
        return location(node_store_path, path)
    inner = getattr(store, "store", None)
    if type(store).__name__ == "StorePath" and inner is not None:
        return location(inner, store.path).joined(path)
    return _store_location(store).joined(path)


def _store_location(store: Any) -> Location:
    """Where the data of a zarr-python store lie (below every wrapper: the store whose
    keys they are)."""
    text = str(store)
    store = beneath(store)
    root = local_root(store, ())
    if root is not None:
        return _local(root, text)
    fsspec = fsspec_store(store)
    if fsspec is not None:
        fs = fsspec.fs
        protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
        protocol = _ALIASES.get(protocol, protocol)
        if protocol == "file":
            return _local(fsspec.path, text)
        endpoint = getattr(fs, "endpoint_url", None) or (
            getattr(fs, "client_kwargs", None) or {}
        ).get("endpoint_url")
        return Location(protocol, str(endpoint or "").rstrip("/"), _components(fsspec.path), text)
    inner = obstore_of(store)
    if inner is not None:
        local = obstore_local_root(inner)
        if local is not None:
            return _local(local, text)
        config = getattr(inner, "config", None) or {}
        if "bucket" in config or "container_name" in config:
            name = type(inner).__name__
            scheme = {"S3Store": "s3", "GCSStore": "gs", "AzureStore": "az"}.get(name, name)
            bucket = str(config.get("bucket") or config.get("container_name"))
            endpoint = str(config.get("endpoint") or "").rstrip("/")
            prefix = str(getattr(inner, "prefix", None) or "")
            return Location(scheme, endpoint, (bucket, *_components(prefix)), text)
    # a store with no address (zarr's MemoryStore, an Icechunk session's store...): two
    # such are the same place when they are the same object or share their contents
    kind = type(store).__name__
    contents = _compat.memory_store_dict(store) if in_memory(store) else None
    ident = id(contents) if contents is not None else id(store)
    return Location(kind, f"{kind}@{ident:x}", (), text)


def check_apart(
    src: Location, dst: Location, *, what: str = "the destination", advice: str | None = None
) -> None:
    """Refuse (``shardwise.errors.OverlapError``) a destination that is the source,
    lies inside it or holds it: writing it could change or delete the source."""

    if dst.within(src):
        how = "is the source" if src.within(dst) else "lies inside the source"
    elif src.within(dst):
        how = "holds the source"
    else:
        return
    raise OverlapError(
        f"{what} {how}: writing it would change or delete the source's data",
        expected="a destination apart from the source (neither inside the other)",
        found=f"source {src.text!r}, destination {dst.text!r}",
        advice=advice
        or "Write to a new location outside the source, then replace the source "
        "yourself once you have checked the result. Nothing was written.",
    )


_GLOB = frozenset("*?[")


def check_replaceable(
    store: Any, path: str | None = None, storage_options: Mapping[str, Any] | None = None
) -> None:
    """Refuse to replace (``mode="w"``) a destination that fsspec would take for a glob
    pattern: zarr-python's ``FsspecStore`` removes a folder with ``fs.rm(path,
    recursive=True)``, which expands ``*``, ``?`` and ``[...]`` in the path, so replacing
    ``s3://b/data[12].zarr`` would delete ``data1.zarr`` and ``data2.zarr`` beside it."""

    if isinstance(store, str) and "://" in store:
        where = store.rsplit("::", 1)[-1].partition("://")[2]
    elif (fsspec := fsspec_store(store)) is not None:
        where = str(fsspec.path)
    else:
        return  # local folders, obstore and memory stores remove by listing, not by glob
    where = f"{where}/{path or ''}"
    if _GLOB.isdisjoint(where):
        return
    raise WriteError(
        "a destination whose name holds a glob character cannot be replaced through fsspec",
        expected="no '*', '?' or '[' in the destination's path",
        found=repr(store if isinstance(store, str) else where),
        advice="fsspec would expand the pattern and delete the keys of the datasets it "
        "matches. Choose another name, or remove the destination yourself and write with "
        "the default mode. Nothing was written.",
    )


def metadata_error(
    store: Any,
    prefix: str,
    error: BaseException,
    *,
    storage_options: dict[str, Any] | None = None,
    depth: int | None = 0,
    need_dims: bool = False,
) -> BaseException:
    """What to raise when opening ``store`` (a path, URL or zarr ``Store``) failed with
    zarr-python's or xarray's own ``error`` (a ``ValueError``, ``TypeError``,
    ``KeyError``, ``OverflowError``, ``UnknownCodecError``...): the
    ``UnsupportedArrayError`` (or ``UnsupportedCodecError``) of the first
    ``zarr.json`` under ``prefix`` that cannot be read, naming its array and key; or
    ``error`` itself when every document reads (the error then was not the metadata's).

    ``depth`` is how far below ``prefix`` to look (0: its own document; 1: and its
    children's; None: all). ``need_dims``: xarray also needs a name for each dimension.
    Only called once opening has failed, so a good store never pays for the listing.
    """

    if isinstance(error, ShardwiseError):
        return error
    try:
        where = store_path(store, storage_options)
        full = "/".join(p for p in (where.path.strip("/"), prefix.strip("/")) if p)
        # (in a list: zarr's sync raises an exception a coroutine returns)
        (found,) = _compat.sync(_first_bad_document(where.store, full, depth, need_dims))
    except Exception:  # looking for the culprit must not hide the error itself
        return error
    return error if found is None else found


async def _first_bad_document(
    store: Any, prefix: str, depth: int | None, need_dims: bool
) -> list[ShardwiseError | None]:
    from zarr.buffer import default_buffer_prototype

    keys = [metadata_key(prefix)]
    if depth is None or depth > 0:
        found = await metadata_keys(store, prefix, depth)
        keys += sorted(k for k in found if k != keys[0])
    for key in keys:
        buf = await store.get(key, default_buffer_prototype())
        if buf is not None:
            try:
                read_document(buf.to_bytes(), key, need_dims=need_dims)
            except ShardwiseError as problem:
                return [problem]
    return [None]


# -- rewriting an array's document -----------------------------------------------------
def write_grid(target: Any, edges: Sequence[Edges], shape: Sequence[int] | None = None) -> Any:
    """Rewrite the ``zarr.json`` of the zarr-python array ``target`` (no shard written
    yet under the new grid) with this grid (and ``shape``, when given), through
    zarr-python's metadata classes, which check that the inner chunks divide every
    shard. Returns the array with the new metadata."""
    from zarr.buffer import default_buffer_prototype

    changes: dict[str, Any] = {"chunk_grid": grid_of(edges)}
    if shape is not None:
        changes["shape"] = tuple(shape)
    metadata = _compat.replace_metadata(target.metadata, **changes)
    path = target.store_path.path
    for key, buf in metadata.to_buffer_dict(default_buffer_prototype()).items():
        _compat.sync(target.store_path.store.set(f"{path}/{key}" if path else key, buf))
    return _compat.array_with_metadata(target, metadata)
