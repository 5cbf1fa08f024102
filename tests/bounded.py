"""Threads a test starts, bounded: each runs as a daemon (a stuck one never keeps the
interpreter, and so CI, from exiting), the test waits a bounded time for all of them, a
thread still running then fails the test, and an exception in any of them is raised in
the test. ``tests/conftest.py`` fails any test that leaves a non-daemon thread running."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

TIMEOUT = 120.0  # seconds for all the threads of one call together


def run_threads(calls: Sequence[Callable[[], Any]], timeout: float = TIMEOUT) -> list[Any]:
    """Run each call in a daemon thread of its own, all started together; their results,
    in order. The first exception raised in a thread is raised here; a thread still
    running after ``timeout`` seconds fails the test (``AssertionError``)."""
    results: list[Any] = [None] * len(calls)
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            results[i] = calls[i]()
        except BaseException as e:  # reported in the test's thread
            errors.append(e)

    threads = [
        threading.Thread(target=run, args=(i,), name=f"test-thread-{i}", daemon=True)
        for i in range(len(calls))
    ]
    for t in threads:
        t.start()
    join_all(threads, timeout)
    if errors:
        raise errors[0]
    return results


def join_all(threads: Sequence[threading.Thread], timeout: float = TIMEOUT) -> None:
    """Wait at most ``timeout`` seconds in all for ``threads``; fail naming those left."""
    deadline = time.monotonic() + timeout
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    stuck = [t.name for t in threads if t.is_alive()]
    assert not stuck, f"threads still running after {timeout:.0f} s: {stuck}"
