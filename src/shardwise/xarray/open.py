"""``shardwise.open_dataset``: a Zarr store opened exactly as ``engine="shardwise"`` opens
it (xarray's own metadata and CF decoding, ``shardwise.xarray.backend``), with every
variable shardwise reads given the fan-out graph of ``shardwise.graph.fanout``, and the
``chunks=`` words and sizes that group whole inner chunks into dask chunks.

Apart from the write side (``shardwise.xarray.to_zarr``): reading shares nothing with
it but the backend.
"""

from __future__ import annotations

import os
from collections.abc import Hashable, Mapping
from typing import Any

import shardwise._compat as _compat
from shardwise.errors import ChunksError
from shardwise.graph.fanout import block_sizes, fanout_array
from shardwise.xarray.backend import open_backend_dataset

__all__ = ["open_dataset"]

_CHUNK_WORDS = ("shards", "inner", "auto")


def open_dataset(
    store: Any,
    *,
    chunks: str | Mapping[Hashable, Any] | None = None,
    group: str | None = None,
    storage_options: dict[str, Any] | None = None,
    consolidated: bool | None = None,
    zarr_format: int | None = None,
    read_options: Any = None,
    mask_and_scale: bool = True,
    decode_times: Any = True,
    concat_characters: bool = True,
    decode_coords: Any = True,
    drop_variables: str | list[str] | None = None,
    use_cftime: bool | None = None,
    decode_timedelta: Any = None,
    create_default_indexes: bool = True,
) -> Any:
    """Open a Zarr store as an ``xarray.Dataset`` of dask arrays with fan-out read graphs.

    Metadata, coordinates, attributes, encodings and CF decoding are exactly those of
    ``xr.open_dataset(store, engine="shardwise")``. Each variable shardwise reads gets a
    graph with one index-read task per shard and, below it, one task per dask chunk
    that reads the chunk's inner chunks as coalesced byte ranges and decodes them;
    slicing before computing reads only the shards and inner chunks the slice needs.

    Parameters
    ----------
    store : str, os.PathLike, zarr.abc.store.Store or icechunk.Session
        The store: a path, a URL (with ``storage_options``), a zarr-python ``Store``
        or an Icechunk session; Zarr v3, Zarr v2 or a store of the 2022 sharding draft.
    chunks : str, dict or None, optional
        How whole inner chunks are grouped into dask chunks. None (default): whole
        shards, as ``xr.open_dataset(..., engine="shardwise", chunks={})`` gives them
        (one dask chunk per shard from local disk and memory, several shards together
        toward dask's ``array.chunk-size`` from an object store or an HTTP server);
        ``"shards"`` (one dask
        chunk per shard), ``"inner"`` (one per inner chunk: most parallel, many tasks),
        ``"auto"`` (whole shards, or whole inner chunks of a shard, toward dask's
        ``array.chunk-size``), or a dict by dimension name of any of those, an int
        size, a tuple of sizes, ``-1`` (the whole dimension) or None (shards);
        dimensions left out get shards. Sizes that cut inner chunks are moved to
        inner-chunk boundaries with a ``shardwise.errors.ChunkRoundingWarning``.
        Variables shardwise does not read itself (Zarr v2 arrays, strings) are chunked
        by ``dask.array.from_array`` along their Zarr chunks.
    group : str, optional
        The group to open; the store's root when None.
    storage_options : dict, optional
        Options of the fsspec file system a URL names (credentials, endpoint).
    consolidated : bool, optional
        As ``xr.open_zarr``'s: read consolidated metadata (True), do not (False), or
        use it where there is some (None).
    zarr_format : {2, 3}, optional
        Insist on a Zarr format; found from the store when None.
    read_options : ReadOptions or dict, optional
        How reads coalesce byte ranges, use the index cache... (a
        ``shardwise.ReadOptions`` or a dict of its fields).
    mask_and_scale : bool, default True
        As ``xarray.open_dataset`` takes it.
    decode_times : bool or CFDatetimeCoder, default True
        As ``xarray.open_dataset`` takes it.
    concat_characters : bool, default True
        As ``xarray.open_dataset`` takes it.
    decode_coords : bool or {"coordinates", "all"}, default True
        As ``xarray.open_dataset`` takes it.
    drop_variables : str or list of str, optional
        As ``xarray.open_dataset`` takes it.
    use_cftime : bool, optional
        As ``xarray.open_dataset`` takes it.
    decode_timedelta : bool or CFTimedeltaCoder, optional
        As ``xarray.open_dataset`` takes it.
    create_default_indexes : bool, default True
        As ``xarray.open_dataset`` takes it.

    Returns
    -------
    xarray.Dataset
        The dataset, lazily: nothing but the metadata (and the indexed coordinates) is
        read until it is computed.

    Raises
    ------
    shardwise.errors.ChunksError
        ``chunks`` is not one of the forms above.
    shardwise.errors.NotAZarrStoreError
        No Zarr group is at ``store`` and ``group``.

    Examples
    --------
    >>> ds = shardwise.open_dataset("data.zarr", chunks={"time": 24})
    >>> ds.temperature.sel(time="2000-01").mean().compute()  # doctest: +SKIP
    """
    import xarray as xr

    if chunks is None:
        pass
    elif isinstance(chunks, str):
        if chunks not in _CHUNK_WORDS:
            raise ChunksError(
                "unknown chunks",
                expected='"shards", "inner", "auto" or a dict by dimension name',
                found=repr(chunks),
                advice='Use chunks="shards" for one dask chunk per shard.',
            )
    elif not isinstance(chunks, Mapping):
        raise ChunksError(
            "unknown chunks",
            expected='"shards", "inner", "auto" or a dict by dimension name',
            found=f"{type(chunks).__name__} {chunks!r}",
            advice="Give sizes by dimension name, e.g. chunks={'time': 24}.",
        )
    backend_ds, readers = open_backend_dataset(
        store,
        group=group,
        consolidated=consolidated,
        storage_options=storage_options,
        zarr_format=zarr_format,
        read_options=read_options,
        mask_and_scale=mask_and_scale,
        decode_times=decode_times,
        concat_characters=concat_characters,
        decode_coords=decode_coords,
        drop_variables=drop_variables,
        use_cftime=use_cftime,
        decode_timedelta=decode_timedelta,
    )
    ds = backend_ds
    if create_default_indexes:  # as xr.open_dataset does, before chunking
        to_index = {
            name: coord.variable
            for name, coord in ds.coords.items()
            if coord.dims == (name,) and name not in ds.xindexes
        }
        ds = ds.assign_coords(xr.Coordinates(to_index))
    if isinstance(chunks, Mapping):
        unknown = [d for d in chunks if d not in ds.dims]
        if unknown:
            ds.close()
            raise ChunksError(
                "chunks name dimensions the dataset does not have",
                expected=f"some of {sorted(map(str, ds.dims))}",
                found=str(unknown),
                array=group or "/",
                advice="Check the dimension names with ds.sizes.",
            )
    new: dict[Hashable, Any] = {}
    for name, var in ds.variables.items():
        if var.ndim == 0 or name in ds.xindexes:
            continue  # as xarray does: scalars stay lazy, indexes are in memory
        reader = readers.get(str(name))
        if reader is None:
            new[name] = var.chunk(_fallback_chunks(var, chunks))
            continue
        sizes = block_sizes(reader, var.dims, chunks, name=str(name))
        # the same wrapper xarray hands to dask.array.from_array
        source = _compat.indexing.ImplicitToExplicitIndexingAdapter(
            _compat.lazy_data(var), _compat.indexing.OuterIndexer
        )
        data = fanout_array(reader, source, sizes, name=str(name), dtype=var.dtype)
        new[name] = var.copy(deep=False, data=data)
    coords = {k: v for k, v in new.items() if k in ds.coords}
    data_vars = {k: v for k, v in new.items() if k not in ds.coords}
    out = ds.assign_coords(coords).assign(data_vars)
    out.set_close(_compat.closer(backend_ds))
    if "source" not in out.encoding:
        path = getattr(store, "path", store)
        if isinstance(path, str | os.PathLike):  # as xr.open_dataset records it
            path = os.fspath(path)
            is_url = "://" in path
            out.encoding["source"] = path if is_url else os.path.abspath(os.path.expanduser(path))
    return out


def _fallback_chunks(var: Any, chunks: str | Mapping[Hashable, Any] | None) -> dict[Hashable, Any]:
    """dask chunks for a variable xarray's zarr wrapper reads: its Zarr chunks, or the
    sizes the dict gives."""
    preferred = var.encoding.get("preferred_chunks", {})
    out: dict[Hashable, Any] = {}
    for dim in var.dims:
        want = chunks.get(dim) if isinstance(chunks, Mapping) else chunks
        if want is None or want in ("shards", "inner"):
            out[dim] = preferred.get(dim, -1)
        else:
            out[dim] = want
    return out
