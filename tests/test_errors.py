"""Bad input raises the documented error, naming the array, the store key and the chunk."""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest
import xarray as xr
import zarr
from zarr.codecs import BytesCodec, Crc32cCodec, ShardingCodec, ZstdCodec

import shardwise
from shardwise import ShardwiseError
from shardwise.errors import (
    ChecksumError,
    CorruptShardError,
    NotAZarrStoreError,
    TruncatedShardError,
    UnsupportedCodecError,
)
from shardwise.io.reader import ArrayReader


def write(tmp_path, *, location="end", index_crc=True, inner_crc=False, compress=True):
    """A 1-d array of 2 shards x 4 inner chunks of 8 float64 (shard key v/c/0, v/c/1)."""
    inner = [BytesCodec()]
    if compress:
        inner.append(ZstdCodec(level=1))
    if inner_crc:
        inner.append(Crc32cCodec())
    index_codecs = [BytesCodec(), Crc32cCodec()] if index_crc else [BytesCodec()]
    codec = ShardingCodec(
        chunk_shape=(8,), codecs=inner, index_codecs=index_codecs, index_location=location
    )
    root = zarr.open_group(tmp_path / "s.zarr", mode="w", zarr_format=3)
    a = root.create_array(
        "v",
        shape=(64,),
        chunks=(32,),
        dtype="f8",
        serializer=codec,
        compressors=None,
        dimension_names=["x"],
    )
    data = np.arange(64.0) ** 1.5
    a[:] = data
    return tmp_path / "s.zarr", data


def shard_path(store, i=0):
    return store / "v" / "c" / str(i)


def read_engine(store):
    return xr.open_dataset(store, engine="shardwise", consolidated=False).v.values


def read_one_chunk(store):
    """A read of one inner chunk: index + one ranged read (not the whole shard)."""
    return ArrayReader.open(store, "v")[9:12]


def read_last_chunk(store):
    """A ranged read of the last inner chunk of shard 0."""
    return ArrayReader.open(store, "v")[25:27]


def test_not_a_zarr_store(tmp_path):
    with pytest.raises(NotAZarrStoreError, match=r"not a Zarr store.*store key 'zarr\.json'"):
        xr.open_dataset(tmp_path / "nothing-here", engine="shardwise", consolidated=False)
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError):  # still caught by existing except clauses
        xr.open_dataset(tmp_path / "empty", engine="shardwise", consolidated=False)
    with pytest.raises(NotAZarrStoreError, match="no Zarr array"):
        ArrayReader.open(tmp_path / "empty", "v")


def test_unknown_codec(tmp_path):
    store, _ = write(tmp_path)
    meta_path = store / "v" / "zarr.json"
    meta = json.loads(meta_path.read_text())
    meta["codecs"][0]["configuration"]["codecs"][1]["name"] = "no_such_codec"
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(UnsupportedCodecError, match="'no_such_codec'") as info:
        xr.open_dataset(store, engine="shardwise", consolidated=False)
    assert info.value.key == "v/zarr.json"
    assert info.value.array == "v"
    with pytest.raises(UnsupportedCodecError, match=r"store key 'v/zarr\.json'"):
        ArrayReader.open(store, "v")


@pytest.mark.parametrize("reader", [read_engine, read_one_chunk])
def test_index_crc_mismatch(tmp_path, reader):
    store, _ = write(tmp_path)
    path = shard_path(store)
    raw = bytearray(path.read_bytes())
    raw[-10] ^= 0x01  # inside the index, before its checksum
    path.write_bytes(bytes(raw))
    with pytest.raises(ChecksumError, match="shard index crc32c mismatch") as info:
        reader(store)
    assert info.value.key == "v/c/0"
    assert info.value.array == "v"


@pytest.mark.parametrize("reader", [read_engine, read_one_chunk])
def test_inner_chunk_crc_mismatch(tmp_path, reader):
    store, _ = write(tmp_path, inner_crc=True)
    path = shard_path(store)
    raw = bytearray(path.read_bytes())
    fmt = shardwise.format.index.IndexFormat((4,))
    table = fmt.decode(fmt.split(bytes(raw)))
    offset = int(table[1, 0])
    raw[offset + 2] ^= 0xFF  # inner chunk (1,)
    path.write_bytes(bytes(raw))
    with pytest.raises(ChecksumError, match="inner chunk crc32c mismatch") as info:
        reader(store)
    assert (info.value.key, info.value.chunk) == ("v/c/0", (1,))


@pytest.mark.parametrize("reader", [read_engine, read_last_chunk])
def test_truncated_shard_index_at_start(tmp_path, reader):
    store, _ = write(tmp_path, location="start")
    path = shard_path(store)
    raw = path.read_bytes()
    path.write_bytes(raw[: len(raw) - 20])
    with pytest.raises(TruncatedShardError, match="store key 'v/c/0', inner chunk") as info:
        reader(store)
    assert info.value.chunk is not None


def test_truncated_shard_index_at_end_loses_its_index(tmp_path):
    """Cutting the end off a shard whose index is at the end cuts the index: the last
    bytes are no longer a valid index, which the checksum reports."""
    store, _ = write(tmp_path)
    path = shard_path(store)
    path.write_bytes(path.read_bytes()[:-7])
    with pytest.raises(ChecksumError, match="store key 'v/c/0'"):
        read_engine(store)


def test_shorter_than_index(tmp_path):
    store, _ = write(tmp_path)
    shard_path(store).write_bytes(b"tiny")
    with pytest.raises(TruncatedShardError, match="shard index has the wrong size"):
        read_engine(store)


def test_index_entry_outside_object_without_crc(tmp_path):
    store, _ = write(tmp_path, location="start", index_crc=False)
    path = shard_path(store)
    raw = bytearray(path.read_bytes())
    raw[16 * 2 : 16 * 2 + 8] = (len(raw) + 100).to_bytes(8, "little")  # chunk (2,) offset
    path.write_bytes(bytes(raw))
    with pytest.raises(TruncatedShardError, match="outside the shard object") as info:
        read_engine(store)
    assert info.value.chunk == (2,)
    with pytest.raises(TruncatedShardError, match="outside the shard object") as info:
        ArrayReader.open(store, "v")[16:17]
    assert info.value.chunk == (2,)


def test_undecodable_chunk(tmp_path):
    store, _ = write(tmp_path, location="start", index_crc=False)
    path = shard_path(store)
    raw = bytearray(path.read_bytes())
    offset = int.from_bytes(raw[16:24], "little")  # chunk (1,)
    raw[offset : offset + 4] = b"junk"  # breaks the zstd frame header
    path.write_bytes(bytes(raw))
    with pytest.raises(CorruptShardError, match="does not decode") as info:
        read_engine(store)
    assert (info.value.key, info.value.chunk) == ("v/c/0", (1,))


def test_missing_shard_reads_fill_value(tmp_path):
    store, data = write(tmp_path)
    shard_path(store, 1).unlink()
    out = read_engine(store)
    np.testing.assert_array_equal(out[:32], data[:32])
    assert (out[32:] == 0).all()


def test_errors_pickle_with_their_context():
    err = ChecksumError("bad", array="v", key="v/c/0", chunk=(1,), expected="1", found="2")
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is ChecksumError
    assert (back.array, back.key, back.chunk) == ("v", "v/c/0", (1,))
    assert str(back) == str(err)
    assert isinstance(back, ShardwiseError) and isinstance(back, ValueError)
