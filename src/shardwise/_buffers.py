"""Per-thread scratch buffers, reused from call to call, for decoding and assembling
shards (below the format and codec layers, which both use them)."""

from __future__ import annotations

import threading

import numpy as np
import numpy.typing as npt

__all__ = ["SCRATCH_LIMIT", "scratch"]

_SCRATCH = threading.local()
SCRATCH_LIMIT = 256 * 2**20  # larger buffers are allocated for the one use


def scratch(nbytes: int, slot: str = "decode") -> npt.NDArray[np.uint8]:
    """A per-thread buffer of at least ``nbytes``, reused from call to call (one per
    ``slot``, so decoding and encoding never share one). Reusing it spares a fresh
    allocation, and in dask workers (where glibc maps every large buffer anew) the page
    faults of touching it."""
    buf: npt.NDArray[np.uint8] | None = getattr(_SCRATCH, slot, None)
    if buf is None or buf.size < nbytes:
        buf = np.empty(nbytes, dtype=np.uint8)
        setattr(_SCRATCH, slot, buf)
    return buf[:nbytes]
