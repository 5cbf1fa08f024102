"""Writing dask arrays into sharded Zarr v3 arrays: one task per shard, no locks.

The graph has two layers:

1. one *encode* task per dask block. For every shard the block touches it encodes the
   inner chunks that lie wholly inside the block (so only compressed bytes travel on),
   and cuts out the raw pieces of inner chunks that the block shares with its
   neighbours;
2. one *shard* task per shard. It gathers the encoded chunks and raw pieces from the
   blocks that touch its shard, assembles the cut inner chunks and encodes them, keeps
   the inner chunks the write does not touch from the existing shard (as bytes, not
   re-encoded), lays them out in the write order with the index, and stores the shard
   with a single put (or deletes it when nothing is left).

So any dask chunking is accepted, never rechunked, and exactly one task writes each
shard. The plan (:class:`WritePlan`) is a pure value, built without I/O.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from shardwise.codecs import ChunkDecoder, ChunkEncoder, ShardDecoder, is_fill
from shardwise.layout import ShardLayout
from shardwise.metadata import ArrayInfo
from shardwise.reader import ArrayReader
from shardwise.shard import WRITE_ORDERS, assemble_shard, write_order
from shardwise.storage import store_token

__all__ = ["ShardWrite", "WritePlan", "plan_write", "store_dask_array"]

Box = tuple[tuple[int, int], ...]  # per dimension a half-open interval [lo, hi)


@dataclass(frozen=True, slots=True)
class ShardWrite:
    """The blocks that touch one shard, and whether the write covers all of it."""

    shard: tuple[int, ...]
    blocks: tuple[tuple[int, ...], ...]
    covered: bool  # every element of the shard inside the array is written


@dataclass(frozen=True, slots=True)
class WritePlan:
    """Which dask block touches which shard, for a write of an array of ``chunks``
    (dask's chunk sizes) at ``offset`` in an array laid out by ``layout``."""

    layout: ShardLayout
    chunks: tuple[tuple[int, ...], ...]
    offset: tuple[int, ...]
    shards: tuple[ShardWrite, ...]

    @property
    def region(self) -> Box:
        return tuple((o, o + sum(c)) for o, c in zip(self.offset, self.chunks, strict=True))

    def block_box(self, block: tuple[int, ...]) -> Box:
        """The part of the array a dask block is written to."""
        out = []
        for o, c, i in zip(self.offset, self.chunks, block, strict=True):
            lo = o + sum(c[:i])
            out.append((lo, lo + c[i]))
        return tuple(out)

    def blocks_of(self) -> dict[tuple[int, ...], list[tuple[int, ...]]]:
        """For each dask block, the shards it touches."""
        out: dict[tuple[int, ...], list[tuple[int, ...]]] = {}
        for sw in self.shards:
            for b in sw.blocks:
                out.setdefault(b, []).append(sw.shard)
        return out


def shard_box(layout: ShardLayout, shard: tuple[int, ...]) -> Box:
    """The part of the array a shard holds (clipped at the array's end)."""
    return tuple(
        (d.shard_start(i), min(d.shard_start(i) + d.shard_size(i), d.extent))
        for d, i in zip(layout.dims, shard, strict=True)
    )


def _inside(inner: Box, outer: Box) -> bool:
    return all(olo <= lo and hi <= ohi for (lo, hi), (olo, ohi) in zip(inner, outer, strict=True))


def _intersect(a: Box, b: Box) -> Box | None:
    out = tuple((max(alo, blo), min(ahi, bhi)) for (alo, ahi), (blo, bhi) in zip(a, b, strict=True))
    return None if any(lo >= hi for lo, hi in out) else out


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
    # per dimension: which shards each block touches
    per_dim: list[dict[int, list[int]]] = []
    for d, o, cs in zip(layout.dims, origin, sizes, strict=True):
        touches: dict[int, list[int]] = {}
        lo = o
        for bi, c in enumerate(cs):
            if c:
                for s in d.shard_range(lo, lo + c - 1):
                    touches.setdefault(s, []).append(bi)
            lo += c
        per_dim.append(touches)
    plan = WritePlan(layout, sizes, origin, ())
    region = plan.region
    shards = []
    for combo in itertools.product(*(sorted(t.items()) for t in per_dim)):
        shard = tuple(s for s, _ in combo)
        blocks = tuple(itertools.product(*(bs for _, bs in combo)))
        covered = _inside(shard_box(layout, shard), region)
        shards.append(ShardWrite(shard, blocks, covered))
    return WritePlan(layout, sizes, origin, tuple(shards))


# -- the tasks ---------------------------------------------------------------------------
class _Target:
    """What the tasks need to know about the array they write: picklable, with encoders
    and decoders built lazily in each process.

    An unsharded array is written the same way, each chunk taking the place of a shard
    with a single inner chunk and no index."""

    def __init__(
        self,
        store: Any,
        info: ArrayInfo,
        *,
        write_empty_chunks: bool,
        order: str,
        fresh: bool = False,
    ) -> None:
        self.store = store
        self.info = info
        self.write_empty_chunks = write_empty_chunks
        self.order = order
        self.fresh = fresh  # the array was just created: no shard exists yet
        self._cache: dict[Any, Any] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "_cache"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._cache = {}

    def encoder(self, shape: tuple[int, ...]) -> ChunkEncoder:
        key = ("enc", shape)
        if key not in self._cache:
            sharding: Any = self.info.sharding
            codecs = self.info.codecs if sharding is None else sharding.codecs
            self._cache[key] = ChunkEncoder(
                codecs, shape, self.info.zdtype, self.info.fill_value, array=self.info.name
            )
        return self._cache[key]

    def decoder(self, shard: tuple[int, ...]) -> ShardDecoder | ChunkDecoder:
        if "reader" not in self._cache:
            self._cache["reader"] = ArrayReader(self.store, self.info)
        return self._cache["reader"].decoder(shard)

    def inner_boxes(self, shard: tuple[int, ...]) -> dict[tuple[int, ...], Box]:
        """Each inner chunk of a shard and the part of the array it holds (clipped)."""
        layout = self.info.layout
        out = {}
        for inner in np.ndindex(*layout.chunks_per_shard(shard)):
            box = []
            for d, s, j in zip(layout.dims, shard, inner, strict=True):
                lo = d.shard_start(s) + j * d.inner_size(s)
                box.append((lo, min(lo + d.inner_size(s), d.extent)))
            out[tuple(inner)] = tuple(box)
        return out

    def encode(self, shard: tuple[int, ...], chunk: npt.NDArray[Any]) -> bytes | None:
        """Encode a full-size inner chunk; None when it is all fill value and empty
        chunks are left out."""
        if not self.write_empty_chunks and is_fill(chunk, self.info.fill_value):
            return None
        return self.encoder(self.info.layout.inner_shape(shard)).encode(chunk)

    def padded(self, shard: tuple[int, ...], data: npt.NDArray[Any]) -> npt.NDArray[Any]:
        """An edge inner chunk's data padded with the fill value to the full shape."""
        shape = self.info.layout.inner_shape(shard)
        if data.shape == shape:
            return data
        full = np.full(shape, self.info.fill_value, dtype=self.info.dtype)
        full[tuple(slice(0, n) for n in data.shape)] = data
        return full

    # -- whole shard objects -------------------------------------------------------------
    def stored_chunks(self, shard: tuple[int, ...], blob: Any, key: str) -> dict[Any, Any]:
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
        self, shard: tuple[int, ...], data: Any, key: str, inner: tuple[int, ...]
    ) -> npt.NDArray[Any]:
        decoder = self.decoder(shard)
        chunk = decoder.chunk if isinstance(decoder, ShardDecoder) else decoder
        return np.array(chunk.decode(data, key=key, chunk=inner), copy=True)

    def assemble(self, shard: tuple[int, ...], chunks: dict[Any, Any]) -> bytes | None:
        """The object to store for a shard from its encoded inner chunks; None when
        there are none."""
        decoder = self.decoder(shard)
        if not isinstance(decoder, ShardDecoder):
            data = chunks.get((0,) * self.info.ndim)
            return None if data is None else bytes(data)
        order = write_order(decoder.chunks_per_shard, self.order)
        return assemble_shard(chunks, decoder.index, order)

    def put(self, shard: tuple[int, ...], blob: bytes | None, *, existed: bool | None) -> int:
        """Store one shard with a single put, or delete it when it has no data left
        (``existed=False`` says the shard is known not to exist)."""
        from zarr.core.buffer import default_buffer_prototype
        from zarr.core.sync import sync

        key = self.info.key(shard)
        if blob is None:
            if self.fresh:
                return 0
            if existed or (existed is None and sync(self.store.exists(key))):
                sync(self.store.delete(key))
            return 0
        sync(self.store.set(key, default_buffer_prototype().buffer.from_bytes(blob)))
        return len(blob)


# a block's contribution to one shard: inner chunk -> encoded bytes (None: empty), and
# raw pieces (inner chunk, where in the inner chunk, data) of inner chunks it shares
Contribution = tuple[
    dict[tuple[int, ...], bytes | None],
    list[tuple[tuple[int, ...], tuple[slice, ...], npt.NDArray[Any]]],
]


def _contribution(
    block: npt.NDArray[Any], box: Box, shard: tuple[int, ...], target: _Target
) -> Contribution:
    encoded: dict[tuple[int, ...], bytes | None] = {}
    pieces: list[tuple[tuple[int, ...], tuple[slice, ...], npt.NDArray[Any]]] = []
    for inner, ibox in target.inner_boxes(shard).items():
        common = _intersect(ibox, box)
        if common is None:
            continue
        take = tuple(
            slice(lo - blo, hi - blo) for (lo, hi), (blo, _) in zip(common, box, strict=True)
        )
        if common == ibox:
            encoded[inner] = target.encode(shard, target.padded(shard, block[take]))
        else:
            where = tuple(
                slice(lo - ilo, hi - ilo) for (lo, hi), (ilo, _) in zip(common, ibox, strict=True)
            )
            pieces.append((inner, where, np.array(block[take], copy=True)))
    return encoded, pieces


def _encode_block(
    block: npt.NDArray[Any],
    box: Box,
    shards: list[tuple[int, ...]],
    whole: list[tuple[int, ...]],
    target: _Target,
) -> tuple[dict[tuple[int, ...], Contribution], int]:
    """Encode a block's part of each shard in ``shards`` for the shard tasks, and write
    the shards in ``whole`` (which this block alone covers) right here. Returns the
    contributions and the number of bytes written."""
    block = np.asarray(block, dtype=target.info.dtype)
    out = {shard: _contribution(block, box, shard, target) for shard in shards}
    written = 0
    for shard in whole:
        encoded, pieces = _contribution(block, box, shard, target)
        assert not pieces  # the block holds every inner chunk of the shard
        written += target.put(
            shard,
            target.assemble(shard, {k: v for k, v in encoded.items() if v is not None}),
            existed=None,
        )
    return out, written


def _write_shard(
    shard: tuple[int, ...], covered: bool, region: Box, target: _Target, *parts: Contribution
) -> int:
    """Assemble and store one shard; returns the number of bytes stored."""
    from zarr.core.buffer import default_buffer_prototype
    from zarr.core.sync import sync

    info = target.info
    key = info.key(shard)
    chunks: dict[tuple[int, ...], bytes | None] = {}
    pieces: dict[tuple[int, ...], list[tuple[tuple[slice, ...], npt.NDArray[Any]]]] = {}
    for encoded, raw in parts:
        chunks.update(encoded)
        for inner, where, data in raw:
            pieces.setdefault(inner, []).append((where, data))

    existing: dict[tuple[int, ...], Any] = {}
    existed: bool | None = None
    if not covered and not target.fresh:
        old = sync(target.store.get(key, default_buffer_prototype()))
        existed = old is not None
        if old is not None:
            existing = target.stored_chunks(shard, old.as_numpy_array(), key)

    boxes = target.inner_boxes(shard)
    for inner, inner_pieces in pieces.items():
        ibox = boxes[inner]
        if _inside(ibox, region) or inner not in existing:
            base = np.full(info.layout.inner_shape(shard), info.fill_value, dtype=info.dtype)
        else:
            base = target.decode_chunk(shard, existing[inner], key, inner)
        for where, data in inner_pieces:
            base[where] = data
        chunks[inner] = target.encode(shard, base)

    final: dict[tuple[int, ...], bytes | memoryview] = {}
    for inner, ibox in boxes.items():
        if inner in chunks:
            encoded_chunk = chunks[inner]
            if encoded_chunk is not None:
                final[inner] = encoded_chunk
        elif inner in existing and _intersect(ibox, region) is None:
            final[inner] = existing[inner]  # untouched: kept as bytes
    return target.put(shard, target.assemble(shard, final), existed=existed)


def store_dask_array(
    source: Any,
    store: Any,
    info: ArrayInfo,
    *,
    offset: Sequence[int] | None = None,
    write_empty_chunks: bool = False,
    order: str = "morton",
    fresh: bool = False,
) -> Any:
    """A ``dask.delayed`` that writes the dask array ``source`` into the Zarr v3 array
    ``info`` of ``store`` at ``offset``. Computing it returns the number of bytes stored.

    One encode task per block; a shard that one block covers whole is written by that
    block's task, every other shard by a task of its own that gathers the encoded inner
    chunks (and raw pieces of cut inner chunks) from the blocks touching it. An
    unsharded array is written the same way, chunk by chunk.

    ``fresh=True`` says the array was just created, so no shard exists yet: partly
    written shards are not read first, and empty ones need no delete."""
    import dask
    from dask.base import tokenize

    if order not in WRITE_ORDERS:
        raise ValueError(f"write_order must be one of {WRITE_ORDERS}, got {order!r}")
    plan = plan_write(info.layout, source.chunks, offset)
    target = _Target(store, info, write_empty_chunks=write_empty_chunks, order=order, fresh=fresh)
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
    )
    blocks = source.to_delayed()
    gathered: dict[tuple[int, ...], list[tuple[int, ...]]] = {}
    whole: dict[tuple[int, ...], list[tuple[int, ...]]] = {}
    for sw in plan.shards:
        if sw.covered and len(sw.blocks) == 1:
            whole.setdefault(sw.blocks[0], []).append(sw.shard)
        else:
            for b in sw.blocks:
                gathered.setdefault(b, []).append(sw.shard)
    encoded = {
        b: dask.delayed(_encode_block, pure=True, nout=2)(
            blocks[b],
            plan.block_box(b),
            gathered.get(b, []),
            whole.get(b, []),
            target,
            dask_key_name=f"shardwise-encode-{token}-{i}",
        )
        for i, b in enumerate(sorted(gathered.keys() | whole.keys()))
    }
    region = plan.region
    writes = [encoded[b][1] for b in sorted(whole)]
    writes += [
        dask.delayed(_write_shard, pure=True)(
            sw.shard,
            sw.covered,
            region,
            target,
            *(encoded[b][0][sw.shard] for b in sw.blocks),
            dask_key_name=f"shardwise-shard-{token}-{i}",
        )
        for i, sw in enumerate(plan.shards)
        if not (sw.covered and len(sw.blocks) == 1)
    ]
    return dask.delayed(sum, pure=True)(writes, dask_key_name=f"shardwise-store-{token}")
