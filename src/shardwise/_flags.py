"""zarr-python's configuration flag for rectilinear chunk grids, switched on around the
calls that read or write one (and nowhere else: the user's own zarr-python calls see
the flag as they set it)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["consolidate_metadata", "rectilinear_grids"]


class _FlagSwitch:
    """Turns zarr-python's ``array.rectilinear_chunks`` flag on while any :func:`rectilinear_grids`
    block of this process is open, and back to what it was when the last one ends.

    One per process (:data:`_SWITCH`, made at import), for the process's life;
    thread-safe: the count of open blocks and the saved setting are changed under its
    lock, so overlapping blocks in several threads do not switch the flag off under
    each other. What the switch cannot do is confine the flag to the threads that asked:
    zarr's configuration is one per process, so every thread sees it on while a block
    is open (see :func:`rectilinear_grids` for why shardwise switches it all the same)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._users = 0
        self._restore: Any = None

    def acquire(self) -> None:
        import zarr

        with self._lock:
            if self._users == 0:
                # (zarr < 3.2 has no such flag, and no rectilinear grids to switch on)
                if zarr.config.get("array.rectilinear_chunks", True):
                    self._restore = None
                else:
                    self._restore = zarr.config.set({"array.rectilinear_chunks": True})
                    self._restore.__enter__()
            self._users += 1

    def release(self) -> None:
        with self._lock:
            self._users -= 1
            if self._users == 0 and self._restore is not None:
                self._restore.__exit__(None, None, None)
                self._restore = None


_SWITCH = _FlagSwitch()


@contextmanager
def rectilinear_grids() -> Iterator[None]:
    """zarr-python's ``array.rectilinear_chunks`` flag on for the duration of the block.

    Counted across threads: the flag goes back to what it was when the last block that
    turned it on ends, so overlapping calls in several threads do not switch it off
    under each other.

    Why a process-wide switch around calls, and not a way around the flag (checked
    against zarr 3.4.2): zarr-python reads the flag in two places, both in
    ``zarr.core.metadata.v3``. ``ArrayV3Metadata.from_dict`` refuses a document that
    declares a rectilinear grid before reading it, and ``check_storable``, called by
    ``ArrayV3Metadata.to_buffer_dict`` and (for the members of consolidated metadata)
    ``GroupMetadata.to_buffer_dict``, refuses to serialize one. Both read
    ``zarr.config``, a donfig ``Config``: one dictionary per process, with no
    per-thread or per-call setting, and neither function takes one. shardwise's own
    parsing could go around ``from_dict`` (read the document with a regular stand-in
    grid, then put the rectilinear one back) only by re-doing zarr-python's repairs of
    old documents (``zarr.core.metadata.repair``) and losing the marks it leaves on
    repaired metadata; and most blocks wrap zarr-python's own opening and creating
    (``zarr.open_group``, ``zarr.open_array``, ``zarr.create_array``, xarray's metadata
    step through them), which reach both checks with no way in. Turning the flag on
    once for the process instead would change what the user's own zarr-python calls
    accept from the first shardwise call on (the flag is left as it was: the tests
    check it). Until zarr-python takes the setting per call (a keyword of ``from_dict``
    and ``to_buffer_dict``, or a context variable), the flag is switched here, for the
    calls that need it only."""
    _SWITCH.acquire()
    try:
        yield
    finally:
        _SWITCH.release()


def consolidate_metadata(store: Any, path: str | None = None) -> None:
    """``zarr.consolidate_metadata(store, path)`` with zarr-python's rectilinear flag on:
    consolidation reads every member's document (``from_dict``) and writes them again
    (``to_buffer_dict``), both of which refuse a rectilinear grid with the flag off.
    Every consolidation shardwise makes goes through here. zarr-python's warning that
    consolidated metadata is not in the Zarr v3 specification (zarr 3.1) is not
    repeated: xarray's ``to_zarr`` writes it too."""
    import warnings

    import zarr

    with warnings.catch_warnings(), rectilinear_grids():
        warnings.filterwarnings("ignore", message="Consolidated metadata", category=UserWarning)
        zarr.consolidate_metadata(store, path)
