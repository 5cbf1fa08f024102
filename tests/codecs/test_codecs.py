"""Inner chunk decoding details: declared sizes, the scratch buffer, wrong sizes."""

from __future__ import annotations

import enum

import numcodecs
import numpy as np
import pytest
import zarr
from zarr.codecs import BytesCodec, Crc32cCodec, GzipCodec, ZstdCodec

import shardwise._compat as _compat
from shardwise.codecs import ChunkDecoder, ChunkEncoder, decoded_size
from shardwise.codecs._index import index_format_from_codecs
from shardwise.errors import CorruptShardError

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


@pytest.mark.parametrize(
    ("nvalues", "message"),
    [(19, "wrong size"), (21, "decompresses to more than the chunk holds.*claims 168 bytes")],
)
def test_wrong_decoded_size_is_reported(nvalues, message):
    """A frame declaring less than the chunk decodes and is reported; one declaring
    more is refused before it is decompressed."""
    dec = decoder(ZstdCodec(level=1))
    encoded = numcodecs.Zstd().encode(np.arange(float(nvalues)))
    with pytest.raises(CorruptShardError, match=message) as info:
        dec.decode(encoded, key="v/c/0", chunk=(0, 0), scratch=True)
    assert info.value.chunk == (0, 0)


def test_big_endian_chunks_come_out_native():
    zdtype = zarr.core.dtype.parse_dtype(np.dtype("i4"), zarr_format=3)
    dec = ChunkDecoder([BytesCodec(endian="big"), ZstdCodec()], (3,), zdtype, 0)
    out = dec.decode(numcodecs.Zstd().encode(np.array([1, 2, 3], dtype=">i4")), scratch=True)
    assert out.dtype == np.dtype("i4") and out.dtype.isnative
    np.testing.assert_array_equal(out, [1, 2, 3])


class OldEnum(enum.Enum):
    """How zarr 3.2 and 3.3 hold codec settings (``Endian``, ``ShardingCodecIndexLocation``):
    enums that neither equal nor print as the spec's strings."""

    little = "little"
    big = "big"
    start = "start"
    end = "end"


def as_in_zarr_3_2(codec, **settings):
    for name, value in settings.items():
        object.__setattr__(codec, name, value)  # a frozen dataclass, as zarr 3.2 made it
    return codec


@pytest.mark.parametrize("order", ["little", "big"])
def test_settings_held_as_enums_are_read_by_their_value(order):
    assert OldEnum[order] != order  # what comparing them as they are gets wrong
    stored = np.dtype("<i4" if order == "little" else ">i4")
    zdtype = zarr.core.dtype.parse_dtype(np.dtype("i4"), zarr_format=3)
    codec = as_in_zarr_3_2(BytesCodec(endian=order), endian=OldEnum[order])
    dec = ChunkDecoder([codec, ZstdCodec()], (3,), zdtype, 0)
    out = dec.decode(numcodecs.Zstd().encode(np.array([1, 2, 3], dtype=stored)), scratch=True)
    np.testing.assert_array_equal(out, [1, 2, 3])
    enc = ChunkEncoder([codec, ZstdCodec()], (3,), zdtype, 0)
    raw = numcodecs.Zstd().decode(enc.encode(np.array([1, 2, 3], dtype="i4")))
    np.testing.assert_array_equal(np.frombuffer(raw, stored), [1, 2, 3])
    for where in ("start", "end"):
        fmt = index_format_from_codecs(
            [codec, Crc32cCodec()], (2,), _compat.literal(OldEnum[where])
        )
        assert (fmt.location, fmt.endian, fmt.checksum) == (where, order, True)


def one_chunk_array(path, codecs):
    """A 6 x 4 float64 array of one chunk through ``codecs`` (a transpose, the bytes
    codec, compressors), as zarr-python makes it."""
    return zarr.create_array(
        path,
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
    arr = one_chunk_array(tmp_path / "b", codecs)
    enc = ChunkEncoder(arr.metadata.codecs, (6, 4), arr.metadata.data_type, 0.0)
    enc = pickle.loads(pickle.dumps(enc))  # as it travels to dask workers
    assert enc._fast is not None
    (tmp_path / "b" / "c" / "0").mkdir(parents=True)
    (tmp_path / "b" / "c" / "0" / "0").write_bytes(
        enc.encode(np.asfortranarray(data))
    )  # gathered via scratch
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "b")[...], data)


@pytest.mark.parametrize(
    ("codecs", "direct"),
    [
        ([BytesCodec(), ZstdCodec(level=1)], True),
        ([BytesCodec(), GzipCodec(level=1)], True),
        ([BytesCodec(), zarr.codecs.BloscCodec(cname="lz4")], True),
        ([BytesCodec(), ZstdCodec(level=1), zarr.codecs.Crc32cCodec()], True),  # checked first
        ([BytesCodec(), zarr.codecs.Crc32cCodec(), ZstdCodec(level=1)], False),  # crc inside
        ([BytesCodec(endian="big"), ZstdCodec(level=1)], False),  # swapped on the way out
        ([zarr.codecs.TransposeCodec(order=(1, 0)), BytesCodec(), ZstdCodec()], False),
        ([BytesCodec()], False),  # nothing to decompress: the plain view is no copy either
    ],
)
def test_decode_into_writes_the_chunk_in_place_where_the_chain_allows(tmp_path, codecs, direct):
    """decode_into gives what decode gives (checked against zarr-python's own encoding),
    straight into the caller's memory, and leaves that memory alone where it cannot."""
    data = np.random.default_rng(1).normal(size=(6, 4)).round(2)
    arr = one_chunk_array(tmp_path / "b", codecs)
    arr[...] = data
    encoded = (tmp_path / "b" / "c" / "0" / "0").read_bytes()
    dec = ChunkDecoder(arr.metadata.codecs, (6, 4), arr.metadata.data_type, 0.0, array="b")
    assert dec.can_decode_into is direct
    out = np.full((6, 12), -7.0)
    dest = out[:, 4:8]  # not contiguous: never written in place
    assert not dec.decode_into(encoded, dest, key="b/c/0/0", chunk=(0, 0))
    rows = np.full((3, 6, 4), -7.0)
    assert dec.decode_into(encoded, rows[1], key="b/c/0/0", chunk=(0, 0)) is direct
    np.testing.assert_array_equal(rows[1], data if direct else -7.0)
    np.testing.assert_array_equal(rows[[0, 2]], -7.0)
    np.testing.assert_array_equal(dec.decode(encoded), data)
    assert (out == -7.0).all()


def test_decode_into_refuses_a_frame_of_another_size_and_reports_corruption():
    dec = decoder(ZstdCodec(level=1))
    dest = np.full((4, 5), -7.0)
    short = numcodecs.Zstd().encode(np.arange(19.0))
    assert not dec.decode_into(short, dest)  # decode() then reports the wrong size
    assert (dest == -7.0).all()
    values = np.arange(20.0).reshape(4, 5)
    no_size = zstandard.ZstdCompressor(write_content_size=False).compress(values.tobytes())
    assert dec.decode_into(no_size, dest)  # no declared size: decompressed in place, bounded
    np.testing.assert_array_equal(dest, values)
    dest[...] = -7.0
    assert not dec.decode_into(numcodecs.Zstd().encode(np.arange(20.0)), dest[:2])  # shape
    frame = numcodecs.Zstd().encode(np.arange(20.0))[:-3]  # declares its size, cut short
    with pytest.raises(CorruptShardError, match="does not decode") as info:
        dec.decode_into(frame, dest, key="v/c/1/0", chunk=(1, 0))
    assert (info.value.key, info.value.chunk) == ("v/c/1/0", (1, 0))
