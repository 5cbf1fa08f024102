"""A process that used obstore exits without an abort.

obstore answers zarr-python's requests on its own (tokio) threads, which hand each
result to zarr-python's event loop with ``loop.call_soon_threadsafe``: the thread takes
the GIL, queues the callback and writes the loop's wake-up byte, releasing the GIL
around that ``send``. The loop can run the callback, and the caller return and the
interpreter start to finalize, before the thread has the GIL back; a thread that asks
for the GIL once finalization has begun is ended by CPython with ``pthread_exit``,
whose forced unwind through Rust frames aborts the whole process ("Fatal Python error:
Aborted", or a segmentation fault), after its work is done and written. Seen in about
1 of 60 loaded jobs with zarr-python and obstore alone, on every obstore store
(memory, local, S3, Azure); the upstream report and its reproducer are in
``docs/reliability.md``.

The workaround: an ``atexit`` hook, registered once per process by the first store
shardwise opens or asks about with obstore below it (:func:`watch`), that waits
(bounded by :data:`SETTLE_SECONDS`) until no thread Python did not start is running
Python code; ``atexit`` hooks run before finalization, while such a thread can still
take the GIL and leave. A process with no such thread waits not at all.
"""

from __future__ import annotations

import atexit
import sys
import threading
import time
from typing import Any

__all__ = ["SETTLE_SECONDS", "foreign_threads_in_python", "settle", "watch"]

SETTLE_SECONDS = 5.0
"""How long the exit hook waits, at the most, for other threads to leave Python."""

_LOCK = threading.Lock()
_WATCHING = False


def watch(store: Any) -> None:
    """Register :func:`settle` to run at exit, once per process, when ``store`` (the
    zarr-python ``Store`` below every wrapper) is an obstore one."""
    global _WATCHING
    if _WATCHING or "obstore" not in sys.modules:
        return
    from zarr.storage import ObjectStore

    if isinstance(store, ObjectStore):
        with _LOCK:
            if not _WATCHING:
                atexit.register(settle)
                _WATCHING = True


def foreign_threads_in_python() -> list[int]:
    """The threads running Python code that Python's ``threading`` did not start (a
    native library's, as obstore's), other than the calling one."""
    dummy = getattr(threading, "_DummyThread", ())  # (a foreign thread threading has seen)
    started = {t.ident for t in threading.enumerate() if not isinstance(t, dummy)}
    me = threading.get_ident()
    return [tid for tid in sys._current_frames() if tid != me and tid not in started]


def settle(timeout: float = SETTLE_SECONDS) -> bool:
    """Wait, up to ``timeout`` seconds, until :func:`foreign_threads_in_python` is
    empty, sleeping (the GIL released) a millisecond at a time; whether it is."""
    deadline = time.monotonic() + timeout
    while foreign_threads_in_python():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.001)
    return True
