"""A process that used obstore exits without an abort (shardwise.io.exit): a thread that
Python did not start, still inside Python when the interpreter finalizes, is let out
first. Each case runs in a process of its own, bounded, since it is about exiting."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

# A thread of a native library (here made with pthread_create through ctypes, as
# obstore's tokio threads are made in Rust) that is inside Python, its GIL released in
# a call (time.sleep here; obstore's threads in the socket send of
# loop.call_soon_threadsafe), when the main thread returns: it asks for the GIL back
# after finalization has begun, and CPython ends it there (pthread_exit; through Rust
# frames, an abort). Its marker file says whether it came back.
FOREIGN_THREAD = textwrap.dedent(
    """
    import atexit, ctypes, sys, time
    from shardwise.io import exit

    @ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)
    def body(arg):
        time.sleep(float(sys.argv[3]))
        with open(sys.argv[1], "w") as f:
            f.write("came back")
        return None

    handle = ctypes.c_ulong()
    assert ctypes.CDLL(None).pthread_create(ctypes.byref(handle), None, body, None) == 0
    deadline = time.monotonic() + 10
    while not exit.foreign_threads_in_python():
        assert time.monotonic() < deadline, "the thread never entered Python"
        time.sleep(0.001)
    if sys.argv[2] == "settle":
        atexit.register(exit.settle)
    elif sys.argv[2] == "short":
        print(exit.settle(timeout=0.05), exit.foreign_threads_in_python() != [])
    """
)


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", *args], capture_output=True, text=True, timeout=60, check=False
    )


@pytest.mark.parametrize("hook, comes_back", [("none", False), ("settle", True)])
def test_a_foreign_thread_in_python_at_exit_is_let_out_first(tmp_path, hook, comes_back):
    marker = tmp_path / "marker"
    done = run(FOREIGN_THREAD, str(marker), hook, "0.3")
    assert done.returncode == 0, done.stderr
    assert marker.exists() is comes_back


def test_settle_is_bounded(tmp_path):
    done = run(FOREIGN_THREAD, str(tmp_path / "marker"), "short", "0.5")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True"]  # gave up after 50 ms, thread still in


WATCHED = textwrap.dedent(
    """
    import sys
    import dask.array as da
    import zarr.storage
    import shardwise
    from shardwise.io import exit

    if sys.argv[1] == "obstore":
        from obstore.store import MemoryStore
        store = zarr.storage.ObjectStore(MemoryStore())
    else:
        store = zarr.storage.MemoryStore()
    shardwise.to_zarr(da.zeros(10, chunks=5), store, path="v", shards=(5,), chunks=(5,))
    print(exit._WATCHING)
    """
)


@pytest.mark.parametrize("kind, watched", [("obstore", "True"), ("memory", "False")])
def test_the_hook_is_registered_by_a_write_through_obstore(kind, watched):
    pytest.importorskip("obstore")
    done = run(WATCHED, kind)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[-1] == watched
