"""``shardwise.reshard``: any store shardwise reads to sharded Zarr v3, one task per shard.

Sources: Zarr v2, unsharded and sharded Zarr v3 (regular or rectilinear shard grids),
and stores of the 2022 sharding draft (``shardwise.io.sources``). Each array of the
destination is ``sharding_indexed`` with the index at the end and crc32c.

Two ways to fill a target shard, chosen per array before anything is written (the task
that fills one is ``shardwise.graph.copy.reshard_shard``; this module plans the job,
writes the metadata and runs the graph; each array's plan is
``shardwise.tools._array_plan``'s):

*repack*
    The target inner chunks are the source's chunks (same shape) and the codec chains
    write the same bytes (a v2 ``zstd``/``blosc``/``gzip`` compressor with ``C`` order
    and no filters is Zarr v3 ``bytes`` + that codec; an unsharded v3 chain is the same
    chain inside a shard; a sharded source with the same inner chunks). The task reads
    the encoded source chunks (one request per source object, or the shard's index and
    coalesced ranges per source shard) and puts one target shard: no codec work.
*re-encode*
    Anything else: the task reads the target shard's region decoded (shardwise's reader:
    one index read per source shard, coalesced ranges), encodes its inner chunks
    (chunks holding only the fill value are left out, as zarr-python does) and puts the
    shard. Memory: one target shard's values per task.

Metadata is written through zarr-python's metadata classes; attributes, dimension
names and fill values keep the meaning xarray gives them (a Zarr v2 ``fill_value``
becomes the ``_FillValue`` attribute, ``_ARRAY_DIMENSIONS`` the ``dimension_names``), so
the result opens like the source with ``engine="zarr"``.

``mode="a"`` completes a destination left by an interrupted run: target shards that
are present and whose index reads back are skipped (shards are single puts, so a present
shard is whole).

The planner (``prepare``) has a same-grid mode, which is ``shardwise.tools.migrate.migrate``
(``shardwise.tools.migrate`` checks its arguments and words its report): every
array keeps its grid, its sharding or its absence and its codecs (zlib as gzip, those
chunks recoded one by one), so every chunk is repacked, and no consolidated metadata
is written.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import dask

import shardwise._compat as _compat
from shardwise._flags import consolidate_metadata, rectilinear_grids
from shardwise.errors import ShardwiseError, StoreExistsError, WriteError
from shardwise.format.metadata import ArrayInfo
from shardwise.format.names import key_under, node_path
from shardwise.graph.copy import (
    CopyPlan,
    Stats,
    Targets,
    copy_graph,
    shards_to_fill,
)
from shardwise.graph.progress import compute as compute_with_progress
from shardwise.io.opener import has_zarr_json
from shardwise.io.sources import Source, open_source
from shardwise.io.stores import check_apart, check_replaceable, location
from shardwise.tools._array_plan import Sizes, array_names, check_sizes, plan_array, plural
from shardwise.tools._copied import copy_plan, copy_whole, open_copyable

__all__ = ["ReshardReport", "prepare", "reshard"]


@dataclass
class ReshardReport:
    """What ``shardwise.reshard`` did: the arrays and groups it wrote, how each
    array's chunks were moved, and the shards and bytes it read and wrote.

    Attributes
    ----------
    arrays, groups : list of str
        The arrays and groups written.
    repacked, reencoded, copied : list of str
        The arrays whose compressed chunks were moved as bytes; those decoded and
        encoded again (other chunk sizes or codecs); those shardwise does not read
        (strings...), copied through zarr-python.
    shards : int
        The target shards planned (those with source data).
    shards_written, shards_skipped, chunks_repacked, chunks_reencoded : int
        The shards written, those found whole in the destination (``mode="a"``), the
        inner chunks moved as bytes and those encoded again.
    bytes_read, bytes_written : int
        The encoded bytes moved or the values decoded, and the bytes written.
    """

    arrays: list[str] = field(default_factory=list)
    groups: list[str] = field(default_factory=list)
    repacked: list[str] = field(default_factory=list)  # arrays moved as bytes
    reencoded: list[str] = field(default_factory=list)  # arrays decoded and re-encoded
    copied: list[str] = field(default_factory=list)  # arrays copied through zarr-python
    shards: int = 0  # target shards planned (those with source data)
    shards_written: int = 0
    shards_skipped: int = 0  # present and valid in the destination (resume)
    bytes_read: int = 0  # encoded chunk bytes moved (repack), values decoded (re-encode)
    bytes_written: int = 0
    chunks_repacked: int = 0
    chunks_reencoded: int = 0

    def add(self, stats: Stats) -> ReshardReport:
        """Count the totals a run computed (the result of the delayed)."""
        w, s, r, b, p, e = stats
        self.shards_written += w
        self.shards_skipped += s
        self.bytes_read += r
        self.bytes_written += b
        self.chunks_repacked += p
        self.chunks_reencoded += e
        return self

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def __str__(self) -> str:
        copied = f", {len(self.copied)} copied whole" if self.copied else ""
        return "\n".join(
            [
                f"{plural(len(self.arrays), 'array')} in {plural(len(self.groups), 'group')}: "
                f"{len(self.repacked)} repacked, {len(self.reencoded)} re-encoded{copied}",
                f"shards: {self.shards_written} written, {self.shards_skipped} already there "
                f"(of {self.shards})",
                f"inner chunks: {self.chunks_repacked} moved as bytes, "
                f"{self.chunks_reencoded} re-encoded",
                f"bytes: {self.bytes_read:,} read, {self.bytes_written:,} written",
            ]
        )


# -- the entry point ---------------------------------------------------------------------
def reshard(
    src: Any,
    dst: Any,
    *,
    shards: Sizes = None,
    chunks: Sizes = None,
    codecs: Any = None,
    group: str | None = None,
    variables: Sequence[str] | None = None,
    mode: str = "w-",
    storage_options: dict[str, Any] | None = None,
    target_options: dict[str, Any] | None = None,
    consolidated: bool = True,
    compute: bool = True,
    progress: bool = False,
) -> Any:
    """Rewrite the arrays of a store as sharded Zarr v3, moving compressed chunks as
    bytes where the codecs allow (no decompression), one dask task per target shard.

    Parameters
    ----------
    src : str, os.PathLike or zarr.abc.store.Store
        The source: Zarr v2, Zarr v3 or a store of the 2022 sharding draft; a path, a
        URL (with ``storage_options``) or a zarr-python ``Store``.
    dst : str, os.PathLike or zarr.abc.store.Store
        The destination (with ``target_options`` for a URL). It may not be, lie in or
        hold the source.
    shards, chunks : dict, "auto" or None, optional
        The shard and inner chunk sizes by dimension name (``{"time": 100}``; the
        dimensions not named keep the source's), ``"auto"`` (toward dask config
        ``shardwise.shard-bytes`` and ``shardwise.chunk-bytes``), or None: the source's
        (an unsharded source gets ``"auto"`` shards of its own chunks).
    codecs : codec or list of codecs, optional
        The inner chunks' codecs; None keeps the source's (zlib becomes gzip).
    group : str, optional
        The group to reshard, with everything under it; the store's root when None.
    variables : sequence of str, optional
        The arrays to take, by path relative to ``group``; all when None.
    mode : {"w-", "w", "a"}, default "w-"
        ``"w-"`` refuses an existing destination, ``"w"`` replaces it, ``"a"``
        completes what a run with the same arguments left unfinished (its whole shards
        are kept), as ``shardwise.tools.migrate.migrate``'s does.
    storage_options, target_options : dict, optional
        Options of the fsspec file systems of the source's and the destination's URLs.
    consolidated : bool, default True
        Write consolidated metadata, as ``ds.to_zarr`` does, so that
        ``xr.open_zarr(dst)`` reads one document.
    compute : bool, default True
        Copy now; with False, write the metadata and return a ``dask.delayed`` (as
        ``shardwise.to_zarr`` does) whose computing, on any dask scheduler, copies
        the shards and gives the report.
    progress : bool, default False
        Show a progress bar of the copy's tasks (tqdm's, or the cluster's under a
        default ``distributed.Client``).

    Returns
    -------
    ReshardReport or dask.delayed.Delayed
        What was written, and how each array's chunks were moved; a ``Delayed`` of it
        with ``compute=False``.

    Raises
    ------
    shardwise.errors.WriteError
        Before anything is written: sizes that do not fit (a shard not a multiple of
        its inner chunk, a dimension no array has), a destination that is the source.
    shardwise.errors.StoreExistsError
        The destination exists and ``mode="w-"``, or ``mode="a"`` and it was not made by
        a reshard with these arguments.

    Examples
    --------
    >>> report = shardwise.reshard("era5-v2.zarr", "era5.zarr", shards={"time": 100})
    """

    if mode not in ("w-", "w", "a"):
        raise WriteError("unknown mode", expected="'w-', 'w' or 'a'", found=repr(mode))
    resume = mode == "a"
    check_apart(location(src, None, storage_options), location(dst, None, target_options))
    if mode == "w":
        check_replaceable(dst, None, target_options)
    plans, report, _ = prepare(
        open_source(src, group, storage_options),
        dst,
        shards=shards,
        chunks=chunks,
        codecs=codecs,
        variables=variables,
        mode="w-" if resume else mode,
        resume=resume,
        target_options=target_options,
        consolidated=consolidated,
    )
    delayed = copy_graph(plans, "shardwise-reshard", "shardwise-resharded")
    report.shards = sum(len(t) for _, t in plans)
    if not compute:
        return dask.delayed(report.add, pure=True)(delayed)
    (stats,) = compute_with_progress(delayed, progress=progress, desc="reshard")
    return report.add(stats)


def _chosen(
    source: Source, variables: Sequence[str] | None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The arrays of ``source`` to reshard (``variables``, or all): those it reads, and
    those it cannot (copied whole, or named); refuses names it does not have."""
    chosen = dict(source.arrays)
    unreadable = dict(source.unreadable)
    if variables is None:
        return chosen, unreadable
    wanted = [node_path(v.strip("/")) for v in variables]
    missing = [v for v in wanted if v not in chosen and v not in unreadable]
    if missing:
        raise WriteError(
            "variables names arrays the source does not have",
            expected=f"some of {sorted([*chosen, *unreadable])}",
            found=str(missing),
        )
    chosen = {k: v for k, v in chosen.items() if k in wanted}
    unreadable = {k: v for k, v in unreadable.items() if k in wanted}
    return chosen, unreadable


def _resumes(exists: bool, mode: str, resume: bool) -> bool:
    """Whether the run resumes: ``resume`` where the destination ``exists`` (holds a
    zarr.json); refuses an existing destination with ``mode="w-"`` and no ``resume``."""
    if exists and mode == "w-" and not resume:
        raise StoreExistsError(
            "the destination holds Zarr data already",
            expected="no zarr.json at the destination",
            found="a zarr.json",
            key="zarr.json",
            advice="Pass mode='a' (shardwise reshard --resume) to complete an interrupted "
            "reshard, or mode='w' (--overwrite) to replace it.",
        )
    return resume and exists  # (nothing to resume: a fresh run)


@dataclass(frozen=True, slots=True)
class _Planned:
    """A job as planned before anything is written: the ``source``; the arrays to
    reshard (``chosen``: rel -> source info) with, for each, the target metadata,
    whether its chunks are repacked and what its zlib chunks are recoded to
    (``targets``) and the target shards to fill (``shards_of``); the arrays copied
    whole (``copies``: rel -> opened array and its copy plan); the ``groups`` to
    write; ``same_grid``: ``migrate``'s mode."""

    source: Source
    chosen: dict[str, Any]
    targets: dict[str, tuple[Any, bool, str | None]]
    shards_of: dict[str, Targets]
    copies: dict[str, tuple[Any, Any]]
    groups: list[str]
    same_grid: bool


def prepare(
    source: Source,
    dst: Any,
    *,
    shards: Sizes,
    chunks: Sizes,
    codecs: Any,
    variables: Sequence[str] | None,
    mode: str,
    resume: bool,
    target_options: dict[str, Any] | None,
    consolidated: bool,
    same_grid: bool = False,
    exists: bool | None = None,
) -> tuple[list[tuple[CopyPlan, Targets]], ReshardReport, dict[str, str]]:
    """Plan every array of ``source`` (and refuse what cannot be done) before writing;
    then write the groups and array metadata at ``dst`` (``exists``: whether it holds a
    ``zarr.json``, when the caller has looked). Returns each array's plan and target
    shards to fill, the report, and the arrays whose zlib chunks are recoded (with what).

    ``same_grid`` is ``migrate``'s mode (``shardwise.tools.migrate``), ``reshard``'s
    repack with the grid unchanged: each array keeps its grid, its sharding (or its
    absence) and its codecs (zlib as gzip, the chunks recoded one by one), its inner
    chunks are repacked in ``C`` order as the source wrote them, its fill value is the
    ``_FillValue`` attribute, and a run that resumes writes the metadata again rather
    than checking it. The planning and the writing are the same code either way."""
    import zarr

    chosen, unreadable = _chosen(source, variables)
    _check_request(source, chosen, unreadable, shards, chunks)
    opened = {}  # the arrays copied whole, opened once
    for rel, err in unreadable.items():
        opened[rel] = open_copyable(source, rel, err)
    targets = {
        rel: plan_array(
            source.kind, info, rel, shards=shards, chunks=chunks, codecs=codecs, same_grid=same_grid
        )
        for rel, info in chosen.items()
    }

    # the destination
    if exists is None:
        exists = has_zarr_json(dst, target_options)
    resume = _resumes(exists, mode, resume)
    groups = _groups(source, [*chosen, *unreadable], variables)
    copies = {rel: (arr, copy_plan(arr, source, rel)) for rel, arr in opened.items()}
    # which target shards take data from which source objects (the source is listed)
    shards_of = {
        rel: shards_to_fill(source.store, chosen[rel], ArrayInfo.from_metadata(metadata, rel))
        for rel, (metadata, _, _) in targets.items()
    }
    job = _Planned(source, chosen, targets, shards_of, copies, groups, same_grid)
    keep = resume and not same_grid  # the metadata already there is checked, not written

    _dry_run(job)
    root = zarr.open_group(
        dst, mode="a" if resume else "w", zarr_format=3, storage_options=target_options
    )
    dst_store = root.store_path.store
    prefix = root.store_path.path.strip("/")
    if keep:  # the destination must be this run's, before anything is written to it
        for rel, (metadata, _, _) in targets.items():
            _check_resumable(dst_store, _under(prefix, rel), metadata, rel)
    _write_metadata(job, root, resume=keep, dry=False)
    plans, report, recoded = _copy_plans(job, dst_store, prefix, resume)
    if consolidated:
        consolidate_metadata(root.store_path.store, root.store_path.path or None)
    return plans, report, recoded


def _check_request(
    source: Source,
    chosen: Mapping[str, ArrayInfo],
    unreadable: Mapping[str, Exception],
    shards: Sizes,
    chunks: Sizes,
) -> None:
    """Refuses an array taken (not left out by ``variables``) whose document no reader
    opens, before the sizes, which cannot name its dimensions; then sizes that do not
    fit the dimensions of the arrays taken (:func:`check_sizes`)."""
    for rel, err in unreadable.items():
        if rel in source.damaged:  # a document no reader opens: named (unless left out)
            raise err
    known = {n for info in chosen.values() for n in array_names(info)}
    check_sizes("shards", shards, known)
    check_sizes("chunks", chunks, known)


def _groups(source: Source, arrays: Sequence[str], variables: Sequence[str] | None) -> list[str]:
    """The groups of ``source`` to write: all of them, or, with ``variables``, the root
    and the groups above the ``arrays`` taken."""
    needed = {""}
    for rel in arrays:
        parts = rel.split("/")[:-1]
        needed |= {"/".join(parts[: i + 1]) for i in range(len(parts))}
    return sorted(g for g in source.groups if g in needed or variables is None)


def _write_metadata(job: _Planned, root: Any, *, resume: bool, dry: bool) -> None:
    """Every metadata write of the destination ``root`` (groups, arrays, whole copies).
    With ``resume`` (a destination whose metadata was checked), the groups' attributes
    and the arrays' metadata are left as they are and only the arrays copied whole that
    are not there yet are copied; with ``dry``, those get their metadata alone."""
    from zarr.buffer import default_buffer_prototype

    proto = default_buffer_prototype()
    store, prefix = root.store_path.store, root.store_path.path.strip("/")
    for g in job.groups:
        node = root if not g else root.require_group(g)
        attrs = job.source.groups.get(g, {})
        if (attrs or job.same_grid) and not resume:
            node.attrs.update(attrs)
    for rel, (metadata, _, _) in job.targets.items():
        if resume:  # checked before anything was written
            continue
        with rectilinear_grids():
            for key, buf in metadata.to_buffer_dict(proto).items():
                _compat.sync(store.set(key_under(prefix, f"{_under(prefix, rel)}/{key}"), buf))
    for rel, (arr, copy) in job.copies.items():
        if not (resume and _compat.sync(store.exists(f"{_under(prefix, rel)}/zarr.json"))):
            copy_whole(arr, rel, root, copy, dry=dry)


def _dry_run(job: _Planned) -> None:
    """The metadata writes into memory first: what zarr-python refuses (a fill value it
    cannot encode, attributes that are not JSON) is refused before the first byte of the
    destination."""
    import zarr
    from zarr.storage import MemoryStore

    dry_root = zarr.open_group(MemoryStore(), mode="w", zarr_format=3)
    try:
        _write_metadata(job, dry_root, resume=False, dry=True)
    except ShardwiseError:
        raise
    except Exception as e:
        raise WriteError(
            "the destination's metadata cannot be written",
            expected="metadata zarr-python writes",
            found=f"{type(e).__name__}: {e}",
            advice="Leave the array out with variables=[...] (--var). Nothing was written.",
        ) from e


def _copy_plans(
    job: _Planned, dst_store: Any, prefix: str, resume: bool
) -> tuple[list[tuple[CopyPlan, Targets]], ReshardReport, dict[str, str]]:
    """Each resharded array's copy plan (into ``dst_store`` under ``prefix``) with the
    target shards it fills, the report of what is written and how, and the arrays whose
    zlib chunks are recoded (with what)."""
    report = ReshardReport(groups=[g or "/" for g in job.groups])
    plans = []
    recoded: dict[str, str] = {}  # the arrays whose zlib chunks are recoded
    for rel, (metadata, repack, changed) in job.targets.items():
        dst_info = ArrayInfo.from_metadata(metadata, _under(prefix, rel))
        plan = CopyPlan(
            job.source.store,
            job.chosen[rel],
            dst_store,
            dst_info,
            repack,
            resume,
            order="C" if job.same_grid else "morton",  # the shards keep their layout
            recode=changed is not None,
        )
        plans.append((plan, job.shards_of[rel]))
        report.arrays.append(rel)
        (report.repacked if repack else report.reencoded).append(rel)
        if changed is not None:
            recoded[rel] = changed
    for rel in job.copies:
        report.arrays.append(rel)
        report.copied.append(rel)
    return plans, report, recoded


def _under(prefix: str, rel: str) -> str:
    """The path of the array ``rel`` under the destination's root ``prefix``."""
    return "/".join(p for p in (prefix, rel) if p)


def _check_resumable(store: Any, where: str, metadata: Any, rel: str) -> None:
    """A destination to resume must hold this array with the metadata this run writes."""
    import json

    from zarr.buffer import default_buffer_prototype

    key = f"{where}/zarr.json"
    buf = _compat.sync(store.get(key, default_buffer_prototype()))
    with rectilinear_grids():
        want = json.loads(
            metadata.to_buffer_dict(default_buffer_prototype())["zarr.json"].to_bytes()
        )
    found = None if buf is None else json.loads(buf.to_bytes())
    if found != want:
        raise StoreExistsError(
            "the destination was not made by a reshard with these arguments",
            expected="the array's metadata this run would write",
            found="no array" if found is None else "other metadata",
            array=rel,
            key=key,
            advice="Resume with the same shards, chunks and codecs, or pass mode='w' "
            "(--overwrite) to start again.",
        )
