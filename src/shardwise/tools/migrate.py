"""``migrate``: a store of the 2022 sharding draft to Zarr v3 ``sharding_indexed``.

Every array keeps its shape, data type, fill value, inner chunk shape and shard shape;
its shards get the final spec's index (at the end, with crc32c). The compressed inner
chunks are copied as bytes wherever the draft's compressor is a Zarr v3 codec that
writes the same bytes (none, blosc, zstd, gzip; ``F`` memory layout becomes a
``transpose`` codec); zlib, which Zarr v3 has no codec for, is decoded and re-encoded
as gzip at the same level. Unused bytes in the old shards are dropped, missing chunks
and shards stay missing, and chunks that hold only the fill value are copied as they
are (copying is not judging).

Migrating is ``reshard``'s repack with the grid unchanged: this module checks the
arguments (in its own words), opens the draft store and walks it
(``shardwise.io.sources.draft_source``), and hands it to ``reshard``'s planner in
its same-grid mode (``shardwise.tools.reshard.prepare``: the grid, the sharding or
its absence and the codecs kept, zlib as gzip; inner chunks repacked in ``C`` order as
the draft wrote them, zlib chunks recoded one by one; no consolidated metadata), which
writes the metadata and plans the copy (``shardwise.graph.copy``). One dask task per
stored shard: one read of the old shard (whole), one put of the new one. With ``mode="a"``, a shard already in the destination whose index reads back
(crc32c and entries) is skipped, so running the same call again after a failure
completes the job.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import dask

from shardwise.errors import NotAZarrStoreError, StoreExistsError, WriteError
from shardwise.format.names import node_path
from shardwise.graph.copy import copy_graph
from shardwise.graph.progress import compute as compute_with_progress
from shardwise.graph.tasks import done
from shardwise.io.draft import DraftStore
from shardwise.io.opener import has_zarr_json, open_store
from shardwise.io.sources import draft_source
from shardwise.io.stores import check_apart, check_replaceable, location
from shardwise.tools.reshard import prepare

__all__ = ["MigrationReport", "migrate"]

MIGRATE_ADVICE = (
    "Check the stores (space, permissions, connection), then run again with mode='a' "
    "(--mode a): the shards already migrated are kept."
)


@dataclass
class MigrationReport:
    """What ``shardwise.tools.migrate.migrate`` did.

    Attributes
    ----------
    arrays, groups : list of str
        The arrays and groups written.
    reencoded : dict of str to str
        The arrays whose chunks were re-encoded, with the codec (zlib becomes gzip);
        the others' chunks were copied as bytes.
    shards : int
        The stored shards (or chunks of unsharded arrays) migrated.
    """

    arrays: list[str] = field(default_factory=list)
    groups: list[str] = field(default_factory=list)
    # array -> the codec its chunks are re-encoded with (absent: copied as bytes)
    reencoded: dict[str, str] = field(default_factory=dict)
    shards: int = 0  # stored shards (or chunks of unsharded arrays) to migrate


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
    target_options: dict[str, Any] | None = None,
    mode: str = "w-",
    compute: bool = True,
    progress: bool = False,
) -> Any:
    """Move a store of the 2022 sharding draft (written by zarr-python 2.14-2.18) to
    Zarr v3 with ``sharding_indexed``, copying the compressed chunks as bytes where a
    Zarr v3 codec writes the same bytes (zlib is re-encoded as gzip); one dask task per
    shard.

    Parameters
    ----------
    src : str, os.PathLike or zarr.abc.store.Store
        The draft store: a path, a URL (with ``storage_options``) or a zarr-python
        ``Store``.
    dst : str, os.PathLike or zarr.abc.store.Store
        The destination (with ``target_options`` for a URL).
    group : str, optional
        The group to migrate, with everything under it; the store's root when None.
    storage_options, target_options : dict, optional
        Options of the fsspec file systems of the source's and the destination's URLs
        (as ``shardwise.reshard``'s).
    mode : {"w-", "w", "a"}, default "w-"
        ``"w-"`` refuses an existing destination, ``"w"`` replaces it, ``"a"``
        completes a migration of the same source left unfinished (its whole shards are
        kept).
    compute : bool, default True
        Copy now; with False, write the metadata and return a ``dask.delayed`` (as
        ``shardwise.to_zarr`` does) whose computing copies the shards and gives
        the report.
    progress : bool, default False
        Show a progress bar of the copy's tasks (tqdm's, or the cluster's under a
        default ``distributed.Client``).

    Returns
    -------
    MigrationReport or dask.delayed.Delayed
        The arrays and groups written and the shards moved; a ``Delayed`` of it with
        ``compute=False``.

    Raises
    ------
    shardwise.errors.WriteError
        The source is not a draft store (Zarr v2 and v3 stores need no migration), or
        ``mode`` is unknown.
    shardwise.errors.StoreExistsError
        The destination exists and ``mode="w-"``.

    Examples
    --------
    >>> report = shardwise.tools.migrate.migrate("old.zarr", "new.zarr")
    """

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
    check_apart(location(src, None, storage_options), location(dst, None, target_options))
    if mode == "w":
        check_replaceable(dst, None, target_options)
    exists = has_zarr_json(dst, target_options)
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
    # reshard's planner with the grid unchanged: everything is planned (and what cannot
    # be represented refused) before the metadata is written; mode="a" is its resume
    source = draft_source(draft, base)
    plans, _, recoded = prepare(
        source,
        dst,
        shards=None,
        chunks=None,
        codecs=None,
        variables=None,
        mode="w" if mode == "w" else "w-",
        resume=mode == "a",
        target_options=target_options,
        consolidated=False,
        same_grid=True,
        exists=exists,
    )
    report = MigrationReport(
        arrays=[_full(base, rel) for rel in source.arrays],
        groups=[_full(base, g) or "/" for g in source.groups],
        reencoded={_full(base, rel): codec for rel, codec in recoded.items()},
        shards=sum(len(shards) for _, shards in plans),
    )
    plans = [
        (replace(plan, what="migrating a shard", advice=MIGRATE_ADVICE), shards)
        for plan, shards in plans
    ]
    delayed = copy_graph(plans, "shardwise-migrate", "shardwise-migrated", combine=done)
    if not compute:
        return dask.delayed(_reported, pure=True)(report, delayed)
    compute_with_progress(delayed, progress=progress, desc="migrate")
    return report


def _reported(report: MigrationReport, _done: Any) -> MigrationReport:
    """The report, once the copy it describes (``_done``) has run."""
    return report


def _full(base: str, rel: str) -> str:
    """The path in the source of ``rel``, a path under the group ``base``."""
    return f"{base}/{rel}" if base and rel else base or rel
