"""Writes and reads through an object store that misbehaves: each fault class of
``tests/faultproxy.py`` at several rates, for shardwise and for zarr-python + xarray.

moto's server (its writes serialized, so that conditional puts are atomic as on S3) on
127.0.0.1, the fault proxy in front of it, s3fs as the client of both. Each run sets up
a store through the endpoint directly, injects one fault class at one rate on every
request through the proxy, runs one operation through the proxy, then reads the store
directly and compares it value by value with what it was and what it should be:

``exact``
    the call returned and the store (or what a read returned) is what it should be;
``clean error``
    the call raised and the store is as it was or as it should be (the error's class
    is counted: a ``ShardwiseError`` names the array and key);
``wrong``
    anything else: a call that returned with the store or the values not as they should
    be, or an error leaving the store neither old nor new.

Operations, each the same call for both (``shardwise.to_zarr`` / ``shardwise``'s engine
against ``Dataset.to_zarr`` / ``engine="zarr"``): ``write`` (a new store), ``region``
(rows 20-69 of 200, cutting shards: the shards are merged), ``append`` (50 rows along
``y``), ``read`` (``open_dataset(chunks={}).load()``).

    python benchmarks/fault_matrix.py --trials 2 --out benchmarks/data/fault_matrix.json

The table goes to stdout as Markdown (``docs/reliability.md`` records it): per cell the
outcomes of the trials and the faults the proxy injected into them in all (at 1% many
runs make no faulty request at all). ``--table FILE`` prints the table of a ``--out``
file again.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

TESTS = Path(__file__).resolve().parent.parent / "tests"
sys.path.insert(0, str(TESTS))

import shardwise  # noqa: E402
from faultproxy import FaultProxy  # noqa: E402
from s3server import close_s3fs_sessions, endpoint_with_bucket  # noqa: E402

ROWS, COLS, CHUNK = 200, 4, 100  # dask chunks of whole shards: zarr-python writes them too
ENCODING = {"v": {"shards": (100, COLS), "chunks": (10, COLS)}}
FAULTS = ["error500", "slowdown503", "reset", "short", "stall", "lost"]
RATES = [0.01, 0.05, 0.2]
OPERATIONS = ["write", "region", "append", "read"]
IMPLEMENTATIONS = ["shardwise", "zarr-python + xarray"]
# the clients' timeouts, so that a stall (5 s) is a timeout and not a long wait
CLIENT = {"config_kwargs": {"read_timeout": 2, "connect_timeout": 2}}


def dataset(start: int, rows: int, shift: float = 0.0) -> xr.Dataset:
    """Rows that say where they belong: row r holds r (plus ``shift``) in every column."""
    values = np.repeat(np.arange(start, start + rows, dtype="f8")[:, None], COLS, axis=1)
    return xr.Dataset(
        {"v": (("y", "x"), values + shift)}, coords={"y": np.arange(start, start + rows)}
    ).chunk({"y": CHUNK})


def before_and_after(operation: str) -> tuple[np.ndarray | None, np.ndarray]:
    """The values of ``v`` before the operation (None: no store) and after it."""
    old = dataset(0, ROWS).v.values
    if operation == "write":
        return None, old
    if operation == "region":
        new = old.copy()
        new[20:70] += 0.5
        return old, new
    if operation == "append":
        return old, np.concatenate([old, dataset(ROWS, 50).v.values])
    return old, old  # read


def run(operation: str, impl: str, url: str, so: dict[str, Any]) -> np.ndarray | None:
    """The operation through the proxy (``so``): the values a read returned, else None."""
    ours = impl == "shardwise"
    to_zarr = shardwise.to_zarr if ours else xr.Dataset.to_zarr
    common = {"storage_options": so, "consolidated": False}
    if operation == "write":
        kw = {"encoding": ENCODING} if ours else {"encoding": ENCODING, "zarr_format": 3}
        to_zarr(dataset(0, ROWS), url, mode="w", **common, **kw)
    elif operation == "region":
        part = dataset(20, 50, 0.5).drop_vars("y")
        kw = {} if ours else {"safe_chunks": False}  # zarr-python's: cuts shards
        to_zarr(part, url, region={"y": slice(20, 70)}, **common, **kw)
    elif operation == "append":
        to_zarr(dataset(ROWS, 50), url, append_dim="y", **common)
    else:
        engine = "shardwise" if ours else "zarr"
        with xr.open_dataset(url, engine=engine, chunks={}, **common) as ds:
            return np.asarray(ds.v.load().values)
    return None


def stored(url: str, so: dict[str, Any]) -> np.ndarray | None:
    """``v`` as the store holds it (through the endpoint directly), None if unreadable."""
    try:
        with xr.open_dataset(url, engine="zarr", consolidated=False, storage_options=so) as ds:
            return np.asarray(ds.v.load().values)
    except Exception:
        return None


def same(a: np.ndarray | None, b: np.ndarray | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return a.shape == b.shape and bool(np.array_equal(a, b, equal_nan=True))


def one(
    server, bucket: str, proxy: FaultProxy, fault: str, rate: float, op: str, impl: str, n: int
):
    url = f"s3://{bucket}/{fault}-{rate}-{op}-{IMPLEMENTATIONS.index(impl)}-{n}.zarr"
    direct = server.storage_options()
    old, new = before_and_after(op)
    close_s3fs_sessions()
    if old is not None:  # set up without faults
        shardwise.to_zarr(
            dataset(0, ROWS),
            url,
            mode="w",
            storage_options=direct,
            consolidated=False,
            encoding=ENCODING,
        )
    so = server.storage_options(endpoint_url=proxy.endpoint, **CLIENT)
    before = proxy.injected.total()  # (the proxy counts from its start)
    proxy.inject(fault, rate)
    started = time.monotonic()
    error: BaseException | None = None
    got = None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = run(op, impl, url, so)
    except Exception as e:
        error = e
    seconds = time.monotonic() - started
    injected = proxy.injected.total() - before
    proxy.clear()
    close_s3fs_sessions()
    now = stored(url, direct)
    if error is None:
        ok = same(got, new) if op == "read" else same(now, new)
        outcome = "exact" if ok else "wrong"
    else:
        kept = same(now, old) or same(now, new)
        outcome = "clean error" if kept else "wrong"
    named = isinstance(error, shardwise.ShardwiseError)
    return {
        "fault": fault,
        "rate": rate,
        "operation": op,
        "implementation": impl,
        "trial": n,
        "outcome": outcome,
        "error": None if error is None else f"{type(error).__module__}.{type(error).__name__}",
        "named": named,
        "message": None if error is None else str(error)[:300],
        "injected": injected,
        "seconds": round(seconds, 2),
    }


def table(results: list[dict[str, Any]]) -> str:
    cells: dict[tuple, collections.Counter] = collections.defaultdict(collections.Counter)
    errors: dict[tuple, collections.Counter] = collections.defaultdict(collections.Counter)
    injected: collections.Counter = collections.Counter()
    for r in results:
        key = (r["fault"], r["rate"], r["operation"], r["implementation"])
        cells[key][r["outcome"]] += 1
        injected[key] += r["injected"]
        if r["error"]:
            short = r["error"].rsplit(".", 1)[-1]
            errors[key][
                short + ("" if r["named"] or r["implementation"] != "shardwise" else " (bare)")
            ] += 1
    lines = [
        "| fault | rate | operation | " + " | ".join(IMPLEMENTATIONS) + " |",
        "|---|---|---|" + "---|" * len(IMPLEMENTATIONS),
    ]
    for fault in FAULTS:
        for rate in RATES:
            for op in OPERATIONS:
                if not any((fault, rate, op, impl) in cells for impl in IMPLEMENTATIONS):
                    continue
                row = [fault, f"{rate:.0%}", op]
                for impl in IMPLEMENTATIONS:
                    key = (fault, rate, op, impl)
                    if key not in cells:
                        row.append("")
                        continue
                    c, e = cells[key], errors[key]
                    text = ", ".join(f"{k} {v}" for k, v in sorted(c.items()))
                    if e:
                        text += " (" + ", ".join(f"{k} {v}" for k, v in sorted(e.items())) + ")"
                    text += f"; {injected[key]} faults"
                    row.append(text)
                lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=2)
    parser.add_argument("--faults", default=",".join(FAULTS))
    parser.add_argument("--rates", default=",".join(map(str, RATES)))
    parser.add_argument("--operations", default=",".join(OPERATIONS))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--table", type=Path, default=None, help="print the table of a --out file")
    args = parser.parse_args()
    if args.table:
        print(table(json.loads(args.table.read_text())))
        return
    faults = args.faults.split(",")
    rates = [float(r) for r in args.rates.split(",")]
    ops = args.operations.split(",")
    results = []
    started = time.monotonic()
    with (
        endpoint_with_bucket(serialized=True) as (server, bucket),
        FaultProxy(
            server.endpoint, seed=args.seed, stall_seconds=5.0, max_seconds=6 * 3600
        ) as proxy,
    ):
        for fault in faults:
            for rate in rates:
                for op in ops:
                    for impl in IMPLEMENTATIONS:
                        for n in range(args.trials):
                            r = one(server, bucket, proxy, fault, rate, op, impl, n)
                            results.append(r)
                            print(
                                f"{fault:11} {rate:4.0%} {op:6} {impl:20} {r['outcome']:11} "
                                f"{r['error'] or ''} {r['seconds']:.1f}s {r['message'] or ''}",
                                file=sys.stderr,
                                flush=True,
                            )
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=1))
    print(table(results))
    print(f"\n{len(results)} runs in {time.monotonic() - started:.0f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
