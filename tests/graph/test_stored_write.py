"""Writing a plain read of a stored array (``to_zarr(from_zarr(src), dst, ...)``): shards
whose inner chunks are the source's are written from the stored chunks, each decoded
and encoded again, with no block of values in between. Every case is compared byte for
byte with the same write through the general path (``from_zarr(src) + 0``: a block of
values per task), and against zarr-python reading the source."""

from __future__ import annotations

import os
from pathlib import Path

import dask.array as da
import numpy as np
import pytest
import zarr

import shardwise
from shardwise.graph import tasks
from shardwise.graph.fanout import stored_reader


def files(path):
    """Every file under ``path`` with its bytes; metadata documents without the trailing
    whitespace that makes each conditional put's document distinct (io.conditional.distinct)."""
    out = {}
    for d, _, names in os.walk(path):
        for f in names:
            full = os.path.join(d, f)
            data = Path(full).read_bytes()
            out[os.path.relpath(full, path)] = data.rstrip() if f == "zarr.json" else data
    return out


def source(path, *, shape=(50, 45, 20), chunks=(5, 5, 10), shards=(10, 15, 20), **kw):
    """A sharded source with edge shards, an absent shard and absent inner chunks."""
    rng = np.random.default_rng(0)
    data = rng.integers(1, 1000, size=shape).astype(kw.pop("dtype", "u2"))
    z = zarr.create_array(
        path, shape=shape, chunks=chunks, shards=shards, dtype=data.dtype, fill_value=7, **kw
    )
    z[...] = data
    z[10:20, :15, :] = 7  # a whole shard of fill values: zarr-python deletes it
    z[:5, :5, :10] = 7  # an inner chunk of fill values: absent from its shard
    return z[...]


@pytest.fixture
def counted(monkeypatch):
    """How the encode tasks went: shards recoded from stored chunks, blocks read."""
    seen = {"recoded": 0, "read": 0}
    recode, values = tasks.StoredBlock.recode, tasks.StoredBlock.values

    def counting_recode(self, shard, target):
        done = recode(self, shard, target)
        seen["recoded"] += done
        return done

    def counting_values(self):
        seen["read"] += 1
        return values(self)

    monkeypatch.setattr(tasks.StoredBlock, "recode", counting_recode)
    monkeypatch.setattr(tasks.StoredBlock, "values", counting_values)
    return seen


def both(tmp_path, x, **kwargs):
    """Write ``x`` (a plain read) and ``x + 0`` (the general path) with ``kwargs``;
    return the two stores' files."""
    shardwise.array.to_zarr(x, tmp_path / "stored.zarr", **kwargs)
    shardwise.array.to_zarr(x + 0, tmp_path / "general.zarr", **kwargs)
    return files(tmp_path / "stored.zarr"), files(tmp_path / "general.zarr")


@pytest.mark.parametrize("inline", [False, True])
@pytest.mark.parametrize("write_empty_chunks", [False, True])
def test_same_layout_recodes_every_shard_byte_for_byte(
    tmp_path, counted, inline, write_empty_chunks
):
    want = source(tmp_path / "src.zarr")
    x = shardwise.array.from_zarr(tmp_path / "src.zarr", inline_array=inline)
    assert stored_reader(x) is not None
    stored, general = both(
        tmp_path,
        x,
        shards=(10, 15, 20),
        chunks=(5, 5, 10),
        compressors=zarr.codecs.ZstdCodec(level=1, checksum=True),  # not the source's
        fill_value=7,
        write_empty_chunks=write_empty_chunks,
    )
    assert stored == general
    assert counted["read"] == 0
    assert counted["recoded"] == 5 * 3  # every shard, the absent one included
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "stored.zarr")[...], want)


def test_another_fill_value_keeps_the_values(tmp_path, counted):
    """An absent stored chunk is the source's fill value; the target's fill value only
    pads what lies past the array's end."""
    want = source(tmp_path / "src.zarr")
    x = shardwise.array.from_zarr(tmp_path / "src.zarr")
    stored, general = both(tmp_path, x, shards=(10, 15, 20), chunks=(5, 5, 10), fill_value=3)
    assert stored == general
    assert counted["read"] == 0
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "stored.zarr")[...], want)


def test_bigger_shards_of_the_same_inner_chunks(tmp_path, counted):
    want = source(tmp_path / "src.zarr")
    x = shardwise.array.from_zarr(tmp_path / "src.zarr", chunks={0: 20, 1: 45})
    stored, general = both(tmp_path, x, shards=(20, 45, 20), chunks=(5, 5, 10))
    assert stored == general
    assert counted["read"] == 0 and counted["recoded"] == 3
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "stored.zarr")[...], want)


def test_other_inner_chunks_read_the_block(tmp_path, counted):
    want = source(tmp_path / "src.zarr")
    x = shardwise.array.from_zarr(tmp_path / "src.zarr")
    stored, general = both(tmp_path, x, shards=(10, 15, 20), chunks=(10, 5, 10))
    assert stored == general
    assert counted["recoded"] == 0 and counted["read"] == 5 * 3
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "stored.zarr")[...], want)


def test_blocks_that_cut_shards(tmp_path, counted):
    """Dask chunks of half a shard: no plain read (index tasks), the general path."""
    want = source(tmp_path / "src.zarr")
    x = shardwise.array.from_zarr(tmp_path / "src.zarr", chunks={0: 5})
    assert stored_reader(x) is None
    shardwise.array.to_zarr(x, tmp_path / "out.zarr", shards=(10, 15, 20), chunks=(5, 5, 10))
    assert counted == {"recoded": 0, "read": 0}
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "out.zarr")[...], want)


def test_target_shards_the_blocks_cut(tmp_path, counted):
    """Blocks of one source shard, target shards of two: each block hands its part of
    them on, but for the last row of target shards (rows 40-50), which one block covers."""
    want = source(tmp_path / "src.zarr")
    x = shardwise.array.from_zarr(tmp_path / "src.zarr")
    stored, general = both(tmp_path, x, shards=(20, 15, 20), chunks=(5, 5, 10))
    assert stored == general
    assert counted["recoded"] == 3 and counted["read"] == 4 * 3
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "stored.zarr")[...], want)


@pytest.mark.parametrize("fmt", [2, 3])
def test_unsharded_sources(tmp_path, counted, fmt):
    data = np.arange(40 * 30, dtype="f4").reshape(40, 30)
    z = zarr.create_array(
        tmp_path / "src.zarr", shape=data.shape, chunks=(8, 10), dtype="f4", zarr_format=fmt
    )
    z[...] = data
    x = shardwise.array.from_zarr(tmp_path / "src.zarr", chunks={0: 16, 1: 30})
    stored, general = both(tmp_path, x, shards=(16, 30), chunks=(8, 10))
    assert stored == general
    assert counted["read"] == 0 and counted["recoded"] == 3
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "stored.zarr")[...], data)


def test_appends_and_regions(tmp_path, counted):
    """Into an existing array at an offset: whole target shards from stored chunks."""
    want = source(tmp_path / "src.zarr")
    x = shardwise.array.from_zarr(tmp_path / "src.zarr")
    for name in ("stored.zarr", "general.zarr"):
        shardwise.array.to_zarr(x + 0, tmp_path / name, shards=(10, 15, 20), chunks=(5, 5, 10))
    shardwise.array.to_zarr(x, tmp_path / "stored.zarr", append_dim=0)
    shardwise.array.to_zarr(x + 0, tmp_path / "general.zarr", append_dim=0)
    assert files(tmp_path / "stored.zarr") == files(tmp_path / "general.zarr")
    assert counted["recoded"] == 5 * 3 and counted["read"] == 0
    np.testing.assert_array_equal(
        zarr.open_array(tmp_path / "stored.zarr")[...], np.concatenate([want, want])
    )
    # a region whose start is no multiple of the inner chunk: no stored chunk fits
    counted.update(recoded=0, read=0)
    y = shardwise.array.from_zarr(tmp_path / "src.zarr")[:10]
    z = zarr.create_array(
        tmp_path / "r.zarr",
        shape=(30, 45, 20),
        chunks=(5, 5, 10),
        shards=(10, 15, 20),
        dtype="u2",
        fill_value=7,
    )
    assert stored_reader(y) is None  # a slice of the read: computed on
    shardwise.array.to_zarr(y, z, region=(slice(3, 13), slice(None), slice(None)))
    np.testing.assert_array_equal(z[3:13], want[:10])


def test_another_dtype_is_computed_on(tmp_path, counted):
    """Into an existing array of another dtype: the source is cast first (a computation
    on the read), and written by the general path."""
    want = source(tmp_path / "src.zarr")
    z = zarr.create_array(
        tmp_path / "f.zarr", shape=want.shape, chunks=(5, 5, 10), shards=(10, 15, 20), dtype="f8"
    )
    shardwise.array.to_zarr(shardwise.array.from_zarr(tmp_path / "src.zarr"), z, mode="r+")
    assert counted == {"recoded": 0, "read": 0}
    np.testing.assert_array_equal(z[...], want.astype("f8"))


def test_a_computed_array_is_no_plain_read(tmp_path):
    source(tmp_path / "src.zarr")
    x = shardwise.array.from_zarr(tmp_path / "src.zarr")
    assert stored_reader(x) is not None
    assert stored_reader(x + 1) is None
    assert stored_reader(x[:5]) is None
    assert stored_reader(da.zeros(3)) is None
