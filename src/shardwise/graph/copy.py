"""Copying a stored array into a sharded one, shard by shard: ``reshard``'s task.

One task per target shard (:func:`reshard_shard`), given the source objects (shards, or
chunks of an unsharded source) that hold its data, fills it one of two ways, chosen per
array when the job is planned (:class:`CopyPlan`):

*repack*
    The target inner chunks are the source's (same shape, same codec chain): the task
    reads the encoded source chunks (the shard's index and coalesced ranges per source
    shard, one request per source chunk) and puts one target shard, no codec work.
*re-encode*
    Anything else: the task reads the target shard's region decoded, a slab of inner
    chunks at a time, encodes its inner chunks (those holding only the fill value are
    left out) and puts the shard.

The shard is stored through :class:`~shardwise.graph.target.WriteTarget`, as every
shard shardwise writes is. Apart from ``shardwise.tools.reshard`` (which plans the
target's metadata and the job, writes the metadata and runs the graph) because this is
what runs on the workers, and the place ``migrate``'s copy (the same-grid repack) is to
join.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from shardwise.errors import ShardwiseError, naming_io_errors
from shardwise.format.grid import ReadPlan
from shardwise.format.metadata import ArrayInfo
from shardwise.graph.plan import shard_box
from shardwise.graph.target import WriteTarget
from shardwise.io.reader import ArrayReader

__all__ = ["RESUME_ADVICE", "CopyPlan", "Stats", "reshard_shard"]

# what one task did: shards written, skipped, bytes read, bytes written, chunks
# repacked, chunks re-encoded
Stats = tuple[int, int, int, int, int, int]
RESUME_ADVICE = (
    "Check the stores (space, permissions, connection), then run again with resume=True "
    "(--resume): the shards already written are kept."
)


@dataclass(frozen=True)
class CopyPlan:
    """One array's job: the source and target arrays, whether its chunks are repacked
    (else re-encoded), and whether the run resumes an earlier one (then shards present
    and whole are skipped). One key of the graph holds it, its tasks refer to it."""

    src_store: Any
    src: ArrayInfo
    dst_store: Any
    dst: ArrayInfo
    repack: bool
    resume: bool


def reshard_shard(plan: CopyPlan, shard: tuple[int, ...], sources: list[tuple[int, ...]]) -> Stats:
    """Fill one target shard from the source objects ``sources`` (see the module
    docstring); a store's I/O error names the array and the target shard's key."""
    target = WriteTarget(
        plan.dst_store,
        plan.dst,
        offset=(0,) * plan.dst.ndim,
        region=tuple((0, n) for n in plan.dst.shape),
        write_empty_chunks=False,
        order="morton",
        fresh=not plan.resume,
        what="resharding a shard",
        advice=RESUME_ADVICE,
    )
    with naming_io_errors(
        target.what, array=plan.dst.name, key=plan.dst.key(shard), advice=RESUME_ADVICE
    ):
        return _fill_shard(plan, target, shard, sources)


def _valid(target: WriteTarget, shard: tuple[int, ...]) -> bool:
    """Whether the destination holds this shard with an index that reads back."""
    try:
        return ArrayReader(target.store, target.info).shard_index(shard) is not None
    except ShardwiseError:
        return False


def _fill_shard(
    plan: CopyPlan, target: WriteTarget, shard: tuple[int, ...], sources: list[tuple[int, ...]]
) -> Stats:
    if plan.resume and _valid(target, shard):
        return (0, 1, 0, 0, 0, 0)
    dst, src = plan.dst, plan.src
    region = shard_box(dst.layout, shard)
    reader = ArrayReader(plan.src_store, src)
    present = set(sources)

    def reads_of(box: Sequence[tuple[int, int]]) -> ReadPlan:
        """The read plan of ``box``, restricted to the source objects that exist."""
        full = src.layout.plan([slice(lo, hi) for lo, hi in box])
        kept = tuple(r for r in full.shards if r.shard in present)
        return ReadPlan(full.out_shape, kept, full.basic)

    chunks: dict[tuple[int, ...], Any] = {}
    if plan.repack:
        read = 0
        reads = reads_of(region)
        inner = dst.layout.inner_shape(shard)
        first = tuple(lo // c for (lo, _), c in zip(region, inner, strict=True))
        for shard_read, data in zip(reads.shards, reader.fetch_encoded(reads), strict=True):
            if data is None:
                continue
            base = tuple(
                d.shard_start(s) // c
                for d, s, c in zip(src.layout.dims, shard_read.shard, inner, strict=True)
            )
            for c in shard_read.chunks:
                raw = data.get(c.inner)
                if raw is not None:
                    chunks[
                        tuple(b + i - f for b, i, f in zip(base, c.inner, first, strict=True))
                    ] = raw
                    read += len(raw)
        written = target.put_chunks(shard, chunks)
        return (int(written > 0), 0, read, written, len(chunks), 0)
    # decoded a slab of inner chunks at a time (along the first dimension): a worker
    # holds one slab's values and the shard's encoded chunks, not the raw shard
    boxes = target.inner_boxes(shard)
    read = 0
    inner0 = dst.layout.inner_shape(shard)[0]
    for row in range(dst.layout.chunks_per_shard(shard)[0]):
        lo0 = region[0][0] + row * inner0
        slab = ((lo0, min(lo0 + inner0, region[0][1])), *region[1:])
        if slab[0][0] >= slab[0][1]:
            break
        part = reads_of(slab)
        values = np.full(part.out_shape, src.fill_value, dtype=src.dtype)
        reader.read_into(part, values)
        read += values.nbytes
        for inner_chunk, box in boxes.items():
            if inner_chunk[0] != row:
                continue
            piece = values[
                tuple(slice(a - r[0], b - r[0]) for (a, b), r in zip(box, slab, strict=True))
            ]
            encoded = target.encode(shard, target.padded(shard, piece))
            if encoded is not None:
                chunks[inner_chunk] = encoded
        del values
    written = target.put_chunks(shard, chunks)
    return (int(written > 0), 0, read, written, 0, len(chunks))
