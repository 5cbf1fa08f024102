"""Building shard objects: inner chunk write order and assembly (pure, no I/O)."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from shardwise._buffers import SCRATCH_LIMIT
from shardwise.format.grid import check_chunks_per_shard
from shardwise.format.index import IndexFormat

__all__ = [
    "SCRATCH_LIMIT",
    "WRITE_ORDERS",
    "ShardBuilder",
    "assemble_shard",
    "build_shard",
    "write_order",
]

WRITE_ORDERS = ("morton", "C")


def write_order(chunks_per_shard: tuple[int, ...], order: str = "morton") -> list[tuple[int, ...]]:
    """The order inner chunks are laid out in a shard: ``"C"`` (row-major) or
    ``"morton"`` (Z-order: bits of the coordinates interleaved, dimension 0 lowest, so
    chunks near each other in the array lie near each other in the shard).
    :class:`~shardwise.errors.TooLargeError` past
    :data:`~shardwise.format.grid.MAX_CHUNKS_PER_SHARD` inner chunks."""
    if order not in WRITE_ORDERS:
        raise ValueError(f"write_order must be one of {WRITE_ORDERS}, got {order!r}")
    ndim = len(chunks_per_shard)
    n = check_chunks_per_shard(chunks_per_shard)  # before np.indices allocates 8 n ndim
    coords = np.indices(chunks_per_shard).reshape(ndim, n)
    if order == "morton" and n > 1:
        # bit b of dimension d goes to the next free bit of the code, taking bits only
        # where some coordinate has them: the order of interleaving every dimension's
        # every bit, in at most log2(n) + ndim bits (below 64 for any shard allowed)
        bits = max(int(s - 1).bit_length() for s in chunks_per_shard)
        code = np.zeros(n, dtype=np.uint64)
        at = 0
        for b in range(bits):
            for d in range(ndim):
                if (chunks_per_shard[d] - 1) >> b:
                    bit = ((coords[d] >> b) & 1).astype(np.uint64)
                    code |= bit << np.uint64(at)
                    at += 1
        coords = coords[:, np.argsort(code, kind="stable")]
    return [tuple(int(c) for c in coords[:, i]) for i in range(n)]


def assemble_shard(
    chunks: Mapping[tuple[int, ...], bytes | memoryview],
    fmt: IndexFormat,
    order: list[tuple[int, ...]],
) -> bytes | None:
    """Lay out the encoded inner chunks in ``order`` with the index where ``fmt`` says;
    chunks absent from ``chunks`` are empty (index entry ``2**64-1``). Returns None for a
    shard with no chunks (which is not stored). (The writers build shards in place with
    :class:`ShardBuilder`; this is the plain form, for tests and small tools.)"""
    if not chunks:
        return None
    table = fmt.empty_table()
    offset = fmt.nbytes if fmt.location == "start" else 0
    pieces: list[bytes | memoryview] = []
    for inner in order:
        data = chunks.get(inner)
        if data is None:
            continue
        table[inner] = (offset, len(data))
        pieces.append(data)
        offset += len(data)
    index = fmt.encode(table)
    return b"".join([index, *pieces] if fmt.location == "start" else [*pieces, index])


_SCRATCH = threading.local()
# shards up to SCRATCH_LIMIT are built in the thread's reused buffer; the buffer stays
# allocated (one per thread that built a shard), so larger shards get memory of their own


class ShardBuilder:
    """One shard object built in place: its inner chunks encoded (or copied, when they
    are encoded already) one after another into one buffer, in the order they are added,
    and the index where the format puts it.

    The buffer is the thread's own, reused from shard to shard (up to
    :data:`SCRATCH_LIMIT`): no fresh allocation per shard or per chunk, and so none of
    the page faults of touching new memory, which in dask workers (whose allocator
    returns freed memory to the system at once) are paid on every allocation. Encoders
    that know a bound on their output write straight into it
    (:meth:`shardwise.codecs.ChunkEncoder.encode_into`).

    ``fmt=None`` builds an unsharded chunk: one chunk, no index.
    """

    def __init__(self, fmt: IndexFormat | None, capacity: int) -> None:
        self.fmt = fmt
        self._table = fmt.empty_table() if fmt is not None else None
        self._head = fmt.nbytes if fmt is not None and fmt.location == "start" else 0
        self._tail = fmt.nbytes if fmt is not None and fmt.location == "end" else 0
        self.offset = self._head
        self.count = 0
        self._buf = self._take(self._head + capacity + self._tail)

    def _take(self, nbytes: int) -> npt.NDArray[np.uint8]:
        """The thread's buffer when free and allowed, else memory of this shard's own."""
        owner = getattr(_SCRATCH, "owner", None)
        holder = owner() if owner is not None else None  # a builder that failed is gone
        self._shared = nbytes <= SCRATCH_LIMIT and not (holder is not None and holder._shared)
        if not self._shared:
            return np.empty(nbytes, dtype=np.uint8)
        buf: npt.NDArray[np.uint8] | None = getattr(_SCRATCH, "buf", None)
        if buf is None or buf.size < nbytes:
            _SCRATCH.buf = None  # let the old one go before the new one is made
            buf = _SCRATCH.buf = np.empty(max(nbytes, 1 << 20), dtype=np.uint8)
        _SCRATCH.owner = weakref.ref(self)
        return buf

    def _room(self, nbytes: int) -> npt.NDArray[np.uint8]:
        """Writable space for ``nbytes`` more bytes (growing the buffer if need be)."""
        need = self.offset + nbytes + self._tail
        if need > self._buf.size:
            grown = np.empty(max(need, 2 * self._buf.size), dtype=np.uint8)
            grown[: self.offset] = self._buf[: self.offset]
            self._shared = False  # the thread's buffer is free again
            self._buf = grown
        return self._buf[self.offset : self.offset + nbytes]

    def _record(self, inner: tuple[int, ...], nbytes: int) -> None:
        if self._table is not None:
            self._table[inner] = (self.offset, nbytes)
        elif self.count:
            raise ValueError("an unsharded chunk holds one chunk")
        self.offset += nbytes
        self.count += 1

    def add(self, inner: tuple[int, ...], data: Any) -> None:
        """Copy one inner chunk's encoded bytes in."""
        view = np.frombuffer(data, dtype=np.uint8)
        self._room(view.size)[:] = view
        self._record(inner, view.size)

    def encode(self, inner: tuple[int, ...], arr: npt.NDArray[Any], encoder: Any) -> None:
        """Encode one inner chunk straight into the shard (through bytes of its own when
        the encoder knows no bound on its output)."""
        bound = encoder.bound
        if bound is None:
            self.add(inner, encoder.encode(arr))
            return
        self._record(inner, encoder.encode_into(arr, self._room(bound)))

    def finish(self, *, lend: bool, keep_empty: bool = False) -> Any:
        """The shard as a zarr-python ``Buffer`` for ``store.set`` (None when no chunk was
        added: an empty shard is not stored, unless ``keep_empty``, which gives a shard
        of its index alone, every entry empty). ``lend``: the store is done with the
        bytes when ``set`` returns (:func:`shardwise.io.capabilities.copies_out`), so the
        buffer is the builder's memory, valid until the thread builds its next shard;
        otherwise the bytes are the buffer's own."""
        from zarr.buffer import default_buffer_prototype

        try:
            if not self.count and not (keep_empty and self.fmt is not None):
                return None
            if self.fmt is not None and self._table is not None:
                index = np.frombuffer(self.fmt.encode(self._table), dtype=np.uint8)
                at = 0 if self.fmt.location == "start" else self.offset
                self._buf[at : at + index.size] = index
            blob = self._buf[: self.offset + self._tail]
            proto = default_buffer_prototype()
            if not lend:  # the store may keep it: bytes of its own
                return proto.buffer.from_bytes(blob.tobytes())
            return proto.buffer.from_array_like(blob)
        finally:
            self._shared = False  # the thread's buffer is free again


def build_shard(
    chunks: Mapping[tuple[int, ...], Any],
    fmt: IndexFormat | None,
    order: list[tuple[int, ...]],
    *,
    lend: bool,
) -> Any:
    """The shard of these encoded inner chunks, laid out in ``order``, as a Buffer for
    ``store.set`` (see :meth:`ShardBuilder.finish`); None for a shard with no chunks."""
    builder = ShardBuilder(fmt, sum(len(c) for c in chunks.values()))
    for inner in order:
        data = chunks.get(inner)
        if data is not None:
            builder.add(inner, data)
    return builder.finish(lend=lend)
