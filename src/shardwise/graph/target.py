"""Storing shards: the one piece of code that puts a shard, and what a write's tasks know.

:class:`ShardSink` is where one array's shards go. Every writer of shardwise stores its
shards through it: the write graph's tasks (:mod:`shardwise.graph.tasks`) and the copy
task of ``reshard`` and ``migrate`` (:mod:`shardwise.graph.copy`: a target shard
repacked or re-encoded). Storing a shard is always the same steps:

- the key, checked to lie under the array (:func:`shardwise.format.names.key_under`), so
  no key outside the destination is written whatever names reached it;
- the inner chunks laid out in the write order (:func:`shardwise.format.shard.write_order`)
  with the index the array's sharding codec asks for, built in place
  (:class:`shardwise.format.shard.ShardBuilder`);
- one put of the whole object, or, when nothing is left of the shard, a delete of the
  object an earlier write left (none when the array was just created);
- a store's I/O error named: what failed, the array, the key, and what to do.

:class:`WriteTarget` is a sink that also encodes: what the tasks of a write need to know
about the array (where the data goes, the options, encoders built once per process).

Apart from the tasks because ``reshard`` and ``migrate`` store shards without the write
graph's tasks; apart from the format layer because it does I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

import shardwise._compat as _compat
from shardwise.codecs import ChunkDecoder, ChunkEncoder, ShardDecoder, is_fill
from shardwise.errors import naming_io_errors
from shardwise.format.grid import check_chunks_per_shard
from shardwise.format.metadata import ArrayInfo
from shardwise.format.names import key_under
from shardwise.format.shard import ShardBuilder, build_shard, write_order
from shardwise.graph.write_plan import Box, Shard
from shardwise.io.capabilities import conditional, copies_out, sync_io
from shardwise.io.conditional import Conditional, Version
from shardwise.io.reader import ArrayReader

__all__ = ["WRITE_ADVICE", "ShardSink", "WriteTarget"]

WRITE_ADVICE = (
    "Check the store (space, permissions, connection), then run the same write again: "
    "shards are single puts, and the ones written are whole."
)


class ShardSink:
    """Where one array's shards go (see the module's description): ``store`` and
    ``info``, the write ``order`` of inner chunks (``"morton"`` or ``"C"``), and
    ``fresh=True`` when the array was just created (no shard exists yet, so an empty
    one needs no delete). ``what`` and ``advice`` name a failed put (``"writing a
    shard"``, and what to do next).

    Picklable, with the shard formats and write orders worked out lazily in each
    process. An unsharded array is written the same way, each chunk taking the place of
    a shard with a single inner chunk and no index."""

    def __init__(
        self,
        store: Any,
        info: ArrayInfo,
        *,
        order: str = "morton",
        fresh: bool = False,
        what: str = "writing a shard",
        advice: str = WRITE_ADVICE,
        guarded: bool = False,
    ) -> None:
        self.store = store
        self.info = info
        self.order = order
        self.fresh = fresh  # the array was just created: no shard exists yet
        self.what = what
        self.advice = advice
        # other jobs may write the array at the same time: every put and delete goes
        # through the store's conditional puts (shardwise.io.conditional), and shards
        # merged with what is stored are put only if unchanged (graph.tasks.write_shard)
        self.guarded = guarded
        self._cache: dict[Any, Any] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "_cache"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._cache = {}

    def reader(self) -> ArrayReader:
        """A reader of the array's stored shards (made once per process): their
        decoders, and the index of a shard already there."""
        if "reader" not in self._cache:
            self._cache["reader"] = ArrayReader(self.store, self.info)
        reader: ArrayReader = self._cache["reader"]
        return reader

    def decoder(self, shard: Shard) -> ShardDecoder | ChunkDecoder:
        """The shard's decoder (its geometry and index format), or an unsharded chunk's."""
        return self.reader().decoder(shard)

    def key(self, shard: Shard) -> str:
        """The shard's store key, checked to lie under the array."""
        return key_under(self.info.path, self.info.key(shard))

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

    def builder(self, shard: Shard, capacity: int | None = None) -> ShardBuilder:
        """A builder for one shard object with room for ``capacity`` bytes of inner
        chunks (it grows past that if need be)."""
        decoder = self.decoder(shard)
        fmt = decoder.index if isinstance(decoder, ShardDecoder) else None
        return ShardBuilder(fmt, capacity or 0)

    def put_chunks(
        self, shard: Shard, chunks: Mapping[tuple[int, ...], Any], *, existed: bool | None = None
    ) -> int:
        """Store a shard of these encoded inner chunks (``inner chunk -> bytes``), laid
        out in the write order; with no chunks, nothing is stored (and a stale object is
        deleted, as :meth:`put` says). Returns the bytes written."""
        decoder = self.decoder(shard)
        fmt = decoder.index if isinstance(decoder, ShardDecoder) else None
        return self.put(
            shard,
            build_shard(chunks, fmt, self.write_order(shard), lend=self.copies_out()),
            existed=existed,
        )

    def put(self, shard: Shard, buffer: Any, *, existed: bool | None = None) -> int:
        """Store one shard with a single put (``buffer``, a zarr-python Buffer), or
        delete it when it has no data left (``buffer`` None; ``existed=False`` says the
        shard is known not to exist, ``existed=None`` that it may). Stores with
        zarr-python's synchronous methods (local files, memory) are called on this
        thread, without a hop to zarr's event loop. Returns the bytes written."""
        key = self.key(shard)  # never outside the array
        with naming_io_errors(self.what, array=self.info.name, key=key, advice=self.advice):
            self._put(key, buffer, existed=existed)
        return 0 if buffer is None else len(buffer)

    def sync_io(self) -> bool:
        """Whether to call the store's synchronous methods in the calling thread
        (:func:`shardwise.io.capabilities.sync_io`; asked once per process)."""
        if "sync_io" not in self._cache:
            self._cache["sync_io"] = sync_io(self.store)
        answer: bool = self._cache["sync_io"]
        return answer

    def copies_out(self) -> bool:
        """Whether the store is done with a put's bytes once it returns, so a shard may
        be put from a reused buffer (:func:`shardwise.io.capabilities.copies_out`; asked
        once per process)."""
        if "copies_out" not in self._cache:
            self._cache["copies_out"] = copies_out(self.store)
        answer: bool = self._cache["copies_out"]
        return answer

    def guard(self) -> Conditional | None:
        """The store's conditional reads and puts (made once per process) when the write
        guards against other jobs; None when it does not, or the store has none."""
        if not self.guarded:
            return None
        if "guard" not in self._cache:
            self._cache["guard"] = conditional(self.store)
        guard: Conditional | None = self._cache["guard"]
        return guard

    def fetch_versioned(self, shard: Shard) -> tuple[Any, Version]:
        """An existing shard object's bytes (None when there is none) with the version
        they are, through the write's guard (:meth:`guard`, which must be there)."""
        guard = self.guard()
        assert guard is not None
        key = self.key(shard)
        with naming_io_errors(self.what, array=self.info.name, key=key, advice=self.advice):
            return guard.get(key)

    def put_if(self, shard: Shard, buffer: Any, expected: Version) -> bool:
        """Store one shard only if the stored object is still ``expected`` (``ABSENT``:
        there is none), through the write's guard; False, having stored nothing, when
        another writer changed it."""
        guard = self.guard()
        assert guard is not None
        key = self.key(shard)
        with naming_io_errors(self.what, array=self.info.name, key=key, advice=self.advice):
            return guard.put(key, _bytes_of(buffer), expected)

    def _put(self, key: str, buffer: Any, *, existed: bool | None) -> None:
        store = self.store
        guard = self.guard()
        if guard is not None and guard.plain_puts_here:  # ordered with conditional puts
            if buffer is None:
                if not self.fresh:
                    guard.delete(key)
            else:
                guard.put(key, _bytes_of(buffer), None)
            return
        direct = self.sync_io()
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
        if self.sync_io():
            return self.store.get_sync(key, prototype=default_buffer_prototype())
        return _compat.sync(self.store.get(key, default_buffer_prototype()))


def _bytes_of(buffer: Any) -> memoryview:
    """A zarr-python Buffer's bytes, without a copy."""
    return memoryview(buffer.as_numpy_array()).cast("B")


class WriteTarget(ShardSink):
    """What the tasks need to know about a write: a :class:`ShardSink` for the array,
    where the data goes (``offset``, ``region``) and the options, with encoders built
    lazily in each process; one key of the graph holds it."""

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
        what: str = "writing a shard",
        advice: str = WRITE_ADVICE,
        guarded: bool = False,
    ) -> None:
        super().__init__(
            store,
            info,
            order=order,
            fresh=fresh,
            what=what,
            advice=advice,
            # an Icechunk fork's writes are its own until the commit, which checks them
            guarded=guarded and not sessions,
        )
        # an Icechunk fork's store: every writing task hands back the fork session that
        # holds its changes, for the done tree to merge
        self.sessions = sessions
        self.offset = offset
        self.region = region
        self.write_empty_chunks = write_empty_chunks

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

    def inner_boxes(self, shard: Shard, *, clipped: bool = True) -> dict[tuple[int, ...], Box]:
        """Each inner chunk of a shard and the part of the array it holds (clipped at
        the array's end; with ``clipped=False``, the whole of it, as in a write that
        guards against other jobs, which may have grown the array meanwhile)."""
        layout = self.info.layout
        per_shard = layout.chunks_per_shard(shard)
        check_chunks_per_shard(per_shard, array=self.info.name, key=self.info.key(shard))
        out = {}
        for inner in np.ndindex(*per_shard):
            box = []
            for d, s, j in zip(layout.dims, shard, inner, strict=True):
                lo = d.shard_start(s) + j * d.inner_size(s)
                hi = lo + d.inner_size(s)
                box.append((lo, min(hi, d.extent) if clipped else hi))
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

    def builder(self, shard: Shard, capacity: int | None = None) -> ShardBuilder:
        """A builder for one shard object, with room for all its inner chunks encoded
        unless told otherwise (it grows if an encoder knows no bound and outruns that)."""
        if capacity is None:
            encoder = self.encoder(self.info.layout.inner_shape(shard))
            per = encoder.bound or math.prod(encoder.shape) * encoder.dtype.itemsize
            capacity = per * len(self.write_order(shard))
        return super().builder(shard, capacity)

    def add_chunk(
        self, builder: ShardBuilder, shard: Shard, inner: tuple[int, ...], chunk: npt.NDArray[Any]
    ) -> None:
        """Encode a full-size inner chunk into the shard, if it :meth:`keeps` it."""
        if self.keeps(chunk):
            builder.encode(inner, chunk, self.encoder(self.info.layout.inner_shape(shard)))
