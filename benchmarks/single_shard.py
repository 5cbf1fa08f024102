"""One shard read whole in one process, on one thread: shardwise against the decode
floor and a compiled reader.

The question: would a compiled per-chunk loop read a shard of many small
inner chunks faster than shardwise's Python loop? For the first shard (64 MiB) of each
throughput store (benchmarks/data, common.py's recipe: 2-D and 3-D fields,
inner chunks of 1 MiB and 64 KiB, zstd level 1), best and median of ``--repeats`` runs:

  floor          numcodecs.Zstd().decode(chunk, out=buffer) over the shard's inner
                 chunks, compressed bytes already in memory, one reused output buffer
  shardwise      ArrayReader.read_into of the whole shard into a reused output array
                 (file read, index, decode, placement)
  zarrs 1 / 2    zarr-python with zarrs' Rust codec pipeline (zarrs.ZarrsCodecPipeline)
                 reading the same region, with threading.max_workers 1 and 2

Run: python benchmarks/single_shard.py [--shape 2d|3d|both] [--repeats 7]. Not part of
the test suite; zarrs is skipped when it is not installed.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

from common import (
    ensure_store,
    load_compressed,
    machine,
    selected_fields,
)


def timed(fn: Callable[[], Any], repeats: int) -> tuple[float, float]:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times), statistics.median(times)


def main() -> None:
    import numcodecs
    import zarr
    from zarr.storage import LocalStore

    from shardwise.io.reader import ArrayReader

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", choices=("2d", "3d", "both"), default="both")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--size-mib", type=int, default=1024, help="the 2-D store's size")
    args = parser.parse_args()
    print("machine: " + ", ".join(f"{k} {v}" for k, v in machine().items()))
    have_zarrs = importlib.util.find_spec("zarrs") is not None
    rows = []
    for fld in selected_fields(args.shape, args.size_mib, 512):
        for label in fld.inner:
            path = ensure_store(fld, label)
            nbytes = math.prod(fld.inner[label]) * 4
            chunks = [bytes(c) for c in load_compressed(path, nbytes).shards[0]]
            buf = np.empty(nbytes, dtype=np.uint8)
            zstd = numcodecs.Zstd()

            def floor(
                chunks: list[bytes] = chunks, buf: np.ndarray = buf, zstd: Any = zstd
            ) -> None:
                for c in chunks:
                    zstd.decode(c, out=buf)

            region = tuple(slice(0, s) for s in fld.shard)
            reader = ArrayReader.open(LocalStore(str(path), read_only=True), "v")
            plan = reader.info.layout.plan(list(region))
            out = np.empty(fld.shard, dtype=np.float32)
            results = {
                "floor": timed(floor, args.repeats),
                "shardwise": timed(lambda r=reader, p=plan, o=out: r.read_into(p, o), args.repeats),
            }
            if have_zarrs:
                for threads in (1, 2):
                    config = {
                        "codec_pipeline.path": "zarrs.ZarrsCodecPipeline",
                        "threading.max_workers": threads,
                    }
                    with zarr.config.set(config):
                        arr = zarr.open_array(str(path), path="v", mode="r")
                        results[f"zarrs {threads}"] = timed(
                            lambda a=arr, r=region: a[r], args.repeats
                        )
            config = f"{fld.name}, {label} ({len(chunks)} chunks)"
            print(
                f"  {config}: "
                + ", ".join(f"{k} {b * 1e3:.1f}/{m * 1e3:.1f} ms" for k, (b, m) in results.items())
            )
            rows.append((config, results))
    print("\nOne 64 MiB shard, one process, ms (best / median):\n")
    names = list(rows[0][1])
    print("| shard | " + " | ".join(names) + " |")
    print("|---|" + "---:|" * len(names))
    for config, results in rows:
        print(
            f"| {config} | "
            + " | ".join(f"{b * 1e3:.1f} / {m * 1e3:.1f}" for b, m in results.values())
            + " |"
        )


if __name__ == "__main__":
    main()
