"""What users type: a small top level, one writer per kind of data, and the names that
moved still working for one release, with a ``FutureWarning`` that says where they went."""

from __future__ import annotations

import importlib
import inspect

import dask.array as da
import numpy as np
import pytest
import xarray as xr
import zarr

import shardwise
import shardwise.errors as errors


def test_the_top_level_is_a_dozen_names_users_type():
    assert len(shardwise.__all__) <= 12
    assert sorted(dir(shardwise)) == sorted(shardwise.__all__)
    for name in shardwise.__all__:
        assert getattr(shardwise, name) is not None, name
    # every error class lives in shardwise.errors; only the base is also at the top
    assert [n for n in errors.__all__ if n in shardwise.__all__] == ["ShardwiseError"]
    assert shardwise.ShardwiseError is errors.ShardwiseError


MOVED = [
    ("from_zarr", "shardwise.array"),
    ("check_regions", "shardwise.regions"),
    ("shared_shards", "shardwise.regions"),
    ("migrate", "shardwise.tools.migrate"),
    ("MigrationReport", "shardwise.tools.migrate"),
    ("ReshardReport", "shardwise.tools.reshard"),
    ("VerifyReport", "shardwise.tools.verify"),
    ("Info", "shardwise.tools.info"),
    ("inventories", "shardwise.tools.inventory"),
    ("shard_view", "shardwise.tools.views"),
    ("shard_grid", "shardwise.tools.views"),
    ("ShardGrid", "shardwise.tools.views"),
    ("WriteError", "shardwise.errors"),
    ("ChunksError", "shardwise.errors"),
    ("StoreIOError", "shardwise.errors"),
    ("ConflictError", "shardwise.errors"),
    ("CorruptShardError", "shardwise.errors"),
    ("ChecksumError", "shardwise.errors"),
    ("TruncatedShardError", "shardwise.errors"),
]


@pytest.mark.parametrize(("name", "module"), MOVED)
def test_a_moved_name_works_and_says_where_it_is_now(name, module):
    with pytest.warns(FutureWarning, match=rf"shardwise\.{name} is now {module}\.{name}"):
        old = getattr(shardwise, name)
    assert old is getattr(importlib.import_module(module), name)
    assert name not in dir(shardwise)


def test_the_tools_modules_load_when_named():
    assert shardwise.tools.migrate.migrate.__name__ == "migrate"
    assert shardwise.tools.views.ShardGrid.__name__ == "ShardGrid"
    with pytest.raises(AttributeError):
        _ = shardwise.tools.nothing


def test_the_writer_of_xarray_objects_takes_dataset_to_zarrs_parameters_and_shardwises():
    ours = list(inspect.signature(shardwise.to_zarr).parameters)
    # (self; and what xarray before 2026.9 still took, and the newest releases dropped)
    dropped = {"chunk_store", "synchronizer", "zarr_version"}
    xarrays = [
        p for p in list(inspect.signature(xr.Dataset.to_zarr).parameters)[1:] if p not in dropped
    ]
    assert ours[1 : len(xarrays) + 1] == xarrays
    own = ours[len(xarrays) + 1 :]
    assert own == [
        "shards",
        "chunks",
        "write_order",
        "shards_per_task",
        "encode_split",
        "independent_writers",
        "commit",
        "progress",
        "kwargs",  # (a dask array's keywords, for the one release it is still handed on)
    ]


def test_a_dask_array_given_to_the_xarray_writer_is_written_with_a_future_warning(tmp_path):
    x = da.arange(40, chunks=7).reshape(4, 10)
    with pytest.warns(FutureWarning, match=r"shardwise\.array\.to_zarr"):
        shardwise.to_zarr(x, tmp_path / "old.zarr", path="v", shards=(2, 10), chunks=(1, 5))
    shardwise.array.to_zarr(x, tmp_path / "new.zarr", path="v", shards=(2, 10), chunks=(1, 5))
    old = zarr.open_array(tmp_path / "old.zarr", path="v", mode="r")
    new = zarr.open_array(tmp_path / "new.zarr", path="v", mode="r")
    np.testing.assert_array_equal(old[...], np.arange(40).reshape(4, 10))
    assert old.metadata == new.metadata


def test_a_dask_arrays_keywords_are_refused_with_a_dataset(tmp_path):
    ds = xr.Dataset({"v": ("x", np.arange(4))})
    with pytest.raises(errors.WriteError, match="single dask array"):
        shardwise.to_zarr(ds, tmp_path / "a.zarr", path="v")
    with pytest.raises(errors.ArgumentError, match="only with a dask array"):
        shardwise.to_zarr(ds, tmp_path / "b.zarr", not_a_keyword=1)
    assert not (tmp_path / "a.zarr").exists() and not (tmp_path / "b.zarr").exists()


def test_a_dask_array_given_to_the_xarray_writer_still_refuses_dataset_options(tmp_path):
    x = da.ones(4, chunks=2)
    with (
        pytest.warns(FutureWarning),
        pytest.raises(errors.WriteError, match="options for Datasets"),
    ):
        shardwise.to_zarr(x, tmp_path / "s.zarr", encoding={"v": {}})
    assert not (tmp_path / "s.zarr").exists()
