"""Arrays shardwise cannot read (strings, objects), copied whole through zarr-python
by ``reshard`` when they are small enough; larger ones are refused before anything is
written."""

from __future__ import annotations

import math
from typing import Any

import shardwise._compat as _compat
from shardwise.errors import WriteError

COPY_LIMIT = 256 * 2**20  # arrays shardwise cannot read are copied whole up to this size


def open_copyable(source: Any, rel: str, err: Exception) -> Any:
    """An array shardwise cannot read (strings, objects), opened through zarr-python to
    be copied whole when small enough; others are refused before writing."""
    import zarr

    arr = zarr.open_array(source.store, path=f"{source.base}/{rel}".strip("/"), mode="r")
    nbytes = math.prod(arr.shape) * max(arr.dtype.itemsize, 8)
    if source.kind == "2022 sharding draft" or nbytes > COPY_LIMIT:
        raise WriteError(
            "an array cannot be resharded",
            expected=f"arrays shardwise reads, or others up to {COPY_LIMIT // 2**20} MiB "
            "(copied whole)",
            found=str(err),
            array=rel,
            advice="Leave it out with variables=[...] and copy it with zarr-python.",
        )
    return arr


def copy_plan(arr: Any, source: Any, rel: str) -> dict[str, Any]:
    """How a (small) array shardwise cannot read (``arr``, opened by zarr-python) is
    copied, unsharded: ``create_array``'s arguments but the data (nothing is read yet)."""
    attributes = dict(arr.attrs)
    dims = attributes.pop("_ARRAY_DIMENSIONS", None)
    fill = arr.metadata.fill_value
    if arr.metadata.zarr_format == 2 and fill is not None and "_FillValue" not in attributes:
        try:
            attributes["_FillValue"] = _compat.FillValueCoder.encode(fill, arr.dtype)
        except ValueError as e:
            raise WriteError(
                "the array's fill value cannot be written as xarray's _FillValue",
                expected="a fill value of a data type xarray encodes",
                found=f"{fill!r} of {arr.dtype}: {e}",
                array=rel,
                key=f"{source.base}/{rel}/.zarray".strip("/"),
                advice="Leave the array out with variables=[...] (--var) and copy it with "
                "zarr-python. Nothing was written.",
            ) from e
    if arr.metadata.zarr_format == 3:
        dims = arr.metadata.dimension_names
    return {
        "shape": arr.shape,
        "dtype": arr.dtype,
        "chunks": arr.chunks,
        "attributes": attributes,
        "dimension_names": dims,
        "fill_value": fill,
    }


def copy_whole(arr: Any, rel: str, root: Any, plan: dict[str, Any], *, dry: bool) -> None:
    """Copy a (small) array shardwise cannot read (``arr``, opened by zarr-python),
    unsharded (with ``dry``: its metadata alone)."""
    if dry:
        root.create_array(rel, **plan)
        return
    kwargs = {k: v for k, v in plan.items() if k not in ("shape", "dtype")}
    root.create_array(rel, data=arr[...], **kwargs)
