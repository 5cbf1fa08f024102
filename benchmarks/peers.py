"""shardwise against the fastest peers: whole-array reads and read-then-write
round trips, side by side with zarr-python, zarr-python under zarrs' Rust codec
pipeline, tensorstore and the codec floor.

DATA (``--data``, comma-separated; each an array ``v`` in a Zarr v3 group, written once
and kept under ``benchmarks/data/``):

  u2-3d   the workload of zarrs' published benchmarks (zarrs/zarr_benchmarks,
          generate_benchmark_array.rs): uint16, ``--edge`` x 1024 x 1024 (default 1024:
          2 GiB), values ``(x + y*y/32 + z**3) % 65536``, shards of 256**3 (32 MiB),
          inner chunks of 64**3, zstd level 3 (zarrs' level 0), written by zarr-python
  f4-2d   read_throughput.py's 2-D float32 field (1 GiB, 64 MiB shards of 4096**2, inner
          chunks of 128**2 = 64 KiB, zstd level 1)
  f4-3d   read_throughput.py's 3-D float32 field (512**3 = 512 MiB, 64 MiB shards of
          256**3, inner chunks of 64**3 = 1 MiB, zstd level 1)

JOBS (``--jobs``): ``read`` the whole array into memory; ``roundtrip`` read it and write
it again with the same layout and codecs, every chunk decoded and re-encoded (no bytes
passed through), into a fresh store under ``benchmarks/data/``.

METHODS, each in a FRESH PROCESS per run (nothing reused between runs: caches, threads,
clusters), a warm-up then one timed run inside the process (opening included; Python's
start, imports and a cluster's start are not), rounds interleaved across methods:

  read
    floor                  the codec work alone: every compressed inner chunk already in
                           memory, decoded into one reused buffer per thread, on every
                           core, by the faster of numcodecs' Zstd and libzstd with a
                           context per thread (python-zstandard's cffi binding); no
                           I/O, no copy, no output
    decode + place         the floor, each decoded chunk then copied into its place in a
                           fresh output array: the least work a read into new memory does
    shardwise              shardwise.ArrayReader.open(path, "v")[...] (every core)
    shardwise 1 thread     the same with ReadOptions(threads=1)
    shardwise xarray       xr.open_dataset(path, engine="shardwise").v.values (no chunks)
    shardwise dask         shardwise.array.from_zarr(path, "v").compute() (dask's threads)
    shardwise xarray dask  xr.open_dataset(..., engine="shardwise", chunks={}).v.values
    shardwise cluster      shardwise.array.from_zarr(path, "v").persist() on a LocalCluster of
                           2 worker processes x 1 thread: read into the workers' memory
                           (not sent to the client)
    zarr-python            zarr.open_array(path, path="v")[...]
    zarrs                  the same under zarrs' ZarrsCodecPipeline, configured as zarrs'
                           own benchmark configures it
    zarrs defaults         the same with the pipeline's default settings
    tensorstore            tensorstore's zarr3 driver, .read().result()
  roundtrip
    floor                  every chunk decoded and re-encoded (ZSTD_compress2 into a
                           reused buffer per thread, the store's level), every core
    shardwise dask         shardwise.array.to_zarr(shardwise.array.from_zarr(src, "v"), dst,
                           same shards, chunks and compressor) on dask's threads
    shardwise dask via values
                           the same with an identity map_blocks between read and write:
                           each task then holds its block of values (the path of any
                           computation)
    shardwise cluster      the same on a LocalCluster of 2 worker processes x 1 thread
    zarrs                  zarr-python under zarrs' pipeline: out[...] = src[...], as
                           zarrs' own round-trip benchmark does
    zarrs defaults         the same with the pipeline's default settings
    tensorstore            tensorstore, shard by shard in transactions of as many shards
                           as cores, as zarrs' benchmark runs it
    zarr-python            out[...] = src[...] with zarr-python's default pipeline

Every result is checked: a read's CRC-32C, shape and dtype against the source's
(computed once, with zarr-python); a round trip's output read back with tensorstore (or
zarr-python) and its metadata compared. A wrong result stops the run. The table gives
medians (min-max), the ratio to the floor and to the best peer, and the CPU other
processes took during each timed run (from /proc/stat, less the run's own).

These machines are virtual machines with free page reporting: memory a process frees
goes back to the host, and touching it again costs about 2 s per GiB instead of 0.1.
Each child therefore touches memory of the output's size just before its timed run
(``prefault``), so that every method meets memory as on an ordinary machine; the
report says how many page faults each timed run took.

    python benchmarks/peers.py [--data u2-3d,f4-2d,f4-3d] [--jobs read,roundtrip]
                               [--runs 5] [--methods a,b,...] [--edge 1024]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from common import DATA_DIR  # noqa: E402

DATA = DATA_DIR

READ_METHODS = (
    "floor",
    "decode + place",
    "shardwise",
    "shardwise 1 thread",
    "shardwise xarray",
    "shardwise dask",
    "shardwise xarray dask",
    "shardwise cluster",
    "zarr-python",
    "zarrs",
    "zarrs defaults",
    "tensorstore",
)
ROUNDTRIP_METHODS = (
    "floor",
    "shardwise dask",
    "shardwise dask via values",
    "shardwise cluster",
    "zarrs",
    "zarrs defaults",
    "tensorstore",
    "zarr-python",
)
PEERS = ("zarrs", "zarrs defaults", "tensorstore", "zarr-python")
# zarrs' own benchmark scripts (zarrs/zarr_benchmarks) configure its pipeline so
ZARRS_CONFIG = {
    "threading.num_workers": None,
    "array.write_empty_chunks": False,
    "codec_pipeline": {
        "batch_size": 1,
        "path": "zarrs.ZarrsCodecPipeline",
        "validate_checksums": True,
        "store_empty_chunks": False,
        "chunk_concurrent_minimum": 4,
        "chunk_concurrent_maximum": None,
    },
}


def zarr_config(method: str) -> dict[str, Any]:
    """zarr-python's configuration for a zarr-python peer: zarrs' pipeline as zarrs'
    benchmarks set it up, or with the pipeline's own defaults, or zarr-python's own."""
    if method == "zarrs":
        return ZARRS_CONFIG
    if method == "zarrs defaults":
        return {"codec_pipeline.path": "zarrs.ZarrsCodecPipeline"}
    return {}


# -- the data ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Data:
    name: str
    path: Path  # the group; the array is "v"
    shape: tuple[int, ...]
    dtype: str
    shards: tuple[int, ...]
    inner: tuple[int, ...]
    level: int  # zstd level

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * np.dtype(self.dtype).itemsize

    @property
    def chunk_nbytes(self) -> int:
        return math.prod(self.inner) * np.dtype(self.dtype).itemsize

    @property
    def dims(self) -> tuple[str, ...]:
        return ("z", "y", "x")[-len(self.shape) :]


def zarrs_field(start: int, stop: int, edge: int = 1024) -> np.ndarray:
    """Rows ``start:stop`` of zarrs' benchmark field, ``(x + y*y/32 + z**3) % 65536``."""
    z = np.arange(start, stop, dtype=np.int64)[:, None, None]
    y = np.arange(edge, dtype=np.int64)[None, :, None]
    x = np.arange(edge, dtype=np.int64)[None, None, :]
    return ((x + y * y // 32 + z**3) % 65536).astype(np.uint16)


def u2_data(edge: int) -> Data:
    path = DATA / f"peers-u2-{edge}x1024x1024.zarr"
    return Data("u2-3d", path, (edge, 1024, 1024), "uint16", (256,) * 3, (64,) * 3, 3)


def ensure_u2(data: Data) -> None:
    import zarr

    if (data.path / "v" / "zarr.json").exists() and (data.path / "done").exists():
        return
    print(f"  writing {data.path} ...", flush=True)
    shutil.rmtree(data.path, ignore_errors=True)
    group = zarr.create_group(data.path)
    z = group.create_array(
        "v",
        shape=data.shape,
        chunks=data.inner,
        shards=data.shards,
        dtype=data.dtype,
        compressors=zarr.codecs.ZstdCodec(level=data.level),
        dimension_names=data.dims,
        fill_value=0,
    )
    step = data.shards[0]
    for start in range(0, data.shape[0], step):
        z[start : start + step] = zarrs_field(start, min(data.shape[0], start + step))
    (data.path / "done").write_text("")


def float_data(name: str) -> Data:
    import read_throughput as rt

    if name == "f4-2d":
        fld, label = rt.field_2d(rt.array_shape(1024)), "64 KiB"
    else:
        fld, label = rt.field_3d(rt.cube_shape(512)), "1 MiB"
    path = fld.store_path(label)
    return Data(name, path, fld.shape, "float32", fld.shard, fld.inner[label], 1)


def ensure_float(data: Data) -> None:
    import read_throughput as rt

    fld = rt.field_2d(data.shape) if len(data.shape) == 2 else rt.field_3d(data.shape)
    label = "64 KiB" if len(data.shape) == 2 else "1 MiB"
    rt.ensure_store(fld, label)


def dataset(name: str, edge: int) -> Data:
    if name == "u2-3d":
        return u2_data(edge)
    if name in ("f4-2d", "f4-3d"):
        return float_data(name)
    raise SystemExit(f"unknown --data {name!r}")


def ensure(data: Data) -> dict[str, Any]:
    """Write the store when missing; its reference (CRC-32C of the array's bytes in C
    order, computed once with zarr-python) from a file beside it."""
    (ensure_u2 if data.name == "u2-3d" else ensure_float)(data)
    ref_file = data.path.with_name(data.path.name + ".peers.json")
    if ref_file.exists():
        return json.loads(ref_file.read_text())
    import zarr

    arr = zarr.open_array(data.path, path="v", mode="r")[...]
    ref = {"crc32c": crc(arr), "shape": list(arr.shape), "dtype": str(arr.dtype)}
    ref_file.write_text(json.dumps(ref))
    return ref


def crc(arr: Any) -> int:
    import crc32c

    a = np.ascontiguousarray(arr)
    return int(crc32c.crc32c(memoryview(a).cast("B")))


# -- the floors ------------------------------------------------------------------------------
def compressed_chunks(data: Data) -> list[list[tuple[tuple[int, ...], memoryview]]]:
    """Every compressed inner chunk, per shard, with the position of its first value in
    the array, cut out of the shard files with their indexes."""
    import zarr

    from shardwise.codecs import index_format_from_codecs
    from shardwise.format.index import EMPTY
    from shardwise.format.metadata import ArrayInfo

    info = ArrayInfo.from_metadata(zarr.open_array(data.path, path="v", mode="r").metadata, "v")
    sharding = info.sharding
    out = []
    for shard in info.layout.all_shards():
        per = info.layout.chunks_per_shard(shard)
        fmt = index_format_from_codecs(sharding.index_codecs, per, sharding.index_location)
        raw = memoryview((data.path / info.key(shard)).read_bytes())
        table = fmt.decode(fmt.split(raw)).reshape(-1, 2)
        chunks = []
        for flat, (o, n) in enumerate(table.tolist()):
            if o == EMPTY:
                continue
            inner = np.unravel_index(flat, per)
            start = tuple(
                s * sh + i * c
                for s, sh, i, c in zip(shard, data.shards, inner, data.inner, strict=True)
            )
            chunks.append((start, raw[o : o + n]))
        out.append(chunks)
    return out


class Floor:
    """The codec work on every chunk, one work item per shard, on ``threads`` threads,
    per-thread state reused: decode into one buffer with ``decoder`` (``"numcodecs"``:
    numcodecs' Zstd, which makes a decompression context per call; ``"libzstd"``:
    ``ZSTD_decompressDCtx`` through python-zstandard's cffi binding with one context per
    thread), optionally copy each chunk into its place in ``out`` (decode + place),
    optionally re-encode it (``ZSTD_compress2`` into one buffer, the round trip's floor).
    :func:`fastest_decoder` picks the decoder."""

    def __init__(
        self, data: Data, *, place: bool = False, encode: bool = False, decoder: str = "numcodecs"
    ) -> None:
        self.data = data
        self.place = place
        self.encode = encode
        self.decoder = decoder
        self.local = threading.local()
        self.out: np.ndarray | None = None

    def _state(self) -> Any:
        t = self.local
        if not hasattr(t, "buf"):
            import numcodecs
            from zstandard import backend_cffi

            ffi, lib = backend_cffi.ffi, backend_cffi.lib
            t.lib, t.ffi = lib, ffi
            t.buf = np.empty(self.data.chunk_nbytes, dtype=np.uint8)
            t.zstd = numcodecs.Zstd()
            t.dctx = ffi.gc(lib.ZSTD_createDCtx(), lib.ZSTD_freeDCtx)
            t.dbuf = ffi.from_buffer(t.buf, require_writable=True)
            if self.encode:
                t.cctx = ffi.gc(lib.ZSTD_createCCtx(), lib.ZSTD_freeCCtx)
                lib.ZSTD_CCtx_setParameter(t.cctx, lib.ZSTD_c_compressionLevel, self.data.level)
                t.enc = np.empty(lib.ZSTD_compressBound(self.data.chunk_nbytes), dtype=np.uint8)
                t.dst = ffi.from_buffer(t.enc, require_writable=True)
        return t

    def _shard(self, chunks: list[tuple[tuple[int, ...], memoryview]]) -> int:
        t = self._state()
        buf = t.buf
        typed = buf.view(self.data.dtype).reshape(self.data.inner)
        done = 0
        numcodecs_decode = t.zstd.decode if self.decoder == "numcodecs" else None
        dctx, dbuf, lib, ffi = t.dctx, t.dbuf, t.lib, t.ffi
        for start, c in chunks:
            if numcodecs_decode is not None:
                numcodecs_decode(c, out=buf)
            elif lib.ZSTD_isError(
                lib.ZSTD_decompressDCtx(dctx, dbuf, buf.size, ffi.from_buffer(c), len(c))
            ):
                raise RuntimeError("zstd")
            if self.out is not None:
                region = tuple(
                    slice(s, min(s + n, e))
                    for s, n, e in zip(start, self.data.inner, self.data.shape, strict=True)
                )
                self.out[region] = typed[tuple(slice(0, r.stop - r.start) for r in region)]
            if self.encode:
                n = lib.ZSTD_compress2(t.cctx, t.dst, t.enc.size, ffi.from_buffer(buf), buf.size)
                if lib.ZSTD_isError(n):
                    raise RuntimeError("zstd")
            done += buf.size
        return done

    def __call__(self, shards: list[list[Any]], threads: int) -> int:
        if self.place:
            self.out = np.empty(self.data.shape, dtype=self.data.dtype)
        with ThreadPoolExecutor(threads) as pool:
            return sum(pool.map(self._shard, shards))


def fastest_decoder(data: Data, shards: list[list[Any]], threads: int) -> str:
    """The faster of the floor's two decoders on these chunks (each timed twice, decode
    alone): the floor is the codec work with the fastest library available."""
    best: dict[str, float] = {}
    for decoder in ("numcodecs", "libzstd"):
        floor = Floor(data, decoder=decoder)
        for _ in range(2):
            t0 = time.perf_counter()
            floor(shards, threads)
            best[decoder] = min(best.get(decoder, math.inf), time.perf_counter() - t0)
    return min(best, key=best.__getitem__)


# -- one run of one method, in a child process ---------------------------------------------
def cluster() -> Any:
    from distributed import Client, LocalCluster

    lc = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None)
    return Client(lc)


def read_once(method: str, data: Data) -> Any:
    path = data.path
    if method in ("shardwise", "shardwise 1 thread"):
        from shardwise import ArrayReader, ReadOptions

        threads = 1 if method == "shardwise 1 thread" else None
        return ArrayReader.open(path, "v", options=ReadOptions(threads=threads))[...]
    if method in ("shardwise xarray", "shardwise xarray dask"):
        import xarray as xr

        chunks = {} if method == "shardwise xarray dask" else None
        with xr.open_dataset(path, engine="shardwise", chunks=chunks) as ds:
            return ds.v.values
    if method == "shardwise dask":
        import shardwise

        return shardwise.array.from_zarr(path, "v").compute()
    if method == "shardwise cluster":
        from distributed import wait

        import shardwise

        x = shardwise.array.from_zarr(path, "v").persist()
        wait(x)
        return x
    if method in ("zarr-python", "zarrs", "zarrs defaults"):
        import zarr

        with zarr.config.set(zarr_config(method)):
            return zarr.open_array(path, path="v", mode="r")[...]
    if method == "tensorstore":
        import tensorstore as ts

        spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(path / "v")}}
        return ts.open(spec).result().read().result()
    raise SystemExit(f"unknown read method {method!r}")


def roundtrip_once(method: str, data: Data, dst: Path) -> None:
    """Copy ``data`` to ``dst`` (which does not exist) with ``method``."""
    src = data.path
    if method in ("shardwise dask", "shardwise dask via values", "shardwise cluster"):
        import zarr

        import shardwise

        x = shardwise.array.from_zarr(src, "v")
        if method == "shardwise dask via values":  # a computation: a block of values per task
            x = x.map_blocks(np.asarray, dtype=x.dtype)
        shardwise.array.to_zarr(
            x,
            str(dst),
            path="v",
            shards=data.shards,
            chunks=data.inner,
            compressors=zarr.codecs.ZstdCodec(level=data.level),
            dimension_names=data.dims,
        )
        return
    if method in ("zarr-python", "zarrs", "zarrs defaults"):
        import zarr

        with zarr.config.set(zarr_config(method)):
            a = zarr.open_array(src, path="v", mode="r")
            out = zarr.create_group(dst).create_array(
                "v",
                shape=a.shape,
                dtype=a.dtype,
                chunks=a.chunks,
                shards=a.shards,
                compressors=a.compressors,
                fill_value=a.fill_value,
                dimension_names=a.metadata.dimension_names,
            )
            out[...] = a[...]
        return
    if method == "tensorstore":
        import itertools

        import tensorstore as ts

        source = ts.open(
            {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(src / "v")}}
        ).result()
        dst.mkdir(parents=True)
        (dst / "zarr.json").write_text('{"zarr_format": 3, "node_type": "group"}')
        target = ts.open(
            {
                "driver": "zarr3",
                "kvstore": {"driver": "file", "path": str(dst / "v")},
                "create": True,
                "delete_existing": True,
                "schema": source.schema,
            }
        ).result()
        shard = source.chunk_layout.write_chunk.shape
        regions = itertools.product(
            *(
                [slice(i, min(i + s, n)) for i in range(0, n, s)]
                for s, n in zip(shard, source.shape, strict=True)
            )
        )
        for batch in itertools.batched(regions, len(os.sched_getaffinity(0))):
            with ts.Transaction() as txn:
                for region in batch:
                    target.with_transaction(txn)[region] = source[region]
        return
    raise SystemExit(f"unknown roundtrip method {method!r}")


def check_roundtrip(data: Data, dst: Path, ref: dict[str, Any]) -> bool:
    """The output read back by another implementation (tensorstore; zarr-python where
    tensorstore is missing) equals the source, with the source's layout and codec."""
    meta = json.loads((dst / "v" / "zarr.json").read_text())
    src_meta = json.loads((data.path / "v" / "zarr.json").read_text())
    for key in ("shape", "data_type", "chunk_grid"):
        if meta[key] != src_meta[key]:
            print(f"    {key}: {meta[key]} != {src_meta[key]}", file=sys.stderr)
            return False
    try:
        import tensorstore as ts

        spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(dst / "v")}}
        back = ts.open(spec).result().read().result()
    except ImportError:
        import zarr

        back = zarr.open_array(dst, path="v", mode="r")[...]
    return crc(back) == ref["crc32c"]


def prefault(nbytes: int) -> None:
    """Touch and free ``nbytes`` and a quarter more, just before the timed run (see the
    module's docstring: free page reporting)."""
    np.ones(nbytes + nbytes // 4, dtype=np.uint8)


def cpu_sample() -> tuple[float, float]:
    """(busy CPU seconds of the whole machine, of this process and its children)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split()[1:9]]
    tick = os.sysconf("SC_CLK_TCK")
    busy = (sum(fields) - fields[3] - fields[4] - fields[7]) / tick  # not idle, iowait, steal
    try:
        import psutil

        me = psutil.Process()
        procs = [me, *me.children(recursive=True)]
        ours = sum(p.cpu_times().user + p.cpu_times().system for p in procs)
    except Exception:  # psutil missing, or a child gone while it was read
        ru = resource.getrusage(resource.RUSAGE_SELF)
        ours = ru.ru_utime + ru.ru_stime
    return busy, ours


def child(job: str, method: str, data: Data, ref: dict[str, Any]) -> dict[str, Any]:
    """One fresh process: a warm-up, then one timed run."""
    cores = len(os.sched_getaffinity(0))
    client = cluster() if method == "shardwise cluster" else None
    if client is None:
        import dask

        dask.config.set(scheduler="threads")
    dst = DATA / f"peers-roundtrip-{os.getpid()}.zarr"
    shards = compressed_chunks(data) if method in ("floor", "decode + place") else []
    decoder = fastest_decoder(data, shards, cores) if shards else "numcodecs"
    floor = Floor(
        data, place=method == "decode + place", encode=job == "roundtrip", decoder=decoder
    )

    def run() -> Any:
        if method == "floor":
            return floor(shards, cores)
        if method == "decode + place":
            floor(shards, cores)
            return floor.out
        if job == "read":
            return read_once(method, data)
        return roundtrip_once(method, data, dst)

    try:
        run()
        shutil.rmtree(dst, ignore_errors=True)
        prefault(data.nbytes)
        ru0 = resource.getrusage(resource.RUSAGE_SELF)
        busy0, ours0 = cpu_sample()
        t0 = time.perf_counter()
        out = run()
        seconds = time.perf_counter() - t0
        busy1, ours1 = cpu_sample()
        ru1 = resource.getrusage(resource.RUSAGE_SELF)
        if method == "floor":
            ok = out == sum(len(s) for s in shards) * data.chunk_nbytes
        elif job == "read":
            a = np.asarray(out.compute() if method == "shardwise cluster" else out)
            ok = a.shape == tuple(ref["shape"]) and str(a.dtype) == ref["dtype"]
            ok = ok and crc(a) == ref["crc32c"]
        else:
            ok = check_roundtrip(data, dst, ref)
    finally:
        shutil.rmtree(dst, ignore_errors=True)
        if client is not None:
            client.close()
            client.cluster.close()
    return {
        "decoder": decoder if shards else None,
        "seconds": seconds,
        "ok": bool(ok),
        "cpu": (ours1 - ours0) / seconds,
        "others": max(busy1 - busy0 - (ours1 - ours0), 0.0) / seconds,
        "faults": ru1.ru_minflt - ru0.ru_minflt,
    }


# -- the driver ------------------------------------------------------------------------------
def versions() -> str:
    from importlib.metadata import PackageNotFoundError, version

    out = []
    for name in ("shardwise", "zarr", "zarrs", "tensorstore", "numcodecs", "dask", "numpy"):
        try:
            out.append(f"{name} {version(name)}")
        except PackageNotFoundError:
            out.append(f"{name} not installed")
    return ", ".join(out)


def run_job(args: argparse.Namespace, data: Data, ref: dict[str, Any], job: str) -> None:
    allowed = READ_METHODS if job == "read" else ROUNDTRIP_METHODS
    wanted = [m.strip() for m in args.methods.split(",")] if args.methods else list(allowed)
    methods = [m for m in wanted if m in allowed]
    print(
        f"\n## {job}: {data.name}, {data.shape} {data.dtype} ({data.nbytes / 2**30:.2f} GiB), "
        f"shards {data.shards}, inner {data.inner}, zstd {data.level}"
    )
    results: dict[str, list[dict[str, Any]]] = {m: [] for m in methods}
    for rnd in range(1, args.runs + 1):
        shown = []
        for m in methods:
            cmd = [
                sys.executable,
                __file__,
                "--child",
                f"{job}:{m}",
                "--data",
                data.name,
                "--edge",
                str(args.edge),
            ]
            done = subprocess.run(cmd, capture_output=True, text=True)
            if done.returncode:
                raise SystemExit(f"{m} failed:\n{done.stderr[-3000:]}")
            result = json.loads(done.stdout.strip().splitlines()[-1])
            if not result["ok"]:
                raise SystemExit(f"{job} {m}: a wrong result (round {rnd})")
            results[m].append(result)
            via = f" ({result['decoder']})" if result.get("decoder") else ""
            shown.append(f"{m}{via} {result['seconds']:.3f}")
        print(f"  round {rnd}: " + ", ".join(shown), flush=True)
    med = {m: statistics.median(r["seconds"] for r in v) for m, v in results.items()}
    peers = [m for m in PEERS if m in med]
    best = min(peers, key=med.__getitem__) if peers else None
    print(
        f"\n| {job} {data.name} | median s (min-max) | GB/s | x floor | x {best or 'best peer'} "
        "| its CPU (cores) | others' CPU (cores) | page faults |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for m in methods:
        v = [r["seconds"] for r in results[m]]
        rf = med[m] / med["floor"] if "floor" in med else float("nan")
        rb = med[m] / med[best] if best else float("nan")
        cpu = statistics.median(r["cpu"] for r in results[m])
        others = max(r["others"] for r in results[m])
        faults = statistics.median(r["faults"] for r in results[m])
        print(
            f"| {m} | {med[m]:.3f} ({min(v):.3f}-{max(v):.3f}) | {data.nbytes / med[m] / 1e9:.2f} "
            f"| {rf:.2f} | {rb:.2f} | {cpu:.2f} | {others:.2f} (max) | {faults:,.0f} |"
        )


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--data", default="u2-3d")
    ap.add_argument("--jobs", default="read,roundtrip")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--methods", default="")
    ap.add_argument("--edge", type=int, default=1024)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        job, method = args.child.split(":", 1)
        data = dataset(args.data, args.edge)
        ref = json.loads(data.path.with_name(data.path.name + ".peers.json").read_text())
        print(json.dumps(child(job, method, data, ref)))
        return
    print(
        f"machine: {platform.processor() or platform.machine()}, "
        f"{len(os.sched_getaffinity(0))} cores, {platform.python_version()}; {versions()}"
    )
    for name in args.data.split(","):
        data = dataset(name.strip(), args.edge)
        ref = ensure(data)
        for job in args.jobs.split(","):
            run_job(args, data, ref, job.strip())


if __name__ == "__main__":
    main()
