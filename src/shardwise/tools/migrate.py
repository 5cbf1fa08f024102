"""``shardwise.migrate``: a store of the 2022 sharding draft to Zarr v3 ``sharding_indexed``.

Every array keeps its shape, data type, fill value, inner chunk shape and shard shape;
its shards get the final spec's index (at the end, with crc32c). The compressed inner
chunks are copied as bytes wherever the draft's compressor is a Zarr v3 codec that
writes the same bytes (none, blosc, zstd, gzip; ``F`` memory layout becomes a
``transpose`` codec); zlib, which Zarr v3 has no codec for, is decoded and re-encoded
as gzip at the same level. Unused bytes in the old shards are dropped, missing chunks
and shards stay missing, and chunks that hold only the fill value are copied as they
are (copying is not judging).

One dask task per stored shard: one read of the old shard, one put of the new one. A
shard already in the destination whose index reads back (crc32c and entries) is
skipped, so running the same call again after a failure completes the job.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field, replace
from typing import Any

import shardwise._compat as _compat
from shardwise.codecs import ShardDecoder
from shardwise.errors import (
    NotAZarrStoreError,
    ShardwiseError,
    StoreExistsError,
    WriteError,
    naming_io_errors,
)
from shardwise.format.metadata import ArrayInfo
from shardwise.format.names import key_under, node_path
from shardwise.graph.target import ShardSink
from shardwise.graph.write import wait_for
from shardwise.io.draft import DraftStore
from shardwise.io.listing import list_keys_sync
from shardwise.io.open import has_zarr_json, open_store
from shardwise.io.reader import ArrayReader
from shardwise.io.stores import check_apart, check_replaceable, location

__all__ = ["MigrationReport", "migrate"]

MIGRATE_ADVICE = (
    "Check the stores (space, permissions, connection), then run again with mode='a' "
    "(--mode a): the shards already migrated are kept."
)


@dataclass
class MigrationReport:
    """What :func:`migrate` did (or, with ``compute=False``, will do)."""

    arrays: list[str] = field(default_factory=list)
    groups: list[str] = field(default_factory=list)
    # array -> the codec its chunks are re-encoded with (absent: copied as bytes)
    reencoded: dict[str, str] = field(default_factory=dict)
    shards: int = 0  # stored shards (or chunks of unsharded arrays) to migrate


def recode_zlib(codecs: tuple[Any, ...]) -> tuple[tuple[Any, ...], str | None]:
    """``codecs`` with zlib (numcodecs', not a Zarr v3 codec) replaced by gzip at the
    same level, and what it was replaced with (None when nothing was)."""
    from zarr.codecs import GzipCodec

    out, changed = [], None
    for c in codecs:
        if type(c).__name__ == "Zlib":
            level = int(c.codec_config.get("level", 1))
            out.append(GzipCodec(level=level))
            changed = f"gzip (level {level})"
        else:
            out.append(c)
    return tuple(out), changed


def _target_metadata(info: Any) -> tuple[Any, str | None]:
    """The final-spec metadata of a draft array (index codecs with crc32c, dimension
    names, ``_FillValue`` for xarray as zarr-python 2 meant it) and the codec its chunks
    are re-encoded with, if any."""
    from zarr.codecs import BytesCodec, Crc32cCodec

    metadata = info.metadata
    attributes = dict(metadata.attributes)
    dims = attributes.pop("_ARRAY_DIMENSIONS", None)
    if not isinstance(dims, list) or len(dims) != info.ndim:
        dims = [f"dim_{i}" for i in range(info.ndim)]
    attributes["_FillValue"] = _compat.FillValueCoder.encode(info.fill_value, info.dtype)

    sharding = metadata.sharding_codec
    if sharding is not None:
        inner, changed = recode_zlib(tuple(sharding.codecs))
        codec = replace(
            sharding,
            codecs=inner,
            index_codecs=(BytesCodec(endian="little"), Crc32cCodec()),
            index_location="end",
        )
        codecs: tuple[Any, ...] = (codec,)
    else:
        codecs, changed = recode_zlib(tuple(metadata.codecs))
    target = replace(metadata, codecs=codecs, attributes=attributes, dimension_names=tuple(dims))
    return target, changed


def _kind_of(store: Any, storage_options: Any) -> str:
    """What is at ``store`` when it is not a draft store."""

    opened = open_store(store, storage_options)
    if opened is None:
        return "nothing"
    return f"{opened.format} ({opened.document})" if opened.format else "no Zarr metadata"


def migrate(
    src: Any,
    dst: Any,
    *,
    group: str | None = None,
    storage_options: dict[str, Any] | None = None,
    dst_storage_options: dict[str, Any] | None = None,
    mode: str = "w-",
    compute: bool = True,
) -> Any:
    """Migrate the store of the 2022 sharding draft at ``src`` (under ``group``) to a
    Zarr v3 store at ``dst`` (paths, URLs or zarr ``Store`` objects), copying compressed
    chunks as bytes (see the module docstring).

    ``mode="w-"`` refuses an existing ``dst``, unless it holds a migration of the same
    source that is to be completed (``mode="a"``); ``mode="w"`` replaces it. Runs on
    the current dask scheduler and returns a :class:`MigrationReport`; with
    ``compute=False`` the metadata is written and ``(report, delayed)`` returned, the
    ``dask.delayed`` copying the shards."""
    import dask
    import zarr
    from zarr.buffer import default_buffer_prototype

    draft = DraftStore.open(src, storage_options)
    if draft is None:
        raise WriteError(
            "the source is not a store of the 2022 sharding draft",
            expected="a root zarr.json with zarr_format "
            "'https://purl.org/zarr/spec/protocol/core/3.0'",
            found=_kind_of(src, storage_options),
            advice="migrate moves draft stores forward; Zarr v2 and v3 stores need no "
            "migration (shardwise reads them as they are).",
        )
    if mode not in ("w-", "w", "a"):
        raise WriteError("unknown mode", expected="'w-', 'w' or 'a'", found=repr(mode))
    check_apart(location(src, None, storage_options), location(dst, None, dst_storage_options))
    if mode == "w":
        check_replaceable(dst, None, dst_storage_options)
    exists = has_zarr_json(dst, dst_storage_options)
    if exists and mode == "w-":
        raise StoreExistsError(
            "the destination holds Zarr data already",
            expected="no zarr.json at the destination",
            found="a zarr.json",
            key="zarr.json",
            advice="Pass mode='a' (shardwise migrate --mode a) to complete an interrupted "
            "migration, or mode='w' (--mode w) to replace it.",
        )

    # plan everything (and refuse what cannot be represented) before writing
    base = node_path((group or "").strip("/"))
    proto = default_buffer_prototype()
    if base and not (
        draft.arrays(base) or draft.groups(base) or draft.get(f"meta/root/{base}.group.json")
    ):
        raise NotAZarrStoreError(
            "the source has no such group",
            expected="a group of the 2022 draft (meta/root/<group>...)",
            found="nothing",
            array=base,
            key=f"{draft.prefix}meta/root/{base}.group.json",
            advice="Check the group's name (shardwise info SRC lists them). Nothing was written.",
        )
    groups, arrays, report = [], [], MigrationReport()
    todo = [base]
    while todo:
        g = todo.pop(0)
        groups.append((g, draft.group_attributes(g)))
        todo += [f"{g}/{c}" if g else c for c in draft.groups(g)]
        for name in draft.arrays(g):
            path = f"{g}/{name}" if g else name
            info = draft.info(path)
            target, changed = _target_metadata(info)
            # the documents, made now: what zarr-python cannot write fails before dst;
            # the stored shards, listed (the cost follows them, not the grid)
            stored = sorted(list_keys_sync(draft.store, info.data_prefix))
            shards = [c for c in map(info.coords, stored) if c is not None]
            arrays.append((path, info, target, target.to_buffer_dict(proto), shards))
            if changed:
                report.reencoded[path] = changed
    report.groups = [g or "/" for g, _ in groups]
    report.arrays = [a[0] for a in arrays]

    root = zarr.open_group(
        dst,
        mode="w" if mode == "w" or not exists else "a",
        zarr_format=3,
        storage_options=dst_storage_options,
    )
    dst_store = root.store_path.store
    prefix = root.store_path.path.strip("/")
    for g, attributes in groups:
        rel = g[len(base) :].strip("/") if base else g
        node = root if not rel else root.require_group(rel)
        node.attrs.update(attributes)
    tasks = []
    for path, info, target, documents, shards in arrays:
        rel = path[len(base) :].strip("/") if base else path
        where = f"{prefix}/{rel}" if prefix else rel
        for key, buf in documents.items():
            _compat.sync(dst_store.set(key_under(prefix, f"{where}/{key}"), buf))
        tasks += [(draft.store, info, dst_store, where, target, shard) for shard in shards]
    report.shards = len(tasks)
    delayed = _graph(tasks)
    if not compute:
        return report, delayed
    dask.compute(delayed)
    return report


def _graph(tasks: list[tuple[Any, ...]]) -> Any:
    from dask.highlevelgraph import HighLevelGraph
    from dask.task_spec import Task

    name = f"shardwise-migrate-{uuid.uuid4().hex}"
    layer: dict[Any, Any] = {
        (name, i): Task((name, i), _migrate_shard, *t) for i, t in enumerate(tasks)
    }
    graph = HighLevelGraph({name: layer}, {name: set()})
    return wait_for(f"shardwise-migrated-{name[18:]}", graph, list(layer))


def _migrate_shard(
    src_store: Any, info: Any, dst_store: Any, where: str, target: Any, shard: tuple[int, ...]
) -> None:
    """Copy one shard (or one chunk of an unsharded array) to its new key; a store's I/O
    error names the array and the shard's key (the new key when the put fails)."""
    sink = ShardSink(
        dst_store,
        ArrayInfo.from_metadata(target, where),
        order="C",
        what="migrating a shard",
        advice=MIGRATE_ADVICE,
    )
    with naming_io_errors(
        "migrating a shard", array=where or "/", key=info.key(shard), advice=MIGRATE_ADVICE
    ):
        _copy_shard(src_store, info, sink, shard)


def _copy_shard(src_store: Any, info: Any, sink: ShardSink, shard: tuple[int, ...]) -> None:
    from zarr.buffer import default_buffer_prototype

    proto = default_buffer_prototype()
    new_decoder = sink.decoder(shard)
    there = None  # the shard in the destination, if any
    if isinstance(new_decoder, ShardDecoder):
        there = sink.fetch(shard)
        if there is not None and _reads_back(new_decoder, there, sink.key(shard)):
            return  # done by an earlier run
    old_key = info.key(shard)
    buf = _compat.sync(src_store.get(old_key, proto))
    if buf is None:
        return  # deleted since it was listed: stays missing
    old = ArrayReader(src_store, info).decoder(shard)
    data = buf.as_numpy_array()  # the bytes as read: no copy
    if not isinstance(old, ShardDecoder):  # a chunk of an unsharded array
        if _recoded(info.codecs, sink.info.codecs):
            blob = _reencode(sink.info.codecs, old.decode(data, key=old_key, chunk=shard))
            buf = proto.buffer.from_bytes(blob)
        sink.put(shard, buf)
        return
    assert isinstance(new_decoder, ShardDecoder)  # the same geometry as the old one
    view, table = old.parse(data, key=old_key)
    recode = _recoded(old.codec.codecs, new_decoder.codec.codecs)
    chunks: dict[tuple[int, ...], Any] = {}
    for inner in zip(*(a.tolist() for a in (table[..., 0] != 2**64 - 1).nonzero()), strict=True):
        start, n = int(table[inner][0]), int(table[inner][1])
        raw: Any = view[start : start + n]
        if recode:
            raw = _reencode(
                new_decoder.codec.codecs, old.chunk.decode(raw, key=old_key, chunk=inner)
            )
        chunks[tuple(inner)] = raw
    # an old shard with no chunks stays missing (and an unreadable one there goes)
    sink.put_chunks(shard, chunks, existed=there is not None)


def _reads_back(decoder: ShardDecoder, buf: Any, key: str) -> bool:
    """Whether a shard already in the destination has an index that reads back."""
    try:
        decoder.parse(buf.to_bytes(), key=key)
    except ShardwiseError:
        return False
    return True


def _recoded(old: Any, new: Any) -> bool:
    return [type(c) for c in old] != [type(c) for c in new]


def _reencode(codecs: Any, values: Any) -> bytes:
    """Encode one chunk with ``codecs`` (transpose, bytes, then gzip: the only
    re-encoding migrate does)."""
    import numcodecs
    import numpy as np

    raw = np.ascontiguousarray(values)
    codecs = list(codecs)
    for c in codecs:
        name = type(c).__name__
        if name == "TransposeCodec":
            raw = np.ascontiguousarray(raw.transpose(c.order))
        elif name == "BytesCodec":
            endian = getattr(c.endian, "value", c.endian)
            dtype = raw.dtype.newbyteorder("<" if endian == "little" else ">")
            raw = raw.astype(dtype, copy=False)
    out = raw.tobytes()
    gzip = next((c for c in codecs if type(c).__name__ == "GzipCodec"), None)
    if gzip is not None:
        out = numcodecs.GZip(level=gzip.level).encode(out)
    return bytes(out)
