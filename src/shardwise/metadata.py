"""Array metadata, read through zarr-python and reduced to what the shard engine needs."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from shardwise.errors import UnsupportedArrayError, UnsupportedCodecError
from shardwise.layout import ShardLayout

__all__ = ["ArrayInfo", "unknown_codec_error"]


def unknown_codec_error(store: Any, prefix: str, error: Exception) -> UnsupportedCodecError:
    """Turn zarr-python's ``UnknownCodecError`` into one that names the array and the
    metadata key that asks for the codec (found by reading the ``zarr.json`` documents
    under ``prefix``; only done when opening has already failed)."""
    from zarr.core.sync import sync

    match = re.search(r"codec '([^']+)'", str(error))
    codec = match.group(1) if match else None
    key = array = None
    if codec is not None and store is not None:
        try:
            key = sync(_find_codec_user(store, prefix.strip("/"), codec))
        except Exception:  # the error below is what matters; finding the key is a bonus
            key = None
    if key is not None:
        array = key.removesuffix("zarr.json").strip("/") or "/"
    return UnsupportedCodecError(
        "the array's metadata names a codec zarr-python does not know",
        expected="a codec registered with zarr-python",
        found=repr(codec) if codec else str(error),
        array=array,
        key=key,
        advice="Install the package that registers this codec with zarr-python "
        "(zarr.registry.register_codec), then open again.",
    )


async def _find_codec_user(store: Any, prefix: str, codec: str) -> str | None:
    from zarr.core.buffer import default_buffer_prototype

    async for key in store.list_prefix(f"{prefix}/" if prefix else ""):
        if not key.endswith("zarr.json"):
            continue
        buf = await store.get(key, default_buffer_prototype())
        if buf is not None and _names_codec(json.loads(buf.to_bytes()).get("codecs"), codec):
            return str(key)
    return None


def _names_codec(codecs: Any, name: str) -> bool:
    if isinstance(codecs, list):
        return any(_names_codec(c, name) for c in codecs)
    if isinstance(codecs, dict):
        return codecs.get("name") == name or any(
            _names_codec(v, name) for v in codecs.values() if isinstance(v, list | dict)
        )
    return False


@dataclass(frozen=True)
class ArrayInfo:
    """A Zarr v3 array's geometry, data type, fill value and codecs.

    ``path`` is the array's path inside its store ("" for an array at the root);
    ``metadata`` is zarr-python's ``ArrayV3Metadata``.
    """

    path: str
    metadata: Any
    layout: ShardLayout

    @classmethod
    def from_metadata(cls, metadata: Any, path: str = "") -> ArrayInfo:
        from zarr.core.metadata import ArrayV3Metadata
        from zarr.core.metadata.v3 import RectilinearChunkGridMetadata, RegularChunkGridMetadata

        name = path or "/"
        if not isinstance(metadata, ArrayV3Metadata):
            raise UnsupportedArrayError(
                "not a Zarr v3 array",
                expected="zarr_format 3",
                found=f"zarr_format {getattr(metadata, 'zarr_format', '?')}",
                array=name,
                advice="Read Zarr v2 arrays with engine='zarr'.",
            )
        if metadata.storage_transformers:
            raise UnsupportedArrayError(
                "storage transformers are not supported",
                expected="no storage_transformers",
                found=str(list(metadata.storage_transformers)),
                array=name,
                advice="Data in the 2022 sharding storage-transformer draft must be migrated "
                "to the sharding_indexed codec.",
            )
        grid = metadata.chunk_grid
        shards: list[int | tuple[int, ...]]
        if isinstance(grid, RegularChunkGridMetadata):
            shards = list(grid.chunk_shape)
        elif isinstance(grid, RectilinearChunkGridMetadata):
            shards = list(grid.chunk_shapes)
        else:
            raise UnsupportedArrayError(
                "unknown chunk grid",
                expected="'regular' or 'rectilinear'",
                found=type(grid).__name__,
                array=name,
            )
        sharding = metadata.sharding_codec
        inner = None if sharding is None else tuple(sharding.chunk_shape)
        try:
            layout = ShardLayout.build(metadata.shape, shards, inner)
        except ValueError as e:
            raise UnsupportedArrayError(
                "impossible chunk geometry",
                expected="inner chunks that divide every shard",
                found=str(e),
                array=name,
            ) from e
        return cls(path=path.strip("/"), metadata=metadata, layout=layout)

    @property
    def name(self) -> str:
        return self.path or "/"

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.metadata.shape)

    @property
    def ndim(self) -> int:
        return len(self.metadata.shape)

    @property
    def zdtype(self) -> Any:
        return self.metadata.data_type

    @property
    def dtype(self) -> np.dtype[Any]:
        return self.metadata.data_type.to_native_dtype()

    @property
    def fill_value(self) -> Any:
        return self.metadata.fill_value

    @property
    def sharding(self) -> Any | None:
        """zarr-python's ``ShardingCodec`` when the array is sharded, else None."""
        return self.metadata.sharding_codec

    @property
    def codecs(self) -> tuple[Any, ...]:
        return tuple(self.metadata.codecs)

    @property
    def dimension_names(self) -> tuple[str | None, ...] | None:
        names = self.metadata.dimension_names
        return None if names is None else tuple(names)

    @property
    def attributes(self) -> dict[str, Any]:
        return dict(self.metadata.attributes)

    @property
    def shard_shape(self) -> tuple[int | tuple[int, ...], ...]:
        """The shard (outer chunk) size per dimension; a tuple of sizes along a
        rectilinear dimension."""
        return tuple(d.shards for d in self.layout.dims)

    @property
    def inner_chunk_shape(self) -> tuple[int, ...] | None:
        s = self.sharding
        return None if s is None else tuple(s.chunk_shape)

    def key(self, shard: tuple[int, ...]) -> str:
        """The store key of a shard (of a chunk, for an unsharded array)."""
        k = self.metadata.encode_chunk_key(shard)
        return f"{self.path}/{k}" if self.path else str(k)
