"""``shardwise info`` on a giant sparse grid: time and memory against the shards stored.

What ``info``, ``verify`` and opening an array cost must follow the shards
*stored*, never the grid. The array: 10**9 x 10**9 float32 in shards of
100 x 100 (a grid of 10**7 x 10**7 = 10**14 shards) of inner chunks of 10 x 10, with
``--stored`` shards written (1, 10, 100 and 1,000 by default; one value each, at
scattered places, by zarr-python) to local stores under ``benchmarks/data/``. For each:

  info s         shardwise.info(path): one listing, one index read per stored shard
  us/shard       that per stored shard
  requests       the index reads info made (shardwise.testing.CountingStore), + 1 listing
  verify s       shardwise.verify(path)
  point s        ArrayReader.open(path, "v") and one point read (one shard read)
  inventory s    shardwise.inventory(path, "v") refusing the grid (TooLargeError)
  peak MiB       the growth of the peak RSS of a fresh process running info, over
                 what it held after importing shardwise, zarr, xarray and dask

Each time is the median of ``--repeats`` runs after one warm-up. Before the change,
info, inventory and verify on this array tried to allocate 728 TiB (MemoryError).

    .venv/bin/python benchmarks/giant_grid.py [--stored 1 10 100 1000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from common import (
    DATA_DIR,
    machine,
    median_of,
    timed,
)

SHARD, INNER = 100, 10
GRID = 10**7  # shards per dimension
EXTENT = GRID * SHARD
RECIPE_VERSION = 1


def points(n: int) -> list[tuple[int, int]]:
    """``n`` places in ``n`` different shards, scattered over the grid."""
    rng = np.random.default_rng(27)
    shards: set[tuple[int, int]] = set()
    while len(shards) < n:
        shards.add((int(rng.integers(GRID)), int(rng.integers(GRID))))
    return [(i * SHARD + 5, j * SHARD + 7) for i, j in sorted(shards)]


def ensure_store(n: int) -> Path:
    import zarr

    path = DATA_DIR / f"giant-grid-{n}-stored.zarr"
    stamp = path.with_name(path.name + ".recipe.json")
    want = {"version": RECIPE_VERSION, "stored": n}
    if stamp.exists() and json.loads(stamp.read_text()) == want:
        print(f"  cached  {path}")
        return path
    shutil.rmtree(path, ignore_errors=True)
    group = zarr.open_group(str(path), mode="w", zarr_format=3)
    arr = group.create_array(
        "v",
        shape=(EXTENT, EXTENT),
        chunks=(INNER, INNER),
        shards=(SHARD, SHARD),
        dtype="f4",
        fill_value=np.nan,
        dimension_names=["y", "x"],
    )

    def write() -> None:
        for k, (i, j) in enumerate(points(n)):
            arr[i, j] = k + 1

    t, _ = timed(write)
    stamp.write_text(json.dumps(want))
    print(f"  wrote   {path} in {t:.1f} s")
    return path


def peak_growth(path: Path) -> float:
    """MiB the peak RSS of a fresh process grows by while it runs info."""
    code = textwrap.dedent(
        f"""
        import resource
        import dask, numpy, xarray, zarr, shardwise, shardwise.io.reader
        import shardwise.tools.info, shardwise.tools.inventory
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        shardwise.info({str(path)!r})
        print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=600
    )
    return int(out.stdout.strip()) / 1024  # ru_maxrss is in KiB on Linux


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--stored", type=int, nargs="+", default=[1, 10, 100, 1000])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    from zarr.storage import LocalStore

    import shardwise
    from shardwise.errors import TooLargeError
    from shardwise.testing import CountingStore

    print(json.dumps(machine(), indent=1))
    DATA_DIR.mkdir(parents=True, exist_ok=True)
    rows = []
    for n in args.stored:
        path = ensure_store(n)
        t_info, found = median_of(lambda p=path: shardwise.info(p), args.repeats)
        (a,) = found.arrays
        assert a.error is None and a.shards_present == n and a.shards_total == GRID**2

        counting = CountingStore(LocalStore(path, read_only=True))
        shardwise.info(counting)
        reads = sum(1 for r in counting.log.gets() if r.key.startswith("v/c/"))
        assert reads == n

        t_verify, report = median_of(lambda p=path: shardwise.verify(p), args.repeats)
        assert report.ok and report.shards == n

        i, j = points(n)[0]

        def point(p: Path = path, i: int = i, j: int = j) -> float:
            return float(shardwise.ArrayReader.open(p, "v")[i, j])

        t_point, value = median_of(point, args.repeats)
        assert value == 1.0

        def refused(p: Path = path) -> bool:
            try:
                shardwise.inventory(p, "v")
            except TooLargeError:
                return True
            return False

        t_inventory, ok = median_of(refused, args.repeats)
        assert ok
        rows.append((n, t_info, reads + 1, t_verify, t_point, t_inventory, peak_growth(path)))

    print()
    print(
        f"{'stored':>7} {'info s':>8} {'us/shard':>9} {'requests':>9} {'verify s':>9} "
        f"{'point s':>8} {'inventory s':>12} {'peak MiB':>9}"
    )
    for n, t_info, requests, t_verify, t_point, t_inv, peak in rows:
        print(
            f"{n:>7} {t_info:>8.4f} {t_info / n * 1e6:>9.0f} {requests:>9} {t_verify:>9.4f} "
            f"{t_point:>8.4f} {t_inv:>12.4f} {peak:>9.1f}"
        )
    print(
        f"grid: {GRID:,} x {GRID:,} shards ({GRID**2:,}); requests: 1 listing + one index "
        "read per stored shard; inventory: refused with TooLargeError before any index read"
    )


if __name__ == "__main__":
    main()
