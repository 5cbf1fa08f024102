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
    .venv/bin/python benchmarks/read_throughput.py --shape 3d --out results.json
    .venv/bin/python benchmarks/read_throughput.py --size-mib 128 --size-3d 256 \\
        --repeats 1                                                     # quick check

The first run writes the four stores (about 2 x 350 MB + 2 x 170 MB on disk, a few
minutes); later runs reuse them when their metadata matches. ``make clean`` deletes them.
The client process holds two copies of the largest array at once (the references'
outputs, compared) plus its compressed inner chunks: about 2.5 GiB for the 2-D field.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

# run as a script, this directory is on sys.path
from common import DATA_DIR, machine, package_versions
from throughput_common import (
    FLOOR_RUNS,
    DecodeFloor,
    have_tensorstore,
    interleaved,
    tensorstore_kvstore,
    zarr_pipeline,
    zarr_pipelines,
)

DIMS = ("y", "x")
SHARD = (4096, 4096)  # 64 MiB of float32
INNER = {"1 MiB": (512, 512), "64 KiB": (128, 128)}
SHARD_MIB = math.prod(SHARD) * 4 >> 20
DIMS_3D = ("z", "y", "x")
SHARD_3D = (256, 256, 256)  # 64 MiB of float32
INNER_3D = {"1 MiB": (64, 64, 64), "64 KiB": (16, 32, 32)}
# bump RECIPE_VERSION(_3D) whenever make_field(_3d) changes, so cached stores are rewritten
RECIPE_VERSION = 1
RECIPE_VERSION_3D = 1
NOISE, DECIMALS, SEED = 0.003, 2, 0
CLUSTER_METHODS = ("shardwise", "open_zarr default", "open_zarr shards")
FLOOR = "floor: numcodecs decode out="
TARGETS = {"1 MiB": 0.75, "64 KiB": 0.65}  # shardwise / floor, in both shapes
TARGET_VS_ZARR = 2.0  # secondary: shardwise speed-up over open_zarr default chunks


# -- the data ----------------------------------------------------------------------------
def array_shape(size_mib: int) -> tuple[int, int]:
    """A 2-D shape of ``size_mib`` MiB of float32 made of whole 64 MiB shards, as square
    as the number of shards allows."""
    if size_mib < SHARD_MIB or size_mib % SHARD_MIB:
        raise SystemExit(f"--size-mib must be a positive multiple of {SHARD_MIB}")
    nshards = size_mib // SHARD_MIB
    cols = max(d for d in range(1, math.isqrt(nshards) + 1) if nshards % d == 0)
    return (nshards // cols * SHARD[0], cols * SHARD[1])


def cube_shape(edge: int) -> tuple[int, int, int]:
    """The 3-D shape ``edge`` x ``edge`` x ``edge``, made of whole 64 MiB shards."""
    if edge < SHARD_3D[0] or edge % SHARD_3D[0]:
        raise SystemExit(f"--size-3d must be a positive multiple of {SHARD_3D[0]}")
    return (edge, edge, edge)


def make_field(shape: tuple[int, int]) -> Any:
    """The variable as a lazy dask array chunked by shard: smooth, noisy, quantized."""
    from throughput_common import smooth_field

    return smooth_field(shape, SHARD, SEED, NOISE, DECIMALS)


def make_field_3d(shape: tuple[int, int, int]) -> Any:
    """The 3-D variable as a lazy dask array chunked by shard, made like ``make_field``;
    its periods are shorter, so that zstd level 1 compresses its 1 MiB and 64 KiB inner
    chunks about 3x too (their rows along x are 64 and 32 values, not 512 and 128)."""
    import dask.array as da

    z = da.arange(shape[0], chunks=SHARD_3D[0], dtype=np.float32)[:, None, None]
    y = da.arange(shape[1], chunks=SHARD_3D[1], dtype=np.float32)[None, :, None]
    x = da.arange(shape[2], chunks=SHARD_3D[2], dtype=np.float32)[None, None, :]
    tau = np.float32(2 * np.pi)
    smooth = (
        10
        * np.sin(tau * x / 2000 + np.float32(0.5))
        * np.cos(tau * y / 1700)
        * np.cos(tau * z / 1300)
        + 4 * np.sin(tau * (x + y) / 450)
        + 2 * np.cos(tau * (x - 2 * y) / 200)
        + 3 * np.sin(tau * (y + z) / 330)
        + 2 * np.cos(tau * (x + y - 2 * z) / 230)
    )
    noise = da.random.default_rng(SEED).standard_normal(shape, chunks=SHARD_3D, dtype=np.float32)
    return da.round(smooth + np.float32(NOISE) * noise, DECIMALS).astype(np.float32)


@dataclass(frozen=True)
class Field:
    """One data shape of the benchmark: the variable's dims, shape, shards, inner chunks
    (by label) and generator."""

    name: str  # "2-D" or "3-D"
    dims: tuple[str, ...]
    shape: tuple[int, ...]
    shard: tuple[int, ...]
    inner: dict[str, tuple[int, ...]]
    make: Callable[[Any], Any]
    recipe_version: int

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * 4

    @property
    def shard_chunks(self) -> dict[str, int]:
        return dict(zip(self.dims, self.shard, strict=True))

    def describe(self) -> str:
        return f"{self.name} v{self.shape} float32 ({self.nbytes / 2**20:.0f} MiB)"

    def recipe(self, label: str) -> dict[str, Any]:
        doc = {
            "version": self.recipe_version,
            "shape": list(self.shape),
            "shard": list(self.shard),
            "inner": list(self.inner[label]),
            "noise": NOISE,
            "decimals": DECIMALS,
            "seed": SEED,
            "codec": "zstd level 1",
        }
        return doc if len(self.shape) == 2 else {"field": "3-D", **doc}

    def store_path(self, label: str) -> Path:
        inner = "x".join(map(str, self.inner[label]))
        if len(self.shape) == 2:
            return DATA_DIR / f"field-{self.nbytes >> 20}MiB-inner{inner}.zarr"
        return DATA_DIR / f"field3d-{'x'.join(map(str, self.shape))}-inner{inner}.zarr"


def field_2d(shape: tuple[int, ...]) -> Field:
    return Field("2-D", DIMS, shape, SHARD, INNER, make_field, RECIPE_VERSION)


def field_3d(shape: tuple[int, ...]) -> Field:
    return Field("3-D", DIMS_3D, shape, SHARD_3D, INNER_3D, make_field_3d, RECIPE_VERSION_3D)


def selected_fields(which: str, size_mib: int, size_3d: int) -> list[Field]:
    """The data shapes of ``--shape`` (2d, 3d or both)."""
    fields = []
    if which in ("2d", "both"):
        fields.append(field_2d(array_shape(size_mib)))
    if which in ("3d", "both"):
        fields.append(field_3d(cube_shape(size_3d)))
    return fields


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


def ensure_store(fld: Field, label: str) -> Path:
    """Write the store of ``fld`` for inner chunk size ``label`` unless a matching one is
    cached. The store is written next to its final place and renamed when complete."""
    import xarray as xr
    import zarr

    path, want = fld.store_path(label), fld.recipe(label)
    if store_matches(path, want):
        print(f"  cached  {path}")
        return path
    tmp = path.with_name(path.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    ds = xr.Dataset({"v": (fld.dims, fld.make(fld.shape))}, attrs={"benchmark_recipe": want})
    encoding = {
        "v": {
            "chunks": fld.inner[label],
            "shards": fld.shard,
            "compressors": [zarr.codecs.ZstdCodec(level=1)],
        }
    }
    t0 = time.perf_counter()
    ds.to_zarr(tmp, zarr_format=3, consolidated=False, encoding=encoding)
    shutil.rmtree(path, ignore_errors=True)
    tmp.rename(path)
    print(f"  wrote   {path} in {time.perf_counter() - t0:.0f} s")
    return path


# -- the floor ---------------------------------------------------------------------------
@dataclass
class Compressed:
    """Every compressed inner chunk of ``v``, grouped by shard, plus what they add up to."""

    shards: list[list[memoryview]]
    stored_bytes: int  # shard files on disk, indexes included
    empty_chunks: int


def load_compressed(path: Path, chunk_nbytes: int) -> Compressed:
    """Read every shard file and cut it into its inner chunks with the shard index; check
    that every zstd frame declares ``chunk_nbytes`` bytes of content."""
    import zarr
    import zstandard
    from zarr.codecs import BytesCodec, ZstdCodec

    from shardwise.codecs import index_format_from_codecs
    from shardwise.format.index import EMPTY
    from shardwise.format.metadata import ArrayInfo

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
        for c in chunks:
            if zstandard.frame_content_size(c) != chunk_nbytes:
                raise SystemExit(f"{path}: a zstd frame does not hold {chunk_nbytes} bytes")
        shards.append(chunks)
    return Compressed(shards, stored, empty)


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


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


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


def print_report(
    results: dict[str, dict[str, Result]],
    fields: dict[str, Field],
    labels: dict[str, str],
    repeats: int,
) -> dict[str, Any]:
    """Print the table and the targets; return the summary for the JSON file."""
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
    parser.add_argument("--out", type=Path, help="also write the results to this JSON file")
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

    summary = print_report(
        results,
        {key: fld for key, (fld, _, _) in stores.items()},
        {key: label for key, (_, label, _) in stores.items()},
        args.repeats,
    )
    print_cpu(cpu)
    elapsed = time.perf_counter() - started
    print(f"total time {elapsed:.0f} s")
    if args.out:
        doc = {
            "machine": info,
            "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
            "stores": {
                key: {
                    "shape": fld.name,
                    "dims": fld.dims,
                    "array_shape": fld.shape,
                    "shard": fld.shard,
                    "inner": fld.inner[label],
                    "uncompressed_bytes": fld.nbytes,
                    "stored_bytes": local[key]["stored_bytes"],
                    "path": str(path),
                }
                for key, (fld, label, path) in stores.items()
            },
            "floor_runs": FLOOR_RUNS,
            "repeats": args.repeats,
            "results": [
                asdict(r)
                | {
                    "median": r.median,
                    "headline": r.headline,
                    "gb_per_s": stores[r.store][0].nbytes / r.headline / 1e9,
                }
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
