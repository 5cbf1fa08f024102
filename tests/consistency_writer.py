"""A writer that keeps rewriting parts of one array while readers read it, run as a
process of its own: ``python consistency_writer.py '<json>'`` (the reader-consistency
tests: ``test_reader_consistency.py``, ``consistency.py``,
``stress/test_stress_concurrency.py``).

The json says where the array is (``store``: a local path or an ``s3://`` URL, with
``storage_options``; ``path``: the array's path in the store) and what to do:
``seconds`` of region writes, and at least ``min_writes`` (5) of them within four times
``seconds`` (``seed`` for the random choices; ``shape`` and
``chunks``, the array's and its inner chunks', when :func:`make_array` was given others
than :data:`SHAPE` and :data:`CHUNKS`), then, unless ``final`` is false, one write of
the whole array with the :data:`FINAL` generation. Prints a JSON line
``{"ready": true}`` once its imports are done (its clock starts then), and one
``{"writes": n, "seconds": t}`` at the end; exits 0.

Every value says where it belongs: the int64 at (row, col) is
``(noise << 32) | (row * ncols + col)`` (:func:`values`), so a reader that returns an
inner chunk from the wrong place, or garbage, is caught value by value (:func:`check`).
The noise changes the compressed size of what is written from one write to the next
(all-zero noise, which zstd squeezes to almost nothing, then random noise of 20 bits,
which it cannot), so the offsets of the inner chunks inside a rewritten shard move:
an index read before a write points at the wrong bytes after it.
"""

from __future__ import annotations

import json
import random
import sys
import time
from typing import Any

import numpy as np

SHAPE = (400, 60)  # 4 shards of 100 x 60 along axis 0
SHARDS = (100, 60)
CHUNKS = (10, 20)  # 10 x 3 inner chunks per shard, 40 x 3 in the array
DIMS = ("row", "col")  # dimension names: xarray's engines see one variable, named path
FILL = -1
FINAL = 0x7ABCDE  # the last generation's noise: outside the random noise's [0, 2**20)
NOISE_BITS = 20
LOW = np.int64(0xFFFFFFFF)


def values(rows: range, cols: range, noise: int | np.ndarray, ncols: int = SHAPE[1]) -> np.ndarray:
    """The int64 values of ``rows`` x ``cols``: ``(noise << 32) | (row * ncols + col)``
    (``noise``: one int, or an array of the block's shape)."""
    r = np.arange(rows.start, rows.stop, dtype="i8")[:, None]
    c = np.arange(cols.start, cols.stop, dtype="i8")[None, :]
    return (np.asarray(noise, dtype="i8") << 32) | (r * ncols + c)


def _positions(rows: Any, cols: Any, ncols: int) -> np.ndarray:
    r = np.asarray(_indices(rows), dtype="i8")[:, None]
    c = np.asarray(_indices(cols), dtype="i8")[None, :]
    return r * ncols + c


def _indices(sel: Any) -> Any:
    """A range, a slice with its bounds given, or a sequence of indices, as indices."""
    if isinstance(sel, slice):
        return range(sel.start or 0, sel.stop, sel.step or 1)
    return sel


def check(values: np.ndarray, rows: Any, cols: Any, ncols: int = SHAPE[1]) -> int:
    """How many elements of ``values`` (the block at ``rows`` x ``cols`` of the array:
    ranges, bounded slices or index sequences) are wrong: their low 32 bits are not
    their own position, or their noise is none that was ever written. The fill value
    (an inner chunk never written) counts as right."""
    v = np.asarray(values)
    if v.dtype != np.int64:
        return int(v.size)  # not the array's values at all (a masked float, say)
    noise = v >> 32
    ok = ((v & LOW) == _positions(rows, cols, ncols)) & (
        ((noise >= 0) & (noise < (1 << NOISE_BITS))) | (noise == FINAL)
    )
    return int(np.count_nonzero(~(ok | (v == FILL))))


def not_final(values: np.ndarray, rows: Any, cols: Any, ncols: int = SHAPE[1]) -> int:
    """How many elements of the block are not the FINAL generation's value."""
    v = np.asarray(values)
    if v.dtype != np.int64:
        return int(v.size)
    want = (np.int64(FINAL) << 32) | _positions(rows, cols, ncols)
    return int(np.count_nonzero(v != want))


def is_final(values: np.ndarray, rows: Any, cols: Any, ncols: int = SHAPE[1]) -> bool:
    """Whether the block holds the FINAL generation everywhere."""
    return not_final(values, rows, cols, ncols) == 0


def make_array(
    store: str,
    path: str = "v",
    storage_options: dict[str, Any] | None = None,
    shape: tuple[int, int] = SHAPE,
    shards: tuple[int, int] = SHARDS,
    chunks: tuple[int, int] = CHUNKS,
) -> None:
    """Create (or replace) the int64 array at ``path``: fill value -1, zstd, named
    dimensions ``row`` and ``col``; only every other inner chunk (a checkerboard) is
    written, with noise 0, so the others start absent (the fill value)."""
    import dask
    import dask.array as da

    import shardwise

    data = values(range(shape[0]), range(shape[1]), 0, shape[1])
    for i in range(0, shape[0], chunks[0]):
        for j in range(0, shape[1], chunks[1]):
            if (i // chunks[0] + j // chunks[1]) % 2:
                data[i : i + chunks[0], j : j + chunks[1]] = FILL
    with dask.config.set(scheduler="synchronous"):
        shardwise.array.to_zarr(
            da.from_array(data, chunks=shards),
            store,
            path=path,
            shards=shards,
            chunks=chunks,
            fill_value=FILL,
            dimension_names=DIMS,
            compressors=[{"name": "zstd", "configuration": {"level": 1}}],
            mode="w",
            storage_options=storage_options,
        )


def write(
    store: str,
    path: str,
    rows: range,
    cols: range,
    noise: int | np.ndarray,
    storage_options: dict[str, Any] | None,
    ncols: int,
) -> None:
    """One region write of ``rows`` x ``cols`` with ``noise``."""
    import dask.array as da

    import shardwise

    block = values(rows, cols, noise, ncols)
    shardwise.array.to_zarr(
        da.from_array(block, chunks=block.shape),
        store,
        path=path,
        region=(slice(rows.start, rows.stop), slice(cols.start, cols.stop)),
        mode="r+",
        storage_options=storage_options,
    )


def main(argv: list[str]) -> None:
    import dask
    import dask.array  # (imported before the clock starts, as shardwise is)

    import shardwise

    shardwise.to_zarr  # noqa: B018  (bound on first use: its modules load here)
    cfg = json.loads(argv[0])
    dask.config.set(scheduler="synchronous")
    store, path = cfg["store"], cfg.get("path", "v")
    so = cfg.get("storage_options")
    shape = tuple(cfg.get("shape", SHAPE))
    chunks = tuple(cfg.get("chunks", CHUNKS))
    rng = random.Random(cfg.get("seed", 0))
    noise_rng = np.random.default_rng(cfg.get("seed", 0))
    print(json.dumps({"ready": True}), flush=True)
    t0 = time.perf_counter()
    writes = 0
    # at least min_writes however busy the machine (a starved writer proves little), but
    # never past four times its seconds
    least, most = cfg.get("min_writes", 5), 4 * cfg["seconds"]

    def going() -> bool:
        elapsed = time.perf_counter() - t0
        return elapsed < cfg["seconds"] or (writes < least and elapsed < most)

    while going():
        n_rows = shape[0] // chunks[0]
        run = rng.choice((1, 1, 2, 3))  # a run of adjacent inner chunks along axis 0
        i = rng.randrange(n_rows - run + 1)
        j = rng.randrange(shape[1] // chunks[1])
        rows = range(i * chunks[0], (i + run) * chunks[0])
        cols = range(j * chunks[1], (j + 1) * chunks[1])
        noise: int | np.ndarray = (
            0
            if writes % 2 == 0
            else noise_rng.integers(0, 1 << NOISE_BITS, size=(len(rows), len(cols)))
        )
        write(store, path, rows, cols, noise, so, shape[1])
        writes += 1
    seconds = time.perf_counter() - t0
    if cfg.get("final", True):
        write(store, path, range(shape[0]), range(shape[1]), FINAL, so, shape[1])
        writes += 1
    print(json.dumps({"writes": writes, "seconds": seconds}))


if __name__ == "__main__":
    main(sys.argv[1:])
