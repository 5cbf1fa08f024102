"""Icechunk sessions: shardwise writes through a fork of the session (one task per
shard, forks merged back), commits only when asked, and reads Icechunk stores with its
own coalescing. Repositories on local-filesystem storage."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

import shardwise
from shardwise.errors import TruncatedShardError, WriteError

icechunk = pytest.importorskip("icechunk")
icechunk.set_logs_filter("error")  # its Rust log (local storage is not for concurrent commits)


def new_repo(path: Path):
    return icechunk.Repository.create(icechunk.local_filesystem_storage(str(path)))


def field(nt: int = 300, nx: int = 20, seed: int = 0, chunks: int = 30) -> xr.Dataset:
    rng = np.random.default_rng(seed)
    return xr.Dataset(
        {"v": (("t", "x"), rng.normal(size=(nt, nx)).astype("f4"))},
        coords={"t": np.arange(nt)},
    ).chunk({"t": chunks})


def stored(repo, branch: str = "main") -> dict[str, bytes]:
    """Every key of the branch's head and its bytes."""
    from zarr.core.buffer import default_buffer_prototype
    from zarr.core.sync import sync

    store = repo.readonly_session(branch).store

    async def everything() -> dict[str, bytes]:
        out = {}
        async for key in store.list():
            buf = await store.get(key, default_buffer_prototype())
            out[key] = buf.to_bytes()
        return out

    return sync(everything())


def read(repo, branch: str = "main") -> xr.Dataset:
    return xr.open_zarr(repo.readonly_session(branch).store, consolidated=False).load()


def test_write_through_a_fork_and_commit(tmp_path):
    """Dask chunks of 30 rows into shards of 100: committed only when asked, identical
    to Icechunk's own writer with aligned chunks."""
    repo = new_repo(tmp_path / "repo")
    ds = field()
    session = repo.writable_session("main")
    snapshot = shardwise.to_zarr(ds, session, shards={"t": 100}, chunks={"t": 10}, commit="first")
    assert isinstance(snapshot, str) and repo.lookup_branch("main") == snapshot
    xr.testing.assert_identical(read(repo), ds.compute())

    from icechunk.xarray import to_icechunk

    ref = new_repo(tmp_path / "ref")
    ref_session = ref.writable_session("main")
    encoding = {"v": {"shards": (100, 20), "chunks": (10, 20)}}
    to_icechunk(ds.chunk({"t": 100}), ref_session, encoding=encoding)
    ref_session.commit("ref")
    xr.testing.assert_identical(read(repo), read(ref))

    # compute=False on threads: the delayed computes to the merged fork session
    session = repo.writable_session("main")
    delayed = shardwise.to_zarr(-ds, session, mode="a", region={"t": slice(0, 300)}, compute=False)
    assert repo.lookup_branch("main") == snapshot and not session.status().updated_chunks
    session.merge(delayed.compute())
    session.commit("negated")
    xr.testing.assert_identical(read(repo), (-ds).compute())


def test_misaligned_chunks_lose_nothing(tmp_path):
    """The case Icechunk's own writer gets wrong with safe_chunks=False (several tasks
    write one shard and the last fork wins on merge): shardwise, zero differences."""
    repo = new_repo(tmp_path / "repo")
    ds = field(3000, 50, chunks=30)
    session = repo.writable_session("main")
    shardwise.to_zarr(ds, session, shards={"t": 100}, chunks={"t": 10}, commit="misaligned")
    back = read(repo)
    assert int((back.v != ds.v.compute()).sum()) == 0


def test_uncommitted_appends_regions_and_empty_shards(tmp_path):
    repo = new_repo(tmp_path / "repo")
    ds = field()
    session = repo.writable_session("main")
    first = shardwise.to_zarr(ds, session, shards={"t": 100}, chunks={"t": 10}, commit="first")

    # an append through session.store: in the session, not on the branch until commit
    session = repo.writable_session("main")
    more = field(45, seed=1, chunks=7).assign_coords(t=np.arange(300, 345))
    shardwise.to_zarr(more, session.store, append_dim="t")
    assert session.has_uncommitted_changes and repo.lookup_branch("main") == first
    xr.testing.assert_identical(read(repo), ds.compute())
    session.commit("append")
    want = xr.concat([ds, more], "t").load()
    xr.testing.assert_identical(read(repo), want)

    # a region of NaN covering shard 1 whole and cutting shard 2: shard 1 is deleted
    session = repo.writable_session("main")
    nan = xr.Dataset({"v": (("t", "x"), np.full((130, 20), np.nan, "f4"))}).chunk({"t": 40})
    shardwise.to_zarr(nan, session, region={"t": slice(100, 230)}, commit="holes")
    keys = stored(repo)
    assert "v/c/0/0" in keys and "v/c/1/0" not in keys and "v/c/2/0" in keys
    want["v"][100:230] = np.nan
    xr.testing.assert_identical(read(repo), want)


def test_bad_input_is_refused_before_anything_is_written(tmp_path):
    repo = new_repo(tmp_path / "repo")
    ds = field()
    session = repo.writable_session("main")
    shardwise.to_zarr(ds, session, shards={"t": 100}, chunks={"t": 10}, commit="first")
    session = repo.writable_session("main")
    with pytest.raises(WriteError):
        shardwise.to_zarr(field(10), session, region={"t": slice(295, 305)})
    with pytest.raises(WriteError, match="commit= needs the data written first"):
        shardwise.to_zarr(ds, session, mode="w", commit="x", compute=False)
    with pytest.raises(WriteError, match="fork session was given"):
        shardwise.to_zarr(ds, session.fork(), mode="w")
    with pytest.raises(WriteError, match="Zarr v3 only"):
        shardwise.to_zarr(ds, session, mode="w", zarr_format=2)
    assert not session.has_uncommitted_changes
    with pytest.raises(WriteError, match="read-only"):
        shardwise.to_zarr(ds, repo.readonly_session("main"), mode="w")
    with pytest.raises(WriteError, match="commit= is for Icechunk sessions"):
        shardwise.to_zarr(ds, tmp_path / "plain.zarr", commit="x")
    assert not (tmp_path / "plain.zarr").exists()


def test_delayed_write_on_worker_processes(tmp_path):
    """compute=False: the delayed computes, on 2 worker processes, to one fork session
    holding every task's changes; merged and committed by the caller."""
    distributed = pytest.importorskip("distributed")
    from clusters import CLUSTER_OPTIONS

    repo = new_repo(tmp_path / "repo")
    ds = field(600, chunks=45)
    with (
        distributed.LocalCluster(**CLUSTER_OPTIONS, threads_per_worker=1) as cluster,
        distributed.Client(cluster),
    ):
        session = repo.writable_session("main")
        delayed = shardwise.to_zarr(ds, session, shards={"t": 100}, chunks={"t": 10}, compute=False)
        fork = delayed.compute()
        assert type(fork).__name__ == "ForkSession"
        session.merge(fork)
        session.commit("from the cluster")
        # a read-only session pickles to the workers: read there, with the fan-out graph
        store = repo.readonly_session("main").store
        opened = shardwise.open_dataset(store, chunks={"t": 50}, consolidated=False)
        assert float(opened.v.sum().compute()) == pytest.approx(float(ds.v.sum()), rel=1e-5)
    xr.testing.assert_identical(read(repo), ds.compute())


KILLED_WRITER = textwrap.dedent(
    """
    import sys, time
    import numpy as np, xarray as xr, icechunk
    import shardwise

    icechunk.set_logs_filter("error")
    repo = icechunk.Repository.open(icechunk.local_filesystem_storage(sys.argv[1]))

    def slow(block):
        time.sleep(0.5)
        return block

    ds = xr.Dataset({"v": (("t", "x"), np.ones((3000, 20), "f4"))}).chunk({"t": 100})
    ds["v"] = ds.v.copy(data=ds.v.data.map_blocks(slow, dtype="f4"))
    session = repo.writable_session("main")
    print("writing", flush=True)
    shardwise.to_zarr(ds, session, mode="a", region={"t": slice(0, 3000)}, commit="never")
    print("committed", flush=True)
    """
)


def test_a_killed_job_leaves_the_branch_as_it_was(tmp_path):
    """Kill a committing job part-way: the branch is at the same snapshot, every key's
    bytes as before."""
    repo = new_repo(tmp_path / "repo")
    session = repo.writable_session("main")
    shardwise.to_zarr(field(3000), session, shards={"t": 100}, chunks={"t": 10}, commit="before")
    before, head = stored(repo), repo.lookup_branch("main")
    script = tmp_path / "writer.py"
    script.write_text(KILLED_WRITER)
    with subprocess.Popen(
        [sys.executable, str(script), str(tmp_path / "repo")],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "DASK_NUM_WORKERS": "2"},
    ) as proc:
        try:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "writing"
            time.sleep(3)  # some 100-row blocks written into the fork, most not
            assert proc.poll() is None, "the writer finished before it could be killed"
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
    repo = icechunk.Repository.open(icechunk.local_filesystem_storage(str(tmp_path / "repo")))
    assert repo.lookup_branch("main") == head
    assert stored(repo) == before


def test_concurrent_jobs_disjoint_regions_commit_and_shared_shards_conflict(tmp_path):
    """Two sessions from one snapshot: disjoint shard-aligned regions both commit (the
    second rebases); regions sharing a shard make the second commit raise Icechunk's
    conflict error, losing nothing."""
    repo = new_repo(tmp_path / "repo")
    shardwise.to_zarr(
        field(), repo.writable_session("main"), shards={"t": 100}, chunks={"t": 10}, commit="base"
    )
    zeros = xr.Dataset({"v": (("t", "x"), np.zeros((100, 20), "f4"))}).chunk({"t": 30})
    a, b = repo.writable_session("main"), repo.writable_session("main")
    shardwise.to_zarr(zeros, a, region={"t": slice(0, 100)})
    shardwise.to_zarr(zeros + 1, b, region={"t": slice(100, 200)})
    a.commit("a")
    b.commit("b", rebase_with=icechunk.ConflictDetector())
    got = read(repo).v.values
    assert (got[:100] == 0).all() and (got[100:200] == 1).all()

    c, d = repo.writable_session("main"), repo.writable_session("main")
    shardwise.to_zarr(zeros + 2, c, region={"t": slice(150, 250)})  # shards 1 and 2
    shardwise.to_zarr(zeros + 3, d, region={"t": slice(180, 280)})  # shards 1 and 2 too
    c.commit("c")
    with pytest.raises((icechunk.ConflictError, icechunk.RebaseFailedError)):
        d.commit("d", rebase_with=icechunk.ConflictDetector())
    got = read(repo).v.values
    assert (got[150:250] == 2).all() and (got[100:150] == 1).all()
    with pytest.raises(shardwise.errors.RegionConflictError):  # what check_regions would have said
        shardwise.regions.check_regions(
            repo.readonly_session("main").store,
            [{"t": slice(150, 250)}, {"t": slice(180, 280)}],
        )


def test_reads_engine_fanout_verify_inventory_with_fewer_requests(tmp_path):
    from shardwise.testing import CountingStore

    repo = new_repo(tmp_path / "repo")
    ds = field(1000, 40, chunks=100)
    shardwise.to_zarr(
        ds, repo.writable_session("main"), shards={"t": 200}, chunks={"t": 10}, commit="x"
    )
    store = repo.readonly_session("main").store
    engine = xr.open_dataset(store, engine="shardwise", chunks={}, consolidated=False)
    assert engine.v.chunks == ((200,) * 5, (40,))
    xr.testing.assert_identical(engine.load(), ds.compute())
    assert shardwise.verify(store).ok
    assert int(shardwise.inventory(store, variable="v").present.sum()) == 100

    scattered = {"t": [3, 5, 14, 16, 27, 402, 405, 414, 833, 838]}
    ours, theirs = CountingStore(store), CountingStore(store)
    got = shardwise.open_dataset(ours, chunks="inner", consolidated=False).v.isel(scattered).load()
    want = xr.open_zarr(theirs, consolidated=False).v.isel(scattered).load()
    xr.testing.assert_identical(got, want)
    ours_gets = len([r for r in ours.log.gets() if "/c/" in r.key])
    theirs_gets = len([r for r in theirs.log.gets() if "/c/" in r.key])
    assert ours_gets < theirs_gets, (ours_gets, theirs_gets)


def test_out_of_bounds_ranges_raise_there_and_the_reader_copes(tmp_path):
    """Icechunk refuses a range past an object's end instead of returning it short. With
    the index at the end and no checksum, the reader's read-on past the furthest chunk
    stays inside a good shard, and an entry pointing into the index becomes a
    TruncatedShardError, not Icechunk's error."""
    import zarr
    from zarr.codecs import BytesCodec, ShardingCodec
    from zarr.core.buffer import default_buffer_prototype
    from zarr.core.sync import sync

    repo = new_repo(tmp_path / "repo")
    session = repo.writable_session("main")
    values = np.arange(64 * 8, dtype="f4").reshape(64, 8)
    arr = zarr.create_array(
        session.store,
        name="v",
        shape=values.shape,
        dtype="f4",
        serializer=ShardingCodec(
            chunk_shape=(8, 8), index_codecs=[BytesCodec()], index_location="end"
        ),
        chunks=(64, 8),
        compressors=None,
        fill_value=0,
    )
    arr[...] = values
    session.commit("data")
    from shardwise.io.reader import ArrayReader

    reader = ArrayReader.open(repo.readonly_session("main").store, "v")
    np.testing.assert_array_equal(reader[56:64], values[56:64])  # the last chunk, read on
    np.testing.assert_array_equal(reader[0:8], values[0:8])

    session = repo.writable_session("main")
    blob = bytearray(sync(session.store.get("v/c/0/0", default_buffer_prototype())).to_bytes())
    index = np.frombuffer(bytes(blob[-16 * 8 :]), dtype="<u8").reshape(8, 2).copy()
    index[7, 0] += 8  # the last chunk's entry now reaches 8 bytes into the index
    blob[-16 * 8 :] = index.tobytes()
    sync(session.store.set("v/c/0/0", default_buffer_prototype().buffer.from_bytes(bytes(blob))))
    session.commit("corrupt")
    reader = ArrayReader.open(repo.readonly_session("main").store, "v")
    with pytest.raises(TruncatedShardError, match="outside the shard object's data") as info:
        reader[56:64]
    assert info.value.key == "v/c/0/0" and info.value.chunk == (7, 0)


def test_repository_on_moto_s3(s3, bucket):
    """A repository in moto's S3 server: the write, the commit, the conflict check of
    two sessions sharing a shard (Icechunk's conditional writes work there), a read."""
    from s3server import KEY, REGION, SECRET

    storage = icechunk.s3_storage(
        bucket=bucket,
        prefix="repo",
        endpoint_url=s3.endpoint,
        allow_http=True,
        access_key_id=KEY,
        secret_access_key=SECRET,
        region=REGION,
        force_path_style=True,
    )
    repo = icechunk.Repository.create(storage)
    ds = field(300, chunks=30)
    shardwise.to_zarr(
        ds, repo.writable_session("main"), shards={"t": 100}, chunks={"t": 10}, commit="s3"
    )
    assert any(k.startswith("repo/chunks/") for k in s3.keys(bucket))
    zeros = xr.Dataset({"v": (("t", "x"), np.zeros((100, 20), "f4"))}).chunk({"t": 50})
    a, b = repo.writable_session("main"), repo.writable_session("main")
    shardwise.to_zarr(zeros, a, region={"t": slice(0, 100)})
    shardwise.to_zarr(zeros, b, region={"t": slice(50, 150)})
    a.commit("a")
    with pytest.raises(icechunk.ConflictError):
        b.commit("b")
    back = xr.open_dataset(
        repo.readonly_session("main").store, engine="shardwise", chunks={}, consolidated=False
    ).load()
    want = ds.v.values.copy()
    want[:100] = 0
    np.testing.assert_array_equal(back.v.values, want)


def test_dask_arrays_through_a_session(tmp_path):
    """``shardwise.to_zarr(x, session, path=...)`` and ``shardwise.array.from_zarr`` on an
    Icechunk repository: the fork pattern for one array, appends, commit."""
    import dask.array as da
    import zarr

    repo = new_repo(tmp_path / "repo")
    data = np.random.default_rng(5).normal(size=(200, 30)).astype("f4")
    x = da.from_array(data, chunks=(35, 30))
    snapshot = shardwise.array.to_zarr(
        x[:120],
        repo.writable_session("main"),
        path="a/v",
        shards=(50, 30),
        chunks=(10, 10),
        commit="one",
    )
    assert repo.lookup_branch("main") == snapshot
    session = repo.writable_session("main")
    delayed = shardwise.array.to_zarr(x[120:], session, path="a/v", append_dim=0, compute=False)
    session.merge(delayed.compute())
    session.commit("two")
    store = repo.readonly_session("main").store
    np.testing.assert_array_equal(zarr.open_array(store, path="a/v", mode="r")[...], data)
    np.testing.assert_array_equal(
        shardwise.array.from_zarr(store, "a/v", chunks="inner").compute(), data
    )


def test_a_datatree_is_refused_for_a_session(tmp_path):
    """One call cannot write a DataTree through a session's forks (its nodes' forks
    would not reach the session): refused, the session left as it was."""
    repo = new_repo(tmp_path / "repo")
    session = repo.writable_session("main")
    tree = xr.DataTree.from_dict({"/a": field(30, chunks=10)})
    with pytest.raises(WriteError, match="DataTree cannot be written into an Icechunk session"):
        shardwise.to_zarr(tree, session)
    assert not session.has_uncommitted_changes
