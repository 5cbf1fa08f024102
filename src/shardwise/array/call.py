"""How a dask-array write is asked for, in dask's words and shardwise's: the store and
array path (``component``, a ``zarr.Array`` target), the mode (``overwrite``), and
``shape=`` / ``dtype=`` among zarr-python's arguments; whether an object is a dask array."""

from __future__ import annotations

from typing import Any

import numpy as np

from shardwise.array.decisions import (
    castable,
    default_mode,
)
from shardwise.errors import WriteError

__all__ = ["dask_call", "checked_mode", "given_shape_and_dtype", "is_array"]

_MODES = ("w-", "w", "a", "r+")


def given_shape_and_dtype(x: Any, extra: dict[str, Any], name: str) -> Any:
    """``shape=`` and ``dtype=`` among zarr-python's arguments (dask lets them override
    the array's): the shape must be the data's; the data is cast to the dtype (within
    its kind, as into an existing array). Both are taken out of ``extra``."""
    shape = extra.pop("shape", None)
    if shape is not None and tuple(np.atleast_1d(shape).tolist()) != tuple(x.shape):
        raise WriteError(
            "shape= is not the data's shape",
            expected=f"shape {x.shape} (or shape= left out)",
            found=f"shape={shape!r}",
            array=name,
            advice="Slice or pad the data to the shape wanted. Nothing was written.",
        )
    dtype = extra.pop("dtype", None)
    if dtype is None:
        return x
    dtype = np.dtype(dtype)
    if not castable(x.dtype, dtype):
        raise WriteError(
            "dtype= cannot hold the data",
            expected=f"a data type {x.dtype} casts to within its kind",
            found=f"dtype={dtype}",
            array=name,
            advice=f"Cast it first: x.astype({str(dtype)!r}). Nothing was written.",
        )
    return x.astype(dtype, copy=False)


def dask_call(
    store: Any,
    path: str | None,
    component: str | None,
    mode: str | None,
    overwrite: bool | None,
    storage_options: dict[str, Any] | None,
    zarr_kwargs: dict[str, Any],
) -> tuple[Any, str, str | None, dict[str, Any]]:
    """``dask.array.to_zarr``'s way of saying where and how, as shardwise's: the store
    and array path (``component``, or ``name`` among zarr-python's arguments, are
    other names of ``path``; a ``zarr.Array`` as the store means that array, written
    into), the mode (``overwrite=True`` is ``mode="w"``, ``overwrite=False``
    ``mode="w-"``) and the rest of zarr-python's creation arguments."""
    import zarr

    kwargs = dict(zarr_kwargs)
    given = {
        k: v
        for k, v in (("path", path), ("component", component), ("name", kwargs.pop("name", None)))
        if v is not None
    }
    if len({str(v).strip("/") for v in given.values()}) > 1:
        raise WriteError(
            "the array's path was given twice, differently",
            expected="one of path=, component= (dask's name) or name=",
            found=", ".join(f"{k}={v!r}" for k, v in given.items()),
            array=str(next(iter(given.values()))).strip("/") or "/",
            advice="Give the path once. Nothing was written.",
        )
    where = str(next(iter(given.values()), "") or "")
    if isinstance(store, zarr.Array):  # dask's to_zarr(x, z): into that array
        if where.strip("/") or storage_options is not None:
            raise WriteError(
                "a zarr.Array target was given with a path or storage options",
                expected="the zarr.Array alone (it knows its store and path)",
                found=f"path={where!r}, storage_options={storage_options!r}",
                array=store.path or "/",
                advice="Leave path=/component= and storage_options= out. Nothing was written.",
            )
        store, where = store.store_path.store, store.path
        if mode is None and overwrite is None:
            mode = "r+"
    if overwrite is not None:
        if not isinstance(overwrite, bool):
            raise WriteError(
                "overwrite must be True or False",
                expected="a bool (dask's and zarr-python's meaning)",
                found=repr(overwrite),
                array=where.strip("/") or "/",
            )
        wanted = "w" if overwrite else "w-"
        if mode not in (None, wanted):
            raise WriteError(
                "overwrite= and mode= disagree",
                expected=f"overwrite={overwrite} alone (it means mode={wanted!r}), or mode= alone",
                found=f"overwrite={overwrite}, mode={mode!r}",
                array=where.strip("/") or "/",
                advice="Give one of them. Nothing was written.",
            )
        mode = wanted
    return store, where, mode, kwargs


def checked_mode(mode: str | None, region: Any, append_dim: Any, name: str) -> str:
    mode = default_mode(mode, region, append_dim)
    if mode == "r":  # in dask's words, which its users' code may look for
        raise WriteError(
            "Cannot use mode 'r' (read-only) when writing to zarr",
            expected=f"one of {_MODES}",
            found="mode='r'",
            array=name,
            advice="Use mode='w-' (the default) to create the array, 'w' to replace it.",
        )
    if mode not in _MODES:
        raise WriteError("unknown mode", expected=f"one of {_MODES}", found=repr(mode), array=name)
    if region is not None and append_dim is not None:
        raise WriteError(
            "region and append_dim were both given",
            expected="one of them",
            found=f"region={region!r}, append_dim={append_dim!r}",
            array=name,
        )
    if region is not None and mode not in ("a", "r+"):
        raise WriteError(
            "a region write goes into an existing array",
            expected="mode='r+' or 'a'",
            found=f"mode={mode!r}",
            array=name,
        )
    if append_dim is not None and mode != "a":
        raise WriteError(
            "an append goes into an existing array",
            expected="mode='a'",
            found=f"mode={mode!r}",
            array=name,
        )
    return mode


def is_array(obj: Any) -> bool:
    """Whether ``obj`` is a dask array (and not an xarray object)."""
    import dask.array as da

    return isinstance(obj, da.Array)
