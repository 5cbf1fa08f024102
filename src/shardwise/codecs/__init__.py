"""The codec layer: encoding and decoding inner chunks (shardwise's own fast paths for
bytes/transpose/zstd/gzip/zlib/blosc/lz4/crc32c, zarr-python's pipeline for the rest),
with every decompressed size bounded before it is allocated. Imports only ``format`` below it."""

from shardwise.codecs.chunk import (
    ChunkDecoder,
    ChunkEncoder,
    ShardDecoder,
    decoded_size,
    index_format_from_codecs,
    is_fill,
)
from shardwise.codecs.chunk import _Context as Context
from shardwise.codecs.chunk import _verify_crc32c as verify_crc32c

__all__ = [
    "ChunkDecoder",
    "ChunkEncoder",
    "Context",
    "ShardDecoder",
    "decoded_size",
    "index_format_from_codecs",
    "is_fill",
    "verify_crc32c",
]
