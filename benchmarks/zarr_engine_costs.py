"""What xarray + zarr-python + dask cost today on sharded stores (the README's "why").

Measures, in one run:
1. index reads per shard when ``xr.open_zarr`` reads a sharded array with its default
   dask chunks (= inner chunks), counted with a wrapping store, next to
   ``engine="shardwise", chunks={}``;
2. values lost when dask chunks that do not line up with shards are written with
   ``ds.to_zarr(..., safe_chunks=False)`` on a LocalCluster with 2 worker processes
   (several tasks read-modify-write one shard), next to ``shardwise.to_zarr`` writing
   the same dataset with the same encoding on the same cluster.

Run: ``.venv/bin/python benchmarks/zarr_engine_costs.py``
"""

from __future__ import annotations

import tempfile
import warnings
from pathlib import Path

import dask
import distributed
import numpy as np
import xarray as xr
from zarr.storage import LocalStore

import shardwise
from shardwise.testing import CountingStore


def index_reads(path: Path) -> None:
    print("1. reading a sharded array (8 shards x 64 inner chunks), threaded scheduler")
    for engine, chunks in (("zarr", None), ("shardwise", {})):
        store = CountingStore(LocalStore(path, read_only=True))
        if engine == "zarr":
            ds = xr.open_zarr(store, consolidated=False)
        else:
            ds = xr.open_dataset(store, engine="shardwise", chunks=chunks, consolidated=False)
        store.log.clear()
        ntasks = ds.v.data.npartitions
        with dask.config.set(scheduler="threads", num_workers=2):
            ds.v.load()
        gets = store.log.gets("")
        index = [r for r in gets if r.byte_range.startswith(("last", "from"))]
        nshards = len({r.key for r in gets})
        print(
            f"   engine={engine!r:12} dask tasks={ntasks:4}  store reads={len(gets):4}"
            f"  index reads per shard={len(index) / nshards:5.1f}"
            f"  reads per shard={len(gets) / nshards:5.1f}"
        )


def lost_values(tmp: Path) -> None:
    print("2. writing dask chunks of 30 rows into shards of 100 rows (inner chunks of 10)")
    print("   with ds.to_zarr(..., safe_chunks=False) on a LocalCluster, 2 worker processes")
    data = np.arange(1000 * 50, dtype="f8").reshape(1000, 50) + 1
    ds = xr.Dataset({"v": (("row", "col"), data)}).chunk({"row": 30})
    encoding = {"v": {"chunks": (10, 50), "shards": (100, 50)}}
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=2, processes=True, dashboard_address=None
        ) as cluster,
        distributed.Client(cluster),
    ):
        for trial in range(3):
            path = tmp / f"lost{trial}.zarr"
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ds.to_zarr(
                    path, zarr_format=3, encoding=encoding, safe_chunks=False, consolidated=False
                )
            back = xr.open_zarr(path, consolidated=False).v.values
            lost = np.count_nonzero(back != data)
            print(f"   trial {trial}: {lost} of {data.size} values wrong ({lost / data.size:.0%})")
            path = tmp / f"shardwise{trial}.zarr"
            shardwise.to_zarr(ds, path, encoding=encoding, consolidated=False)
            back = xr.open_zarr(path, consolidated=False).v.values
            lost = np.count_nonzero(back != data)
            print(f"            shardwise.to_zarr, same case: {lost} values wrong")


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        data = np.random.default_rng(0).normal(size=(8 * 128, 512)).astype("f4")
        xr.Dataset({"v": (("y", "x"), data)}).to_zarr(
            tmp / "read.zarr",
            zarr_format=3,
            consolidated=False,
            encoding={"v": {"chunks": (16, 64), "shards": (128, 512)}},
        )
        index_reads(tmp / "read.zarr")
        lost_values(tmp)


if __name__ == "__main__":
    main()
