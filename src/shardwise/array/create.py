"""A new array of a dask-array write: its shard and inner chunk sizes from ``shards=`` /
``chunks=`` (per axis number, ``"auto"`` or the dask chunks, regular or rectilinear), and
its creation by zarr-python."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

import shardwise.format.rectilinear as rl
from shardwise.array.decisions import (
    GridPlan,
    axis_of,
    chunk_target,
    dask_edges,
    dask_grid,
    no_axis,
    padded_edges,
)
from shardwise.errors import ArgumentError, WriteError
from shardwise.format.grid import auto_chunks, auto_shards
from shardwise.io.staged import StagedWrite, staged_write
from shardwise.io.stores import write_grid

__all__ = ["CREATION", "create", "plan_new"]

CREATION = (
    "shards",
    "chunks",
    "compressors",
    "filters",
    "serializer",
    "fill_value",
    "attributes",
    "dimension_names",
)
"""The creation options a dask-array write takes by name; any others in ``creation``
are more of zarr-python's ``create_array`` arguments."""


def _axis_sizes(spec: Any, x: Any, what: str, name: str, default: Sequence[int]) -> tuple[int, ...]:
    """Sizes per axis from a tuple (``-1``/None: the whole axis, or ``default``), a dict
    by axis number, or one int for every axis."""
    ndim = x.ndim
    if isinstance(spec, int | np.integer) and not isinstance(spec, bool):
        sizes: list[Any] = [int(spec)] * ndim
    elif isinstance(spec, Mapping):
        sizes = list(default)
        for value, n in spec.items():
            if (axis := axis_of(value, ndim)) is None:
                raise no_axis(WriteError, f"a key of {what}", value, ndim, name)
            sizes[axis] = n
    elif isinstance(spec, Sequence) and not isinstance(spec, str):
        if len(spec) != ndim:
            raise WriteError(
                f"{what} have the wrong number of axes",
                expected=f"{ndim} sizes, one per axis of shape {x.shape}",
                found=f"{what}={tuple(spec)!r}",
                array=name,
            )
        sizes = list(spec)
    else:
        raise WriteError(
            f"unknown {what}",
            expected='a tuple of sizes, a dict by axis number, an int or "auto"',
            found=repr(spec),
            array=name,
        )
    out = []
    for axis, (n, d) in enumerate(zip(sizes, default, strict=True)):
        if n is None or n == -1:
            n = max(1, x.shape[axis]) if what == "shards" else d
        if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 1:
            raise WriteError(
                f"{what} sizes must be positive integers",
                expected="an int >= 1 (or -1 for the whole axis) per axis",
                found=f"{n!r} along axis {axis}",
                array=name,
            )
        out.append(int(n))
    return tuple(out)


def plan_new(x: Any, name: str, shards: Any, chunks: Any, zarr_format: int) -> GridPlan:
    itemsize = x.dtype.itemsize
    whole = tuple(max(1, n) for n in x.shape)
    if zarr_format == 2:
        if shards not in (None, "dask"):
            raise WriteError(
                "Zarr v2 has no shards",
                expected="shards left out with zarr_format=2",
                found=f"shards={shards!r}",
                array=name,
                advice="Write Zarr v3 (the default) to shard.",
            )
        blocks = dask_grid(x.chunks)
        inner = (
            blocks if chunks in (None, "auto") else _axis_sizes(chunks, x, "chunks", name, whole)
        )
        return GridPlan(None, None, inner)
    if shards is None or shards == "dask":
        if 0 in x.shape or all(rl.is_regular(b) for b in x.chunks):
            grid = dask_grid(x.chunks)
            return GridPlan(grid, None, _inner(x, name, chunks, grid, itemsize))
        dims = [f"axis {i}" for i in range(x.ndim)]
        edges = dask_edges(name, dims, x.chunks)
        if chunks in (None, "auto"):
            inner = rl.auto_inner(name, dims, edges, x.shape, itemsize, chunk_target())
        else:
            inner = _axis_sizes(chunks, x, "chunks", name, whole)
        edges = padded_edges(edges, inner)
        rl.check_inner(name, dims, edges, inner, x.shape)
        rl.check_supported(name, edges)
        return GridPlan(None, edges, inner)
    if shards == "auto":
        grid = auto_shards(x.shape, itemsize, x.chunks)
    else:
        grid = _axis_sizes(shards, x, "shards", name, whole)
    return GridPlan(grid, None, _inner(x, name, chunks, grid, itemsize))


def _inner(x: Any, name: str, chunks: Any, grid: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    if chunks in (None, "auto"):
        return auto_chunks(grid, itemsize, x.chunks)
    inner = _axis_sizes(chunks, x, "chunks", name, grid)
    for axis, (s, c) in enumerate(zip(grid, inner, strict=True)):
        if s % c:
            fits = max(d for d in range(1, c + 1) if s % d == 0)
            raise WriteError(
                "the inner chunk size does not divide the shard size",
                expected=f"an inner chunk size along axis {axis} that divides the shard size {s}",
                found=f"inner chunks {inner} in shards {grid}",
                array=name,
                advice=f"Use e.g. {fits} along axis {axis}, or chunks='auto'. Nothing was written.",
            )
    return inner


def create(
    store: Any,
    path: str,
    x: Any,
    plan: GridPlan,
    creation: Mapping[str, Any],
    zarr_format: int,
    mode: str,
    storage_options: Any,
    write_empty_chunks: bool | None,
    *,
    staged: bool,
) -> tuple[Any, StagedWrite | None]:
    """The new array, created by zarr-python: on a :class:`StagedWrite`'s view when
    ``staged`` (its metadata put after its data; the array returned is on the store),
    and that write."""
    import inspect

    import zarr

    kwargs: dict[str, Any] = {
        k: creation[k] for k in ("compressors", "filters", "serializer") if creation[k] is not None
    }
    kwargs.update({k: v for k, v in creation.items() if k not in CREATION and v is not None})
    config: Any = dict(kwargs.pop("config", None) or {})
    if write_empty_chunks is not None:
        config["write_empty_chunks"] = bool(write_empty_chunks)
    shards = plan.shards
    if plan.edges is not None:  # created regular, then its grid written (below)
        shards = plan.inner
    arguments = {
        "name": path.strip("/") or None,
        "shape": x.shape,
        "dtype": x.dtype,
        "chunks": plan.inner,
        "shards": shards,
        "fill_value": creation["fill_value"],
        "attributes": dict(creation["attributes"] or {}),
        "dimension_names": creation["dimension_names"],
        "zarr_format": 2 if zarr_format == 2 else 3,
        "overwrite": mode == "w",
        "config": config,
        **kwargs,
    }
    staging = None
    try:
        # (an argument create_array does not take, refused before the store is opened)
        inspect.signature(zarr.create_array).bind(store, **arguments)
        if staged:
            staging = staged_write(store, storage_options, path, replaces=mode == "w")
            arr = zarr.create_array(staging.view(), **arguments)
        else:
            arr = zarr.create_array(store, storage_options=storage_options, **arguments)
    except TypeError as e:  # an argument create_array does not take
        raise ArgumentError(
            "zarr-python's create_array refused an argument",
            found=str(e),
            array=path.strip("/") or "/",
            advice="Check the spelling against zarr.create_array's arguments. Nothing was written.",
        ) from e
    except ValueError as e:
        raise WriteError(
            "zarr-python refused the array",
            found=f"{type(e).__name__}: {e}",
            array=path.strip("/") or "/",
            advice="Check the codecs, fill value and dimension names.",
        ) from e
    if plan.edges is not None:
        arr = write_grid(arr, plan.edges)
    return (arr, None) if staging is None else (staging.bind(arr), staging)
