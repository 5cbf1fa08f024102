"""Scaling with the number of shards: building graphs apart from running them.

Part 1, building (no cluster; nothing is computed or written but metadata). For each
number of shards N and each kind of graph, a fresh process builds the graph and
reports the time, the client's peak memory above what it held before (RSS sampled
every 5 ms), what it keeps once built, and the tasks and layers of the graph:

  write aligned        shardwise.to_zarr(compute=False), dask chunks = shards
  write misaligned     dask chunks of 1.5 x 1.5 shards: encode, split and shard tasks
  write 2 per shard    dask chunks of half a shard: shard tasks gather two blocks
  write region         a region starting half a shard in (every shard cut)
  write append         an append to an array ending half a shard in
  xarray to_zarr       ds.to_zarr(compute=False), aligned (the anchor)
  read engine          xr.open_dataset(engine="shardwise", chunks={})
  read fan-out         shardwise.open_dataset(chunks={"t": 32}): an index task and two
                       read tasks per shard

Part 2, running, on a cluster whose scheduler runs in a process of its own
(distributed's SubprocessCluster: a scheduler process and 2 worker processes x 1
thread), so that its memory and CPU are read from the scheduler process alone. For
each N and each kind of write it reports the tasks run, the wall time, the time to the
first task (from the call to compute until a worker starts the first task: client-side
preparation, shipping, the scheduler's materializing), the graph bytes shipped (the
pickled expression the client sends), the scheduler's CPU seconds per task and its peak
memory above its idle level, per task. Writes of values made in the tasks, and of a
persisted dataset (already in the workers' memory), each with one task per dask chunk
and with ``shards_per_task``; every store is read back and checked.

The variable: float32, shards of 64 x 64 (16 KiB) in inner chunks of 16 x 64, 16 shards
across, N/16 down.

    .venv/bin/python benchmarks/scaling.py                  # the defaults below
    .venv/bin/python benchmarks/scaling.py --build 1000 10000 --run 10000
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
from distributed.diagnostics.plugin import SchedulerPlugin

sys.path.insert(0, str(Path(__file__).parent))
from common import (
    CpuMeter,
    machine,
    print_cpu,
)

SHARD = (64, 64)
INNER = (16, 64)
ACROSS = 16  # shards along x
ENCODING = {"v": {"shards": SHARD, "chunks": INNER}}
BUILDS = [
    "write aligned",
    "write misaligned",
    "write 2 per shard",
    "write region",
    "write append",
    "xarray to_zarr",
    "read engine",
    "read fan-out",
]


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class Meter(CpuMeter):
    """CpuMeter that also counts child processes that have ended (the build processes,
    the cluster's once it is closed): they are this benchmark's too."""

    @staticmethod
    def _sample() -> tuple[float, float, float, float] | None:
        sample = CpuMeter._sample()
        if sample is None:
            return None
        import resource

        ended = resource.getrusage(resource.RUSAGE_CHILDREN)
        wall, busy, steal, ours = sample
        return wall, busy, steal, ours + ended.ru_utime + ended.ru_stime


class PeakRss:
    """The process's peak RSS while the block runs, sampled every 5 ms."""

    def __init__(self) -> None:
        self.base = self.peak = rss()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, rss())

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss())


def rows_for(nshards: int) -> int:
    return (nshards // ACROSS) * SHARD[0]


def values(rows: int, chunks: tuple[int, int]) -> Any:
    """Row i holds 0..63 repeated: made in the tasks (blockwise, so dask fuses it into
    the write), nothing big in the client."""
    import dask.array as da
    import xarray as xr

    cols = ACROSS * SHARD[1]
    v = da.ones((rows, cols), chunks=chunks, dtype="f4") * (da.arange(cols, dtype="f4") % 64)
    return xr.Dataset({"v": (("t", "x"), v)})


def expected_sum(rows: int) -> float:
    return float(rows * ACROSS * sum(range(64)))


def empty_store(path: Path, rows: int) -> None:
    """An array of ``rows`` rows with no shards written: metadata only."""
    import zarr

    group = zarr.open_group(path, mode="w", zarr_format=3)
    group.create_array(
        "v",
        shape=(rows, ACROSS * SHARD[1]),
        shards=SHARD,
        chunks=INNER,
        dtype="f4",
        fill_value=np.nan,
        dimension_names=("t", "x"),
    )


# -- part 1: building ----------------------------------------------------------------
def build_graph(kind: str, nshards: int, path: Path) -> tuple[Any, Any]:
    """Set up (not measured), then return the call to measure."""
    import xarray as xr

    import shardwise

    rows = rows_for(nshards)
    half = SHARD[0] // 2
    if kind == "write aligned":
        ds = values(rows, SHARD)
        return lambda: shardwise.to_zarr(
            ds, path, encoding=ENCODING, compute=False, consolidated=False
        ), None
    if kind == "write misaligned":
        ds = values(rows, (96, 96))
        return lambda: shardwise.to_zarr(
            ds, path, encoding=ENCODING, compute=False, consolidated=False
        ), None
    if kind == "write 2 per shard":
        ds = values(rows, (half, SHARD[1]))
        return lambda: shardwise.to_zarr(
            ds, path, encoding=ENCODING, compute=False, consolidated=False
        ), None
    if kind == "write region":
        empty_store(path, rows + SHARD[0])
        ds = values(rows, SHARD)
        where = {"t": slice(half, half + rows)}
        return lambda: shardwise.to_zarr(
            ds, path, region=where, compute=False, consolidated=False
        ), None
    if kind == "write append":
        empty_store(path, half)
        ds = values(rows, SHARD)
        return lambda: shardwise.to_zarr(
            ds, path, append_dim="t", compute=False, consolidated=False
        ), None
    if kind == "xarray to_zarr":
        ds = values(rows, SHARD)
        return lambda: ds.to_zarr(
            path, encoding=ENCODING, compute=False, consolidated=False, zarr_format=3
        ), None
    empty_store(path, rows)
    if kind == "read engine":
        return lambda: xr.open_dataset(
            path, engine="shardwise", chunks={}, consolidated=False
        ), "read"
    assert kind == "read fan-out"
    return lambda: shardwise.open_dataset(
        path, chunks={"t": SHARD[0] // 2}, consolidated=False
    ), "read"


def graph_size(result: Any, kind: str | None) -> tuple[int, int]:
    """Tasks and layers of the graph (layers report their length without being built)."""
    graph = result.v.data.__dask_graph__() if kind == "read" else result.__dask_graph__()
    return sum(len(layer) for layer in graph.layers.values()), len(graph.layers)


def child_build(kind: str, nshards: int) -> dict[str, Any]:
    import dask  # noqa: F401  (imported before the baseline)
    import xarray  # noqa: F401
    import zarr  # noqa: F401

    import shardwise  # noqa: F401

    with tempfile.TemporaryDirectory(prefix="shardwise-scaling-") as tmp:
        call, what = build_graph(kind, nshards, Path(tmp) / "s.zarr")
        gc.collect()
        with PeakRss() as mem:
            start = time.perf_counter()
            result = call()
            seconds = time.perf_counter() - start
        gc.collect()
        kept = rss() - mem.base
        tasks, layers = graph_size(result, what)
    return {
        "seconds": seconds,
        "peak_mib": (mem.peak - mem.base) / 2**20,
        "kept_mib": kept / 2**20,
        "tasks": tasks,
        "layers": layers,
    }


def run_builds(sizes: list[int], xarray_max: int, repeats: int) -> list[dict[str, Any]]:
    rows = []
    for kind in BUILDS:
        for n in sizes:
            if kind == "xarray to_zarr" and n > xarray_max:
                continue
            samples = []
            for _ in range(repeats):
                out = subprocess.run(
                    [sys.executable, __file__, "--child", kind, str(n)],
                    capture_output=True,
                    text=True,
                    check=False,
                )
                if out.returncode:
                    raise RuntimeError(f"{kind} at {n} shards failed:\n{out.stderr}")
                samples.append(json.loads(out.stdout.strip().splitlines()[-1]))
            best = sorted(samples, key=lambda s: s["seconds"])[len(samples) // 2]
            rows.append({"kind": kind, "shards": n, **best})
            print(
                f"  {kind:18} {n:>9,} shards  {best['seconds']:8.2f} s  "
                f"{1e6 * best['seconds'] / n:7.1f} us/shard  peak {best['peak_mib']:7.0f} MiB",
                flush=True,
            )
    return rows


def print_builds(rows: list[dict[str, Any]]) -> None:
    """The table; "marginal" is the cost of the shards added since the size before
    (fixed costs, such as writing the metadata, cancel out): flat means linear."""
    header = (
        f"{'graph':18} {'shards':>9} {'tasks':>10} {'layers':>6} {'build s':>8} "
        f"{'us/shard':>8} {'marginal':>8} {'peak MiB':>8} {'B/shard':>7} {'kept MiB':>8}"
    )
    print("\n" + header + "\n" + "-" * len(header))
    for kind in BUILDS:
        mine = [r for r in rows if r["kind"] == kind]
        if not mine:
            continue
        before = None
        for r in mine:
            per = r["seconds"] / r["shards"]
            marginal = "-"
            if before is not None:
                added = (r["seconds"] - before["seconds"]) / (r["shards"] - before["shards"])
                marginal = f"{1e6 * added:.1f}"
            print(
                f"{kind:18} {r['shards']:>9,} {r['tasks']:>10,} {r['layers']:>6} "
                f"{r['seconds']:>8.2f} {1e6 * per:>8.1f} {marginal:>8} "
                f"{r['peak_mib']:>8.0f} {2**20 * r['peak_mib'] / r['shards']:>7.0f} "
                f"{r['kept_mib']:>8.0f}"
            )
            before = r
        print("-" * len(header))


# -- part 2: running -----------------------------------------------------------------
class Probe(SchedulerPlugin):
    """A scheduler plugin: when the scheduler first hands a task to a worker, how many
    tasks finished, and the scheduler process's peak memory (sampled every 20 ms) and
    CPU time since :meth:`reset`."""

    name = "shardwise-scaling-probe"

    def __init__(self) -> None:
        self.first: float | None = None
        self.done = 0

    async def start(self, scheduler: Any) -> None:
        from tornado.ioloop import PeriodicCallback

        self.reset()
        self.callback = PeriodicCallback(self.sample, 20)
        self.callback.start()

    def reset(self) -> None:
        """Start measuring, from the memory the scheduler holds once the last run's
        garbage is collected and its freed heap handed back to the system (a process
        otherwise keeps the memory it grew to, and the next run's rise is hidden)."""
        import ctypes
        import gc

        import psutil

        gc.collect()
        ctypes.CDLL("libc.so.6").malloc_trim(0)
        self.proc = psutil.Process()
        self.base = self.peak = self.proc.memory_info().rss
        self.cpu = sum(self.proc.cpu_times()[:2])
        self.first, self.done = None, 0

    def sample(self) -> None:
        self.peak = max(self.peak, self.proc.memory_info().rss)

    def transition(self, key: Any, start: str, finish: str, *args: Any, **kwargs: Any) -> None:
        if finish == "processing" and self.first is None:
            self.first = time.time()
        elif start == "processing" and finish == "memory":
            self.done += 1

    def report(self) -> dict[str, Any]:
        self.sample()
        return {
            "first": self.first,
            "done": self.done,
            "base": self.base,
            "peak": self.peak,
            "cpu": sum(self.proc.cpu_times()[:2]) - self.cpu,
        }


def _probe_reset(dask_scheduler: Any) -> None:
    dask_scheduler.plugins[Probe.name].reset()


def _probe_report(dask_scheduler: Any) -> dict[str, Any]:
    return dask_scheduler.plugins[Probe.name].report()


def shipped_bytes(collection: Any) -> int:
    """The pickled expression a distributed client sends for ``collection``."""
    from dask._expr import FinalizeCompute
    from dask.base import collections_to_expr
    from distributed.protocol import serialize, to_serialize
    from distributed.utils import nbytes

    expr = FinalizeCompute(collections_to_expr([collection], True)).optimize()
    header, frames = serialize(to_serialize(expr), on_error="raise")
    return sum(map(nbytes, [header, *frames]))


RUNS = [
    ("made in tasks", None),
    ("made in tasks", 64),
    ("persisted", None),
    ("persisted", 64),
    ("misaligned", None),
    ("misaligned", 64),
]


def run_writes(client: Any, sizes: list[int], workdir: Path) -> list[dict[str, Any]]:
    import distributed
    import xarray as xr

    import shardwise

    rows = []
    for n in sizes:
        nrows = rows_for(n)
        for source, per_task in RUNS:
            chunks = (96, 96) if source == "misaligned" else SHARD
            ds = values(nrows, chunks)
            if source == "persisted":
                ds = ds.persist()
                distributed.wait(ds)
            path = workdir / f"w{n}.zarr"
            delayed = shardwise.to_zarr(
                ds,
                path,
                mode="w",
                encoding=ENCODING,
                compute=False,
                consolidated=False,
                shards_per_task=per_task,
            )
            ship = shipped_bytes(delayed)
            client.run_on_scheduler(_probe_reset)
            start_wall = time.time()
            start = time.perf_counter()
            client.compute(delayed).result()
            seconds = time.perf_counter() - start
            sched = client.run_on_scheduler(_probe_report)
            tasks = sched["done"]
            first = sched["first"] - start_wall
            # checked in 16 reads of many shards each (a read task per shard would take
            # as long as the write)
            rows_per_read = max(SHARD[0], nrows // 16 // SHARD[0] * SHARD[0])
            back = xr.open_dataset(
                path, engine="shardwise", chunks={"t": rows_per_read}, consolidated=False
            )
            total = float(back.v.sum(dtype="f8").compute())
            assert total == expected_sum(nrows), (source, per_task, total)
            row = {
                "shards": n,
                "source": source,
                "shards_per_task": per_task,
                "tasks": tasks,
                "seconds": seconds,
                "first_task_s": first,
                "shipped_mb": ship / 1e6,
                "sched_cpu_ms_per_task": 1e3 * sched["cpu"] / tasks,
                "sched_peak_kib_per_task": (sched["peak"] - sched["base"]) / 1024 / tasks,
                "sched_peak_mib": (sched["peak"] - sched["base"]) / 2**20,
                "sched_base_mib": sched["base"] / 2**20,
            }
            rows.append(row)
            print(
                f"  {n:>7,} shards {source:14} per task {per_task or 1!s:>3}: {tasks:>7,} tasks "
                f"{seconds:7.1f} s, first task {first:5.2f} s, scheduler "
                f"{row['sched_cpu_ms_per_task']:.2f} ms CPU and "
                f"{row['sched_peak_kib_per_task']:.1f} KiB per task",
                flush=True,
            )
            del ds, delayed, back
            shutil.rmtree(path)
    return rows


def print_runs(rows: list[dict[str, Any]]) -> None:
    header = (
        f"{'shards':>7} {'source':14} {'per task':>8} {'tasks':>8} {'wall s':>7} "
        f"{'ms/shard':>8} {'1st task s':>10} {'shipped MB':>10} {'sched ms CPU/task':>17} "
        f"{'sched KiB/task':>14}"
    )
    print("\n" + header + "\n" + "-" * len(header))
    for r in rows:
        print(
            f"{r['shards']:>7,} {r['source']:14} {r['shards_per_task'] or 1!s:>8} "
            f"{r['tasks']:>8,} {r['seconds']:>7.1f} {1e3 * r['seconds'] / r['shards']:>8.2f} "
            f"{r['first_task_s']:>10.2f} {r['shipped_mb']:>10.1f} "
            f"{r['sched_cpu_ms_per_task']:>17.2f} {r['sched_peak_kib_per_task']:>14.1f}"
        )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", type=int, nargs="*", default=[1000, 10000, 100000, 1000000])
    parser.add_argument("--run", type=int, nargs="*", default=[10000, 100000])
    parser.add_argument("--repeats", type=int, default=3, help="builds per size (median)")
    parser.add_argument(
        "--xarray-max", type=int, default=100000, help="largest N for xarray's to_zarr"
    )
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child_build(args.child[0], int(args.child[1]))))
        return

    info = machine()
    print("machine: " + ", ".join(f"{k} {v}" for k, v in info.items()))
    meter = Meter()
    builds = []
    if args.build:
        print(f"\npart 1: building graphs (median of {args.repeats}, a process each)")
        builds = run_builds(args.build, args.xarray_max, args.repeats)
    runs = []
    if args.run:
        from distributed import Client
        from distributed.deploy.subprocess import SubprocessCluster

        print("\npart 2: running writes (scheduler process + 2 worker processes x 1 thread)")
        with (
            SubprocessCluster(n_workers=2, threads_per_worker=1, dashboard_address=None) as cluster,
            Client(cluster) as client,
            tempfile.TemporaryDirectory(prefix="shardwise-scaling-") as tmp,
        ):
            client.wait_for_workers(2)
            client.register_plugin(Probe())
            runs = run_writes(client, args.run, Path(tmp))
            cpu = meter.stop()  # while the cluster's processes are alive to be counted
    else:
        cpu = meter.stop()
    if builds:
        print_builds(builds)
    if runs:
        print_runs(runs)
    print_cpu(cpu)


if __name__ == "__main__":
    main()
