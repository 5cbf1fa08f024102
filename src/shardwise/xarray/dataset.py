"""A Dataset's write (what ``shardwise.to_zarr`` does with a Dataset, a DataArray and
each node of a DataTree): xarray's metadata step, checked first on a copy-on-write view;
for an append that other jobs may make at the same time, committed by compare-and-swap
(and run again when another job committed first); then the data of every dask variable
with one call of the array layer's write primitive
(:func:`shardwise.array.store.store_arrays`)."""

from __future__ import annotations

import functools
from collections.abc import Hashable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

import shardwise._compat as _compat
from shardwise._flags import rectilinear_grids
from shardwise.array.decisions import Guard, guard_of
from shardwise.array.options import WriteOptions
from shardwise.array.store import store_arrays
from shardwise.errors import (
    ConflictError,
    ShardwiseError,
    WriteError,
    incomplete_append,
    is_client_error,
)
from shardwise.io.retry import retries, tries
from shardwise.io.staged import StagedWrite, staged_write
from shardwise.xarray.encoding import ShardSpec, SizeSpec
from shardwise.xarray.metadata_step import (
    Capture,
    append_transaction,
    grow_grids,
    metadata_step,
    validate,
)

__all__ = ["DatasetWrite"]


@dataclass
class DatasetWrite:
    """One Dataset's write: :meth:`run` checks it and writes its metadata (xarray's
    step; an append that other jobs may make at the same time commits it by
    compare-and-swap), then its dask data with one :func:`store_arrays` call."""

    ds: Any
    store: Any
    options: WriteOptions
    session: Any
    mode: str | None = None
    group: str | None = None
    encoding: Mapping[Any, Any] | None = None
    compute: bool = True
    consolidated: bool | None = None
    append_dim: Hashable | None = None
    region: Any = None
    storage_options: dict[str, Any] | None = None
    zarr_format: int | None = None
    chunkmanager_store_kwargs: dict[str, Any] | None = None
    shards: ShardSpec = None
    chunks: SizeSpec = None
    commit: str | None = None
    txn: Any = field(init=False, default=None)
    staged: StagedWrite | None = field(init=False, default=None)
    guarded: Guard | None = field(init=False, default=None)

    def run(self) -> Any:
        # the guard against other jobs, worked out once: the options then say whether
        # it is on for this write ("auto" resolved by what the store can do)
        self.guarded = guard_of(self.options, self.store, self.storage_options, self.session)
        self.options = replace(self.options, independent_writers=self.guarded.on)
        # an append that other jobs may make at the same time: its metadata step runs on
        # a copy-on-write view of the store and is committed with conditional puts (see
        # metadata_step.AppendTransaction); when another job committed first, it runs again
        self.txn = append_transaction(
            self.store,
            self.storage_options,
            self.mode,
            self.append_dim,
            self.session,
            bool(self.options.independent_writers),
            # (what the call's token is of: its claim of rows is recorded under it)
            (_data_of(self.ds), str(self.append_dim), self.group or ""),
        )
        with rectilinear_grids():  # zarr-python's flag, for this call only
            for _ in tries() if self.txn is not None else range(1):
                done = self._metadata()
                if done is not None:
                    break
                # (another job appended first: plan again, after a pause)
            else:
                raise ConflictError(
                    "other jobs kept appending to the dataset",
                    expected="its metadata unchanged between reading it and growing it",
                    found=f"it changed every time, {retries()} tries",
                    key=self.group or "/",
                    advice="Nothing was written. Run the append again.",
                )
        return self._data(*done)

    def _metadata(self) -> tuple[Any, Capture, str, set[str]] | None:
        """xarray's metadata step, checked first (a dry run); xarray's store, what it
        captured, the mode and the arrays that existed; None when an append's commit
        found that another job appended first."""
        try:
            mode, ds, encoding, existing, zarr_format, grids = validate(
                self.ds,
                self.store,
                self.mode,
                self.group,
                dict(self.encoding or {}),
                self.append_dim,
                self.region,
                self.storage_options,
                self.zarr_format,
                self.shards,
                self.chunks,
                guard=self.guarded,
            )
        except ShardwiseError:
            raise
        except ValueError as e:
            raise WriteError(str(e).rstrip("."), advice="Nothing was written.") from e
        # the real metadata step (numpy data is written here, as xarray does), on a view
        # of the store where an append's commit or a write's new arrays come after
        # their data (see _staged)
        txn = self.txn
        self.staged = self._staged(mode, existing)
        overlay = (
            txn.view() if txn is not None else None if self.staged is None else self.staged.view()
        )
        zstore = _compat.get_writable_zarr_store(
            self.store if overlay is None else overlay,
            group=self.group,
            # (a try reads each array's own document, for its version; the metadata is
            # consolidated after the commit, see txn.end)
            consolidated=self.consolidated if txn is None else False,
            storage_options=self.storage_options if overlay is None else None,
            zarr_format=zarr_format,
            write_empty_chunks=self.options.write_empty_chunks,
            mode=mode,  # type: ignore[arg-type]
            append_dim=self.append_dim,
            region=self.region,
            safe_chunks=False,
        )
        try:
            grow_grids(zstore, ds, existing, self.append_dim, self.shards == "dask")
            capture = Capture(
                dry=False,
                grids=grids,
                # numpy data into existing arrays through the shard writer's conditional
                # puts (an Icechunk session's commit checks for conflicts itself; an
                # append's is written with its dask data, after the commit)
                guarded=bool(self.options.independent_writers) and self.session is None,
                existing=existing,
                defer=overlay is not None,
                write=functools.partial(
                    _write_now,
                    options=replace(self.options, shards_per_task=None, encode_split=1),
                ),
            )
            metadata_step(ds, zstore, encoding, capture)
        except BaseException:
            if overlay is None:  # (a view is not closed: that would close the store)
                zstore.close()
            raise
        if txn is None:
            if self.staged is not None:  # (the data goes to the real store)
                capture.items = [(s, self.staged.bind(t), r, o) for s, t, r, o in capture.items]
            return zstore, capture, mode, existing
        if txn.found_claims(overlay):
            return None  # an earlier run of this call claimed rows: the next try writes them
        if not txn.commit(overlay, zstore, self.append_dim):
            return None
        # stored: the data goes there too
        with _claimed_rows_reported(capture.items, self.append_dim, self.group, txn):
            zstore, capture.items = txn.reopen(
                self.store,
                self.group,
                self.storage_options,
                zarr_format,
                mode,
                self.append_dim,
                capture.items,
            )
        return zstore, capture, mode, existing

    def _staged(self, mode: str, existing: set[str]) -> StagedWrite | None:
        """How a write that creates arrays (``mode`` ``"w"``, ``"w-"``, or ``"a"`` that
        grows nothing: no ``append_dim`` or ``region``) puts their metadata after their
        data, so that a failure leaves no array of fill values
        (:class:`~shardwise.io.staged.StagedWrite`); None for the other writes: appends
        and region writes, an Icechunk session (its commit is all or nothing), and
        ``compute=False``, whose metadata is there at once, as xarray's is, for region
        writes to fill."""
        grows = self.txn is not None or self.append_dim is not None or self.region is not None
        if grows or self.session is not None or not self.compute or mode not in ("w", "w-", "a"):
            return None
        return staged_write(
            self.store, self.storage_options, self.group, replaces=mode == "w", existing=existing
        )

    def _data(self, zstore: Any, capture: Capture, mode: str, existing: set[str]) -> Any:
        """The data step: every dask variable written with one :func:`store_arrays` call
        (into an Icechunk session's fork); then an append's claims released and the
        metadata consolidated (as xarray's metadata step does, which a try runs without)."""
        txn = self.txn
        end = None if txn is None else functools.partial(txn.end, self.consolidated is not False)
        if self.session is not None and not self.compute and capture.items:
            zstore.close()  # the session's store stays here: it does not pickle
        # (a fork's commit is all or none: nothing claimed until then)
        claimed = self.append_dim if self.session is None else None
        sources = [item[0] for item in capture.items]
        targets = [item[1] for item in capture.items]
        # (where each goes: an earlier run's claim of rows, found on a retry, moves it)
        regions = [
            tuple(slice(o, o + n) for o, n in zip(offset, source.shape, strict=True))
            for source, _, _, offset in capture.items
        ]
        try:
            written = store_arrays(
                sources,
                targets,
                regions,
                options=self.options,
                # (no shard exists yet of an array this write creates)
                fresh=[mode == "w" or t.basename not in existing for t in targets],
                compute=self.compute,
                session=self.session,
                staged=self.staged,
                finish=_finish,
                head=(zstore, end),
                reported=functools.partial(
                    _claimed_rows_reported, capture.items, claimed, self.group, txn
                ),
                compute_kwargs=self.chunkmanager_store_kwargs,
            )
        except BaseException:
            zstore.close()
            raise
        if not self.compute:
            return written
        if self.staged is not None:  # (xarray's store over the real store, not the staging view)
            written = _compat.zarr_store_on(written, self.staged.base.store)
        return self.session.commit(self.commit) if self.commit is not None else written


@contextmanager
def _claimed_rows_reported(
    items: Any, append_dim: Hashable | None, group: str | None, txn: Any
) -> Iterator[None]:
    """Inside the block (after an append's commit claimed its rows), a store error (or
    an object-store client's) becomes an :class:`IncompleteAppendError` naming the rows
    claimed and how to complete them; nothing changes outside an append."""
    try:
        yield
    except Exception as e:
        named = isinstance(e, ShardwiseError | OSError) or is_client_error(e)
        rows = _claimed(items, append_dim) if append_dim is not None and named else {}
        if not rows:
            raise
        key = f"{group.strip('/')}/zarr.json" if group and group.strip("/") else "zarr.json"
        dim, lo, hi = next(iter(rows.values()))
        where = f"{{{dim!r}: slice({lo}, {hi})}}"
        index = [p for p in rows if p.rpartition("/")[2] == str(append_dim)]
        also = (
            f", and its coordinate {index[0]!r}, which region writes leave as it is: "
            f"zarr.open_array(store, path={index[0]!r}, mode='r+')[{lo}:{hi}] = "
            f"ds[{str(append_dim)!r}].values"
            if index
            else ""
        )
        recorded = txn is not None and bool(txn.claimed)
        raise incomplete_append(e, rows, region=where, key=key, also=also, recorded=recorded) from e


def _data_of(ds: Any) -> tuple[Any, ...]:
    """What a Dataset's append token is of: each variable's name, dimensions and data
    (a dask array's graph name, numpy values as they are), not xarray's own token of
    the Dataset (its pandas indexes need pyarrow in some dask releases)."""
    import numpy as np

    return tuple(
        (str(name), var.dims, getattr(var.data, "name", None) or np.asarray(var.values))
        for name, var in sorted(ds.variables.items(), key=lambda item: str(item[0]))
    )


def _claimed(items: Any, append_dim: Hashable) -> dict[str, tuple[str, int, int]]:
    """The rows an append's data step writes along ``append_dim``, per array it grew."""
    rows = {}
    for source, target, region, _ in items:
        dims = list(getattr(target.metadata, "dimension_names", None) or ())
        if append_dim in dims:
            axis = dims.index(append_dim)
            start = region[axis].start or 0
            rows[target.path] = (str(append_dim), int(start), int(start + source.shape[axis]))
    return rows


def _write_now(
    source: Any,
    target: Any,
    region: tuple[slice, ...],
    offset: tuple[int, ...],
    *,
    options: WriteOptions,
) -> None:
    """Write numpy data into an existing array now, through the shard writer with
    conditional puts (see :class:`~shardwise.xarray.metadata_step.Capture`), on this
    thread, one task per shard."""
    del offset  # (the region's start)
    store_arrays(
        [source],
        [target],
        [region],
        options=replace(options, independent_writers=True, progress=False),
        fresh=[False],
        compute_kwargs={"scheduler": "sync"},
    )


def _finish(zstore: Any, end: Any, *writes: Any) -> Any:
    del writes  # the writes are done before the store is closed
    if end is not None:
        end()
    zstore.close()
    return zstore
