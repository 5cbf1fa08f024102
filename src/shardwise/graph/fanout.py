"""The fan-out read graph: one index task per shard, read tasks below it.

For one array, :func:`fanout_array` builds a dask array whose graph has

- ``shardwise-index-<token>``: one task per shard that several dask chunks share,
  reading the shard's index (one small request, or none when this process has it
  cached: the read tasks then check it as ``ReadOptions.recheck_cached_data`` says, as
  they would a cached index of their own); its result, the decoded
  index with the version of the shard it came from, is a few kilobytes and is handed
  to every read task of the shard, on any worker;
- ``shardwise-read-<name>-<token>``: one task per dask chunk, ``getter(source, region)``
  as in :func:`dask.array.from_array`, where ``source`` is the variable's lazily decoded
  array with the indexes of the shared shards the chunk touches supplied to the reader.
  The reader then asks only for coalesced byte ranges of the inner chunks it needs,
  each against the index's version: a shard replaced since the index task read it is
  found changed, and the read task reads its index again itself. A
  shard that only one dask chunk touches (``chunks="shards"``) needs no index task: its
  read task reads it as the engine does, the whole object in one request when it wants
  most of it, else the index and then coalesced ranges.

The source and the reader sit in one key each (``original-<read layer>``,
``reader-<read layer>``) that the tasks refer to, or, with ``inline_array=True``, in
every task (:func:`dask.array.from_array`'s two ways). ``shardwise.array.from_zarr`` names the
read layer itself (``name=``, or a name tokenized from the array it reads).

Because read tasks are dask ``getter`` tasks, dask's optimizer fuses a later slice
(``ds.isel(time=slice(0, 5))``) into the read, and culls the index tasks of shards no
chunk needs: a selection reads only the shards, indexes and inner chunks it touches.

Dask chunks are groupings of whole inner chunks: :func:`block_sizes` rounds requested
sizes to inner-chunk boundaries, with a :class:`~shardwise.errors.ChunkRoundingWarning` when it has to.
"""

from __future__ import annotations

import itertools
import math
import warnings
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import numpy.typing as npt

import shardwise._compat as _compat
from shardwise._gc import paused_gc
from shardwise.errors import ChunkRoundingWarning, ChunksError
from shardwise.graph.preferred import preferred_chunks
from shardwise.io.cache import SUPPLIED, IndexEntry
from shardwise.io.reader import ArrayReader

if TYPE_CHECKING:
    from shardwise.format.grid import DimGrid

__all__ = ["block_sizes", "fanout_array", "stored_reader"]

# what one dimension's chunks may be asked as
DimChunks = int | str | tuple[int, ...] | None

# The most dask chunks one array may be split into. Far more tasks than a dask scheduler
# handles well; the bound is there so that an absurd shape (a dimension of 2**40) raises
# ChunksError at once instead of listing its chunks until memory runs out.
MAX_CHUNKS = 10_000_000


def _boundaries(dim: DimGrid, unit: str) -> list[int]:
    """Positions along a dimension where a shard (``unit="shards"``) or an inner chunk
    (``unit="inner"``) starts, plus the extent; clipped to the extent."""
    out = [0]
    for shard in range(dim.nshards):
        start = dim.shard_start(shard)
        step = dim.shard_size(shard) if unit == "shards" else dim.inner_size(shard)
        stop = min(start + dim.shard_size(shard), dim.extent)
        out.extend(range(start + step, stop, step))
        out.append(stop)
    return out


def _count(dim: DimGrid, unit: str) -> int:
    """How many shards (``unit="shards"``) or inner chunks (``"inner"``) hold part of
    the array along a dimension, without listing them."""
    if dim.regular:
        step = dim.shard_size(0) if unit == "shards" else dim.inner_size(0)
        return -(-dim.extent // step)
    if unit == "shards":
        return dim.nshards
    return sum(
        -(-min(dim.shard_size(s), dim.extent - dim.shard_start(s)) // dim.inner_size(s))
        for s in range(dim.nshards)
    )


def _snap(wanted: Sequence[int], dim: DimGrid) -> list[int]:
    """Move each wanted boundary to the nearest inner-chunk boundary of ``dim`` (ties
    go up); keep 0 and the extent, drop duplicates. A regular grid's boundaries are the
    multiples of the inner size: worked out, not listed."""
    extent = dim.extent
    if dim.regular:
        unit = dim.inner_size(0)

        def nearest(b: int) -> int:
            lo = b // unit * unit
            hi = min(lo + unit, extent)
            return lo if b - lo < hi - b else hi

    else:
        grid = np.asarray(_boundaries(dim, "inner"), dtype=np.int64)

        def nearest(b: int) -> int:
            i = int(np.searchsorted(grid, b))
            lo, hi = int(grid[max(i - 1, 0)]), int(grid[min(i, len(grid) - 1)])
            return lo if b - lo < hi - b else hi

    out = [0]
    for b in wanted[1:-1]:
        snapped = nearest(int(b))
        if out[-1] < snapped < extent:
            out.append(snapped)
    out.append(extent)
    return out


def _too_many(count: int, where: str, name: str, what: str = "dask chunks") -> ChunksError:
    return ChunksError(
        f"too many {what} {where}",
        expected=f"at most {MAX_CHUNKS:,} dask chunks per array",
        found=f"{count:,}",
        array=name or None,
        advice="Ask for larger chunks (an int size or -1 for the dimensions concerned), "
        "or read a selection with shardwise.ArrayReader.",
    )


class _Axis(NamedTuple):
    """One dimension whose chunks are being interpreted: its grid, its place among the
    caller's ``dims`` (looked up only when a message names it), and the array's name
    and emptiness."""

    dim: DimGrid
    dims: Sequence[Hashable]
    axis: int
    name: str
    empty: bool

    @property
    def label(self) -> Hashable:
        return self.dims[self.axis]


class _Plan(NamedTuple):
    """What :func:`normalize_chunks` is given for one dimension (a size, explicit sizes
    or ``"auto"``), how many chunks that makes (0 for ``"auto"``: dask decides), and the
    note for the :class:`~shardwise.errors.ChunkRoundingWarning` when the sizes asked for were moved."""

    spec: int | str | tuple[int, ...]
    nchunks: int
    moved: str | None = None


def block_sizes(
    reader: ArrayReader,
    dims: Sequence[Hashable],
    chunks: str | Mapping[Hashable, DimChunks] | None,
    *,
    name: str = "",
    target_bytes: int | None = None,
) -> tuple[tuple[int, ...], ...]:
    """Dask chunk sizes for one array, along whole inner chunks.

    ``chunks`` is None (whole shards: one per shard, several together over a
    network, :func:`preferred_chunks`), ``"shards"`` (one chunk per shard), ``"inner"`` (one per inner chunk),
    ``"auto"`` (whole inner chunks or shards toward ``target_bytes``, by default dask's
    ``array.chunk-size``), or a mapping from dimension name to one of those, an int size,
    a tuple of sizes, ``-1`` (the whole dimension) or ``None`` (shards). Dimensions the
    mapping leaves out get one chunk per shard. Sizes that cut inner chunks are moved to
    the nearest inner-chunk boundary, with a :class:`~shardwise.errors.ChunkRoundingWarning`.
    """
    if chunks is None:  # what the engine's chunks={} gives
        return _spelled_out(preferred_chunks(reader.info, reader.fetcher.kind), reader)
    import dask
    from dask.utils import parse_bytes

    layout = reader.info.layout
    per_dim = _per_dim(chunks, dims, layout.ndim, name)
    if target_bytes is None:
        target_bytes = int(parse_bytes(dask.config.get("array.chunk-size")))
    # an array holding nothing needs no reads: the chunks asked for are checked, but it
    # gets one chunk along every dimension (a huge dimension beside an empty one is fine)
    empty = 0 in layout.shape
    plans = [
        _plan(_Axis(dim, dims, axis, name, empty), want)
        for axis, (dim, want) in enumerate(zip(layout.dims, per_dim, strict=True))
    ]
    sizes = _expand(reader, dims, plans, target_bytes, name)
    if (total := math.prod(len(s) for s in sizes)) > MAX_CHUNKS:
        raise _too_many(total, "in all", name)
    moved = [p.moved for p in plans if p.moved is not None]
    if moved:
        _warn_moved(layout, name, moved)
    return sizes


def _spelled_out(
    sizes: Sequence[int | tuple[int, ...]], reader: ArrayReader
) -> tuple[tuple[int, ...], ...]:
    """Per dimension one size (the last chunk cut at the extent) or the sizes, as
    dask's chunks: every size spelled out."""
    out: list[tuple[int, ...]] = []
    for size, dim in zip(sizes, reader.info.layout.dims, strict=True):
        if isinstance(size, tuple):
            out.append(size)
        elif dim.extent == 0:
            out.append((0,))
        else:
            full, rest = divmod(dim.extent, size)
            out.append((size,) * full + ((rest,) if rest else ()))
    return tuple(out)


def _per_dim(
    chunks: str | Mapping[Hashable, DimChunks], dims: Sequence[Hashable], ndim: int, name: str
) -> list[DimChunks]:
    """What each dimension of the array is asked to be chunked as."""
    if isinstance(chunks, str):
        return [chunks] * ndim
    if isinstance(chunks, Mapping):
        # dimensions the array does not have are someone else's (open_dataset checks them)
        return [chunks.get(d) for d in dims]
    raise ChunksError(
        "unknown chunks",
        expected='"shards", "inner", "auto" or a dict by dimension name',
        found=repr(chunks),
        array=name or None,
    )


def _plan(ax: _Axis, want: DimChunks) -> _Plan:
    """Check what one dimension is asked to be chunked as, and say what dask is to
    expand it from. Refuses more than :data:`MAX_CHUNKS` chunks along it before any
    are listed."""
    unit = "shards" if want is None else want if isinstance(want, str) else ""
    if ax.dim.extent == 0:
        return _Plan((0,), 1)
    if unit == "shards" or unit == "inner":
        return _unit_plan(ax, unit)
    if want == "auto":  # an empty array gets one chunk along every dimension
        return _Plan((ax.dim.extent,), 1) if ax.empty else _Plan("auto", 0)
    if isinstance(want, int | np.integer) and not isinstance(want, bool):
        return _size_plan(ax, want)
    if isinstance(want, tuple | list):
        return _sizes_plan(ax, want)
    raise ChunksError(
        f"unknown chunks along {ax.label!r}",
        expected='"shards", "inner", "auto", an int, a tuple of ints, -1 or None',
        found=repr(want),
        array=ax.name or None,
    )


def _unit_plan(ax: _Axis, unit: str) -> _Plan:
    """One chunk per shard (``unit="shards"``) or per inner chunk (``"inner"``)."""
    dim = ax.dim
    if ax.empty:
        return _Plan((dim.extent,), 1)
    if (n := _count(dim, unit)) > MAX_CHUNKS:
        each = "shard" if unit == "shards" else "inner chunk"
        raise _too_many(n, f"along {ax.label!r} (one per {each})", ax.name)
    if dim.regular:  # one size, the last chunk cut at the extent: dask's int chunks
        step = dim.shard_size(0) if unit == "shards" else dim.inner_size(0)
        return _Plan(min(step, dim.extent), n)
    return _Plan(_sizes(_boundaries(dim, unit)), n)


def _size_plan(ax: _Axis, want: int | np.integer[Any]) -> _Plan:
    """Chunks of an int size (-1: the whole dimension)."""
    dim = ax.dim
    size = dim.extent if want == -1 else int(want)
    if size < 1:
        raise ChunksError(
            f"bad chunk size along {ax.label!r}",
            expected="a size >= 1, or -1 for the whole dimension",
            found=repr(want),
            array=ax.name or None,
        )
    if size >= dim.extent or ax.empty:  # one chunk to the array's end: nothing cut
        return _Plan(dim.extent, 1)
    if dim.inner is None and not dim.regular:  # chunks of an unsharded rectilinear grid
        if (n := -(-dim.extent // size)) > MAX_CHUNKS:
            raise _too_many(n, f"along {ax.label!r} (of {size})", ax.name)
        return _snapped(ax, [*range(0, dim.extent, size), dim.extent], f"{size}")
    # inner chunks divide every shard, so multiples of the inner size are inner-chunk
    # boundaries: round the size to the nearest multiple
    step = dim.inner_size(0)
    rounded = size
    if size % step:
        rounded = min(max(step, round(size / step) * step), dim.extent)
    if (n := -(-dim.extent // rounded)) > MAX_CHUNKS:
        raise _too_many(n, f"along {ax.label!r} (of {rounded})", ax.name)
    moved = f"{ax.label}: {size} -> {rounded}" if rounded != size else None
    return _Plan(rounded, n, moved)


def _sizes_plan(ax: _Axis, want: tuple[int, ...] | list[int]) -> _Plan:
    """Chunks of explicit sizes."""
    dim = ax.dim
    sizes = [int(s) for s in want]
    if sum(sizes) != dim.extent or any(s < 1 for s in sizes):
        raise ChunksError(
            f"bad chunk sizes along {ax.label!r}",
            expected=f"sizes >= 1 adding up to the dimension's length {dim.extent}",
            found=f"{tuple(sizes)} (adding up to {sum(sizes)})",
            array=ax.name or None,
        )
    if ax.empty:
        return _Plan((dim.extent,), 1)
    return _snapped(ax, [0, *itertools.accumulate(sizes)], f"{tuple(sizes)}")


def _snapped(ax: _Axis, wanted: list[int], asked: str) -> _Plan:
    """Explicit sizes from the ``wanted`` boundaries moved to inner-chunk boundaries,
    with a note saying what was ``asked`` when that moved any."""
    bounds = _snap(wanted, ax.dim)
    moved = None if bounds == wanted else f"{ax.label}: {asked} -> {_describe(bounds)}"
    return _Plan(_sizes(bounds), len(bounds) - 1, moved)


def _sizes(bounds: Sequence[int]) -> tuple[int, ...]:
    return tuple(int(b - a) for a, b in itertools.pairwise(bounds))


def _expand(
    reader: ArrayReader,
    dims: Sequence[Hashable],
    plans: Sequence[_Plan],
    target: int,
    name: str,
) -> tuple[tuple[int, ...], ...]:
    """Every dimension's chunk sizes, expanded by dask's :func:`normalize_chunks` (its
    automatic chunking toward ``target`` bytes for the ``"auto"`` dimensions, then moved
    to inner-chunk boundaries)."""
    from dask.array.core import normalize_chunks

    layout = reader.info.layout
    auto = [axis for axis, plan in enumerate(plans) if isinstance(plan.spec, str)]
    previous = None
    if auto:
        _check_auto(reader, dims, plans, auto, target, name)
        previous = _auto_unit(reader, target)
    sizes = normalize_chunks(
        tuple(plan.spec for plan in plans),
        layout.shape,
        limit=target,
        dtype=reader.dtype,
        previous_chunks=previous,
    )
    return tuple(
        _sizes(_snap([0, *itertools.accumulate(s)], dim)) if axis in auto else tuple(s)
        for axis, (dim, s) in enumerate(zip(layout.dims, sizes, strict=True))
    )


def _check_auto(
    reader: ArrayReader,
    dims: Sequence[Hashable],
    plans: Sequence[_Plan],
    auto: list[int],
    target: int,
    name: str,
) -> None:
    """Refuse too many chunks with ``"auto"`` before dask lists them: dask spells the
    chunks it starts from (the shard or inner shape) out along each dimension, and
    there are at least this many in all."""
    layout = reader.info.layout
    fixed = math.prod(plan.nchunks for axis, plan in enumerate(plans) if axis not in auto)
    nbytes = math.prod(layout.shape) * reader.dtype.itemsize
    if (n := fixed * (nbytes // max(target, 1))) > MAX_CHUNKS:
        raise _too_many(n, "with chunks='auto' (at least)", name)
    for axis in auto:
        if (n := _count(layout.dims[axis], "inner")) > MAX_CHUNKS:
            raise _too_many(n, f"along {dims[axis]!r} for chunks='auto'", name, "inner chunks")


def _auto_unit(reader: ArrayReader, target: int) -> tuple[int, ...]:
    """The chunk shape dask's automatic chunking takes multiples of: the shard shape
    when a shard is no bigger than ``target`` bytes, else the inner chunk shape."""
    layout = reader.info.layout

    def nominal(dim: DimGrid, size: int | tuple[int, ...]) -> int:
        return min(size if isinstance(size, int) else max(size), max(dim.extent, 1))

    shard = tuple(nominal(d, d.shards) for d in layout.dims)
    inner = tuple(nominal(d, d.inner if d.inner is not None else d.shards) for d in layout.dims)
    return shard if math.prod(shard) * reader.dtype.itemsize <= target else inner


def _warn_moved(layout: Any, name: str, moved: Sequence[str]) -> None:
    inner_shape = tuple(d.inner if d.inner is not None else d.shards for d in layout.dims)
    warnings.warn(
        f"dask chunks of {name or 'the array'} must hold whole inner chunks "
        f"(inner chunk shape {inner_shape}); moved them to inner-chunk boundaries: "
        + "; ".join(moved),
        ChunkRoundingWarning,
        stacklevel=4,  # the caller of block_sizes' caller (stacklevel=3 from block_sizes)
    )


def _describe(bounds: Sequence[int]) -> str:
    sizes = [b - a for a, b in itertools.pairwise(bounds)]
    if len(set(sizes[:-1])) <= 1:
        return f"{sizes[0]}" if len(set(sizes)) == 1 else f"{sizes[0]} (last {sizes[-1]})"
    return str(tuple(sizes))


class ShardSource:
    """What a read task indexes: an array (the variable's lazily decoded data) read
    while the shard indexes of its index tasks are supplied to this process (each with
    the version of the shard it came from: the reader reads only against it, and reads
    a shard replaced since again itself)."""

    __slots__ = ("array", "entries")

    def __init__(self, array: Any, token: str, keys: Sequence[str], *entries: IndexEntry) -> None:
        self.array = array
        self.entries = {(token, k): e for k, e in zip(keys, entries, strict=True)}

    def __getitem__(self, key: Any) -> npt.NDArray[Any]:
        with SUPPLIED.supply(self.entries):
            return np.asarray(self.array[key])


def _read_index(reader: ArrayReader, shard: tuple[int, ...]) -> IndexEntry:
    return reader.index_entry(shard)


def _cut_shards(layout: Any, starts: list[list[int]], name: str) -> list[set[int]]:
    """Per dimension, the shards a chunk boundary (``starts``: each dimension's chunk
    starts and end) cuts. A shard is shared (read by two or more tasks, so it gets an
    index task) when a boundary cuts it along some dimension: worked out per dimension
    from the boundaries, without listing every shard (a chunk may span millions).
    Refuses more index tasks than a graph may hold."""
    cut: list[set[int]] = [set() for _ in starts]
    if not layout.sharded:
        return cut
    for dim, bounds, here in zip(layout.dims, starts, cut, strict=True):
        inside = [b for b in bounds[1:-1] if 0 < b < dim.extent]
        hit = dim.shard_of(np.asarray(inside, dtype=np.int64))
        here.update(int(s) for s, b in zip(hit, inside, strict=True) if dim.shard_start(s) != b)
    nshards = [dim.nshards for dim in layout.dims]
    uncut = math.prod(n - len(c) for n, c in zip(nshards, cut, strict=True))
    if (n := math.prod(nshards) - uncut) > MAX_CHUNKS:
        where = "(one per shard that several dask chunks share)"
        raise _too_many(n, where, name, "index tasks")
    return cut


@dataclass(frozen=True, slots=True)
class _ReadKeys:
    """The names of a read's layers and keys: the read layer (the dask array's name),
    the index layer, and the keys holding the source (``original``) and the reader."""

    read: str
    index: str
    original: str
    reader: str

    @classmethod
    def of(
        cls,
        reader_token: str,
        name: str,
        chunks: tuple[tuple[int, ...], ...],
        array_name: str | None,
    ) -> _ReadKeys:
        """The keys named after ``array_name``, or, when it is None, after a token of
        the reader's own token, ``name`` and ``chunks``."""
        from dask.base import tokenize

        if array_name is None:
            token = tokenize(reader_token, name, chunks)
            read_name = f"shardwise-read-{name}-{token}"
        else:
            token = tokenize(array_name)
            read_name = array_name
        return cls(
            read_name, f"shardwise-index-{token}", f"original-{read_name}", f"reader-{read_name}"
        )


@dataclass(frozen=True, slots=True)
class _Blocks:
    """Per dimension and block of a read: its region (``regions``), the shards its span
    touches (``spans``) and those of them (its first and last) that a chunk boundary
    cuts (``mine``); per dimension, the shards a boundary cuts (``cut``). Worked out
    once per dimension, not per chunk. ``uncut``: the shards of a block's span along a
    dimension that no boundary cuts, kept as they are asked for."""

    regions: list[list[slice]]
    spans: list[list[range]]
    mine: list[list[list[int]]]
    cut: list[set[int]]
    uncut: dict[tuple[int, int], list[int]] = field(default_factory=dict)

    @classmethod
    def of(cls, layout: Any, chunks: tuple[tuple[int, ...], ...], name: str) -> _Blocks:
        """The blocks of ``chunks`` over ``layout``; refuses more index tasks than a
        graph may hold (:func:`_cut_shards`)."""
        starts = [[0, *itertools.accumulate(c)] for c in chunks]
        cut = _cut_shards(layout, starts, name)
        regions = [[slice(a, b) for a, b in itertools.pairwise(bounds)] for bounds in starts]
        spans: list[list[range]] = []
        mine: list[list[list[int]]] = []
        for dim, bounds, here in zip(layout.dims, starts, cut, strict=True):
            lo = np.asarray(bounds[:-1], dtype=np.int64)
            hi = np.asarray(bounds[1:], dtype=np.int64)
            if layout.sharded and dim.extent:
                first = dim.shard_of(lo).tolist()
                last = dim.shard_of(np.maximum(hi - 1, lo)).tolist()
            else:
                first = last = [0] * len(lo)
            span = [
                range(f, g + 1) if b > a else range(0)
                for f, g, a, b in zip(first, last, lo.tolist(), hi.tolist(), strict=True)
            ]
            spans.append(span)
            mine.append([sorted({r[0], r[-1]} & here) if r else [] for r in span])
        return cls(regions, spans, mine, cut)

    def _uncut_shards(self, d: int, i: int) -> list[int]:
        """The shards of block ``i``'s span along dimension ``d`` that no boundary cuts."""
        if (d, i) not in self.uncut:
            self.uncut[d, i] = [s for s in self.spans[d][i] if s not in self.cut[d]]
        return self.uncut[d, i]

    def shared_shards(self, block: tuple[int, ...]) -> list[tuple[int, ...]]:
        """The shards of a chunk that a chunk boundary cuts, in C order."""
        out: set[tuple[int, ...]] = set()
        for d, i in enumerate(block):  # combinations whose first cut coordinate is d's
            if self.mine[d][i]:
                before = [self._uncut_shards(j, block[j]) for j in range(d)]
                after = [self.spans[j][block[j]] for j in range(d + 1, len(block))]
                out.update(itertools.product(*before, self.mine[d][i], *after))
        return sorted(out)


def fanout_array(
    reader: ArrayReader,
    source: Any,
    chunks: tuple[tuple[int, ...], ...],
    *,
    name: str,
    dtype: np.dtype[Any],
    array_name: str | None = None,
    inline_array: bool = False,
) -> Any:
    """A dask array of ``source`` (indexable like the array ``reader`` reads, e.g. its
    CF-decoded xarray wrapper) with the fan-out graph described in the module docstring.
    ``chunks`` must hold whole inner chunks (see :func:`block_sizes`).

    ``array_name``: the dask array's name (that of its read layer); the index layer, the
    key holding ``source`` (``original-<array_name>``) and the one holding ``reader``
    (``reader-<array_name>``) are named after it. By default it is
    ``shardwise-read-<name>-<token>``, the token this reader's own (so two readers of
    one array, whose ``source`` may decode it differently, never share keys).

    ``inline_array`` (:func:`dask.array.from_array`'s meaning): ``False`` keeps ``source``
    and ``reader`` in a key each, which the read and index tasks refer to; ``True`` puts
    ``source`` in every read task and ``reader`` in every index task instead (no such
    keys: each task carries its own copy when sent to a worker)."""
    import dask.array as da
    from dask.highlevelgraph import HighLevelGraph
    from dask.task_spec import TaskRef

    keys = _ReadKeys.of(reader.token, name, chunks, array_name)
    # what the tasks take the source and the reader from: a key, or the object itself
    src_arg: Any = source if inline_array else TaskRef(keys.original)
    reader_arg: Any = reader if inline_array else TaskRef(keys.reader)
    blocks = _Blocks.of(reader.info.layout, chunks, name)
    read_layer, index_layer = _read_tasks(reader, blocks, keys, src_arg, reader_arg)

    layers: dict[str, Any] = {keys.read: read_layer}
    deps: dict[str, set[str]] = {keys.read: set()}
    if not inline_array:
        layers[keys.original] = {keys.original: source}
        deps[keys.original] = set()
        deps[keys.read].add(keys.original)
    if index_layer:
        layers[keys.index] = index_layer
        deps[keys.index] = set()
        deps[keys.read].add(keys.index)
        if not inline_array:
            layers[keys.reader] = {keys.reader: reader}
            deps[keys.reader] = set()
            deps[keys.index].add(keys.reader)
    graph = HighLevelGraph(layers, deps)
    meta = np.empty((0,) * len(chunks), dtype=dtype)
    return da.Array(graph, keys.read, chunks, meta=meta)


def _read_tasks(
    reader: ArrayReader, blocks: _Blocks, keys: _ReadKeys, src_arg: Any, reader_arg: Any
) -> tuple[dict[Any, Any], dict[Any, Any]]:
    """The read layer, a task per chunk, and the index layer, a task per shard that
    several chunks share, which every read task of the shard is given. A shard only one
    task reads needs no index task: the task reads it itself, the whole object in one
    request when it wants most of it."""
    from dask.task_spec import Task, TaskRef

    sharded = reader.info.layout.sharded
    regions, mine = blocks.regions, blocks.mine
    shard_keys: dict[tuple[int, ...], str] = {}
    index_layer: dict[Any, Any] = {}
    read_layer: dict[Any, Any] = {}
    with paused_gc():  # a task per chunk: millions of small objects
        for block in itertools.product(*(range(len(r)) for r in regions)):
            region = tuple(regions[d][i] for d, i in enumerate(block))
            key: Any = (keys.read, *block)
            if not sharded or not any(mine[d][i] for d, i in enumerate(block)):
                read_layer[key] = Task(key, _compat.getter, src_arg, region)
                continue
            shared = blocks.shared_shards(block)
            if not shared:
                read_layer[key] = Task(key, _compat.getter, src_arg, region)
                continue
            refs = []
            for shard in shared:
                ikey: Any = (keys.index, *shard)
                if ikey not in index_layer:
                    index_layer[ikey] = Task(ikey, _read_index, reader_arg, shard)
                    shard_keys[shard] = reader.info.key(shard)
                refs.append(TaskRef(ikey))
            src = Task(
                None,
                ShardSource,
                src_arg,
                reader.token,
                [shard_keys[s] for s in shared],
                *refs,
            )
            read_layer[key] = Task(key, _compat.getter, src, region)
    return read_layer, index_layer


def stored_reader(x: Any) -> tuple[ArrayReader, str | None] | None:
    """When the dask array ``x`` is a plain read of a stored array, as
    :func:`shardwise.array.from_zarr` makes it (its tasks read the array through its reader
    itself, no index tasks, nothing computed on it since): the reader, and the key that
    holds it (None with ``inline_array=True``: the reader is in every task); else None.
    Every block of ``x`` then holds the values the reader reads for the block's place in
    the array."""
    from dask.task_spec import DataNode, Task, TaskRef

    graph = x.__dask_graph__()
    layers = getattr(graph, "layers", None)
    original = f"original-{x.name}"
    if layers is None or x.name not in layers or set(layers) - {x.name, original}:
        return None
    reader: Any = None
    if original in layers:
        value = layers[original].get(original)
        reader = value.value if isinstance(value, DataNode) else value
    for task in layers[x.name].values():
        if not (isinstance(task, Task) and task.func is _compat.getter and len(task.args) == 2):
            return None
        src = task.args[0]
        if original in layers:
            if not (isinstance(src, TaskRef) and src.key == original):
                return None
        elif isinstance(src, ArrayReader) and (reader is None or src is reader):
            reader = src  # inline_array=True: the reader in every task
        else:
            return None
    if not isinstance(reader, ArrayReader) or tuple(reader.shape) != tuple(x.shape):
        return None
    return reader, (original if original in layers else None)
