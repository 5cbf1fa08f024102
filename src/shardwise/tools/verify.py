"""``shardwise.verify``: check every shard of a store, report the bad ones.

For each Zarr v3 array under a group (or each array of a store of the 2022 sharding
draft, ``shardwise.io.draft``, whose indexes and chunks carry no checksums), every
stored shard (found by listing the array's keys, so missing shards cost nothing) is
checked with as few bytes as the checks need:

- the shard index: its size, its crc32c (when the index codecs have one), and every
  entry against the shard's size (inside the object, outside the index, no overlaps);
- inner chunks whose codecs end in ``crc32c``: each checksum, without decompressing;
- with ``decode=True``: every inner chunk decoded (catches damaged compressed data that
  no checksum protects).

The shards checked are those the listing finds (their keys mapped to grid coordinates):
the cost follows the shards stored, however large the grid.

When only the index needs checking, a shard costs one ranged read of its index
(``shardwise.io.shard_index.read_shard_index``, as a read reads it), which on a
store with versions (local files, memory, S3, obstore's stores) also tells the size of
the one version read; on other stores the size is asked first, and an index found
wrong is read once more (the shard may have been replaced between the two requests);
otherwise one read of the whole object. A shard replaced while it is checked is never
reported damaged. From a shell: ``python -m shardwise
verify PATH [--group G] [--decode]``; the exit status is 1 when anything is bad, 2
when there is no Zarr v3 group or array to verify.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import shardwise._compat as _compat
from shardwise._html import ShardMap, esc, frame, grids, table
from shardwise.codecs import Context, ShardDecoder, verify_crc32c
from shardwise.errors import NotAZarrStoreError, ShardwiseError
from shardwise.format.index import EMPTY
from shardwise.format.metadata import metadata_key, read_document
from shardwise.graph.progress import bar_class
from shardwise.io.draft import DraftStore, is_draft_root
from shardwise.io.listing import list_keys, metadata_keys
from shardwise.io.opener import store_path
from shardwise.io.reader import ArrayReader
from shardwise.io.shard_index import Tally, read_shard_index

__all__ = ["Problem", "VerifyReport", "verify"]

_BATCH = 32  # shards fetched concurrently, then checked in the calling thread


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong: where, and the error a read would raise.

    Attributes
    ----------
    array : str
        The array's path in the group.
    key : str
        The store key of the shard (or metadata) found wrong.
    chunk : tuple of int or None
        The inner chunk's coordinates within its shard, where one chunk is wrong.
    error : str
        The name of the error a read would raise, e.g. ``"ChecksumError"``.
    message : str
        The error's message.
    shard : tuple of int or None
        The shard's coordinates in the shard grid, for a shard's key.
    """

    array: str
    key: str
    chunk: tuple[int, ...] | None
    error: str  # the exception class name, e.g. "ChecksumError"
    message: str
    shard: tuple[int, ...] | None = None  # the shard's grid coordinates, for a shard's key


_HTML_ROWS = 200  # problems shown in a notebook at the most


@dataclass
class VerifyReport:
    """What ``shardwise.verify`` checked and found; shown as a table in a notebook.

    Attributes
    ----------
    arrays : list of str
        The arrays checked.
    shards : int
        The stored shards (or chunks of unsharded arrays) checked.
    chunks : int
        The inner chunks whose checksum was checked or which were decoded.
    requests, bytes_read : int
        What the check read from the store.
    problems : list of Problem
        Each problem found: its array, store key, shard, error class and message.
    strays : list of str
        Keys under an array that are no chunk of it.
    ok : bool
        Whether no problem was found.
    bad_keys : list of str
        The store keys with a problem.
    grids : dict of str to ShardMap
        Each array's shards as a notebook draws them: the ones stored, the damaged ones
        red.
    """

    arrays: list[str] = field(default_factory=list)
    shards: int = 0  # stored shards (or chunks of unsharded arrays) checked
    chunks: int = 0  # inner chunks whose checksum was checked or which were decoded
    requests: int = 0
    bytes_read: int = 0
    problems: list[Problem] = field(default_factory=list)
    strays: list[str] = field(default_factory=list)  # keys under an array that no chunk has
    grids: dict[str, ShardMap] = field(default_factory=dict, repr=False, compare=False)

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def bad_keys(self) -> list[str]:
        return sorted({p.key for p in self.problems})

    def damaged_shards(self, array: str) -> list[tuple[int, ...]]:
        """The grid coordinates of ``array``'s shards with a problem (what
        ``shardwise.tools.views.shard_grid`` draws red)."""
        name = array.strip("/") or "/"
        return sorted({p.shard for p in self.problems if p.shard is not None and p.array == name})

    def _repr_html_(self) -> str:
        """A notebook's view: the counts, then a row per problem and stray key."""
        head = table(
            "shardwise verify: " + ("all good" if self.ok else f"{len(self.bad_keys)} bad keys"),
            [
                ("arrays", len(self.arrays)),
                ("shards checked", self.shards),
                ("inner chunks checked", self.chunks),
                ("requests", self.requests),
                ("bytes read", self.bytes_read),
            ],
        )
        rows = [
            (p.key, "" if p.chunk is None else str(p.chunk), p.error, p.message)
            for p in self.problems
        ] + [
            (k, "", "stray", "not a chunk of its array (left over from a write?)")
            for k in self.strays
        ]
        head += grids(self.grids.items())
        if not rows:
            return frame(head)
        body = "".join(
            "<tr>" + "".join(f"<td style='text-align:left'>{esc(c)}</td>" for c in r) + "</tr>"
            for r in rows[:_HTML_ROWS]
        )
        more = (
            f"<div>and {len(rows) - _HTML_ROWS} more (str() of the report lists all)</div>"
            if len(rows) > _HTML_ROWS
            else ""
        )
        return frame(
            f"{head}<table><tr><th>key</th><th>inner chunk</th><th>error</th>"
            f"<th>message</th></tr>{body}</table>{more}"
        )

    def __str__(self) -> str:
        lines = [
            f"{len(self.arrays)} arrays, {self.shards} shards, {self.chunks} inner chunks "
            f"checked; {self.requests} requests, {self.bytes_read} bytes read; "
            + ("all good" if self.ok else f"{len(self.bad_keys)} bad keys")
        ]
        for p in self.problems:
            where = f" inner chunk {p.chunk}" if p.chunk is not None else ""
            lines.append(f"  {p.key}{where}: {p.error}: {p.message}")
        for key in self.strays:
            lines.append(f"  {key}: not a chunk of its array (left over from a write?)")
        return "\n".join(lines)


def verify(
    store: Any,
    *,
    group: str | None = None,
    storage_options: dict[str, Any] | None = None,
    decode: bool = False,
    progress: bool = False,
) -> VerifyReport:
    """Check every shard of the arrays under a group: its index and its checksums, and
    with ``decode=True`` its inner chunks.

    Parameters
    ----------
    store : str, os.PathLike or zarr.abc.store.Store
        The store: a path, a URL (``s3://``, ``gs://``, ``az://``... with
        ``storage_options``) or a zarr-python ``Store``. Zarr v3 stores and stores of
        the 2022 sharding draft are checked.
    group : str, optional
        The group whose arrays, and its subgroups' arrays, are checked; the store's root
        when None.
    storage_options : dict, optional
        Options of the fsspec file system a URL names (credentials, endpoint).
    decode : bool, default False
        Also decode every stored inner chunk: finds damage no checksum covers (a store
        without one, a chunk whose bytes still match a damaged index).
    progress : bool, default False
        Show a progress bar of the shards checked.

    Returns
    -------
    VerifyReport
        Everything found. Bad data never raises: a ``zarr.json`` that cannot be read is
        reported too (the shards of its arrays are then not checked).

    Raises
    ------
    shardwise.errors.NotAZarrStoreError
        No Zarr v3 group or array is at ``store`` and ``group``.

    Examples
    --------
    >>> report = shardwise.verify("data.zarr")
    >>> report.ok, report.problems
    (True, [])
    """

    try:
        where = store_path(store, storage_options)
    except FileNotFoundError:
        where = None
    base = (group or "").strip("/")
    if where is not None:
        base = "/".join(p for p in (where.path.strip("/"), base) if p)
    report = VerifyReport()
    docs = {} if where is None else _compat.sync(_documents(where.store, base))
    root = metadata_key(where.path.strip("/")) if where is not None else None
    if root is not None and (
        is_draft_root(docs.get(root)) or (metadata_key(base) not in docs and root not in docs)
    ):
        draft = _draft(store, storage_options)
        if draft is not None:
            with _bar(progress) as bar:
                _verify_draft(draft, (group or "").strip("/"), report, decode, bar)
            return report
    if where is None or metadata_key(base) not in docs:
        v2 = where is not None and any(
            _compat.sync(where.store.exists(f"{base}/{name}" if base else name))
            for name in (".zgroup", ".zarray")
        )
        raise NotAZarrStoreError(
            "no Zarr v3 group or array here",
            expected="a zarr.json",
            found="Zarr v2 metadata (verify checks Zarr v3 shards)" if v2 else "nothing",
            array=base or "/",
            key=metadata_key(base),
            advice=f"Check the path {store!r} and the group {group!r}.",
        )
    report.requests += 1 + len(docs)
    report.bytes_read += sum(len(raw) for raw in docs.values())
    with _bar(progress) as bar:
        for key, raw in sorted(docs.items()):
            array = _array_of(where.store, key, raw, report)
            if array is not None:
                _compat.sync(_verify_array(array, report, decode, bar))
    return report


@contextlib.contextmanager
def _bar(progress: bool) -> Iterator[Any]:
    """A tqdm bar of the shards checked (``shardwise.graph.progress.bar_class``),
    or None."""
    if not progress:
        yield None
        return
    with bar_class()(total=0, desc="verify", unit="shard") as bar:
        yield bar


def _draft(store: Any, storage_options: dict[str, Any] | None) -> Any:
    try:
        return DraftStore.open(store, storage_options)
    except FileNotFoundError:
        return None


def _verify_draft(
    draft: Any, group: str, report: VerifyReport, decode: bool, bar: Any = None
) -> None:
    """A store of the 2022 sharding draft: the same checks on every array under
    ``group``, except that draft indexes and chunks have no checksums to check."""

    todo = [group]
    while todo:
        g = todo.pop(0)
        todo += [f"{g}/{c}" if g else c for c in draft.groups(g)]
        report.requests += 2
        for name in draft.arrays(g):
            path = f"{g}/{name}" if g else name
            report.requests += 1
            try:
                reader = ArrayReader(draft.store, draft.info(path))
            except ShardwiseError as e:
                key = f"{draft.prefix}meta/root/{path}.array.json"
                report.problems.append(Problem(path, key, None, type(e).__name__, str(e)))
                continue
            report.arrays.append(path)
            _compat.sync(_verify_array(reader, report, decode, bar))


async def _documents(store: Any, base: str) -> dict[str, bytes]:
    """Every ``zarr.json`` under ``base``, by key."""
    from zarr.buffer import default_buffer_prototype

    keys = await metadata_keys(store, base)
    bufs = await asyncio.gather(*(store.get(k, default_buffer_prototype()) for k in keys))
    return {k: b.to_bytes() for k, b in zip(keys, bufs, strict=True) if b is not None}


def _array_of(store: Any, key: str, raw: bytes, report: VerifyReport) -> ArrayReader | None:
    """The reader of the Zarr v3 array a document describes (None for a group, or for a
    document that cannot be read, which becomes a problem in ``report``)."""
    name = key.removesuffix("zarr.json").strip("/") or "/"
    try:
        info = read_document(raw, key)
        if info is None:
            return None
        report.arrays.append(name)
        return ArrayReader(store, info)  # raises for codecs shardwise cannot read
    except ShardwiseError as e:
        report.problems.append(Problem(name, key, None, type(e).__name__, str(e)))
        return None


def _checks(reader: ArrayReader, decode: bool) -> tuple[bool, bool]:
    """(read whole objects, check trailing crc32c of inner chunks) for an array."""
    from zarr.codecs import Crc32cCodec

    info = reader.info
    codecs = info.sharding.codecs if info.sharding is not None else info.codecs
    crc_last = bool(codecs) and isinstance(codecs[-1], Crc32cCodec)
    return decode or crc_last, crc_last and not decode


async def _verify_array(
    reader: ArrayReader, report: VerifyReport, decode: bool, bar: Any = None
) -> None:
    info = reader.info
    store = reader.store
    prefix = info.data_prefix
    keys = await list_keys(store, prefix)
    report.requests += 1
    # the listing decides which shards there are: the work follows the shards stored,
    # not the grid (a grid of 10**14 shards with a few stored costs a few)
    shards: dict[str, tuple[int, ...]] = {}
    for key in sorted(keys):
        shard = info.coords(key)
        if shard is None:
            if key != f"{prefix}zarr.json":
                report.strays.append(key)
            continue
        try:  # one decoder per shard shape: a shape that cannot be read is a problem
            reader.decoder(shard)
        except ShardwiseError as e:
            report.problems.append(Problem(info.name, key, None, type(e).__name__, str(e), shard))
            continue
        shards[key] = shard
    whole, crc_only = _checks(reader, decode)
    sharded = info.sharding is not None
    if bar is not None:
        bar.total += len(shards)
        bar.refresh()
    if sharded or whole:  # (chunks with no checksum: nothing to check short of decode=True)
        await _check_shards(reader, report, shards, whole, crc_only, bar)
    report.grids[info.name] = ShardMap.of(
        info, shards.values(), damaged=report.damaged_shards(info.name)
    )


async def _check_shards(
    reader: ArrayReader,
    report: VerifyReport,
    shards: dict[str, tuple[int, ...]],
    whole: bool,
    crc_only: bool,
    bar: Any,
) -> None:
    """Check the ``shards`` listed (key: grid coordinates), :data:`_BATCH` at a time:
    their indexes alone, or (``whole``) whole objects."""
    info = reader.info
    stored = list(shards)
    for i in range(0, len(stored), _BATCH):
        batch = stored[i : i + _BATCH]
        if not whole:  # the indexes alone, read as a read reads them
            read = await asyncio.gather(*(_read_index(reader, key, shards[key]) for key in batch))
            for key, (error, tally) in zip(batch, read, strict=True):
                report.shards += 1
                report.requests += tally.requests
                report.bytes_read += tally.nbytes
                if error is not None:
                    report.problems.append(
                        Problem(
                            info.name,
                            key,
                            error.chunk,
                            type(error).__name__,
                            str(error),
                            shards[key],
                        )
                    )
            if bar is not None:
                bar.update(len(batch))
            continue
        fetched = await asyncio.gather(*(_fetch(reader.store, key) for key in batch))
        for key, (data, requests) in zip(batch, fetched, strict=True):
            report.shards += 1
            report.requests += requests
            report.bytes_read += 0 if data is None else len(data)
            # in a thread: codecs decoded through zarr-python's pipeline call its sync(),
            # which refuses to run inside this event loop
            await asyncio.to_thread(_check, reader, report, key, shards[key], data, crc_only)
            if bar is not None:
                bar.update(1)


async def _read_index(
    reader: ArrayReader, key: str, shard: tuple[int, ...]
) -> tuple[ShardwiseError | None, Tally]:
    """Check one shard's index against the object's size: (what is wrong with it, or
    None; the requests made and bytes read). A shard deleted since the listing is no
    problem. Where the store has versions, the size comes with the index from the one
    version read (one request); elsewhere it is asked first, and an index found wrong
    is checked once more, both asked again, since the shard may have been replaced
    between the two requests: reported only when it is wrong again."""
    decoder = reader.decoder(shard)
    assert isinstance(decoder, ShardDecoder)
    versions = reader.fetcher.versions
    tally = Tally()

    async def check() -> ShardwiseError | None:
        try:
            size = None
            if versions is None:
                tally.requests += 1
                size = await reader.store.getsize(key)
            await read_shard_index(
                reader.store,
                key,
                decoder.index,
                versions=versions,
                array=reader.info.name,
                size=size,
                max_nbytes=decoder.chunk.max_encoded,
                tally=tally,
            )
        except FileNotFoundError:
            pass
        except ShardwiseError as e:
            return e
        return None

    error = await check()
    if error is not None and versions is None:
        error = await check()
    return error, tally


async def _fetch(store: Any, key: str) -> tuple[memoryview | None, int]:
    """(the whole object, None when it is gone; requests made)."""
    from zarr.buffer import default_buffer_prototype

    try:
        buf = await store.get(key, default_buffer_prototype())
    except FileNotFoundError:
        return None, 1
    return None if buf is None else memoryview(buf.as_numpy_array()).cast("B"), 1


def _check(
    reader: ArrayReader,
    report: VerifyReport,
    key: str,
    shard: tuple[int, ...],
    data: memoryview | None,
    crc_only: bool,
) -> None:
    """Check a whole object: a shard's index and its inner chunks (their crc32c, or
    decoded), or an unsharded array's chunk."""
    info = reader.info
    name = info.name
    if data is None:  # deleted between the listing and the read
        return
    try:
        decoder = reader.decoder(shard)
        if not isinstance(decoder, ShardDecoder):  # an unsharded array's chunk
            report.chunks += 1
            _check_chunk(decoder, data, key, None, crc_only)
            return
        view, table = decoder.parse(data, key=key)
    except ShardwiseError as e:
        report.problems.append(Problem(name, key, e.chunk, type(e).__name__, str(e), shard))
        return
    for inner in _present(table):
        report.chunks += 1
        raw = view[int(table[inner][0]) : int(table[inner][0]) + int(table[inner][1])]
        try:
            _check_chunk(decoder.chunk, raw, key, inner, crc_only)
        except ShardwiseError as e:
            report.problems.append(Problem(name, key, inner, type(e).__name__, str(e), shard))


def _present(table: Any) -> list[tuple[int, ...]]:
    cps = table.shape[:-1]
    flat = table.reshape(-1, 2)
    return [
        tuple(int(x) for x in np.unravel_index(i, cps)) for i in np.flatnonzero(flat[:, 0] != EMPTY)
    ]


def _check_chunk(
    decoder: Any, raw: memoryview, key: str, chunk: tuple[int, ...] | None, crc_only: bool
) -> None:
    """Decode the chunk, or (``crc_only``) check just its trailing crc32c, the way a
    read does, raising what a read would."""
    if crc_only:
        verify_crc32c(raw, Context(decoder.array, key, chunk))
    else:
        decoder.decode(raw, key=key, chunk=chunk)
