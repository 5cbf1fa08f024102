"""``shardwise.inventory`` on many tiny shards: time and store requests per shard.

A 1-d int32 array of ``--shards`` shards (100, 1,000 and 10,000 by default) of 4 inner
chunks of 4 values each (64-byte shards plus a 68-byte index), one inner chunk in three
all zeros (the fill value, so zarr-python leaves it out: ``write_empty_chunks=False``),
written once by zarr-python to a local store under ``benchmarks/data/``. For each size:

  local         shardwise.inventory(path): LocalStore, the listing with file sizes, one
                suffix read of each shard's index; past ``shardwise.inventory-batch``
                (1000) shards, one dask task per batch on the threaded scheduler
  requests      the same through shardwise.testing.CountingStore, which counts every
                request (the listing is not a request it sees; it is counted as one)
  latency       ``--latency`` seconds added to every request (shardwise.testing.
                LatencyStore, as an object store's round trip would), to show what the
                ``--concurrency`` (64) requests in flight per batch buy

Each is run once to warm up, then ``--repeats`` times; medians are reported, with the
time per stored shard. The inventory is checked against the data written.

    .venv/bin/python benchmarks/inventory.py [--shards 100 1000 10000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from common import (
    DATA_DIR,
    machine,
    median_of,
    timed,
)

INNER = 4  # values per inner chunk
PER_SHARD = 4  # inner chunks per shard
RECIPE_VERSION = 1


def expected_present(nshards: int) -> np.ndarray:
    """Inner chunk i is all zeros (left out) when i % 3 == 1."""
    return np.arange(nshards * PER_SHARD) % 3 != 1


def ensure_store(nshards: int) -> Path:
    import zarr

    path = DATA_DIR / f"inventory-{nshards}-shards.zarr"
    stamp = path.with_name(path.name + ".recipe.json")
    want = {"version": RECIPE_VERSION, "shards": nshards}
    if stamp.exists() and json.loads(stamp.read_text()) == want:
        print(f"  cached  {path}")
        return path
    shutil.rmtree(path, ignore_errors=True)
    n = nshards * PER_SHARD * INNER
    values = np.arange(1, n + 1, dtype="i4").reshape(-1, INNER)
    values[~expected_present(nshards)] = 0
    arr = zarr.create_array(
        str(path),
        name="v",
        shape=(n,),
        chunks=(INNER,),
        shards=(INNER * PER_SHARD,),
        dtype="i4",
        fill_value=0,
        dimension_names=["x"],
        config={"write_empty_chunks": False},
    )
    t, _ = timed(lambda: arr.__setitem__(slice(None), values.ravel()))
    stamp.write_text(json.dumps(want))
    print(f"  wrote   {path} in {t:.1f} s")
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--shards", type=int, nargs="+", default=[100, 1000, 10000])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--latency", type=float, default=0.02, help="seconds; 0 to skip")
    parser.add_argument(
        "--concurrency", type=int, default=64, help="shardwise.inventory-concurrency"
    )
    args = parser.parse_args()

    import dask
    from zarr.storage import LocalStore

    import shardwise
    from shardwise.testing import CountingStore, LatencyStore

    print(json.dumps(machine(), indent=1))
    print(f"shardwise.inventory-concurrency: {args.concurrency}")
    DATA_DIR.mkdir(parents=True, exist_ok=True)
    rows = []
    settings = {"scheduler": "threads", "shardwise.inventory-concurrency": args.concurrency}
    with dask.config.set(settings):
        for nshards in args.shards:
            path = ensure_store(nshards)
            local, ds = median_of(lambda p=path: shardwise.inventory(p), args.repeats)
            truth = expected_present(nshards)
            assert (ds.present.values == truth).all()
            assert ds.attrs["shards_present"] == nshards

            counting = CountingStore(LocalStore(path, read_only=True))
            shardwise.inventory(counting)
            counting.log.clear()
            shardwise.inventory(counting)
            gets = counting.log.gets()
            data_gets = [r for r in gets if r.key.startswith("v/c/")]
            assert all(r.byte_range == f"last {16 * PER_SHARD + 4}" for r in data_gets)
            requests = 1 + len(data_gets)  # the listing + index reads

            slow = None
            if args.latency > 0:
                store = LatencyStore(LocalStore(path, read_only=True), args.latency)
                slow, _ = median_of(
                    lambda s=store: shardwise.inventory(s), max(1, args.repeats // 2)
                )
            rows.append((nshards, local, requests, len(gets) - len(data_gets), slow))

    print()
    print(
        f"{'shards':>8} {'local s':>9} {'us/shard':>9} {'requests':>9} {'metadata':>9}"
        + (f" {f'{args.latency * 1000:g} ms lat s':>14} {'us/shard':>9}" if args.latency else "")
    )
    for nshards, local, requests, meta, slow in rows:
        line = f"{nshards:>8} {local:>9.3f} {local / nshards * 1e6:>9.0f} {requests:>9} {meta:>9}"
        if slow is not None:
            line += f" {slow:>14.3f} {slow / nshards * 1e6:>9.0f}"
        print(line)
    print(
        "requests: 1 listing + one index read per stored shard; metadata: the zarr.json "
        "reads of opening the store (not counted in requests)"
    )


if __name__ == "__main__":
    main()
