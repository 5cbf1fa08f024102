"""shardwise's own binding of libzstd, both ways: decompressing frames into memory the
caller gives, and compressing with one context per thread.

zstd is the codec nearly every array is written with, so it gets paths of its own where
numcodecs cannot bound memory or costs time: :func:`zstd_decompress_into` decompresses
the frames the bounded zstd decoder (``_decompress``) does not hand to numcodecs (a
first frame declaring no size, or less than the chunk: several frames) into a buffer of
a known size in one pass (nothing allocated by the output's size, nothing written past
it), and :class:`ZstdEncode` compresses with a context reused from chunk to
chunk, straight into the caller's memory. Both go through python-zstandard's cffi
binding (``ZSTD_decompressDCtx``, ``ZSTD_compress2``), loaded on first use; they live
apart from the decompressors and the encoder that use them because both sides share the
binding and its per-thread contexts.
"""

from __future__ import annotations

import functools
import threading
from typing import Any

import numpy as np
import numpy.typing as npt

from shardwise.errors import WriteError

__all__ = ["ZstdEncode", "zstd_decompress_into"]


@functools.cache
def _zstd_cffi() -> tuple[Any, Any]:
    """python-zstandard's cffi binding of libzstd (``ffi``, ``lib``), which compresses
    into memory the caller gives (``cffi`` is a dependency of shardwise). Loaded once."""
    from zstandard import backend_cffi

    return backend_cffi.ffi, backend_cffi.lib


_DCTX = threading.local()


def zstd_decompress_into(src: memoryview, out: npt.NDArray[np.uint8]) -> int | None:
    """Decompress the zstd frames of ``src`` into ``out`` in one pass, with libzstd's
    ``ZSTD_decompressDCtx`` through python-zstandard's cffi binding and one decompression
    context per thread: nothing is written past ``out`` and nothing of the output's size
    is allocated. Returns the size, or None when the frames hold more than ``out``."""
    ffi, lib = _zstd_cffi()
    dctx = getattr(_DCTX, "dctx", None)
    if dctx is None:
        dctx = ffi.gc(lib.ZSTD_createDCtx(), lib.ZSTD_freeDCtx)
        _DCTX.dctx = dctx
    n = lib.ZSTD_decompressDCtx(
        dctx, ffi.from_buffer(out, require_writable=True), out.size, ffi.from_buffer(src), len(src)
    )
    if lib.ZSTD_isError(n):
        name = ffi.string(lib.ZSTD_getErrorName(n)).decode()
        # python-zstandard before 0.23 binds no ZSTD_getErrorCode: its name says it then
        if hasattr(lib, "ZSTD_getErrorCode"):
            too_small = lib.ZSTD_getErrorCode(n) == lib.ZSTD_error_dstSize_tooSmall
        else:
            too_small = "too small" in name.lower()
        if too_small:
            return None
        raise ValueError(f"zstd: {name}")
    return int(n)


class ZstdEncode:
    """zstd compression with one compression context per thread reused from chunk to
    chunk. (numcodecs creates a context for every chunk: in dask workers, whose
    allocator returns freed memory to the system at once, that makes compressing small
    chunks markedly slower.) :meth:`encode_into` compresses
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
        ffi, lib = _zstd_cffi()
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
