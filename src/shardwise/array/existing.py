"""An existing array a dask-array write goes into: found (and refused where the mode
does not allow it), the data checked against it (axes, dtype, region, append), and the
grid an append grows it to."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import shardwise.format.rectilinear as rl
from shardwise.array.decisions import (
    appended_grid,
    axis_of,
    castable,
    no_axis,
    rectilinear,
    region_bounds,
)
from shardwise.errors import StoreExistsError, WriteError
from shardwise.io.opener import store_path

__all__ = ["existing_array", "grown_grid", "into_existing", "meta_key"]


def meta_key(path: str, arr: Any) -> str:
    base = path.strip("/")
    leaf = "zarr.json" if arr.metadata.zarr_format == 3 else ".zarray"
    return f"{base}/{leaf}" if base else leaf


def existing_array(store: Any, path: str, storage_options: Any, mode: str, name: str) -> Any:
    """The zarr-python array at ``path``, None when there is nothing; refuses what
    ``mode`` does not allow."""
    import zarr

    try:
        base = store_path(store, storage_options)
    except FileNotFoundError:
        base = None
    node = None
    if base is not None:
        try:
            node = zarr.open(base / path.strip("/"), mode="r")  # (as store_path opened it)
        except (FileNotFoundError, KeyError):
            node = None
    if node is not None and not isinstance(node, zarr.Array):
        raise WriteError(
            "a group is where the array would go",
            expected="an array, or nothing",
            found=f"a Zarr group at {name!r}",
            array=name,
            advice="Choose another path. Nothing was written.",
        )
    if mode == "w":
        return None
    if node is not None and mode == "w-":
        raise StoreExistsError(
            "an array exists already",
            expected="nothing at the path (mode='w-')",
            found=f"a Zarr v{node.metadata.zarr_format} array of shape {node.shape} and "
            f"dtype {node.dtype}",
            array=name,
            key=meta_key(path, node),
            advice="Use mode='w' to replace it, mode='a' with append_dim= to append, or "
            "mode='r+' with region= to write part of it. Nothing was written.",
        )
    if node is None and mode == "r+":
        raise WriteError(
            "mode='r+' writes into an existing array",
            expected=f"a Zarr array at {name!r}",
            found="nothing there",
            array=name,
            advice="Create it with mode='w-'. Nothing was written.",
        )
    if node is None:
        return None
    return zarr.open_array(store, path=path, mode="r+", storage_options=storage_options)


def into_existing(
    x: Any,
    arr: Any,
    region: Any,
    append_dim: int | None,
    name: str,
    claim: tuple[int, int, int] | None = None,
) -> tuple[Any, tuple[int, ...], tuple[int, ...]]:
    """The data cast to the array's dtype, where it goes, and the array's shape after
    the write. ``claim``: the rows an earlier run of this append claimed and did not
    write, ``(axis, start, stop)``: the data goes there, and the array does not grow."""
    key = meta_key(arr.path, arr)
    if x.ndim != arr.ndim:
        raise WriteError(
            "the data has another number of axes than the array",
            expected=f"{arr.ndim} axes (shape {arr.shape})",
            found=f"{x.ndim} axes (shape {x.shape})",
            array=name,
            key=key,
        )
    if not castable(x.dtype, arr.dtype):
        raise WriteError(
            "the data type cannot be written into the array",
            expected=f"data castable to {arr.dtype} (same kind)",
            found=str(x.dtype),
            array=name,
            key=key,
            advice=f"Cast it first: x.astype({str(arr.dtype)!r}). Nothing was written.",
        )
    x = x.astype(arr.dtype, copy=False)
    shape = tuple(arr.shape)
    if append_dim is not None:
        if (axis := axis_of(append_dim, x.ndim)) is None:
            raise no_axis(WriteError, "append_dim", append_dim, x.ndim, name, key)
        others = [i for i in range(x.ndim) if i != axis and x.shape[i] != shape[i]]
        if others:
            raise WriteError(
                "the appended data does not match the array along the other axes",
                expected=f"shape {tuple('*' if i == axis else n for i, n in enumerate(shape))}",
                found=f"shape {x.shape}",
                array=name,
                key=key,
            )
        if claim is not None and claim[0] == axis and claim[2] - claim[1] == x.shape[axis]:
            return x, tuple(claim[1] if i == axis else 0 for i in range(x.ndim)), shape
        offset = tuple(shape[axis] if i == axis else 0 for i in range(x.ndim))
        new = tuple(n + x.shape[axis] if i == axis else n for i, n in enumerate(shape))
        return x, offset, new
    if region is None:
        region = (slice(None),) * x.ndim
    sl = _region(region, shape, name, key)
    want = tuple(s.stop - s.start for s in sl)
    if want != x.shape:
        raise WriteError(
            "the data does not fit the region",
            expected=f"shape {want} (region {tuple((s.start, s.stop) for s in sl)})",
            found=f"shape {x.shape}",
            array=name,
            key=key,
        )
    return x, tuple(s.start for s in sl), shape


def _region(region: Any, shape: tuple[int, ...], name: str, key: str) -> tuple[slice, ...]:
    ndim = len(shape)
    if isinstance(region, Mapping):
        per = [slice(None)] * ndim
        for value, sl in region.items():
            if (axis := axis_of(value, ndim)) is None:
                raise no_axis(WriteError, "a key of region", value, ndim, name, key)
            per[axis] = sl
    else:
        per = list(region) if isinstance(region, tuple | list) else [region]
        if len(per) > ndim:
            raise WriteError(
                "region has more axes than the array",
                expected=f"at most {ndim} slices",
                found=repr(region),
                array=name,
                key=key,
            )
        per += [slice(None)] * (ndim - len(per))
    out = []
    for axis, (s, n) in enumerate(zip(per, shape, strict=True)):
        if not isinstance(s, slice) or s.step not in (None, 1):
            raise WriteError(
                "region must be slices of step 1",
                expected="a slice per axis",
                found=f"{s!r} along axis {axis}",
                array=name,
                key=key,
            )
        bounds = region_bounds(s, n)
        if bounds is None:
            raise WriteError(
                "region reaches past the array",
                expected=f"slices within 0..{n} along axis {axis}",
                found=repr(s),
                array=name,
                key=key,
                advice="Grow the array with append_dim= first. Nothing was written.",
            )
        start, stop = bounds
        out.append(slice(start, max(start, stop)))
    return tuple(out)


def grown_grid(arr: Any, x: Any, append_dim: int | None, name: str) -> list[Any] | None:
    """The rectilinear grid after an append (the appended dask chunks become shards),
    checked; None for a regular grid, which only grows."""

    if append_dim is None or not rectilinear(arr.metadata):
        return None
    axis = int(append_dim) % arr.ndim
    dims = [f"axis {i}" for i in range(x.ndim)]
    rl.check_blocks(name, dims, x.chunks)
    return appended_grid(arr.metadata, name, dims, axis, x.chunks[axis])
