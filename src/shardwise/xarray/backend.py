"""The ``engine="shardwise"`` xarray backend.

xarray imports every registered backend when it lists engines, so this module imports
nothing heavy at module level: zarr, numcodecs and the shard engine load inside methods.

Metadata, CF decoding, coordinates, attributes and encodings come from xarray's own
``ZarrStore`` and ``StoreBackendEntrypoint``, exactly as for ``engine="zarr"``; only the
array data is read by shardwise, and ``encoding["preferred_chunks"]`` is whole shards,
so ``chunks={}`` gives one dask chunk per shard (several together over a network:
:func:`shardwise.graph.preferred.preferred_chunks`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from xarray.backends import AbstractDataStore, BackendArray, BackendEntrypoint

import shardwise._compat as _compat

if TYPE_CHECKING:
    import numpy as np
    from xarray import Dataset, DataTree

    from shardwise.io.reader import ArrayReader
    from shardwise.io.stores import ReadOptions

__all__ = ["ShardwiseBackendArray", "ShardwiseBackendEntrypoint"]

# numpy kinds the shard engine reads itself; other data types (strings, structured)
# keep xarray's zarr wrapper
_ENGINE_KINDS = frozenset("biufcmM")


class ShardwiseBackendArray(BackendArray):
    """A lazily indexed Zarr v3 array read by :class:`shardwise.io.reader.ArrayReader`.

    Outer indexing is native; xarray's ``explicit_indexing_adapter`` decomposes
    vectorized indexing into an outer read plus an in-memory step. Thread-safe and
    picklable.
    """

    __slots__ = ("dtype", "reader", "shape")

    def __init__(self, reader: ArrayReader) -> None:
        self.reader = reader
        self.shape = reader.shape
        self.dtype = reader.dtype

    def __getitem__(self, key: Any) -> np.ndarray:

        return _compat.indexing.explicit_indexing_adapter(
            key, self.shape, _compat.indexing.IndexingSupport.OUTER, self.reader.read
        )

    async def async_getitem(self, key: Any) -> np.ndarray:
        """``Dataset.load_async`` and ``Variable.load_async``: the read's requests go out
        on the caller's event loop (coalesced, index cache shared), its decoding in one
        worker thread."""

        result: np.ndarray = await _compat.indexing.async_explicit_indexing_adapter(
            key, self.shape, _compat.indexing.IndexingSupport.OUTER, self.reader.read_async
        )
        return result


class _ShardwiseDataStore(AbstractDataStore):
    """xarray's ``ZarrStore`` for metadata, shardwise readers for the data."""

    def __init__(self, zarr_store: Any, options: ReadOptions) -> None:
        self._zarr_store = zarr_store
        self._options = options
        # variable name -> the reader of its data, filled by get_variables
        self.readers: dict[str, ArrayReader] = {}

    def get_variables(self) -> Mapping[str, Any]:
        from xarray import Variable

        from shardwise.format.metadata import ArrayInfo
        from shardwise.graph.preferred import preferred_chunks
        from shardwise.io.reader import ArrayReader

        variables = dict(self._zarr_store.get_variables())
        members = self._zarr_store.members
        for name, var in variables.items():
            zarr_array = members[name]
            if zarr_array.metadata.zarr_format != 3 or var.dtype.kind not in _ENGINE_KINDS:
                continue
            info = ArrayInfo.from_metadata(zarr_array.metadata, zarr_array.path)
            reader = ArrayReader(zarr_array.store_path.store, info, self._options)
            self.readers[name] = reader
            encoding = dict(var.encoding)
            preferred = preferred_chunks(info, reader.fetcher.kind)
            encoding["preferred_chunks"] = dict(zip(var.dims, preferred, strict=True))
            data = _compat.indexing.LazilyIndexedArray(ShardwiseBackendArray(reader))
            variables[name] = Variable(var.dims, data, var.attrs, encoding)
        return _compat.FrozenDict(variables)

    def get_attrs(self) -> dict[str, Any]:
        return self._zarr_store.get_attrs()

    def get_dimensions(self) -> dict[str, int]:
        return self._zarr_store.get_dimensions()

    def close(self, **kwargs: Any) -> None:
        self._zarr_store.close()


class _DraftDataStore(AbstractDataStore):
    """A group of a store of the 2022 sharding draft (:mod:`shardwise.io.draft`): the
    metadata from its documents, the data by shardwise's readers. Its arrays are read
    as zarr-python 2 read them: ``_ARRAY_DIMENSIONS`` names the dimensions (else
    ``dim_0``, ``dim_1``...) and the fill value is the missing-value mark
    (``_FillValue``), as ``engine="zarr"`` treats Zarr v2 arrays."""

    def __init__(self, draft: Any, group: str, options: ReadOptions) -> None:
        self._draft = draft
        self._group = group.strip("/")
        self._options = options
        self.readers: dict[str, ArrayReader] = {}

    def get_variables(self) -> Mapping[str, Any]:
        from xarray import Variable

        from shardwise.graph.preferred import preferred_chunks, shard_sizes
        from shardwise.io.reader import ArrayReader

        variables = {}
        for name in self._draft.arrays(self._group):
            info = self._draft.info(f"{self._group}/{name}" if self._group else name)
            reader = ArrayReader(self._draft.store, info, self._options)
            self.readers[name] = reader
            attrs = dict(info.attributes)
            dims = attrs.pop("_ARRAY_DIMENSIONS", None)
            if not isinstance(dims, list) or len(dims) != info.ndim:
                dims = [f"dim_{i}" for i in range(info.ndim)]
            fill = info.fill_value
            if fill is not None:
                attrs["_FillValue"] = fill
            shards = shard_sizes(info)
            encoding = {
                "chunks": info.inner_chunk_shape or shards,
                "preferred_chunks": dict(
                    zip(dims, preferred_chunks(info, reader.fetcher.kind), strict=True)
                ),
                "shards": shards if info.inner_chunk_shape else None,
            }
            data = _compat.indexing.LazilyIndexedArray(ShardwiseBackendArray(reader))
            variables[name] = Variable(dims, data, attrs, encoding)
        return _compat.FrozenDict(variables)

    def get_attrs(self) -> Mapping[str, Any]:

        return _compat.FrozenDict(self._draft.group_attributes(self._group))

    def get_dimensions(self) -> Mapping[str, int]:
        raise NotImplementedError  # xarray finds the dimensions from the variables

    def close(self, **kwargs: Any) -> None:
        pass


def _draft_groups(draft: Any, group: str) -> list[str]:
    """``group`` and every group below it, parents first."""
    out, todo = [], [group.strip("/")]
    while todo:
        g = todo.pop(0)
        out.append(g)
        todo += [f"{g}/{c}" if g else c for c in draft.groups(g)]
    return out


def _read_options(read_options: Any) -> ReadOptions:
    from shardwise.io.stores import ReadOptions

    if read_options is None:
        return ReadOptions()
    if isinstance(read_options, ReadOptions):
        return read_options
    return ReadOptions(**dict(read_options))


def _open_zarr_stores(filename_or_obj: Any, *, group: str | None, many: bool, **kwargs: Any) -> Any:
    """xarray's ``ZarrStore.open_group`` (or ``open_store`` for all groups), with zarr's
    "nothing here" error turned into shardwise's."""
    from xarray.backends import ZarrStore

    from shardwise.errors import NotAZarrStoreError
    from shardwise.format.metadata import metadata_key
    from shardwise.io.opener import readable, v3_first, web_store

    opener = ZarrStore.open_store if many else ZarrStore.open_group
    where = _where(filename_or_obj)
    kwargs.setdefault("mode", "r")
    if kwargs["mode"] == "r":
        where = readable(web_store(where, kwargs.get("storage_options")))
    try:
        return v3_first(opener, store=where, group=group, consolidate_on_close=False, **kwargs)
    except FileNotFoundError as e:
        raise NotAZarrStoreError(
            "not a Zarr store",
            expected="a Zarr group (zarr.json) at the given path and group",
            found=f"{type(e).__name__}: {e}",
            array=group or "/",
            key=metadata_key(group or ""),
            advice=f"Check the path {where!r} and group {group!r}; write the store with "
            "shardwise, xarray or zarr-python first.",
        ) from e


def _where(filename_or_obj: Any) -> Any:
    return (
        os.fspath(filename_or_obj) if isinstance(filename_or_obj, os.PathLike) else filename_or_obj
    )


@contextmanager
def _naming_bad_metadata(
    filename_or_obj: Any,
    group: str | None,
    storage_options: dict[str, Any] | None,
    *,
    depth: int | None,
) -> Iterator[None]:
    """Turn what zarr-python and xarray raise on a damaged ``zarr.json`` (``ValueError``,
    ``TypeError``, ``KeyError``, ``OverflowError``, an unknown codec...) into shardwise's
    error naming the document; anything else passes through unchanged."""
    from shardwise._flags import rectilinear_grids
    from shardwise.errors import ShardwiseError
    from shardwise.format.metadata import PARSE_ERRORS
    from shardwise.io.stores import metadata_error

    try:
        with rectilinear_grids():  # zarr-python reads rectilinear grids only with its flag on
            yield
    except ShardwiseError:
        raise
    except PARSE_ERRORS as e:
        err = metadata_error(
            _where(filename_or_obj),
            group or "",
            e,
            storage_options=storage_options,
            depth=depth,
            need_dims=True,
        )
        if err is e:
            raise
        raise err from e


def _zarr_or_draft(
    filename_or_obj: Any,
    *,
    group: str | None,
    open_group: str | None,
    many: bool,
    depth: int | None,
    consolidated: bool | None,
    storage_options: dict[str, Any] | None,
    zarr_format: int | None,
    **open_kwargs: Any,
) -> tuple[Any, Any]:
    """xarray's zarr store(s) of ``open_group`` (``many``: of it and every group below)
    and None; or, where zarr-python refuses the root because it is a store of the 2022
    draft, None and the draft store. Other errors name the document to blame; an I/O
    error passes through as it is (no draft is looked for after one)."""
    try:
        with _naming_bad_metadata(filename_or_obj, group, storage_options, depth=depth):
            stores = _open_zarr_stores(
                filename_or_obj,
                group=open_group,
                many=many,
                consolidated=consolidated,
                storage_options=storage_options,
                zarr_format=zarr_format,
                **open_kwargs,
            )
    except Exception as e:
        from shardwise.io.draft import DraftStore

        draft = DraftStore.after(e, filename_or_obj, storage_options)
        if draft is not None:
            return None, draft
        from shardwise.errors import is_store_failure, naming_metadata_errors

        if not is_store_failure(e):
            raise
        # a store's failure (obstore's GenericError, s3fs's OSError for a 503...): named
        where = f"{open_group.strip('/')}/" if open_group and open_group.strip("/") else ""
        with naming_metadata_errors(
            "opening the dataset", f"{where}zarr.json", "Open it again (the store failed)."
        ):
            raise e from None
    return stores, None


def open_backend_dataset(
    filename_or_obj: Any,
    *,
    group: str | None,
    consolidated: bool | None,
    storage_options: dict[str, Any] | None,
    zarr_format: int | None,
    read_options: ReadOptions | Mapping[str, Any] | None,
    mode: str = "r",
    store: Any = None,
    cache_members: bool = True,
    **decode: Any,
) -> tuple[Dataset, dict[str, ArrayReader]]:
    """The lazily indexed, CF-decoded Dataset ``engine="shardwise"`` returns, and the
    reader of each variable shardwise reads (by variable name). ``store``: an xarray
    ``ZarrStore`` opened already (as ``engine="zarr"`` takes it), used instead of
    opening ``filename_or_obj``."""
    from xarray.backends import StoreBackendEntrypoint

    options = _read_options(read_options)
    if store is not None:
        zarr_store, draft = store, None
    else:
        zarr_store, draft = _zarr_or_draft(
            filename_or_obj,
            group=group,
            open_group=group,
            many=False,
            depth=1,
            consolidated=consolidated,
            storage_options=storage_options,
            zarr_format=zarr_format,
            mode=mode,
            cache_members=cache_members,
        )
    data_store: Any = (
        _ShardwiseDataStore(zarr_store, options)
        if draft is None
        else _DraftDataStore(draft, group or "", options)
    )
    with (
        _naming_bad_metadata(filename_or_obj, group, storage_options, depth=1),
        _compat.close_on_error(data_store),
    ):
        ds = StoreBackendEntrypoint().open_dataset(data_store, **decode)
    return ds, data_store.readers


def _older_keywords(synchronizer: Any, chunk_store: Any, version: Any, zarr_format: Any) -> Any:
    """engine="zarr"'s keywords of xarray before 2026.9, for zarr-python 2, accepted
    as there: ``zarr_version`` is ``zarr_format``; a ``synchronizer`` or ``chunk_store``
    (which zarr-python 3 has no place for) is refused. Returns the Zarr format asked."""
    from shardwise.errors import ArgumentError

    for name, value in (("synchronizer", synchronizer), ("chunk_store", chunk_store)):
        if value is not None:
            raise ArgumentError(
                f"{name} is a zarr-python 2 option",
                expected=f"{name}=None",
                found=f"{name}={value!r}",
                advice="zarr-python 3, which shardwise reads with, has no such option: "
                "leave it out.",
            )
    if version is None or version == zarr_format:
        return zarr_format
    if zarr_format is not None:
        raise ArgumentError(
            "zarr_version and zarr_format disagree",
            expected="zarr_format= alone (zarr_version is its old name)",
            found=f"zarr_version={version!r}, zarr_format={zarr_format!r}",
            advice="Give zarr_format only.",
        )
    return version


class ShardwiseBackendEntrypoint(BackendEntrypoint):
    """Open Zarr v3 stores (sharded or not) with shardwise's shard-aware reader.

    ``xr.open_dataset(store, engine="shardwise", chunks={})`` gives one dask chunk per
    shard; each task reads its shard with one request (or the index and coalesced
    ranges), and shard indexes are cached per process.
    """

    description = (
        "Open sharded Zarr v3 (and Zarr v2) stores with one dask chunk per shard and "
        "each shard's index read once"
    )
    # the package's page (the project has no other public address yet)
    url = "https://pypi.org/project/shardwise/"
    supports_groups = True
    open_dataset_parameters = (
        "filename_or_obj",
        "mask_and_scale",
        "decode_times",
        "concat_characters",
        "decode_coords",
        "drop_variables",
        "use_cftime",
        "decode_timedelta",
        "group",
        "mode",
        "consolidated",
        "storage_options",
        "zarr_format",
        "store",
        "engine",
        "use_zarr_fill_value_as_mask",
        "cache_members",
        "read_options",
    )

    def guess_can_open(self, filename_or_obj: Any) -> bool:
        # never claim a store ahead of engine="zarr"; users ask for shardwise by name
        return False

    def open_dataset(
        self,
        filename_or_obj: Any,
        *,
        mask_and_scale: bool = True,
        decode_times: Any = True,
        concat_characters: bool = True,
        decode_coords: Any = True,
        drop_variables: str | Iterable[str] | None = None,
        use_cftime: bool | None = None,
        decode_timedelta: Any = None,
        group: str | None = None,
        mode: str = "r",
        synchronizer: Any = None,
        chunk_store: Any = None,
        zarr_version: int | None = None,
        consolidated: bool | None = None,
        storage_options: dict[str, Any] | None = None,
        zarr_format: int | None = None,
        store: Any = None,
        engine: Any = None,
        use_zarr_fill_value_as_mask: bool | None = None,
        cache_members: bool = True,
        read_options: ReadOptions | Mapping[str, Any] | None = None,
    ) -> Dataset:
        # as engine="zarr": `engine` is accepted and unused, and the fill-value masking
        # follows the Zarr format (use_zarr_fill_value_as_mask is accepted and, as there,
        # not passed on)
        del engine, use_zarr_fill_value_as_mask
        ds, _ = open_backend_dataset(
            filename_or_obj,
            mask_and_scale=mask_and_scale,
            decode_times=decode_times,
            concat_characters=concat_characters,
            decode_coords=decode_coords,
            drop_variables=drop_variables,
            use_cftime=use_cftime,
            decode_timedelta=decode_timedelta,
            group=group,
            consolidated=consolidated,
            storage_options=storage_options,
            zarr_format=_older_keywords(synchronizer, chunk_store, zarr_version, zarr_format),
            read_options=read_options,
            mode=mode,
            store=store,
            cache_members=cache_members,
        )
        return ds

    def open_datatree(
        self,
        filename_or_obj: Any,
        *,
        mask_and_scale: bool = True,
        decode_times: Any = True,
        concat_characters: bool = True,
        decode_coords: Any = True,
        drop_variables: str | Iterable[str] | None = None,
        use_cftime: bool | None = None,
        decode_timedelta: Any = None,
        group: str | None = None,
        mode: str = "r",
        synchronizer: Any = None,
        chunk_store: Any = None,
        zarr_version: int | None = None,
        consolidated: bool | None = None,
        storage_options: dict[str, Any] | None = None,
        zarr_format: int | None = None,
        read_options: ReadOptions | Mapping[str, Any] | None = None,
    ) -> DataTree:

        return _compat.datatree_from_dict_with_io_cleanup(
            self.open_groups_as_dict(
                filename_or_obj,
                mask_and_scale=mask_and_scale,
                decode_times=decode_times,
                concat_characters=concat_characters,
                decode_coords=decode_coords,
                drop_variables=drop_variables,
                use_cftime=use_cftime,
                decode_timedelta=decode_timedelta,
                group=group,
                mode=mode,
                consolidated=consolidated,
                storage_options=storage_options,
                zarr_format=_older_keywords(synchronizer, chunk_store, zarr_version, zarr_format),
                read_options=read_options,
            )
        )

    def open_groups_as_dict(
        self,
        filename_or_obj: Any,
        *,
        mask_and_scale: bool = True,
        decode_times: Any = True,
        concat_characters: bool = True,
        decode_coords: Any = True,
        drop_variables: str | Iterable[str] | None = None,
        use_cftime: bool | None = None,
        decode_timedelta: Any = None,
        group: str | None = None,
        mode: str = "r",
        synchronizer: Any = None,
        chunk_store: Any = None,
        zarr_version: int | None = None,
        consolidated: bool | None = None,
        storage_options: dict[str, Any] | None = None,
        zarr_format: int | None = None,
        read_options: ReadOptions | Mapping[str, Any] | None = None,
    ) -> dict[str, Dataset]:
        from xarray.backends import StoreBackendEntrypoint

        parent = str(_compat.NodePath("/") / _compat.NodePath(group)) if group else "/"
        options = _read_options(read_options)
        out: dict[str, Dataset] = {}
        zarr_stores, draft = _zarr_or_draft(
            filename_or_obj,
            group=group,
            open_group=parent,
            many=True,
            depth=None,
            consolidated=consolidated,
            storage_options=storage_options,
            zarr_format=_older_keywords(synchronizer, chunk_store, zarr_version, zarr_format),
            mode=mode,
        )
        if draft is not None:
            zarr_stores = {
                str(_compat.NodePath("/") / _compat.NodePath(g)) if g else "/": g
                for g in _draft_groups(draft, group or "")
            }
        with _naming_bad_metadata(filename_or_obj, group, storage_options, depth=None):
            for path, zarr_store in zarr_stores.items():
                store: Any = (
                    _ShardwiseDataStore(zarr_store, options)
                    if draft is None
                    else _DraftDataStore(draft, zarr_store, options)
                )
                with _compat.close_on_error(store):
                    ds = StoreBackendEntrypoint().open_dataset(
                        store,
                        mask_and_scale=mask_and_scale,
                        decode_times=decode_times,
                        concat_characters=concat_characters,
                        decode_coords=decode_coords,
                        drop_variables=drop_variables,
                        use_cftime=use_cftime,
                        decode_timedelta=decode_timedelta,
                    )
                name = (
                    str(_compat.NodePath(path).relative_to(parent))
                    if group
                    else str(_compat.NodePath(path))
                )
                out[name] = ds
        return out
