"""Store requests, counted with a wrapping store."""

from __future__ import annotations

import dask
import numpy as np
import pytest
import xarray as xr
from zarr.storage import LocalStore

import shardwise
from shardwise.io.capabilities import conditional
from shardwise.testing import CountingStore


@pytest.fixture
def counted(weather_store):
    path, ds = weather_store
    store = CountingStore(LocalStore(path, read_only=True))
    return store, ds


def open_counted(store, **kwargs):
    ds = xr.open_dataset(store, engine="shardwise", consolidated=False, **kwargs)
    store.log.clear()  # count data reads only
    return ds


def open_inner_chunked(store, **kwargs):
    """Dask chunks = inner chunks. xarray warns that they split the preferred (shard)
    chunks; with shardwise that costs one cached index read per shard."""
    with pytest.warns(UserWarning, match="separate the stored chunks"):
        ds = xr.open_dataset(
            store,
            engine="shardwise",
            consolidated=False,
            chunks={"time": 5, "y": 10, "x": 10},
            **kwargs,
        )
    store.log.clear()  # count data reads only
    return ds


def shard_keys(ds, name):
    enc = ds[name].encoding
    grid = [-(-n // s) for n, s in zip(ds[name].shape, enc["shards"], strict=True)]
    return {f"{name}/c/" + "/".join(map(str, idx)) for idx in np.ndindex(*grid)}


def test_whole_array_with_shard_chunks_is_one_read_per_shard(counted):
    store, _ = counted
    ds = open_counted(store, chunks={})
    assert ds.temperature.chunks == ((10, 10, 10, 10), (30,), (20,))
    with dask.config.set(scheduler="threads"):
        ds.temperature.load()
    per_key = store.log.per_key()
    assert set(per_key) == shard_keys(ds, "temperature")
    assert all(n <= 2 for n in per_key.values()), per_key
    assert all(r.byte_range == "whole" for r in store.log.gets())
    # and the values are right
    xr.testing.assert_identical(
        ds.temperature.compute(),
        xr.open_dataset(store, engine="zarr", consolidated=False).temperature.compute(),
    )


def test_inner_chunk_sized_dask_chunks_read_each_index_once(counted):
    store, _ = counted
    ds = open_inner_chunked(store)
    assert ds.temperature.data.numblocks == (8, 3, 2)
    with dask.config.set(scheduler="threads", num_workers=4):
        ds.temperature.load()
    gets = store.log.gets()
    index_reads = [r for r in gets if r.byte_range.startswith("last")]
    data_reads = [r for r in gets if r.byte_range.startswith("[")]
    assert len(index_reads) == 4  # one per shard, shared by the 12 tasks of each shard
    assert {r.key for r in index_reads} == shard_keys(ds, "temperature")
    assert len(data_reads) == 8 * 3 * 2  # one ranged read per inner chunk
    assert len(gets) == len(index_reads) + len(data_reads)


def test_index_cache_can_be_turned_off(counted):
    store, _ = counted
    ds = open_inner_chunked(store, read_options={"index_cache": False})
    with dask.config.set(scheduler="synchronous"):
        ds.temperature.load()
    index_reads = [r for r in store.log.gets() if r.byte_range.startswith("last")]
    assert len(index_reads) == 8 * 3 * 2  # every task reads its shard's index
    assert len(shardwise.cache.index_cache()) == 0


def test_small_region_reads_index_then_coalesced_range(counted):
    store, expected = counted
    ds = open_counted(store)
    # time 10..19 is shard 1; y 0..14 and x 0..9 touch inner chunks (2 of 2) x (2 of 3) x (1 of 2)
    region = ds.temperature.isel(time=slice(10, 20), y=slice(0, 15), x=slice(0, 10)).values
    gets = store.log.gets()
    assert [r.byte_range.split()[0] for r in gets] == ["last", gets[1].byte_range.split()[0]]
    assert gets[1].byte_range.startswith("[")  # 4 inner chunks in one coalesced range
    assert {r.key for r in gets} == {"temperature/c/1/0/0"}
    np.testing.assert_allclose(
        region,
        expected.temperature.isel(time=slice(10, 20), y=slice(0, 15), x=slice(0, 10)),
        atol=0.006,
    )
    # a second read of the same shard uses the cached index: ranges only
    store.log.clear()
    ds.temperature.isel(time=12, y=20, x=5).load()
    assert [r.byte_range[0] for r in store.log.gets()] == ["["]


def test_no_coalescing_issues_one_range_per_chunk(weather_store):
    path, _ = weather_store
    store = CountingStore(LocalStore(path, read_only=True))
    options = shardwise.ReadOptions(coalesce_gap=0, coalesce_max=1, whole_shard_fraction=1.0)
    ds = open_counted(store, read_options=options)
    ds.temperature.isel(time=slice(10, 20), y=slice(0, 15), x=slice(0, 10)).load()
    ranged = [r for r in store.log.gets() if r.byte_range.startswith("[")]
    assert len(ranged) == 2 * 2 * 1


def test_whole_shard_read_when_most_chunks_are_wanted(counted):
    store, _ = counted
    ds = open_counted(store)
    ds.temperature.isel(time=slice(10, 20)).load()  # all inner chunks of shard 1
    assert [(r.key, r.byte_range) for r in store.log.gets()] == [("temperature/c/1/0/0", "whole")]


def test_reopening_a_rewritten_store_does_not_use_old_indexes(tmp_path):
    """Indexes are cached per opened array: write, read, rewrite, open again, read."""
    path = tmp_path / "r.zarr"
    enc = {"v": {"chunks": (5,), "shards": (20,), "compressors": None}}
    first = xr.Dataset({"v": ("x", np.arange(40.0))})
    first.to_zarr(path, zarr_format=3, encoding=enc, consolidated=False)
    opened = xr.open_dataset(path, engine="shardwise", consolidated=False)
    assert float(opened.v[3]) == 3.0  # caches the index of shard 0
    # same shape, different sizes inside the shard: zstd-compressed now
    second = xr.Dataset({"v": ("x", np.arange(40.0) * 2)})
    second.to_zarr(
        path,
        zarr_format=3,
        mode="w",
        consolidated=False,
        encoding={"v": {"chunks": (5,), "shards": (20,)}},
    )
    again = xr.open_dataset(path, engine="shardwise", consolidated=False)
    assert float(again.v[3]) == 6.0
    xr.testing.assert_identical(again.load(), second)


def test_whole_local_shards_are_read_on_the_thread(tmp_path, monkeypatch):
    """A task reading one whole shard of a LocalStore reads the file on its own thread
    into a reused buffer (no request on the event loop); a part of a shard, or several
    shards, go through the store's versioned reads on the event loop. Values, missing
    shards and corrupt files behave the same either way."""
    import zarr

    from shardwise.errors import CorruptShardError
    from shardwise.io import conditional
    from shardwise.io.reader import ArrayReader

    values = np.arange(64 * 48, dtype="f4").reshape(64, 48)
    arr = zarr.create_array(
        tmp_path / "a", shape=(96, 48), chunks=(8, 16), shards=(32, 48), dtype="f4", fill_value=-1
    )
    arr[:64] = values  # the third shard is never written
    reader = ArrayReader.open(LocalStore(tmp_path / "a"))
    gets = []
    real_read = conditional.LocalConditional.read

    async def counting_read(self, key, *args, **kwargs):
        gets.append(key)
        return await real_read(self, key, *args, **kwargs)

    monkeypatch.setattr(conditional.LocalConditional, "read", counting_read)
    np.testing.assert_array_equal(reader[0:32], values[:32])  # one whole shard
    np.testing.assert_array_equal(reader[64:96], np.full((32, 48), -1, "f4"))  # missing
    assert gets == []
    np.testing.assert_array_equal(reader[0:8, 0:16], values[:8, :16])  # one chunk of it
    np.testing.assert_array_equal(reader[0:64], values)  # two shards
    assert gets  # through the store's reads
    # a truncated shard file: the same error as through the store
    shard = tmp_path / "a" / "c" / "1" / "0"
    shard.write_bytes(shard.read_bytes()[:-7])
    with pytest.raises(CorruptShardError, match="c/1/0"):
        reader[32:64]


@pytest.mark.parametrize("compressors", ["zstd", "zstd+crc32c"])
def test_inner_chunks_filling_contiguous_rows_decode_in_place(tmp_path, monkeypatch, compressors):
    """Inner chunks that span the output's trailing dimensions whole land in contiguous
    rows of it: they are decompressed straight there (no copy through the scratch
    buffer); the others, and any chunk cut by the selection, are copied. Values match
    zarr-python either way, edge chunks and empty chunks included."""
    import zarr
    from zarr.codecs import Crc32cCodec, ZstdCodec

    from shardwise.codecs import ChunkDecoder
    from shardwise.io.reader import ArrayReader

    values = np.random.default_rng(3).normal(size=(70, 12)).astype("f4")
    values[8:12] = -1  # one inner chunk all fill value: not stored
    arr = zarr.create_array(
        tmp_path / "a",
        shape=values.shape,
        chunks=(4, 12),
        shards=(16, 12),
        dtype="f4",
        fill_value=-1,
        compressors=[ZstdCodec(level=1)]
        + ([Crc32cCodec()] if compressors == "zstd+crc32c" else []),
    )
    arr[...] = values
    placed = []
    real = ChunkDecoder.decode_into

    def spy(self, data, dest, **kwargs):
        done = real(self, data, dest, **kwargs)
        placed.append((kwargs["chunk"], done))
        return done

    monkeypatch.setattr(ChunkDecoder, "decode_into", spy)
    reader = ArrayReader.open(LocalStore(tmp_path / "a"))
    zarr_arr = zarr.open_array(tmp_path / "a", mode="r")
    for sel in [np.s_[0:16], np.s_[:], np.s_[3:61], np.s_[16:32, 2:9], np.s_[64:70]]:
        placed.clear()
        np.testing.assert_array_equal(reader[sel], zarr_arr[sel])
        in_place = [c for c, done in placed if done]
        if sel == np.s_[0:16]:
            assert sorted(in_place) == [(0, 0), (1, 0), (3, 0)]  # (2, 0) is empty
        if sel == np.s_[16:32, 2:9]:
            assert placed and in_place == []  # columns cut: every chunk is copied
        if sel == np.s_[64:70]:
            assert in_place == [(0, 0)]  # the array's edge cuts (1, 0): copied


@pytest.mark.parametrize("location", ["start", "end"])
def test_one_index_reader(tmp_path, location):
    """Every index read (the reader's, inventory's, verify's) is read_shard_index: one
    ranged request of the index's bytes, checked, the same table as parsing the whole
    object; none for an object the caller knows is shorter than its index; None for
    an absent shard; store errors named as a read's only when asked."""
    import asyncio

    import zarr

    from shardwise.errors import StoreIOError, TruncatedShardError
    from shardwise.io.reader import ArrayReader
    from shardwise.io.shard_index import Tally, read_shard_index

    arr = zarr.create_array(
        tmp_path / "a",
        shape=(8,),
        chunks=(2,),
        shards={"shape": (4,), "index_location": location},
        dtype="f8",
        fill_value=0,
    )
    arr[...] = np.arange(8.0)
    store = CountingStore(LocalStore(tmp_path / "a", read_only=True))
    decoder = ArrayReader.open(store).decoder((0,))
    fmt = decoder.index
    tally = Tally()
    table = asyncio.run(read_shard_index(store, "c/1", fmt, array="a", tally=tally)).table
    expected_range = f"[0, {fmt.nbytes})" if location == "start" else f"last {fmt.nbytes}"
    store.log.clear()
    asyncio.run(read_shard_index(store, "c/1", fmt, array="a"))
    assert [(r.key, r.byte_range) for r in store.log.gets()] == [("c/1", expected_range)]
    assert (tally.requests, tally.nbytes) == (1, fmt.nbytes)
    whole = (tmp_path / "a" / "c" / "1").read_bytes()
    np.testing.assert_array_equal(table, decoder.parse(whole, key="c/1")[1])
    # through the store's versioned reads: the same one request, which also says the
    # version the index is of and the object's size
    store.log.clear()
    versions = conditional(store)
    entry = asyncio.run(read_shard_index(store, "c/1", fmt, versions=versions, array="a"))
    assert [(r.key, r.byte_range) for r in store.log.gets()] == [("c/1", expected_range)]
    np.testing.assert_array_equal(entry.table, table)
    assert entry.size == len(whole) and entry.version is not None
    assert entry.version == conditional(store).get("c/1")[1]

    store.log.clear()
    with pytest.raises(TruncatedShardError, match="shorter than its index"):
        asyncio.run(read_shard_index(store, "c/1", fmt, size=fmt.nbytes - 1))
    assert store.log.gets() == []
    assert asyncio.run(read_shard_index(store, "c/9", fmt)).table is None
    assert asyncio.run(read_shard_index(store, "c/9", fmt, versions=versions)).absent

    class Failing(CountingStore):
        async def get(self, key, prototype, byte_range=None):
            raise PermissionError("no")

    failing = Failing(LocalStore(tmp_path / "a", read_only=True))
    with pytest.raises(PermissionError):
        asyncio.run(read_shard_index(failing, "c/1", fmt))
    with pytest.raises(StoreIOError, match="c/1"):
        asyncio.run(read_shard_index(failing, "c/1", fmt, array="a", name_errors=True))
