"""A Dataset write that creates arrays puts their metadata after their data
(shardwise.io.staged): a failure in between leaves no array of fill values that a
reader would open, and the same call then writes the data."""

from __future__ import annotations

import dask
import numpy as np
import pandas as pd
import pytest
import xarray as xr
import zarr
from zarr.storage import LocalStore

import shardwise
from shardwise.io.staged import metadata_order
from shardwise.testing import CountingStore

KW = {"shards": {"time": 100}, "chunks": {"time": 10}}


def table(nt=400, nx=6, chunks=30, name="v"):
    v = np.random.default_rng(0).normal(size=(nt, nx)).astype("f4")
    ds = xr.Dataset(
        {name: (("time", "x"), v, {"units": "K"})},
        coords={"time": pd.date_range("2000-01-01", periods=nt, freq="h"), "x": np.arange(nx)},
        attrs={"title": "test"},
    )
    return ds.chunk({"time": chunks})


def broken(ds, name="v", at=7):
    """``ds`` with the dask block ``at`` of ``name`` raising when computed."""

    def boom(block, block_info=None):
        if block_info[0]["chunk-location"][0] == at:
            raise RuntimeError("worker lost")
        return block

    out = ds.copy()
    out[name] = ds[name].copy(data=ds[name].data.map_blocks(boom, dtype=ds[name].dtype))
    return out


def files(path):
    return sorted(p.relative_to(path).as_posix() for p in path.rglob("*") if p.is_file())


@pytest.fixture(autouse=True)
def _sync():
    with dask.config.set(scheduler="sync"):
        yield


CONSOLIDATED = pytest.mark.filterwarnings(
    "ignore:Consolidated metadata is currently not part:UserWarning"
)


@CONSOLIDATED
@pytest.mark.parametrize("consolidated", [False, None])
@pytest.mark.parametrize("mode", ["w", "w-"])
def test_a_failed_new_store_leaves_nothing_a_reader_opens(tmp_path, mode, consolidated):
    path = tmp_path / "s.zarr"
    ds = table()
    with pytest.raises(RuntimeError, match="worker lost") as raised:
        shardwise.to_zarr(broken(ds), path, mode=mode, consolidated=consolidated, **KW)
    assert "metadata was to be put after their data" in "".join(raised.value.__notes__)
    assert files(path) == [] if path.exists() else True
    with pytest.raises(FileNotFoundError):
        xr.open_zarr(path, consolidated=False)
    # the same call, run again, writes the dataset
    shardwise.to_zarr(ds, path, mode=mode, consolidated=consolidated, **KW)
    xr.testing.assert_identical(xr.open_zarr(path, consolidated=consolidated).load(), ds.load())


def test_a_failed_replacement_leaves_no_group(tmp_path):
    """``mode="w"`` over an existing store: the old group is gone (it was replaced before
    the data), and no array of the new one is there to be read as data."""
    path = tmp_path / "s.zarr"
    shardwise.to_zarr(table(name="old"), path, consolidated=False, **KW)
    with pytest.raises(RuntimeError, match="worker lost"):
        shardwise.to_zarr(broken(table()), path, mode="w", consolidated=False, **KW)
    assert not path.exists() or files(path) == []
    with pytest.raises(FileNotFoundError):
        zarr.open_group(path, mode="r")


def test_a_failed_new_variable_leaves_the_group_as_it_was(tmp_path):
    path = tmp_path / "s.zarr"
    ds = table()
    shardwise.to_zarr(ds, path, consolidated=False, **KW)
    before = {f: (path / f).read_bytes() for f in files(path)}
    extra = table(name="w").drop_vars(["time", "x"])
    with pytest.raises(RuntimeError, match="worker lost"):
        shardwise.to_zarr(broken(extra, "w"), path, mode="a", consolidated=False, **KW)
    assert {f: (path / f).read_bytes() for f in files(path)} == before
    xr.testing.assert_identical(xr.open_zarr(path, consolidated=False).load(), ds.load())
    shardwise.to_zarr(extra, path, mode="a", consolidated=False, **KW)
    back = xr.open_zarr(path, consolidated=False).load()
    xr.testing.assert_identical(back, xr.merge([ds, extra]).load())


@CONSOLIDATED
@pytest.mark.parametrize("consolidated", [False, True])
def test_the_metadata_is_put_after_the_data(tmp_path, consolidated):
    """Every chunk and shard is put before any metadata document, each array's document
    before its group's, and the group's last."""
    ds = table()
    ds["n"] = ds.v.load() * 2  # numpy: written by xarray's metadata step, staged too
    store = CountingStore(LocalStore(tmp_path / "s.zarr"))
    shardwise.to_zarr(ds, store, consolidated=consolidated, **KW)
    puts = [r.key for r in store.log.requests if r.op == "set"]
    documents = [k for k in puts if k.rsplit("/", 1)[-1] == "zarr.json"]
    first = puts.index(documents[0])
    assert all(k.rsplit("/", 1)[-1] == "zarr.json" for k in puts[first:])
    assert {k.split("/")[0] for k in puts[:first]} == {"v", "n", "time", "x"}
    assert documents[-1] == "zarr.json"
    assert sorted(documents[:-1]) == ["n/zarr.json", "time/zarr.json", "v/zarr.json", "x/zarr.json"]
    xr.testing.assert_identical(xr.open_zarr(store, consolidated=consolidated).load(), ds.load())


def test_the_store_returned_is_the_real_store(tmp_path):
    """What ``to_zarr`` returns is xarray's store over the store written to (not the
    staging view its metadata step ran on), its arrays holding the data written."""
    ds = table()
    store = LocalStore(tmp_path / "s.zarr")
    zstore = shardwise.to_zarr(ds, store, consolidated=False, **KW)
    assert zstore.zarr_group.store is store
    arrays = dict(zstore.zarr_group.arrays())
    assert all(a.store is store for a in arrays.values())
    np.testing.assert_array_equal(arrays["v"][:], ds.v.values)
    back = xr.open_zarr(zstore.zarr_group.store, consolidated=False)
    xr.testing.assert_identical(back.load(), ds.load())


def test_metadata_order():
    keys = [
        "zarr.json",
        "g/zarr.json",
        "g/a/zarr.json",
        "b/zarr.json",
        ".zmetadata",
        ".zgroup",
        ".zattrs",
        "v/.zattrs",
        "v/.zarray",
    ]
    assert metadata_order(keys) == [
        "g/a/zarr.json",
        "v/.zattrs",
        "b/zarr.json",
        "g/zarr.json",
        "v/.zarray",
        ".zattrs",
        "zarr.json",
        ".zgroup",
        ".zmetadata",
    ]


def test_compute_false_writes_the_metadata_at_once(tmp_path):
    """``compute=False`` keeps xarray's order: the arrays exist at once (to be filled
    by region writes), their data when the delayed is computed."""
    path = tmp_path / "s.zarr"
    ds = table()
    delayed = shardwise.to_zarr(ds, path, compute=False, consolidated=False, **KW)
    assert zarr.open_group(path, mode="r")["v"].shape == (400, 6)
    dask.compute(delayed)
    xr.testing.assert_identical(xr.open_zarr(path, consolidated=False).load(), ds.load())


@pytest.mark.parametrize("client", ["s3fs", "obstore"])
def test_a_new_store_on_s3_whose_shard_puts_fail(s3_serialized, serialized_bucket, client):
    """Through an S3 endpoint whose answers to every shard put break off (the fault
    proxy resetting the connection), a new store's write fails with a named error and
    leaves no metadata document in the bucket; the same call then writes it."""
    pytest.importorskip(client)
    import s3fs

    from faultproxy import FaultProxy

    ds = table(nt=200)
    url = f"s3://{serialized_bucket}/n.zarr"
    with FaultProxy(s3_serialized.endpoint, max_seconds=120) as proxy:
        if client == "s3fs":
            store = url
            so = s3_serialized.storage_options(
                endpoint_url=proxy.endpoint,
                config_kwargs={"retries": {"total_max_attempts": 1, "mode": "standard"}},
            )
        else:
            store = s3_serialized.obstore(serialized_bucket, "n.zarr", endpoint=proxy.endpoint)
            so = None
        proxy.inject("reset", 1.0, methods=["PUT"], when=lambda r: "/v/c/" in r.path)
        with pytest.raises(shardwise.ShardwiseError) as raised:
            shardwise.to_zarr(ds, store, storage_options=so, consolidated=False, **KW)
        assert raised.value.key is not None and raised.value.key.startswith("v/c/"), raised.value
        proxy.clear()
        fs = s3fs.S3FileSystem(**s3_serialized.storage_options())
        left = fs.find(f"{serialized_bucket}/n.zarr")
        assert not [k for k in left if k.endswith("zarr.json")], left
        shardwise.to_zarr(ds, store, storage_options=so, consolidated=False, **KW)
    back = xr.open_zarr(url, storage_options=s3_serialized.storage_options(), consolidated=False)
    xr.testing.assert_identical(back.load(), ds.load())


@pytest.mark.parametrize("mode", ["w", "w-", None])
def test_a_failed_dask_array_write_leaves_no_array(tmp_path, mode):
    """The same for one dask array: its zarr.json is put after its shards."""
    import dask.array as da

    def boom(block, block_info=None):
        if block_info[0]["chunk-location"][0] == 5:
            raise RuntimeError("worker lost")
        return block

    x = da.arange(1000, chunks=100).astype("f4")
    path = tmp_path / "a.zarr"
    opts = {"path": "v", "mode": mode, "shards": (200,), "chunks": (50,)}
    with pytest.raises(RuntimeError, match="worker lost"):
        shardwise.array.to_zarr(x.map_blocks(boom, dtype="f4"), path, **opts)
    assert not path.exists() or files(path) == []
    store = CountingStore(LocalStore(path))
    shardwise.array.to_zarr(x, store, **opts)
    puts = [r.key for r in store.log.requests if r.op == "set"]
    assert puts[-2:] == ["v/zarr.json", "zarr.json"], puts
    assert len(puts) == 7  # five shards, then the documents
    np.testing.assert_array_equal(zarr.open_array(path, path="v")[:], np.arange(1000))
