"""Scaling with the number of shards: graph size and time per shard at 100, 1,000 and
10,000 shards, for writing (``shardwise.to_zarr``) and reading (``engine="shardwise"``
and ``shardwise.open_dataset``).

What it measures
----------------
A float32 variable ``v`` of shape (N x 64, 64) in shards of (64, 64) (16 KiB each) of
inner chunks (16, 64) (4 per shard), for N = 100, 1,000 and 10,000 shards, on a
``distributed.LocalCluster`` of 2 worker processes x 1 thread, on local disk:

  write aligned      dask chunks = shards (one task writes each shard)
  write misaligned   dask chunks of 96 rows (1.5 shards): encode tasks plus shard tasks
  read engine        xr.open_dataset(path, engine="shardwise", chunks={}).v.sum()
  read fan-out       shardwise.open_dataset(path, chunks={"t": 32}).v.sum(): two read
                     tasks per shard below the shard's index task

For each it reports the tasks of the optimized graph per shard, the wall time and the
time per shard (median of ``--repeats``). The cost per shard should not grow with the
number of shards: the last column compares each N with N = 100.

    .venv/bin/python benchmarks/scaling.py                 # 3 repeats; 10,000 shards take minutes
    .venv/bin/python benchmarks/scaling.py --shards 100 1000 --repeats 1
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from read_throughput import CpuMeter, machine, print_cpu

SHARD = (64, 64)
INNER = (16, 64)
MISALIGNED = 96


def dataset(nshards: int) -> Any:
    import dask.array as da
    import xarray as xr

    rows = nshards * SHARD[0]
    # cheap, reproducible values made on the workers: no big array in the client
    # small integers, so float32 holds them exactly and the sums check exactly
    v = (da.arange(rows * SHARD[1], chunks=SHARD[0] * SHARD[1]) % 4096).astype("f4")
    v = v.reshape(rows, SHARD[1])
    return xr.Dataset({"v": (("t", "x"), v)})


def count_tasks(collection: Any) -> int:
    import dask

    (optimized,) = dask.optimize(collection)
    graph = dict(optimized.__dask_graph__())
    from dask._task_spec import Alias, DataNode

    return sum(1 for t in graph.values() if not isinstance(t, Alias | DataNode))


def measure(nshards: int, repeats: int, workdir: Path) -> dict[str, Any]:
    import xarray as xr

    import shardwise

    out: dict[str, Any] = {"shards": nshards}
    path = workdir / f"s{nshards}.zarr"
    methods = {
        "write aligned": lambda: dataset(nshards).chunk({"t": SHARD[0]}),
        "write misaligned": lambda: dataset(nshards).chunk({"t": MISALIGNED}),
    }
    for label, make in methods.items():
        times = []
        tasks = 0
        for _ in range(repeats):
            ds = make()
            delayed = shardwise.to_zarr(
                ds,
                path,
                mode="w",
                shards={"t": SHARD[0]},
                chunks={"t": INNER[0]},
                compute=False,
                consolidated=False,
            )
            tasks = count_tasks(delayed)
            start = time.perf_counter()
            delayed.compute()
            times.append(time.perf_counter() - start)
        out[label] = {"tasks": tasks, "seconds": statistics.median(times)}
    expected = float((np.arange(nshards * SHARD[0] * SHARD[1]) % 4096).sum())
    readers = {
        "read engine": lambda: xr.open_dataset(
            path, engine="shardwise", chunks={}, consolidated=False
        ),
        "read fan-out": lambda: shardwise.open_dataset(
            path, chunks={"t": SHARD[0] // 2}, consolidated=False
        ),
    }
    for label, opener in readers.items():
        times = []
        tasks = 0
        for _ in range(repeats):
            total = opener().v.sum(dtype="f8")
            tasks = count_tasks(total.data)
            start = time.perf_counter()
            value = float(total.compute())
            times.append(time.perf_counter() - start)
            assert value == expected, (label, value, expected)
        out[label] = {"tasks": tasks, "seconds": statistics.median(times)}
    shutil.rmtree(path)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shards", type=int, nargs="+", default=[100, 1000, 10000])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)

    from distributed import Client, LocalCluster

    info = machine()
    print("machine: " + ", ".join(f"{k} {v}" for k, v in info.items()))
    rows = []
    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        Client(cluster),
        tempfile.TemporaryDirectory(prefix="shardwise-scaling-") as tmp,
    ):
        meter = CpuMeter()
        for n in args.shards:
            start = time.perf_counter()
            rows.append(measure(n, args.repeats, Path(tmp)))
            print(f"  {n} shards measured in {time.perf_counter() - start:.0f} s", flush=True)
        cpu = meter.stop()
    labels = ["write aligned", "write misaligned", "read engine", "read fan-out"]
    base = rows[0]
    print(
        f"\nshard (64, 64) float32 = 16 KiB, inner chunks (16, 64); 2 workers x 1 thread; "
        f"median of {args.repeats}"
    )
    header = f"{'method':18} {'shards':>7} {'tasks':>7} {'tasks/shard':>11} {'wall s':>8} {'ms/shard':>9} {'vs first':>9}"
    print(header)
    print("-" * len(header))
    for label in labels:
        for row in rows:
            r = row[label]
            per = 1000 * r["seconds"] / row["shards"]
            first = 1000 * base[label]["seconds"] / base["shards"]
            print(
                f"{label:18} {row['shards']:>7} {r['tasks']:>7} {r['tasks'] / row['shards']:>11.2f} "
                f"{r['seconds']:>8.2f} {per:>9.3f} {per / first:>8.2f}x"
            )
        print("-" * len(header))
    print_cpu(cpu)
    if args.out:
        args.out.write_text(json.dumps({"machine": info, "rows": rows, "cpu": cpu}, indent=2))
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
