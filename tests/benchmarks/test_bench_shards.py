"""One shard through shardwise's own code: encoded as a write task encodes it, decoded,
its index read from a local store, and the byte ranges of its inner chunks coalesced. A
shard of 256 x 256 float32 (smooth values plus noise, rounded as measured data are) in 64
inner chunks of 32 x 32, zstd level 1."""

from __future__ import annotations

import numpy as np
import pytest
import zarr
from zarr.codecs import ZstdCodec
from zarr.storage import LocalStore

import shardwise
from shardwise.format.metadata import ArrayInfo
from shardwise.graph.target import WriteTarget
from shardwise.graph.tasks import encode_block
from shardwise.io.stores import ByteRange, coalesce

SHARD, INNER = (256, 256), (32, 32)
WHOLE = (slice(0, SHARD[0]), slice(0, SHARD[1]))


def values() -> np.ndarray:
    y, x = np.mgrid[0 : SHARD[0], 0 : SHARD[1]].astype("f4")
    noise = np.random.default_rng(0).standard_normal(SHARD, dtype="f4")
    return np.round(10 * np.sin(x / 40) * np.cos(y / 30) + 0.01 * noise, 2)


@pytest.fixture(scope="module")
def array(tmp_path_factory) -> tuple[LocalStore, ArrayInfo, np.ndarray]:
    """The shard written by zarr-python to a local store, and its values."""
    store = LocalStore(tmp_path_factory.mktemp("shard") / "a.zarr")
    data = values()
    arr = zarr.create_array(
        store,
        name="v",
        shape=SHARD,
        chunks=INNER,
        shards=SHARD,
        dtype="f4",
        compressors=ZstdCodec(level=1),
    )
    arr[...] = data
    return store, ArrayInfo.from_metadata(arr.metadata, "v"), data


def test_shard_encode(benchmark, array, tmp_path):
    """``encode_block`` of a block that is one whole shard: encode its inner chunks, lay
    them out with the index, put the shard (into a local store)."""
    _, info, data = array
    target = WriteTarget(
        LocalStore(tmp_path / "out.zarr"),
        info,
        offset=(0, 0),
        region=((0, SHARD[0]), (0, SHARD[1])),
        write_empty_chunks=False,
        order="morton",
        fresh=True,
    )
    benchmark.group = "shard"
    assert benchmark(encode_block, data, WHOLE, target) == {}  # no part left for another task
    out = shardwise.ArrayReader(LocalStore(tmp_path / "out.zarr"), info)  # (the source's metadata)
    np.testing.assert_array_equal(out[...], data)


def test_shard_decode(benchmark, array):
    """A whole shard held in memory decoded by its ``ShardDecoder``."""
    store, info, data = array
    reader = shardwise.ArrayReader(store, info)
    blob = (store.root / info.key((0, 0))).read_bytes()
    benchmark.group = "shard"
    np.testing.assert_array_equal(benchmark(reader.decoder((0, 0)).decode, blob), data)


def test_shard_index_read(benchmark, array):
    """A shard's index read from the local store, checked and decoded (the process's
    index cache emptied before each read)."""
    store, info, _ = array
    reader = shardwise.ArrayReader(store, info)
    benchmark.group = "shard"
    entry = benchmark.pedantic(
        reader.index_entry, args=((0, 0),), setup=shardwise.cache.clear_index_cache, rounds=50
    )
    assert entry.table is not None and entry.table.shape == (8, 8, 2)


def test_coalescing_byte_ranges(benchmark):
    """Every other inner chunk of a shard of 4096 chunks of about 10 KB wanted: their
    ranges grouped into requests (holes of 1 MB or less bridged, requests up to 8 MB)."""
    sizes = np.random.default_rng(0).integers(8_000, 12_000, 4096)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    ranges = [ByteRange(int(s), int(s + n)) for s, n in zip(starts, sizes, strict=True)][::2]
    benchmark.group = "shard"
    groups = benchmark(coalesce, ranges, gap=1 << 20, max_size=8 << 20)
    assert sorted(i for _, members in groups for i in members) == list(range(len(ranges)))
