"""Concurrent region writes: which shards two or more jobs would both write.

Within one ``shardwise.to_zarr`` call exactly one task writes each shard. Two *separate*
jobs writing regions of one array have no such guarantee: when both regions touch the
same shard, each job reads the shard, merges its part and puts the whole shard back, and
the later put silently drops the other job's part. Regions aligned to shard boundaries
never share a shard and are safe to write at the same time.

:func:`shared_shards` finds the shards that several regions touch, from the regions and
the stored metadata alone (nothing is read but ``zarr.json`` documents);
:func:`check_regions` raises :class:`~shardwise.errors.RegionConflictError` when there
are any, before any job starts writing.
"""

from __future__ import annotations

import itertools
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

from shardwise.errors import RegionConflictError, WriteError
from shardwise.metadata import ArrayInfo

__all__ = ["check_regions", "shared_shards"]

Region = Mapping[Hashable, slice]


def _arrays(store: Any, group: str | None, storage_options: Any) -> dict[str, ArrayInfo]:
    """Every Zarr v3 array directly in the group, by name."""
    import zarr

    root = zarr.open_group(store, path=group or "", mode="r", storage_options=storage_options)
    out = {}
    for name, arr in root.arrays():
        if arr.metadata.zarr_format == 3:
            out[name] = ArrayInfo.from_metadata(arr.metadata, arr.path)
    return out


def _shard_span(info: ArrayInfo, dims: Sequence[Hashable], region: Region, which: int) -> Any:
    """Per dimension, the range of shard indices ``region`` touches (whole extent for
    dimensions the region does not name); None when it touches nothing."""
    spans = []
    for dim, name in zip(info.layout.dims, dims, strict=True):
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
    """The shards that more than one of ``regions`` touch, per array.

    ``regions`` are what separate jobs would pass as ``to_zarr(region=...)``: mappings
    from dimension name to slice. An array is written by a region write when it has
    any of the region's dimensions (along the others it is written whole). Returns
    ``{array name: {shard key: [indices of the regions that touch it]}}`` for the
    arrays that have such shards; an empty dict means the jobs may run at once.
    ``variables`` limits the check to the arrays the jobs write (default: all).
    """
    out: dict[str, dict[str, list[int]]] = {}
    for name, info in sorted(_arrays(store, group, storage_options).items()):
        if variables is not None and name not in variables:
            continue
        dims = info.metadata.dimension_names
        if dims is None:
            continue
        touched: dict[tuple[int, ...], list[int]] = {}
        for i, region in enumerate(regions):
            unknown = [d for d in region if d not in dims]
            if len(unknown) == len(region):  # a region write leaves this array alone
                continue
            spans = _shard_span(info, dims, region, i)
            if spans is None:
                continue
            for shard in itertools.product(*spans):
                touched.setdefault(shard, []).append(i)
        shared = {info.key(s): who for s, who in sorted(touched.items()) if len(who) > 1}
        if shared:
            out[name] = shared
    return out


def check_regions(
    store: Any,
    regions: Sequence[Region],
    *,
    group: str | None = None,
    storage_options: dict[str, Any] | None = None,
    variables: Sequence[str] | None = None,
) -> None:
    """Raise :class:`~shardwise.errors.RegionConflictError` when two of ``regions``
    would write the same shard (see :func:`shared_shards`); return quietly otherwise."""
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
