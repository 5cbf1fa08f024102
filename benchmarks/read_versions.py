"""Versioned shard indexes: what reading every cached index against the version of the
shard it came from costs on a local file system, and whether reads still make the same
store requests as the code before it (commit d1ec11d).

What it measures
----------------
Three variants, each run in a fresh Python process:

  old        the code of d1ec11d: ``--baseline-src DIR`` (that commit's ``src`` folder)
             first on the child's ``PYTHONPATH``; default options
  new        the working tree, default options (``recheck_cached_data=True``): a ranged
             read with a cached index opens the shard file, ``fstat``s it, compares
             (st_dev, st_ino, size, mtime_ns, ctime_ns) with the index's version and
             ``preadv``s the ranges; on S3 the GET carries ``If-Match``
  new-open   the working tree with ``shardwise.ReadOptions(recheck_cached_data="open")``:
             no check at all, reads through zarr-python's ``store.get`` as before

Part 1, local overhead (target: new within 3% of old). A Zarr v3 store holds one float32
variable ``v`` (dims y, x) of 4096 x 4096 in shards of 1024 x 1024 (16 shards) of inner
chunks of 64 x 64 (256 per shard, 16 KiB each), zstd level 1, with the smooth field of
``throughput_common.smooth_field`` (written once by zarr-python and cached under
``benchmarks/data/``; read from the OS page cache). Each child opens it (a path: a
zarr-python ``LocalStore``), warms up (one whole-array read, which caches every shard's
index, then a tenth of the scattered reads and one run of each dask read), and times, with
``time.perf_counter``:

  single 64x64      2000 reads ``r[y:y+64, x:x+64]`` of one inner chunk each at random
                    64-aligned places, one ``shardwise.ArrayReader`` (index cached, one
                    ranged read each)
  block 3x3         500 reads of 3 x 3 inner chunks (192 x 192) at random 64-aligned
                    places (some across shard boundaries)
  fan-out inner     ``shardwise.open_dataset(path, chunks="inner")``, region
                    ``v[512:1536, 512:1536]`` (4 shards, 256 inner chunks: 4 index tasks,
                    256 read tasks), ``.compute(scheduler="threads")``
  engine x10        ``xr.open_dataset(path, engine="shardwise", chunks={})``, region
                    ``v[:, 0:384]`` (4 tasks, each 96 of a shard's 256 inner chunks: index
                    cached, coalesced ranges), computed 10 times on the threaded scheduler
  whole x2          ``ArrayReader[...]`` of the whole array (64 MiB), twice (every shard
                    read whole on the calling threads; the index cache plays no part)

The runs are interleaved old, new, new-open, old, new, ... (``--runs`` each, 7 by
default); per variant and case the table gives the median and min-max of the runs, and the
ratios new/old and new-open/old of the medians. A second table gives the same for the
CPU time of the child (``time.process_time`` around each case: all its threads), which
other processes on the machine disturb less than the wall time. The children check that
they read the same values (a checksum of the warm-up reads). The machine may be shared:
the load average is printed before and after.

Part 2, store requests per read, old / new / new-open, each in a child, on a second store
(``v`` of 2048 x 2048 float32, shards 512 x 512 (4 x 4), inner chunks 64 x 64, zstd level 1,
fill value 0) where shard (3, 3) is absent (never written) and the inner chunks of
``v[0:128, 512:640]`` in shard (0, 1) are all fill values (zarr-python leaves them empty
in the shard's index):

  local   ``shardwise.testing.CountingStore(LocalStore(path))``: its log's GETs (the new
          code counts its versioned reads there too); metadata excluded
  s3      moto's S3 server (``tests/s3server.py``, as ``concurrency.py`` starts it), the
          store uploaded to a bucket and read by URL through s3fs; the requests are
          counted in the server's access log (``S3Server.hits``), not by shardwise

Cases (``cold``: after ``shardwise.cache.clear_index_cache()``; ``warm``: the same read again at
once):

  scattered          12 reads of one inner chunk each, 2 in each of 6 shards
  fan-out            ``shardwise.open_dataset(store, chunks="inner")``, region
                     ``v[448:704, 448:704]`` (4 shards, 16 inner chunks), threaded
  whole shard        ``r[512:1024, 0:512]``, all of shard (1, 0)
  empty chunks       ``r[0:128, 512:640]``: 4 inner chunks of a stored shard, all empty
  absent shard       ``r[1536:1664, 1536:1664]`` in the shard never written

Expected: the same requests old and new, except that ``new`` reads the index again for
reads that need only empty chunks (``empty chunks warm``). Every read is checked against
zarr-python's read of the local copy.

How to run
----------
    mkdir -p /tmp/sw-base && git archive d1ec11d src | tar -x -C /tmp/sw-base    # (once)
    python benchmarks/read_versions.py --baseline-src /tmp/sw-base/src
    python benchmarks/read_versions.py --baseline-src ... --out results.json
    python benchmarks/read_versions.py --baseline-src ... --quick   # smoke run

The default run takes about 3-5 minutes (21 children of ~8 s, then 6 short ones); the
first run also writes the stores (~25 MB, under a minute). ``--quick``: a smaller store,
fewer reads, 2 runs.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DATA_DIR = HERE / "data"
TESTS = HERE.parent / "tests"
VARIANTS = ("old", "new", "new-open")
# bump RECIPE_VERSION whenever the data or the layout of the stores change
RECIPE_VERSION = 1
NOISE, DECIMALS, SEED = 0.003, 2, 0
ZSTD_LEVEL = 1
TARGET = 1.03  # new / old, local, warm index cache (wall time medians)


# -- the stores --------------------------------------------------------------------------
@dataclass(frozen=True)
class Geometry:
    """One 2-D store: the shape of ``v``, its shards and inner chunks; ``absent``: a shard
    never written; ``empty``: a region (y0, y1, x0, x1) left at the fill value."""

    label: str
    shape: tuple[int, int]
    shard: tuple[int, int]
    inner: tuple[int, int]
    absent: tuple[int, int] | None = None
    empty: tuple[int, int, int, int] | None = None

    @property
    def path(self) -> Path:
        def x(t: tuple[int, ...]) -> str:
            return "x".join(map(str, t))

        name = f"versions-{self.label}-{x(self.shape)}-s{x(self.shard)}-c{x(self.inner)}.zarr"
        return DATA_DIR / name

    @property
    def nshards(self) -> int:
        return math.prod(n // s for n, s in zip(self.shape, self.shard, strict=True))

    def describe(self) -> str:
        per = math.prod(s // c for s, c in zip(self.shard, self.inner, strict=True))
        text = (
            f"v{self.shape} float32 ({math.prod(self.shape) * 4 / 2**20:.0f} MiB), shards "
            f"{self.shard} ({self.nshards}), inner chunks {self.inner} ({per} per shard), "
            f"zstd level {ZSTD_LEVEL}"
        )
        if self.absent is not None:
            text += f"; shard {self.absent} absent"
        if self.empty is not None:
            y0, y1, x0, x1 = self.empty
            text += f"; v[{y0}:{y1}, {x0}:{x1}] empty inner chunks"
        return text

    def recipe(self) -> dict[str, Any]:
        return {
            "version": RECIPE_VERSION,
            **{k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()},
            "noise": NOISE,
            "decimals": DECIMALS,
            "seed": SEED,
            "zstd_level": ZSTD_LEVEL,
        }


TIMING = Geometry("timing", (4096, 4096), (1024, 1024), (64, 64))
TIMING_QUICK = Geometry("timing-quick", (2048, 2048), (512, 512), (64, 64))
COUNTING = Geometry(
    "counting", (2048, 2048), (512, 512), (64, 64), absent=(3, 3), empty=(0, 128, 512, 640)
)


def store_matches(path: Path, want: dict[str, Any]) -> bool:
    try:
        group = json.loads((path / "zarr.json").read_text())
        array = json.loads((path / "v" / "zarr.json").read_text())
    except (OSError, ValueError):
        return False
    return (
        group.get("attributes", {}).get("benchmark_recipe") == want
        and array.get("shape") == want["shape"]
    )


def ensure_store(geo: Geometry) -> Path:
    """Write the store of ``geo`` with zarr-python unless a matching one is cached (next to
    its final place, renamed when complete)."""
    import numpy as np
    import zarr
    from zarr.codecs import ZstdCodec

    from throughput_common import smooth_field

    path, want = geo.path, geo.recipe()
    if store_matches(path, want):
        print(f"  cached  {path}")
        return path
    t0 = time.perf_counter()
    tmp = path.with_name(path.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    data = np.asarray(smooth_field(geo.shape, geo.shard, SEED, NOISE, DECIMALS).compute())
    group = zarr.open_group(tmp, mode="w", zarr_format=3, attributes={"benchmark_recipe": want})
    arr = group.create_array(
        "v",
        shape=geo.shape,
        chunks=geo.inner,
        shards=geo.shard,
        dtype="float32",
        compressors=ZstdCodec(level=ZSTD_LEVEL),
        fill_value=0,
        dimension_names=("y", "x"),
    )
    if geo.empty is not None:
        y0, y1, x0, x1 = geo.empty
        data[y0:y1, x0:x1] = 0
    sy, sx = geo.shard
    for i in range(geo.shape[0] // sy):
        for j in range(geo.shape[1] // sx):
            if (i, j) != geo.absent:
                arr[i * sy : (i + 1) * sy, j * sx : (j + 1) * sx] = data[
                    i * sy : (i + 1) * sy, j * sx : (j + 1) * sx
                ]
    if (
        geo.absent is not None
        and (tmp / "v" / "c" / str(geo.absent[0]) / str(geo.absent[1])).exists()
    ):
        raise RuntimeError("the absent shard was written")
    shutil.rmtree(path, ignore_errors=True)
    tmp.rename(path)
    print(f"  wrote   {path} in {time.perf_counter() - t0:.0f} s")
    return path


# -- part 1's workload -------------------------------------------------------------------
@dataclass(frozen=True)
class Workload:
    single: int  # reads of one inner chunk
    blocks: int  # reads of 3 x 3 inner chunks
    fan_region: tuple[int, int, int, int]  # y0, y1, x0, x1
    engine_region: tuple[int, int, int, int]
    engine_repeats: int
    whole_repeats: int


WORKLOAD = Workload(2000, 500, (512, 1536, 512, 1536), (0, 4096, 0, 384), 10, 2)
WORKLOAD_QUICK = Workload(200, 50, (256, 768, 256, 768), (0, 2048, 0, 192), 4, 1)
CASES = ("single 64x64", "block 3x3", "fan-out inner", "engine x{n}", "whole x{n}")


def case_names(w: Workload) -> list[str]:
    return [
        CASES[0],
        CASES[1],
        CASES[2],
        CASES[3].format(n=w.engine_repeats),
        CASES[4].format(n=w.whole_repeats),
    ]


def positions(geo: Geometry, w: Workload) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """The random 64-aligned corners of the single-chunk and 3x3-chunk reads (the same in
    every child)."""
    import numpy as np

    rng = np.random.default_rng(SEED)
    cy, cx = geo.inner
    ny, nx = geo.shape[0] // cy, geo.shape[1] // cx
    singles = [(int(i) * cy, int(j) * cx) for i, j in rng.integers(0, (ny, nx), (w.single, 2))]
    blocks = [
        (int(i) * cy, int(j) * cx) for i, j in rng.integers(0, (ny - 2, nx - 2), (w.blocks, 2))
    ]
    return singles, blocks


# -- children ----------------------------------------------------------------------------
def child_env(variant: str, baseline: Path | None) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if variant == "old":
        assert baseline is not None
        env["PYTHONPATH"] = str(baseline)
    return env


def run_child(spec: dict[str, Any], baseline: Path | None) -> dict[str, Any]:
    """Run this script in a new process on ``spec``; its result (the last line of its
    output, ``RESULT <json>``)."""
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(spec)],
        env=child_env(spec["variant"], baseline),
        capture_output=True,
        text=True,
        check=False,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        sys.stderr.write(proc.stdout + proc.stderr)
        raise SystemExit(f"child {spec['job']} {spec['variant']} failed ({proc.returncode})")
    result: dict[str, Any] = json.loads(lines[-1][len("RESULT ") :])
    return result


def geometry_of(doc: dict[str, Any]) -> Geometry:
    """A :class:`Geometry` from its JSON form (lists back to tuples)."""
    return Geometry(**{k: tuple(v) if isinstance(v, list) else v for k, v in doc.items()})


def workload_of(doc: dict[str, Any]) -> Workload:
    return Workload(**{k: tuple(v) if isinstance(v, list) else v for k, v in doc.items()})


def _options(variant: str) -> Any:
    """``ReadOptions`` of a variant (None: the defaults; the old code has no
    ``recheck_cached_data``)."""
    import shardwise

    if variant == "new-open":
        return shardwise.ReadOptions(recheck_cached_data="open")
    return None


def _check_module(spec: dict[str, Any]) -> str:
    import shardwise

    where = str(Path(shardwise.__file__).resolve())
    want = spec["shardwise_root"]
    if not where.startswith(want):
        raise SystemExit(f"{spec['variant']}: imported shardwise from {where}, not {want}")
    return where


def child_time(spec: dict[str, Any]) -> dict[str, Any]:
    """Part 1 in a child: open, warm up, time every case once."""
    import numpy as np
    import xarray as xr

    import shardwise

    module = _check_module(spec)
    geo, w = geometry_of(spec["geometry"]), workload_of(spec["workload"])
    path = spec["path"]
    opts = _options(spec["variant"])
    kw = {} if opts is None else {"read_options": opts}
    singles, blocks = positions(geo, w)
    (cy, cx), (by, bx) = geo.inner, (3 * geo.inner[0], 3 * geo.inner[1])

    reader = shardwise.ArrayReader.open(path, "v", options=opts)
    fan = shardwise.open_dataset(path, chunks="inner", consolidated=False, **kw)
    eng = xr.open_dataset(path, engine="shardwise", chunks={}, consolidated=False, **kw)
    fy0, fy1, fx0, fx1 = w.fan_region
    ey0, ey1, ex0, ex1 = w.engine_region
    fan_sel = fan.v[fy0:fy1, fx0:fx1]
    eng_sel = eng.v[ey0:ey1, ex0:ex1]

    def single(todo: list[tuple[int, int]]) -> None:
        for y, x in todo:
            reader[y : y + cy, x : x + cx]

    def block(todo: list[tuple[int, int]]) -> None:
        for y, x in todo:
            reader[y : y + by, x : x + bx]

    def fanout() -> None:
        fan_sel.compute(scheduler="threads")

    def engine(n: int) -> None:
        for _ in range(n):
            eng_sel.compute(scheduler="threads")

    def whole(n: int) -> None:
        for _ in range(n):
            reader[...]

    # warm-up: every shard's index cached by a whole read, the code paths run once; the
    # checksum of what it read says that every variant reads the same values
    check = 0.0
    check += float(reader[...].sum(dtype=np.float64))
    for y, x in singles[: max(1, len(singles) // 10)]:
        check += float(reader[y : y + cy, x : x + cx].sum(dtype=np.float64))
    for y, x in blocks[: max(1, len(blocks) // 10)]:
        check += float(reader[y : y + by, x : x + bx].sum(dtype=np.float64))
    check += float(fan_sel.compute(scheduler="threads").values.sum(dtype=np.float64))
    check += float(eng_sel.compute(scheduler="threads").values.sum(dtype=np.float64))

    runs = dict(
        zip(
            case_names(w),
            (
                lambda: single(singles),
                lambda: block(blocks),
                fanout,
                lambda: engine(w.engine_repeats),
                lambda: whole(w.whole_repeats),
            ),
            strict=True,
        )
    )
    seconds, cpu = {}, {}
    for name, run in runs.items():
        c0, t0 = time.process_time(), time.perf_counter()
        run()
        seconds[name] = time.perf_counter() - t0
        cpu[name] = time.process_time() - c0
    fan.close()
    eng.close()
    return {"seconds": seconds, "cpu": cpu, "checksum": check, "module": module}


# -- part 2's cases ----------------------------------------------------------------------
def count_cases(geo: Geometry) -> dict[str, tuple[str, Any]]:
    """Case name -> (kind, selection): "reads" (a list of (y0, y1, x0, x1) read one after
    the other through one ArrayReader) or "fanout" (one region)."""
    (sy, sx), (cy, cx) = geo.shard, geo.inner
    scattered = []
    for i, j in ((0, 0), (1, 2), (2, 1), (3, 0), (0, 3), (2, 3)):
        for a, b in ((1, 2), (5, 6)):
            y, x = i * sy + a * cy, j * sx + b * cx
            scattered.append((y, y + cy, x, x + cx))
    assert geo.empty is not None and geo.absent is not None
    ay, ax = geo.absent[0] * sy, geo.absent[1] * sx
    return {
        "scattered": ("reads", scattered),
        "fan-out": ("fanout", (sy - 64, sy + 192, sx - 64, sx + 192)),
        "whole shard": ("reads", [(sy, 2 * sy, 0, sx)]),
        "empty chunks": ("reads", [geo.empty]),
        "absent shard": ("reads", [(ay, ay + 2 * cy, ax, ax + 2 * cx)]),
    }


def child_count(spec: dict[str, Any]) -> dict[str, Any]:
    """Part 2 in a child: every case cold then warm, with the requests it made."""
    import numpy as np
    import zarr
    from zarr.storage import LocalStore

    import shardwise
    from shardwise.testing import CountingStore

    module = _check_module(spec)
    geo = geometry_of(spec["geometry"])
    opts = _options(spec["variant"])
    kw = {} if opts is None else {"read_options": opts}
    place = spec["place"]
    expected = zarr.open_array(LocalStore(spec["path"], read_only=True), path="v", mode="r")[...]

    server: Any = None
    if place == "local":
        store: Any = CountingStore(LocalStore(spec["path"], read_only=True))
        reader = shardwise.ArrayReader.open(store, "v", options=opts)
        fan = shardwise.open_dataset(store, chunks="inner", consolidated=False, **kw)
    else:
        sys.path.insert(0, str(TESTS))
        from s3server import S3Server

        server = S3Server(Path(spec["workdir"]))  # (only its logs: started by the parent)
        so = spec["storage_options"]
        url = spec["url"]
        reader = shardwise.ArrayReader.open(url, "v", storage_options=so, options=opts)
        fan = shardwise.open_dataset(
            url, chunks="inner", consolidated=False, storage_options=so, **kw
        )

    def start() -> Any:
        if server is not None:
            return server.mark()
        store.log.clear()
        return None

    def requests(mark: Any) -> dict[str, int]:
        """What the case asked of the store: GETs of shards, and anything else."""
        out: dict[str, int] = {"GET": 0}
        if server is not None:
            for hit in server.hits(mark):
                if hit.key.endswith("zarr.json"):
                    out["metadata"] = out.get("metadata", 0) + 1
                    continue
                out[hit.method] = out.get(hit.method, 0) + 1
                if hit.status >= 400:
                    out[f"{hit.method} {hit.status}"] = out.get(f"{hit.method} {hit.status}", 0) + 1
            return out
        for r in store.log.requests:
            if r.key.endswith("zarr.json"):
                out["metadata"] = out.get("metadata", 0) + 1
            elif r.op == "get":
                out["GET"] += 1
                kind = (
                    "whole"
                    if r.byte_range == "whole"
                    else "suffix"
                    if r.byte_range.startswith("last")
                    else "range"
                )
                out[f"GET {kind}"] = out.get(f"GET {kind}", 0) + 1
            else:
                out[r.op] = out.get(r.op, 0) + 1
        return out

    results: dict[str, dict[str, Any]] = {}
    for name, (kind, sel) in count_cases(geo).items():
        shardwise.cache.clear_index_cache()
        for temp in ("cold", "warm"):
            mark = start()
            if kind == "fanout":
                y0, y1, x0, x1 = sel
                got = [fan.v[y0:y1, x0:x1].compute(scheduler="threads").values]
                want = [expected[y0:y1, x0:x1]]
            else:
                got = [reader[y0:y1, x0:x1] for y0, y1, x0, x1 in sel]
                want = [expected[y0:y1, x0:x1] for y0, y1, x0, x1 in sel]
            counted = requests(mark)
            for g, e in zip(got, want, strict=True):
                np.testing.assert_array_equal(g, e, err_msg=f"{name} {temp}")
            results[f"{name} {temp}"] = counted
    fan.close()
    if server is not None:
        from s3server import close_s3fs_sessions

        close_s3fs_sessions()
    return {"requests": results, "module": module}


def child_main(spec_text: str) -> None:
    spec = json.loads(spec_text)
    job = {"time": child_time, "count": child_count}[spec["job"]]
    result = job(spec)
    print("RESULT " + json.dumps(result), flush=True)


# -- the parent --------------------------------------------------------------------------
def loadavg() -> str:
    try:
        return Path("/proc/loadavg").read_text().strip()
    except OSError:
        return "unknown"


def machine() -> dict[str, Any]:
    from throughput_common import cpu_and_ram, package_versions

    cpu, ram = cpu_and_ram()
    return {
        "cpu": cpu or platform.processor() or "unknown",
        "nproc": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "cores": os.cpu_count(),
        "ram_gib": None if ram is None else round(ram / 2**30, 1),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        **package_versions("zarr", "numpy", "xarray", "dask", "numcodecs", "s3fs", "moto"),
    }


def spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def measure_timing(
    geo: Geometry, path: Path, w: Workload, runs: int, baseline: Path
) -> dict[str, Any]:
    roots = {
        "old": str(baseline.resolve()),
        "new": str((HERE.parent / "src").resolve()),
        "new-open": str((HERE.parent / "src").resolve()),
    }
    names = case_names(w)
    times: dict[str, dict[str, list[float]]] = {v: {n: [] for n in names} for v in VARIANTS}
    cpu: dict[str, dict[str, list[float]]] = {v: {n: [] for n in names} for v in VARIANTS}
    checksums: dict[str, set[float]] = {v: set() for v in VARIANTS}
    for rnd in range(1, runs + 1):
        shown = []
        for v in VARIANTS:
            spec = {
                "job": "time",
                "variant": v,
                "path": str(path),
                "geometry": asdict(geo),
                "workload": asdict(w),
                "shardwise_root": roots[v],
            }
            out = run_child(spec, baseline)
            for n in names:
                times[v][n].append(out["seconds"][n])
                cpu[v][n].append(out["cpu"][n])
            checksums[v].add(out["checksum"])
            shown.append(f"{v} " + "/".join(f"{out['seconds'][n]:.2f}" for n in names))
        print(f"    run {rnd}: " + ", ".join(shown) + " s", flush=True)
    sums = {c for s in checksums.values() for c in s}
    if len(sums) != 1:
        print(f"  WARNING: the variants read different values (checksums {checksums})")
    stats = {v: {n: spread(times[v][n]) for n in names} for v in VARIANTS}
    cpu_stats = {v: {n: spread(cpu[v][n]) for n in names} for v in VARIANTS}
    return {
        "geometry": asdict(geo),
        "workload": asdict(w),
        "runs": runs,
        "times": times,
        "cpu_times": cpu,
        "stats": stats,
        "cpu_stats": cpu_stats,
        "ratios": ratios_of(stats, names),
        "cpu_ratios": ratios_of(cpu_stats, names),
        "same_values": len(sums) == 1,
    }


def ratios_of(stats: dict[str, Any], names: list[str]) -> dict[str, dict[str, float]]:
    """new/old and new-open/old of the medians, per case."""
    return {
        n: {
            "new/old": stats["new"][n]["median"] / stats["old"][n]["median"],
            "new-open/old": stats["new-open"][n]["median"] / stats["old"][n]["median"],
        }
        for n in names
    }


def print_timing(part: dict[str, Any]) -> None:
    w = workload_of(part["workload"])
    names = case_names(w)
    per_read = {names[0]: w.single, names[1]: w.blocks}
    tables = (
        (part["stats"], part["ratios"], "wall seconds (time.perf_counter)"),
        (
            part["cpu_stats"],
            part["cpu_ratios"],
            "CPU seconds of the child, all its threads (time.process_time: less "
            "sensitive to other processes than wall time)",
        ),
    )
    for stats, ratios, what in tables:
        print()
        print(
            f"Part 1: local reads with a warm index cache, {what} per case, median (min-max) "
            f"of {part['runs']} runs, each variant in a fresh process per run"
        )
        print()
        print("| case | old | new | new-open | new/old | new-open/old |")
        print("|---|---|---|---|---|---|")
        for n in names:
            cells = []
            for v in VARIANTS:
                s = stats[v][n]
                text = f"{s['median']:.3f} ({s['min']:.3f}-{s['max']:.3f})"
                if n in per_read:
                    text += f", {s['median'] / per_read[n] * 1e6:.0f} us/read"
                cells.append(text)
            r = ratios[n]
            flag = " **>3%**" if r["new/old"] > TARGET else ""
            print(
                f"| {n} | {' | '.join(cells)} | {r['new/old']:.3f}{flag} "
                f"| {r['new-open/old']:.3f} |"
            )
    print()
    print(
        f"target: new/old <= {TARGET:.2f} in every case; "
        f"values read identical across variants: {part['same_values']}"
    )


def expected_note(case: str) -> str:
    if case == "empty chunks warm":
        return "new reads the index again (by design)"
    if case == "absent shard warm":
        return "new-open may trust a cached absent shard"
    return ""


def cell(counts: dict[str, Any], place: str) -> str:
    """``3`` or ``3 (1 suffix + 2 range)`` or ``2 + 1 HEAD``."""
    gets = counts.get("GET", 0)
    if place == "local":
        kinds = [
            f"{counts[k]} {k[4:]}" for k in ("GET whole", "GET suffix", "GET range") if k in counts
        ]
        text = f"{gets}" + (f" ({' + '.join(kinds)})" if kinds else "")
    else:
        text = f"{gets}"
    others = {
        k: n
        for k, n in counts.items()
        if k != "GET" and not k.startswith("GET ") and k != "metadata"
    }
    for k, n in others.items():
        text += f" + {n} {k}"
    failed = {k: n for k, n in counts.items() if place != "local" and k.startswith("GET 4")}
    for k, n in failed.items():
        text += f" ({n} {k[4:]})"
    return text


def measure_counts(
    geo: Geometry,
    path: Path,
    baseline: Path,
    places: list[str],
) -> dict[str, Any]:
    roots = {
        "old": str(baseline.resolve()),
        "new": str((HERE.parent / "src").resolve()),
        "new-open": str((HERE.parent / "src").resolve()),
    }
    out: dict[str, Any] = {}
    for place in places:
        base = {"job": "count", "place": place, "path": str(path), "geometry": asdict(geo)}
        ctx = contextlib.ExitStack()
        if place == "s3":
            sys.path.insert(0, str(TESTS))
            from s3server import endpoint_with_bucket

            server, bucket = ctx.enter_context(endpoint_with_bucket())
            prefix = "count.zarr"
            client = server.boto3()
            for f in sorted(path.rglob("*")):
                if f.is_file():
                    key = f"{prefix}/{f.relative_to(path).as_posix()}"
                    client.put_object(Bucket=bucket, Key=key, Body=f.read_bytes())
            base |= {
                "url": f"s3://{bucket}/{prefix}",
                "storage_options": server.storage_options(),
                "workdir": str(server.workdir),
            }
        try:
            per_variant = {}
            for v in VARIANTS:
                t0 = time.perf_counter()
                res = run_child(base | {"variant": v, "shardwise_root": roots[v]}, baseline)
                per_variant[v] = res["requests"]
                print(f"    {place} {v}: {time.perf_counter() - t0:.1f} s", flush=True)
            out[place] = per_variant
        finally:
            ctx.close()
    return out


def print_counts(counts: dict[str, Any]) -> list[str]:
    """Print the request tables; return the cases where new differs from old."""
    differ = []
    for place, per_variant in counts.items():
        print()
        what = (
            "CountingStore(LocalStore) log, GETs of shards (by kind)"
            if place == "local"
            else "moto S3 server's access log, GETs of shards (+ other requests)"
        )
        print(f"Part 2 ({place}): store requests per read, {what}")
        print()
        print("| case | old | new | new-open | same? | note |")
        print("|---|---|---|---|---|---|")
        for case in per_variant["old"]:
            cells = [cell(per_variant[v][case], place) for v in VARIANTS]
            same = "yes" if len(set(cells)) == 1 else "NO"
            if cells[1] != cells[0]:
                differ.append(f"{place}: {case} (old {cells[0]}, new {cells[1]})")
            print(f"| {case} | {' | '.join(cells)} | {same} | {expected_note(case)} |")
    return differ


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument(
        "--baseline-src",
        type=Path,
        help="the src folder of commit d1ec11d (put first on the old variant's PYTHONPATH)",
    )
    parser.add_argument("--runs", type=int, default=None, help="timed runs per variant (7)")
    parser.add_argument("--out", type=Path, help="also write the results to this JSON file")
    parser.add_argument(
        "--quick", action="store_true", help="a smoke run: a small store, fewer reads, 2 runs"
    )
    parser.add_argument("--skip-timing", action="store_true", help="run part 2 only")
    parser.add_argument("--skip-requests", action="store_true", help="run part 1 only")
    parser.add_argument("--no-s3", action="store_true", help="count requests locally only")
    args = parser.parse_args(argv)
    if args.child is not None:
        child_main(args.child)
        return
    if args.baseline_src is None:
        parser.error(
            "--baseline-src DIR is required: the src folder of d1ec11d, e.g. "
            "git archive d1ec11d src | tar -x -C /tmp/sw-base; --baseline-src /tmp/sw-base/src"
        )
    if not (args.baseline_src / "shardwise" / "__init__.py").is_file():
        parser.error(f"{args.baseline_src} holds no shardwise package")
    runs = args.runs if args.runs is not None else (2 if args.quick else 7)
    if runs < 1:
        parser.error("--runs must be >= 1")

    started = time.perf_counter()
    load_before = loadavg()
    info = machine()
    print(
        f"machine: {info['cpu']}, nproc {info['nproc']}, Python {info['python']}, "
        f"zarr {info['zarr']}, numpy {info['numpy']}, xarray {info['xarray']}, "
        f"dask {info['dask']}"
    )
    print(f"load average before: {load_before}")
    print(f"baseline (old): {args.baseline_src.resolve()}")
    geo1 = TIMING_QUICK if args.quick else TIMING
    work = WORKLOAD_QUICK if args.quick else WORKLOAD
    print(f"data in {DATA_DIR}:")
    path1 = None if args.skip_timing else ensure_store(geo1)
    path2 = None if args.skip_requests else ensure_store(COUNTING)

    timing = counts = None
    if path1 is not None:
        print(f"part 1: {geo1.describe()}")
        print(f"  per run and variant, seconds of: {' / '.join(case_names(work))}")
        timing = measure_timing(geo1, path1, work, runs, args.baseline_src)
    if path2 is not None:
        print(f"part 2: {COUNTING.describe()}")
        places = ["local"] if args.no_s3 else ["local", "s3"]
        counts = measure_counts(COUNTING, path2, args.baseline_src, places)
    load_after = loadavg()

    print()
    print(
        f"machine: {info['cpu']}, nproc {info['nproc']}, Python {info['python']}, "
        f"zarr {info['zarr']}, numpy {info['numpy']}"
    )
    print(f"load average before: {load_before}; after: {load_after}")
    if timing is not None:
        print_timing(timing)
    differ: list[str] = []
    if counts is not None:
        differ = print_counts(counts)
        print()
        print("new differs from old in: " + ("; ".join(differ) if differ else "no case"))
    elapsed = time.perf_counter() - started
    print(f"total time {elapsed:.0f} s")
    if args.out:
        doc = {
            "machine": info,
            "load_before": load_before,
            "load_after": load_after,
            "baseline_src": str(args.baseline_src.resolve()),
            "quick": args.quick,
            "timing": timing,
            "requests": counts,
            "requests_differ": differ,
            "total_seconds": elapsed,
        }
        args.out.write_text(json.dumps(doc, indent=2) + "\n")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
