"""Independent jobs writing one array at the same time (optimistic concurrency).

Every job here is a real process of its own (``concurrency_worker.py``), started at the
same time as the others, with no coordination between them: region writes whose
regions share shards, appends racing each other (dask arrays and Datasets), a job
killed while it writes. The final array must hold what every job wrote, on a local
store and on S3 (moto's server with its writes serialized, so that its conditional
puts are atomic as S3's are: see ``moto_serialized.py``; plain moto's are not).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import dask
import dask.array as da
import numpy as np
import pytest
import xarray as xr
import zarr

import shardwise
from bounded import run_threads
from shardwise.errors import ConflictError, UnprotectedWriteWarning, WriteError

WORKER = Path(__file__).with_name("concurrency_worker.py")
SHAPE = (400, 30)  # 40 regions of 10 rows; shards of 100 rows, inner chunks of 20
REGION_ROWS = 10


def start(cfg: dict) -> subprocess.Popen:
    # (-X faulthandler: a job that dies of a signal prints every thread's stack first)
    return subprocess.Popen(
        [sys.executable, "-X", "faulthandler", str(WORKER), json.dumps(cfg)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def run_all(cfgs: list[dict], timeout: float = 300) -> list[dict]:
    """Start every job at once; each must exit 0. Every job is waited for, and its pipes
    closed, whatever happens to the others (a failing job fails the test, not the next
    one on this worker with an unclosed pipe)."""
    procs = [start(c) for c in cfgs]
    results: list[tuple[int, str, str]] = []
    try:
        for p in procs:
            stdout, stderr = p.communicate(timeout=timeout)
            results.append((p.returncode, stdout, stderr))
    finally:
        for p in procs[len(results) :]:  # (those not waited for: a timeout)
            p.kill()
            p.communicate()
    for code, _, stderr in results:
        assert code == 0, f"exit {code}; stderr: {stderr[-4000:]}"
    return [json.loads(stdout.strip().splitlines()[-1]) for _, stdout, _ in results]


def expected_regions(rounds: int) -> np.ndarray:
    from concurrency_worker import value

    return value(rounds - 1, range(SHAPE[0]), SHAPE[1])


def new_array(store, rows=SHAPE[0], **kw):
    """The array ``v`` the jobs write into: ``rows`` rows of zeros (0: an empty array to
    append to) in shards of 100 rows, inner chunks of 20."""
    return shardwise.array.to_zarr(
        da.zeros((rows, SHAPE[1]), chunks=(max(1, min(rows, 100)), SHAPE[1])),
        store,
        path="v",
        shards=(100, SHAPE[1]),
        chunks=(20, SHAPE[1]),
        **kw,
    )


def jobs(store, job, nprocs, rounds, rows, **extra):
    return [
        {
            "store": store,
            "job": job,
            "proc": p,
            "nprocs": nprocs,
            "rounds": rounds,
            "rows": rows,
            "shape": list(SHAPE),
            **extra,
        }
        for p in range(nprocs)
    ]


# -- region writes ---------------------------------------------------------------------------
@pytest.mark.slow
def test_region_writes_sharing_shards_lose_nothing_locally(tmp_path):
    """The issue's case: 4 processes, interleaved 10-row regions of a 400-row array in
    100-row shards (every shard written by all 4), 3 rounds each."""
    store = str(tmp_path / "a.zarr")
    new_array(store)
    run_all(jobs(store, "regions", 4, 3, REGION_ROWS))
    np.testing.assert_array_equal(zarr.open_array(store, path="v")[...], expected_regions(3))
    assert not list(Path(store).rglob("*.partial"))  # no temporary file left behind


@pytest.mark.slow
def test_region_writes_sharing_shards_lose_nothing_on_s3(s3_serialized, serialized_bucket):
    url = f"s3://{serialized_bucket}/a.zarr"
    so = s3_serialized.storage_options()
    new_array(url, storage_options=so)
    run_all(jobs(url, "regions", 4, 2, REGION_ROWS, storage_options=so))
    got = zarr.open_array(url, path="v", storage_options=so)[...]
    np.testing.assert_array_equal(got, expected_regions(2))


# -- appends -----------------------------------------------------------------------------------
def check_appended(v: np.ndarray, nprocs: int, rounds: int, rows: int) -> None:
    """Every append landed whole, once, in one piece: ``nprocs * rounds`` blocks of
    ``rows`` rows, each tagged by who appended it and when."""
    assert v.shape == (nprocs * rounds * rows, SHAPE[1])
    tags = v[::rows, 0]
    assert sorted(tags.tolist()) == sorted(
        p * 1000 + r for p in range(nprocs) for r in range(rounds)
    )
    for k, tag in enumerate(tags):
        block = v[k * rows : (k + 1) * rows]
        np.testing.assert_array_equal(block[:, 0], tag)
        np.testing.assert_array_equal(block[:, 1], np.arange(rows))
    for p in range(nprocs):  # one process's appends land in its own order
        mine = [t for t in tags if t // 1000 == p]
        assert mine == sorted(mine)


@pytest.mark.slow
@pytest.mark.parametrize("where", ["local", "s3", "local-obstore", "s3-obstore"])
def test_appends_racing_each_other_all_land(tmp_path, where, request):
    """Through obstore too (its LocalStore and S3Store, opened by each job as
    zarr-python's ObjectStore): no job may end on a signal as it exits."""
    nprocs, rounds, rows = 4, 3, 7  # 7 rows: appends cut shards of 100
    store, so, extra = str(tmp_path / "a.zarr"), None, {}
    if where.startswith("s3"):
        server = request.getfixturevalue("s3_serialized")
        store = f"s3://{request.getfixturevalue('serialized_bucket')}/a.zarr"
        so = server.storage_options()
    if where == "local-obstore":
        pytest.importorskip("obstore")
        Path(store).mkdir()
        extra = {"obstore": {"class": "LocalStore", "kwargs": {"prefix": store}}}
    elif where == "s3-obstore":
        pytest.importorskip("obstore")
        bucket = request.getfixturevalue("serialized_bucket")
        extra = {"obstore": server.obstore_spec(bucket, "a.zarr")}
    new_array(store, rows=0, storage_options=so)
    run_all(jobs(store, "append", nprocs, rounds, rows, storage_options=so, **extra))
    check_appended(zarr.open_array(store, path="v", storage_options=so)[...], nprocs, rounds, rows)


@pytest.mark.rectilinear
def test_appends_racing_into_a_rectilinear_grid_all_land(tmp_path):
    """An array whose shards are its dask chunks (a rectilinear grid): each append adds
    its rows as a shard of their own, and grows the grid in zarr.json with the shape;
    racing appends must each add their shard once, in one piece."""
    store = str(tmp_path / "r.zarr")
    shardwise.array.to_zarr(
        da.zeros((21, SHAPE[1]), chunks=((7, 14), (SHAPE[1],))),
        store,
        path="v",
        chunks=(7, SHAPE[1]),
    )
    grid = json.loads((Path(store) / "v" / "zarr.json").read_text())["chunk_grid"]
    assert grid["name"] == "rectilinear"
    nprocs, rounds, rows = 3, 2, 7
    run_all(jobs(store, "append", nprocs, rounds, rows))
    v = shardwise.ArrayReader.open(store, "v")[...]
    check_appended(v[21:], nprocs, rounds, rows)
    meta = json.loads((Path(store) / "v" / "zarr.json").read_text())
    assert meta["shape"][0] == 21 + nprocs * rounds * rows
    assert shardwise.verify(store).ok


@pytest.mark.slow
@pytest.mark.parametrize("consolidated", [False, None])
@pytest.mark.filterwarnings("ignore:Consolidated metadata is currently not part:UserWarning")
def test_dataset_appends_racing_each_other_all_land(tmp_path, consolidated):
    """``consolidated=None`` (xarray's default): each append consolidates the metadata
    after its commit, and the consolidated metadata at the end holds every append."""
    nprocs, rounds, rows = 3, 3, 7
    store = str(tmp_path / "d.zarr")
    first = xr.Dataset(
        {"v": (("time", "x"), da.zeros((0, SHAPE[1]), chunks=(1, SHAPE[1])))},
        coords={"time": np.zeros(0, dtype="i8")},
    )
    shardwise.to_zarr(
        first,
        store,
        consolidated=consolidated,
        encoding={"v": {"shards": (100, SHAPE[1]), "chunks": (20, SHAPE[1])}},
    )
    run_all(jobs(store, "append-dataset", nprocs, rounds, rows, consolidated=consolidated))
    ds = xr.open_dataset(store, engine="shardwise", consolidated=consolidated is None).load()
    v = ds.v.values
    check_appended(v, nprocs, rounds, rows)
    # the time coordinate was appended with its data
    np.testing.assert_array_equal(ds.time.values, v[:, 0].astype("i8") * 1000 + v[:, 1])


# -- a writer killed while it writes --------------------------------------------------------------
@pytest.mark.slow
def test_a_killed_writer_leaves_no_torn_shard_and_loses_no_neighbour(tmp_path):
    store = str(tmp_path / "a.zarr")
    new_array(store)
    rounds = 6
    cfgs = jobs(store, "regions", 4, rounds, REGION_ROWS)
    victim_cfg = {**cfgs[3], "rounds": 1000}  # writes until it is killed
    procs = [start(c) for c in cfgs[:3]]
    victim = start(victim_cfg)
    time.sleep(2.0)  # well into its writes (and retries: 4 writers on every shard)
    victim.send_signal(signal.SIGKILL)
    victim.communicate()
    assert victim.returncode == -signal.SIGKILL  # killed, not finished
    for p in procs:
        _, stderr = p.communicate(timeout=300)
        assert p.returncode == 0, stderr[-4000:]
    # every shard reads back whole, checksums and all
    report = shardwise.verify(store)
    assert report.ok, report
    got = zarr.open_array(store, path="v")[...]
    want = expected_regions(rounds)
    for region in range(SHAPE[0] // REGION_ROWS):
        rows = slice(region * REGION_ROWS, (region + 1) * REGION_ROWS)
        if region % 4 != 3:  # the survivors' rows: their last round, all of them
            np.testing.assert_array_equal(got[rows], want[rows])
        else:  # the victim's: one whole round's values, or still the zeros
            from concurrency_worker import value

            rnd = got[rows.start, 0] // 1e6 - 1
            fill = (
                np.zeros_like(got[rows])
                if rnd < 0
                else value(int(rnd), range(rows.start, rows.stop), SHAPE[1])
            )
            np.testing.assert_array_equal(got[rows], fill)


# -- what the guard costs and changes for one writer -----------------------------------------
def test_one_writer_writes_the_same_bytes_either_way(tmp_path):
    a, b = tmp_path / "a.zarr", tmp_path / "b.zarr"
    for store, guarded in ((a, True), (b, False)):
        new_array(store)
        for i in range(0, SHAPE[0], 30):  # regions that cut shards and inner chunks
            part = np.full((min(30, SHAPE[0] - i), SHAPE[1]), float(i))
            shardwise.array.to_zarr(
                da.from_array(part, chunks=10),
                store,
                path="v",
                region=(slice(i, i + part.shape[0]),),
                independent_writers=guarded,
            )
    files = lambda p: {q.relative_to(p): q.read_bytes() for q in p.rglob("*") if q.is_file()}  # noqa: E731
    assert files(a) == files(b)


def test_a_shard_that_keeps_changing_raises_a_conflict_naming_it(tmp_path, monkeypatch):
    from shardwise.io import conditional

    store = tmp_path / "a.zarr"
    new_array(store)
    before = {q: q.read_bytes() for q in store.rglob("*") if q.is_file()}
    monkeypatch.setattr(
        conditional.LocalConditional, "put", lambda self, key, data, expected: expected is None
    )
    with dask.config.set({"shardwise.write-retries": 3}), pytest.raises(ConflictError) as info:
        shardwise.array.to_zarr(
            da.ones((10, SHAPE[1]), chunks=10), store, path="v", region=(slice(0, 10),)
        )
    assert info.value.key == "v/c/0/0" and "3 tries" in str(info.value)
    assert isinstance(info.value, OSError)
    assert {q: q.read_bytes() for q in store.rglob("*") if q.is_file()} == before


def test_an_append_that_keeps_losing_raises_a_conflict(tmp_path, monkeypatch):
    from shardwise.io import conditional

    store = tmp_path / "a.zarr"
    new_array(store)
    before = {q: q.read_bytes() for q in store.rglob("*") if q.is_file()}
    put = conditional.LocalConditional.put
    monkeypatch.setattr(
        conditional.LocalConditional,
        "put",
        lambda self, key, data, expected: (
            False if key.endswith("zarr.json") else put(self, key, data, expected)
        ),
    )
    with dask.config.set({"shardwise.write-retries": 2}), pytest.raises(ConflictError) as info:
        shardwise.array.to_zarr(da.ones((5, SHAPE[1]), chunks=5), store, path="v", append_dim=0)
    assert info.value.key == "v/zarr.json"
    assert {q: q.read_bytes() for q in store.rglob("*") if q.is_file()} == before


# -- stores without conditional puts --------------------------------------------------------------
def test_stores_without_conditional_puts_refuse_merging_writes_when_asked(tmp_path):
    store = zarr.storage.FsspecStore.from_url("memory://shardwise-no-cas/a.zarr")
    new_array(store)
    x = da.ones((10, SHAPE[1]), chunks=10)
    with pytest.raises(WriteError, match="independent_writers=False") as info:
        shardwise.array.to_zarr(
            x, store, path="v", region=(slice(0, 10),), independent_writers=True
        )
    assert "Nothing was written" in str(info.value)
    np.testing.assert_array_equal(zarr.open_array(store, path="v")[:10], 0)
    # whole shards need no condition; nor does a job that says it is the only writer
    shardwise.array.to_zarr(
        da.ones((100, SHAPE[1]), chunks=100),
        store,
        path="v",
        region=(slice(0, 100),),
        independent_writers=True,
    )
    shardwise.array.to_zarr(
        x * 2, store, path="v", region=(slice(0, 10),), independent_writers=False
    )
    np.testing.assert_array_equal(zarr.open_array(store, path="v")[:10], 2)
    with pytest.raises(WriteError, match="append"):
        shardwise.array.to_zarr(x, store, path="v", append_dim=0, independent_writers=True)


def test_by_default_stores_without_conditional_puts_write_with_a_warning(tmp_path):
    """What ``Dataset.to_zarr`` writes, shardwise's default writes too: where the store
    cannot guard against other jobs, with a warning saying so."""
    store = zarr.storage.FsspecStore.from_url("memory://shardwise-no-cas-3/a.zarr")
    new_array(store)
    x = da.ones((10, SHAPE[1]), chunks=10)
    with pytest.warns(UnprotectedWriteWarning, match="writes shards in part") as record:
        shardwise.array.to_zarr(x * 3, store, path="v", region=(slice(0, 10),))
    assert len(record) == 1 and record[0].filename == __file__  # at the user's call
    np.testing.assert_array_equal(zarr.open_array(store, path="v")[:10], 3)
    with pytest.warns(UnprotectedWriteWarning, match="grows the array"):
        shardwise.array.to_zarr(x * 4, store, path="v", append_dim=0)
    got = zarr.open_array(store, path="v")
    assert got.shape[0] == SHAPE[0] + 10
    np.testing.assert_array_equal(got[SHAPE[0] :], 4)
    # whole shards, and a job that says it is the only writer: no warning
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        shardwise.array.to_zarr(
            da.ones((100, SHAPE[1]), chunks=100), store, path="v", region=(slice(0, 100),)
        )
        shardwise.array.to_zarr(
            x, store, path="v", region=(slice(0, 10),), independent_writers=False
        )
    # a Dataset append, as xarray's own to_zarr makes it: one warning for the write
    ds = xr.Dataset({"t": (("time",), np.arange(8.0)), "u": (("time",), np.arange(8.0))})
    dstore = zarr.storage.FsspecStore.from_url("memory://shardwise-no-cas-3/d.zarr")
    shardwise.to_zarr(
        ds.chunk(4),
        dstore,
        encoding={v: {"shards": (8,), "chunks": (4,)} for v in ("t", "u")},
        consolidated=False,
    )
    with pytest.warns(UnprotectedWriteWarning, match="'t' grows.*'u' grows") as record:
        shardwise.to_zarr(ds.chunk(4), dstore, append_dim="time", consolidated=False)
    assert len(record) == 1 and record[0].filename == __file__
    np.testing.assert_array_equal(
        xr.open_zarr(dstore, consolidated=False)["t"].values,
        np.concatenate([np.arange(8.0)] * 2),
    )


def test_writes_merged_by_dask_array_store_warn_or_are_refused(tmp_path):
    """A Zarr v2 array is written through ``dask.array.store``, whose puts into chunks
    it covers in part are plain, on any store: by default such a write goes ahead with
    a warning, ``independent_writers=True`` refuses it before anything is written."""
    import shardwise.array

    store = tmp_path / "v2.zarr"
    shardwise.array.to_zarr(
        da.zeros((20,), chunks=10, dtype="f8"), str(store), "a", zarr_format=2, chunks=(10,)
    )
    part = da.ones((5,), chunks=5, dtype="f8")
    with pytest.raises(WriteError, match=r"dask\.array\.store") as info:
        shardwise.array.to_zarr(
            part, str(store), "a", region=(slice(0, 5),), independent_writers=True
        )
    assert "Nothing was written" in str(info.value)
    np.testing.assert_array_equal(zarr.open_array(str(store), path="a")[:], 0)
    with pytest.warns(UnprotectedWriteWarning, match=r"dask\.array\.store"):
        shardwise.array.to_zarr(part, str(store), "a", region=(slice(0, 5),))
    np.testing.assert_array_equal(zarr.open_array(str(store), path="a")[:5], 1)


def _mounted_as(monkeypatch, tmp_path, fstype: str, source: str) -> None:
    """``tmp_path`` seen as a mount of ``fstype`` (a mountinfo naming it)."""
    import shardwise.io.mounts as mounts

    info = tmp_path / "mountinfo"
    info.write_text(f"36 1 0:50 / {tmp_path} rw,relatime - {fstype} {source} rw\n")
    monkeypatch.setattr(mounts, "MOUNTINFO", str(info))


def test_a_shared_file_system_whose_locks_stay_on_one_node_warns_or_is_refused(
    tmp_path, monkeypatch
):
    """On NFS (and Lustre, BeeGFS...) the flock shardwise takes on a folder is kept by
    each node's kernel (``docs/shared-file-systems.md``): a write that merges into
    shards is refused with ``independent_writers=True`` and by default goes ahead,
    guarded still against jobs on this node, with a warning naming the mount."""
    store = str(tmp_path / "a.zarr")
    new_array(store)
    _mounted_as(monkeypatch, tmp_path, "nfs4", "nas01:/export")
    x = da.ones((10, SHAPE[1]), chunks=10)
    with pytest.raises(WriteError, match="is NFS, where the flock") as info:
        shardwise.array.to_zarr(
            x, store, path="v", region=(slice(0, 10),), independent_writers=True
        )
    assert "Nothing was written" in str(info.value)
    np.testing.assert_array_equal(zarr.open_array(store, path="v")[:10], 0)
    puts: list[str] = []
    original = shardwise.io.conditional.LocalConditional.put

    def counted(self, key, data, expected):
        puts.append(key)
        return original(self, key, data, expected)

    monkeypatch.setattr(shardwise.io.conditional.LocalConditional, "put", counted)
    with pytest.warns(UnprotectedWriteWarning, match="other nodes are not kept out") as record:
        shardwise.array.to_zarr(x * 5, store, path="v", region=(slice(0, 10),))
    assert len(record) == 1 and record[0].filename == __file__
    assert puts == ["v/c/0/0"]  # (the merge still made only if unchanged)
    np.testing.assert_array_equal(zarr.open_array(store, path="v")[:10], 5)


def test_a_file_system_that_refuses_flock_writes_plainly_with_a_warning(tmp_path, monkeypatch):
    import shardwise.io.mounts as mounts

    store = str(tmp_path / "a.zarr")
    new_array(store)
    monkeypatch.setattr(mounts, "probe_flock", lambda directory: "ENOLCK")
    monkeypatch.setattr(mounts, "_PROBED", {})
    x = da.ones((10, SHAPE[1]), chunks=10)
    with pytest.raises(WriteError, match=r"refuses flock \(ENOLCK\)"):
        shardwise.array.to_zarr(
            x, store, path="v", region=(slice(0, 10),), independent_writers=True
        )
    with pytest.warns(UnprotectedWriteWarning, match="refuses flock"):
        shardwise.array.to_zarr(x * 6, store, path="v", region=(slice(0, 10),))
    np.testing.assert_array_equal(zarr.open_array(store, path="v")[:10], 6)


def test_the_default_comes_from_dask_config(tmp_path):
    store = zarr.storage.FsspecStore.from_url("memory://shardwise-no-cas-2/a.zarr")
    new_array(store)
    with dask.config.set({"shardwise.independent-writers": False}):
        shardwise.array.to_zarr(
            da.ones((10, SHAPE[1]), chunks=10), store, path="v", region=(slice(0, 10),)
        )
    with (
        dask.config.set({"shardwise.independent-writers": True}),
        pytest.raises(WriteError, match="could lose another job's rows"),
    ):
        shardwise.array.to_zarr(
            da.ones((10, SHAPE[1]), chunks=10), store, path="v", region=(slice(0, 10),)
        )
    with pytest.raises(WriteError, match="independent_writers"):
        shardwise.array.to_zarr(
            da.ones((10, SHAPE[1]), chunks=10),
            store,
            path="v",
            region=(slice(0, 10),),
            independent_writers="yes",
        )


# -- S3 endpoints ------------------------------------------------------------------------------
def _race_creates(
    endpoint: str, bucket: str, tries: int, writers: int = 8, update: bool = False
) -> list[int]:
    """For each of ``tries`` new keys, ``writers`` threads put it at once with
    ``If-None-Match: *`` (``update``: the key is put first, and they put it with
    ``If-Match`` on its ETag): how many succeeded, per key."""
    import boto3
    from botocore.exceptions import ClientError

    from s3server import KEY, REGION, SECRET

    clients = [
        boto3.client(
            "s3",
            endpoint_url=endpoint,
            aws_access_key_id=KEY,
            aws_secret_access_key=SECRET,
            region_name=REGION,
        )
        for _ in range(writers)
    ]
    wins = []
    for t in range(tries):
        barrier = threading.Barrier(writers, timeout=60)
        won = []
        key = f"race/{'update' if update else 'create'}/{t}"
        condition = {"IfNoneMatch": "*"}
        if update:
            etag = clients[0].put_object(Bucket=bucket, Key=key, Body=b"first")["ETag"]
            condition = {"IfMatch": etag}

        def put(client, i, key=key, barrier=barrier, won=won, condition=condition):
            barrier.wait()
            try:
                client.put_object(
                    Bucket=bucket, Key=key, Body=b"x" * 1000 + bytes([i]), **condition
                )
                won.append(i)
            except ClientError:
                pass

        run_threads([lambda c=c, i=i: put(c, i) for i, c in enumerate(clients)])
        wins.append(len(won))
    for c in clients:
        c.close()
    return wins


def test_the_serialized_endpoint_lets_exactly_one_conditional_put_win(
    s3_serialized, serialized_bucket
):
    endpoint = s3_serialized.endpoint
    assert _race_creates(endpoint, serialized_bucket, tries=20) == [1] * 20
    assert _race_creates(endpoint, serialized_bucket, tries=20, update=True) == [1] * 20


# -- the interleaving that loses an update with plain puts, forced -----------------------------
def test_two_writers_that_both_read_a_shard_first_both_keep_their_rows(tmp_path, monkeypatch):
    """Two jobs (threads here) each merge their rows into shard 0; each job's first put
    waits until both have read the shard, the interleaving in which plain puts lose one
    job's rows. The second put finds the shard changed, reads it again, merges again:
    both jobs' rows are kept, after exactly one conflict."""
    from shardwise.graph.tasks import conflicts
    from shardwise.io import conditional

    store = tmp_path / "a.zarr"
    new_array(store)
    key = "v/c/0/0"
    reads = threading.Semaphore(0)
    waited: set[int] = set()
    gate = threading.Lock()  # one put at a time takes both reads (else each takes one, and waits)
    get, put = conditional.LocalConditional.get, conditional.LocalConditional.put

    def gated_get(self, k):
        out = get(self, k)
        if k == key:
            reads.release()
        return out

    def gated_put(self, k, data, expected):
        me = threading.get_ident()
        if k == key and expected is not None and me not in waited:
            waited.add(me)
            with gate:  # both have read: take both reads, and give them back
                assert reads.acquire(timeout=30) and reads.acquire(timeout=30), "no two reads"
                reads.release()
                reads.release()
        return put(self, k, data, expected)

    monkeypatch.setattr(conditional.LocalConditional, "get", gated_get)
    monkeypatch.setattr(conditional.LocalConditional, "put", gated_put)
    before = conflicts()

    def job(rows: slice, v: float) -> None:
        x = da.full((rows.stop - rows.start, SHAPE[1]), v, chunks=10)
        with dask.config.set(scheduler="synchronous"):
            shardwise.array.to_zarr(x, store, path="v", region=(rows,))

    run_threads([lambda: job(slice(0, 10), 1.0), lambda: job(slice(50, 60), 2.0)], timeout=60)
    got = zarr.open_array(store, path="v")[...]
    np.testing.assert_array_equal(got[0:10], 1.0)
    np.testing.assert_array_equal(got[50:60], 2.0)
    np.testing.assert_array_equal(got[10:50], 0.0)
    assert conflicts() - before == 1


# -- Icechunk ------------------------------------------------------------------------------
def test_icechunk_jobs_sharing_a_shard_conflict_at_commit_and_a_rerun_keeps_both(tmp_path):
    """Icechunk's sessions are the transaction: with the default (guarded) writes,
    shardwise leaves conflict detection to the commit, as Icechunk's own writer does. Two
    jobs' regions share shard 0: the second commit is refused (nothing of it lands),
    and the job run again in a new session keeps both jobs' rows, the result conditional
    puts give on other stores."""
    icechunk = pytest.importorskip("icechunk")
    icechunk.set_logs_filter("error")
    repo = icechunk.Repository.create(icechunk.local_filesystem_storage(str(tmp_path / "r")))
    session = repo.writable_session("main")
    new_array(session.store)
    session.commit("base")

    def job(rows: slice, v: float):
        s = repo.writable_session("main")
        x = da.full((rows.stop - rows.start, SHAPE[1]), v, chunks=10)
        shardwise.array.to_zarr(x, s.store, path="v", region=(rows,))
        return s

    a, b = job(slice(0, 10), 1.0), job(slice(50, 60), 2.0)
    a.commit("a")
    with pytest.raises((icechunk.ConflictError, icechunk.RebaseFailedError)):
        b.commit("b", rebase_with=icechunk.ConflictDetector())
    got = zarr.open_array(repo.readonly_session("main").store, path="v")[...]
    assert (got[0:10] == 1).all() and (got[10:] == 0).all()  # b: nothing landed
    job(slice(50, 60), 2.0).commit("b again")
    got = zarr.open_array(repo.readonly_session("main").store, path="v")[...]
    assert (got[0:10] == 1).all() and (got[50:60] == 2).all()
    assert (got[10:50] == 0).all() and (got[60:] == 0).all()
