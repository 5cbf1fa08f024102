"""The codec layer: encoding and decoding inner chunks (shardwise's own fast paths for
bytes/transpose/zstd/gzip/zlib/blosc/lz4/crc32c, zarr-python's pipeline for the rest),
with every decompressed size bounded before it is allocated. Imports only ``format`` below it.

The implementation is private, one job a module, each importing only those before it:
``_chain`` (one chunk's codec chain, and the :class:`Context` errors name), ``_zstd``
(shardwise's libzstd binding, both ways), ``_decompress`` (the bounded decompressors and
the crc32c check), ``_decode`` (:class:`ChunkDecoder`, :class:`ShardDecoder`) and
``_encode`` (:class:`ChunkEncoder`); ``_index`` (a sharding codec's index codecs: the
:class:`~shardwise.format.index.IndexFormat` for them, :class:`ZarrIndexFormat` for
chains only zarr-python's codecs run) stands apart, imported by ``_decode``. Other layers
import from here."""

from shardwise.codecs._chain import Context, codec_name
from shardwise.codecs._decode import ChunkDecoder, ShardDecoder
from shardwise.codecs._decompress import decoded_size, verify_crc32c
from shardwise.codecs._encode import ChunkEncoder, is_fill
from shardwise.codecs._index import ZarrIndexFormat, index_format_from_codecs

__all__ = [
    "ChunkDecoder",
    "ChunkEncoder",
    "Context",
    "ShardDecoder",
    "ZarrIndexFormat",
    "codec_name",
    "decoded_size",
    "index_format_from_codecs",
    "is_fill",
    "verify_crc32c",
]
