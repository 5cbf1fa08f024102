"""Writing dask arrays into sharded Zarr v3 arrays: one task per shard, no locks.

The write graph is made of a fixed number of layers, whatever the number of blocks
and shards:

``shardwise-encode-<token>``
    one task per dask block, a dask ``Blockwise`` layer over the source array (as
    ``map_blocks`` makes), into which dask's blockwise fusion folds the source's own
    blockwise layers: making a block and encoding it are one task. For every shard the
    block covers whole, the task encodes the inner chunks and stores the shard itself;
    for every other shard it touches, it encodes the inner chunks that lie wholly inside
    the block (so only compressed bytes travel on) and cuts out the raw pieces of inner
    chunks it shares with its neighbours.
``shardwise-split-<token>``
    where one block contributes to two or more shards that other blocks contribute to
    as well, a small task per such shard picks out that shard's part, so that only it
    travels to the shard's task.
``shardwise-shard-<token>``
    one task per shard that no single block covers. It gathers the parts, assembles the
    cut inner chunks and encodes them, keeps the inner chunks the write does not touch
    from the existing shard (as bytes, not re-encoded), lays them out in the write order
    with the index, and stores the shard with a single put (or deletes it when nothing
    is left).
``shardwise-done-<token>``
    a tree of small tasks, each waiting for at most :data:`FAN_IN` others, that ends
    when every shard is written.

and one ``shardwise-target-<token>`` key holding what the tasks need to know about the
array (store, metadata, options), which each worker fetches once.

So any dask chunking is accepted, never rechunked, and exactly one task writes each
shard. The plan (:class:`WritePlan`) is a pure value built without I/O, one
:class:`DimWrite` per dimension, so that building it costs the number of blocks and
shards along each dimension, not their product; the graph is built in one pass over the
shards that need a shard task (none when the dask chunks are unions of shards).
"""

from __future__ import annotations

import itertools
import math
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
from dask.delayed import Delayed

import shardwise._compat as _compat
from shardwise._gc import paused_gc
from shardwise.codecs import ChunkDecoder, ChunkEncoder, ShardDecoder, is_fill
from shardwise.errors import naming_io_errors
from shardwise.format.grid import ShardLayout, check_chunks_per_shard
from shardwise.format.metadata import ArrayInfo
from shardwise.format.names import key_under
from shardwise.format.shard import WRITE_ORDERS, ShardBuilder, write_order
from shardwise.io.reader import ArrayReader
from shardwise.io.stores import store_token

if TYPE_CHECKING:
    from shardwise.format.grid import DimGrid

__all__ = [
    "FAN_IN",
    "DimWrite",
    "ShardWrite",
    "WritePlan",
    "batch_bounds",
    "check_encode_split",
    "check_shards_per_task",
    "encode_split_chunks",
    "fuse_blockwise",
    "plan_write",
    "split_block",
    "store_dask_array",
    "WriteDelayed",
    "wait_for",
]

Box = tuple[tuple[int, int], ...]  # per dimension a half-open interval [lo, hi)
Shard = tuple[int, ...]

FAN_IN = 32  # the most tasks one task of the done tree waits for
SPLIT_BYTES = 8 * 2**20  # encode_split="auto" makes no part of a shard smaller than this


# -- the plan ----------------------------------------------------------------------------
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
    ``alone[i]`` that one block does."""

    starts: npt.NDArray[np.int64]
    first: int
    lo: npt.NDArray[np.int64]
    hi: npt.NDArray[np.int64]
    covered: npt.NDArray[np.bool_]
    alone: npt.NDArray[np.bool_]

    @classmethod
    def build(cls, grid: DimGrid, sizes: Sequence[int], offset: int) -> DimWrite:
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
    layout: ShardLayout, chunks: Sequence[Sequence[int]], offset: Sequence[int] | None = None
) -> WritePlan:
    """Plan a write of a dask array with ``chunks`` at ``offset`` (default: the origin)."""
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
        DimWrite.build(d, cs, o) for d, cs, o in zip(layout.dims, sizes, origin, strict=True)
    )
    return WritePlan(layout, sizes, origin, dims)


def split_block(layout: ShardLayout, box: Box) -> tuple[list[Shard], list[Shard]]:
    """The shards a block writing ``box`` covers whole (its task writes them), and the
    other shards it touches (it hands its parts of them to their shard tasks).

    The same split as the plan's: a shard is covered whole by the one block holding all
    of it (clipped at the array's end)."""
    per_dim = []
    for d, (lo, hi) in zip(layout.dims, box, strict=True):
        if hi <= lo:
            return [], []
        here = []
        for s in d.shard_range(lo, hi - 1):
            start = d.shard_start(s)
            here.append((s, lo <= start and min(start + d.shard_size(s), d.extent) <= hi))
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


def _inside(inner: Box, outer: Box) -> bool:
    return all(olo <= lo and hi <= ohi for (lo, hi), (olo, ohi) in zip(inner, outer, strict=True))


def _local(box: Box, within: Box) -> tuple[slice, ...]:
    """``box`` as slices of an array that holds ``within`` (``box`` lies inside it)."""
    return tuple(slice(lo - wlo, hi - wlo) for (lo, hi), (wlo, _) in zip(box, within, strict=True))


def _intersect(a: Box, b: Box) -> Box | None:
    out = tuple((max(alo, blo), min(ahi, bhi)) for (alo, ahi), (blo, bhi) in zip(a, b, strict=True))
    return None if any(lo >= hi for lo, hi in out) else out


# -- the tasks ---------------------------------------------------------------------------
class _Target:
    """What the tasks need to know about the write: the store and array, where the data
    goes (``offset``, ``region``) and the options. Picklable, with encoders and decoders
    built lazily in each process; one key of the graph holds it.

    An unsharded array is written the same way, each chunk taking the place of a shard
    with a single inner chunk and no index."""

    def __init__(
        self,
        store: Any,
        info: ArrayInfo,
        *,
        offset: tuple[int, ...],
        region: Box,
        write_empty_chunks: bool,
        order: str,
        fresh: bool = False,
        sessions: bool = False,
    ) -> None:
        self.store = store
        self.info = info
        # an Icechunk fork's store: every writing task hands back the fork session that
        # holds its changes, for the done tree to merge
        self.sessions = sessions
        self.offset = offset
        self.region = region
        self.write_empty_chunks = write_empty_chunks
        self.order = order
        self.fresh = fresh  # the array was just created: no shard exists yet
        self._cache: dict[Any, Any] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "_cache"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._cache = {}

    def session(self) -> Any:
        """The Icechunk fork session this process's writes went into (None unless the
        write collects sessions)."""
        return self.store.session if self.sessions else None

    def encoder(self, shape: tuple[int, ...]) -> ChunkEncoder:
        key = ("enc", shape)
        if key not in self._cache:
            sharding: Any = self.info.sharding
            codecs = self.info.codecs if sharding is None else sharding.codecs
            self._cache[key] = ChunkEncoder(
                codecs, shape, self.info.zdtype, self.info.fill_value, array=self.info.name
            )
        return self._cache[key]

    def decoder(self, shard: Shard) -> ShardDecoder | ChunkDecoder:
        if "reader" not in self._cache:
            self._cache["reader"] = ArrayReader(self.store, self.info)
        return self._cache["reader"].decoder(shard)

    def inner_boxes(self, shard: Shard) -> dict[tuple[int, ...], Box]:
        """Each inner chunk of a shard and the part of the array it holds (clipped)."""
        layout = self.info.layout
        per_shard = layout.chunks_per_shard(shard)
        check_chunks_per_shard(per_shard, array=self.info.name, key=self.info.key(shard))
        out = {}
        for inner in np.ndindex(*per_shard):
            box = []
            for d, s, j in zip(layout.dims, shard, inner, strict=True):
                lo = d.shard_start(s) + j * d.inner_size(s)
                box.append((lo, min(lo + d.inner_size(s), d.extent)))
            out[tuple(inner)] = tuple(box)
        return out

    def encode(self, shard: Shard, chunk: npt.NDArray[Any]) -> bytes | None:
        """Encode a full-size inner chunk; None when it is all fill value and empty
        chunks are left out."""
        if not self.keeps(chunk):
            return None
        return self.encoder(self.info.layout.inner_shape(shard)).encode(chunk)

    def keeps(self, chunk: npt.NDArray[Any]) -> bool:
        """Whether a full-size inner chunk is stored: not when it is all fill value and
        empty chunks are left out."""
        return self.write_empty_chunks or not is_fill(chunk, self.info.fill_value)

    def padded(self, shard: Shard, data: npt.NDArray[Any]) -> npt.NDArray[Any]:
        """An edge inner chunk's data padded with the fill value to the full shape."""
        shape = self.info.layout.inner_shape(shard)
        if data.shape == shape:
            return data
        full = np.full(shape, self.info.fill_value, dtype=self.info.dtype)
        full[tuple(slice(0, n) for n in data.shape)] = data
        return full

    # -- whole shard objects -------------------------------------------------------------
    def stored_chunks(self, shard: Shard, blob: Any, key: str) -> dict[Any, Any]:
        """The encoded inner chunks held by an existing shard object."""
        decoder = self.decoder(shard)
        if not isinstance(decoder, ShardDecoder):
            return {(0,) * self.info.ndim: memoryview(blob)}
        view, table = decoder.parse(blob, key=key)
        out = {}
        for inner in np.ndindex(*decoder.chunks_per_shard):
            stored = decoder.entry(view, table, inner)
            if stored is not None:
                out[tuple(inner)] = stored
        return out

    def decode_chunk(
        self, shard: Shard, data: Any, key: str, inner: tuple[int, ...]
    ) -> npt.NDArray[Any]:
        decoder = self.decoder(shard)
        chunk = decoder.chunk if isinstance(decoder, ShardDecoder) else decoder
        return np.array(chunk.decode(data, key=key, chunk=inner), copy=True)

    def builder(self, shard: Shard) -> ShardBuilder:
        """A builder for one shard object, with room for all its inner chunks encoded
        (it grows if an encoder knows no bound and outruns that)."""
        decoder = self.decoder(shard)
        fmt = decoder.index if isinstance(decoder, ShardDecoder) else None
        encoder = self.encoder(self.info.layout.inner_shape(shard))
        per = encoder.bound or math.prod(encoder.shape) * encoder.dtype.itemsize
        return ShardBuilder(fmt, per * len(self.write_order(shard)))

    def write_order(self, shard: Shard) -> list[tuple[int, ...]]:
        """The order of a shard's inner chunks in its object."""
        decoder = self.decoder(shard)
        if not isinstance(decoder, ShardDecoder):
            return [(0,) * self.info.ndim]
        key = ("order", decoder.chunks_per_shard)
        if key not in self._cache:
            self._cache[key] = write_order(decoder.chunks_per_shard, self.order)
        order: list[tuple[int, ...]] = self._cache[key]
        return order

    def add_chunk(
        self, builder: ShardBuilder, shard: Shard, inner: tuple[int, ...], chunk: npt.NDArray[Any]
    ) -> None:
        """Encode a full-size inner chunk into the shard, if it :meth:`keeps` it."""
        if self.keeps(chunk):
            builder.encode(inner, chunk, self.encoder(self.info.layout.inner_shape(shard)))

    def put(self, shard: Shard, buffer: Any, *, existed: bool | None) -> None:
        """Store one shard with a single put (``buffer``, a zarr-python Buffer), or
        delete it when it has no data left (``buffer`` None; ``existed=False`` says the
        shard is known not to exist). Stores with zarr-python's synchronous methods
        (local files, memory) are called on this thread, without a hop to zarr's event
        loop."""

        key = key_under(self.info.path, self.info.key(shard))  # never outside the array
        with naming_io_errors(
            "writing a shard",
            array=self.info.name,
            key=key,
            advice="Check the store (space, permissions, connection), then run the same "
            "write again: shards are single puts, and the ones written are whole.",
        ):
            self._put(key, buffer, existed=existed)

    def _put(self, key: str, buffer: Any, *, existed: bool | None) -> None:

        store = self.store
        direct = _sync_methods(store)
        if buffer is None:
            if self.fresh:
                return
            if existed or (existed is None and _compat.sync(store.exists(key))):
                if direct:
                    store.delete_sync(key)
                else:
                    _compat.sync(store.delete(key))
            return
        if direct:
            store.set_sync(key, buffer)
        else:
            _compat.sync(store.set(key, buffer))

    def fetch(self, shard: Shard) -> Any:
        """An existing shard object's bytes (None when there is none)."""
        from zarr.buffer import default_buffer_prototype

        key = self.info.key(shard)
        if _sync_methods(self.store):
            return self.store.get_sync(key, prototype=default_buffer_prototype())
        return _compat.sync(self.store.get(key, default_buffer_prototype()))


def _sync_methods(store: Any) -> bool:
    """Whether to call the store's synchronous get/set/delete (zarr >= 3.4): only for
    zarr-python's own local and memory stores. (A wrapper store inherits synchronous
    methods that go straight to the store it wraps, past its own ``get``/``set``.)"""
    from zarr.storage import LocalStore, MemoryStore

    return type(store) in (LocalStore, MemoryStore) and callable(getattr(store, "set_sync", None))


# a block's contribution to one shard: inner chunk -> encoded bytes (None: empty), and
# raw pieces (inner chunk, where in the inner chunk, data) of inner chunks it shares
Contribution = tuple[
    dict[tuple[int, ...], bytes | None],
    list[tuple[tuple[int, ...], tuple[slice, ...], npt.NDArray[Any]]],
]


def _contribution(block: npt.NDArray[Any], box: Box, shard: Shard, target: _Target) -> Contribution:
    encoded: dict[tuple[int, ...], bytes | None] = {}
    pieces: list[tuple[tuple[int, ...], tuple[slice, ...], npt.NDArray[Any]]] = []
    for inner, ibox in target.inner_boxes(shard).items():
        common = _intersect(ibox, box)
        if common is None:
            continue
        take = _local(common, box)
        if common == ibox:
            encoded[inner] = target.encode(shard, target.padded(shard, block[take]))
        else:
            pieces.append((inner, _local(common, ibox), np.array(block[take], copy=True)))
    return encoded, pieces


def _encode_block(
    block: npt.NDArray[Any], where: tuple[slice, ...], target: _Target
) -> dict[Shard, Contribution]:
    """The task of one dask block (``where`` is its place in the source array): write
    the shards it covers whole right here, and return its parts of the other shards it
    touches, for their shard tasks."""
    box = tuple((o + s.start, o + s.stop) for o, s in zip(target.offset, where, strict=True))
    whole, gathered = split_block(target.info.layout, box)
    block = np.asarray(block, dtype=target.info.dtype)
    for shard in whole:
        # the block holds every inner chunk of the shard: encode them straight into it
        boxes = target.inner_boxes(shard)
        builder = target.builder(shard)
        for inner in target.write_order(shard):
            chunk = target.padded(shard, block[_local(boxes[inner], box)])
            target.add_chunk(builder, shard, inner, chunk)
        target.put(shard, builder.finish(target.store), existed=None)
    parts = {shard: _contribution(block, box, shard, target) for shard in gathered}
    if not target.sessions:
        return parts  # a plain dict: distributed serializes it item by item
    with_session = _Parts(parts)
    with_session.session = target.session()
    return with_session


class _Parts(dict[Any, Any]):
    """A block task's parts of the shards it shares, by shard, in a write that collects
    Icechunk sessions: ``session`` is the fork session holding what the task wrote."""

    session: Any = None


def _session_of(parts: _Parts) -> Any:
    """A block task's fork session alone (run beside the parts, so only it travels)."""
    return parts.session


def _merge_sessions(*results: Any) -> Any:
    """A done-tree task of a write that collects Icechunk fork sessions: the sessions
    its tasks handed back, merged into one (each distinct object once)."""
    from shardwise.io.icechunk import distinct

    forks = distinct(r.session if isinstance(r, _Parts) else r for r in results)
    if not forks:
        return None
    first, *rest = forks
    if rest:
        first.merge(*rest)
    return first


def _encode_batch(
    where: tuple[slice, ...], target: _Target, counts: tuple[int, ...], *blocks: Any
) -> dict[Shard, Contribution]:
    """The task of a group of neighbouring blocks (``counts`` of them along each
    dimension, in C order): put them together and write them as one block."""
    out = np.empty(tuple(s.stop - s.start for s in where), dtype=target.info.dtype)
    starts = []
    for axis, n in enumerate(counts):
        step = math.prod(counts[axis + 1 :])
        sizes = [np.shape(blocks[i * step])[axis] for i in range(n)]
        starts.append([0, *itertools.accumulate(sizes)])
    for pos, block in zip(np.ndindex(*counts), blocks, strict=True):
        out[tuple(slice(s[i], s[i + 1]) for s, i in zip(starts, pos, strict=True))] = block
    return _encode_block(out, where, target)


def _pick(parts: dict[Shard, Contribution], shard: Shard) -> dict[Shard, Contribution]:
    """One shard's part of a block's parts (so that only it travels on)."""
    return {shard: parts[shard]}


def _write_shard(
    shard: Shard, covered: bool, target: _Target, *blocks: dict[Shard, Contribution]
) -> Any:
    """Assemble and store one shard from the parts of the blocks touching it."""
    info = target.info
    region = target.region
    key = info.key(shard)
    chunks: dict[tuple[int, ...], bytes | None] = {}
    pieces: dict[tuple[int, ...], list[tuple[tuple[slice, ...], npt.NDArray[Any]]]] = {}
    for parts in blocks:
        encoded, raw = parts[shard]
        chunks.update(encoded)
        for inner, where, data in raw:
            pieces.setdefault(inner, []).append((where, data))

    existing: dict[tuple[int, ...], Any] = {}
    existed: bool | None = None
    if not covered and not target.fresh:
        old = target.fetch(shard)
        existed = old is not None
        if old is not None:
            existing = target.stored_chunks(shard, old.as_numpy_array(), key)

    boxes = target.inner_boxes(shard)
    merged: dict[tuple[int, ...], npt.NDArray[Any]] = {}
    for inner, inner_pieces in pieces.items():
        ibox = boxes[inner]
        if _inside(ibox, region) or inner not in existing:
            base = np.full(info.layout.inner_shape(shard), info.fill_value, dtype=info.dtype)
        else:
            base = target.decode_chunk(shard, existing[inner], key, inner)
        for where, data in inner_pieces:
            base[where] = data
        merged[inner] = base

    # in the write order: chunks the blocks encoded, chunks merged here (encoded straight
    # into the shard), and existing chunks the write does not touch (kept as bytes)
    builder = target.builder(shard)
    for inner in target.write_order(shard):
        if inner in chunks:
            encoded_chunk = chunks[inner]
            if encoded_chunk is not None:
                builder.add(inner, encoded_chunk)
        elif inner in merged:
            target.add_chunk(builder, shard, inner, merged[inner])
        elif inner in existing and _intersect(boxes[inner], region) is None:
            builder.add(inner, existing[inner])  # untouched: kept as bytes
    target.put(shard, builder.finish(target.store), existed=existed)
    return target.session()


def _done(*_: Any) -> None:
    """A task of the done tree: it runs once the tasks it waits for have."""
    return None


# -- the graph ---------------------------------------------------------------------------
def _done_tree(name: str, keys: Sequence[Any], combine: Any = _done) -> tuple[dict[Any, Any], Any]:
    """A layer of tasks that wait for ``keys``, at most :data:`FAN_IN` each, in a tree;
    returns the layer and its root key. Each task calls ``combine`` on the results it
    waits for (by default it drops them)."""
    from dask.task_spec import Task, TaskRef

    layer: dict[Any, Any] = {}
    level = 0
    while True:
        above = []
        for j in range(max(1, -(-len(keys) // FAN_IN))):
            key = (name, level, j)
            group = keys[j * FAN_IN : (j + 1) * FAN_IN]
            layer[key] = Task(key, combine, *(TaskRef(k) for k in group))
            above.append(key)
        if len(above) == 1:
            return layer, above[0]
        keys, level = above, level + 1


def fuse_blockwise(graph: Any, name: str) -> Any:
    """``graph`` (a HighLevelGraph) with the blockwise layers below layer ``name`` fused
    into it, as dask's array optimizer would (a Delayed's optimizer does not)."""
    from dask.highlevelgraph import HighLevelGraph

    if not isinstance(graph, HighLevelGraph):
        graph = HighLevelGraph.from_collections(name, graph, dependencies=())
    return _compat.optimize_blockwise(graph, keys=[name])


class WriteDelayed(Delayed):
    """The ``dask.delayed`` of a write. Computing it optimizes the graph as dask
    optimizes arrays (blockwise and linear fusion, slices), as ``dask.array.store``
    would the source arrays; a plain ``Delayed`` only culls. A graph with annotated
    layers (a split write's placement, or the user's) gets blockwise fusion only, which
    keeps them."""

    __slots__ = ()

    @staticmethod
    def __dask_optimize__(dsk: Any, keys: Any, **kwargs: Any) -> Any:
        from dask.core import flatten
        from dask.highlevelgraph import HighLevelGraph

        if isinstance(dsk, HighLevelGraph) and any(
            layer.annotations for layer in dsk.layers.values()
        ):
            # low-level fusion would drop the layers, and with them the annotations
            # (the workers a split write's parts go to): fuse blockwise layers only
            wanted = list(flatten(keys))
            return _compat.optimize_blockwise(dsk, keys=wanted).cull(set(wanted))
        return _compat.optimize(dsk, keys, **kwargs)


def wait_for(name: str, graph: Any, keys: Sequence[Any], *, combine: Any = _done) -> Any:
    """A ``dask.delayed`` (key in layer ``name``) that ends once the tasks of ``keys``
    in ``graph`` have run, through a done tree (no task waits for more than
    :data:`FAN_IN`); it computes to None, or to what ``combine`` makes of the tasks'
    results level by level."""
    from dask.highlevelgraph import HighLevelGraph

    with paused_gc():
        layer, root = _done_tree(name, keys, combine)
    layers = dict(graph.layers)
    deps = dict(graph.dependencies)
    layers[name] = layer
    deps[name] = {k[0] if isinstance(k, tuple) else k for k in keys}
    return WriteDelayed(root, HighLevelGraph(layers, deps), layer=name)


def check_shards_per_task(value: Any) -> None:
    """Refuse a ``shards_per_task`` that is not an integer >= 1 or ``"auto"``."""
    if value == "auto":
        return
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise ValueError(f"shards_per_task must be an integer >= 1 or 'auto', got {value!r}")


def _shards_per_task(value: int | str, info: ArrayInfo) -> int:
    """``shards_per_task`` as a number: ``"auto"`` is as many shards as make dask's
    ``array.chunk-size`` (taking the first shard's size)."""
    check_shards_per_task(value)
    if value == "auto":
        import dask.config
        from dask.utils import parse_bytes

        target = parse_bytes(dask.config.get("array.chunk-size"))
        shard = math.prod(info.layout.shard_shape((0,) * info.ndim)) * info.dtype.itemsize
        return max(1, int(target // max(shard, 1)))
    return int(value)


def check_encode_split(value: Any) -> None:
    if value is None or value == "auto":
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"encode_split must be None, 'auto' or an integer >= 1, got {value!r}")


def _threads() -> int:
    """The threads that will run the graph: the distributed cluster's in scope, else
    the local scheduler's."""
    import dask.config

    client = _client()
    if client is not None:
        return max(1, sum(client.nthreads().values()))
    scheduler = dask.config.get("scheduler", None)
    if scheduler in ("sync", "synchronous", "single-threaded"):
        return 1
    import os

    return int(dask.config.get("num_workers", None) or os.cpu_count() or 1)


def encode_split_chunks(
    chunks: tuple[tuple[int, ...], ...],
    layout: ShardLayout,
    offset: Sequence[int] | None,
    value: int | str | None,
    itemsize: int = 4,
) -> tuple[tuple[int, ...], ...] | None:
    """The dask chunks that split the encoding of each shard into about ``value``
    tasks (None: no split). Blocks are cut only at inner chunk boundaries, first along
    the first dimension (so each part is a contiguous slice of its block), then the
    next, so every part holds whole inner chunks: the part's task encodes them, and
    one task per shard lays them out and makes the single put, as for any shard that
    several blocks touch.

    ``"auto"`` splits only where the shards written are fewer than the threads that
    will run the graph (a distributed client's, or the local scheduler's), into about
    ``2 * threads / shards`` parts per shard, each of at least :data:`SPLIT_BYTES`: few
    large shards then keep every thread busy, while a write of more shards than
    threads, or of small shards, is left as it is (one task per block)."""
    import dask.config

    check_encode_split(value)
    if value is None:
        value = dask.config.get("shardwise.encode-split", "auto")
        check_encode_split(value)
    if not layout.sharded or any(0 in c for c in chunks):
        return None
    offset = tuple(offset) if offset is not None else (0,) * len(chunks)
    if value == "auto":
        threads = _threads()
        nshards = plan_write(layout, chunks, offset).nshards
        if nshards >= threads:
            return None
        shard = layout.shard_shape((0,) * layout.ndim)
        nbytes = math.prod(shard) * itemsize
        # two parts per thread: a worker encodes its first part while the next travels
        parts = min(-(-2 * threads // max(nshards, 1)), nbytes // SPLIT_BYTES)
    else:
        parts = int(value)
    if parts < 2:
        return None
    new = list(chunks)
    for d, dim in enumerate(layout.dims):
        if parts < 2:
            break
        per = min(parts, dim.inner_per_shard(0))  # (taking the first shard's)
        if per < 2:
            continue
        new[d] = _split_dim(chunks[d], dim, offset[d], per)
        parts = -(-parts // per)
    out = tuple(tuple(c) for c in new)
    return None if out == chunks else out


def _split_source(source: Any, cut: tuple[tuple[int, ...], ...]) -> Any:
    """``source`` with its blocks cut into the finer ``cut`` (which refines its chunks):
    each part a task slicing its block, so a part is a view of the block where it lies
    (no copy, as dask's rechunk would make) and only the part travels to another
    worker."""
    import operator

    import dask.array as da
    from dask.base import tokenize
    from dask.highlevelgraph import HighLevelGraph
    from dask.task_spec import Task, TaskRef

    name = f"shardwise-part-{tokenize(source.name, cut)}"
    per_dim = []
    for old, new in zip(source.chunks, cut, strict=True):
        where: list[tuple[int, slice]] = []
        block, used = 0, 0
        for n in new:
            if used == old[block]:
                block, used = block + 1, 0
            where.append((block, slice(used, used + n)))
            used += n
        per_dim.append(where)
    layer: dict[Any, Any] = {}
    for idx in np.ndindex(*(len(c) for c in cut)):
        parts = [per_dim[d][i] for d, i in enumerate(idx)]
        key = (name, *idx)
        parent = TaskRef((source.name, *(b for b, _ in parts)))
        layer[key] = Task(key, operator.getitem, parent, tuple(sl for _, sl in parts))
    graph = HighLevelGraph.from_collections(name, layer, dependencies=[source])
    return da.Array(graph, name, cut, meta=source._meta)


def _client() -> Any:
    try:
        from distributed import get_client

        return get_client()
    except (ImportError, ValueError):
        return None


def _spread(layer: Any, name: str, numblocks: tuple[int, ...]) -> None:
    """Ask the distributed scheduler (when one is in scope) to run the encode tasks of
    a split write on the workers' threads in turn, rather than all where their block
    lies: a loose restriction (``allow_other_workers``), so a lost worker or a busy one
    does not hold a task back. Each worker's parts of a block travel to it raw and back
    compressed."""
    client = _client()
    if client is None:
        return
    threads = [addr for addr, n in sorted(client.nthreads().items()) for _ in range(n)]
    if len(threads) < 2:
        return
    where = {(name, *b): [threads[i % len(threads)]] for i, b in enumerate(np.ndindex(*numblocks))}
    layer.annotations = {
        **(layer.annotations or {}),
        "workers": where.get,
        "allow_other_workers": True,
    }


def _split_dim(sizes: tuple[int, ...], dim: DimGrid, offset: int, parts: int) -> tuple[int, ...]:
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


def _batch_layer(
    name: str, source: Any, groups: tuple[tuple[int, ...], ...], plan: WritePlan, target: str
) -> dict[Any, Any]:
    """The encode layer of a batched write: a task per group of blocks of ``source``."""
    from dask.task_spec import Task, TaskRef

    layer: dict[Any, Any] = {}
    with paused_gc():
        for group in np.ndindex(*plan.numblocks):
            ranges = [range(g[i], g[i + 1]) for g, i in zip(groups, group, strict=True)]
            where = tuple(
                slice(lo - o, hi - o)
                for (lo, hi), o in zip(plan.block_box(group), plan.offset, strict=True)
            )
            key = (name, *group)
            layer[key] = Task(
                key,
                _encode_batch,
                where,
                TaskRef(target),
                tuple(len(r) for r in ranges),
                *(TaskRef((source.name, *b)) for b in itertools.product(*ranges)),
            )
    return layer


def store_dask_array(
    source: Any,
    store: Any,
    info: ArrayInfo,
    *,
    offset: Sequence[int] | None = None,
    write_empty_chunks: bool = False,
    order: str = "morton",
    fresh: bool = False,
    shards_per_task: int | str = 1,
    encode_split: int | str | None = None,
    sessions: bool = False,
) -> Any:
    """A ``dask.delayed`` that writes the dask array ``source`` into the Zarr v3 array
    ``info`` of ``store`` at ``offset``; it computes to None.

    ``sessions=True``, for the store of an Icechunk fork session: every task that puts
    shards hands back its process's copy of the fork, and the delayed computes to one
    fork session holding all the changes (merged through the done tree), to merge into
    the session the fork came from.

    One encode task per block; a shard that one block covers whole is written by that
    block's task, every other shard by a task of its own that gathers the encoded inner
    chunks (and raw pieces of cut inner chunks) from the blocks touching it. An
    unsharded array is written the same way, chunk by chunk. The graph has the same
    few layers whatever the size (see the module's description).

    ``fresh=True`` says the array was just created, so no shard exists yet: partly
    written shards are not read first, and empty ones need no delete.

    ``shards_per_task`` above 1 groups neighbouring blocks that hold fewer shards than
    that (:func:`batch_bounds`) and gives each group one task, which writes about that
    many shards: fewer tasks for tiny shards. ``"auto"`` groups toward dask's
    ``array.chunk-size`` of data per task.

    ``encode_split`` splits the encoding of each shard into about that many tasks,
    where few shards would leave threads idle (:func:`encode_split_chunks`); ``None``
    takes dask config ``shardwise.encode-split`` (default ``"auto"``)."""
    from dask.base import tokenize
    from dask.delayed import Delayed
    from dask.highlevelgraph import HighLevelGraph
    from dask.task_spec import DataNode, Task, TaskRef

    if order not in WRITE_ORDERS:
        raise ValueError(f"write_order must be one of {WRITE_ORDERS}, got {order!r}")
    per_task = _shards_per_task(shards_per_task, info)
    cut = encode_split_chunks(source.chunks, info.layout, offset, encode_split, info.dtype.itemsize)
    if cut is not None:
        source = _split_source(source, cut)
        per_task = 1
    groups = None
    if per_task > 1:
        groups = batch_bounds(info.layout, source.chunks, offset, per_task)
        if all(len(g) - 1 == len(c) for g, c in zip(groups, source.chunks, strict=True)):
            groups = None  # every block is a group of its own already
    chunks = source.chunks
    if groups is not None:
        chunks = tuple(
            tuple(sum(c[a:b]) for a, b in itertools.pairwise(g))
            for g, c in zip(groups, source.chunks, strict=True)
        )
    plan = plan_write(info.layout, chunks, offset)
    # every write is its own action: two writes must never share dask keys (a store's
    # name need not say which endpoint or account it reaches, so two stores of one name
    # would otherwise get one write when computed together)
    token = tokenize(
        source,
        store_token(store),
        uuid.uuid4().hex,
        info.path,
        plan.offset,
        write_empty_chunks,
        order,
        fresh,
        per_task,
        cut,
        sessions,
    )
    names = {
        part: f"shardwise-{part}-{token}"
        for part in ("target", "encode", "split", "shard", "session", "done")
    }
    target = _Target(
        store,
        info,
        offset=plan.offset,
        region=plan.region,
        write_empty_chunks=write_empty_chunks,
        order=order,
        fresh=fresh,
        sessions=sessions,
    )
    combine = _merge_sessions if sessions else _done
    target_key = names["target"]
    target_graph = HighLevelGraph(
        {target_key: {target_key: DataNode(target_key, target)}}, {target_key: set()}
    )
    if groups is None:  # a task per block, fused with the source's blockwise layers
        encoded = source.map_blocks(
            _encode_block,
            _compat.ArraySliceDep(source.chunks),
            Delayed(target_key, target_graph),
            name=names["encode"],
            meta=np.empty((0,) * source.ndim, dtype=object),
        )
        graph = fuse_blockwise(encoded.__dask_graph__(), names["encode"])
        layers = dict(graph.layers)
        deps = dict(graph.dependencies)
        if cut is not None:
            _spread(layers[names["encode"]], names["encode"], source.numblocks)
    else:  # a task per group of blocks
        graph = HighLevelGraph.merge(source.__dask_graph__(), target_graph)
        layers = dict(graph.layers)
        deps = dict(graph.dependencies)
        layers[names["encode"]] = _batch_layer(names["encode"], source, groups, plan, target_key)
        deps[names["encode"]] = {*source.__dask_layers__(), target_key}

    encode_keys: list[Any]
    if not plan.ngathered:  # every shard is written by its block's task
        encode_keys = [(names["encode"], *b) for b in np.ndindex(*plan.numblocks)]
        return wait_for(names["done"], HighLevelGraph(layers, deps), encode_keys, combine=combine)

    # shard tasks gather the parts of the blocks touching their shards; a block with
    # parts for several of them gets a split task per shard, so each part travels alone
    gathered = plan.gathered_per_block()
    split: dict[Any, Any] = {}
    shards: dict[Any, Any] = {}
    target_ref = TaskRef(target_key)
    with paused_gc():  # a task per shard: millions of small objects
        for sw in plan.shard_writes(gathered=True):
            parts = []
            for b in sw.blocks:
                if gathered[b] > 1:
                    key: Any = (names["split"], *b, *sw.shard)
                    split[key] = Task(key, _pick, TaskRef((names["encode"], *b)), sw.shard)
                    parts.append(TaskRef(key))
                else:
                    parts.append(TaskRef((names["encode"], *b)))  # its one part
            key = (names["shard"], *sw.shard)
            shards[key] = Task(key, _write_shard, sw.shard, sw.covered, target_ref, *parts)
    layers[names["shard"]] = shards
    deps[names["shard"]] = {names["encode"], target_key}
    if split:
        layers[names["split"]] = split
        deps[names["split"]] = {names["encode"]}
        deps[names["shard"]].add(names["split"])
    # the blocks that feed no shard task are waited for directly
    encode_keys = [(names["encode"], *map(int, b)) for b in np.argwhere(gathered == 0)]
    if sessions:  # and the fork sessions of those that do, taken beside their parts
        session_layer = {}
        for where in np.argwhere(gathered > 0).tolist():
            key = (names["session"], *where)
            session_layer[key] = Task(key, _session_of, TaskRef((names["encode"], *where)))
        if session_layer:
            layers[names["session"]] = session_layer
            deps[names["session"]] = {names["encode"]}
            encode_keys += list(session_layer)
    return wait_for(
        names["done"], HighLevelGraph(layers, deps), [*encode_keys, *shards], combine=combine
    )


FIXED_KINDS = "biufcmM"  # dtype kinds the shard writer handles (fixed size)


def finish_graph(writes: list[Any], finish: Any, *head: Any) -> Any:
    """A ``dask.delayed`` that runs ``finish(*head, *results)`` once ``writes`` (each a
    ``dask.delayed``) are done, and computes to what it returns. Built directly on their
    graphs: ``dask.delayed(f)(writes)`` would cull each write's whole graph while
    building."""
    import uuid

    from dask.highlevelgraph import HighLevelGraph
    from dask.task_spec import Task, TaskRef

    from shardwise.graph.write import WriteDelayed

    name = f"shardwise-finish-{uuid.uuid4().hex}"
    graph = HighLevelGraph.merge(*(w.__dask_graph__() for w in writes))
    refs = (TaskRef(w.key) for w in writes)
    layers: dict[str, Any] = {**graph.layers, name: {name: Task(name, finish, *head, *refs)}}
    deps = {**graph.dependencies, name: {layer for w in writes for layer in w.__dask_layers__()}}
    return WriteDelayed(name, HighLevelGraph(layers, deps), layer=name)


def data_graph(
    source: Any,
    target: Any,
    region: tuple[slice, ...],
    offset: tuple[int, ...],
    write_empty_chunks: bool | None,
    order: str,
    fresh: bool,
    shards_per_task: int | str = 1,
    encode_split: int | str | None = None,
    *,
    store: Any = None,
) -> Any:
    """The delayed write of one dask variable into its zarr array (``fresh``: created
    by this call, so no shard of it exists yet). ``store``: write through this store
    instead of the array's (an Icechunk fork's store: the delayed then computes to the
    fork session holding the changes)."""
    from shardwise.graph.write import store_dask_array

    empty = target.config.write_empty_chunks if write_empty_chunks is None else write_empty_chunks
    if target.metadata.zarr_format == 3 and source.dtype.kind in FIXED_KINDS:
        info = ArrayInfo.from_metadata(target.metadata, target.path)
        return store_dask_array(
            source.astype(info.dtype, copy=False),
            target.store_path.store if store is None else store,
            info,
            offset=offset,
            write_empty_chunks=bool(empty),
            order=order,
            fresh=fresh,
            shards_per_task=shards_per_task,
            encode_split=encode_split,
            sessions=store is not None,
        )
    return _store_aligned(source, target, region, offset)


def _store_aligned(source: Any, target: Any, region: tuple[slice, ...], offset: Any) -> Any:
    """What the shard writer does not handle (Zarr v2 arrays, variable-length strings)
    goes through ``dask.array.store`` after rechunking to the array's write grid, so no
    two tasks share a chunk or shard."""
    import dask.array as da
    from dask.core import flatten

    from shardwise.graph.write import fuse_blockwise, wait_for

    grid = getattr(target, "shards", None) or target.chunks
    new_chunks = tuple(
        _aligned(n, o, g) for n, o, g in zip(source.shape, offset, grid, strict=True)
    )
    aligned = source.rechunk(new_chunks) if new_chunks != source.chunks else source
    stored = da.store(aligned, target, regions=region, lock=False, compute=False)
    graph = fuse_blockwise(stored.__dask_graph__(), stored.name)
    return wait_for(f"shardwise-done-{stored.name}", graph, list(flatten(stored.__dask_keys__())))


def _aligned(n: int, offset: int, grid: int) -> tuple[int, ...]:
    """Chunk sizes covering ``[offset, offset + n)`` that break at multiples of ``grid``."""
    out, pos, end = [], offset, offset + n
    while pos < end:
        stop = min((pos // grid + 1) * grid, end)
        out.append(stop - pos)
        pos = stop
    return tuple(out) or (0,)
