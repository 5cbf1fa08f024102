"""The write planner both write paths share: the grid a new array gets, the grid an
existing one grows to on append, where a region lies, which data types may go into an
existing array, the default mode, axis numbers as users give them, and the data step's
graph (into an Icechunk fork or not).

``shardwise.array.to_zarr`` writes one dask array (:mod:`shardwise.array.api`) and
``shardwise.to_zarr`` the variables of a Dataset (:mod:`shardwise.xarray.to_zarr`). The two take their
options differently (sizes per axis number, or per dimension name through xarray's
encodings) and word their refusals for their callers, but every decision about the
arrays they write is made here, once: the xarray layer builds on this module, never the
reverse. Everything here is pure arithmetic on shapes, dask chunks and zarr metadata,
except :func:`data_write`, which builds (and does not run) the write graph.
"""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

import shardwise._compat as _compat
import shardwise.format.rectilinear as rl
from shardwise.array.options import WriteOptions
from shardwise.errors import ShardwiseError, UnprotectedWriteWarning, WriteError
from shardwise.format.grid import target_bytes
from shardwise.format.metadata import FIXED_KINDS, ArrayInfo
from shardwise.format.v2 import array_info as v2_array_info
from shardwise.graph.write import data_graph
from shardwise.io.capabilities import conditional, icechunk_session
from shardwise.io.conditional import LocalConditional
from shardwise.io.mounts import flock_refusal, local_guard_reason
from shardwise.io.opener import conditional_path
from shardwise.io.versioned import Conditional

__all__ = [
    "GridPlan",
    "check_known_chunks",
    "without_empty_blocks",
    "appended_grid",
    "axis_of",
    "castable",
    "Guard",
    "check_guardable",
    "guard_of",
    "warn_unprotected",
    "chunk_target",
    "dask_edges",
    "dask_grid",
    "data_write",
    "default_format",
    "default_mode",
    "no_axis",
    "padded_edges",
    "rectilinear",
    "region_bounds",
]


# -- axes ----------------------------------------------------------------------------------
def check_known_chunks(blocks: Sequence[Sequence[float]], name: str) -> None:
    """Refuse dask chunks of unknown size (NaN in ``x.chunks``, as after ``x[x > 0]``)
    before anything is written, with dask's own advice: which shard an element lands in
    is not known until the sizes are."""
    unknown = [axis for axis, sizes in enumerate(blocks) if any(math.isnan(s) for s in sizes)]
    if unknown:
        raise WriteError(
            "a dask array with unknown chunk sizes cannot be written",
            expected="chunk sizes known along every axis",
            found=f"unknown sizes (NaN) along axis {', '.join(map(str, unknown))}",
            array=name,
            advice="Compute the sizes first: x = x.compute_chunk_sizes() for a dask array "
            "(a variable's .data in a Dataset); see "
            "https://docs.dask.org/en/latest/array-chunks.html#unknown-chunks. "
            "Nothing was written.",
        )


def without_empty_blocks(x: Any) -> Any:
    """The dask array ``x`` without its chunks of size 0 along axes that hold data (as
    ``(10, 10, 5, 0, 0)`` after ``compute_chunk_sizes()``): such a chunk holds nothing,
    so it owns no shard. The same tasks (``x.blocks`` selects, nothing is moved); ``x``
    itself when it has none. A zero-length axis keeps its one empty chunk."""
    for axis, sizes in enumerate(x.chunks):
        if 0 in sizes and any(sizes):
            index: list[Any] = [slice(None)] * x.ndim
            index[axis] = [i for i, n in enumerate(sizes) if n]
            x = x.blocks[tuple(index)]
    return x


def axis_of(value: Any, ndim: int) -> int | None:
    """``value`` as an axis number from 0 to ``ndim - 1`` (negative ones count from the
    end), or None when it is not one."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        return None
    return int(value) % ndim if -ndim <= value < ndim else None


def no_axis(
    kind: type[ShardwiseError], what: str, value: Any, ndim: int, name: str, key: str | None = None
) -> ShardwiseError:
    """The ``kind`` of error for ``value`` (what the user gave as ``what``) that is no
    axis of an array of ``ndim`` axes."""
    return kind(
        f"{what} is not an axis of the array",
        expected=f"axis numbers from {-ndim} to {ndim - 1}",
        found=repr(value),
        array=name,
        key=key,
    )


# -- modes ---------------------------------------------------------------------------------
def default_mode(mode: str | None, region: Any, append_dim: Any) -> str | None:
    """``mode``, or where it is None the mode a write means: ``"a"`` for an append,
    ``"r+"`` for a region write, else ``"w-"`` (create, refusing what exists). Both
    paths then refuse the combinations they do not take, in their own words."""
    if mode is not None:
        return mode
    return "a" if append_dim is not None else "r+" if region is not None else "w-"


def default_format() -> int:
    """The Zarr format of a new store when none is given: zarr-python's
    ``default_zarr_format`` setting (3 unless changed), as xarray and zarr-python
    themselves take it."""
    import zarr

    return int(zarr.config.get("default_zarr_format", 3))


# -- the grid of a new array ------------------------------------------------------------------
@dataclass(frozen=True)
class GridPlan:
    """The grid of a new array: regular shards (a tuple) or rectilinear ``edges`` (per
    dimension one size, or the tuple of shard sizes), and the inner chunks; ``shards``
    and ``edges`` None for an unsharded array with ``inner`` as its chunks."""

    shards: tuple[int, ...] | None
    edges: tuple[Any, ...] | None
    inner: tuple[int, ...]


def dask_grid(blocks: Sequence[Sequence[int]]) -> tuple[int, ...]:
    """The regular grid whose cells are the dask chunks ``blocks`` (regular ones: all
    equal but a shorter last one), at least 1 along every axis."""
    return tuple(max(1, c[0]) if c else 1 for c in blocks)


def dask_edges(
    name: Hashable, dims: Sequence[Hashable], blocks: Sequence[Sequence[int]]
) -> tuple[Any, ...]:
    """The rectilinear shard edges whose shards are the dask chunks ``blocks``, checked
    (no empty chunk): one size where a dimension's chunks are regular, else the tuple of
    sizes. A dimension in one dask chunk stays a tuple of one edge until padded
    (:func:`padded_edges`)."""
    rl.check_blocks(name, dims, blocks)
    return tuple(b[0] if rl.is_regular(b) and len(b) > 1 else tuple(b) for b in blocks)


def chunk_target() -> int:
    """The inner chunk size aimed at, in bytes: dask config ``shardwise.chunk-bytes``
    (1 MiB), for :func:`shardwise.format.rectilinear.auto_inner` and the like."""
    return target_bytes("chunk-bytes")


def padded_edges(
    edges: Sequence[Any], inner: Sequence[int], *, collapse: bool = False
) -> tuple[Any, ...]:
    """``edges`` with the last shard of every listed dimension padded to a multiple of
    the inner chunk; ``collapse``: a dimension left with one edge becomes a regular
    size (the xarray path's grids, so other readers see it regular)."""
    return tuple(
        e if isinstance(e, int) else rl.single(rl.pad(e, c)) if collapse else rl.pad(e, c)
        for e, c in zip(edges, inner, strict=True)
    )


# -- the grid of an existing array after an append ----------------------------------------------
def appended_grid(
    metadata: Any,
    name: Hashable,
    dims: Sequence[Hashable],
    axis: int,
    blocks: Sequence[int],
    *,
    dask_shards: bool = False,
    keep_regular: bool = False,
) -> list[Any] | None:
    """The grid a Zarr v3 array (``metadata``) gets when dask chunks of sizes ``blocks``
    are appended along ``axis``, each a shard of its own, checked; None when the grid
    only grows (xarray's or zarr-python's resize keeps it).

    A rectilinear grid always takes the appended chunks as shards; a regular sharded one
    only with ``dask_shards`` (``shards="dask"``). ``keep_regular``: a regular dimension
    of a rectilinear grid stays regular unless ``dask_shards`` (the xarray path)."""
    if metadata.zarr_format != 3:
        return None
    grid = metadata.chunk_grid
    if isinstance(grid, _compat.RectilinearChunkGridMetadata):
        old = tuple(grid.chunk_shapes)
    elif dask_shards and _compat.sharding_codec(metadata) is not None:
        old = tuple(grid.chunk_shape)
    else:
        return None
    if keep_regular and isinstance(old[axis], int) and not dask_shards:
        return None
    return rl.appended(metadata, name, dims, axis, blocks)


def rectilinear(metadata: Any) -> bool:
    """Whether the array of ``metadata`` has a rectilinear chunk (shard) grid."""
    return isinstance(getattr(metadata, "chunk_grid", None), _compat.RectilinearChunkGridMetadata)


# -- regions and data types ------------------------------------------------------------------
def region_bounds(sel: slice, n: int) -> tuple[int, int] | None:
    """Where the slice ``sel`` lies along a dimension of length ``n``: ``(start, stop)``
    as ``slice.indices`` gives them, or None when a bound given lies outside
    ``-n..n`` (past the array: a region write does not grow it)."""
    start, stop, _ = sel.indices(n)  # first: it refuses bounds that are not integers
    if any(b is not None and not -n <= b <= n for b in (sel.start, sel.stop)):
        return None
    return start, stop


def castable(new: Any, old: Any) -> bool:
    """Whether data of dtype ``new`` may be written into an array of dtype ``old``: cast
    within its kind of values (numpy's ``same_kind``), never complex into real, float
    into int or dates into numbers."""
    return bool(np.can_cast(new, old, casting="same_kind"))


# -- other jobs writing the same array -------------------------------------------------------
def cuts_shards(layout: Any, box: Sequence[tuple[int, int]]) -> bool:
    """Whether a write of ``box`` covers some shard (or chunk of an unsharded array) in
    part: a shard it would merge into what is stored."""
    for dim, (lo, hi) in zip(layout.dims, box, strict=True):
        if hi <= lo:
            return False  # writes nothing
        first = int(dim.shard_of(np.array([lo]))[0])
        if dim.shard_start(first) != lo:
            return True
        if hi < dim.extent and dim.shard_start(int(dim.shard_of(np.array([hi]))[0])) != hi:
            return True
    return False


@dataclass(frozen=True, slots=True)
class Guard:
    """How one write guards against other jobs writing the same arrays, worked out once
    from ``independent_writers`` and the store (:func:`guard_of`): ``on``, its merged
    shards and grown metadata are put only if unchanged since read; ``asked``, the
    guard was asked for (``True`` or ``"auto"``), so what cannot be guarded is refused
    (``required``: ``True``) or written with an
    :class:`~shardwise.errors.UnprotectedWriteWarning` (``"auto"``), by
    :func:`check_guardable`."""

    on: bool
    asked: bool
    required: bool


_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # shardwise's folder


def warn_unprotected(unguarded: Sequence[str]) -> None:
    """Say once, for a whole write, what it writes without the guard against other jobs
    (the reasons :func:`check_guardable` returned), at the user's call."""
    if not unguarded:
        return
    warnings.warn(
        "written without a guard against every other job ("
        + "; ".join(sorted(unguarded))  # (in the arrays' order, whatever the write's)
        + "): another job writing the same shards at the same time could lose rows, as "
        "with Dataset.to_zarr. Pass independent_writers=False if this job is the only "
        "writer, or True to be refused instead.",
        UnprotectedWriteWarning,
        skip_file_prefixes=(_PACKAGE,),  # (points at the user's call)
    )


def guard_of(options: WriteOptions, store: Any, storage_options: Any, session: Any) -> Guard:
    """The :class:`Guard` of a write of ``options`` into ``store``: with ``"auto"``, on
    where the store has conditional puts (:func:`shardwise.io.capabilities.conditional`)
    or is an Icechunk session (whose commit checks for conflicts)."""
    setting = options.independent_writers
    if setting is True or setting is False:
        return Guard(on=setting, asked=setting, required=setting)
    found = None if session is not None else conditional_path(store, storage_options)
    can = session is not None or (found is not None and usable(found[1]))
    return Guard(on=can, asked=True, required=False)


def usable(guard: Conditional) -> bool:
    """Whether a store's conditional puts can be made at all: not on a local file
    system that refuses ``flock`` (:func:`shardwise.io.mounts.flock_refusal`)."""
    return not (isinstance(guard, LocalConditional) and flock_refusal(guard.root))


def shared_reason(guard: Conditional | None) -> str | None:
    """Why a store's conditional puts do not keep out every other job: a local folder
    on a file system whose ``flock`` on folders stays on one node (NFS, Lustre...) or
    cannot be known to reach others (:func:`shardwise.io.mounts.local_guard_reason`);
    None for the rest."""
    if isinstance(guard, LocalConditional):
        return local_guard_reason(guard.root)
    return None


def check_guardable(
    store: Any,
    target: Any,
    box: Sequence[tuple[int, int]],
    dtype: Any,
    *,
    fresh: bool,
    append: bool,
    name: str,
    key: str,
    required: bool = True,
) -> str | None:
    """Refuse, before anything is written, a write into an existing array that other
    jobs may write at the same time (``independent_writers``) when it would merge into
    shards it covers in part, or grow the array (an append), and the store or the path
    cannot make those puts only if nothing changed since they were read: the store has
    no conditional put (:mod:`shardwise.io.conditional`: local files, memory, S3 and
    obstore have), or the data would be merged by ``dask.array.store`` (Zarr v2,
    variable-length strings; their aligned appends are fine, the metadata being grown
    with a conditional put). Arrays this write creates (``fresh``) and Icechunk sessions
    (whose commit checks for conflicts) need no check. Unless ``required``
    (``independent_writers="auto"``), such a write is not refused: it goes ahead as
    ``Dataset.to_zarr``'s would, and what it does unguarded is returned, for the
    caller to say once (:func:`warn_unprotected`); None when nothing needs saying."""
    if fresh or icechunk_session(store) is not None:
        return None
    try:
        if target.metadata.zarr_format == 3:
            layout = ArrayInfo.from_metadata(target.metadata, target.path).layout
        else:
            layout = v2_array_info(target.metadata, target.path).layout
        merges = cuts_shards(layout, box)
    except ShardwiseError:  # a type shardwise does not read (Zarr v2 bytes, say)
        outer = target.shards or target.chunks  # (a regular grid, then)
        merges = any(
            lo < hi and (lo % n or (hi % n and hi < extent))
            for (lo, hi), n, extent in zip(box, outer, target.shape, strict=True)
        )
    if not (append or merges):
        return None
    what = "writes shards in part" if merges else "grows the array (an append)"
    shard_writer = target.metadata.zarr_format == 3 and np.dtype(dtype).kind in FIXED_KINDS
    guard = conditional(store)
    if guard is None:
        how = (
            f"the store ({type(store).__name__}) has no put that is made only if the "
            "object is unchanged"
        )
    elif merges and not shard_writer:
        how = (
            "Zarr v2 arrays and variable-length strings are written through "
            "dask.array.store, whose puts into chunks it covers in part are plain"
        )
    elif (shared := shared_reason(guard)) is not None:
        how = shared
    else:
        return None
    if not required:
        return f"{name!r} {what}: {how}"
    raise WriteError(
        "this write could lose another job's rows",
        expected="puts made only if nothing changed since they were read (local file "
        "systems whose locks every writer shares, memory, S3, Google Cloud Storage, Azure "
        "Blob Storage or obstore stores; Zarr v3 arrays of fixed-size types)",
        found=f"a write that {what}, into an array other jobs may write at the same time; {how}",
        array=name,
        key=key,
        advice="If no other job writes this array while this one runs, pass "
        "independent_writers=False (the last put of a shard then wins) or leave it out "
        "(the write then goes ahead with a warning). Nothing was written.",
    )


# -- the data step -----------------------------------------------------------------------------
def data_write(
    source: Any,
    target: Any,
    region: tuple[slice, ...],
    offset: tuple[int, ...],
    *,
    options: WriteOptions,
    fresh: bool,
    fork: Any = None,
    guarded: bool = False,
) -> Any:
    """The delayed write of the dask array ``source`` into the zarr array ``target`` at
    ``region`` (``offset``: its start): one task per shard, as ``options`` say (its
    ``progress`` is the caller's, who computes the write). ``fresh``: the array was
    created by this call, so no shard of it exists yet. ``fork``: an Icechunk fork
    session to write through (the delayed then computes to the fork session holding the
    changes, to merge into the session the fork came from). ``guarded``: other jobs may
    write the array at the same time (shards merged with what is stored are put only if
    unchanged since read; see :func:`shardwise.graph.tasks.write_shard`)."""
    return data_graph(
        source,
        target,
        region,
        offset,
        options.write_empty_chunks,
        options.write_order,
        fresh,
        options.shards_per_task or 1,
        options.encode_split,
        store=None if fork is None else fork.store,
        guarded=guarded,
    )
