"""Migrating a store of the 2022 sharding draft: shardwise's migrate against decoding it
and rewriting it, and against a plain copy of its files.

A float32 variable ``v`` (time, y, x) of 256 x 1024 x 1024 (1 GiB raw) stored as the
draft sharding storage transformer (the layout zarr-python 2.14-2.18 wrote behind
ZARR_V3_EXPERIMENTAL_API and ZARR_V3_SHARDING): inner chunks of 1 x 512 x 512 (1 MiB)
in shards of 16 x 1024 x 1024 (64 MiB, 16 shards), for each ``--compressor``: ``zstd``
(level 1) and ``blosc`` (lz4, level 5, byte shuffle: zarr-python 2's default). The
source is written once under ``benchmarks/data/`` by a writer of the draft's binary
format in this file (shardwise has no draft writer), then, on a ``distributed.
LocalCluster`` of 2 single-threaded worker processes, three ways to a Zarr v3 store:

  shardwise.tools.migrate.migrate        shardwise.tools.migrate.migrate(src, dst): the compressed
                           inner chunks copied as bytes into sharding_indexed shards,
                           one task per shard
  decode and rewrite       shardwise.to_zarr(xr.open_dataset(src, engine="shardwise",
                           chunks={}), dst, encoding=<the same chunks, shards and
                           compressor>): what a user does without migrate (every
                           chunk decoded and compressed again)
  file copy (floor)        shutil.copytree(src, dst): the bytes read and written with
                           no codec work and no format change

Each method runs once to warm up and then ``--repeats`` times (medians reported): the
wall time, the bytes written (the destination's files), and the workers' peak memory;
dirty pages are flushed (``os.sync``) before each method so that none pays for the
write-back of another's files.
The two Zarr v3 outputs are checked to hold the input's values (zarr-python) once per
compressor, and migrate's inner chunks to be the source's bytes.

    .venv/bin/python benchmarks/migrate.py [--repeats 3] [--compressor zstd blosc]
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
    TOOLS_PER_SHARD,
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

METHODS = ("shardwise.tools.migrate.migrate", "decode and rewrite", "file copy (floor)")
TARGET = 5.0  # migrate's speed-up over decode and rewrite
DRAFT = "https://purl.org/zarr/spec/protocol/core/3.0"
EMPTY = 2**64 - 1


def compressor(name: str) -> Any:
    import numcodecs

    if name == "zstd":
        return numcodecs.Zstd(level=1)
    if name == "blosc":
        return numcodecs.Blosc(cname="lz4", clevel=5, shuffle=numcodecs.Blosc.SHUFFLE)
    raise SystemExit(f"unknown compressor {name!r}: zstd or blosc")


def v3_compressor(name: str) -> Any:
    import zarr

    if name == "zstd":
        return zarr.codecs.ZstdCodec(level=1)
    return zarr.codecs.BloscCodec(cname="lz4", clevel=5, shuffle="shuffle", typesize=4)


def write_draft(path: Path, name: str) -> None:
    """The draft store, as the draft spec lays it out: root zarr.json with the
    protocol URI, meta/root/v.array.json, shards at data/root/v/c<t>/<y>/<x> holding
    the compressed chunks in C order followed by the (offset, nbytes) index."""
    comp = compressor(name)
    shutil.rmtree(path, ignore_errors=True)
    (path / "meta" / "root").mkdir(parents=True)
    root = {
        "zarr_format": DRAFT,
        "metadata_encoding": DRAFT,
        "metadata_key_suffix": ".json",
        "extensions": [],
    }
    (path / "zarr.json").write_text(json.dumps(root))
    doc = {
        "shape": list(TOOLS_SHAPE),
        "data_type": "<f4",
        "chunk_grid": {"type": "regular", "chunk_shape": list(TOOLS_INNER), "separator": "/"},
        "chunk_memory_layout": "C",
        "compressor": {
            "codec": f"https://purl.org/zarr/spec/codec/{comp.codec_id}/1.0",
            "configuration": {k: v for k, v in comp.get_config().items() if k != "id"},
        },
        "fill_value": "NaN",  # what xarray wrote for floats (0.0 would mask zeros)
        "extensions": [],
        "attributes": {"_ARRAY_DIMENSIONS": ["time", "y", "x"], "units": "K"},
        "storage_transformers": [
            {
                "extension": "https://purl.org/zarr/spec/storage_transformers/sharding/1.0",
                "type": "indexed",
                "configuration": {"chunks_per_shard": list(TOOLS_PER_SHARD)},
            }
        ],
    }
    (path / "meta" / "root" / "v.array.json").write_text(json.dumps(doc))

    def shard(t: int) -> None:
        block = tools_values(t * TOOLS_SHARD[0], (t + 1) * TOOLS_SHARD[0])
        pieces, table, offset = [], np.empty((*TOOLS_PER_SHARD, 2), dtype="<u8"), 0
        for inner in np.ndindex(*TOOLS_PER_SHARD):
            part = block[
                tuple(slice(i * c, (i + 1) * c) for i, c in zip(inner, TOOLS_INNER, strict=True))
            ]
            data = comp.encode(np.ascontiguousarray(part))
            table[inner] = (offset, len(data))
            pieces.append(data)
            offset += len(data)
        for y in range(TOOLS_SHAPE[1] // TOOLS_SHARD[1]):
            for x in range(TOOLS_SHAPE[2] // TOOLS_SHARD[2]):
                out = path / "data" / "root" / "v" / f"c{t}" / str(y) / str(x)
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_bytes(b"".join(bytes(p) for p in pieces) + table.tobytes())

    with ThreadPoolExecutor(2) as pool:
        list(pool.map(shard, range(TOOLS_SHAPE[0] // TOOLS_SHARD[0])))


def source(name: str) -> Path:
    """The draft store for ``name``, written unless a matching one is there."""
    path = DATA_DIR / f"draft-{name}.zarr"
    stamp = path / "benchmark.json"
    want = {
        "shape": TOOLS_SHAPE,
        "inner": TOOLS_INNER,
        "per_shard": TOOLS_PER_SHARD,
        "compressor": name,
        "v": 2,
    }
    if stamp.exists() and json.loads(stamp.read_text()) == json.loads(json.dumps(want)):
        return path
    print(f"  writing the draft store {path} ...", flush=True)
    write_draft(path, name)
    stamp.write_text(json.dumps(want))
    return path


def run_method(method: str, src: Path, dst: Path, name: str) -> None:
    import xarray as xr

    import shardwise
    from shardwise.tools.migrate import migrate

    if method == "shardwise.tools.migrate.migrate":
        migrate(src, dst)
    elif method == "decode and rewrite":
        ds = xr.open_dataset(src, engine="shardwise", chunks={})
        enc = {
            "v": {"chunks": TOOLS_INNER, "shards": TOOLS_SHARD, "compressors": v3_compressor(name)}
        }
        shardwise.to_zarr(ds, dst, mode="w-", encoding=enc, consolidated=False)
    elif method == "file copy (floor)":
        shutil.copytree(src, dst)
    else:  # pragma: no cover
        raise AssertionError(method)


def check(src: Path, migrated: Path, rewritten: Path) -> None:
    """Both outputs hold the input's values; migrate's chunks are the source's bytes."""
    import zarr

    from shardwise.io.draft import DraftStore

    for path in (migrated, rewritten):
        got = zarr.open_array(path / "v", mode="r")
        for t in range(0, TOOLS_SHAPE[0], TOOLS_SHARD[0]):
            if not np.array_equal(got[t : t + TOOLS_SHARD[0]], tools_values(t, t + TOOLS_SHARD[0])):
                raise SystemExit(f"{path}: values differ in the shard at time {t}")
    draft = DraftStore.open(str(src), None)
    assert draft is not None
    old = (src / "data" / "root" / "v" / "c0" / "0" / "0").read_bytes()
    new = (migrated / "v" / "c" / "0" / "0" / "0").read_bytes()
    n = int(np.prod(TOOLS_PER_SHARD))
    old_table = np.frombuffer(old[-16 * n :], dtype="<u8").reshape(n, 2)
    new_table = np.frombuffer(new[-(16 * n + 4) : -4], dtype="<u8").reshape(n, 2)
    for (a, m), (b, k) in zip(old_table.tolist(), new_table.tolist(), strict=True):
        if old[a : a + m] != new[b : b + k]:
            raise SystemExit(f"{migrated}: an inner chunk's bytes differ from the source's")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--compressor", nargs="+", default=["zstd", "blosc"])
    args = parser.parse_args(argv)

    info = machine()
    print("machine: " + ", ".join(f"{k} {v}" for k, v in info.items()))
    nbytes = int(np.prod(TOOLS_SHAPE)) * 4
    print(
        f"v: {TOOLS_SHAPE} float32 ({nbytes / 2**30:.2f} GiB raw), inner chunks {TOOLS_INNER}, shards {TOOLS_SHARD}"
    )
    DATA_DIR.mkdir(parents=True, exist_ok=True)
    sources = {name: source(name) for name in args.compressor}
    rows: dict[tuple[str, str], dict[str, list[Any]]] = {
        (c, m): {"s": [], "bytes": [], "mem": []} for c in args.compressor for m in METHODS
    }
    cpu = CpuMeter()
    with two_workers() as client:
        for name, src in sources.items():
            print(f"source: {name}, {stored_bytes(src) / MIB:.0f} MiB stored")
            for rnd in range(args.repeats + 1):
                line = []
                outputs = []
                for method in METHODS:
                    dst = DATA_DIR / f"migrated-{METHODS.index(method)}.zarr"
                    shutil.rmtree(dst, ignore_errors=True)
                    os.sync()  # no write-back of the last method's files during this one
                    memory: list[Memory] = []
                    with memory_probe(client, f"{name} {method} {rnd}", memory):
                        seconds, _ = timed(
                            lambda m=method, s=src, d=dst, c=name: run_method(m, s, d, c)
                        )
                    written = stored_bytes(dst)
                    outputs.append(dst)
                    r = rows[name, method]
                    if rnd:
                        r["s"].append(seconds)
                        r["bytes"].append(written)
                        r["mem"].append(memory[0])
                    line.append(f"{method} {seconds:.2f} s")
                if rnd == 0:
                    check(src, outputs[0], outputs[1])
                    print("  checked: both v3 outputs equal the input; migrate copied the bytes")
                for dst in outputs:
                    shutil.rmtree(dst, ignore_errors=True)
                print(f"  {'warm-up' if rnd == 0 else f'round {rnd}'}: " + "; ".join(line))
        cpu_info = cpu.stop()

    print(f"\nmedian of {args.repeats} runs (1 warm-up not counted)")
    header = (
        f"{'compressor':<10} {'method':<20} {'wall s':>7} {'GB/s raw':>8} {'vs copy':>7} "
        f"{'written MiB':>11} {'+worker MiB':>11}"
    )
    print(header + "\n" + "-" * len(header))
    for name in args.compressor:
        floor = statistics.median(rows[name, METHODS[2]]["s"])
        for method in METHODS:
            r = rows[name, method]
            s = statistics.median(r["s"])
            wk_text = worker_mib(r["mem"])
            print(
                f"{name:<10} {method:<20} {s:7.2f} {nbytes / s / 1e9:8.2f} {s / floor:7.2f} "
                f"{statistics.median(r['bytes']) / MIB:11.0f} {wk_text}"
            )
    for name in args.compressor:
        ours = statistics.median(rows[name, METHODS[0]]["s"])
        theirs = statistics.median(rows[name, METHODS[1]]["s"])
        floor = statistics.median(rows[name, METHODS[2]]["s"])
        print(
            f"{name}: migrate {theirs / ours:.2f}x faster than decode and rewrite (target "
            f"{TARGET}x: {'met' if theirs / ours >= TARGET else 'MISSED'}), "
            f"{ours / floor:.2f}x the time of a plain copy"
        )
    print_cpu(cpu_info)


if __name__ == "__main__":
    main()
