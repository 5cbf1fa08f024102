"""One big shard on many workers: ``encode_split`` against one task per shard.

A float32 variable ``v`` (the smooth, noisy, rounded field of ``read_throughput.py``,
which zstd level 1 compresses ~3x) is persisted in the memory of a
``distributed.LocalCluster`` of 2 single-threaded worker processes and written with
``shardwise.to_zarr`` (zstd level 1, inner chunks of 512 x 512 = 1 MiB) two ways:

  case "one big shard"   8192 x 8192 (256 MiB) as ONE shard from ONE dask chunk: with
                         ``encode_split=1`` one task compresses all 256 inner chunks;
                         with ``encode_split="auto"`` (the default) the chunk is cut at
                         inner chunk boundaries into parts that both workers encode, and
                         one task per shard makes the single put
  case "many shards"     ``--size-mib`` (default 1024) in 64 MiB shards, one dask chunk
                         per shard: more shards than threads, so "auto" leaves the graph
                         as it is; both settings are timed to show it costs nothing

Every method runs once as a warm-up, then ``--repeats`` times interleaved; medians and
min-max. The output of every method is checked equal to the input with zarr-python once.
Stores go to ``--data-dir`` (default ``benchmarks/data``; ``/dev/shm/...`` keeps them in
memory). The codec floor is zstd level 1 alone on the same inner chunks on 2 threads, a
reused output buffer per thread (libzstd's ZSTD_compress2), measured before the cluster
starts, best of 3.

    .venv/bin/python benchmarks/encode_split.py [--repeats 5] [--data-dir DIR]
"""

from __future__ import annotations

import argparse
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
    CompressFloor,
    CpuMeter,
    machine,
    make_field,
    print_cpu,
    timed,
    two_workers,
)

INNER = (512, 512)
BIG = (8192, 8192)  # 256 MiB of float32
SHARD = (4096, 4096)  # 64 MiB
SPLITS = (1, "auto")
TARGET = 1.6  # "auto" speed-up over one task for the one big shard


def encoding(shard: tuple[int, int]) -> dict[str, Any]:
    import zarr

    return {"v": {"chunks": INNER, "shards": shard, "compressors": zarr.codecs.ZstdCodec(level=1)}}


def codec_floor(values: np.ndarray, repeats: int) -> float:
    """zstd level 1 on every inner chunk, 2 threads, one reused context and output
    buffer per thread (``common.CompressFloor``); the best of ``repeats``
    runs after a warm-up."""
    chunks = [
        np.ascontiguousarray(values[y : y + INNER[0], x : x + INNER[1]])
        for y in range(0, values.shape[0], INNER[0])
        for x in range(0, values.shape[1], INNER[1])
    ]
    floor = CompressFloor("ZSTD_compress2 (cffi)", chunks[0].nbytes)
    batches = [chunks[i : i + 16] for i in range(0, len(chunks), 16)]
    times = []
    with ThreadPoolExecutor(2) as pool:
        for _ in range(repeats + 1):
            seconds, _ = timed(lambda: floor(batches, pool))
            times.append(seconds)
    return min(times[1:])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--size-mib", type=int, default=1024, help="the many-shards case")
    parser.add_argument("--data-dir", type=Path, default=DATA_DIR)
    args = parser.parse_args(argv)

    import dask
    import xarray as xr
    import zarr
    from distributed import wait

    import shardwise

    info = machine()
    print("machine: " + ", ".join(f"{k} {v}" for k, v in info.items()))
    side = int((args.size_mib * 2**20 // 4) ** 0.5) // SHARD[0] * SHARD[0]
    cases = {"one big shard": (BIG, BIG), "many shards": ((side, side), SHARD)}
    values = {}
    with dask.config.set(scheduler="threads"):
        for case, (shape, _) in cases.items():
            values[case] = make_field(shape).compute()
    floors = {case: codec_floor(v, 3) for case, v in values.items()}
    args.data_dir.mkdir(parents=True, exist_ok=True)
    times: dict[tuple[str, Any], list[float]] = {(c, s): [] for c in cases for s in SPLITS}
    cpu = CpuMeter()
    with two_workers():
        for case, (shape, shard) in cases.items():
            ds = xr.Dataset({"v": (("y", "x"), make_field(shape).rechunk(shard))}).persist()
            wait(ds)
            print(f"{case}: {shape} in shards of {shard}, dask chunks {ds.v.data.chunksize}")
            for rnd in range(args.repeats + 1):
                line = []
                for split in SPLITS:
                    path = args.data_dir / f"encode-split-{split}.zarr"
                    shutil.rmtree(path, ignore_errors=True)
                    seconds, _ = timed(
                        lambda p=path, s=split, d=ds, sh=shard: shardwise.to_zarr(
                            d,
                            p,
                            mode="w",
                            encoding=encoding(sh),
                            consolidated=False,
                            encode_split=s,
                        )
                    )
                    if rnd == 0:
                        got = zarr.open_array(path / "v", mode="r")[...]
                        if not np.array_equal(got, values[case]):
                            raise SystemExit(f"{case} encode_split={split!r}: output differs")
                    else:
                        times[case, split].append(seconds)
                    shutil.rmtree(path, ignore_errors=True)
                    line.append(f"encode_split={split!r} {seconds:.2f} s")
                print(f"  {'warm-up' if rnd == 0 else f'round {rnd}'}: " + "; ".join(line))
            del ds
        cpu_info = cpu.stop()

    print(f"\nmedian of {args.repeats} runs (min-max), GB/s of raw data, ratio to the codec floor")
    for case, (shape, _) in cases.items():
        nbytes = int(np.prod(shape)) * 4
        fl = floors[case]
        print(f"{case}: codec floor {fl:.2f} s ({nbytes / fl / 1e9:.2f} GB/s)")
        for split in SPLITS:
            t = times[case, split]
            m = statistics.median(t)
            print(
                f"  encode_split={split!r:<7} {m:6.2f} s ({min(t):.2f}-{max(t):.2f})"
                f"  {nbytes / m / 1e9:5.2f} GB/s  {fl / m:5.2f} of the floor"
            )
        ratio = statistics.median(times[case, 1]) / statistics.median(times[case, "auto"])
        goal = (
            f"target {TARGET}x: {'met' if ratio >= TARGET else 'MISSED'}"
            if case == "one big shard"
            else "target: no slower"
        )
        print(f"  'auto' is {ratio:.2f}x one task per shard ({goal})")
    print_cpu(cpu_info)


if __name__ == "__main__":
    main()
