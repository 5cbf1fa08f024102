"""An append whose data step fails after its metadata claimed the rows: the error names
the rows exactly and the region write that completes them, and that write does."""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest
import xarray as xr
import zarr

import shardwise
from shardwise.io import conditional

ROWS = 50


def block(start: int, rows: int = ROWS) -> np.ndarray:
    """Rows that say where they belong: row r holds r in every column."""
    return np.repeat(np.arange(start, start + rows, dtype="f8")[:, None], 4, axis=1)


@pytest.fixture
def failing_shard_puts(monkeypatch):
    """Every shard put fails as a full disk does; metadata puts go through. Undo with
    the returned function."""
    put = conditional._Local.put

    def failing(self, key, data, expected):
        if "/c/" in f"/{key}":
            raise OSError(28, "No space left on device")
        return put(self, key, data, expected)

    monkeypatch.setattr(conditional._Local, "put", failing)
    return lambda: monkeypatch.setattr(conditional._Local, "put", put)


def test_a_dask_array_append_names_the_rows_it_claimed(tmp_path, failing_shard_puts):
    path = tmp_path / "a.zarr"
    shardwise.to_zarr(
        da.from_array(block(0, 150), chunks=ROWS),
        path,
        path="v",
        shards=(100, 4),
        chunks=(10, 4),
        dimension_names=["y", "x"],
    )
    more = da.from_array(block(150), chunks=ROWS)
    with pytest.raises(shardwise.IncompleteAppendError) as info:
        shardwise.to_zarr(more, path, path="v", append_dim=0)
    err = info.value
    assert isinstance(err, OSError) and isinstance(err.__cause__, shardwise.StoreIOError)
    assert err.rows == {"v": ("y", 150, 200)}
    assert "y 150-199" in str(err) and "region=(slice(150, 200), slice(0, 4))" in str(err)
    assert err.key == "v/zarr.json"
    stored = zarr.open_array(path, path="v", mode="r")
    assert stored.shape == (200, 4)  # claimed: another job would append after them
    failing_shard_puts()
    shardwise.to_zarr(more, path, path="v", region=(slice(150, 200), slice(0, 4)), mode="r+")
    np.testing.assert_array_equal(zarr.open_array(path, path="v", mode="r")[...], block(0, 200))


def test_a_dataset_append_names_the_rows_it_claimed(tmp_path, failing_shard_puts):
    path = tmp_path / "d.zarr"

    def dataset(start: int, rows: int) -> xr.Dataset:
        values = block(start, rows)
        return xr.Dataset(
            {"temp": (("y", "x"), values), "salt": (("y", "x"), values + 0.5)},
            coords={"y": np.arange(start, start + rows)},
        ).chunk({"y": ROWS})

    encoding = {"temp": {"shards": (100, 4), "chunks": (10, 4)}}
    shardwise.to_zarr(dataset(0, 150), path, consolidated=False, encoding=encoding)
    more = dataset(150, ROWS)
    with pytest.raises(shardwise.IncompleteAppendError) as info:
        shardwise.to_zarr(more, path, append_dim="y", consolidated=False)
    err = info.value
    assert {name: span for name, span in err.rows.items()} == {
        name: ("y", 150, 200) for name in err.rows
    }
    assert {"temp", "salt"} <= set(err.rows)
    assert "region={'y': slice(150, 200)}" in str(err)
    assert "zarr.open_array(store, path='y', mode='r+')[150:200] = ds['y'].values" in str(err)
    failing_shard_puts()
    # what the error says: the region write, and the index coordinate
    shardwise.to_zarr(more, path, region={"y": slice(150, 200)}, mode="r+", consolidated=False)
    zarr.open_array(path, path="y", mode="r+")[150:200] = more["y"].values
    back = xr.open_dataset(path, engine="zarr", consolidated=False)
    xr.testing.assert_equal(back.load(), dataset(0, 200).load())
