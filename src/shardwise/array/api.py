"""dask arrays without xarray: the shardwise counterparts of ``dask.array.to_zarr`` and
``dask.array.from_zarr`` (the latter in ``shardwise.array.read``, re-exported here).

``to_zarr`` creates (or opens) one Zarr array with zarr-python, so its metadata
(codecs, fill value, attributes, dimension names) is zarr-python's own, and writes the
data with ``shardwise.array.store.store_arrays``, the primitive the xarray path
ends in too: one task per shard, any dask chunking, partial shards merged by their one
owner. ``from_zarr`` reads an array with the fan-out graph of
``shardwise.graph.fanout``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any, Literal

from shardwise._flags import rectilinear_grids
from shardwise.array.call import checked_mode, dask_call, given_shape_and_dtype, is_array
from shardwise.array.claims import append_failed, call_token, claim_of, release
from shardwise.array.create import create, plan_new
from shardwise.array.decisions import (
    check_guardable,
    check_known_chunks,
    default_format,
    guard_of,
    warn_unprotected,
    without_empty_blocks,
)
from shardwise.array.existing import existing_array, grown_grid, into_existing, meta_key
from shardwise.array.grow import append_guard, grow, grow_if, metadata_version
from shardwise.array.options import WriteOptions
from shardwise.array.read import from_zarr
from shardwise.array.replacing import check_not_replacing_sources
from shardwise.array.store import store_arrays
from shardwise.errors import (
    ConflictError,
    ShardwiseError,
    WriteError,
    is_store_failure,
    naming_metadata_errors,
)
from shardwise.format.grid import check_write_geometry
from shardwise.format.metadata import metadata_key
from shardwise.io.capabilities import icechunk_session
from shardwise.io.icechunk import check_session, refuse_commit
from shardwise.io.retry import retries, tries
from shardwise.io.staged import StagedWrite

__all__ = ["from_zarr", "is_array", "naming_client_errors", "to_zarr"]


def naming_client_errors(where: Callable[..., str]) -> Callable[[Any], Any]:
    """A writer (``to_zarr``) whose object-store client's own error (obstore's
    ``GenericError``, botocore's...) or store's plain ``OSError`` (s3fs's for a 503 that
    outlasted its retries, a full disk), reset connection or timeout, from a request
    shardwise does not make itself (zarr-python's and xarray's, while they open and
    plan), is raised as a ``StoreIOError`` naming the array or group (``where`` of the
    call's arguments) and its metadata document, the store's error as the cause. The
    ``OSError`` subclasses that answer a question (``FileNotFoundError``,
    ``FileExistsError``, ``PermissionError``...) go through as they are."""

    def decorate(write: Any) -> Any:
        @functools.wraps(write)
        def call(*args: Any, **kw: Any) -> Any:
            try:
                return write(*args, **kw)
            except Exception as e:
                if not is_store_failure(e):  # (shardwise's own errors name where already)
                    raise
                with naming_metadata_errors(
                    "writing",
                    metadata_key(where(*args, **kw)),
                    "The store failed while the write was opened or planned, before its "
                    "data was written. Run it again.",
                ):
                    raise e from None

        return call

    return decorate


def _where(x: Any, store: Any = None, path: str | None = None, **kw: Any) -> str:
    """The path a dask array's ``to_zarr`` call writes, from its arguments."""
    return path or kw.get("component") or ""


@naming_client_errors(_where)
def to_zarr(
    x: Any,
    store: Any = None,
    path: str | None = None,
    *,
    mode: str | None = None,
    region: Any = None,
    append_dim: int | None = None,
    compute: bool = True,
    zarr_format: int | None = None,
    storage_options: dict[str, Any] | None = None,
    shards: Any = None,
    chunks: Any = None,
    write_order: str = "morton",
    shards_per_task: int | Literal["auto"] | None = None,
    encode_split: int | Literal["auto"] | None = None,
    write_empty_chunks: bool | None = None,
    independent_writers: bool | Literal["auto"] | None = None,
    progress: bool = False,
    compressors: Any = None,
    filters: Any = None,
    serializer: Any = None,
    fill_value: Any = None,
    attributes: Mapping[str, Any] | None = None,
    dimension_names: Any = None,
    commit: str | None = None,
    component: str | None = None,
    overwrite: bool | None = None,
    return_stored: bool = False,
    **zarr_array_kwargs: Any,
) -> Any:
    """Write a dask array as one Zarr array, created with zarr-python, with exactly one
    dask task writing each shard: the counterpart of ``dask.array.to_zarr``.

    Parameters
    ----------
    x : dask.array.Array
        The array to write. Chunks of size 0 own no shard.
    store : str, os.PathLike, zarr.abc.store.Store, zarr.Array or icechunk.Session, optional
        Where to write: a path, a URL (with ``storage_options``), a zarr-python
        ``Store``, a writable Icechunk session, or a ``zarr.Array`` to write into (as
        dask takes one: ``mode="r+"``, ``region=`` allowed). None: a new
        ``zarr.storage.MemoryStore``.
    path : str, optional
        The array's path in the store; its root when None. ``component`` (or
        ``name``) is dask's name for it.
    mode : {"w-", "w", "a", "r+"}, optional
        ``"w-"`` (the default: refuse an existing array), ``"w"`` (replace it), ``"a"``
        (with ``append_dim``, append along it), ``"r+"`` (with ``region``, write into
        part of it).
    region : tuple of slice or dict of int to slice, optional
        The part of the existing array to write, by axis.
    append_dim : int, optional
        The axis to append along.
    compute : bool, default True
        Write now; with False, write the metadata and return a ``dask.delayed`` that
        writes the data.
    zarr_format : {2, 3}, optional
        2 writes an unsharded Zarr v2 array; without it, a new store gets
        zarr-python's ``default_zarr_format`` setting.
    storage_options : dict, optional
        Options of the fsspec file system a URL names (credentials, endpoint).
    shards : "dask", "auto", tuple or dict, optional
        ``"dask"`` (the default: every dask chunk becomes a shard; irregular chunks
        give a rectilinear grid), ``"auto"``, a tuple of sizes per axis (``-1``: the
        whole axis) or a dict by axis number.
    chunks : "auto", tuple or dict, optional
        The inner chunks, likewise; ``"auto"`` by default.
    write_order : {"morton", "C"}, default "morton"
        As :func:`shardwise.to_zarr` takes it.
    shards_per_task : int or "auto", optional
        As :func:`shardwise.to_zarr` takes it.
    encode_split : int or "auto", optional
        As :func:`shardwise.to_zarr` takes it.
    write_empty_chunks : bool, optional
        Whether inner chunks that hold only the fill value are stored; zarr-python's
        ``array.write_empty_chunks`` setting when None.
    independent_writers : bool or "auto", optional
        As :func:`shardwise.to_zarr` takes it.
    progress : bool, default False
        Show a progress bar of the write's tasks.
    compressors : codec or list of codecs, optional
        zarr-python's ``create_array`` argument, for a new array only.
    filters : list of codecs, optional
        zarr-python's ``create_array`` argument, for a new array only.
    serializer : codec, optional
        zarr-python's ``create_array`` argument, for a new array only.
    fill_value : scalar, optional
        zarr-python's ``create_array`` argument, for a new array only.
    attributes : dict, optional
        zarr-python's ``create_array`` argument, for a new array only.
    dimension_names : sequence of str, optional
        zarr-python's ``create_array`` argument, for a new array only.
    commit : str, optional
        With an Icechunk session as the store: commit with this message and return
        the snapshot id.
    component : str, optional
        dask's name for ``path``.
    overwrite : bool, optional
        dask's: True is ``mode="w"``, False ``mode="w-"``.
    return_stored : bool, default False
        Return the part written as a dask array read back lazily (with
        ``compute=False``, computing it writes first).
    **zarr_array_kwargs
        Passed to zarr-python's ``create_array`` for a new array
        (``chunk_key_encoding``, ``config``, ``order``...; ``dtype`` casts the data,
        ``shape`` must be its shape).

    Returns
    -------
    zarr.Array, dask.array.Array, str or dask.delayed.Delayed
        The ``zarr.Array``; with ``return_stored``, the dask array read back; with
        ``commit``, the snapshot id; with ``compute=False``, a ``dask.delayed`` that
        writes the data (the metadata is written already) and returns that.

    Raises
    ------
    shardwise.errors.WriteError, shardwise.errors.ChunksError, shardwise.errors.ArgumentError
        Before anything is written: every option is checked first.

    Examples
    --------
    >>> x = dask.array.random.random((1000, 1000), chunks=(250, 250))
    >>> z = shardwise.array.to_zarr(x, "out.zarr", "t", chunks=(50, 50))  # doctest: +SKIP
    """
    options = WriteOptions(
        write_order=write_order,
        shards_per_task=shards_per_task,
        encode_split=encode_split,
        write_empty_chunks=write_empty_chunks,
        progress=progress,
        independent_writers=independent_writers,
    )
    creation = {
        "shards": shards,
        "chunks": chunks,
        "compressors": compressors,
        "filters": filters,
        "serializer": serializer,
        "fill_value": fill_value,
        "attributes": attributes,
        "dimension_names": dimension_names,
    }
    store, path, mode, extra = dask_call(
        store, path, component, mode, overwrite, storage_options, zarr_array_kwargs
    )
    if mode == "w":  # replacing what is there: never what the data is read from
        check_not_replacing_sources([x], store, storage_options, path)
    if store is None:
        from zarr.storage import MemoryStore

        store = MemoryStore()
    name = path.strip("/") or "/"
    check_known_chunks(x.chunks, name)
    x = given_shape_and_dtype(without_empty_blocks(x), extra, name)
    mode = checked_mode(mode, region, append_dim, name)
    session = icechunk_session(store)
    if session is not None:
        _check_session(session, compute, commit, zarr_format, return_stored, name)
        store = session.store
    elif commit is not None:
        refuse_commit(store, name)
    zarr_format = default_format() if zarr_format is None else zarr_format
    if zarr_format not in (2, 3):
        raise WriteError(
            "unknown zarr_format", expected="2 or 3", found=repr(zarr_format), array=name
        )
    write = _Write(
        store,
        path,
        storage_options,
        mode,
        region,
        append_dim,
        zarr_format,
        {**creation, **extra},
        options,
        session,
        # (a new array's metadata is put after its data, but not where the delayed
        # must leave it there at once, nor in a session, whose commit is all or none)
        stage_metadata=compute and session is None,
    )
    with rectilinear_grids():  # zarr-python reads and writes rectilinear grids with its flag on
        target = write.target(x)
    return write.data(target, compute=compute, commit=commit, return_stored=return_stored)


def _check_session(
    session: Any,
    compute: bool,
    commit: str | None,
    zarr_format: int | None,
    return_stored: bool,
    name: str,
) -> None:
    check_session(session, compute=compute, commit=commit, zarr_format=zarr_format)
    if return_stored:
        raise WriteError(
            "return_stored is not available with an Icechunk session",
            expected="return_stored=False",
            found="return_stored=True",
            array=name,
            advice="Read the array back from the session after it is committed "
            "(shardwise.array.from_zarr(session.store, path)). Nothing was written.",
        )


@dataclass
class _Target:
    """Where a dask-array write goes, its metadata written: the data (cast to the
    array's dtype), the array, the data's place in it, whether the array is new, a new
    array's staged metadata, and the version of the metadata an append grew."""

    x: Any
    arr: Any
    offset: tuple[int, ...]
    fresh: bool
    staged: StagedWrite | None = None
    version: Any = None

    @property
    def region(self) -> tuple[slice, ...]:
        return tuple(slice(o, o + n) for o, n in zip(self.offset, self.x.shape, strict=True))


@dataclass
class _Write:
    """One dask-array write, its arguments checked: ``target`` finds or creates the
    array (an append that other jobs may make at the same time grows it by
    compare-and-swap), ``data`` writes the data with ``store_arrays``."""

    store: Any
    path: str
    storage_options: Any
    mode: str
    region: Any
    append_dim: int | None
    zarr_format: int
    creation: Mapping[str, Any]
    options: WriteOptions
    session: Any
    stage_metadata: bool

    def __post_init__(self) -> None:
        self.name = self.path.strip("/") or "/"
        # the guard against other jobs, worked out once: the options then say whether
        # it is on for this write ("auto" resolved by what the store can do)
        self.guarded = guard_of(self.options, self.store, self.storage_options, self.session)
        self.options = replace(self.options, independent_writers=self.guarded.on)
        # an append that other jobs may make at the same time grows the array's
        # zarr.json only if it is unchanged since this call read it; else it reads
        # again, and so appends after the other job's rows (see grow.grow_if)
        self.guard = append_guard(
            self.store,
            self.path,
            self.storage_options,
            self.mode,
            self.append_dim,
            self.session,
            bool(self.options.independent_writers),
        )
        self.token: str | None = None

    def target(self, x: Any) -> _Target:
        """The array written into, its metadata written (created, or grown by an
        append); refuses what cannot be written before anything is."""
        if self.guard is not None:
            # (its rows are claimed in the array's attributes under this call's token
            # until they are written: run again after a failure, the same call writes
            # them, see claims)
            self.token = call_token(x.name, x.shape, x.dtype.str, self.append_dim)
        arr = None
        for _ in tries():
            # (the version first: were zarr-python to read a newer document, the
            # conditional put below would fail and this would run again)
            version = None if self.guard is None else metadata_version(self.guard)
            arr = existing_array(self.store, self.path, self.storage_options, self.mode, self.name)
            if arr is None:
                return self._new(x)
            found = self._into(x, arr, version)
            if found is not None:
                return found
            # (another job appended first: read it again)
        raise ConflictError(
            "other jobs kept appending to the array",
            expected="its zarr.json unchanged between reading it and growing it",
            found=f"it changed every time, {retries()} tries",
            array=self.name,
            key=meta_key(self.path, arr),
            advice="Nothing was written. Run the append again.",
        )

    def _new(self, x: Any) -> _Target:
        """A new array for ``x``: planned, checked, then created."""
        if self.region is not None:
            raise WriteError(
                "a region write needs an existing array",
                expected=f"a Zarr array at {self.name!r}",
                found="nothing there",
                array=self.name,
                advice="Create it first (mode='w-'), then write regions with mode='r+'.",
            )
        c = self.creation
        plan = plan_new(x, self.name, c["shards"], c["chunks"], self.zarr_format)
        check_write_geometry(
            plan.edges if plan.edges is not None else plan.shards,
            plan.inner,
            x.dtype.itemsize,
            array=self.name,
        )
        # -- everything checked: now write metadata ------------------------------------
        arr, staged = create(
            self.store,
            self.path,
            x,
            plan,
            c,
            self.zarr_format,
            self.mode,
            self.storage_options,
            self.options.write_empty_chunks,
            staged=self.stage_metadata,
        )
        return _Target(x, arr, (0,) * x.ndim, True, staged)

    def _into(self, x: Any, arr: Any, version: Any) -> _Target | None:
        """``x`` going into the existing ``arr``, checked, the array grown by an
        append; None when another job appended first (read it again)."""
        given = sorted(k for k, v in self.creation.items() if v is not None and v != "auto")
        if given:
            raise WriteError(
                "creation options were given for an array that exists",
                expected="no shards, chunks, codecs, fill value, attributes or "
                "dimension names when writing into an existing array",
                found=f"{', '.join(given)} (mode={self.mode!r})",
                array=self.name,
                key=meta_key(self.path, arr),
                advice="Leave them out (the array keeps its own), or replace the "
                "array with mode='w'. Nothing was written.",
            )
        claim = None
        if self.token is not None and arr.metadata.zarr_format == 3:
            claim = claim_of(arr.metadata.attributes, self.token)
        x, offset, new_shape = into_existing(x, arr, self.region, self.append_dim, self.name, claim)
        grown = None if claim is not None else grown_grid(arr, x, self.append_dim, self.name)
        if self.guarded.asked:
            unguarded = check_guardable(
                arr.store_path.store,
                arr,
                tuple((o, o + n) for o, n in zip(offset, x.shape, strict=True)),
                x.dtype,
                fresh=False,
                append=self.append_dim is not None,
                name=self.name,
                key=meta_key(self.path, arr),
                required=self.guarded.required,
            )
            warn_unprotected([unguarded] if unguarded else [])
        if new_shape == arr.shape:
            return _Target(x, arr, offset, False, None, version)
        if self.guard is None:
            return _Target(x, grow(arr, new_shape, grown), offset, False, None, version)
        assert version is not None and self.token is not None and self.append_dim is not None
        axis = self.append_dim % x.ndim
        rows = (self.token, axis, offset[axis], new_shape[axis])
        grown_arr = grow_if(arr, new_shape, grown, self.guard, version, rows)
        return None if grown_arr is None else _Target(x, grown_arr, offset, False, None, version)

    def data(self, t: _Target, *, compute: bool, commit: str | None, return_stored: bool) -> Any:
        """The data of ``t`` written (with ``compute=False``, the delayed that writes
        it): ``store_arrays``, ended by the record of an append's claim taken out."""
        finish: Callable[..., Any] = _done
        if (
            self.guard is not None
            and self.append_dim is not None
            and t.arr.metadata.zarr_format == 3
        ):
            key = t.version[0] if t.version else ""
            finish = functools.partial(_released, self.guard[0], key, self.token or "")
        appends = self.append_dim is not None and not t.fresh
        written = store_arrays(
            [t.x],
            [t.arr],
            [t.region],
            options=self.options,
            fresh=[t.fresh],
            compute=compute,
            session=self.session,
            staged=t.staged,
            finish=finish,
            head=(t.arr,),
            reported=functools.partial(self._append_reported, t, finish) if appends else None,
        )
        if self.session is not None:
            return self.session.commit(commit) if compute and commit is not None else written
        if return_stored:
            stored = _stored(t.arr, t.offset, t.x.shape)
            return stored if compute else _after(stored, written)
        return written

    @contextmanager
    def _append_reported(self, t: _Target, finish: Any) -> Iterator[None]:
        """A failure of an append's data step (its metadata has claimed the rows) as an
        ``shardwise.errors.IncompleteAppendError`` naming them."""
        try:
            yield
        except (ShardwiseError, OSError) as e:
            assert self.append_dim is not None
            axis = self.append_dim % len(t.offset)
            dims = getattr(t.arr.metadata, "dimension_names", None) or ()
            raise append_failed(
                e,
                name=self.name,
                key=meta_key(self.path, t.arr),
                dim=str(dims[axis]) if axis < len(dims) and dims[axis] else f"axis {axis}",
                offset=t.offset,
                shape=t.x.shape,
                axis=axis,
                recorded=finish is not _done,
            ) from e


def _stored(arr: Any, offset: tuple[int, ...], shape: tuple[int, ...]) -> Any:
    """The part of ``arr`` just written (``shape`` at ``offset``), read lazily with the
    fan-out graph (one dask chunk per shard): what ``return_stored=True`` returns, as
    dask's ``to_zarr`` does, so that a computation can go on from what is stored."""
    whole = from_zarr(arr.store_path.store, arr.path)
    return whole[tuple(slice(o, o + n) for o, n in zip(offset, shape, strict=True))]


def _after(x: Any, write: Any) -> Any:
    """The dask array ``x`` with every task of it waiting for the delayed ``write``:
    the layers of ``x``'s graph that depend on nothing (the reader object the read tasks
    take) become tasks that take the write's result too. (dask's
    ``graph_manipulation.bind`` loses the task references of the read graph.)"""
    import dask.array as da
    from dask.highlevelgraph import HighLevelGraph
    from dask.task_spec import DataNode, Task, TaskRef

    graph = x.__dask_graph__()
    layers: dict[str, Any] = dict(write.dask.layers)
    deps: dict[str, set[str]] = {k: set(v) for k, v in write.dask.dependencies.items()}
    ends = {name for name, layer in write.dask.layers.items() if write.key in layer}
    for name, layer in graph.layers.items():
        if graph.dependencies[name] or name in layers:
            layers.setdefault(name, layer)
            deps.setdefault(name, set(graph.dependencies[name]))
            continue
        layers[name] = {
            key: Task(key, _first, DataNode(None, value), TaskRef(write.key))
            for key, value in dict(layer).items()
        }
        deps[name] = set(ends)
    return da.Array(HighLevelGraph(layers, deps), x.name, x.chunks, meta=x._meta)


def _first(value: Any, *_: Any) -> Any:
    """``value``, once what the other arguments stand for has run."""
    return value


def _done(arr: Any, *_: Any) -> Any:
    """The end of a write: the array written."""
    return arr


def _released(guard: Any, key: str, token: str, arr: Any, *_: Any) -> Any:
    """The end of an append that recorded its claim: the record taken out of the
    array's ``zarr.json`` at ``key`` (its rows are written); the array written."""
    release(guard, key, token)
    return arr
