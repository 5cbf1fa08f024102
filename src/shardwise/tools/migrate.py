"""``shardwise.migrate``: a store of the 2022 sharding draft to Zarr v3 ``sharding_indexed``.

Every array keeps its shape, data type, fill value, inner chunk shape and shard shape;
its shards get the final spec's index (at the end, with crc32c). The compressed inner
chunks are copied as bytes wherever the draft's compressor is a Zarr v3 codec that
writes the same bytes (none, blosc, zstd, gzip; ``F`` memory layout becomes a
``transpose`` codec); zlib, which Zarr v3 has no codec for, is decoded and re-encoded
as gzip at the same level. Unused bytes in the old shards are dropped, missing chunks
and shards stay missing, and chunks that hold only the fill value are copied as they
are (copying is not judging).

Migrating is ``reshard``'s repack with the grid unchanged: this module checks the
arguments, walks the draft's hierarchy and maps its documents to the final spec's (the
grid and the codecs kept, zlib as gzip), then hands each array to
:mod:`shardwise.graph.copy` as a :class:`~shardwise.graph.copy.CopyPlan` (repacked,
inner chunks in ``C`` order as the draft wrote them, zlib chunks recoded one by one).
One dask task per stored shard: one read of the old shard (whole), one put of the new
one. With ``mode="a"``, a shard already in the destination whose index reads back
(crc32c and entries) is skipped, so running the same call again after a failure
completes the job.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import shardwise._compat as _compat
from shardwise.errors import NotAZarrStoreError, StoreExistsError, WriteError
from shardwise.format.metadata import ArrayInfo
from shardwise.format.names import key_under, node_path
from shardwise.graph.copy import CopyPlan, copy_graph, recode_zlib, shards_to_fill
from shardwise.graph.tasks import done
from shardwise.io.draft import DraftStore
from shardwise.io.open import has_zarr_json, open_store
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
            # the stored shards, listed (the cost follows them, not the grid): with the
            # grid unchanged each is its own target shard
            shards = shards_to_fill(draft.store, info, ArrayInfo.from_metadata(target, path))
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
    # reshard's repack with the grid unchanged; mode="a" is its resume
    resume = mode == "a" and exists
    plans = []
    for path, info, target, documents, shards in arrays:
        rel = path[len(base) :].strip("/") if base else path
        where = f"{prefix}/{rel}" if prefix else rel
        for key, buf in documents.items():
            _compat.sync(dst_store.set(key_under(prefix, f"{where}/{key}"), buf))
        plan = CopyPlan(
            draft.store,
            info,
            dst_store,
            ArrayInfo.from_metadata(target, where),
            repack=True,
            resume=resume,
            order="C",  # as the draft wrote them: the shards keep their layout
            recode=path in report.reencoded,
            what="migrating a shard",
            advice=MIGRATE_ADVICE,
        )
        plans.append((plan, shards))
    report.shards = sum(len(shards) for _, shards in plans)
    delayed = copy_graph(plans, "shardwise-migrate", "shardwise-migrated", combine=done)
    if not compute:
        return report, delayed
    dask.compute(delayed)
    return report
