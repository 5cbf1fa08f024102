"""A sharding codec's ``index_codecs``: the :class:`~shardwise.format.index.IndexFormat`
that reads and writes a shard's index through them.

``bytes`` (either byte order), optionally followed by ``crc32c``, is what every writer
uses by default: the plain :class:`~shardwise.format.index.IndexFormat` decodes it with
numpy and the ``crc32c`` package. Any other chain the Zarr v3 sharding spec allows (one
whose encoded size is fixed: ``transpose`` on the index array, ``bytes`` in either byte
order, checksums such as numcodecs' ``crc32``, ``adler32``, ``fletcher32``,
``jenkins_lookup3`` or ``crc32c``) is read and written by :class:`ZarrIndexFormat`,
which runs zarr-python's own codec classes synchronously on the index bytes. A chain
whose encoded size is not fixed (a compressor) cannot locate an index by its size and is
refused when the array is opened.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

import shardwise._compat as _compat
from shardwise.codecs._chain import codec_name
from shardwise.errors import ChecksumError, CorruptShardError, UnsupportedCodecError
from shardwise.format.index import EMPTY, IndexFormat, Table

__all__ = ["ZarrIndexFormat", "index_format_from_codecs"]

_ADVICE = (
    "The sharding spec locates a shard's index by its size, so its codecs must encode it "
    "into a fixed number of bytes: write the array with such index codecs (the default, "
    "bytes + crc32c, or transpose, bytes and checksums)."
)


def index_format_from_codecs(
    index_codecs: Sequence[Any],
    chunks_per_shard: tuple[int, ...],
    location: str,
    *,
    array: str | None = None,
) -> IndexFormat:
    """The :class:`IndexFormat` for a sharding codec's ``index_codecs``: the plain
    (fast) one for ``bytes`` (either endianness) optionally followed by ``crc32c``; a
    :class:`ZarrIndexFormat` for any other chain of a fixed encoded size. A chain that
    is not of a fixed size (a compressor in it) is an
    :class:`~shardwise.errors.UnsupportedCodecError`."""
    from zarr.codecs import BytesCodec, Crc32cCodec

    codecs = tuple(index_codecs)
    where: Literal["start", "end"] = "start" if location == "start" else "end"
    if (
        len(codecs) in (1, 2)
        and isinstance(codecs[0], BytesCodec)
        and (len(codecs) == 1 or isinstance(codecs[1], Crc32cCodec))
    ):
        return IndexFormat(
            chunks_per_shard=chunks_per_shard,
            location=where,
            endian="big" if _compat.literal(codecs[0].endian) == "big" else "little",
            checksum=len(codecs) == 2,
        )
    names = [codec_name(c) for c in codecs]
    variable = [codec_name(c) for c in codecs if not _compat.is_fixed_size(c)]
    if variable or not codecs:
        raise UnsupportedCodecError(
            "shard index codecs of no fixed encoded size",
            expected="index codecs whose encoded size is fixed (array codecs such as "
            "transpose, bytes, checksums such as crc32c), as the sharding spec requires",
            found=f"{names}"
            + (f" ({', '.join(variable)} not of a fixed size)" if variable else ""),
            array=array,
            advice=_ADVICE,
        )
    try:
        return ZarrIndexFormat(chunks_per_shard, where, codecs=codecs)
    except Exception as e:
        raise UnsupportedCodecError(
            "shard index codecs that zarr-python cannot size",
            expected="index codecs that encode the index array (uint64, shape "
            f"{(*chunks_per_shard, 2)}) into a fixed number of bytes",
            found=f"{names}: {type(e).__name__}: {e}",
            array=array,
            advice=_ADVICE,
        ) from e


@dataclass(frozen=True, slots=True)
class ZarrIndexFormat(IndexFormat):
    """A shard index read and written through zarr-python's codec classes: any chain of
    a fixed encoded size (``codecs``, as the array's metadata lists them: array-array
    codecs, the array-bytes codec, bytes-bytes codecs). The same methods as
    :class:`IndexFormat` (``endian`` and ``checksum`` are unused: the codecs say).

    The codecs run synchronously on the index bytes, through each codec's synchronous
    methods where zarr-python has them (zarr 3.4 and later), else through its
    asynchronous ones (on zarr-python's event loop, or on a loop of their own when
    called inside a running one). A codec that fails to decode the index bytes (a
    checksum that does not match) is a :class:`~shardwise.errors.ChecksumError`."""

    codecs: tuple[Any, ...] = field(default=(), hash=False)
    # (codec evolved for its input, its input spec), in encode order; the encoded size
    _chain: tuple[tuple[Any, Any], ...] = field(
        init=False, repr=False, compare=False, hash=False, default=()
    )
    _nbytes: int = field(init=False, repr=False, compare=False, hash=False, default=0)
    _n_array: int = field(init=False, repr=False, compare=False, hash=False, default=0)

    def __post_init__(self) -> None:
        IndexFormat.__post_init__(self)
        from zarr.abc.codec import ArrayArrayCodec, ArrayBytesCodec, BytesBytesCodec
        from zarr.buffer import default_buffer_prototype
        from zarr.dtype import UInt64

        spec = _compat.ArraySpec(
            (*self.chunks_per_shard, 2),
            UInt64(endianness="little"),
            int(EMPTY),
            _compat.ArrayConfig.from_dict({"order": "C", "write_empty_chunks": False}),
            default_buffer_prototype(),
        )
        kinds = [
            0 if isinstance(c, ArrayArrayCodec) else 1 if isinstance(c, ArrayBytesCodec) else 2
            for c in self.codecs
        ]
        if (
            kinds.count(1) != 1
            or kinds != sorted(kinds)
            or not all(
                isinstance(c, ArrayArrayCodec | ArrayBytesCodec | BytesBytesCodec)
                for c in self.codecs
            )
        ):
            raise ValueError(
                "expected array-array codecs, one array-bytes codec, then bytes-bytes codecs"
            )
        chain = []
        size = 16 * self.nchunks
        for codec in self.codecs:
            evolved = codec.evolve_from_array_spec(spec)
            chain.append((evolved, spec))
            size = int(evolved.compute_encoded_size(size, spec))
            spec = evolved.resolve_metadata(spec)
        object.__setattr__(self, "_chain", tuple(chain))
        object.__setattr__(self, "_nbytes", size)
        object.__setattr__(self, "_n_array", kinds.index(1) + 1)

    def __repr__(self) -> str:
        return (
            f"ZarrIndexFormat(chunks_per_shard={self.chunks_per_shard}, "
            f"location={self.location!r}, codecs={list(self.codecs)})"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        # rebuilt from its fields (the evolved chain is derived, and rebuilt with them)
        return (_rebuild, (self.chunks_per_shard, self.location, self.codecs))

    @property
    def nbytes(self) -> int:
        """Encoded size of the index (the codecs' ``compute_encoded_size``)."""
        return self._nbytes

    def decode(
        self,
        raw: bytes | memoryview | npt.NDArray[np.uint8],
        *,
        array: str | None = None,
        key: str | None = None,
    ) -> Table:
        """Decode the index bytes (exactly :attr:`nbytes` of them) through the codecs
        into a table of shape ``chunks_per_shard + (2,)``, native uint64. Checks the
        length; the codecs check their checksums."""
        from zarr.buffer import default_buffer_prototype

        view = self._sized(raw, array=array, key=key)
        buf = default_buffer_prototype().buffer.from_array_like(np.frombuffer(view, np.uint8))
        value: Any = buf
        stage = len(self._chain)
        try:
            for stage in range(len(self._chain) - 1, -1, -1):
                codec, spec = self._chain[stage]
                value = _run(codec, "decode", value, spec)
            table = np.asarray(value.as_numpy_array())
        except Exception as e:
            checksum = stage >= self._n_array  # a bytes-bytes codec: a checksum
            raise (ChecksumError if checksum else CorruptShardError)(
                "shard index checksum mismatch" if checksum else "shard index does not decode",
                expected=f"index bytes that pass {codec_name(self._chain[stage][0])} "
                f"(index codecs {[codec_name(c) for c in self.codecs]})",
                found=f"{type(e).__name__}: {e}",
                array=array,
                key=key,
                advice="The index bytes are corrupt; rewrite the shard from its source.",
            ) from e
        shape = (*self.chunks_per_shard, 2)
        if table.shape != shape or table.dtype.kind != "u" or table.dtype.itemsize != 8:
            raise CorruptShardError(
                "shard index decodes to the wrong array",
                expected=f"uint64 of shape {shape}",
                found=f"{table.dtype} of shape {table.shape}",
                array=array,
                key=key,
                advice="The index bytes are corrupt; rewrite the shard from its source.",
            )
        return np.array(table, dtype=np.uint64, order="C")  # native, and its own memory

    def encode(self, table: Table) -> bytes:
        """Encode a table of shape ``chunks_per_shard + (2,)`` through the codecs."""
        from zarr.buffer import default_buffer_prototype

        table = np.ascontiguousarray(self._shaped(table), dtype=np.uint64)
        value: Any = default_buffer_prototype().nd_buffer.from_numpy_array(table)
        for codec, spec in self._chain:
            value = _run(codec, "encode", value, spec)
            if value is None:
                raise ValueError(f"index codec {codec_name(codec)} encoded nothing")
        out = bytes(value.to_bytes())
        if len(out) != self.nbytes:
            raise ValueError(
                f"index codecs {[codec_name(c) for c in self.codecs]} encoded {len(out)} "
                f"bytes, not the {self.nbytes} they declare"
            )
        return out


def _rebuild(
    chunks_per_shard: tuple[int, ...], location: Literal["start", "end"], codecs: tuple[Any, ...]
) -> ZarrIndexFormat:
    return ZarrIndexFormat(chunks_per_shard, location, codecs=codecs)


def _run(codec: Any, direction: str, value: Any, spec: Any) -> Any:
    """One codec's ``decode`` or ``encode`` of one value, synchronously: its synchronous
    method where zarr-python has one (``_decode_sync``/``_encode_sync``, zarr 3.4's
    ``SupportsSyncCodec``; a private name), else its public asynchronous one."""
    method = _compat.codec_sync_method(codec, direction)
    if method is not None:
        return method(value, spec)
    (out,) = _wait(getattr(codec, direction)([(value, spec)]))
    return out


def _wait(coro: Any) -> Any:
    """Run a coroutine to its end from synchronous code: on zarr-python's event loop,
    or, inside a running event loop (zarr's own, where an index is read in a coroutine,
    which ``sync`` refuses), on a loop of its own in a thread apart (made for the call:
    this is the fallback for codecs without synchronous methods)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return _compat.sync(coro)
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="shardwise-index") as ex:
        return ex.submit(asyncio.run, coro).result()
