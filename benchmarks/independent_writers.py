"""What the guard against other jobs (``independent_writers=True``, the default: merging
writes put their shards with conditional puts) costs one writer, against unguarded plain
puts (``False``), alternated in one process, ``--repeats`` times after a warm-up, on the
synchronous scheduler and the local disk:

- region writes: 400 calls each writing 10 rows of a 4000 x 256 float64 array in shards
  of 100 rows (inner chunks of 20 rows), so every call merges into a shard;
- appends: 100 calls each appending 7 rows (cutting shards of 100 rows);
- a whole write: 64 MiB into an existing array in one call, dask chunks = shards (no
  merge: each shard's owner puts it without a condition, through the guard's lock on a
  local store). (An array the write creates is never guarded.)

Medians of the per-round times and their ratio. What the guard does for several writers
(none of their values lost) is tested: ``tests/test_concurrency.py``.

    python benchmarks/independent_writers.py [--repeats 5] [--quick]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import DATA_DIR


def one_writer(repeats: int, scale: int) -> None:
    """The three writes at ``1 / scale`` of their calls and bytes (``--quick``: 10)."""
    import dask
    import dask.array as da

    import shardwise

    dask.config.set(scheduler="synchronous")
    shape, shards, inner = (4000, 256), (100, 256), (20, 256)

    def zeros(path: Path, rows: int) -> None:
        """A new array of ``rows`` rows of zeros (nothing stored) at ``path``."""
        shardwise.array.to_zarr(
            da.zeros((rows, shape[1]), chunks=(max(rows, 1), shape[1])),
            str(path),
            path="v",
            shards=shards,
            chunks=inner,
            mode="w",
        )

    def fresh(path: Path) -> None:
        zeros(path, shape[0])

    def regions(path: Path, guarded: bool) -> None:
        for i in range(400 // scale):
            x = da.full((10, shape[1]), float(i), chunks=10)
            shardwise.array.to_zarr(
                x,
                str(path),
                path="v",
                region=(slice(i * 10, i * 10 + 10),),
                independent_writers=guarded,
            )

    def appends(path: Path, guarded: bool) -> None:
        zeros(path, 0)
        for i in range(100 // scale):
            x = da.full((7, shape[1]), float(i), chunks=7)
            shardwise.array.to_zarr(
                x, str(path), path="v", append_dim=0, independent_writers=guarded
            )

    big = (32768 // scale, 256)

    def empty_big(path: Path) -> None:
        zeros(path, big[0])

    def whole(path: Path, guarded: bool) -> None:
        x = da.random.default_rng(0).random(big, chunks=shards)
        shardwise.array.to_zarr(
            x,
            str(path),
            path="v",
            region=(slice(0, big[0]),),
            independent_writers=guarded,
        )

    with tempfile.TemporaryDirectory(dir=DATA_DIR if DATA_DIR.is_dir() else None) as tmp:
        print("\n## one writer: guarded (independent_writers=True) against unguarded")
        print("| write | guarded median s (min-max) | unguarded median s (min-max) | ratio |")
        print("|---|---|---|---|")
        for name, job, setup in (
            (f"{400 // scale} region writes of 10 rows", regions, fresh),
            (f"{100 // scale} appends of 7 rows", appends, None),
            (f"{64 // scale} MiB into the existing array, dask chunks = shards", whole, empty_big),
        ):
            times: dict[bool, list[float]] = {True: [], False: []}
            for rnd in range(repeats + 1):  # the first round warms up
                for guarded in (True, False) if rnd % 2 else (False, True):
                    path = Path(tmp) / f"{name[:3]}-{guarded}.zarr"
                    if setup is not None:
                        setup(path)
                    t0 = time.perf_counter()
                    job(path, guarded)
                    if rnd:
                        times[guarded].append(time.perf_counter() - t0)
            g, u = times[True], times[False]
            print(
                f"| {name} | {statistics.median(g):.3f} ({min(g):.3f}-{max(g):.3f}) "
                f"| {statistics.median(u):.3f} ({min(u):.3f}-{max(u):.3f}) "
                f"| {statistics.median(g) / statistics.median(u):.3f} |"
            )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="a tenth of the calls and bytes")
    args = ap.parse_args()
    print(f"machine: {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}")
    one_writer(args.repeats, 10 if args.quick else 1)


if __name__ == "__main__":
    main()
