"""Full-array read throughput of ``engine="shardwise"`` against zarr-python and zstd itself.

What it measures
----------------
Two Zarr v3 stores hold the same ~1 GiB float32 variable ``v`` (a smooth sum of sines plus
small noise, rounded to 2 decimals, so that zstd level 1 compresses it about 3x), in
64 MiB shards with inner chunks of 1 MiB in one store and 64 KiB in the other. They are
written once by zarr-python (through ``xarray.Dataset.to_zarr``) and cached under
``benchmarks/data/``. On a ``distributed.LocalCluster`` of 2 single-threaded worker
processes, each store is read whole with ``ds.v.sum().compute()`` opened four ways:

  shardwise           xr.open_dataset(path, engine="shardwise", chunks={})   one task per shard
  shardwise skipna=False   the same, summed with ds.v.sum(skipna=False): no NaN-skipping
                      nansum (isnan/where temporaries of every 64 MiB chunk), so closer to
                      the reader's own cost; the targets use the plain .sum()
  open_zarr default   xr.open_zarr(path)      dask chunks = zarr-python's inner chunks
  open_zarr shards    xr.open_zarr(path, chunks=<shard shape>)   one task per shard
  decode limit        every compressed inner chunk already in memory, decoded with
                      numcodecs.Zstd on a 2-thread pool in this process: the
                      ceiling for any reader on 2 cores (no I/O, no copy, no sum)

Throughput is uncompressed bytes / wall time (GB = 1e9 bytes). Every method runs once as
a warm-up (so all read the shard files from the OS page cache alike; caches are not
dropped), then ``--repeats`` times, interleaved round by round; the table reports medians.
The project's targets (reported here, never asserted): shardwise reaches >= 0.8 of the
decode limit with 1 MiB inner chunks and >= 0.6 with 64 KiB ones, and is >= 2x faster
than ``xr.open_zarr`` with its default chunks.

Two things to keep in mind when reading the numbers. Run it on an otherwise idle machine:
at the end the script reports how much CPU other processes took meanwhile. And the decode
limit runs in this process, where glibc recycles freed 1 MiB buffers, while distributed's
nanny starts workers with ``MALLOC_TRIM_THRESHOLD_=65536``, under which every buffer over
128 KiB a worker allocates is a fresh mmap paid for with page faults.

How to run
----------
    make bench                                   # = .venv/bin/python benchmarks/read_throughput.py
    .venv/bin/python benchmarks/read_throughput.py --size-mib 128 --repeats 2   # quick check
    .venv/bin/python benchmarks/read_throughput.py --out results.json

The first run writes the two stores (about 2 x 350 MB on disk, a few minutes); later runs
reuse them when their metadata matches. ``make clean`` deletes them.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import statistics
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np

DATA_DIR = Path(__file__).resolve().parent / "data"
DIMS = ("y", "x")
SHARD = (4096, 4096)  # 64 MiB of float32
INNER = {"1 MiB": (512, 512), "64 KiB": (128, 128)}
SHARD_MIB = math.prod(SHARD) * 4 >> 20
# bump RECIPE_VERSION whenever make_field changes, so cached stores are rewritten
RECIPE_VERSION = 1
NOISE, DECIMALS, SEED = 0.003, 2, 0
METHODS = (
    "shardwise",
    "shardwise skipna=False",
    "open_zarr default",
    "open_zarr shards",
    "decode limit",
)
TARGETS = {"1 MiB": 0.8, "64 KiB": 0.6}  # shardwise / decode limit
TARGET_VS_ZARR = 2.0  # shardwise speed-up over open_zarr default chunks


# -- the data ----------------------------------------------------------------------------
def array_shape(size_mib: int) -> tuple[int, int]:
    """A 2-D shape of ``size_mib`` MiB of float32 made of whole 64 MiB shards, as square
    as the number of shards allows."""
    if size_mib < SHARD_MIB or size_mib % SHARD_MIB:
        raise SystemExit(f"--size-mib must be a positive multiple of {SHARD_MIB}")
    nshards = size_mib // SHARD_MIB
    cols = max(d for d in range(1, math.isqrt(nshards) + 1) if nshards % d == 0)
    return (nshards // cols * SHARD[0], cols * SHARD[1])


def make_field(shape: tuple[int, int]) -> Any:
    """The variable as a lazy dask array chunked by shard: smooth, noisy, quantized."""
    import dask.array as da

    y = da.arange(shape[0], chunks=SHARD[0], dtype=np.float32)[:, None]
    x = da.arange(shape[1], chunks=SHARD[1], dtype=np.float32)[None, :]
    tau = np.float32(2 * np.pi)
    smooth = (
        10 * np.sin(tau * x / 3000 + np.float32(0.5)) * np.cos(tau * y / 2500)
        + 4 * np.sin(tau * (x + y) / 700)
        + 2 * np.cos(tau * (x - 2 * y) / 300)
    )
    noise = da.random.default_rng(SEED).standard_normal(shape, chunks=SHARD, dtype=np.float32)
    return da.round(smooth + np.float32(NOISE) * noise, DECIMALS).astype(np.float32)


def recipe(shape: tuple[int, int], inner: tuple[int, int]) -> dict[str, Any]:
    return {
        "version": RECIPE_VERSION,
        "shape": list(shape),
        "shard": list(SHARD),
        "inner": list(inner),
        "noise": NOISE,
        "decimals": DECIMALS,
        "seed": SEED,
        "codec": "zstd level 1",
    }


def store_matches(path: Path, want: dict[str, Any]) -> bool:
    """True when ``path`` holds a complete store written from ``want``."""
    try:
        group = json.loads((path / "zarr.json").read_text())
        array = json.loads((path / "v" / "zarr.json").read_text())
    except (OSError, ValueError):
        return False
    sharding = array.get("codecs", [{}])[0]
    return (
        group.get("attributes", {}).get("benchmark_recipe") == want
        and array.get("shape") == want["shape"]
        and array.get("chunk_grid", {}).get("configuration", {}).get("chunk_shape") == want["shard"]
        and sharding.get("configuration", {}).get("chunk_shape") == want["inner"]
    )


def ensure_store(size_mib: int, label: str) -> Path:
    """Write the store for inner chunk size ``label`` unless a matching one is cached.
    The store is written next to its final place and renamed when complete."""
    import xarray as xr
    import zarr

    shape, inner = array_shape(size_mib), INNER[label]
    path = DATA_DIR / f"field-{size_mib}MiB-inner{inner[0]}x{inner[1]}.zarr"
    want = recipe(shape, inner)
    if store_matches(path, want):
        print(f"  cached  {path}")
        return path
    tmp = path.with_name(path.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    ds = xr.Dataset({"v": (DIMS, make_field(shape))}, attrs={"benchmark_recipe": want})
    encoding = {
        "v": {"chunks": inner, "shards": SHARD, "compressors": [zarr.codecs.ZstdCodec(level=1)]}
    }
    t0 = time.perf_counter()
    ds.to_zarr(tmp, zarr_format=3, consolidated=False, encoding=encoding)
    shutil.rmtree(path, ignore_errors=True)
    tmp.rename(path)
    print(f"  wrote   {path} in {time.perf_counter() - t0:.0f} s")
    return path


# -- the decode limit --------------------------------------------------------------------
@dataclass
class Compressed:
    """Every compressed inner chunk of ``v``, grouped by shard, plus what they add up to."""

    shards: list[list[memoryview]]
    stored_bytes: int  # shard files on disk, indexes included
    empty_chunks: int


def load_compressed(path: Path) -> Compressed:
    """Read every shard file and cut it into its inner chunks with the shard index."""
    import zarr
    from zarr.codecs import BytesCodec, ZstdCodec

    from shardwise.codecs import index_format_from_codecs
    from shardwise.index import EMPTY
    from shardwise.metadata import ArrayInfo

    info = ArrayInfo.from_metadata(zarr.open_array(path, path="v", mode="r").metadata, "v")
    sharding = info.sharding
    codecs = list(sharding.codecs)
    if not (
        len(codecs) == 2 and isinstance(codecs[0], BytesCodec) and isinstance(codecs[1], ZstdCodec)
    ):
        raise SystemExit(f"{path}: inner codecs are {codecs}, expected [bytes, zstd]")
    shards, stored, empty = [], 0, 0
    for shard in info.layout.all_shards():
        fmt = index_format_from_codecs(
            sharding.index_codecs,
            info.layout.chunks_per_shard(shard),
            sharding.index_location,
        )
        raw = memoryview((path / info.key(shard)).read_bytes())
        stored += len(raw)
        table = fmt.decode(fmt.split(raw)).reshape(-1, 2)
        chunks = [raw[int(o) : int(o) + int(n)] for o, n in table if o != EMPTY]
        empty += len(table) - len(chunks)
        shards.append(chunks)
    return Compressed(shards, stored, empty)


def _decode_shard(chunks: list[memoryview]) -> int:
    import numcodecs

    zstd = numcodecs.Zstd()
    return sum(len(zstd.decode(c)) for c in chunks)


def decode_all(compressed: Compressed, pool: ThreadPoolExecutor) -> int:
    """Decode every inner chunk, one pool task per shard; returns the bytes decoded."""
    return sum(pool.map(_decode_shard, compressed.shards))


# -- the measurements --------------------------------------------------------------------
def open_method(method: str, path: Path) -> Any:
    import xarray as xr

    if method.startswith("shardwise"):
        return xr.open_dataset(path, engine="shardwise", chunks={}, consolidated=False)
    if method == "open_zarr default":
        return xr.open_zarr(path, consolidated=False)
    if method == "open_zarr shards":
        return xr.open_zarr(path, consolidated=False, chunks=dict(zip(DIMS, SHARD, strict=True)))
    raise ValueError(method)


@dataclass
class Result:
    store: str
    method: str
    times: list[float] = field(default_factory=list)
    warmup: float | None = None
    tasks: int | None = None
    dask_chunks: str = ""
    value: float | None = None

    @property
    def median(self) -> float:
        return statistics.median(self.times)


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def _summer(ds: Any, *, skipna: bool) -> Callable[[], Any]:
    return lambda: ds.v.sum(skipna=skipna).compute()


def measure_store(label: str, path: Path, repeats: int, nbytes: int) -> dict[str, Result]:
    """Warm up every method on one store, then time ``repeats`` interleaved rounds."""
    compressed = load_compressed(path)
    ratio = nbytes / compressed.stored_bytes
    nchunks = sum(len(c) for c in compressed.shards)
    print(
        f"  inner {label}: {len(compressed.shards)} shards, {nchunks} inner chunks "
        f"({compressed.empty_chunks} empty), {compressed.stored_bytes / 1e6:.0f} MB on disk, "
        f"zstd ratio {ratio:.2f}x"
    )
    datasets = {m: open_method(m, path) for m in METHODS if m != "decode limit"}
    results = {m: Result(label, m) for m in METHODS}
    for m, ds in datasets.items():
        results[m].tasks = len(ds.v.sum().__dask_graph__())
        chunk = "x".join(str(c[0]) for c in ds.v.chunks)
        results[m].dask_chunks = f"{ds.v.data.npartitions} x {chunk}"
    results["decode limit"].dask_chunks = f"{nchunks} zstd frames"

    with ThreadPoolExecutor(2) as pool:
        runs: dict[str, Callable[[], Any]] = {
            m: _summer(ds, skipna=not m.endswith("skipna=False")) for m, ds in datasets.items()
        }
        runs["decode limit"] = lambda: decode_all(compressed, pool)
        for rnd in range(repeats + 1):  # round 0 is the warm-up
            times = []
            for m, run in runs.items():
                seconds, out = timed(run)
                if m == "decode limit":
                    if out != nbytes:
                        raise SystemExit(f"decoded {out} bytes, expected {nbytes}")
                else:
                    results[m].value = float(out)
                if rnd:
                    results[m].times.append(seconds)
                else:
                    results[m].warmup = seconds
                times.append(f"{m} {seconds:.2f} s")
            print(f"    {'warm-up' if rnd == 0 else f'round {rnd}'}: " + ", ".join(times))
    for ds in datasets.values():
        ds.close()
    values = [r.value for r in results.values() if r.value is not None]
    spread = (max(values) - min(values)) / max(abs(min(values)), 1e-30)
    if spread > 1e-4:
        print(f"    WARNING: the sums disagree (relative spread {spread:.1e}): {values}")
    return results


# -- reporting ---------------------------------------------------------------------------
class CpuMeter:
    """How busy the machine was, from /proc/stat, and how much of that was this benchmark
    (this process and its children, the cluster's workers included): the rest is other
    processes competing for the same cores, which makes every number here slower."""

    def __init__(self) -> None:
        self.start = self._sample()

    @staticmethod
    def _sample() -> tuple[float, float, float, float] | None:
        try:
            import psutil

            fields = [int(x) for x in Path("/proc/stat").read_text().split()[1:9]]
            tick = os.sysconf("SC_CLK_TCK")
            busy = (sum(fields) - fields[3] - fields[4]) / tick  # all but idle and iowait
            steal = fields[7] / tick
            me = psutil.Process()
            ours = sum(
                t.user + t.system
                for t in [me.cpu_times(), *(c.cpu_times() for c in me.children(recursive=True))]
            )
            return time.perf_counter(), busy, steal, ours
        except Exception:  # not Linux, or a child exited while being read
            return None

    def stop(self) -> dict[str, float] | None:
        end = self._sample()
        if self.start is None or end is None:
            return None
        wall, busy, steal, ours = (b - a for a, b in zip(self.start, end, strict=True))
        cores = os.cpu_count() or 1
        return {
            "seconds": wall,
            "busy_cores": busy / wall,
            "benchmark_cores": ours / wall,
            "other_cores": max(busy - ours - steal, 0.0) / wall,
            "steal_cores": steal / wall,
            "cores": cores,
        }


def print_cpu(cpu: dict[str, Any] | None) -> None:
    """Say how much CPU the benchmark and everything else took during the measurements."""
    if cpu is None:
        return
    print(
        f"CPU during the measurements ({cpu['seconds']:.0f} s, {cpu['cores']} cores): "
        f"benchmark {cpu['benchmark_cores']:.2f} cores, other processes "
        f"{cpu['other_cores']:.2f}, hypervisor steal {cpu['steal_cores']:.2f}"
    )
    if cpu["other_cores"] + cpu["steal_cores"] > 0.1:
        print("WARNING: the machine was not idle; the timings above are pessimistic and noisy")


def machine() -> dict[str, Any]:
    cpu = platform.processor() or "unknown"
    ram = None
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                ram = int(line.split()[1]) * 1024
                break
    except OSError:
        pass
    packages = ("shardwise", "zarr", "xarray", "dask", "distributed", "numcodecs", "numpy")
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "cores_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "ram_gib": None if ram is None else round(ram / 2**30, 1),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        **{p: version(p) for p in packages},
    }


def print_report(
    results: dict[str, dict[str, Result]], nbytes: int, size_mib: int, repeats: int
) -> dict[str, Any]:
    """Print the table and the targets; return the summary for the JSON file."""
    print()
    print(
        f"{size_mib} MiB float32 in {SHARD_MIB} MiB shards; median of {repeats} runs "
        "after one warm-up each, all reading from the OS page cache (caches not dropped)"
    )
    header = (
        f"{'store':<13}{'method':<24}{'dask chunks':<20}{'tasks':>7}"
        f"{'median s':>10}{'min-max s':>14}{'GB/s':>7}{'vs limit':>10}"
    )
    print(header)
    print("-" * len(header))
    summary: dict[str, Any] = {}
    for label, by_method in results.items():
        limit = by_method["decode limit"].median
        for i, (m, r) in enumerate(by_method.items()):
            spread = f"{min(r.times):.2f}-{max(r.times):.2f}"
            tasks = "-" if r.tasks is None else str(r.tasks)
            print(
                f"{('inner ' + label) if i == 0 else '':<13}{m:<24}{r.dask_chunks:<20}"
                f"{tasks:>7}{r.median:>10.3f}{spread:>14}{nbytes / r.median / 1e9:>7.2f}"
                f"{limit / r.median:>10.2f}"
            )
        sw = by_method["shardwise"].median
        summary[label] = {
            "shardwise_vs_decode_limit": limit / sw,
            "shardwise_vs_open_zarr_default": by_method["open_zarr default"].median / sw,
            "shardwise_vs_open_zarr_shards": by_method["open_zarr shards"].median / sw,
        }
        print(
            f"{'':<13}shardwise is {summary[label]['shardwise_vs_open_zarr_default']:.2f}x "
            f"open_zarr default chunks, {summary[label]['shardwise_vs_open_zarr_shards']:.2f}x "
            "open_zarr shard chunks"
        )
        print("-" * len(header))

    print("targets (reported, not asserted):")
    for label, s in summary.items():
        got, want = s["shardwise_vs_decode_limit"], TARGETS[label]
        print(
            f"  inner {label:<7} shardwise / decode limit  {got:5.2f}  target >= {want:.1f}  "
            f"{'met' if got >= want else 'MISSED'}"
        )
        got = s["shardwise_vs_open_zarr_default"]
        print(
            f"  inner {label:<7} shardwise vs open_zarr    {got:5.2f}x target >= "
            f"{TARGET_VS_ZARR:.0f}x   {'met' if got >= TARGET_VS_ZARR else 'MISSED'}"
        )
    return summary


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mib", type=int, default=1024, help="array size (default 1024)")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per method")
    parser.add_argument("--out", type=Path, help="also write the results to this JSON file")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be >= 1")

    from distributed import Client, LocalCluster

    started = time.perf_counter()
    info = machine()
    print("machine: " + ", ".join(f"{k} {v}" for k, v in info.items()))
    shape = array_shape(args.size_mib)
    nbytes = math.prod(shape) * 4
    print(f"data: v{shape} float32, {nbytes / 2**20:.0f} MiB, in {DATA_DIR}")
    paths = {label: ensure_store(args.size_mib, label) for label in INNER}

    results: dict[str, dict[str, Result]] = {}
    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        Client(cluster),
    ):
        print("cluster: LocalCluster, 2 worker processes x 1 thread")
        meter = CpuMeter()
        for label, path in paths.items():
            results[label] = measure_store(label, path, args.repeats, nbytes)
        cpu = meter.stop()

    summary = print_report(results, nbytes, args.size_mib, args.repeats)
    print_cpu(cpu)
    elapsed = time.perf_counter() - started
    print(f"total time {elapsed:.0f} s")
    if args.out:
        doc = {
            "machine": info,
            "size_mib": args.size_mib,
            "shape": shape,
            "shard": SHARD,
            "inner": INNER,
            "repeats": args.repeats,
            "uncompressed_bytes": nbytes,
            "results": [
                asdict(r) | {"median": r.median} for rs in results.values() for r in rs.values()
            ],
            "summary": summary,
            "cpu": cpu,
            "total_seconds": elapsed,
        }
        args.out.write_text(json.dumps(doc, indent=2) + "\n")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
