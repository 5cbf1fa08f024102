"""Independent writers of one array: what the guard costs one writer, and what it does
for several.

1. ONE WRITER, guarded (``independent_writers=True``, the default) against unguarded
   (``False``: plain puts), alternated in one process, ``--repeats`` times:
   - region writes: 400 calls each writing 10 rows of a 4000 x 256 float64 array in
     shards of 100 rows (inner chunks of 20 rows), so every call merges into a shard;
   - appends: 100 calls each appending 7 rows (cutting shards of 100 rows);
   - a whole write: 64 MiB into an existing array in one call, dask chunks = shards
     (no merge: each shard's owner puts it without a condition, through the guard's
     lock on a local store). (An array the write creates is never guarded.)
   Medians of the per-round times and their ratio (target: within 5%).
2. CONTENDING WRITERS: 2, 4 and 8 processes (``tests/concurrency_worker.py``), each
   writing its interleaved 10-row regions of a 400 x 30 array in 100-row shards (every
   shard written by all of them), ``--rounds`` rounds: the wall time, region writes per
   second, the conflicts met (conditional puts that found their shard changed and were
   retried), and the share of wrong values at the end, guarded and unguarded. On the
   local disk, and on S3 (moto's server with its writes serialized, as the tests use
   it) with ``--s3``.

Results with the machine description go in docs/benchmarks/concurrency.md.

    python benchmarks/independent_writers.py [--repeats 5] [--rounds 3] [--s3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
TESTS = HERE.parent / "tests"
sys.path.insert(0, str(TESTS))


# -- 1. one writer -------------------------------------------------------------------------
def one_writer(repeats: int) -> None:
    import dask
    import dask.array as da

    import shardwise

    dask.config.set(scheduler="synchronous")
    shape, shards, inner = (4000, 256), (100, 256), (20, 256)

    def zeros(path: Path, rows: int) -> None:
        """A new array of ``rows`` rows of zeros (nothing stored) at ``path``."""
        shardwise.to_zarr(
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
        for i in range(400):
            x = da.full((10, shape[1]), float(i), chunks=10)
            shardwise.to_zarr(
                x,
                str(path),
                path="v",
                region=(slice(i * 10, i * 10 + 10),),
                independent_writers=guarded,
            )

    def appends(path: Path, guarded: bool) -> None:
        zeros(path, 0)
        for i in range(100):
            x = da.full((7, shape[1]), float(i), chunks=7)
            shardwise.to_zarr(x, str(path), path="v", append_dim=0, independent_writers=guarded)

    big = (32768, 256)

    def empty_big(path: Path) -> None:
        zeros(path, big[0])

    def whole(path: Path, guarded: bool) -> None:
        x = da.random.default_rng(0).random(big, chunks=shards)
        shardwise.to_zarr(
            x,
            str(path),
            path="v",
            region=(slice(0, big[0]),),
            independent_writers=guarded,
        )

    with tempfile.TemporaryDirectory(
        dir=HERE / "data" if (HERE / "data").is_dir() else None
    ) as tmp:
        print("\n## one writer: guarded (independent_writers=True) against unguarded")
        print("| write | guarded median s (min-max) | unguarded median s (min-max) | ratio |")
        print("|---|---|---|---|")
        for name, job, setup in (
            ("400 region writes of 10 rows", regions, fresh),
            ("100 appends of 7 rows", appends, None),
            ("64 MiB into the existing array, dask chunks = shards", whole, empty_big),
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


# -- 2. contending writers -----------------------------------------------------------------
SHAPE = (400, 30)


def contend(store: str, so: dict | None, nprocs: int, rounds: int, guarded: bool) -> dict:
    import dask.array as da
    import zarr

    import shardwise
    from concurrency_worker import value

    shardwise.to_zarr(
        da.zeros(SHAPE, chunks=(100, SHAPE[1])),
        store,
        path="v",
        shards=(100, SHAPE[1]),
        chunks=(20, SHAPE[1]),
        mode="w",
        storage_options=so,
    )
    cfg = {
        "store": store,
        "storage_options": so,
        "job": "regions",
        "nprocs": nprocs,
        "rounds": rounds,
        "rows": 10,
        "shape": list(SHAPE),
        "independent_writers": guarded,
    }
    t0 = time.perf_counter()
    procs = [
        subprocess.Popen(
            [sys.executable, str(TESTS / "concurrency_worker.py"), json.dumps({**cfg, "proc": p})],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for p in range(nprocs)
    ]
    outs = []
    for p in procs:
        stdout, stderr = p.communicate()
        if p.returncode:
            raise SystemExit(stderr[-3000:])
        outs.append(json.loads(stdout.strip().splitlines()[-1]))
    wall = time.perf_counter() - t0
    got = zarr.open_array(store, path="v", storage_options=so)[...]
    want = value(rounds - 1, range(SHAPE[0]), SHAPE[1])
    return {
        "wall": wall,
        "writes": sum(o["calls"] for o in outs),
        "conflicts": sum(o["conflicts"] for o in outs),
        "wrong": float(np.mean(got != want)),
    }


def contending(rounds: int, s3: bool) -> None:
    print(f"\n## contending writers: interleaved 10-row regions, {rounds} rounds each")
    print(
        "| store | writers | guarded | wall s | region writes/s | conflicts retried | wrong values |"
    )
    print("|---|---|---|---|---|---|---|")
    places = ["local"] + (["s3"] if s3 else [])
    for place in places:
        ctx = _s3_endpoint() if place == "s3" else None
        try:
            so = None
            if ctx is not None:
                server, bucket = ctx.__enter__()
                so = server.storage_options()
            for nprocs in (2, 4, 8):
                for guarded in (True, False):
                    with tempfile.TemporaryDirectory() as tmp:
                        store = (
                            f"s3://{bucket}/n{nprocs}-{guarded}.zarr"
                            if place == "s3"
                            else str(Path(tmp) / "a.zarr")
                        )
                        r = contend(store, so, nprocs, rounds, guarded)
                    print(
                        f"| {place} | {nprocs} | {guarded} | {r['wall']:.2f} "
                        f"| {r['writes'] / r['wall']:.1f} | {r['conflicts']} "
                        f"| {100 * r['wrong']:.1f}% |",
                        flush=True,
                    )
        finally:
            if ctx is not None:
                ctx.__exit__(None, None, None)


class _s3_endpoint:
    """moto's server with serialized writes, the AWS variables pointing at it."""

    def __enter__(self):
        from s3server import S3Server, isolated_aws_environment

        self.tmp = tempfile.TemporaryDirectory()
        self.server = S3Server(Path(self.tmp.name), serialized=True)
        self.server.start()
        self.env = isolated_aws_environment(self.server.endpoint, Path(self.tmp.name))
        self.env.__enter__()
        return self.server, self.server.new_bucket()

    def __exit__(self, *exc):
        self.env.__exit__(*exc)
        self.server.stop()
        self.tmp.cleanup()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--s3", action="store_true")
    ap.add_argument("--skip-one-writer", action="store_true")
    args = ap.parse_args()
    print(f"machine: {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}")
    if not args.skip_one_writer:
        one_writer(args.repeats)
    contending(args.rounds, args.s3)


if __name__ == "__main__":
    main()
