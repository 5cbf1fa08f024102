"""A write must not replace what it reads: ``mode="w"`` is refused where the destination
is, holds or lies inside a store the data is read from lazily (replacing it first would
lose the values still to be read), and where the store cannot be replaced at all."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from shardwise.io.reader import ArrayReader
from shardwise.io.stores import check_apart, check_replaceable, location

__all__ = ["check_not_replacing_sources"]


def check_not_replacing_sources(
    datas: Iterable[Any], store: Any, storage_options: Any, path: str | None
) -> None:
    """Refuse replacing ``path`` in ``store`` (``mode="w"``) when the store cannot be
    replaced, or when any of ``datas`` (dask arrays, or arrays xarray reads lazily) reads
    from there."""
    if store is None:
        return
    check_replaceable(store, path, storage_options)
    dst = location(store, path, storage_options)
    for src in _read_locations(datas):
        check_apart(
            src,
            dst,
            advice="Write to another location, or load the data first (.load()) if it "
            "fits in memory. Nothing was written.",
        )


def _read_locations(datas: Iterable[Any]) -> Iterator[Any]:
    """The stores (with the array's path) that ``datas`` read from: arrays opened with
    shardwise (``ArrayReader``) or zarr-python, found through xarray's lazy wrappers
    and dask's ``from_array`` layers."""
    import zarr

    seen: set[int] = set()
    for data in datas:
        graph = getattr(data, "dask", None)
        wrapped = list(_graph_sources(graph)) if graph is not None else [data]
        for inner in wrapped:
            for _ in range(32):  # down xarray's wrappers (.array) to the reader
                if id(inner) in seen:
                    break
                seen.add(id(inner))
                if isinstance(inner, ArrayReader):
                    yield location(inner.store, inner.info.data_prefix)
                    break
                if isinstance(inner, zarr.Array):
                    yield location(inner.store_path)
                    break
                nxt = next(
                    (getattr(inner, a) for a in ("reader", "array", "_array") if hasattr(inner, a)),
                    None,
                )
                if nxt is None:
                    break
                inner = nxt


def _graph_sources(graph: Any) -> Iterator[Any]:
    """The objects a dask graph reads from: the values of its ``original-`` layers
    (``from_array``'s, and the fan-out read's), and, for sources put in every task
    (``inline_array=True``), the arguments of the first task of every other layer held
    as a plain mapping (one task looked at per layer: each task of such a layer takes
    the same source)."""
    from dask.task_spec import DataNode, Task

    for name, layer in graph.layers.items():
        if name.startswith("original-"):
            yield from (getattr(v, "value", v) for v in layer.values())
            continue
        mapping = getattr(layer, "mapping", None)
        if not isinstance(mapping, dict) or not mapping:
            continue  # a layer built on demand (blockwise): its tasks take keys, not sources
        task = next(iter(mapping.values()))
        for _ in range(4):  # a getter task around a ShardSource task around the source
            if not isinstance(task, Task):
                break
            args = [a.value if isinstance(a, DataNode) else a for a in task.args]
            yield from (a for a in args if not isinstance(a, Task))
            task = next((a for a in args if isinstance(a, Task)), None)
