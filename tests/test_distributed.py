"""The engine on a real dask.distributed LocalCluster with worker processes."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

distributed = pytest.importorskip("distributed")


@pytest.fixture(scope="module")
def client():
    with (
        distributed.LocalCluster(
            n_workers=2,
            threads_per_worker=2,
            processes=True,
            dashboard_address=None,
            worker_dashboard_address=None,
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
    from shardwise import ChecksumError

    with pytest.raises(ChecksumError) as info:
        ds.precip.sum().compute()
    assert info.value.key == "precip/c/1/0/0"
    np.testing.assert_allclose(ds.temperature.sum().compute(), ds.temperature.load().sum())
