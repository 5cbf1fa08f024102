"""``shardwise.to_zarr`` and ``shardwise.open_dataset``.

``to_zarr`` writes xarray datasets to sharded Zarr v3, one task per shard.

The metadata step is xarray's own (``ZarrStore.store`` through zarr-python), so the
arrays, attributes and CF encodings are exactly what ``Dataset.to_zarr`` writes. Only
the data step differs: xarray hands every dask variable to an ``ArrayWriter``, and
shardwise's writer captures them instead of calling ``dask.array.store``, then builds
its own graph (:func:`shardwise.graph.write.store_dask_array`) in which exactly one task
writes each shard.

Before anything is written the whole metadata step runs once against a copy-on-write
view of the store (:class:`shardwise.io.overlay.OverlayStore`), so bad input fails with
the store untouched.

``open_dataset`` opens a store exactly as ``engine="shardwise"`` does (xarray's own
metadata and CF decoding) and gives every shardwise-read variable the fan-out graph of
:mod:`shardwise.graph.read`.
"""

from __future__ import annotations

import copy
from collections.abc import Hashable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Literal

import numpy as np

import shardwise._compat as _compat
import shardwise.format.rectilinear as rl
from shardwise.errors import ChunksError, ShardwiseError, StoreExistsError, WriteError
from shardwise.format.grid import (
    DEFAULT_CHUNK_BYTES,
    auto_chunks,
    auto_shards,
    check_write_geometry,
    target_bytes,
)
from shardwise.format.metadata import metadata_key
from shardwise.format.shard import WRITE_ORDERS
from shardwise.graph.write import FIXED_KINDS, data_graph, finish_graph
from shardwise.io.stores import check_apart, check_replaceable, location, read_only_store_path

__all__ = ["auto_chunks", "auto_shards", "open_dataset", "to_zarr"]


SizeSpec = None | Literal["auto"] | Mapping[Hashable, int]
ShardSpec = SizeSpec | Literal["dask"]


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

    from shardwise.io.reader import ArrayReader

    if isinstance(obj, xr.DataTree):
        datas = [v for node in obj.subtree for v in node.variables.values()]
    elif isinstance(obj, xr.Dataset):
        datas = list(obj.variables.values())
    elif isinstance(obj, xr.DataArray):
        datas = [obj.variable, *obj.coords.variables.values()]
    else:
        datas = [obj]
    seen: set[int] = set()
    for data in datas:
        # a Variable's lazily indexed array (.data would load it)
        data = _compat.lazy_data(data)
        graph = getattr(data, "dask", None)
        wrapped = (
            [
                getattr(v, "value", v)
                for name, layer in graph.layers.items()
                if name.startswith("original-")
                for v in layer.values()
            ]
            if graph is not None
            else [data]
        )
        for inner in wrapped:
            for _ in range(32):  # down xarray's wrappers (.array) to the reader
                if id(inner) in seen:
                    break
                seen.add(id(inner))
                if isinstance(inner, ArrayReader):
                    yield location(inner.store, inner.info.data_prefix)
                    break
                if type(inner).__name__ == "Array" and hasattr(inner, "store_path"):
                    yield location(inner.store_path)  # a zarr.Array
                    break
                nxt = next(
                    (getattr(inner, a) for a in ("reader", "array", "_array") if hasattr(inner, a)),
                    None,
                )
                if nxt is None:
                    break
                inner = nxt


# -- shard and chunk shapes --------------------------------------------------------------


def _by_dim(
    spec: Mapping[Hashable, int], dims: tuple[Hashable, ...], default: tuple[int, ...]
) -> tuple[int, ...]:
    return tuple(int(spec.get(d, n)) for d, n in zip(dims, default, strict=True))


def _check_spec(name: str, spec: Any, dims: set[Hashable]) -> None:
    if spec is None or spec == "auto" or (name == "shards" and spec == "dask"):
        return
    if not isinstance(spec, Mapping):
        raise WriteError(
            f"`{name}=` takes sizes by dimension name",
            expected="None, 'auto'"
            + (", 'dask'" if name == "shards" else "")
            + " or a mapping such as {'time': 100}",
            found=repr(spec),
            advice=f"Give per-variable shapes in encoding={{var: {{{name!r}: (...)}}}}.",
        )
    unknown = [d for d in spec if d not in dims]
    bad = [d for d, v in spec.items() if not isinstance(v, int | np.integer) or v < 1]
    if unknown or bad:
        raise WriteError(
            f"`{name}=` names a dimension the dataset does not have, or a size below 1",
            expected=f"positive sizes for dimensions among {sorted(map(str, dims))}",
            found=repr(dict(spec)),
        )


def _nested(spec: Any) -> bool:
    return isinstance(spec, tuple | list) and any(isinstance(x, tuple | list) for x in spec)


def _plan_encoding(
    ds: Any,
    encoding: Mapping[Hashable, Mapping[str, Any]],
    shards: ShardSpec,
    chunks: SizeSpec,
    existing: set[str],
    zarr_format: int = 3,
) -> tuple[Any, dict[Hashable, dict[str, Any]], dict[str, tuple[Any, ...]]]:
    """Apply ``shards=``/``chunks=`` to the variables the call creates. Explicit
    per-variable ``encoding`` wins; the shapes inherited in ``variable.encoding`` (from
    the store a dataset was opened from) give way to the arguments.

    Also returns the rectilinear shard grids to write, by variable name: xarray cannot
    write them, so the encoding handed to it holds regular placeholder shards (the
    inner chunks) and :class:`_Capture` rewrites the array's grid once xarray has
    created it."""

    out_encoding = {k: dict(v) for k, v in encoding.items()}
    grids: dict[str, tuple[Any, ...]] = {}
    ds = ds.copy(deep=False)
    for name, var in ds.variables.items():
        if str(name) in existing or var.ndim == 0:
            continue
        itemsize = var.dtype.itemsize if var.dtype.kind in FIXED_KINDS else 8
        blocks = var.chunks
        explicit = name in out_encoding
        enc = out_encoding[name] if explicit else dict(var.encoding)
        if not explicit and (shards is not None or chunks is not None):
            for k in ("chunks", "shards", "preferred_chunks"):
                enc.pop(k, None)
        if not explicit and _nested(enc.get("shards")):
            # a grid inherited from the store the data came from: the dask chunks
            # (which may have changed since) decide instead
            for k in ("chunks", "shards", "preferred_chunks"):
                enc.pop(k, None)
        edges = _rectilinear_edges(name, var, enc, shards)
        if edges is not None:
            if zarr_format == 2:
                raise WriteError(
                    "irregular dask chunks become rectilinear shards, which need Zarr format 3",
                    expected="zarr_format=3 (or None for a new store)",
                    found=f"zarr_format=2 and dask chunks {_sizes_text(var)}",
                    array=str(name),
                    advice="Write Zarr v3, or rechunk to regular sizes first (ds.chunk({...})).",
                )
            enc.pop("shards", None)
            enc["chunks"] = _rectilinear_inner(name, var, enc, edges, chunks, itemsize)
            inner = tuple(enc["chunks"])
            rl.check_inner(name, var.dims, edges, inner, var.shape)
            edges = tuple(
                e if isinstance(e, int) else rl.single(rl.pad(e, c))
                for e, c in zip(edges, inner, strict=True)
            )
            grids[str(name)] = edges
            enc["shards"] = inner  # the placeholder xarray writes
        elif shards == "dask" and blocks is not None and "shards" not in enc and 0 not in var.shape:
            enc["shards"] = tuple(b[0] for b in blocks)
        if "shards" not in enc and shards is not None and shards != "dask":
            if shards == "auto":
                enc["shards"] = auto_shards(var.shape, itemsize, blocks)
            else:
                enc["shards"] = _by_dim(shards, var.dims, var.shape)
        sharded = enc.get("shards") is not None
        if "chunks" not in enc:
            outer = tuple(enc["shards"]) if sharded else var.shape
            if chunks == "auto" or (chunks is None and sharded):
                enc["chunks"] = auto_chunks(outer, itemsize, blocks, sharded=sharded)
            elif chunks is not None:
                enc["chunks"] = _by_dim(chunks, var.dims, outer)
        _check_shapes(name, var, enc)
        if explicit:
            out_encoding[name] = enc
        else:
            var.encoding = enc
    return ds, out_encoding, grids


def _sizes_text(var: Any) -> str:
    from shardwise.format.rectilinear import _short

    return ", ".join(
        f"{d}: {_short(tuple(c))}" for d, c in zip(var.dims, var.chunks or (), strict=True)
    )


def _rectilinear_edges(
    name: Hashable, var: Any, enc: Mapping[str, Any], shards: ShardSpec
) -> tuple[Any, ...] | None:
    """The rectilinear shard grid a new variable gets, or None for a regular one:
    nested ``shards`` in its encoding, or its dask chunks where they are irregular and
    no shard shape is given (or ``shards="dask"``). Regular dimensions keep one size."""

    given = enc.get("shards")
    if _nested(given):
        edges: list[Any] = []
        for dim, e, n in zip(var.dims, given or (), var.shape, strict=True):
            if isinstance(e, int | np.integer):
                edges.append(int(e))  # a regular dimension
                bad = e < 1
            else:
                edges.append(tuple(int(x) for x in e))
                bad = any(x < 1 for x in edges[-1]) or sum(edges[-1]) < n
            if bad:
                raise WriteError(
                    "the rectilinear shard sizes do not cover the array",
                    expected=f"sizes >= 1 adding up to at least {n} along {dim!r}",
                    found=f"shard sizes {rl._short(edges[-1])}",
                    array=str(name),
                )
        return tuple(edges)
    blocks = var.chunks
    if (
        given is not None
        or blocks is None
        or var.dtype.kind not in FIXED_KINDS
        or (shards is not None and shards != "dask")
        or 0 in var.shape
    ):
        return None
    if all(rl.is_regular(b) for b in blocks):
        return None
    rl.check_blocks(name, var.dims, blocks)
    # a dimension in one dask chunk stays a list of one edge until padded (below)
    return tuple(b[0] if rl.is_regular(b) and len(b) > 1 else tuple(b) for b in blocks)


def _rectilinear_inner(
    name: Hashable,
    var: Any,
    enc: Mapping[str, Any],
    edges: tuple[Any, ...],
    chunks: SizeSpec,
    itemsize: int,
) -> tuple[int, ...]:

    given = enc.get("chunks")
    if given is not None and given != "auto":
        if isinstance(given, int | np.integer):
            return (int(given),) * var.ndim
        inner = tuple(given)
        if len(inner) != var.ndim:
            raise WriteError(
                "the inner chunk shape has the wrong number of dimensions",
                expected=f"{var.ndim} sizes for dimensions {var.dims}",
                found=f"chunks {inner}",
                array=str(name),
            )
        return inner
    target = target_bytes("shardwise.chunk-bytes", DEFAULT_CHUNK_BYTES)
    auto = rl.auto_inner(name, var.dims, edges, var.shape, itemsize, target)
    if isinstance(chunks, Mapping):
        return _by_dim(chunks, var.dims, auto)
    return auto


def _check_shapes(name: Hashable, var: Any, enc: Mapping[str, Any]) -> None:
    s, c = enc.get("shards"), enc.get("chunks")
    if not isinstance(s, tuple | list) or not isinstance(c, tuple | list):
        return
    ok = (
        len(s) == len(c) == var.ndim
        and all(isinstance(x, int | np.integer) and x > 0 for x in (*s, *c))
        and all(si % ci == 0 for si, ci in zip(s, c, strict=True))
    )
    if not ok:
        raise WriteError(
            "the inner chunk shape must divide the shard shape in every dimension",
            expected=f"{var.ndim} shard sizes, each a multiple of the inner chunk size",
            found=f"shards {tuple(s)} and chunks {tuple(c)} for dimensions {var.dims}",
            array=str(name),
            advice="Pick inner chunks that divide the shards, or leave `chunks` out "
            "and shardwise picks ~1 MiB inner chunks that do.",
        )


# -- capturing xarray's writes -----------------------------------------------------------
class _Capture:
    """Stands in for xarray's ``ArrayWriter``: numpy data is written at once through
    zarr-python (as xarray does), dask data is kept for shardwise's graph. In a dry
    run nothing is written, only checked.

    New arrays that get a rectilinear shard grid (``grids``, by name) have it written
    here, when xarray hands over the array it created."""

    def __init__(self, *, dry: bool, grids: Mapping[str, tuple[Any, ...]] | None = None) -> None:
        self.dry = dry
        self.grids = dict(grids or {})
        # (dask array, zarr array, region, offset of the region)
        self.items: list[tuple[Any, Any, tuple[slice, ...], tuple[int, ...]]] = []

    def add(self, source: Any, target: Any, region: tuple[slice, ...] | None = None) -> None:

        target = self._regrid(target)
        if self.dry:  # a grid no reader could read is refused before anything is written
            _check_geometry(target)
        region = tuple(region) if region else (slice(None),) * len(target.shape)
        offset = _offsets(source, target, region)
        if _compat.is_chunked_array(source):
            self.items.append((source, target, region, offset))
        elif not self.dry:
            target[region] = source

    def _regrid(self, target: Any) -> Any:
        """``target`` with its rectilinear grid written, when it gets one."""

        name = target.basename
        if name not in self.grids:
            return target
        return rl.write_grid(target, self.grids[name])

    def sync(self, compute: bool = True, chunkmanager_store_kwargs: Any = None) -> None:
        return None


def _check_geometry(target: Any) -> None:
    """:func:`~shardwise.format.grid.check_write_geometry` for a zarr array xarray created."""

    meta = target.metadata
    sharding = getattr(meta, "sharding_codec", None) if meta.zarr_format == 3 else None
    grid = meta.chunk_grid if meta.zarr_format == 3 else None
    outer: Any = getattr(grid, "chunk_shape", None) or getattr(grid, "chunk_shapes", None)
    if sharding is None:
        outer, inner = None, tuple(target.chunks)
    else:
        inner = tuple(sharding.chunk_shape)
    check_write_geometry(
        outer,
        inner,
        target.dtype.itemsize,
        array=target.basename,
        key=metadata_key(target.path),
    )


def _grow_grids(
    zstore: Any, ds: Any, existing: set[str], append_dim: Hashable | None, dask_shards: bool
) -> None:
    """Before an append: write the grids the existing arrays will have, where the
    appended dask chunks become shards (rectilinear arrays, and sharded regular ones
    with ``shards="dask"``). The edges then reach past the stored extent (as the spec
    allows) and xarray's resize keeps them, rather than adding one edge for all the
    appended values."""

    if append_dim is None:
        return
    for name, var in ds.variables.items():
        if str(name) not in existing or append_dim not in var.dims or var.chunks is None:
            continue
        array = zstore.zarr_group[str(name)]
        metadata = array.metadata
        if metadata.zarr_format != 3:
            continue
        grid = metadata.chunk_grid
        if isinstance(grid, _compat.RectilinearChunkGridMetadata):
            old = tuple(grid.chunk_shapes)
        elif dask_shards and metadata.sharding_codec is not None:
            old = tuple(grid.chunk_shape)
        else:
            continue
        dims = tuple(metadata.dimension_names or ())
        if append_dim not in dims:
            continue
        axis = dims.index(append_dim)
        if isinstance(old[axis], int) and not dask_shards:
            continue  # a regular dimension of a rectilinear grid stays regular
        blocks = var.chunksizes[append_dim]
        rl.write_grid(array, rl.appended(metadata, name, dims, axis, blocks))


@contextmanager
def _regular_placeholders(zstore: Any) -> Iterator[None]:
    """xarray refuses the rectilinear ``shards`` it reads from an existing array when
    it checks the encoding of data appended or written into that array (the encoding
    is not used for existing arrays): give it the inner chunks instead. ``ZarrStore``
    has ``__slots__``, so for the duration of the block the store is an instance of a
    subclass that only overrides ``open_store_variable`` (and is then a plain,
    picklable ``ZarrStore`` again)."""
    global _PlaceholderStore
    if _PlaceholderStore is None:
        from xarray.backends import ZarrStore

        class PlaceholderStore(ZarrStore):
            __slots__ = ()

            def open_store_variable(self, name: str) -> Any:
                var = super().open_store_variable(name)
                if _nested(var.encoding.get("shards")):
                    var.encoding["shards"] = tuple(var.encoding["chunks"])
                return var

        _PlaceholderStore = PlaceholderStore
    original = type(zstore)
    if original is not _PlaceholderStore.__mro__[1]:
        yield
        return
    zstore.__class__ = _PlaceholderStore
    try:
        yield
    finally:
        zstore.__class__ = original


_PlaceholderStore: Any = None


def _offsets(source: Any, target: Any, region: tuple[slice, ...]) -> tuple[int, ...]:
    """Where in ``target`` the data goes; checks that it fits."""
    starts = []
    for i, (r, n) in enumerate(zip(region, target.shape, strict=True)):
        start, stop, step = r.indices(n)
        want = source.shape[i]
        if step != 1 or stop - start != want or (r.stop is not None and r.stop > n):
            raise WriteError(
                "the region does not fit the array",
                expected=f"{want} elements along axis {i} inside an array of length {n}",
                found=f"region {r}",
                array=target.path or "/",
                advice="Write inside the array's bounds with steps of 1, or append with "
                "append_dim=.",
            )
        starts.append(start)
    return tuple(starts)


# -- the public function -----------------------------------------------------------------
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


def _overlay_of(store: Any, storage_options: Any) -> Any:
    """A copy-on-write view of ``store`` (an empty one when nothing exists there yet)."""
    from zarr.storage import MemoryStore, StorePath

    from shardwise.io.overlay import OverlayStore

    try:
        base = read_only_store_path(store, storage_options)
    except FileNotFoundError:
        return StorePath(OverlayStore(MemoryStore()), "")
    return StorePath(OverlayStore(base.store), base.path)


def _group_prefix(group: str | None) -> str:
    """``"a/b/"`` for group ``"/a/b"``; ``""`` for the root."""
    return f"{group.strip('/')}/" if group and group.strip("/") else ""


def _existing_node(path: Any, group: str | None) -> str | None:
    """The metadata key of a Zarr node at ``group`` in the store, if there is one."""

    prefix = _group_prefix(group)
    for name in ("zarr.json", ".zgroup", ".zarray"):
        key = f"{path.path.rstrip('/')}/{prefix}{name}".lstrip("/")
        try:
            if _compat.sync(path.store.exists(key)):
                return key
        except KeyError:  # Icechunk's stores raise for Zarr v2 keys rather than say False
            continue
    return None


def _metadata_step(
    ds: Any, zstore: Any, encoding: Mapping[Hashable, Any], capture: _Capture
) -> None:

    with _regular_placeholders(zstore):
        ds = zstore._validate_and_autodetect_region(ds)
        zstore._validate_encoding(encoding)
        _compat.dump_to_store(ds, zstore, capture, encoding=copy.deepcopy(dict(encoding)))


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
    """
    import dask

    from shardwise.array.api import array_to_zarr, is_array

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
            write_empty_chunks=write_empty_chunks,
            write_order=write_order,
            shards_per_task=shards_per_task,
            encode_split=encode_split,
            commit=commit,
            path=path or "",
            creation={"shards": shards, "chunks": chunks, **creation},
        )
    if given := sorted(k for k, v in {"path": path, **creation}.items() if v is not None):
        raise WriteError(
            "options for a single dask array were given with a Dataset",
            expected="group= and encoding= for the variables of a Dataset",
            found=", ".join(given),
            advice="Give codecs and fill values per variable in encoding=, e.g. "
            "encoding={'v': {'compressors': ...}}. Nothing was written.",
        )
    from shardwise.io.icechunk import icechunk_session

    session = icechunk_session(store)
    if session is None and commit is not None:
        from shardwise.io.icechunk import refuse_commit

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
        )
    ds = _as_dataset(obj)
    encoding = dict(encoding or {})
    if store is None:
        from zarr.storage import MemoryStore

        store = MemoryStore()
    if session is not None:
        from shardwise.io.icechunk import check_dataset

        check_dataset(ds, session, compute=compute, commit=commit, zarr_format=zarr_format)
        store = session.store
    with rl.enabled():  # zarr-python's flag, for this call only
        try:
            mode, ds, encoding, existing, zarr_format, grids = _validate(
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
                write_order,
                shards_per_task,
                encode_split,
            )
        except ShardwiseError:
            raise
        except ValueError as e:
            raise WriteError(str(e).rstrip("."), advice="Nothing was written.") from e

        # the real metadata step (numpy data is written here, as xarray does)
        zstore = _compat.get_writable_zarr_store(
            store,
            group=group,
            consolidated=consolidated,
            storage_options=storage_options,
            zarr_format=zarr_format,
            write_empty_chunks=write_empty_chunks,
            mode=mode,  # type: ignore[arg-type]
            append_dim=append_dim,
            region=region,
            safe_chunks=False,
        )
        try:
            _grow_grids(zstore, ds, existing, append_dim, shards == "dask")
            capture = _Capture(dry=False, grids=grids)
            _metadata_step(ds, zstore, encoding, capture)
        except BaseException:
            zstore.close()
            raise

    # the data step: one graph for all dask variables (into an Icechunk session's fork)
    fork = session.fork() if session is not None and capture.items else None
    writes = []
    for source, target, region_, offset in capture.items:
        fresh = mode == "w" or target.basename not in existing  # no shard exists yet
        writes.append(
            data_graph(
                source,
                target,
                region_,
                offset,
                write_empty_chunks,
                write_order,
                fresh,
                shards_per_task or 1,
                encode_split,
                store=None if fork is None else fork.store,
            )
        )
    if not compute:
        if fork is not None:  # the session's store stays here: it does not pickle
            from shardwise.graph.write import _merge_sessions

            zstore.close()
            return finish_graph(writes, _merge_sessions)  # the fork sessions as one
        return finish_graph(writes, _finish, zstore)
    try:
        if writes:
            done = dask.compute(*writes, **(chunkmanager_store_kwargs or {}))
            if fork is not None:
                from shardwise.io.icechunk import merge_into

                merge_into(session, done)
    finally:
        zstore.close()
    if commit is not None:
        return session.commit(commit)
    return zstore


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


def _validate(
    ds: Any,
    store: Any,
    mode: Any,
    group: str | None,
    encoding: dict[Hashable, Any],
    append_dim: Hashable | None,
    region: Any,
    storage_options: Any,
    zarr_format: int | None,
    shards: ShardSpec,
    chunks: SizeSpec,
    write_order: str,
    shards_per_task: Any = None,
    encode_split: Any = None,
) -> tuple[str, Any, dict[Hashable, Any], set[str], int, dict[str, tuple[Any, ...]]]:
    """Every check, and a dry run of xarray's metadata step on a copy-on-write view of
    the store. Returns the mode, the dataset and encoding to write, the names of the
    arrays that exist already, the Zarr format (when not given: the existing
    group's, when the call adds to one, else 3) and the rectilinear grids of new
    arrays."""

    _compat.validate_dataset_names(
        ds
    )  # xarray's own refusal and text, as Dataset.to_zarr does first
    if write_order not in WRITE_ORDERS:
        raise WriteError(
            "unknown write order",
            expected=f"one of {WRITE_ORDERS}",
            found=repr(write_order),
        )
    from shardwise.graph.write import check_encode_split, check_shards_per_task

    try:
        if shards_per_task is not None:
            check_shards_per_task(shards_per_task)
    except ValueError:
        raise WriteError(
            "bad shards_per_task",
            expected="None, an integer >= 1 or 'auto'",
            found=repr(shards_per_task),
            advice="Pass e.g. shards_per_task=16 to write 16 tiny shards per task.",
        ) from None
    try:
        check_encode_split(encode_split)
    except ValueError:
        raise WriteError(
            "bad encode_split",
            expected="None, an integer >= 1 or 'auto'",
            found=repr(encode_split),
            advice="Pass e.g. encode_split=8 to encode each shard in 8 tasks.",
        ) from None
    _check_spec("shards", shards, set(ds.dims))
    _check_spec("chunks", chunks, set(ds.dims))
    if isinstance(region, Mapping):
        for dim, r in region.items():
            if isinstance(r, slice) and r.step not in (None, 1):
                raise WriteError(
                    "region slices must have a step of 1",
                    expected="slice(start, stop)",
                    found=f"{dim}={r}",
                    advice="Write each strided part separately, or write the whole span.",
                )
    mode = _compat.choose_default_mode(mode=mode, append_dim=append_dim, region=region)

    view = _overlay_of(store, storage_options)
    node = None if mode == "w" else _existing_node(view, group)
    if zarr_format is None:  # as the group it adds to, else the current format
        zarr_format = 2 if node is not None and not node.endswith("zarr.json") else 3
    _check_v2_shards(zarr_format, shards, encoding)
    if mode == "w-" and (key := node) is not None:
        raise StoreExistsError(
            "the store already holds Zarr data where mode='w-' creates a new dataset",
            expected="no Zarr group or array at the target",
            found=f"existing metadata {key!r}",
            key=key,
            advice="Pass mode='w' to overwrite, mode='a' to add variables, or "
            "append_dim=/region= to extend it.",
        )
    dry = _compat.get_writable_zarr_store(
        view,
        mode=mode,
        group=group,
        consolidated=False,
        append_dim=append_dim,
        region=region,
        safe_chunks=False,
        zarr_format=zarr_format,
    )
    existing = set() if mode == "w" else set(dry.array_keys())
    _check_dtypes(ds, dry, existing, group)
    if isinstance(region, Mapping):
        _check_region(ds, dry, region)
    ds, encoding, grids = _plan_encoding(ds, encoding, shards, chunks, existing, zarr_format)
    _grow_grids(dry, ds, existing, append_dim, shards == "dask")
    _metadata_step(ds, dry, encoding, _Capture(dry=True, grids=grids))
    return mode, ds, encoding, existing, zarr_format, grids


def _check_v2_shards(zarr_format: int, shards: ShardSpec, encoding: Mapping[Hashable, Any]) -> None:
    if zarr_format == 2 and (
        shards is not None or any(e.get("shards") is not None for e in encoding.values())
    ):
        raise WriteError(
            "shards need Zarr format 3",
            expected="zarr_format=3 (or None for a new store)",
            found="zarr_format=2 with shards",
            advice="Zarr v2 has no sharding: drop zarr_format=2, or write shards to a "
            "new Zarr v3 store (an existing v2 store stays v2).",
        )


def _check_region(ds: Any, zstore: Any, region: Mapping[str, Any]) -> None:
    """Explicit region slices must lie inside the arrays and match the data's sizes."""
    try:
        sizes = zstore.get_dimensions()
    except ValueError:
        return  # conflicting stored lengths: xarray's own checks report it
    for dim, r in region.items():
        n = sizes.get(dim)
        if not isinstance(r, slice) or n is None or dim not in ds.sizes:
            continue
        start, stop, _ = r.indices(n)
        inside = all(b is None or -n <= b <= n for b in (r.start, r.stop))
        if not inside or stop - start != ds.sizes[dim]:
            users = [str(k) for k, v in ds.data_vars.items() if dim in v.dims]
            raise WriteError(
                "the region does not fit the stored array",
                expected=f"{ds.sizes[dim]} positions of dimension {dim!r} inside its "
                f"stored length {n}",
                found=f"region {dim}={r}",
                array=users[0] if users else None,
                advice="Give region slices inside the array and as long as the data, or "
                "use append_dim= to grow the array.",
            )


def _check_dtypes(ds: Any, zstore: Any, existing: set[str], group: str | None) -> None:
    """Data written into an existing variable must keep its kind of values: no complex
    into real, float into int, dates into numbers (xarray would cast them silently)."""
    from xarray import conventions

    for name, var in ds.variables.items():
        if str(name) not in existing:
            continue
        old = conventions.decode_cf_variable(name, zstore.open_store_variable(str(name))).dtype
        new = var.dtype
        if old.kind in "OSUT" or new.kind in "OSUT":
            continue  # strings: xarray's own check applies
        if new.kind == old.kind or np.can_cast(new, old, casting="same_kind"):
            continue
        raise WriteError(
            "the data cannot be written into the existing variable without changing "
            "its kind of values",
            expected=f"{old} (or a type that casts to it safely)",
            found=str(new),
            array=str(name),
            key=f"{_group_prefix(group)}{name}/zarr.json",
            advice=f"Convert the data first (e.g. ds[{str(name)!r}].astype({str(old)!r})), "
            "or write it to a new variable.",
        )


def _finish(zstore: Any, *writes: Any) -> Any:
    del writes  # the writes are done before the store is closed
    zstore.close()
    return zstore


# -- reading -----------------------------------------------------------------------------
_CHUNK_WORDS = ("shards", "inner", "auto")


def open_dataset(
    store: Any,
    *,
    chunks: str | Mapping[Hashable, Any] = "shards",
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

    ``chunks`` groups whole inner chunks into dask chunks:

    - ``"shards"`` (default): one dask chunk per shard;
    - ``"inner"``: one per inner chunk (most parallel; many tasks);
    - ``"auto"``: whole shards, or whole inner chunks of a shard, toward dask's
      ``array.chunk-size``;
    - a dict by dimension name of any of those, an int size, a tuple of sizes, ``-1``
      (the whole dimension) or ``None`` (shards); dimensions left out get shards.

    Sizes that cut inner chunks are moved to inner-chunk boundaries with a
    :class:`~shardwise.graph.read.ChunkRoundingWarning`. Variables shardwise does not read
    itself (Zarr v2 arrays, strings) are chunked by ``dask.array.from_array`` along their
    Zarr chunks. ``read_options`` takes a :class:`~shardwise.ReadOptions` (or a dict).
    """
    import os

    import xarray as xr

    from shardwise.graph.read import block_sizes, fanout_array
    from shardwise.xarray.backend import open_backend_dataset

    if isinstance(chunks, str):
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


def _fallback_chunks(var: Any, chunks: str | Mapping[Hashable, Any]) -> dict[Hashable, Any]:
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
