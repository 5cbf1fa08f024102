"""The ground every codec module stands on: one chunk's codec chain, and where a decode
happens.

:class:`ChunkCodec` holds one chunk's shape, data type and fill value and the zarr v3
codec chain between them and bytes, with zarr-python's own pipeline for that chain (the
fallback for chains shardwise's fast paths do not cover); :class:`ChunkDecoder` and
:class:`ChunkEncoder` both build on it. :class:`Context` says where a decode happens
(array, store key, inner chunk) so that every error a decompressor, a checksum or a
decoder raises names the chunk it is about. They sit apart from the decoders and
encoders so that the bounded decompressors (``_decompress``), which know nothing of
chains, and both directions of the chain can share them without importing each other.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

import shardwise._compat as _compat
from shardwise.errors import ShardwiseError

__all__ = ["FAST_KINDS", "Bytes", "ChunkCodec", "Context", "codec_name"]

Bytes = bytes | memoryview | npt.NDArray[np.uint8]
# fixed-size numpy kinds the fast paths serialize with plain numpy views
FAST_KINDS = frozenset("biufcmM")


def codec_name(codec: Any) -> str:
    """A codec's name as zarr v3 metadata spells it (its class name where it has none),
    for messages."""
    try:
        return str(codec.to_dict()["name"])
    except Exception:
        return type(codec).__name__


E = TypeVar("E", bound=ShardwiseError)


class Context:
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


class ChunkCodec:
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
