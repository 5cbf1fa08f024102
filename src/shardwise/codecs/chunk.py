"""Inner chunk decoding: bytes -> array, for one inner chunk (or one unsharded chunk).

A fast path on numcodecs and numpy covers the codecs everyone uses (``bytes`` in either
byte order, ``transpose``, ``zstd``, ``gzip``, numcodecs' ``zlib``, ``blosc``,
``crc32c``, nested ``sharding_indexed``). Any other codec registered with zarr-python is
decoded through zarr-python's own codec pipeline, so nothing zarr-python can read is
refused here.

What a chunk's bytes claim never sizes memory: the fast path decompresses every chunk
into at most the size its shape and data type give through the chain, and refuses a
frame that claims or makes more (a decompression bomb) as a ``CorruptShardError``
naming the array, key and inner chunk; :meth:`ShardDecoder.decode_index` refuses index
entries longer than the chunk's codecs make one, or reaching past any store object.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

import shardwise._compat as _compat
from shardwise._buffers import scratch
from shardwise.errors import (
    ChecksumError,
    CorruptShardError,
    ShardwiseError,
    TruncatedShardError,
    UnsupportedCodecError,
    WriteError,
)
from shardwise.format.index import EMPTY, MAX_OBJECT, IndexFormat, check_entries, crc32c

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


E = TypeVar("E", bound=ShardwiseError)


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

    def error(
        self,
        cls: type[E],
        problem: str,
        *,
        expected: str | None = None,
        found: str | None = None,
        advice: str | None = None,
    ) -> E:
        """A ``cls`` error about this chunk, naming its array, key and inner chunk."""
        return cls(
            problem,
            expected=expected,
            found=found,
            array=self.array,
            key=self.key,
            chunk=self.chunk,
            advice=advice,
        )


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

    def _zarr_pipeline(self, codecs: Sequence[Any] | None = None) -> tuple[Any, Any, Any]:
        """zarr-python's codec pipeline for the chain (or the first ``codecs`` of it),
        the chunk's ArraySpec and the buffer prototype: the fallback for chains the fast
        paths do not cover."""
        from zarr.buffer import default_buffer_prototype
        from zarr.registry import get_pipeline_class

        prototype = default_buffer_prototype()
        spec = _compat.ArraySpec(
            self.shape, self.zdtype, self.fill_value, _compat.ArrayConfig.from_dict({}), prototype
        )
        chain = self.codecs if codecs is None else codecs
        return get_pipeline_class().from_codecs(chain), spec, prototype


class ChunkDecoder(_ChunkCodec):
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
        self._direct: tuple[list[Callable[[Any, _Context], Any]], _Decompressor, _ToArray] | None
        self._direct = None
        # the most bytes one encoded chunk can take (None: not known)
        self.max_encoded: int | None = None
        self._steps: list[Callable[[Any, _Context], Any]] | None = self._fast_steps()
        # chains zarr-python decodes: the codecs it decodes, after shardwise's bounded
        # decoding of the compressors and checksums that end the chain (``_tail``)
        self._head: tuple[Any, ...] = self.codecs
        self._tail: list[Callable[[Any, _Context], Any]] = []
        if self._steps is None:
            self._plan_tail()

    # -- building ------------------------------------------------------------------------
    def _fast_steps(self) -> list[Callable[[Any, _Context], Any]] | None:
        """Decode steps in decode order, or None when zarr-python must decode."""
        from zarr.codecs import BytesCodec, ShardingCodec, TransposeCodec

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
            elif array_bytes is not None and _decompressor(codec, check=True):
                bytes_bytes.append(codec)
            else:
                return None
        if array_bytes is None:
            return None

        encoded_shape = self.shape
        for t in array_array:
            encoded_shape = tuple(encoded_shape[i] for i in t.order)
        steps: list[Callable[[Any, _Context], Any]] | None
        if isinstance(array_bytes, BytesCodec):
            endian = array_bytes.endian
            stored = self.dtype
            if self.dtype.itemsize > 1 and endian is not None:
                stored = self.dtype.newbyteorder("<" if endian == "little" else ">")
            to_array = _ToArray(stored, self.dtype, encoded_shape)
            dec = _decompressor(bytes_bytes[0]) if bytes_bytes else None
            if dec is not None:
                # the decompressor next to `bytes` decompresses straight into an array
                steps, size = _bytes_steps(
                    bytes_bytes[1:], _compressed_bound(to_array.expected), exact=False
                )
                if steps is None:  # pragma: no cover - every stage here has a bound
                    return None
                if not array_array and not to_array.swap:
                    self._direct = (list(steps), dec, to_array)
                steps.append(_decompress_to_array_step(dec, to_array))
            else:
                steps, size = _bytes_steps(bytes_bytes, to_array.expected, exact=True)
                if steps is None:  # pragma: no cover - every stage here has a bound
                    return None
                steps.append(to_array)
        else:
            nested = ShardDecoder(
                array_bytes, encoded_shape, self.zdtype, self.fill_value, array=self.array
            )
            steps, size = _bytes_steps(bytes_bytes, nested.max_nbytes, exact=False)
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
        while cut and _decompressor(codecs[cut - 1], check=True):
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
                    size, exact = _compressed_bound(size), False
                else:
                    return  # another array-to-bytes codec: no size known
        except Exception:
            return  # zarr-python's own decoding reports what is wrong
        steps, max_encoded = _bytes_steps(codecs[cut:], size, exact=exact)
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
        ctx = _Context(self.array, key, chunk, scratch)
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
        ctx = _Context(self.array, key, chunk, True)
        try:
            value: Any = data
            for step in before:
                value = step(value, ctx)
            buf = dest.reshape(-1).view(np.uint8)
            if isinstance(dec, _Zstd):
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
            f"{[_codec_name(c) for c in self.codecs]}",
            found=f"{type(e).__name__}: {e}",
            array=self.array,
            key=key,
            chunk=chunk,
            advice="The chunk's bytes are corrupt or were written with other codecs; "
            "rewrite the shard from its source.",
        )

    def _zarr_decode(self, data: Bytes, ctx: _Context) -> npt.NDArray[Any]:
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


def _verify_crc32c(data: Bytes, ctx: _Context) -> memoryview:
    view = memoryview(data).cast("B")
    if len(view) < 4:
        raise ctx.error(
            CorruptShardError,
            "inner chunk is too short for its crc32c",
            expected="at least 4 bytes",
            found=f"{len(view)} bytes",
        )
    body = view[:-4]
    stored = int.from_bytes(view[-4:], "little")
    actual = crc32c(body)
    if stored != actual:
        raise ctx.error(
            ChecksumError,
            "inner chunk crc32c mismatch",
            expected=f"{stored:#010x}",
            found=f"{actual:#010x}",
            advice="The chunk's bytes are corrupt; rewrite the shard from its source.",
        )
    return body


# -- bounded decompression -------------------------------------------------------------
_BOMB_ADVICE = (
    "The chunk's bytes are corrupt or were made to exhaust memory (a decompression "
    "bomb); nothing was decompressed past the chunk's size. Rewrite the shard from its "
    "source."
)


def _compressed_bound(nbytes: int) -> int:
    """More bytes than any writer's compressor (zstd, deflate in gzip or zlib, blosc,
    lz4) or checksum makes of ``nbytes`` bytes, with room for headers: the most a
    decompressed stage feeding another decompressor may hold, and the most an encoded
    chunk may take. (zstd adds at most ``nbytes >> 8`` and 64 bytes, deflate's stored
    blocks 5 bytes in 16 KiB, blosc 16 bytes; a deflate encoder using fixed Huffman
    codes alone 1/8.)"""
    return nbytes + (nbytes >> 3) + 4096


def _too_large(ctx: _Context, name: str, found: str, limit: int, exact: bool) -> CorruptShardError:
    return ctx.error(
        CorruptShardError,
        f"inner chunk's {name} data decompresses to more than the chunk holds",
        expected=f"{'exactly' if exact else 'at most'} {limit} bytes (the chunk's shape and "
        "data type through its codecs)",
        found=found,
        advice=_BOMB_ADVICE,
    )


def _decompressor(codec: Any, check: bool = False) -> Any:
    """The bounded decoder of a bytes-to-bytes codec shardwise decodes itself (None for
    crc32c, checked by a step of its own); with ``check``, whether there is one (True
    for crc32c too)."""
    from zarr.codecs import BloscCodec, Crc32cCodec, GzipCodec, ZstdCodec
    from zarr.codecs.numcodecs import LZ4, Zlib

    if isinstance(codec, Crc32cCodec):
        return True if check else None
    for kind, make in (
        (ZstdCodec, _Zstd),
        (GzipCodec, lambda: _Inflate("gzip")),
        (Zlib, lambda: _Inflate("zlib")),
        (LZ4, _LZ4),
        (BloscCodec, _Blosc),
    ):
        if isinstance(codec, kind):
            return True if check else make()
    return False if check else None


def _bytes_steps(
    codecs: Sequence[Any], size: int | None, *, exact: bool
) -> tuple[list[Callable[[Any, _Context], Any]] | None, int | None]:
    """Decode steps (in decode order) for bytes-to-bytes codecs shardwise decodes
    (:func:`_decompressor`), given what the first of them encodes: ``size`` bytes
    (``exact``; else at most that; None: unknown). Each decompressor's output is bounded
    by what the codec before it makes; crc32c adds 4 bytes, a compressor at most
    :func:`_compressed_bound`. Returns the steps (None where a decompressor's output has
    no bound) and the most bytes the codecs encode."""
    limits = []
    for codec in codecs:
        limits.append((size, exact))
        if size is not None:
            if _decompressor(codec) is None:  # crc32c
                size += 4
            else:
                size, exact = _compressed_bound(size), False
    steps: list[Callable[[Any, _Context], Any]] = []
    for codec, (limit, limit_exact) in reversed(list(zip(codecs, limits, strict=True))):
        dec = _decompressor(codec)
        if dec is None:
            steps.append(_verify_crc32c)
        elif limit is None:
            return None, None
        else:
            steps.append(_decompress_step(dec, limit, limit_exact))
    return steps, size


class _Decompressor:
    """One compressor's decoding into memory of a known size."""

    name = ""

    def into(self, data: Bytes, out: npt.NDArray[np.uint8], ctx: _Context, exact: bool) -> int:
        """Decompress ``data`` into ``out`` (uint8, C-contiguous) and return the size:
        never more than ``out.size`` bytes are produced or allocated (``exact``: that
        size is the only one expected, for the message). A frame that claims or makes
        more raises :class:`CorruptShardError`; other faults raise anything else
        (reported as an undecodable chunk)."""
        raise NotImplementedError


class _Zstd(_Decompressor):
    """zstd frames: a first frame declaring more than ``out`` is refused before anything
    is decompressed; one declaring exactly ``out``'s size is decompressed by numcodecs
    into ``out`` (which refuses frames declaring more in all, and stops where ``out``
    ends); the others (several frames, no declared size) are decompressed in one pass
    into ``out`` by libzstd, which stops where ``out`` ends."""

    name = "zstd"

    def __init__(self) -> None:
        import numcodecs

        self._numcodecs = numcodecs.Zstd()

    def into(self, data: Bytes, out: npt.NDArray[np.uint8], ctx: _Context, exact: bool) -> int:
        return self.into_declared(data, out, ctx, exact, decoded_size("zstd", data))

    def into_declared(
        self,
        data: Bytes,
        out: npt.NDArray[np.uint8],
        ctx: _Context,
        exact: bool,
        declared: int | None,
    ) -> int:
        """:meth:`into`, the size the first frame declares (:func:`decoded_size`) known."""
        limit = out.size
        if declared is not None and declared > limit:
            raise _too_large(
                ctx, "zstd", f"a frame whose header claims {declared} bytes", limit, exact
            )
        if declared == limit:
            # the frame every writer makes: numcodecs (a few % faster than the cffi call
            # on large chunks), which adds up the sizes all frames declare and
            # decompresses no more than ``out`` holds
            try:
                self._numcodecs.decode(data, out=out)
            except (ValueError, RuntimeError) as e:
                # the frames after the first declare more, or make more (libzstd's
                # "Destination buffer is too small")
                if "too small" not in str(e).lower():
                    raise
                raise _too_large(
                    ctx, "zstd", f"frames that decompress to more than {limit} bytes", limit, exact
                ) from e
            return limit
        n = _zstd_decompress_into(memoryview(data).cast("B"), out)
        if n is None:
            raise _too_large(
                ctx, "zstd", f"frames that decompress to more than {limit} bytes", limit, exact
            )
        return n


_DCTX = threading.local()


def _zstd_decompress_into(src: memoryview, out: npt.NDArray[np.uint8]) -> int | None:
    """Decompress the zstd frames of ``src`` into ``out`` in one pass, with libzstd's
    ``ZSTD_decompressDCtx`` through python-zstandard's cffi binding and one decompression
    context per thread: nothing is written past ``out`` and nothing of the output's size
    is allocated. Returns the size, or None when the frames hold more than ``out``."""
    binding = _zstd_cffi()
    if binding is None:  # pragma: no cover - cffi is a dependency
        import zstandard

        reader = zstandard.ZstdDecompressor().stream_reader(bytes(src), read_across_frames=True)
        view, done = memoryview(out), 0
        while done < out.size and (got := reader.readinto(view[done:])):
            done += got
        return None if reader.read(1) else done
    ffi, lib = binding
    dctx = getattr(_DCTX, "dctx", None)
    if dctx is None:
        dctx = ffi.gc(lib.ZSTD_createDCtx(), lib.ZSTD_freeDCtx)
        _DCTX.dctx = dctx
    n = lib.ZSTD_decompressDCtx(
        dctx, ffi.from_buffer(out, require_writable=True), out.size, ffi.from_buffer(src), len(src)
    )
    if lib.ZSTD_isError(n):
        if lib.ZSTD_getErrorCode(n) == lib.ZSTD_error_dstSize_tooSmall:
            return None
        raise ValueError(f"zstd: {ffi.string(lib.ZSTD_getErrorName(n)).decode()}")
    return int(n)


class _Inflate(_Decompressor):
    """Deflate streams: ``gzip`` (one member or several, zero padding between them
    skipped, as numcodecs' GZip reads them) or numcodecs' ``zlib`` (one stream; bytes
    after it ignored, as ``zlib.decompress`` does). Decompressed with Python's zlib in
    pieces of at most what is left of ``out`` (plus one byte, to see more coming); the
    size a gzip trailer declares is modulo 2**32, so it is not trusted."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.wbits = 31 if name == "gzip" else 15

    def into(self, data: Bytes, out: npt.NDArray[np.uint8], ctx: _Context, exact: bool) -> int:
        import zlib

        limit = out.size
        rest: Any = memoryview(data).cast("B")
        n = 0
        while True:
            stream = zlib.decompressobj(self.wbits)
            piece = stream.decompress(rest, limit - n + 1)
            if len(piece) > limit - n:
                raise _too_large(
                    ctx,
                    self.name,
                    f"a stream that decompresses to more than {limit} bytes",
                    limit,
                    exact,
                )
            out[n : n + len(piece)] = np.frombuffer(piece, dtype=np.uint8)
            n += len(piece)
            if not stream.eof:
                raise ValueError(f"the {self.name} stream is cut short")
            if self.wbits != 31:
                return n
            rest = stream.unused_data.lstrip(b"\0")
            if not rest:
                return n


class _Blosc(_Decompressor):
    """Blosc buffers: the header's sizes are checked before c-blosc sees them (it trusts
    them), then the buffer is decompressed into the first ``nbytes`` of ``out``."""

    name = "blosc"

    def __init__(self) -> None:
        import numcodecs

        self.codec = numcodecs.Blosc()

    def into(self, data: Bytes, out: npt.NDArray[np.uint8], ctx: _Context, exact: bool) -> int:
        view = memoryview(data).cast("B")
        nbytes = _check_blosc_header(view, ctx, out.size, exact)
        self.codec.decode(view, out=out[:nbytes])
        return nbytes


class _LZ4(_Decompressor):
    """numcodecs' lz4: a block after the decompressed size (4 bytes, little-endian),
    checked before the block is decompressed into the first that many bytes of
    ``out``."""

    name = "lz4"

    def __init__(self) -> None:
        import numcodecs

        self.codec = numcodecs.LZ4()

    def into(self, data: Bytes, out: npt.NDArray[np.uint8], ctx: _Context, exact: bool) -> int:
        view = memoryview(data).cast("B")
        if len(view) < 4:
            raise ValueError(f"an lz4 buffer of {len(view)} bytes, shorter than its header")
        nbytes = int.from_bytes(view[:4], "little")
        if nbytes > out.size:
            raise _too_large(ctx, "lz4", f"a header that claims {nbytes} bytes", out.size, exact)
        self.codec.decode(view, out=out[:nbytes])
        return nbytes


def _check_blosc_header(
    data: Bytes, ctx: _Context, limit: int | None = None, exact: bool = False
) -> int:
    """Check a blosc frame's 16-byte header before c-blosc reads it, and return the
    decompressed size it declares. c-blosc trusts the compressed size there and reads
    past the buffer (a segfault) when it lies; it allocates by the declared decompressed
    and block sizes. So the frame must be as long as it says, and declare ``limit``
    bytes (``exact``) or at most that, in blocks no larger."""
    view = memoryview(data).cast("B")
    cbytes = int.from_bytes(view[12:16], "little") if len(view) >= 16 else None
    if cbytes != len(view):
        raise ctx.error(
            CorruptShardError,
            "corrupt blosc frame",
            expected=f"a 16-byte header giving the frame's size, {len(view)} bytes",
            found="a shorter frame" if cbytes is None else f"a header saying {cbytes} bytes",
            advice="The chunk's bytes are corrupt; rewrite the shard from its source.",
        )
    nbytes = int.from_bytes(view[4:8], "little")
    blocksize = int.from_bytes(view[8:12], "little")
    if limit is not None and nbytes > limit:
        raise _too_large(ctx, "blosc", f"a header that claims {nbytes} bytes", limit, exact)
    if limit is not None and exact and nbytes != limit:
        raise ctx.error(
            CorruptShardError,
            "decoded inner chunk has the wrong size",
            expected=f"{limit} bytes",
            found=f"a blosc header declaring {nbytes} bytes",
            advice="The chunk's bytes are corrupt or were written for another shape or "
            "data type; rewrite the shard from its source.",
        )
    if blocksize > max(nbytes, 1):
        raise ctx.error(
            CorruptShardError,
            "corrupt blosc frame",
            expected=f"blocks of at most the frame's {nbytes} decompressed bytes",
            found=f"a header saying blocks of {blocksize} bytes",
            advice="The chunk's bytes are corrupt; rewrite the shard from its source.",
        )
    return nbytes


def _decompress_step(
    dec: _Decompressor, limit: int, exact: bool
) -> Callable[[Bytes, _Context], npt.NDArray[np.uint8]]:
    """A decompression whose output feeds another step (a crc32c check, another
    decompressor, a nested shard): into a fresh buffer of ``limit`` bytes."""

    def step(data: Bytes, ctx: _Context) -> npt.NDArray[np.uint8]:
        out = np.empty(limit, dtype=np.uint8)
        n = dec.into(data, out, ctx, exact)
        if exact and n != limit:
            raise ctx.error(
                CorruptShardError,
                "decoded inner chunk has the wrong size",
                expected=f"{limit} bytes",
                found=f"{n} bytes",
            )
        return out[:n]

    step.__name__ = f"decode_{dec.name}"
    return step


def _transpose_step(inverse: tuple[int, ...]) -> Callable[[Any, _Context], Any]:
    def step(arr: npt.NDArray[Any], ctx: _Context) -> npt.NDArray[Any]:
        return arr.transpose(inverse)

    return step


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
    dec: _Decompressor, to_array: _ToArray
) -> Callable[[Bytes, _Context], npt.NDArray[Any]]:
    """Decompress into a buffer of exactly the chunk's size (a per-thread scratch buffer
    when the caller allows), then view it as the array."""
    expected = to_array.expected

    def step(data: Bytes, ctx: _Context) -> npt.NDArray[Any]:
        out = scratch(expected) if ctx.scratch else np.empty(expected, dtype=np.uint8)
        n = dec.into(data, out, ctx, True)
        return to_array(out[:n], ctx)

    step.__name__ = f"decode_{dec.name}_to_array"
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
            raise ctx.error(
                CorruptShardError,
                "decoded inner chunk has the wrong size",
                expected=f"{self.expected} bytes (shape {self.shape}, dtype {self.native})",
                found=f"{len(view)} bytes",
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

    @property
    def max_nbytes(self) -> int | None:
        """The most bytes a shard of this shape can take, as a writer lays it out (its
        index and every inner chunk at the most its codecs make of it, with room to
        spare): the bound on a nested shard. None where an inner chunk's bound is not
        known (codecs zarr-python decodes)."""
        per_chunk = self.chunk.max_encoded
        if per_chunk is None:
            return None
        return _compressed_bound(self.index.nbytes + self.index.nchunks * per_chunk)

    def decode_index(
        self, raw: Bytes, *, shard_nbytes: int | None, key: str | None
    ) -> npt.NDArray[np.uint64]:
        """Decode and check a shard's index: every entry inside the shard's data
        (``shard_nbytes`` when known, else inside the largest object a store can hold,
        leaving room for an index at the end) and no larger than its codecs make an
        inner chunk. So a table this returns turns into byte ranges that neither
        overflow nor ask for more than one chunk's worth of bytes each."""
        table = self.index.decode(raw, array=self.array, key=key)
        start, stop = self.index.data_bounds(shard_nbytes)
        check_entries(
            table,
            data_start=start,
            data_stop=stop,
            array=self.array,
            key=key,
            max_stop=MAX_OBJECT - (self.index.nbytes if self.index.location == "end" else 0),
            max_nbytes=self.chunk.max_encoded,
        )
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
            data = scratch(arr.size * stored.itemsize, "encode").view(stored).reshape(arr.shape)
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

        pipeline, spec, prototype = self._zarr_pipeline()
        nd = prototype.nd_buffer.from_numpy_array(np.ascontiguousarray(arr, dtype=self.dtype))
        (out,) = _compat.sync(pipeline.encode([(nd, spec)]))
        if out is None:  # pragma: no cover - zarr encodes every chunk it is given
            raise ValueError("zarr-python encoded nothing")
        return bytes(out.to_bytes())
