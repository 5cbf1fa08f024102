"""The one write primitive both write paths end in: :func:`store_arrays`, shaped like
``dask.array.store`` (sources, targets, regions in; the write computed or handed back
delayed).

A dask-array ``to_zarr`` and a Dataset's (DataArray's, DataTree's) ``to_zarr`` differ in
how they find and create their arrays and write their metadata; once the arrays exist
they call :func:`store_arrays` once, as xarray's ``ArrayWriter.sync`` ends in one
``dask.array.store`` call. Inside: the regions checked against the arrays (before any
data is written), one task per shard for each source (:func:`data_write`), an Icechunk
session's fork and its merge, a new array's metadata put after its data
(:func:`~shardwise.io.staged.around_data`), the progress bar and the compute.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from shardwise.array.decisions import check_known_chunks, data_write, guard_of
from shardwise.array.options import WriteOptions
from shardwise.errors import WriteError
from shardwise.graph.progress import compute as compute_with_progress
from shardwise.graph.tasks import merge_sessions
from shardwise.graph.write import finish_graph
from shardwise.io.icechunk import merge_into
from shardwise.io.staged import StagedWrite, around_data

__all__ = ["region_offsets", "store_arrays"]


def store_arrays(
    sources: Sequence[Any],
    targets: Sequence[Any],
    regions: Sequence[tuple[slice, ...]],
    *,
    options: WriteOptions,
    fresh: Sequence[bool],
    compute: bool = True,
    session: Any = None,
    staged: StagedWrite | None = None,
    finish: Callable[..., Any] | None = None,
    head: tuple[Any, ...] = (),
    reported: Callable[[], AbstractContextManager[None]] | None = None,
    compute_kwargs: Mapping[str, Any] | None = None,
) -> Any:
    """Write each dask array of ``sources`` into the zarr array of ``targets`` at the
    same place, at its ``region`` (slices of step 1; ``slice(None)`` for a whole axis),
    with one task writing each shard, as ``options`` say.

    - ``fresh``: per target, whether this write created it (no shard of it exists yet).
    - ``session``: a writable Icechunk session whose store the targets are on: the data
      is written through a fork of it, and the fork merged into it once written.
    - ``staged``: the new arrays' metadata, put once their data is (a failure removes
      what the write created).
    - ``finish``: ``finish(*head, *results)`` runs once every source is written (inside
      the graph with ``compute=False``), and what it returns is returned.
    - ``reported``: a context manager around the compute that words its failure (an
      append's claimed rows); not around ``finish``.
    - ``compute_kwargs``: for ``dask.compute`` (a scheduler, ...).

    Returns what ``finish`` returns (None without one). ``compute=False``: a ``dask.delayed`` that writes and computes
    to that (with a session: to the fork session, to merge into the session).
    """
    if not len(sources) == len(targets) == len(regions) == len(fresh):
        raise WriteError(
            "store takes as many targets, regions and fresh flags as sources",
            expected=f"{len(sources)} of each",
            found=f"{len(targets)} targets, {len(regions)} regions, {len(fresh)} fresh flags",
        )
    offsets = []
    for source, target, region in zip(sources, targets, regions, strict=True):
        check_known_chunks(source.chunks, target.path or "/")
        offsets.append(region_offsets(source.shape, target, region))
    fork = session.fork() if session is not None and sources else None
    writes = [
        data_write(
            source,
            target,
            region,
            offset,
            options=options,
            fresh=new,
            fork=fork,
            # (options resolved by the entry point; "auto", given here directly, is
            # resolved by what the target's store can do, as an entry point does)
            guarded=guard_of(options, target.store_path.store, None, None).on,
        )
        for source, target, region, offset, new in zip(
            sources, targets, regions, offsets, fresh, strict=True
        )
    ]
    done = finish or _nothing
    if not compute:
        return (
            finish_graph(writes, merge_sessions)
            if fork is not None
            else finish_graph(writes, done, *head)
        )
    with around_data(staged):
        with reported() if reported is not None else nullcontext():
            results = compute_with_progress(
                *writes, progress=options.progress, desc="to_zarr", **(compute_kwargs or {})
            )
        if fork is not None:
            merge_into(session, results)
    return done(*head, *results)


def region_offsets(shape: Sequence[int], target: Any, region: Sequence[slice]) -> tuple[int, ...]:
    """Where in ``target`` data of ``shape`` goes at ``region`` (its start per axis);
    refuses a region that is not slices of step 1 inside the array, or not the data's
    shape."""
    if len(region) != len(target.shape) or len(shape) != len(target.shape):
        raise WriteError(
            "the region does not fit the array",
            expected=f"{len(target.shape)} slices and data of {len(target.shape)} axes",
            found=f"region {tuple(region)} for data of shape {tuple(shape)}",
            array=target.path or "/",
        )
    return tuple(_starts(shape, target, region))


def _starts(shape: Sequence[int], target: Any, region: Sequence[slice]) -> Iterator[int]:
    for i, (r, n) in enumerate(zip(region, target.shape, strict=True)):
        start, stop, step = r.indices(n) if isinstance(r, slice) else (0, 0, 0)
        want = shape[i]
        if step != 1 or stop - start != want or (r.stop is not None and r.stop > n):
            raise WriteError(
                "the region does not fit the array",
                expected=f"{want} elements along axis {i} inside an array of length {n}",
                found=f"region {r}",
                array=target.path or "/",
                advice="Write inside the array's bounds with steps of 1, or append with "
                "append_dim=.",
            )
        yield start


def _nothing(*_: Any) -> None:
    return None
