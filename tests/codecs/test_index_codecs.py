"""Shard indexes of any fixed-size index codec chain zarr-python writes: transpose on the
index array, bytes in either byte order, zarr's crc32c and numcodecs' checksums, at the
start or the end of the shard. Arrays are written by zarr-python (with partial shards,
a missing shard and missing inner chunks) and read by every reader shardwise has, written
into with a region write, verified and inventoried; every value is compared with what
zarr-python reads."""

from __future__ import annotations

import json
import pickle
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dask.array as da
import numpy as np
import pytest
import xarray as xr
import zarr
import zarr.codecs.numcodecs as znc
from zarr.abc.codec import BytesBytesCodec
from zarr.codecs import BytesCodec, Crc32cCodec, GzipCodec, ShardingCodec, TransposeCodec

import shardwise
from shardwise import ShardwiseError, _compat
from shardwise.codecs import ZarrIndexFormat, index_format_from_codecs
from shardwise.errors import (
    ChecksumError,
    CorruptShardError,
    TruncatedShardError,
    UnsupportedCodecError,
)
from shardwise.format.index import IndexFormat
from shardwise.io.stores import ReadOptions

SHAPE = (16, 7)  # shards of (6, 4): a partial shard along each axis, and a 3 x 2 grid
SHARD = (6, 4)
INNER = (2, 2)
CPS = (3, 2)  # inner chunks per shard
WRITTEN = 10  # rows written: the third row of shards is missing
# the index codecs and, for chains with a checksum, True
CHAINS: dict[str, tuple[list[Any], bool]] = {
    "transpose-bytes-big-crc32c": (
        [TransposeCodec(order=(1, 0, 2)), BytesCodec(endian="big"), Crc32cCodec()],
        True,
    ),
    "transpose-bytes": ([TransposeCodec(order=(2, 1, 0)), BytesCodec(endian="little")], False),
    "bytes-big": ([BytesCodec(endian="big")], False),
    "numcodecs.crc32": ([BytesCodec(endian="little"), znc.CRC32()], True),
    "numcodecs.crc32-at-end": ([BytesCodec(endian="little"), znc.CRC32(location="end")], True),
    "numcodecs.crc32c": ([BytesCodec(endian="little"), znc.CRC32C()], True),
    "numcodecs.adler32": ([BytesCodec(endian="big"), znc.Adler32()], True),
    "numcodecs.fletcher32": ([BytesCodec(endian="little"), znc.Fletcher32()], True),
    "numcodecs.jenkins_lookup3": ([BytesCodec(endian="little"), znc.JenkinsLookup3()], True),
    "crc32c-twice": ([BytesCodec(endian="little"), Crc32cCodec(), znc.Adler32()], True),
}
LOCATIONS = ["start", "end"]


@dataclass(frozen=True)
class Written:
    path: Path  # the group; the array is "v" in it
    codecs: tuple[Any, ...]
    location: str
    checksum: bool

    @property
    def array(self) -> Path:
        return self.path / "v"

    def zarr_values(self) -> np.ndarray:
        return zarr.open_array(self.array, mode="r")[...]


def values() -> np.ndarray:
    """The rows written: fill-valued (0) inner chunks that zarr-python does not store."""
    v = np.arange(1, WRITTEN * SHAPE[1] + 1, dtype="i4").reshape(WRITTEN, SHAPE[1])
    v[0:2, 0:4] = 0  # two whole inner chunks of shard (0, 0)
    v[6:8, 4:6] = 0  # one of shard (1, 1)
    return v


def write(tmp_path: Path, name: str, location: str) -> Written:
    codecs, checksum = CHAINS[name]
    path = tmp_path / f"{name}-{location}.zarr"
    root = zarr.open_group(path, mode="w", zarr_format=3)
    arr = root.create_array(
        "v",
        shape=SHAPE,
        dtype="i4",
        chunks=SHARD,  # with a sharding serializer, this is the shard shape
        serializer=ShardingCodec(chunk_shape=INNER, index_codecs=codecs, index_location=location),
        compressors=None,
        fill_value=0,
        dimension_names=("y", "x"),
    )
    arr[:WRITTEN] = values()
    return Written(path, tuple(codecs), location, checksum)


@pytest.fixture(params=[(n, loc) for n in CHAINS for loc in LOCATIONS], ids=lambda p: "-".join(p))
def written(request, tmp_path) -> Written:
    name, location = request.param
    return write(tmp_path, name, location)


def shard_keys(w: Written) -> list[Path]:
    return sorted(p for p in (w.array / "c").rglob("*") if p.is_file())


def index_nbytes(w: Written) -> int:
    sharding = zarr.open_array(w.array, mode="r").metadata.codecs[0]
    return index_format_from_codecs(sharding.index_codecs, CPS, w.location).nbytes


# -- the layout: which chains take the fast path -----------------------------------------
def test_the_default_chains_keep_the_fast_path():
    for codecs, endian, checksum in [
        ([BytesCodec(endian="little"), Crc32cCodec()], "little", True),
        ([BytesCodec(endian="big"), Crc32cCodec()], "big", True),
        ([BytesCodec(endian="little")], "little", False),
        ([BytesCodec(endian="big")], "big", False),
    ]:
        fmt = index_format_from_codecs(codecs, CPS, "end")
        assert type(fmt) is IndexFormat
        assert (fmt.endian, fmt.checksum) == (endian, checksum)
    for name, (codecs, _) in CHAINS.items():
        fmt = index_format_from_codecs(codecs, CPS, "start")
        assert isinstance(fmt, ZarrIndexFormat if name != "bytes-big" else IndexFormat), name


@pytest.mark.parametrize("name", list(CHAINS))
@pytest.mark.parametrize("location", LOCATIONS)
def test_index_bytes_decode_and_encode_as_zarr_python_writes_them(tmp_path, name, location):
    """Each stored shard's index bytes decode to entries that cut out the inner chunks
    zarr-python stored, and encode back to the very same bytes; the size is what the
    codecs declare (and what zarr-python left room for)."""
    w = write(tmp_path, name, location)
    sharding = zarr.open_array(w.array, mode="r").metadata.codecs[0]
    fmt = index_format_from_codecs(sharding.index_codecs, CPS, location, array="v")
    again = pickle.loads(pickle.dumps(fmt))  # dask sends it to workers
    assert again == fmt and again.nbytes == fmt.nbytes
    inner_nbytes = 2 * 2 * 4
    for key in shard_keys(w):
        blob = key.read_bytes()
        raw = bytes(fmt.split(blob))
        table = again.checked(raw, size=len(blob), array="v", key=str(key), max_nbytes=None)
        present = table[..., 0] != 2**64 - 1
        assert (table[present][:, 1] == inner_nbytes).all()
        assert len(blob) == fmt.nbytes + inner_nbytes * int(present.sum())
        assert fmt.encode(table) == raw
        start, _ = fmt.data_bounds(len(blob))
        assert int(table[present][:, 0].min()) == start


# -- reading -----------------------------------------------------------------------------
def test_array_reader_reads_what_zarr_python_reads(written):
    expected = written.zarr_values()
    assert (expected[WRITTEN:] == 0).all() and (expected[:WRITTEN] == values()).all()
    whole = shardwise.ArrayReader.open(written.array)
    np.testing.assert_array_equal(whole[...], expected)
    ranged = shardwise.ArrayReader.open(  # the index alone, then byte ranges
        written.array,
        options=ReadOptions(whole_shard_fraction=float("inf"), index_cache=False, coalesce_gap=0),
    )
    np.testing.assert_array_equal(ranged[...], expected)
    np.testing.assert_array_equal(ranged[3:9, 1:6], expected[3:9, 1:6])


def test_from_zarr_reads_what_zarr_python_reads(written):
    expected = written.zarr_values()
    np.testing.assert_array_equal(shardwise.array.from_zarr(written.path, "v").compute(), expected)
    x = shardwise.array.from_zarr(written.path, "v", chunks=(2, 4))  # dask chunks inside shards
    np.testing.assert_array_equal(x.compute(), expected)


def test_xarray_engine_reads_what_zarr_python_reads(written):
    ours = xr.open_dataset(written.path, engine="shardwise", consolidated=False)
    theirs = xr.open_dataset(written.path, engine="zarr", consolidated=False)
    xr.testing.assert_identical(ours.load(), theirs.load())
    raw = xr.open_dataset(
        written.path, engine="shardwise", consolidated=False, mask_and_scale=False, chunks={}
    )
    np.testing.assert_array_equal(raw["v"].values, written.zarr_values())


# -- writing into such an array -----------------------------------------------------------
def test_region_write_merges_into_shards_zarr_python_reads(written):
    before = written.zarr_values()
    new = -np.arange(1, 10 * 5 + 1, dtype="i4").reshape(10, 5)
    new[0:1, 0:1] = 0  # a fill value, in a chunk that also holds other values
    region = (slice(3, 13), slice(1, 6))  # partial shards, partial inner chunks, a new shard
    shardwise.array.to_zarr(
        da.from_array(new, chunks=(3, 5)), written.path, path="v", region=region
    )
    expected = before.copy()
    expected[region] = new
    np.testing.assert_array_equal(written.zarr_values(), expected)
    np.testing.assert_array_equal(shardwise.ArrayReader.open(written.array)[...], expected)
    assert shardwise.verify(written.path, decode=True).ok


# -- tools ---------------------------------------------------------------------------------
def test_verify_and_inventory(written):
    for decode in (False, True):
        report = shardwise.verify(written.path, decode=decode)
        assert report.ok, str(report)
        assert report.shards == len(shard_keys(written)) == 4  # 2 x 2 shards of 3 x 2
    inv = shardwise.inventory(written.path, "v")
    expected_present = np.zeros((8, 4), dtype=bool)
    full = written.zarr_values()
    for i in range(8):
        for j in range(4):
            expected_present[i, j] = bool(full[2 * i : 2 * i + 2, 2 * j : 2 * j + 2].any())
    np.testing.assert_array_equal(inv["present"].values, expected_present)
    np.testing.assert_array_equal(inv["stored_bytes"].values, np.where(expected_present, 16, 0))
    assert inv.attrs["index_bytes"] == 4 * index_nbytes(written)


def _flip_index_byte(w: Written) -> str:
    """Flip one bit of the index bytes of shard (0, 0) (its entries, not its checksum)."""
    key = w.array / "c" / "0" / "0"
    blob = bytearray(key.read_bytes())
    n = index_nbytes(w)
    at = n // 2 if w.location == "start" else len(blob) - n // 2
    blob[at] ^= 0x01
    key.write_bytes(bytes(blob))
    return "c/0/0"


@pytest.mark.parametrize("name", [n for n, (_, crc) in CHAINS.items() if crc])
@pytest.mark.parametrize("location", LOCATIONS)
def test_corrupt_index_is_a_checksum_error(tmp_path, name, location):
    w = write(tmp_path, name, location)
    key = _flip_index_byte(w)
    with pytest.raises(Exception, match="checksum"):  # zarr-python refuses it too
        w.zarr_values()
    for options in (
        None,
        ReadOptions(whole_shard_fraction=float("inf"), index_cache=False, coalesce_gap=0),
    ):
        reader = shardwise.ArrayReader.open(w.path, "v", options=options)
        with pytest.raises(ChecksumError) as info:
            reader[0:2, 0:4]
        assert info.value.array == "v" and info.value.key.endswith(key)
        assert isinstance(info.value, ShardwiseError) and isinstance(info.value, ValueError)
    with pytest.raises(ChecksumError):
        shardwise.array.from_zarr(w.path, "v").compute()
    for decode in (False, True):
        report = shardwise.verify(w.path, decode=decode)
        assert [(p.key.endswith(key), p.error) for p in report.problems] == [
            (True, "ChecksumError")
        ]
    with pytest.raises(ChecksumError):
        shardwise.inventory(w.path, "v")


@pytest.mark.parametrize("name", ["transpose-bytes-big-crc32c", "numcodecs.fletcher32"])
@pytest.mark.parametrize("location", LOCATIONS)
def test_entries_are_checked_after_the_codecs_decode_them(tmp_path, name, location):
    """An index whose checksum is right but whose entries are not (an entry larger than
    an inner chunk can be, one past the end of the shard, one overlapping another),
    encoded through the same codecs: refused as the default chain's would be."""
    w = write(tmp_path, name, location)
    sharding = zarr.open_array(w.array, mode="r").metadata.codecs[0]
    fmt = index_format_from_codecs(sharding.index_codecs, CPS, location)
    key = w.array / "c" / "0" / "1"
    blob = key.read_bytes()
    table = fmt.decode(fmt.split(blob))
    data = blob[fmt.nbytes :] if location == "start" else blob[: -fmt.nbytes]

    def rewrite(t: np.ndarray) -> None:
        index = fmt.encode(t)
        key.write_bytes(index + data if location == "start" else data + index)

    ranged = ReadOptions(whole_shard_fraction=float("inf"), index_cache=False, coalesce_gap=0)
    large, past, overlap = table.copy(), table.copy(), table.copy()
    large[1, 1] = (table[..., 0].min(), 32)  # inside the shard, but 2 x 2 int32 are 16
    past[1, 1, 0] = len(blob)
    overlap[1, 0] = (overlap[1, 1, 0] + 1, overlap[1, 1, 1])
    for bad, error, match in [
        (large, CorruptShardError, "larger than its codecs make one"),
        (past, TruncatedShardError, r"(outside|past the end of) the shard object"),
        (overlap, CorruptShardError, "overlap"),
    ]:
        rewrite(bad)
        for options in (None, ranged):
            with pytest.raises(error, match=match):
                shardwise.ArrayReader.open(w.path, "v", options=options)[...]
    assert [p.error for p in shardwise.verify(w.path).problems] == ["CorruptShardError"]
    rewrite(table)
    np.testing.assert_array_equal(shardwise.ArrayReader.open(w.path, "v")[...], w.zarr_values())


# -- refused chains ------------------------------------------------------------------------
def test_an_index_chain_of_no_fixed_size_is_refused():
    """What a sharding codec of a zarr-python that does not check its index codecs
    would hand over: refused, naming the codec."""
    with pytest.raises(UnsupportedCodecError, match="gzip not of a fixed size") as info:
        index_format_from_codecs([BytesCodec(), GzipCodec(level=1)], CPS, "end", array="v")
    assert info.value.array == "v" and "fixed" in info.value.advice


def test_a_zarr_json_with_a_compressed_index_is_refused_at_open(tmp_path):
    w = write(tmp_path, "bytes-big", "end")
    meta = json.loads((w.array / "zarr.json").read_text())
    meta["codecs"][0]["configuration"]["index_codecs"].append(
        {"name": "gzip", "configuration": {"level": 1}}
    )
    (w.array / "zarr.json").write_text(json.dumps(meta))
    if _compat.version("zarr") >= (3, 4):  # zarr-python refuses it as well
        with pytest.raises(ValueError, match="fixed-size"):
            zarr.open_array(w.array, mode="r")
    # zarr-python 3.4 refuses the sharding codec while the metadata is parsed; before
    # (3.1 and 3.3 open it), shardwise refuses the index chain (gzip is not of a fixed size)
    fixed = "fixed-size|fixed size"
    with pytest.raises(UnsupportedCodecError, match=fixed) as info:
        shardwise.ArrayReader.open(w.path, "v")
    assert isinstance(info.value, ValueError) and info.value.array == "v"
    with pytest.raises(UnsupportedCodecError, match=fixed):
        shardwise.array.from_zarr(w.path, "v")
    with pytest.raises(UnsupportedCodecError, match=fixed):
        xr.open_dataset(w.path, engine="shardwise", consolidated=False)


# -- a codec with no synchronous methods (a third-party codec, or zarr-python < 3.4) ------
@dataclass(frozen=True)
class AsyncOnlyCrc32(BytesBytesCodec):
    """numcodecs' crc32 (at the end) with only zarr's asynchronous codec methods."""

    is_fixed_size = True

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AsyncOnlyCrc32:
        return cls()

    def to_dict(self) -> dict[str, Any]:
        return {"name": "shardwise-test.async_crc32"}

    async def _decode_single(self, chunk_bytes: Any, chunk_spec: Any) -> Any:
        import numcodecs

        out = numcodecs.CRC32(location="end").decode(chunk_bytes.as_numpy_array())
        return chunk_spec.prototype.buffer.from_bytes(bytes(out))

    async def _encode_single(self, chunk_bytes: Any, chunk_spec: Any) -> Any:
        import numcodecs

        out = numcodecs.CRC32(location="end").encode(chunk_bytes.as_numpy_array())
        return chunk_spec.prototype.buffer.from_bytes(out.tobytes())

    def compute_encoded_size(self, input_byte_length: int, chunk_spec: Any) -> int:
        return input_byte_length + 4


@pytest.fixture
def async_only(tmp_path) -> Written:
    zarr.registry.register_codec("shardwise-test.async_crc32", AsyncOnlyCrc32)
    CHAINS["async-only"] = ([BytesCodec(endian="little"), AsyncOnlyCrc32()], True)
    try:
        yield write(tmp_path, "async-only", "end")
    finally:
        del CHAINS["async-only"]


def test_codecs_without_synchronous_methods(async_only):
    """Decoded on zarr-python's loop from a thread, and on a loop of their own inside a
    running one (the index-then-ranges read, verify, inventory)."""
    w = async_only
    assert not hasattr(AsyncOnlyCrc32(), "_decode_sync")
    expected = w.zarr_values()
    np.testing.assert_array_equal(shardwise.ArrayReader.open(w.array)[...], expected)
    ranged = shardwise.ArrayReader.open(
        w.array,
        options=ReadOptions(whole_shard_fraction=float("inf"), index_cache=False, coalesce_gap=0),
    )
    np.testing.assert_array_equal(ranged[...], expected)
    assert shardwise.verify(w.path).ok and shardwise.verify(w.path, decode=True).ok
    assert shardwise.inventory(w.path, "v")["present"].values.sum() == 17
    new = np.full((4, 4), 7, dtype="i4")
    shardwise.array.to_zarr(da.from_array(new), w.path, path="v", region=(slice(0, 4), slice(0, 4)))
    expected[0:4, 0:4] = 7
    np.testing.assert_array_equal(w.zarr_values(), expected)
    _flip_index_byte(w)
    with pytest.raises(ChecksumError):
        ranged[...]
    shutil.rmtree(w.path)
