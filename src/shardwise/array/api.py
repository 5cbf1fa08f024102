"""dask arrays without xarray: the shardwise counterparts of ``dask.array.to_zarr`` and
``dask.array.from_zarr`` (the latter in :mod:`shardwise.array.read`, re-exported here).

``shardwise.to_zarr(x, store, path=...)`` with a ``dask.array.Array`` creates (or
opens) one Zarr array with zarr-python, so its metadata (codecs, fill value, attributes,
dimension names) is zarr-python's own, and writes the data with the same graph as the
xarray path (:func:`shardwise.graph.write.store_dask_array`): one task per shard, any dask
chunking, partial shards merged by their one owner. :func:`from_zarr` reads an array
with the fan-out graph of :mod:`shardwise.graph.read`.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

import shardwise.format.rectilinear as rl
from shardwise.array.claims import append_failed, call_token, claim_of, release
from shardwise.array.grow import append_guard, grow, grow_if, metadata_version
from shardwise.array.plan import (
    GridPlan,
    appended_grid,
    axis_of,
    castable,
    check_guardable,
    check_known_chunks,
    chunk_target,
    dask_edges,
    dask_grid,
    data_write,
    default_format,
    default_mode,
    no_axis,
    padded_edges,
    rectilinear,
    region_bounds,
    without_empty_blocks,
)
from shardwise.array.read import from_zarr
from shardwise.errors import (
    ArgumentError,
    ConflictError,
    ShardwiseError,
    StoreExistsError,
    WriteError,
)
from shardwise.format.grid import auto_chunks, auto_shards, check_write_geometry
from shardwise.graph.options import WriteOptions
from shardwise.graph.progress import compute as compute_with_progress
from shardwise.graph.tasks import retries, tries
from shardwise.graph.write import finish_graph
from shardwise.io.icechunk import check_session, icechunk_session, merge_into, refuse_commit
from shardwise.io.open import store_path
from shardwise.io.staged import StagedWrite, around_data, staged_write
from shardwise.io.stores import write_grid

__all__ = ["array_to_zarr", "dask_call", "from_zarr", "is_array"]

_MODES = ("w-", "w", "a", "r+")

_CREATION = (
    "shards",
    "chunks",
    "compressors",
    "filters",
    "serializer",
    "fill_value",
    "attributes",
    "dimension_names",
)
"""The creation options ``array_to_zarr`` takes by name; any others in ``creation``
are more of zarr-python's ``create_array`` arguments."""


def array_to_zarr(
    x: Any,
    store: Any,
    *,
    path: str,
    mode: str | None,
    creation: Mapping[str, Any],
    region: Any,
    append_dim: int | None,
    compute: bool,
    zarr_format: int | None,
    storage_options: dict[str, Any] | None,
    options: WriteOptions,
    commit: str | None = None,
    return_stored: bool = False,
    zarr_kwargs: Mapping[str, Any] | None = None,
    guarded: bool = True,
) -> Any:
    """``shardwise.to_zarr`` for one dask array (see its docstring). ``creation``: the
    new array's ``shards`` and ``chunks``, and zarr-python's ``create_array`` arguments
    (``compressors``, ``filters``, ``serializer``, ``fill_value``, ``attributes``,
    ``dimension_names``); None where not given. ``zarr_kwargs``: more of
    ``create_array``'s arguments (dask's ``**zarr_array_kwargs``), for a new array.
    ``return_stored``: return the array written, read back lazily (see
    :func:`_stored`). ``guarded``: other jobs may write the array at the same time
    (``independent_writers``): shards merged with what is stored, and the zarr.json an
    append grows, are put only if unchanged since read."""
    import dask

    name = path.strip("/") or "/"
    check_known_chunks(x.chunks, name)
    x = without_empty_blocks(x)
    extra = dict(zarr_kwargs or {})
    x = _given_shape_and_dtype(x, extra, name)
    if extra:
        creation = {**creation, **extra}
    mode = _mode(mode, region, append_dim, name)
    session = icechunk_session(store)
    if session is not None:
        check_session(session, compute=compute, commit=commit, zarr_format=zarr_format)
        if return_stored:
            raise WriteError(
                "return_stored is not available with an Icechunk session",
                expected="return_stored=False",
                found="return_stored=True",
                array=name,
                advice="Read the array back from the session after it is committed "
                "(shardwise.from_zarr(session.store, path)). Nothing was written.",
            )
        store = session.store
    elif commit is not None:
        refuse_commit(store, name)
    zarr_format = default_format() if zarr_format is None else zarr_format
    if zarr_format not in (2, 3):
        raise WriteError(
            "unknown zarr_format", expected="2 or 3", found=repr(zarr_format), array=name
        )
    # an append that other jobs may make at the same time grows the array's zarr.json
    # only if it is unchanged since this call read it; else it reads again, and so
    # appends after the other job's rows (see grow.grow_if)
    guard = append_guard(store, path, storage_options, mode, append_dim, session, guarded)
    # (its rows are claimed in the array's attributes under this call's token until
    # they are written: run again after a failure, the same call writes them, see claims)
    token = None if guard is None else call_token(x.name, x.shape, x.dtype.str, append_dim)
    given_x = x
    staged = None  # a new array's metadata put after its data (see _create's call)
    with rl.enabled():  # zarr-python reads and writes rectilinear grids with its flag on
        for _ in tries():
            x = given_x
            # (the version first: were zarr-python to read a newer document, the
            # conditional put below would fail and this would run again)
            version = None if guard is None else metadata_version(guard)
            existing = _existing(store, path, storage_options, mode, name)
            if existing is None:
                if region is not None:
                    raise WriteError(
                        "a region write needs an existing array",
                        expected=f"a Zarr array at {name!r}",
                        found="nothing there",
                        array=name,
                        advice="Create it first (mode='w-'), then write regions with mode='r+'.",
                    )
                plan = _new_array(x, name, creation["shards"], creation["chunks"], zarr_format)
                offset: tuple[int, ...] = (0,) * x.ndim
                fresh = True
                arr = None
            else:
                given = sorted(k for k, v in creation.items() if v is not None and v != "auto")
                if given:
                    raise WriteError(
                        "creation options were given for an array that exists",
                        expected="no shards, chunks, codecs, fill value, attributes or "
                        "dimension names when writing into an existing array",
                        found=f"{', '.join(given)} (mode={mode!r})",
                        array=name,
                        key=_meta_key(path, existing),
                        advice="Leave them out (the array keeps its own), or replace the "
                        "array with mode='w'. Nothing was written.",
                    )
                claim = None
                if token is not None and existing.metadata.zarr_format == 3:
                    claim = claim_of(existing.metadata.attributes, token)
                x, offset, new_shape = _into_existing(x, existing, region, append_dim, name, claim)
                grown = None if claim is not None else _appended_grid(existing, x, append_dim, name)
                fresh = False
                arr = existing
                if guarded:
                    check_guardable(
                        existing.store_path.store,
                        existing,
                        tuple((o, o + n) for o, n in zip(offset, x.shape, strict=True)),
                        x.dtype,
                        fresh=False,
                        append=append_dim is not None,
                        name=name,
                        key=_meta_key(path, existing),
                    )
            if arr is None:
                check_write_geometry(
                    plan.edges if plan.edges is not None else plan.shards,
                    plan.inner,
                    x.dtype.itemsize,
                    array=name,
                )
            # -- everything checked: now write metadata --------------------------------------
            if arr is None:
                # (computed here: created on a view, its metadata put after its data)
                arr, staged = _create(
                    store,
                    path,
                    x,
                    plan,
                    creation,
                    zarr_format,
                    mode,
                    storage_options,
                    options.write_empty_chunks,
                    staged=compute and session is None,
                )
            elif new_shape != arr.shape:
                if guard is None:
                    arr = grow(arr, new_shape, grown)
                else:
                    assert version is not None
                    assert token is not None and append_dim is not None
                    axis = append_dim % x.ndim
                    rows = (token, axis, offset[axis], new_shape[axis])
                    grown_arr = grow_if(arr, new_shape, grown, guard, version, rows)
                    if grown_arr is None:  # another job appended first: read it again
                        continue
                    arr = grown_arr
            break
        else:
            raise ConflictError(
                "other jobs kept appending to the array",
                expected="its zarr.json unchanged between reading it and growing it",
                found=f"it changed every time, {retries()} tries",
                array=name,
                key=_meta_key(path, arr),
                advice="Nothing was written. Run the append again.",
            )
        fork = None if session is None else session.fork()
        write = data_write(
            x,
            arr,
            tuple(slice(o, o + n) for o, n in zip(offset, x.shape, strict=True)),
            offset,
            options=options,
            fresh=fresh,
            fork=fork,
            guarded=guarded,
        )
    if fork is not None:  # the delayed computes to the merged fork session
        if not compute:
            return write
        merge_into(session, dask.compute(write))
        return session.commit(commit) if commit is not None else arr
    # the end of the write: the record of a claim is taken out (a completed one too)
    done = (
        _done
        if guard is None or append_dim is None or arr.metadata.zarr_format != 3
        else functools.partial(_released, guard[0], version[0] if version else "", token or "")
    )
    graph = finish_graph([write], done, arr)
    if return_stored:
        if not compute:  # read once written: every task of it waits for the write
            return _after(_stored(arr, offset, x.shape), graph)
        with around_data(staged):
            compute_with_progress(graph, progress=options.progress, desc="to_zarr")
        return _stored(arr, offset, x.shape)
    if not compute:
        return graph
    if append_dim is None or fresh:
        with around_data(staged):
            compute_with_progress(graph, progress=options.progress, desc="to_zarr")
        return arr
    try:
        compute_with_progress(graph, progress=options.progress, desc="to_zarr")
    except (ShardwiseError, OSError) as e:  # the metadata has claimed the rows already
        axis = append_dim % len(offset)
        dims = getattr(arr.metadata, "dimension_names", None) or ()
        raise append_failed(
            e,
            name=name,
            key=_meta_key(path, arr),
            dim=str(dims[axis]) if axis < len(dims) and dims[axis] else f"axis {axis}",
            offset=offset,
            shape=x.shape,
            axis=axis,
            recorded=done is not _done,
        ) from e
    return arr


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


def _given_shape_and_dtype(x: Any, extra: dict[str, Any], name: str) -> Any:
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


def _mode(mode: str | None, region: Any, append_dim: Any, name: str) -> str:
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


def _meta_key(path: str, arr: Any) -> str:
    base = path.strip("/")
    leaf = "zarr.json" if arr.metadata.zarr_format == 3 else ".zarray"
    return f"{base}/{leaf}" if base else leaf


def _existing(store: Any, path: str, storage_options: Any, mode: str, name: str) -> Any:
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
            key=_meta_key(path, node),
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


def _new_array(x: Any, name: str, shards: Any, chunks: Any, zarr_format: int) -> GridPlan:
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


def _into_existing(
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
    key = _meta_key(arr.path, arr)
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


def _create(
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
    kwargs.update({k: v for k, v in creation.items() if k not in _CREATION and v is not None})
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


def _appended_grid(arr: Any, x: Any, append_dim: int | None, name: str) -> list[Any] | None:
    """The rectilinear grid after an append (the appended dask chunks become shards),
    checked; None for a regular grid, which only grows."""

    if append_dim is None or not rectilinear(arr.metadata):
        return None
    axis = int(append_dim) % arr.ndim
    dims = [f"axis {i}" for i in range(x.ndim)]
    rl.check_blocks(name, dims, x.chunks)
    return appended_grid(arr.metadata, name, dims, axis, x.chunks[axis])


def _done(arr: Any, *_: Any) -> Any:
    """The end of a write: the array written."""
    return arr


def _released(guard: Any, key: str, token: str, arr: Any, *_: Any) -> Any:
    """The end of an append that recorded its claim: the record taken out of the
    array's ``zarr.json`` at ``key`` (its rows are written); the array written."""
    release(guard, key, token)
    return arr


def is_array(obj: Any) -> bool:
    """Whether ``obj`` is a dask array (and not an xarray object)."""
    try:
        import dask.array as da
    except ImportError:  # pragma: no cover - dask is a dependency
        return False
    return isinstance(obj, da.Array)
