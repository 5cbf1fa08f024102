"""Inner chunk decoding: bytes -> array, for one inner chunk (or one unsharded chunk),
and for whole ``sharding_indexed`` shards, the array's own and nested ones.

A fast path on numcodecs and numpy covers the codecs everyone uses (``bytes`` in either
byte order, ``transpose``, ``zstd``, ``gzip``, numcodecs' ``zlib``, ``blosc``, ``lz4``,
``crc32c``, nested ``sharding_indexed``). Any other codec registered with zarr-python is
decoded through zarr-python's own codec pipeline, so nothing zarr-python can read is
refused here.

What a chunk's bytes claim never sizes memory: the fast path decompresses every chunk
into at most the size its shape and data type give through the chain (the bounded
decompressors of ``_decompress``), and refuses a frame that claims or makes more (a
decompression bomb) as a ``CorruptShardError`` naming the array, key and inner chunk;
:meth:`ShardDecoder.decode_index` refuses index entries longer than the chunk's codecs
make one, or reaching past any store object. :class:`ChunkDecoder` and
:class:`ShardDecoder` share this module because each builds the other: a chunk whose
``bytes`` codec is a sharding codec is a nested shard.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

import shardwise._compat as _compat
from shardwise._buffers import scratch
from shardwise.codecs._chain import FAST_KINDS, Bytes, ChunkCodec, Context, codec_name
from shardwise.codecs._decompress import (
    Decompressor,
    Zstd,
    bytes_steps,
    compressed_bound,
    decoded_size,
    decompressor,
)
from shardwise.codecs._index import index_format_from_codecs
from shardwise.errors import (
    CorruptShardError,
    ShardwiseError,
    TruncatedShardError,
    UnsupportedCodecError,
)
from shardwise.format.index import EMPTY

__all__ = ["ChunkDecoder", "ShardDecoder"]


class ChunkDecoder(ChunkCodec):
    """Decodes the bytes of one chunk of a fixed shape through a zarr v3 codec chain.

    Memory is sized by the chunk, never by what its bytes claim: every decompression
    shardwise does itself (zstd, gzip, zlib, lz4, blosc) writes into a buffer of the
    size the chunk's shape and data type give through the chain (exactly, next to
    ``bytes``; a bound on what a compressor makes of the next stage's bytes, between two
    compressors), and a frame that claims or produces more is a
    :class:`~shardwise.errors.CorruptShardError`. Chains the fast path does not cover
    (:attr:`fast` False) are decoded by zarr-python's own pipeline, after shardwise has
    decoded, with the same bound, the compressors that end them where the size of what
    they compress is known (Zarr v2 filters before zstd or blosc, say); the result is
    checked for its shape, and the memory of the codecs zarr-python decodes is
    zarr-python's own. :attr:`max_encoded` is the most bytes an encoded chunk may take
    (None where not known): :class:`ShardDecoder` refuses index entries claiming more.
    """

    def _prepare(self) -> None:
        # (steps before, decompressor, the bytes codec's view) where the chain ends in
        # one compressor next to `bytes` in native order: then a chunk can be
        # decompressed straight into memory the caller gives (decode_into)
        self._direct: tuple[list[Callable[[Any, Context], Any]], Decompressor, _ToArray] | None
        self._direct = None
        # the most bytes one encoded chunk can take (None: not known)
        self.max_encoded: int | None = None
        self._steps: list[Callable[[Any, Context], Any]] | None = self._fast_steps()
        # chains zarr-python decodes: the codecs it decodes, after shardwise's bounded
        # decoding of the compressors and checksums that end the chain (``_tail``)
        self._head: tuple[Any, ...] = self.codecs
        self._tail: list[Callable[[Any, Context], Any]] = []
        if self._steps is None:
            self._plan_tail()

    # -- building ------------------------------------------------------------------------
    def _fast_steps(self) -> list[Callable[[Any, Context], Any]] | None:
        """Decode steps in decode order, or None when zarr-python must decode."""
        from zarr.codecs import BytesCodec, ShardingCodec, TransposeCodec

        if self.dtype.kind not in FAST_KINDS or self.dtype.hasobject:
            return None
        array_array: list[TransposeCodec] = []
        array_bytes: Any = None
        bytes_bytes: list[Any] = []
        for codec in self.codecs:
            if array_bytes is None and isinstance(codec, TransposeCodec):
                array_array.append(codec)
            elif array_bytes is None and isinstance(codec, BytesCodec | ShardingCodec):
                array_bytes = codec
            elif array_bytes is not None and decompressor(codec, check=True):
                bytes_bytes.append(codec)
            else:
                return None
        if array_bytes is None:
            return None

        encoded_shape = self.shape
        for t in array_array:
            encoded_shape = tuple(encoded_shape[i] for i in t.order)
        steps: list[Callable[[Any, Context], Any]] | None
        if isinstance(array_bytes, BytesCodec):
            endian = _compat.literal(array_bytes.endian)
            stored = self.dtype
            if self.dtype.itemsize > 1 and endian is not None:
                stored = self.dtype.newbyteorder("<" if endian == "little" else ">")
            to_array = _ToArray(stored, self.dtype, encoded_shape)
            dec = decompressor(bytes_bytes[0]) if bytes_bytes else None
            if dec is not None:
                # the decompressor next to `bytes` decompresses straight into an array
                steps, size = bytes_steps(
                    bytes_bytes[1:], compressed_bound(to_array.expected), exact=False
                )
                if steps is None:  # pragma: no cover - every stage here has a bound
                    return None
                if not array_array and not to_array.swap:
                    self._direct = (list(steps), dec, to_array)
                steps.append(_decompress_to_array_step(dec, to_array))
            else:
                steps, size = bytes_steps(bytes_bytes, to_array.expected, exact=True)
                if steps is None:  # pragma: no cover - every stage here has a bound
                    return None
                steps.append(to_array)
        else:
            nested = ShardDecoder(
                array_bytes, encoded_shape, self.zdtype, self.fill_value, array=self.array
            )
            steps, size = bytes_steps(bytes_bytes, nested.max_nbytes, exact=False)
            if steps is None:
                return None  # a compressor over a nested shard of no known bound
            steps.append(lambda data, ctx: nested.decode(data, key=ctx.key, chunk=ctx.chunk))
        for t in reversed(array_array):
            steps.append(_transpose_step(tuple(int(i) for i in np.argsort(t.order))))
        self.max_encoded = size
        return steps

    def _plan_tail(self) -> None:
        """For a chain zarr-python decodes: the compressors and checksums shardwise
        decodes that end it (zstd, gzip, zlib, lz4, blosc, crc32c) are decoded here,
        with a bound, where the size of what they encode is known (the array codecs'
        encoded shape and data type through ``bytes``, other bytes codecs held to a
        compressor's bound); zarr-python decodes the rest."""
        from zarr.abc.codec import ArrayArrayCodec, BytesBytesCodec
        from zarr.codecs import BytesCodec

        codecs = list(self.codecs)
        cut = len(codecs)
        while cut and decompressor(codecs[cut - 1], check=True):
            cut -= 1
        if cut == len(codecs) or not cut:
            return
        head = codecs[:cut]
        size: int | None = None
        exact = True  # what ``bytes`` makes of the array: exactly ``size``
        try:
            _, spec, _ = self._zarr_pipeline()
            for codec in head:
                if isinstance(codec, ArrayArrayCodec):
                    spec = codec.resolve_metadata(spec)
                elif isinstance(codec, BytesCodec):
                    dtype = spec.dtype.to_native_dtype()
                    if dtype.hasobject or not dtype.itemsize:
                        return
                    size = math.prod(spec.shape) * dtype.itemsize
                elif isinstance(codec, BytesBytesCodec) and size is not None:
                    size, exact = compressed_bound(size), False
                else:
                    return  # another array-to-bytes codec: no size known
        except Exception:
            return  # zarr-python's own decoding reports what is wrong
        steps, max_encoded = bytes_steps(codecs[cut:], size, exact=exact)
        if steps is not None:
            self._head, self._tail, self.max_encoded = tuple(head), steps, max_encoded

    @property
    def fast(self) -> bool:
        return self._steps is not None

    @property
    def can_decode_into(self) -> bool:
        """Whether :meth:`decode_into` can decode chunks of this chain in place."""
        return self._direct is not None

    # -- decoding ------------------------------------------------------------------------
    def decode(
        self,
        data: Bytes,
        *,
        key: str | None = None,
        chunk: tuple[int, ...] | None = None,
        scratch: bool = False,
    ) -> npt.NDArray[Any]:
        """Decode one chunk; errors name the array, ``key`` and ``chunk``.

        With ``scratch=True`` the result may be a view of a per-thread buffer that the
        next ``scratch=True`` decode in the same thread overwrites: copy it out first.
        That saves allocating (and, in dask workers, page-faulting) a buffer per chunk.
        """
        ctx = Context(self.array, key, chunk, scratch)
        try:
            if self._steps is None:
                return self._zarr_decode(data, ctx)
            value: Any = data
            for step in self._steps:
                value = step(value, ctx)
            return value
        except ShardwiseError:
            raise
        except Exception as e:
            raise self._undecodable(e, key, chunk) from e

    def decode_into(
        self,
        data: Bytes,
        dest: npt.NDArray[Any],
        *,
        key: str | None = None,
        chunk: tuple[int, ...] | None = None,
    ) -> bool:
        """Decode one chunk straight into ``dest``, a C-contiguous array of the chunk's
        shape and dtype (a region of a read's output that the chunk fills whole), with
        no copy: where the chain is one compressor next to ``bytes`` in native byte
        order (crc32c checks allowed), without transpose. Returns False, with ``dest``
        untouched, where it cannot (use :meth:`decode` then): another chain, shape or
        layout, or a zstd frame declaring less than the chunk's size (several frames,
        or a wrong size that :meth:`decode` reports). A chunk that turns out corrupt
        while it is decompressed raises, with ``dest`` partly written."""
        direct = self._direct
        if (
            direct is None
            or not isinstance(dest, np.ndarray)  # out[()] of a 0-d output is a scalar copy
            or dest.shape != self.shape
            or not dest.flags.c_contiguous
        ):
            return False
        before, dec, to_array = direct
        ctx = Context(self.array, key, chunk, True)
        try:
            value: Any = data
            for step in before:
                value = step(value, ctx)
            buf = dest.reshape(-1).view(np.uint8)
            if isinstance(dec, Zstd):
                declared = decoded_size("zstd", value)
                if declared is not None and declared < to_array.expected:
                    return False
                n = dec.into_declared(value, buf, ctx, True, declared)
            else:
                n = dec.into(value, buf, ctx, True)
            if n != to_array.expected:
                to_array(buf[:n], ctx)  # raises: the wrong size
            return True
        except ShardwiseError:
            raise
        except Exception as e:
            raise self._undecodable(e, key, chunk) from e

    def _undecodable(
        self, e: Exception, key: str | None, chunk: tuple[int, ...] | None
    ) -> CorruptShardError:
        return CorruptShardError(
            "inner chunk does not decode",
            expected=f"a chunk of shape {self.shape} and dtype {self.dtype} through "
            f"{[codec_name(c) for c in self.codecs]}",
            found=f"{type(e).__name__}: {e}",
            array=self.array,
            key=key,
            chunk=chunk,
            advice="The chunk's bytes are corrupt or were written with other codecs; "
            "rewrite the shard from its source.",
        )

    def _zarr_decode(self, data: Bytes, ctx: Context) -> npt.NDArray[Any]:
        """Decode through zarr-python's pipeline (chains the fast path does not cover),
        after the bounded decoding of the chain's end (:meth:`_plan_tail`). The result's
        shape and data type are checked; the memory the codecs zarr-python decodes take
        while decoding is zarr-python's and numcodecs' own."""

        value: Any = data
        for step in self._tail:
            value = step(value, ctx)
        pipeline, spec, prototype = self._zarr_pipeline(self._head)
        buf = prototype.buffer.from_bytes(bytes(memoryview(value).cast("B")))
        (out,) = _compat.sync(pipeline.decode([(buf, spec)]))
        if out is None:
            return self.fill_array()
        arr = np.asarray(out.as_numpy_array())
        if arr.shape != self.shape or arr.dtype != self.dtype:
            raise ctx.error(
                CorruptShardError,
                "decoded inner chunk has the wrong size",
                expected=f"shape {self.shape} and dtype {self.dtype}",
                found=f"shape {arr.shape} and dtype {arr.dtype}",
                advice="The chunk's bytes are corrupt or were written with other codecs; "
                "rewrite the shard from its source.",
            )
        return arr

    def fill_array(self) -> npt.NDArray[Any]:
        return np.full(self.shape, self.fill_value, dtype=self.dtype)


class ShardDecoder:
    """Reads ``sharding_indexed`` shards: the index format for a shard shape and the
    decoder of its inner chunks. Used for the array's own shards and for nested ones."""

    def __init__(
        self,
        codec: Any,
        shard_shape: tuple[int, ...],
        zdtype: Any,
        fill_value: Any,
        *,
        array: str | None = None,
    ) -> None:
        inner = tuple(codec.chunk_shape)
        if len(inner) != len(shard_shape) or any(
            s % c for s, c in zip(shard_shape, inner, strict=True)
        ):
            raise UnsupportedCodecError(
                "inner chunk shape does not divide the shard shape",
                expected=f"a divisor of {shard_shape}",
                found=str(inner),
                array=array,
            )
        self.codec = codec
        self.shard_shape = tuple(shard_shape)
        self.inner_shape = inner
        self.chunks_per_shard = tuple(s // c for s, c in zip(shard_shape, inner, strict=True))
        self.index = index_format_from_codecs(
            codec.index_codecs,
            self.chunks_per_shard,
            _compat.literal(codec.index_location),
            array=array,
        )
        self.chunk = ChunkDecoder(codec.codecs, inner, zdtype, fill_value, array=array)
        self.fill_value = fill_value
        self.array = array

    @property
    def max_nbytes(self) -> int | None:
        """The most bytes a shard of this shape can take, as a writer lays it out (its
        index and every inner chunk at the most its codecs make of it, with room to
        spare): the bound on a nested shard. None where an inner chunk's bound is not
        known (codecs zarr-python decodes)."""
        per_chunk = self.chunk.max_encoded
        if per_chunk is None:
            return None
        return compressed_bound(self.index.nbytes + self.index.nchunks * per_chunk)

    def decode_index(
        self, raw: Bytes, *, shard_nbytes: int | None, key: str | None
    ) -> npt.NDArray[np.uint64]:
        """Decode and check a shard's index: every entry inside the shard's data
        (``shard_nbytes`` when known, else inside the largest object a store can hold,
        leaving room for an index at the end) and no larger than its codecs make an
        inner chunk. So a table this returns turns into byte ranges that neither
        overflow nor ask for more than one chunk's worth of bytes each."""
        return self.index.checked(
            raw, size=shard_nbytes, array=self.array, key=key, max_nbytes=self.chunk.max_encoded
        )

    def parse(self, shard: Bytes, *, key: str | None) -> tuple[memoryview, npt.NDArray[np.uint64]]:
        """A whole shard held in memory: its bytes and its checked index table (the
        entries checked against the shard's known size)."""
        view = memoryview(shard).cast("B")
        raw = self.index.split(view) if len(view) >= self.index.nbytes else view
        return view, self.decode_index(raw, shard_nbytes=len(view), key=key)

    @staticmethod
    def entry(view: memoryview, table: npt.NDArray[np.uint64], inner: Any) -> memoryview | None:
        """The bytes of one inner chunk of a parsed shard, or None when it is empty."""
        offset, nbytes = table[inner]
        if offset == EMPTY:
            return None
        return view[int(offset) : int(offset) + int(nbytes)]

    def decode(
        self, data: Bytes, *, key: str | None = None, chunk: tuple[int, ...] | None = None
    ) -> npt.NDArray[Any]:
        """Decode a whole shard held in memory into an array of the shard's shape."""
        view = memoryview(data).cast("B")
        if len(view) < self.index.nbytes:
            raise TruncatedShardError(
                "shard is shorter than its index"
                if chunk is None
                else "nested shard (this inner chunk is itself a shard) is shorter than its index",
                expected=f"at least {self.index.nbytes} bytes",
                found=f"{len(view)} bytes",
                array=self.array,
                key=key,
                chunk=chunk,
            )
        try:
            view, table = self.parse(view, key=key)
        except CorruptShardError as err:
            if chunk is None:
                raise
            # a nested shard: name the outer inner chunk, and the nested one in the text
            at = "" if err.chunk is None else f" at its chunk {err.chunk}"
            raise type(err)(
                f"nested shard (this inner chunk is itself a shard): {err.problem}{at}",
                array=err.array,
                key=err.key,
                chunk=chunk,
                expected=err.expected,
                found=err.found,
                advice=err.advice,
            ) from err
        out = np.empty(self.shard_shape, dtype=self.chunk.dtype)
        for idx in np.ndindex(*self.chunks_per_shard):
            sl = tuple(
                slice(i * c, (i + 1) * c) for i, c in zip(idx, self.inner_shape, strict=True)
            )
            data_ = self.entry(view, table, idx)
            if data_ is None:
                out[sl] = self.fill_value
            else:
                out[sl] = self.chunk.decode(data_, key=key, chunk=chunk or idx, scratch=True)
        return out


# -- decode steps ----------------------------------------------------------------------
class _ToArray:
    """The ``bytes`` codec's decode: exactly ``expected`` bytes viewed as the chunk."""

    __slots__ = ("expected", "native", "shape", "stored", "swap")

    def __init__(self, stored: np.dtype[Any], native: np.dtype[Any], shape: tuple[int, ...]):
        self.stored, self.native, self.shape = stored, native, shape
        self.expected = math.prod(shape) * stored.itemsize
        self.swap = stored != native

    def __call__(self, data: Bytes, ctx: Context) -> npt.NDArray[Any]:
        view = memoryview(data).cast("B")
        if len(view) != self.expected:
            raise ctx.error(
                CorruptShardError,
                "decoded inner chunk has the wrong size",
                expected=f"{self.expected} bytes (shape {self.shape}, dtype {self.native})",
                found=f"{len(view)} bytes",
            )
        arr = np.frombuffer(view, dtype=self.stored).reshape(self.shape)
        return arr.astype(self.native) if self.swap else arr


def _decompress_to_array_step(
    dec: Decompressor, to_array: _ToArray
) -> Callable[[Bytes, Context], npt.NDArray[Any]]:
    """Decompress into a buffer of exactly the chunk's size (a per-thread scratch buffer
    when the caller allows), then view it as the array."""
    expected = to_array.expected

    def step(data: Bytes, ctx: Context) -> npt.NDArray[Any]:
        out = scratch(expected) if ctx.scratch else np.empty(expected, dtype=np.uint8)
        n = dec.into(data, out, ctx, True)
        return to_array(out[:n], ctx)

    step.__name__ = f"decode_{dec.name}_to_array"
    return step


def _transpose_step(inverse: tuple[int, ...]) -> Callable[[Any, Context], Any]:
    def step(arr: npt.NDArray[Any], ctx: Context) -> npt.NDArray[Any]:
        return arr.transpose(inverse)

    return step
