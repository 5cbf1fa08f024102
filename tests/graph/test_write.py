"""The shard writer (issue 3, first part): any dask chunking, one put per shard."""

from __future__ import annotations

import dask
import dask.array as da
import numpy as np
import pytest
import zarr
from hypothesis import given, settings
from hypothesis import strategies as st
from zarr.codecs import BytesCodec, ShardingCodec, ZstdCodec
from zarr.storage import LocalStore, MemoryStore

from shardwise.errors import StoreIOError
from shardwise.format.grid import ShardLayout
from shardwise.format.index import IndexFormat
from shardwise.format.metadata import ArrayInfo
from shardwise.format.shard import assemble_shard, write_order
from shardwise.graph.target import ShardSink
from shardwise.graph.write import store_dask_array
from shardwise.graph.write_plan import batch_bounds, plan_write, split_block
from shardwise.graph.write_plan import shard_box as planned_box
from shardwise.io.capabilities import copies_out
from shardwise.io.reader import ArrayReader
from shardwise.testing import CountingStore


def test_write_orders():
    assert write_order((2, 2), "C") == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert write_order((2, 2), "morton") == [(0, 0), (1, 0), (0, 1), (1, 1)]
    assert sorted(write_order((3, 5), "morton")) == write_order((3, 5), "C")
    with pytest.raises(ValueError, match="write_order"):
        write_order((2,), "hilbert")


def test_assembled_shard_reads_back_with_zarr(tmp_path):
    a = zarr.create_array(
        tmp_path / "a",
        shape=(4, 4),
        chunks=(2, 2),
        shards=(4, 4),
        dtype="u1",
        compressors=None,
        fill_value=0,
    )
    fmt = IndexFormat((2, 2))
    chunks = {(0, 0): bytes([1] * 4), (1, 1): bytes([4] * 4)}
    (tmp_path / "a" / "c" / "0").mkdir(parents=True)
    (tmp_path / "a" / "c" / "0" / "0").write_bytes(assemble_shard(chunks, fmt, write_order((2, 2))))
    expected = np.zeros((4, 4), "u1")
    expected[:2, :2], expected[2:, 2:] = 1, 4
    np.testing.assert_array_equal(a[:], expected)
    assert assemble_shard({}, fmt, write_order((2, 2))) is None


def test_plan_maps_blocks_to_shards():
    info_layout = ArrayInfo.from_metadata(
        zarr.create_array(
            MemoryStore(), shape=(100,), chunks=(10,), shards=(40,), dtype="f4"
        ).metadata
    ).layout
    plan = plan_write(info_layout, ((30, 30, 30, 10),))
    assert [(s.shard, s.blocks) for s in plan.shard_writes()] == [
        ((0,), ((0,), (1,))),
        ((1,), ((1,), (2,))),
        ((2,), ((2,), (3,))),
    ]
    assert all(s.covered and not s.whole for s in plan.shard_writes())
    region = plan_write(info_layout, ((15,),), offset=(35,))
    assert [(s.shard, s.covered) for s in region.shard_writes()] == [((0,), False), ((1,), False)]
    with pytest.raises(ValueError, match="does not fit"):
        plan_write(info_layout, ((15,),), offset=(90,))


def make(store, shape, shards, inner, fill=np.nan, dtype="f4", location="end"):
    if inner is None:  # unsharded: chunks of ``shards``
        a = zarr.create_array(
            store,
            shape=shape,
            chunks=shards,
            compressors=ZstdCodec(level=1),
            dtype=dtype,
            fill_value=fill,
        )
        return a, ArrayInfo.from_metadata(a.metadata)
    codec = ShardingCodec(
        chunk_shape=inner, codecs=[BytesCodec(), ZstdCodec(level=1)], index_location=location
    )
    a = zarr.create_array(
        store,
        shape=shape,
        chunks=shards,
        serializer=codec,
        compressors=None,
        dtype=dtype,
        fill_value=fill,
    )
    return a, ArrayInfo.from_metadata(a.metadata)


def test_misaligned_chunks_one_put_per_nonempty_shard(tmp_path):
    data = np.random.default_rng(0).normal(size=(1000, 50)).astype("f4")
    data[300:400] = np.nan  # one whole shard row of fill values
    _, info = make(tmp_path / "a", data.shape, (100, 50), (10, 50))
    store = CountingStore(LocalStore(tmp_path / "a"))
    with dask.config.set(scheduler="threads"):
        store_dask_array(da.from_array(data, chunks=(30, 50)), store, info).compute()
    sets = store.log.per_key("set")
    assert len(sets) == 9 and set(sets.values()) == {1}  # shard 3 is all fill: not written
    assert "c/3/0" not in sets
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "a")[:], data)
    np.testing.assert_array_equal(ArrayReader.open(tmp_path / "a")[:], data)


def test_shard_sink_puts_one_shard_or_deletes_a_stale_one(tmp_path):
    """ShardSink is the one put of a shard (the writer's, reshard's and migrate's): the
    inner chunks in the write order with the index, at the array's key; with nothing
    left, the object an earlier write left is deleted."""
    _, info = make(tmp_path / "a", (20,), (10,), (5,), fill=0.0)
    chunks = {(1,): b"one", (0,): b"zero"}
    store = CountingStore(LocalStore(tmp_path / "a"))
    for order in ("C", "morton"):
        written = ShardSink(store, info, order=order).put_chunks((1,), chunks)
        blob = (tmp_path / "a" / "c" / "1").read_bytes()
        assert blob == assemble_shard(chunks, IndexFormat((2,)), write_order((2,), order))
        assert written == len(blob)
    assert store.log.per_key("set") == {"c/1": 2}
    assert ShardSink(store, info).put_chunks((1,), {}) == 0
    assert not (tmp_path / "a" / "c" / "1").exists()
    assert ShardSink(store, info, fresh=True).put_chunks((0,), {}) == 0  # nothing to delete
    assert planned_box(info.layout, (1,)) == shard_box(info.layout, (1,)) == ((10, 20),)


def test_shard_sink_names_a_failed_put():
    class Failing(MemoryStore):
        async def set(self, key, value, byte_range=None):
            raise OSError("no space left on device")

    _, info = make(MemoryStore(), (20,), (10,), (5,), fill=0.0)
    sink = ShardSink(Failing(), info, what="resharding a shard", advice="Run it again.")
    with pytest.raises(StoreIOError, match="resharding a shard failed") as e:
        sink.put_chunks((0,), {(0,): b"x"})
    assert e.value.key == "c/0" and "no space left" in str(e.value)


def test_existing_shard_of_fill_values_is_deleted(tmp_path):
    a, info = make(tmp_path / "a", (20,), (10,), (5,), fill=0.0)
    a[:] = np.arange(20.0) + 1
    store_dask_array(da.zeros(20, chunks=7, dtype="f4"), LocalStore(tmp_path / "a"), info).compute()
    assert not (tmp_path / "a" / "c" / "0").exists()
    np.testing.assert_array_equal(a[:], np.zeros(20))


@st.composite
def write_cases(draw):
    ndim = draw(st.integers(1, 2))
    inner = tuple(draw(st.integers(1, 4)) for _ in range(ndim))
    shards = tuple(c * draw(st.integers(1, 3)) for c in inner)
    shape = tuple(draw(st.integers(1, 25)) for _ in range(ndim))
    lo = tuple(draw(st.integers(0, n - 1)) for n in shape)
    hi = tuple(draw(st.integers(a + 1, n)) for a, n in zip(lo, shape, strict=True))
    chunks = []
    for a, b in zip(lo, hi, strict=True):
        sizes, left = [], b - a
        while left:
            sizes.append(draw(st.integers(1, left)))
            left -= sizes[-1]
        chunks.append(tuple(sizes))
    order = draw(st.sampled_from(["morton", "C"]))
    location = draw(st.sampled_from(["start", "end"]))
    prefill = draw(st.booleans())
    if draw(st.integers(0, 4)) == 0:
        inner = None  # an unsharded array, written chunk by chunk the same way
    return shape, shards, inner, lo, tuple(chunks), order, location, prefill


@settings(max_examples=80, deadline=None)
@given(write_cases(), st.integers(0, 2**31), st.sampled_from([1, 1, 2, 3, 7, "auto"]))
def test_any_chunking_and_region_lands_exactly(case, seed, per_task):
    shape, shards, inner, lo, chunks, order, location, prefill = case
    rng = np.random.default_rng(seed)
    store = MemoryStore()
    a, info = make(store, shape, shards, inner, fill=-1.0, dtype="f8", location=location)
    expected = np.full(shape, -1.0)
    if prefill:
        expected = rng.normal(size=shape).round(2)
        expected[rng.random(shape) < 0.3] = -1.0
        a[...] = expected
    new = rng.normal(size=tuple(sum(c) for c in chunks)).round(2)
    new[rng.random(new.shape) < 0.3] = -1.0
    region = tuple(slice(a, a + n) for a, n in zip(lo, new.shape, strict=True))
    expected[region] = new
    with dask.config.set(scheduler="sync"):
        store_dask_array(
            da.from_array(new, chunks=chunks),
            store,
            info,
            offset=lo,
            order=order,
            shards_per_task=per_task,
        ).compute()
    np.testing.assert_array_equal(zarr.open_array(store)[...], expected)


@st.composite
def plan_cases(draw):
    """A shard layout (regular or rectilinear per dimension), a write region in it and
    a dask chunking of the region (zero-size blocks allowed)."""
    ndim = draw(st.integers(1, 3))
    shape, shards, inner = [], [], []
    for _ in range(ndim):
        n = draw(st.integers(1, 30))
        c = draw(st.integers(1, 4))
        if draw(st.booleans()):  # rectilinear: shard sizes multiples of c covering n
            sizes = []
            while sum(sizes) < n:
                sizes.append(c * draw(st.integers(1, 4)))
            shards.append(tuple(sizes))
        else:
            shards.append(c * draw(st.integers(1, 4)))
        shape.append(n)
        inner.append(c)
    lo = [draw(st.integers(0, n)) for n in shape]
    chunks = []
    for a, n in zip(lo, shape, strict=True):
        left, sizes = draw(st.integers(0, n - a)), []
        while left or not sizes:
            sizes.append(draw(st.integers(0, left)))
            left -= sizes[-1]
        chunks.append(tuple(sizes))
    return ShardLayout.build(shape, shards, inner), tuple(lo), tuple(chunks)


def brute_force_plan(layout, lo, chunks):
    """Which blocks touch which shard, found by intersecting every block's box with
    every shard's box."""
    starts = [np.concatenate([[o], o + np.cumsum(c)]) for o, c in zip(lo, chunks, strict=True)]
    region = tuple((int(s[0]), int(s[-1])) for s in starts)
    out = {}
    for shard in layout.all_shards():
        sbox = shard_box(layout, shard)
        touching = []
        for block in np.ndindex(*(len(c) for c in chunks)):
            bbox = tuple((int(s[i]), int(s[i + 1])) for s, i in zip(starts, block, strict=True))
            if all(max(a, c) < min(b, d) for (a, b), (c, d) in zip(sbox, bbox, strict=True)):
                touching.append((block, bbox))
        if touching:
            inside = [
                all(c <= a and b <= d for (a, b), (c, d) in zip(sbox, box, strict=True))
                for box in (region, *(bbox for _, bbox in touching))
            ]
            out[shard] = (tuple(b for b, _ in touching), inside[0], any(inside[1:]))
    return out


def shard_box(layout, shard):
    return tuple(
        (d.shard_start(i), min(d.shard_start(i) + d.shard_size(i), d.extent))
        for d, i in zip(layout.dims, shard, strict=True)
    )


@settings(max_examples=300, deadline=None)
@given(plan_cases())
def test_plan_agrees_with_brute_force_and_with_each_block(case):
    """The per-dimension plan (built without listing shards) finds the same blocks,
    coverage and whole shards as intersecting every block with every shard, and each
    block's own split (made inside its task) agrees with it."""
    layout, lo, chunks = case
    plan = plan_write(layout, chunks, lo)
    expected = brute_force_plan(layout, lo, chunks)
    got = {sw.shard: (sw.blocks, sw.covered, sw.whole) for sw in plan.shard_writes()}
    assert got == expected
    assert plan.nshards == len(expected)
    assert plan.ngathered == sum(not whole for _, _, whole in expected.values())
    gathered_of = plan.gathered_per_block()
    for block in np.ndindex(*plan.numblocks):
        whole, gathered = split_block(layout, plan.block_box(block))
        mine = {s: w for s, (blocks, _, w) in expected.items() if block in blocks}
        assert whole == [s for s, w in mine.items() if w]
        assert sorted(gathered) == sorted(s for s, w in mine.items() if not w)
        assert gathered_of[block] == len(gathered)


def test_batches_group_whole_blocks_into_runs_of_shards():
    layout = ShardLayout.build((100, 40), (10, 20), (5, 10))  # 10 x 2 shards
    # blocks of one shard: runs of 2 shards along the last dimension, then 3 rows
    groups = batch_bounds(layout, ((10,) * 10, (20, 20)), None, 6)
    assert groups == ((0, 3, 6, 9, 10), (0, 2))
    # misaligned blocks of 15 rows: a group ends at the first block boundary after
    # every third shard row
    groups = batch_bounds(layout, ((15,) * 6 + (10,), (40,)), None, 6)
    assert groups == ((0, 2, 4, 6, 7), (0, 1))
    # blocks holding more shards than asked for stay as they are
    assert batch_bounds(layout, ((50, 50), (40,)), None, 4) == ((0, 1, 2), (0, 1))
    # a region starting inside a shard: runs counted from the region's first shard
    assert batch_bounds(layout, ((5,) * 9, (40,)), (5, 0), 4) == ((0, 3, 7, 9), (0, 1))
    assert batch_bounds(layout, ((5,) * 9, (40,)), (5, 0), 2) == ((0, 1, 3, 5, 7, 9), (0, 1))


def test_batched_write_has_a_task_per_group(tmp_path):
    data = np.arange(100 * 40, dtype="f4").reshape(100, 40)
    a, info = make(tmp_path / "a", data.shape, (10, 20), (5, 10))
    store = CountingStore(LocalStore(tmp_path / "a"))
    source = da.from_array(data, chunks=(10, 20)).persist(scheduler="sync")
    delayed = store_dask_array(source, store, info, shards_per_task=6)
    keys = [k for k in dict(delayed.__dask_graph__()) if isinstance(k, tuple)]
    encode = [k for k in keys if k[0].startswith("shardwise-encode-")]
    assert len(encode) == 4  # rows 0-29, 30-59, 60-89, 90-99: both columns each
    assert not any(k[0].startswith("shardwise-shard-") for k in keys)
    with dask.config.set(scheduler="threads"):
        delayed.compute()
    assert set(store.log.per_key("set").values()) == {1} and len(store.log.per_key("set")) == 20
    np.testing.assert_array_equal(a[...], data)


def test_shards_per_task_must_be_a_count():
    info = make(MemoryStore(), (10,), (5,), (5,))[1]
    for bad in (0, -1, 1.5, True, "many"):
        with pytest.raises(ValueError, match="shards_per_task"):
            store_dask_array(da.zeros(10, chunks=5), MemoryStore(), info, shards_per_task=bad)


ENCODE_CHAINS = {
    "zstd": [BytesCodec(), ZstdCodec(level=1)],
    "zstd checksum": [BytesCodec(), ZstdCodec(level=3, checksum=True)],
    "zstd negative level": [BytesCodec(), ZstdCodec(level=-2)],
    "raw": [BytesCodec()],
    "big-endian raw + crc32c": [BytesCodec(endian="big"), zarr.codecs.Crc32cCodec()],
    "zstd + crc32c": [BytesCodec(), ZstdCodec(level=1), zarr.codecs.Crc32cCodec()],
    "transpose + gzip": [
        zarr.codecs.TransposeCodec(order=(1, 0)),
        BytesCodec(),
        zarr.codecs.GzipCodec(level=5),
    ],
}


@pytest.mark.parametrize("name", list(ENCODE_CHAINS))
@pytest.mark.parametrize("values", ["smooth", "random", "fill"])
def test_encode_into_gives_the_bytes_of_encode(name, values):
    """ChunkEncoder.encode_into writes into the caller's memory exactly the bytes encode()
    returns (zstd through libzstd's ZSTD_compress2, the rest through their own step),
    within its bound, and zarr-python decodes them."""
    from zarr.core.dtype import Float32

    from shardwise.codecs import ChunkDecoder, ChunkEncoder

    rng = np.random.default_rng(0)
    arr = {
        "smooth": np.sin(np.arange(96 * 80, dtype="f4") / 50).reshape(96, 80),
        "random": rng.standard_normal((96, 80), dtype="f4"),  # incompressible: zstd's bound
        "fill": np.zeros((96, 80), "f4"),
    }[values]
    codecs = ENCODE_CHAINS[name]
    enc = ChunkEncoder(codecs, (96, 80), Float32(), 0.0)
    assert enc.bound is not None and enc.bound >= arr.nbytes
    out = np.full(enc.bound + 16, 0xAB, dtype=np.uint8)
    n = enc.encode_into(arr, out[: enc.bound])
    assert _sans_mtime(bytes(out[:n])) == _sans_mtime(enc.encode(arr))
    assert (out[enc.bound :] == 0xAB).all()  # nothing written past the bound
    decoded = ChunkDecoder(codecs, (96, 80), Float32(), 0.0).decode(bytes(out[:n]))
    np.testing.assert_array_equal(decoded, arr)
    # a non-contiguous chunk (a view of a larger array) encodes the same
    big = np.zeros((96, 160), "f4")
    big[:, ::2] = arr
    assert enc.encode_into(big[:, ::2], out) == n
    assert _sans_mtime(bytes(out[:n])) == _sans_mtime(enc.encode(arr))


def _sans_mtime(data: bytes) -> bytes:
    """``data`` with a gzip member's MTIME (bytes 4-7) zeroed: numcodecs' GZip writes the
    current second there at its lowest versions, so two encodings a second apart differ
    in it (seen in the lowest-versions run under load)."""
    return data[:4] + bytes(4) + data[8:] if data[:2] == b"\x1f\x8b" else data


def test_chains_without_a_fast_path_have_no_bound():
    from zarr.core.dtype import Float32

    from shardwise.codecs import ChunkEncoder

    enc = ChunkEncoder([BytesCodec(), zarr.codecs.BloscCodec()], (8,), Float32(), 0.0)
    assert enc.bound is None
    with pytest.raises(ValueError, match="no bound"):
        enc.encode_into(np.zeros(8, "f4"), np.empty(100, np.uint8))


@pytest.mark.parametrize("location", ["start", "end"])
def test_shard_builder_matches_assemble_shard(location, monkeypatch):
    """ShardBuilder lays out the same object as assemble_shard: in the thread's reused
    buffer, in memory of its own when that is taken or the shard is too big for it, and
    growing when the chunks outrun the room it was given."""
    import shardwise.format.shard as shard_mod
    from shardwise.format.shard import ShardBuilder

    fmt = IndexFormat((2, 3), location=location)
    order = write_order((2, 3), "morton")
    rng = np.random.default_rng(1)
    chunks = {
        inner: rng.integers(0, 255, int(rng.integers(1, 50)), dtype=np.uint8).tobytes()
        for inner in order
        if inner != (1, 1)  # one empty chunk
    }
    expected = assemble_shard(chunks, fmt, order)
    lent = copies_out(LocalStore("."))  # zarr-python's local store copies the bytes out
    assert lent and not copies_out(MemoryStore())

    def build(capacity):
        builder = ShardBuilder(fmt, capacity)
        for inner in order:
            if inner in chunks:
                builder.add(inner, chunks[inner])
        return builder

    assert build(1000).finish(lend=lent).to_bytes() == expected  # the thread's buffer
    assert build(3).finish(lend=lent).to_bytes() == expected  # grows past its room
    outer = ShardBuilder(fmt, 10)  # holds the thread's buffer: the next gets its own
    inner_built = build(1000)
    assert not inner_built._shared and inner_built.finish(lend=lent).to_bytes() == expected
    outer.finish(lend=lent)
    monkeypatch.setattr(shard_mod, "SCRATCH_LIMIT", 64)
    big = build(1000)
    assert not big._shared and big.finish(lend=lent).to_bytes() == expected
    monkeypatch.undo()
    # a store that may keep the buffer gets bytes of its own: building the next shard
    # in the same thread does not change what it was given
    kept = build(1000).finish(lend=copies_out(MemoryStore()))
    build(1000).finish(lend=lent)
    scratch = shard_mod._SCRATCH.buf
    scratch[:] = 0
    assert kept.to_bytes() == expected
    assert ShardBuilder(fmt, 10).finish(lend=lent) is None  # no chunk: nothing to store
    # a builder abandoned by an error does not keep the buffer from the next
    failed = ShardBuilder(fmt, 10)
    assert failed._shared
    del failed
    assert build(1000)._shared


def test_unsharded_builder_holds_one_chunk():
    from shardwise.format.shard import ShardBuilder

    builder = ShardBuilder(None, 8)
    builder.add((0, 0), b"abc")
    with pytest.raises(ValueError, match="one chunk"):
        builder.add((0, 0), b"d")
    assert builder.finish(lend=copies_out(MemoryStore())).to_bytes() == b"abc"
