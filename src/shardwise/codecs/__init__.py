"""The codec layer: encoding and decoding inner chunks (shardwise's own fast paths for
bytes/transpose/zstd/gzip/zlib/blosc/lz4/crc32c, zarr-python's pipeline for the rest),
with every decompressed size bounded before it is allocated. Imports only ``format`` below it."""
