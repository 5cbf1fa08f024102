"""An append whose data step fails after its metadata claimed the rows: the error names
the rows exactly and the region write that completes them, and that write does; the
same append run again completes them too, where the claim is recorded (Zarr v3 arrays
that other jobs may append to), even after another job appended behind them."""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest
import xarray as xr
import zarr

import shardwise
from shardwise.array.claims import CLAIMS
from shardwise.io import conditional

from datasets import ROWS, block, rows_dataset


@pytest.fixture
def failing_shard_puts(monkeypatch):
    """Every shard put fails as a full disk does; metadata puts go through. Undo with
    the returned function."""
    put = conditional.LocalConditional.put

    def failing(self, key, data, expected):
        if "/c/" in f"/{key}":
            raise OSError(28, "No space left on device")
        return put(self, key, data, expected)

    monkeypatch.setattr(conditional.LocalConditional, "put", failing)
    return lambda: monkeypatch.setattr(conditional.LocalConditional, "put", put)


def _array(tmp_path):
    """150 rows of a dask array written at ``v`` (shards of 100 rows)."""
    path = tmp_path / "a.zarr"
    shardwise.array.to_zarr(
        da.from_array(block(0, 150), chunks=ROWS),
        path,
        path="v",
        shards=(100, 4),
        chunks=(10, 4),
        dimension_names=["y", "x"],
    )
    return path


def test_a_dask_array_append_names_the_rows_it_claimed(tmp_path, failing_shard_puts):
    path = _array(tmp_path)
    more = da.from_array(block(150), chunks=ROWS)
    with pytest.raises(shardwise.errors.IncompleteAppendError) as info:
        shardwise.array.to_zarr(more, path, path="v", append_dim=0)
    err = info.value
    assert isinstance(err, OSError) and isinstance(err.__cause__, shardwise.errors.StoreIOError)
    assert err.rows == {"v": ("y", 150, 200)}
    assert "y 150-199" in str(err) and "region=(slice(150, 200), slice(0, 4))" in str(err)
    assert err.key == "v/zarr.json"
    stored = zarr.open_array(path, path="v", mode="r")
    assert stored.shape == (200, 4)  # claimed: another job would append after them
    failing_shard_puts()
    shardwise.array.to_zarr(more, path, path="v", region=(slice(150, 200), slice(0, 4)), mode="r+")
    np.testing.assert_array_equal(zarr.open_array(path, path="v", mode="r")[...], block(0, 200))


def test_a_dataset_append_names_the_rows_it_claimed(tmp_path, failing_shard_puts):
    path = tmp_path / "d.zarr"

    encoding = {"temp": {"shards": (100, 4), "chunks": (10, 4)}}
    shardwise.to_zarr(rows_dataset(0, 150), path, consolidated=False, encoding=encoding)
    more = rows_dataset(150, ROWS)
    with pytest.raises(shardwise.errors.IncompleteAppendError) as info:
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
    xr.testing.assert_equal(back.load(), rows_dataset(0, 200).load())


def test_an_append_that_succeeds_leaves_no_claim(tmp_path):
    path = _array(tmp_path)
    shardwise.array.to_zarr(da.from_array(block(150), chunks=ROWS), path, path="v", append_dim=0)
    stored = zarr.open_array(path, path="v", mode="r")
    assert CLAIMS not in stored.attrs
    np.testing.assert_array_equal(stored[...], block(0, 200))


@pytest.mark.parametrize("compute", [True, False])
def test_running_a_failed_dask_array_append_again_completes_its_rows(
    tmp_path, failing_shard_puts, compute
):
    path = _array(tmp_path)
    more = da.from_array(block(150), chunks=ROWS)
    with pytest.raises(shardwise.errors.IncompleteAppendError) as info:
        shardwise.array.to_zarr(more, path, path="v", append_dim=0)
    assert "Run the same append again" in str(info.value)
    stored = zarr.open_array(path, path="v", mode="r")
    (claim,) = stored.attrs[CLAIMS].values()
    assert claim == {"axis": 0, "rows": [150, 200]}
    failing_shard_puts()
    # another job appends after the claimed rows before the re-run
    shardwise.array.to_zarr(da.from_array(block(200), chunks=ROWS), path, path="v", append_dim=0)
    # the same call again (the same data, built again): the claimed rows, no new ones
    again = da.from_array(block(150), chunks=ROWS)
    written = shardwise.array.to_zarr(again, path, path="v", append_dim=0, compute=compute)
    if not compute:
        written.compute()
    stored = zarr.open_array(path, path="v", mode="r")
    assert stored.shape == (250, 4)
    assert CLAIMS not in stored.attrs
    np.testing.assert_array_equal(stored[...], block(0, 250))
    # and once complete, the same call appends again, as any append does
    shardwise.array.to_zarr(again, path, path="v", append_dim=0)
    assert zarr.open_array(path, path="v", mode="r").shape == (300, 4)


def test_other_data_appended_after_a_failed_append_does_not_take_its_rows(
    tmp_path, failing_shard_puts
):
    path = _array(tmp_path)
    with pytest.raises(shardwise.errors.IncompleteAppendError):
        shardwise.array.to_zarr(
            da.from_array(block(150), chunks=ROWS), path, path="v", append_dim=0
        )
    failing_shard_puts()
    shardwise.array.to_zarr(da.from_array(block(200), chunks=ROWS), path, path="v", append_dim=0)
    stored = zarr.open_array(path, path="v", mode="r")
    assert stored.shape == (250, 4)
    assert len(stored.attrs[CLAIMS]) == 1  # still the failed one's
    np.testing.assert_array_equal(stored[200:], block(200))


def _dataset(start: int, rows: int) -> xr.Dataset:
    """Rows along a time axis (CF-encoded on disk), with a variable that has none."""
    import pandas as pd

    values = block(start, rows)
    return xr.Dataset(
        {
            "temp": (("time", "x"), values),
            "salt": (("time", "x"), values + 0.5),
            "depth": ("x", np.arange(4.0)),
        },
        coords={"time": pd.date_range("2000-01-01", periods=start + rows)[start:]},
    ).chunk({"time": ROWS})


@pytest.mark.filterwarnings("ignore:Consolidated metadata is currently not part:UserWarning")
def test_running_a_failed_dataset_append_again_completes_its_rows(tmp_path, failing_shard_puts):
    path = tmp_path / "d.zarr"
    encoding = {"temp": {"shards": (100, 4), "chunks": (10, 4)}}
    shardwise.to_zarr(_dataset(0, 150), path, encoding=encoding)
    with pytest.raises(shardwise.errors.IncompleteAppendError) as info:
        shardwise.to_zarr(_dataset(150, ROWS), path, append_dim="time")
    assert "Run the same append again" in str(info.value)
    group = zarr.open_group(path, mode="r", use_consolidated=False)
    for name in ("temp", "salt", "time"):
        (claim,) = group[name].attrs[CLAIMS].values()
        assert claim == {"axis": 0, "rows": [150, 200]}
    assert CLAIMS not in group["depth"].attrs
    # the consolidated metadata is still the dataset as it was
    assert xr.open_dataset(path, engine="zarr").sizes["time"] == 150
    failing_shard_puts()
    shardwise.to_zarr(_dataset(200, ROWS), path, append_dim="time")  # another job's
    shardwise.to_zarr(_dataset(150, ROWS), path, append_dim="time")  # the same call again
    for consolidated in (True, False):
        back = xr.open_dataset(path, engine="zarr", consolidated=consolidated).load()
        xr.testing.assert_equal(back, _dataset(0, 250).load())
        assert all(CLAIMS not in v.attrs for v in back.variables.values())
    # once complete, the same call appends again, as any append does
    shardwise.to_zarr(_dataset(150, ROWS), path, append_dim="time")
    assert xr.open_dataset(path, engine="zarr").sizes["time"] == 300


@pytest.mark.filterwarnings("ignore:Consolidated metadata is currently not part:UserWarning")
def test_a_dataset_append_that_succeeds_leaves_no_claim(tmp_path):
    path = tmp_path / "d.zarr"
    shardwise.to_zarr(_dataset(0, 150), path)
    shardwise.to_zarr(_dataset(150, ROWS), path, append_dim="time", compute=False).compute()
    back = xr.open_dataset(path, engine="zarr").load()
    xr.testing.assert_equal(back, _dataset(0, 200).load())
    group = zarr.open_group(path, mode="r", use_consolidated=False)
    assert all(CLAIMS not in a.attrs for _, a in group.arrays())


@pytest.mark.filterwarnings("ignore:Consolidated metadata is currently not part:UserWarning")
def test_a_failure_after_the_commit_before_the_data_reports_the_rows(tmp_path, monkeypatch):
    """The store fails between the commit that claimed the rows and the data step
    (reopening the arrays): the rows are reported, and running the append again
    completes them."""
    from shardwise.xarray.metadata_step import AppendTransaction

    path = tmp_path / "d.zarr"
    shardwise.to_zarr(_dataset(0, 150), path)

    def failing(self, *args, **kwargs):
        raise OSError(104, "Connection reset by peer")

    with monkeypatch.context() as m:
        m.setattr(AppendTransaction, "reopen", failing)
        with pytest.raises(shardwise.errors.IncompleteAppendError) as info:
            shardwise.to_zarr(_dataset(150, ROWS), path, append_dim="time")
    assert info.value.rows["temp"] == ("time", 150, 200)
    assert "Run the same append again" in str(info.value)
    shardwise.to_zarr(_dataset(150, ROWS), path, append_dim="time")
    back = xr.open_dataset(path, engine="zarr", consolidated=False).load()
    xr.testing.assert_equal(back, _dataset(0, 200).load())


@pytest.mark.filterwarnings("ignore:Consolidated metadata is currently not part:UserWarning")
def test_an_object_store_clients_own_error_is_named(tmp_path):
    """obstore's GenericError from a request zarr-python makes while the write is
    planned (a listing), and while a dataset is opened: StoreIOErrors naming where."""
    obstore = pytest.importorskip("obstore")
    from zarr.storage import LocalStore, WrapperStore

    class Failing(WrapperStore):
        async def list_dir(self, prefix):
            raise obstore.exceptions.GenericError("request or response body error")
            yield  # pragma: no cover - (an async generator)

        def with_read_only(self, read_only=False):
            return type(self)(self._store.with_read_only(read_only))

    path = tmp_path / "d.zarr"
    shardwise.to_zarr(_dataset(0, 150), path)
    store = Failing(LocalStore(path))
    with pytest.raises(shardwise.errors.StoreIOError) as info:
        shardwise.to_zarr(_dataset(150, ROWS), store, append_dim="time", consolidated=False)
    assert isinstance(info.value.__cause__, obstore.exceptions.GenericError)
    assert info.value.key == "zarr.json"
    with pytest.raises(shardwise.errors.StoreIOError) as info:
        xr.open_dataset(store, engine="shardwise", consolidated=False)
    assert info.value.key == "zarr.json"


def test_a_commit_goes_over_another_appends_release_of_its_claim():
    """Another job took its claim out of a document after this commit read it: the
    commit puts its document over the current one with the claims merged; any other
    change is a conflict."""
    import json

    from shardwise.array.claims import rebased

    def doc(shape, claims):
        attributes = {"units": "K", **({CLAIMS: claims} if claims else {})}
        return json.dumps({"shape": shape, "node_type": "array", "attributes": attributes})

    theirs = {"b": {"axis": 0, "rows": [100, 150]}}
    mine = {"a": {"axis": 0, "rows": [150, 200]}}
    read = doc([150, 4], theirs).encode()
    ours = doc([200, 4], {**theirs, **mine}).encode()
    put = rebased(ours, read, doc([150, 4], {}).encode())  # b's claim released meanwhile
    assert put is not None
    assert json.loads(put)["attributes"] == {"units": "K", CLAIMS: mine}
    assert json.loads(put)["shape"] == [200, 4]
    assert rebased(ours, read, doc([250, 4], theirs).encode()) is None  # another append
    # another append made over ours (whose answer was lost): it holds our claim
    over = doc([250, 4], {**mine, "c": {"axis": 0, "rows": [200, 250]}}).encode()
    assert rebased(ours, read, over) == over
    moved = doc([250, 4], {"a": {"axis": 0, "rows": [200, 250]}}).encode()
    assert rebased(ours, read, moved) is None  # (not our rows: not ours)
