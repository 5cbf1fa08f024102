"""The write plan: which dask block touches which shard, as pure frozen values.

A write of a dask array into a sharded array is planned before any graph is built:
:func:`plan_write` makes a :class:`WritePlan` of one :class:`DimWrite` per dimension
(so planning costs the number of blocks and shards along each dimension, not their
product), which says for every shard the write touches which blocks touch it, whether
the write covers it and whether one block covers it alone (then that block's task writes
it; every other shard gets a task of its own). :func:`split_block` is the same split seen
from one block, :func:`batch_bounds` groups small blocks into tasks, and the ``check_*``
functions refuse option values before anything is planned.

Apart from the graph (:mod:`shardwise.graph.write`) and the tasks
(:mod:`shardwise.graph.tasks`) because it is arithmetic only: no I/O, no dask, no
store. A plan prints (``repr``) and is tested without running anything.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from shardwise.format.grid import ShardLayout

if TYPE_CHECKING:
    from shardwise.format.grid import DimGrid

__all__ = [
    "Box",
    "DimWrite",
    "Shard",
    "ShardWrite",
    "WritePlan",
    "batch_bounds",
    "check_encode_split",
    "check_shards_per_task",
    "inside",
    "intersect",
    "local",
    "plan_write",
    "shard_box",
    "split_block",
    "split_dim",
]

Box = tuple[tuple[int, int], ...]  # per dimension a half-open interval [lo, hi)
Shard = tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ShardWrite:
    """One shard a write touches: the blocks that touch it, whether the write covers all
    of it, and whether one block covers all of it (then that block's task writes it)."""

    shard: Shard
    blocks: tuple[tuple[int, ...], ...]
    covered: bool  # every element of the shard inside the array is written
    whole: bool  # one block holds every element of the shard inside the array


@dataclass(frozen=True, slots=True, eq=False)
class DimWrite:
    """One dimension of a write.

    Block ``b`` covers ``[starts[b], starts[b + 1])`` in array coordinates. The write
    touches shards ``first`` to ``first + n - 1`` (``n = len(lo)``); the ``i``-th of them
    is touched by the blocks of nonzero size among ``lo[i]`` to ``hi[i] - 1``,
    ``covered[i]`` says the write covers all of it (clipped at the array's end) and
    ``alone[i]`` that one block does. With ``open_end``, a shard that reaches past the
    array's end (the last of a regular grid) is never covered: another job may grow the
    array into it meanwhile (an append), so it is merged with what is stored."""

    starts: npt.NDArray[np.int64]
    first: int
    lo: npt.NDArray[np.int64]
    hi: npt.NDArray[np.int64]
    covered: npt.NDArray[np.bool_]
    alone: npt.NDArray[np.bool_]

    @classmethod
    def build(
        cls, grid: DimGrid, sizes: Sequence[int], offset: int, open_end: bool = False
    ) -> DimWrite:
        starts = np.empty(len(sizes) + 1, dtype=np.int64)
        starts[0] = offset
        np.cumsum(np.asarray(sizes, dtype=np.int64), out=starts[1:])
        starts[1:] += offset
        end = int(starts[-1])
        if end == offset:  # nothing written along this dimension
            none = np.zeros(0, dtype=np.int64)
            return cls(starts, 0, none, none, none.astype(bool), none.astype(bool))
        first, last = (int(s) for s in grid.shard_of(np.array([offset, end - 1])))
        s_lo, s_hi = grid.shard_bounds(np.arange(first, last + 1, dtype=np.int64))
        lo = np.searchsorted(starts[1:], s_lo, side="right")  # first block ending past s_lo
        hi = np.searchsorted(starts[:-1], s_hi, side="left")  # blocks starting before s_hi
        covered = (s_lo >= offset) & (s_hi <= end)
        if open_end and isinstance(grid.shards, int):
            covered &= s_lo + grid.shards <= grid.extent
        # the block holding the shard's first element (the last of equal starts: empty
        # blocks come before it) holds all of it when it reaches the shard's end
        holder = np.clip(np.searchsorted(starts, s_lo, side="right") - 1, 0, len(sizes) - 1)
        alone = covered & (starts[holder + 1] >= s_hi)
        return cls(starts, first, lo, hi, covered, alone)

    @property
    def nshards(self) -> int:
        return len(self.lo)

    @property
    def sizes(self) -> npt.NDArray[np.int64]:
        return np.diff(self.starts)

    def blocks(self) -> list[list[int]]:
        """For each shard of the write, the blocks (of nonzero size) touching it."""
        sizes = self.sizes.tolist()
        return [
            [b for b in range(lo, hi) if sizes[b]]
            for lo, hi in zip(self.lo.tolist(), self.hi.tolist(), strict=True)
        ]

    def per_block(self, grid: DimGrid) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """For each block: how many shards it touches along this dimension, and how many
        of those it covers alone."""
        sizes = self.sizes
        nonempty = sizes > 0
        if not self.nshards:
            zero = np.zeros(len(sizes), dtype=np.int64)
            return zero, zero
        ends = np.where(nonempty, self.starts[1:] - 1, self.starts[:-1])
        first = grid.shard_of(self.starts[:-1]) - self.first
        last = grid.shard_of(ends) - self.first
        first = np.clip(first, 0, self.nshards - 1)
        last = np.clip(last, 0, self.nshards - 1)
        cum = np.concatenate([[0], np.cumsum(self.alone, dtype=np.int64)])
        touched = np.where(nonempty, last - first + 1, 0)
        alone = np.where(nonempty, cum[last + 1] - cum[first], 0)
        return touched, alone


@dataclass(frozen=True, slots=True, eq=False)
class WritePlan:
    """Which dask block touches which shard, for a write of an array of ``chunks``
    (dask's chunk sizes) at ``offset`` in an array laid out by ``layout``: one
    :class:`DimWrite` per dimension; the shards and blocks are their products."""

    layout: ShardLayout
    chunks: tuple[tuple[int, ...], ...]
    offset: tuple[int, ...]
    dims: tuple[DimWrite, ...]

    def __repr__(self) -> str:
        return (
            f"WritePlan(region={self.region}, blocks={self.numblocks}, "
            f"shards={self.nshards} ({self.nshards - self.ngathered} written by their "
            f"block's task, {self.ngathered} by shard tasks))"
        )

    @property
    def region(self) -> Box:
        return tuple((int(d.starts[0]), int(d.starts[-1])) for d in self.dims)

    @property
    def numblocks(self) -> tuple[int, ...]:
        return tuple(len(c) for c in self.chunks)

    @property
    def nshards(self) -> int:
        """How many shards the write touches."""
        return math.prod(d.nshards for d in self.dims)

    @property
    def ngathered(self) -> int:
        """How many of them no single block covers (each gets a shard task)."""
        return self.nshards - math.prod(int(d.alone.sum()) for d in self.dims)

    def block_box(self, block: tuple[int, ...]) -> Box:
        """The part of the array a dask block is written to."""
        return tuple(
            (int(d.starts[i]), int(d.starts[i + 1])) for d, i in zip(self.dims, block, strict=True)
        )

    def gathered_per_block(self) -> npt.NDArray[np.int64]:
        """For every block, how many of the shards it touches get a shard task."""
        touched = np.ones((), dtype=np.int64)
        alone = np.ones((), dtype=np.int64)
        for grid, d in zip(self.layout.dims, self.dims, strict=True):
            t, a = d.per_block(grid)
            touched = np.multiply.outer(touched, t)
            alone = np.multiply.outer(alone, a)
        return touched - alone

    def shard_writes(self, *, gathered: bool = False) -> Iterator[ShardWrite]:
        """Every shard the write touches in C order (with ``gathered=True``, only those
        that get a shard task)."""
        per_dim = [
            list(
                zip(
                    range(d.first, d.first + d.nshards),
                    d.blocks(),
                    d.covered.tolist(),
                    d.alone.tolist(),
                    strict=True,
                )
            )
            for d in self.dims
        ]
        for combo in itertools.product(*per_dim):
            alone = all(c[3] for c in combo)
            if gathered and alone:
                continue
            yield ShardWrite(
                tuple(c[0] for c in combo),
                tuple(itertools.product(*(c[1] for c in combo))),
                all(c[2] for c in combo),
                alone,
            )


def plan_write(
    layout: ShardLayout,
    chunks: Sequence[Sequence[int]],
    offset: Sequence[int] | None = None,
    *,
    open_end: bool = False,
) -> WritePlan:
    """Plan a write of a dask array with ``chunks`` at ``offset`` (default: the origin).
    ``open_end``: other jobs may grow the array meanwhile (see :class:`DimWrite`)."""
    sizes = tuple(tuple(int(c) for c in cs) for cs in chunks)
    origin = tuple(int(o) for o in offset) if offset is not None else (0,) * layout.ndim
    if len(sizes) != layout.ndim or len(origin) != layout.ndim:
        raise ValueError(
            f"the array has {layout.ndim} dimensions, the data {len(sizes)} and the "
            f"offset {len(origin)}"
        )
    for d, o, cs in zip(layout.dims, origin, sizes, strict=True):
        if o < 0 or o + sum(cs) > d.extent:
            raise ValueError(
                f"a write of {sum(cs)} elements at offset {o} does not fit a dimension of "
                f"length {d.extent}"
            )
    dims = tuple(
        DimWrite.build(d, cs, o, open_end)
        for d, cs, o in zip(layout.dims, sizes, origin, strict=True)
    )
    return WritePlan(layout, sizes, origin, dims)


def split_block(
    layout: ShardLayout, box: Box, *, open_end: bool = False
) -> tuple[list[Shard], list[Shard]]:
    """The shards a block writing ``box`` covers whole (its task writes them), and the
    other shards it touches (it hands its parts of them to their shard tasks).

    The same split as the plan's: a shard is covered whole by the one block holding all
    of it (clipped at the array's end; with ``open_end``, a shard reaching past the end
    of a regular grid never is, see :class:`DimWrite`)."""
    per_dim = []
    for d, (lo, hi) in zip(layout.dims, box, strict=True):
        if hi <= lo:
            return [], []
        here = []
        for s in d.shard_range(lo, hi - 1):
            start = d.shard_start(s)
            end = start + d.shard_size(s)
            if open_end and isinstance(d.shards, int) and end > d.extent:
                here.append((s, False))
            else:
                here.append((s, lo <= start and min(end, d.extent) <= hi))
        per_dim.append(here)
    whole: list[Shard] = []
    gathered: list[Shard] = []
    for combo in itertools.product(*per_dim):
        shard = tuple(s for s, _ in combo)
        (whole if all(w for _, w in combo) else gathered).append(shard)
    return whole, gathered


def batch_bounds(
    layout: ShardLayout,
    chunks: Sequence[Sequence[int]],
    offset: Sequence[int] | None,
    shards_per_task: int,
) -> tuple[tuple[int, ...], ...]:
    """Groups of neighbouring blocks that hold about ``shards_per_task`` shards each:
    per dimension, the indices of the blocks where a group starts, and the number of
    blocks. Blocks are merged, never split: a group ends at the first block boundary at
    or after the end of each run of shards, so groups of whole shards stay aligned, and
    a block that holds more shards than asked for is a group of its own.

    The shards are shared out from the last dimension (whose shards lie next to each
    other in memory) to the first."""
    plan = plan_write(layout, chunks, offset)
    runs = [1] * layout.ndim
    left = max(1, int(shards_per_task))
    for axis in reversed(range(layout.ndim)):
        runs[axis] = max(1, min(left, plan.dims[axis].nshards))
        left = -(-left // runs[axis])
    out: list[tuple[int, ...]] = []
    for grid, d, run in zip(layout.dims, plan.dims, runs, strict=True):
        nblocks = len(d.starts) - 1
        if not d.nshards:
            out.append((0, nblocks))
            continue
        first_of_run = np.arange(d.first + run, d.first + d.nshards, run, dtype=np.int64)
        ends = grid.shard_bounds(first_of_run)[0]
        cuts = np.searchsorted(d.starts, ends, side="left")
        out.append(tuple(int(i) for i in np.unique(np.concatenate([[0], cuts, [nblocks]]))))
    return tuple(out)


def split_dim(sizes: tuple[int, ...], dim: DimGrid, offset: int, parts: int) -> tuple[int, ...]:
    """Each block along one dimension cut at inner chunk boundaries into about
    ``parts`` pieces per shard it holds, as even as the boundaries allow."""
    out: list[int] = []
    lo = offset
    for n in sizes:
        hi = lo + n
        cuts: list[int] = []
        shards = dim.shard_range(lo, hi - 1)
        for s in shards:
            start, step = dim.shard_start(s), dim.inner_size(s)
            cuts.extend(c for c in range(start, start + dim.shard_size(s) + 1, step) if lo < c < hi)
        cuts = sorted(set(cuts))
        pieces = min(len(cuts) + 1, parts * len(shards))
        chosen = sorted({cuts[round(i * (len(cuts) + 1) / pieces) - 1] for i in range(1, pieces)})
        out.extend(b - a for a, b in itertools.pairwise([lo, *chosen, hi]))
        lo = hi
    return tuple(out)


# -- boxes -------------------------------------------------------------------------------
def shard_box(layout: ShardLayout, shard: Shard) -> Box:
    """The part of the array a shard (or, unsharded, a chunk) holds, clipped at the
    array's end."""
    out = []
    for d, s in zip(layout.dims, shard, strict=True):
        lo = d.shard_start(s)
        out.append((lo, min(lo + d.shard_size(s), d.extent)))
    return tuple(out)


def inside(inner: Box, outer: Box) -> bool:
    """Whether ``inner`` lies inside ``outer``."""
    return all(olo <= lo and hi <= ohi for (lo, hi), (olo, ohi) in zip(inner, outer, strict=True))


def local(box: Box, within: Box) -> tuple[slice, ...]:
    """``box`` as slices of an array that holds ``within`` (``box`` lies inside it)."""
    return tuple(slice(lo - wlo, hi - wlo) for (lo, hi), (wlo, _) in zip(box, within, strict=True))


def intersect(a: Box, b: Box) -> Box | None:
    """The part two boxes share (None when they share nothing)."""
    out = tuple((max(alo, blo), min(ahi, bhi)) for (alo, ahi), (blo, bhi) in zip(a, b, strict=True))
    return None if any(lo >= hi for lo, hi in out) else out


# -- the options -------------------------------------------------------------------------
def check_shards_per_task(value: Any) -> None:
    """Refuse a ``shards_per_task`` that is not an integer >= 1 or ``"auto"``."""
    if value == "auto":
        return
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise ValueError(f"shards_per_task must be an integer >= 1 or 'auto', got {value!r}")


def check_encode_split(value: Any) -> None:
    """Refuse an ``encode_split`` that is not None, ``"auto"`` or an integer >= 1."""
    if value is None or value == "auto":
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"encode_split must be None, 'auto' or an integer >= 1, got {value!r}")
