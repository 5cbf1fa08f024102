"""``shardwise.open_dataset``: the fan-out read graph (index tasks, read tasks below them)."""

from __future__ import annotations

import itertools
import warnings

import dask
import dask.array as da
import numpy as np
import pytest
import xarray as xr
import zarr
from dask.core import flatten
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from zarr.storage import LocalStore, MemoryStore

import shardwise
from shardwise.errors import ChunkRoundingWarning, ChunksError
from shardwise.io.cache import SUPPLIED
from shardwise.testing import CountingStore

from datasets import WEATHER_ENCODING, weather

# temperature: shape (40, 30, 20), shards (10, 30, 20), inner (5, 10, 10): 4 shards of 12
# precip: shards (16, 30, 10), inner (8, 15, 5): 3 x 1 x 2 shards of 8


def counted_store(path):
    return CountingStore(LocalStore(path, read_only=True))


def open_fanout(store, **kwargs):
    ds = shardwise.open_dataset(store, consolidated=False, **kwargs)
    if isinstance(store, CountingStore):
        store.log.clear()  # count data reads only
    return ds


def reference(path):
    return xr.open_dataset(path, engine="shardwise", consolidated=False).load()


def layer_tasks(arr, prefix):
    """Keys of the graph layers of a dask array whose names start with ``prefix``."""
    graph = arr.__dask_graph__()
    return [k for name, layer in graph.layers.items() if name.startswith(prefix) for k in layer]


def index_reads(log):
    """Index reads: the suffix ranges (the index sits at the end of these shards)."""
    return [r for r in log.gets() if r.byte_range.startswith("last ")]


def parse_range(text):
    start, stop = text.strip("[)").split(", ")
    return int(start), int(stop)


def covered(ranges):
    """The set of byte offsets a list of [start, stop) ranges covers."""
    out = set()
    for start, stop in ranges:
        out.update(range(start, stop))
    return out


@pytest.mark.parametrize(
    "chunks",
    ["shards", "inner", "auto", {"time": 40, "x": -1}, {"time": "auto", "y": "inner"}],
)
def test_same_dataset_as_the_engine(weather_store, chunks):
    path, ds = weather_store
    got = shardwise.open_dataset(path, chunks=chunks, consolidated=False)
    engine = xr.open_dataset(path, engine="shardwise", chunks={}, consolidated=False)
    assert got.temperature.chunks is not None
    xr.testing.assert_identical(got, engine)  # lazily: metadata, coordinates, attributes
    assert got.encoding == engine.encoding
    for name in got.variables:
        assert repr(got[name].encoding) == repr(engine[name].encoding), name  # NaN != NaN
    xr.testing.assert_identical(got.compute(), reference(path))
    # against the input, through the CF encoding (int16 packing of temperature)
    xr.testing.assert_allclose(got.compute(), ds, atol=0.006)


def test_chunk_shapes(weather_store):
    path, _ = weather_store
    by_shard = shardwise.open_dataset(path, consolidated=False)
    assert by_shard.temperature.chunks == ((10, 10, 10, 10), (30,), (20,))
    assert by_shard.precip.chunks == ((16, 16, 8), (30,), (10, 10))
    inner = shardwise.open_dataset(path, chunks="inner", consolidated=False)
    assert inner.temperature.chunks == ((5,) * 8, (10, 10, 10), (10, 10))
    assert inner.precip.chunks == ((8,) * 5, (15, 15), (5,) * 4)
    mixed = shardwise.open_dataset(path, chunks={"time": "inner", "x": -1}, consolidated=False)
    assert mixed.temperature.chunks == ((5,) * 8, (30,), (20,))
    assert mixed.precip.chunks == ((8,) * 5, (30,), (20,))


def test_auto_groups_shards_or_inner_chunks(weather_store):
    path, _ = weather_store
    # a temperature shard is 10 x 30 x 20 float64 (decoded) = 48000 bytes
    with dask.config.set({"array.chunk-size": "100 kB"}):
        big = shardwise.open_dataset(path, chunks="auto", consolidated=False)
    sizes = big.temperature.chunks[0]
    assert all(s % 10 == 0 for s in sizes[:-1]) and max(sizes) > 10, sizes  # whole shards
    with dask.config.set({"array.chunk-size": "10 kB"}):
        small = shardwise.open_dataset(path, chunks="auto", consolidated=False)
    for axis, unit in enumerate((5, 10, 10)):  # whole inner chunks
        sizes = small.temperature.chunks[axis]
        assert all(s % unit == 0 for s in sizes[:-1]), (axis, sizes)
    assert small.temperature.data.npartitions > 4
    xr.testing.assert_identical(small.compute(), reference(path))


def test_sizes_that_cut_inner_chunks_are_rounded_with_a_warning(weather_store):
    path, _ = weather_store
    with pytest.warns(ChunkRoundingWarning) as record:
        ds = shardwise.open_dataset(path, chunks={"time": 7}, consolidated=False)
    messages = sorted(str(w.message) for w in record)
    assert len(messages) == 2
    assert "of precip" in messages[0] and "time: 7 -> 8" in messages[0]
    assert "of temperature" in messages[1] and "time: 7 -> 5" in messages[1]
    assert "inner chunk shape (5, 10, 10)" in messages[1]
    assert ds.temperature.chunks[0] == (5,) * 8
    assert ds.precip.chunks[0] == (8,) * 5
    with pytest.warns(ChunkRoundingWarning, match=r"\(3, 17, 20\) -> \(5, 15, 20\)"):
        ds2 = shardwise.open_dataset(
            path, chunks={"time": (3, 17, 20)}, drop_variables=["precip"], consolidated=False
        )
    assert ds2.temperature.chunks[0] == (5, 15, 20)
    xr.testing.assert_identical(ds2.compute(), reference(path).drop_vars("precip"))
    # sizes on inner-chunk boundaries: no warning
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        shardwise.open_dataset(path, chunks={"time": 40, "x": 10}, consolidated=False)


@pytest.mark.parametrize(
    ("chunks", "match"),
    [
        ("bogus", "unknown chunks"),
        (5, "unknown chunks"),
        ({"depth": 3}, "dimensions the dataset does not have"),
        ({"time": (10, 10)}, "adding up to the dimension's length 40"),
        ({"time": 0}, "bad chunk size"),
        ({"time": "many"}, "unknown chunks along 'time'"),
    ],
)
def test_bad_chunks(weather_store, chunks, match):
    path, _ = weather_store
    with pytest.raises(ChunksError, match=match) as info:
        shardwise.open_dataset(path, chunks=chunks, consolidated=False)
    assert isinstance(info.value, ValueError)


def test_graph_has_one_index_task_per_shard(weather_store):
    path, _ = weather_store
    ds = shardwise.open_dataset(path, chunks="inner", consolidated=False)
    arr = ds.temperature.data
    index = layer_tasks(arr, "shardwise-index-")
    reads = layer_tasks(arr, "shardwise-read-temperature-")
    assert len(index) == 4  # shards
    assert len(reads) == 8 * 3 * 2  # inner chunks
    graph = dict(arr.__dask_graph__())
    deps = {k: graph[k].dependencies for k in reads}
    for key, dep in deps.items():
        shard_deps = [d for d in dep if d[0].startswith("shardwise-index-")]
        assert len(shard_deps) == 1
        assert shard_deps[0][1] == key[1] // 2  # inner chunk row -> its shard
    # only shards that several chunks share get an index task: with chunks of 15 rows
    # (shards of 10) shard 1 (rows 10..19) is shared by chunks 0 and 1, the others not
    mixed = shardwise.open_dataset(
        path, chunks={"time": 15}, drop_variables=["precip"], consolidated=False
    ).temperature.data
    assert mixed.chunks[0] == (15, 15, 10)
    assert [k[1:] for k in layer_tasks(mixed, "shardwise-index-")] == [(1, 0, 0)]
    graph = dict(mixed.__dask_graph__())
    shard_deps = {
        key[1]: sorted(d[1] for d in graph[key].dependencies if "shardwise-index-" in d[0])
        for key in layer_tasks(mixed, "shardwise-read-temperature-")
    }
    assert shard_deps == {0: [1], 1: [1], 2: []}
    np.testing.assert_array_equal(mixed.compute(), reference(path).temperature.values)


def test_chunks_of_whole_shards_need_no_index_tasks(weather_store):
    """One read task per shard reads it as the engine does: one request per shard."""
    path, _ = weather_store
    store = counted_store(path)
    ds = open_fanout(store)
    assert not layer_tasks(ds.temperature.data, "shardwise-index-")
    shardwise.cache.clear_index_cache()
    ds.temperature.compute(scheduler="threads")
    assert sorted((r.key, r.byte_range) for r in store.log.gets()) == [
        (f"temperature/c/{i}/0/0", "whole") for i in range(4)
    ]


@pytest.mark.parametrize("index_cache", [True, False])
def test_one_index_read_per_shard_per_job(weather_store, index_cache):
    """The index tasks' results reach every read task of the shard; without the
    per-process cache too (that is how it works across worker processes)."""
    path, _ = weather_store
    store = counted_store(path)
    ds = open_fanout(store, chunks="inner", read_options={"index_cache": index_cache})
    shardwise.cache.clear_index_cache()
    with dask.config.set(scheduler="threads", num_workers=4):
        got = ds.compute()
    xr.testing.assert_identical(got, reference(path))
    assert not SUPPLIED.current()  # the read tasks' indexes are gone once they finished
    for name, nshards in (("temperature", 4), ("precip", 6)):
        idx = [r.key for r in index_reads(store.log) if r.key.startswith(f"{name}/")]
        assert len(idx) == nshards and len(set(idx)) == nshards, idx
        # everything else is a ranged read of inner chunks; no shard is read whole
        data = [r for r in store.log.gets() if r.key.startswith(f"{name}/")]
        assert all(r.byte_range.startswith(("[", "last ")) for r in data), data


@pytest.mark.parametrize(
    ("chunks", "read_block", "index_tasks"),
    [("shards", (1, 0, 0), []), ({"time": 5}, (2, 0, 0), [(1, 0, 0)])],
)
def test_slicing_reads_only_what_the_selection_needs(
    weather_store, chunks, read_block, index_tasks
):
    path, _ = weather_store
    store = counted_store(path)
    ds = open_fanout(
        store, chunks=chunks, drop_variables=["precip"], read_options={"coalesce_gap": 0}
    )
    sub = ds.temperature.isel(time=slice(11, 14), y=slice(0, 8))  # shard 1, inner (0, 0, *)

    # the graph, culled: one read task, and the index task of shard 1 where it has one
    arr = sub.data
    culled = dict(arr.__dask_graph__().cull(set(flatten(arr.__dask_keys__()))))
    assert [k[1:] for k in culled if k[0].startswith("shardwise-index-")] == index_tasks
    assert [k[1:] for k in culled if k[0].startswith("shardwise-read-")] == [read_block]
    # optimized: dask fused the slice into the read task (one getter, its region narrowed
    # to the selection); any index task left is shard 1's
    optimized = dict(arr.__dask_optimize__(arr.__dask_graph__(), arr.__dask_keys__()))
    indexed = [k for k in optimized if "shardwise-index-" in str(k)]
    assert all(k[1:] == (1, 0, 0) for k in indexed), indexed

    shardwise.cache.clear_index_cache()
    got = sub.compute(scheduler="threads")
    np.testing.assert_array_equal(got.values, reference(path).temperature.values[11:14, 0:8])

    gets = store.log.gets()
    assert {r.key for r in gets} == {"temperature/c/1/0/0"}
    assert len(index_reads(store.log)) == 1
    # the data requests cover exactly inner chunks (0, 0, 0) and (0, 0, 1) of shard 1:
    # time 11:14 is in inner row 0 (rows 10:15), y 0:8 in inner column 0 (0:10) (the
    # suffix request for the index said the shard's size, and its entries were checked
    # against it: no range is read on to find where the data end)
    table = shardwise.ArrayReader.open(path, "temperature").shard_index((1, 0, 0))
    wanted = [(int(off), int(off + n)) for off, n in (table[0, 0, j] for j in range(2))]
    expected = covered(wanted)
    ranges = [parse_range(r.byte_range) for r in gets if r.byte_range.startswith("[")]
    assert covered(ranges) == expected
    assert sum(b - a for a, b in ranges) == len(expected)  # nothing read twice


def test_point_and_fancy_selections(weather_store):
    path, _ = weather_store
    ds = shardwise.open_dataset(path, chunks="shards", consolidated=False)
    ref = reference(path)
    for sel in (
        {"time": 3, "x": 7},
        {"time": [0, 13, 39], "y": slice(5, 25, 3)},
        {"time": slice(None, None, -1)},
        {"x": np.array([19, 0, 4])},
    ):
        xr.testing.assert_identical(ds.isel(sel).compute(), ref.isel(sel))


def test_missing_shards_read_as_fill_with_no_data_requests(tmp_path):
    data = np.full((40, 12), np.nan, dtype="f4")
    data[:10] = np.arange(120, dtype="f4").reshape(10, 12)
    ds = xr.Dataset({"v": (("t", "x"), data)})
    path = tmp_path / "sparse.zarr"
    ds.to_zarr(
        path,
        zarr_format=3,
        consolidated=False,
        encoding={"v": {"chunks": (5, 6), "shards": (10, 12)}},
    )
    assert sorted(p.name for p in (path / "v" / "c").iterdir()) == ["0"]  # only shard 0
    store = counted_store(path)
    got = open_fanout(store, chunks="inner")
    xr.testing.assert_identical(got.compute(scheduler="threads"), ds)
    keys = {r.key for r in store.log.gets()}
    assert keys == {f"v/c/{i}/0" for i in range(4)}
    # the three missing shards cost one (failed) index read each and nothing more
    for i in (1, 2, 3):
        assert [r.byte_range for r in store.log.gets() if r.key == f"v/c/{i}/0"] == ["last 68"]


def test_unsharded_and_fallback_variables(tmp_path):
    ds = xr.Dataset(
        {
            "plain": (("t", "x"), np.arange(60, dtype="i8").reshape(10, 6)),
            "names": (("t",), np.array([f"n{i}" for i in range(10)], dtype=object)),
        }
    )
    path = tmp_path / "plain.zarr"
    ds.to_zarr(path, zarr_format=3, consolidated=False, encoding={"plain": {"chunks": (4, 3)}})
    got = shardwise.open_dataset(path, chunks="shards", consolidated=False)
    assert got.plain.chunks == ((4, 4, 2), (3, 3))  # chunks are the "shards" of plain arrays
    assert not layer_tasks(got.plain.data, "shardwise-index-")  # no index to read
    assert isinstance(got.names.data, da.Array)
    ref = xr.open_dataset(path, engine="zarr", consolidated=False).load()
    xr.testing.assert_identical(got.compute(), ref)


def test_groups_and_read_options(tmp_path):
    ds = weather()
    store = MemoryStore()
    ds.to_zarr(store, group="a/b", zarr_format=3, encoding=WEATHER_ENCODING, consolidated=False)
    got = shardwise.open_dataset(
        store,
        group="a/b",
        consolidated=False,
        read_options=shardwise.ReadOptions(coalesce_gap=0, index_cache=False),
    )
    ref = xr.open_dataset(store, group="a/b", engine="zarr", consolidated=False).load()
    xr.testing.assert_identical(got.compute(), ref)


def test_array_rewritten_between_opens_is_read_fresh(tmp_path):
    """Index tasks of a new open never reuse the indexes of an old one."""
    path = tmp_path / "rw.zarr"
    enc = {"v": {"chunks": (5,), "shards": (10,)}}
    xr.Dataset({"v": ("t", np.arange(20.0))}).to_zarr(
        path, zarr_format=3, consolidated=False, encoding=enc
    )
    first = shardwise.open_dataset(path, consolidated=False).compute()
    xr.Dataset({"v": ("t", np.arange(20.0) * 1000)}).to_zarr(
        path, mode="w", zarr_format=3, consolidated=False, encoding=enc
    )
    second = shardwise.open_dataset(path, consolidated=False).compute()
    np.testing.assert_array_equal(first.v, np.arange(20.0))
    np.testing.assert_array_equal(second.v, np.arange(20.0) * 1000)


@st.composite
def fanout_cases(draw):
    ndim = draw(st.integers(1, 3))
    inner = [draw(st.integers(1, 4)) for _ in range(ndim)]
    shards = [i * draw(st.integers(1, 3)) for i in inner]
    shape = [draw(st.integers(0, 3 * s + 2)) for s in shards]
    spec = []
    for n in shape:
        spec.append(
            draw(
                st.one_of(
                    st.sampled_from(["shards", "inner", "auto", None, -1]),
                    st.integers(1, max(n, 1) + 2),
                )
            )
        )
    sel = []
    for n in shape:
        start = draw(st.integers(0, max(n - 1, 0)))
        stop = draw(st.integers(start, n))
        step = draw(st.sampled_from([1, 1, 2, -1]))
        sel.append(slice(start, stop) if step == 1 else slice(None, None, step))
    return shape, shards, inner, spec, tuple(sel)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=fanout_cases())
def test_property_any_chunks_any_slice(case):
    """Any grouping of whole inner chunks, then any slice: the values zarr-python reads."""
    shape, shards, inner, spec, sel = case
    rng = np.random.default_rng(len(shape))
    data = rng.integers(0, 1000, size=shape).astype("i4")
    store = MemoryStore()
    arr = zarr.create_array(
        store,
        name="v",
        shape=shape,
        dtype="i4",
        chunks=inner,
        shards=shards,
        fill_value=0,
        dimension_names=[f"d{i}" for i in range(len(shape))],
    )
    arr[...] = data
    dims = [f"d{i}" for i in range(len(shape))]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ChunkRoundingWarning)
        ds = shardwise.open_dataset(
            store, chunks=dict(zip(dims, spec, strict=True)), consolidated=False
        )
    got = ds.v[sel].compute(scheduler="sync").values
    np.testing.assert_array_equal(got, arr[...][sel])
    # every dask chunk holds whole inner chunks (the array's end aside)
    for axis, sizes in enumerate(ds.v.chunks):
        for start in itertools.accumulate((0, *sizes[:-1])):
            assert start % inner[axis] == 0
