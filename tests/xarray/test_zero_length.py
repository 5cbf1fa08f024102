"""Zero-length dimensions, every direction: written by shardwise (Datasets and dask
arrays, numpy or dask data, each way of choosing shards, Zarr v2 and v3) and read by
shardwise, xarray's own engine and zarr-python; written by xarray and zarr-python and
read by shardwise; and appended to."""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest
import xarray as xr
import zarr

import shardwise

SHAPES = [(0, 3), (5, 0), (0, 0)]


def dataset(shape, use_dask):
    ds = xr.Dataset(
        {"v": (("x", "y"), np.empty(shape, dtype="f4")), "c": ("x", np.arange(shape[0]))}
    )
    return ds.chunk() if use_dask else ds


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("use_dask", [False, True])
@pytest.mark.parametrize(
    ("zarr_format", "shards"),
    [(3, None), (3, "auto"), (3, "dask"), (3, {"x": 4}), (2, None)],
)
def test_shardwise_writes_everyone_reads(tmp_path, shape, use_dask, zarr_format, shards):
    ds = dataset(shape, use_dask)
    path = tmp_path / "e.zarr"
    shardwise.to_zarr(ds, path, zarr_format=zarr_format, shards=shards, consolidated=False)
    want = ds.load()
    for engine in ("shardwise", "zarr"):
        for chunks in (None, {}):
            got = xr.open_dataset(path, engine=engine, chunks=chunks, consolidated=False)
            xr.testing.assert_identical(got.load(), want)
    assert zarr.open_array(path, path="v", mode="r").shape == shape
    assert shardwise.array.from_zarr(path, "v").compute().shape == shape
    assert shardwise.ArrayReader.open(path, "v")[...].shape == shape


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("use_dask", [False, True])
@pytest.mark.parametrize("zarr_format", [2, 3])
def test_xarray_writes_shardwise_reads(tmp_path, shape, use_dask, zarr_format):
    ds = dataset(shape, use_dask)
    ds.to_zarr(tmp_path / "e.zarr", zarr_format=zarr_format, consolidated=False)
    for chunks in (None, {}):
        got = xr.open_dataset(
            tmp_path / "e.zarr", engine="shardwise", chunks=chunks, consolidated=False
        )
        xr.testing.assert_identical(got.load(), ds.load())


@pytest.mark.parametrize("shape", [(0, 8), (8, 0), (0,)])
def test_zarr_python_writes_sharded_empty_arrays(tmp_path, shape):
    z = zarr.create_array(
        tmp_path / "z.zarr",
        shape=shape,
        chunks=(2,) * len(shape),
        shards=(4,) * len(shape),
        dtype="i2",
    )
    assert shardwise.ArrayReader.open(tmp_path / "z.zarr")[...].shape == shape
    got = shardwise.array.from_zarr(tmp_path / "z.zarr")
    assert got.shape == shape and got.compute().shape == shape
    np.testing.assert_array_equal(got.compute(), z[...])


@pytest.mark.parametrize(
    "x",
    [da.arange(0), da.array([[1]])[:0], da.array([[1]])[:, :0], da.zeros((0, 4), chunks=2)],
    ids=["0", "0x1", "1x0", "0x4"],
)
@pytest.mark.parametrize("zarr_format", [2, 3])
def test_empty_dask_arrays(tmp_path, x, zarr_format):
    """dask's own cases (``test_zarr_empty_array``), both formats."""
    shardwise.array.to_zarr(x, tmp_path / "a.zarr", zarr_format=zarr_format)
    z = zarr.open_array(tmp_path / "a.zarr", mode="r")
    assert z.shape == x.shape and z.metadata.zarr_format == zarr_format
    np.testing.assert_array_equal(
        shardwise.array.from_zarr(tmp_path / "a.zarr").compute(), x.compute()
    )


def test_append_to_a_zero_length_dimension(tmp_path):
    empty = dataset((0, 3), use_dask=True)
    shardwise.to_zarr(empty, tmp_path / "e.zarr", shards={"x": 4}, consolidated=False)
    more = xr.Dataset(
        {
            "v": (("x", "y"), np.arange(21, dtype="f4").reshape(7, 3)),
            "c": ("x", np.arange(7)),
        }
    ).chunk({"x": 3})
    shardwise.to_zarr(more, tmp_path / "e.zarr", append_dim="x", consolidated=False)
    for engine in ("shardwise", "zarr"):
        got = xr.open_dataset(tmp_path / "e.zarr", engine=engine, consolidated=False)
        xr.testing.assert_identical(got.load(), more.load())
