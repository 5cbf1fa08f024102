"""Load: a write under memory pressure on worker processes with a low memory limit."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

from clusters import CLUSTER_OPTIONS

distributed = pytest.importorskip("distributed")

SHARD = (256, 512, 512)  # float32: 256 MiB
INNER = (1, 512, 512)  # 1 MiB


def smooth(block_info=None):
    """A compressible block of the field, made where the task runs."""
    loc = block_info[None]["array-location"]
    t, y, x = (np.arange(a, b, dtype="f4") for a, b in loc)
    return (
        np.sin(t[:, None, None] / 50)
        + np.cos(y[None, :, None] / 40) * np.sin(x[None, None, :] / 30)
    ).astype("f4")


@pytest.mark.slow
def test_write_256_mib_shards_on_1_gib_workers(tmp_path):
    """1 GiB of data in four 256 MiB shards of 1 MiB inner chunks, from dask chunks of
    96 time steps (96 MiB, cutting the shards), on 2 workers limited to 1 GiB each:
    it completes, no worker is restarted, and the store holds the data."""
    import dask.array as da
    from distributed.diagnostics import MemorySampler

    import shardwise

    shape = (4 * SHARD[0], SHARD[1], SHARD[2])
    field = da.map_blocks(smooth, chunks=((96,) * 10 + (64,), (512,), (512,)), dtype="f4")
    assert field.shape == shape
    ds = xr.Dataset({"v": (("t", "y", "x"), field)})
    path = tmp_path / "big.zarr"
    with (
        distributed.LocalCluster(
            **CLUSTER_OPTIONS,
            threads_per_worker=1,
            memory_limit="1GiB",
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        pids = client.run(lambda: __import__("os").getpid())
        sampler = MemorySampler()
        with sampler.sample("write", interval=0.1):
            shardwise.to_zarr(
                ds,
                path,
                shards={"t": SHARD[0]},
                chunks={"t": INNER[0]},
                consolidated=False,
            )
        assert client.run(lambda: __import__("os").getpid()) == pids  # nobody restarted
        peak = max(sampler.samples["write"], key=lambda s: s[1])[1]
    # the cluster's total managed memory never came near 2 x 1 GiB
    print(f"peak cluster memory during the write: {peak / 2**20:.0f} MiB")
    assert peak < 2 * 0.8 * 2**30, peak
    back = xr.open_dataset(path, engine="shardwise", chunks={}, consolidated=False)
    assert back.v.encoding["shards"] == SHARD and back.v.encoding["chunks"] == INNER
    for t0 in (0, 250, 700, 1023):  # spot checks across the shards
        np.testing.assert_array_equal(
            back.v[t0 : t0 + 2].values, field[t0 : t0 + 2].compute(scheduler="sync")
        )
    report = shardwise.verify(path)
    assert report.ok and report.shards == 4
