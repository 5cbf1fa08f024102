"""Write throughput and worker memory of ``shardwise.to_zarr`` against ``Dataset.to_zarr``
and zstd itself.

What it measures
----------------
One float32 variable ``v`` of ~1 GiB, the same field as ``read_throughput.py`` (a smooth
sum of sines plus small noise, rounded to 2 decimals, so that zstd level 1 compresses it
about 3x; the generator is imported from there), is persisted in the memory of a
``distributed.LocalCluster`` of 2 single-threaded worker processes and written to Zarr
v3 under ``benchmarks/data/`` with zstd level 1 (``zarr.codecs.ZstdCodec(level=1)``).

Part 1: dask chunks = shards of 64 MiB (4096 x 4096), inner chunks of 1 MiB (512 x 512)
and of 64 KiB (128 x 128), written three ways:

  shardwise        shardwise.to_zarr(ds, path, mode="w", consolidated=False,
                   encoding={"v": {"shards": ..., "chunks": ..., "compressors": ...}})
  xarray           ds.to_zarr(path, mode="w", consolidated=False, zarr_format=3,
                   encoding=<the same>)       zarr-python writes, one task per shard
  compress limit   every inner chunk, already a contiguous numpy array in this
                   process, compressed with numcodecs.Zstd(level=1) on a 2-thread
                   pool: the ceiling for any writer on 2 cores (no I/O, no copy, no
                   shard assembly)

Part 2: dask chunks of 16 MiB (2048 x 2048) into shards of 512 MiB (``--part2-shard-mib``)
with 1 MiB inner chunks, so 32 dask chunks share each shard:

  shardwise               shardwise.to_zarr(...) as above: never rechunks, one task per
                          shard gathers the encoded inner chunks of its 32 dask chunks
  xarray align_chunks     ds.to_zarr(..., align_chunks=True): xarray rechunks the dask
                          array to whole shards first, so each task holds a shard

besides the time, the peak memory of the workers during the write is measured two ways:
distributed's ``MemorySampler`` (the scheduler's sum of the workers' process memory,
sampled from their heartbeats, so peaks shorter than ~0.5 s can be missed), and each
worker's own peak RSS (``VmHWM`` in ``/proc/self/status``, reset before every write
through ``/proc/self/clear_refs``; exact, Linux only). Both are reported as growth over
the memory before the write (which holds the persisted data); before every write the
workers run ``gc.collect()`` and ``malloc_trim(0)``. The same memory columns are filled
in for part 1.

Throughput is uncompressed bytes / wall time (GB = 1e9 bytes); the time includes
creating the store's metadata. Every method runs once as a warm-up, then ``--repeats``
times, interleaved round by round; the tables report medians (memory: the largest peak
of the timed runs). Each store is deleted after its run, outside the timed region.
Writes go to the OS page cache: nothing calls fsync, for any method. The shardwise
output of every configuration is checked once, outside the timing (after its warm-up):
metadata as requested, and every shard read back with zarr-python equal to the input.

The project's targets (reported here, never asserted): shardwise reaches >= 0.85 of the
compress limit with 1 MiB inner chunks and >= 0.7 with 64 KiB ones, is >= 1.3x faster
than ``ds.to_zarr``, and in part 2 its peak worker memory is <= half of xarray's with
``align_chunks=True``.

As with the read benchmark: run it on an otherwise idle machine (at the end the script
reports how much CPU other processes took meanwhile), and the compress limit runs in
this process, where glibc recycles freed buffers, while distributed's nanny starts the
workers with ``MALLOC_TRIM_THRESHOLD_=65536``.

How to run
----------
    .venv/bin/python benchmarks/write_throughput.py                       # ~1 GiB, 5 repeats
    .venv/bin/python benchmarks/write_throughput.py --out results.json
    .venv/bin/python benchmarks/write_throughput.py --size-mib 128 --repeats 1 \\
        --part2-size-mib 256 --part2-shard-mib 128                        # quick check

Memory: the client process holds two copies of the array (the input to compare with, and
its inner chunks for the compress limit), the workers the persisted array plus what the
writes need; a 1 GiB run needs about 6 GiB of RAM, and ~0.7 GB of free disk.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import shutil
import statistics
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

# run as a script, this directory is on sys.path: the same data, machine description and
# CPU meter as the read benchmark
from read_throughput import (
    DATA_DIR,
    DIMS,
    INNER,
    SHARD,
    CpuMeter,
    array_shape,
    machine,
    make_field,
    print_cpu,
    timed,
)

SHARD_MIB = math.prod(SHARD) * 4 >> 20
PART1_METHODS = ("shardwise", "xarray", "compress limit")
PART2_METHODS = ("shardwise", "xarray align_chunks")
PART2_DASK = (2048, 2048)  # 16 MiB of float32
PART2_INNER = (512, 512)  # 1 MiB
TILE = 512  # shards are built from 512 x 512 tiles (1 MiB of float32)
TARGETS = {"1 MiB": 0.85, "64 KiB": 0.7}  # shardwise / compress limit
TARGET_VS_XARRAY = 1.3  # shardwise speed-up over ds.to_zarr
TARGET_MEMORY = 0.5  # part 2: shardwise peak / xarray align_chunks peak
MIB = 2**20


# -- shapes ------------------------------------------------------------------------------
def _grid(n: int) -> tuple[int, int]:
    """``n`` split into rows x columns, as square as possible (rows >= columns)."""
    cols = max(d for d in range(1, math.isqrt(n) + 1) if n % d == 0)
    return n // cols, cols


def part2_shapes(size_mib: int, shard_mib: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """The array and shard shapes of part 2: whole shards of ``shard_mib`` MiB, each made
    of whole 16 MiB dask chunks, at least 2 of them."""
    dask_mib = math.prod(PART2_DASK) * 4 // MIB
    if shard_mib < dask_mib or shard_mib % dask_mib:
        raise SystemExit(f"--part2-shard-mib must be a positive multiple of {dask_mib}")
    rows, cols = _grid(shard_mib)  # in 1 MiB tiles
    shard = (rows * TILE, cols * TILE)
    if any(s % d for s, d in zip(shard, PART2_DASK, strict=True)):
        raise SystemExit(
            f"a {shard_mib} MiB shard is {shard[0]} x {shard[1]}, which "
            f"{PART2_DASK[0]} x {PART2_DASK[1]} dask chunks do not divide; pick a power of 2"
        )
    if size_mib % shard_mib or size_mib // shard_mib < 2:
        raise SystemExit("--part2-size-mib must be a multiple of >= 2 x --part2-shard-mib")
    srows, scols = _grid(size_mib // shard_mib)
    return (srows * shard[0], scols * shard[1]), shard


def shard_slices(shape: tuple[int, ...], shard: tuple[int, ...]) -> Iterator[tuple[slice, ...]]:
    for idx in np.ndindex(*(n // s for n, s in zip(shape, shard, strict=True))):
        yield tuple(slice(i * s, (i + 1) * s) for i, s in zip(idx, shard, strict=True))


def describe_chunks(chunks: tuple[tuple[int, ...], ...]) -> str:
    return f"{math.prod(len(c) for c in chunks)} x " + "x".join(str(c[0]) for c in chunks)


def xarray_aligned(chunks: tuple[tuple[int, ...], ...], shard: tuple[int, ...]) -> str:
    """What ``align_chunks=True`` rechunks to (from xarray's internal helpers, when they
    are there)."""
    try:
        from xarray.backends.chunks import align_nd_chunks, build_grid_chunks

        grid = tuple(build_grid_chunks(sum(c), s) for c, s in zip(chunks, shard, strict=True))
        return describe_chunks(align_nd_chunks(chunks, grid))
    except Exception:
        return "shards"


def persisted_dataset(client: Any, shape: tuple[int, int], chunks: tuple[int, int]) -> Any:
    """The dataset with ``v`` computed into the cluster's memory in dask chunks ``chunks``."""
    import xarray as xr
    from distributed import futures_of, wait

    data = make_field(shape)
    if chunks != SHARD:
        data = data.rechunk(chunks)
    ds = xr.Dataset({"v": (DIMS, data)}).persist()
    wait(ds)
    where = client.who_has(futures_of(ds))
    per_worker = [
        sum(w in ws for ws in where.values()) for w in sorted(client.scheduler_info()["workers"])
    ]
    print(f"  persisted {describe_chunks(ds.v.chunks)} blocks, per worker: {per_worker}")
    return ds


def encoding(shard: tuple[int, int], inner: tuple[int, int]) -> dict[str, Any]:
    import zarr

    return {"v": {"shards": shard, "chunks": inner, "compressors": zarr.codecs.ZstdCodec(level=1)}}


def stored_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


# -- the compress limit ------------------------------------------------------------------
def inner_chunks(
    arr: Any, shard: tuple[int, int], inner: tuple[int, int]
) -> list[list[np.ndarray]]:
    """Every inner chunk of ``arr`` as a contiguous array, grouped by shard."""
    return [
        [
            np.ascontiguousarray(arr[sl][isl])
            for isl in shard_slices(shard, inner)  # C order inside each shard
        ]
        for sl in shard_slices(arr.shape, shard)
    ]


def _compress_shard(chunks: list[np.ndarray]) -> int:
    import numcodecs

    zstd = numcodecs.Zstd(level=1)
    return sum(len(zstd.encode(c)) for c in chunks)


def compress_all(chunks: list[list[np.ndarray]], pool: ThreadPoolExecutor) -> int:
    """Compress every inner chunk, one pool task per shard; returns the compressed bytes."""
    return sum(pool.map(_compress_shard, chunks))


# -- checking the output -----------------------------------------------------------------
def verify(path: Path, arr: Any, shard: tuple[int, int], inner: tuple[int, int]) -> None:
    """Raise SystemExit unless ``path`` holds ``arr`` with the requested layout."""
    import xarray as xr
    import zarr
    from zarr.codecs import ZstdCodec

    with xr.open_zarr(path, consolidated=False) as back:
        found = (tuple(back.v.dims), back.v.shape, back.v.dtype)
    if found != (DIMS, arr.shape, arr.dtype):
        raise SystemExit(f"{path}: v has dims, shape, dtype {found}")
    check_layout(path, shard, inner)
    z = zarr.open_array(path, path="v", mode="r")
    if len(z.compressors) != 1 or not isinstance(z.compressors[0], ZstdCodec):
        raise SystemExit(f"{path}: compressors {z.compressors}, expected zstd")
    for sl in shard_slices(arr.shape, shard):
        got = z[sl]
        if not np.array_equal(got, arr[sl]):
            bad = int(np.count_nonzero(got != arr[sl]))
            raise SystemExit(f"{path}: shard {sl} differs from the input in {bad} elements")


def check_layout(path: Path, shard: tuple[int, int], inner: tuple[int, int]) -> None:
    """Raise SystemExit unless ``path`` has the shard and inner chunk shapes, and zstd
    level 1 (so that every method writes the same thing)."""
    meta = json.loads((path / "v" / "zarr.json").read_text())
    outer = meta["chunk_grid"]["configuration"]["chunk_shape"]
    sharding = meta["codecs"][0]
    conf = sharding.get("configuration", {})
    codecs = [(c["name"], c.get("configuration", {}).get("level")) for c in conf.get("codecs", [])]
    ok = (
        sharding.get("name") == "sharding_indexed"
        and outer == list(shard)
        and conf.get("chunk_shape") == list(inner)
        and codecs[1:] == [("zstd", 1)]
    )
    if not ok:
        raise SystemExit(f"{path}: shards {outer}, sharding codec {sharding}")


# -- worker memory -----------------------------------------------------------------------
def _worker_reset() -> tuple[int, bool]:
    """In a worker: free what can be freed, reset the peak RSS; returns the RSS and
    whether the peak could be reset."""
    import ctypes
    import gc

    import psutil

    gc.collect()
    with suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    try:
        Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS
        reset = True
    except OSError:
        reset = False
    return psutil.Process().memory_info().rss, reset


def _worker_peak() -> int | None:
    """In a worker: the peak RSS since the last reset."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


@dataclass
class Memory:
    cluster_delta: int  # MemorySampler: peak of the summed process memory - first sample
    cluster_peak: int
    worker_delta: int | None  # the largest per-worker growth of peak RSS (VmHWM)
    worker_peak: int | None  # the largest per-worker peak RSS


def worker_mib(memory: list[Memory], width: int = 11) -> str:
    """The median growth of a worker's peak RSS over ``memory`` in MiB, right-aligned
    in ``width`` columns ("-" where it could not be measured)."""
    deltas = [m.worker_delta for m in memory if m.worker_delta is not None]
    return f"{statistics.median(deltas) / MIB:{width}.0f}" if deltas else f"{'-':>{width}}"


def two_workers() -> Any:
    """A ``distributed.LocalCluster`` of 2 single-threaded worker processes (no
    dashboard; the scheduler's HTTP server on a free port) and its ``Client``, as one
    context manager yielding the client."""
    from contextlib import ExitStack

    from distributed import Client, LocalCluster

    stack = ExitStack()
    cluster = stack.enter_context(
        LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            dashboard_address=None,
            worker_dashboard_address=None,
            scheduler_kwargs={"dashboard_address": ":0"},
        )
    )
    client = stack.enter_context(Client(cluster))

    @contextmanager
    def running() -> Iterator[Any]:
        with stack:
            yield client

    return running()


@contextmanager
def memory_probe(client: Any, label: str, out: list[Memory]) -> Iterator[None]:
    """Measure the workers' peak memory during the block; appends to ``out``."""
    from distributed.diagnostics import MemorySampler

    base = client.run(_worker_reset)
    time.sleep(1.2)  # let the workers' heartbeats report the trimmed memory
    ms = MemorySampler()
    with ms.sample(label, measure="process", interval=0.1):
        yield
    peaks = client.run(_worker_peak)
    samples = [n for _, n in ms.samples[label]]
    deltas = [
        peaks[w] - rss for w, (rss, reset) in base.items() if reset and peaks.get(w) is not None
    ]
    out.append(
        Memory(
            cluster_delta=max(samples) - samples[0],
            cluster_peak=max(samples),
            worker_delta=max(deltas) if len(deltas) == len(base) else None,
            worker_peak=max(p for p in peaks.values() if p is not None) if deltas else None,
        )
    )


# -- the measurements --------------------------------------------------------------------
@dataclass
class Result:
    part: str
    config: str
    method: str
    dask_chunks: str = ""
    times: list[float] = field(default_factory=list)
    warmup: float | None = None
    memory: list[Memory] = field(default_factory=list)  # timed runs only
    stored_bytes: int | None = None  # on disk (shards and metadata); limit: zstd frames

    @property
    def median(self) -> float:
        return statistics.median(self.times)

    def peak(self, name: str) -> int | None:
        values = [getattr(m, name) for m in self.memory]
        return None if not values or None in values else max(values)


def write_method(method: str, ds: Any, path: Path, enc: dict[str, Any]) -> Callable[[], Any]:
    import shardwise

    if method == "shardwise":
        return lambda: shardwise.to_zarr(
            ds, path, mode="w", consolidated=False, encoding=copy.deepcopy(enc)
        )
    return lambda: ds.to_zarr(
        path,
        mode="w",
        consolidated=False,
        zarr_format=3,
        encoding=copy.deepcopy(enc),
        align_chunks=method == "xarray align_chunks",
    )


def measure(
    client: Any,
    part: str,
    config: str,
    ds: Any,
    arr: Any,
    shard: tuple[int, int],
    inner: tuple[int, int],
    methods: tuple[str, ...],
    repeats: int,
) -> dict[str, Result]:
    """Warm up every method, check shardwise's output, then time ``repeats`` rounds."""
    nbytes = arr.nbytes
    enc = encoding(shard, inner)
    results = {m: Result(part, config, m, describe_chunks(ds.v.chunks)) for m in methods}
    if "xarray align_chunks" in results:
        r = results["xarray align_chunks"]
        r.dask_chunks += " -> " + xarray_aligned(ds.v.chunks, shard)
    runs: dict[str, Callable[[], Any]] = {}
    paths: dict[str, Path] = {}
    for m in methods:
        if m == "compress limit":
            continue
        slug = m.replace(" ", "-")
        paths[m] = DATA_DIR / f"write-{part}-{config.replace(' ', '')}-{slug}.zarr"
        runs[m] = write_method(m, ds, paths[m], enc)
        shutil.rmtree(paths[m], ignore_errors=True)

    with ThreadPoolExecutor(2) as pool:
        if "compress limit" in methods:
            chunks = inner_chunks(arr, shard, inner)
            runs["compress limit"] = lambda: compress_all(chunks, pool)
            results["compress limit"].dask_chunks = f"{sum(map(len, chunks))} zstd frames"
        for rnd in range(repeats + 1):  # round 0 is the warm-up
            times = []
            for m, run in runs.items():
                r = results[m]
                memory: list[Memory] = []
                if m == "compress limit":
                    seconds, out = timed(run)
                    r.stored_bytes = out
                else:
                    try:
                        with memory_probe(client, f"{part} {config} {m} {rnd}", memory):
                            seconds, _ = timed(run)
                        r.stored_bytes = stored_bytes(paths[m])
                        check_layout(paths[m], shard, inner)
                        if rnd == 0 and m == "shardwise":
                            t0 = time.perf_counter()
                            verify(paths[m], arr, shard, inner)
                            print(
                                f"    checked {m} output: equal to the input "
                                f"({time.perf_counter() - t0:.0f} s)"
                            )
                    finally:
                        shutil.rmtree(paths[m], ignore_errors=True)
                if rnd:
                    r.times.append(seconds)
                    r.memory += memory
                else:
                    r.warmup = seconds
                mem = f", +{memory[0].cluster_delta / MIB:.0f} MiB" if memory else ""
                times.append(f"{m} {seconds:.2f} s ({nbytes / seconds / 1e9:.2f} GB/s{mem})")
            print(f"    {'warm-up' if rnd == 0 else f'round {rnd}'}: " + ", ".join(times))
    return results


# -- reporting ---------------------------------------------------------------------------
def _mib(n: int | None) -> str:
    return "-" if n is None else f"{n / MIB:.0f}"


def _verdict(ok: bool) -> str:
    return "met" if ok else "**MISSED**"


def print_report(
    results: dict[str, dict[str, Result]],
    sizes: dict[str, int],
    header: dict[str, str],
    repeats: int,
) -> dict[str, Any]:
    """Print the markdown tables and the targets; return the summary for the JSON file."""
    print()
    print(
        f"Median of {repeats} timed runs after one warm-up each; GB/s = 1e9 uncompressed "
        "bytes / s; memory = largest peak over the timed runs, growth over the memory "
        "before the write (MemorySampler: the 2 workers together; RSS: the larger worker)."
    )
    summary: dict[str, Any] = {}
    for part in ("part1", "part2"):
        rows = [(key, rs) for key, rs in results.items() if key.startswith(part)]
        if not rows:
            continue
        print()
        print(header[part])
        print()
        print(
            "| config | method | dask chunks | median s | min-max s | GB/s | vs limit "
            "| MemorySampler +MiB | worker RSS +MiB | worker peak RSS MiB | stored MB |"
        )
        print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for key, by_method in rows:
            limit = by_method.get("compress limit")
            for m, r in by_method.items():
                vs = "-" if limit is None else f"{limit.median / r.median:.2f}"
                stored = "-" if r.stored_bytes is None else f"{r.stored_bytes / 1e6:.0f}"
                print(
                    f"| {r.config} | {m} | {r.dask_chunks} | {r.median:.3f} "
                    f"| {min(r.times):.2f}-{max(r.times):.2f} "
                    f"| {sizes[part] / r.median / 1e9:.2f} | {vs} "
                    f"| {_mib(r.peak('cluster_delta'))} | {_mib(r.peak('worker_delta'))} "
                    f"| {_mib(r.peak('worker_peak'))} | {stored} |"
                )
            sw = by_method["shardwise"]
            other = next(r for m, r in by_method.items() if m.startswith("xarray"))
            s: dict[str, Any] = {
                "shardwise_vs_" + other.method.replace(" ", "_"): other.median / sw.median
            }
            if limit is not None:
                s["shardwise_vs_compress_limit"] = limit.median / sw.median
            for name in ("cluster_delta", "worker_delta"):
                a, b = sw.peak(name), other.peak(name)
                s[f"memory_{name}_shardwise_vs_xarray"] = None if a is None or not b else a / b
            summary[key] = s

    print()
    print("Targets (reported, not asserted):")
    print()
    print("| target | measured | |")
    print("|---|---:|---|")
    for key, s in summary.items():
        config = results[key]["shardwise"].config
        if "shardwise_vs_compress_limit" in s:
            got, want = s["shardwise_vs_compress_limit"], TARGETS[config]
            print(
                f"| shardwise >= {want} x compress limit, inner {config} | {got:.2f} "
                f"| {_verdict(got >= want)} |"
            )
        if "shardwise_vs_xarray" in s:
            got = s["shardwise_vs_xarray"]
            print(
                f"| shardwise >= {TARGET_VS_XARRAY}x ds.to_zarr, inner {config} | {got:.2f}x "
                f"| {_verdict(got >= TARGET_VS_XARRAY)} |"
            )
    for key, s in summary.items():
        if not key.startswith("part2"):
            continue
        for name, what in (("cluster_delta", "MemorySampler"), ("worker_delta", "worker RSS")):
            got = s[f"memory_{name}_shardwise_vs_xarray"]
            shown = "n/a" if got is None else f"{got:.2f}"
            verdict = "" if got is None else _verdict(got <= TARGET_MEMORY)
            print(
                f"| part 2: shardwise peak memory <= {TARGET_MEMORY} x xarray align_chunks "
                f"({what}) | {shown} | {verdict} |"
            )
    return summary


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--size-mib", type=int, default=1024, help="part 1 array size (default 1024)"
    )
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per method")
    parser.add_argument(
        "--part2-size-mib", type=int, default=1024, help="part 2 array size (default 1024)"
    )
    parser.add_argument(
        "--part2-shard-mib", type=int, default=512, help="part 2 shard size (default 512)"
    )
    parser.add_argument("--out", type=Path, help="also write the results to this JSON file")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be >= 1")

    from distributed import Client, LocalCluster

    started = time.perf_counter()
    info = machine()
    print("machine: " + ", ".join(f"{k} {v}" for k, v in info.items()))
    shape1 = array_shape(args.size_mib)
    shape2, shard2 = part2_shapes(args.part2_size_mib, args.part2_shard_mib)
    sizes = {"part1": math.prod(shape1) * 4, "part2": math.prod(shape2) * 4}
    header = {
        "part1": f"Part 1: v{shape1} float32 ({sizes['part1'] / MIB:.0f} MiB), dask chunks "
        f"= shards of {SHARD_MIB} MiB {SHARD}, zstd level 1",
        "part2": f"Part 2: v{shape2} float32 ({sizes['part2'] / MIB:.0f} MiB), dask chunks "
        f"{PART2_DASK}, shards of {args.part2_shard_mib} MiB {shard2}, inner chunks "
        f"{PART2_INNER}, zstd level 1",
    }
    DATA_DIR.mkdir(parents=True, exist_ok=True)

    results: dict[str, dict[str, Result]] = {}
    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        Client(cluster) as client,
    ):
        print("cluster: LocalCluster, 2 worker processes x 1 thread")
        meter = CpuMeter()

        print(header["part1"])
        ds = persisted_dataset(client, shape1, SHARD)
        arr = ds.v.values
        for label, inner in INNER.items():
            print(f"  inner {label} {inner}")
            results[f"part1 {label}"] = measure(
                client, "part1", label, ds, arr, SHARD, inner, PART1_METHODS, args.repeats
            )
        del ds, arr

        print(header["part2"])
        ds = persisted_dataset(client, shape2, PART2_DASK)
        arr = ds.v.values
        label = f"{args.part2_shard_mib} MiB shards"
        results["part2"] = measure(
            client, "part2", label, ds, arr, shard2, PART2_INNER, PART2_METHODS, args.repeats
        )
        del ds, arr
        cpu = meter.stop()

    summary = print_report(results, sizes, header, args.repeats)
    print()
    print_cpu(cpu)
    elapsed = time.perf_counter() - started
    print(f"total time {elapsed:.0f} s")
    if args.out:
        doc = {
            "machine": info,
            "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
            "part1": {"shape": shape1, "shard": SHARD, "inner": INNER, "bytes": sizes["part1"]},
            "part2": {
                "shape": shape2,
                "shard": shard2,
                "inner": PART2_INNER,
                "dask_chunks": PART2_DASK,
                "bytes": sizes["part2"],
            },
            "results": [
                asdict(r) | {"median": r.median, "gb_per_s": sizes[r.part] / r.median / 1e9}
                for rs in results.values()
                for r in rs.values()
            ],
            "summary": summary,
            "cpu": cpu,
            "total_seconds": elapsed,
        }
        args.out.write_text(json.dumps(doc, indent=2) + "\n")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
