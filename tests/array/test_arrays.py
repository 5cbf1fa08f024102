"""dask arrays without xarray: ``shardwise.to_zarr(x, store, path=...)`` and
``shardwise.array.from_zarr``, checked against zarr-python and ``dask.array.from_zarr`` on
the same stores."""

from __future__ import annotations

import dask
import dask.array as da
import numpy as np
import pytest
import zarr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from zarr.codecs import BloscCodec, ShardingCodec, ZstdCodec

import shardwise
from shardwise import _compat
from shardwise._flags import rectilinear_grids
from shardwise.errors import StoreExistsError, WriteError


def values(shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape).round(3).astype("f4")


def inner_of(arr):
    (codec,) = [c for c in arr.metadata.codecs if isinstance(c, ShardingCodec)]
    return tuple(codec.chunk_shape)


def test_write_at_a_path_reads_back_with_zarr_python_and_dask(tmp_path):
    data = values((60, 40))
    x = da.from_array(data, chunks=(20, 40))
    arr = shardwise.array.to_zarr(x, tmp_path / "s.zarr", path="group/v")
    assert isinstance(arr, zarr.Array)
    got = zarr.open_array(tmp_path / "s.zarr", path="group/v", mode="r")
    assert got.shards == (20, 40)  # shards="dask": one shard per dask chunk
    assert 20 % inner_of(got)[0] == 0 and 40 % inner_of(got)[1] == 0
    assert got.metadata.dimension_names is None and got.attrs.asdict() == {}
    np.testing.assert_array_equal(got[...], data)
    np.testing.assert_array_equal(da.from_zarr(str(tmp_path / "s.zarr"), component="group/v"), data)
    back = shardwise.array.from_zarr(tmp_path / "s.zarr", "group/v")
    assert back.chunks == ((20, 20, 20), (40,))
    np.testing.assert_array_equal(back.compute(), data)


def test_codecs_fill_value_attributes_and_names_are_zarr_pythons(tmp_path):
    """The array's metadata is what zarr-python's create_array writes for the same
    arguments."""
    data = values((32, 24))
    kwargs = {
        "compressors": BloscCodec(cname="lz4", clevel=3),
        "fill_value": -9.0,
        "attributes": {"units": "K", "note": [1, 2]},
        "dimension_names": ("y", "x"),
    }
    shardwise.array.to_zarr(
        da.from_array(data, chunks=8), tmp_path / "a.zarr", shards=(16, 24), chunks=(8, 8), **kwargs
    )
    ref = zarr.create_array(
        tmp_path / "b.zarr", shape=data.shape, dtype="f4", shards=(16, 24), chunks=(8, 8), **kwargs
    )
    ref[...] = data
    got = zarr.open_array(tmp_path / "a.zarr", mode="r")
    assert got.metadata.to_dict() == ref.metadata.to_dict()
    np.testing.assert_array_equal(got[...], ref[...])


@pytest.mark.parametrize(
    ("shards", "chunks", "want_shards", "want_inner"),
    [
        ((30, -1), (10, 20), (30, 40), (10, 20)),
        ({0: 15}, {1: 8}, (15, 40), (15, 8)),
        ({-1: 20}, None, (60, 20), None),
        ("auto", "auto", None, None),
    ],
)
def test_shards_and_chunks_by_axis(tmp_path, shards, chunks, want_shards, want_inner):
    data = values((60, 40))
    x = da.from_array(data, chunks=(7, 13))  # cuts the shards: gathered by shard tasks
    shardwise.array.to_zarr(x, tmp_path / "s.zarr", shards=shards, chunks=chunks)
    got = zarr.open_array(tmp_path / "s.zarr", mode="r")
    if want_shards is not None:
        assert got.shards == want_shards
    if want_inner is not None:
        assert inner_of(got) == want_inner
    assert all(s % c == 0 for s, c in zip(got.shards, inner_of(got), strict=True))
    np.testing.assert_array_equal(got[...], data)


@pytest.mark.rectilinear
def test_irregular_chunks_become_a_rectilinear_grid(tmp_path):
    data = values((50, 12))
    x = da.from_array(data, chunks=((10, 20, 6, 14), (12,)))
    shardwise.array.to_zarr(x, tmp_path / "r.zarr", chunks=(2, 12))
    with rectilinear_grids():
        got = zarr.open_array(tmp_path / "r.zarr", mode="r")
        assert got.metadata.chunk_grid.to_dict()["name"] == "rectilinear"
        np.testing.assert_array_equal(got[...], data)
    back = shardwise.array.from_zarr(tmp_path / "r.zarr")
    assert back.chunks == ((10, 20, 6, 14), (12,))
    np.testing.assert_array_equal(back.compute(), data)
    # the last edge is padded to a multiple of the inner chunk
    with pytest.raises(WriteError, match="does not divide a shard edge") as info:
        shardwise.array.to_zarr(x, tmp_path / "bad.zarr", chunks=(4, 12))
    assert "axis 0" in str(info.value)
    assert not (tmp_path / "bad.zarr").exists()


def test_one_task_per_shard_however_the_dask_chunks_cut_them(tmp_path):
    data = values((64, 64))
    x = da.from_array(data, chunks=(24, 40))
    delayed = shardwise.array.to_zarr(
        x, tmp_path / "s.zarr", shards=(32, 32), chunks=(8, 8), compute=False
    )
    graph = dict(delayed.__dask_graph__())
    shard_tasks = [k for k in graph if isinstance(k, tuple) and k[0].startswith("shardwise-shard-")]
    assert len(shard_tasks) == 4  # every shard is cut, so each has a task of its own
    got = zarr.open_array(tmp_path / "s.zarr", mode="r")
    assert not any(k.startswith("c/") for k in _keys(tmp_path / "s.zarr"))  # metadata only
    result = delayed.compute()
    assert isinstance(result, zarr.Array) and result.shape == (64, 64)
    np.testing.assert_array_equal(got[...], data)


def _keys(root):
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def test_modes_region_and_append(tmp_path):
    store = tmp_path / "m.zarr"
    data = values((40, 30))
    shardwise.array.to_zarr(da.from_array(data, chunks=(20, 30)), store, chunks=(10, 10))
    with pytest.raises(StoreExistsError, match="exists already") as info:
        shardwise.array.to_zarr(da.from_array(data, chunks=10), store)
    assert isinstance(info.value, FileExistsError) and info.value.key == "zarr.json"

    # a region cutting shards and inner chunks: the rest of each shard is kept
    patch = values((13, 17), seed=1)
    shardwise.array.to_zarr(
        da.from_array(patch, chunks=(5, 9)), store, region=(slice(12, 25), slice(4, 21))
    )
    want = data.copy()
    want[12:25, 4:21] = patch
    np.testing.assert_array_equal(zarr.open_array(store, mode="r")[...], want)
    shardwise.array.to_zarr(
        da.from_array(patch[:, :2], chunks=5),
        store,
        mode="a",
        region={1: slice(28, 30), 0: slice(0, 13)},
    )
    want[0:13, 28:30] = patch[:, :2]

    # an append along axis 0 that starts inside the last shard
    more = values((25, 30), seed=2)
    arr = shardwise.array.to_zarr(da.from_array(more, chunks=(7, 30)), store, append_dim=0)
    want = np.concatenate([want, more])
    assert arr.shape == (65, 30)
    np.testing.assert_array_equal(zarr.open_array(store, mode="r")[...], want)
    np.testing.assert_array_equal(shardwise.array.from_zarr(store).compute(), want)

    # mode="w" replaces the array
    shardwise.array.to_zarr(da.from_array(data[:5], chunks=5), store, mode="w")
    assert zarr.open_array(store, mode="r").shape == (5, 30)


@pytest.mark.rectilinear
def test_append_to_a_rectilinear_array_adds_the_chunks_as_shards(tmp_path):
    store = tmp_path / "r.zarr"
    first = values((30, 8))
    shardwise.array.to_zarr(da.from_array(first, chunks=((10, 20), (8,))), store, chunks=(5, 8))
    more = values((17, 8), seed=3)
    with pytest.raises(WriteError, match="does not divide a shard edge"):
        shardwise.array.to_zarr(da.from_array(more, chunks=((12, 5), (8,))), store, append_dim=0)
    shardwise.array.to_zarr(da.from_array(more, chunks=((10, 7), (8,))), store, append_dim=0)
    with rectilinear_grids():
        got = zarr.open_array(store, mode="r")
        assert got.metadata.chunk_grid.chunk_shapes[0] == (10, 20, 10, 10)  # last one padded
        np.testing.assert_array_equal(got[...], np.concatenate([first, more]))


def test_bad_input_is_refused_before_anything_is_written(tmp_path):
    store = tmp_path / "s.zarr"
    x = da.from_array(values((20, 10)), chunks=10)
    with pytest.raises(WriteError, match="does not divide the shard size") as info:
        shardwise.array.to_zarr(x, store, shards=(10, 10), chunks=(4, 5))
    assert "axis 0" in str(info.value) and "Use e.g. 2" in str(info.value)
    with pytest.raises(WriteError, match="wrong number of axes"):
        shardwise.array.to_zarr(x, store, shards=(10,))
    with pytest.raises(WriteError, match="writes into an existing array"):
        shardwise.array.to_zarr(x, store, region=(slice(0, 20),))
    with pytest.raises(shardwise.errors.ArgumentError, match="encoding"):
        shardwise.array.to_zarr(x, store, encoding={"v": {}})
    with pytest.raises(WriteError, match="options for a single dask array"):
        import xarray as xr

        shardwise.to_zarr(xr.Dataset({"v": ("x", np.arange(3))}), store, fill_value=1)
    assert not store.exists()

    shardwise.array.to_zarr(x, store)
    before = {k: (store / k).read_bytes() for k in _keys(store)}
    bad = [
        ({"region": (slice(0, 5),)}, "does not fit the region"),
        ({"region": (slice(0, 30),)}, "reaches past the array"),
        ({"region": (slice(0, 20, 2),)}, "step 1"),
        ({"append_dim": 2, "mode": "a"}, "not an axis"),
        ({"append_dim": 0, "compressors": ZstdCodec()}, "creation options"),
        ({"append_dim": 0, "mode": "w-"}, "an append goes into an existing array"),
    ]
    for kwargs, match in bad:
        with pytest.raises(WriteError, match=match):
            shardwise.array.to_zarr(x, store, **kwargs)
    with pytest.raises(WriteError, match="another number of axes"):
        shardwise.array.to_zarr(x[:, 0], store, mode="r+")
    with pytest.raises(WriteError, match="cannot be written into the array"):
        shardwise.array.to_zarr(x.astype("c8"), store, mode="r+")
    with pytest.raises(WriteError, match="does not match the array along the other axes"):
        shardwise.array.to_zarr(x[:, :5], store, append_dim=0)
    zarr.create_group(tmp_path / "g.zarr")
    with pytest.raises(WriteError, match="a group is where the array would go"):
        shardwise.array.to_zarr(x, tmp_path / "g.zarr", mode="w")
    assert {k: (store / k).read_bytes() for k in _keys(store)} == before


@pytest.mark.rectilinear
def test_unknown_chunk_sizes_are_refused_with_dasks_advice(tmp_path):
    """dask's own test: ``x[x > 3]`` has NaN chunk sizes; dask refuses it with a
    ValueError pointing to ``compute_chunk_sizes()``, and so does shardwise, before
    anything is written. After ``compute_chunk_sizes()`` it is written."""
    store = tmp_path / "s.zarr"
    x = da.arange(25, chunks=10)
    y = x[x > 3]
    with pytest.raises(ValueError, match="unknown chunk sizes") as info:
        shardwise.array.to_zarr(y, store, path="v")
    assert isinstance(info.value, WriteError)
    assert "compute_chunk_sizes()" in str(info.value) and "axis 0" in str(info.value)
    assert not store.exists()
    known = da.arange(25, chunks=(10, 15))[da.arange(25, chunks=(10, 15)) > 3]
    known = known.compute_chunk_sizes()
    assert known.chunks == ((6, 15),)
    shardwise.array.to_zarr(known, store, path="v")
    np.testing.assert_array_equal(shardwise.array.from_zarr(store, "v").compute(), np.arange(4, 25))
    with rectilinear_grids():  # the irregular chunks became a rectilinear grid
        np.testing.assert_array_equal(zarr.open_array(store, path="v", mode="r")[...], y.compute())


def test_zarr_v2_unsharded(tmp_path):
    data = values((30, 20))
    shardwise.array.to_zarr(
        da.from_array(data, chunks=(7, 20)), tmp_path / "v2.zarr", zarr_format=2, chunks=(10, 10)
    )
    got = zarr.open_array(tmp_path / "v2.zarr", mode="r")
    assert got.metadata.zarr_format == 2 and got.chunks == (10, 10)
    np.testing.assert_array_equal(got[...], data)
    np.testing.assert_array_equal(shardwise.array.from_zarr(tmp_path / "v2.zarr").compute(), data)
    with pytest.raises(WriteError, match="Zarr v2 has no shards"):
        shardwise.array.to_zarr(
            da.from_array(data), tmp_path / "v2b.zarr", zarr_format=2, shards=(10, 10)
        )


@pytest.mark.parametrize(
    ("chunks", "want"),
    [
        ("shards", ((32, 32), (48,))),
        ("inner", ((8,) * 8, (16,) * 3)),
        ((16, -1), ((16,) * 4, (48,))),
        ({1: "inner"}, ((32, 32), (16,) * 3)),
        ([None, 32], ((32, 32), (32, 16))),
    ],
)
def test_from_zarr_chunks(tmp_path, chunks, want):
    data = values((64, 48))
    z = zarr.create_array(
        tmp_path / "s.zarr", shape=data.shape, dtype="f4", shards=(32, 48), chunks=(8, 16)
    )
    z[...] = data
    x = shardwise.array.from_zarr(str(tmp_path / "s.zarr"), chunks=chunks)
    assert x.chunks == want
    np.testing.assert_array_equal(x.compute(), data)
    np.testing.assert_array_equal(x[5:40:3, 7].compute(), da.from_zarr(z)[5:40:3, 7].compute())


def test_from_zarr_fans_out_below_one_index_task_per_shared_shard(tmp_path):
    data = values((64, 48))
    z = zarr.create_array(
        tmp_path / "s.zarr", shape=data.shape, dtype="f4", shards=(32, 48), chunks=(8, 16)
    )
    z[...] = data
    x = shardwise.array.from_zarr(tmp_path / "s.zarr", chunks="inner")
    index = [
        k
        for k in dict(x.__dask_graph__())
        if isinstance(k, tuple) and k[0].startswith("shardwise-index-")
    ]
    assert len(index) == 2  # one per shard, read once for its 24 inner-chunk tasks
    np.testing.assert_array_equal(x.compute(), data)


def test_from_zarr_refuses_unknown_chunks(tmp_path):
    z = zarr.create_array(tmp_path / "s.zarr", shape=(4, 4), dtype="f4", chunks=(2, 2))
    for chunks, match in [
        ("big", "unknown chunks"),
        ((2,), "wrong number of axes"),
        ({2: 1}, "axis"),
    ]:
        with pytest.raises(shardwise.errors.ChunksError, match=match):
            shardwise.array.from_zarr(tmp_path / "s.zarr", chunks=chunks)
    del z


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    shape=st.tuples(st.integers(1, 40), st.integers(1, 30)),
    dask_chunks=st.tuples(st.integers(1, 17), st.integers(1, 17)),
    shards=st.tuples(st.integers(1, 4), st.integers(1, 4)),
    inner=st.tuples(st.integers(1, 5), st.integers(1, 5)),
)
def test_any_dask_chunking_writes_what_zarr_python_reads(
    tmp_path_factory, shape, dask_chunks, shards, inner
):
    data = values(shape, seed=sum(shape))
    store = tmp_path_factory.mktemp("h") / "s.zarr"
    shard_shape = tuple(s * c for s, c in zip(shards, inner, strict=True))
    shardwise.array.to_zarr(
        da.from_array(data, chunks=dask_chunks), store, shards=shard_shape, chunks=inner
    )
    np.testing.assert_array_equal(zarr.open_array(store, mode="r")[...], data)
    np.testing.assert_array_equal(shardwise.array.from_zarr(store, chunks="inner").compute(), data)


def test_threads_scheduler_and_memory_store():
    store = zarr.storage.MemoryStore()
    data = values((20, 20))
    with dask.config.set(scheduler="threads"):
        shardwise.array.to_zarr(
            da.from_array(data, chunks=(6, 20)), store, path="v", shards=(10, 10), chunks=(5, 5)
        )
        np.testing.assert_array_equal(shardwise.array.from_zarr(store, "v").compute(), data)


# -- the write planner the dask-array and xarray paths share (shardwise.array.decisions) ---------
def test_plan_default_mode_is_the_same_for_both_paths():
    from shardwise.array.decisions import default_mode

    assert default_mode(None, None, None) == "w-"
    assert default_mode(None, (slice(0, 2),), None) == "r+"
    assert default_mode(None, None, 0) == "a"
    assert default_mode(None, (slice(0, 2),), 0) == "a"  # both: each path then refuses
    assert default_mode("w", (slice(0, 2),), 0) == "w"


def test_plan_grids_from_dask_chunks():
    from shardwise.array.decisions import dask_edges, dask_grid, padded_edges

    assert dask_grid(((20, 20, 5), (40,), ())) == (20, 40, 1)
    edges = dask_edges("v", ["a", "b", "c"], ((10, 20, 5), (8, 8, 4), (7,)))
    assert edges == ((10, 20, 5), 8, (7,))
    assert padded_edges(edges, (5, 4, 4)) == ((10, 20, 5), 8, (8,))
    assert padded_edges(edges, (5, 4, 4), collapse=True) == ((10, 20, 5), 8, 8)
    with pytest.raises(WriteError, match="a dask chunk of size 0 cannot become a shard"):
        dask_edges("v", ["a"], ((3, 0, 2),))


def test_plan_regions_and_dtypes():
    from shardwise.array.decisions import castable, region_bounds

    assert region_bounds(slice(None), 10) == (0, 10)
    assert region_bounds(slice(-4, None), 10) == (6, 10)
    assert region_bounds(slice(5, 2), 10) == (5, 2)  # each path measures it itself
    assert region_bounds(slice(0, 11), 10) is None
    assert region_bounds(slice(-11, 3), 10) is None
    assert castable(np.dtype("f8"), np.dtype("f4")) and castable(np.dtype("i2"), np.dtype("f8"))
    assert not castable(np.dtype("f4"), np.dtype("i4"))
    assert not castable(np.dtype("c8"), np.dtype("f8"))


@pytest.mark.rectilinear
def test_plan_appended_grid_keeps_regular_dimensions_only_when_asked(tmp_path):
    from shardwise.array.decisions import appended_grid, rectilinear

    x = da.from_array(values((35, 20)), chunks=((10, 20, 5), (10, 10)))
    arr = shardwise.array.to_zarr(x, tmp_path / "s.zarr", path="v")
    with rectilinear_grids():
        meta = zarr.open_array(tmp_path / "s.zarr", path="v", mode="r").metadata
    assert rectilinear(meta)
    grown = appended_grid(meta, "v", ["a", "b"], 0, (5, 15))
    assert grown is not None and tuple(grown[0][:3]) == (10, 20, 10)
    assert appended_grid(meta, "v", ["a", "b"], 1, (10,), keep_regular=True) is None
    assert appended_grid(meta, "v", ["a", "b"], 1, (10,)) is not None
    del arr


@pytest.mark.xarray_rectilinear  # (the Dataset path is one of the two)
def test_both_paths_plan_the_same_rectilinear_grid(tmp_path):
    """One planner: the same irregular dask chunks become the same shards and inner
    chunks whether written as a dask array or as a Dataset variable."""
    import xarray as xr

    x = da.from_array(values((35, 20)), chunks=((10, 20, 5), (8, 8, 4)))
    shardwise.array.to_zarr(x, tmp_path / "a.zarr", path="v")
    shardwise.to_zarr(xr.Dataset({"v": (("y", "x"), x)}), tmp_path / "b.zarr", consolidated=False)
    with rectilinear_grids():
        a = zarr.open_array(tmp_path / "a.zarr", path="v", mode="r").metadata
        b = zarr.open_array(tmp_path / "b.zarr", path="v", mode="r").metadata
    assert a.chunk_grid == b.chunk_grid
    assert _compat.sharding_codec(a).chunk_shape == _compat.sharding_codec(b).chunk_shape
