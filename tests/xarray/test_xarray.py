"""The xarray engine: identical to engine="zarr" in everything but how data is read."""

from __future__ import annotations

import pickle
import subprocess
import sys

import dask
import numpy as np
import pytest
import xarray as xr
import zarr
from zarr.storage import LocalStore

from shardwise.testing import CountingStore
from shardwise.xarray.backend import ShardwiseBackendArray

from datasets import WEATHER_ENCODING, weather


def open_both(path, **kwargs):
    kwargs.setdefault("consolidated", False)
    return (
        xr.open_dataset(path, engine="zarr", **kwargs),
        xr.open_dataset(path, engine="shardwise", **kwargs),
    )


def test_engine_is_registered():
    assert "shardwise" in xr.backends.list_engines()


def test_identical_to_zarr_engine(weather_store):
    path, source = weather_store
    ref, ds = open_both(path)
    xr.testing.assert_identical(ds, ref)
    xr.testing.assert_identical(ds.load(), ref.load())
    # CF decoding happened: times, packed integers, fill values
    assert ds.time.dtype.kind == "M"
    assert ds.temperature.dtype == np.float64  # unpacked with a float64 scale_factor
    assert np.isnan(ds.temperature.values[:, :3, :3]).all()
    np.testing.assert_allclose(ds.temperature, source.temperature, atol=0.006)
    np.testing.assert_array_equal(ds.precip, source.precip)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"mask_and_scale": False},
        {"decode_times": False},
        {"decode_cf": False},
        {"drop_variables": ["precip"]},
        {"decode_coords": False, "concat_characters": False},
    ],
)
def test_decoding_options_match_zarr_engine(weather_store, kwargs):
    path, _ = weather_store
    ref, ds = open_both(path, **kwargs)
    xr.testing.assert_identical(ds.load(), ref.load())


def test_encoding_matches_zarr_engine_except_preferred_chunks(weather_store):
    path, _ = weather_store
    ref, ds = open_both(path)
    for name in ("temperature", "precip"):
        ours, theirs = dict(ds[name].encoding), dict(ref[name].encoding)
        assert ours.pop("preferred_chunks") == dict(
            zip(ds[name].dims, WEATHER_ENCODING[name]["shards"], strict=True)
        )
        theirs.pop("preferred_chunks")
        np.testing.assert_equal(ours, theirs)  # NaN fill values compare equal here
        assert ours["chunks"] == WEATHER_ENCODING[name]["chunks"]
        assert ours["shards"] == WEATHER_ENCODING[name]["shards"]


def test_chunks_default_to_shards(weather_store):
    path, _ = weather_store
    ds = xr.open_dataset(path, engine="shardwise", chunks={}, consolidated=False)
    assert ds.temperature.chunks == ((10,) * 4, (30,), (20,))
    assert ds.precip.chunks == ((16, 16, 8), (30,), (10, 10))
    ref = xr.open_dataset(path, engine="zarr", consolidated=False)
    xr.testing.assert_identical(ds.compute(), ref.compute())


def test_chunks_of_a_huge_array_are_whole_shards_taken_together(tmp_path):
    """A 10**7 x 10**7 array in 1000 x 1000 shards: one dask chunk per shard would be 10**8
    chunks, whose graph dask took more than a minute to cull for a point read (engine="zarr"
    raises MemoryError). chunks={} takes shards together (powers of two per dimension)
    until at most PREFERRED_MAX_CHUNKS remain, and a point read returns in seconds."""
    from shardwise.graph.preferred import PREFERRED_MAX_CHUNKS

    group = zarr.open_group(tmp_path / "huge.zarr", mode="w", zarr_format=3)
    z = group.create_array(
        "v",
        shape=(10**7, 10**7),
        chunks=(100, 100),
        shards=(1000, 1000),
        dtype="f4",
        fill_value=0,
        dimension_names=["y", "x"],
    )
    block = np.arange(10**6, dtype="f4").reshape(1000, 1000)
    z[1000:2000, :1000] = block  # one shard
    ds = xr.open_dataset(tmp_path / "huge.zarr", engine="shardwise", chunks={}, consolidated=False)
    chunks = ds.v.chunks
    assert ds.v.data.npartitions <= PREFERRED_MAX_CHUNKS < 10**8
    for sizes in chunks:
        assert all(n % 1000 == 0 for n in sizes[:-1])  # whole shards
    assert ds.v.encoding["preferred_chunks"] == {"y": chunks[0][0], "x": chunks[1][0]}
    assert float(ds.v[1005, 7].values) == block[5, 7]
    assert float(ds.v[5 * 10**6, 7].values) == 0.0


def test_shards_taken_together_along_regular_and_rectilinear_dimensions(monkeypatch):
    from shardwise.graph import preferred

    monkeypatch.setattr(preferred, "PREFERRED_MAX_CHUNKS", 6)
    # 10 shards of 3 along a regular dimension of 29; 4 rectilinear shards
    assert preferred._coarsened([3, (5, 1, 2, 7)], [29, 15]) == (12, (6, 9))  # 3 x 2 chunks
    assert preferred._coarsened([3, (5, 1)], [9, 6]) == (3, (5, 1))  # 6 chunks: as they are
    assert preferred._coarsened([3, 4], [0, 4]) == (3, 4)  # an empty dimension: one chunk


def test_shards_grouped_toward_a_size_shortest_dimension_first():
    from shardwise.graph.preferred import _grouped

    # shards of 1 x 100 x 100 float32 (40 kB): along time first, the shortest, while
    # the chunk stays within 400 kB: 8 x 100 x 100 (320 kB); 16 would be 640 kB
    assert _grouped([1, 100, 100], [50, 100, 100], 4, 400_000) == (8, 100, 100)
    # a cube grows each dimension in turn, the last of equals first (a chunk then
    # spans whole rows of the array in C order: one block of it)
    assert _grouped([2, 2, 2], [16, 16, 16], 1, 64) == (4, 4, 4)
    assert _grouped([2, 2, 2], [16, 16, 16], 1, 128) == (4, 4, 8)
    assert _grouped([2, 2, 2], [4, 16, 16], 1, 512) == (4, 8, 16)
    # a dimension already one chunk stays; rectilinear sizes are summed in groups
    assert _grouped([10, (3, 4, 5, 6)], [10, 18], 1, 120) == (10, (7, 11))  # 10 x 11
    assert _grouped([10, (3, 4, 5, 6)], [10, 18], 1, 100) == (10, (3, 4, 5, 6))
    # a shard larger than the size stays one chunk
    assert _grouped([4, 4], [8, 8], 8, 10) == (4, 4)


def test_indexing_matches_zarr_engine(weather_store):
    path, _ = weather_store
    ref, ds = open_both(path)
    i = xr.DataArray([3, 0, 17, 17], dims="p")
    j = xr.DataArray([29, 1, 4, 4], dims="p")
    selections = [
        {"time": 7},
        {"time": slice(3, 33, 4), "y": slice(None, None, -2)},
        {"time": [9, 2, 2, 31], "x": slice(5, 15)},
        {"time": i, "y": j, "x": i},  # vectorized (pointwise)
        {"time": slice(0, 0)},
    ]
    for sel in selections:
        xr.testing.assert_identical(ds.isel(sel).load(), ref.isel(sel).load())
    # vectorized through the raw backend array, with a 2-d index
    idx = xr.DataArray(np.array([[1, 2], [19, 0]]), dims=("a", "b"))
    xr.testing.assert_identical(
        ds.temperature.isel(time=idx, x=idx).load(), ref.temperature.isel(time=idx, x=idx).load()
    )


def test_backend_array_is_picklable(weather_store):
    path, _ = weather_store
    ds = xr.open_dataset(path, engine="shardwise", chunks={}, consolidated=False)
    back = pickle.loads(pickle.dumps(ds))
    xr.testing.assert_identical(back.compute(), ds.compute())
    variable = xr.open_dataset(path, engine="shardwise", consolidated=False).temperature.variable
    array = variable._data.array  # LazilyIndexedArray -> ShardwiseBackendArray
    while not isinstance(array, ShardwiseBackendArray):
        array = array.array
    copy = pickle.loads(pickle.dumps(array))
    np.testing.assert_array_equal(copy.reader[:], array.reader[:])


def test_threads_share_one_reader(weather_store):
    path, _ = weather_store
    ds = xr.open_dataset(path, engine="shardwise", chunks={}, consolidated=False)
    with dask.config.set(scheduler="threads", num_workers=8):
        for _ in range(3):
            total = ds.precip.sum().compute()
    np.testing.assert_allclose(total, weather().precip.sum())


def test_unsharded_arrays(tmp_path):
    ds = weather()
    ds.to_zarr(
        tmp_path / "u.zarr",
        zarr_format=3,
        consolidated=False,
        encoding={"temperature": {"chunks": (7, 11, 20)}, "precip": {"chunks": (40, 30, 20)}},
    )
    ref, got = open_both(tmp_path / "u.zarr", chunks={})
    assert got.temperature.encoding["shards"] is None
    assert got.temperature.chunks == ((7,) * 5 + (5,), (11, 11, 8), (20,))
    xr.testing.assert_identical(got.compute(), ref.compute())


@pytest.mark.filterwarnings("ignore:Consolidated metadata is currently not part:UserWarning")
def test_consolidated_metadata_is_used(tmp_path):
    weather().to_zarr(tmp_path / "c.zarr", zarr_format=3, encoding=WEATHER_ENCODING)
    store = CountingStore(LocalStore(tmp_path / "c.zarr", read_only=True))
    ds = xr.open_dataset(store, engine="shardwise", consolidated=True)
    metadata_reads = [r.key for r in store.log.requests if r.key.endswith("zarr.json")]
    assert metadata_reads == ["zarr.json"]  # one read: the consolidated root document
    ref = xr.open_dataset(tmp_path / "c.zarr", engine="zarr", consolidated=True)
    xr.testing.assert_identical(ds.load(), ref.load())


def test_groups_and_datatree(tmp_path):
    path = tmp_path / "tree.zarr"
    tree = xr.DataTree.from_dict(
        {
            "/": xr.Dataset(attrs={"title": "tree"}),
            "/surface": weather(nt=12),
            "/surface/again": weather(nt=12, seed=1).drop_vars("station"),
        }
    )
    encoding = {
        "/surface": WEATHER_ENCODING,
        "/surface/again": {"temperature": {"chunks": (2, 10, 10), "shards": (6, 30, 20)}},
    }
    tree.to_zarr(path, zarr_format=3, consolidated=False, encoding=encoding)
    ours = xr.open_datatree(path, engine="shardwise", consolidated=False)
    ref = xr.open_datatree(path, engine="zarr", consolidated=False)
    xr.testing.assert_identical(ours.load(), ref.load())
    ds = xr.open_dataset(path, engine="shardwise", group="surface/again", consolidated=False)
    xr.testing.assert_identical(ds.load(), ref["surface/again"].to_dataset(inherit=False).load())
    sub = xr.open_datatree(path, engine="shardwise", group="surface", consolidated=False)
    ref_sub = xr.open_datatree(path, engine="zarr", group="surface", consolidated=False)
    xr.testing.assert_identical(sub.load(), ref_sub.load())


@pytest.mark.xarray_rectilinear  # (read by engine="zarr" too)
def test_rectilinear_shards(tmp_path):
    with zarr.config.set({"array.rectilinear_chunks": True}):
        root = zarr.open_group(tmp_path / "r.zarr", mode="w", zarr_format=3)
        a = root.create_array(
            "v",
            shape=(30, 12),
            chunks=(5, 4),
            shards=[[10, 20], [12]],
            dtype="f4",
            dimension_names=["t", "x"],
            fill_value=np.nan,
        )
        a[:] = np.arange(360, dtype="f4").reshape(30, 12)
        ref, ds = open_both(tmp_path / "r.zarr", chunks={})
        assert ds.v.chunks == ((10, 20), (12,))
        xr.testing.assert_identical(ds.compute(), ref.compute())


def test_entrypoint_module_is_light():
    """Listing engines imports the entrypoint module; it must not import zarr or dask."""
    code = (
        "import sys, xarray as xr; xr.backends.list_engines(); import shardwise.xarray.backend; "
        "heavy = [m for m in ('zarr', 'dask', 'numcodecs', 'distributed', 'shardwise.io.reader') "
        "if m in sys.modules]; print(heavy); sys.exit(1 if heavy else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_fsspec_store(weather_store):
    """An fsspec-backed store (here over local files): whole-shard and ranged reads."""
    from zarr.storage import FsspecStore

    path, _ = weather_store
    store = FsspecStore.from_url(f"file://{path}", read_only=True)
    ds = xr.open_dataset(store, engine="shardwise", chunks={}, consolidated=False)
    ref = xr.open_dataset(path, engine="zarr", consolidated=False)
    xr.testing.assert_identical(ds.compute(), ref.compute())
    region = {"time": slice(12, 14), "y": slice(0, 5), "x": 3}  # index + one range
    xr.testing.assert_identical(ds.isel(region).compute(), ref.isel(region).compute())
    xr.testing.assert_identical(pickle.loads(pickle.dumps(ds)).compute(), ref.compute())
