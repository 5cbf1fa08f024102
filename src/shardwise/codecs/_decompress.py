"""Bounded decompression: the compressors and checksums shardwise decodes itself (zstd,
deflate in gzip or zlib, blosc, lz4; crc32c), each into memory of a size known before
anything is decompressed.

What a chunk's bytes claim never sizes memory here. A :class:`Decompressor` writes into
a buffer its caller sized from the chunk's shape and data type through the chain
(exactly, next to ``bytes``; :func:`compressed_bound` of the next stage, between two
compressors), refuses a header or frame claiming more before it is decompressed, and
stops where the buffer ends; what would make more is a ``CorruptShardError`` naming the
array, key and inner chunk (a decompression bomb). Blosc headers are checked before
c-blosc, which trusts them, reads one. :func:`bytes_steps` turns a run of bytes-to-bytes
codecs into such decode steps with their bounds. This is apart from the decoders
(``_decode``) because it knows nothing of chunk shapes, arrays or shards: only bytes,
limits and the :class:`Context` its errors name.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from shardwise.codecs._chain import Bytes, Context
from shardwise.codecs._zstd import zstd_decompress_into
from shardwise.errors import ChecksumError, CorruptShardError
from shardwise.format.index import crc32c

__all__ = [
    "Decompressor",
    "Zstd",
    "bytes_steps",
    "compressed_bound",
    "decoded_size",
    "decompressor",
    "verify_crc32c",
]


def verify_crc32c(data: Bytes, ctx: Context) -> memoryview:
    """Check the crc32c that ends a chunk's bytes (4 bytes, little-endian) and return the
    bytes before it; a mismatch is a :class:`~shardwise.errors.ChecksumError` naming the
    chunk ``ctx`` is about."""
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


_BOMB_ADVICE = (
    "The chunk's bytes are corrupt or were made to exhaust memory (a decompression "
    "bomb); nothing was decompressed past the chunk's size. Rewrite the shard from its "
    "source."
)


def compressed_bound(nbytes: int) -> int:
    """More bytes than any writer's compressor (zstd, deflate in gzip or zlib, blosc,
    lz4) or checksum makes of ``nbytes`` bytes, with room for headers: the most a
    decompressed stage feeding another decompressor may hold, and the most an encoded
    chunk may take. (zstd adds at most ``nbytes >> 8`` and 64 bytes, deflate's stored
    blocks 5 bytes in 16 KiB, blosc 16 bytes; a deflate encoder using fixed Huffman
    codes alone 1/8.)"""
    return nbytes + (nbytes >> 3) + 4096


def _too_large(ctx: Context, name: str, found: str, limit: int, exact: bool) -> CorruptShardError:
    return ctx.error(
        CorruptShardError,
        f"inner chunk's {name} data decompresses to more than the chunk holds",
        expected=f"{'exactly' if exact else 'at most'} {limit} bytes (the chunk's shape and "
        "data type through its codecs)",
        found=found,
        advice=_BOMB_ADVICE,
    )


def decompressor(codec: Any, check: bool = False) -> Any:
    """The bounded decoder of a bytes-to-bytes codec shardwise decodes itself (None for
    crc32c, checked by a step of its own); with ``check``, whether there is one (True
    for crc32c too)."""
    from zarr.codecs import BloscCodec, Crc32cCodec, GzipCodec, ZstdCodec
    from zarr.codecs.numcodecs import LZ4, Zlib

    if isinstance(codec, Crc32cCodec):
        return True if check else None
    for kind, make in (
        (ZstdCodec, Zstd),
        (GzipCodec, lambda: _Inflate("gzip")),
        (Zlib, lambda: _Inflate("zlib")),
        (LZ4, _LZ4),
        (BloscCodec, _Blosc),
    ):
        if isinstance(codec, kind):
            return True if check else make()
    return False if check else None


def bytes_steps(
    codecs: Sequence[Any], size: int | None, *, exact: bool
) -> tuple[list[Callable[[Any, Context], Any]] | None, int | None]:
    """Decode steps (in decode order) for bytes-to-bytes codecs shardwise decodes
    (:func:`decompressor`), given what the first of them encodes: ``size`` bytes
    (``exact``; else at most that; None: unknown). Each decompressor's output is bounded
    by what the codec before it makes; crc32c adds 4 bytes, a compressor at most
    :func:`compressed_bound`. Returns the steps (None where a decompressor's output has
    no bound) and the most bytes the codecs encode."""
    limits = []
    for codec in codecs:
        limits.append((size, exact))
        if size is not None:
            if decompressor(codec) is None:  # crc32c
                size += 4
            else:
                size, exact = compressed_bound(size), False
    steps: list[Callable[[Any, Context], Any]] = []
    for codec, (limit, limit_exact) in reversed(list(zip(codecs, limits, strict=True))):
        dec = decompressor(codec)
        if dec is None:
            steps.append(verify_crc32c)
        elif limit is None:
            return None, None
        else:
            steps.append(_decompress_step(dec, limit, limit_exact))
    return steps, size


class Decompressor:
    """One compressor's decoding into memory of a known size."""

    name = ""

    def into(self, data: Bytes, out: npt.NDArray[np.uint8], ctx: Context, exact: bool) -> int:
        """Decompress ``data`` into ``out`` (uint8, C-contiguous) and return the size:
        never more than ``out.size`` bytes are produced or allocated (``exact``: that
        size is the only one expected, for the message). A frame that claims or makes
        more raises :class:`CorruptShardError`; other faults raise anything else
        (reported as an undecodable chunk)."""
        raise NotImplementedError


# chunks of at least this many bytes are decompressed by numcodecs, smaller ones by
# shardwise's own libzstd binding (see Zstd.into_declared; measured in per-chunk time on
# the benchmarks' fields: 64 KiB 73.6 against 78.7 us, 512 KiB 144.8 against 146.6 us,
# 1 MiB 964 against 900 us)
_NUMCODECS_FROM = 1 << 20


class Zstd(Decompressor):
    """zstd frames: a first frame declaring more than ``out`` is refused before anything
    is decompressed; one declaring exactly ``out``'s size, when ``out`` holds 1 MiB or
    more, is decompressed by numcodecs into ``out`` (which refuses frames declaring more
    in all, and stops where ``out`` ends); the others (smaller chunks, several frames,
    no declared size) are decompressed in one pass into ``out`` by libzstd with a
    context reused per thread, which stops where ``out`` ends."""

    name = "zstd"

    def __init__(self) -> None:
        import numcodecs

        self._numcodecs = numcodecs.Zstd()

    def into(self, data: Bytes, out: npt.NDArray[np.uint8], ctx: Context, exact: bool) -> int:
        return self.into_declared(data, out, ctx, exact, decoded_size("zstd", data))

    def into_declared(
        self,
        data: Bytes,
        out: npt.NDArray[np.uint8],
        ctx: Context,
        exact: bool,
        declared: int | None,
    ) -> int:
        """:meth:`into`, the size the first frame declares (:func:`decoded_size`) known."""
        limit = out.size
        if declared is not None and declared > limit:
            raise _too_large(
                ctx, "zstd", f"a frame whose header claims {declared} bytes", limit, exact
            )
        if declared == limit and limit >= _NUMCODECS_FROM:
            # the frame every writer makes, of a large chunk: numcodecs (its libzstd
            # build decompresses 1 MiB chunks about 7% faster than the cffi call), which
            # adds up the sizes all frames declare and decompresses no more than ``out``
            # holds. Smaller chunks go to the cffi call below, whose decompression
            # context is reused from chunk to chunk (numcodecs makes one per call): 6%
            # faster on 64 KiB chunks.
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
        n = zstd_decompress_into(memoryview(data).cast("B"), out)
        if n is None:
            raise _too_large(
                ctx, "zstd", f"frames that decompress to more than {limit} bytes", limit, exact
            )
        return n


class _Inflate(Decompressor):
    """Deflate streams: ``gzip`` (one member or several, zero padding between them
    skipped, as numcodecs' GZip reads them) or numcodecs' ``zlib`` (one stream; bytes
    after it ignored, as ``zlib.decompress`` does). Decompressed with Python's zlib in
    pieces of at most what is left of ``out`` (plus one byte, to see more coming); the
    size a gzip trailer declares is modulo 2**32, so it is not trusted."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.wbits = 31 if name == "gzip" else 15

    def into(self, data: Bytes, out: npt.NDArray[np.uint8], ctx: Context, exact: bool) -> int:
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


class _Blosc(Decompressor):
    """Blosc buffers: the header's sizes are checked before c-blosc sees them (it trusts
    them), then the buffer is decompressed into the first ``nbytes`` of ``out``."""

    name = "blosc"

    def __init__(self) -> None:
        import numcodecs

        self.codec = numcodecs.Blosc()

    def into(self, data: Bytes, out: npt.NDArray[np.uint8], ctx: Context, exact: bool) -> int:
        view = memoryview(data).cast("B")
        nbytes = _check_blosc_header(view, ctx, out.size, exact)
        self.codec.decode(view, out=out[:nbytes])
        return nbytes


class _LZ4(Decompressor):
    """numcodecs' lz4: a block after the decompressed size (4 bytes, little-endian),
    checked before the block is decompressed into the first that many bytes of
    ``out``."""

    name = "lz4"

    def __init__(self) -> None:
        import numcodecs

        self.codec = numcodecs.LZ4()

    def into(self, data: Bytes, out: npt.NDArray[np.uint8], ctx: Context, exact: bool) -> int:
        view = memoryview(data).cast("B")
        if len(view) < 4:
            raise ValueError(f"an lz4 buffer of {len(view)} bytes, shorter than its header")
        nbytes = int.from_bytes(view[:4], "little")
        if nbytes > out.size:
            raise _too_large(ctx, "lz4", f"a header that claims {nbytes} bytes", out.size, exact)
        self.codec.decode(view, out=out[:nbytes])
        return nbytes


def _check_blosc_header(
    data: Bytes, ctx: Context, limit: int | None = None, exact: bool = False
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
    dec: Decompressor, limit: int, exact: bool
) -> Callable[[Bytes, Context], npt.NDArray[np.uint8]]:
    """A decompression whose output feeds another step (a crc32c check, another
    decompressor, a nested shard): into a fresh buffer of ``limit`` bytes."""

    def step(data: Bytes, ctx: Context) -> npt.NDArray[np.uint8]:
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
