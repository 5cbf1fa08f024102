"""``shardwise.to_zarr`` with a dask array takes ``dask.array.to_zarr``'s parameters with
dask's meaning: ``component``, ``overwrite``, ``return_stored``, a ``zarr.Array`` as the
target, zarr-python's creation arguments as keywords, and chunks of size 0. Checked
against zarr-python reading what was written, and against dask's own results."""

from __future__ import annotations

import os

import dask
import dask.array as da
import numpy as np
import pytest
import xarray as xr
import zarr

import shardwise
from shardwise.errors import ArgumentError, StoreExistsError, WriteError


def shard_keys(path):
    return sorted(
        os.path.relpath(os.path.join(d, f), path)
        for d, _, files in os.walk(path)
        for f in files
        if f not in ("zarr.json", ".zarray", ".zattrs", ".zgroup")
    )


# -- where: component=, name=, a zarr.Array ----------------------------------------------------
def test_component_and_name_are_the_path(tmp_path):
    x = da.arange(12, chunks=4)
    shardwise.array.to_zarr(x, tmp_path / "s.zarr", component="a/b")
    shardwise.array.to_zarr(x + 1, tmp_path / "s.zarr", name="c")
    shardwise.array.to_zarr(x + 2, tmp_path / "s.zarr", path="d", component="/d/")  # the same
    group = zarr.open_group(tmp_path / "s.zarr", mode="r")
    np.testing.assert_array_equal(group["a/b"][...], np.arange(12))
    np.testing.assert_array_equal(group["c"][...], np.arange(12) + 1)
    np.testing.assert_array_equal(group["d"][...], np.arange(12) + 2)
    with pytest.raises(WriteError, match="path was given twice") as info:
        shardwise.array.to_zarr(x, tmp_path / "s.zarr", path="e", component="f")
    assert "path='e'" in str(info.value) and "component='f'" in str(info.value)
    assert set(group) == {"a", "c", "d"}


def test_a_zarr_array_is_written_into(tmp_path):
    """dask's idiom ``to_zarr(x, z)``: into that array, sharded or not, on disk or in
    memory, whole or a region; dask's own expected values for the region writes."""
    a = da.arange(16).reshape((4, 4)).rechunk(2)
    z = zarr.zeros((4, 4), chunks=(2, 2), dtype=a.dtype)  # in memory, dask's test
    shardwise.array.to_zarr(a[:2, :2], z, region=(slice(2), slice(2)))
    shardwise.array.to_zarr(a[:3, 3:4], z, region=(slice(1, 4), slice(2, 3)))
    shardwise.array.to_zarr(a[3:, 3:], z, region=(slice(2, 3), slice(1, 2)))
    np.testing.assert_array_equal(
        z[...], [[0, 1, 0, 0], [4, 5, 3, 0], [0, 15, 7, 0], [0, 0, 11, 0]]
    )
    sharded = zarr.create_array(
        tmp_path / "z.zarr", shape=(40, 30), chunks=(5, 5), shards=(20, 15), dtype="f8"
    )
    data = np.random.default_rng(0).normal(size=(40, 30))
    out = shardwise.array.to_zarr(da.from_array(data, chunks=(7, 11)), sharded)  # cuts shards
    assert isinstance(out, zarr.Array) and out.path == sharded.path
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "z.zarr", mode="r")[...], data)
    with pytest.raises(WriteError, match=r"zarr\.Array target was given with a path"):
        shardwise.array.to_zarr(da.from_array(data), sharded, path="other")
    with pytest.raises(WriteError, match="creation options were given for an array"):
        shardwise.array.to_zarr(da.from_array(data), sharded, fill_value=1.0)
    with pytest.raises(WriteError, match="does not fit the region"):
        shardwise.array.to_zarr(da.from_array(data[:5]), sharded)


# -- how: overwrite=, mode='r' ----------------------------------------------------------------
def test_overwrite_means_mode_w_or_w_minus(tmp_path):
    x = da.zeros((3, 3), chunks=1)
    shardwise.array.to_zarr(x, tmp_path, component="t")
    with pytest.raises(StoreExistsError):
        shardwise.array.to_zarr(x + 1, tmp_path, component="t", overwrite=False)
    shardwise.array.to_zarr(x + 1, tmp_path, component="t", overwrite=True)
    np.testing.assert_array_equal(zarr.open_array(tmp_path, path="t")[...], np.ones((3, 3)))
    with pytest.raises(WriteError, match="overwrite= and mode= disagree"):
        shardwise.array.to_zarr(x, tmp_path, component="t", overwrite=True, mode="r+")
    with pytest.raises(WriteError, match="overwrite must be True or False"):
        shardwise.array.to_zarr(x, tmp_path, component="t", overwrite="yes")
    with pytest.raises(ValueError, match="Cannot use mode 'r'"):  # dask's words
        shardwise.array.to_zarr(x, tmp_path, component="t", mode="r")
    np.testing.assert_array_equal(zarr.open_array(tmp_path, path="t")[...], np.ones((3, 3)))


# -- zarr-python's creation arguments -----------------------------------------------------------
def test_zarr_python_creation_arguments_as_keywords(tmp_path):
    x = da.arange(20, chunks=5)
    shardwise.array.to_zarr(
        x,
        tmp_path / "k.zarr",
        chunk_key_encoding={"name": "v2", "separator": "."},
        dtype="f8",
        shape=(20,),
        config={"write_empty_chunks": True},
    )
    z = zarr.open_array(tmp_path / "k.zarr", mode="r")
    assert z.dtype == np.float64 and z.metadata.chunk_key_encoding.name == "v2"
    assert shard_keys(tmp_path / "k.zarr") == ["0", "1", "2", "3"]  # v2 keys, no c/
    np.testing.assert_array_equal(z[...], np.arange(20.0))
    y = da.from_array(np.arange(12).reshape(3, 4), chunks=2)  # Zarr v2, Fortran order
    shardwise.array.to_zarr(y, tmp_path / "f.zarr", zarr_format=2, order="F")
    f = zarr.open_array(tmp_path / "f.zarr", mode="r")
    assert f.metadata.order == "F"
    np.testing.assert_array_equal(f[...], np.arange(12).reshape(3, 4))


def test_creation_arguments_are_checked_before_anything_is_written(tmp_path):
    x = da.arange(20, chunks=5)
    with pytest.raises(TypeError, match="bogus") as info:  # as Python says it
        shardwise.array.to_zarr(x, tmp_path / "a.zarr", bogus=1)
    assert isinstance(info.value, ArgumentError)
    with pytest.raises(WriteError, match="shape= is not the data's shape"):
        shardwise.array.to_zarr(x, tmp_path / "a.zarr", shape=(21,))
    with pytest.raises(WriteError, match="dtype= cannot hold the data"):
        shardwise.array.to_zarr(x.astype("f8"), tmp_path / "a.zarr", dtype="i4")
    assert not (tmp_path / "a.zarr").exists()
    ds = xr.Dataset({"v": ("x", np.arange(3))})
    with pytest.raises(TypeError, match="bogus"):  # a Dataset takes no such keyword
        shardwise.to_zarr(ds, tmp_path / "d.zarr", bogus=1)
    for option in ({"component": "a"}, {"overwrite": True}, {"return_stored": True}):
        with pytest.raises(WriteError, match="single dask array"):
            shardwise.to_zarr(ds, tmp_path / "d.zarr", **option)
    assert not (tmp_path / "d.zarr").exists()


def test_zarrs_default_format_is_the_default(tmp_path):
    """As zarr-python and xarray: a new store's format, when none is given, is zarr's
    ``default_zarr_format`` setting; a store added to keeps its own."""
    x = da.arange(6, chunks=3)
    ds = xr.Dataset({"v": ("x", x)})
    with zarr.config.set(default_zarr_format=2):
        shardwise.array.to_zarr(x, tmp_path / "a.zarr")
        shardwise.to_zarr(ds, tmp_path / "d.zarr")
    assert (tmp_path / "a.zarr" / ".zarray").exists()
    assert (tmp_path / "d.zarr" / "v" / ".zarray").exists()
    shardwise.to_zarr(ds.rename(v="w"), tmp_path / "d.zarr", mode="a")  # stays v2
    assert (tmp_path / "d.zarr" / "w" / ".zarray").exists()


# -- return_stored= ------------------------------------------------------------------------
@pytest.mark.parametrize("compute", [True, False])
def test_return_stored_is_the_array_written_read_lazily(tmp_path, compute):
    data = np.random.default_rng(1).normal(size=(30, 20))
    x = da.from_array(data, chunks=(10, 10))
    path = tmp_path / "r.zarr"
    stored = shardwise.array.to_zarr(x * 2, path, return_stored=True, compute=compute)
    assert isinstance(stored, da.Array) and stored.chunks == x.chunks
    if not compute:  # the metadata is written, the data only when the array is computed
        assert shard_keys(path) == []
        assert dask.compute(stored, scheduler="threads")[0].sum() == pytest.approx(2 * data.sum())
    assert len(shard_keys(path)) == 6
    np.testing.assert_array_equal(stored.compute(), data * 2)
    np.testing.assert_array_equal(zarr.open_array(path, mode="r")[...], data * 2)


def test_return_stored_of_a_region_is_the_region(tmp_path):
    z = zarr.create_array(tmp_path / "z.zarr", shape=(40,), chunks=(5,), shards=(10,), dtype="i8")
    stored = shardwise.array.to_zarr(
        da.arange(12, chunks=4), z, region=(slice(13, 25),), return_stored=True, compute=False
    )
    assert stored.shape == (12,)
    np.testing.assert_array_equal(stored.compute(), np.arange(12))
    want = np.zeros(40, dtype="i8")
    want[13:25] = np.arange(12)
    np.testing.assert_array_equal(z[...], want)


# -- chunks of size 0 -----------------------------------------------------------------------
def test_empty_dask_chunks_own_no_shard(tmp_path):
    """dask's case: ``x[x < 0]`` after ``compute_chunk_sizes()`` has chunks
    ``(10, 10, 5, 0, 0)``; they are written (dask writes them too), the empty ones
    owning no shard."""
    x = da.from_array(np.linspace(-1, 1, 50), chunks=10)
    y = x[x < 0].compute_chunk_sizes()
    assert y.chunks == ((10, 10, 5, 0, 0),)
    shardwise.array.to_zarr(y, tmp_path / "a.zarr")
    z = zarr.open_array(tmp_path / "a.zarr", mode="r")
    assert z.shards == (10,) and shard_keys(tmp_path / "a.zarr") == ["c/0", "c/1", "c/2"]
    np.testing.assert_array_equal(z[...], np.linspace(-1, 1, 50)[:25])
    two = da.from_array(np.arange(50.0).reshape(25, 2), chunks=((10, 0, 10, 5, 0), (1, 0, 1)))
    ds = xr.Dataset({"v": (("t", "y"), two)})
    shardwise.to_zarr(ds, tmp_path / "d.zarr", shards="dask", consolidated=False)
    xr.testing.assert_identical(
        xr.open_dataset(tmp_path / "d.zarr", engine="zarr", consolidated=False).load(),
        ds.load(),
    )
    assert zarr.open_array(tmp_path / "d.zarr", path="v").shards == (10, 1)


@pytest.mark.parametrize("inline_array", [False, True])
@pytest.mark.parametrize("chunks", ["shards", (10,)])
def test_mode_w_refuses_to_replace_what_the_data_is_read_from(tmp_path, inline_array, chunks):
    """However the source sits in the graph (a key of its own, or in every task with
    ``inline_array=True``; with index tasks or not), replacing it is refused."""
    path = tmp_path / "a.zarr"
    shardwise.array.to_zarr(da.arange(40, chunks=10), path, shards=(20,), chunks=(5,))
    x = shardwise.array.from_zarr(path, inline_array=inline_array, chunks=chunks)
    with pytest.raises(shardwise.errors.OverlapError):
        shardwise.array.to_zarr(x + 1, path, mode="w")
    with pytest.raises(shardwise.errors.OverlapError):
        shardwise.to_zarr(xr.Dataset({"v": ("t", x)}), path, mode="w")
    np.testing.assert_array_equal(shardwise.array.from_zarr(path).compute(), np.arange(40))
