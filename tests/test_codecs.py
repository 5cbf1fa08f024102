"""Inner chunk decoding details: declared sizes, the scratch buffer, wrong sizes."""

from __future__ import annotations

import numcodecs
import numpy as np
import pytest
import zarr
from zarr.codecs import BytesCodec, GzipCodec, ZstdCodec

from shardwise import CorruptShardError
from shardwise.codecs import ChunkDecoder, decoded_size

zstandard = pytest.importorskip("zstandard")


@pytest.mark.parametrize("codec", [numcodecs.Zstd(), numcodecs.GZip(), numcodecs.Blosc()])
@pytest.mark.parametrize("nbytes", [1, 200, 255, 256, 300, 65535, 65792, 1 << 20])
def test_declared_size_matches_decoded_size(codec, nbytes):
    data = np.random.default_rng(nbytes).integers(0, 4, nbytes, dtype=np.uint8)
    encoded = codec.encode(data)
    size = decoded_size(codec.codec_id, encoded)
    if size is not None:  # every writer here declares it; None only means "unknown"
        assert size == len(codec.decode(encoded)) == nbytes


def test_zstd_frame_without_content_size_is_unknown():
    cctx = zstandard.ZstdCompressor(write_content_size=False)
    frame = cctx.compress(b"x" * 1000)
    assert decoded_size("zstd", frame) is None
    assert decoded_size("zstd", b"not zstd") is None


def decoder(compressor, shape=(4, 5), dtype="f8"):
    zdtype = zarr.core.dtype.parse_dtype(np.dtype(dtype), zarr_format=3)
    return ChunkDecoder([BytesCodec(), compressor], shape, zdtype, 0.0, array="v")


@pytest.mark.parametrize("compressor", [ZstdCodec(level=1), GzipCodec(level=1)])
def test_scratch_results_are_reused_plain_ones_are_not(compressor):
    dec = decoder(compressor)
    a, b = np.arange(20.0).reshape(4, 5), -np.arange(20.0).reshape(4, 5)
    codec = numcodecs.Zstd() if isinstance(compressor, ZstdCodec) else numcodecs.GZip()
    ea, eb = codec.encode(a), codec.encode(b)
    first = dec.decode(ea, scratch=True)
    np.testing.assert_array_equal(first, a)
    dec.decode(eb, scratch=True)
    np.testing.assert_array_equal(first, b)  # the documented reuse
    kept = dec.decode(ea)
    dec.decode(eb)
    np.testing.assert_array_equal(kept, a)


def test_frame_without_content_size_takes_the_plain_path():
    dec = decoder(ZstdCodec(level=1))
    a = np.arange(20.0).reshape(4, 5)
    frame = zstandard.ZstdCompressor(write_content_size=False).compress(a.tobytes())
    np.testing.assert_array_equal(dec.decode(frame, scratch=True), a)


@pytest.mark.parametrize("nvalues", [19, 21])
def test_wrong_decoded_size_is_reported(nvalues):
    dec = decoder(ZstdCodec(level=1))
    encoded = numcodecs.Zstd().encode(np.arange(float(nvalues)))
    with pytest.raises(CorruptShardError, match="wrong size") as info:
        dec.decode(encoded, key="v/c/0", chunk=(0, 0), scratch=True)
    assert info.value.chunk == (0, 0)


def test_big_endian_chunks_come_out_native():
    zdtype = zarr.core.dtype.parse_dtype(np.dtype("i4"), zarr_format=3)
    dec = ChunkDecoder([BytesCodec(endian="big"), ZstdCodec()], (3,), zdtype, 0)
    out = dec.decode(numcodecs.Zstd().encode(np.array([1, 2, 3], dtype=">i4")), scratch=True)
    assert out.dtype == np.dtype("i4") and out.dtype.isnative
    np.testing.assert_array_equal(out, [1, 2, 3])


@pytest.mark.parametrize("fill", [np.nan, 0.0, -1.0])
def test_is_fill(fill):
    from shardwise.codecs import is_fill

    a = np.full((4, 5), fill)
    assert is_fill(a, fill) and is_fill(a[:, 1:3], fill) and is_fill(a[:0], fill)
    for where in [(0, 0), (3, 4), (2, 2)]:  # first, last, middle element differs
        b = a.copy()
        b[where] = 7.0
        assert not is_fill(b, fill)
    assert not is_fill(np.full(3, np.nan), 0.0)
    assert is_fill(np.zeros(3, "i2"), 0) and not is_fill(np.arange(3, dtype="i2"), 0)


@pytest.mark.parametrize(
    "codecs",
    [
        [BytesCodec(), ZstdCodec(level=1)],
        [BytesCodec(), ZstdCodec(level=5, checksum=True)],
        [BytesCodec(endian="big"), GzipCodec(level=3)],
        [BytesCodec(), ZstdCodec(level=0), zarr.codecs.Crc32cCodec()],
        [BytesCodec()],
        [zarr.codecs.TransposeCodec(order=(1, 0)), BytesCodec(), ZstdCodec(level=1)],
    ],
)
def test_encoder_output_decodes_with_zarr(tmp_path, codecs):
    """What ChunkEncoder's fast path writes, zarr-python reads (as an unsharded chunk)."""
    import pickle

    from shardwise.codecs import ChunkEncoder

    data = np.arange(24.0).reshape(6, 4)
    arr = zarr.create_array(
        tmp_path / "b",
        shape=(6, 4),
        chunks=(6, 4),
        dtype="f8",
        fill_value=0.0,
        filters=[c for c in codecs if isinstance(c, zarr.codecs.TransposeCodec)],
        serializer=next(c for c in codecs if isinstance(c, BytesCodec)),
        compressors=[
            c for c in codecs if not isinstance(c, BytesCodec | zarr.codecs.TransposeCodec)
        ],
    )
    enc = ChunkEncoder(arr.metadata.codecs, (6, 4), arr.metadata.data_type, 0.0)
    enc = pickle.loads(pickle.dumps(enc))  # as it travels to dask workers
    assert enc._fast is not None
    (tmp_path / "b" / "c" / "0").mkdir(parents=True)
    (tmp_path / "b" / "c" / "0" / "0").write_bytes(
        enc.encode(np.asfortranarray(data))
    )  # gathered via scratch
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "b")[...], data)
