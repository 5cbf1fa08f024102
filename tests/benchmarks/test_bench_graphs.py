"""Building dask graphs, nothing computed: a write graph and a read graph of an array of
4096 shards (1024 x 1024 float32 in shards of 16 x 16, inner chunks of 8 x 16), its
metadata in memory. ``extra_info["shards"]`` gives the time per shard."""

from __future__ import annotations

import dask.array as da
import pytest
import xarray as xr
import zarr
from zarr.storage import MemoryStore

import shardwise

SHAPE, SHARD, INNER = (1024, 1024), (16, 16), (8, 16)
SHARDS = (SHAPE[0] // SHARD[0]) * (SHAPE[1] // SHARD[1])


@pytest.fixture(scope="module")
def stored() -> MemoryStore:
    """The array's metadata (no shard stored) in memory."""
    store = MemoryStore()
    zarr.create_array(
        store,
        name="v",
        shape=SHAPE,
        chunks=INNER,
        shards=SHARD,
        dtype="f4",
        dimension_names=("y", "x"),
    )
    return store


@pytest.mark.parametrize(
    "chunks", [SHARD, (24, 24)], ids=["dask chunks = shards", "misaligned dask chunks"]
)
def test_write_graph(benchmark, chunks):
    x = da.ones(SHAPE, chunks=chunks, dtype="f4")
    benchmark.group, benchmark.extra_info["shards"] = "graphs", SHARDS

    def build():
        return shardwise.array.to_zarr(
            x, MemoryStore(), path="v", shards=SHARD, chunks=INNER, compute=False
        )

    delayed = benchmark(build)
    assert len(delayed.__dask_graph__()) > SHARDS  # a task per shard at least


@pytest.mark.parametrize(
    "how",
    ["from_zarr, a chunk per shard", "from_zarr, fan-out", "engine, chunks={}"],
)
def test_read_graph(benchmark, stored, how):
    benchmark.group, benchmark.extra_info["shards"] = "graphs", SHARDS

    def build():
        if how.startswith("engine"):
            x = xr.open_dataset(stored, engine="shardwise", chunks={}, consolidated=False).v.data
        elif how.endswith("fan-out"):  # 2 dask chunks per shard: an index task per shard
            x = shardwise.array.from_zarr(stored, "v", chunks=INNER)
        else:
            x = shardwise.array.from_zarr(stored, "v")
        return x, x.__dask_graph__()

    x, graph = benchmark(build)
    assert x.npartitions >= SHARDS
    assert len(graph) >= SHARDS
