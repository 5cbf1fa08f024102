"""``shardwise.to_zarr``: xarray Datasets, DataArrays and DataTrees (and, handed on to
:mod:`shardwise.array.api`, single dask arrays) written to sharded Zarr v3, one task per
shard.

The metadata step is xarray's own (``ZarrStore.store`` through zarr-python), so the
arrays, attributes and CF encodings are exactly what ``Dataset.to_zarr`` writes. Only
the data step differs: xarray hands every dask variable to an ``ArrayWriter``, and
shardwise's writer captures them instead of calling ``dask.array.store``
(:mod:`shardwise.xarray.metadata_step`), then builds its own graph
(:func:`shardwise.array.plan.data_write`, the dask-array path's too) in which exactly
one task writes each shard.

Before anything is written the whole metadata step runs once against a copy-on-write
view of the store (:class:`shardwise.io.overlay.OverlayStore`), so bad input fails with
the store untouched; and ``mode="w"`` refuses to replace a store the data is read from.
"""

from __future__ import annotations

import functools
from collections.abc import Hashable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from typing import Any, Literal

import shardwise._compat as _compat
import shardwise.format.rectilinear as rl
from shardwise.array.api import array_to_zarr, dask_call, is_array
from shardwise.array.plan import data_write
from shardwise.array.plan import independent_writers as plan_independent_writers
from shardwise.errors import (
    ArgumentError,
    ConflictError,
    ShardwiseError,
    WriteError,
    incomplete_append,
    is_client_error,
    is_store_failure,
    naming_metadata_errors,
)
from shardwise.format.metadata import metadata_key
from shardwise.graph.options import WriteOptions
from shardwise.graph.progress import compute as compute_with_progress
from shardwise.graph.tasks import merge_sessions, retries, tries
from shardwise.graph.write import finish_graph
from shardwise.io.icechunk import check_dataset, icechunk_session, merge_into, refuse_commit
from shardwise.io.reader import ArrayReader
from shardwise.io.staged import StagedWrite, around_data, staged_write
from shardwise.io.stores import check_apart, check_replaceable, location
from shardwise.xarray.encoding import ShardSpec, SizeSpec
from shardwise.xarray.metadata_step import (
    Capture,
    append_transaction,
    grow_grids,
    metadata_step,
    validate,
)

__all__ = ["to_zarr"]


# -- a write must not replace what it reads ---------------------------------------------
def _refuse_overwriting_sources(
    obj: Any, store: Any, storage_options: Any, path: str | None
) -> None:
    """Refuse ``mode="w"`` where the destination is, holds or lies inside a store the
    data is read from lazily: replacing it first would lose the values still to be
    read."""
    if store is None:
        return

    dst = location(store, path, storage_options)
    for src in _read_locations(obj):
        check_apart(
            src,
            dst,
            advice="Write to another location, or load the data first (.load()) if it "
            "fits in memory. Nothing was written.",
        )


def _read_locations(obj: Any) -> Iterator[Any]:
    """The stores (with the array's path) that ``obj``'s lazy data reads from: arrays
    opened with shardwise (``ArrayReader``) or zarr-python, found through xarray's lazy
    wrappers and dask's ``from_array`` layers."""
    import xarray as xr

    if isinstance(obj, xr.DataTree):
        datas = [v for node in obj.subtree for v in node.variables.values()]
    elif isinstance(obj, xr.Dataset):
        datas = list(obj.variables.values())
    elif isinstance(obj, xr.DataArray):
        datas = [obj.variable, *obj.coords.variables.values()]
    else:
        datas = [obj]
    import zarr

    seen: set[int] = set()
    for data in datas:
        # a Variable's lazily indexed array (.data would load it)
        data = _compat.lazy_data(data)
        graph = getattr(data, "dask", None)
        wrapped = list(_graph_sources(graph)) if graph is not None else [data]
        for inner in wrapped:
            for _ in range(32):  # down xarray's wrappers (.array) to the reader
                if id(inner) in seen:
                    break
                seen.add(id(inner))
                if isinstance(inner, ArrayReader):
                    yield location(inner.store, inner.info.data_prefix)
                    break
                if isinstance(inner, zarr.Array):
                    yield location(inner.store_path)
                    break
                nxt = next(
                    (getattr(inner, a) for a in ("reader", "array", "_array") if hasattr(inner, a)),
                    None,
                )
                if nxt is None:
                    break
                inner = nxt


def _refuse_array_options(
    component: Any, return_stored: bool, overwrite: Any, zarr_kwargs: Mapping[str, Any]
) -> None:
    """dask's ``to_zarr`` options, and zarr-python's creation arguments, are for one dask
    array: with a Dataset they are refused (a keyword ``Dataset.to_zarr`` does not take
    is the ``TypeError`` Python raises for it)."""
    if zarr_kwargs:
        raise ArgumentError(
            "to_zarr got keywords it takes only with a dask array",
            expected="Dataset.to_zarr's keywords (and shards=, chunks=, write_order=...)",
            found=", ".join(sorted(zarr_kwargs)),
            advice="Give codecs and other array options per variable in encoding=, e.g. "
            "encoding={'v': {'compressors': ...}}. Nothing was written.",
        )
    given = {"component": component, "overwrite": overwrite, "return_stored": return_stored}
    if names := sorted(k for k, v in given.items() if v not in (None, False)):
        raise WriteError(
            "options for a single dask array were given with a Dataset",
            expected="group= and mode= for a Dataset (mode='w' replaces it)",
            found=", ".join(names),
            advice="Use group= for where the Dataset goes and mode='w' to replace it. "
            "Nothing was written.",
        )


def _graph_sources(graph: Any) -> Iterator[Any]:
    """The objects a dask graph reads from: the values of its ``original-`` layers
    (``from_array``'s, and the fan-out read's), and, for sources put in every task
    (``inline_array=True``), the arguments of the first task of every other layer held
    as a plain mapping (one task looked at per layer: each task of such a layer takes
    the same source)."""
    from dask.task_spec import DataNode, Task

    for name, layer in graph.layers.items():
        if name.startswith("original-"):
            yield from (getattr(v, "value", v) for v in layer.values())
            continue
        mapping = getattr(layer, "mapping", None)
        if not isinstance(mapping, dict) or not mapping:
            continue  # a layer built on demand (blockwise): its tasks take keys, not sources
        task = next(iter(mapping.values()))
        for _ in range(4):  # a getter task around a ShardSource task around the source
            if not isinstance(task, Task):
                break
            args = [a.value if isinstance(a, DataNode) else a for a in task.args]
            yield from (a for a in args if not isinstance(a, Task))
            task = next((a for a in args if isinstance(a, Task)), None)


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


def _naming_client_errors(write: Any) -> Any:
    """``to_zarr`` with an object-store client's own error (obstore's ``GenericError``,
    botocore's...) or a store's plain ``OSError`` (s3fs's for a 503 that outlasted its
    retries, a full disk), a reset connection or a timeout, from a request shardwise
    does not make itself (zarr-python's and xarray's, while they open and plan) raised
    as a :class:`StoreIOError` naming the array or group and its metadata document, the
    store's error as the cause. The ``OSError`` subclasses that answer a question
    (``FileNotFoundError``, ``FileExistsError``, ``PermissionError``...) go through as
    they are."""

    @functools.wraps(write)
    def call(*args: Any, **kw: Any) -> Any:
        try:
            return write(*args, **kw)
        except Exception as e:
            if not is_store_failure(e):  # (shardwise's own errors name where already)
                raise
            group = args[3] if len(args) > 3 else kw.get("group")
            array = is_array(args[0] if args else kw.get("obj"))
            where = (kw.get("path") or kw.get("component") if array else group) or ""
            with naming_metadata_errors(
                "writing",
                metadata_key(where),
                "The store failed while the write was opened or planned, before its data "
                "was written. Run it again.",
            ):
                raise e from None

    return call


@_naming_client_errors
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
    path: str | None = None,
    compressors: Any = None,
    filters: Any = None,
    serializer: Any = None,
    fill_value: Any = None,
    attributes: Mapping[str, Any] | None = None,
    dimension_names: Any = None,
    commit: str | None = None,
    component: str | None = None,
    return_stored: bool = False,
    overwrite: bool | None = None,
    independent_writers: bool | None = None,
    progress: bool = False,
    **zarr_array_kwargs: Any,
) -> Any:
    """Write an xarray Dataset (or DataArray) to a Zarr store, as ``Dataset.to_zarr``
    does, with exactly one dask task writing each shard; or one ``dask.array.Array``
    (see "dask arrays" below).

    Takes ``Dataset.to_zarr``'s arguments and per-variable encodings (``chunks``,
    ``shards``, ``compressors``, ``filters``, ``serializer``, ``dtype``, ``_FillValue``,
    ``scale_factor``, ``add_offset``, ``units``, ``calendar``...). Dask chunks of any
    size and alignment are accepted and never rechunked; ``safe_chunks`` and
    ``align_chunks`` are accepted for compatibility and not needed.

    Extra arguments:

    shards, chunks
        Shard and inner chunk sizes for every new variable: a mapping from dimension
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
    write_order
        How inner chunks are laid out in a shard: ``"morton"`` (Z-order) or ``"C"``.
    shards_per_task
        For tiny shards: let one task write about this many shards, by grouping
        neighbouring dask chunks (never splitting one) that hold fewer; ``"auto"``
        groups toward dask's ``array.chunk-size`` of data per task. ``None`` (default):
        one task per dask chunk, fused with the tasks that make the chunk.
    encode_split
        For few large shards: split the encoding of each shard into about this many
        tasks (cutting dask chunks at inner chunk boundaries; one task per shard still
        makes the single put), so that every thread of the cluster works on them.
        ``"auto"``: only when the shards written are fewer than the threads, into about
        threads / shards parts of at least 8 MiB. ``1``: never. ``None`` (default):
        dask config ``shardwise.encode-split``, itself ``"auto"`` by default.
    independent_writers
        Whether other jobs (scripts, clusters, pods) may write the same arrays while
        this one runs. ``True`` (the default, or dask config
        ``shardwise.independent-writers``): a shard this write covers in part is merged
        with the stored one and put only if that is unchanged since it was read, else
        read and merged again (optimistic concurrency); an append grows the array's
        metadata the same way. Shards a task covers whole are put as they are. Where
        the store has no such put (``ZipStore``, fsspec file systems other than S3) or
        the array is written through ``dask.array.store`` (Zarr v2, variable-length
        strings), a write that would merge into an existing array is refused. ``False``:
        this job is the only writer; plain puts, the last one wins.
    progress
        Show a bar of the write's tasks while it computes (tqdm's auto mode: a widget in
        a notebook, text on stderr in a terminal; the cluster's progress when a
        ``distributed.Client`` is the default scheduler). Off by default, as dask's own.

    Returns xarray's ``ZarrStore``, or with ``compute=False`` a ``dask.delayed`` that
    writes the data (the metadata is written already) and returns it.

    Icechunk
        ``store`` may be a writable ``icechunk.Session`` (or its ``session.store``): the
        metadata is written in the session, the data through a fork of it
        (``session.fork()``) whose copies the tasks hand back, merged and then merged
        into the session. Nothing is committed unless ``commit="message"`` is given;
        then the snapshot id is returned. With ``compute=False`` the delayed computes to
        the merged fork session: ``session.merge(delayed.compute())``, then commit.

    dask arrays
        ``to_zarr(x, store, path="a/b", ...)`` writes the ``dask.array.Array`` ``x`` as
        one Zarr array at ``path`` (default: the store's root), created with
        zarr-python, with the same graph and guarantees. ``shards``: ``"dask"`` (the
        default: every dask chunk becomes a shard; irregular chunks give a rectilinear
        grid), ``"auto"``, a tuple of sizes per axis (``-1``: the whole axis) or a dict
        by axis number; ``chunks`` (inner chunks) likewise, or ``"auto"`` (the
        default). ``compressors``, ``filters``, ``serializer``, ``fill_value``,
        ``attributes`` and ``dimension_names`` are zarr-python's ``create_array``
        arguments, for a new array only. ``mode``: ``"w-"`` (default: refuse an
        existing array), ``"w"`` (replace it), ``"a"`` (with ``append_dim=``, an axis
        number, append along it), ``"r+"`` (with ``region=``, a tuple of slices or a
        dict of them by axis number, write into part of it). ``zarr_format=2`` writes an
        unsharded Zarr v2 array. Returns the ``zarr.Array``, or with ``compute=False``
        a ``dask.delayed`` that writes the data (the metadata is written already) and
        returns it.

        ``dask.array.to_zarr``'s parameters, with dask's meaning: ``component`` (or
        ``name``) is ``path``; ``overwrite=True`` is ``mode="w"``, ``False``
        ``mode="w-"``; ``store`` may be a ``zarr.Array`` to write into (``mode="r+"``,
        ``region=`` allowed); ``return_stored=True`` returns the part written as a dask
        array read back lazily (with ``compute=False``, computing it writes first); any
        other keyword goes to zarr-python's ``create_array`` for a new array
        (``chunk_key_encoding``, ``config``, ``order``...; ``dtype`` casts the data,
        ``shape`` must be its shape). Without ``zarr_format``, a new store gets
        zarr-python's ``default_zarr_format`` setting. Chunks of size 0 own no shard.
    """

    # (every write option refused here, before anything is read or written)
    options = WriteOptions(
        write_order=write_order,
        shards_per_task=shards_per_task,
        encode_split=encode_split,
        write_empty_chunks=write_empty_chunks,
        progress=progress,
    )
    guarded = plan_independent_writers(independent_writers)
    if is_array(obj):  # dask's spelling: component=, overwrite=, a zarr.Array target
        store, path, mode, zarr_array_kwargs = dask_call(
            store, path, component, mode, overwrite, storage_options, zarr_array_kwargs
        )
    else:
        _refuse_array_options(component, return_stored, overwrite, zarr_array_kwargs)
    if mode == "w":  # replacing what is there: never what the data is read from
        where = path if is_array(obj) else group
        check_replaceable(store, where, storage_options)
        _refuse_overwriting_sources(obj, store, storage_options, where)
    # zarr-python's create_array arguments, for one dask array written at `path`
    creation = {
        "compressors": compressors,
        "filters": filters,
        "serializer": serializer,
        "fill_value": fill_value,
        "attributes": attributes,
        "dimension_names": dimension_names,
    }
    if is_array(obj):
        dataset_only = {
            "group": group,
            "encoding": encoding or None,
            "consolidated": consolidated,
            "chunkmanager_store_kwargs": chunkmanager_store_kwargs,
        }
        if given := sorted(k for k, v in dataset_only.items() if v is not None):
            raise WriteError(
                "options for Datasets were given with a dask array",
                expected="path=, shards=, chunks=, compressors=, fill_value=, attributes=... "
                "for one array",
                found=", ".join(given),
                array=(path or "").strip("/") or "/",
                advice="Give the array's place with path= and its codecs as keywords. "
                "Nothing was written.",
            )
        if store is None:
            from zarr.storage import MemoryStore

            store = MemoryStore()
        return array_to_zarr(
            obj,
            store,
            mode=mode,
            region=region,
            append_dim=append_dim,  # type: ignore[arg-type]
            compute=compute,
            zarr_format=zarr_format,
            storage_options=storage_options,
            options=options,
            commit=commit,
            path=path or "",
            creation={"shards": shards, "chunks": chunks, **creation},
            return_stored=return_stored,
            zarr_kwargs=zarr_array_kwargs,
            guarded=guarded,
        )
    if given := sorted(k for k, v in {"path": path, **creation}.items() if v is not None):
        raise WriteError(
            "options for a single dask array were given with a Dataset",
            expected="group= and encoding= for the variables of a Dataset",
            found=", ".join(given),
            advice="Give codecs and fill values per variable in encoding=, e.g. "
            "encoding={'v': {'compressors': ...}}. Nothing was written.",
        )
    session = icechunk_session(store)
    if session is None and commit is not None:
        refuse_commit(store)
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
            mode=mode,
            group=group,
            encoding=encoding,
            compute=compute,
            consolidated=consolidated,
            append_dim=append_dim,
            region=region,
            storage_options=storage_options,
            zarr_format=zarr_format,
            write_empty_chunks=write_empty_chunks,
            chunkmanager_store_kwargs=chunkmanager_store_kwargs,
            shards=shards,
            chunks=chunks,
            write_order=write_order,
            shards_per_task=shards_per_task,
            encode_split=encode_split,
            independent_writers=guarded,
        )
    ds = _as_dataset(obj)
    encoding = dict(encoding or {})
    if store is None:
        from zarr.storage import MemoryStore

        store = MemoryStore()
    if session is not None:
        check_dataset(ds, session, compute=compute, commit=commit, zarr_format=zarr_format)
        store = session.store
    # an append that other jobs may make at the same time: its metadata step runs on a
    # copy-on-write view of the store and is committed with conditional puts (see
    # _append_transaction); when another job committed first, it runs again
    txn = append_transaction(
        store,
        storage_options,
        mode,
        append_dim,
        session,
        guarded,
        # (what the call's token is of: its claim of rows is recorded under it)
        (_data_of(ds), str(append_dim), group or ""),
    )
    as_given = (ds, encoding, mode)
    with rl.enabled():  # zarr-python's flag, for this call only
        for _ in tries() if txn is not None else range(1):
            ds, encoding, mode = as_given
            try:
                mode, ds, encoding, existing, zarr_format, grids = validate(
                    ds,
                    store,
                    mode,
                    group,
                    encoding,
                    append_dim,
                    region,
                    storage_options,
                    zarr_format,
                    shards,
                    chunks,
                    guarded=guarded,
                )
            except ShardwiseError:
                raise
            except ValueError as e:
                raise WriteError(str(e).rstrip("."), advice="Nothing was written.") from e

            # the real metadata step (numpy data is written here, as xarray does), on
            # a view of the store where an append's commit or a write's new arrays
            # come after their data (see _staged)
            grows = txn is not None or append_dim is not None or region is not None
            staged = _staged(store, storage_options, group, mode, existing, grows, session, compute)
            overlay = txn.view() if txn is not None else None if staged is None else staged.view()
            zstore = _compat.get_writable_zarr_store(
                store if overlay is None else overlay,
                group=group,
                # (a try reads each array's own document, for its version; the
                # metadata is consolidated after the commit, see below)
                consolidated=consolidated if txn is None else False,
                storage_options=storage_options if overlay is None else None,
                zarr_format=zarr_format,
                write_empty_chunks=write_empty_chunks,
                mode=mode,  # type: ignore[arg-type]
                append_dim=append_dim,
                region=region,
                safe_chunks=False,
            )
            try:
                grow_grids(zstore, ds, existing, append_dim, shards == "dask")
                capture = Capture(
                    dry=False,
                    grids=grids,
                    # numpy data into existing arrays through the shard writer's
                    # conditional puts (an Icechunk session's commit checks for conflicts
                    # itself; an append's is written with its dask data, after the commit)
                    guarded=guarded and session is None,
                    existing=existing,
                    defer=overlay is not None,
                    write=functools.partial(
                        _write_now, options=replace(options, shards_per_task=None, encode_split=1)
                    ),
                )
                metadata_step(ds, zstore, encoding, capture)
            except BaseException:
                if overlay is None:  # (a view is not closed: that would close the store)
                    zstore.close()
                raise
            if txn is None:
                if staged is not None:  # (the data goes to the real store)
                    capture.items = [(s, staged.bind(t), r, o) for s, t, r, o in capture.items]
                break
            if txn.found_claims(overlay):
                continue  # an earlier run of this call claimed rows: the next try writes them
            if txn.commit(overlay, zstore, append_dim):  # stored: the data goes there too
                with _claimed_rows_reported(capture.items, append_dim, group, txn):
                    zstore, capture.items = txn.reopen(
                        store,
                        group,
                        storage_options,
                        zarr_format,
                        mode,
                        append_dim,
                        capture.items,
                    )
                break
            # (another job appended first: plan again, after a pause)
        else:
            raise ConflictError(
                "other jobs kept appending to the dataset",
                expected="its metadata unchanged between reading it and growing it",
                found=f"it changed every time, {retries()} tries",
                key=group or "/",
                advice="Nothing was written. Run the append again.",
            )

    # the data step: one graph for all dask variables (into an Icechunk session's fork)
    fork = session.fork() if session is not None and capture.items else None
    writes = []
    for source, target, region_, offset in capture.items:
        fresh = mode == "w" or target.basename not in existing  # no shard exists yet
        writes.append(
            data_write(
                source,
                target,
                region_,
                offset,
                options=options,
                fresh=fresh,
                fork=fork,
                guarded=guarded,
            )
        )
    # after the data: an append's claims released, the metadata consolidated (as
    # xarray's metadata step does, which a try runs without)
    end = None if txn is None else functools.partial(txn.end, consolidated is not False)
    if not compute:
        if fork is not None:  # the session's store stays here: it does not pickle
            zstore.close()
            return finish_graph(writes, merge_sessions)  # the fork sessions as one
        return finish_graph(writes, _finish, zstore, end)
    try:
        with around_data(staged):
            if writes:
                # (a fork's commit is all or none: nothing claimed until then)
                claimed = append_dim if fork is None else None
                with _claimed_rows_reported(capture.items, claimed, group, txn):
                    done = compute_with_progress(
                        *writes,
                        progress=options.progress,
                        desc="to_zarr",
                        **(chunkmanager_store_kwargs or {}),
                    )
                if fork is not None:
                    merge_into(session, done)
        if end is not None:
            end()
    finally:
        zstore.close()
    if staged is not None:  # (xarray's store over the real store, not the staging view)
        zstore = _compat.zarr_store_on(zstore, staged.base.store)
    if commit is not None:
        return session.commit(commit)
    return zstore


def _staged(
    store: Any,
    storage_options: Any,
    group: str | None,
    mode: str,
    existing: set[str],
    grows: bool,
    session: Any,
    compute: bool,
) -> StagedWrite | None:
    """How a write that creates arrays (``mode`` ``"w"``, ``"w-"``, or ``"a"`` that
    ``grows`` nothing: no ``append_dim`` or ``region``) puts their metadata after their
    data, so that a failure leaves no array of fill values
    (:class:`~shardwise.io.staged.StagedWrite`); None for the other writes: appends and
    region writes, an Icechunk session (its commit is all or nothing), and
    ``compute=False``, whose metadata is there at once, as xarray's is, for region writes
    to fill."""
    if grows or session is not None or not compute or mode not in ("w", "w-", "a"):
        return None
    return staged_write(store, storage_options, group, replaces=mode == "w", existing=existing)


@contextmanager
def _claimed_rows_reported(
    items: Any, append_dim: Hashable | None, group: str | None, txn: Any
) -> Iterator[None]:
    """Inside the block (after an append's commit claimed its rows), a store error (or
    an object-store client's) becomes an :class:`IncompleteAppendError` naming the rows
    claimed and how to complete them; nothing changes outside an append."""
    try:
        yield
    except Exception as e:
        named = isinstance(e, ShardwiseError | OSError) or is_client_error(e)
        rows = _claimed(items, append_dim) if append_dim is not None and named else {}
        if not rows:
            raise
        key = f"{group.strip('/')}/zarr.json" if group and group.strip("/") else "zarr.json"
        dim, lo, hi = next(iter(rows.values()))
        where = f"{{{dim!r}: slice({lo}, {hi})}}"
        index = [p for p in rows if p.rpartition("/")[2] == str(append_dim)]
        also = (
            f", and its coordinate {index[0]!r}, which region writes leave as it is: "
            f"zarr.open_array(store, path={index[0]!r}, mode='r+')[{lo}:{hi}] = "
            f"ds[{str(append_dim)!r}].values"
            if index
            else ""
        )
        recorded = txn is not None and bool(txn.claimed)
        raise incomplete_append(e, rows, region=where, key=key, also=also, recorded=recorded) from e


def _data_of(ds: Any) -> tuple[Any, ...]:
    """What a Dataset's append token is of: each variable's name, dimensions and data
    (a dask array's graph name, numpy values as they are), not xarray's own token of
    the Dataset (its pandas indexes need pyarrow in some dask releases)."""
    import numpy as np

    return tuple(
        (str(name), var.dims, getattr(var.data, "name", None) or np.asarray(var.values))
        for name, var in sorted(ds.variables.items(), key=lambda item: str(item[0]))
    )


def _claimed(items: Any, append_dim: Hashable) -> dict[str, tuple[str, int, int]]:
    """The rows an append's data step writes along ``append_dim``, per array it grew."""
    rows = {}
    for source, target, region, _ in items:
        dims = list(getattr(target.metadata, "dimension_names", None) or ())
        if append_dim in dims:
            axis = dims.index(append_dim)
            start = region[axis].start or 0
            rows[target.path] = (str(append_dim), int(start), int(start + source.shape[axis]))
    return rows


def _tree_to_zarr(
    tree: Any,
    store: Any,
    *,
    mode: str | None,
    group: str | None,
    encoding: Mapping[str, Any] | None,
    compute: bool,
    consolidated: bool | None,
    append_dim: Hashable | None,
    chunkmanager_store_kwargs: dict[str, Any] | None,
    **options: Any,
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
    if store is None:
        from zarr.storage import MemoryStore

        store = MemoryStore()
    writes = []
    for rel_path, node in tree.subtree_with_keys:
        at_root = node is tree
        writes.append(
            to_zarr(
                node.to_dataset(inherit=at_root),
                store,
                mode=mode,
                group=None if at_root else rel_path,
                encoding=encoding.get(node.path),
                compute=False,
                consolidated=False,
                **options,
            )
        )
        mode = "a" if mode in (None, "w", "w-") else mode  # the root made the store
    stores = dask.compute(*writes, **(chunkmanager_store_kwargs or {})) if compute else None
    if consolidated or consolidated is None:  # as xarray: consolidated unless told not to
        root = zarr.open_group(store, mode="r+", storage_options=options.get("storage_options"))
        zarr.consolidate_metadata(root.store_path)
    if not compute:
        return writes[0] if len(writes) == 1 else dask.delayed(list)(writes)
    assert stores is not None
    return stores[0]


def _write_now(
    source: Any,
    target: Any,
    region: tuple[slice, ...],
    offset: tuple[int, ...],
    *,
    options: WriteOptions,
) -> None:
    """Write numpy data into an existing array now, through the shard writer with
    conditional puts (see :class:`~shardwise.xarray.metadata_step.Capture`), on this
    thread, one task per shard."""
    import dask

    write = data_write(
        source,
        target,
        region,
        offset,
        options=options,
        fresh=False,
        guarded=True,
    )
    dask.compute(write, scheduler="sync")


def _finish(zstore: Any, end: Any, *writes: Any) -> Any:
    del writes  # the writes are done before the store is closed
    if end is not None:
        end()
    zstore.close()
    return zstore
