"""Building shard objects: inner chunk write order and assembly (pure, no I/O)."""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from shardwise.index import IndexFormat

__all__ = ["WRITE_ORDERS", "assemble_shard", "write_order"]

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
    table = fmt.empty_table()
    offset = fmt.nbytes if fmt.location == "start" else 0
    pieces: list[bytes | memoryview] = []
    for inner in order:
        data = chunks.get(inner)
        if data is None:
            continue
        n = len(data)
        table[inner] = (offset, n)
        pieces.append(data)
        offset += n
    index = fmt.encode(table)
    return b"".join([index, *pieces] if fmt.location == "start" else [*pieces, index])
