"""The one write primitive (``shardwise.array.store.store_arrays``, shaped like
``dask.array.store``) and the dask-array writer under its own name
(``shardwise.array.to_zarr``), which ``shardwise.to_zarr`` dispatches to."""

from __future__ import annotations

from pathlib import Path

import dask.array as da
import numpy as np
import pytest
import xarray as xr
import zarr

import shardwise
import shardwise.array
from shardwise.array.options import WriteOptions
from shardwise.array.store import store_arrays


def _files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def test_the_dask_array_writer_has_its_own_name_and_to_zarr_is_the_same_call(tmp_path):
    x = da.arange(600, dtype="i4").reshape(20, 30).rechunk((7, 11))
    a = shardwise.array.to_zarr(x, tmp_path / "a.zarr", "v", shards=(10, 15), chunks=(5, 5))
    b = shardwise.array.to_zarr(x, tmp_path / "b.zarr", path="v", shards=(10, 15), chunks=(5, 5))
    assert isinstance(a, zarr.Array) and isinstance(b, zarr.Array)
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "a.zarr", path="v")[...], x.compute())
    assert _files(tmp_path / "a.zarr") == _files(tmp_path / "b.zarr")
    assert shardwise.array.from_zarr is shardwise.array.from_zarr


def test_store_arrays_writes_every_source_into_its_region_in_one_compute(tmp_path):
    root = zarr.open_group(tmp_path / "s.zarr", mode="w")
    t = root.create_array("t", shape=(40, 6), chunks=(5, 6), shards=(10, 6), dtype="f4")
    u = root.create_array("u", shape=(12,), chunks=(4,), shards=(8,), dtype="i8", fill_value=-1)
    s1 = da.random.default_rng(0).random((25, 6), chunks=(9, 6)).astype("f4")
    s2 = da.arange(5, chunks=2, dtype="i8")
    regions = [(slice(10, 35), slice(None)), (slice(3, 8),)]
    done = store_arrays(
        [s1, s2],
        [t, u],
        regions,
        options=WriteOptions(independent_writers=False),
        fresh=[True, True],
        finish=lambda *results: "written",
    )
    assert done == "written"
    got = zarr.open_group(tmp_path / "s.zarr", mode="r")
    want_t = np.zeros((40, 6), "f4")
    want_t[10:35] = s1.compute()
    np.testing.assert_array_equal(got["t"][...], want_t)
    want_u = np.full(12, -1, "i8")
    want_u[3:8] = np.arange(5)
    np.testing.assert_array_equal(got["u"][...], want_u)


@pytest.mark.parametrize(
    "region",
    [(slice(0, 9),), (slice(5, 15),), (slice(0, 10, 2),), (3,), (slice(0, 5), slice(0, 5))],
    ids=["short", "past-the-end", "step", "not-a-slice", "too-many-axes"],
)
def test_store_arrays_refuses_a_region_that_does_not_fit_before_writing(tmp_path, region):
    t = zarr.create_array(tmp_path / "s.zarr", shape=(12,), chunks=(2,), shards=(4,), dtype="i4")
    before = _files(tmp_path / "s.zarr")
    with pytest.raises(shardwise.errors.WriteError, match="the region does not fit the array"):
        store_arrays(
            [da.ones(10, chunks=5, dtype="i4")],
            [t],
            [region],
            options=WriteOptions(),
            fresh=[False],
        )
    assert _files(tmp_path / "s.zarr") == before


def test_store_arrays_takes_one_target_region_and_flag_per_source(tmp_path):
    t = zarr.create_array(tmp_path / "s.zarr", shape=(4,), chunks=(2,), dtype="i4")
    with pytest.raises(shardwise.errors.WriteError, match="as many targets"):
        store_arrays(
            [da.ones(4, chunks=2)], [t, t], [(slice(None),)], options=WriteOptions(), fresh=[True]
        )


def test_a_dataset_and_a_dask_array_write_the_same_bytes(tmp_path):
    """Both entry points end in the same primitive: one variable written through xarray
    and the same data through the dask-array writer give the same shard objects."""
    x = da.random.default_rng(1).random((24, 10), chunks=(7, 10)).astype("f4")
    ds = xr.Dataset({"v": (("t", "x"), x)})
    shardwise.to_zarr(
        ds,
        tmp_path / "ds.zarr",
        encoding={"v": {"shards": (12, 10), "chunks": (4, 5), "fill_value": None}},
        consolidated=False,
    )
    shardwise.array.to_zarr(
        x, tmp_path / "x.zarr", "v", shards=(12, 10), chunks=(4, 5), dimension_names=("t", "x")
    )
    shards = lambda root: {k: v for k, v in _files(root).items() if "/c/" in k}  # noqa: E731
    assert shards(tmp_path / "ds.zarr") == shards(tmp_path / "x.zarr") != {}


@pytest.mark.parametrize("value", [np.array([1.5, 2.5]), np.float32(0.5), 0])
def test_an_array_option_given_with_a_dataset_is_refused_whatever_its_value(tmp_path, value):
    """The dispatch tells given from not given by identity: a numpy value (which ``in``
    would compare element by element) or a 0 is refused as any other."""
    ds = xr.Dataset({"v": ("t", da.zeros(4, chunks=2))})
    with pytest.raises(shardwise.errors.WriteError, match="options for a single dask array"):
        shardwise.to_zarr(ds, tmp_path / "s.zarr", fill_value=value)
    assert not (tmp_path / "s.zarr").exists()
