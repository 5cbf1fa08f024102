"""Concurrent region writes: which shards two or more jobs would both write.

Within one ``shardwise.to_zarr`` call exactly one task writes each shard. Two *separate*
jobs writing regions of one array have no such guarantee: when both regions touch the
same shard, each job reads the shard, merges its part and puts the whole shard back, and
the later put silently drops the other job's part. Regions aligned to shard boundaries
never share a shard and are safe to write at the same time.

``shared_shards`` finds the shards that several regions touch, from the regions and
the stored metadata alone (nothing is read but ``zarr.json`` documents);
``check_regions`` raises ``shardwise.errors.RegionConflictError`` when there
are any, before any job starts writing.
"""

from __future__ import annotations

import itertools
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from shardwise._flags import rectilinear_grids
from shardwise.errors import RegionConflictError, UnsupportedArrayError, WriteError
from shardwise.format.grid import ShardLayout
from shardwise.format.metadata import ArrayInfo

__all__ = ["check_regions", "shared_shards"]

Region = Mapping[Hashable, slice]


@dataclass(frozen=True)
class _Grid:
    """What the check needs of an array: its chunk (shard) grid, dimension names and
    the store key of each grid cell. Zarr v2 arrays count chunks as shards."""

    name: str
    layout: ShardLayout
    dims: tuple[Hashable, ...]
    path: str
    metadata: Any

    def key(self, cell: tuple[int, ...]) -> str:
        k = self.metadata.encode_chunk_key(cell)
        return f"{self.path}/{k}" if self.path else str(k)


def _grids(
    store: Any, group: str | None, storage_options: Any, variables: Sequence[str] | None
) -> list[_Grid]:
    """The arrays directly in the group (those in ``variables``, when given)."""
    import zarr

    with rectilinear_grids():  # zarr-python reads rectilinear grids only with its flag on
        root = zarr.open_group(store, path=group or "", mode="r", storage_options=storage_options)
        arrays = sorted(root.arrays())
    out = []
    for name, arr in arrays:
        if variables is not None and name not in variables:
            continue
        if arr.metadata.zarr_format == 3:
            info = ArrayInfo.from_metadata(arr.metadata, arr.path)
            layout, dims = info.layout, info.metadata.dimension_names
        else:
            layout = ShardLayout.build(arr.shape, arr.chunks, None)
            dims = arr.attrs.get("_ARRAY_DIMENSIONS")
        if dims is None or len(dims) != layout.ndim:
            raise UnsupportedArrayError(
                "array without dimension names",
                expected="dimension_names (Zarr v3) or _ARRAY_DIMENSIONS (Zarr v2), as xarray "
                "writes them",
                found=repr(dims),
                array=arr.path or "/",
                advice="Pass variables= with the arrays the jobs write.",
            )
        out.append(_Grid(name, layout, tuple(dims), arr.path, arr.metadata))
    return out


def _shard_span(info: _Grid, region: Region, which: int) -> Any:
    """Per dimension, the range of shard indices ``region`` touches (whole extent for
    dimensions the region does not name); None when it touches nothing."""
    spans = []
    for dim, name in zip(info.layout.dims, info.dims, strict=True):
        sel = region.get(name, slice(None))
        if not isinstance(sel, slice):
            raise WriteError(
                f"region {which} is not a slice along {name!r}",
                expected="slices, as to_zarr(region=...) takes",
                found=repr(sel),
                array=info.name,
            )
        start, stop, step = sel.indices(dim.extent)
        if step != 1:
            raise WriteError(
                f"region {which} has a step along {name!r}",
                expected="slices with step 1",
                found=repr(sel),
                array=info.name,
            )
        if stop <= start:
            return None
        spans.append(dim.shard_range(start, stop - 1))
    return spans


def shared_shards(
    store: Any,
    regions: Sequence[Region],
    *,
    group: str | None = None,
    storage_options: dict[str, Any] | None = None,
    variables: Sequence[str] | None = None,
) -> dict[str, dict[str, list[int]]]:
    """The shards that more than one of ``regions`` would write, per array, from the
    metadata alone.

    Parameters
    ----------
    store : str, os.PathLike or zarr.abc.store.Store
        The store the jobs write: a path, a URL (with ``storage_options``) or a
        zarr-python ``Store``.
    regions : sequence of dict
        What the separate jobs would pass as ``to_zarr(region=...)``: mappings from
        dimension name to slice. An array is written by a region write when it has any
        of the region's dimensions (along the others it is written whole).
    group : str, optional
        The group the jobs write; the store's root when None.
    storage_options : dict, optional
        Options of the fsspec file system a URL names (credentials, endpoint).
    variables : sequence of str, optional
        The arrays the jobs write; all of the group's when None.

    Returns
    -------
    dict
        ``{array name: {shard key: [indices of the regions that touch it]}}`` for the
        arrays that have such shards (Zarr v2 arrays count their chunks as shards). An
        empty dict means the jobs never write the same shard.

    Raises
    ------
    shardwise.errors.UnsupportedArrayError
        An array has no dimension names (it cannot be checked, and is not passed
        unchecked).

    Examples
    --------
    >>> regions = [{"time": slice(0, 1000)}, {"time": slice(1000, 2000)}]
    >>> shardwise.regions.shared_shards("data.zarr", regions, variables=["temperature"])
    {}
    """
    out: dict[str, dict[str, list[int]]] = {}
    for grid in _grids(store, group, storage_options, variables):
        touched: dict[tuple[int, ...], list[int]] = {}
        for i, region in enumerate(regions):
            if not any(d in grid.dims for d in region):  # a region write leaves it alone
                continue
            spans = _shard_span(grid, region, i)
            if spans is None:
                continue
            for shard in itertools.product(*spans):
                touched.setdefault(shard, []).append(i)
        shared = {grid.key(s): who for s, who in sorted(touched.items()) if len(who) > 1}
        if shared:
            out[grid.name] = shared
    return out


def check_regions(
    store: Any,
    regions: Sequence[Region],
    *,
    group: str | None = None,
    storage_options: dict[str, Any] | None = None,
    variables: Sequence[str] | None = None,
) -> None:
    """Refuse a plan of separate jobs whose regions would write the same shard.

    Parameters
    ----------
    store : str, os.PathLike or zarr.abc.store.Store
        The store the jobs write.
    regions : sequence of dict
        What the separate jobs would pass as ``to_zarr(region=...)``.
    group : str, optional
        The group the jobs write; the store's root when None.
    storage_options : dict, optional
        Options of the fsspec file system a URL names (credentials, endpoint).
    variables : sequence of str, optional
        The arrays the jobs write; all of the group's when None.

    Raises
    ------
    shardwise.errors.RegionConflictError
        Two of ``regions`` would write the same shard; the error names the first such
        array and shard, and how many there are. Nothing is raised otherwise.

    Examples
    --------
    >>> regions = [{"time": slice(0, 1000)}, {"time": slice(1000, 2000)}]
    >>> shardwise.regions.check_regions("data.zarr", regions, variables=["temperature"])
    """
    shared = shared_shards(
        store, regions, group=group, storage_options=storage_options, variables=variables
    )
    if not shared:
        return
    name, keys = next(iter(shared.items()))
    key, who = next(iter(keys.items()))
    total = sum(len(k) for k in shared.values())
    raise RegionConflictError(
        "regions written by separate jobs share shards",
        expected="regions that touch disjoint shards",
        found=f"{total} shard(s) touched by more than one region, e.g. regions {who} "
        f"both touch this one",
        array=name,
        key=key,
        advice="Align the regions to shard boundaries (see the arrays' "
        "encoding['shards']), or write them in one to_zarr call, or one after another.",
    )
