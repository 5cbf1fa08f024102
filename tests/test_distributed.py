"""The engine on a real dask.distributed LocalCluster with worker processes."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

from clusters import CLUSTER_OPTIONS

distributed = pytest.importorskip("distributed")


@pytest.fixture(scope="module")
def client():
    with (
        distributed.LocalCluster(
            **CLUSTER_OPTIONS,
            threads_per_worker=2,
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        yield client


@pytest.mark.slow
def test_read_on_worker_processes(client, weather_store):
    path, _ = weather_store
    ds = xr.open_dataset(path, engine="shardwise", chunks={}, consolidated=False)
    ref = xr.open_dataset(path, engine="zarr", consolidated=False).load()
    got = ds.compute()  # the Client is the default scheduler now
    xr.testing.assert_identical(got, ref)
    mean = ds.temperature.mean("time").compute()
    xr.testing.assert_allclose(mean, ref.temperature.mean("time"))
    # the tasks ran in the worker processes, not here
    processing = client.run(lambda: __import__("os").getpid())
    assert len(set(processing.values())) == 2


@pytest.mark.slow
def test_errors_travel_from_workers(client, weather_store):
    path, _ = weather_store
    shard = path / "precip" / "c" / "1" / "0" / "0"
    raw = bytearray(shard.read_bytes())
    raw[-5] ^= 0xFF
    shard.write_bytes(bytes(raw))
    ds = xr.open_dataset(path, engine="shardwise", chunks={}, consolidated=False)
    from shardwise.errors import ChecksumError

    with pytest.raises(ChecksumError) as info:
        ds.precip.sum().compute()
    assert info.value.key == "precip/c/1/0/0"
    np.testing.assert_allclose(ds.temperature.sum().compute(), ds.temperature.load().sum())


@pytest.mark.slow
def test_misaligned_write_on_worker_processes(client, tmp_path):
    """Dask chunks of 30 rows into shards of 100 rows with inner chunks of 10, written
    by 2 worker processes: nothing is lost (``ds.to_zarr(safe_chunks=False)`` loses a
    fifth or more of the values in this case, the tasks that share a shard overwriting
    each other's parts)."""
    import pandas as pd

    import shardwise

    rng = np.random.default_rng(0)
    ds = xr.Dataset(
        {"v": (("time", "x"), rng.normal(size=(3000, 200)).astype("f4"))},
        coords={"time": pd.date_range("2000-01-01", periods=3000, freq="h")},
    ).chunk({"time": 30})
    path = tmp_path / "s.zarr"
    shardwise.to_zarr(ds, path, shards={"time": 100}, chunks={"time": 10}, consolidated=False)
    back = xr.open_zarr(path, consolidated=False).load()
    assert int((back.v != ds.v.load()).sum()) == 0
    xr.testing.assert_identical(back, ds.load())


@pytest.mark.slow
def test_delayed_write_with_progress(client, tmp_path):
    import shardwise

    ds = xr.Dataset({"v": (("t", "x"), np.arange(60_000.0).reshape(600, 100))}).chunk({"t": 70})
    path = tmp_path / "s.zarr"
    delayed = shardwise.to_zarr(
        ds, path, shards={"t": 200}, chunks={"t": 25}, compute=False, consolidated=False
    )
    future = client.compute(delayed)
    distributed.progress(future, notebook=False)  # the progress bar distributed users watch
    assert isinstance(future.result(), xr.backends.ZarrStore)
    # the region write of a part that cuts shards, merged by the worker owning each shard
    part = (ds.isel(t=slice(150, 420)) * -1).chunk({"t": 33})
    shardwise.to_zarr(part, path, region={"t": slice(150, 420)}, consolidated=False)
    expected = ds.load().copy(deep=True)
    expected["v"][150:420] *= -1
    xr.testing.assert_identical(xr.open_zarr(path, consolidated=False).load(), expected)


@pytest.mark.slow
def test_fanout_read_on_worker_processes(client, weather_store):
    """shardwise.open_dataset's graph on worker processes: identical values, one index
    task per shard, and a selection runs only the tasks of the shards it touches."""
    import shardwise

    path, _ = weather_store
    ref = xr.open_dataset(path, engine="zarr", consolidated=False).load()
    ds = shardwise.open_dataset(
        path, chunks="inner", consolidated=False, read_options={"index_cache": False}
    )
    with distributed.get_task_stream(client) as stream:
        got = ds.compute()
    xr.testing.assert_identical(got, ref)
    prefixes = [t["key"][0] if isinstance(t["key"], tuple) else t["key"] for t in stream.data]
    index_tasks = [p for p in prefixes if "shardwise-index-" in p]
    assert len(index_tasks) == 4 + 6  # temperature's shards + precip's shards
    with distributed.get_task_stream(client) as stream:
        part = ds.temperature.isel(time=slice(30, 40)).compute()
    xr.testing.assert_identical(part, ref.temperature.isel(time=slice(30, 40)))
    keys = [t["key"] for t in stream.data]
    touched = {k[1] for k in keys if isinstance(k, tuple) and "shardwise-index-" in k[0]}
    assert touched == {3}, keys  # the last of 4 shards along time


@pytest.mark.slow
def test_batched_write_of_persisted_data_on_worker_processes(client, tmp_path):
    """shards_per_task on worker processes, from a dataset persisted there: one task per
    group of 8 dask chunks (their blocks fetched from wherever they live), one put per
    shard, every value in place; a misaligned region write batched the same way."""
    import dask.utils

    import shardwise

    data = np.arange(640 * 64, dtype="f4").reshape(640, 64)
    ds = xr.Dataset({"v": (("t", "x"), data)}).chunk({"t": 16}).persist()
    distributed.wait(ds)
    with distributed.get_task_stream(client) as stream:
        shardwise.to_zarr(
            ds,
            tmp_path / "s.zarr",
            shards={"t": 16},
            chunks={"t": 8},
            consolidated=False,
            shards_per_task=8,
        )
    names = [dask.utils.key_split(t["key"]) for t in stream.data]
    assert names.count("shardwise-encode") == 5  # 40 shards, 8 per task
    assert "shardwise-shard" not in names
    assert len(list((tmp_path / "s.zarr" / "v" / "c").iterdir())) == 40
    part = xr.Dataset({"v": (("t", "x"), -data[100:500])}).chunk({"t": 24})
    shardwise.to_zarr(
        part,
        tmp_path / "s.zarr",
        region={"t": slice(100, 500)},
        shards_per_task=4,
        consolidated=False,
    )
    expected = data.copy()
    expected[100:500] *= -1
    back = xr.open_dataset(tmp_path / "s.zarr", engine="shardwise", chunks={}, consolidated=False)
    np.testing.assert_array_equal(back.v.values, expected)


@pytest.mark.slow
def test_rectilinear_write_and_append_on_worker_processes(client, tmp_path):
    """Monthly dask chunks written 1:1 as rectilinear shards, then more months
    appended, by 2 worker processes: zero differences, read back by zarr-python."""
    import pandas as pd
    import zarr

    import shardwise

    def months(start, lengths, seed):
        rng = np.random.default_rng(seed)
        n = sum(lengths)
        return xr.Dataset(
            {"v": (("time", "x"), rng.normal(size=(n, 500)).astype("f4"))},
            coords={"time": pd.date_range(start, periods=n, freq="D")},
        ).chunk({"time": lengths})

    first = months("2001-01-01", (31, 28, 31, 30, 31, 30), 0)
    more = months("2001-07-01", (31, 31, 30), 1)
    path = tmp_path / "m.zarr"
    shardwise.to_zarr(first, path, chunks={"time": 1}, consolidated=False)
    shardwise.to_zarr(more, path, append_dim="time", consolidated=False)
    expected = xr.concat([first, more], "time").load()
    back = xr.open_dataset(path, engine="shardwise", chunks={}, consolidated=False)
    assert back.v.chunks[0] == (31, 28, 31, 30, 31, 30, 31, 31, 30)
    back = back.load()
    assert int((back.v != expected.v).sum()) == 0
    xr.testing.assert_identical(back, expected)
    with zarr.config.set({"array.rectilinear_chunks": True}):
        np.testing.assert_array_equal(zarr.open_array(path / "v")[...], expected.v.values)


@pytest.mark.slow
def test_migrate_on_worker_processes(client, tmp_path):
    """The 2022-draft migration's tasks travel to worker processes and run there."""
    from pathlib import Path

    import shardwise

    legacy = Path(__file__).parent / "data" / "legacy" / "compressors"
    report = shardwise.tools.migrate.migrate(legacy, tmp_path / "m.zarr")
    assert report.shards == 20
    source = xr.open_dataset(legacy, engine="shardwise").load()
    back = xr.open_dataset(tmp_path / "m.zarr", engine="zarr", consolidated=False).load()
    xr.testing.assert_identical(back, source)


@pytest.mark.slow
def test_split_encoding_of_one_shard_runs_on_both_workers(client, tmp_path):
    """encode_split: one shard from one persisted dask chunk is encoded in parts on
    both worker processes (the parts travel, the block stays), and one task makes the
    single put; the values read back equal."""
    import zarr

    import shardwise

    values = np.random.default_rng(3).standard_normal((512, 64)).astype("f4")
    ds = xr.Dataset({"v": (("y", "x"), values)}).chunk({"y": 512}).persist()
    distributed.wait(ds)
    path = tmp_path / "split.zarr"
    with distributed.get_task_stream(client) as ts:
        shardwise.to_zarr(
            ds, path, shards={"y": 512}, chunks={"y": 32}, encode_split=4, consolidated=False
        )
    encode = [t for t in ts.data if "shardwise-encode-" in str(t["key"])]
    shard = [t for t in ts.data if "shardwise-shard-" in str(t["key"])]
    assert len(encode) == 4 and len(shard) == 1
    assert len({t["worker"] for t in encode}) == 2
    np.testing.assert_array_equal(zarr.open_array(path / "v", mode="r")[...], values)
    assert sorted(p.name for p in (path / "v" / "c").rglob("*") if p.is_file()) == ["0"]


def test_dask_array_write_append_and_read_on_worker_processes(client, tmp_path):
    """A dask array written without xarray (chunks cutting shards, then an append), and
    read back with the fan-out graph, on 2 worker processes: equal to zarr-python's and
    dask.array.from_zarr's reads of the same store."""
    import dask.array as da
    import zarr

    import shardwise

    data = np.random.default_rng(4).normal(size=(300, 120)).astype("f4")
    x = da.from_array(data, chunks=(45, 70))
    path = tmp_path / "a.zarr"
    delayed = shardwise.array.to_zarr(
        x[:200], path, path="v", shards=(100, 60), chunks=(20, 20), compute=False
    )
    assert isinstance(client.compute(delayed).result(), zarr.Array)
    shardwise.array.to_zarr(x[200:], path, path="v", append_dim=0)
    np.testing.assert_array_equal(zarr.open_array(path, path="v", mode="r")[...], data)
    back = shardwise.array.from_zarr(path, "v", chunks={0: 60})
    np.testing.assert_array_equal(back.compute(), da.from_zarr(str(path), component="v").compute())
