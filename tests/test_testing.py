"""The test helpers shipped in shardwise.testing."""

from __future__ import annotations

import pickle
import time

import dask
import numpy as np
import xarray as xr
from zarr.storage import LocalStore, MemoryStore

import shardwise
from shardwise.testing import CountingStore, LatencyStore


def test_latency_store_delays_each_request_and_overlaps_concurrent_ones(tmp_path):
    from zarr.core.buffer import default_buffer_prototype
    from zarr.core.sync import sync

    inner = MemoryStore()
    store = LatencyStore(inner, delay=0.05)
    buf = default_buffer_prototype().buffer.from_bytes(b"x" * 10)
    t0 = time.perf_counter()
    sync(store.set("a", buf))
    got = sync(store.get("a", default_buffer_prototype()))
    assert got.to_bytes() == b"x" * 10
    assert time.perf_counter() - t0 >= 0.1  # two requests, one after the other

    keys = [("a", None)] * 20
    t0 = time.perf_counter()
    sync(store.get_partial_values(default_buffer_prototype(), keys))
    elapsed = time.perf_counter() - t0
    assert 0.05 <= elapsed < 20 * 0.05 / 2  # 20 requests at once, not one by one

    copy = pickle.loads(pickle.dumps(store))
    assert copy.delay == 0.05


def test_latency_store_under_xarray(tmp_path):
    ds = xr.Dataset({"v": (("t", "x"), np.arange(4000.0).reshape(200, 20))}).chunk({"t": 30})
    shardwise.to_zarr(
        ds, tmp_path / "s.zarr", shards={"t": 100}, chunks={"t": 10}, consolidated=False
    )
    counting = CountingStore(LocalStore(tmp_path / "s.zarr", read_only=True))
    slow = LatencyStore(counting, delay=0.02)
    with dask.config.set(scheduler="threads"):
        back = xr.open_dataset(slow, engine="shardwise", chunks={}, consolidated=False).load()  # type: ignore[arg-type]
    xr.testing.assert_identical(back, ds.load())
    shard_reads = [r.key for r in counting.log.gets("") if r.key.startswith("v/c/")]
    assert sorted(shard_reads) == ["v/c/0/0", "v/c/1/0"]  # one whole-shard read per shard
