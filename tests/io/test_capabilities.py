"""shardwise.io.capabilities: what a store can do, asked of zarr-python's stores, their
subclasses and wrappers, and shardwise's own testing wrappers."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import zarr
from zarr.storage import FsspecStore, LocalStore, LoggingStore, MemoryStore, WrapperStore, ZipStore

from shardwise.io import capabilities as caps
from shardwise.testing import CountingStore, LatencyStore


class Passing(WrapperStore):
    """A wrapper that adds nothing: every method is WrapperStore's own."""


class Held(WrapperStore):
    """A wrapper that changes what ``set`` does (keeps the bytes back): a put made past
    it would land where its own would not."""

    async def set(self, key, value):
        pass


class GetOnly(WrapperStore):
    """A wrapper that overrides ``get`` and inherits WrapperStore's synchronous
    methods, which go past it."""

    async def get(self, key, prototype, byte_range=None):
        return await self._store.get(key, prototype, byte_range)


class Counted(LocalStore):
    """A subclass of zarr-python's local store whose ``get`` is its own."""

    async def get(self, key, prototype, byte_range=None):
        return await super().get(key, prototype, byte_range)


def test_wrappers_answer_through_what_they_wrap(tmp_path):
    local = LocalStore(str(tmp_path))
    for store in (local, Passing(local), LoggingStore(local), Passing(LoggingStore(local))):
        assert caps.local_root(store, caps.DATA) == Path(str(tmp_path))
        guard = caps.conditional(store)
        assert guard is not None and guard.kind == "local file system"
        assert caps.beneath(store, caps.DATA) is local
        assert caps.copies_out(store)
    memory = MemoryStore()
    assert caps.conditional(LoggingStore(memory)).kind == "memory"
    assert caps.in_memory(Passing(memory)) and not caps.in_memory(local)


def test_wrappers_that_change_their_methods_are_stores_of_their_own(tmp_path):
    local = LocalStore(str(tmp_path))
    held = Held(local)
    assert caps.beneath(held, caps.DATA) is held
    assert caps.conditional(held) is None and not caps.copies_out(held)
    assert caps.local_root(held, ("get",)) == Path(str(tmp_path))  # its get is passed on
    assert caps.beneath(held) is local  # where the data lie: below every wrapper
    # a subclass whose get is its own is read through its get, not from its files
    counted = Counted(str(tmp_path))
    assert caps.local_root(counted, ("get",)) is None
    assert caps.local_root(counted, ("set",)) == Path(str(tmp_path))
    assert caps.conditional(counted) is None
    assert caps.conditional(ZipStore(tmp_path / "a.zip", mode="w")) is None


def test_sync_io_only_where_the_sync_methods_do_what_the_async_ones_do(tmp_path):
    local = LocalStore(str(tmp_path))
    sync = hasattr(local, "set_sync")  # (zarr >= 3.3)
    assert caps.sync_io(local) is sync
    assert caps.sync_io(MemoryStore()) is sync
    assert caps.sync_io(LoggingStore(local)) is sync  # LoggingStore logs its sync methods
    assert caps.sync_io(CountingStore(local)) is sync  # so does shardwise's CountingStore
    assert not caps.sync_io(GetOnly(local))  # WrapperStore.get_sync would go past its get
    assert not caps.sync_io(LatencyStore(local, delay=0.001))  # says it has none
    pytest.importorskip("fsspec")
    assert not caps.sync_io(FsspecStore.from_url("memory://x"))


def test_fsspec_and_obstore_below_wrappers(tmp_path):
    pytest.importorskip("fsspec")
    fs = FsspecStore.from_url("memory://x")
    assert caps.fsspec_store(LoggingStore(fs)) is fs
    assert caps.fsspec_store(Held(fs), caps.DATA) is None
    assert caps.conditional(fs) is None  # an fsspec file system other than S3
    obstore = pytest.importorskip("obstore")
    from zarr.storage import ObjectStore

    inner = obstore.store.LocalStore(str(tmp_path))
    wrapped = LoggingStore(ObjectStore(inner))
    assert caps.obstore_of(wrapped) is inner
    assert caps.obstore_local_root(inner) == Path(str(tmp_path))
    assert caps.conditional(wrapped).kind == "local file system"
    memory = obstore.store.MemoryStore()
    assert caps.obstore_local_root(memory) is None
    assert caps.conditional(ObjectStore(memory)).kind == "obstore"


def test_icechunk_sessions_recognised(tmp_path):
    icechunk = pytest.importorskip("icechunk")
    repo = icechunk.Repository.create(icechunk.local_filesystem_storage(str(tmp_path / "r")))
    session = repo.writable_session("main")
    assert caps.icechunk_session(session) is session
    assert isinstance(caps.icechunk_session(session.store), icechunk.Session)
    assert isinstance(caps.session_store(session), icechunk.IcechunkStore)
    assert caps.icechunk_session(MemoryStore()) is None
    assert not caps.immutable(session.store)  # its own writes change it
    zarr.create_array(session.store, name="a", shape=(2,), dtype="i4")
    session.commit("a")
    snapshot = repo.readonly_session(branch="main").store
    assert caps.immutable(snapshot) and caps.immutable(LoggingStore(snapshot))
    with pytest.raises(Exception, match="fork session"):
        caps.icechunk_session(repo.writable_session("main").fork())


def test_guarded_append_through_a_logging_store(tmp_path):
    """A write that guards against other jobs goes through zarr-python's LoggingStore
    as through the store it wraps (it was refused: no conditional put known)."""
    import dask.array as da

    import shardwise.array

    store = LoggingStore(LocalStore(str(tmp_path / "d.zarr")))
    x = np.arange(12, dtype="i4")
    shardwise.array.to_zarr(da.from_array(x, chunks=4), store, "a", chunks=2, shards=4)
    more = da.from_array(np.arange(12, 20, dtype="i4"), chunks=4)
    shardwise.array.to_zarr(more, store, "a", append_dim=0, independent_writers=True)
    got = zarr.open_array(str(tmp_path / "d.zarr"), path="a", mode="r")[:]
    np.testing.assert_array_equal(got, np.arange(20, dtype="i4"))
