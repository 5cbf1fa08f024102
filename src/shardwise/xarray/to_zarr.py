"""``shardwise.to_zarr``: xarray Datasets, DataArrays and DataTrees written to sharded
Zarr v3, one task per shard (a dask array given here is handed on to
``shardwise.array.to_zarr``, with a ``FutureWarning``).

The metadata step is xarray's own (``ZarrStore.store`` through zarr-python), so the
arrays, attributes and CF encodings are exactly what ``Dataset.to_zarr`` writes. Only
the data step differs: xarray hands every dask variable to an ``ArrayWriter``, and
shardwise's writer captures them instead of calling ``dask.array.store``
(``shardwise.xarray.metadata_step``), then writes them all with one call of the
array layer's write primitive (``shardwise.array.store.store_arrays``, the
dask-array path's too), in which exactly one task writes each shard.

Before anything is written the whole metadata step runs once against a copy-on-write
view of the store (``shardwise.io.overlay.OverlayStore``), so bad input fails with
the store untouched; and ``mode="w"`` refuses to replace a store the data is read from.
"""

from __future__ import annotations

import warnings
from collections.abc import Hashable, Mapping
from typing import Any, Literal

import shardwise._compat as _compat
from shardwise._flags import consolidate_metadata
from shardwise.array.api import is_array, naming_client_errors
from shardwise.array.api import to_zarr as array_to_zarr
from shardwise.array.create import CREATION
from shardwise.array.options import WriteOptions
from shardwise.array.replacing import check_not_replacing_sources
from shardwise.errors import (
    ArgumentError,
    WriteError,
)
from shardwise.io.capabilities import icechunk_session
from shardwise.io.icechunk import check_dataset, refuse_commit
from shardwise.xarray.dataset import DatasetWrite
from shardwise.xarray.encoding import ShardSpec, SizeSpec, check_spec

__all__ = ["to_zarr"]

_ARRAY_ONLY = ("path", "component", "overwrite", "return_stored", *CREATION[2:])


def _as_dataset(obj: Any) -> Any:
    import xarray as xr

    if isinstance(obj, xr.Dataset):
        return obj
    if isinstance(obj, xr.DataArray):
        if obj.name is None:
            return obj.to_dataset(name=_compat.DATAARRAY_VARIABLE)
        if obj.name in obj.coords or obj.name in obj.dims:
            ds = obj.to_dataset(name=_compat.DATAARRAY_VARIABLE)
            ds.attrs[_compat.DATAARRAY_NAME] = obj.name
            return ds
        return obj.to_dataset()
    raise TypeError(f"to_zarr writes an xarray Dataset or DataArray, got {type(obj).__name__}")


def _where(obj: Any, store: Any = None, mode: Any = None, group: Any = None, **kw: Any) -> str:
    """The group (or a dask array's path) a ``to_zarr`` call writes, from its arguments."""
    if is_array(obj):
        return kw.get("path") or kw.get("component") or ""
    return group or ""


@naming_client_errors(_where)
def to_zarr(
    obj: Any,
    store: Any = None,
    mode: str | None = None,
    group: str | None = None,
    encoding: Mapping[Any, Mapping[str, Any]] | None = None,
    *,
    compute: bool = True,
    consolidated: bool | None = None,
    append_dim: Hashable | None = None,
    region: Mapping[str, Any] | Literal["auto"] | None = None,
    safe_chunks: bool = True,
    align_chunks: bool = False,
    storage_options: dict[str, Any] | None = None,
    zarr_format: int | None = None,
    write_empty_chunks: bool | None = None,
    chunkmanager_store_kwargs: dict[str, Any] | None = None,
    shards: ShardSpec = None,
    chunks: SizeSpec = None,
    write_order: str = "morton",
    shards_per_task: int | Literal["auto"] | None = None,
    encode_split: int | Literal["auto"] | None = None,
    independent_writers: bool | Literal["auto"] | None = None,
    commit: str | None = None,
    progress: bool = False,
    **kwargs: Any,
) -> Any:
    """Write an xarray Dataset, DataArray or DataTree to a Zarr store, as
    ``Dataset.to_zarr`` does, with exactly one dask task writing each shard.

    Takes ``Dataset.to_zarr``'s arguments and per-variable encodings (``chunks``,
    ``shards``, ``compressors``, ``filters``, ``serializer``, ``dtype``, ``_FillValue``,
    ``scale_factor``, ``add_offset``, ``units``, ``calendar``...). Dask chunks of any
    size and alignment are accepted and never rechunked.

    Parameters
    ----------
    obj : xarray.Dataset, xarray.DataArray or xarray.DataTree
        What to write. (A dask array is written by :func:`shardwise.array.to_zarr`;
        given here, it is handed on to it with a ``FutureWarning``, for one more
        release.)
    store : str, os.PathLike, zarr.abc.store.Store or icechunk.Session
        Where to write: a path, a URL (with ``storage_options``), a zarr-python
        ``Store``, or a writable Icechunk session (or its ``session.store``). With a
        session, the metadata is written in it and the data through a fork of it
        (``session.fork()``) whose copies the tasks hand back, merged into the
        session; nothing is committed unless ``commit`` is given.
    mode : {"w", "w-", "a", "a-", "r+", "r"}, optional
        As ``Dataset.to_zarr`` takes it.
    group : str, optional
        The group to write in; the store's root when None.
    encoding : dict, optional
        Per-variable encodings, as ``Dataset.to_zarr`` takes them (``chunks``,
        ``shards``, ``compressors``...).
    compute : bool, default True
        Write the data now; with False, write the metadata and return a
        ``dask.delayed`` that writes the data.
    consolidated : bool, optional
        As ``Dataset.to_zarr`` takes it.
    append_dim : hashable, optional
        The dimension to append along; the appended rows may cut shards, which are
        merged with what is stored.
    region : dict or "auto", optional
        The part of the stored arrays to write, as ``Dataset.to_zarr`` takes it; it may
        cut shards, which are merged with what is stored.
    safe_chunks : bool, default True
        Accepted for compatibility with ``Dataset.to_zarr``, and not needed: no dask
        chunking can make two tasks write one shard.
    align_chunks : bool, default False
        Accepted for compatibility, and not needed (nothing is rechunked).
    zarr_format : {2, 3}, optional
        The format of a new store; zarr-python's default when None.
    write_empty_chunks : bool, optional
        Whether inner chunks that hold only the fill value are stored; zarr-python's
        ``array.write_empty_chunks`` setting when None.
    chunkmanager_store_kwargs : dict, optional
        As ``Dataset.to_zarr`` takes them.
    storage_options : dict, optional
        Options of the fsspec file system a URL names (credentials, endpoint).
    shards : dict, "auto", "dask" or None, optional
        Shard sizes (and, with ``chunks``, inner chunk sizes) for every new variable: a mapping from dimension
        name to size (dimensions not named span the whole array, or the whole shard),
        or ``"auto"``: shards built from whole dask blocks toward dask config
        ``shardwise.shard-bytes`` (128 MiB), inner chunks dividing them toward
        ``shardwise.chunk-bytes`` (1 MiB). A variable's explicit ``encoding`` wins.
        Shards without inner chunks get ``"auto"`` inner chunks.
        ``shards="dask"``: every dask chunk becomes one shard, regular or not. Where a
        variable's dask chunks are irregular the shards form a *rectilinear* grid
        (variable-size shards; regular inner chunks that divide every shard but the
        last); this is also what happens when no shard shape is given. On an append,
        ``shards="dask"`` turns a regular array's grid rectilinear; appends to a
        rectilinear array always add the appended dask chunks as shards.
    chunks : dict or "auto", optional
        Inner chunk sizes for every new variable, as ``shards``.
    write_order : {"morton", "C"}, default "morton"
        How inner chunks are laid out in a shard: Z-order or C order.
    shards_per_task : int or "auto", optional
        For tiny shards: let one task write about this many shards, by grouping
        neighbouring dask chunks (never splitting one) that hold fewer; ``"auto"``
        groups toward dask's ``array.chunk-size`` of data per task. None (default):
        one task per dask chunk, fused with the tasks that make the chunk.
    encode_split : int or "auto", optional
        For few large shards: split the encoding of each shard into about this many
        tasks (cutting dask chunks at inner chunk boundaries; one task per shard still
        makes the single put), so that every thread of the cluster works on them.
        ``"auto"``: only when the shards written are fewer than the threads, into about
        threads / shards parts of at least 8 MiB. ``1``: never. None (default): dask
        config ``shardwise.encode-split``, itself ``"auto"`` by default.
    independent_writers : bool or "auto", optional
        Whether to guard against other jobs (scripts, clusters, pods) writing the same
        arrays while this one runs. Guarded, a shard this write covers in part is
        merged with the stored one and put only if that is unchanged since it was
        read, else read and merged again (optimistic concurrency); an append grows the
        array's metadata the same way. Shards a task covers whole are put as they are.
        ``"auto"`` (the default, through dask config ``shardwise.independent-writers``):
        guarded where the store can be; where it has no such put (``ZipStore``, fsspec
        file systems other than S3, GCS and Azure), its folder's lock stays on one node
        (NFS, Lustre...) or the array is written through ``dask.array.store`` (Zarr v2,
        variable-length strings), a write that would need it goes ahead as
        ``Dataset.to_zarr``'s would, with an
        ``shardwise.errors.UnprotectedWriteWarning``. True: guarded, and such a
        write is refused before anything is written. False: this job is the only
        writer; plain puts, the last one wins.
    commit : str, optional
        With an Icechunk session: commit it with this message once the data are
        written, and return the snapshot id.
    progress : bool, default False
        Show a bar of the write's tasks while it computes (tqdm's auto mode: a widget
        in a notebook, text on stderr in a terminal; the cluster's progress when a
        ``distributed.Client`` is the default scheduler).
    **kwargs
        Nothing: a keyword of ``shardwise.array.to_zarr``'s (``path``, ``compressors``,
        ``fill_value``...) is refused with a Dataset (give codecs and fill values per
        variable in ``encoding``).

    Returns
    -------
    xarray.backends.ZarrStore, str or dask.delayed.Delayed
        xarray's ``ZarrStore`` over the store written; with ``commit``, the snapshot
        id. With
        ``compute=False``, a ``dask.delayed`` that writes the data (the metadata is
        written already) and returns that; with an Icechunk session it computes to the
        merged fork session (``session.merge(delayed.compute())``, then commit).

    Raises
    ------
    shardwise.errors.WriteError, shardwise.errors.ChunksError, shardwise.errors.ArgumentError
        Before anything is written: options, encodings, regions or chunkings that do
        not fit the store, each naming the variable and what to do.
    shardwise.errors.ConflictError
        Another job kept changing a shard this write merges into, through every try
        (dask config ``shardwise.write-retries``).
    shardwise.errors.StoreIOError
        The store failed; the error names the array and the key.

    Examples
    --------
    >>> shardwise.to_zarr(ds, "data.zarr", encoding={"temperature": {"shards": (100, 720, 1440)}})  # doctest: +SKIP
    >>> shardwise.to_zarr(ds_next, "data.zarr", append_dim="time")  # doctest: +SKIP
    """
    del safe_chunks, align_chunks  # (taken for compatibility: nothing is rechunked)
    # the options of both kinds of data, as the array writer takes them too
    common: dict[str, Any] = {
        "mode": mode,
        "compute": compute,
        "append_dim": append_dim,
        "region": region,
        "storage_options": storage_options,
        "zarr_format": zarr_format,
        "shards": shards,
        "chunks": chunks,
        "commit": commit,
    }
    # the options of the data step (WriteOptions' fields)
    data_step: dict[str, Any] = {
        "write_order": write_order,
        "shards_per_task": shards_per_task,
        "encode_split": encode_split,
        "write_empty_chunks": write_empty_chunks,
        "progress": progress,
        "independent_writers": independent_writers,
    }
    if is_array(obj):
        dataset = {
            "group": group,
            "encoding": encoding,
            "consolidated": consolidated,
            "chunkmanager_store_kwargs": chunkmanager_store_kwargs,
        }
        return _array_to_zarr(
            obj,
            store,
            dataset,
            **common,
            **data_step,
            **kwargs,
        )
    _refuse_array_options(kwargs)
    return _xarray_to_zarr(
        obj,
        store,
        WriteOptions(**data_step),
        group=group,
        encoding=encoding,
        consolidated=consolidated,
        chunkmanager_store_kwargs=chunkmanager_store_kwargs,
        **common,
    )


def _array_to_zarr(x: Any, store: Any, dataset: dict[str, Any], **kwargs: Any) -> Any:
    """A dask array given to ``to_zarr``: handed on to the dask-array writer (with a
    ``FutureWarning``), once the Dataset options are refused."""
    warnings.warn(
        "shardwise.to_zarr writes xarray objects; write a dask array with "
        "shardwise.array.to_zarr (the same arguments). Passing one to shardwise.to_zarr "
        "will stop working in the next release.",
        FutureWarning,
        stacklevel=4,  # (the caller of to_zarr: through the error-naming wrapper)
    )
    if names := sorted(k for k, v in dataset.items() if v is not None and (k != "encoding" or v)):
        path = kwargs.get("path") or kwargs.get("component") or ""
        raise WriteError(
            "options for Datasets were given with a dask array",
            expected="path=, shards=, chunks=, compressors=, fill_value=, attributes=... "
            "for one array",
            found=", ".join(names),
            array=str(path).strip("/") or "/",
            advice="Give the array's place with path= and its codecs as keywords. "
            "Nothing was written.",
        )
    return array_to_zarr(x, store, **kwargs)


def _xarray_to_zarr(
    obj: Any,
    store: Any,
    options: WriteOptions,
    *,
    mode: str | None,
    group: str | None,
    commit: str | None,
    storage_options: dict[str, Any] | None,
    **write: Any,
) -> Any:
    """``to_zarr`` of a Dataset, DataArray or DataTree; ``write`` holds the rest of
    ``DatasetWrite``'s fields."""
    if mode == "w":  # replacing what is there: never what the data is read from
        check_not_replacing_sources(_lazy_datas(obj), store, storage_options, group)
    session = icechunk_session(store)
    if session is None and commit is not None:
        refuse_commit(store)
    if store is None:
        from zarr.storage import MemoryStore

        store = MemoryStore()
    import xarray as xr

    if isinstance(obj, xr.DataTree):
        if session is not None:
            raise WriteError(
                "a DataTree cannot be written into an Icechunk session in one call",
                expected="a Dataset (or DataArray) per call with an Icechunk session",
                found="a DataTree",
                advice="Write each node: shardwise.to_zarr(node.to_dataset(), session, "
                "group=path) for path, node in tree.subtree_with_keys (the root with its "
                "inherited coordinates), then commit. Nothing was written.",
            )
        return _tree_to_zarr(
            obj,
            store,
            options,
            mode=mode,
            group=group,
            commit=commit,
            storage_options=storage_options,
            **write,
        )
    ds = _as_dataset(obj)
    if session is not None:
        check_dataset(
            ds,
            session,
            compute=write["compute"],
            commit=commit,
            zarr_format=write["zarr_format"],
        )
    return DatasetWrite(
        ds,
        session.store if session else store,
        options,
        session,
        mode=mode,
        group=group,
        commit=commit,
        storage_options=storage_options,
        **write,
    ).run()


def _refuse_array_options(kwargs: Mapping[str, Any]) -> None:
    """dask's ``to_zarr`` options, and zarr-python's creation arguments, are for one dask
    array: with a Dataset they are refused (another keyword is the ``TypeError``
    Python raises for one a function does not take)."""
    if not kwargs:
        return
    # (None or False is no option given; `in` would compare an array of values)
    if names := sorted(
        k for k in _ARRAY_ONLY if kwargs.get(k) is not None and kwargs[k] is not False
    ):
        raise WriteError(
            "options for a single dask array were given with a Dataset",
            expected="group=, mode= and encoding= for a Dataset (mode='w' replaces it)",
            found=", ".join(names),
            advice="Use group= for where the Dataset goes, mode='w' to replace it, and "
            "encoding= for codecs and fill values per variable, e.g. "
            "encoding={'v': {'compressors': ...}}. Nothing was written.",
        )
    if unknown := sorted(k for k in kwargs if k not in _ARRAY_ONLY):
        raise ArgumentError(
            "to_zarr got keywords it takes only with a dask array",
            expected="Dataset.to_zarr's keywords (and shards=, chunks=, write_order=...)",
            found=", ".join(unknown),
            advice="Give codecs and other array options per variable in encoding=, e.g. "
            "encoding={'v': {'compressors': ...}}. Nothing was written.",
        )


def _lazy_datas(obj: Any) -> list[Any]:
    """The data of every variable of ``obj``, as read lazily: a Variable's lazily
    indexed array (``.data`` would load it), or its dask array."""
    import xarray as xr

    if isinstance(obj, xr.DataTree):
        variables = [v for node in obj.subtree for v in node.variables.values()]
    elif isinstance(obj, xr.Dataset):
        variables = list(obj.variables.values())
    else:
        variables = [obj.variable, *obj.coords.variables.values()]
    return [_compat.lazy_data(v) for v in variables]


def _on_dims(spec: Any, dims: Any) -> Any:
    """A ``shards=`` or ``chunks=`` given by dimension name, for one node of a tree: the
    sizes of the dimensions it has (any other value as it is)."""
    if isinstance(spec, Mapping):
        return {d: size for d, size in spec.items() if d in dims}
    return spec


def _tree_to_zarr(
    tree: Any,
    store: Any,
    options: WriteOptions,
    *,
    mode: str | None = None,
    group: str | None = None,
    encoding: Mapping[str, Any] | None = None,
    compute: bool = True,
    consolidated: bool | None = None,
    append_dim: Hashable | None = None,
    chunkmanager_store_kwargs: dict[str, Any] | None = None,
    **kwargs: Any,
) -> Any:
    """``DataTree.to_zarr`` with the shard writer: every node's dataset written to its
    group (its own coordinates, the root's inherited ones at the root), with the same
    refusals as xarray's, the data of all nodes in one dask computation."""
    import dask
    import zarr

    if group is not None:
        raise NotImplementedError("specifying a root group for the tree has not been implemented")
    if append_dim is not None:
        raise NotImplementedError(
            "specifying ``append_dim`` with ``DataTree.to_zarr`` has not been implemented"
        )
    encoding = dict(encoding or {})
    if set(encoding) - set(tree.groups):
        raise ValueError(
            f"unexpected encoding group name(s) provided: {set(encoding) - set(tree.groups)}"
        )
    # shards= and chunks= by dimension name apply to every node that has the dimension,
    # as tree.chunk({...}) does: refused only for a name no node has
    dims = {d for node in tree.subtree for d in node.dims}
    specs = {k: kwargs.pop(k) for k in ("shards", "chunks") if k in kwargs}
    for name, spec in specs.items():
        check_spec(name, spec, dims, holder="no node of the tree has")
    writes = []
    for rel_path, node in tree.subtree_with_keys:
        at_root = node is tree
        ds = node.to_dataset(inherit=at_root)
        write = DatasetWrite(
            ds,
            store,
            options,
            None,
            mode=mode,
            group=None if at_root else rel_path,
            encoding=encoding.get(node.path),
            compute=False,
            consolidated=False,
            **{name: _on_dims(spec, ds.dims) for name, spec in specs.items()},
            **kwargs,
        )
        writes.append(write.run())
        mode = "a" if mode in (None, "w", "w-") else mode  # the root made the store
    stores = dask.compute(*writes, **(chunkmanager_store_kwargs or {})) if compute else None
    if consolidated or consolidated is None:  # as xarray: consolidated unless told not to
        root = zarr.open_group(store, mode="r+", storage_options=kwargs.get("storage_options"))
        consolidate_metadata(root.store_path)
    if not compute:
        return writes[0] if len(writes) == 1 else dask.delayed(list)(writes)
    assert stores is not None
    return stores[0]
