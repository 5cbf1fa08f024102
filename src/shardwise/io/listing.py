"""Listing a store's keys: the one place shardwise asks a zarr-python ``Store`` what it
holds. Apart from :mod:`shardwise.io.stores` (requests for bytes) because every layer
above lists (the hierarchy walk, ``verify``, ``reshard``, ``migrate``, ``inventory``) and
should do it one way.

Two kinds of listing, as zarr-python's ``Store`` has them: every key below a prefix
(:func:`iter_keys`, ``Store.list_prefix``: one request, or one paged listing, however deep
the keys lie) and the names directly in a folder (:func:`list_names`, ``Store.list_dir``).
The coroutines run on the caller's event loop; :func:`list_keys_sync` runs one listing on
zarr-python's I/O loop for synchronous code.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from typing import Any

import shardwise._compat as _compat
from shardwise.io.capabilities import fsspec_store, local_root, obstore_of

__all__ = [
    "folder",
    "iter_keys",
    "list_keys",
    "list_keys_sync",
    "list_names",
    "list_sized",
    "metadata_keys",
]


def folder(path: str) -> str:
    """The key prefix of what lies below the node at ``path``: ``"a/b/"``, or ``""`` for
    the root (so that listing ``a/b`` does not also list ``a/bc``)."""
    path = path.strip("/")
    return f"{path}/" if path else ""


async def iter_keys(store: Any, prefix: str) -> AsyncIterator[str]:
    """Every key of ``store`` that starts with ``prefix`` (a plain string prefix: give
    :func:`folder` of a path to list that node's keys), in the store's order."""
    async for key in store.list_prefix(prefix):
        yield key


async def list_keys(store: Any, prefix: str) -> list[str]:
    """:func:`iter_keys` as a list."""
    return [key async for key in iter_keys(store, prefix)]


def list_keys_sync(store: Any, prefix: str) -> list[str]:
    """:func:`list_keys` from synchronous code (on zarr-python's I/O loop)."""
    keys: list[str] = _compat.sync(list_keys(store, prefix))
    return keys


async def list_names(store: Any, path: str) -> list[str]:
    """The names directly in the folder at ``path`` (``""`` for the root), in the
    store's order: keys and sub-folders alike, each once."""
    return [name async for name in store.list_dir(path)]


async def metadata_keys(store: Any, path: str, depth: int | None = None) -> list[str]:
    """The keys of the ``zarr.json`` documents of the node at ``path`` and the nodes
    below it, in the store's order (one listing). ``depth``: how far below ``path`` to
    look (0: its own document; 1: and its children's; None: all)."""
    under = folder(path)
    return [
        key
        async for key in iter_keys(store, under)
        if (key == f"{under}zarr.json" or key.endswith("/zarr.json"))
        and (depth is None or key[len(under) :].count("/") <= depth)
    ]


_LISTING = ("list_prefix",)  # what a listing with sizes goes past


async def list_sized(store: Any, prefix: str) -> tuple[list[str], list[int] | None]:
    """The keys under ``prefix``, with their sizes where the store's listing has them
    (local files, fsspec filesystems, obstore); one listing either way."""
    root = local_root(store, _LISTING)
    if root is not None:
        return await asyncio.to_thread(_walk, str(root), prefix.rstrip("/"))
    fsspec = fsspec_store(store, _LISTING)
    inner = obstore_of(store, _LISTING)
    if fsspec is not None and _compat.has_fs_find(fsspec.fs):
        base = fsspec.path.rstrip("/")
        where = f"{base}/{prefix}" if base else prefix
        try:
            found = await _compat.fs_find(fsspec.fs, where)
        except FileNotFoundError:
            return [], []
        if all(isinstance(v, dict) and v.get("size") is not None for v in found.values()):
            keys = [k.removeprefix(f"{base}/") if base else k.removeprefix("/") for k in found]
            return keys, [int(v["size"]) for v in found.values()]
    elif inner is not None:
        import obstore

        keys, sizes = [], []
        async for batch in obstore.list(inner, prefix=prefix):
            for meta in batch:
                keys.append(meta["path"])
                sizes.append(int(meta["size"]))
        return keys, sizes
    return await list_keys(store, prefix), None


def _walk(root: str, prefix: str) -> tuple[list[str], list[int]]:
    """Files under ``root/prefix`` as store keys, with their sizes."""
    keys: list[str] = []
    sizes: list[int] = []
    strip = len(root.rstrip(os.sep)) + 1
    todo = [os.path.join(root, prefix) if prefix else root]
    while todo:
        try:
            entries = os.scandir(todo.pop())
        except (FileNotFoundError, NotADirectoryError):
            continue
        with entries:
            for e in entries:
                if e.is_dir():
                    todo.append(e.path)
                elif e.is_file():
                    keys.append(e.path[strip:].replace(os.sep, "/"))
                    sizes.append(e.stat().st_size)
    return keys, sizes
