"""Icechunk sessions as write targets.

An ``icechunk.Session`` (from ``repo.writable_session("main")``) is a transaction on a
repository: its store takes zarr-python's reads and writes, and nothing reaches the
branch until ``session.commit``. For a dask write, Icechunk's pattern is a *fork*:
``session.fork()`` gives a picklable ``ForkSession``; every task writes through its copy
of the fork's store and hands the copy back; the copies are merged and the result is
merged into the session. shardwise's writer does exactly that (the ``sessions`` mode of
:func:`shardwise.graph.write.store_dask_array`), keeping its one-task-per-shard graph, so a
shard is never written by two tasks whose forks would then race ("last one wins" per
chunk object on merge).

This module checks what a write into a session needs and merges the forks back;
:mod:`shardwise.io.capabilities` recognises sessions. icechunk is imported by the
caller's objects, never here.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any

from shardwise.errors import WriteError
from shardwise.format.metadata import FIXED_KINDS

__all__ = [
    "out_of_bounds",
    "check_dataset",
    "check_session",
    "distinct",
    "merge_into",
    "refuse_commit",
]


def check_dataset(
    ds: Any, session: Any, *, compute: bool, commit: str | None, zarr_format: int | None
) -> None:
    """Refuse, before anything is written, what a write of ``ds`` into ``session``
    cannot do."""
    check_session(session, compute=compute, commit=commit, zarr_format=zarr_format)
    for name, var in ds.variables.items():
        if var.chunks is not None and var.dtype.kind not in FIXED_KINDS:
            raise WriteError(
                "a dask variable of variable-length values cannot go through an Icechunk fork",
                expected="dask variables of fixed-size types (numbers, booleans, times)",
                found=f"{var.dtype} dask data",
                array=str(name),
                advice=f"Load it first (ds[{str(name)!r}] = ds[{str(name)!r}].load()): it is "
                "then written with the metadata. Nothing was written.",
            )


def check_session(
    session: Any, *, compute: bool, commit: str | None, zarr_format: int | None
) -> None:
    """Refuse, before anything is written, what a write into ``session`` cannot do."""
    if session.read_only:
        raise WriteError(
            "the Icechunk session is read-only",
            expected="a writable session (repo.writable_session(branch))",
            found="a read-only session",
            advice="Open one with repo.writable_session('main'). Nothing was written.",
        )
    if zarr_format not in (None, 3):
        raise WriteError(
            "Icechunk stores hold Zarr v3 only",
            expected="zarr_format=3 (or left out)",
            found=f"zarr_format={zarr_format!r}",
            advice="Leave zarr_format out. Nothing was written.",
        )
    if commit is not None and not compute:
        raise WriteError(
            "commit= needs the data written first",
            expected="compute=True with commit=",
            found="compute=False",
            advice="With compute=False, merge the delayed's result and commit yourself: "
            "session.merge(delayed.compute()); session.commit('...'). Nothing was written.",
        )


def refuse_commit(store: Any, array: str | None = None) -> None:
    """``commit=`` given for a store that is not an Icechunk session."""
    raise WriteError(
        "commit= is for Icechunk sessions",
        expected="an icechunk.Session (or its store) as the store",
        found=type(store).__name__,
        array=array,
        advice="Leave commit out: other stores have no commits. Nothing was written.",
    )


def distinct(forks: Iterable[Any]) -> list[Any]:
    """The fork sessions, each object once (tasks of one process hand back the same
    one), without the Nones of writes that collected none."""
    seen: dict[int, Any] = {}
    for fork in forks:
        if fork is not None:
            seen.setdefault(id(fork), fork)
    return list(seen.values())


def merge_into(session: Any, forks: Iterable[Any]) -> None:
    """Merge the fork sessions a write computed to into ``session``."""
    if found := distinct(forks):
        session.merge(*found)


def out_of_bounds(e: Exception) -> bool:
    """Whether a ranged get failed because the range reaches past the object's end, as
    Icechunk's stores say it (``icechunk.InvalidInputError: byte range ... is out of
    bounds``) where other stores return the bytes there are. Icechunk is imported
    already when its store raised (so it is not imported here for other stores)."""
    icechunk = sys.modules.get("icechunk")
    invalid = getattr(icechunk, "InvalidInputError", None)
    return invalid is not None and isinstance(e, invalid) and "out of bounds" in str(e)
