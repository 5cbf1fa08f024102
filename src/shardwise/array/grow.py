"""Growing an array for an append: plainly (:func:`grow`) or, when other jobs may
append to it at the same time, with a compare-and-swap of its metadata document: the
version is read before the array is (:func:`metadata_version`), and the grown document
put only if it is still that version (:func:`grow_if`); else the append reads the
array again and lands after the other job's rows."""

from __future__ import annotations

import contextlib
from typing import Any

from zarr.buffer import default_buffer_prototype

import shardwise._compat as _compat
from shardwise.array.claims import with_claim
from shardwise.errors import naming_metadata_errors
from shardwise.format.rectilinear import grid_of
from shardwise.io.conditional import Conditional, Version, distinct
from shardwise.io.opener import conditional_path
from shardwise.io.stores import write_grid

__all__ = ["append_guard", "grow", "grow_if", "metadata_version"]


def append_guard(
    store: Any,
    path: str,
    storage_options: Any,
    mode: str,
    append_dim: int | None,
    session: Any,
    guarded: bool,
) -> tuple[Conditional, str] | None:
    """For an append that other jobs may make at the same time: the store's
    conditional reads and puts, and the prefix of the array's keys in that store (its
    metadata document is ``<prefix>zarr.json``, or ``.zarray``); None for any other
    write (and in an Icechunk session, whose commit checks for conflicts)."""
    if not guarded or append_dim is None or mode != "a" or session is not None:
        return None
    found = conditional_path(store, storage_options)
    if found is None:
        return None  # refused by check_guardable once the array is read, if it exists
    base, guard = found
    where = f"{base.path}/{path}".strip("/")
    return guard, f"{where}/" if where else ""


def metadata_version(guard: tuple[Conditional, str]) -> tuple[str, Version]:
    """The key of the array's metadata document (``zarr.json``, or ``.zarray`` for Zarr
    v2) and the version it is now."""
    conditional_store, prefix = guard
    key = f"{prefix}zarr.json"
    with _naming(key, "Nothing was appended; run the append again."):
        data, version = conditional_store.get(key)
        if data is None:
            v2 = f"{prefix}.zarray"
            data, v2_version = conditional_store.get(v2)
            if data is not None:
                return v2, v2_version
    return key, version


def grow_if(
    arr: Any,
    new_shape: tuple[int, ...],
    edges: list[Any] | None,
    guard: tuple[Conditional, str],
    version: tuple[str, Version],
    claim: tuple[str, int, int, int] | None = None,
) -> Any:
    """:func:`grow`, the metadata document (``zarr.json``, Zarr v2's ``.zarray``) put
    only if it is still the version read: the grown array, or None when another job
    changed it first (nothing written). ``claim``: ``(token, axis, start, stop)``, the
    rows the append claims, recorded in the attributes of a ``zarr.json`` (see
    :mod:`~shardwise.array.claims`)."""
    changes: dict[str, Any] = {"shape": tuple(new_shape)}
    if edges is not None:
        changes["chunk_grid"] = grid_of(edges)
    key, expected = version
    leaf = key.rsplit("/", 1)[-1]
    if claim is not None and leaf == "zarr.json":
        changes["attributes"] = with_claim(arr.metadata.attributes, *claim)
    metadata = _compat.replace_metadata(arr.metadata, **changes)
    document = distinct(metadata.to_buffer_dict(default_buffer_prototype())[leaf].to_bytes())
    advice = (
        f"Whether the array grew to {tuple(new_shape)} is unknown (its metadata was being "
        "put): check its shape; if it grew, write the appended rows with region=, else run "
        "the append again."
    )
    with _naming(key, advice):
        if not guard[0].put(key, document, expected):
            return None
    return _compat.array_with_metadata(arr, metadata)


def _naming(key: str, advice: str) -> contextlib.AbstractContextManager[None]:
    return naming_metadata_errors("growing an array for an append", key, advice)


def grow(arr: Any, new_shape: tuple[int, ...], edges: list[Any] | None) -> Any:
    """The array resized for an append, with its new rectilinear grid if it has one."""

    if edges is None:
        arr.resize(new_shape)
        return arr
    return write_grid(arr, edges, new_shape)
