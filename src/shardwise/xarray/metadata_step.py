"""The metadata step of a Dataset write, and every check before it.

xarray's own metadata step (``ZarrStore`` through zarr-python) creates the arrays,
attributes and CF encodings exactly as ``Dataset.to_zarr`` does; :class:`Capture` stands
in for its ``ArrayWriter``, so numpy data is written as xarray writes it while dask data
is kept for shardwise's one-task-per-shard graph. :func:`validate` runs every check and
the whole metadata step once against a copy-on-write view of the store
(:class:`shardwise.io.overlay.OverlayStore`), so bad input fails with the store
untouched.

Apart from :mod:`shardwise.xarray.to_zarr` (which runs this twice, dry and for real,
then the data step) because this is the part that talks to xarray's ``ZarrStore``; the
decisions it shares with the dask-array path (grids grown on append, regions, data
types, modes) are :mod:`shardwise.array.decisions`'s.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Hashable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, NoReturn

from zarr.buffer import default_buffer_prototype

import shardwise._compat as _compat
from shardwise._flags import consolidate_metadata
from shardwise.array.claims import (
    Unrecorded,
    call_token,
    claim_in,
    claim_in_document,
    rebased,
    release,
    shown_before,
)
from shardwise.array.decisions import (
    Guard,
    appended_grid,
    castable,
    check_guardable,
    check_known_chunks,
    default_format,
    default_mode,
    region_bounds,
    warn_unprotected,
    without_empty_blocks,
)
from shardwise.array.store import region_offsets
from shardwise.errors import ConflictError, StoreExistsError, WriteError
from shardwise.format.grid import check_write_geometry
from shardwise.format.metadata import FIXED_KINDS, metadata_key
from shardwise.io.opener import conditional_path, store_path
from shardwise.io.overlay import (
    CommitConflict,
    GuardedOverlay,
    OverlayStore,
    without_consolidated,
)
from shardwise.io.retry import retries, tries
from shardwise.io.stores import write_grid
from shardwise.xarray.encoding import (
    ShardSpec,
    SizeSpec,
    check_spec,
    check_v2_shards,
    nested,
    plan_encoding,
)

__all__ = [
    "AppendTransaction",
    "Capture",
    "append_transaction",
    "grow_grids",
    "metadata_step",
    "validate",
]


# -- capturing xarray's writes -----------------------------------------------------------
class Capture:
    """Stands in for xarray's ``ArrayWriter``: numpy data is written at once through
    zarr-python (as xarray does), dask data is kept for shardwise's graph. In a dry
    run nothing is written, only checked.

    New arrays that get a rectilinear shard grid (``grids``, by name) have it written
    here, when xarray hands over the array it created.

    ``guarded`` (other jobs may write the arrays at the same time): numpy data going
    into an array that exists (``existing``, by name) and that the shard writer can
    write (Zarr v3, fixed-size types; an appended time coordinate, say) is written
    through ``write`` (the shard writer, at once, as xarray writes numpy data), so that
    a shard it shares with another job's rows is merged with a conditional put rather
    than zarr-python's plain one; a dry run keeps it as one dask chunk, to be checked
    with the rest, and so does ``defer`` (an append's transaction, whose data is all
    written after its metadata is committed)."""

    def __init__(
        self,
        *,
        dry: bool,
        grids: Mapping[str, tuple[Any, ...]] | None = None,
        guarded: bool = False,
        existing: set[str] | None = None,
        write: Any = None,
        defer: bool = False,
    ) -> None:
        self.dry = dry
        self.guarded = guarded
        self.defer = defer
        self.existing = existing or set()
        self.write = write
        self.grids = dict(grids or {})
        # (dask array, zarr array, region, offset of the region)
        self.items: list[tuple[Any, Any, tuple[slice, ...], tuple[int, ...]]] = []

    def add(self, source: Any, target: Any, region: tuple[slice, ...] | None = None) -> None:

        target = self._regrid(target)
        if self.dry:  # a grid no reader could read is refused before anything is written
            _check_geometry(target)
        region = tuple(region) if region else (slice(None),) * len(target.shape)
        offset = region_offsets(source.shape, target, region)
        if (
            not _compat.is_chunked_array(source)
            and self.guarded
            and target.basename in self.existing
            and _shard_written(target)
        ):
            import dask.array as da
            import numpy as np

            values = np.asarray(source)
            source = da.from_array(values, chunks=values.shape or ())
            if not self.dry and not self.defer:
                self.write(source, target, region, offset)
                return
        if _compat.is_chunked_array(source):
            self.items.append((source, target, region, offset))
        elif not self.dry:
            target[region] = source

    def _regrid(self, target: Any) -> Any:
        """``target`` with its rectilinear grid written, when it gets one."""

        name = target.basename
        if name not in self.grids:
            return target
        return write_grid(target, self.grids[name])

    def sync(self, compute: bool = True, chunkmanager_store_kwargs: Any = None) -> None:
        return None


def _shard_written(target: Any) -> bool:
    """Whether the shard writer writes this zarr array's data (Zarr v3, a fixed-size
    data type), rather than ``dask.array.store``."""
    return target.metadata.zarr_format == 3 and target.dtype.kind in FIXED_KINDS


def _dims(target: Any) -> tuple[Any, ...]:
    """A zarr array's dimension names (Zarr v3's, or xarray's ``_ARRAY_DIMENSIONS``)."""
    if target.metadata.zarr_format == 3:
        return tuple(target.metadata.dimension_names or ())
    return tuple(target.attrs.get("_ARRAY_DIMENSIONS", ()))


def _check_geometry(target: Any) -> None:
    """:func:`~shardwise.format.grid.check_write_geometry` for a zarr array xarray created."""

    meta = target.metadata
    sharding = _compat.sharding_codec(meta) if meta.zarr_format == 3 else None
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


def grow_grids(
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
        dims = tuple(getattr(metadata, "dimension_names", None) or ())
        if append_dim not in dims:
            continue
        # a regular dimension of a rectilinear grid stays regular (unless shards="dask")
        edges = appended_grid(
            metadata,
            name,
            dims,
            dims.index(append_dim),
            var.chunksizes[append_dim],
            dask_shards=dask_shards,
            keep_regular=True,
        )
        if edges is not None:
            write_grid(array, edges)


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
                if nested(var.encoding.get("shards")):
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


def _overlay_of(store: Any, storage_options: Any) -> Any:
    """A copy-on-write view of ``store`` (an empty one when nothing exists there yet)."""
    from zarr.storage import MemoryStore, StorePath

    try:
        base = store_path(store, storage_options)
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


def metadata_step(ds: Any, zstore: Any, encoding: Mapping[Hashable, Any], capture: Capture) -> None:

    with _regular_placeholders(zstore):
        ds = _compat.validate_region(zstore, ds)
        _compat.validate_encoding(zstore, encoding)
        _compat.dump_to_store(ds, zstore, capture, encoding=copy.deepcopy(dict(encoding)))


def validate(
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
    *,
    guard: Guard | None = None,
) -> tuple[str, Any, dict[Hashable, Any], set[str], int, dict[str, tuple[Any, ...]]]:
    """Every check, and a dry run of xarray's metadata step on a copy-on-write view of
    the store. Returns the mode, the dataset and encoding to write, the names of the
    arrays that exist already, the Zarr format (when not given: the existing
    group's, when the call adds to one, else 3) and the rectilinear grids of new
    arrays."""

    ds = _checked_dataset(ds)
    check_spec("shards", shards, set(ds.dims))
    check_spec("chunks", chunks, set(ds.dims))
    if isinstance(region, Mapping):
        _check_region_steps(region)
    # the default is the array path's; xarray's own refusals (and their text) follow
    mode = _compat.choose_default_mode(
        mode=default_mode(mode, region, append_dim),  # type: ignore[arg-type]
        append_dim=append_dim,
        region=region,
    )

    view = _overlay_of(store, storage_options)
    node = None if mode == "w" else _existing_node(view, group)
    if zarr_format is None:  # as the group it adds to, else zarr's default format
        existing_format = None if node is None else 3 if node.endswith("zarr.json") else 2
        zarr_format = existing_format or default_format()
    check_v2_shards(zarr_format, shards, encoding)
    if mode == "w-" and node is not None:
        _refuse_existing(node)
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
    ds, encoding, grids = plan_encoding(ds, encoding, shards, chunks, existing, zarr_format)
    grow_grids(dry, ds, existing, append_dim, shards == "dask")
    guarded = guard is not None and guard.on
    capture = Capture(dry=True, grids=grids, guarded=guarded, existing=existing)
    metadata_step(ds, dry, encoding, capture)
    if guard is not None and guard.asked:  # refuse (or warn of) what cannot be made safe
        _check_guarded(capture, view.store._store, guard, mode, existing, append_dim)
    return mode, ds, encoding, existing, zarr_format, grids


def _checked_dataset(ds: Any) -> Any:
    """``ds`` with its names checked (xarray's own refusal and text, as
    ``Dataset.to_zarr`` does first) and its dask chunks known, empty dask chunks
    dropped: they own no shard (no data moves)."""
    _compat.validate_dataset_names(ds)
    for name, var in ds.variables.items():
        if var.chunks is not None:
            check_known_chunks(var.chunks, str(name))
    if any(
        var.chunks and any(0 in c and any(c) for c in var.chunks) for var in ds.variables.values()
    ):
        ds = ds.copy(deep=False)
        for var in ds.variables.values():
            if var.chunks is not None:
                var.data = without_empty_blocks(var.data)
    return ds


def _check_region_steps(region: Mapping[str, Any]) -> None:
    """Refuses region slices with a step other than 1."""
    for dim, r in region.items():
        if isinstance(r, slice) and r.step not in (None, 1):
            raise WriteError(
                "region slices must have a step of 1",
                expected="slice(start, stop)",
                found=f"{dim}={r}",
                advice="Write each strided part separately, or write the whole span.",
            )


def _refuse_existing(key: str) -> NoReturn:
    """Refuses to create a new dataset (``mode="w-"``) where the store holds the Zarr
    node of metadata ``key``."""
    raise StoreExistsError(
        "the store already holds Zarr data where mode='w-' creates a new dataset",
        expected="no Zarr group or array at the target",
        found=f"existing metadata {key!r}",
        key=key,
        advice="Pass mode='w' to overwrite, mode='a' to add variables, or "
        "append_dim=/region= to extend it.",
    )


def _check_guarded(
    capture: Capture,
    base: Any,
    guard: Guard,
    mode: str,
    existing: set[str],
    append_dim: Hashable | None,
) -> None:
    """Refuses (or warns of, as ``guard`` asks) the writes of ``capture`` that no
    conditional put can make safe against other jobs writing the arrays in ``base``
    (the store under the view) at the same time."""
    unguarded = []
    for source, target, _, offset in capture.items:
        reason = check_guardable(
            base,
            target,
            tuple((o, o + n) for o, n in zip(offset, source.shape, strict=True)),
            source.dtype,
            fresh=mode == "w" or target.basename not in existing,
            append=append_dim is not None and append_dim in _dims(target),
            name=target.path,
            key=metadata_key(target.path),
            required=guard.required,
        )
        if reason is not None:
            unguarded.append(reason)
    warn_unprotected(unguarded)


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
        bounds = region_bounds(r, n)
        if bounds is None or bounds[1] - bounds[0] != ds.sizes[dim]:
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
        if new.kind == old.kind or castable(new, old):
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


# -- appends that other jobs may make at the same time ---------------------------------------
def _join(path: str, leaf: str) -> str:
    return f"{path.strip('/')}/{leaf}" if path.strip("/") else leaf


class AppendTransaction:
    """The metadata step of a Dataset append that other jobs may make at the same
    time, as an optimistic transaction: each try runs on a fresh copy-on-write view of
    the store (:meth:`view`) whose reads remember the version of each object, and is
    committed with conditional puts, the ``zarr.json`` documents first
    (:meth:`commit`, through :class:`~shardwise.io.overlay.GuardedOverlay`). The first
    put decides: when another job grew the first array first, nothing is put and the
    step runs again on what is stored now, so the two appends land one after the
    other; the data is written after the commit, into the region the commit claimed.

    The rows claimed are recorded in the grown arrays' attributes under the call's
    token (see :mod:`~shardwise.array.claims`), and the records taken out once the data
    is written (:meth:`end`). A try that finds this call's records (an earlier run of
    it failed after its commit) is followed by one that completes those rows: it sees
    the claimed arrays as they were before them, so xarray plans the same append, and
    its commit leaves their documents as they are."""

    def __init__(self, base: Any, guard: Any, token: str) -> None:
        self.base = base  # the StorePath of the store
        self.guard = guard
        self.token = token  # the call's (see claims.call_token)
        self.claimed: list[str] = []  # the documents holding this call's claim
        self.completing: dict[str, tuple[int, int, int]] = {}  # found: key -> claim

    def view(self) -> Any:
        """A fresh view of the store for one try."""
        from zarr.storage import StorePath

        shown = {
            key: functools.partial(shown_before, axis=axis, start=start)
            for key, (axis, start, _) in self.completing.items()
        }
        overlay = GuardedOverlay(self.base.store, self.guard, shown=shown, rebase=rebased)
        return StorePath(overlay, self.base.path)

    def found_claims(self, view: Any) -> bool:
        """After a try's metadata step: True when the arrays it read hold this call's
        claims (the next try completes them instead of appending)."""
        if self.completing:
            return False
        for key, document in view.store.first_reads().items():
            if key.endswith("zarr.json") and (claim := claim_in(document, self.token)):
                self.completing[key] = claim
        return bool(self.completing)

    def commit(self, view: Any, zstore: Any, append_dim: Hashable) -> bool:
        """Put what the try wrote; False (nothing put) when another job was first, or
        was in the middle of its own commit when this try read the store: then the
        arrays along ``append_dim`` have different lengths in the try's view (some
        grown by the other job, some not yet), and committing would make that last."""
        lengths = set()
        for _, array in zstore.zarr_group.arrays():
            dims = _dims(array)
            if append_dim in dims:
                lengths.add(array.shape[dims.index(append_dim)])
        if len(lengths) > 1:
            return False
        if self.completing:  # (their documents hold the rows and the claims already)
            skip, self.claimed = set(self.completing), sorted(self.completing)
        else:
            skip, self.claimed = set(), _claim(view.store, self.token, str(append_dim))
        try:
            view.store.commit(skip)
        except CommitConflict:
            return False
        return True

    def end(self, consolidate: bool) -> None:
        """After the data is written: the claims' records taken out, and the store's
        metadata consolidated if ``consolidate``."""
        for key in self.claimed:
            release(self.guard, key, self.token)
        if consolidate:
            self.consolidate()

    def consolidate(self) -> None:
        """Consolidate the store's metadata after a committed append's data (what
        xarray does at the end of its metadata step, which a try runs without, so that
        it reads each array's own document): on a view that sees the group's document
        without its consolidated metadata (so that the arrays are read from their own),
        put only if that document is unchanged since the view read it, else again.
        Every append consolidates after its data, reading the group's document before
        the arrays', so the last consolidation put holds every append committed before
        it."""
        from zarr.storage import StorePath

        root = _join(self.base.path, "zarr.json")
        for _ in tries():
            overlay = GuardedOverlay(
                self.base.store, self.guard, shown={root: without_consolidated}
            )
            view = StorePath(overlay, self.base.path)
            for leaf in ("zarr.json", ".zmetadata"):  # (their versions, for the commit)
                _compat.sync(view.store.get(_join(view.path, leaf), default_buffer_prototype()))
            consolidate_metadata(view)
            try:
                overlay.commit(consolidation=True)
                return
            except CommitConflict:
                continue
        raise ConflictError(
            "other jobs kept consolidating the store's metadata",
            expected="the group's metadata document unchanged while it was consolidated",
            found=f"it changed every time, {retries()} tries",
            key=_join(self.base.path, "zarr.json"),
            advice="The data and the arrays' metadata are written; consolidate later "
            "(zarr.consolidate_metadata), or read with consolidated=False.",
        )

    def reopen(
        self,
        store: Any,
        group: str | None,
        storage_options: Any,
        zarr_format: int,
        mode: str,
        append_dim: Hashable | None,
        items: list[tuple[Any, Any, tuple[slice, ...], tuple[int, ...]]],
    ) -> tuple[Any, list[tuple[Any, Any, tuple[slice, ...], tuple[int, ...]]]]:
        """After the commit: xarray's store over the real store (what ``to_zarr``
        returns and closes), and the captured dask data with its arrays opened there,
        from their own documents (the consolidated metadata is brought up to date
        after the data, by :meth:`end`)."""
        zstore = _compat.get_writable_zarr_store(
            store,
            group=group,
            consolidated=False,
            storage_options=storage_options,
            zarr_format=zarr_format,
            mode=mode,  # type: ignore[arg-type]
            append_dim=append_dim,
            safe_chunks=False,
        )
        found = [
            (source, zstore.zarr_group[target.basename], region, offset)
            for source, target, region, offset in items
        ]
        return zstore, found


def _claim(store: GuardedOverlay, token: str, dim: str) -> list[str]:
    """Record the rows each array grows along ``dim`` in its document, for ``token``:
    the keys changed (none where one of them cannot hold the record)."""
    claims: dict[str, bytes] = {}

    def plan(key: str, written: bytes, old: bytes | None) -> None:
        claimed = claim_in_document(written, token, dim, old)
        if claimed is not None:
            claims[key] = claimed

    try:
        store.amend(plan)
    except Unrecorded:
        return []
    return store.amend(lambda key, *_: claims.get(key))


def append_transaction(
    store: Any,
    storage_options: Any,
    mode: str | None,
    append_dim: Hashable | None,
    session: Any,
    guarded: bool,
    call: tuple[Any, ...] = (),
) -> AppendTransaction | None:
    """The transaction of a Dataset append that other jobs may make at the same time
    (``guarded``), None for any other write: not an append, an Icechunk session (its
    commit checks), or a store without conditional puts (refused by :func:`validate`)."""
    if not guarded or append_dim is None or session is not None or mode not in (None, "a"):
        return None
    found = conditional_path(store, storage_options)
    # (``call``: what identifies the call, its data first: see claims.call_token)
    return None if found is None else AppendTransaction(*found, call_token(*call))
