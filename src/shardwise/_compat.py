"""The one place shardwise uses private APIs of zarr-python, dask and xarray.

Every name here is internal to the library it comes from: not in its documentation, or
documented only under a private module. ``_WHERE`` says, for each, where it lives, what
shardwise uses it for, the versions it was checked against and the public API to move to
once there is one. Checked across the versions pyproject declares: the floors (zarr
3.1.3, dask 2025.9, xarray 2025.11; ``make test-lowest``), the middle of the window
(zarr 3.3, xarray 2026.7; ``make test-3.13``) and the newest (zarr 3.4.2, dask 2026.8.0,
xarray 2026.9.0). Features only the newer releases in the window have are listed in
:data:`NEWER` (refused, with the release they need, on the others); names older releases
keep elsewhere in ``_BEFORE``. A private API that has gained a public home is imported
from that home where it is used, not from here
(``zarr.buffer.default_buffer_prototype``, ``zarr.abc.buffer.Buffer``,
``dask.task_spec.Task``, ``xarray.backends.ZarrStore``, ...).

Design: this module imports nothing at load, because ``import shardwise`` and the xarray
entry point must not import zarr or dask. Modules import it at module level
(``import shardwise._compat as _compat``) and write ``_compat.name`` where they use a
private API; the first access to a name imports it (PEP 562 module ``__getattr__``) and
keeps it in this module's namespace, so later accesses are plain attribute lookups. The
``TYPE_CHECKING`` imports give mypy the same names; keep them in step with ``_WHERE``.
This module imports nothing from shardwise.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable

    from dask.array.core import getter as getter
    from dask.array.optimization import optimize as optimize
    from dask.blockwise import optimize_blockwise as optimize_blockwise
    from dask.layers import ArraySliceDep as ArraySliceDep
    from xarray.backends.api import DATAARRAY_NAME as DATAARRAY_NAME
    from xarray.backends.api import DATAARRAY_VARIABLE as DATAARRAY_VARIABLE
    from xarray.backends.common import (
        datatree_from_dict_with_io_cleanup as datatree_from_dict_with_io_cleanup,
    )
    from xarray.backends.writers import _validate_dataset_names as validate_dataset_names  # noqa: F401
    from xarray.backends.writers import dump_to_store as dump_to_store
    from xarray.backends.writers import get_writable_zarr_store as get_writable_zarr_store
    from xarray.backends.zarr import FillValueCoder as FillValueCoder
    from xarray.backends.zarr import _choose_default_mode as choose_default_mode  # noqa: F401
    from xarray.core import indexing as indexing
    from xarray.core.treenode import NodePath as NodePath
    from xarray.core.utils import FrozenDict as FrozenDict
    from xarray.core.utils import close_on_error as close_on_error
    from xarray.namedarray.pycompat import is_chunked_array as is_chunked_array
    from zarr.codecs import ShardingCodec
    from zarr.core.array_spec import ArrayConfig as ArrayConfig
    from zarr.core.array_spec import ArraySpec as ArraySpec
    from zarr.core.group import GroupMetadata as GroupMetadata
    from zarr.core.metadata import ArrayV2Metadata as ArrayV2Metadata
    from zarr.core.metadata import ArrayV3Metadata as ArrayV3Metadata
    from zarr.core.metadata.v3 import RectilinearChunkGridMetadata as RectilinearChunkGridMetadata
    from zarr.core.metadata.v3 import RegularChunkGridMetadata as RegularChunkGridMetadata
    from zarr.core.sync import _get_loop as io_loop  # noqa: F401
    from zarr.core.sync import sync as sync
    from zarr.storage._common import make_store_path as make_store_path

# name: (module, attribute in it)
_WHERE: dict[str, tuple[str, str]] = {
    # --- zarr-python: 3.1.3 (the floor) to 3.4.2; the chunk grids' names are 3.2's (zarr 3.1
    # keeps the regular one elsewhere: _BEFORE; the rectilinear one came with 3.2: NEWER) ---
    # Runs a coroutine on zarr's I/O event loop from synchronous code; every store request
    # shardwise makes outside a task's own loop goes through it. Public: none
    # (zarr.api.synchronous wraps its calls in it without exporting it).
    "sync": ("zarr.core.sync", "sync"),
    # zarr's I/O event loop itself (started on first use, in its own thread): a read
    # submits its shards' fetches to it and decodes each as it arrives, where ``sync``
    # would wait for them all. Public: none.
    "io_loop": ("zarr.core.sync", "_get_loop"),
    # A StorePath from whatever the user passed (path, URL, Store, StorePath, fsspec
    # mapper) with zarr's own rules for mode and storage_options: behind every opener.
    # Public: none (zarr.storage.StorePath.open takes a Store only).
    "make_store_path": ("zarr.storage._common", "make_store_path"),
    # Parsed Zarr v2 / v3 array metadata (from_dict, to_buffer_dict, dataclass fields),
    # read and written without opening a zarr.Array. Public: none (zarr.Array.metadata
    # hands out these classes but they are not exported).
    "ArrayV2Metadata": ("zarr.core.metadata", "ArrayV2Metadata"),
    "ArrayV3Metadata": ("zarr.core.metadata", "ArrayV3Metadata"),
    # The chunk grids of v3 metadata, regular and (since zarr 3.2) rectilinear: read to
    # find the shard grid, built to write one. Public: none.
    "RectilinearChunkGridMetadata": ("zarr.core.metadata.v3", "RectilinearChunkGridMetadata"),
    "RegularChunkGridMetadata": ("zarr.core.metadata.v3", "RegularChunkGridMetadata"),
    # Group metadata (zarr.json / .zgroup) read and written without opening a zarr.Group.
    # Public: none.
    "GroupMetadata": ("zarr.core.group", "GroupMetadata"),
    # The chunk spec zarr's codec pipeline encodes and decodes with (the codecs zarr-python
    # runs for shardwise). Public: none (zarr.abc.codec's signatures take it).
    "ArrayConfig": ("zarr.core.array_spec", "ArrayConfig"),
    "ArraySpec": ("zarr.core.array_spec", "ArraySpec"),
    # --- dask: 2025.9 (the floor) to 2026.8.0 ----------------------------------------------
    # The getter dask.array.from_array puts in its tasks; the fan-out read graph calls it
    # as from_array would. Public: none (dask.array.from_array builds the whole layer).
    "getter": ("dask.array.core", "getter"),
    # dask.array's graph optimization, as the __dask_optimize__ of the write collection.
    # Public: none for a raw graph (dask.optimize takes collections).
    "optimize": ("dask.array.optimization", "optimize"),
    # Fuses the blockwise layers of a HighLevelGraph (the write layer into the data's).
    # Public: none.
    "optimize_blockwise": ("dask.blockwise", "optimize_blockwise"),
    # The block-location argument of a Blockwise layer (what map_blocks' block_info is
    # built from). Public: none (map_blocks with block_info).
    "ArraySliceDep": ("dask.layers", "ArraySliceDep"),
    # --- xarray: 2025.11 (the floor) to 2026.9.0 --------------------------------------------
    # explicit_indexing_adapter, async_explicit_indexing_adapter, IndexingSupport,
    # LazilyIndexedArray, ImplicitToExplicitIndexingAdapter, OuterIndexer: what a backend
    # array is indexed and wrapped with. Documented for backends (how-to-add-new-backend)
    # but under xarray.core. Public: none yet.
    "indexing": ("xarray.core", "indexing"),
    # The read-only mapping xarray's data stores return for variables and attributes.
    # Public: none.
    "FrozenDict": ("xarray.core.utils", "FrozenDict"),
    # Closes a data store when decoding it raises, as xarray's own backends do.
    # Public: none.
    "close_on_error": ("xarray.core.utils", "close_on_error"),
    # Group paths of a DataTree, normalised and made relative as engine="zarr" does.
    # Public: none.
    "NodePath": ("xarray.core.treenode", "NodePath"),
    # A DataTree from per-group Datasets that closes all their stores, as engine="zarr"
    # builds one. Public: none (xarray.DataTree.from_dict, then set_close by hand).
    "datatree_from_dict_with_io_cleanup": (
        "xarray.backends.common",
        "datatree_from_dict_with_io_cleanup",
    ),
    # Encodes the _FillValue attribute of xarray's zarr encoding (what xarray writes for
    # a v3 array). Public: none.
    "FillValueCoder": ("xarray.backends.zarr", "FillValueCoder"),
    # to_zarr's default mode (w-, a or r+ from append_dim and region). Public: none.
    "choose_default_mode": ("xarray.backends.zarr", "_choose_default_mode"),
    # The names xarray gives a DataArray written as a one-variable Dataset. Public: none.
    "DATAARRAY_NAME": ("xarray.backends.api", "DATAARRAY_NAME"),
    "DATAARRAY_VARIABLE": ("xarray.backends.api", "DATAARRAY_VARIABLE"),
    # Dataset.to_zarr's metadata step, taken apart: its name check, its writable
    # ZarrStore and its dump of the Dataset into that store (the data step is
    # shardwise's). Public: none (Dataset.to_zarr does all of it and the data too).
    "validate_dataset_names": ("xarray.backends.writers", "_validate_dataset_names"),
    "get_writable_zarr_store": ("xarray.backends.writers", "get_writable_zarr_store"),
    "dump_to_store": ("xarray.backends.writers", "dump_to_store"),
    # Whether an array is chunked (dask, cubed): the data xarray hands the writer.
    # Public: none.
    "is_chunked_array": ("xarray.namedarray.pycompat", "is_chunked_array"),
}


# names that older releases in the version window have elsewhere: name -> where, there
_BEFORE: dict[str, tuple[str, str]] = {
    # zarr 3.1 (3.2 moved it into the metadata classes, renamed): the same constructor
    # (chunk_shape=) and attribute
    "RegularChunkGridMetadata": ("zarr.core.chunk_grids", "RegularChunkGrid"),
}

# names only some releases in the version window have, with the feature (in NEWER) they
# belong to: on the others they are a class
# nothing is an instance of (the feature is refused where it would be used: see NEWER)
_FEATURE_OF: dict[str, str] = {
    "RectilinearChunkGridMetadata": "rectilinear",
}


def __getattr__(name: str) -> Any:
    try:
        module, attr = _WHERE[name]
    except KeyError:
        raise AttributeError(f"module 'shardwise._compat' has no attribute {name!r}") from None
    try:
        value = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError):
        if name in _BEFORE:
            value = getattr(importlib.import_module(_BEFORE[name][0]), _BEFORE[name][1])
        elif name not in _FEATURE_OF or has(_FEATURE_OF[name]):
            raise
        else:
            value = type(name, (), {"__doc__": f"absent: {needed(_FEATURE_OF[name])}"})
    globals()[name] = value
    return value


# -- the version window --------------------------------------------------------------------
# Features that only the newer releases inside the versions pyproject declares have:
# feature -> (distribution, the first release that has it, what it is). Where a feature
# is missing, shardwise refuses what needs it with an error naming the release
# (errors.VersionError), before anything is written; the rest works on every version.
NEWER: dict[str, tuple[str, tuple[int, ...], str]] = {
    # zarr-python reads and writes rectilinear chunk grids (zarr-extensions) from 3.2 on
    "rectilinear": ("zarr", (3, 2), "rectilinear shard grids"),
    # xarray's metadata step writes an array with a rectilinear grid from 2026.9 on;
    # before, it asks zarr-python for the array's ``shards``, which such a grid has none of
    "xarray-rectilinear": ("xarray", (2026, 9), "rectilinear shard grids through xarray"),
}


def version(distribution: str) -> tuple[int, ...]:
    """The installed release of ``distribution`` as numbers (``(3, 1, 3)``); the
    numeric start of each of the first three parts (``2026.9.0rc1`` -> ``(2026, 9, 0)``)."""
    from importlib.metadata import version as installed

    parts = []
    for part in installed(distribution).split(".")[:3]:
        digits = ""
        for ch in part:
            if not ch.isdigit():
                break
            digits += ch
        parts.append(int(digits or 0))
    return tuple(parts)


def has(feature: str) -> bool:
    """Whether the installed releases have ``feature`` (a key of :data:`NEWER`)."""
    distribution, first, _ = NEWER[feature]
    return version(distribution) >= first


def needed(feature: str) -> str:
    """What ``feature`` needs, and what is installed, as a sentence part."""
    distribution, first, what = NEWER[feature]
    name = {"zarr": "zarr-python"}.get(distribution, distribution)
    have = ".".join(map(str, version(distribution)))
    return f"{what} need {name} >= {'.'.join(map(str, first))} (installed: {have})"


# private attributes of xarray objects, read here so that the uses are in one place


def lazy_data(obj: Any) -> Any:
    """A Variable's lazily indexed array (``Variable._data``; ``.data`` would load it),
    or ``obj`` itself when it has none. xarray 2025.11-2026.9. Public: none."""
    return getattr(obj, "_data", obj)


def closer(ds: Any) -> Callable[[], None] | None:
    """The close callback of a Dataset a backend opened (``Dataset._close``), to hand to
    another Dataset's ``set_close``. xarray 2025.11-2026.9. Public: none
    (``Dataset.close`` closes and forgets it)."""
    close: Callable[[], None] | None = ds._close
    return close


def validate_region(zstore: Any, ds: Any) -> Any:
    """``ds`` with its ``region`` worked out and checked against the arrays ``zstore``
    (a writable ``xarray.backends.ZarrStore``) opened, as ``Dataset.to_zarr`` does before
    writing (``ZarrStore._validate_and_autodetect_region``). xarray 2025.11-2026.9.
    Public: none (``Dataset.to_zarr(region="auto")`` does it and writes)."""
    return zstore._validate_and_autodetect_region(ds)


def validate_encoding(zstore: Any, encoding: Any) -> None:
    """Refuse an ``encoding`` for variables that exist in ``zstore`` already, as
    ``Dataset.to_zarr`` does (``ZarrStore._validate_encoding``). xarray 2025.11-2026.9.
    Public: none."""
    zstore._validate_encoding(encoding)


# fsspec: the listing with sizes


def has_fs_find(fs: Any) -> bool:
    """Whether an fsspec filesystem has the asynchronous ``_find`` (async filesystems:
    s3fs, gcsfs, adlfs, http). fsspec 2025.1-2026.x. Public: ``fs.find`` (synchronous)."""
    return hasattr(fs, "_find")


async def fs_find(fs: Any, path: str) -> dict[str, Any]:
    """Every file below ``path`` of an async fsspec filesystem with its details (size
    included), in one listing (``AsyncFileSystem._find``). fsspec 2025.1-2026.x.
    Public: ``fs.find(path, detail=True)``, synchronous (it would block zarr's loop)."""
    found: dict[str, Any] = await fs._find(path, maxdepth=None, withdirs=False, detail=True)
    return found


# zarr-python: an array's metadata changed in place of zarr-python's own resize/append


def codec_sync_method(codec: Any, direction: str) -> Any:
    """A zarr-python codec's synchronous ``decode``/``encode`` of one chunk
    (``_decode_sync``/``_encode_sync``, taking the value and its ``ArraySpec``), or None
    when it has none (zarr < 3.4, or a codec that says ``_sync_capable = False``).
    zarr 3.4 (``SupportsSyncCodec``). Public: the asynchronous ``codec.decode`` and
    ``codec.encode`` (batches of ``(value, spec)``), the fallback."""
    method = getattr(codec, f"_{direction}_sync", None)
    if method is None or not getattr(codec, "_sync_capable", True):
        return None
    return method


def literal(value: Any) -> Any:
    """A zarr-python codec setting as the string the Zarr spec names it by (``"little"``,
    ``"end"``, ...), None and other values as they are. zarr 3.4 holds the strings; zarr
    3.1 to 3.3 hold enums (``Endian``, ``ShardingCodecIndexLocation``, ``BloscShuffle``,
    ``BloscCname``) that neither equal the string (``Endian.big == "big"`` is False) nor
    print as it (``str(Endian.big)`` is ``"Endian.big"``): compared as they are, every
    multi-byte value would be read in the wrong byte order and every index at the start
    read from the end. Public: the configuration of ``codec.to_dict()``."""
    return getattr(value, "value", value)


def from_dict(cls: Any, doc: dict[str, Any], path: str) -> Any:
    """``cls.from_dict(doc)`` for zarr-python's metadata classes, naming the node
    (``path=``) where zarr-python takes it: zarr 3.4.2 names it in the warnings its
    parsers give, zarr 3.1.3-3.4.1 take the document alone. Public: none."""
    import inspect

    if "path" in inspect.signature(cls.from_dict).parameters:
        return cls.from_dict(doc, path=path)
    return cls.from_dict(doc)


def sharding_codec(metadata: Any) -> ShardingCodec | None:
    """The sharding codec of Zarr v3 array metadata (an ``ArrayV3Metadata``), or None
    for an unsharded array: what ``ArrayV3Metadata.sharding_codec`` gives from zarr 3.4
    on (zarr 3.1 to 3.3 lack it, and zarr marks it for moving to the Array class).
    Public: none."""
    from zarr.codecs import ShardingCodec

    codecs = metadata.codecs
    if len(codecs) == 1 and isinstance(codecs[0], ShardingCodec):
        return codecs[0]
    return None


def replace_metadata(metadata: Any, **changes: Any) -> Any:
    """``metadata`` (an ``ArrayV3Metadata``, a frozen dataclass) with ``changes`` made
    (``dataclasses.replace``; its ``__init__`` checks them again: the chunk grid against
    the shape, the inner chunks against every shard). zarr 3.1-3.4. Public: none
    (``zarr.Array.update_attributes`` changes attributes only; ``resize`` the shape only,
    never the grid)."""
    from dataclasses import replace

    return replace(metadata, **changes)


def decode_chunk_key(encoding: Any, key: str) -> tuple[int, ...]:
    """The chunk coordinates of ``key`` under a chunk key encoding, as zarr-python 3.2
    on decodes them. zarr 3.1's default encoding splits ``"c/0/0"`` after its first
    character only, which leaves an empty coordinate (``ValueError``); decoded here for
    every release. Public: ``ChunkKeyEncoding.decode_chunk_key``."""
    from zarr.core.chunk_key_encodings import DefaultChunkKeyEncoding

    if type(encoding) is DefaultChunkKeyEncoding:
        if key == "c":
            return ()
        prefix = "c" + encoding.separator
        if not key.startswith(prefix):
            raise ValueError(f"Invalid chunk key for default encoding: {key!r}")
        return tuple(map(int, key[len(prefix) :].split(encoding.separator)))
    return tuple(encoding.decode_chunk_key(key))


def is_fixed_size(codec: Any) -> bool:
    """Whether a zarr-python codec encodes to a size fixed by its input's
    (``is_fixed_size``). zarr 3.1's numcodecs checksum codecs (``numcodecs.adler32``,
    ``crc32``, ``jenkins_lookup3``...) add a fixed number of bytes but leave the flag
    unset; zarr 3.2 on sets it. Public: ``codec.is_fixed_size``."""
    if getattr(codec, "is_fixed_size", False):
        return True
    return any(c.__name__ == "_NumcodecsChecksumCodec" for c in type(codec).__mro__)


def array_config(arr: Any) -> Any:
    """A ``zarr.Array``'s runtime configuration (``ArrayConfig``: ``write_empty_chunks``,
    ``order``): ``Array.config`` from zarr 3.2 on; zarr 3.1 keeps it in the
    ``AsyncArray``'s ``_config``. Public: ``Array.config`` (zarr >= 3.2)."""
    config = getattr(arr, "config", None)
    return config if config is not None else arr._async_array._config  # (zarr 3.1)


def array_with_metadata(target: Any, metadata: Any, store_path: Any = None) -> Any:
    """A ``zarr.Array`` over ``target``'s store path (or ``store_path``) with
    ``metadata`` (just written to its ``zarr.json``, or to be written after the data),
    without reading the document. zarr 3.1-3.4 (``AsyncArray``'s constructor; the
    configuration of :func:`array_config`). Public: ``zarr.open_array(store_path)``, one
    read more, of a document that must exist."""
    import zarr

    config = array_config(target)
    where = target.store_path if store_path is None else store_path
    return zarr.Array(zarr.AsyncArray(metadata=metadata, store_path=where, config=config))


def zarr_store_on(zstore: Any, store: Any) -> Any:
    """xarray's ``ZarrStore`` ``zstore`` with its group and the members it cached bound to
    ``store`` (a zarr ``Store``) at the same paths, with the metadata they hold, reading
    nothing: what a write whose metadata step ran on a staging view of ``store`` returns.
    xarray 2025.11-2026.9 (``ZarrStore``'s ``zarr_group`` and ``_members`` slots) and
    zarr 3.1-3.4 (``AsyncGroup``'s constructor). Public: ``ZarrStore.open_group(store)``,
    which reads the group's document and lists its members again."""
    import zarr
    from zarr.core.group import AsyncGroup
    from zarr.storage import StorePath

    def on(node: Any) -> Any:
        where = StorePath(store, node.path)
        if isinstance(node, zarr.Array):
            return array_with_metadata(node, node.metadata, where)
        return zarr.Group(AsyncGroup(metadata=node.metadata, store_path=where))

    zstore.zarr_group = on(zstore.zarr_group)
    zstore._members = {name: on(node) for name, node in zstore._members.items()}
    return zstore


# object stores: conditional reads and puts (shardwise.io.conditional)


async def s3fs_client(fs: Any, bucket: str) -> Any:
    """The aiobotocore S3 client an s3fs filesystem sends ``bucket``'s requests with
    (``set_session``, ``get_s3``), for ``GetObject`` with its ETag and ``PutObject``
    with ``If-Match`` / ``If-None-Match`` and their 412/409 answers, which s3fs's own
    calls turn into ``OSError``s without the status. s3fs 2025.2-2026.9. Public:
    ``fs.pipe_file(..., mode="create")`` (``If-None-Match`` only; no ``If-Match``, no
    ETag of what ``cat_file`` returned)."""
    await fs.set_session()
    return await fs.get_s3(bucket)


def s3fs_os_error(error: Exception, path: str) -> Exception:
    """The ``OSError`` s3fs raises for a botocore error of its own requests (its
    ``translate_boto_error``: ``FileNotFoundError``, ``PermissionError``...), for the
    requests shardwise makes with :func:`s3fs_client`. s3fs 2025.2-2026.9. Public:
    none (``s3fs.errors`` is importable but undocumented)."""
    from s3fs.errors import translate_boto_error

    translated: Exception = translate_boto_error(error)
    if isinstance(translated, OSError) and not translated.filename:
        translated.filename = path
    return translated


def memory_store_dict(store: Any) -> Any:
    """The dict behind a zarr-python ``MemoryStore`` (``_store_dict``: key -> Buffer),
    whose objects' identities are their versions for conditional puts. zarr 3.1-3.4.
    Public: none (``MemoryStore(store_dict=...)`` takes one in, nothing gives it out)."""
    return store._store_dict
