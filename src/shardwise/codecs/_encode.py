"""Inner chunk encoding: array -> bytes, for one inner chunk, and the test that leaves a
chunk out.

A fast path on numpy and numcodecs covers ``transpose``, ``bytes``, ``zstd`` (through
shardwise's own binding, ``_zstd``), ``gzip`` and ``crc32c``, and can encode straight
into a shard's memory (:meth:`ChunkEncoder.encode_into`); any other chain is encoded by
zarr-python's own pipeline, so the bytes are what zarr-python would write. Apart from
decoding because writing shares only the chain (``_chain``) and the zstd binding with it:
no bounds to enforce on untrusted bytes, and nothing here reads a shard.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt

import shardwise._compat as _compat
from shardwise._buffers import scratch
from shardwise.codecs._chain import FAST_KINDS, ChunkCodec
from shardwise.codecs._zstd import ZstdEncode
from shardwise.format.index import crc32c

__all__ = ["ChunkEncoder", "is_fill"]


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


class ChunkEncoder(ChunkCodec):
    """Encodes one chunk of a fixed shape through a zarr v3 codec chain.

    A fast path on numpy and numcodecs covers ``transpose``, ``bytes``, ``zstd``,
    ``gzip`` and ``crc32c``; any other chain is encoded by zarr-python's own pipeline,
    so the bytes are what zarr-python would write.
    """

    def _prepare(self) -> None:
        self._fast = self._fast_plan()
        self._bound = self._bound_of()

    def _fast_plan(self) -> tuple[list[tuple[int, ...]], np.dtype[Any], list[Any]] | None:
        import numcodecs
        from zarr.codecs import BytesCodec, Crc32cCodec, GzipCodec, TransposeCodec, ZstdCodec

        if self.dtype.kind not in FAST_KINDS or self.dtype.hasobject:
            return None
        orders: list[tuple[int, ...]] = []
        stored: np.dtype[Any] | None = None
        compress: list[Any] = []
        for codec in self.codecs:
            if stored is None and isinstance(codec, TransposeCodec):
                orders.append(tuple(codec.order))
            elif stored is None and isinstance(codec, BytesCodec):
                stored = self.dtype
                endian = _compat.literal(codec.endian)
                if self.dtype.itemsize > 1 and endian is not None:
                    stored = self.dtype.newbyteorder("<" if endian == "little" else ">")
            elif stored is not None and isinstance(codec, ZstdCodec):
                compress.append(ZstdEncode(codec.level, codec.checksum))
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
        return self._bound

    def _bound_of(self) -> int | None:
        if self._fast is None:
            return None
        n = math.prod(self.shape) * self._fast[1].itemsize
        for codec in self._fast[2]:
            if codec is None:
                n += 4
            elif isinstance(codec, ZstdEncode):
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
        if isinstance(last, ZstdEncode):
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
