"""The tasks of the write graph: what runs on the workers, one shard put per shard.

:func:`encode_block` is the task of one dask block (:func:`encode_batch` of a group of
small blocks): it writes the shards the block covers whole and returns its parts of the
others, encoded inner chunks and raw pieces of the inner chunks it shares. ``pick``
takes one shard's part out of a block's parts, so that only it travels on.
``write_shard`` is the task of a shard no single block covers: it gathers the parts,
merges cut inner chunks (with the existing shard's, read once, where the write does not
cover them) and stores the shard with one put. ``done`` and ``merge_sessions`` are the
tasks of the done tree. Every shard is stored through the write's
:class:`~shardwise.graph.target.WriteTarget`.

Apart from the graph (:mod:`shardwise.graph.write`) because building the graph runs
none of this, and the tasks read and write stores while the graph's building does not.
"""

from __future__ import annotations

import itertools
import math
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from shardwise.codecs import ShardDecoder
from shardwise.errors import ConflictError
from shardwise.format.grid import ChunkRead
from shardwise.graph.target import WriteTarget
from shardwise.graph.write_plan import Box, Shard, inside, intersect, local, shard_box, split_block
from shardwise.io.conditional import ABSENT, Version
from shardwise.io.icechunk import distinct
from shardwise.io.reader import ArrayReader
from shardwise.io.retry import retries, tries

__all__ = [
    "Contribution",
    "StoredBlock",
    "conflicts",
    "done",
    "encode_batch",
    "encode_block",
    "merge_sessions",
    "pick",
    "session_of",
    "write_shard",
]

# a block's contribution to one shard: inner chunk -> encoded bytes (None: empty), and
# raw pieces (inner chunk, where in the inner chunk, data) of inner chunks it shares
Contribution = tuple[
    dict[tuple[int, ...], bytes | None],
    list[tuple[tuple[int, ...], tuple[slice, ...], npt.NDArray[Any]]],
]


def _contribution(
    block: npt.NDArray[Any], box: Box, shard: Shard, target: WriteTarget
) -> Contribution:
    encoded: dict[tuple[int, ...], bytes | None] = {}
    pieces: list[tuple[tuple[int, ...], tuple[slice, ...], npt.NDArray[Any]]] = []
    # (guarded: an edge chunk is never whole here, another job may have grown the array
    # into it: it is merged with what is stored, see write_shard)
    for inner, ibox in target.inner_boxes(shard, clipped=not target.guarded).items():
        common = intersect(ibox, box)
        if common is None:
            continue
        take = local(common, box)
        if common == ibox:
            encoded[inner] = target.encode(shard, target.padded(shard, block[take]))
        else:
            pieces.append((inner, local(common, ibox), np.array(block[take], copy=True)))
    return encoded, pieces


class StoredBlock:
    """A block of a dask array that is a plain read of a stored array (as
    :func:`shardwise.array.from_zarr` makes it, nothing computed on it; see
    :func:`shardwise.graph.fanout.stored_reader`), not yet read: ``where`` in the array
    ``reader`` reads. :func:`encode_block` writes each target shard it covers whose inner
    chunks are the source's, of the same shape, straight from the stored chunks, each
    decoded into a reused buffer and encoded again (:meth:`recode`): no block of values,
    no copy into one and out again. Anything else reads the block (:meth:`values`)."""

    __slots__ = ("reader", "where")

    def __init__(self, reader: ArrayReader, where: tuple[slice, ...]) -> None:
        self.reader = reader
        self.where = where

    def values(self) -> npt.NDArray[Any]:
        return self.reader.read(self.where)

    def recode(self, shard: Shard, target: WriteTarget) -> bool:
        """Write the target shard ``shard`` (which the block covers whole) from the
        stored chunks when each of its inner chunks is one stored inner chunk of the
        same shape and data type; False, having written nothing, otherwise. What is
        written is what encoding the block's values writes: an absent stored chunk is
        the source's fill value, an inner chunk reaching past the array's end is padded
        with the target's, chunks of fill value only are left out unless the write keeps
        empty chunks."""
        reader, info = self.reader, target.info
        shape = info.layout.inner_shape(shard)
        if reader.dtype != info.dtype:
            return False
        tbox = shard_box(info.layout, shard)
        sbox = [(lo - o, hi - o) for (lo, hi), o in zip(tbox, target.offset, strict=True)]
        plan = reader.info.layout.plan([slice(lo, hi) for lo, hi in sbox])
        if not plan.basic:
            return False
        found: dict[Box, tuple[int, ChunkRead]] = {}
        for i, shard_read in enumerate(plan.shards):
            if reader.info.layout.inner_shape(shard_read.shard) != shape:
                return False
            for c in shard_read.chunks:
                # (slices all: the plan is basic)
                taken, out = cast(tuple[slice, ...], c.local), cast(tuple[slice, ...], c.out)
                if any(s.start != 0 or (s.step or 1) != 1 for s in taken):
                    return False
                box = tuple(
                    (lo + s.start, lo + s.stop) for s, (lo, _) in zip(out, tbox, strict=True)
                )
                found[box] = (i, c)
        boxes = target.inner_boxes(shard)
        steps: list[tuple[tuple[int, ...], Box, tuple[int, ChunkRead] | None]] = []
        for inner in target.write_order(shard):
            box = boxes[inner]
            hit = found.pop(box, None)
            if hit is None and all(lo < hi for lo, hi in box):
                return False  # an inner chunk of the target that is no stored chunk
            steps.append((inner, box, hit))
        if found:
            return False
        fetched = reader.fetch_encoded(plan, transient=True)
        # per source shard: the decoder of its chunks, its key, and how errors name a chunk
        sources = []
        for shard_read in plan.shards:
            decoder = reader.decoder(shard_read.shard)
            sharded = isinstance(decoder, ShardDecoder)
            chunk_decoder = decoder.chunk if isinstance(decoder, ShardDecoder) else decoder
            sources.append((chunk_decoder, reader.info.key(shard_read.shard), sharded))
        src_fill = reader.info.fill_value
        encoder = target.encoder(shape)
        builder = target.builder(shard)
        for inner, box, hit in steps:
            if hit is None:  # wholly past the array's end: the target's fill value
                chunk = np.full(shape, info.fill_value, dtype=info.dtype)
            else:
                i, c = hit
                data = fetched[i]
                raw = None if data is None else data.get(c.inner)
                if raw is None:  # not stored: the source's fill value
                    chunk = np.full(shape, src_fill, dtype=info.dtype)
                else:
                    chunk_decoder, key, sharded = sources[i]
                    where = c.inner if sharded else plan.shards[i].shard
                    chunk = chunk_decoder.decode(raw, key=key, chunk=where, scratch=True)
                if any(hi - lo != n for (lo, hi), n in zip(box, shape, strict=True)):
                    chunk = target.padded(shard, chunk[c.local])
            if target.keeps(chunk):
                builder.encode(inner, chunk, encoder)
        target.put(shard, builder.finish(lend=target.copies_out()), existed=None)
        return True


def encode_block(
    block: npt.NDArray[Any] | StoredBlock, where: tuple[slice, ...], target: WriteTarget
) -> dict[Shard, Contribution]:
    """The task of one dask block (``where`` is its place in the source array): write
    the shards it covers whole right here, and return its parts of the other shards it
    touches, for their shard tasks. A :class:`StoredBlock` writes the shards it can from
    the stored chunks, and is read for the rest."""
    box = tuple((o + s.start, o + s.stop) for o, s in zip(target.offset, where, strict=True))
    whole, gathered = split_block(target.info.layout, box, open_end=target.guarded)
    if isinstance(block, StoredBlock):
        whole = [shard for shard in whole if not block.recode(shard, target)]
        block = block.values() if whole or gathered else np.empty((0,) * len(box))
    block = np.asarray(block, dtype=target.info.dtype)
    for shard in whole:
        # the block holds every inner chunk of the shard: encode them straight into it
        boxes = target.inner_boxes(shard)
        builder = target.builder(shard)
        for inner in target.write_order(shard):
            chunk = target.padded(shard, block[local(boxes[inner], box)])
            target.add_chunk(builder, shard, inner, chunk)
        target.put(shard, builder.finish(lend=target.copies_out()), existed=None)
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


def session_of(parts: _Parts) -> Any:
    """A block task's fork session alone (run beside the parts, so only it travels)."""
    return parts.session


def merge_sessions(*results: Any) -> Any:
    """A done-tree task of a write that collects Icechunk fork sessions: the sessions
    its tasks handed back, merged into one (each distinct object once)."""
    forks = distinct(r.session if isinstance(r, _Parts) else r for r in results)
    if not forks:
        return None
    first, *rest = forks
    if rest:
        first.merge(*rest)
    return first


def encode_batch(
    where: tuple[slice, ...], target: WriteTarget, counts: tuple[int, ...], *blocks: Any
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
    return encode_block(out, where, target)


def pick(parts: dict[Shard, Contribution], shard: Shard) -> dict[Shard, Contribution]:
    """One shard's part of a block's parts (so that only it travels on)."""
    return {shard: parts[shard]}


def write_shard(
    shard: Shard, covered: bool, target: WriteTarget, *blocks: dict[Shard, Contribution]
) -> Any:
    """Assemble and store one shard from the parts of the blocks touching it.

    A shard the write covers whole is stored as the parts make it. One it covers in part
    is merged with the stored shard: its untouched inner chunks kept as bytes, the inner
    chunks the write cuts decoded, merged and encoded again. When the write guards
    against other jobs (:meth:`WriteTarget.guard`), the stored shard is read with its
    version and the merged one put only if that is unchanged; on a conflict the shard is
    read and merged again, after a pause that grows (with jitter) from try to try, up to
    :func:`~shardwise.io.retry.retries` tries, then :class:`~shardwise.errors.ConflictError`. A shard the
    array was just created without is first put as a new object, with no read."""
    chunks: dict[tuple[int, ...], bytes | None] = {}
    pieces: dict[tuple[int, ...], list[tuple[tuple[slice, ...], npt.NDArray[Any]]]] = {}
    for parts in blocks:
        encoded, raw = parts[shard]
        chunks.update(encoded)
        for inner, where, data in raw:
            pieces.setdefault(inner, []).append((where, data))

    guard = None if covered else target.guard()
    if guard is None:
        old = None if covered or target.fresh else target.fetch(shard)
        existed = None if covered or target.fresh else old is not None
        blob = None if old is None else old.as_numpy_array()
        target.put(shard, _merged(shard, target, chunks, pieces, blob), existed=existed)
        return target.session()

    expected: Version | None = ABSENT if target.fresh else None
    count = retries()
    for _ in tries(count):
        blob = None  # (a shard the array was just created without)
        if expected is None:
            data, expected = target.fetch_versioned(shard)
            blob = None if data is None else np.frombuffer(data, dtype=np.uint8)
        merged = _merged(shard, target, chunks, pieces, blob, keep_empty=not expected.absent)
        if merged is None:  # nothing to store, and nothing stored to replace
            return target.session()
        if target.put_if(shard, merged, expected):
            return target.session()
        _CONFLICTS[0] += 1
        expected = None
    raise ConflictError(
        "another job kept changing a shard this write merges into",
        expected="the shard unchanged between reading it and putting it back merged",
        found=f"it changed every time, {count} tries",
        array=target.info.name,
        key=target.info.key(shard),
        advice="Nothing of this shard was half-written. Run the write again (it is "
        "idempotent), or give the jobs regions that share no shard "
        "(shardwise.regions.check_regions).",
    )


_CONFLICTS = [0]  # conditional puts of this process that found their shard changed


def conflicts() -> int:
    """How many conditional shard puts of this process found the shard changed by
    another writer (and were read, merged and tried again): a figure for benchmarks."""
    return _CONFLICTS[0]


def _merged(
    shard: Shard,
    target: WriteTarget,
    chunks: dict[tuple[int, ...], bytes | None],
    pieces: dict[tuple[int, ...], list[tuple[tuple[slice, ...], npt.NDArray[Any]]]],
    blob: Any,
    *,
    keep_empty: bool = False,
) -> Any:
    """The shard the blocks' parts make over ``blob`` (the stored shard's bytes, None
    for none), as a Buffer to put; None when it holds no inner chunk, unless
    ``keep_empty`` (a stored shard is there to replace: its index alone, every entry
    empty; an unsharded chunk stored whatever it holds)."""
    info = target.info
    region = target.region
    key = info.key(shard)
    existing = {} if blob is None else target.stored_chunks(shard, blob, key)
    # (guarded: whole inner chunks, rows past the array's end included, which another
    # job may have grown the array into and written meanwhile)
    boxes = target.inner_boxes(shard, clipped=not target.guarded)
    merged: dict[tuple[int, ...], npt.NDArray[Any]] = {}
    for inner, inner_pieces in pieces.items():
        ibox = boxes[inner]
        if inside(ibox, region) or inner not in existing:
            base = np.full(info.layout.inner_shape(shard), info.fill_value, dtype=info.dtype)
        else:
            base = target.decode_chunk(shard, existing[inner], key, inner)
        for where, data in inner_pieces:
            base[where] = data
        merged[inner] = base

    # in the write order: chunks the blocks encoded, chunks merged here (encoded straight
    # into the shard), and existing chunks the write does not touch (kept as bytes)
    sharded = info.sharding is not None
    builder = target.builder(shard)
    for inner in target.write_order(shard):
        if inner in chunks:
            encoded_chunk = chunks[inner]
            if encoded_chunk is not None:
                builder.add(inner, encoded_chunk)
        elif inner in merged:
            if keep_empty and not sharded:  # no empty object to stand for a fill chunk
                builder.encode(inner, merged[inner], target.encoder(merged[inner].shape))
            else:
                target.add_chunk(builder, shard, inner, merged[inner])
        elif inner in existing and intersect(boxes[inner], region) is None:
            builder.add(inner, existing[inner])  # untouched: kept as bytes
    return builder.finish(lend=target.copies_out(), keep_empty=keep_empty)


def done(*_: Any) -> None:
    """A task of the done tree: it runs once the tasks it waits for have."""
    return None
