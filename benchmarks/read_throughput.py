"""Full-array read throughput of ``engine="shardwise"`` against zarr-python, tensorstore
and zstd itself.

What it measures
----------------
One float32 variable ``v`` (a smooth sum of sines plus small noise, rounded to 2
decimals, so that zstd level 1 compresses it about 3x) in two data shapes, selected with
``--shape 2d|3d|both`` (default both):

  2-D   ~1 GiB (``--size-mib``), dims ("y", "x"), shards of 4096 x 4096 (64 MiB), inner
        chunks of 512 x 512 (1 MiB) in one store and of 128 x 128 (64 KiB) in another
  3-D   512 x 512 x 512 (512 MiB; ``--size-3d`` is the edge), dims ("z", "y", "x"),
        shards of 256 x 256 x 256 (64 MiB), inner chunks of 64 x 64 x 64 (1 MiB) in one
        store and of 16 x 32 x 32 (64 KiB) in another

The stores are written once by zarr-python (through ``xarray.Dataset.to_zarr``, zstd
level 1) and cached under ``benchmarks/data/``. Every store is read whole by three groups
of methods, in this order:

1. The FLOOR, in this process, before any cluster starts: the codec work alone. Every
   compressed inner chunk is already in memory (the shard files are read and cut with
   their indexes beforehand) and is decoded with ``numcodecs.Zstd().decode(chunk,
   out=buffer)`` into ONE buffer per thread, allocated once, on a
   ``ThreadPoolExecutor(2)`` with one work item per shard: no I/O, no copy into an
   array, no allocation per chunk, no sum. (python-zstandard's
   ``ZstdDecompressor.decompress`` cannot decompress into a given buffer, so it is not
   timed.)

2. Single-process REFERENCE peers, interleaved with the floor, also before the cluster
   starts. Each reads the whole array into one numpy array in this one process, without
   dask, on the library's own threads; the time includes opening the array, and nothing
   is summed:

     zarr-python fused     zarr.open_array(path, path="v")[...] under
                           zarr.config.set({"codec_pipeline.path":
                           "zarr.core.codec_pipeline.FusedCodecPipeline"}) (skipped, with
                           a note, when the installed zarr has no such class)
     zarr-python default   the same with zarr's default codec pipeline
     tensorstore           tensorstore.open({"driver": "zarr3", "kvstore": {"driver":
                           "file", "path": <store>/v}}).result().read().result()

3. On a ``distributed.LocalCluster`` of 2 single-threaded worker processes,
   ``ds.v.sum(skipna=False).compute()`` with ``ds`` opened three ways:

     shardwise             xr.open_dataset(path, engine="shardwise", chunks={})
                           one task per shard
     open_zarr default     xr.open_zarr(path)   dask chunks = zarr-python's inner chunks
     open_zarr shards      xr.open_zarr(path, chunks=<shard shape>)   one task per shard

   ``skipna=False`` because a float ``.sum()`` is NaN-skipping: isnan/where temporaries
   of every chunk, numpy's cost rather than the reader's.

Throughput is uncompressed bytes / wall time (GB = 1e9 bytes). Every method runs once as a
warm-up (so all read the shard files from the OS page cache alike; caches are not
dropped), then is timed: the floor and the references 3 times, reported by their BEST
run (the floor is the best of 3), the cluster methods ``--repeats`` times, reported by
their median; each group interleaved round by round. For every method the table gives
the median and min-max over its timed runs, GB/s and the ratio to the floor (floor time
/ method time, both from the figure in the "runs" column). Checks: the floor decodes
every byte, each zstd frame declaring an inner chunk's size; the references read equal
arrays; the cluster's sums agree with the references' (float64) sum to float32 rounding.

The project's goals (reported here, never asserted): shardwise on the
cluster reaches >= 0.75 of the floor with 1 MiB inner chunks and >= 0.65 with 64 KiB
ones, in both shapes; secondary: it is >= 2x faster than ``xr.open_zarr`` with its
default chunks.

Reading the numbers: run it on an otherwise idle machine (at the end the script reports
how much CPU other processes took meanwhile). The floor and the references run in one
process with both cores to themselves; the cluster methods share the cores with the
scheduler and nanny processes, pay for task scheduling, and run in workers that
distributed's nanny starts with ``MALLOC_TRIM_THRESHOLD_=65536``, under which every
buffer over 128 KiB a worker allocates is a fresh mmap paid for with page faults.

How to run
----------
    make bench                                   # = .venv/bin/python benchmarks/read_throughput.py
    .venv/bin/python benchmarks/read_throughput.py --shape 3d
    .venv/bin/python benchmarks/read_throughput.py --size-mib 128 --size-3d 256 \\
        --repeats 1                                                     # quick check

The first run writes the four stores (about 2 x 350 MB + 2 x 170 MB on disk, a few
minutes); later runs reuse them when their metadata matches. ``make clean`` deletes them.
The client process holds two copies of the largest array at once (the references'
outputs, compared) plus its compressed inner chunks: about 2.5 GiB for the 2-D field.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

# run as a script, this directory is on sys.path
from common import (
    DATA_DIR,
    FLOOR_RUNS,
    CpuMeter,
    DecodeFloor,
    Field,
    ensure_store,
    have_tensorstore,
    interleaved,
    load_compressed,
    machine,
    package_versions,
    print_cpu,
    selected_fields,
    tensorstore_kvstore,
    timed,
    zarr_pipeline,
    zarr_pipelines,
)

CLUSTER_METHODS = ("shardwise", "open_zarr default", "open_zarr shards")
FLOOR = "floor: numcodecs decode out="
TARGETS = {"1 MiB": 0.75, "64 KiB": 0.65}  # shardwise / floor, in both shapes
TARGET_VS_ZARR = 2.0  # secondary: shardwise speed-up over open_zarr default chunks


# -- the measurements --------------------------------------------------------------------
@dataclass
class Result:
    store: str
    method: str
    times: list[float] = field(default_factory=list)
    warmup: float | None = None
    tasks: int | None = None
    dask_chunks: str = ""
    value: float | None = None
    best: bool = False  # reported by the best (min) run, else by the median

    @property
    def median(self) -> float:
        return statistics.median(self.times)

    @property
    def headline(self) -> float:
        return min(self.times) if self.best else self.median


def _zarr_read(path: Path, pipeline: str | None) -> np.ndarray:
    import zarr

    with zarr_pipeline(pipeline):
        return zarr.open_array(path, path="v", mode="r")[...]


def _tensorstore_read(path: Path) -> np.ndarray:
    import tensorstore as ts

    spec = {"driver": "zarr3", "kvstore": tensorstore_kvstore(path / "v")}
    return ts.open(spec).result().read().result()


def sums(arr: np.ndarray) -> tuple[float, float]:
    """The float64 sum of ``arr`` and of its absolute values, a slab at a time."""
    total = absolute = 0.0
    for slab in np.array_split(arr, max(1, arr.shape[0] // 256)):
        total += float(slab.sum(dtype=np.float64))
        absolute += float(np.abs(slab).sum(dtype=np.float64))
    return total, absolute


def measure_local(key: str, fld: Field, label: str, path: Path) -> dict[str, Any]:
    """In this process, no cluster: the floor and the single-process references, warmed
    up, then ``FLOOR_RUNS`` interleaved rounds. Returns their results, the stored bytes
    and the references' float64 sums (of the values and of their absolute values)."""
    chunk_nbytes = math.prod(fld.inner[label]) * 4
    compressed = load_compressed(path, chunk_nbytes)
    nchunks = sum(len(c) for c in compressed.shards)
    print(
        f"  {key}: {len(compressed.shards)} shards, {nchunks} inner chunks "
        f"({compressed.empty_chunks} empty), {compressed.stored_bytes / 1e6:.0f} MB on disk, "
        f"zstd ratio {fld.nbytes / compressed.stored_bytes:.2f}x"
    )
    if compressed.empty_chunks:
        raise SystemExit(f"{path}: {compressed.empty_chunks} inner chunks are missing")
    results = {FLOOR: Result(key, FLOOR, dask_chunks=f"{nchunks} frames, 2 threads", best=True)}
    with ThreadPoolExecutor(2) as pool:
        floor = DecodeFloor(chunk_nbytes)
        runs: dict[str, Callable[[], Any]] = {FLOOR: lambda: floor(compressed.shards, pool)}
        for m, pipeline in zarr_pipelines().items():
            runs[m] = lambda p=pipeline: _zarr_read(path, p)
        if have_tensorstore():
            runs["tensorstore"] = lambda: _tensorstore_read(path)
        for m in runs:
            if m != FLOOR:
                results[m] = Result(key, m, dask_chunks="1 process, no dask", best=True)
        seen: dict[str, Any] = {}

        def check(m: str, rnd: int, out: Any) -> None:
            if m == FLOOR:
                if out != fld.nbytes:
                    raise SystemExit(f"the floor decoded {out} bytes, expected {fld.nbytes}")
                return
            if rnd:
                seen.pop("array", None)  # not held while the timed rounds run
                return
            if out.shape != fld.shape or out.dtype != np.float32:
                raise SystemExit(f"{m} read {out.shape} {out.dtype}")
            if "array" not in seen:
                seen["array"], seen["first"] = out, m
                seen["sums"] = sums(out)
            elif not np.array_equal(out, seen["array"]):
                raise SystemExit(f"{m} and {seen['first']} read different arrays from {path}")

        times = interleaved(runs, FLOOR_RUNS, after=check, nbytes=fld.nbytes)
    for m, ts in times.items():
        results[m].warmup, results[m].times = ts[0], ts[1:]
    return {
        "results": results,
        "stored_bytes": compressed.stored_bytes,
        "sums": seen.get("sums"),
    }


def open_method(method: str, fld: Field, path: Path) -> Any:
    import xarray as xr

    if method == "shardwise":
        return xr.open_dataset(path, engine="shardwise", chunks={}, consolidated=False)
    if method == "open_zarr default":
        return xr.open_zarr(path, consolidated=False)
    if method == "open_zarr shards":
        return xr.open_zarr(path, consolidated=False, chunks=fld.shard_chunks)
    raise ValueError(method)


def measure_store(
    key: str, fld: Field, path: Path, repeats: int, reference: tuple[float, float] | None
) -> dict[str, Result]:
    """On the cluster: warm up every method on one store, then time ``repeats``
    interleaved rounds of ``ds.v.sum(skipna=False).compute()``."""
    print(f"  {key}")
    datasets = {m: open_method(m, fld, path) for m in CLUSTER_METHODS}
    results = {m: Result(key, m) for m in CLUSTER_METHODS}
    for m, ds in datasets.items():
        results[m].tasks = len(ds.v.sum(skipna=False).__dask_graph__())
        chunk = "x".join(str(c[0]) for c in ds.v.chunks)
        results[m].dask_chunks = f"{ds.v.data.npartitions} x {chunk}"

    runs = {m: (lambda ds=ds: ds.v.sum(skipna=False).compute()) for m, ds in datasets.items()}
    for rnd in range(repeats + 1):  # round 0 is the warm-up
        times = []
        for m, run in runs.items():
            seconds, out = timed(run)
            results[m].value = float(out)
            if rnd:
                results[m].times.append(seconds)
            else:
                results[m].warmup = seconds
            times.append(f"{m} {seconds:.2f} s ({fld.nbytes / seconds / 1e9:.2f} GB/s)")
        print(f"    {'warm-up' if rnd == 0 else f'round {rnd}'}: " + ", ".join(times))
    for ds in datasets.values():
        ds.close()
    values = [r.value for r in results.values() if r.value is not None]
    if reference is not None:
        total, absolute = reference
        worst = max(abs(v - total) for v in values) / max(absolute, 1e-30)
        if worst > 1e-5:
            print(
                f"    WARNING: the sums {values} differ from the references' {total:.6g} "
                f"by {worst:.1e} of the sum of |v|, more than float32 rounding"
            )
    return results


def print_report(
    results: dict[str, dict[str, Result]],
    fields: dict[str, Field],
    labels: dict[str, str],
    repeats: int,
) -> dict[str, Any]:
    """Print the table and the targets; return the summary."""
    print()
    print(
        f"64 MiB shards; the cluster's methods: median of {repeats} runs, the floor and the "
        f"references: best of {FLOOR_RUNS}, each after one warm-up, all reading from the OS "
        "page cache (caches not dropped). GB/s and vs floor use the figure in 'runs'."
    )
    header = (
        f"{'store':<17}{'method':<30}{'dask chunks':<24}{'tasks':>6}{'runs':>11}"
        f"{'median s':>10}{'min-max s':>15}{'GB/s':>7}{'vs floor':>10}"
    )
    print(header)
    print("-" * len(header))
    summary: dict[str, Any] = {}
    for key, by_method in results.items():
        nbytes = fields[key].nbytes
        floor = by_method[FLOOR].headline
        for i, (m, r) in enumerate(by_method.items()):
            spread = f"{min(r.times):.2f}-{max(r.times):.2f}"
            tasks = "-" if r.tasks is None else str(r.tasks)
            runs = f"{'best' if r.best else 'median'} {len(r.times)}"
            print(
                f"{key if i == 0 else '':<17}{m:<30}{r.dask_chunks:<24}{tasks:>6}{runs:>11}"
                f"{r.median:>10.3f}{spread:>15}{nbytes / r.headline / 1e9:>7.2f}"
                f"{floor / r.headline:>10.2f}"
            )
        sw = by_method["shardwise"].headline
        s: dict[str, Any] = {
            "shape": fields[key].name,
            "inner": labels[key],
            "floor_gb_per_s": nbytes / floor / 1e9,
            "shardwise_vs_floor": floor / sw,
            "shardwise_vs_open_zarr_default": by_method["open_zarr default"].headline / sw,
            "shardwise_vs_open_zarr_shards": by_method["open_zarr shards"].headline / sw,
        }
        for m, r in by_method.items():
            if r.best and m != FLOOR:
                s[m.replace(" ", "_").replace("-", "_") + "_vs_floor"] = floor / r.headline
        summary[key] = s
        print(
            f"{'':<17}shardwise is {s['shardwise_vs_floor']:.2f} of the floor, "
            f"{s['shardwise_vs_open_zarr_default']:.2f}x open_zarr default chunks, "
            f"{s['shardwise_vs_open_zarr_shards']:.2f}x open_zarr shard chunks"
        )
        print("-" * len(header))

    print("goals (reported, not asserted):")
    for key, s in summary.items():
        got, want = s["shardwise_vs_floor"], TARGETS[s["inner"]]
        print(
            f"  {key:<16} shardwise / floor          {got:5.2f}  target >= {want:.2f}  "
            f"{'met' if got >= want else 'MISSED'}"
        )
    for key, s in summary.items():
        got = s["shardwise_vs_open_zarr_default"]
        print(
            f"  {key:<16} shardwise vs open_zarr    {got:5.2f}x target >= "
            f"{TARGET_VS_ZARR:.0f}x     {'met' if got >= TARGET_VS_ZARR else 'MISSED'}"
            "  (secondary)"
        )
    return summary


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--shape", choices=("2d", "3d", "both"), default="both", help="data shapes (both)"
    )
    parser.add_argument("--size-mib", type=int, default=1024, help="2-D array size (default 1024)")
    parser.add_argument(
        "--size-3d", type=int, default=512, help="3-D array edge, a multiple of 256 (512)"
    )
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per cluster method")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be >= 1")
    fields = selected_fields(args.shape, args.size_mib, args.size_3d)

    from distributed import Client, LocalCluster

    started = time.perf_counter()
    info = machine() | package_versions("zstandard", "tensorstore")
    print("machine: " + ", ".join(f"{k} {v}" for k, v in info.items()))
    stores: dict[str, tuple[Field, str, Path]] = {}
    for fld in fields:
        print(f"data: {fld.describe()}, dims {fld.dims}, shards {fld.shard}, in {DATA_DIR}")
        for label in fld.inner:
            stores[f"{fld.name} inner {label}"] = (fld, label, ensure_store(fld, label))

    meter = CpuMeter()
    print(f"floor and references, in this process (best of {FLOOR_RUNS} after a warm-up):")
    local = {
        key: measure_local(key, fld, label, path) for key, (fld, label, path) in stores.items()
    }

    results: dict[str, dict[str, Result]] = {}
    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        Client(cluster),
    ):
        print("cluster: LocalCluster, 2 worker processes x 1 thread")
        for key, (fld, _, path) in stores.items():
            on_cluster = measure_store(key, fld, path, args.repeats, local[key]["sums"])
            here = local[key]["results"]
            refs = {m: r for m, r in here.items() if m != FLOOR}
            results[key] = on_cluster | refs | {FLOOR: here[FLOOR]}
        cpu = meter.stop()

    print_report(
        results,
        {key: fld for key, (fld, _, _) in stores.items()},
        {key: label for key, (_, label, _) in stores.items()},
        args.repeats,
    )
    print_cpu(cpu)
    elapsed = time.perf_counter() - started
    print(f"total time {elapsed:.0f} s")


if __name__ == "__main__":
    main()
