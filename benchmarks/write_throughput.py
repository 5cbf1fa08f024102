"""Write throughput and worker memory of ``shardwise.to_zarr`` against ``Dataset.to_zarr``,
zarr-python, tensorstore and zstd itself.

What it measures
----------------
The float32 variable ``v`` of ``read_throughput.py`` (a smooth sum of sines plus small
noise, rounded to 2 decimals, so that zstd level 1 compresses it about 3x; the
generators are imported from there), written to Zarr v3 under ``benchmarks/data/`` with
zstd level 1 (``zarr.codecs.ZstdCodec(level=1)``), in the data shapes of ``--shape
2d|3d|both`` (default both):

  2-D   ~1 GiB (``--size-mib``), dims ("y", "x"), shards of 4096 x 4096 (64 MiB), inner
        chunks of 512 x 512 (1 MiB) and of 128 x 128 (64 KiB)
  3-D   512 x 512 x 512 (512 MiB; ``--size-3d`` is the edge), dims ("z", "y", "x"),
        shards of 256 x 256 x 256 (64 MiB), inner chunks of 64 x 64 x 64 (1 MiB) and of
        16 x 32 x 32 (64 KiB)

Part 1, for every shape and inner chunk size, in three groups, in this order:

1. The FLOOR, in this process, before the cluster starts (the array is computed here
   first): the codec work alone. Every inner chunk, already a C-contiguous numpy array,
   is compressed at zstd level 1 on a ``ThreadPoolExecutor(2)``, one work item per
   shard: no I/O, no copy, no shard assembly. Three compressors, all reported; the floor
   is the FASTEST of them (named in the table):

     compress: numcodecs.Zstd            numcodecs.Zstd(level=1).encode(chunk)
     compress: zstandard.ZstdCompressor  python-zstandard, one
                                         ZstdCompressor(level=1, write_content_size=True)
                                         per thread
     compress: ZSTD_compress2 (cffi)     libzstd's ZSTD_compress2 through
                                         python-zstandard's cffi binding, one ZSTD_CCtx
                                         and ONE reused output buffer per thread

2. Single-process REFERENCE peers, interleaved with the floor, also before the cluster
   starts: the numpy array written into a fresh sharded array with the same shards,
   inner chunks and codecs, in this one process, without dask, on the library's own
   threads (the time includes creating the store):

     zarr-python fused     zarr.open_group(path, mode="w").create_array("v", chunks=...,
                           shards=..., compressors=ZstdCodec(level=1))[...] = array, under
                           zarr.config.set({"codec_pipeline.path":
                           "zarr.core.codec_pipeline.FusedCodecPipeline"}) (skipped, with
                           a note, when the installed zarr has no such class)
     zarr-python default   the same with zarr's default codec pipeline
     tensorstore           tensorstore's zarr3 driver with the sharding_indexed codec (same
                           shards, inner chunks, bytes + zstd level 1, crc32c index at the
                           end), one ts.open(...).result().write(array).result()

3. On a ``distributed.LocalCluster`` of 2 single-threaded worker processes, with ``v``
   persisted in the workers' memory first, in dask chunks = shards:

     shardwise        shardwise.to_zarr(ds, path, mode="w", consolidated=False,
                      encoding={"v": {"shards": ..., "chunks": ..., "compressors": ...}})
     xarray           ds.to_zarr(path, mode="w", consolidated=False, zarr_format=3,
                      encoding=<the same>)       zarr-python writes, one task per shard

Part 2 (2-D only, whatever ``--shape``): dask chunks of 16 MiB (2048 x 2048) into shards
of 512 MiB (``--part2-shard-mib``) with 1 MiB inner chunks, so 32 dask chunks share each
shard:

  shardwise               shardwise.to_zarr(...) as above: never rechunks, one task per
                          shard gathers the encoded inner chunks of its 32 dask chunks
  xarray align_chunks     ds.to_zarr(..., align_chunks=True): xarray rechunks the dask
                          array to whole shards first, so each task holds a shard

For the cluster's writes, besides the time, the peak memory of the workers during the
write is measured two ways: distributed's ``MemorySampler`` (the scheduler's sum of the
workers' process memory, sampled from their heartbeats, so peaks shorter than ~0.5 s can
be missed), and each worker's own peak RSS (``VmHWM`` in ``/proc/self/status``, reset
before every write through ``/proc/self/clear_refs``; exact, Linux only). Both are
reported as growth over the memory before the write (which holds the persisted data);
before every write the workers run ``gc.collect()`` and ``malloc_trim(0)``.

Throughput is uncompressed bytes / wall time (GB = 1e9 bytes); the time includes
creating the store's metadata. Every method runs once as a warm-up, then is timed: the
floor and the references 3 times, reported by their BEST run (the floor is the best of
3 of the fastest compressor), the cluster's writes ``--repeats`` times, reported by
their median (memory: the largest peak of the timed runs); each group interleaved round
by round. For every method the tables give the median and min-max over its timed runs,
GB/s and the ratio to the floor (floor time / method time, both from the figure in the
"runs" column). Each store is deleted after its run, outside the timed region. Writes go
to the OS page cache: nothing calls fsync, for any method. The output of shardwise and
of every reference peer is checked once, outside the timing (after its warm-up):
metadata as requested, and every shard read back with zarr-python equal to the input
(the array computed in this process, so the check also covers the workers' copy).

The project's goals (reported here, never asserted): shardwise reaches >=
0.85 of the floor with 1 MiB inner chunks and >= 0.8 with 64 KiB ones, and is >= 1.3x
faster than ``ds.to_zarr``, in both shapes; in part 2 its peak worker memory is <= half
of xarray's with ``align_chunks=True``.

As with the read benchmark: run it on an otherwise idle machine (at the end the script
reports how much CPU other processes took meanwhile). The floor and the references run
in one process with both cores to themselves; the cluster's writes share the cores with
the scheduler and nanny processes and run in workers that distributed's nanny starts
with ``MALLOC_TRIM_THRESHOLD_=65536``.

How to run
----------
    .venv/bin/python benchmarks/write_throughput.py                       # ~1 GiB, 5 repeats
    .venv/bin/python benchmarks/write_throughput.py --shape 2d
    .venv/bin/python benchmarks/write_throughput.py --size-mib 128 --size-3d 256 \\
        --repeats 1 --part2-size-mib 256 --part2-shard-mib 128           # quick check

Memory: the client process holds the part 1 arrays (1.5 GiB with both shapes), the inner
chunks of one configuration for the floor (another copy) and, in part 2, that array; the
workers the persisted array plus what the writes need; a default run needs about 6 GiB
of RAM, and ~0.7 GB of free disk.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import re
import shutil
import statistics
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

# run as a script, this directory is on sys.path: the data, the machine description,
# the CPU meter and the floors the read benchmark uses too
from common import (
    COMPRESSORS,
    DATA_DIR,
    FLOOR_RUNS,
    MIB,
    CompressFloor,
    CpuMeter,
    Field,
    Memory,
    field_2d,
    have_tensorstore,
    inner_chunks,
    interleaved,
    machine,
    memory_probe,
    package_versions,
    print_cpu,
    selected_fields,
    shard_slices,
    stored_bytes,
    tensorstore_kvstore,
    timed,
    write_group_metadata,
    zarr_pipeline,
    zarr_pipelines,
)

PART1_METHODS = ("shardwise", "xarray")  # on the cluster; the floors and peers run here
PART2_METHODS = ("shardwise", "xarray align_chunks")
PART2_DASK = (2048, 2048)  # 16 MiB of float32
PART2_INNER = (512, 512)  # 1 MiB
TILE = 512  # shards are built from 512 x 512 tiles (1 MiB of float32)
TARGETS = {"1 MiB": 0.85, "64 KiB": 0.8}  # shardwise / floor, in both shapes
TARGET_VS_XARRAY = 1.3  # shardwise speed-up over ds.to_zarr, part 1
TARGET_MEMORY = 0.5  # part 2: shardwise peak / xarray align_chunks peak


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


def persisted_dataset(client: Any, fld: Field, chunks: tuple[int, ...]) -> Any:
    """The dataset with ``v`` of ``fld`` computed into the cluster's memory in dask
    chunks ``chunks``."""
    import xarray as xr
    from distributed import futures_of, wait

    data = fld.make(fld.shape)
    if chunks != fld.shard:
        data = data.rechunk(chunks)
    ds = xr.Dataset({"v": (fld.dims, data)}).persist()
    wait(ds)
    where = client.who_has(futures_of(ds))
    per_worker = [
        sum(w in ws for ws in where.values()) for w in sorted(client.scheduler_info()["workers"])
    ]
    print(f"  persisted {describe_chunks(ds.v.chunks)} blocks, per worker: {per_worker}")
    return ds


def encoding(shard: tuple[int, ...], inner: tuple[int, ...]) -> dict[str, Any]:
    import zarr

    return {"v": {"shards": shard, "chunks": inner, "compressors": zarr.codecs.ZstdCodec(level=1)}}


def _zarr_write(
    path: Path, arr: np.ndarray, fld: Field, inner: tuple[int, ...], pipeline: str | None
) -> None:
    import zarr

    with zarr_pipeline(pipeline):
        group = zarr.open_group(path, mode="w", zarr_format=3)
        z = group.create_array(
            "v",
            shape=arr.shape,
            dtype=arr.dtype,
            chunks=inner,
            shards=fld.shard,
            compressors=zarr.codecs.ZstdCodec(level=1),
            dimension_names=fld.dims,
        )
        z[...] = arr


def tensorstore_spec(path: Path, fld: Field, inner: tuple[int, ...]) -> dict[str, Any]:
    """Create ``path``/v with tensorstore's zarr3 driver: ``fld``'s shards, ``inner``
    chunks, bytes + zstd level 1 inside, a crc32c-checked index at the end (what
    zarr-python writes)."""
    little = {"name": "bytes", "configuration": {"endian": "little"}}
    sharding = {
        "chunk_shape": list(inner),
        "codecs": [little, {"name": "zstd", "configuration": {"level": 1, "checksum": False}}],
        "index_codecs": [little, {"name": "crc32c"}],
        "index_location": "end",
    }
    return {
        "driver": "zarr3",
        "kvstore": tensorstore_kvstore(path / "v"),
        "metadata": {
            "shape": list(fld.shape),
            "data_type": "float32",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(fld.shard)}},
            "chunk_key_encoding": {"name": "default"},
            "fill_value": 0.0,
            "codecs": [{"name": "sharding_indexed", "configuration": sharding}],
            "dimension_names": list(fld.dims),
        },
        "create": True,
        "delete_existing": True,
    }


def _tensorstore_write(path: Path, arr: np.ndarray, fld: Field, inner: tuple[int, ...]) -> None:
    import tensorstore as ts

    write_group_metadata(path)
    ts.open(tensorstore_spec(path, fld, inner)).result().write(arr).result()


# -- checking the output -----------------------------------------------------------------
def verify(
    path: Path,
    arr: Any,
    shard: tuple[int, ...],
    inner: tuple[int, ...],
    dims: tuple[str, ...] = ("y", "x"),
) -> None:
    """Raise SystemExit unless ``path`` holds ``arr`` with the requested layout."""
    import xarray as xr
    import zarr
    from zarr.codecs import ZstdCodec

    with xr.open_zarr(path, consolidated=False) as back:
        found = (tuple(back.v.dims), back.v.shape, back.v.dtype)
    if found != (dims, arr.shape, arr.dtype):
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


def check_layout(path: Path, shard: tuple[int, ...], inner: tuple[int, ...]) -> None:
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
    stored_bytes: int | None = None  # on disk (shards and metadata); floors: zstd frames
    nbytes: int = 0  # uncompressed
    best: bool = False  # reported by the best (min) run, else by the median
    inner: str = ""  # the inner chunk size's label
    floor: bool = False  # the fastest compressor: the floor

    @property
    def median(self) -> float:
        return statistics.median(self.times)

    @property
    def headline(self) -> float:
        return min(self.times) if self.best else self.median

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
    shard: tuple[int, ...],
    inner: tuple[int, ...],
    methods: tuple[str, ...],
    repeats: int,
    label: str = "",
) -> dict[str, Result]:
    """On the cluster: warm up every method, check shardwise's output, then time
    ``repeats`` rounds."""
    nbytes = arr.nbytes
    dims = tuple(ds.v.dims)
    enc = encoding(shard, inner)
    results = {
        m: Result(part, config, m, describe_chunks(ds.v.chunks), nbytes=nbytes, inner=label)
        for m in methods
    }
    if "xarray align_chunks" in results:
        r = results["xarray align_chunks"]
        r.dask_chunks += " -> " + xarray_aligned(ds.v.chunks, shard)
    runs: dict[str, Callable[[], Any]] = {}
    paths: dict[str, Path] = {}
    for m in methods:
        slug = m.replace(" ", "-")
        paths[m] = DATA_DIR / f"write-{part}-{config.replace(' ', '')}-{slug}.zarr"
        runs[m] = write_method(m, ds, paths[m], enc)
        shutil.rmtree(paths[m], ignore_errors=True)

    for rnd in range(repeats + 1):  # round 0 is the warm-up
        times = []
        for m, run in runs.items():
            r = results[m]
            memory: list[Memory] = []
            try:
                with memory_probe(client, f"{part} {config} {m} {rnd}", memory):
                    seconds, _ = timed(run)
                r.stored_bytes = stored_bytes(paths[m])
                check_layout(paths[m], shard, inner)
                if rnd == 0 and m == "shardwise":
                    t0 = time.perf_counter()
                    verify(paths[m], arr, shard, inner, dims)
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


def measure_local(
    part: str, config: str, fld: Field, label: str, arr: np.ndarray
) -> dict[str, Result]:
    """In this process, no cluster: the three compressors of the floor and the
    single-process peers, warmed up, then ``FLOOR_RUNS`` interleaved rounds; checks the
    peers' output once. The fastest compressor is marked as the floor."""
    inner = fld.inner[label]
    chunks = inner_chunks(arr, fld.shard, inner)
    nchunks = sum(map(len, chunks))
    runs: dict[str, Callable[[], Any]] = {}
    paths: dict[str, Path] = {}
    results: dict[str, Result] = {}

    def add(method: str, run: Callable[[], Any], dask_chunks: str) -> None:
        runs[method] = run
        results[method] = Result(
            part, config, method, dask_chunks, nbytes=arr.nbytes, best=True, inner=label
        )

    for m, pipeline in zarr_pipelines().items():
        paths[m] = DATA_DIR / f"write-{part}-{config.replace(' ', '')}-{m.replace(' ', '-')}.zarr"
        add(
            m,
            lambda p=paths[m], pl=pipeline: _zarr_write(p, arr, fld, inner, pl),
            "1 process, no dask",
        )
    if have_tensorstore():
        paths["tensorstore"] = DATA_DIR / f"write-{part}-{config.replace(' ', '')}-ts.zarr"
        add(
            "tensorstore",
            lambda: _tensorstore_write(paths["tensorstore"], arr, fld, inner),
            "1 process, no dask",
        )

    def before(m: str) -> None:
        if m in paths:
            shutil.rmtree(paths[m], ignore_errors=True)

    def after(m: str, rnd: int, out: Any) -> None:
        r = results[m]
        if m not in paths:
            r.stored_bytes = out
            return
        try:
            r.stored_bytes = stored_bytes(paths[m])
            check_layout(paths[m], fld.shard, inner)
            if rnd == 0:
                t0 = time.perf_counter()
                verify(paths[m], arr, fld.shard, inner, fld.dims)
                print(
                    f"    checked {m} output: equal to the input ({time.perf_counter() - t0:.0f} s)"
                )
        finally:
            shutil.rmtree(paths[m], ignore_errors=True)

    with ThreadPoolExecutor(2) as pool:
        for how in COMPRESSORS:
            floor = CompressFloor(how, math.prod(inner) * arr.itemsize)
            add(f"compress: {how}", lambda f=floor: f(chunks, pool), f"{nchunks} chunks, 2 threads")
        times = interleaved(runs, FLOOR_RUNS, before=before, after=after, nbytes=arr.nbytes)
    for m, ts in times.items():
        results[m].warmup, results[m].times = ts[0], ts[1:]
    fastest = min(COMPRESSORS, key=lambda how: results[f"compress: {how}"].headline)
    results[f"compress: {fastest}"].floor = True
    return results


# -- reporting ---------------------------------------------------------------------------
def _mib(n: int | None) -> str:
    return "-" if n is None else f"{n / MIB:.0f}"


def _verdict(ok: bool) -> str:
    return "met" if ok else "**MISSED**"


def _floor(by_method: dict[str, Result]) -> Result | None:
    return next((r for r in by_method.values() if r.floor), None)


def print_report(
    results: dict[str, dict[str, Result]],
    tables: dict[str, list[str]],
    repeats: int,
) -> dict[str, Any]:
    """Print the markdown tables (``tables``: header -> the keys of its rows) and the
    targets; return the summary."""
    print()
    print(
        f"The cluster's writes: median of {repeats} timed runs, the floor and the "
        f"single-process peers: best of {FLOOR_RUNS}, each after one warm-up; GB/s = 1e9 "
        "uncompressed bytes / s and vs floor use the figure in 'runs'; memory = largest "
        "peak over the timed runs, growth over the memory before the write (MemorySampler: "
        "the 2 workers together; RSS: the larger worker)."
    )
    summary: dict[str, Any] = {}
    for header, keys in tables.items():
        print()
        print(header)
        print()
        print(
            "| config | method | dask chunks | runs | median s | min-max s | GB/s | vs floor "
            "| MemorySampler +MiB | worker RSS +MiB | worker peak RSS MiB | stored MB |"
        )
        print("|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        notes: list[str] = []
        for key in keys:
            by_method = results[key]
            floor = _floor(by_method)
            for m, r in by_method.items():
                vs = "-" if floor is None else f"{floor.headline / r.headline:.2f}"
                stored = "-" if r.stored_bytes is None else f"{r.stored_bytes / 1e6:.0f}"
                name = f"**{m} = floor**" if r.floor else m
                print(
                    f"| {r.config} | {name} | {r.dask_chunks} "
                    f"| {'best' if r.best else 'median'} {len(r.times)} | {r.median:.3f} "
                    f"| {min(r.times):.2f}-{max(r.times):.2f} "
                    f"| {r.nbytes / r.headline / 1e9:.2f} | {vs} "
                    f"| {_mib(r.peak('cluster_delta'))} | {_mib(r.peak('worker_delta'))} "
                    f"| {_mib(r.peak('worker_peak'))} | {stored} |"
                )
            sw = by_method["shardwise"]
            other = next(r for m, r in by_method.items() if m.startswith("xarray"))
            s: dict[str, Any] = {
                "shardwise_vs_" + other.method.replace(" ", "_"): other.median / sw.median
            }
            if floor is not None:
                s["inner"] = sw.inner
                s["floor_method"] = floor.method.removeprefix("compress: ")
                s["floor_gb_per_s"] = floor.nbytes / floor.headline / 1e9
                s["shardwise_vs_floor"] = floor.headline / sw.median
                for m, r in by_method.items():
                    if r.best:
                        name = re.sub(r"\W+", "_", m.removeprefix("compress: ")).strip("_")
                        s[f"{name.lower()}_vs_floor"] = floor.headline / r.headline
            for name in ("cluster_delta", "worker_delta"):
                a, b = sw.peak(name), other.peak(name)
                s[f"memory_{name}_shardwise_vs_xarray"] = None if a is None or not b else a / b
            summary[key] = s
            if floor is not None:
                notes.append(
                    f"{sw.config}: the floor is the fastest compressor, {s['floor_method']}; "
                    f"shardwise reaches {s['shardwise_vs_floor']:.2f} of it and is "
                    f"{s['shardwise_vs_xarray']:.2f}x ds.to_zarr"
                )
        if notes:
            print()
            print("\n".join(notes))

    print()
    print("Goals (reported, not asserted):")
    print()
    print("| target | measured | |")
    print("|---|---:|---|")
    for key, s in summary.items():
        config = results[key]["shardwise"].config
        if "shardwise_vs_floor" in s:
            got, want = s["shardwise_vs_floor"], TARGETS[s["inner"]]
            print(
                f"| shardwise >= {want} x floor, {config} | {got:.2f} | {_verdict(got >= want)} |"
            )
    for key, s in summary.items():
        config = results[key]["shardwise"].config
        if "shardwise_vs_xarray" in s:
            got = s["shardwise_vs_xarray"]
            print(
                f"| shardwise >= {TARGET_VS_XARRAY}x ds.to_zarr, {config} | {got:.2f}x "
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
        "--shape", choices=("2d", "3d", "both"), default="both", help="part 1 data shapes (both)"
    )
    parser.add_argument(
        "--size-mib", type=int, default=1024, help="part 1 2-D array size (default 1024)"
    )
    parser.add_argument(
        "--size-3d", type=int, default=512, help="part 1 3-D array edge, a multiple of 256 (512)"
    )
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per cluster method")
    parser.add_argument(
        "--part2-size-mib", type=int, default=1024, help="part 2 array size (default 1024)"
    )
    parser.add_argument(
        "--part2-shard-mib", type=int, default=512, help="part 2 shard size (default 512)"
    )
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be >= 1")
    fields = selected_fields(args.shape, args.size_mib, args.size_3d)
    shape2, shard2 = part2_shapes(args.part2_size_mib, args.part2_shard_mib)
    field2 = field_2d(shape2)

    from distributed import Client, LocalCluster

    started = time.perf_counter()
    info = machine() | package_versions("zstandard", "tensorstore")
    print("machine: " + ", ".join(f"{k} {v}" for k, v in info.items()))
    header = {
        f"part1 {fld.name}": f"Part 1, {fld.name}: v{fld.shape} float32 "
        f"({fld.nbytes / MIB:.0f} MiB), dims {fld.dims}, dask chunks = shards of "
        f"{math.prod(fld.shard) * 4 // MIB} MiB {fld.shard}, zstd level 1"
        for fld in fields
    }
    header["part2"] = (
        f"Part 2: v{shape2} float32 ({field2.nbytes / MIB:.0f} MiB), dask chunks "
        f"{PART2_DASK}, shards of {args.part2_shard_mib} MiB {shard2}, inner chunks "
        f"{PART2_INNER}, zstd level 1"
    )
    tables: dict[str, list[str]] = {}
    DATA_DIR.mkdir(parents=True, exist_ok=True)

    results: dict[str, dict[str, Result]] = {}
    arrays: dict[str, np.ndarray] = {}
    meter = CpuMeter()
    print("Part 1, the floor and the single-process peers in this process, before the cluster")
    for fld in fields:
        print(header[f"part1 {fld.name}"])
        t0 = time.perf_counter()
        arrays[fld.name] = arr = fld.make(fld.shape).compute()
        print(f"  computed the array in this process ({time.perf_counter() - t0:.0f} s)")
        tables[header[f"part1 {fld.name}"]] = []
        for label, inner in fld.inner.items():
            print(f"  inner {label} {inner}")
            key = f"part1 {fld.name} {label}"
            tables[header[f"part1 {fld.name}"]].append(key)
            results[key] = measure_local("part1", f"{fld.name} {label}", fld, label, arr)
        del arr
    tables[header["part2"]] = ["part2"]

    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        Client(cluster) as client,
    ):
        print("cluster: LocalCluster, 2 worker processes x 1 thread")
        for fld in fields:
            print(header[f"part1 {fld.name}"])
            ds = persisted_dataset(client, fld, fld.shard)
            arr = arrays.pop(fld.name)
            for label, inner in fld.inner.items():
                print(f"  inner {label} {inner}")
                key = f"part1 {fld.name} {label}"
                config = f"{fld.name} {label}"
                on_cluster = measure(
                    client,
                    "part1",
                    config,
                    ds,
                    arr,
                    fld.shard,
                    inner,
                    PART1_METHODS,
                    args.repeats,
                    label,
                )
                results[key] = on_cluster | results[key]
            del ds, arr

        print(header["part2"])
        ds = persisted_dataset(client, field2, PART2_DASK)
        arr = ds.v.values
        label = f"{args.part2_shard_mib} MiB shards"
        results["part2"] = measure(
            client, "part2", label, ds, arr, shard2, PART2_INNER, PART2_METHODS, args.repeats
        )
        del ds, arr
        cpu = meter.stop()

    print_report(results, tables, args.repeats)
    print()
    print_cpu(cpu)
    elapsed = time.perf_counter() - started
    print(f"total time {elapsed:.0f} s")


if __name__ == "__main__":
    main()
