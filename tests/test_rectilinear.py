"""Rectilinear shards (issue 12): dask's irregular chunks written 1:1 as variable-size
shards, appended to, written into and read back, checked against zarr-python."""

from __future__ import annotations

import hashlib
import json
import math

import dask
import numpy as np
import pandas as pd
import pytest
import xarray as xr
import zarr
from hypothesis import given, settings
from hypothesis import strategies as st
from zarr.storage import LocalStore, MemoryStore

import shardwise
from shardwise import _compat
from shardwise._flags import rectilinear_grids
from shardwise.errors import WriteError
from shardwise.format.rectilinear import MAX_SHARDS, extend, pad
from shardwise.testing import CountingStore

# rectilinear grids need zarr-python 3.2, written through xarray xarray 2026.9
pytestmark = [pytest.mark.rectilinear, pytest.mark.xarray_rectilinear]

FLAG = {"array.rectilinear_chunks": True}
MONTHS = (31, 28, 31, 30)


@pytest.fixture(autouse=True)
def _threads():
    with dask.config.set(scheduler="threads"):
        yield


def daily(lengths=MONTHS, nx=8, start="2001-01-01", seed=0, name="tas"):
    """Daily values in dask chunks of the given lengths (months)."""
    n = sum(lengths)
    rng = np.random.default_rng(seed)
    values = rng.normal(280, 5, size=(n, nx)).astype("f4")
    ds = xr.Dataset(
        {name: (("time", "x"), values, {"units": "K"})},
        coords={"time": pd.date_range(start, periods=n, freq="D"), "x": np.arange(nx)},
        attrs={"title": "daily"},
    )
    return ds.chunk({"time": lengths})


def grid(path, name="tas"):
    doc = json.loads((path / name / "zarr.json").read_text())
    inner = next(c for c in doc["codecs"] if c["name"] == "sharding_indexed")
    return doc["chunk_grid"], inner["configuration"]["chunk_shape"]


def zarr_read(store, path):
    with zarr.config.set(FLAG):
        return zarr.open_array(store, path=path, mode="r")[...]


def files(path):
    return {
        p.relative_to(path).as_posix(): hashlib.sha1(p.read_bytes()).hexdigest()
        for p in sorted(path.rglob("*"))
        if p.is_file()
    }


def memory_digest(store):
    return {k: hashlib.sha1(bytes(v.to_bytes())).hexdigest() for k, v in store._store_dict.items()}


# -- arithmetic ------------------------------------------------------------------------------
def test_edges_arithmetic():
    assert pad((31, 28, 30), 4) == (31, 28, 32)
    # the stored array ends on a shard boundary: the dask chunks become the new shards
    assert extend((31, 28), 59, 120, (31, 30), 1) == (31, 28, 31, 30)
    # it ends inside its (padded) last shard: the first values fill it
    assert extend((4, 8), 10, 20, (6, 4), 2) == (4, 8, 4, 4)
    assert extend((4, 8), 10, 11, (1,), 2) == (4, 8)
    # a regular dimension is expanded first
    assert extend(10, 25, 40, (15,), 5) == (10, 10, 10, 10)  # 5 fill the third shard


def test_flag_is_scoped_and_counted():
    assert not zarr.config.get("array.rectilinear_chunks")
    with rectilinear_grids():
        with rectilinear_grids():
            assert zarr.config.get("array.rectilinear_chunks")
        assert zarr.config.get("array.rectilinear_chunks")
    assert not zarr.config.get("array.rectilinear_chunks")
    with zarr.config.set(FLAG), rectilinear_grids():
        pass
    assert not zarr.config.get("array.rectilinear_chunks")


# -- writing -----------------------------------------------------------------------------------
def test_irregular_chunks_become_shards_one_to_one(tmp_path):
    ds = daily()
    store = CountingStore(LocalStore(tmp_path / "m.zarr"))
    delayed = shardwise.to_zarr(ds, store, chunks={"time": 1}, compute=False, consolidated=False)
    keys = [k[0] for k in dict(delayed.__dask_graph__()) if isinstance(k, tuple)]
    assert sum(k.startswith("shardwise-encode-") for k in keys) == 4  # a task per block
    assert not any(k.startswith(("shardwise-shard-", "shardwise-split-")) for k in keys)
    delayed.compute()
    puts = {k: n for k, n in store.log.per_key("set").items() if k.startswith("tas/c/")}
    assert puts == {f"tas/c/{i}/0": 1 for i in range(4)}
    chunk_grid, inner = grid(tmp_path / "m.zarr")
    assert chunk_grid == {
        "name": "rectilinear",
        "configuration": {"kind": "inline", "chunk_shapes": [list(MONTHS), 8]},
    }
    assert inner == [1, 8]
    assert not zarr.config.get("array.rectilinear_chunks")  # left as it was
    np.testing.assert_array_equal(zarr_read(tmp_path / "m.zarr", "tas"), ds.tas.values)
    back = xr.open_dataset(tmp_path / "m.zarr", engine="shardwise", chunks={}, consolidated=False)
    assert back.tas.chunks == (MONTHS, (8,))
    xr.testing.assert_identical(back.load(), ds.load())


def test_shards_dask_on_regular_chunks_gives_a_regular_grid(tmp_path):
    ds = daily(lengths=(30, 30, 30, 10))
    shardwise.to_zarr(
        ds, tmp_path / "r.zarr", shards="dask", chunks={"time": 10}, consolidated=False
    )
    chunk_grid, inner = grid(tmp_path / "r.zarr")
    assert chunk_grid["name"] == "regular"
    assert chunk_grid["configuration"]["chunk_shape"] == [30, 8]
    assert inner == [10, 8]
    xr.testing.assert_identical(
        xr.open_zarr(tmp_path / "r.zarr", consolidated=False).load(), ds.load()
    )


def test_last_shard_is_padded_to_the_inner_chunk(tmp_path):
    ds = daily(lengths=(8, 12, 6, 3))
    shardwise.to_zarr(ds, tmp_path / "p.zarr", chunks={"time": 2}, consolidated=False)
    chunk_grid, inner = grid(tmp_path / "p.zarr")
    assert chunk_grid["configuration"]["chunk_shapes"][0] == [8, 12, 6, 4]  # 3 -> 4
    assert inner == [2, 8]
    np.testing.assert_array_equal(zarr_read(tmp_path / "p.zarr", "tas"), ds.tas.values)


def test_auto_inner_chunks_divide_every_edge():
    nx = 4096  # 16 KiB per day
    ds = daily(lengths=(40, 24, 64, 7), nx=nx)
    store = MemoryStore()
    shardwise.to_zarr(ds, store, consolidated=False)
    with zarr.config.set(FLAG):
        meta = zarr.open_array(store, path="tas").metadata
    inner = _compat.sharding_codec(meta).chunk_shape
    assert inner == (8, nx)  # gcd(40, 24, 64) = 8: 8 days of 16 KiB = 128 KiB
    assert meta.chunk_grid.chunk_shapes[0] == (40, 24, 64, 8)


def test_auto_inner_chunks_warn_when_the_edges_force_them_small():
    ds = daily(lengths=MONTHS, nx=8192)  # 32 KiB per day; gcd of the months is 1
    with pytest.warns(UserWarning, match=r"'time' \(shard sizes \(31, 28, 31, 30\)"):
        shardwise.to_zarr(ds, MemoryStore(), consolidated=False)
    ok = daily(lengths=(32, 16, 48), nx=8192)  # gcd 16: 512 KiB inner chunks, no warning
    shardwise.to_zarr(ok, MemoryStore(), consolidated=False)


@pytest.mark.filterwarnings("ignore:Consolidated metadata is currently not part:UserWarning")
def test_three_dimensions_and_consolidated_metadata(tmp_path):
    rng = np.random.default_rng(3)
    v = rng.normal(size=(17, 9, 10)).astype("f8")
    ds = xr.Dataset({"v": (("a", "b", "c"), v)}).chunk({"a": (5, 7, 5), "b": (4, 5), "c": 10})
    shardwise.to_zarr(ds, tmp_path / "c.zarr", chunks={"a": 1, "b": 1})
    np.testing.assert_array_equal(zarr_read(tmp_path / "c.zarr", "v"), v)
    back = xr.open_dataset(tmp_path / "c.zarr", engine="shardwise", chunks={}, consolidated=True)
    assert back.v.chunks == ((5, 7, 5), (4, 5), (10,))
    xr.testing.assert_identical(back.load(), ds.load())
    consolidated = json.loads((tmp_path / "c.zarr" / "zarr.json").read_text())
    entry = consolidated["consolidated_metadata"]["metadata"]["v"]
    assert entry["chunk_grid"]["name"] == "rectilinear"


def test_reads_fan_out_and_verify(tmp_path):
    ds = daily(lengths=(12, 8, 20), nx=6)
    shardwise.to_zarr(ds, tmp_path / "f.zarr", chunks={"time": 4}, consolidated=False)
    inner = shardwise.open_dataset(tmp_path / "f.zarr", chunks="inner", consolidated=False)
    assert inner.tas.chunks == ((4,) * 10, (6,))
    xr.testing.assert_identical(inner.load(), ds.load())
    sliced = shardwise.open_dataset(tmp_path / "f.zarr", chunks={"time": 8}, consolidated=False)
    xr.testing.assert_identical(
        sliced.isel(time=slice(3, 30)).load(), ds.isel(time=slice(3, 30)).load()
    )
    report = shardwise.verify(tmp_path / "f.zarr")
    assert report.ok, report


# -- appends and region writes -------------------------------------------------------------------
def test_append_months_leaves_old_shards_untouched(tmp_path):
    path = tmp_path / "m.zarr"
    first = daily(lengths=(31, 28, 31, 30), start="2001-01-01")
    shardwise.to_zarr(first, path, chunks={"time": 1}, consolidated=False)
    before = files(path)
    more = daily(lengths=(31, 30, 31), start="2001-05-01", seed=1)
    store = CountingStore(LocalStore(path))
    zstore = shardwise.to_zarr(more, store, append_dim="time", consolidated=False)
    assert type(zstore) is xr.backends.ZarrStore  # plain again: it may travel to workers
    after = files(path)
    shard_files = [k for k in before if k.startswith("tas/c/")]
    assert len(shard_files) == 4
    assert all(after[k] == before[k] for k in shard_files)  # byte-identical
    assert not any(k.startswith("tas/c/") and k in shard_files for k in store.log.per_key("set"))
    assert not any(r.key.startswith("tas/c/") for r in store.log.gets())  # nothing read back
    chunk_grid, _ = grid(path)
    assert chunk_grid["configuration"]["chunk_shapes"][0] == [31, 28, 31, 30, 31, 30, 31]
    back = xr.open_dataset(path, engine="shardwise", chunks={}, consolidated=False)
    assert back.tas.chunks[0] == (31, 28, 31, 30, 31, 30, 31)
    xr.testing.assert_identical(back.load(), xr.concat([first, more], "time").load())


def test_append_into_a_padded_last_shard_merges_only_that_shard(tmp_path):
    path = tmp_path / "p.zarr"
    first = daily(lengths=(6, 8, 7), nx=3)  # last shard stored as 8 (padded), 1 free place
    shardwise.to_zarr(first, path, chunks={"time": 2}, consolidated=False)
    before = files(path)
    more = daily(lengths=(5, 4), nx=3, start="2001-01-22", seed=2)
    store = CountingStore(LocalStore(path))
    shardwise.to_zarr(more, store, append_dim="time", consolidated=False)
    chunk_grid, _ = grid(path)
    # 21 stored + 9 appended: the first value fills shard 2; then 4 (rest of the first
    # dask chunk) and 4 (the second)
    assert chunk_grid["configuration"]["chunk_shapes"][0] == [6, [8, 2], [4, 2]]  # RLE
    after = files(path)
    assert after["tas/c/0/0"] == before["tas/c/0/0"]
    assert after["tas/c/1/0"] == before["tas/c/1/0"]
    assert after["tas/c/2/0"] != before["tas/c/2/0"]  # merged
    assert sorted(k for k in store.log.per_key("set") if k.startswith("tas/c/")) == [
        "tas/c/2/0",
        "tas/c/3/0",
        "tas/c/4/0",
    ]
    expected = xr.concat([first, more], "time").load()
    xr.testing.assert_identical(
        xr.open_dataset(path, engine="shardwise", consolidated=False).load(), expected
    )
    np.testing.assert_array_equal(zarr_read(path, "tas"), expected.tas.values)


def test_append_to_a_regular_array(tmp_path):
    path = tmp_path / "r.zarr"
    first = daily(lengths=(30, 30), nx=3)
    shardwise.to_zarr(first, path, shards={"time": 30}, chunks={"time": 1}, consolidated=False)
    more = daily(lengths=(31, 28), nx=3, start="2001-03-02")
    # without shards="dask": today's behaviour, the grid stays regular
    shardwise.to_zarr(more, path, append_dim="time", consolidated=False)
    assert grid(path)[0]["name"] == "regular"
    # with it, the appended dask chunks become shards and the grid turns rectilinear
    last = daily(lengths=(31, 30), nx=3, start="2001-04-30")
    shardwise.to_zarr(last, path, append_dim="time", shards="dask", consolidated=False)
    chunk_grid, _ = grid(path)
    # 119 stored in shards of 30 (the fourth has one free place): + 31 -> 150, + 30 -> 180
    assert chunk_grid["configuration"]["chunk_shapes"][0] == [[30, 6]]  # [value, count]
    expected = xr.concat([first, more, last], "time").load()
    xr.testing.assert_identical(
        xr.open_dataset(path, engine="shardwise", consolidated=False).load(), expected
    )


def test_append_with_inner_chunks_that_do_not_divide_is_refused(tmp_path):
    path = tmp_path / "m.zarr"
    shardwise.to_zarr(daily(lengths=(4, 8), nx=2), path, chunks={"time": 4}, consolidated=False)
    assert grid(path)[0]["name"] == "rectilinear"
    before = files(path)
    more = daily(lengths=(6, 3), nx=2, start="2001-01-13")
    with pytest.raises(WriteError, match="does not divide") as err:
        shardwise.to_zarr(more, path, append_dim="time", consolidated=False)
    assert err.value.array == "tas" and "6" in str(err.value)
    assert files(path) == before
    # 7 appended values in chunks of 4 and 3: shards of 4 and 4 (the last padded)
    ok = daily(lengths=(4, 3), nx=2, start="2001-01-13", seed=3)
    shardwise.to_zarr(ok, path, append_dim="time", consolidated=False)
    assert grid(path)[0]["configuration"]["chunk_shapes"][0] == [4, 8, [4, 2]]
    expected = xr.concat([daily(lengths=(4, 8), nx=2), ok], "time").load()
    np.testing.assert_array_equal(zarr_read(path, "tas"), expected.tas.values)


@pytest.mark.parametrize("region", ["slices", "auto"])
def test_region_writes_into_a_rectilinear_array(tmp_path, region):
    path = tmp_path / "m.zarr"
    ds = daily(lengths=(10, 6, 14), nx=4)
    shardwise.to_zarr(ds, path, chunks={"time": 2}, consolidated=False)
    part = (ds.isel(time=slice(7, 21)) * 0 - 1).chunk({"time": 5})
    if region == "auto":
        shardwise.to_zarr(part, path, region="auto", consolidated=False)
    else:
        part = part.drop_vars(["time", "x"])
        shardwise.to_zarr(part, path, region={"time": slice(7, 21)}, consolidated=False)
    expected = ds.tas.values.copy()
    expected[7:21] = -1
    np.testing.assert_array_equal(zarr_read(path, "tas"), expected)
    assert grid(path)[0]["configuration"]["chunk_shapes"][0] == [10, 6, 14]
    # separate jobs: regions on shard boundaries are disjoint, others share a shard
    shardwise.regions.check_regions(path, [{"time": slice(0, 10)}, {"time": slice(10, 30)}])
    with pytest.raises(shardwise.errors.RegionConflictError) as err:
        shardwise.regions.check_regions(path, [{"time": slice(0, 12)}, {"time": slice(12, 30)}])
    assert err.value.key == "tas/c/1/0"


# -- consolidated metadata, and every parse zarr-python makes for shardwise ----------------------
# A user's process has zarr-python's rectilinear flag off: nothing here turns it on, except
# around zarr-python's own reads (zarr_read), as zarr requires of a user.
CONSOLIDATED = pytest.mark.filterwarnings(
    "ignore:Consolidated metadata is currently not part:UserWarning"
)


def _flag_off():
    assert not zarr.config.get("array.rectilinear_chunks")


@CONSOLIDATED
def test_append_with_consolidated_metadata(tmp_path):
    """The append of the issue's example: consolidated metadata (the default) brought up
    to date after the data, the shards there before left as they were."""
    path = tmp_path / "m.zarr"
    first = daily(lengths=(31, 28, 31, 30))
    shardwise.to_zarr(first, path, mode="w", shards="dask", chunks={"time": 1})
    before = files(path)
    more = daily(lengths=(31, 29), start="2001-05-01", seed=1)
    shardwise.to_zarr(more, path, append_dim="time")
    _flag_off()
    after = files(path)
    assert all(after[k] == h for k, h in before.items() if k.startswith("tas/c/"))
    members = json.loads((path / "zarr.json").read_text())["consolidated_metadata"]["metadata"]
    assert members["tas"]["shape"] == [180, 8] and members["time"]["shape"] == [180]
    assert members["tas"]["chunk_grid"] == grid(path)[0]  # the array's own document
    expected = xr.concat([first, more], "time").load()
    back = xr.open_dataset(path, engine="shardwise", chunks={}, consolidated=True)
    assert back.tas.chunks[0] == (31, 28, 31, 30, 31, 29)
    xr.testing.assert_identical(back.load(), expected)
    with zarr.config.set(FLAG):
        xr.testing.assert_identical(xr.open_zarr(path, consolidated=True).load(), expected)
    _flag_off()


@CONSOLIDATED
def test_region_write_and_tree_with_consolidated_metadata(tmp_path):
    path = tmp_path / "m.zarr"
    ds = daily(lengths=(10, 6, 14), nx=4)
    shardwise.to_zarr(ds, path, shards="dask", chunks={"time": 2})
    shardwise.to_zarr((ds.isel(time=slice(7, 21)) * 0 - 1).chunk({"time": 5}), path, region="auto")
    _flag_off()
    expected = ds.tas.values.copy()
    expected[7:21] = -1
    np.testing.assert_array_equal(zarr_read(path, "tas"), expected)
    tree = xr.DataTree.from_dict({"/": xr.Dataset(attrs={"root": 1}), "/a": ds, "/a/b": ds})
    shardwise.to_zarr(tree, tmp_path / "t.zarr", shards="dask", chunks={"time": 2})
    _flag_off()
    members = json.loads((tmp_path / "t.zarr" / "zarr.json").read_text())
    assert members["consolidated_metadata"]["metadata"]["a/b/tas"]["chunk_grid"]["name"] == (
        "rectilinear"
    )
    back = xr.open_datatree(tmp_path / "t.zarr", engine="shardwise", chunks={})
    _flag_off()
    xr.testing.assert_identical(back["a/b"].to_dataset().load(), ds.load())


# -- bad input ------------------------------------------------------------------------------------
def _refused(tmp_path, ds, match, **kwargs):
    path = tmp_path / "bad.zarr"
    shardwise.to_zarr(daily(lengths=(5,), nx=2, name="other"), path, consolidated=False)
    before = files(path)
    with pytest.raises(WriteError, match=match) as err:
        shardwise.to_zarr(ds, path, mode="a", consolidated=False, **kwargs)
    assert files(path) == before
    return err.value


def test_zarr_v2_refused(tmp_path):
    path = tmp_path / "v2.zarr"
    with pytest.raises(WriteError, match="format 3") as err:
        shardwise.to_zarr(daily(), path, zarr_format=2, consolidated=False)
    assert err.value.array == "tas"
    assert not path.exists()


def test_inner_chunks_that_cannot_divide_are_refused(tmp_path):
    err = _refused(tmp_path, daily(), "does not divide", chunks={"time": 2})
    assert err.array == "tas"
    assert "31" in str(err) and "greatest common divisor is 1" in str(err)


def test_empty_dask_chunks_own_no_shard(tmp_path):
    """A dask chunk of size 0 holds nothing: it becomes no shard (it was refused)."""
    ds = daily(lengths=(3, 5), nx=2).chunk({"time": (3, 0, 5, 0)})
    path = tmp_path / "e.zarr"
    shardwise.to_zarr(ds, path, consolidated=False)
    with rectilinear_grids():
        arr = zarr.open_array(path, path="tas", mode="r")
        assert len(arr.metadata.chunk_grid.chunk_shapes[0]) == 2  # two shards (3, 5 padded)
    assert sorted(p.name for p in (path / "tas" / "c").iterdir()) == ["0", "1"]
    got = xr.open_dataset(path, engine="shardwise", consolidated=False).load()
    xr.testing.assert_identical(got, ds.load())


def test_too_many_shards_are_refused(tmp_path):
    n = MAX_SHARDS // 2 + 1
    sizes = (1, 2) * (n // 2) + (1,)
    big = xr.Dataset({"v": (("t", "x"), dask.array.zeros((sum(sizes), 2), chunks=(sizes, 1)))})
    err = _refused(tmp_path, big, "too many shards", chunks={"t": 1})
    assert err.array == "v" and f"{2 * len(sizes):,}" in str(err)
    assert not zarr.config.get("array.rectilinear_chunks")


# -- property: zarr-python reads back exactly what was meant -------------------------------------
@st.composite
def cases(draw):
    ndim = draw(st.integers(1, 3))
    shape, chunks, inner = [], [], []
    for _ in range(ndim):
        n = draw(st.integers(1, 24))
        sizes, left = [], n
        while left:
            sizes.append(draw(st.integers(1, min(left, 9))))
            left -= sizes[-1]
        shape.append(n)
        chunks.append(tuple(sizes))
        inner.append(draw(st.integers(1, 4)))
    op = draw(st.sampled_from(["none", "append", "region"]))
    extra = draw(st.lists(st.integers(1, 7), min_size=1, max_size=3))
    return tuple(shape), tuple(chunks), tuple(inner), op, tuple(extra)


@settings(max_examples=40, deadline=None)
@given(cases(), st.integers(0, 2**31))
def test_any_irregular_chunking_reads_back_in_zarr_python(case, seed):
    shape, chunks, inner, op, extra = case
    dims = ("a", "b", "c")[: len(shape)]
    rng = np.random.default_rng(seed)
    values = rng.integers(0, 1000, size=shape).astype("i4")
    ds = xr.Dataset({"v": (dims, values)}).chunk(dict(zip(dims, chunks, strict=True)))
    store = MemoryStore()

    def is_regular(sizes):
        return all(s == sizes[0] for s in sizes[:-1]) and sizes[-1] <= sizes[0]

    regular = all(is_regular(sizes) for sizes in chunks)
    # the inner chunk must divide every shard size but the last; a regular dimension
    # has one size, and a dimension in one dask chunk is padded unless the whole grid
    # is regular (shards="dask" then gives a regular grid of the first chunk sizes)
    ok = all(
        (sizes[0] % c == 0)
        if is_regular(sizes) and (len(sizes) > 1 or regular)
        else all(s % c == 0 for s in sizes[:-1])
        for sizes, c in zip(chunks, inner, strict=True)
    )
    with dask.config.set(scheduler="sync"):
        if not ok:
            shardwise.to_zarr(xr.Dataset({"w": (dims, values)}), store, consolidated=False)
            before = memory_digest(store)
            with pytest.raises(WriteError):
                shardwise.to_zarr(
                    ds, store, mode="a", shards="dask", chunks=dict(zip(dims, inner, strict=True))
                )
            assert memory_digest(store) == before
            return
        shardwise.to_zarr(
            ds, store, shards="dask", chunks=dict(zip(dims, inner, strict=True)), consolidated=False
        )
        expected = values
        with zarr.config.set(FLAG):
            meta = zarr.open_array(store, path="v").metadata
        if not regular:
            stored = meta.chunk_grid.chunk_shapes
            for e, sizes, c in zip(stored, chunks, inner, strict=True):
                if not is_regular(sizes):
                    assert e == pad(sizes, c)
                elif len(sizes) == 1:
                    assert e == pad(sizes, c)[0]
                else:
                    assert e == sizes[0]
        if op == "append":
            more = rng.integers(0, 1000, size=(sum(extra), *shape[1:])).astype("i4")
            part = xr.Dataset({"v": (dims, more)}).chunk({dims[0]: extra})
            grid_before = meta.chunk_grid
            first_regular = not hasattr(grid_before, "chunk_shapes") or isinstance(
                grid_before.chunk_shapes[0], int
            )
            c = inner[0]
            before = memory_digest(store)
            try:
                shardwise.to_zarr(part, store, append_dim=dims[0], consolidated=False)
            except WriteError:
                # refused only when an appended shard would not be a multiple of the
                # inner chunk, and then the store is as it was
                assert memory_digest(store) == before
                assert not first_regular
                edges = extend(
                    grid_before.chunk_shapes[0], shape[0], shape[0] + sum(extra), extra, c
                )
                assert any(e % c for e in edges[:-1])
                return
            expected = np.concatenate([values, more])
        elif op == "region":
            lo = min(extra[0], shape[0] - 1)
            hi = min(shape[0], lo + extra[-1])
            new = -values[lo:hi]
            part = xr.Dataset({"v": (dims, new)}).chunk({dims[0]: max(1, (hi - lo) // 2)})
            shardwise.to_zarr(part, store, region={dims[0]: slice(lo, hi)}, consolidated=False)
            expected = values.copy()
            expected[lo:hi] = new
    got = zarr_read(store, "v")
    np.testing.assert_array_equal(got, expected)
    back = xr.open_dataset(store, engine="shardwise", consolidated=False).v.values
    np.testing.assert_array_equal(back, expected)
    assert math.prod(got.shape) == expected.size


# -- other readers ----------------------------------------------------------------------------
def test_what_xarrays_own_zarr_engine_does_with_the_output(tmp_path):
    """Documented in docs/user-guide.md: xr.open_zarr refuses the grid unless zarr-python's
    flag is on; with it, it reads the values with one dask chunk per inner chunk."""
    ds = daily(lengths=(6, 4, 8), nx=3)
    shardwise.to_zarr(ds, tmp_path / "m.zarr", chunks={"time": 2}, consolidated=False)
    with pytest.raises(ValueError, match="Rectilinear chunk grids are experimental"):
        xr.open_zarr(tmp_path / "m.zarr", consolidated=False)
    with zarr.config.set(FLAG):
        back = xr.open_zarr(tmp_path / "m.zarr", consolidated=False)
        assert back.tas.chunks == ((2,) * 9, (3,))
        assert back.tas.encoding["shards"] == ((6, 4, 8), 3)
        xr.testing.assert_identical(back.load(), ds.load())


def test_tensorstore_cannot_open_the_rectilinear_grid(tmp_path):
    ts = pytest.importorskip("tensorstore")
    ds = daily(lengths=(6, 4, 8), nx=3)
    shardwise.to_zarr(ds, tmp_path / "m.zarr", chunks={"time": 2}, consolidated=False)
    spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(tmp_path / "m.zarr/tas")}}
    with pytest.raises(ValueError, match=r"rectilinear|chunk_grid"):
        ts.open(spec, open=True).result()
    # the advice for tensorstore users: regular shards
    shardwise.to_zarr(
        ds, tmp_path / "r.zarr", shards={"time": 6}, chunks={"time": 2}, consolidated=False
    )
    spec["kvstore"]["path"] = str(tmp_path / "r.zarr/tas")
    np.testing.assert_array_equal(ts.open(spec, open=True).result().read().result(), ds.tas.values)


def test_zarrs_reads_the_rectilinear_grid(tmp_path):
    """zarrs-python (the zarrs Rust crate as zarr-python's codec pipeline), strict: it
    parses the array's metadata, rectilinear grid included, and decodes the shards
    itself, with no fallback to zarr-python's pipeline."""
    zarrs = pytest.importorskip("zarrs")
    rng = np.random.default_rng(5)
    v = rng.normal(size=(23, 10)).astype("f4")
    ds = xr.Dataset({"v": (("t", "x"), v)}).chunk({"t": (4, 8, 6, 5), "x": (3, 7)})
    shardwise.to_zarr(ds, tmp_path / "z.zarr", chunks={"t": 2, "x": 1}, consolidated=False)
    config = {
        **FLAG,
        "codec_pipeline.path": "zarrs.ZarrsCodecPipeline",
        "codec_pipeline.strict": True,
    }
    with zarr.config.set(config):
        a = zarr.open_array(tmp_path / "z.zarr" / "v", mode="r")
        assert isinstance(a.async_array.codec_pipeline, zarrs.ZarrsCodecPipeline)
        np.testing.assert_array_equal(a[...], v)
        np.testing.assert_array_equal(a[5:17, 2:9], v[5:17, 2:9])


@pytest.mark.parametrize("data", ["numpy", "dask aligned", "dask misaligned"])
def test_explicit_rectilinear_shards_in_the_encoding(tmp_path, data):
    """Nested shard sizes in the encoding (which xarray refuses) are written as given,
    from numpy data (zarr-python writes it) or dask chunks of any alignment."""
    v = np.arange(18 * 10, dtype="i4").reshape(18, 10)
    ds = xr.Dataset({"v": (("t", "x"), v)})
    if data == "dask aligned":
        ds = ds.chunk({"t": (4, 8, 6)})
    elif data == "dask misaligned":
        ds = ds.chunk({"t": 5, "x": 3})
    enc = {"v": {"shards": ((4, 8, 6), 10), "chunks": (2, 5)}}
    shardwise.to_zarr(ds, tmp_path / "e.zarr", encoding=enc, consolidated=False)
    with zarr.config.set(FLAG):
        a = zarr.open_array(tmp_path / "e.zarr" / "v", mode="r")
        assert a.metadata.chunk_grid.chunk_shapes == ((4, 8, 6), 10)
        np.testing.assert_array_equal(a[...], v)
    with pytest.raises(WriteError, match="do not cover"):
        bad = {"v": {"shards": ((4, 8), 10), "chunks": (2, 5)}}
        shardwise.to_zarr(ds, tmp_path / "f.zarr", encoding=bad, consolidated=False)
    assert not (tmp_path / "f.zarr").exists()
