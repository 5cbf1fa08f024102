"""Resharding a Zarr v2 store: shardwise.reshard against xarray's route and a plain copy.

A float32 variable ``v`` (time, y, x) of 256 x 1024 x 1024 (1 GiB raw) in a Zarr v2
store of 1 x 512 x 512 chunks (1 MiB, 1,024 objects) compressed with zstd level 1,
written once under ``benchmarks/data/``, is resharded on a ``distributed.LocalCluster``
of 2 single-threaded worker processes to Zarr v3 with shards of 16 x 1024 x 1024
(64 MiB):

repack (the same inner chunks, 1 x 512 x 512):
  shardwise.reshard        shardwise.reshard(src, dst, shards={"time": 16, "y": 1024,
                           "x": 1024}): the compressed chunks moved as bytes
  xarray                   xr.open_zarr(src).to_zarr(dst, zarr_format=3, encoding=
                           {"v": {"chunks": ..., "shards": ...}}, align_chunks=True)
  file copy (floor)        shutil.copytree(src, dst)

re-encode (other inner chunks, 4 x 256 x 256, also 1 MiB):
  shardwise.reshard        ... chunks={"time": 4, "y": 256, "x": 256}
  xarray                   the same route with the new inner chunks

Each method runs once to warm up and then ``--repeats`` times (medians reported):
wall time, bytes written, and the workers' peak memory (distributed's MemorySampler,
and the largest growth of a worker's peak RSS). Dirty pages are flushed before each
method. ``--data-dir /dev/shm/...`` keeps the stores in memory (tmpfs): the disk of a
shared VM (write-back throttling, burst limits) then does not swing the timings. Every output is checked once: xarray opens it identical to the source.

    .venv/bin/python benchmarks/reshard.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from common import (
    DATA_DIR,
    MIB,
    TOOLS_INNER,
    TOOLS_SHAPE,
    TOOLS_SHARD,
    CpuMeter,
    Memory,
    machine,
    memory_probe,
    print_cpu,
    stored_bytes,
    timed,
    tools_values,
    two_workers,
    worker_mib,
)

OTHER_INNER = (4, 256, 256)
METHODS = {
    "repack": ("shardwise.reshard", "xarray", "file copy (floor)"),
    "re-encode": ("shardwise.reshard", "xarray"),
}
TARGETS = {"repack": 5.0, "re-encode": 1.3}  # speed-up over xarray's route


def source(data_dir: Path) -> Path:
    """The Zarr v2 store, written unless a matching one is there."""
    import numcodecs
    import zarr

    path = data_dir / "reshard-v2.zarr"
    stamp = data_dir / "reshard-v2.json"
    want = {"shape": TOOLS_SHAPE, "chunks": TOOLS_INNER, "compressor": "zstd1", "v": 1}
    if stamp.exists() and json.loads(stamp.read_text()) == json.loads(json.dumps(want)):
        return path
    print(f"  writing the Zarr v2 store {path} ...", flush=True)
    shutil.rmtree(path, ignore_errors=True)
    root = zarr.open_group(path, mode="w", zarr_format=2)
    arr = root.create_array(
        "v",
        shape=TOOLS_SHAPE,
        chunks=TOOLS_INNER,
        dtype="<f4",
        compressors=numcodecs.Zstd(level=1),
        fill_value=np.nan,
        attributes={"_ARRAY_DIMENSIONS": ["time", "y", "x"], "units": "K"},
    )

    def block(t: int) -> None:
        arr[t : t + TOOLS_SHARD[0]] = tools_values(t, t + TOOLS_SHARD[0])

    with ThreadPoolExecutor(2) as pool:
        list(pool.map(block, range(0, TOOLS_SHAPE[0], TOOLS_SHARD[0])))
    stamp.write_text(json.dumps(want))
    return path


def run(case: str, method: str, src: Path, dst: Path) -> None:
    import xarray as xr

    import shardwise

    inner = TOOLS_INNER if case == "repack" else OTHER_INNER
    if method == "file copy (floor)":
        shutil.copytree(src, dst)
    elif method == "shardwise.reshard":
        sizes = dict(zip(("time", "y", "x"), TOOLS_SHARD, strict=True))
        chunks = None if case == "repack" else dict(zip(("time", "y", "x"), inner, strict=True))
        shardwise.reshard(src, dst, shards=sizes, chunks=chunks)
    else:
        import zarr

        enc = {
            "v": {
                "chunks": inner,
                "shards": TOOLS_SHARD,
                "compressors": zarr.codecs.ZstdCodec(level=1),
            }
        }
        ds = xr.open_zarr(src, consolidated=False)
        ds.to_zarr(dst, zarr_format=3, encoding=enc, align_chunks=True, consolidated=False)


def check(src: Path, dst: Path) -> None:
    import xarray as xr

    with xr.open_zarr(src, consolidated=False) as a, xr.open_zarr(dst, consolidated=False) as b:
        for t in range(0, TOOLS_SHAPE[0], TOOLS_SHARD[0]):
            xr.testing.assert_identical(
                a.isel(time=slice(t, t + TOOLS_SHARD[0])).load(),
                b.isel(time=slice(t, t + TOOLS_SHARD[0])).load(),
            )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=DATA_DIR,
        help="where the stores go (e.g. /dev/shm/shardwise: memory, no disk in the timings)",
    )
    args = parser.parse_args(argv)

    info = machine()
    print("machine: " + ", ".join(f"{k} {v}" for k, v in info.items()))
    nbytes = int(np.prod(TOOLS_SHAPE)) * 4
    args.data_dir.mkdir(parents=True, exist_ok=True)
    src = source(args.data_dir)
    print(
        f"v: {TOOLS_SHAPE} float32 ({nbytes / 2**30:.2f} GiB raw, {stored_bytes(src) / MIB:.0f} MiB "
        f"stored), Zarr v2 chunks {TOOLS_INNER} -> shards {TOOLS_SHARD}"
    )
    rows: dict[tuple[str, str], dict[str, list[Any]]] = {
        (c, m): {"s": [], "bytes": [], "mem": []} for c, ms in METHODS.items() for m in ms
    }
    cpu = CpuMeter()
    with two_workers() as client:
        for case, methods in METHODS.items():
            print(f"{case}:")
            for rnd in range(args.repeats + 1):
                line = []
                for method in methods:
                    dst = args.data_dir / f"resharded-{method.split()[0].strip('.')}.zarr"
                    shutil.rmtree(dst, ignore_errors=True)
                    os.sync()
                    memory: list[Memory] = []
                    with memory_probe(client, f"{case} {method} {rnd}", memory):
                        seconds, _ = timed(lambda c=case, m=method, d=dst: run(c, m, src, d))
                    r = rows[case, method]
                    if rnd:
                        r["s"].append(seconds)
                        r["bytes"].append(stored_bytes(dst))
                        r["mem"].append(memory[0])
                    elif method != "file copy (floor)":
                        check(src, dst)
                    shutil.rmtree(dst, ignore_errors=True)
                    line.append(f"{method} {seconds:.2f} s")
                print(
                    f"  {'warm-up (outputs checked)' if rnd == 0 else f'round {rnd}'}: "
                    + "; ".join(line)
                )
        cpu_info = cpu.stop()

    print(f"\nmedian of {args.repeats} runs (1 warm-up not counted)")
    header = (
        f"{'case':<10} {'method':<18} {'wall s':>7} {'GB/s raw':>8} {'written MiB':>11} "
        f"{'+cluster MiB':>12} {'+worker MiB':>11}"
    )
    print(header + "\n" + "-" * len(header))
    for (case, method), r in rows.items():
        s = statistics.median(r["s"])
        cl = statistics.median(m.cluster_delta for m in r["mem"])
        wk_text = worker_mib(r["mem"])
        print(
            f"{case:<10} {method:<18} {s:7.2f} {nbytes / s / 1e9:8.2f} "
            f"{statistics.median(r['bytes']) / MIB:11.0f} {cl / MIB:12.0f} {wk_text}"
        )
    for case in METHODS:
        ours = statistics.median(rows[case, "shardwise.reshard"]["s"])
        theirs = statistics.median(rows[case, "xarray"]["s"])
        text = (
            f"{case}: reshard {theirs / ours:.2f}x faster than xarray (target {TARGETS[case]}x: "
            f"{'met' if theirs / ours >= TARGETS[case] else 'MISSED'})"
        )
        if case == "repack":
            floor = statistics.median(rows[case, "file copy (floor)"]["s"])
            paired = statistics.median(
                a / b
                for a, b in zip(
                    rows[case, "shardwise.reshard"]["s"],
                    rows[case, "file copy (floor)"]["s"],
                    strict=True,
                )
            )
            text += (
                f", {ours / floor:.2f}x the time of a plain copy (median of the rounds' "
                f"ratios {paired:.2f}x; target <= 2x: {'met' if ours / floor <= 2 else 'MISSED'})"
            )
        else:
            mine = statistics.median(
                m.worker_delta or 0 for m in rows[case, "shardwise.reshard"]["mem"]
            )
            xa = statistics.median(m.worker_delta or 0 for m in rows[case, "xarray"]["mem"])
            text += f"; worker peak {mine / max(xa, 1):.2f}x xarray's (target <= 0.5x: " + (
                "met)" if mine <= xa / 2 else "MISSED)"
            )
        print(text)
    print_cpu(cpu_info)


if __name__ == "__main__":
    main()
