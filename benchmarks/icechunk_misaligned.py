"""Misaligned dask chunks into an Icechunk repository: values lost by Icechunk's own
writer with ``safe_chunks=False`` against shardwise.

A 3000 x 200 float32 variable in dask chunks of 30 rows is written into shards of 100
rows (inner chunks of 10 rows) of a new repository on local-filesystem storage, then
committed and read back with ``xr.open_zarr``; the share of values that differ from the
input is counted. Icechunk's ``icechunk.xarray.to_icechunk(..., safe_chunks=False)``
goes through ``dask.array.store``: several tasks write parts of one shard, each
read-modify-writing the whole shard object, and when their fork sessions are merged the
last one wins per object. ``shardwise.to_zarr(ds, session)`` writes each shard from one
task. Both on the threaded scheduler and on a LocalCluster of 2 worker processes,
``--trials`` repositories each (different random data).

Run: python benchmarks/icechunk_misaligned.py [--trials 3]. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

import numpy as np


def wrong_share(method: str, root: Path, seed: int) -> float:
    import icechunk
    import xarray as xr
    from icechunk.xarray import to_icechunk

    import shardwise

    path = root / f"{method}-{seed}"
    shutil.rmtree(path, ignore_errors=True)
    repo = icechunk.Repository.create(icechunk.local_filesystem_storage(str(path)))
    rng = np.random.default_rng(seed)
    ds = xr.Dataset({"v": (("t", "x"), rng.normal(size=(3000, 200)).astype("f4"))})
    ds = ds.chunk({"t": 30})
    session = repo.writable_session("main")
    encoding = {"v": {"shards": (100, 200), "chunks": (10, 200)}}
    if method == "to_icechunk":
        to_icechunk(ds, session, encoding=encoding, safe_chunks=False)
    else:
        shardwise.to_zarr(ds, session, encoding=encoding)
    session.commit(method)
    back = xr.open_zarr(repo.readonly_session("main").store, consolidated=False).load()
    return int((back.v != ds.v.load()).sum()) / ds.v.size


def main() -> None:
    import icechunk
    from distributed import Client, LocalCluster

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=3)
    args = parser.parse_args()
    icechunk.set_logs_filter("error")
    print(f"icechunk {icechunk.__version__}")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)

        def report(where: str) -> None:
            for method in ("to_icechunk", "shardwise"):
                shares = [wrong_share(method, root, seed) for seed in range(args.trials)]
                print(f"  {where:<28} {method:<12} " + ", ".join(f"{s:.1%}" for s in shares))

        print("values wrong after the commit (one figure per trial):")
        report("threads")
        with (
            LocalCluster(
                n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
            ) as cluster,
            Client(cluster),
        ):
            report("LocalCluster, 2 processes")


if __name__ == "__main__":
    main()
