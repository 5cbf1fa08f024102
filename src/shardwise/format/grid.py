"""Shard grid geometry: pure arithmetic, no I/O, no dask.

An array is cut into *shards* (the outer chunk grid, regular or rectilinear) and each
shard into *inner chunks* of one shape (the ``sharding_indexed`` codec's ``chunk_shape``).
An unsharded array is the special case of one inner chunk per shard.

The central operation is :meth:`ShardLayout.plan`: given an outer-indexing selection
(per dimension a slice or an integer array), say which inner chunks of which shards it
touches, which part of each inner chunk it wants and where that part goes in the output.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

import shardwise.config as config
from shardwise.errors import TooLargeError

__all__ = [
    "INT64_MAX",
    "MAX_CHUNKS_PER_SHARD",
    "ChunkRead",
    "DimGrid",
    "DimPiece",
    "ReadPlan",
    "ShardLayout",
    "ShardRead",
    "check_chunks_per_shard",
]

Sel = slice | npt.NDArray[np.intp]

INT64_MAX = 2**63 - 1
"""The largest extent, shard or inner chunk size a grid may have: what numpy, dask and
xarray index with (int64). Positions are worked out so that none passes it."""

MAX_CHUNKS_PER_SHARD = 2**24
"""The most inner chunks one shard may hold for shardwise to read or write it. Reading
any part of a shard needs its whole index, 16 bytes per inner chunk: 256 MiB at this
limit (writing one needs the same, plus the write order's list of coordinates). Shards
in practice hold thousands of inner chunks; a ``zarr.json`` claiming more than 2**24
(a shard of 2**40 inner chunks has an index of 16 TiB) is refused before anything is
allocated."""


class DimPiece(NamedTuple):
    """The part of a one-dimensional selection that falls in one inner chunk."""

    shard: int  # shard index along the dimension
    inner: int  # inner chunk index along the dimension, within the shard
    local: Sel  # selection within the inner chunk
    out: Sel  # where the selected values go along the output dimension


@dataclass(frozen=True, slots=True)
class DimGrid:
    """One dimension of a shard grid.

    ``shards`` is an int for a regular grid (every shard that size; the last one may reach
    past ``extent`` and is then encoded at full size) or a tuple of per-shard sizes for a
    rectilinear grid. ``inner`` is the inner chunk size, or ``None`` when each shard is a
    single chunk (an unsharded array).
    """

    extent: int
    shards: int | tuple[int, ...]
    inner: int | None = None
    _starts: npt.NDArray[np.int64] | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not 0 <= self.extent <= INT64_MAX:
            raise ValueError(f"extent must be between 0 and 2**63 - 1, got {self.extent}")
        if isinstance(self.shards, int):
            if not 1 <= self.shards <= INT64_MAX:
                raise ValueError(f"shard size must be between 1 and 2**63 - 1, got {self.shards}")
            sizes: tuple[int, ...] = (self.shards,)
            object.__setattr__(self, "_starts", None)
        else:
            sizes = tuple(int(s) for s in self.shards)
            bad = [s for s in sizes if not 1 <= s <= INT64_MAX]
            if not sizes or bad:
                raise ValueError(
                    "shard sizes must be between 1 and 2**63 - 1, got "
                    + (f"{bad[0]} among {len(sizes)} sizes" if bad else "no sizes")
                )
            total = sum(sizes)
            if total < self.extent:
                raise ValueError(
                    f"rectilinear shard sizes {sizes} add up to {total}, "
                    f"less than the extent {self.extent}"
                )
            object.__setattr__(self, "shards", sizes)
            # where each shard starts, summed in Python ints: a start past 2**63 - 1
            # (shards wholly beyond the extent) is held as 2**63 - 1, never wrapped
            starts = np.fromiter(
                (min(a, INT64_MAX) for a in itertools.accumulate(sizes, initial=0)),
                dtype=np.int64,
                count=len(sizes) + 1,
            )
            object.__setattr__(self, "_starts", starts)
        if self.inner is not None:
            if not 1 <= self.inner <= INT64_MAX:
                raise ValueError(
                    f"inner chunk size must be between 1 and 2**63 - 1, got {self.inner}"
                )
            bad = [s for s in sizes if s % self.inner]
            if bad:
                raise ValueError(
                    f"inner chunk size {self.inner} does not divide shard size {bad[0]}"
                )

    @property
    def regular(self) -> bool:
        return self._starts is None

    @property
    def nshards(self) -> int:
        """Number of shards that hold any part of the array along this dimension."""
        if isinstance(self.shards, int):
            return -(-self.extent // self.shards)
        if self.extent == 0:
            return 0
        assert self._starts is not None
        return int(np.searchsorted(self._starts, self.extent, side="left"))

    def shard_start(self, shard: int) -> int:
        if isinstance(self.shards, int):
            return shard * self.shards
        assert self._starts is not None
        return int(self._starts[shard])

    def shard_size(self, shard: int) -> int:
        """The encoded (nominal) size of a shard, which may reach past the extent."""
        if isinstance(self.shards, int):
            return self.shards
        return self.shards[shard]

    def inner_size(self, shard: int) -> int:
        return self.shard_size(shard) if self.inner is None else self.inner

    def inner_per_shard(self, shard: int) -> int:
        return self.shard_size(shard) // self.inner_size(shard)

    def inner_in_shard(self, shard: int) -> int:
        """How many of a shard's inner chunks hold part of the array (those of an edge
        shard reaching past the extent do not all)."""
        start = self.shard_start(shard)
        return -(-min(self.shard_size(shard), self.extent - start) // self.inner_size(shard))

    @property
    def ninner(self) -> int:
        """Number of inner chunks that hold any part of the array along this dimension,
        worked out without listing them (a rectilinear grid's sizes are summed)."""
        if isinstance(self.shards, int):
            return -(-self.extent // self.inner_size(0))
        return sum(self.inner_in_shard(s) for s in range(self.nshards))

    def starts(self) -> npt.NDArray[np.int64]:
        """Where each of the :attr:`nshards` shards starts (an array of that length:
        only for dimensions whose shards may be listed)."""
        if isinstance(self.shards, int):
            return np.arange(self.nshards, dtype=np.int64) * self.shards
        assert self._starts is not None
        return self._starts[: self.nshards].copy()

    def shard_of(self, coords: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        if isinstance(self.shards, int):
            return coords // self.shards
        assert self._starts is not None
        return np.searchsorted(self._starts, coords, side="right") - 1

    def shard_bounds(
        self, shards: npt.NDArray[np.int64]
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """Where each of ``shards`` starts and ends (clipped at the extent)."""
        if isinstance(self.shards, int):
            start = shards * self.shards
            # start + size may pass 2**63 - 1 (a shard of 2**62 at 2**62): clip the size
            # first, so nothing wraps
            return start, start + np.minimum(self.shards, np.maximum(self.extent - start, 0))
        assert self._starts is not None
        start, stop = self._starts[shards], self._starts[shards + 1]
        return start, np.minimum(stop, self.extent)

    def shard_range(self, lo: int, hi: int) -> range:
        """The shards holding coordinates ``lo`` to ``hi`` (inclusive)."""
        first, last = (int(s) for s in self.shard_of(np.array([lo, hi])))
        return range(first, last + 1)

    def pieces(self, sel: slice | npt.ArrayLike) -> list[DimPiece]:
        """Split a selection along this dimension into per-inner-chunk pieces.

        A slice (any step) gives pieces in output order with slice ``local``/``out``; an
        integer array (any order, repeats allowed, negative values count from the end)
        gives one piece per touched inner chunk with index-array ``local``/``out``.
        """
        if isinstance(sel, slice):
            start, stop, step = sel.indices(self.extent)
            if step > 0:
                return self._slice_pieces(start, stop, step)
            sel = np.arange(start, stop, step)
        return self._array_pieces(np.asarray(sel))

    def _slice_pieces(self, start: int, stop: int, step: int) -> list[DimPiece]:
        count = len(range(start, stop, step))
        if count == 0:
            return []
        last = start + (count - 1) * step
        out: list[DimPiece] = []
        for s in self.shard_range(start, last):
            s0 = self.shard_start(s)
            s_end = min(s0 + self.shard_size(s), self.extent)
            c = self.inner_size(s)
            j_first = (max(start, s0) - s0) // c
            j_last = (min(last, s_end - 1) - s0) // c
            for j in range(j_first, j_last + 1):
                a = s0 + j * c
                b = min(a + c, self.extent)
                i0 = start if a <= start else start + -(-(a - start) // step) * step
                if i0 >= b or i0 > last:
                    continue
                n = (min(b - 1, last) - i0) // step + 1
                o0 = (i0 - start) // step
                local = slice(i0 - a, i0 - a + (n - 1) * step + 1, step)
                out.append(DimPiece(s, j, local, slice(o0, o0 + n)))
        return out

    def _array_pieces(self, sel: npt.NDArray[np.generic]) -> list[DimPiece]:
        if sel.ndim != 1:
            raise IndexError(f"expected a 1-d integer indexer, got {sel.ndim} dimensions")
        if sel.size == 0:
            return []
        if not np.issubdtype(sel.dtype, np.integer):
            raise IndexError(f"expected an integer indexer, got dtype {sel.dtype}")
        coords = sel.astype(np.int64, copy=True)
        coords[coords < 0] += self.extent
        if coords.min() < 0 or coords.max() >= self.extent:
            raise IndexError(
                f"index {int(sel[(coords < 0) | (coords >= self.extent)][0])} is out of "
                f"bounds for a dimension of length {self.extent}"
            )
        shard = self.shard_of(coords)
        if isinstance(self.shards, int):
            s0 = shard * self.shards
            c: npt.NDArray[np.int64] | int = self.shards if self.inner is None else self.inner
        else:
            assert self._starts is not None
            s0 = self._starts[shard]
            sizes = np.asarray(self.shards, dtype=np.int64)[shard]
            c = sizes if self.inner is None else self.inner
        j = (coords - s0) // c
        # one group per (shard, inner chunk), in ascending order; positions within a
        # group ascending (a stable sort on both, no combined key that could overflow)
        order = np.lexsort((j, shard))
        ks, kj = shard[order], j[order]
        starts = np.flatnonzero(np.r_[True, (ks[1:] != ks[:-1]) | (kj[1:] != kj[:-1])])
        bounds = np.r_[starts, len(order)]
        out: list[DimPiece] = []
        for g in range(len(starts)):
            pos = order[bounds[g] : bounds[g + 1]]
            i = int(pos[0])
            origin = int(s0[i] + j[i] * (c if isinstance(c, int) else c[i]))
            local = coords[pos] - origin
            out.append(
                DimPiece(int(shard[i]), int(j[i]), _as_slice(local), _as_slice(pos.astype(np.intp)))
            )
        return out


def _as_slice(idx: npt.NDArray[np.integer]) -> Sel:
    """A unit-step slice when ``idx`` is a contiguous ascending run, else the array."""
    n = len(idx)
    first = int(idx[0])
    if n == 1 or (int(idx[-1]) - first == n - 1 and bool(np.all(np.diff(idx) == 1))):
        return slice(first, first + n)
    return idx.astype(np.intp, copy=False)


class ChunkRead(NamedTuple):
    """One inner chunk a selection touches."""

    inner: tuple[int, ...]  # inner chunk coordinates within the shard
    local: tuple[Sel, ...]  # what to take from the decoded inner chunk
    out: tuple[Sel, ...]  # where it goes in the output


class ShardRead(NamedTuple):
    """The inner chunks a selection touches in one shard."""

    shard: tuple[int, ...]
    chunks: tuple[ChunkRead, ...]


@dataclass(frozen=True, slots=True)
class ReadPlan:
    out_shape: tuple[int, ...]
    shards: tuple[ShardRead, ...]
    basic: bool = False  # every local and out selection is a slice

    @property
    def nchunks(self) -> int:
        return sum(len(s.chunks) for s in self.shards)


@dataclass(frozen=True, slots=True)
class ShardLayout:
    """The shard grid of an N-d array and the inner chunk grid of each shard."""

    dims: tuple[DimGrid, ...]

    @classmethod
    def build(
        cls,
        shape: Sequence[int],
        shards: Sequence[int | Sequence[int]],
        inner: Sequence[int] | None,
    ) -> ShardLayout:
        if len(shards) != len(shape) or (inner is not None and len(inner) != len(shape)):
            raise ValueError(
                f"shape {tuple(shape)}, shards {tuple(shards)} and inner chunks "
                f"{None if inner is None else tuple(inner)} differ in number of dimensions"
            )
        dims = tuple(
            DimGrid(
                int(n),
                s if isinstance(s, int) else tuple(s),
                None if inner is None else int(inner[i]),
            )
            for i, (n, s) in enumerate(zip(shape, shards, strict=True))
        )
        return cls(dims)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(d.extent for d in self.dims)

    @property
    def ndim(self) -> int:
        return len(self.dims)

    @property
    def sharded(self) -> bool:
        return all(d.inner is not None for d in self.dims)

    @property
    def grid_shape(self) -> tuple[int, ...]:
        """Number of shards along each dimension."""
        return tuple(d.nshards for d in self.dims)

    @property
    def nshards(self) -> int:
        return math.prod(self.grid_shape)

    def shard_shape(self, shard: tuple[int, ...]) -> tuple[int, ...]:
        """Encoded shape of a shard (edge shards of a regular grid reach past the array)."""
        return tuple(d.shard_size(i) for d, i in zip(self.dims, shard, strict=True))

    def inner_shape(self, shard: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(d.inner_size(i) for d, i in zip(self.dims, shard, strict=True))

    def chunks_per_shard(self, shard: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(d.inner_per_shard(i) for d, i in zip(self.dims, shard, strict=True))

    @property
    def ninner(self) -> tuple[int, ...]:
        """Number of inner chunks holding part of the array along each dimension."""
        return tuple(d.ninner for d in self.dims)

    def all_shards(self) -> Iterator[tuple[int, ...]]:
        """Every shard of the grid, in C order. Costs the grid's size (10**14 shards
        for a 10**7 x 10**7 grid): to visit the shards that exist, list the store and
        map keys to coordinates (``ArrayInfo.coords``) instead."""
        return itertools.product(*(range(n) for n in self.grid_shape))

    def plan(self, selection: Sequence[slice | npt.ArrayLike]) -> ReadPlan:
        """Map an outer-indexing selection (a slice or 1-d integer array per dimension)
        to the inner chunks it touches, grouped by shard in C order."""
        if len(selection) != self.ndim:
            raise IndexError(f"expected {self.ndim} indexers, got {len(selection)}")
        out_shape = tuple(out_len(d, s) for d, s in zip(self.dims, selection, strict=True))
        if 0 in out_shape:  # nothing selected: no pieces to work out (however many chunks)
            return ReadPlan(out_shape, (), True)
        per_dim = [d.pieces(s) for d, s in zip(self.dims, selection, strict=True)]
        grouped: list[list[tuple[int, list[DimPiece]]]] = []
        for pieces in per_dim:
            groups: dict[int, list[DimPiece]] = {}
            for p in pieces:
                groups.setdefault(p.shard, []).append(p)
            grouped.append(sorted(groups.items()))
        shard_reads = []
        for combo in itertools.product(*grouped):
            shard = tuple(s for s, _ in combo)
            # a DimPiece is (shard, inner, local, out): transpose each combination of
            # per-dimension pieces into (shards, inners, locals, outs)
            chunks = tuple(
                ChunkRead(*tuple(zip(*ps, strict=True))[1:]) if ps else ChunkRead((), (), ())
                for ps in itertools.product(*(pieces for _, pieces in combo))
            )
            shard_reads.append(ShardRead(shard, chunks))
        basic = all(
            isinstance(p.local, slice) and isinstance(p.out, slice)
            for pieces in per_dim
            for p in pieces
        )
        return ReadPlan(out_shape, tuple(shard_reads), basic)


def out_len(dim: DimGrid, sel: slice | npt.ArrayLike) -> int:
    """How many elements a selection takes along one dimension."""
    if isinstance(sel, slice):
        return len(range(*sel.indices(dim.extent)))
    return int(np.asarray(sel).size)


def check_write_geometry(
    shards: Sequence[int | Sequence[int]] | None,
    inner: Sequence[int],
    itemsize: int,
    *,
    array: str | None = None,
    key: str | None = None,
) -> None:
    """Refuse, before anything is written, a new array's grid that no reader could read:
    a shard (its largest, along a rectilinear dimension) of more than
    :data:`MAX_CHUNKS_PER_SHARD` inner chunks, or an inner chunk of more bytes than numpy
    can hold. ``shards`` None: unsharded, ``inner`` the chunks."""

    if shards is not None:
        largest = [s if isinstance(s, int) else max(s, default=1) for s in shards]
        per_shard = [-(-int(s) // max(int(c), 1)) for s, c in zip(largest, inner, strict=True)]
        check_chunks_per_shard(
            per_shard,
            array=array,
            key=key,
            advice="Choose larger inner chunks or smaller shards. Nothing was written.",
        )
    nbytes = math.prod(int(c) for c in inner) * int(itemsize)
    if nbytes > INT64_MAX:
        raise TooLargeError(
            "an inner chunk is too large to encode or decode",
            expected=f"at most {INT64_MAX:,} bytes per inner chunk (what numpy can hold)",
            found=f"{nbytes:,} bytes ({' x '.join(map(str, inner))} of {itemsize} bytes)",
            array=array,
            key=key,
            advice="Choose smaller inner chunks. Nothing was written.",
        )


def check_chunks_per_shard(
    chunks_per_shard: Sequence[int],
    *,
    array: str | None = None,
    key: str | None = None,
    advice: str | None = None,
) -> int:
    """The number of inner chunks in a shard of this many per dimension, or
    :class:`~shardwise.errors.TooLargeError` past :data:`MAX_CHUNKS_PER_SHARD` (before
    anything of the shard's size is allocated). ``key`` names the ``zarr.json``;
    ``advice`` replaces the advice for a damaged array (a write's own, say)."""

    n = math.prod(int(c) for c in chunks_per_shard)
    if n > MAX_CHUNKS_PER_SHARD:
        raise TooLargeError(
            "a shard holds too many inner chunks to read or write",
            expected=f"at most {MAX_CHUNKS_PER_SHARD:,} inner chunks per shard (an index "
            f"of {16 * MAX_CHUNKS_PER_SHARD // 2**20} MiB)",
            found=f"{n:,} ({' x '.join(map(str, chunks_per_shard))}), an index of {16 * n:,} bytes",
            array=array,
            key=key,
            advice=advice
            or "The metadata's shard shape or inner chunk shape is damaged, or the "
            "array was written with inner chunks far too small for its shards: rewrite it "
            "with larger inner chunks (shardwise.reshard cannot read it either).",
        )
    return n


def target_bytes(name: str) -> int:
    """The size setting ``shardwise.<name>`` in bytes (see :mod:`shardwise.config`)."""
    return config.get_bytes(name)


def _regular(sizes: tuple[int, ...]) -> int | None:
    """The block size of a dask dimension whose blocks are all equal but the last."""
    if not sizes:
        return None
    first = sizes[0]
    if all(s == first for s in sizes[:-1]) and sizes[-1] <= first:
        return first
    return None


def auto_shards(
    shape: tuple[int, ...],
    itemsize: int,
    blocks: tuple[tuple[int, ...], ...] | None,
    target: int | None = None,
) -> tuple[int, ...]:
    """A shard shape toward ``target`` bytes (default: dask config
    ``shardwise.shard-bytes``, 128 MiB) built from whole dask blocks where the blocks
    are regular, so that each shard is written by the tasks of its own blocks.

    Dimensions grow from the first (slowest-varying) one, by whole blocks (the last
    shard may reach past the array's end); when one block is already larger than the
    target, the shard is a divisor of the block."""
    if target is None:
        target = target_bytes("shard-bytes")
    base = []
    for i, n in enumerate(shape):
        b = None if blocks is None else _regular(blocks[i])
        base.append(max(1, min(n, b if b is not None else n)))
    if math.prod(base) * itemsize > target:
        return _shrink(tuple(base), itemsize, target)
    return _grow(tuple(base), tuple(max(n, 1) for n in shape), itemsize, target, divide=False)


def auto_chunks(
    outer: tuple[int, ...],
    itemsize: int,
    blocks: tuple[tuple[int, ...], ...] | None = None,
    target: int | None = None,
    *,
    sharded: bool = True,
) -> tuple[int, ...]:
    """An inner chunk shape toward ``target`` bytes (default: dask config
    ``shardwise.chunk-bytes``, 1 MiB) that divides the shard shape ``outer``. Where
    dask blocks are regular, the inner chunks divide the blocks too when the blocks are
    large enough (then they are encoded beside their data), else they hold whole
    blocks. With ``sharded=False``, ``outer`` is the array's shape and the result is a
    plain chunk shape, built from whole blocks."""
    if target is None:
        target = target_bytes("chunk-bytes")
    unit = []
    for i, s in enumerate(outer):
        b = None if blocks is None else _regular(blocks[i])
        if b is None:
            unit.append(max(s, 1))
        else:
            unit.append(math.gcd(s, b) if sharded else max(1, min(s, b)))
    if math.prod(unit) * itemsize > target:
        return _shrink(tuple(unit), itemsize, target)
    limit = tuple(max(s, 1) for s in outer)
    return _grow(tuple(unit), limit, itemsize, target, divide=sharded)


def _grow(
    unit: tuple[int, ...], limit: tuple[int, ...], itemsize: int, target: int, *, divide: bool
) -> tuple[int, ...]:
    """Multiples of ``unit`` per dimension, from the first, toward ``target`` bytes and
    up to ``limit`` (with ``divide``, only sizes that divide ``limit``; without, up to
    the multiple that first covers it)."""
    out = list(unit)
    for i, (u, n) in enumerate(zip(unit, limit, strict=True)):
        rest = math.prod(out) // out[i] * itemsize
        if divide:
            options = [d for d in _divisors(n) if d % u == 0]
        else:
            most = math.ceil(n / u)
            options = [u * max(1, min(most, target // max(rest * u, 1))), u * most]
        fitting = [d for d in options if d * rest <= target]
        out[i] = max(fitting) if fitting else u
        if out[i] < max(options):
            break
    return tuple(out)


def _shrink(unit: tuple[int, ...], itemsize: int, target: int) -> tuple[int, ...]:
    """Divisors of ``unit`` per dimension, from the first, toward ``target`` bytes."""
    out = list(unit)
    for i, u in enumerate(unit):
        rest = math.prod(out[i + 1 :]) * itemsize
        fitting = [d for d in _divisors(u) if d * rest <= target]
        out[i] = max(fitting) if fitting else 1
        if fitting:
            break
    return tuple(out)


def _divisors(n: int) -> list[int]:
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))
