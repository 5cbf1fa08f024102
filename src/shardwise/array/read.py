"""``shardwise.array.from_zarr``: one Zarr array read as a ``dask.array.Array`` with the fan-out
graph of ``shardwise.graph.fanout``, and the ``chunks=`` words and per-axis sizes that
group whole inner chunks into dask chunks.

Apart from the write path (``shardwise.array.api``), which it shares nothing with but
how axis numbers are read (``shardwise.array.decisions.axis_of``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from shardwise.array.decisions import axis_of, no_axis
from shardwise.errors import ChunksError
from shardwise.graph.fanout import block_sizes, fanout_array
from shardwise.io.capabilities import fsspec_store, in_memory
from shardwise.io.reader import ArrayReader
from shardwise.io.stores import ReadOptions, store_token

__all__ = ["from_zarr"]

_WORDS = ("shards", "inner", "auto")


def from_zarr(
    store: Any,
    path: str | None = "",
    storage_options: dict[str, Any] | None = None,
    chunks: str | Mapping[int, Any] | Sequence[Any] | None = None,
    name: str | None = None,
    inline_array: bool = False,
    *,
    component: str | None = None,
    read_options: Any = None,
    **kwargs: Any,
) -> Any:
    """Read a Zarr array as a ``dask.array.Array`` with the fan-out graph: one index task
    per shard that several dask chunks share, and below it one task per dask chunk
    reading its inner chunks as coalesced byte ranges. Zarr v3 arrays (sharded or not),
    Zarr v2 arrays and stores of the 2022 sharding draft are read.

    The parameters are ``dask.array.from_zarr``'s, in its order and with its
    meaning (``from_zarr(url, "group/array", {"anon": True})`` reads what dask reads),
    and ``read_options``.

    Parameters
    ----------
    store : str, os.PathLike, zarr.abc.store.Store or zarr.Array
        A path, a URL (``s3://...``) or a zarr-python ``Store``; or a ``zarr.Array``
        already open (``from_zarr(z)``, as in dask): its store and path are read, with
        the metadata it holds, and ``path``/``component``, ``storage_options`` and
        ``kwargs`` must then be left out (a ``shardwise.errors.ChunksError``).
    path : str, default ""
        The array's path in ``store`` (``""``: the array at its root).
    storage_options : dict, optional
        Options of the fsspec file system of a URL (``{"anon": True}``); ignored, as
        dask ignores them, for a local path, a ``file://`` URL or a ``Store``.
    chunks : str, dict, tuple or None, optional
        None (default): whole shards, as ``xr.open_dataset(..., engine="shardwise",
        chunks={})`` gives them: one dask chunk per shard from local disk and memory,
        several shards together (toward dask's ``array.chunk-size``) from an object
        store or an HTTP server, so that a task's requests are in flight at once.
        ``"shards"`` (one dask chunk per shard), ``"inner"`` (one per inner
        chunk), ``"auto"`` (whole shards or inner chunks toward dask's
        ``array.chunk-size``), or per axis (a tuple, or a dict by axis number) any of
        those, an int size, a tuple of sizes, ``-1`` (the whole axis) or None (shards).
        Dask chunks always hold whole inner chunks: sizes that would cut them are moved
        to inner-chunk boundaries, with a
        ``shardwise.errors.ChunkRoundingWarning``.
    name : str, optional
        The dask array's name, that of its read layer (the index layer and the keys
        holding the reader are named after it). By default a name tokenized from the
        array (its store, path and metadata), ``storage_options``, ``kwargs``, the
        chunks and ``read_options``: the same array read twice the same way gets the
        same name, two arrays different names.
    inline_array : bool, default False
        As in ``dask.array.from_array``: False keeps the reader in one key,
        ``original-<name>``, that the read tasks refer to (and in ``reader-<name>`` for
        the index tasks); True puts it in every task instead (each task sent to a
        worker then carries its own copy of the reader).
    component : str, optional
        dask's name for ``path``; both given, and different, is a
        ``shardwise.errors.ChunksError``.
    read_options : ReadOptions or dict, optional
        How reads coalesce byte ranges, use the index cache... (a
        ``shardwise.ReadOptions`` or a dict of its fields).
    **kwargs
        Passed to ``zarr.open_array``, as dask passes them (``zarr_format=2`` or ``3``
        to insist on a format, ``config=``...); a name none of ``zarr.open_array``,
        ``zarr.create`` and ``zarr.open_group`` takes (a misspelling) is a
        ``TypeError``. ``mode`` is accepted and ignored: a read always opens the array
        read-only.

    Returns
    -------
    dask.array.Array
        The array, lazily: nothing is read until it is computed. Unlike
        ``dask.array.from_zarr``, the default is one dask chunk per shard, not one
        per zarr (inner) chunk.

    Examples
    --------
    >>> x = shardwise.array.from_zarr("data.zarr", "temperature")
    >>> x.mean().compute()  # doctest: +SKIP
    """
    if isinstance(read_options, Mapping):
        read_options = ReadOptions(**read_options)
    if component is not None and path and component.strip("/") != path.strip("/"):
        raise ChunksError(
            "path and component name different arrays",
            expected="one of them (component is dask's name for path), or the same path",
            found=f"path={path!r}, component={component!r}",
            array=path,
            advice="Pass only one of them.",
        )
    if storage_options is not None and not _is_url(store) and not _is_zarr_array(store):
        storage_options = None  # as dask: for a URL only (a zarr.Array refuses them)
    reader = ArrayReader.open(
        store,
        path or component or "",
        storage_options=storage_options,
        options=read_options,
        **kwargs,
    )
    label = reader.info.path.strip("/") or "/"
    by_axis = None if chunks is None else _chunks_by_axis(chunks, reader.ndim, label)
    sizes = block_sizes(reader, tuple(range(reader.ndim)), by_axis, name=label)
    if name is None:
        name = f"shardwise-read-{label}-{_token(reader, sizes, storage_options, kwargs)}"
    return fanout_array(
        reader,
        reader,
        sizes,
        name=label,
        dtype=reader.dtype,
        array_name=name,
        inline_array=inline_array,
    )


def _is_url(store: Any) -> bool:
    """Whether ``store`` is a URL of an fsspec file system (not a local path, not a
    ``file://`` or ``memory://`` URL): what ``storage_options`` are for."""
    if not isinstance(store, str) or "://" not in store:
        return False
    return store.split("://", 1)[0].lower() not in ("", "file", "memory")


def _is_zarr_array(store: Any) -> bool:
    import zarr

    return isinstance(store, zarr.Array)


def _token(
    reader: ArrayReader,
    sizes: tuple[tuple[int, ...], ...],
    storage_options: dict[str, Any] | None,
    kwargs: dict[str, Any],
) -> str:
    """The default name's token: the same for the same array read the same way, in any
    process; different for different arrays (store, path, metadata) or chunks. Not the
    reader's own token, which is new at every open (it keys the index cache).

    A store is named by where it is (``shardwise.io.stores.store_token``), except a
    ``MemoryStore``, whose name is the ``id`` of its dict, used again once that dict is
    freed: it is tokenized by its contents, as dask tokenizes an in-memory array."""
    from dask.base import tokenize

    store = reader.store
    where = tokenize(store) if in_memory(store) else store_token(store)
    # where an object store is (an endpoint) need not show in the store's name
    fsspec = fsspec_store(store)
    fs_options = None if fsspec is None else getattr(fsspec.fs, "storage_options", None)
    return tokenize(
        where,
        fs_options,
        storage_options,
        {k: v for k, v in kwargs.items() if k != "mode"},  # ignored: reads are read-only
        reader.info.path,
        reader.info.metadata.to_dict(),
        sizes,
        reader.options,
    )


def _chunks_by_axis(chunks: Any, ndim: int, name: str) -> Any:
    if isinstance(chunks, str):
        if chunks not in _WORDS:
            raise ChunksError(
                "unknown chunks",
                expected='"shards", "inner", "auto", or sizes per axis (a tuple or a dict)',
                found=repr(chunks),
                array=name,
                advice='Use chunks="shards" for one dask chunk per shard.',
            )
        return chunks
    if isinstance(chunks, Mapping):
        items = list(chunks.items())
    elif isinstance(chunks, Sequence):
        if len(chunks) != ndim:
            raise ChunksError(
                "chunks have the wrong number of axes",
                expected=f"{ndim} entries, one per axis",
                found=f"{len(chunks)}: {tuple(chunks)!r}",
                array=name,
            )
        items = list(enumerate(chunks))
    else:
        raise ChunksError(
            "unknown chunks",
            expected='"shards", "inner", "auto", or sizes per axis (a tuple or a dict)',
            found=f"{type(chunks).__name__} {chunks!r}",
            array=name,
        )
    out: dict[int, Any] = {}
    for value, size in items:
        if (axis := axis_of(value, ndim)) is None:
            raise no_axis(ChunksError, "a key of chunks", value, ndim, name)
        out[axis] = size
    return out
