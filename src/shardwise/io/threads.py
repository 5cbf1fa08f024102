"""The threads a read decodes on: how many a read takes (:func:`read_threads` for local
files, :func:`decode_threads` for shards streamed from a network), and the process's
pool of them (made on first use and kept, so that its threads keep their scratch
buffers from read to read; forgotten in a child made by ``fork``)."""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import os
import threading

__all__ = ["decode_threads", "read_pool", "read_threads"]

_POOL: concurrent.futures.ThreadPoolExecutor | None = None
_POOL_SIZE = 0
_POOL_LOCK = threading.Lock()


def read_threads(option: int | None) -> int:
    """How many threads a read takes (``ReadOptions.threads``): ``option`` when given;
    else every core this process may use when called from the main thread of a process
    that is not a child (a script, a notebook: no dask task runs there but under dask's
    synchronous scheduler, which runs one at a time), one elsewhere (dask's and
    distributed's worker threads, dask's process pool: their parallelism is dask's)."""
    if option is None and threading.current_thread() is not threading.main_thread():
        return 1
    return decode_threads(option)


def decode_threads(option: int | None) -> int:
    """How many threads decode the shards of a read that streams them from a network
    (``ReadOptions.threads``): ``option`` when given; else every core this process may
    use, but in a child process (a worker of a cluster, dask's process pool: one per
    core or so, each with its own share). Unlike :func:`read_threads`, dask's threads
    get the read pool too: a task's shards come all at once, and a read of one task
    (a window inside one dask chunk) should decode on every core; the task's thread
    waits, and the pool is the process's, so the reads of several tasks share its
    threads rather than add their own."""
    if option is not None:
        return option
    if multiprocessing.parent_process() is not None:
        return 1
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not on Linux
        return os.cpu_count() or 1


def read_pool(threads: int) -> concurrent.futures.ThreadPoolExecutor:
    """The process's pool of read threads, at least ``threads`` strong, made on first use
    and kept (its threads keep their scratch buffers from read to read)."""
    global _POOL, _POOL_SIZE
    with _POOL_LOCK:
        if _POOL is None or threads > _POOL_SIZE:
            old, _POOL = (
                _POOL,
                concurrent.futures.ThreadPoolExecutor(threads, thread_name_prefix="shardwise-read"),
            )
            _POOL_SIZE = threads
            if old is not None:
                old.shutdown(wait=False)
        return _POOL


def _forget_pool() -> None:
    """In a child made by ``fork``: the parent's threads are not there."""
    global _POOL, _POOL_SIZE, _POOL_LOCK
    _POOL, _POOL_SIZE, _POOL_LOCK = None, 0, threading.Lock()


os.register_at_fork(after_in_child=_forget_pool)
