"""shardwise.io.conditional: each store kind's versioned get and conditional put, on the
real stores (a local directory, zarr-python's MemoryStore, obstore's in-memory and
local stores, s3fs and obstore against moto's S3 server with serialized writes)."""

from __future__ import annotations

import os
import threading

import pytest
import zarr
from zarr.storage import FsspecStore, LocalStore, MemoryStore, ZipStore

from bounded import run_threads
from shardwise.io.capabilities import conditional
from shardwise.io.conditional import ABSENT, Version


def check_protocol(guard, key: str = "a/c/0") -> None:
    """The contract every kind keeps: create-if-absent, update-if-unchanged, plain put,
    delete; a conflict is a False, never an exception, and stores nothing."""
    assert guard.get(key) == (None, ABSENT)
    assert guard.put(key, b"one", ABSENT)
    assert not guard.put(key, b"two", ABSENT)  # exists now
    data, v1 = guard.get(key)
    assert bytes(data) == b"one" and not v1.absent
    assert guard.put(key, b"three", v1)
    assert not guard.put(key, b"four", v1)  # changed since v1 was read
    data, v3 = guard.get(key)
    assert bytes(data) == b"three"
    assert guard.put(key, b"five", None)  # unconditional
    assert not guard.put(key, b"six", v3)
    data, _ = guard.get(key)
    assert bytes(data) == b"five"
    guard.delete(key)
    assert guard.get(key) == (None, ABSENT)
    guard.delete(key)  # nothing there: no error
    assert not guard.put(key, b"seven", v3)  # deleted since read: not "unchanged"


def test_local(tmp_path):
    store = LocalStore(str(tmp_path))
    guard = conditional(store)
    assert guard is not None and guard.kind == "local file system"
    check_protocol(guard)
    assert not [p for p in tmp_path.rglob("*") if p.name.endswith(".partial")]


def test_local_version_survives_inode_reuse(tmp_path):
    """A replaced file never looks unchanged, even when a newer file of the same size
    lands in the same clock tick on the inode the old one had: the version read keeps
    the old file open, so its inode cannot be reused."""
    guard = conditional(LocalStore(str(tmp_path)))
    guard.put("k", b"x" * 100, None)
    _, v1 = guard.get("k")
    inode = v1.tag[1]
    for i in range(50):  # replace it many times with files of the same size
        guard.put("k", bytes([i]) * 100, None)
        assert os.stat(tmp_path / "k").st_ino != inode
    assert not guard.put("k", b"y" * 100, v1)


def test_local_lock_orders_threads(tmp_path):
    """Many threads each read, then put only if unchanged: of those that read the same
    version, exactly one wins."""
    guard = conditional(LocalStore(str(tmp_path)))
    guard.put("k", b"0", None)
    _, v = guard.get("k")
    barrier = threading.Barrier(8, timeout=60)
    wins = []

    def put(i: int) -> None:
        barrier.wait()
        if guard.put("k", str(i).encode(), v):
            wins.append(i)

    run_threads([lambda i=i: put(i) for i in range(8)], timeout=60)
    assert len(wins) == 1
    assert guard.get("k")[0] == str(wins[0]).encode()


def test_memory():
    guard = conditional(MemoryStore())
    assert guard is not None and guard.kind == "memory"
    check_protocol(guard)


def test_obstore_memory_and_local(tmp_path):
    obstore = pytest.importorskip("obstore")
    from zarr.storage import ObjectStore

    memory = conditional(ObjectStore(obstore.store.MemoryStore()))
    assert memory is not None and memory.kind == "obstore"
    check_protocol(memory)
    local = conditional(ObjectStore(obstore.store.LocalStore(str(tmp_path))))
    assert local is not None and local.kind == "local file system"
    check_protocol(local)


def test_s3fs_and_obstore_on_s3(s3_serialized, serialized_bucket):
    so = s3_serialized.storage_options()
    store = FsspecStore.from_url(f"s3://{serialized_bucket}/root", storage_options=so)
    guard = conditional(store)
    assert guard is not None and guard.kind == "S3 (s3fs)"
    check_protocol(guard)
    pytest.importorskip("obstore")
    guard = conditional(s3_serialized.obstore(serialized_bucket, "other"))
    assert guard is not None and guard.kind == "obstore"
    check_protocol(guard)


def test_stores_without_conditional_puts(tmp_path):
    assert conditional(ZipStore(tmp_path / "a.zip", mode="w")) is None
    pytest.importorskip("fsspec")
    assert conditional(FsspecStore.from_url("memory://x")) is None
    # a wrapper that changes what its puts do (here: keeps them back) is not gone past
    from zarr.storage import WrapperStore

    class Held(WrapperStore):
        async def set(self, key, value):
            pass

    assert conditional(Held(MemoryStore())) is None


def test_versions_compare_by_what_was_read():
    assert Version(("file", 1, 2, 3, 4), pin=object()) == Version(("file", 1, 2, 3, 4))
    assert ABSENT.absent and not Version(("etag", '"x"')).absent
    assert zarr  # (imported for the stores above)


def test_a_store_class_may_give_its_own(tmp_path):
    """``SupportsConditional``: shardwise.testing's wrappers pass on the wrapped
    store's conditional puts, counting (or delaying) them as their other requests."""
    from shardwise.testing import CountingStore, LatencyStore

    counting = CountingStore(LocalStore(str(tmp_path)))
    guard = conditional(counting)
    assert guard is not None and guard.kind == "local file system"
    check_protocol(guard)
    ops = [r.op for r in counting.log.requests]
    assert ops.count("set") == 7 and ops.count("delete") == 2 and "get" in ops
    assert conditional(CountingStore(ZipStore(tmp_path / "z.zip", mode="w"))) is None
    check_protocol(conditional(LatencyStore(MemoryStore(), delay=0.001)))
