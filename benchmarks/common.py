"""What the benchmark scripts share: where their data live, the description of the
machine, timing and CPU accounting, a two-worker cluster and its memory, the throughput
benchmarks' data, the codec floors and the single-process peers, and the tools' data.

Not a script: the scripts import it (each puts this folder on ``sys.path``).

The FLOOR of a throughput benchmark is the codec work alone, on the same inner chunks the
stores hold, on 2 threads: a ``ThreadPoolExecutor(2)`` with one work item per shard (the
list of that shard's inner chunks), in the client process, before any cluster starts,
best of ``FLOOR_RUNS`` runs after one warm-up. No I/O, no copy into an array and no
allocation per chunk where the codec allows it:

  decode (read floor)   numcodecs.Zstd().decode(chunk, out=buffer): every chunk into ONE
                        output buffer per thread, allocated once (threading.local)
  compress (write floor, the fastest of three)
      numcodecs.Zstd(level=1).encode(chunk)           a new bytes object per chunk
      zstandard.ZstdCompressor(level=1, write_content_size=True).compress(chunk),
                                                      one compressor per thread
      ZSTD_compress2 through python-zstandard's cffi binding into ONE output buffer per
                                                      thread, one ZSTD_CCtx per thread

The inputs (compressed frames, or C-contiguous numpy chunks) are prepared before timing.
"""

from __future__ import annotations

import json
import math
import os
import platform
import shutil
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import numpy as np

# -- where the data live, and the machine ----------------------------------------------
# the stores the scripts write, kept between runs (git-ignored); SHARDWISE_BENCH_DATA puts
# them elsewhere (the tests' smoke runs: a temporary folder)
DATA_DIR = Path(os.environ.get("SHARDWISE_BENCH_DATA") or Path(__file__).resolve().parent / "data")

# the packages every description names; a benchmark may add its own peers
PACKAGES = ("shardwise", "zarr", "xarray", "dask", "distributed", "numcodecs", "numpy")


def package_versions(*names: str) -> dict[str, str]:
    """The installed versions of ``names`` ("not installed" where one is missing)."""
    found = {}
    for name in names:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = "not installed"
    return found


def cpu_and_ram() -> tuple[str | None, int | None]:
    """The CPU model and the total RAM in bytes, from /proc (None where it does not say)."""
    cpu, ram = None, None
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
    return cpu, ram


def machine() -> dict[str, Any]:
    """The machine and the versions of the packages that a figure depends on."""
    cpu, ram = cpu_and_ram()
    return {
        "cpu": cpu or platform.processor() or "unknown",
        "cores": os.cpu_count(),
        "cores_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "ram_gib": None if ram is None else round(ram / 2**30, 1),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        **package_versions(*PACKAGES),
    }


def describe(info: dict[str, Any] | None = None) -> tuple[str, str]:
    """The machine and the versions as two lines of text (for a result's header)."""
    info = machine() if info is None else info
    hardware = (
        f"{info['cpu']}, {info['cores']} cores ({info['cores_usable']} usable), "
        f"{info['ram_gib']} GiB RAM, {info['platform']}"
    )
    software = ", ".join(f"{k} {v}" for k, v in info.items() if k not in _HARDWARE_KEYS)
    return hardware, software


_HARDWARE_KEYS = {"cpu", "cores", "cores_usable", "ram_gib", "platform"}


# -- timing ----------------------------------------------------------------------------
def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def median_of(fn: Any, repeats: int) -> tuple[float, Any]:
    fn()  # warm-up
    times = []
    out = None
    for _ in range(repeats):
        t, out = timed(fn)
        times.append(t)
    return statistics.median(times), out


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


# -- a cluster of two workers, and their memory ------------------------------------------
MIB = 2**20


def stored_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


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


# -- the throughput benchmarks' data ------------------------------------------------------
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


def shard_slices(shape: tuple[int, ...], shard: tuple[int, ...]) -> Iterator[tuple[slice, ...]]:
    for idx in np.ndindex(*(n // s for n, s in zip(shape, shard, strict=True))):
        yield tuple(slice(i * s, (i + 1) * s) for i, s in zip(idx, shard, strict=True))


def inner_chunks(
    arr: Any, shard: tuple[int, ...], inner: tuple[int, ...]
) -> list[list[np.ndarray]]:
    """Every inner chunk of ``arr`` as a contiguous array, grouped by shard."""
    return [
        [
            np.ascontiguousarray(arr[sl][isl])
            for isl in shard_slices(shard, inner)  # C order inside each shard
        ]
        for sl in shard_slices(arr.shape, shard)
    ]


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


# -- the floors, zarr-python's codec pipelines and tensorstore --------------------------
FLOOR_RUNS = 3  # floors and single-process references: best of 3 after one warm-up
FUSED_PIPELINE = "zarr.core.codec_pipeline.FusedCodecPipeline"
COMPRESSORS = ("numcodecs.Zstd", "zstandard.ZstdCompressor", "ZSTD_compress2 (cffi)")


class DecodeFloor:
    """Decode every compressed inner chunk with ``numcodecs.Zstd().decode(c, out=buf)``
    into one reused buffer per thread; calling it returns the bytes decoded."""

    def __init__(self, chunk_nbytes: int) -> None:
        self.chunk_nbytes = chunk_nbytes
        self.local = threading.local()

    def _shard(self, chunks: Sequence[Any]) -> int:
        t = self.local
        if not hasattr(t, "out"):
            import numcodecs

            t.out = np.empty(self.chunk_nbytes, dtype=np.uint8)
            t.zstd = numcodecs.Zstd()
        out, decode = t.out, t.zstd.decode
        for c in chunks:
            decode(c, out=out)
        return len(chunks) * self.chunk_nbytes

    def __call__(self, shards: Sequence[Sequence[Any]], pool: ThreadPoolExecutor) -> int:
        return sum(pool.map(self._shard, shards))


class CompressFloor:
    """Compress every inner chunk at zstd level 1 with one of ``COMPRESSORS``, keeping
    per-thread state (compressor, context, output buffer) in a ``threading.local``;
    calling it returns the compressed bytes."""

    def __init__(self, how: str, chunk_nbytes: int) -> None:
        if how not in COMPRESSORS:
            raise ValueError(how)
        self.how = how
        self.chunk_nbytes = chunk_nbytes
        self.local = threading.local()

    def _numcodecs(self, chunks: Sequence[np.ndarray]) -> int:
        t = self.local
        if not hasattr(t, "zstd"):
            import numcodecs

            t.zstd = numcodecs.Zstd(level=1)
        encode = t.zstd.encode
        return sum(len(encode(c)) for c in chunks)

    def _zstandard(self, chunks: Sequence[np.ndarray]) -> int:
        t = self.local
        if not hasattr(t, "cctx"):
            import zstandard

            t.cctx = zstandard.ZstdCompressor(level=1, write_content_size=True)
        compress = t.cctx.compress
        return sum(len(compress(c)) for c in chunks)

    def _compress2(self, chunks: Sequence[np.ndarray]) -> int:
        from zstandard import backend_cffi

        ffi, lib = backend_cffi.ffi, backend_cffi.lib
        t = self.local
        if not hasattr(t, "cctx"):
            t.cctx = ffi.gc(lib.ZSTD_createCCtx(), lib.ZSTD_freeCCtx)
            lib.ZSTD_CCtx_setParameter(t.cctx, lib.ZSTD_c_compressionLevel, 1)
            t.out = np.empty(lib.ZSTD_compressBound(self.chunk_nbytes), dtype=np.uint8)
            t.dst = ffi.from_buffer(t.out, require_writable=True)
        cctx, out, dst, compress2 = t.cctx, t.out, t.dst, lib.ZSTD_compress2
        total = 0
        for c in chunks:
            n = compress2(cctx, dst, out.size, ffi.from_buffer(c), c.nbytes)
            if lib.ZSTD_isError(n):
                raise RuntimeError(ffi.string(lib.ZSTD_getErrorName(n)).decode())
            total += n
        return total

    def __call__(self, shards: Sequence[Sequence[np.ndarray]], pool: ThreadPoolExecutor) -> int:
        work = {
            "numcodecs.Zstd": self._numcodecs,
            "zstandard.ZstdCompressor": self._zstandard,
            "ZSTD_compress2 (cffi)": self._compress2,
        }[self.how]
        return sum(pool.map(work, shards))


def zarr_pipelines() -> dict[str, str | None]:
    """The zarr-python peers: method name -> ``codec_pipeline.path`` (None: the default).
    The fused pipeline only where the installed zarr has it (it does in zarr 3.4.2)."""
    import zarr.core.codec_pipeline

    pipelines: dict[str, str | None] = {}
    if hasattr(zarr.core.codec_pipeline, "FusedCodecPipeline"):
        pipelines["zarr-python fused"] = FUSED_PIPELINE
    else:
        print(
            f"  note: zarr {zarr.__version__} has no FusedCodecPipeline; "
            "its zarr-python peer is skipped"
        )
    pipelines["zarr-python default"] = None
    return pipelines


@contextmanager
def zarr_pipeline(path: str | None) -> Iterator[None]:
    """zarr-python's codec pipeline set to ``path`` in the block (None: leave it)."""
    import zarr

    if path is None:
        yield
        return
    with zarr.config.set({"codec_pipeline.path": path}):
        yield


def have_tensorstore() -> bool:
    try:
        import tensorstore  # noqa: F401
    except ImportError:
        print("  note: tensorstore is not installed; its peer is skipped")
        return False
    return True


def tensorstore_kvstore(array_path: Path) -> dict[str, Any]:
    return {"driver": "file", "path": str(array_path)}


def write_group_metadata(path: Path) -> None:
    """A bare Zarr v3 group at ``path`` (so that xarray can open what tensorstore writes
    under it)."""
    path.mkdir(parents=True, exist_ok=True)
    doc = {"zarr_format": 3, "node_type": "group", "attributes": {}}
    (path / "zarr.json").write_text(json.dumps(doc))


def interleaved(
    runs: dict[str, Callable[[], Any]],
    rounds: int,
    *,
    before: Callable[[str], None] | None = None,
    after: Callable[[str, int, Any], None] | None = None,
    nbytes: int | None = None,
    indent: str = "    ",
) -> dict[str, list[float]]:
    """Time every run once as a warm-up, then ``rounds`` times, interleaved round by
    round, printing each round; returns every run's times, the warm-up first. ``before``
    (given the method) and ``after`` (the method, the round, 0 = warm-up, and what the run
    returned) are called around each run, outside the timing."""
    times: dict[str, list[float]] = {m: [] for m in runs}
    for rnd in range(rounds + 1):
        shown = []
        for m, run in runs.items():
            if before is not None:
                before(m)
            t0 = time.perf_counter()
            out = run()
            seconds = time.perf_counter() - t0
            if after is not None:
                after(m, rnd, out)
            del out
            times[m].append(seconds)
            rate = "" if nbytes is None else f" ({nbytes / seconds / 1e9:.2f} GB/s)"
            shown.append(f"{m} {seconds:.2f} s{rate}")
        print(f"{indent}{'warm-up' if rnd == 0 else f'round {rnd}'}: " + ", ".join(shown))
    return times


def smooth_field(
    shape: tuple[int, int], chunks: tuple[int, int], seed: int, noise: float, decimals: int
) -> Any:
    """A lazy float32 2-D dask array like measured data: a smooth sum of sines plus
    ``noise`` times dask's seeded standard normal, rounded to ``decimals`` (so it
    compresses as real fields do), the same values every run."""
    import dask.array as da

    y = da.arange(shape[0], chunks=chunks[0], dtype=np.float32)[:, None]
    x = da.arange(shape[1], chunks=chunks[1], dtype=np.float32)[None, :]
    tau = np.float32(2 * np.pi)
    smooth = (
        10 * np.sin(tau * x / 3000 + np.float32(0.5)) * np.cos(tau * y / 2500)
        + 4 * np.sin(tau * (x + y) / 700)
        + 2 * np.cos(tau * (x - 2 * y) / 300)
    )
    rng = da.random.default_rng(seed)
    rough = rng.standard_normal(shape, chunks=chunks, dtype=np.float32)
    return da.round(smooth + np.float32(noise) * rough, decimals).astype(np.float32)


# -- the tools' data (migrate, reshard) ---------------------------------------------------
# SHARDWISE_BENCH_SMALL=1: the data of migrate, reshard and rectilinear at an eighth of
# their size (the tests' smoke runs, whose figures nobody keeps)
SMALL = bool(os.environ.get("SHARDWISE_BENCH_SMALL"))
TOOLS_SHAPE = (32 if SMALL else 256, 1024, 1024)
TOOLS_INNER = (1, 512, 512)
TOOLS_PER_SHARD = (16, 2, 2)
TOOLS_SHARD = tuple(c * n for c, n in zip(TOOLS_INNER, TOOLS_PER_SHARD, strict=True))


def tools_values(t0: int, t1: int) -> np.ndarray:
    """Smooth values plus small noise, rounded to 2 decimals (zstd level 1: ~3x)."""
    t = np.arange(t0, t1, dtype=np.float32)[:, None, None]
    y = np.arange(TOOLS_SHAPE[1], dtype=np.float32)[None, :, None]
    x = np.arange(TOOLS_SHAPE[2], dtype=np.float32)[None, None, :]
    tau = np.float32(2 * np.pi)
    smooth = 10 * np.sin(tau * x / TOOLS_SHAPE[2] + t / 58) * np.cos(
        tau * y / TOOLS_SHAPE[1]
    ) + 3 * np.sin(tau * (x + 2 * y) / 300)
    rng = np.random.default_rng(t0)
    noise = rng.standard_normal(
        (t1 - t0, TOOLS_SHAPE[1], TOOLS_SHAPE[2]), dtype=np.float32
    ) * np.float32(0.05)
    return np.round(smooth + noise, 2).astype(np.float32)
