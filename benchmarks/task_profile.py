"""Where a read task's and a write task's time goes, per shard, next to the codec floor.

A profile of one task (file read, decode, copy into the output, page faults, sum,
scheduling), measured on the throughput benchmarks' data
(the 1 GiB 2-D field and the 512^3 3-D field, 64 MiB shards, zstd level 1, inner chunks
of 1 MiB and 64 KiB; stores cached in benchmarks/data by common.py's recipe):

  floor        the codec work alone on one shard's chunks (common.py's floors:
               decode into one reused buffer / ZSTD_compress2 into one reused buffer),
               on 2 threads in this process before the cluster starts, best of 3,
               given per shard per thread.
  cluster      a LocalCluster of 2 worker processes x 1 thread. Reads are
               ``ds.v.sum(skipna=False).compute()`` (engine="shardwise", chunks={});
               writes ``shardwise.to_zarr`` of the field persisted in dask chunks =
               shards. Inside the workers the reader's and writer's own functions are
               wrapped with timers (wall and thread CPU time, and the thread's minor page
               faults); dask's task stream gives each task's compute time, and the
               client the job's wall time. Each round's figures are per shard,
               averaged over the shards the round wrote or read; the table gives the
               median over ``--rounds`` rounds (after one warm-up).

Read columns: decode (into the scratch buffer, or straight into the output where an
inner chunk fills contiguous rows of it), file read (the shard file into the reused
buffer), copy + steps (the rest of the read: placing the chunks into the output, the
per-chunk Python steps, the index), output (allocating the task's output array), sum
(the rest of the fused task), idle (the workers' time not spent in tasks, per shard),
faults (minor page faults in the read). Write columns: compress, gather (copying a
non-contiguous inner chunk into a contiguous buffer for the compressor), empty check,
file write (one put per shard), other (the rest of the task), idle, faults.

Run: python benchmarks/task_profile.py [--op read|write|both] [--shape 2d|3d|both]
[--inner "1 MiB"|"64 KiB"|both] [--rounds 3].
"""

from __future__ import annotations

import argparse
import functools
import math
import shutil
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from common import (
    DATA_DIR,
    FLOOR_RUNS,
    CompressFloor,
    DecodeFloor,
    ensure_store,
    inner_chunks,
    load_compressed,
    machine,
    selected_fields,
    two_workers,
)

READ_PROBES = {  # (module, class, function) -> label
    ("shardwise.codecs._decode", "ChunkDecoder", "decode"): "decode",
    ("shardwise.codecs._decode", "ChunkDecoder", "decode_into"): "decode",
    ("shardwise.io.reader", "ArrayReader", "_fetch_local"): "file read",
    ("shardwise.io.reader", "ArrayReader", "_execute"): "execute",
    ("shardwise.io.reader", "ArrayReader", "read"): "read",
}
WRITE_PROBES = {
    ("shardwise.codecs._zstd", "ZstdEncode", "encode_into"): "compress",
    ("shardwise.codecs._encode", "ChunkEncoder", "_serialized"): "gather",
    ("shardwise.graph.target", "WriteTarget", "keeps"): "empty check",
    ("shardwise.graph.target", "ShardSink", "put"): "file write",
}


# -- inside the workers ------------------------------------------------------------------
def install(probes: dict[tuple[str, str, str], str]) -> bool:
    """Wrap the functions of ``probes`` with timers (once per process). A call inside
    another probe of the same label (decode_into falling back to decode) counts once."""
    import importlib
    import resource
    import threading

    mod = importlib.import_module("shardwise.codecs._decode")
    if getattr(mod, "_task_profile", None) is not None:
        return False
    totals: dict[str, list[float]] = {}
    active = threading.local()
    mod._task_profile = totals  # type: ignore[attr-defined]
    for (module, cls_name, name), label in probes.items():
        cls = getattr(importlib.import_module(module), cls_name)
        real = getattr(cls, name)

        def timed(*args: Any, _real: Any = real, _label: str = label, **kwargs: Any) -> Any:
            if getattr(active, _label, False):
                return _real(*args, **kwargs)
            setattr(active, _label, True)
            t, c = time.perf_counter(), time.thread_time()
            f = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
            try:
                return _real(*args, **kwargs)
            finally:
                row = totals.setdefault(_label, [0.0, 0.0, 0.0, 0.0])
                row[0] += time.perf_counter() - t
                row[1] += time.thread_time() - c
                row[2] += resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - f
                row[3] += 1
                setattr(active, _label, False)

        setattr(cls, name, timed)
    return True


def collect() -> dict[str, list[float]]:
    """This worker's totals since the last call (wall s, CPU s, page faults, calls)."""
    import shardwise.codecs._decode as mod

    totals = dict(mod._task_profile)  # type: ignore[attr-defined]
    mod._task_profile.clear()  # type: ignore[attr-defined]
    return totals


# -- in the client -----------------------------------------------------------------------
def run_round(client: Any, job: Any) -> tuple[float, float, dict[str, list[float]]]:
    """Run ``job`` once; returns its wall time, the workers' summed task compute time,
    and the workers' probe totals summed."""
    from distributed import get_task_stream

    client.run(collect)
    t0 = time.perf_counter()
    with get_task_stream(client) as ts:
        job()
    wall = time.perf_counter() - t0
    busy = sum(
        s["stop"] - s["start"] for t in ts.data for s in t["startstops"] if s["action"] == "compute"
    )
    totals: dict[str, list[float]] = {}
    for per_worker in client.run(collect).values():
        for label, row in per_worker.items():
            acc = totals.setdefault(label, [0.0, 0.0, 0.0, 0.0])
            for i, v in enumerate(row):
                acc[i] += v
    return wall, busy, totals


def _get(totals: dict[str, list[float]], label: str, i: int = 0) -> float:
    """A probe's total: wall time (i=0), CPU time (1), page faults (2), calls (3)."""
    return totals.get(label, [0.0] * 4)[i]


def ms(x: float) -> str:
    return f"{x * 1e3:.1f}"


def profile_read(client: Any, path: Path, nshards: int, rounds: int) -> dict[str, float]:
    import xarray as xr

    ds = xr.open_dataset(path, engine="shardwise", chunks={}, consolidated=False)
    job = lambda: ds.v.sum(skipna=False).compute()  # noqa: E731
    job()  # warm-up
    rows = []
    for _ in range(rounds):
        wall, busy, t = run_round(client, job)
        get = functools.partial(_get, t)
        rows.append(
            {
                "decode": get("decode"),
                "decode CPU": get("decode", 1),
                "file read": get("file read"),
                "copy + steps": get("execute") - get("decode") - get("file read"),
                "output": get("read") - get("execute"),
                "sum": busy - get("read"),
                "idle": 2 * wall - busy,
                "faults": get("read", 2),
                "total": wall * 2,
            }
        )
    return {k: statistics.median(r[k] for r in rows) / nshards for k in rows[0]}


def profile_write(client: Any, fld: Any, label: str, nshards: int, rounds: int) -> dict[str, float]:
    import xarray as xr
    import zarr
    from distributed import wait

    import shardwise

    ds = xr.Dataset({"v": (fld.dims, fld.make(fld.shape))}).persist()
    wait(ds)
    path = DATA_DIR / "task-profile-write.zarr"
    enc = {"shards": fld.shard, "chunks": fld.inner[label]}

    def job() -> None:
        shutil.rmtree(path, ignore_errors=True)
        encoding = {"v": dict(enc, compressors=zarr.codecs.ZstdCodec(level=1))}
        shardwise.to_zarr(ds, path, mode="w", consolidated=False, encoding=encoding)

    job()  # warm-up
    rows = []
    for _ in range(rounds):
        wall, busy, t = run_round(client, job)
        get = functools.partial(_get, t)
        parts = ("compress", "gather", "empty check", "file write")
        rows.append(
            {k: get(k) for k in parts}
            | {
                "compress CPU": get("compress", 1),
                "other": busy - sum(get(k) for k in parts),
                "idle": 2 * wall - busy,
                "faults": sum(get(k, 2) for k in parts),
                "total": wall * 2,
            }
        )
    shutil.rmtree(path, ignore_errors=True)
    return {k: statistics.median(r[k] for r in rows) / nshards for k in rows[0]}


def floor_per_shard(op: str, fld: Any, label: str, path: Path) -> float:
    """The codec floor of one shard on one thread: best of FLOOR_RUNS on 2 threads,
    times the threads the shards kept busy, over the shards."""
    chunk_nbytes = math.prod(fld.inner[label]) * 4
    if op == "read":
        shards: Any = load_compressed(path, chunk_nbytes).shards
        floor: Any = DecodeFloor(chunk_nbytes)
    else:
        shards = inner_chunks(fld.make(fld.shape).compute(), fld.shard, fld.inner[label])
        floor = CompressFloor("ZSTD_compress2 (cffi)", chunk_nbytes)
    times = []
    with ThreadPoolExecutor(2) as pool:
        floor(shards, pool)  # warm-up
        for _ in range(FLOOR_RUNS):
            t0 = time.perf_counter()
            floor(shards, pool)
            times.append(time.perf_counter() - t0)
    return min(times) * min(2, len(shards)) / len(shards)


def table(op: str, rows: list[tuple[str, float, dict[str, float]]]) -> str:
    cols = list(rows[0][2])
    head = f"| {op} | floor | " + " | ".join(cols) + " | floor / total |"
    out = [head, "|" + "---|" * (len(cols) + 3)]
    for config, floor, r in rows:
        cells = [f"{r[c]:.0f}" if c == "faults" else ms(r[c]) for c in cols]
        out.append(
            f"| {config} | {ms(floor)} | " + " | ".join(cells) + f" | {floor / r['total']:.2f} |"
        )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--op", choices=("read", "write", "both"), default="both")
    parser.add_argument("--shape", choices=("2d", "3d", "both"), default="both")
    parser.add_argument("--inner", choices=("1 MiB", "64 KiB", "both"), default="both")
    parser.add_argument("--size-mib", type=int, default=1024, help="2-D field size (1024)")
    parser.add_argument("--size-3d", type=int, default=512, help="3-D field edge (512)")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds (3)")
    args = parser.parse_args(argv)
    ops = ("read", "write") if args.op == "both" else (args.op,)
    labels = ("1 MiB", "64 KiB") if args.inner == "both" else (args.inner,)
    fields = selected_fields(args.shape, args.size_mib, args.size_3d)
    print("machine: " + ", ".join(f"{k} {v}" for k, v in machine().items()))
    configs = []
    for fld in fields:
        for label in labels:
            path = ensure_store(fld, label)
            nshards = math.prod(-(-n // s) for n, s in zip(fld.shape, fld.shard, strict=True))
            floors = {op: floor_per_shard(op, fld, label, path) for op in ops}
            configs.append((fld, label, path, nshards, floors))
            print(
                f"  floor {fld.name} {label}: "
                + ", ".join(f"{k} {ms(v)} ms" for k, v in floors.items())
            )
    results: dict[str, list[tuple[str, float, dict[str, float]]]] = {op: [] for op in ops}
    with two_workers() as client:
        for op in ops:
            client.run(install, READ_PROBES if op == "read" else WRITE_PROBES)
            for fld, label, path, nshards, floors in configs:
                name = f"{fld.name}, {label}"
                if op == "read":
                    r = profile_read(client, path, nshards, args.rounds)
                else:
                    r = profile_write(client, fld, label, nshards, args.rounds)
                results[op].append((name, floors[op], r))
                print(
                    f"  {op} {name}: "
                    + ", ".join(f"{k} {v if k == 'faults' else v * 1e3:.1f}" for k, v in r.items())
                )
            client.restart()  # the next op's probes in fresh processes
    print("\nPer shard (ms; faults: count), medians of", args.rounds, "rounds:")
    for op, rows in results.items():
        print()
        print(table(op, rows))


if __name__ == "__main__":
    main()
