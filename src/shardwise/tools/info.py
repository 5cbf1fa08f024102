"""``shardwise.info``: a hierarchy at a glance, as text (``shardwise info PATH``) or JSON.

``info`` opens every array under a group and sums up each as ``ArraySummary``
(its shape, data type, shards, inner chunks and codecs and, when scanned, the totals of
its ``shardwise.tools.inventory.inventory``: shards and inner chunks stored, stored
bytes, compression ratio), with the documents no reader opens listed apart, in one
``Info``. A scan costs what the inventory's totals cost: one listing and one
index read per stored shard (``shardwise.tools.inventory.totals_of``), whatever the
size of the grid.

Apart from ``shardwise.tools.inventory``, which it is built on: that module is one
array's chunks, this one is the hierarchy's summary and its rendering.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from shardwise._html import ShardMap, esc, frame, grids, table
from shardwise.errors import ShardwiseError
from shardwise.io.sources import open_source
from shardwise.tools._text import (
    byte_size,
    codec_chain,
    dims_text,
    percent,
    ratio_of,
    shape_list,
    store_name,
)
from shardwise.tools.inventory import summary_of

if TYPE_CHECKING:
    from shardwise.format.metadata import ArrayInfo

__all__ = ["ArraySummary", "Info", "info"]


@dataclass(frozen=True, slots=True)
class ArraySummary:
    """One array in ``Info``: its geometry and codecs, and (``error`` None) what
    its inventory counted.

    Attributes
    ----------
    path : str
        The array's path in the group.
    shape : tuple of int
        The array's shape.
    dtype : str
        Its data type, as numpy names it.
    dimension_names : tuple of str or None, or None
        The dimension names in its metadata.
    shard_shape : tuple or None
        The shard shape (for rectilinear grids, per dimension the sizes); None for an
        unsharded array.
    chunk_shape : tuple
        The inner chunks' shape (the chunks of an unsharded array).
    codecs : str
        The codec chain, in one line.
    raw_bytes : int
        The bytes the values take in memory.
    stored_bytes : int or None
        The bytes stored: inner chunks and indexes (None when not scanned).
    ratio : float or None
        ``raw_bytes / stored_bytes``.
    shards_present, shards_total : int or None
        Shards stored, and shards in the grid.
    chunks_present, chunks_total : int or None
        Inner chunks stored, and inner chunks in the grid.
    error : str or None
        Why the array could not be scanned (None when it was).
    """

    path: str
    shape: tuple[int, ...]
    dtype: str
    dimension_names: tuple[str | None, ...] | None
    shard_shape: tuple[Any, ...] | None  # None: unsharded
    chunk_shape: tuple[Any, ...]  # inner chunks (the chunks of an unsharded array)
    codecs: str
    raw_bytes: int
    stored_bytes: int | None = None  # inner chunks, indexes included
    ratio: float | None = None  # raw_bytes / stored_bytes
    shards_present: int | None = None
    shards_total: int | None = None
    chunks_present: int | None = None
    chunks_total: int | None = None
    error: str | None = None
    grid: ShardMap | None = field(default=None, repr=False, compare=False)

    @classmethod
    def of(
        cls,
        path: str,
        info: ArrayInfo,
        totals: Mapping[str, Any] | None,
        grid: ShardMap | None = None,
    ) -> ArraySummary:
        """The summary of an array; ``totals`` are its inventory's attributes (None when
        it was not scanned), ``grid`` the map they were counted from (by default, the
        grid with nothing known of its shards)."""
        a = totals
        return cls(
            path=path,
            shape=info.shape,
            dtype=str(info.dtype),
            dimension_names=info.dimension_names,
            shard_shape=None if info.sharding is None else tuple(shape_list(info.shard_shape)),
            chunk_shape=tuple(shape_list(info.inner_chunk_shape or info.shard_shape)),
            codecs=codec_chain(info.codecs),
            raw_bytes=math.prod(info.shape) * info.dtype.itemsize,
            stored_bytes=None if a is None else a["total_bytes"],
            ratio=None if a is None else a["overall_ratio"],
            shards_present=None if a is None else a["shards_present"],
            shards_total=info.layout.nshards,
            chunks_present=None if a is None else a["chunks_present"],
            chunks_total=None if a is None else a["chunks_total"],
            grid=ShardMap(info) if grid is None else grid,
        )

    def to_dict(self) -> dict[str, Any]:
        def plain(v: Any) -> Any:
            return [plain(x) for x in v] if isinstance(v, tuple | list) else v

        return {k: plain(getattr(self, k)) for k in self.__dataclass_fields__ if k != "grid"}

    def lines(self) -> list[str]:
        out = [
            f"{self.path or '/'}  {self.dtype} {dims_text(self.shape, self.dimension_names)}",
            f"  codecs   {self.codecs}",
        ]
        if self.shard_shape is None:
            chunks = f"  chunks   {dims_text(self.chunk_shape, None)} (unsharded)"
        else:
            chunks = (
                f"  shards   {dims_text(self.shard_shape, None)} of inner chunks "
                f"{dims_text(self.chunk_shape, None)}"
            )
        out.append(chunks)
        if self.error is not None:
            out.append(f"  error    {self.error}")
            return out
        if self.shards_present is not None:
            cp, ct = self.chunks_present or 0, self.chunks_total or 0
            stored = (
                f"  stored   {cp} of {ct} chunks ({percent(ct - cp, ct)} absent)"
                if self.shard_shape is None
                else f"  stored   {self.shards_present} of {self.shards_total} shards, "
                f"{cp} of {ct} inner chunks ({percent(ct - cp, ct)} absent)"
            )
            ratio = "-" if self.ratio is None else f"{self.ratio:.2f}x"
            out += [
                stored,
                f"  bytes    {byte_size(self.stored_bytes)} stored for {byte_size(self.raw_bytes)} "
                f"raw: {ratio}",
            ]
        return out


@dataclass(frozen=True, slots=True)
class Info:
    """A hierarchy at a glance (``shardwise.info``); ``str()`` is the text
    ``shardwise info`` prints, ``to_dict`` its JSON, and a notebook shows a table.

    Attributes
    ----------
    store, format, group : str
        The store, its kind (Zarr v3, Zarr v2, the 2022 draft) and the group described.
    groups : tuple of str
        The groups under it.
    arrays : tuple of ArraySummary
        Each array: its shape, data type, shards, inner chunks, codecs and, when
        scanned, what is stored of it (or the error its inventory raised).
    unreadable : tuple of (str, str)
        The arrays shardwise does not read, and why.
    damaged : tuple of str
        Of those, the documents no reader opens.
    stored_bytes : int or None
        The bytes stored, over every array (None where one was not scanned).
    raw_bytes : int
        The bytes the stored inner chunks hold decoded.
    """

    store: str
    format: str
    group: str
    groups: tuple[str, ...]
    arrays: tuple[ArraySummary, ...]
    unreadable: tuple[tuple[str, str], ...] = field(default=())  # (path, why)
    damaged: tuple[str, ...] = field(default=())  # of those, documents no reader opens

    @property
    def stored_bytes(self) -> int | None:
        sizes = [a.stored_bytes for a in self.arrays]
        return None if any(s is None for s in sizes) else sum(s or 0 for s in sizes)

    @property
    def raw_bytes(self) -> int:
        return sum(a.raw_bytes for a in self.arrays)

    def to_dict(self) -> dict[str, Any]:
        stored_ = self.stored_bytes
        return {
            "store": self.store,
            "format": self.format,
            "group": self.group,
            "groups": list(self.groups),
            "stored_bytes": stored_,
            "raw_bytes": self.raw_bytes,
            "ratio": None if stored_ is None else ratio_of(self.raw_bytes, stored_),
            "arrays": [a.to_dict() for a in self.arrays],
            "unreadable": [{"path": p, "error": e} for p, e in self.unreadable],
            "damaged": list(self.damaged),
        }

    def _repr_html_(self) -> str:
        """A notebook's view: the hierarchy's table, then a row per array."""
        stored_ = self.stored_bytes
        head = table(
            "shardwise info",
            [
                ("store", self.store),
                ("format", self.format),
                ("group", self.group or "/"),
                ("groups", len(self.groups)),
                ("arrays", len(self.arrays)),
                ("stored", byte_size(stored_)),
                ("raw", byte_size(self.raw_bytes)),
            ],
        )
        cols = ("array", "dtype", "shape", "shards", "inner chunks", "codecs", "stored", "ratio")
        rows = []
        for a in self.arrays:
            shards = "unsharded" if a.shard_shape is None else dims_text(a.shard_shape, None)
            stored = (
                a.error
                if a.error is not None
                else "-"
                if a.shards_present is None
                else f"{a.shards_present} of {a.shards_total} shards, {byte_size(a.stored_bytes)}"
            )
            ratio = "-" if a.ratio is None else f"{a.ratio:.2f}x"
            rows.append(
                (
                    a.path or "/",
                    a.dtype,
                    dims_text(a.shape, a.dimension_names),
                    shards,
                    dims_text(a.chunk_shape, None),
                    a.codecs,
                    stored,
                    ratio,
                )
            )
        rows += [
            (p or "/", "", "", "", "", "", f"cannot be read: {why}", "")
            for p, why in self.unreadable
        ]
        body = "".join(
            "<tr>" + "".join(f"<td style='text-align:left'>{esc(c)}</td>" for c in r) + "</tr>"
            for r in rows
        )
        header = "".join(f"<th style='text-align:left'>{esc(c)}</th>" for c in cols)
        return frame(f"{head}<table><tr>{header}</tr>{body}</table>{grids(self.arrays)}")

    def __str__(self) -> str:
        stored_ = self.stored_bytes
        groups = ", ".join(g or "/" for g in self.groups)
        head = [
            f"store    {self.store}",
            f"format   {self.format}",
            f"group    {self.group or '/'}",
            f"groups   {len(self.groups)}: {groups}",
            f"arrays   {len(self.arrays)}"
            + (f" (and {len(self.unreadable)} shardwise cannot read)" if self.unreadable else ""),
        ]
        if stored_ is not None and self.arrays:
            ratio = ratio_of(self.raw_bytes, stored_)
            head.append(
                f"bytes    {byte_size(stored_)} stored for {byte_size(self.raw_bytes)} raw"
                + ("" if ratio is None else f": {ratio:.2f}x")
            )
        body = [line for a in self.arrays for line in ["", *a.lines()]]
        for path, why in self.unreadable:
            what = "damaged document" if path in self.damaged else "cannot be read by shardwise"
            body += ["", f"{path or '/'}  ({what})", f"  error    {why}"]
        return "\n".join(head + body)


def info(
    store: Any,
    *,
    group: str | None = None,
    storage_options: dict[str, Any] | None = None,
    scan: bool = True,
) -> Info:
    """What a store holds: its kind, groups and arrays, each with its shape, data type,
    shards, inner chunks and codecs, and what is stored of it.

    Parameters
    ----------
    store : str, os.PathLike or zarr.abc.store.Store
        The store: a path, a URL (with ``storage_options``) or a zarr-python ``Store``;
        Zarr v3, Zarr v2 or a store of the 2022 sharding draft.
    group : str, optional
        The group to describe, with everything under it; the store's root when None.
    storage_options : dict, optional
        Options of the fsspec file system a URL names (credentials, endpoint).
    scan : bool, default True
        Also sum each array's ``shardwise.inventory``: the shards and inner chunks
        stored, the stored bytes and the compression ratio. A scan costs a listing and
        one index read per stored shard, whatever the size of the grid; ``False`` reads
        the metadata only.

    Returns
    -------
    Info
        The description; printed, or shown in a notebook, as a table. An array whose
        inventory fails (a damaged index) is listed with its error.
    """

    src = open_source(store, group, storage_options)
    arrays = []
    for path, a in src.arrays.items():
        if not scan:
            arrays.append(ArraySummary.of(path, a, None))
            continue
        try:
            arrays.append(ArraySummary.of(path, a, *summary_of(src, a)))
        except ShardwiseError as e:
            failed = ArraySummary.of(path, a, None)
            arrays.append(
                ArraySummary(
                    **{k: getattr(failed, k) for k in failed.__dataclass_fields__ if k != "error"},
                    error=f"{type(e).__name__}: {e}",
                )
            )
    return Info(
        store=store_name(src.store),
        format=src.kind,
        group=src.base,
        groups=tuple(sorted(src.groups)),
        arrays=tuple(arrays),
        unreadable=tuple(
            (p, f"{type(e).__name__}: {e}") for p, e in sorted(src.unreadable.items())
        ),
        damaged=tuple(sorted(src.damaged)),
    )
