"""Irregular dask chunks: written 1:1 as rectilinear shards, against rechunking first.

A float32 variable ``v`` (time, y, x) of 365 x 512 x 1440 (~1 GiB), in dask chunks of
one calendar month along time (31, 28, 31, ... days: what daily files of different
lengths, ``groupby("time.month")`` or a ``concat`` of monthly pieces give), on a
``distributed.LocalCluster`` of 2 single-threaded worker processes, is written to Zarr
v3 under ``benchmarks/data/`` with zstd level 1 and inner chunks of 1 x 256 x 1440
(1.4 MiB). Two sources: *computed*, the values made by the tasks of the same graph (a
pipeline's result written as it is computed), and *persisted*, the values already in
the workers' memory (``ds.persist()``). Three ways:

  shardwise shards="dask"      shardwise.to_zarr(ds, path, shards="dask", encoding=...):
                               each month becomes one shard of a rectilinear grid,
                               written by the task that holds the month
  rechunk + ds.to_zarr         what a user must do today: ds.chunk({"time": 30}) then
                               ds.to_zarr(path, encoding={"v": {"shards": (30, 512,
                               1440), ...}}) (xarray writes regular shards only, from
                               dask chunks aligned to them)
  shardwise regular shards     shardwise.to_zarr with the same regular shards from the
                               monthly chunks (no rechunk: encoded inner chunks travel
                               to the task that writes each shard)
  codec floor                  zstd level 1 alone on the same inner chunks, already
                               contiguous arrays in this process, one reused
                               python-zstandard context per thread on 2 threads,
                               measured before the cluster starts

Each method runs once to warm up and then ``--repeats`` times (medians reported): the
wall time, the bytes moved between workers (the workers' ``transfer_incoming_log``),
and the workers' peak memory (distributed's MemorySampler over the run, and the
largest growth of a worker's peak RSS). The rectilinear output is checked equal to the
input with zarr-python once per source; every output's layout is checked. The bytes
moved by the shards='dask' write are the results of its tasks (None) gathered by the
tree of tasks that waits for them: no array data.

``--data-dir /dev/shm/...`` writes the stores to memory (tmpfs) instead of
``benchmarks/data/``: this machine's disk swings write times by a second from run to
run.

    .venv/bin/python benchmarks/rectilinear.py [--repeats 3] [--data-dir DIR]
"""

from __future__ import annotations

import argparse
import json
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
    SMALL,
    CpuMeter,
    Memory,
    machine,
    memory_probe,
    print_cpu,
    timed,
    two_workers,
    worker_mib,
)

MONTHS = (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
SHAPE = (sum(MONTHS), 512, 180 if SMALL else 1440)  # (SMALL: common.py)
INNER = (1, 256, SHAPE[2])
REGULAR = (30, 512, SHAPE[2])
METHODS = ("shardwise shards='dask'", "rechunk + ds.to_zarr", "shardwise regular shards")
SOURCES = ("computed", "persisted")
TARGET = 1.5  # shards="dask" speed-up over rechunk + ds.to_zarr


def field(block: np.ndarray, block_info: Any = None) -> np.ndarray:
    """Smooth values plus small noise, rounded to 2 decimals (zstd level 1: ~3x)."""
    (t0, t1), (y0, y1), (x0, x1) = block_info[None]["array-location"]
    t = np.arange(t0, t1, dtype=np.float32)[:, None, None]
    y = np.arange(y0, y1, dtype=np.float32)[None, :, None]
    x = np.arange(x0, x1, dtype=np.float32)[None, None, :]
    tau = np.float32(2 * np.pi)
    smooth = 10 * np.sin(tau * x / 1440 + t / 58) * np.cos(tau * y / 512) + 3 * np.sin(
        tau * (x + 2 * y) / 300
    )
    rng = np.random.default_rng(int(t0) * 7 + int(y0))
    noise = rng.standard_normal(block.shape, dtype=np.float32) * np.float32(0.05)
    return np.round(smooth + noise, 2).astype(np.float32)


def dataset() -> Any:
    import dask.array as da
    import xarray as xr

    empty = da.empty(SHAPE, chunks=(MONTHS, SHAPE[1], SHAPE[2]), dtype=np.float32)
    v = empty.map_blocks(field, dtype=np.float32)
    return xr.Dataset({"v": (("time", "y", "x"), v)})


def encoding(shards: tuple[int, ...] | None) -> dict[str, Any]:
    import zarr

    enc: dict[str, Any] = {"chunks": INNER, "compressors": zarr.codecs.ZstdCodec(level=1)}
    if shards is not None:
        enc["shards"] = shards
    return {"v": enc}


def run_method(method: str, ds: Any, path: Path) -> None:
    import shardwise

    if method == "shardwise shards='dask'":
        shardwise.to_zarr(
            ds, path, mode="w", shards="dask", encoding=encoding(None), consolidated=False
        )
    elif method == "rechunk + ds.to_zarr":
        ds.chunk({"time": REGULAR[0]}).to_zarr(
            path, mode="w", encoding=encoding(REGULAR), consolidated=False, zarr_format=3
        )
    elif method == "shardwise regular shards":
        shardwise.to_zarr(ds, path, mode="w", encoding=encoding(REGULAR), consolidated=False)
    else:  # pragma: no cover
        raise AssertionError(method)


def check_layout(method: str, path: Path) -> None:
    meta = json.loads((path / "v" / "zarr.json").read_text())
    grid = meta["chunk_grid"]
    inner = meta["codecs"][0]["configuration"]["chunk_shape"]
    if method == "shardwise shards='dask'":
        ok = grid["name"] == "rectilinear" and grid["configuration"]["chunk_shapes"][1:] == [
            SHAPE[1],
            SHAPE[2],
        ]
    else:
        ok = grid["name"] == "regular" and grid["configuration"]["chunk_shape"] == list(REGULAR)
    if not ok or inner != list(INNER):
        raise SystemExit(f"{method}: grid {grid}, inner chunks {inner}")


def check_values(path: Path, values: np.ndarray) -> None:
    import zarr

    with zarr.config.set({"array.rectilinear_chunks": True}):
        got = zarr.open_array(path / "v", mode="r")[...]
    if not np.array_equal(got, values):
        raise SystemExit(f"{path}: {int(np.count_nonzero(got != values))} values differ")


def _transfer_reset(dask_worker: Any) -> None:
    dask_worker.transfer_incoming_log.clear()


def _transferred(dask_worker: Any) -> int:
    return int(sum(d.get("total", 0) for d in dask_worker.transfer_incoming_log))


def codec_floor(values: np.ndarray, repeats: int) -> list[float]:
    """zstd level 1 on every inner chunk, contiguous already, 2 threads, a reused
    context per thread."""
    import threading

    import zstandard

    chunks = [
        np.ascontiguousarray(values[t, y : y + INNER[1]])
        for t in range(SHAPE[0])
        for y in range(0, SHAPE[1], INNER[1])
    ]
    local = threading.local()

    def compress(c: np.ndarray) -> int:
        z = getattr(local, "z", None)
        if z is None:
            z = local.z = zstandard.ZstdCompressor(level=1)
        return len(z.compress(c))

    times = []
    with ThreadPoolExecutor(2) as pool:
        for _ in range(repeats + 1):
            seconds, _ = timed(lambda: sum(pool.map(compress, chunks, chunksize=16)))
            times.append(seconds)
    return times[1:]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--data-dir", type=Path, default=DATA_DIR, help="where the stores are written"
    )
    args = parser.parse_args(argv)

    import dask
    from distributed import wait

    info = machine()
    print("machine: " + ", ".join(f"{k} {v}" for k, v in info.items()))
    nbytes = int(np.prod(SHAPE)) * 4
    print(f"v: {SHAPE} float32 ({nbytes / 2**30:.2f} GiB), dask chunks of months {MONTHS}")
    with dask.config.set(scheduler="threads"):
        values = dataset().v.values
    floor = codec_floor(values, args.repeats)
    print(
        f"codec floor: {statistics.median(floor):.2f} s (runs {', '.join(f'{t:.2f}' for t in floor)})"
    )

    args.data_dir.mkdir(parents=True, exist_ok=True)
    print(f"stores in {args.data_dir}")
    rows: dict[tuple[str, str], dict[str, list[Any]]] = {
        (src, m): {"s": [], "moved": [], "mem": []} for src in SOURCES for m in METHODS
    }
    cpu = CpuMeter()
    with two_workers() as client:
        for source in SOURCES:
            print(f"source: {source}")
            ds = dataset()
            if source == "persisted":
                ds = ds.persist()
                wait(ds)
                where = client.who_has()
                print(f"  {len(where)} monthly blocks in the workers' memory")
            for rnd in range(args.repeats + 1):
                line = []
                for method in METHODS:
                    path = args.data_dir / f"rectilinear-{METHODS.index(method)}.zarr"
                    shutil.rmtree(path, ignore_errors=True)
                    client.run(_transfer_reset)
                    memory: list[Memory] = []
                    with memory_probe(client, f"{source} {method} {rnd}", memory):
                        seconds, _ = timed(lambda m=method, p=path, d=ds: run_method(m, d, p))
                    moved = sum(client.run(_transferred).values())
                    check_layout(method, path)
                    if rnd == 0 and method == METHODS[0]:
                        check_values(path, values)
                        print("  checked the rectilinear output: equal to the input")
                    shutil.rmtree(path, ignore_errors=True)
                    r = rows[source, method]
                    if rnd:
                        r["s"].append(seconds)
                        r["moved"].append(moved)
                        r["mem"].append(memory[0])
                    line.append(f"{method} {seconds:.2f} s, moved {moved / MIB:.1f} MiB")
                print(f"  {'warm-up' if rnd == 0 else f'round {rnd}'}: " + "; ".join(line))
            del ds
            client.run(lambda: __import__("gc").collect())
        cpu_info = cpu.stop()  # while the workers are alive to be counted

    print(f"\nmedian of {args.repeats} runs (1 warm-up not counted)")
    header = (
        f"{'source':<10} {'method':<26} {'wall s':>7} {'GB/s':>6} {'vs floor':>8} "
        f"{'moved MiB':>9} {'+cluster MiB':>12} {'+worker MiB':>11}"
    )
    print(header + "\n" + "-" * len(header))
    fl = statistics.median(floor)
    print(f"{'':<10} {'codec floor':<26} {fl:7.2f} {nbytes / fl / 1e9:6.2f} {1:8.2f}")
    for (source, method), r in rows.items():
        s = statistics.median(r["s"])
        moved = statistics.median(r["moved"])
        cl = statistics.median(m.cluster_delta for m in r["mem"])
        wk_text = worker_mib(r["mem"])
        print(
            f"{source:<10} {method:<26} {s:7.2f} {nbytes / s / 1e9:6.2f} {fl / s:8.2f} "
            f"{moved / MIB:9.1f} {cl / MIB:12.0f} {wk_text}"
        )
    for source in SOURCES:
        ours, theirs = rows[source, METHODS[0]], rows[source, METHODS[1]]
        ratio = statistics.median(theirs["s"]) / statistics.median(ours["s"])
        most = max(ours["moved"])
        print(
            f"{source}: shards='dask' {ratio:.2f}x faster than rechunk + ds.to_zarr "
            f"(target {TARGET}x: {'met' if ratio >= TARGET else 'MISSED'}); at most {most:,} "
            f"bytes moved between workers (target: no array data, {'met' if most < MIB else 'MISSED'})"
        )
    print_cpu(cpu_info)


if __name__ == "__main__":
    main()
