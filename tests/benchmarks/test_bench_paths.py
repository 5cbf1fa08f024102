"""The read and write paths end to end on a small array: 1024 x 1024 float32 (4 MiB) in
16 shards of 256 x 256 of 64 inner chunks of 32 x 32, zstd level 1, on a local store,
computed on dask's threaded scheduler."""

from __future__ import annotations

import dask
import dask.array as da
import numpy as np
import pytest
import xarray as xr

import shardwise

SHAPE, SHARD, INNER = (1024, 1024), (256, 256), (32, 32)


def values() -> np.ndarray:
    y, x = np.mgrid[0 : SHAPE[0], 0 : SHAPE[1]].astype("f4")
    return np.round(10 * np.sin(x / 40) * np.cos(y / 30), 2)


@pytest.fixture(autouse=True)
def _threads():
    with dask.config.set(scheduler="threads"):
        yield


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> tuple[str, np.ndarray]:
    path = str(tmp_path_factory.mktemp("paths") / "a.zarr")
    data = values()
    shardwise.array.to_zarr(
        da.from_array(data, chunks=SHARD),
        path,
        path="v",
        shards=SHARD,
        chunks=INNER,
        dimension_names=("y", "x"),
    )
    return path, data


def test_write(benchmark, tmp_path):
    x = da.from_array(values(), chunks=SHARD)
    out = str(tmp_path / "w.zarr")
    benchmark.group = "paths"
    benchmark(shardwise.array.to_zarr, x, out, path="v", shards=SHARD, chunks=INNER, mode="w")
    np.testing.assert_array_equal(shardwise.ArrayReader.open(out, "v")[...], values())


def test_read_from_zarr(benchmark, written):
    path, data = written
    benchmark.group = "paths"
    np.testing.assert_array_equal(
        benchmark(lambda: shardwise.array.from_zarr(path, "v").compute()), data
    )


def test_read_engine(benchmark, written):
    path, data = written

    def read():
        with xr.open_dataset(path, engine="shardwise", chunks={}, consolidated=False) as ds:
            return ds.v.values

    benchmark.group = "paths"
    np.testing.assert_array_equal(benchmark(read), data)
