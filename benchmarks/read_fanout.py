"""Fan-out reads: ``shardwise.open_dataset`` against ``engine="shardwise"`` and
``xr.open_zarr``, for a region over many shards with network-like latency, and for one
big shard split across the workers of a cluster.

What it measures
----------------
Part 1, a region read with 20 ms of latency per request. A Zarr v3 store holds one
float32 variable ``v`` with dims (time, y, x) = (160, 512, 512), in shards of
(160, 64, 64) (1 x 8 x 8 = 64 shards) of inner chunks (10, 16, 16) (16 x 4 x 4 = 256 per
shard, 10 KiB each uncompressed), compressed with zarr-python's default codecs (zstd).
The data is a smooth sum of sines plus small noise, rounded to 2 decimals, like the
field of ``read_throughput.py`` (zstd compresses it about 3x). The region
``ds.v.isel(time=slice(0, 16))`` touches every shard, and 2 of the 16 rows of inner
chunks along time in each (12.5% of the inner chunks). It is read on dask's threaded
scheduler (``scheduler="threads"``, default number of threads) from
``CountingStore(LatencyStore(LocalStore(path, read_only=True), delay=0.02))``, opened
three ways:

  shardwise.open_dataset   shardwise.open_dataset(store, consolidated=False): one dask
                           chunk per shard, so no index tasks (no shard is shared by two
                           tasks); each read task, narrowed to the slice by dask's
                           optimizer, reads the shard's index and then coalesced ranges
                           of the inner chunks the slice needs
  engine="shardwise"       xr.open_dataset(store, engine="shardwise", chunks={},
                           consolidated=False): one dask chunk (task) per shard that
                           reads the shard's index, then its ranges
  xr.open_zarr default     xr.open_zarr(store, consolidated=False) with its default
                           chunks (printed): zarr-python reads each dask chunk

Each method's dataset is opened outside the timing, and the request log cleared after
opening (metadata is not counted). ``shardwise.cache.clear_index_cache()`` runs before every
run, so each is a cold job. Every method runs once as a check (its result compared with
the region read by zarr-python directly, and its requests recorded), then ``--repeats``
timed rounds, interleaved. Reported per method: store requests (GETs) by kind (whole
object, byte range, suffix = the last N bytes, which is how both shardwise and
zarr-python read a shard index at the end of a shard), bytes requested, the tasks of the
optimized graph (aliases and data nodes left out), the median wall time with min-max,
and the open_zarr / shardwise.open_dataset ratios. Targets (reported, never asserted):
shardwise.open_dataset makes >= 3x fewer requests and takes >= 3x less wall time than
``xr.open_zarr``.

Part 2, one shard split across a cluster. A second store holds v of (256, 512, 512)
float32 (256 MiB) as one shard of 256 inner chunks of (16, 128, 128) (1 MiB each),
zstd. On a ``distributed.LocalCluster`` of 2 single-threaded worker processes,
``ds.v.sum(skipna=False).compute()``, without latency, with the dataset opened from the
path by

  chunks="shards"   shardwise.open_dataset(path, chunks="shards"): 1 read task
  chunks="inner"    shardwise.open_dataset(path, chunks="inner"): 256 read tasks
                    below the shard's 1 index task, spread over both workers
  chunks="auto"     shardwise.open_dataset(path, chunks="auto"): the chunks it picks
                    (printed)
  time=32           shardwise.open_dataset(path, chunks={"time": 32}): 8 read tasks of
                    32 inner chunks each

and, as a reference for what the cluster's scheduling alone costs, the sum of a dask
array of as many 1-element chunks as there are inner chunks (``da.zeros(256,
chunks=1).sum()``: the same number of chunk tasks, no data). Each runs once as a
warm-up, then ``--repeats`` timed rounds, interleaved, each after
``client.run(shardwise.cache.clear_index_cache)``. During every timed run
``distributed.get_task_stream`` records which worker ran which task; the report counts,
per worker, the tasks whose key names hold ``shardwise-read`` and ``shardwise-index``
(dask's optimizer fuses them into longer names; aliases and data nodes are left out),
and gives the speedup of chunks="inner" (and "auto") over chunks="shards" in median
wall time. Every sum is checked against zarr-python's read of the array.

Both stores are written once by zarr-python (through ``xarray.Dataset.to_zarr``) and
cached under ``benchmarks/data/``; they are rewritten only when their recipe changes.
The files are read from the OS page cache (caches are not dropped). Run it on an idle
machine: at the end the script reports how much CPU other processes took meanwhile.

How to run
----------
    .venv/bin/python benchmarks/read_fanout.py                   # 5 repeats, a few minutes
    .venv/bin/python benchmarks/read_fanout.py --skip-part2
    .venv/bin/python benchmarks/read_fanout.py --quick           # small stores, 1 repeat

The first run writes the stores (about 60 MB and 100 MB on disk, under a minute). Most
of the default run is ``xr.open_zarr``: 2048 tasks of one inner chunk, two sequential
requests each, so about 2048 x 40 ms / (number of threads) per run.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

# run as a script, this directory is on sys.path: the same data directory, store cache
# check, machine description and CPU meter as the read benchmark
from common import (
    DATA_DIR,
    CpuMeter,
    machine,
    print_cpu,
    store_matches,
    timed,
)

DIMS = ("time", "y", "x")
# bump RECIPE_VERSION whenever make_field changes, so cached stores are rewritten
RECIPE_VERSION = 1
NOISE, DECIMALS, SEED = 0.003, 2, 0
LATENCY = 0.02  # seconds per request in part 1
TARGET_REQUESTS = 3.0  # xr.open_zarr requests / shardwise.open_dataset requests
TARGET_TIME = 3.0  # xr.open_zarr wall time / shardwise.open_dataset wall time
PART1_METHODS = ("shardwise.open_dataset", "engine=shardwise", "xr.open_zarr default")
PART2_METHODS = ("shards", "inner", "auto", "time=32")


def part2_chunks(method: str) -> Any:
    """``chunks=`` of a part-2 method: a keyword, or "dim=size" for a dict."""
    if "=" in method:
        dim, size = method.split("=")
        return {dim: int(size)}
    return method


FLOOR = "floor"  # part 2's reference: as many empty chunk tasks as inner chunks


@dataclass(frozen=True)
class Geometry:
    """One store: the shape of ``v``, its shards and inner chunks."""

    label: str
    shape: tuple[int, int, int]
    shard: tuple[int, int, int]
    inner: tuple[int, int, int]

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * 4

    @property
    def shards_per_dim(self) -> tuple[int, ...]:
        return tuple(n // s for n, s in zip(self.shape, self.shard, strict=True))

    @property
    def inner_per_shard(self) -> tuple[int, ...]:
        return tuple(s // c for s, c in zip(self.shard, self.inner, strict=True))

    @property
    def path(self) -> Path:
        def x(t: tuple[int, ...]) -> str:
            return "x".join(map(str, t))

        name = f"fanout-{self.label}-{x(self.shape)}-s{x(self.shard)}-c{x(self.inner)}.zarr"
        return DATA_DIR / name

    def describe(self) -> str:
        return (
            f"v{self.shape} float32 ({self.nbytes / 2**20:.0f} MiB), shards {self.shard} "
            f"({'x'.join(map(str, self.shards_per_dim))} = {math.prod(self.shards_per_dim)}), "
            f"inner chunks {self.inner} "
            f"({'x'.join(map(str, self.inner_per_shard))} = {math.prod(self.inner_per_shard)} "
            f"per shard, {math.prod(self.inner) * 4 / 1024:g} KiB each)"
        )


# part 1: 64 shards x 256 inner chunks, region = the first 16 time steps
PART1 = Geometry("region", (160, 512, 512), (160, 64, 64), (10, 16, 16))
PART1_TIME = 16
PART1_QUICK = Geometry("region-quick", (64, 128, 128), (64, 64, 64), (4, 16, 16))
PART1_QUICK_TIME = 6
# part 2: one shard of 256 inner chunks
PART2 = Geometry("oneshard", (256, 512, 512), (256, 512, 512), (16, 128, 128))
PART2_QUICK = Geometry("oneshard-quick", (64, 256, 256), (64, 256, 256), (4, 64, 64))


# -- the data ----------------------------------------------------------------------------
def make_field(shape: tuple[int, int, int]) -> np.ndarray:
    """The variable: sines of a few hundred to a thousand points drifting with time,
    plus small noise, rounded to 2 decimals (zstd compresses it about 3x), built one time
    step at a time."""
    rng = np.random.default_rng(SEED)
    tau = np.float32(2 * np.pi)
    y = np.arange(shape[1], dtype=np.float32)[:, None]
    x = np.arange(shape[2], dtype=np.float32)[None, :]
    out = np.empty(shape, dtype=np.float32)
    for t in range(shape[0]):
        phase = np.float32(t / 50)
        smooth = (
            10 * np.sin(tau * x / 1500 + np.float32(0.5) + phase) * np.cos(tau * y / 1200)
            + 4 * np.sin(tau * (x + y) / 350 + phase)
            + 2 * np.cos(tau * (x - 2 * y) / 150 + 2 * phase)
        )
        noise = rng.standard_normal(shape[1:], dtype=np.float32)
        out[t] = np.round(smooth + np.float32(NOISE) * noise, DECIMALS)
    return out


def recipe(geo: Geometry) -> dict[str, Any]:
    return {
        "version": RECIPE_VERSION,
        "dims": list(DIMS),
        "shape": list(geo.shape),
        "shard": list(geo.shard),
        "inner": list(geo.inner),
        "noise": NOISE,
        "decimals": DECIMALS,
        "seed": SEED,
        "codec": "zarr-python default",
    }


def ensure_store(geo: Geometry) -> Path:
    """Write the store of ``geo`` unless a matching one is cached; written next to its
    final place and renamed when complete."""
    import xarray as xr

    path, want = geo.path, recipe(geo)
    if store_matches(path, want):
        print(f"  cached  {path}")
        return path
    tmp = path.with_name(path.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    t0 = time.perf_counter()
    ds = xr.Dataset({"v": (DIMS, make_field(geo.shape))}, attrs={"benchmark_recipe": want})
    encoding = {"v": {"chunks": geo.inner, "shards": geo.shard}}
    ds.to_zarr(tmp, zarr_format=3, consolidated=False, encoding=encoding)
    shutil.rmtree(path, ignore_errors=True)
    tmp.rename(path)
    print(f"  wrote   {path} in {time.perf_counter() - t0:.0f} s")
    return path


def store_summary(path: Path, geo: Geometry) -> dict[str, Any]:
    """Bytes on disk, compression ratio and the inner codecs, from the written store."""
    array = json.loads((path / "v" / "zarr.json").read_text())
    sharding = array["codecs"][0]
    codecs = [
        c["name"] + (f"{c.get('configuration', {})}" if c["name"] != "bytes" else "")
        for c in sharding["configuration"]["codecs"]
    ]
    stored = sum(f.stat().st_size for f in (path / "v" / "c").rglob("*") if f.is_file())
    return {"stored_bytes": stored, "ratio": geo.nbytes / stored, "inner_codecs": codecs}


# -- helpers -----------------------------------------------------------------------------
def describe_chunks(chunks: tuple[tuple[int, ...], ...]) -> str:
    """``"64 x 160x64x64"``; a dimension with uneven chunks shows its distinct sizes."""
    sizes = []
    for c in chunks:
        distinct = sorted(set(c), reverse=True)
        sizes.append(str(distinct[0]) if len(distinct) == 1 else "|".join(map(str, distinct)))
    return f"{math.prod(len(c) for c in chunks)} x " + "x".join(sizes)


def task_kind(key: str) -> str:
    """What a task of a fan-out graph does, from its key name (dask's optimizer may fuse
    names, e.g. the index task becomes ``reader-shardwise-read-v-shardwise-index-...``
    and a read task ``shardwise-read-v-sum-...``): "index", "read", "read+index" or
    "other". The reader and source data nodes (``reader-``/``original-shardwise-read-``)
    are not reads."""
    key = key.replace("reader-shardwise-read-", "reader-")
    key = key.replace("original-shardwise-read-", "original-")
    index, read = "shardwise-index" in key, "shardwise-read" in key
    if index and read:
        return "read+index"
    return "index" if index else "read" if read else "other"


def graph_kinds(arr: Any) -> dict[str, str]:
    """``str(key)`` -> kind of every node of the optimized graph of a dask array:
    :func:`task_kind` for tasks, "alias" and "data" for the optimizer's aliases and data
    nodes (which distributed also runs as tasks, at no cost)."""
    import dask
    from dask._task_spec import Alias, DataNode

    (opt,) = dask.optimize(arr)
    out = {}
    for key, node in dict(opt.__dask_graph__()).items():
        name = str(key)
        if isinstance(node, Alias):
            out[name] = "alias"
        elif isinstance(node, DataNode):
            out[name] = "data"
        else:
            out[name] = task_kind(name)
    return out


def graph_tasks(kinds: dict[str, str]) -> dict[str, int]:
    """Tasks (aliases and data nodes left out) of a graph described by
    :func:`graph_kinds`, and how many read / index shards (fused tasks doing both count in
    both)."""
    counts = Counter(kinds.values())
    return {
        "tasks": sum(n for k, n in counts.items() if k not in ("alias", "data")),
        "read_tasks": counts["read"] + counts["read+index"],
        "index_tasks": counts["index"] + counts["read+index"],
        "graph_keys": len(kinds),
    }


def request_kind(byte_range: str) -> str:
    if byte_range == "whole":
        return "whole"
    if byte_range.startswith("["):
        return "range"
    if byte_range.startswith("last"):
        return "suffix"
    return "offset"


def request_bytes(path: Path, key: str, byte_range: str, sizes: dict[str, int]) -> int:
    """Bytes one logged request asked for (clipped to the object's size)."""
    if key not in sizes:
        try:
            sizes[key] = (path / key).stat().st_size
        except OSError:
            sizes[key] = 0
    size = sizes[key]
    if byte_range == "whole":
        return size
    if byte_range.startswith("["):
        a, b = (int(s) for s in byte_range.strip("[)").split(","))
        return max(0, min(b, size) - a)
    if byte_range.startswith("last"):
        return min(int(byte_range.split()[1]), size)
    return max(0, size - int(byte_range.split()[1]))


def inner_chunks_touched(geo: Geometry, time_stop: int) -> tuple[int, int]:
    """(inner chunks the region [0, time_stop) x all x all intersects, all inner chunks)."""
    per_dim_total = [n // c for n, c in zip(geo.shape, geo.inner, strict=True)]
    per_dim_touched = [math.ceil(time_stop / geo.inner[0]), *per_dim_total[1:]]
    return math.prod(per_dim_touched), math.prod(per_dim_total)


def touched_bytes(path: Path, geo: Geometry, time_stop: int) -> tuple[int, int]:
    """(compressed bytes of the inner chunks the region touches, bytes of the indexes of
    the shards it touches), from the shard indexes."""
    from shardwise.io.reader import ArrayReader

    reader = ArrayReader.open(str(path), "v")
    rows = math.ceil(time_stop / geo.inner[0])  # rows of inner chunks along time touched
    per_shard = geo.inner_per_shard
    data = index = 0
    for shard in np.ndindex(*geo.shards_per_dim):
        local = min(max(rows - shard[0] * per_shard[0], 0), per_shard[0])
        if not local:
            continue
        table = reader.shard_index(shard)
        if table is None:
            continue
        table = np.asarray(table).reshape(*per_shard, 2)
        data += int(table[:local, ..., 1].sum())
        index += reader.decoder(shard).index.nbytes  # type: ignore[union-attr]
    return data, index


# -- part 1: a region with latency -------------------------------------------------------
@dataclass
class RegionResult:
    method: str
    dask_chunks: str = ""
    tasks: int = 0
    read_tasks: int = 0
    index_tasks: int = 0
    graph_keys: int = 0
    requests: int = 0  # GETs of one run (the check run)
    kinds: dict[str, int] = field(default_factory=dict)
    requested_bytes: int = 0
    metadata_requests: int = 0
    requests_per_run: list[int] = field(default_factory=list)
    check_seconds: float | None = None
    times: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.times)


def latency_store(path: Path, delay: float) -> Any:
    from zarr.storage import LocalStore

    from shardwise.testing import CountingStore, LatencyStore

    return CountingStore(LatencyStore(LocalStore(path, read_only=True), delay=delay))


def open_region_method(method: str, store: Any) -> Any:
    import xarray as xr

    import shardwise

    if method == "shardwise.open_dataset":
        return shardwise.open_dataset(store, consolidated=False)
    if method == "engine=shardwise":
        return xr.open_dataset(store, engine="shardwise", chunks={}, consolidated=False)
    if method == "xr.open_zarr default":
        return xr.open_zarr(store, consolidated=False)
    raise ValueError(method)


def measure_region(
    geo: Geometry, path: Path, time_stop: int, repeats: int, delay: float
) -> dict[str, Any]:
    import zarr
    from zarr.storage import LocalStore

    import shardwise

    info = store_summary(path, geo)
    touched, total = inner_chunks_touched(geo, time_stop)
    print(f"  {geo.describe()}")
    print(
        f"  {info['stored_bytes'] / 1e6:.1f} MB on disk, compression {info['ratio']:.2f}x, "
        f"inner codecs {' + '.join(info['inner_codecs'])}"
    )
    print(
        f"  region v.isel(time=slice(0, {time_stop})): {time_stop / geo.shape[0]:.1%} of the "
        f"values, {touched} of {total} inner chunks = {touched / total:.2%} "
        f"({touched // math.prod(geo.shards_per_dim)} of {math.prod(geo.inner_per_shard)} "
        f"in each of the {math.prod(geo.shards_per_dim)} shards)"
    )
    needed, index_bytes = touched_bytes(path, geo, time_stop)
    print(
        f"  the touched inner chunks hold {needed / 1e6:.2f} MB compressed; the indexes of "
        f"the shards touched {index_bytes / 1e6:.2f} MB"
    )
    expected = zarr.open_array(LocalStore(path, read_only=True), path="v", mode="r")[:time_stop]

    stores = {m: latency_store(path, delay) for m in PART1_METHODS}
    datasets = {m: open_region_method(m, stores[m]) for m in PART1_METHODS}
    results = {m: RegionResult(m) for m in PART1_METHODS}
    for m, ds in datasets.items():
        sel = ds.v.isel(time=slice(0, time_stop))
        results[m].dask_chunks = describe_chunks(ds.v.chunks)
        block = tuple(max(c) for c in ds.v.chunks)
        same = {geo.inner: " (= the inner chunks)", geo.shard: " (= the shards)"}.get(block, "")
        for k, v in graph_tasks(graph_kinds(sel.data)).items():
            setattr(results[m], k, v)
        print(
            f"  {m}: dask chunks {results[m].dask_chunks}{same} of the whole array; "
            f"the region's optimized graph has {results[m].tasks} tasks"
        )

    def run(m: str) -> tuple[float, np.ndarray]:
        shardwise.cache.clear_index_cache()
        stores[m].log.clear()
        sel = datasets[m].v.isel(time=slice(0, time_stop))
        return timed(lambda: sel.compute(scheduler="threads").values)

    sizes: dict[str, int] = {}
    for rnd in range(repeats + 1):  # round 0 checks the results and counts requests
        line = []
        for m in PART1_METHODS:
            seconds, out = run(m)
            r = results[m]
            log = stores[m].log
            data_gets = log.gets()
            r.requests_per_run.append(len(data_gets))
            if rnd == 0:
                np.testing.assert_array_equal(out, expected, err_msg=m)
                r.check_seconds = seconds
                r.requests = len(data_gets)
                r.kinds = dict(Counter(request_kind(q.byte_range) for q in data_gets))
                r.requested_bytes = sum(
                    request_bytes(path, q.key, q.byte_range, sizes) for q in data_gets
                )
                r.metadata_requests = len([q for q in log.gets("zarr.json")])
            else:
                r.times.append(seconds)
            line.append(f"{m} {seconds:.2f} s ({len(data_gets)} GETs)")
        print(f"    {'check' if rnd == 0 else f'round {rnd}'}: " + ", ".join(line))
    for ds in datasets.values():
        ds.close()
    for r in results.values():
        if len(set(r.requests_per_run)) > 1:
            print(f"  NOTE: {r.method} made {r.requests_per_run} requests in its runs")

    sw, oz = results["shardwise.open_dataset"], results["xr.open_zarr default"]
    summary = {
        "requests_open_zarr_over_shardwise": oz.requests / max(sw.requests, 1),
        "time_open_zarr_over_shardwise": oz.median / sw.median,
        "requests_open_zarr_over_engine": oz.requests
        / max(results["engine=shardwise"].requests, 1),
        "time_open_zarr_over_engine": oz.median / results["engine=shardwise"].median,
    }
    return {
        "geometry": asdict(geo),
        "store": info,
        "region_time_stop": time_stop,
        "inner_chunks_touched": touched,
        "inner_chunks_total": total,
        "touched_compressed_bytes": needed,
        "touched_index_bytes": index_bytes,
        "latency_s": delay,
        "threads": threaded_workers(),
        "results": {m: asdict(r) | {"median": r.median} for m, r in results.items()},
        "summary": summary,
        "_results": results,
    }


def threaded_workers() -> int:
    import dask

    return int(dask.config.get("num_workers", None) or os.cpu_count() or 1)


def print_region(part: dict[str, Any], repeats: int) -> None:
    results: dict[str, RegionResult] = part["_results"]
    print()
    print(
        f"Part 1: v.isel(time=slice(0, {part['region_time_stop']})) with "
        f"{part['latency_s'] * 1000:g} ms per request, threaded scheduler "
        f"({part['threads']} threads); requests of one cold run; median of {repeats} "
        "cold runs"
    )
    header = (
        f"{'method':<24}{'dask chunks':<22}{'tasks':>7}{'GETs':>7}{'whole':>7}{'range':>7}"
        f"{'suffix':>7}{'MB req':>8}{'median s':>10}{'min-max s':>13}"
    )
    print(header)
    print("-" * len(header))
    for m, r in results.items():
        spread = f"{min(r.times):.2f}-{max(r.times):.2f}"
        print(
            f"{m:<24}{r.dask_chunks:<22}{r.tasks:>7}{r.requests:>7}"
            f"{r.kinds.get('whole', 0):>7}{r.kinds.get('range', 0):>7}"
            f"{r.kinds.get('suffix', 0):>7}{r.requested_bytes / 1e6:>8.2f}"
            f"{r.median:>10.3f}{spread:>13}"
        )
        other = {k: v for k, v in r.kinds.items() if k not in ("whole", "range", "suffix")}
        if other or r.metadata_requests:
            print(f"{'':<24}also: {other or ''} metadata GETs {r.metadata_requests}")
    print("-" * len(header))
    sw = results["shardwise.open_dataset"]
    print(
        f"shardwise.open_dataset graph: {sw.index_tasks} index tasks, {sw.read_tasks} read "
        "tasks (key names holding shardwise-index / shardwise-read)"
    )
    s = part["summary"]
    touched = part["inner_chunks_touched"]
    oz = results["xr.open_zarr default"]
    print(
        f"xr.open_zarr: {oz.requests / touched:.2f} GETs per inner chunk touched "
        f"({oz.kinds.get('suffix', 0)} suffix = index reads, {oz.kinds.get('range', 0)} ranges, "
        f"{oz.kinds.get('whole', 0)} whole)"
    )
    print(
        f"bytes: the touched inner chunks hold {part['touched_compressed_bytes'] / 1e6:.2f} MB, "
        f"their shards' indexes {part['touched_index_bytes'] / 1e6:.2f} MB; coalesced "
        "ranges also carry the untouched inner chunks between touched ones"
    )
    print(
        f"xr.open_zarr / shardwise.open_dataset: {s['requests_open_zarr_over_shardwise']:.1f}x "
        f"the requests, {s['time_open_zarr_over_shardwise']:.1f}x the wall time"
    )
    print(
        f"xr.open_zarr / engine=shardwise:       {s['requests_open_zarr_over_engine']:.1f}x "
        f"the requests, {s['time_open_zarr_over_engine']:.1f}x the wall time"
    )
    print("targets (reported, not asserted):")
    for what, got, want in (
        ("requests", s["requests_open_zarr_over_shardwise"], TARGET_REQUESTS),
        ("wall time", s["time_open_zarr_over_shardwise"], TARGET_TIME),
    ):
        print(
            f"  shardwise.open_dataset >= {want:g}x fewer {what:<9} than xr.open_zarr: "
            f"{got:6.1f}x  {'met' if got >= want else 'MISSED'}"
        )


# -- part 2: one shard on a cluster ------------------------------------------------------
@dataclass
class ShardResult:
    method: str
    dask_chunks: str = ""
    tasks: int = 0
    read_tasks: int = 0
    index_tasks: int = 0
    graph_keys: int = 0
    warmup: float | None = None
    times: list[float] = field(default_factory=list)
    value: float | None = None
    # per timed run: worker label -> {"read": n, "index": n, "other": n}
    per_worker: list[dict[str, dict[str, int]]] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.times)


def count_by_worker(
    records: list[dict[str, Any]], labels: dict[str, str], kinds: dict[str, str]
) -> dict[str, dict[str, int]]:
    """Tasks of a task stream per worker, by :func:`task_kind`; the graph's aliases and
    data nodes (``kinds``, from :func:`graph_kinds`) are left out. Keys the client's own
    optimization renamed (the final ``finalize-`` fusions) are classified by name."""
    out = {lab: {"read": 0, "index": 0, "other": 0} for lab in labels.values()}
    for rec in records:
        key = str(rec.get("key", ""))
        kind = kinds.get(key) or task_kind(key)
        if kind in ("alias", "data"):
            continue
        worker = str(rec.get("worker", ""))
        c = out.setdefault(labels.get(worker, worker), {"read": 0, "index": 0, "other": 0})
        if kind == "other":
            c["other"] += 1
        else:
            c["read"] += "read" in kind
            c["index"] += "index" in kind
    return out


def _fmt_workers(counts: dict[str, dict[str, int]]) -> str:
    return ", ".join(
        f"{w}: {c['read']} read/{c['index']} index/{c['other']} other"
        for w, c in sorted(counts.items())
    )


def measure_shard(geo: Geometry, path: Path, repeats: int) -> dict[str, Any]:
    import dask.array as da
    import zarr
    from distributed import Client, LocalCluster, get_task_stream
    from zarr.storage import LocalStore

    import shardwise

    info = store_summary(path, geo)
    print(f"  {geo.describe()}")
    print(
        f"  {info['stored_bytes'] / 1e6:.1f} MB on disk, compression {info['ratio']:.2f}x, "
        f"inner codecs {' + '.join(info['inner_codecs'])}"
    )
    # the reference: zarr-python's read, summed in float64; a float32 sum may differ from
    # it by rounding, up to a small fraction of the sum of |v|
    whole = zarr.open_array(LocalStore(path, read_only=True), path="v", mode="r")[...]
    reference = float(np.sum(whole, dtype=np.float64))
    tolerance = 1e-5 * float(np.sum(np.abs(whole), dtype=np.float64))
    del whole
    ninner = math.prod(geo.inner_per_shard) * math.prod(geo.shards_per_dim)
    results = {m: ShardResult(m) for m in (*PART2_METHODS, FLOOR)}
    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        Client(cluster) as client,
    ):
        workers = sorted(client.scheduler_info()["workers"])
        labels = {addr: f"w{i}" for i, addr in enumerate(workers)}
        print(
            "  cluster: LocalCluster, 2 worker processes x 1 thread: "
            + ", ".join(f"{lab} = {addr}" for addr, lab in labels.items())
        )
        meter = CpuMeter()
        datasets = {
            m: shardwise.open_dataset(str(path), chunks=part2_chunks(m), consolidated=False)
            for m in PART2_METHODS
        }
        sums = {m: ds.v.sum(skipna=False).data for m, ds in datasets.items()}
        floor = da.zeros(ninner, chunks=1, dtype=np.float32)
        sums[FLOOR] = floor.sum()
        kinds = {}
        for m, total in sums.items():
            r = results[m]
            r.dask_chunks = describe_chunks(datasets[m].v.chunks if m in datasets else floor.chunks)
            kinds[m] = graph_kinds(total)
            for k, v in graph_tasks(kinds[m]).items():
                setattr(r, k, v)
            what = f"chunks={m!r}" if m in datasets else f"floor (da.zeros({ninner}, chunks=1))"
            print(
                f"  {what}: dask chunks {r.dask_chunks}; optimized graph of the sum: "
                f"{r.tasks} tasks, {r.read_tasks} read, {r.index_tasks} index"
            )

        def run(m: str) -> tuple[float, Any, list[dict[str, Any]]]:
            client.run(shardwise.cache.clear_index_cache)
            shardwise.cache.clear_index_cache()
            with get_task_stream(client) as ts:
                seconds, out = timed(lambda: float(sums[m].compute()))
            return seconds, out, list(ts.data)

        for rnd in range(repeats + 1):  # round 0 is the warm-up
            line = []
            for m in results:
                seconds, value, records = run(m)
                r = results[m]
                r.value = value
                if rnd:
                    r.times.append(seconds)
                    counts = count_by_worker(records, labels, kinds[m])
                    r.per_worker.append(counts)
                    line.append(f"{m} {seconds:.2f} s [{_fmt_workers(counts)}]")
                else:
                    r.warmup = seconds
                    line.append(f"{m} {seconds:.2f} s")
            print(f"    {'warm-up' if rnd == 0 else f'round {rnd}'}: " + "; ".join(line))
        cpu = meter.stop()
        for ds in datasets.values():
            ds.close()
    wrong = {
        m: r.value
        for m, r in results.items()
        if m != FLOOR and (r.value is None or abs(r.value - reference) > tolerance)
    }
    if wrong:
        print(f"  WARNING: sums differ from zarr-python's {reference:.6g}: {wrong}")
    else:
        print(f"  every sum matches zarr-python's ({reference:.6g}) within 1e-5 of sum(|v|)")
    base = results["shards"].median
    summary = {f"speedup_{m}_over_shards": base / results[m].median for m in PART2_METHODS[1:]}
    return {
        "geometry": asdict(geo),
        "store": info,
        "workers": labels,
        "reference_sum": reference,
        "sums_ok": not wrong,
        "results": {m: asdict(r) | {"median": r.median} for m, r in results.items()},
        "summary": summary,
        "cpu": cpu,
        "_results": results,
    }


def print_shard(part: dict[str, Any], repeats: int) -> None:
    results: dict[str, ShardResult] = part["_results"]
    geo = Geometry(**part["geometry"])
    print()
    print(
        f"Part 2: v.sum(skipna=False) of one {geo.nbytes / 2**20:.0f} MiB shard of "
        f"{math.prod(geo.inner_per_shard)} inner chunks, LocalCluster 2 workers x 1 thread; "
        f"median of {repeats} runs after one warm-up"
    )
    header = (
        f"{'chunks':<10}{'dask chunks':<20}{'tasks':>7}{'read':>6}{'index':>7}"
        f"{'median s':>10}{'min-max s':>13}{'GB/s':>7}{'speedup':>9}"
        "   shardwise tasks per worker (last run)"
    )
    print(header)
    print("-" * len(header))
    base = results["shards"].median
    for m, r in results.items():
        spread = f"{min(r.times):.2f}-{max(r.times):.2f}"
        last = r.per_worker[-1] if r.per_worker else {}
        if m == FLOOR:
            per = ", ".join(f"{w}: {c['other']} tasks" for w, c in sorted(last.items()))
            rate, speedup = f"{'-':>7}", f"{'-':>9}"
        else:
            per = ", ".join(
                f"{w}: {c['read']} read + {c['index']} index" for w, c in sorted(last.items())
            )
            rate, speedup = f"{geo.nbytes / r.median / 1e9:>7.2f}", f"{base / r.median:>8.2f}x"
        print(
            f"{m if m == FLOOR else repr(m):<10}{r.dask_chunks:<20}{r.tasks:>7}"
            f"{r.read_tasks:>6}{r.index_tasks:>7}{r.median:>10.3f}{spread:>13}{rate}{speedup}"
            f"   {per}"
        )
    print("-" * len(header))
    print(
        f"floor = da.zeros({results[FLOOR].dask_chunks.split()[0]}, chunks=1).sum(): what "
        "scheduling as many chunk tasks costs on this cluster, with no data"
    )
    for m in PART2_METHODS[1:]:
        print(
            f'chunks="{m}" is {part["summary"][f"speedup_{m}_over_shards"]:.2f}x as fast as '
            'chunks="shards"'
        )


# -- main --------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=None, help="timed runs per method (5)")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a smoke run: small stores (cached separately), 1 repeat",
    )
    parser.add_argument(
        "--latency", type=float, default=LATENCY, help="part 1 seconds per request (0.02)"
    )
    parser.add_argument("--skip-part1", action="store_true", help="run part 2 only")
    parser.add_argument("--skip-part2", action="store_true", help="run part 1 only")
    args = parser.parse_args(argv)
    repeats = args.repeats if args.repeats is not None else (1 if args.quick else 5)
    if repeats < 1:
        parser.error("--repeats must be >= 1")

    started = time.perf_counter()
    info = machine()
    print("machine: " + ", ".join(f"{k} {v}" for k, v in info.items()))
    geo1, stop = (PART1_QUICK, PART1_QUICK_TIME) if args.quick else (PART1, PART1_TIME)
    geo2 = PART2_QUICK if args.quick else PART2
    print(f"data in {DATA_DIR}:")
    paths = {
        geo: ensure_store(geo)
        for geo, skip in ((geo1, args.skip_part1), (geo2, args.skip_part2))
        if not skip
    }
    part1 = part2 = None
    cpu1 = None
    if not args.skip_part1:
        print("part 1: region read with latency")
        meter = CpuMeter()
        part1 = measure_region(geo1, paths[geo1], stop, repeats, args.latency)
        cpu1 = meter.stop()
    if not args.skip_part2:
        print("part 2: one shard on a 2-worker LocalCluster")
        part2 = measure_shard(geo2, paths[geo2], repeats)

    if part1 is not None:
        print_region(part1, repeats)
        print_cpu(cpu1)
    if part2 is not None:
        print_shard(part2, repeats)
        print_cpu(part2["cpu"])
    elapsed = time.perf_counter() - started
    print(f"total time {elapsed:.0f} s")


if __name__ == "__main__":
    main()
