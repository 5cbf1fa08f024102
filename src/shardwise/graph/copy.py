"""Copying a stored array into a sharded one, shard by shard: the job of ``reshard`` and
of ``migrate`` (``reshard``'s repack with the grid unchanged).

One task per target shard (:func:`reshard_shard`), given the source objects (shards, or
chunks of an unsharded source) that hold its data (:func:`shards_to_fill`, from a
listing of the source), fills it one of two ways, chosen per array when the job is
planned (:class:`CopyPlan`):

*repack*
    The target inner chunks are the source's (same shape, same codec chain): the task
    reads the encoded source chunks (a source shard wholly wanted, as when the grid is
    unchanged, in one request; else the shard's index and coalesced ranges; one request
    per source chunk) and puts one target shard, no codec work. Every stored chunk is
    kept as it is, chunks holding only the fill value too (copying is not judging).
    With ``recode`` (``migrate``'s zlib, which Zarr v3 has no codec for), each stored
    chunk is decoded and encoded again with the target's chain (:func:`recode_zlib`),
    one at a time.
*re-encode*
    Anything else: the task reads the target shard's region decoded, a slab of inner
    chunks at a time, encodes its inner chunks (those holding only the fill value are
    left out) and puts the shard.

A run that resumes an earlier one skips the target shards present whose index reads
back (:func:`shardwise.io.reader.ArrayReader.shard_index`: one ranged read of the
index, its length and crc32c checked). Shards are single puts, so a present shard is
whole; a put cut short (a local file system) loses the end of the object, which holds
the index, and is written again. Chunks of an unsharded target carry nothing to check
and are written again.

The graph (:func:`copy_graph`) holds each array's plan once and one task per target
shard; the shard is stored through :class:`~shardwise.graph.target.WriteTarget`, as
every shard shardwise writes is. Apart from ``shardwise.tools.reshard`` (whose planner
writes the target's metadata for ``reshard`` and for ``migrate``, its same-grid mode;
each runs the graph) because this is what runs on the workers, and what both share.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from shardwise.codecs import ShardDecoder
from shardwise.errors import ShardwiseError, naming_io_errors
from shardwise.format.grid import ReadPlan
from shardwise.format.metadata import ArrayInfo
from shardwise.graph.target import WriteTarget
from shardwise.graph.write import wait_for
from shardwise.graph.write_plan import shard_box
from shardwise.io.listing import list_keys_sync
from shardwise.io.reader import ArrayReader

__all__ = [
    "RESUME_ADVICE",
    "CopyPlan",
    "Stats",
    "add_stats",
    "copy_graph",
    "recode_zlib",
    "reshard_shard",
    "shards_to_fill",
]

# what one task did: shards written, skipped, bytes read, bytes written, chunks
# repacked, chunks re-encoded
Stats = tuple[int, int, int, int, int, int]
Targets = dict[tuple[int, ...], list[tuple[int, ...]]]  # target shard -> source objects
RESUME_ADVICE = (
    "Check the stores (space, permissions, connection), then run again with mode='a' "
    "(--resume): the shards already written are kept."
)


@dataclass(frozen=True)
class CopyPlan:
    """One array's job: the source and target arrays, whether its chunks are repacked
    (else re-encoded), and whether the run resumes an earlier one (then shards present
    and whole are skipped). ``order``: the write order of the inner chunks in a target
    shard (``"C"`` for ``migrate``, as the draft wrote them); ``recode``: repacked
    chunks are decoded and encoded again one by one (see the module's description);
    ``what`` and ``advice`` name a failed task. One key of the graph holds it, its tasks
    refer to it."""

    src_store: Any
    src: ArrayInfo
    dst_store: Any
    dst: ArrayInfo
    repack: bool
    resume: bool
    order: str = "morton"
    recode: bool = False
    what: str = "resharding a shard"
    advice: str = RESUME_ADVICE


def recode_zlib(codecs: tuple[Any, ...]) -> tuple[tuple[Any, ...], str | None]:
    """``codecs`` with zlib (numcodecs', not a Zarr v3 codec) replaced by gzip at the
    same level, and what it was replaced with (None when nothing was)."""
    from zarr.codecs import GzipCodec

    out, changed = [], None
    for c in codecs:
        if type(c).__name__ == "Zlib":
            level = int(c.codec_config.get("level", 1))
            out.append(GzipCodec(level=level))
            changed = f"gzip (level {level})"
        else:
            out.append(c)
    return tuple(out), changed


# -- planning ----------------------------------------------------------------------------
def shards_to_fill(store: Any, src: ArrayInfo, dst: ArrayInfo) -> Targets:
    """The target shards that hold source data, each with the source objects (shards,
    or chunks of an unsharded source) it takes data from: the source's objects are
    listed, so absent source chunks and shards cost no request and no task (with the
    grid unchanged, each target shard takes its own source shard)."""

    found: Targets = {}
    for key in list_keys_sync(store, src.data_prefix):
        coords = src.coords(key)
        if coords is None:
            continue
        box = shard_box(src.layout, coords)
        ranges = [
            t.shard_range(lo, hi - 1) for t, (lo, hi) in zip(dst.layout.dims, box, strict=True)
        ]
        for target in itertools.product(*ranges):
            found.setdefault(target, []).append(coords)
    return dict(sorted(found.items()))


# -- the graph ---------------------------------------------------------------------------
def copy_graph(
    plans: Sequence[tuple[CopyPlan, Targets]],
    name: str,
    done: str,
    combine: Callable[..., Any] | None = None,
) -> Any:
    """A ``dask.delayed`` filling the target shards of ``plans`` (each array's plan and
    its target shards): tasks ``(name-<token>, i, *shard)`` after one key per plan, and
    a done tree (``done-<token>``) that computes to the summed :data:`Stats` (or to
    what ``combine`` makes of them)."""
    from dask.highlevelgraph import HighLevelGraph
    from dask.task_spec import DataNode, Task, TaskRef

    token = uuid.uuid4().hex
    layer_name = f"{name}-{token}"
    layer: dict[Any, Any] = {}
    keys = []
    for i, (plan, shards) in enumerate(plans):
        pkey = (f"{layer_name}-plan", i)
        layer[pkey] = DataNode(pkey, plan)
        for shard, sources in shards.items():
            key = (layer_name, i, *shard)
            layer[key] = Task(key, reshard_shard, TaskRef(pkey), shard, sources)
            keys.append(key)
    graph = HighLevelGraph({layer_name: layer}, {layer_name: set()})
    return wait_for(f"{done}-{token}", graph, keys, combine=combine or add_stats)


def add_stats(*stats: Stats | None) -> Stats:
    """The sum of what tasks did (the done tree's step)."""
    total = [0] * 6
    for s in stats:
        if s is not None:
            for i, v in enumerate(s):
                total[i] += v
    return (total[0], total[1], total[2], total[3], total[4], total[5])


# -- the task ----------------------------------------------------------------------------
def reshard_shard(plan: CopyPlan, shard: tuple[int, ...], sources: list[tuple[int, ...]]) -> Stats:
    """Fill one target shard from the source objects ``sources`` (see the module
    docstring); a store's I/O error names the array and the target shard's key."""
    target = WriteTarget(
        plan.dst_store,
        plan.dst,
        offset=(0,) * plan.dst.ndim,
        region=tuple((0, n) for n in plan.dst.shape),
        write_empty_chunks=False,
        order=plan.order,
        fresh=not plan.resume,
        what=plan.what,
        advice=plan.advice,
    )
    with naming_io_errors(
        target.what, array=plan.dst.name, key=plan.dst.key(shard), advice=plan.advice
    ):
        return _fill_shard(plan, target, shard, sources)


def _valid(target: WriteTarget, shard: tuple[int, ...]) -> bool:
    """Whether the destination holds this shard with an index that reads back (the one
    resume rule; see the module's description)."""
    if not isinstance(target.decoder(shard), ShardDecoder):
        return False  # a chunk of an unsharded target: nothing to check
    try:
        return target.reader().shard_index(shard) is not None
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
                raw: Any = data.get(c.inner)
                if raw is not None:
                    read += len(raw)
                    if plan.recode:
                        raw = _recoded(reader, target, inner, shard_read.shard, c.inner, raw)
                    chunks[
                        tuple(b + i - f for b, i, f in zip(base, c.inner, first, strict=True))
                    ] = raw
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


def _recoded(
    reader: ArrayReader,
    target: WriteTarget,
    shape: tuple[int, ...],
    src_shard: tuple[int, ...],
    inner: tuple[int, ...],
    raw: Any,
) -> bytes:
    """One stored source chunk decoded and encoded with the target's chain as an inner
    chunk of ``shape`` (the source's: the chunks are repacked), whatever it holds."""
    decoder = reader.decoder(src_shard)
    chunk = decoder.chunk if isinstance(decoder, ShardDecoder) else decoder
    key = reader.info.key(src_shard)
    values = chunk.decode(raw, key=key, chunk=inner if chunk is not decoder else src_shard)
    return target.encoder(shape).encode(values)
