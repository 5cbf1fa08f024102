"""Inner chunk decoding: bytes -> array, for one inner chunk (or one unsharded chunk).

A fast path on numcodecs and numpy covers the codecs everyone uses (``bytes`` in either
byte order, ``transpose``, ``zstd``, ``gzip``, ``blosc``, ``crc32c``, nested
``sharding_indexed``). Any other codec registered with zarr-python is decoded through
zarr-python's own codec pipeline, so nothing zarr-python can read is refused here.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from shardwise.errors import (
    ChecksumError,
    CorruptShardError,
    ShardwiseError,
    TruncatedShardError,
    UnsupportedCodecError,
    WriteError,
)
from shardwise.index import EMPTY, IndexFormat, check_entries, crc32c

__all__ = [
    "ChunkDecoder",
    "ChunkEncoder",
    "ShardDecoder",
    "decoded_size",
    "index_format_from_codecs",
    "is_fill",
]

Bytes = bytes | memoryview | npt.NDArray[np.uint8]
# fixed-size numpy kinds the fast path serializes with plain numpy views
_FAST_KINDS = frozenset("biufcmM")


def _codec_name(codec: Any) -> str:
    try:
        return str(codec.to_dict()["name"])
    except Exception:
        return type(codec).__name__


class _Context:
    """Where a decode happens, for error messages."""

    __slots__ = ("array", "chunk", "key", "scratch")

    def __init__(
        self,
        array: str | None,
        key: str | None,
        chunk: tuple[int, ...] | None,
        scratch: bool = False,
    ):
        self.array, self.key, self.chunk, self.scratch = array, key, chunk, scratch


def index_format_from_codecs(
    index_codecs: Sequence[Any],
    chunks_per_shard: tuple[int, ...],
    location: str,
    *,
    array: str | None = None,
) -> IndexFormat:
    """The :class:`IndexFormat` for a sharding codec's ``index_codecs``: ``bytes``
    (either endianness) optionally followed by ``crc32c``."""
    from zarr.codecs import BytesCodec, Crc32cCodec

    codecs = list(index_codecs)
    ok = (
        len(codecs) in (1, 2)
        and isinstance(codecs[0], BytesCodec)
        and (len(codecs) == 1 or isinstance(codecs[1], Crc32cCodec))
    )
    if not ok:
        raise UnsupportedCodecError(
            "unsupported shard index codecs",
            expected="[bytes] or [bytes, crc32c]",
            found=str([_codec_name(c) for c in codecs]),
            array=array,
            advice="Rewrite the array with the default index codecs (bytes + crc32c).",
        )
    return IndexFormat(
        chunks_per_shard=chunks_per_shard,
        location="start" if location == "start" else "end",
        endian="big" if codecs[0].endian == "big" else "little",
        checksum=len(codecs) == 2,
    )


class _ChunkCodec:
    """One chunk shape, data type and fill value, and the zarr v3 codec chain between
    them and bytes."""

    def __init__(
        self,
        codecs: Sequence[Any],
        shape: tuple[int, ...],
        zdtype: Any,
        fill_value: Any,
        *,
        array: str | None = None,
    ) -> None:
        self.codecs = tuple(codecs)
        self.shape = tuple(shape)
        self.zdtype = zdtype
        self.dtype: np.dtype[Any] = zdtype.to_native_dtype()
        self.fill_value = fill_value
        self.array = array
        self._prepare()

    def _prepare(self) -> None:
        """Build the fast path for this chain (subclasses)."""

    def _zarr_pipeline(self) -> tuple[Any, Any, Any]:
        """zarr-python's codec pipeline for the chain, the chunk's ArraySpec and the
        buffer prototype: the fallback for chains the fast paths do not cover."""
        from zarr.core.array_spec import ArrayConfig, ArraySpec
        from zarr.core.buffer import default_buffer_prototype
        from zarr.registry import get_pipeline_class

        prototype = default_buffer_prototype()
        spec = ArraySpec(
            self.shape, self.zdtype, self.fill_value, ArrayConfig.from_dict({}), prototype
        )
        return get_pipeline_class().from_codecs(self.codecs), spec, prototype


class ChunkDecoder(_ChunkCodec):
    """Decodes the bytes of one chunk of a fixed shape through a zarr v3 codec chain."""

    def _prepare(self) -> None:
        # (steps before, decompressor, its name, the bytes codec's view) where the chain
        # ends in one compressor next to `bytes` in native order: then a chunk can be
        # decompressed straight into memory the caller gives (decode_into)
        self._direct: tuple[list[Callable[[Any, _Context], Any]], Any, str, _ToArray] | None
        self._direct = None
        self._steps: list[Callable[[Any, _Context], Any]] | None = self._fast_steps()

    # -- building ------------------------------------------------------------------------
    def _fast_steps(self) -> list[Callable[[Any, _Context], Any]] | None:
        """Decode steps in decode order, or None when zarr-python must decode."""
        import numcodecs
        from zarr.codecs import (
            BloscCodec,
            BytesCodec,
            Crc32cCodec,
            GzipCodec,
            ShardingCodec,
            TransposeCodec,
            ZstdCodec,
        )

        if self.dtype.kind not in _FAST_KINDS or self.dtype.hasobject:
            return None
        array_array: list[TransposeCodec] = []
        array_bytes: Any = None
        bytes_bytes: list[Any] = []
        for codec in self.codecs:
            if array_bytes is None and isinstance(codec, TransposeCodec):
                array_array.append(codec)
            elif array_bytes is None and isinstance(codec, BytesCodec | ShardingCodec):
                array_bytes = codec
            elif array_bytes is not None and isinstance(
                codec, Crc32cCodec | ZstdCodec | GzipCodec | BloscCodec
            ):
                bytes_bytes.append(codec)
            else:
                return None
        if array_bytes is None:
            return None

        def decompressor(codec: Any) -> tuple[Any, str]:
            if isinstance(codec, ZstdCodec):
                return numcodecs.Zstd(), "zstd"
            if isinstance(codec, GzipCodec):
                return numcodecs.GZip(), "gzip"
            return numcodecs.Blosc(), "blosc"

        # the decompressor next to a `bytes` codec decompresses straight into an array
        fuse = (
            isinstance(array_bytes, BytesCodec)
            and bool(bytes_bytes)
            and not isinstance(bytes_bytes[0], Crc32cCodec)
        )
        steps: list[Callable[[Any, _Context], Any]] = []
        for i, codec in reversed(list(enumerate(bytes_bytes))):
            if isinstance(codec, Crc32cCodec):
                steps.append(_verify_crc32c)
            elif not (fuse and i == 0):
                steps.append(_numcodecs_step(*decompressor(codec)))

        encoded_shape = self.shape
        for t in array_array:
            encoded_shape = tuple(encoded_shape[i] for i in t.order)
        if isinstance(array_bytes, BytesCodec):
            endian = array_bytes.endian
            stored = self.dtype
            if self.dtype.itemsize > 1 and endian is not None:
                stored = self.dtype.newbyteorder("<" if endian == "little" else ">")
            to_array = _ToArray(stored, self.dtype, encoded_shape)
            if fuse:
                codec, name = decompressor(bytes_bytes[0])
                if not array_array and not to_array.swap:
                    self._direct = (list(steps), codec, name, to_array)
                steps.append(_decompress_to_array_step(codec, name, to_array))
            else:
                steps.append(to_array)
        else:
            nested = ShardDecoder(
                array_bytes, encoded_shape, self.zdtype, self.fill_value, array=self.array
            )
            steps.append(lambda data, ctx: nested.decode(data, key=ctx.key, chunk=ctx.chunk))
        for t in reversed(array_array):
            steps.append(_transpose_step(tuple(int(i) for i in np.argsort(t.order))))
        return steps

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
        ctx = _Context(self.array, key, chunk, scratch)
        try:
            if self._steps is None:
                return self._zarr_decode(data)
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
        order (crc32c checks allowed), without transpose, and the frame declares the
        chunk's size. Returns False, with ``dest`` untouched, where it cannot (use
        :meth:`decode` then)."""
        direct = self._direct
        if (
            direct is None
            or not isinstance(dest, np.ndarray)  # out[()] of a 0-d output is a scalar copy
            or dest.shape != self.shape
            or not dest.flags.c_contiguous
        ):
            return False
        before, codec, name, to_array = direct
        ctx = _Context(self.array, key, chunk, True)
        try:
            value: Any = data
            for step in before:
                value = step(value, ctx)
            if name == "blosc":
                _check_blosc_header(value, ctx)
            if decoded_size(name, value) != to_array.expected or (
                name == "gzip" and to_array.expected >= 2**32
            ):
                return False
            codec.decode(value, out=dest.reshape(-1).view(np.uint8))
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
            f"{[_codec_name(c) for c in self.codecs]}",
            found=f"{type(e).__name__}: {e}",
            array=self.array,
            key=key,
            chunk=chunk,
            advice="The chunk's bytes are corrupt or were written with other codecs; "
            "rewrite the shard from its source.",
        )

    def _zarr_decode(self, data: Bytes) -> npt.NDArray[Any]:
        from zarr.core.sync import sync

        pipeline, spec, prototype = self._zarr_pipeline()
        buf = prototype.buffer.from_bytes(bytes(memoryview(data).cast("B")))
        (out,) = sync(pipeline.decode([(buf, spec)]))
        if out is None:
            return self.fill_array()
        return np.asarray(out.as_numpy_array())

    def fill_array(self) -> npt.NDArray[Any]:
        return np.full(self.shape, self.fill_value, dtype=self.dtype)


def _verify_crc32c(data: Bytes, ctx: _Context) -> memoryview:
    view = memoryview(data).cast("B")
    if len(view) < 4:
        raise CorruptShardError(
            "inner chunk is too short for its crc32c",
            expected="at least 4 bytes",
            found=f"{len(view)} bytes",
            array=ctx.array,
            key=ctx.key,
            chunk=ctx.chunk,
        )
    body = view[:-4]
    stored = int.from_bytes(view[-4:], "little")
    actual = crc32c(body)
    if stored != actual:
        raise ChecksumError(
            "inner chunk crc32c mismatch",
            expected=f"{stored:#010x}",
            found=f"{actual:#010x}",
            array=ctx.array,
            key=ctx.key,
            chunk=ctx.chunk,
            advice="The chunk's bytes are corrupt; rewrite the shard from its source.",
        )
    return body


def _check_blosc_header(data: Bytes, ctx: _Context) -> None:
    """c-blosc trusts the compressed size in a frame's header and reads past the buffer
    (a segfault) when it lies: refuse such frames first."""
    view = memoryview(data).cast("B")
    cbytes = int.from_bytes(view[12:16], "little") if len(view) >= 16 else None
    if cbytes != len(view):
        raise CorruptShardError(
            "corrupt blosc frame",
            expected=f"a 16-byte header giving the frame's size, {len(view)} bytes",
            found="a shorter frame" if cbytes is None else f"a header saying {cbytes} bytes",
            array=ctx.array,
            key=ctx.key,
            chunk=ctx.chunk,
            advice="The chunk's bytes are corrupt; rewrite the shard from its source.",
        )


def _numcodecs_step(codec: Any, name: str) -> Callable[[Bytes, _Context], Any]:
    decode = codec.decode

    def step(data: Bytes, ctx: _Context) -> Any:
        if name == "blosc":
            _check_blosc_header(data, ctx)
        return decode(data)

    step.__name__ = f"decode_{name}"
    return step


def _transpose_step(inverse: tuple[int, ...]) -> Callable[[Any, _Context], Any]:
    def step(arr: npt.NDArray[Any], ctx: _Context) -> npt.NDArray[Any]:
        return arr.transpose(inverse)

    return step


_SCRATCH = threading.local()
SCRATCH_LIMIT = 256 * 2**20  # larger buffers are allocated for the one use


def _scratch(nbytes: int, slot: str = "decode") -> npt.NDArray[np.uint8]:
    """A per-thread buffer of at least ``nbytes``, reused from call to call (one per
    ``slot``, so decoding and encoding never share one). Reusing it spares a fresh
    allocation, and in dask workers (where glibc maps every large buffer anew) the page
    faults of touching it."""
    buf: npt.NDArray[np.uint8] | None = getattr(_SCRATCH, slot, None)
    if buf is None or buf.size < nbytes:
        buf = np.empty(nbytes, dtype=np.uint8)
        setattr(_SCRATCH, slot, buf)
    return buf[:nbytes]


def decoded_size(name: str, data: Bytes) -> int | None:
    """The decompressed size a zstd frame, gzip member or blosc buffer declares in its
    header or trailer, or None when it does not say."""
    view = memoryview(data).cast("B")
    n = len(view)
    if name == "blosc":
        return int.from_bytes(view[4:8], "little") if n >= 16 else None
    if name == "gzip":
        # ISIZE: the size modulo 2**32 of the (last) member
        return int.from_bytes(view[-4:], "little") if n >= 18 else None
    # zstd frame header: magic, descriptor, [window], [dictionary id], [content size]
    if n < 6 or int.from_bytes(view[:4], "little") != 0xFD2FB528:
        return None
    fhd = view[4]
    single_segment = (fhd >> 5) & 1
    fcs_size = (1 if single_segment else 0, 2, 4, 8)[fhd >> 6]
    if fcs_size == 0:
        return None
    start = 5 + (0 if single_segment else 1) + (0, 1, 2, 4)[fhd & 3]
    if n < start + fcs_size:
        return None
    size = int.from_bytes(view[start : start + fcs_size], "little")
    return size + 256 if fcs_size == 2 else size


def _decompress_to_array_step(
    codec: Any, name: str, to_array: _ToArray
) -> Callable[[Bytes, _Context], npt.NDArray[Any]]:
    """Decompress into a buffer of exactly the chunk's size (a per-thread scratch buffer
    when the caller allows), then view it as the array. Chunks whose header does not
    declare that size take the ordinary path, which reports a wrong size."""
    decode = codec.decode
    expected = to_array.expected

    def step(data: Bytes, ctx: _Context) -> npt.NDArray[Any]:
        if name == "blosc":
            _check_blosc_header(data, ctx)
        if decoded_size(name, data) != expected or (name == "gzip" and expected >= 2**32):
            return to_array(decode(data), ctx)
        out = _scratch(expected) if ctx.scratch else np.empty(expected, dtype=np.uint8)
        decode(data, out=out)
        return to_array(out, ctx)

    step.__name__ = f"decode_{name}_to_array"
    return step


class _ToArray:
    """The ``bytes`` codec's decode: exactly ``expected`` bytes viewed as the chunk."""

    __slots__ = ("expected", "native", "shape", "stored", "swap")

    def __init__(self, stored: np.dtype[Any], native: np.dtype[Any], shape: tuple[int, ...]):
        self.stored, self.native, self.shape = stored, native, shape
        self.expected = math.prod(shape) * stored.itemsize
        self.swap = stored != native

    def __call__(self, data: Bytes, ctx: _Context) -> npt.NDArray[Any]:
        view = memoryview(data).cast("B")
        if len(view) != self.expected:
            raise CorruptShardError(
                "decoded inner chunk has the wrong size",
                expected=f"{self.expected} bytes (shape {self.shape}, dtype {self.native})",
                found=f"{len(view)} bytes",
                array=ctx.array,
                key=ctx.key,
                chunk=ctx.chunk,
            )
        arr = np.frombuffer(view, dtype=self.stored).reshape(self.shape)
        return arr.astype(self.native) if self.swap else arr


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
            codec.index_codecs, self.chunks_per_shard, codec.index_location, array=array
        )
        self.chunk = ChunkDecoder(codec.codecs, inner, zdtype, fill_value, array=array)
        self.fill_value = fill_value
        self.array = array

    def decode_index(
        self, raw: Bytes, *, shard_nbytes: int | None, key: str | None
    ) -> npt.NDArray[np.uint64]:
        table = self.index.decode(raw, array=self.array, key=key)
        start, stop = self.index.data_bounds(shard_nbytes)
        check_entries(table, data_start=start, data_stop=stop, array=self.array, key=key)
        return table

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


def is_fill(arr: npt.NDArray[Any], fill_value: Any) -> bool:
    """Whether every element equals the fill value (NaN equals NaN), the test zarr uses
    to leave a chunk out when ``write_empty_chunks`` is off."""
    if arr.size == 0:
        return True
    fill = np.asarray(fill_value, dtype=arr.dtype)
    if arr.dtype.kind in "fc" and bool(np.isnan(fill)):
        # most chunks hold data: look at two elements before scanning them all
        if not (np.isnan(arr.flat[0]) and np.isnan(arr.flat[-1])):
            return False
        return bool(np.isnan(arr).all())
    if not (arr.flat[0] == fill and arr.flat[-1] == fill):
        return False
    return bool(np.all(arr == fill))


def _zstd_cffi() -> tuple[Any, Any] | None:
    """python-zstandard's cffi binding of libzstd (``ffi``, ``lib``), which compresses
    into memory the caller gives; None where it cannot load (no ``cffi``)."""
    try:
        from zstandard import backend_cffi
    except ImportError:  # pragma: no cover - cffi is a dependency
        return None
    return backend_cffi.ffi, backend_cffi.lib


class _ZstdEncode:
    """zstd compression with one compression context per thread reused from chunk to
    chunk. (numcodecs creates a context for every chunk: in dask workers, whose
    allocator returns freed memory to the system at once, that made compressing 64 KiB
    chunks about 1.6x slower; see docs/benchmarks.md.) :meth:`encode_into` compresses
    straight into the caller's memory through libzstd's ``ZSTD_compress2`` (python-
    zstandard's cffi binding), so no output is allocated per chunk. The frames record the
    content size, as numcodecs' do, so every zstd decoder reads them; both methods give
    the same bytes."""

    def __init__(self, level: int, checksum: bool) -> None:
        self.level = level
        self.checksum = checksum
        self._local = threading.local()

    def __getstate__(self) -> dict[str, Any]:
        return {"level": self.level, "checksum": self.checksum}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["level"], state["checksum"])  # type: ignore[misc]

    def encode(self, data: Any) -> bytes:
        cctx = getattr(self._local, "cctx", None)
        if cctx is None:
            import zstandard

            cctx = zstandard.ZstdCompressor(
                level=self.level, write_checksum=self.checksum, write_content_size=True
            )
            self._local.cctx = cctx
        return bytes(cctx.compress(data))

    @staticmethod
    def bound(nbytes: int) -> int:
        """The most bytes a frame of ``nbytes`` can take (``ZSTD_compressBound``)."""
        extra = ((128 << 10) - nbytes) >> 11 if nbytes < (128 << 10) else 0
        return nbytes + (nbytes >> 8) + extra

    def encode_into(self, data: Any, out: npt.NDArray[np.uint8]) -> int:
        """Compress ``data`` (C-contiguous) into ``out`` (at least :meth:`bound` bytes);
        returns the frame's size."""
        binding = _zstd_cffi()
        if binding is None:  # pragma: no cover - cffi is a dependency
            frame = self.encode(data)
            out[: len(frame)] = np.frombuffer(frame, dtype=np.uint8)
            return len(frame)
        ffi, lib = binding
        raw = getattr(self._local, "raw", None)
        if raw is None:
            raw = ffi.gc(lib.ZSTD_createCCtx(), lib.ZSTD_freeCCtx)
            for param, value in (
                (lib.ZSTD_c_compressionLevel, self.level),
                (lib.ZSTD_c_checksumFlag, int(self.checksum)),
                (lib.ZSTD_c_contentSizeFlag, 1),
            ):
                _zstd_check(lib, ffi, lib.ZSTD_CCtx_setParameter(raw, param, value))
            self._local.raw = raw
        src = ffi.from_buffer(data)
        n = lib.ZSTD_compress2(
            raw, ffi.from_buffer(out, require_writable=True), out.size, src, len(src)
        )
        _zstd_check(lib, ffi, n)
        return int(n)


def _zstd_check(lib: Any, ffi: Any, code: int) -> None:
    if lib.ZSTD_isError(code):
        raise WriteError(
            "zstd compression failed",
            found=ffi.string(lib.ZSTD_getErrorName(code)).decode(),
            advice="Report this with the codec's configuration.",
        )


class ChunkEncoder(_ChunkCodec):
    """Encodes one chunk of a fixed shape through a zarr v3 codec chain.

    A fast path on numpy and numcodecs covers ``transpose``, ``bytes``, ``zstd``,
    ``gzip`` and ``crc32c``; any other chain is encoded by zarr-python's own pipeline,
    so the bytes are what zarr-python would write.
    """

    def _prepare(self) -> None:
        self._fast = self._fast_plan()

    def _fast_plan(self) -> tuple[list[tuple[int, ...]], np.dtype[Any], list[Any]] | None:
        import numcodecs
        from zarr.codecs import BytesCodec, Crc32cCodec, GzipCodec, TransposeCodec, ZstdCodec

        if self.dtype.kind not in _FAST_KINDS or self.dtype.hasobject:
            return None
        orders: list[tuple[int, ...]] = []
        stored: np.dtype[Any] | None = None
        compress: list[Any] = []
        for codec in self.codecs:
            if stored is None and isinstance(codec, TransposeCodec):
                orders.append(tuple(codec.order))
            elif stored is None and isinstance(codec, BytesCodec):
                stored = self.dtype
                if self.dtype.itemsize > 1 and codec.endian is not None:
                    stored = self.dtype.newbyteorder("<" if codec.endian == "little" else ">")
            elif stored is not None and isinstance(codec, ZstdCodec):
                compress.append(_ZstdEncode(codec.level, codec.checksum))
            elif stored is not None and isinstance(codec, GzipCodec):
                compress.append(numcodecs.GZip(level=codec.level))
            elif stored is not None and isinstance(codec, Crc32cCodec):
                compress.append(None)  # None stands for the crc32c checksum
            else:
                return None
        if stored is None:
            return None
        return orders, stored, compress

    def _serialized(self, arr: npt.NDArray[Any]) -> npt.NDArray[Any]:
        """The chunk transposed and in its stored byte order, C-contiguous (gathered into
        a reused buffer when it is not so already: the compressors copy what they keep)."""
        if arr.shape != self.shape:
            raise ValueError(f"chunk has shape {arr.shape}, expected {self.shape}")
        assert self._fast is not None
        orders, stored, _ = self._fast
        for order in orders:
            arr = arr.transpose(order)
        if not (arr.flags.c_contiguous and arr.dtype == stored):
            data = _scratch(arr.size * stored.itemsize, "encode").view(stored).reshape(arr.shape)
            np.copyto(data, arr, casting="unsafe")
            return data
        return arr

    @staticmethod
    def _stage(codec: Any, data: Any) -> Any:
        if codec is None:  # the crc32c checksum
            view = memoryview(data).cast("B")
            return bytes(view) + crc32c(view).to_bytes(4, "little")
        return codec.encode(data)

    def encode(self, arr: npt.NDArray[Any]) -> bytes:
        if self._fast is None:
            if arr.shape != self.shape:
                raise ValueError(f"chunk has shape {arr.shape}, expected {self.shape}")
            return self._zarr_encode(arr)
        data: Any = self._serialized(arr)
        for codec in self._fast[2]:
            data = self._stage(codec, data)
        return bytes(memoryview(data).cast("B")) if not isinstance(data, bytes) else data

    @property
    def bound(self) -> int | None:
        """The most bytes one encoded chunk can take, for :meth:`encode_into`; None for
        chains encoded through zarr-python (write those with :meth:`encode`)."""
        if self._fast is None:
            return None
        n = math.prod(self.shape) * self._fast[1].itemsize
        for codec in self._fast[2]:
            if codec is None:
                n += 4
            elif isinstance(codec, _ZstdEncode):
                n = codec.bound(n)
            else:  # gzip: zlib's deflateBound, and room for the gzip header and trailer
                n += (n >> 12) + (n >> 14) + (n >> 25) + 64
        return n

    def encode_into(self, arr: npt.NDArray[Any], out: npt.NDArray[np.uint8]) -> int:
        """Encode one chunk into ``out`` (uint8, at least :attr:`bound` long); returns the
        encoded size. The last step writes straight into ``out`` where it can (zstd, a
        chain without compressor), so no memory is allocated for the chunk."""
        if self._fast is None:
            raise ValueError("this codec chain has no bound: use encode()")
        data: Any = self._serialized(arr)
        stages = self._fast[2]
        for codec in stages[:-1]:
            data = self._stage(codec, data)
        last = stages[-1] if stages else None
        if isinstance(last, _ZstdEncode):
            return last.encode_into(data, out)
        if last is not None:  # gzip: through bytes of its own
            frame = np.frombuffer(self._stage(last, data), dtype=np.uint8)
            out[: frame.size] = frame
            return int(frame.size)
        # no compressor last: the bytes, and their crc32c when the chain ends with one
        view = np.frombuffer(memoryview(data).cast("B"), dtype=np.uint8)
        out[: view.size] = view
        n = view.size
        if stages:
            out[n : n + 4] = np.frombuffer(crc32c(view).to_bytes(4, "little"), np.uint8)
            n += 4
        return n

    def _zarr_encode(self, arr: npt.NDArray[Any]) -> bytes:
        from zarr.core.sync import sync

        pipeline, spec, prototype = self._zarr_pipeline()
        nd = prototype.nd_buffer.from_numpy_array(np.ascontiguousarray(arr, dtype=self.dtype))
        (out,) = sync(pipeline.encode([(nd, spec)]))
        if out is None:  # pragma: no cover - zarr encodes every chunk it is given
            raise ValueError("zarr-python encoded nothing")
        return bytes(out.to_bytes())
