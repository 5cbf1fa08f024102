"""Graphs that scale (issue 11): counted, not timed.

Building a write graph (aligned, misaligned, region, append) or a fan-out read graph
must take a fixed number of layers, never cull, merge or materialize the source graph
once per block, and give the same tasks per shard whatever the number of shards. Each
case is built at two sizes, ten times apart, and the counts compared.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import sys
from collections.abc import Callable, Iterator
from typing import Any

import dask
import dask._task_spec
import dask.array as da
import dask.highlevelgraph
import dask.utils
import numpy as np
import pytest
import xarray as xr
import zarr

import shardwise

SHARD = (16, 16)
INNER = (8, 16)
COLS = 32  # two shards across


# the graph operations whose calls are counted while a graph is built: culling,
# merging and materializing a graph cost its size each time
COUNTED: list[tuple[Any, str]] = [
    (dask.highlevelgraph.HighLevelGraph, "cull"),
    (dask.highlevelgraph.HighLevelGraph, "merge"),
    (dask.highlevelgraph.HighLevelGraph, "from_collections"),
    (dask.highlevelgraph.Layer, "cull"),
    (dask._task_spec, "cull"),
    (dask.utils, "ensure_dict"),
    (dask.highlevelgraph, "ensure_dict"),
    (sys.modules["dask.delayed"], "ensure_dict"),
]


@contextlib.contextmanager
def counting(monkeypatch: pytest.MonkeyPatch) -> Iterator[collections.Counter[str]]:
    calls: collections.Counter[str] = collections.Counter()

    def wrap(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def counted(*args: Any, **kwargs: Any) -> Any:
            calls[name] += 1
            return fn(*args, **kwargs)

        return counted

    with monkeypatch.context() as m:
        for owner, attr in COUNTED:
            original = owner.__dict__.get(attr) if isinstance(owner, type) else None
            if isinstance(original, classmethod | staticmethod):
                kind = type(original)
                m.setattr(owner, attr, kind(wrap(attr, original.__func__)))
            else:
                m.setattr(owner, attr, wrap(f"{owner.__name__}.{attr}", getattr(owner, attr)))
        yield calls


def dataset(nrows: int, chunks: int, version: float = 1.0) -> xr.Dataset:
    """A lazily made float32 variable of ``nrows`` x COLS in dask chunks of ``chunks`` rows
    (no values in the client: the source graph is dask's own)."""
    v = da.zeros((nrows, COLS), chunks=(chunks, COLS), dtype="f4") + np.float32(version)
    return xr.Dataset({"v": (("t", "x"), v)})


def build(kind: str, nshard_rows: int, path: Any) -> Any:
    """The write graph of ``kind`` over ``nshard_rows`` rows of shards (compute=False)."""
    rows = nshard_rows * SHARD[0]
    enc = {"v": {"shards": SHARD, "chunks": INNER}}
    if kind in ("aligned", "misaligned", "small"):
        chunks = {"aligned": 16, "misaligned": 24, "small": 8}[kind]
        return shardwise.to_zarr(
            dataset(rows, chunks), path, encoding=enc, compute=False, consolidated=False
        )
    # an existing array: regions and appends cut its shards
    shardwise.to_zarr(dataset(2 * rows, 16), path, encoding=enc, compute=False, consolidated=False)
    if kind == "region":
        part = dataset(2 * rows, 24, 2.0).isel(t=slice(8, 8 + rows))
        return shardwise.to_zarr(
            part, path, region={"t": slice(8, 8 + rows)}, compute=False, consolidated=False
        )
    assert kind == "append"
    return shardwise.to_zarr(
        dataset(rows + 8, 24, 2.0), path, append_dim="t", compute=False, consolidated=False
    )


def layer_counts(graph: Any) -> collections.Counter[str]:
    """Tasks per layer kind (the layer name without its token)."""
    return collections.Counter(dask.utils.key_split(k) for k in dict(graph))


@pytest.mark.parametrize("kind", ["aligned", "misaligned", "small", "region", "append"])
def test_write_graph_is_built_in_a_fixed_number_of_steps(tmp_path, monkeypatch, kind):
    calls, layers, tasks = [], [], []
    for n in (30, 60, 90):  # rows of shards (the stores written into have twice as many)
        with counting(monkeypatch) as counted:
            delayed = build(kind, n, tmp_path / f"{kind}-{n}.zarr")
        graph = delayed.__dask_graph__()
        calls.append(dict(counted))
        layers.append(len(graph.layers))
        tasks.append(layer_counts(graph))
    assert calls[0] == calls[1] == calls[2]  # no graph operation per block
    assert layers[0] == layers[1] == layers[2]  # a fixed number of layers
    # every layer grows by the same number of tasks from each size to the next (edge
    # effects cancel out); the done tree waits for them, at most 32 per task
    for layer in tasks[2].keys() - {"shardwise-done"}:
        assert tasks[2][layer] - tasks[1][layer] == tasks[1][layer] - tasks[0][layer], layer
    waited = sum(v for k, v in tasks[2].items() if k in ("shardwise-encode", "shardwise-shard"))
    assert tasks[2]["shardwise-done"] <= waited / 31 + 3
    assert tasks[2]["shardwise-encode"] > 0


def test_aligned_write_has_no_shard_tasks_and_fuses_the_source(tmp_path):
    """Dask chunks that are unions of shards: each block's one task makes the block
    (dask's blockwise fusion folds the source in) and writes its shards."""
    delayed = build("aligned", 20, tmp_path / "a.zarr")
    (optimized,) = dask.optimize(delayed)
    tasks = layer_counts(optimized.__dask_graph__())
    assert tasks["shardwise-encode"] == 20  # 20 blocks of two shards each
    assert "shardwise-shard" not in tasks and "shardwise-split" not in tasks
    assert not {"zeros", "add", "zeros_like"} & tasks.keys()  # fused into the encode tasks
    delayed.compute(scheduler="threads")
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "a.zarr" / "v")[...], 1.0)


def test_fanout_graph_is_built_in_a_fixed_number_of_steps(tmp_path, monkeypatch):
    seen = {}
    for n in (20, 200):
        path = tmp_path / f"r{n}.zarr"
        shardwise.to_zarr(
            dataset(n * SHARD[0], 16),
            path,
            encoding={"v": {"shards": SHARD, "chunks": INNER}},
            consolidated=False,
        )
        with counting(monkeypatch) as calls:
            ds = shardwise.open_dataset(path, chunks={"t": 8}, consolidated=False)
        graph = ds.v.data.__dask_graph__()
        seen[n] = (dict(calls), len(graph.layers), layer_counts(graph))
    (calls_small, layers_small, tasks_small), (calls_big, layers_big, tasks_big) = seen.values()
    assert calls_small == calls_big
    assert layers_small == layers_big
    assert {k: 10 * v for k, v in tasks_small.items() if v > 1} == {
        k: v for k, v in tasks_big.items() if v > 10
    }
    assert tasks_big["shardwise-index"] == 400  # one per shard


def test_writing_in_pieces_as_docs_scaling_says(tmp_path):
    """docs/scaling.md: create the store once (compute=False writes the metadata and
    coordinates), then write shard-aligned pieces as region writes, each its own small
    graph, a few in flight at a time."""
    import pandas as pd

    ds = dataset(40 * SHARD[0], 24).assign_coords(
        t=pd.date_range("2000-01-01", periods=40 * SHARD[0], freq="h")
    )
    path = tmp_path / "pieces.zarr"
    shardwise.to_zarr(
        ds,
        path,
        encoding={"v": {"shards": SHARD, "chunks": INNER}},
        compute=False,
        consolidated=False,
    )
    step = 10 * SHARD[0]  # a multiple of the shard length: no two pieces share a shard
    pieces = [
        shardwise.to_zarr(
            ds[["v"]].isel(t=slice(start, start + step)),
            path,
            region={"t": slice(start, start + step)},
            compute=False,
            consolidated=False,
        )
        for start in range(0, ds.sizes["t"], step)
    ]
    with dask.config.set(scheduler="threads"):
        for i in range(0, len(pieces), 2):  # two pieces at a time
            dask.compute(*pieces[i : i + 2])
    xr.testing.assert_identical(xr.open_zarr(path, consolidated=False).compute(), ds.compute())
