"""A read outside dask (``ArrayReader[...]``, xarray's ``.values`` without chunks) fetches
and decodes its shards on several threads; inside a dask task (any thread but the main
one) it stays on one. Same values as zarr-python's read, every way."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr
import zarr
from zarr.storage import MemoryStore

import shardwise
from bounded import run_threads
from shardwise import ReadOptions
from shardwise.io.reader import ArrayReader, read_threads


def write(store, shape=(40, 30, 20)):
    data = np.random.default_rng(0).integers(0, 1000, size=shape).astype("u2")
    z = zarr.create_group(store).create_array(
        "v",
        shape=shape,
        chunks=(5, 5, 5),
        shards=(10, 15, 10),
        dtype="u2",
        dimension_names=("z", "y", "x"),
    )
    z[...] = data
    z[10:20, :15, :10] = 0  # a shard of fill values only: zarr-python deletes it
    return z[...]


@pytest.mark.parametrize("threads", [None, 1, 3, 8])
@pytest.mark.parametrize("kind", ["local", "memory"])
def test_every_thread_count_reads_what_zarr_python_reads(tmp_path, threads, kind):
    store = tmp_path / "a.zarr" if kind == "local" else MemoryStore()
    want = write(store)
    r = ArrayReader.open(store, "v", options=ReadOptions(threads=threads))
    np.testing.assert_array_equal(r[...], want)
    np.testing.assert_array_equal(r[3:37, 2:29:3, [0, 19, 7]], want[3:37, 2:29:3][:, :, [0, 19, 7]])
    np.testing.assert_array_equal(r[5], want[5])


def test_xarray_values_without_chunks(tmp_path):
    want = write(tmp_path / "a.zarr")
    ds = xr.open_dataset(tmp_path / "a.zarr", engine="shardwise", consolidated=False)
    np.testing.assert_array_equal(ds.v.values, want)


def test_dask_tasks_read_on_one_thread_and_the_main_thread_on_every_core():
    assert read_threads(None) >= 1
    assert read_threads(5) == 5
    assert run_threads([lambda: read_threads(None)], timeout=60) == [1]


def test_an_error_in_a_read_thread_reaches_the_caller(tmp_path):
    write(tmp_path / "a.zarr")
    shard = tmp_path / "a.zarr" / "v" / "c" / "3" / "1" / "1"
    raw = bytearray(shard.read_bytes())
    raw[-3] ^= 0xFF  # the index checksum
    shard.write_bytes(bytes(raw))
    with pytest.raises(shardwise.errors.ChecksumError) as info:
        ArrayReader.open(tmp_path / "a.zarr", "v", options=ReadOptions(threads=4))[...]
    assert info.value.key == "v/c/3/1/1"


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_bad_thread_counts_are_refused(bad):
    with pytest.raises(ValueError, match="threads"):
        ReadOptions(threads=bad)
