"""Before/after figures for a restructuring of shardwise's modules: import, graph build,
write and read, for two source trees measured side by side in one run.

What it measures
----------------
Two source trees of shardwise (``--before`` and ``--after``, each a directory holding the
``shardwise`` package, e.g. ``/tmp/before/src`` and ``src``) are each imported in
subprocesses with ``PYTHONPATH=<tree>``, which wins over the editable install in
``.venv``. Only the public API is used (``shardwise.to_zarr``, ``shardwise.open_dataset``
and ``xr.open_dataset(..., engine=<the backend entry-point class>)``), since private
module paths differ between the trees. Five figures, each one run of the work in a fresh
worker process, timed with ``time.perf_counter`` around the work alone:

  import        ``import shardwise`` and ``shardwise.to_zarr`` (the attribute loads
                ``shardwise.api`` and what it imports); the worker has imported only a
                few standard-library modules before
  first-write   ``import shardwise`` and a first ``shardwise.to_zarr`` of a small dataset,
                in a worker that has imported numpy, dask and xarray: what a script
                pays before its first write (where the import figure moves a cost
                from the first call into the import, this one is the sum)
  graph         ``shardwise.to_zarr(ds, store, compute=False)`` until the delayed is
                returned (xarray's metadata step included): 3 float32 variables of
                1184 x 1184 in dask chunks = shards of 32 x 32 with inner chunks of
                16 x 16, 37 x 37 x 3 = 4107 shards in all (16 MiB of data, never computed)
  write         ``shardwise.to_zarr(ds, store, shards=..., chunks=...)`` on dask's
                threaded scheduler: 2 float32 variables of 4096 x 8192 (256 MiB in all,
                a smooth sum of sines plus small noise from a seeded dask generator,
                rounded to 2 decimals: compressible, the same values every run), persisted
                in memory first, dask chunks = shards of 2048 x 2048 (16 MiB), inner
                chunks of 512 x 512 (1 MiB), 16 shards, the default codecs
  read-engine   ``xr.open_dataset(store, engine=<class>, chunks={})`` (one dask chunk per
                shard), then ``.sum(skipna=False)`` of every variable in one
                ``dask.compute``, on the store ``write`` makes, written once per tree by
                that tree
  read-fanout   ``shardwise.open_dataset(store, chunks="inner")`` (one read task per
                inner chunk below one index task per shard: 256 + 16), then the same sums

Before the timing, each worker builds (and for ``write`` persists) its dataset and runs
the same call once on a tiny store, so that first-call imports inside shardwise land in
the ``import`` figure, not in the others. The read workers check their sums against the
float64 sums recorded at setup (to float32 rounding). ``skipna=False`` because a float
``.sum()`` is NaN-skipping: isnan/where temporaries of every chunk, numpy's cost rather
than the reader's.

How it runs: a ``setup`` subprocess per tree (role ``before``, then ``after``) writes the
input stores under ``/tmp/restructure-bench/<role>/`` (``--root``) with that tree; then
for every figure one warm-up pair of workers (before, after; not counted) and ``--runs``
timed pairs, alternating before, after, before, after... Reported per figure: the median
seconds of each tree, the median of the per-pair ratios after/before and their min-max.
Every subprocess runs with ``PYTHONPYCACHEPREFIX=<root>/pycache`` (and bytecode writing
on), so that both trees, and the installed packages, import from cached bytecode
without anything being written into the trees; the first setup fills that cache. The
stores are read from the OS page cache (caches are not dropped). Run it on an idle
machine: at the end the script reports how much CPU other processes took meanwhile.

How to run
----------
    .venv/bin/python benchmarks/restructure.py --before /tmp/before/src --after src
    .venv/bin/python benchmarks/restructure.py --before /tmp/before/src --after src --runs 3
    .venv/bin/python benchmarks/restructure.py --before T --after T   # one tree twice: ~1
    PYTHONPATH=src .venv/bin/python benchmarks/restructure.py setup --dir /tmp/rb/x
    PYTHONPATH=src .venv/bin/python benchmarks/restructure.py one write --dir /tmp/rb/x

The default run (7 timed pairs) takes about 5 minutes on an idle 2-core machine (more
when other processes compete for the cores) and needs about 300 MB free under
``--root``. ``one`` prints one JSON line ``{"figure": ..., "seconds": ...}``;
it needs a directory made by ``setup`` for the read figures.
"""

# Only the standard library at module level: the `import` figure times shardwise's
# import in a worker that has loaded as little as possible before it.
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

FIGURES = ("import", "first-write", "graph", "write", "read-engine", "read-fanout")
ROOT = Path("/tmp/restructure-bench")
ROLES = ("before", "after")
SEED, NOISE, DECIMALS = 0, 0.003, 2

# graph: 3 variables of 37 x 37 shards each (4107 in all), tiny shards
GRAPH_VARS = ("a", "b", "c")
GRAPH_SHAPE = (37 * 32, 37 * 32)
GRAPH_SHARD = (32, 32)
GRAPH_INNER = (16, 16)
# write, read-engine, read-fanout: 2 variables of 128 MiB, 16 MiB shards, 1 MiB inner chunks
DATA_VARS = ("u", "v")
DATA_SHAPE = (4096, 8192)
DATA_SHARD = (2048, 2048)
DATA_INNER = (512, 512)
# the in-process warm-up before every timed call: same calls, tiny data
WARM_SHAPE, WARM_SHARD, WARM_INNER = (64, 64), (32, 32), (16, 16)
DIMS = ("y", "x")
RTOL = 1e-5  # read sums against the float64 sums, relative to the sum of |values|
TIMEOUT = 600  # seconds, per subprocess


# -- the data ----------------------------------------------------------------------------
def make_field(shape: tuple[int, int], chunks: tuple[int, int], seed: int) -> Any:
    """A lazy float32 dask array: a smooth sum of sines plus small noise from dask's
    seeded generator, rounded to 2 decimals (so compressible), the same every run."""
    from throughput_common import smooth_field

    return smooth_field(shape, chunks, seed, NOISE, DECIMALS)


def make_dataset(names: tuple[str, ...], shape: tuple[int, int], chunks: tuple[int, int]) -> Any:
    """A Dataset of one ``make_field`` per name (seeds SEED, SEED + 1, ...) with integer
    coordinates along both dims."""
    import numpy as np
    import xarray as xr

    data = {name: (DIMS, make_field(shape, chunks, SEED + i)) for i, name in enumerate(names)}
    coords = {d: np.arange(n, dtype=np.int64) for d, n in zip(DIMS, shape, strict=True)}
    return xr.Dataset(data, coords=coords)


def by_dim(sizes: tuple[int, int]) -> dict[str, int]:
    return dict(zip(DIMS, sizes, strict=True))


def engine_class() -> Any:
    """The xarray backend entry-point class of the imported tree. It is passed as
    ``engine=`` (not ``engine="shardwise"``) because the entry-point metadata installed
    in .venv names one module path, that of the tree installed, and the restructuring
    moves the class: after it the class is in ``shardwise.xarray.backend``, before it in
    ``shardwise.backend``."""
    try:
        from shardwise.xarray.backend import ShardwiseBackendEntrypoint
    except ModuleNotFoundError as err:
        if err.name not in ("shardwise.xarray", "shardwise.xarray.backend"):
            raise
        from shardwise.backend import ShardwiseBackendEntrypoint  # the tree before
    return ShardwiseBackendEntrypoint


def scratch_store(d: Path, name: str) -> Path:
    """A fresh store path under ``d/scratch`` for this process."""
    path = d / "scratch" / f"{name}-{os.getpid()}.zarr"
    shutil.rmtree(path, ignore_errors=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


# -- setup: the stores the read figures read, written by the tree under test ------------
def setup(d: Path) -> None:
    import dask
    import numpy as np

    import shardwise

    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    with dask.config.set(scheduler="threads"):
        ds = make_dataset(DATA_VARS, DATA_SHAPE, DATA_SHARD).persist()
        t0 = time.perf_counter()
        shardwise.to_zarr(ds, d / "read.zarr", shards=by_dim(DATA_SHARD), chunks=by_dim(DATA_INNER))
        took = time.perf_counter() - t0
        warm = make_dataset(DATA_VARS, WARM_SHAPE, WARM_SHARD)
        shardwise.to_zarr(
            warm, d / "warm.zarr", shards=by_dim(WARM_SHARD), chunks=by_dim(WARM_INNER)
        )
        sums = {
            name: {
                "sum": float(ds[name].data.astype(np.float64).sum().compute()),
                "abs": float(abs(ds[name].data.astype(np.float64)).sum().compute()),
            }
            for name in DATA_VARS
        }
    (d / "expected.json").write_text(json.dumps(sums))
    stored = sum(f.stat().st_size for f in (d / "read.zarr").rglob("*") if f.is_file())
    print(
        f"  setup {d}: shardwise from {Path(shardwise.__file__).parent}, "
        f"read.zarr {stored / 2**20:.0f} MiB on disk for {ds.nbytes / 2**20:.0f} MiB "
        f"(written in {took:.1f} s)"
    )


# -- one figure, once, in this process ---------------------------------------------------
def figure_import(d: Path) -> float:
    t0 = time.perf_counter()
    import shardwise

    shardwise.to_zarr  # noqa: B018  (the attribute loads the module that defines it)
    return time.perf_counter() - t0


def figure_first_write(d: Path) -> float:
    """``import shardwise`` and its first ``to_zarr`` (a small dataset), in a process
    that has numpy, dask and xarray imported already, as a script or notebook has: where
    the import figure moves cost from the first call to the import, this is the sum."""
    import dask

    with dask.config.set(scheduler="threads"):
        ds = make_dataset(GRAPH_VARS, WARM_SHAPE, WARM_SHARD)
        store = scratch_store(d, "first")
        t0 = time.perf_counter()
        import shardwise

        shardwise.to_zarr(
            ds, store, shards=by_dim(WARM_SHARD), chunks=by_dim(WARM_INNER), consolidated=False
        )
        return time.perf_counter() - t0


def figure_graph(d: Path) -> float:
    import dask

    import shardwise

    ds = make_dataset(GRAPH_VARS, GRAPH_SHAPE, GRAPH_SHARD)
    sizes = {"shards": by_dim(GRAPH_SHARD), "chunks": by_dim(GRAPH_INNER)}
    warm = make_dataset(GRAPH_VARS, WARM_SHAPE, WARM_SHARD)
    warm_sizes = {"shards": by_dim(WARM_SHARD), "chunks": by_dim(WARM_INNER)}
    shardwise.to_zarr(warm, scratch_store(d, "warm"), compute=False, **warm_sizes)
    store = scratch_store(d, "graph")
    t0 = time.perf_counter()
    delayed = shardwise.to_zarr(ds, store, compute=False, **sizes)
    seconds = time.perf_counter() - t0
    if not dask.is_dask_collection(delayed):
        raise SystemExit(f"to_zarr(compute=False) returned {type(delayed).__name__}")
    return seconds


def figure_write(d: Path) -> float:
    import dask

    import shardwise

    with dask.config.set(scheduler="threads"):
        ds = make_dataset(DATA_VARS, DATA_SHAPE, DATA_SHARD).persist()
        sizes = {"shards": by_dim(DATA_SHARD), "chunks": by_dim(DATA_INNER)}
        warm = make_dataset(DATA_VARS, WARM_SHAPE, WARM_SHARD)
        warm_sizes = {"shards": by_dim(WARM_SHARD), "chunks": by_dim(WARM_INNER)}
        shardwise.to_zarr(warm, scratch_store(d, "warm"), **warm_sizes)
        store = scratch_store(d, "write")
        t0 = time.perf_counter()
        shardwise.to_zarr(ds, store, **sizes)
        return time.perf_counter() - t0


def read_sums(ds: Any) -> dict[str, float]:
    import dask

    names = list(ds.data_vars)
    sums = dask.compute(*(ds[name].sum(skipna=False) for name in names), scheduler="threads")
    return {name: float(s) for name, s in zip(names, sums, strict=True)}


def figure_read(d: Path, how: str) -> float:
    import xarray as xr

    import shardwise

    engine = engine_class() if how == "engine" else None

    def read(path: Path) -> dict[str, float]:
        if engine is not None:
            ds = xr.open_dataset(path, engine=engine, chunks={})
        else:
            ds = shardwise.open_dataset(path, chunks="inner")
        with ds:
            return read_sums(ds)

    read(d / "warm.zarr")
    t0 = time.perf_counter()
    sums = read(d / "read.zarr")
    seconds = time.perf_counter() - t0
    expected = json.loads((d / "expected.json").read_text())
    for name, want in expected.items():
        if not abs(sums.get(name, float("nan")) - want["sum"]) <= RTOL * want["abs"]:
            raise SystemExit(f"{name}: sum {sums.get(name)}, expected {want['sum']}")
    return seconds


def run_one(figure: str, d: Path) -> float:
    if figure == "import":
        return figure_import(d)
    if figure == "first-write":
        return figure_first_write(d)
    if figure == "graph":
        return figure_graph(d)
    if figure == "write":
        return figure_write(d)
    return figure_read(d, figure.removeprefix("read-"))


def one(figure: str, d: Path) -> None:
    try:
        seconds = run_one(figure, d)
    finally:
        shutil.rmtree(d / "scratch", ignore_errors=True)
    print(json.dumps({"figure": figure, "seconds": seconds}))


# -- compare: both trees, interleaved ----------------------------------------------------
def tree_env(tree: Path, root: Path) -> dict[str, str]:
    """The environment of a subprocess importing shardwise from ``tree``."""
    env = dict(os.environ, PYTHONPATH=str(tree), PYTHONPYCACHEPREFIX=str(root / "pycache"))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def subprocess_run(args: list[str], env: dict[str, str]) -> str:
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    if proc.returncode:
        sys.stderr.write(proc.stdout + proc.stderr)
        raise SystemExit(f"{' '.join(args)} failed (exit {proc.returncode})")
    return proc.stdout


def check_tree(tree: Path, root: Path) -> None:
    """Refuse to go on unless ``PYTHONPATH=tree`` imports shardwise from ``tree``."""
    code = "import shardwise; print(shardwise.__file__)"
    proc = subprocess.run(
        [sys.executable, "-P", "-c", code],
        env=tree_env(tree, root),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    found = Path(proc.stdout.strip() or ".").resolve()
    if proc.returncode or found != tree / "shardwise" / "__init__.py":
        sys.stderr.write(proc.stderr)
        raise SystemExit(f"PYTHONPATH={tree} imports shardwise from {found}, not from the tree")


def worker(figure: str, role: str, trees: dict[str, Path], root: Path) -> float:
    out = subprocess_run(["one", figure, "--dir", str(root / role)], tree_env(trees[role], root))
    doc = json.loads(out.strip().splitlines()[-1])
    return float(doc["seconds"])


class CpuMeter:
    """How busy the machine was, from /proc/stat, and how much of that was this benchmark
    (the workers, waited for, are counted in ``os.times()``'s children): the rest is
    other processes competing for the same cores, which makes every figure noisier."""

    def __init__(self) -> None:
        self.start = self._sample()

    @staticmethod
    def _sample() -> tuple[float, float, float, float] | None:
        try:
            fields = [int(x) for x in Path("/proc/stat").read_text().split()[1:9]]
        except (OSError, ValueError):  # not Linux
            return None
        tick = os.sysconf("SC_CLK_TCK")
        busy = (sum(fields) - fields[3] - fields[4]) / tick  # all but idle and iowait
        steal = fields[7] / tick
        t = os.times()
        ours = t.user + t.system + t.children_user + t.children_system
        return time.perf_counter(), busy, steal, ours

    def report(self) -> str:
        end = self._sample()
        if self.start is None or end is None:
            return "CPU use: unknown (no /proc/stat)"
        wall, busy, steal, ours = (b - a for a, b in zip(self.start, end, strict=True))
        other = max(busy - ours - steal, 0.0)
        line = (
            f"CPU during the measurements ({wall:.0f} s, {os.cpu_count()} cores): "
            f"benchmark {ours / wall:.2f} cores, other processes {other / wall:.2f}, "
            f"hypervisor steal {steal / wall:.2f}"
        )
        if (other + steal) / wall > 0.1:
            line += "\nWARNING: the machine was not idle; the figures are slower and noisier"
        return line


def machine() -> str:
    # run as a script, this dir is on sys.path
    from throughput_common import cpu_and_ram, package_versions

    found_cpu, found_ram = cpu_and_ram()
    cpu, ram = found_cpu or "unknown", found_ram or 0
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    parts = [
        f"nproc {cores}",
        cpu,
        f"RAM {ram / 2**30:.1f} GiB",
        f"python {sys.version.split()[0]}",
    ]
    parts += [f"{k} {v}" for k, v in package_versions("zarr", "dask", "xarray", "numpy").items()]
    return ", ".join(parts)


def compare(trees: dict[str, Path], runs: int, root: Path) -> None:
    import statistics

    started = time.perf_counter()
    print("machine: " + machine())
    for role in ROLES:
        print(f"{role}: {trees[role]}")
    print("setup:")
    for role in ROLES:
        check_tree(trees[role], root)
        print(
            subprocess_run(["setup", "--dir", str(root / role)], tree_env(trees[role], root)),
            end="",
        )
    rows = []
    meter = CpuMeter()
    for figure in FIGURES:
        times: dict[str, list[float]] = {role: [] for role in ROLES}
        for rnd in range(runs + 1):  # round 0: the warm-up pair
            pair = {role: worker(figure, role, trees, root) for role in ROLES}
            if rnd:
                for role in ROLES:
                    times[role].append(pair[role])
        ratios = [a / b for b, a in zip(times["before"], times["after"], strict=True)]
        shown = " ".join(
            f"{b:.3f}/{a:.3f}" for b, a in zip(times["before"], times["after"], strict=True)
        )
        print(f"  {figure:<12} before/after s: {shown}")
        rows.append(
            (
                figure,
                statistics.median(times["before"]),
                statistics.median(times["after"]),
                statistics.median(ratios),
                min(ratios),
                max(ratios),
            )
        )
    print()
    print(f"{runs} pairs per figure (after one warm-up pair), seconds per run, medians:")
    print()
    print(
        "| figure | before median s | after median s | after/before (median of pairs) | min-max |"
    )
    print("|---|---:|---:|---:|---:|")
    for figure, b, a, ratio, lo, hi in rows:
        print(f"| {figure} | {b:.3f} | {a:.3f} | {ratio:.3f} | {lo:.3f}-{hi:.3f} |")
    print()
    print(meter.report())
    print(f"total time {time.perf_counter() - started:.0f} s")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "mode",
        nargs="?",
        choices=("compare", "setup", "one"),
        default="compare",
        help="compare (default): both trees; setup: write the stores; one: one figure once",
    )
    parser.add_argument("figure", nargs="?", choices=FIGURES, help="the figure of `one`")
    parser.add_argument("--dir", type=Path, help="the tree's directory (setup, one)")
    parser.add_argument("--before", type=Path, help="the source tree before (holds shardwise/)")
    parser.add_argument("--after", type=Path, help="the source tree after (holds shardwise/)")
    parser.add_argument("--runs", type=int, default=7, help="timed pairs per figure (7)")
    parser.add_argument("--root", type=Path, default=ROOT, help=f"working directory ({ROOT})")
    args = parser.parse_args(argv)
    if args.mode == "one":
        if args.figure is None or args.dir is None:
            parser.error("one needs a FIGURE and --dir")
        one(args.figure, args.dir)
    elif args.mode == "setup":
        if args.dir is None:
            parser.error("setup needs --dir")
        setup(args.dir)
    else:
        if args.before is None or args.after is None:
            parser.error("compare needs --before and --after")
        if args.runs < 1:
            parser.error("--runs must be >= 1")
        trees = {"before": args.before.resolve(), "after": args.after.resolve()}
        for role, tree in trees.items():
            if not (tree / "shardwise" / "__init__.py").is_file():
                parser.error(f"--{role} {tree} holds no shardwise package")
        compare(trees, args.runs, args.root.resolve())


if __name__ == "__main__":
    main()
