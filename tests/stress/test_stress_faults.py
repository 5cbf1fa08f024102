"""Every operation through an object store that misbehaves ends exact or with a clean
error, never wrong.

moto's server with its writes serialized (so that its conditional puts are atomic, as
S3's are) and the fault proxy of ``faultproxy.py`` in front of it. Each case sets up a
store through the endpoint directly, runs one operation through the proxy with one fault
class (500 errors, 503 SlowDown, connection resets, short bodies, 5 s stalls, lost
responses) on 5% or 20% of all requests, then reads the store directly and compares it
with what it was and what it should be. The operation must end

- exact: it returned, and the store (or what a read returned) is what it should be;
- with a clean error: it raised, and the store is as it was or as it should be;
- reported and completed: an append raised ``IncompleteAppendError`` (its rows claimed,
  not all written), and the same call run again without faults completed it.

The operations, on a Dataset of 200 x 4 float64 rows ``v`` (shards of 100 rows, inner
chunks of 10, dask chunks of 100) or on one dask array of the same values at ``v``:
``write`` (a new store), ``region`` (rows 20-69, cutting shard 0), ``append`` (50 rows),
``read`` (``open_dataset(chunks={})``), ``dask-append``, ``read-array``
(``shardwise.array.from_zarr``), ``read-reader`` (``ArrayReader``), and through s3fs only
``region-procs`` (4 processes rewriting interleaved 10-row regions of every shard at
once) and ``write-cluster`` (``write`` on a LocalCluster of 2 worker processes). Through
s3fs (2 s read and connect timeouts, so that a stall is a timeout) and through obstore
(zarr-python's ``ObjectStore``, with obstore's own timeouts and retries).

The deterministic cases (the n-th conditional put's response lost, transient faults
retried and counted) are ``test_lost_responses.py``'s; these draw the faults at random
(the proxy's seed), on every request.
"""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import dask.array as da
import numpy as np
import pytest
import xarray as xr
import zarr

import shardwise
from faultproxy import FaultProxy
from shardwise.errors import IncompleteAppendError

pytest.importorskip("moto.server")
pytest.importorskip("s3fs")
pytestmark = [pytest.mark.slow, pytest.mark.stress]

ROWS, COLS, APPENDED = 200, 4, 50
ENCODING = {"v": {"shards": (100, COLS), "chunks": (10, COLS)}}
FAULTS = ["error500", "slowdown503", "reset", "short", "stall", "lost"]
RATES = [0.05, 0.2]
DATASET_OPS = ["write", "region", "append", "read"]
ARRAY_OPS = ["dask-append", "read-array", "read-reader"]
S3FS_ONLY = ["region-procs", "write-cluster"]  # calls in other processes
READS = {"read", "read-array", "read-reader"}
TIMEOUTS = {"config_kwargs": {"read_timeout": 2, "connect_timeout": 2}}
WORKER = Path(__file__).parents[1] / "concurrency_worker.py"

CASES = [
    pytest.param(client, op, fault, rate, id=f"{client}-{op}-{fault}-at{round(rate * 100)}")
    for client in ("s3fs", "obstore")
    for op in [*DATASET_OPS, *ARRAY_OPS, *(S3FS_ONLY if client == "s3fs" else [])]
    for fault in FAULTS
    for rate in RATES
]


def block(start: int, rows: int, shift: float = 0.0) -> np.ndarray:
    """Rows that say where they belong: row r holds r (plus ``shift``) in every column."""
    return np.repeat(np.arange(start, start + rows, dtype="f8")[:, None], COLS, axis=1) + shift


def dataset(start: int, rows: int, shift: float = 0.0) -> xr.Dataset:
    return xr.Dataset(
        {"v": (("y", "x"), block(start, rows, shift))},
        coords={"y": np.arange(start, start + rows)},
    ).chunk({"y": 100})


def before_and_after(op: str) -> tuple[np.ndarray | None, np.ndarray]:
    """The values of ``v`` before the operation (None: no store) and after it."""
    old = block(0, ROWS)
    if op in ("write", "write-cluster"):
        return None, old
    if op == "region":
        new = old.copy()
        new[20:70] += 0.5
        return old, new
    if op == "region-procs":
        from concurrency_worker import value

        return np.zeros((ROWS, COLS)), value(0, range(ROWS), COLS)
    if op in ("append", "dask-append"):
        return old, block(0, ROWS + APPENDED)
    return old, old  # the reads


def set_up(op: str, url: str, direct: dict[str, Any]) -> None:
    """The store an operation starts from, written through the endpoint directly."""
    if op in (*ARRAY_OPS, "region-procs"):
        values = np.zeros((ROWS, COLS)) if op == "region-procs" else block(0, ROWS)
        shardwise.array.to_zarr(
            da.from_array(values, chunks=(100, COLS)),
            url,
            path="v",
            shards=(100, COLS),
            chunks=(10, COLS),
            dimension_names=["y", "x"],
            storage_options=direct,
        )
    elif op not in ("write", "write-cluster"):
        shardwise.to_zarr(
            dataset(0, ROWS),
            url,
            mode="w",
            storage_options=direct,
            consolidated=False,
            encoding=ENCODING,
        )


def run(op: str, target: Any, so: dict[str, Any] | None) -> np.ndarray | None:
    """The operation on ``target`` (a URL with ``so``, or an obstore store with ``so``
    None): the values a read returned, else None."""
    where = {} if so is None else {"storage_options": so}
    if op in ("write", "write-cluster"):
        shardwise.to_zarr(
            dataset(0, ROWS), target, mode="w", consolidated=False, encoding=ENCODING, **where
        )
    elif op == "region":
        part = dataset(20, 50, 0.5).drop_vars("y")
        shardwise.to_zarr(part, target, region={"y": slice(20, 70)}, consolidated=False, **where)
    elif op == "append":
        shardwise.to_zarr(
            dataset(ROWS, APPENDED), target, append_dim="y", consolidated=False, **where
        )
    elif op == "dask-append":
        x = da.from_array(block(ROWS, APPENDED), chunks=(APPENDED, COLS))
        shardwise.array.to_zarr(x, target, path="v", append_dim=0, **where)
    elif op == "read":
        with xr.open_dataset(
            target, engine="shardwise", chunks={}, consolidated=False, **where
        ) as ds:
            return np.asarray(ds.v.load().values)
    elif op == "read-array":
        return np.asarray(shardwise.array.from_zarr(target, component="v", **where).compute())
    elif op == "read-reader":
        return np.asarray(shardwise.ArrayReader.open(target, "v", **where)[...])
    else:
        raise ValueError(op)
    return None


def region_procs(url: str, so: dict[str, Any]) -> list[tuple[int, str]]:
    """4 processes (``concurrency_worker.py``), process k rewriting rows [10k + 40j,
    10k + 40j + 10) for j = 0..4, one call each: every shard written by every process.
    Per process, its exit status and what it printed on stderr."""
    cfg = {"store": url, "storage_options": so, "job": "regions", "nprocs": 4, "rounds": 1}
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                str(WORKER),
                json.dumps({**cfg, "proc": p, "rows": 10, "shape": [ROWS, COLS]}),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for p in range(4)
    ]
    ended = []
    try:
        for p in procs:
            _, err = p.communicate(timeout=240)
            ended.append((p.returncode, err[-2000:]))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()
    return ended


def stored(op: str, url: str, direct: dict[str, Any]) -> np.ndarray | None:
    """``v`` as the store holds it, read by zarr-python through the endpoint directly
    (None: unreadable)."""
    from s3server import close_s3fs_sessions

    close_s3fs_sessions()
    try:
        if op in (*ARRAY_OPS, "region-procs"):
            return np.asarray(zarr.open_array(url, path="v", mode="r", storage_options=direct)[...])
        with xr.open_dataset(url, engine="zarr", consolidated=False, storage_options=direct) as ds:
            return np.asarray(ds.v.load().values)
    except Exception:
        return None


def same(a: np.ndarray | None, b: np.ndarray | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return a.shape == b.shape and bool(np.array_equal(a, b))


@pytest.fixture
def proxy(s3_serialized):
    with FaultProxy(s3_serialized.endpoint, seed=0, stall_seconds=5.0, max_seconds=600) as p:
        yield p


@pytest.fixture(scope="module")
def cluster(s3_serialized):
    """2 worker processes of 1 thread, started in the AWS environment of the endpoint
    (the workers inherit it)."""
    distributed = pytest.importorskip("distributed")
    from clusters import CLUSTER_OPTIONS

    with distributed.LocalCluster(**CLUSTER_OPTIONS, threads_per_worker=1) as c:
        yield c


@pytest.mark.parametrize(("client", "op", "fault", "rate"), CASES)
def test_an_operation_through_faults_ends_exact_or_with_a_clean_error(
    request, s3_serialized, serialized_bucket, proxy, client, op, fault, rate
):
    server, name = s3_serialized, f"{op}.zarr"
    url, direct = f"s3://{serialized_bucket}/{name}", s3_serialized.storage_options()
    old, new = before_and_after(op)
    set_up(op, url, direct)
    if client == "obstore":
        target, so = server.obstore(serialized_bucket, name, endpoint=proxy.endpoint), None
    else:
        target, so = url, server.storage_options(endpoint_url=proxy.endpoint, **TIMEOUTS)
    error: BaseException | None = None
    got = None
    ended: list[tuple[int, str]] = []
    proxy.inject(fault, rate)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (retries and stores say what they do)
            if op == "region-procs":
                assert so is not None
                ended = region_procs(url, so)
            elif op == "write-cluster":
                from distributed import Client

                def close_sessions() -> None:  # in a worker (sent by value: defined here)
                    import s3fs
                    from zarr.core.sync import sync

                    for fs in list(s3fs.S3FileSystem._cache.values()):
                        creator = getattr(fs, "_s3creator", None)
                        if fs.asynchronous and creator is not None:
                            sync(creator.__aexit__(None, None, None))
                            fs._s3 = fs._s3creator = None
                    s3fs.S3FileSystem.clear_instance_cache()

                with Client(request.getfixturevalue("cluster")) as c:
                    try:
                        got = run(op, target, so)
                    finally:
                        c.run(close_sessions)
            else:
                got = run(op, target, so)
    except Exception as e:
        error = e
    finally:
        injected = proxy.injected.total()
        proxy.clear()
    del target
    now = stored(op, url, direct)
    said = f"{injected} faults injected; {type(error).__name__ if error else 'no error'}: {error}"
    if op == "region-procs":
        assert now is not None, f"the store is unreadable; {ended}"
        is_new, is_old = np.all(now == new, axis=1), np.all(now == old, axis=1)
        assert np.all(is_new | is_old), (
            f"rows neither old nor new: {np.flatnonzero(~(is_new | is_old))}"
        )
        for k, (code, err) in enumerate(ended):
            if code == 0:  # every region this process wrote holds its rows
                mine = [r for r in range(ROWS) if (r // 10) % 4 == k]
                assert np.all(is_new[mine]), f"process {k} returned, its rows lost: {err}"
        return
    if error is None:
        assert same(got if op in READS else now, new), f"returned, but wrong; {said}"
    elif not (same(now, old) or same(now, new)):
        assert isinstance(error, IncompleteAppendError), (
            f"a failed call left the store wrong; {said}"
        )
        rerun = server.obstore(serialized_bucket, name) if client == "obstore" else url
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            run(op, rerun, None if client == "obstore" else direct)
        assert same(stored(op, url, direct), new), f"the re-run did not complete it; {said}"
