"""Building shard objects: inner chunk write order and assembly (pure, no I/O)."""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping
from typing import Any

import numpy as np

from shardwise.index import IndexFormat

__all__ = ["WRITE_ORDERS", "assemble_shard", "shard_buffer", "write_order"]

WRITE_ORDERS = ("morton", "C")


def write_order(chunks_per_shard: tuple[int, ...], order: str = "morton") -> list[tuple[int, ...]]:
    """The order inner chunks are laid out in a shard: ``"C"`` (row-major) or
    ``"morton"`` (Z-order: bits of the coordinates interleaved, dimension 0 lowest, so
    chunks near each other in the array lie near each other in the shard)."""
    if order not in WRITE_ORDERS:
        raise ValueError(f"write_order must be one of {WRITE_ORDERS}, got {order!r}")
    ndim = len(chunks_per_shard)
    n = math.prod(chunks_per_shard)
    coords = np.indices(chunks_per_shard).reshape(ndim, n)
    if order == "morton" and n > 1:
        bits = max(int(s - 1).bit_length() for s in chunks_per_shard)
        code = np.zeros(n, dtype=np.uint64)
        for b in range(bits):
            for d in range(ndim):
                bit = ((coords[d] >> b) & 1).astype(np.uint64)
                code |= bit << np.uint64(b * ndim + d)
        coords = coords[:, np.argsort(code, kind="stable")]
    return [tuple(int(c) for c in coords[:, i]) for i in range(n)]


def _placed(
    chunks: Mapping[tuple[int, ...], bytes | memoryview],
    fmt: IndexFormat,
    order: list[tuple[int, ...]],
) -> tuple[list[tuple[int, bytes | memoryview]], bytes, int]:
    """Where each stored chunk goes in the shard (``(offset, bytes)`` in ``order``),
    the encoded index, and where the index goes."""
    table = fmt.empty_table()
    offset = fmt.nbytes if fmt.location == "start" else 0
    placed: list[tuple[int, bytes | memoryview]] = []
    for inner in order:
        data = chunks.get(inner)
        if data is None:
            continue
        n = len(data)
        table[inner] = (offset, n)
        placed.append((offset, data))
        offset += n
    return placed, fmt.encode(table), 0 if fmt.location == "start" else offset


def assemble_shard(
    chunks: Mapping[tuple[int, ...], bytes | memoryview],
    fmt: IndexFormat,
    order: list[tuple[int, ...]],
) -> bytes | None:
    """Lay out the encoded inner chunks in ``order`` with the index where ``fmt`` says;
    chunks absent from ``chunks`` are empty (index entry ``2**64-1``). Returns None for a
    shard with no chunks (which is not stored)."""
    if not chunks:
        return None
    placed, index, _ = _placed(chunks, fmt, order)
    pieces = [data for _, data in placed]
    return b"".join([index, *pieces] if fmt.location == "start" else [*pieces, index])


_SCRATCH = threading.local()
# shards up to this size are assembled in the reused buffer; the buffer stays allocated
# (one per thread that assembled a shard), so larger shards get memory of their own
SCRATCH_LIMIT = 256 * 2**20


def _copies_out(store: Any) -> bool:
    """Whether ``store.set`` is done with the bytes it is given once it returns (it
    writes them out and keeps no reference): then one buffer per thread can be reused
    for every shard, which spares a fresh allocation (and its page faults) per shard,
    at the cost of the buffer staying allocated (at most :data:`SCRATCH_LIMIT`). Known
    of zarr-python's LocalStore; other stores get a buffer of their own."""
    from zarr.storage import LocalStore

    return type(store) is LocalStore


def shard_buffer(
    chunks: Mapping[tuple[int, ...], bytes | memoryview],
    fmt: IndexFormat,
    order: list[tuple[int, ...]],
    store: Any,
) -> Any:
    """:func:`assemble_shard` as a zarr-python ``Buffer`` to give ``store.set`` (in
    this thread's reused scratch memory where the store allows it); None for a shard
    with no chunks."""
    from zarr.core.buffer import default_buffer_prototype

    proto = default_buffer_prototype()
    total = fmt.nbytes + sum(len(c) for c in chunks.values())
    if not _copies_out(store) or total > SCRATCH_LIMIT:
        blob = assemble_shard(chunks, fmt, order)
        return None if blob is None else proto.buffer.from_bytes(blob)
    if not chunks:
        return None
    scratch = getattr(_SCRATCH, "buf", None)
    if scratch is None or len(scratch) < total:
        scratch = _SCRATCH.buf = np.empty(max(total, 1 << 20), dtype=np.uint8)
    placed, index, at = _placed(chunks, fmt, order)
    for offset, data in placed:
        scratch[offset : offset + len(data)] = np.frombuffer(data, dtype=np.uint8)
    scratch[at : at + len(index)] = np.frombuffer(index, dtype=np.uint8)
    return proto.buffer.from_array_like(scratch[:total])
