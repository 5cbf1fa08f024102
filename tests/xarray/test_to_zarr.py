"""shardwise.to_zarr (issue 3): the graph, region and append writes, bad input."""

from __future__ import annotations

import hashlib
import threading

import dask
import numpy as np
import pandas as pd
import pytest
import xarray as xr
import zarr
from dask.diagnostics import ProgressBar
from hypothesis import given, settings
from hypothesis import strategies as st
from zarr.storage import LocalStore, MemoryStore

import shardwise
from bounded import join_all
from shardwise import _compat
from shardwise.codecs import ShardDecoder
from shardwise.errors import StoreExistsError, WriteError
from shardwise.format.grid import auto_chunks, auto_shards
from shardwise.format.metadata import ArrayInfo
from shardwise.testing import CountingStore


def table(nt=1000, nx=50, chunks=30, seed=0):
    rng = np.random.default_rng(seed)
    v = rng.normal(size=(nt, nx)).astype("f4")
    ds = xr.Dataset(
        {"v": (("time", "x"), v, {"units": "K"})},
        coords={"time": pd.date_range("2000-01-01", periods=nt, freq="h"), "x": np.arange(nx)},
        attrs={"title": "test"},
    )
    return ds.chunk({"time": chunks})


def listing(path):
    """Every file under ``path`` with a hash of its bytes."""
    return {
        p.relative_to(path).as_posix(): hashlib.sha1(p.read_bytes()).hexdigest()
        for p in sorted(path.rglob("*"))
        if p.is_file()
    }


def read(path):
    return xr.open_zarr(path, consolidated=False).load()


@pytest.fixture(autouse=True)
def _threads():
    with dask.config.set(scheduler="threads"):
        yield


# -- the write graph ---------------------------------------------------------------------
def test_misaligned_chunks_one_put_per_shard_and_nothing_lost(tmp_path):
    ds = table()
    store = CountingStore(LocalStore(tmp_path / "s.zarr"))
    shardwise.to_zarr(ds, store, shards={"time": 100}, chunks={"time": 10}, consolidated=False)
    puts = store.log.per_key("set")
    shard_puts = {k: n for k, n in puts.items() if k.startswith("v/c/")}
    assert shard_puts == {f"v/c/{i}/0": 1 for i in range(10)}
    other = {r.key for r in store.log.sets() if r.key.startswith("v/")} - set(shard_puts)
    assert other == {"v/zarr.json"}  # (xarray writes it, then again with the attributes)
    xr.testing.assert_identical(read(tmp_path / "s.zarr"), ds.load())
    meta = zarr.open_array(tmp_path / "s.zarr" / "v").metadata
    assert meta.chunk_grid.chunk_shape == (100, 50)
    assert _compat.sharding_codec(meta).chunk_shape == (10, 50)


def graph_keys(delayed):
    return [k[0] if isinstance(k, tuple) else k for k in dict(delayed.__dask_graph__())]


@pytest.mark.parametrize(
    ("chunks", "encode_tasks", "shard_tasks"),
    [
        (100, 10, 0),  # dask chunks = shards: each encode task writes its shard
        (200, 5, 0),  # larger than shards: one task writes two shards
        (30, 34, 10),  # smaller and misaligned: one task per shard gathers the pieces
    ],
)
def test_task_per_shard(tmp_path, chunks, encode_tasks, shard_tasks):
    ds = table(chunks=chunks)
    store = CountingStore(LocalStore(tmp_path / "s.zarr"))
    delayed = shardwise.to_zarr(ds, store, shards={"time": 100}, compute=False, consolidated=False)
    keys = graph_keys(delayed)
    assert sum(k.startswith("shardwise-encode-") for k in keys) == encode_tasks
    assert sum(k.startswith("shardwise-shard-") for k in keys) == shard_tasks
    assert not any(k.startswith("v/c/") for k in store.log.per_key("set"))  # not yet
    result = delayed.compute()
    assert isinstance(result, xr.backends.ZarrStore)
    assert sum(k.startswith("v/c/") for k in store.log.per_key("set")) == 10
    xr.testing.assert_identical(read(tmp_path / "s.zarr"), ds.load())


@pytest.mark.parametrize(("per_task", "encode_tasks"), [(4, 3), ("auto", 1)])
def test_shards_per_task_groups_tiny_shards(tmp_path, per_task, encode_tasks):
    """10 shards of 100 rows from dask chunks of 50: with 4 shards per task, 3 tasks
    (8 chunks, 8 chunks, 4 chunks) write them; "auto" puts all 200 KB in one task."""
    ds = table(chunks=50)
    store = CountingStore(LocalStore(tmp_path / "s.zarr"))
    delayed = shardwise.to_zarr(
        ds,
        store,
        shards={"time": 100},
        compute=False,
        consolidated=False,
        shards_per_task=per_task,
    )
    keys = graph_keys(delayed)
    assert sum(k.startswith("shardwise-encode-") for k in keys) == encode_tasks
    assert not any(k.startswith("shardwise-shard-") for k in keys)
    delayed.compute()
    puts = {k: n for k, n in store.log.per_key("set").items() if k.startswith("v/c/")}
    assert puts == {f"v/c/{i}/0": 1 for i in range(10)}
    xr.testing.assert_identical(read(tmp_path / "s.zarr"), ds.load())


@pytest.mark.parametrize("bad", [0, 2.5, "many", True])
def test_bad_shards_per_task_is_refused_before_writing(tmp_path, bad):
    with pytest.raises(WriteError, match="shards_per_task"):
        shardwise.to_zarr(table(), tmp_path / "s.zarr", shards_per_task=bad)
    assert not (tmp_path / "s.zarr").exists()


def test_progress_bar_and_write_order(tmp_path, capsys):
    ds = table(chunks=70)
    delayed = shardwise.to_zarr(
        ds,
        tmp_path / "s.zarr",
        shards={"time": 100},
        write_order="C",
        compute=False,
        consolidated=False,
    )
    with ProgressBar():
        delayed.compute()
    assert "Completed" in capsys.readouterr().out
    xr.testing.assert_identical(read(tmp_path / "s.zarr"), ds.load())


def test_all_fill_shards_are_not_stored_and_old_ones_deleted(tmp_path):
    ds = table()
    ds["v"][300:400] = np.nan
    path = tmp_path / "s.zarr"
    shardwise.to_zarr(ds.chunk({"time": 30}), path, shards={"time": 100}, consolidated=False)
    assert not (path / "v" / "c" / "3").exists()
    xr.testing.assert_identical(read(path), ds.load())
    # a region write of fill values deletes the shard it covers
    blank = ds.isel(time=slice(500, 600)).drop_vars(["time", "x"])
    blank["v"][:] = np.nan
    shardwise.to_zarr(
        blank.chunk({"time": 45}), path, region={"time": slice(500, 600)}, consolidated=False
    )
    assert not (path / "v" / "c" / "5" / "0").exists()
    assert (path / "v" / "c" / "4" / "0").exists()


def test_rerun_is_idempotent(tmp_path):
    ds = table(chunks=30)
    path = tmp_path / "s.zarr"
    kwargs = {"shards": {"time": 100}, "chunks": {"time": 10}, "consolidated": False}
    shardwise.to_zarr(ds, path, mode="w", **kwargs)
    first = listing(path)
    shardwise.to_zarr(ds, path, mode="w", **kwargs)
    assert listing(path) == first


def test_rerun_after_a_failed_write(tmp_path):
    """A write whose tasks fail part-way leaves some shards written; running the same
    call again produces the whole array."""
    ds = table(chunks=30)
    path = tmp_path / "s.zarr"

    def boom(block, block_info=None):
        if block_info[0]["chunk-location"][0] == 20:
            raise RuntimeError("worker lost")
        return block

    broken = ds.copy()
    broken["v"] = ds.v.copy(data=ds.v.data.map_blocks(boom, dtype="f4"))
    kwargs = {"shards": {"time": 100}, "chunks": {"time": 10}, "consolidated": False}
    with dask.config.set(scheduler="sync"), pytest.raises(RuntimeError, match="worker lost"):
        shardwise.to_zarr(broken, path, mode="w", **kwargs)
    shardwise.to_zarr(ds, path, mode="w", **kwargs)
    xr.testing.assert_identical(read(path), ds.load())


def test_dataarray_and_group(tmp_path):
    ds = table(chunks=64)
    path = tmp_path / "s.zarr"
    shardwise.to_zarr(ds.v, path, group="g/h", shards="auto", consolidated=False)
    back = xr.open_dataarray(path, group="g/h", engine="zarr", consolidated=False)
    xr.testing.assert_identical(back.load(), ds.v.load())
    sw = xr.open_dataarray(path, group="g/h", engine="shardwise", chunks={}, consolidated=False)
    xr.testing.assert_identical(sw.load(), ds.v.load())


def test_numpy_variables_and_unsharded_arrays(tmp_path):
    ds = table(chunks=30).compute()  # numpy: written by zarr-python, as xarray does
    ds["w"] = ds.v.chunk({"time": 33}) * 2  # dask, no shards: chunk by chunk, misaligned
    path = tmp_path / "s.zarr"
    shardwise.to_zarr(
        ds,
        path,
        encoding={"v": {"shards": (100, 50), "chunks": (10, 50)}, "w": {"chunks": (40, 50)}},
        consolidated=False,
    )
    xr.testing.assert_identical(read(path), ds)
    assert _compat.sharding_codec(zarr.open_array(path / "w").metadata) is None


def test_in_memory_store_by_default():
    ds = table(chunks=30)
    zstore = shardwise.to_zarr(ds, shards={"time": 100}, consolidated=False)
    back = xr.open_zarr(zstore.zarr_group.store, consolidated=False).load()
    xr.testing.assert_identical(back, ds.load())


class _NoReadOnlyCopy(zarr.storage.WrapperStore):
    """A writable store that cannot make a read-only copy of itself, as zarr 3.1's
    ``WrapperStore`` and ``LoggingStore`` and stores of other packages."""

    def with_read_only(self, read_only=False):
        raise NotImplementedError("no read-only copy")


def test_a_store_with_no_read_only_copy_is_written_and_read(tmp_path):
    """zarr-python refuses such a store in mode "r"; shardwise reads through it as it
    is, so that its region writes, dask-array writes and the engine work on it."""
    import dask.array as da

    ds = table(nt=200, nx=4, chunks=50)
    store = _NoReadOnlyCopy(LocalStore(tmp_path / "s.zarr"))
    shardwise.to_zarr(ds, store, shards={"time": 100}, consolidated=False)
    twice = ds.isel(time=slice(100, 200)).drop_vars(["x"]) * 2
    shardwise.to_zarr(twice, store, region={"time": slice(100, 200)}, consolidated=False)
    back = xr.open_dataset(store, engine="shardwise", consolidated=False).load()
    np.testing.assert_array_equal(back.v[:100], ds.v[:100])
    np.testing.assert_array_equal(back.v[100:], ds.v[100:] * 2)

    other = _NoReadOnlyCopy(LocalStore(tmp_path / "a.zarr"))
    block = da.ones((200, 4), chunks=(100, 4), dtype="f4")
    shardwise.array.to_zarr(block, other, mode="w", shards=(100, 4))
    shardwise.array.to_zarr(block * 3, other, mode="r+", region=(slice(0, 200), slice(0, 4)))
    np.testing.assert_array_equal(zarr.open_array(LocalStore(tmp_path / "a.zarr"))[:], 3)


def test_auto_shapes():
    # shards from whole dask blocks toward the target, inner chunks dividing both
    assert auto_shards((1000, 720, 1440), 4, ((30,) * 33 + (10,), (720,), (1440,)), 2**27) == (
        30,
        720,
        1440,
    )
    s = auto_shards((1000, 50), 4, ((30,) * 33 + (10,), (50,)), 64 * 1024)
    assert s[0] % 30 == 0 and s[1] == 50 and s[0] * 50 * 4 <= 64 * 1024
    assert auto_shards((10, 2000, 2000), 4, ((1,) * 10, (2000,), (2000,)), 2**20) == (1, 125, 2000)
    c = auto_chunks((100, 50), 4, ((30,) * 34, (50,)), 1000)
    assert c == (5, 50)  # divides gcd(100, 30) = 10, at most 1000 bytes
    assert auto_chunks((64, 512, 512), 4, None, 2**20) == (1, 512, 512)


# -- region and append writes ------------------------------------------------------------
def test_region_write_cutting_through_shards(tmp_path):
    ds = table(chunks=30)
    path = tmp_path / "s.zarr"
    shardwise.to_zarr(ds, path, shards={"time": 100}, chunks={"time": 10}, consolidated=False)
    before = listing(path)
    new = table(seed=1).isel(time=slice(155, 437)).chunk({"time": 17})
    store = CountingStore(LocalStore(path))
    shardwise.to_zarr(
        new.drop_vars(["time", "x"]), store, region={"time": slice(155, 437)}, consolidated=False
    )
    expected = ds.load().copy(deep=True)
    expected["v"][155:437] = new.v.values
    xr.testing.assert_identical(read(path), expected)
    # one put for each shard touched (1..4), none for the others
    assert sorted(k for k in store.log.per_key("set") if k.startswith("v/c")) == [
        f"v/c/{i}/0" for i in range(1, 5)
    ]
    after = listing(path)
    untouched = [f"v/c/{i}/0" for i in (0, 5, 6, 7, 8, 9)]
    assert all(after[k] == before[k] for k in untouched)


def test_region_auto(tmp_path):
    ds = table(chunks=30)
    path = tmp_path / "s.zarr"
    shardwise.to_zarr(ds, path, shards={"time": 100}, chunks={"time": 10}, consolidated=False)
    part = table(seed=2).isel(time=slice(42, 97))
    shardwise.to_zarr(part.chunk({"time": 11}), path, region="auto", consolidated=False)
    expected = ds.load().copy(deep=True)
    expected["v"][42:97] = part.v.values
    xr.testing.assert_identical(read(path), expected)


def test_append_cutting_through_a_shard(tmp_path):
    ds = table(nt=250, chunks=30)
    path = tmp_path / "s.zarr"
    shardwise.to_zarr(ds, path, shards={"time": 100}, chunks={"time": 10}, consolidated=False)
    more = table(nt=500, seed=3).isel(time=slice(250, 500)).chunk({"time": 45})
    store = CountingStore(LocalStore(path))
    shardwise.to_zarr(more, store, append_dim="time", consolidated=False)
    xr.testing.assert_identical(read(path), xr.concat([ds, more], "time").load())
    puts = sorted(k for k in store.log.per_key("set") if k.startswith("v/c"))
    assert puts == ["v/c/2/0", "v/c/3/0", "v/c/4/0"]  # shard 2 was partial: merged


@st.composite
def write_cases(draw):
    n = draw(st.integers(1, 60))
    inner = draw(st.integers(1, 6))
    shard = inner * draw(st.integers(1, 4))
    nx = draw(st.integers(1, 5))

    def chunking(total):
        sizes, left = [], total
        while left:
            sizes.append(draw(st.integers(1, left)))
            left -= sizes[-1]
        return tuple(sizes)

    op = draw(st.sampled_from(["region", "append", "none"]))
    if op == "region":
        lo = draw(st.integers(0, n - 1))
        hi = draw(st.integers(lo + 1, n))
    elif op == "append":
        lo, hi = n, n + draw(st.integers(1, 40))
    else:
        lo = hi = n
    return n, nx, shard, inner, chunking(n), op, lo, hi, chunking(max(hi - lo, 1))


@settings(max_examples=40, deadline=None)
@given(write_cases(), st.integers(0, 2**31))
def test_any_chunking_region_or_append_lands_exactly(case, seed):
    n, nx, shard, inner, chunks, op, lo, hi, new_chunks = case
    rng = np.random.default_rng(seed)
    store = MemoryStore()
    values = rng.normal(size=(n, nx)).round(2)
    values[rng.random(values.shape) < 0.3] = np.nan
    ds = xr.Dataset({"v": (("t", "x"), values)}, coords={"t": np.arange(n)})
    with dask.config.set(scheduler="sync"):
        shardwise.to_zarr(
            ds.chunk({"t": chunks}),
            store,
            shards={"t": shard},
            chunks={"t": inner},
            consolidated=False,
        )
        expected = values
        if op != "none":
            new = rng.normal(size=(hi - lo, nx)).round(2)
            new[rng.random(new.shape) < 0.3] = np.nan
            part = xr.Dataset({"v": (("t", "x"), new)}, coords={"t": np.arange(lo, hi)})
            part = part.chunk({"t": new_chunks})
            if op == "region":
                shardwise.to_zarr(
                    part.drop_vars("t"), store, region={"t": slice(lo, hi)}, consolidated=False
                )
                expected = values.copy()
                expected[lo:hi] = new
            else:
                shardwise.to_zarr(part, store, append_dim="t", consolidated=False)
                expected = np.concatenate([values, new])
    np.testing.assert_array_equal(zarr.open_array(store, path="v")[...], expected)


# -- bad input: refused before anything is written ---------------------------------------
def _base(tmp_path):
    path = tmp_path / "s.zarr"
    shardwise.to_zarr(
        table(nt=200, chunks=30),
        path,
        shards={"time": 100},
        chunks={"time": 10},
        consolidated=False,
    )
    return path


def _append(ds, **renames):
    part = table(nt=260, seed=5).isel(time=slice(200, 260))
    return part.rename(renames) if renames else part


BAD = {
    "inner does not divide shard": (
        lambda: table(nt=200),
        {"mode": "w", "shards": {"time": 100}, "chunks": {"time": 30}},
        WriteError,
    ),
    "inner does not divide shard (encoding)": (
        lambda: table(nt=200),
        {"mode": "w", "encoding": {"v": {"shards": (100, 50), "chunks": (100, 7)}}},
        WriteError,
    ),
    "second variable invalid under mode=w": (
        lambda: table(nt=200).assign(w=lambda d: d.v * 2),
        {"mode": "w", "encoding": {"w": {"shards": (100, 50), "chunks": (3, 50)}}},
        WriteError,
    ),
    "shards with zarr_format=2": (
        lambda: table(nt=200),
        {"mode": "w", "shards": {"time": 100}, "zarr_format": 2},
        WriteError,
    ),
    "region with a step": (
        lambda: table(nt=200).isel(time=slice(0, 50)).drop_vars(["time", "x"]),
        {"region": {"time": slice(0, 100, 2)}},
        WriteError,
    ),
    "region outside the array": (
        lambda: table(nt=200).isel(time=slice(0, 50)).drop_vars(["time", "x"]),
        {"region": {"time": slice(180, 230)}},
        WriteError,
    ),
    "region of the wrong length": (
        lambda: table(nt=200).isel(time=slice(0, 50)).drop_vars(["time", "x"]),
        {"region": {"time": slice(0, 40)}},
        WriteError,
    ),
    "append with other dimensions": (
        lambda: _append(None, x="y"),
        {"append_dim": "time"},
        WriteError,
    ),
    "append with another size": (
        lambda: _append(None).isel(x=slice(0, 10)),
        {"append_dim": "time"},
        WriteError,
    ),
    "append with another dtype": (
        lambda: _append(None).assign(v=lambda d: d.v.astype("c8")),
        {"append_dim": "time"},
        WriteError,
    ),
    "append of strings to numbers": (
        lambda: _append(None).assign(v=lambda d: d.v.astype("U4")),
        {"append_dim": "time"},
        WriteError,
    ),
    "existing store with mode=w-": (lambda: table(nt=200), {"mode": "w-"}, StoreExistsError),
    "append_dim with mode=w": (
        lambda: table(nt=200),
        {"mode": "w", "append_dim": "time"},
        WriteError,
    ),
    "unencodable dtype": (
        lambda: xr.Dataset({"o": ("time", np.array([{"a": 1}] * 200, dtype=object))}),
        {"mode": "w"},
        WriteError,
    ),
    "unknown shard dimension": (
        lambda: table(nt=200),
        {"mode": "w", "shards": {"lat": 10}},
        WriteError,
    ),
    "bad write order": (lambda: table(nt=200), {"mode": "w", "write_order": "F"}, WriteError),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_changes_nothing(tmp_path, case):
    make, kwargs, error = BAD[case]
    path = _base(tmp_path)
    before = listing(path)
    with pytest.raises(error) as info:
        shardwise.to_zarr(make(), path, consolidated=False, **kwargs)
    assert isinstance(info.value, shardwise.ShardwiseError)
    assert listing(path) == before
    assert str(info.value).endswith(".") or "." in str(info.value)


def test_errors_name_array_and_key(tmp_path):
    path = _base(tmp_path)
    with pytest.raises(WriteError) as info:
        shardwise.to_zarr(
            _append(None).assign(v=lambda d: d.v.astype("c8")), path, append_dim="time"
        )
    assert info.value.array == "v" and info.value.key == "v/zarr.json"
    with pytest.raises(StoreExistsError) as exists:
        shardwise.to_zarr(table(), path)
    assert isinstance(exists.value, FileExistsError) and exists.value.key == "zarr.json"


def test_new_store_not_created_by_refused_write(tmp_path):
    with pytest.raises(WriteError):
        shardwise.to_zarr(table(), tmp_path / "new.zarr", shards={"time": 100}, chunks={"time": 7})
    assert not (tmp_path / "new.zarr").exists()


# -- atomic puts -------------------------------------------------------------------------
def test_readers_never_see_a_torn_shard(tmp_path):
    """LocalStore writes a temporary file and renames it over the shard, so a reader
    polling the shard while it is rewritten sees a whole old or new shard."""
    path = tmp_path / "s.zarr"
    big = xr.Dataset({"v": (("t", "x"), np.random.default_rng(0).normal(size=(64, 65536)))})
    kwargs = {
        "encoding": {"v": {"shards": (64, 65536), "chunks": (8, 65536)}},
        "consolidated": False,
    }
    shardwise.to_zarr(big.chunk({"t": 16}), path, **kwargs)
    info = ArrayInfo.from_metadata(zarr.open_array(path / "v").metadata, "v")
    decoder = ShardDecoder(info.sharding, (64, 65536), info.zdtype, info.fill_value)
    shard = path / "v" / "c" / "0" / "0"
    stop = threading.Event()
    seen = []

    def poll():
        while not stop.is_set():
            raw = shard.read_bytes()
            decoder.parse(np.frombuffer(raw, "u1"), key="v/c/0/0")  # raises on a torn shard
            seen.append(len(raw))

    reader = threading.Thread(target=poll, daemon=True)
    reader.start()
    try:
        for i in range(4):
            shardwise.to_zarr(
                (big + i).chunk({"t": 16}), path, region={"t": slice(0, 64)}, consolidated=False
            )
    finally:
        stop.set()
        join_all([reader], timeout=60)
    assert seen
    np.testing.assert_array_equal(zarr.open_array(path / "v")[...], big.v.values + 3)


def test_write_empty_chunks_keeps_fill_chunks(tmp_path):
    ds = table(nt=200, chunks=30)
    ds["v"][:100] = np.nan
    path = tmp_path / "s.zarr"
    shardwise.to_zarr(
        ds,
        path,
        shards={"time": 100},
        chunks={"time": 10},
        write_empty_chunks=True,
        consolidated=False,
    )
    assert (path / "v" / "c" / "0" / "0").exists()
    xr.testing.assert_identical(read(path), ds.load())


def test_zarr_v2_and_strings_go_through_aligned_dask_store(tmp_path):
    """What the shard writer does not handle is rechunked to the chunk grid first, so a
    misaligned dask chunking is still safe."""
    ds = table(nt=200, chunks=30)
    ds["name"] = ("time", np.array([f"n{i}" for i in range(200)]))
    ds = ds.assign(name=ds["name"].chunk({"time": 45}))
    v2 = tmp_path / "v2.zarr"
    shardwise.to_zarr(
        ds,
        v2,
        zarr_format=2,
        encoding={"v": {"chunks": (40, 50)}, "name": {"chunks": (40,)}},
        consolidated=False,
    )
    xr.testing.assert_identical(xr.open_zarr(v2, consolidated=False).load(), ds.load())
    v3 = tmp_path / "v3.zarr"
    shardwise.to_zarr(ds, v3, shards={"time": 100}, chunks={"time": 20}, consolidated=False)
    xr.testing.assert_identical(read(v3), ds.load())
    assert _compat.sharding_codec(zarr.open_array(v3 / "name").metadata) is not None


def test_aligned_chunks_break_at_the_grid():
    from shardwise.graph.write import _aligned

    assert _aligned(20, 95, 10) == (5, 10, 5)
    assert _aligned(30, 0, 10) == (10, 10, 10)
    assert _aligned(3, 4, 10) == (3,)


@pytest.mark.parametrize("split", [4, 3])
def test_encode_split_cuts_a_shard_into_tasks(tmp_path, split):
    """encode_split=N on one shard from one dask chunk: N encode tasks, each a slice of
    the block at inner chunk boundaries, and one shard task that makes the one put;
    the store reads back equal, shard for shard the bytes of an unsplit write."""
    ds = table(nt=200, chunks=200)
    store = CountingStore(LocalStore(tmp_path / "s.zarr"))
    kwargs = {"shards": {"time": 200}, "chunks": {"time": 25}, "consolidated": False}
    delayed = shardwise.to_zarr(ds, store, compute=False, encode_split=split, **kwargs)
    keys = graph_keys(delayed)
    assert sum(k.startswith("shardwise-part-") for k in keys) == split
    assert sum(k.startswith("shardwise-encode-") for k in keys) == split
    assert sum(k.startswith("shardwise-shard-") for k in keys) == 1
    delayed.compute()
    assert store.log.per_key("set")["v/c/0/0"] == 1
    xr.testing.assert_identical(read(tmp_path / "s.zarr"), ds.load())
    shardwise.to_zarr(ds, tmp_path / "one.zarr", encode_split=1, **kwargs)
    assert (tmp_path / "s.zarr/v/c/0/0").read_bytes() == (
        tmp_path / "one.zarr/v/c/0/0"
    ).read_bytes()


def test_encode_split_auto_and_refusals(tmp_path):
    """ "auto" splits only shards fewer than the threads and large enough (8 MiB a
    part); bad values are refused before anything is written."""
    from shardwise.graph.split import encode_split_chunks

    big = ArrayInfo.from_metadata(
        zarr.create_array(
            MemoryStore(), shape=(8192, 1024), chunks=(512, 1024), shards=(8192, 1024), dtype="f4"
        ).metadata
    ).layout  # one 32 MiB shard of 16 inner chunks
    one_block = ((8192,), (1024,))
    with dask.config.set(scheduler="threads", num_workers=2):
        # 2 threads, 1 shard: two parts per thread, of 8 MiB each
        assert encode_split_chunks(one_block, big, None, "auto") == ((2048,) * 4, (1024,))
    with dask.config.set(scheduler="threads", num_workers=16):  # at most 32 MiB / 8 MiB
        assert encode_split_chunks(one_block, big, None, "auto") == ((2048,) * 4, (1024,))
    with dask.config.set(scheduler="synchronous"):
        assert encode_split_chunks(one_block, big, None, "auto") is None
    with dask.config.set({"shardwise.encode-split": 2}):
        assert encode_split_chunks(one_block, big, None, None) == ((4096, 4096), (1024,))
    small = table(nt=200, chunks=200)  # 40 KB: never split by "auto"
    delayed = shardwise.to_zarr(
        small, tmp_path / "a.zarr", shards={"time": 200}, compute=False, consolidated=False
    )
    assert not any(k.startswith("shardwise-part-") for k in graph_keys(delayed))
    for bad in (0, -1, "some", 2.5, True):
        with pytest.raises(WriteError, match="encode_split"):
            shardwise.to_zarr(small, tmp_path / "b.zarr", shards={"time": 200}, encode_split=bad)
    assert not (tmp_path / "b.zarr").exists()


@settings(max_examples=60, deadline=None)
@given(
    data=st.data(),
    shard=st.integers(2, 40),
    inner_per=st.integers(1, 6),
    parts=st.integers(1, 9),
)
def test_encode_split_cuts_only_at_inner_boundaries(data, shard, inner_per, parts):
    """Any chunking: the split refines the dask chunks, and every new edge inside a
    dask chunk is an inner chunk boundary."""
    from shardwise.graph.split import encode_split_chunks

    inner = max(1, shard // inner_per)
    shard = inner * max(1, shard // inner)
    n = data.draw(st.integers(1, 200))
    sizes = data.draw(st.lists(st.integers(1, 60), min_size=1, max_size=8))
    chunks = []
    left = n
    for s in sizes:
        if left <= 0:
            break
        chunks.append(min(s, left))
        left -= s
    if left > 0:
        chunks.append(left)
    layout = ArrayInfo.from_metadata(
        zarr.create_array(
            MemoryStore(), shape=(n,), chunks=(inner,), shards=(shard,), dtype="u1"
        ).metadata
    ).layout
    cut = encode_split_chunks((tuple(chunks),), layout, None, parts)
    if cut is None:
        return
    (new,) = cut
    assert sum(new) == n and all(c > 0 for c in new)
    old_edges = set(np.cumsum(chunks).tolist())
    new_edges = set(np.cumsum(new).tolist())
    assert old_edges <= new_edges
    for e in new_edges - old_edges:
        assert e % inner == 0


def test_unknown_chunk_sizes_are_refused_before_anything_is_written(tmp_path):
    """A variable whose dask chunks have unknown sizes (NaN, after boolean indexing):
    a ValueError naming the variable with dask's advice, nothing written."""
    x = dask.array.arange(25, chunks=10)
    ds = xr.Dataset({"v": ("t", x[x > 3])})
    with pytest.raises(WriteError, match="unknown chunk sizes") as info:
        shardwise.to_zarr(ds, tmp_path / "s.zarr")
    assert isinstance(info.value, ValueError) and "compute_chunk_sizes()" in str(info.value)
    assert "'v'" in str(info.value) or "array: v" in str(info.value)
    assert not (tmp_path / "s.zarr").exists()
