"""Readers that are never wrong while another job rewrites shards: every cached shard
index carries the version of the shard it came from, and every read that uses it is
made against that version (``shardwise.io.fetch``, ``shardwise.io.conditional``).

Each case here is deterministic: the "other job" rewrites a shard between two reads of
one long-lived handle, on a real store of each kind (a local directory, zarr-python's
MemoryStore, obstore's in-memory store, and S3 through s3fs and obstore on moto's
server). ``tests/test_reader_consistency.py`` does the same with real processes
racing.
"""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np
import pytest
import xarray as xr
import zarr
from zarr.abc.store import OffsetByteRequest, RangeByteRequest, SuffixByteRequest
from zarr.storage import LocalStore, MemoryStore, WrapperStore

import shardwise
from shardwise import ArrayReader, ReadOptions
from shardwise._compat import sync
from shardwise.errors import ChangingShardError
from shardwise.io.cache import SUPPLIED, IndexEntry
from shardwise.io.capabilities import conditional
from shardwise.io.conditional import ABSENT, Stale
from shardwise.testing import CountingStore

SHAPE = (200, 10)  # two shards of 100 rows; inner chunks of 10 rows
SHARD = (100, 10)
INNER = (10, 10)


def values(rows: range, generation: int) -> np.ndarray:
    """Self-checking values: the low 32 bits say where a value belongs, the high bits
    which generation wrote it (random for odd generations, so that the compressed
    sizes, and with them every offset after, change from one to the next)."""
    r = np.arange(rows.start, rows.stop, dtype=np.int64)[:, None]
    c = np.arange(SHAPE[1], dtype=np.int64)[None, :]
    pos = r * SHAPE[1] + c
    if generation % 2:
        noise = np.random.default_rng(generation).integers(0, 1 << 20, size=SHAPE)
        noise = noise[rows.start : rows.stop]
    else:
        noise = np.full(pos.shape, generation, dtype=np.int64)
    return (noise.astype(np.int64) << 32) | pos


def where(block: np.ndarray, rows: range) -> None:
    """Every value of ``block`` (rows ``rows``, all columns) belongs where it was read."""
    r = np.arange(rows.start, rows.stop, dtype=np.int64)[:, None]
    pos = r * SHAPE[1] + np.arange(SHAPE[1], dtype=np.int64)[None, :]
    low = block & 0xFFFFFFFF
    ok = (low == pos) | (block == -1)
    assert ok.all(), f"{int((~ok).sum())} values from another inner chunk"


# -- stores ------------------------------------------------------------------------------
class Stores:
    """One store kind: ``open()`` gives a zarr-python store (each call a new object over
    the same data, as another process would have), ``shared`` for kinds whose data live
    in one object (memory)."""

    def __init__(self, kind: str, tmp_path: Any, request: Any) -> None:
        self.kind = kind
        self.tmp_path = tmp_path
        self._memory: Any = None
        if kind in ("s3fs", "obstore-s3"):
            self.server = request.getfixturevalue("s3")
            self.bucket = request.getfixturevalue("bucket")

    def open(self) -> Any:
        if self.kind == "local":
            return LocalStore(self.tmp_path / "data.zarr")
        if self.kind == "memory":
            if self._memory is None:
                self._memory = MemoryStore()
            return self._memory
        if self.kind == "obstore-memory":
            if self._memory is None:
                from obstore.store import MemoryStore as ObMemory
                from zarr.storage import ObjectStore

                self._memory = ObjectStore(ObMemory())
            return self._memory
        if self.kind == "s3fs":
            return zarr.storage.FsspecStore.from_url(
                f"s3://{self.bucket}/data.zarr", storage_options=self.server.storage_options()
            )
        return self.server.obstore(self.bucket, "data.zarr")


KINDS = ["local", "memory", "obstore-memory", "s3fs", "obstore-s3"]


@pytest.fixture(params=KINDS)
def stores(request, tmp_path):
    if request.param in ("s3fs", "obstore-s3"):
        pytest.importorskip("moto.server")
        pytest.importorskip("s3fs")
    if request.param.startswith("obstore"):
        pytest.importorskip("obstore")
    return Stores(request.param, tmp_path, request)


def create(store: Any) -> zarr.Array:
    """The array: shard 0 holds every inner chunk but the fourth (rows 30-39), shard 1
    only its first."""
    arr = zarr.create_array(
        store,
        name="v",
        shape=SHAPE,
        chunks=INNER,
        shards=SHARD,
        dtype="i8",
        fill_value=-1,
        dimension_names=["y", "x"],
        compressors=zarr.codecs.ZstdCodec(level=1),
    )
    full = values(range(0, 110), 1)
    full[30:40] = -1
    arr[0:110] = full
    return arr


def rewrite(stores: Stores, rows: range, generation: int) -> None:
    """The other job: rows rewritten through zarr-python (a whole-shard put)."""
    arr = zarr.open_array(stores.open(), path="v", mode="r+")
    arr[rows.start : rows.stop] = values(rows, generation)


# -- the versioned reads of each store kind -----------------------------------------------
def test_versioned_reads(stores):
    """``read`` returns the bytes, their version (the one ``get`` gives) and the
    object's size in one request; against a version it raises Stale once the object
    is another version, or gone."""
    guard = conditional(stores.open())
    assert guard is not None
    key = "obj"
    assert sync(guard.read(key)) == (None, ABSENT, None)
    guard.put(key, bytes(range(100)), None)
    whole = sync(guard.read(key))
    assert bytes(whole.data) == bytes(range(100)) and whole.size == 100
    assert whole.version == guard.get(key)[1] and not whole.version.absent
    for byte_range, expected in [
        (RangeByteRequest(10, 20), range(10, 20)),
        (SuffixByteRequest(7), range(93, 100)),
        (OffsetByteRequest(95), range(95, 100)),
    ]:
        got = sync(guard.read(key, byte_range, whole.version))
        assert bytes(got.data) == bytes(expected)
        assert got.version == whole.version and got.size == 100
    guard.put(key, bytes(range(100, 0, -1)), None)
    with pytest.raises(Stale):
        sync(guard.read(key, RangeByteRequest(0, 10), whole.version))
    now = sync(guard.read(key, RangeByteRequest(0, 10)))
    assert now.version != whole.version and bytes(now.data) == bytes(range(100, 90, -1))
    guard.delete(key)
    with pytest.raises(Stale):
        sync(guard.read(key, RangeByteRequest(0, 10), now.version))


def test_versions_travel_between_processes_without_their_pins(tmp_path):
    """A version pickles as its tag alone: the open file that keeps a writer's version
    meaningful stays in the process that opened it."""
    import pickle

    guard = conditional(LocalStore(tmp_path))
    guard.put("k", b"x", None)
    _, version = guard.get("k")
    assert version.pin is not None
    copy = pickle.loads(pickle.dumps(version))
    assert copy == version and copy.pin is None
    entry = IndexEntry(np.zeros((2, 2), np.uint64), version, 10)
    assert pickle.loads(pickle.dumps(entry)).version == version


# -- the case, every reader --------------------------------------------------------
def open_handle(kind: str, store: Any, **options: Any) -> Any:
    """A long-lived handle of one reader kind, and how it reads rows."""
    read_options = options or None
    if kind == "arrayreader":
        reader = ArrayReader.open(store, "v", options=ReadOptions(**options))
        return lambda rows: reader[rows.start : rows.stop]
    if kind == "engine-lazy":
        ds = xr.open_dataset(
            store, engine="shardwise", chunks=None, consolidated=False, read_options=read_options
        )
        return lambda rows: ds.v[rows.start : rows.stop].values
    if kind == "engine-dask":
        ds = xr.open_dataset(
            store, engine="shardwise", chunks={}, consolidated=False, read_options=read_options
        )
        return lambda rows: ds.v[rows.start : rows.stop].compute(scheduler="threads").values
    assert kind == "fanout"
    ds = shardwise.open_dataset(
        store, chunks="inner", consolidated=False, read_options=read_options
    )
    return lambda rows: ds.v[rows.start : rows.stop].compute(scheduler="threads").values


READERS = ["arrayreader", "engine-lazy", "engine-dask", "fanout"]


@pytest.mark.parametrize("reader", READERS)
def test_a_rewritten_shard_is_read_from_its_new_version(stores, reader):
    """The issue's case: a shard whose fourth inner chunk was absent is read (rows
    50-59, the sixth); another job writes the fourth; the same handle reads rows 50-59
    right (the cached offsets point into the old object: the read against its version
    fails, and the index is read again), and rows 30-39 show the new data at once."""
    create(stores.open())
    read = open_handle(reader, stores.open())
    np.testing.assert_array_equal(read(range(50, 60)), values(range(50, 60), 1))
    np.testing.assert_array_equal(read(range(30, 40)), np.full((10, 10), -1))
    for generation in (2, 3, 4):  # compressed sizes change every time
        rewrite(stores, range(30, 40), generation)
        np.testing.assert_array_equal(read(range(50, 60)), values(range(50, 60), 1))
        np.testing.assert_array_equal(read(range(30, 40)), values(range(30, 40), generation))
        np.testing.assert_array_equal(read(range(25, 105))[5:15], values(range(30, 40), generation))


def test_a_shard_deleted_since_its_index_was_read_reads_as_absent(tmp_path):
    store = LocalStore(tmp_path / "data.zarr")
    create(store)
    reader = ArrayReader.open(store, "v")
    np.testing.assert_array_equal(reader[50:60], values(range(50, 60), 1))
    (tmp_path / "data.zarr" / "v" / "c" / "0" / "0").unlink()
    np.testing.assert_array_equal(reader[50:60], np.full((10, 10), -1))


# -- what each recheck_cached_data costs and sees ----------------------------------------------
def counted(tmp_path: Any, **options: Any) -> tuple[CountingStore, ArrayReader]:
    store = CountingStore(LocalStore(tmp_path / "data.zarr"))
    create(LocalStore(tmp_path / "data.zarr"))
    return store, ArrayReader.open(store, "v", options=ReadOptions(**options))


def requests(store: CountingStore, read: Any) -> list[str]:
    store.log.clear()
    read()
    return [r.byte_range for r in store.log.gets("c/0/0")]


def test_recheck_on_every_read(tmp_path):
    """The default: reads of stored chunks cost what they did (the condition rides on
    the same request); a read of empty chunks reads the index again; absent shards are
    not cached."""
    store, reader = counted(tmp_path)
    first = requests(store, lambda: reader[50:60])
    assert len(first) == 2  # the index, then the chunk's range
    assert requests(store, lambda: reader[50:60]) == first[1:]  # the range alone
    assert len(requests(store, lambda: reader[30:40])) == 1  # empty: the index again
    rewrite(Stores("local", tmp_path, None), range(30, 40), 3)
    np.testing.assert_array_equal(reader[30:40], values(range(30, 40), 3))
    store.log.clear()
    reader[150:160]
    reader[150:160]
    assert len(store.log.gets("c/1/0")) == 2  # absent: asked every time


def test_recheck_open_trusts_the_cache(tmp_path):
    """'open' (immutable data): nothing checked again; empty chunks and absent shards
    cost no request once known."""
    store, reader = counted(tmp_path, recheck_cached_data="open")
    assert len(requests(store, lambda: reader[50:60])) == 2
    assert requests(store, lambda: reader[30:40]) == []
    reader[150:160]
    store.log.clear()
    reader[150:160]
    assert store.log.gets("c/1/0") == []


def test_recheck_after_an_age(tmp_path):
    """A number of seconds: empty chunks are answered from a cached index up to that
    old, then the index is read again and new data show."""
    store, reader = counted(tmp_path, recheck_cached_data=0.5)
    reader[50:60]
    assert requests(store, lambda: reader[30:40]) == []
    rewrite(Stores("local", tmp_path, None), range(30, 40), 2)
    np.testing.assert_array_equal(reader[30:40], np.full((10, 10), -1))  # within the bound
    # stored chunks are still read against the version: never from the wrong chunk
    np.testing.assert_array_equal(reader[50:60], values(range(50, 60), 1))
    time.sleep(0.6)
    np.testing.assert_array_equal(reader[30:40], values(range(30, 40), 2))


@pytest.mark.parametrize("bad", [False, "never", -1, float("inf"), None])
def test_recheck_options_refused(bad):
    with pytest.raises(ValueError, match="recheck_cached_data"):
        ReadOptions(recheck_cached_data=bad)


# -- the fan-out graph's indexes -----------------------------------------------------------------
def test_an_index_task_s_index_of_a_replaced_shard(tmp_path):
    """A read task handed an index of a version since replaced reads the shard's index
    again itself, and reads from the new version."""
    store = CountingStore(LocalStore(tmp_path / "data.zarr"))
    create(LocalStore(tmp_path / "data.zarr"))
    reader = ArrayReader.open(store, "v")
    old = reader.index_entry((0, 0))
    assert old.version is not None and old.size is not None
    rewrite(Stores("local", tmp_path, None), range(30, 40), 3)
    store.log.clear()
    with SUPPLIED.supply({(reader.token, "v/c/0/0"): old}):
        block = reader[50:60]
    np.testing.assert_array_equal(block, values(range(50, 60), 1))
    # the range against the old version (refused), the index, the range again
    assert len(store.log.gets("c/0/0")) == 3


# -- a shard that never stops changing ------------------------------------------------------------
class Rewriting(WrapperStore[Any]):
    """Replaces shard 0 (renamed into place, as writers do) with the next of
    ``versions`` before every ranged read of its data that the reader makes: every index
    it reads is out of date by the time it reads the chunks."""

    def __init__(self, store: Any, versions: list[bytes]) -> None:
        super().__init__(store)
        self.versions = versions

    def _with_store(self, store: Any) -> Rewriting:
        return type(self)(store, self.versions)

    def with_read_only(self, read_only: bool = False) -> Rewriting:
        # (zarr-python's WrapperStore has it from 3.2 on; 3.1's opens need it for mode "r")
        return self._with_store(self._store.with_read_only(read_only))

    def shardwise_conditional(self) -> Any:
        from shardwise.testing import _PassedOn

        shard = self._store.root / "v" / "c" / "0" / "0"

        def before(op: str, key: str, byte_range: Any = None) -> None:
            # (its data, not its index, which is at the end)
            data = isinstance(byte_range, RangeByteRequest) and byte_range.start > 0
            if key == "v/c/0/0" and data:
                tmp = shard.with_name("0.tmp")
                tmp.write_bytes(self.versions.pop(0))
                os.replace(tmp, shard)

        inner = conditional(self._store)
        assert inner is not None
        return _PassedOn(inner, before)


def test_a_shard_that_keeps_changing(tmp_path):
    path = tmp_path / "data.zarr"
    arr = create(LocalStore(path))
    versions = []
    for generation in range(11, 31):  # shard 0 as twenty more writes leave it
        arr[50:60] = values(range(50, 60), generation)
        versions.append((path / "v" / "c" / "0" / "0").read_bytes())
    reader = ArrayReader.open(Rewriting(LocalStore(path), versions), "v")
    with pytest.raises(ChangingShardError, match="kept changing") as info:
        reader[50:52]
    assert info.value.key == "v/c/0/0" and info.value.array == "v"
    assert isinstance(info.value, OSError) and isinstance(info.value, shardwise.ShardwiseError)
    assert len(versions) == 20 - shardwise.io.fetch.CHANGES


# -- stores with no versions --------------------------------------------------------------------------
class Plain(LocalStore):
    """A local store whose reads and writes are its own (a subclass that overrides
    them): its files are not read or replaced past them, so it has no versions."""

    async def get(self, key: Any, prototype: Any, byte_range: Any = None) -> Any:
        return await super().get(key, prototype, byte_range)

    async def set(self, key: str, value: Any) -> None:
        await super().set(key, value)


def test_a_store_without_versions_caches_no_index(tmp_path):
    path = tmp_path / "data.zarr"
    create(LocalStore(path))
    store = CountingStore(Plain(path))
    assert conditional(Plain(path)) is None
    reader = ArrayReader.open(store, "v")
    for generation in (2, 3):
        store.log.clear()
        np.testing.assert_array_equal(reader[50:60], values(range(50, 60), 1))
        assert len(store.log.gets("c/0/0")) == 2  # the index every time, as zarr-python
        rewrite(Stores("local", tmp_path, None), range(30, 40), generation)
        np.testing.assert_array_equal(reader[30:40], values(range(30, 40), generation))
    trusting = ArrayReader.open(store, "v", options=ReadOptions(recheck_cached_data="open"))
    trusting[50:60]
    store.log.clear()
    trusting[50:60]
    assert len(store.log.gets("c/0/0")) == 1  # 'open': cached even here


# -- verify and inventory while shards are replaced ------------------------------------------------
class ReplacedAfterListing(WrapperStore[Any]):
    """Lists the array, then replaces shard 0 with the next of ``versions`` (of other
    sizes) before anything reads it: what the listing said of its size is out of
    date."""

    def __init__(self, store: Any, versions: list[bytes]) -> None:
        super().__init__(store)
        self.versions = versions

    def _with_store(self, store: Any) -> ReplacedAfterListing:
        return type(self)(store, self.versions)

    def with_read_only(self, read_only: bool = False) -> ReplacedAfterListing:
        # (zarr-python's WrapperStore has it from 3.2 on; 3.1's opens need it for mode "r")
        return self._with_store(self._store.with_read_only(read_only))

    def shardwise_conditional(self) -> Any:
        return conditional(self._store)

    async def list_prefix(self, prefix: str) -> Any:
        async for key in self._store.list_prefix(prefix):
            yield key
        self._replace()

    async def list_dir(self, prefix: str) -> Any:
        async for key in self._store.list_dir(prefix):
            yield key
        self._replace()

    def _replace(self) -> None:
        shard = self._store.root / "v" / "c" / "0" / "0"
        if self.versions:
            tmp = shard.with_name("0.tmp")
            tmp.write_bytes(self.versions.pop(0))
            os.replace(tmp, shard)


def test_verify_and_inventory_of_a_shard_replaced_after_listing(tmp_path):
    path = tmp_path / "data.zarr"
    arr = create(LocalStore(path))
    original = (path / "v" / "c" / "0" / "0").read_bytes()
    versions = []
    for generation in (3, 5, 7, 9):
        arr[0:100] = values(range(0, 100), generation)
        versions.append((path / "v" / "c" / "0" / "0").read_bytes())
    (path / "v" / "c" / "0" / "0").write_bytes(original)
    assert len({len(v) for v in [original, *versions]}) == 5
    store = ReplacedAfterListing(LocalStore(path), versions)
    report = shardwise.verify(store)
    assert report.ok, report.problems
    inv = shardwise.inventory(store, "v")
    assert int(inv.present.sum()) == 11


@pytest.mark.parametrize("reader", READERS)
def test_a_handle_keeps_its_shape_when_another_job_appends(tmp_path, reader):
    """As ``engine="zarr"``: an array opened before another job appended keeps the
    shape it was opened with, and reads inside it stay right, the shard at the old edge
    (rewritten by the append) included; the appended rows show once opened again."""
    path = tmp_path / "data.zarr"
    xr.Dataset({"v": (("y", "x"), values(range(0, 150), 1))}).chunk({"y": 50}).pipe(
        shardwise.to_zarr,
        path,
        encoding={"v": {"shards": SHARD, "chunks": INNER, "fill_value": -1}},
        consolidated=False,
    )
    read = open_handle(reader, str(path))
    np.testing.assert_array_equal(read(range(100, 150)), values(range(100, 150), 1))
    more = xr.Dataset({"v": (("y", "x"), values(range(150, 200), 3))}).chunk({"y": 50})
    shardwise.to_zarr(more, path, append_dim="y", consolidated=False)
    old = read(range(0, 150))
    assert old.shape == (150, 10)
    np.testing.assert_array_equal(old, values(range(0, 150), 1))
    again = xr.open_dataset(path, engine="shardwise", chunks=None, consolidated=False)
    np.testing.assert_array_equal(again.v[150:200].values, values(range(150, 200), 3))


def test_a_warm_fanout_read_reads_no_index_and_still_sees_new_data(tmp_path):
    """The index tasks of a fan-out graph computed again take the indexes their process
    cached (no request); the read tasks read stored chunks against those versions, and
    one that needs only chunks the cached index says are empty reads the index again,
    so new data there show."""
    path = tmp_path / "data.zarr"
    create(LocalStore(path))
    store = CountingStore(LocalStore(path))
    ds = shardwise.open_dataset(store, chunks="inner", consolidated=False)
    region = ds.v[40:70]
    np.testing.assert_array_equal(region.compute(scheduler="threads"), values(range(40, 70), 1))
    store.log.clear()
    np.testing.assert_array_equal(region.compute(scheduler="threads"), values(range(40, 70), 1))
    assert [r.byte_range for r in store.log.gets("c/0/0") if r.byte_range.startswith("last")] == []
    assert len(store.log.gets("c/0/0")) == 3  # the three chunks' ranges
    rewrite(Stores("local", tmp_path, None), range(30, 40), 3)
    store.log.clear()
    got = ds.v[30:40].compute(scheduler="threads").values
    np.testing.assert_array_equal(got, values(range(30, 40), 3))
    assert len(store.log.gets("c/0/0")) == 2  # the index again, then the new chunk


def test_icechunk_snapshots_need_no_check(tmp_path):
    """A read-only Icechunk session reads one snapshot, which cannot change: its
    indexes are cached and used with no check; a writable session's store, whose own
    writes change it, has no versions and caches none."""
    icechunk = pytest.importorskip("icechunk")
    repo = icechunk.Repository.create(icechunk.local_filesystem_storage(str(tmp_path / "r")))
    session = repo.writable_session("main")
    create(session.store)
    writable = ArrayReader.open(session.store, "v")
    assert not writable.fetcher.trusted and not writable.fetcher.caching
    session.commit("data")
    reader = ArrayReader.open(repo.readonly_session("main").store, "v")
    assert reader.fetcher.trusted and reader.fetcher.caching
    np.testing.assert_array_equal(reader[50:60], values(range(50, 60), 1))
    np.testing.assert_array_equal(reader[30:40], np.full((10, 10), -1))
    assert len(shardwise.cache.index_cache()) == 1
