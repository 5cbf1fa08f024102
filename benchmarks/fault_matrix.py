"""Writes and reads through an object store that misbehaves: each fault class of
``tests/faultproxy.py`` at several rates, for shardwise and for zarr-python + xarray.

moto's server (its writes serialized, so that conditional puts are atomic as on S3) on
127.0.0.1, the fault proxy in front of it, s3fs or obstore (``--clients``) as the
client. Each run sets up a store through the endpoint directly (s3fs), injects one fault
class at one rate on every request through the proxy, runs one operation through the
proxy, then reads the store directly (s3fs) and compares it value by value with what it
was and what it should be:

``exact``
    the call returned and the store (or what a read returned) is what it should be;
``clean error``
    the call raised and the store is as it was or as it should be (the error's class
    is counted: a ``ShardwiseError`` names the array and key);
``reported, completed by a re-run``
    an append raised ``IncompleteAppendError`` (its claimed rows not all written), and
    the same call run again without faults left the store as it should be;
``wrong``
    anything else: a call that returned with the store or the values not as they should
    be, or an error leaving the store neither old nor new.

Operations, each the same call for both (``shardwise.to_zarr`` / ``shardwise``'s engine
against ``Dataset.to_zarr`` / ``engine="zarr"``) unless said otherwise. A Dataset of
200 x 4 float64 rows ``v`` (shards of 100 rows, inner chunks of 10, dask chunks of 100):

``write``
    a new store;
``region``
    rows 20-69 of 200, cutting shards: the shards are merged (zarr-python's with
    ``safe_chunks=False``);
``append``
    50 rows along ``y``;
``read``
    ``open_dataset(chunks={}).load()``;
``region-procs``
    region writes from 4 OS processes at once (``sys.executable -c``, started together
    behind a barrier, each killed if not done 300 s after the start), process k writing
    rows ``[k*10 + 40*j, k*10 + 40*j + 10)`` for j = 0..4, one call per range, in order:
    every shard is written by every process, and together they rewrite every row. The
    baseline (``safe_chunks=False``) reads, modifies and writes whole shards, so it is
    expected to lose rows that another process wrote at the same time. An error in a
    process stops it; the run is then a clean error if every range whose call returned
    holds its new rows and every other row is old or new;
``write-cluster``
    ``write`` computed on a ``distributed.LocalCluster`` of 2 worker processes of 1
    thread (one cluster for the whole script run, started only for this operation), the
    call inside ``with Client(cluster)``.

On one dask array of the same values written with ``shardwise.to_zarr(x, url, path="v",
...)`` (same shards and inner chunks), compared with ``zarr.open_array(...)[...]``:

``dask-append``
    50 rows along axis 0: ``shardwise.to_zarr(x, url, path="v", append_dim=0)``; the
    baseline opens the array with ``zarr.open_array(mode="r+")``, resizes it and writes
    the rows with ``dask.array.store(..., regions=...)``;
``read-array``
    ``shardwise.array.from_zarr(url, component="v").compute()`` against
    ``dask.array.from_zarr(url, component="v").compute()``;
``read-reader``
    ``shardwise.ArrayReader.open(url, "v")[...]`` against ``zarr.open_array(url,
    path="v", mode="r")[...]``.

Every operation here has a zarr-python + xarray (or dask) baseline; a cell of the table
is empty only when an operation was not run for an implementation.

With the client ``obstore``, the operations run through zarr-python's ``ObjectStore``
over obstore's ``S3Store`` on the proxy (``tests/s3server.py``'s ``S3Server.obstore``,
with obstore's own timeouts and retries), the same store object for both
implementations and no ``storage_options``. ``write``, ``region``, ``append``, ``read``,
``dask-append``, ``read-array`` and ``read-reader`` run through it; ``region-procs`` and
``write-cluster`` (calls in other processes) are skipped, and said so on stderr.

Without ``--operations``, the first four run, through s3fs; the recorded run
(``python benchmarks/run.py fault_matrix``) is ``--operations all --clients
s3fs,obstore``.

A table per client goes to stdout as Markdown (``docs/benchmarks/object-stores.md``
records them): per cell the outcomes of the trials and the faults the proxy injected
into them in all (at 1% many runs make no faulty request at all), then per client and
implementation the runs of each outcome. ``--table FILE`` prints the tables of a ``--out``
file again. Each run is also a line on stderr; the ``--out`` file holds every run, with
its error's message and where it was raised (the innermost shardwise frames of its
traceback, then the last frames) and, for a ``wrong`` one, what differed.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path
from typing import Any

import dask.array as da
import numpy as np
import xarray as xr
import zarr

HERE = Path(__file__).resolve().parent
TESTS = HERE.parent / "tests"
sys.path.insert(0, str(TESTS))

import shardwise  # noqa: E402
from faultproxy import FaultProxy  # noqa: E402
from s3server import close_s3fs_sessions, endpoint_with_bucket  # noqa: E402

ROWS, COLS, CHUNK = 200, 4, 100  # dask chunks of whole shards: zarr-python writes them too
ENCODING = {"v": {"shards": (100, COLS), "chunks": (10, COLS)}}
FAULTS = ["error500", "slowdown503", "reset", "short", "stall", "lost"]
RATES = [0.01, 0.05, 0.2]
DEFAULT_OPERATIONS = ["write", "region", "append", "read"]
OPERATIONS = [
    *DEFAULT_OPERATIONS,
    "region-procs",
    "dask-append",
    "write-cluster",
    "read-array",
    "read-reader",
]
ON_ARRAY = {"dask-append", "read-array", "read-reader"}  # one dask array at path "v"
READS = {"read", "read-array", "read-reader"}
OBSTORE_OPERATIONS = [op for op in OPERATIONS if op not in ("region-procs", "write-cluster")]
CLIENTS = ["s3fs", "obstore"]
IMPLEMENTATIONS = ["shardwise", "zarr-python + xarray"]
# the clients' timeouts, so that a stall (5 s) is a timeout and not a long wait
CLIENT = {"config_kwargs": {"read_timeout": 2, "connect_timeout": 2}}
APPENDED = 50
PROCS, PROC_ROWS, PROC_TIMEOUT = 4, 10, 300.0
# region-procs: process k writes rows [k*10 + 40*j, k*10 + 40*j + 10), j = 0..4
PROC_RANGES = [
    [(a, a + PROC_ROWS) for a in range(k * PROC_ROWS, ROWS, PROCS * PROC_ROWS)]
    for k in range(PROCS)
]
CHILD = (
    f"import sys; sys.path.insert(0, {str(HERE)!r}); import fault_matrix; "
    "fault_matrix.region_child(sys.argv[1])"
)


def block(start: int, rows: int, shift: float = 0.0) -> np.ndarray:
    """Rows that say where they belong: row r holds r (plus ``shift``) in every column."""
    return np.repeat(np.arange(start, start + rows, dtype="f8")[:, None], COLS, axis=1) + shift


def dataset(start: int, rows: int, shift: float = 0.0) -> xr.Dataset:
    return xr.Dataset(
        {"v": (("y", "x"), block(start, rows, shift))},
        coords={"y": np.arange(start, start + rows)},
    ).chunk({"y": CHUNK})


def before_and_after(operation: str) -> tuple[np.ndarray | None, np.ndarray]:
    """The values of ``v`` before the operation (None: no store) and after it."""
    old = block(0, ROWS)
    if operation in ("write", "write-cluster"):
        return None, old
    if operation == "region":
        new = old.copy()
        new[20:70] += 0.5
        return old, new
    if operation == "region-procs":
        return old, old + 0.5
    if operation in ("append", "dask-append"):
        return old, block(0, ROWS + APPENDED)
    return old, old  # the reads


def set_up(operation: str, url: str, direct: dict[str, Any]) -> None:
    """The store an operation starts from, written through the endpoint directly."""
    if operation in ("write", "write-cluster"):
        return
    if operation in ON_ARRAY:
        shardwise.to_zarr(
            da.from_array(block(0, ROWS), chunks=(CHUNK, COLS)),
            url,
            path="v",
            shards=(100, COLS),
            chunks=(10, COLS),
            dimension_names=["y", "x"],
            storage_options=direct,
        )
        return
    shardwise.to_zarr(
        dataset(0, ROWS),
        url,
        mode="w",
        storage_options=direct,
        consolidated=False,
        encoding=ENCODING,
    )


def run(operation: str, impl: str, target: Any, so: dict[str, Any] | None) -> np.ndarray | None:
    """The operation through the proxy (``target``: a URL with ``so``, or an obstore
    store with ``so`` None): the values a read returned, else None."""
    ours = impl == "shardwise"
    to_zarr = shardwise.to_zarr if ours else xr.Dataset.to_zarr
    where = {} if so is None else {"storage_options": so}
    common = {**where, "consolidated": False}
    if operation in ("write", "write-cluster"):
        kw = {"encoding": ENCODING} if ours else {"encoding": ENCODING, "zarr_format": 3}
        to_zarr(dataset(0, ROWS), target, mode="w", **common, **kw)
    elif operation == "region":
        part = dataset(20, 50, 0.5).drop_vars("y")
        kw = {} if ours else {"safe_chunks": False}  # zarr-python's: cuts shards
        to_zarr(part, target, region={"y": slice(20, 70)}, **common, **kw)
    elif operation == "append":
        to_zarr(dataset(ROWS, APPENDED), target, append_dim="y", **common)
    elif operation == "dask-append":
        x = da.from_array(block(ROWS, APPENDED), chunks=(APPENDED, COLS))
        if ours:
            shardwise.to_zarr(x, target, path="v", append_dim=0, **where)
        else:
            arr = zarr.open_array(target, path="v", mode="r+", **where)
            arr.resize((ROWS + APPENDED, COLS))
            da.store([x], [arr], regions=[(slice(ROWS, ROWS + APPENDED), slice(0, COLS))])
    elif operation == "read":
        engine = "shardwise" if ours else "zarr"
        with xr.open_dataset(target, engine=engine, chunks={}, **common) as ds:
            return np.asarray(ds.v.load().values)
    elif operation == "read-array":
        if ours:
            return np.asarray(shardwise.array.from_zarr(target, component="v", **where).compute())
        return np.asarray(da.from_zarr(target, component="v", **where).compute())
    elif operation == "read-reader":
        if ours:
            return np.asarray(shardwise.ArrayReader.open(target, "v", **where)[...])
        return np.asarray(zarr.open_array(target, path="v", mode="r", **where)[...])
    else:
        raise ValueError(operation)
    return None


def describe(error: BaseException) -> dict[str, Any]:
    """An error's class, whether shardwise named it, its message and where it was raised
    (the innermost frames of shardwise's in its traceback, then its last frames)."""
    frames = traceback.extract_tb(error.__traceback__)
    ours = [f for f in frames if "/shardwise/" in f.filename.replace("\\", "/")]
    frames = ours[-3:] + [f for f in frames[-4:] if f not in ours[-3:]]
    return {
        "error": f"{type(error).__module__}.{type(error).__name__}",
        "named": isinstance(error, shardwise.ShardwiseError),
        "message": str(error)[:300],
        "where": [f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in frames],
    }


# -- region-procs ------------------------------------------------------------------------------
def region_child(argument: str) -> None:
    """One process of ``region-procs`` (run by ``CHILD``): wait for the go, write its
    ranges one call each, print a JSON line for each range written and one at the end."""
    cfg = json.loads(argument)
    warnings.simplefilter("ignore")
    ours = cfg["impl"] == "shardwise"
    go = Path(cfg["go"])
    Path(cfg["ready"]).touch()
    deadline = time.monotonic() + 120
    while not go.exists():
        if time.monotonic() > deadline:
            print(json.dumps({"end": True, "error": "barrier", "named": False, "message": ""}))
            return
        time.sleep(0.01)
    try:
        for a, b in cfg["ranges"]:
            part = dataset(a, b - a, 0.5).drop_vars("y")
            region = {"y": slice(a, b)}
            so = cfg["so"]
            if ours:
                shardwise.to_zarr(
                    part, cfg["url"], region=region, storage_options=so, consolidated=False
                )
            else:
                part.to_zarr(
                    cfg["url"],
                    region=region,
                    safe_chunks=False,
                    storage_options=so,
                    consolidated=False,
                )
            print(json.dumps({"done": [a, b]}), flush=True)
    except Exception as e:
        print(json.dumps({"end": True, **describe(e)}), flush=True)
        return
    print(json.dumps({"end": True, "error": None, "named": False, "message": None}), flush=True)


def region_procs(url: str, so: dict[str, Any], impl: str) -> list[dict[str, Any]]:
    """Run the processes of ``region-procs``: per process the ranges its calls wrote
    (``done``) and its error (``error``, ``named``, ``message``) or None."""
    reports = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        procs: list[subprocess.Popen[bytes]] = []
        try:
            for k, ranges in enumerate(PROC_RANGES):
                cfg = {
                    "url": url,
                    "so": so,
                    "impl": impl,
                    "ranges": ranges,
                    "ready": str(work / f"ready-{k}"),
                    "go": str(work / "go"),
                }
                with (work / f"out-{k}").open("wb") as out, (work / f"err-{k}").open("wb") as err:
                    procs.append(
                        subprocess.Popen(
                            [sys.executable, "-c", CHILD, json.dumps(cfg)],
                            stdin=subprocess.DEVNULL,
                            stdout=out,
                            stderr=err,
                        )
                    )
            barrier = time.monotonic() + 120
            while time.monotonic() < barrier and not all(
                (work / f"ready-{k}").exists() for k in range(PROCS)
            ):
                if any(p.poll() is not None for p in procs):
                    break
                time.sleep(0.05)
            (work / "go").touch()
            deadline = time.monotonic() + PROC_TIMEOUT
            timed_out = set()
            for k, p in enumerate(procs):
                try:
                    p.wait(timeout=max(1.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(timeout=30)
                    timed_out.add(k)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait(timeout=30)
        for k, p in enumerate(procs):
            done, end = [], None
            for line in (work / f"out-{k}").read_text().splitlines():
                with contextlib.suppress(ValueError):
                    entry = json.loads(line)
                    if "done" in entry:
                        done.append(tuple(entry["done"]))
                    elif entry.get("end"):
                        end = entry
            if k in timed_out:
                end = {
                    "error": "subprocess.TimeoutExpired",
                    "named": False,
                    "message": f"process {k} killed after {PROC_TIMEOUT:.0f} s",
                }
            elif end is None:
                tail = (work / f"err-{k}").read_text(errors="replace")[-300:]
                end = {
                    "error": "ChildProcessError",
                    "named": False,
                    "message": f"process {k} exited {p.returncode}: {tail}",
                }
            reports.append({"done": done, **end})
    return reports


def ranges_outcome(
    now: np.ndarray | None, old: np.ndarray, new: np.ndarray, done: list[tuple[int, int]]
) -> tuple[bool, bool, str | None]:
    """(every range a call returned for holds its new rows, every row is old or new, what
    differed) for ``region-procs``."""
    if now is None or now.shape != new.shape:
        found = "unreadable" if now is None else f"shape {now.shape}"
        return False, False, f"{found} where {new.shape} was expected"
    is_new = np.all(now == new, axis=1)
    is_old = np.all(now == old, axis=1)
    written = np.zeros(len(new), dtype=bool)
    for a, b in done:
        written[a:b] = True
    lost = int(np.sum(written & ~is_new))
    neither = int(np.sum(~is_new & ~is_old))
    detail = None
    if lost or neither:
        detail = (
            f"{lost} of {int(written.sum())} rows written by calls that returned do not hold "
            f"them ({int(np.sum(written & is_old))} hold the old values); {neither} rows "
            "neither old nor new"
        )
    return lost == 0, neither == 0, detail


# -- one run -----------------------------------------------------------------------------------
def stored(operation: str, url: str, so: dict[str, Any]) -> np.ndarray | None:
    """``v`` as the store holds it (through the endpoint directly), None if unreadable."""
    try:
        if operation in ON_ARRAY:
            return np.asarray(zarr.open_array(url, path="v", mode="r", storage_options=so)[...])
        with xr.open_dataset(url, engine="zarr", consolidated=False, storage_options=so) as ds:
            return np.asarray(ds.v.load().values)
    except Exception:
        return None


def same(a: np.ndarray | None, b: np.ndarray | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return a.shape == b.shape and bool(np.array_equal(a, b, equal_nan=True))


def difference(got: np.ndarray | None, want: np.ndarray | None) -> str:
    """What differs, for a ``wrong`` run's record."""
    if got is None or want is None:
        return f"{'nothing' if got is None else 'an array'} where {'nothing' if want is None else 'an array'} was expected"
    if got.shape != want.shape:
        return f"shape {got.shape} where {want.shape} was expected"
    rows = np.flatnonzero(~np.all((got == want) | (np.isnan(got) & np.isnan(want)), axis=1))
    return f"{len(rows)} rows differ (first {rows[:10].tolist()})"


def close_worker_sessions() -> None:
    """``close_s3fs_sessions`` in a worker process (defined here, so that the client
    sends it by value: ``tests/`` is not importable on the workers)."""
    import s3fs
    from zarr.core.sync import sync

    for fs in list(s3fs.S3FileSystem._cache.values()):
        creator = getattr(fs, "_s3creator", None)
        if fs.asynchronous and creator is not None:
            sync(creator.__aexit__(None, None, None))
            fs._s3 = fs._s3creator = None
    s3fs.S3FileSystem.clear_instance_cache()


def one(
    server,
    bucket: str,
    proxy: FaultProxy,
    fault: str,
    rate: float,
    op: str,
    impl: str,
    n: int,
    client: str = "s3fs",
    cluster: Any = None,
) -> dict[str, Any]:
    name = f"{client}-{fault}-{rate}-{op}-{IMPLEMENTATIONS.index(impl)}-{n}.zarr"
    url = f"s3://{bucket}/{name}"
    direct = server.storage_options()
    old, new = before_and_after(op)
    close_s3fs_sessions()
    if old is not None:  # set up without faults
        set_up(op, url, direct)
    so: dict[str, Any] | None = server.storage_options(endpoint_url=proxy.endpoint, **CLIENT)
    target: Any = url
    if client == "obstore":
        target = server.obstore(bucket, name, endpoint=proxy.endpoint)
        so = None
    before = proxy.injected.total()  # (the proxy counts from its start)
    proxy.inject(fault, rate)
    started = time.monotonic()
    error: dict[str, Any] | None = None
    got = None
    reports: list[dict[str, Any]] = []
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if op == "region-procs":
                assert so is not None
                reports = region_procs(url, so, impl)
                failed = [r for r in reports if r["error"]]
                if failed:
                    error = {k: failed[0].get(k) for k in ("error", "named", "message", "where")}
            elif op == "write-cluster":
                from distributed import Client

                with Client(cluster) as c:
                    try:
                        got = run(op, impl, target, so)
                    finally:
                        with contextlib.suppress(Exception):
                            c.run(close_worker_sessions)
            else:
                got = run(op, impl, target, so)
    except Exception as e:
        error = describe(e)
    seconds = time.monotonic() - started
    injected = proxy.injected.total() - before
    proxy.clear()
    del target
    close_s3fs_sessions()
    now = stored(op, url, direct)
    detail = None
    if op == "region-procs":
        assert old is not None
        done = [tuple(r) for report in reports for r in report["done"]]
        kept_written, old_or_new, detail = ranges_outcome(now, old, new, done)
        if error is None:
            outcome = "exact" if same(now, new) else "wrong"
        else:
            outcome = "clean error" if kept_written and old_or_new else "wrong"
    elif error is None:
        result = got if op in READS else now
        outcome = "exact" if same(result, new) else "wrong"
        if outcome == "wrong":
            detail = ("read: " if op in READS else "") + difference(result, new)
    else:
        kept = same(now, old) or same(now, new)
        outcome = "clean error" if kept else "wrong"
        if not kept and error["error"].endswith("IncompleteAppendError"):
            # claimed rows reported: the same call, run again without faults, completes them
            rerun: Any = url
            if client == "obstore":
                rerun = server.obstore(bucket, name)
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    run(op, impl, rerun, None if client == "obstore" else direct)
            except Exception as e:
                detail = f"the re-run raised {type(e).__name__}: {e}"[:300]
            del rerun
            close_s3fs_sessions()
            now = stored(op, url, direct)
            if same(now, new):
                outcome = "reported, completed by a re-run"
        if outcome == "wrong" and detail is None:
            detail = "store: " + difference(now, new)
    return {
        "fault": fault,
        "rate": rate,
        "operation": op,
        "implementation": impl,
        "client": client,
        "trial": n,
        "outcome": outcome,
        "error": None if error is None else error["error"],
        "named": False if error is None else error["named"],
        "message": None if error is None else error["message"],
        "where": None if error is None else error.get("where"),
        "detail": detail,
        "processes": [
            {
                "rows": len(r["done"]) * PROC_ROWS,
                **{k: r.get(k) for k in ("error", "message", "where")},
            }
            for r in reports
        ]
        or None,
        "injected": injected,
        "seconds": round(seconds, 2),
    }


def tables(results: list[dict[str, Any]]) -> str:
    """A table per client (in ``CLIENTS``' order), each followed by its totals."""
    parts = []
    for client in CLIENTS:
        mine = [r for r in results if r["client"] == client]
        if mine:
            parts += [f"client: {client}", "", table(mine), "", totals(mine), ""]
    return "\n".join(parts).rstrip("\n")


def totals(results: list[dict[str, Any]]) -> str:
    """Per implementation, its runs of each outcome; then the runs with no faulty
    request."""
    lines = []
    for impl in IMPLEMENTATIONS:
        mine = [r for r in results if r["implementation"] == impl]
        counts = collections.Counter(r["outcome"] for r in mine)
        outcomes = ", ".join(f"{k} {counts[k]}" for k in sorted(counts))
        lines.append(f"{impl}: {len(mine)} runs: {outcomes}")
    clean = sum(1 for r in results if r["injected"] == 0)
    lines.append(f"runs with no faulty request: {clean} of {len(results)}")
    return "\n".join(lines)


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
        for rate in sorted({r["rate"] for r in results}):
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
    parser.add_argument(
        "--operations",
        default=",".join(DEFAULT_OPERATIONS),
        help="'all' or some of " + ", ".join(OPERATIONS),
    )
    parser.add_argument("--clients", default="s3fs", help="some of " + ", ".join(CLIENTS))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--table", type=Path, default=None, help="print the table of a --out file")
    args = parser.parse_args()
    if args.table:
        print(tables(json.loads(args.table.read_text())))
        return
    faults = args.faults.split(",")
    rates = [float(r) for r in args.rates.split(",")]
    ops = OPERATIONS if args.operations == "all" else args.operations.split(",")
    clients = args.clients.split(",")
    if unknown := [c for c in clients if c not in CLIENTS]:
        parser.error(f"unknown clients {unknown}; choose from {CLIENTS}")
    if unknown := [op for op in ops if op not in OPERATIONS]:
        parser.error(f"unknown operations {unknown}; choose from {OPERATIONS}")
    if unknown := [f for f in faults if f not in FAULTS]:
        parser.error(f"unknown faults {unknown}; choose from {FAULTS}")
    if "obstore" in clients and (skipped := [op for op in ops if op not in OBSTORE_OPERATIONS]):
        print(
            f"skipped with the client obstore (calls in other processes): {skipped}",
            file=sys.stderr,
            flush=True,
        )
    cells = [
        (client, fault, rate, op, impl, n)
        for client in clients
        for fault in faults
        for rate in rates
        for op in ops
        if client != "obstore" or op in OBSTORE_OPERATIONS
        for impl in IMPLEMENTATIONS
        for n in range(args.trials)
    ]
    results = []
    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        server, bucket = stack.enter_context(endpoint_with_bucket(serialized=True))
        proxy = stack.enter_context(
            FaultProxy(server.endpoint, seed=args.seed, stall_seconds=5.0, max_seconds=6 * 3600)
        )
        cluster = None
        if any(cell[3] == "write-cluster" for cell in cells):
            # inside the AWS environment: the workers inherit it
            from distributed import LocalCluster

            cluster = stack.enter_context(
                LocalCluster(
                    n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
                )
            )
        for client, fault, rate, op, impl, n in cells:
            r = one(server, bucket, proxy, fault, rate, op, impl, n, client, cluster)
            results.append(r)
            print(
                f"{client:7} {fault:11} {rate:4.0%} {op:13} {impl:20} {r['outcome']:11} "
                f"{r['error'] or ''} {r['seconds']:.1f}s {r['message'] or ''}"
                f"{' | ' + r['detail'] if r['detail'] else ''}",
                file=sys.stderr,
                flush=True,
            )
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=1))
    print(tables(results))
    print(f"\n{len(results)} runs in {time.monotonic() - started:.0f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
