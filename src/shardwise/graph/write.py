"""Writing dask arrays into sharded Zarr v3 arrays: one task per shard, no locks.

The write graph is made of a fixed number of layers, whatever the number of blocks
and shards:

``shardwise-encode-<token>``
    one task per dask block, a dask ``Blockwise`` layer over the source array (as
    ``map_blocks`` makes), into which dask's blockwise fusion folds the source's own
    blockwise layers: making a block and encoding it are one task. For every shard the
    block covers whole, the task encodes the inner chunks and stores the shard itself;
    for every other shard it touches, it encodes the inner chunks that lie wholly inside
    the block (so only compressed bytes travel on) and cuts out the raw pieces of inner
    chunks it shares with its neighbours.
``shardwise-split-<token>``
    where one block contributes to two or more shards that other blocks contribute to
    as well, a small task per such shard picks out that shard's part, so that only it
    travels to the shard's task.
``shardwise-shard-<token>``
    one task per shard that no single block covers. It gathers the parts, assembles the
    cut inner chunks and encodes them, keeps the inner chunks the write does not touch
    from the existing shard (as bytes, not re-encoded), lays them out in the write order
    with the index, and stores the shard with a single put (or deletes it when nothing
    is left).
``shardwise-done-<token>``
    a tree of small tasks, each waiting for at most :data:`FAN_IN` others, that ends
    when every shard is written.

and one ``shardwise-target-<token>`` key holding what the tasks need to know about the
array (store, metadata, options), which each worker fetches once.

So any dask chunking is accepted, never rechunked, and exactly one task writes each
shard. The plan (:class:`WritePlan`) is a pure value built without I/O, one
:class:`DimWrite` per dimension, so that building it costs the number of blocks and
shards along each dimension, not their product; the graph is built in one pass over the
shards that need a shard task (none when the dask chunks are unions of shards).

This module builds the graph (no I/O): the plan is :mod:`shardwise.graph.write_plan`, the tasks
that run on the workers are :mod:`shardwise.graph.tasks`, and every shard is stored
through :mod:`shardwise.graph.target`. It also holds what the array and xarray layers
build on: :func:`data_graph` (one variable's write, through the shard writer or, for what
it does not handle, ``dask.array.store``), :func:`finish_graph` and :func:`wait_for`.
"""

from __future__ import annotations

import itertools
import math
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from dask.delayed import Delayed

import shardwise._compat as _compat
from shardwise._gc import paused_gc
from shardwise.format.metadata import FIXED_KINDS, ArrayInfo
from shardwise.format.shard import WRITE_ORDERS
from shardwise.graph.fanout import stored_reader
from shardwise.graph.split import current_client, encode_split_chunks, split_source
from shardwise.graph.target import WriteTarget
from shardwise.graph.tasks import (
    StoredBlock,
    done,
    encode_batch,
    encode_block,
    merge_sessions,
    pick,
    session_of,
    write_shard,
)
from shardwise.graph.write_plan import (
    WritePlan,
    batch_bounds,
    check_shards_per_task,
    plan_write,
)
from shardwise.io.stores import store_token

if TYPE_CHECKING:
    pass

__all__ = [
    "FAN_IN",
    "WriteDelayed",
    "data_graph",
    "finish_graph",
    "fuse_blockwise",
    "store_dask_array",
    "wait_for",
]

FAN_IN = 32  # the most tasks one task of the done tree waits for


# -- the graph ---------------------------------------------------------------------------
def _done_tree(name: str, keys: Sequence[Any], combine: Any = done) -> tuple[dict[Any, Any], Any]:
    """A layer of tasks that wait for ``keys``, at most :data:`FAN_IN` each, in a tree;
    returns the layer and its root key. Each task calls ``combine`` on the results it
    waits for (by default it drops them)."""
    from dask.task_spec import Task, TaskRef

    layer: dict[Any, Any] = {}
    level = 0
    while True:
        above = []
        for j in range(max(1, -(-len(keys) // FAN_IN))):
            key = (name, level, j)
            group = keys[j * FAN_IN : (j + 1) * FAN_IN]
            layer[key] = Task(key, combine, *(TaskRef(k) for k in group))
            above.append(key)
        if len(above) == 1:
            return layer, above[0]
        keys, level = above, level + 1


def fuse_blockwise(graph: Any, name: str) -> Any:
    """``graph`` (a HighLevelGraph) with the blockwise layers below layer ``name`` fused
    into it, as dask's array optimizer would (a Delayed's optimizer does not)."""
    from dask.highlevelgraph import HighLevelGraph

    if not isinstance(graph, HighLevelGraph):
        graph = HighLevelGraph.from_collections(name, graph, dependencies=())
    return _compat.optimize_blockwise(graph, keys=[name])


class WriteDelayed(Delayed):
    """The ``dask.delayed`` of a write. Computing it optimizes the graph as dask
    optimizes arrays (blockwise and linear fusion, slices), as ``dask.array.store``
    would the source arrays; a plain ``Delayed`` only culls. A graph with annotated
    layers (a split write's placement, or the user's) gets blockwise fusion only, which
    keeps them."""

    __slots__ = ()

    @staticmethod
    def __dask_optimize__(dsk: Any, keys: Any, **kwargs: Any) -> Any:
        from dask.core import flatten
        from dask.highlevelgraph import HighLevelGraph

        if isinstance(dsk, HighLevelGraph) and any(
            layer.annotations for layer in dsk.layers.values()
        ):
            # low-level fusion would drop the layers, and with them the annotations
            # (the workers a split write's parts go to): fuse blockwise layers only
            wanted = list(flatten(keys))
            return _compat.optimize_blockwise(dsk, keys=wanted).cull(set(wanted))
        return _compat.optimize(dsk, keys, **kwargs)


def wait_for(name: str, graph: Any, keys: Sequence[Any], *, combine: Any = done) -> Any:
    """A ``dask.delayed`` (key in layer ``name``) that ends once the tasks of ``keys``
    in ``graph`` have run, through a done tree (no task waits for more than
    :data:`FAN_IN`); it computes to None, or to what ``combine`` makes of the tasks'
    results level by level."""
    from dask.highlevelgraph import HighLevelGraph

    with paused_gc():
        layer, root = _done_tree(name, keys, combine)
    layers = dict(graph.layers)
    deps = dict(graph.dependencies)
    layers[name] = layer
    deps[name] = {k[0] if isinstance(k, tuple) else k for k in keys}
    return WriteDelayed(root, HighLevelGraph(layers, deps), layer=name)


def _shards_per_task(value: int | str, info: ArrayInfo) -> int:
    """``shards_per_task`` as a number: ``"auto"`` is as many shards as make dask's
    ``array.chunk-size`` (taking the first shard's size)."""
    check_shards_per_task(value)
    if value == "auto":
        import dask.config
        from dask.utils import parse_bytes

        target = parse_bytes(dask.config.get("array.chunk-size"))
        shard = math.prod(info.layout.shard_shape((0,) * info.ndim)) * info.dtype.itemsize
        return max(1, int(target // max(shard, 1)))
    return int(value)


def _spread(layer: Any, name: str, numblocks: tuple[int, ...]) -> None:
    """Ask the distributed scheduler (when one is in scope) to run the encode tasks of
    a split write on the workers' threads in turn, rather than all where their block
    lies: a loose restriction (``allow_other_workers``), so a lost worker or a busy one
    does not hold a task back. Each worker's parts of a block travel to it raw and back
    compressed."""
    client = current_client()
    if client is None:
        return
    threads = [addr for addr, n in sorted(client.nthreads().items()) for _ in range(n)]
    if len(threads) < 2:
        return
    where = {(name, *b): [threads[i % len(threads)]] for i, b in enumerate(np.ndindex(*numblocks))}
    layer.annotations = {
        **(layer.annotations or {}),
        "workers": where.get,
        "allow_other_workers": True,
    }


def _batch_layer(
    name: str, source: Any, groups: tuple[tuple[int, ...], ...], plan: WritePlan, target: str
) -> dict[Any, Any]:
    """The encode layer of a batched write: a task per group of blocks of ``source``."""
    from dask.task_spec import Task, TaskRef

    layer: dict[Any, Any] = {}
    with paused_gc():
        for group in np.ndindex(*plan.numblocks):
            ranges = [range(g[i], g[i + 1]) for g, i in zip(groups, group, strict=True)]
            where = tuple(
                slice(lo - o, hi - o)
                for (lo, hi), o in zip(plan.block_box(group), plan.offset, strict=True)
            )
            key = (name, *group)
            layer[key] = Task(
                key,
                encode_batch,
                where,
                TaskRef(target),
                tuple(len(r) for r in ranges),
                *(TaskRef((source.name, *b)) for b in itertools.product(*ranges)),
            )
    return layer


def _stored_layer(
    source: Any, stored: tuple[Any, str | None], name: str, target_graph: Any, target_key: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The encode layer (and the graph's other layers and dependencies) of a write whose
    source is a plain read of a stored array (:func:`~shardwise.graph.fanout.stored_reader`:
    its reader and the key holding it, if any): a task per block given a
    :class:`~shardwise.graph.tasks.StoredBlock` in place of the block, so shards whose
    inner chunks are the stored ones are written from them (decoded and encoded again,
    chunk by chunk) and other blocks are read in the task. The read tasks are not
    needed: only the key holding the reader, if any, stays."""
    from dask.task_spec import Task, TaskRef

    reader, reader_key = stored
    arg: Any = reader if reader_key is None else TaskRef(reader_key)
    starts = [[0, *itertools.accumulate(c)] for c in source.chunks]
    layer: dict[Any, Any] = {}
    with paused_gc():
        for block in np.ndindex(*source.numblocks):
            where = tuple(slice(s[i], s[i + 1]) for s, i in zip(starts, block, strict=True))
            key = (name, *block)
            layer[key] = Task(
                key, encode_block, Task(None, StoredBlock, arg, where), where, TaskRef(target_key)
            )
    layers: dict[str, Any] = dict(target_graph.layers)
    deps: dict[str, Any] = {k: set(v) for k, v in target_graph.dependencies.items()}
    layers[name] = layer
    deps[name] = {target_key}
    if reader_key is not None:
        layers[reader_key] = source.__dask_graph__().layers[reader_key]
        deps[reader_key] = set()
        deps[name].add(reader_key)
    return layers, deps


def _tasks_of(
    source: Any,
    info: ArrayInfo,
    offset: Sequence[int] | None,
    shards_per_task: int | str,
    encode_split: int | str | None,
) -> tuple[Any, int, Any, Any, tuple[tuple[int, ...], ...]]:
    """How a write's blocks become encode tasks: the source (cut by ``encode_split``,
    :func:`encode_split_chunks`), the shards per task, the cut, the groups of blocks
    one task writes (:func:`batch_bounds`; None: a task per block) and the chunks the
    write plan sees (a group's blocks as one)."""
    per_task = _shards_per_task(shards_per_task, info)
    cut = encode_split_chunks(source.chunks, info.layout, offset, encode_split, info.dtype.itemsize)
    if cut is not None:
        source = split_source(source, cut)
        per_task = 1
    groups = None
    if per_task > 1:
        groups = batch_bounds(info.layout, source.chunks, offset, per_task)
        if all(len(g) - 1 == len(c) for g, c in zip(groups, source.chunks, strict=True)):
            groups = None  # every block is a group of its own already
    chunks = source.chunks
    if groups is not None:
        chunks = tuple(
            tuple(sum(c[a:b]) for a, b in itertools.pairwise(g))
            for g, c in zip(groups, source.chunks, strict=True)
        )
    return source, per_task, cut, groups, chunks


def _layer_names(*parts: Any) -> dict[str, str]:
    """The names of a write's layers, by part. Every write is its own action: two writes
    must never share dask keys (a store's name need not say which endpoint or account it
    reaches, so two stores of one name would otherwise get one write when computed
    together), so the token is of ``parts`` and a random string."""
    from dask.base import tokenize

    token = tokenize(*parts, uuid.uuid4().hex)
    return {
        part: f"shardwise-{part}-{token}"
        for part in ("target", "encode", "split", "shard", "session", "done")
    }


@dataclass(frozen=True, slots=True)
class _Encoding:
    """What a write's encode layer is built from: the source (cut by ``encode_split``:
    ``cut``, None if not), the groups of blocks one task writes (None: a task per
    block), the plan, the layers' names and the key (and graph) of the target."""

    source: Any
    cut: tuple[tuple[int, ...], ...] | None
    groups: Any
    plan: WritePlan
    names: dict[str, str]
    target_key: str
    target_graph: Any


def store_dask_array(
    source: Any,
    store: Any,
    info: ArrayInfo,
    *,
    offset: Sequence[int] | None = None,
    write_empty_chunks: bool = False,
    order: str = "morton",
    fresh: bool = False,
    shards_per_task: int | str = 1,
    encode_split: int | str | None = None,
    sessions: bool = False,
    guarded: bool = False,
) -> Any:
    """A ``dask.delayed`` that writes the dask array ``source`` into the Zarr v3 array
    ``info`` of ``store`` at ``offset``; it computes to None.

    ``sessions=True``, for the store of an Icechunk fork session: every task that puts
    shards hands back its process's copy of the fork, and the delayed computes to one
    fork session holding all the changes (merged through the done tree), to merge into
    the session the fork came from.

    ``guarded=True``: other jobs may write the array at the same time. Every put goes
    through the store's conditional puts (:mod:`shardwise.io.conditional`), and a shard
    the write covers in part is merged with the stored one and put only if that is
    unchanged since it was read, read and merged again otherwise
    (:func:`~shardwise.graph.tasks.write_shard`). Shards a block covers whole are put as
    they are: their one owner needs no condition.

    One encode task per block; a shard that one block covers whole is written by that
    block's task, every other shard by a task of its own that gathers the encoded inner
    chunks (and raw pieces of cut inner chunks) from the blocks touching it. An
    unsharded array is written the same way, chunk by chunk. The graph has the same
    few layers whatever the size (see the module's description).

    ``fresh=True`` says the array was just created, so no shard exists yet: partly
    written shards are not read first, and empty ones need no delete.

    ``shards_per_task`` above 1 groups neighbouring blocks that hold fewer shards than
    that (:func:`batch_bounds`) and gives each group one task, which writes about that
    many shards: fewer tasks for tiny shards. ``"auto"`` groups toward dask's
    ``array.chunk-size`` of data per task.

    ``encode_split`` splits the encoding of each shard into about that many tasks,
    where few shards would leave threads idle (:func:`encode_split_chunks`); ``None``
    takes dask config ``shardwise.encode-split`` (default ``"auto"``)."""
    from dask.highlevelgraph import HighLevelGraph
    from dask.task_spec import DataNode

    if order not in WRITE_ORDERS:
        raise ValueError(f"write_order must be one of {WRITE_ORDERS}, got {order!r}")
    # an array this write created has no other writer (its shards are put plainly)
    guarded = guarded and not fresh
    source, per_task, cut, groups, chunks = _tasks_of(
        source, info, offset, shards_per_task, encode_split
    )
    plan = plan_write(info.layout, chunks, offset, open_end=guarded)
    names = _layer_names(
        source,
        store_token(store),
        info.path,
        plan.offset,
        write_empty_chunks,
        order,
        fresh,
        per_task,
        cut,
        sessions,
        guarded,
    )
    target = WriteTarget(
        store,
        info,
        offset=plan.offset,
        region=plan.region,
        write_empty_chunks=write_empty_chunks,
        order=order,
        fresh=fresh,
        sessions=sessions,
        guarded=guarded,
    )
    combine = merge_sessions if sessions else done
    target_key = names["target"]
    target_graph = HighLevelGraph(
        {target_key: {target_key: DataNode(target_key, target)}}, {target_key: set()}
    )
    layers, deps = _encode_layers(
        _Encoding(source, cut, groups, plan, names, target_key, target_graph)
    )
    if not plan.ngathered:  # every shard is written by its block's task
        encode_keys = [(names["encode"], *b) for b in np.ndindex(*plan.numblocks)]
        return wait_for(names["done"], HighLevelGraph(layers, deps), encode_keys, combine=combine)

    # shard tasks gather the parts of the blocks touching their shards
    gathered = plan.gathered_per_block()
    shard_layers, shard_deps = _shard_layers(plan, gathered, names, target_key)
    layers |= shard_layers
    deps |= shard_deps
    # the blocks that feed no shard task are waited for directly
    keys = [(names["encode"], *map(int, b)) for b in np.argwhere(gathered == 0)]
    if sessions:  # and the fork sessions of those that do, taken beside their parts
        session_layer = _session_layer(gathered, names)
        if session_layer:
            layers[names["session"]] = session_layer
            deps[names["session"]] = {names["encode"]}
            keys += list(session_layer)
    shard_keys = list(shard_layers[names["shard"]])
    return wait_for(
        names["done"], HighLevelGraph(layers, deps), [*keys, *shard_keys], combine=combine
    )


def _encode_layers(e: _Encoding) -> tuple[dict[str, Any], dict[str, Any]]:
    """The graph's layers and dependencies up to the encode layer: a task per block,
    given the stored array in place of the block where the source is a plain read of
    one (:func:`_stored_layer`), else fused with the source's blockwise layers (and,
    where ``encode_split`` cut the blocks, spread over the workers' threads:
    :func:`_spread`); or a task per group of blocks (:func:`_batch_layer`)."""
    from dask.highlevelgraph import HighLevelGraph

    name = e.names["encode"]
    stored = stored_reader(e.source) if e.groups is None and e.cut is None else None
    if stored is not None:
        return _stored_layer(e.source, stored, name, e.target_graph, e.target_key)
    if e.groups is None:
        encoded = e.source.map_blocks(
            encode_block,
            _compat.ArraySliceDep(e.source.chunks),
            Delayed(e.target_key, e.target_graph),
            name=name,
            meta=np.empty((0,) * e.source.ndim, dtype=object),
        )
        graph = fuse_blockwise(encoded.__dask_graph__(), name)
        layers = dict(graph.layers)
        if e.cut is not None:
            _spread(layers[name], name, e.source.numblocks)
        return layers, dict(graph.dependencies)
    graph = HighLevelGraph.merge(e.source.__dask_graph__(), e.target_graph)
    layers = dict(graph.layers)
    deps = dict(graph.dependencies)
    layers[name] = _batch_layer(name, e.source, e.groups, e.plan, e.target_key)
    deps[name] = {*e.source.__dask_layers__(), e.target_key}
    return layers, deps


def _shard_layers(
    plan: WritePlan, gathered: Any, names: dict[str, str], target_key: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The shard layer (a task per shard that gathers the parts of the blocks touching
    it) and the split layer, if any: a block with parts for several such shards
    (``gathered``: how many, per block) gets a split task per shard, so each part
    travels alone. Returns the layers and their dependencies."""
    from dask.task_spec import Task, TaskRef

    split: dict[Any, Any] = {}
    shards: dict[Any, Any] = {}
    target_ref = TaskRef(target_key)
    with paused_gc():  # a task per shard: millions of small objects
        for sw in plan.shard_writes(gathered=True):
            parts = []
            for b in sw.blocks:
                if gathered[b] > 1:
                    key: Any = (names["split"], *b, *sw.shard)
                    split[key] = Task(key, pick, TaskRef((names["encode"], *b)), sw.shard)
                    parts.append(TaskRef(key))
                else:
                    parts.append(TaskRef((names["encode"], *b)))  # its one part
            key = (names["shard"], *sw.shard)
            shards[key] = Task(key, write_shard, sw.shard, sw.covered, target_ref, *parts)
    layers: dict[str, Any] = {names["shard"]: shards}
    deps: dict[str, Any] = {names["shard"]: {names["encode"], target_key}}
    if split:
        layers[names["split"]] = split
        deps[names["split"]] = {names["encode"]}
        deps[names["shard"]].add(names["split"])
    return layers, deps


def _session_layer(gathered: Any, names: dict[str, str]) -> dict[Any, Any]:
    """A task per block that feeds shard tasks (``gathered``: how many, per block),
    taking its fork session from beside its parts."""
    from dask.task_spec import Task, TaskRef

    layer = {}
    for where in np.argwhere(gathered > 0).tolist():
        key = (names["session"], *where)
        layer[key] = Task(key, session_of, TaskRef((names["encode"], *where)))
    return layer


def finish_graph(writes: list[Any], finish: Any, *head: Any) -> Any:
    """A ``dask.delayed`` that runs ``finish(*head, *results)`` once ``writes`` (each a
    ``dask.delayed``) are done, and computes to what it returns. Built directly on their
    graphs: ``dask.delayed(f)(writes)`` would cull each write's whole graph while
    building."""
    from dask.highlevelgraph import HighLevelGraph
    from dask.task_spec import Task, TaskRef

    name = f"shardwise-finish-{uuid.uuid4().hex}"
    graph = HighLevelGraph.merge(*(w.__dask_graph__() for w in writes))
    refs = (TaskRef(w.key) for w in writes)
    layers: dict[str, Any] = {**graph.layers, name: {name: Task(name, finish, *head, *refs)}}
    deps = {**graph.dependencies, name: {layer for w in writes for layer in w.__dask_layers__()}}
    return WriteDelayed(name, HighLevelGraph(layers, deps), layer=name)


def data_graph(
    source: Any,
    target: Any,
    region: tuple[slice, ...],
    offset: tuple[int, ...],
    write_empty_chunks: bool | None,
    order: str,
    fresh: bool,
    shards_per_task: int | str = 1,
    encode_split: int | str | None = None,
    *,
    store: Any = None,
    guarded: bool = False,
) -> Any:
    """The delayed write of one dask variable into its zarr array (``fresh``: created
    by this call, so no shard of it exists yet). ``store``: write through this store
    instead of the array's (an Icechunk fork's store: the delayed then computes to the
    fork session holding the changes)."""
    empty = (
        _compat.array_config(target).write_empty_chunks
        if write_empty_chunks is None
        else write_empty_chunks
    )
    if target.metadata.zarr_format == 3 and source.dtype.kind in FIXED_KINDS:
        info = ArrayInfo.from_metadata(target.metadata, target.path)
        return store_dask_array(
            source.astype(info.dtype, copy=False),
            target.store_path.store if store is None else store,
            info,
            offset=offset,
            write_empty_chunks=bool(empty),
            order=order,
            fresh=fresh,
            shards_per_task=shards_per_task,
            encode_split=encode_split,
            sessions=store is not None,
            guarded=guarded,
        )
    return _store_aligned(source, target, region, offset)


def _store_aligned(source: Any, target: Any, region: tuple[slice, ...], offset: Any) -> Any:
    """What the shard writer does not handle (Zarr v2 arrays, variable-length strings)
    goes through ``dask.array.store`` after rechunking to the array's write grid, so no
    two tasks share a chunk or shard."""
    import dask.array as da
    from dask.core import flatten

    grid = getattr(target, "shards", None) or target.chunks
    new_chunks = tuple(
        _aligned(n, o, g) for n, o, g in zip(source.shape, offset, grid, strict=True)
    )
    aligned = source.rechunk(new_chunks) if new_chunks != source.chunks else source
    stored = da.store(aligned, target, regions=region, lock=False, compute=False)
    graph = fuse_blockwise(stored.__dask_graph__(), stored.name)
    return wait_for(f"shardwise-done-{stored.name}", graph, list(flatten(stored.__dask_keys__())))


def _aligned(n: int, offset: int, grid: int) -> tuple[int, ...]:
    """Chunk sizes covering ``[offset, offset + n)`` that break at multiples of ``grid``."""
    out, pos, end = [], offset, offset + n
    while pos < end:
        stop = min((pos // grid + 1) * grid, end)
        out.append(stop - pos)
        pos = stop
    return tuple(out) or (0,)
