"""``shardwise.inventory`` and ``shardwise.info``, checked against what zarr-python (and
zarr-python 2.18, for the 2022 draft) wrote: every present/absent flag and every stored
size against the shard indexes decoded here from the spec, and against the data
(writers leave out the inner chunks that are all fill value); the store requests
counted by a wrapping store and by an S3 endpoint."""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import math
import re
from pathlib import Path

import crc32c
import dask
import numpy as np
import pytest
import zarr
from dask.callbacks import Callback
from hypothesis import given, settings
from hypothesis import strategies as st
from zarr.storage import LocalStore, MemoryStore

import shardwise
from shardwise.errors import ArrayChoiceError, ChecksumError, TruncatedShardError
from shardwise.io.sources import open_source
from shardwise.testing import CountingStore
from shardwise.tools.inventory import summary

LEGACY = Path(__file__).parents[1] / "data" / "legacy"
EMPTY = 2**64 - 1
RECTILINEAR = {"array.rectilinear_chunks": True}


# -- the truth, from the spec -------------------------------------------------------------
def index_entries(raw: bytes, n: int, location: str, checksum: bool = True) -> np.ndarray:
    """The (offset, nbytes) pairs of a shard holding ``n`` inner chunks: ``16 n`` bytes
    of little-endian uint64 pairs (then a crc32c of them), at the start or the end."""
    size = 16 * n + (4 if checksum else 0)
    index = raw[:size] if location == "start" else raw[len(raw) - size :]
    assert len(index) == size
    if checksum:
        assert int.from_bytes(index[-4:], "little") == crc32c.crc32c(index[:-4])
    return np.frombuffer(index[: 16 * n], dtype="<u8").reshape(n, 2)


def truth(get, shape, shards, inner, key, location="end", checksum=True):
    """Stored bytes of every inner chunk holding part of the array (-1 where absent),
    from the shard objects (``get(key)``: bytes or None). ``shards``: per dimension the
    list of shard sizes; ``inner``: the inner chunk shape (None: unsharded)."""
    ndim = len(shape)
    # per dimension: for each shard, its start, size and inner chunks inside the array
    starts = [np.cumsum([0, *s[:-1]]).tolist() for s in shards]
    inner = inner or (None,) * ndim
    counts = [
        [-(-min(size, n - st) // (c or size)) for st, size in zip(sts, ss, strict=True)]
        for sts, ss, n, c in zip(starts, shards, shape, inner, strict=True)
    ]
    grid = tuple(sum(c) for c in counts)
    out = np.full(grid, -1, dtype=np.int64)
    for shard in itertools.product(*(range(len(s)) for s in shards)):
        raw = get(key(shard))
        if raw is None:
            continue
        per = tuple(s[i] // (c or s[i]) for s, i, c in zip(shards, shard, inner, strict=True))
        if inner[0] is None:
            sizes = np.full(per, len(raw), dtype=np.int64)
        else:
            table = index_entries(raw, math.prod(per), location, checksum)
            sizes = np.where(table[:, 0] == EMPTY, -1, table[:, 1].astype(np.int64))
            sizes = sizes.reshape(per)
        first = [sum(c[:i]) for c, i in zip(counts, shard, strict=True)]
        took = [c[i] for c, i in zip(counts, shard, strict=True)]
        out[tuple(slice(f, f + t) for f, t in zip(first, took, strict=True))] = sizes[
            tuple(slice(0, t) for t in took)
        ]
    return out


def nonfill(values, shards, inner, fill):
    """Whether each inner chunk (clipped to the array) holds a value other than ``fill``."""
    edges = []
    for s, n, c in zip(shards, values.shape, inner or (None,) * values.ndim, strict=True):
        e, start = [], 0
        for size in s:
            step = c or size
            e += list(range(start, min(start + size, n), step))
            start += size
        edges.append([*e, n])
    same = (values == fill) | (
        np.isnan(values) & np.isnan(fill) if values.dtype.kind == "f" else False
    )
    out = np.zeros(tuple(len(e) - 1 for e in edges), dtype=bool)
    for idx in np.ndindex(*out.shape):
        sl = tuple(slice(e[i], e[i + 1]) for e, i in zip(edges, idx, strict=True))
        out[idx] = not same[sl].all()
    return out


def regular(shape, shard):
    return [[s] * -(-n // s) for n, s in zip(shape, shard, strict=True)]


def file_getter(root):
    def get(key):
        p = Path(root) / key
        return p.read_bytes() if p.exists() else None

    return get


def default_key(name):
    return lambda shard: f"{name}/c/" + "/".join(map(str, shard))


def sparse_values(shape, inner, rng, fill=0.0, p=0.5):
    """Random values, with each inner chunk (a grid of ``inner``) all ``fill`` with
    probability ``p``."""
    values = rng.integers(1, 50, size=shape).astype("f4")
    grid = [range(-(-n // c)) for n, c in zip(shape, inner, strict=True)]
    for idx in itertools.product(*grid):
        if rng.random() < p:
            values[tuple(slice(i * c, (i + 1) * c) for i, c in zip(idx, inner, strict=True))] = fill
    return values


def data_gets(store):
    """The reads a CountingStore saw, but for those of metadata documents."""
    return [
        r
        for r in store.log.gets()
        if not r.key.endswith(".json") and not r.key.rsplit("/", 1)[-1].startswith(".z")
    ]


def check(ds, expected_sizes, expected_present=None):
    np.testing.assert_array_equal(ds.stored_bytes.values, np.maximum(expected_sizes, 0))
    np.testing.assert_array_equal(ds.present.values, expected_sizes >= 0)
    if expected_present is not None:
        np.testing.assert_array_equal(ds.present.values, expected_present)
    assert ds.attrs["chunks_present"] == int((expected_sizes >= 0).sum())
    assert ds.attrs["chunks_total"] == expected_sizes.size
    assert ds.attrs["stored_bytes"] == int(np.maximum(expected_sizes, 0).sum())


@pytest.fixture(autouse=True)
def _threads():
    with dask.config.set(scheduler="threads"):
        yield


# -- sharded Zarr v3 ----------------------------------------------------------------------
@pytest.mark.parametrize("location", ["end", "start"])
def test_sharded_against_zarr_python(tmp_path, location):
    shape, shard, inner = (37, 26), (12, 10), (4, 5)
    rng = np.random.default_rng(1)
    values = sparse_values(shape, inner, rng)
    values[12:24, 10:20] = 0  # shard (1, 1): absent
    arr = zarr.create_array(
        str(tmp_path),
        name="v",
        shape=shape,
        chunks=inner,
        shards={"shape": shard, "index_location": location},
        dtype="f4",
        fill_value=0,
        dimension_names=["y", "x"],
        config={"write_empty_chunks": False},
    )
    arr[...] = values
    expected = truth(
        file_getter(tmp_path), shape, regular(shape, shard), inner, default_key("v"), location
    )
    present = nonfill(values, regular(shape, shard), inner, np.float32(0))
    assert (expected < 0).any() and (expected >= 0).any()
    assert not (tmp_path / "v/c/1/1").exists()

    store = CountingStore(LocalStore(tmp_path, read_only=True))
    ds = shardwise.inventory(store)
    check(ds, expected, present)
    assert ds.stored_bytes.dims == ("y_chunk", "x_chunk")
    assert ds.stored_bytes.dtype == np.int64 and ds.present.dtype == bool
    np.testing.assert_array_equal(ds.y_start.values, np.arange(0, 37, 4))
    np.testing.assert_array_equal(ds.x_start.values, np.arange(0, 26, 5))
    np.testing.assert_array_equal(ds.y_shard.values, np.arange(10) * 4 // 12)
    np.testing.assert_array_equal(
        ds.shard.values, ds.y_shard.values[:, None] * 3 + ds.x_shard.values
    )

    # requests: one ranged read of each stored shard's index, nothing else
    stored = sorted(
        p.relative_to(tmp_path).as_posix() for p in (tmp_path / "v/c").rglob("*") if p.is_file()
    )
    gets = data_gets(store)
    assert sorted(r.key for r in gets) == stored
    nbytes = 16 * 6 + 4
    assert {r.byte_range for r in gets} == {
        f"last {nbytes}" if location == "end" else f"[0, {nbytes})"
    }
    assert not [r for r in store.log.requests if r.op != "get"]  # no size requests
    a = ds.attrs
    assert a["requests"] == 1 + len(stored)
    assert a["shards_present"] == len(stored) and a["shards_total"] == 4 * 3
    assert a["index_bytes"] == len(stored) * nbytes
    assert a["outside_bytes"] == 0
    assert a["total_bytes"] == a["stored_bytes"] + a["index_bytes"]
    # the wrapper passes its listing on unchanged: the files' sizes, listed below it
    assert a["object_bytes"] == sum((tmp_path / "v/c" / k[4:]).stat().st_size for k in stored)
    assert a["raw_bytes_present"] == a["chunks_present"] * 4 * 5 * 4
    assert a["raw_bytes"] == 37 * 26 * 4
    assert a["compression_ratio"] == pytest.approx(
        a["raw_bytes_present"] / a["stored_bytes"], rel=1e-3
    )
    assert a["overall_ratio"] == pytest.approx(a["raw_bytes"] / a["total_bytes"], rel=1e-3)
    assert a["chunks_absent_fraction"] == pytest.approx(1 - a["chunks_present"] / 60)
    assert a["shard_shape"] == [12, 10] and a["chunk_shape"] == [4, 5] and a["sharded"]
    assert a["index_location"] == location
    assert a["codecs"] == f"sharding_indexed(bytes > zstd; index at {location}: bytes > crc32c)"
    assert a["chunk_codecs"] == ["bytes", "zstd"]
    assert a["format"] == "Zarr v3" and a["array"] == "v" and a["dtype"] == "float32"
    json.dumps(a)  # JSON-ready

    # a plain LocalStore lists with sizes: the same, and the objects' sizes too
    plain = shardwise.inventory(tmp_path)
    check(plain, expected)
    assert plain.attrs["object_bytes"] == sum((tmp_path / k).stat().st_size for k in stored)
    assert plain.attrs["object_bytes"] == plain.attrs["total_bytes"]  # zarr-python leaves no gaps


def test_edge_shards_and_unnamed_dimensions(tmp_path):
    """Shards reaching past the array: the grid holds the inner chunks inside it. An
    array shrunk by zarr-python keeps the inner chunks of its new edge shards that now
    lie wholly past the edge: counted apart, as ``outside_bytes``."""
    shape, shard, inner = (10, 7, 3), (8, 4, 2), (2, 2, 1)
    values = np.arange(math.prod(shape), dtype="i2").reshape(shape) % 7
    for empty in (False, True):
        root = tmp_path / str(empty)
        arr = zarr.create_array(
            str(root),
            name="a/b",
            shape=shape,
            chunks=inner,
            shards=shard,
            dtype="i2",
            fill_value=0,
            config={"write_empty_chunks": empty},
        )
        arr[...] = values
        expected = truth(file_getter(root), shape, regular(shape, shard), inner, default_key("a/b"))
        ds = shardwise.inventory(root, "b", group="a")
        check(ds, expected, None if empty else nonfill(values, regular(shape, shard), inner, 0))
        assert ds.stored_bytes.dims == ("dim_0_chunk", "dim_1_chunk", "dim_2_chunk")
        assert ds.stored_bytes.shape == (5, 4, 3)
        assert ds.attrs["array"] == "a/b"
        assert ds.attrs["outside_bytes"] == 0
        assert ds.attrs["object_bytes"] == ds.attrs["total_bytes"]

    arr.resize((5, 7, 3))  # shard 0 along dim 0 now holds rows 5..7 past the edge
    small = truth(
        file_getter(root), (5, 7, 3), regular((5, 7, 3), shard), inner, default_key("a/b")
    )
    ds = shardwise.inventory(root, "a/b")
    check(ds, small)
    whole = truth(
        file_getter(root), (8, 7, 3), regular((8, 7, 3), shard), inner, default_key("a/b")
    )
    assert ds.attrs["outside_bytes"] == int(whole[3:].clip(0).sum()) > 0
    assert ds.attrs["object_bytes"] == ds.attrs["total_bytes"]
    assert "past the array's edge" in summary(ds)


class UnsizedListing(CountingStore):
    """A counting store whose listing is its own: names only, no sizes."""

    async def list_prefix(self, prefix):
        async for key in self._store.list_prefix(prefix):
            yield key


def test_unsharded_v3_sizes_from_listing_or_one_request_each(tmp_path):
    shape, chunks = (9, 10), (2, 3)
    values = sparse_values(shape, chunks, np.random.default_rng(2))
    arr = zarr.create_array(
        str(tmp_path),
        name="u",
        shape=shape,
        chunks=chunks,
        dtype="f4",
        fill_value=0,
        compressors=None,
        config={"write_empty_chunks": False},
    )
    arr[...] = values
    expected = truth(file_getter(tmp_path), shape, regular(shape, chunks), None, default_key("u"))
    present = nonfill(values, regular(shape, chunks), chunks, np.float32(0))
    ds = shardwise.inventory(tmp_path)
    check(ds, expected, present)
    assert set(np.unique(ds.stored_bytes.values[present])) == {2 * 3 * 4}  # no compressor
    a = ds.attrs
    assert a["requests"] == 1 and not a["sharded"] and a["index_bytes"] == 0
    assert a["shards_present"] == a["chunks_present"] and a["shards_total"] == a["chunks_total"]
    assert a["codecs"] == "bytes" and a["index_location"] is None
    np.testing.assert_array_equal(ds.shard.values.ravel(), np.arange(5 * 4))

    # through a store whose listing has no sizes (a wrapper that lists by itself, so
    # the listing is not made from the files below it): one size request per chunk
    store = UnsizedListing(LocalStore(tmp_path, read_only=True))
    counted = shardwise.inventory(store, "u")
    check(counted, expected)
    sizes = [r for r in store.log.requests if r.op == "size"]
    assert len(sizes) == int(present.sum()) and not data_gets(store)
    assert counted.attrs["requests"] == 1 + len(sizes)


@pytest.mark.parametrize("separator", [".", "/"])
def test_zarr_v2(tmp_path, separator):
    shape, chunks = (11, 7), (3, 2)
    values = sparse_values(shape, chunks, np.random.default_rng(3)).astype("i4")
    arr = zarr.create_array(
        str(tmp_path),
        name="g/w",
        shape=shape,
        chunks=chunks,
        dtype="i4",
        fill_value=0,
        zarr_format=2,
        chunk_key_encoding={"name": "v2", "separator": separator},
        attributes={"_ARRAY_DIMENSIONS": ["lat", "lon"]},
        config={"write_empty_chunks": False},
    )
    arr[...] = values
    key = lambda s: "g/w/" + separator.join(map(str, s))  # noqa: E731
    expected = truth(file_getter(tmp_path), shape, regular(shape, chunks), None, key)
    ds = shardwise.inventory(tmp_path, "g/w")
    check(ds, expected, nonfill(values, regular(shape, chunks), chunks, 0))
    assert ds.stored_bytes.dims == ("lat_chunk", "lon_chunk")
    assert ds.attrs["format"] == "Zarr v2" and ds.attrs["stray_keys"] == 0


@pytest.mark.rectilinear
def test_rectilinear(tmp_path):
    shape, inner = (12, 9), (2, 3)
    shards = [[4, 2, 6], [3, 6]]
    values = sparse_values(shape, inner, np.random.default_rng(4), fill=np.nan)
    values[4:6] = np.nan  # the shards of the second row: absent
    with zarr.config.set(RECTILINEAR):
        arr = zarr.create_array(
            str(tmp_path),
            name="r",
            shape=shape,
            chunks=inner,
            shards=shards,
            dtype="f4",
            fill_value=np.nan,
            config={"write_empty_chunks": False},
        )
        arr[...] = values
    expected = truth(file_getter(tmp_path), shape, shards, inner, default_key("r"))
    ds = shardwise.inventory(tmp_path, "r")
    check(ds, expected, nonfill(values, shards, inner, np.float32("nan")))
    np.testing.assert_array_equal(ds.dim_0_start.values, [0, 2, 4, 6, 8, 10])
    np.testing.assert_array_equal(ds.dim_0_shard.values, [0, 0, 1, 2, 2, 2])
    assert ds.attrs["shard_shape"] == shards
    per = {(0, 0): 2, (0, 1): 4, (1, 0): 1, (1, 1): 2, (2, 0): 3, (2, 1): 6}
    stored = [s for s in per if (tmp_path / "r/c" / f"{s[0]}/{s[1]}").exists()]
    assert ds.attrs["index_bytes"] == sum(16 * per[s] + 4 for s in stored)


# -- the 2022 draft -----------------------------------------------------------------------
def draft_truth(name, path, shape, chunks, per_shard):
    doc_shards = [c * n for c, n in zip(chunks, per_shard, strict=True)]
    key = lambda s: f"data/root/{path}/c" + "/".join(map(str, s))  # noqa: E731
    return truth(
        file_getter(LEGACY / name), shape, regular(shape, doc_shards), chunks, key, "end", False
    )


def test_draft_store():
    store = CountingStore(LocalStore(LEGACY / "sparse", read_only=True))
    ds = shardwise.inventory(store)
    expected = draft_truth("sparse", "v", (8, 8), (2, 2), (2, 2))
    check(ds, expected)
    assert ds.attrs["format"] == "2022 sharding draft"
    assert ds.attrs["codecs"] == "sharding_indexed(bytes > numcodecs.zlib; index at end: bytes)"
    gets = data_gets(store)
    assert sorted(r.key for r in gets) == ["data/root/v/c0/0", "data/root/v/c1/0"]
    assert {r.byte_range for r in gets} == {"last 64"}
    # a chunk deleted from a shard leaves its bytes behind: the objects hold more
    plain = shardwise.inventory(LEGACY / "sparse")
    assert plain.attrs["object_bytes"] > plain.attrs["total_bytes"]
    assert "no index entry points to" in summary(plain)

    both = shardwise.tools.inventory.inventories(LEGACY / "hierarchy")
    assert set(both) == {"surface/counts", "deep/inside/flags"}
    doc = json.loads((LEGACY / "hierarchy/meta/root/surface/counts.array.json").read_text())
    per = doc["storage_transformers"][0]["configuration"]["chunks_per_shard"]
    chunks = doc["chunk_grid"]["chunk_shape"]
    check(
        both["surface/counts"],
        draft_truth("hierarchy", "surface/counts", doc["shape"], chunks, per),
    )
    flags = both["deep/inside/flags"]
    assert not flags.attrs["sharded"]
    files = sorted((LEGACY / "hierarchy/data/root/deep/inside/flags").iterdir())
    np.testing.assert_array_equal(flags.stored_bytes.values, [f.stat().st_size for f in files])


# -- S3 -----------------------------------------------------------------------------------
# (the endpoint ``s3`` and a ``bucket`` per test: fixtures of conftest.py)


@pytest.mark.parametrize("client", ["s3fs", "obstore"])
def test_s3_one_index_read_per_stored_shard(s3, bucket, client, tmp_path):
    shape, shard, inner = (40, 12), (10, 12), (5, 4)
    values = sparse_values(shape, inner, np.random.default_rng(5))
    values[10:20] = 0
    url = f"s3://{bucket}/data.zarr"
    for where, options in ((url, s3.storage_options()), (str(tmp_path), None)):
        arr = zarr.create_array(
            where,
            name="v",
            shape=shape,
            chunks=inner,
            shards=shard,
            dtype="f4",
            fill_value=0,
            dimension_names=["t", "x"],
            config={"write_empty_chunks": False},
            storage_options=options,
        )
        arr[...] = values
    local = shardwise.inventory(tmp_path)
    mark = s3.mark()
    if client == "s3fs":
        ds = shardwise.inventory(url, storage_options=s3.storage_options())
    else:
        ds = shardwise.inventory(s3.obstore(bucket, "data.zarr"))
    np.testing.assert_array_equal(ds.stored_bytes.values, local.stored_bytes.values)
    np.testing.assert_array_equal(ds.present.values, local.present.values)
    assert ds.attrs["object_bytes"] == local.attrs["object_bytes"]  # sizes from the listing

    stored = {f"data.zarr/v/c/{i}/0" for i in (0, 2, 3)}
    gets = [h for h in s3.hits(mark) if h.method == "GET" and "/c/" in h.key]
    assert sorted(h.key for h in gets) == sorted(stored)
    suffixes = [r.suffix for r in s3.recorded(mark) if "/c/" in r.key]
    assert suffixes == [16 * 6 + 4] * 3
    assert not [h for h in s3.hits(mark) if h.method == "HEAD" and "/c/" in h.key]


# -- many shards: dask tasks --------------------------------------------------------------
class Tasks(Callback):
    def __init__(self):
        super().__init__()
        self.keys = []

    def _pretask(self, key, dsk, state):
        self.keys.append(key)


def test_many_shards_in_dask_batches(tmp_path):
    n = 2000
    values = np.arange(4 * n, dtype="u1").reshape(-1, 2) % 5
    values[np.arange(2 * n) % 3 == 0] = 0
    arr = zarr.create_array(
        str(tmp_path),
        name="v",
        shape=(4 * n,),
        chunks=(2,),
        shards=(4,),
        dtype="u1",
        fill_value=0,
        compressors=None,
        config={"write_empty_chunks": False},
    )
    arr[...] = values.ravel()
    expected = truth(
        file_getter(tmp_path), (4 * n,), regular((4 * n,), (4,)), (2,), default_key("v")
    )
    with dask.config.set({"shardwise.inventory-batch": 300}), Tasks() as tasks:
        ds = shardwise.inventory(tmp_path)
    check(ds, expected, (values != 0).any(axis=1))
    batches = [
        k for k in tasks.keys if str(k).startswith("shardwise-inventory-") and "array" not in str(k)
    ]
    stored = int(((expected >= 0).reshape(-1, 2)).any(axis=1).sum())
    assert len(batches) == -(-stored // 300)
    assert ds.attrs["requests"] == 1 + stored

    # one batch: no dask
    with dask.config.set({"shardwise.inventory-batch": n}), Tasks() as tasks:
        again = shardwise.inventory(tmp_path)
    assert not tasks.keys
    check(again, expected)


# -- info, errors, strays -----------------------------------------------------------------
@pytest.fixture
def hierarchy(tmp_path):
    root = zarr.open_group(str(tmp_path), mode="w", attributes={"title": "t"})
    a = root.create_array(
        "surface/temp",
        shape=(6, 8),
        chunks=(2, 4),
        shards=(6, 8),
        dtype="f4",
        fill_value=0,
        dimension_names=["y", "x"],
        config={"write_empty_chunks": False},
    )
    a[:2, :4] = 1.5
    b = root.create_array(
        "counts",
        shape=(5,),
        chunks=(2,),
        dtype="i2",
        fill_value=0,
        compressors=None,
        config={"write_empty_chunks": False},
    )
    b[:] = [1, 2, 0, 0, 5]
    return tmp_path


def test_info_text_and_dict(hierarchy):
    info = shardwise.info(hierarchy)
    d = info.to_dict()
    assert json.loads(json.dumps(d)) == d
    assert d["format"] == "Zarr v3" and d["groups"] == ["", "surface"]
    by = {a["path"]: a for a in d["arrays"]}
    assert set(by) == {"surface/temp", "counts"}
    temp = by["surface/temp"]
    ds = shardwise.inventory(hierarchy, "surface/temp")
    assert temp == {
        "path": "surface/temp",
        "shape": [6, 8],
        "dtype": "float32",
        "dimension_names": ["y", "x"],
        "shard_shape": [6, 8],
        "chunk_shape": [2, 4],
        "codecs": "sharding_indexed(bytes > zstd; index at end: bytes > crc32c)",
        "raw_bytes": 6 * 8 * 4,
        "stored_bytes": ds.attrs["total_bytes"],
        "ratio": ds.attrs["overall_ratio"],
        "shards_present": 1,
        "shards_total": 1,
        "chunks_present": 1,
        "chunks_total": 6,
        "error": None,
    }
    counts = by["counts"]
    assert counts["shard_shape"] is None and counts["chunk_shape"] == [2]
    assert (counts["chunks_present"], counts["chunks_total"], counts["stored_bytes"]) == (2, 3, 8)
    assert d["stored_bytes"] == temp["stored_bytes"] + 8
    assert d["raw_bytes"] == 6 * 8 * 4 + 5 * 2

    text = str(info).replace(str(hierarchy), "ROOT")
    stored = ds.attrs["total_bytes"]
    ratio = f"{ds.attrs['overall_ratio']:.2f}x"
    total = f"{(6 * 8 * 4 + 10) / (stored + 8):.2f}x"
    assert text.splitlines()[:6] == [
        "store    file://ROOT",
        "format   Zarr v3",
        "group    /",
        "groups   2: /, surface",
        "arrays   2",
        f"bytes    {stored + 8} B stored for 202 B raw: {total}",
    ]
    assert "\n".join(text.splitlines()[6:]) == (
        "\n".join(
            [
                "",
                "counts  int16 (5)",
                "  codecs   bytes",
                "  chunks   (2) (unsharded)",
                "  stored   2 of 3 chunks (33.3% absent)",
                "  bytes    8 B stored for 10 B raw: 1.25x",
                "",
                "surface/temp  float32 (y: 6, x: 8)",
                "  codecs   sharding_indexed(bytes > zstd; index at end: bytes > crc32c)",
                "  shards   (6, 8) of inner chunks (2, 4)",
                "  stored   1 of 1 shards, 1 of 6 inner chunks (83.3% absent)",
                f"  bytes    {stored} B stored for 192 B raw: {ratio}",
            ]
        )
    )
    # metadata only
    quick = shardwise.info(hierarchy, scan=False).to_dict()
    assert all(a["stored_bytes"] is None for a in quick["arrays"]) and quick["stored_bytes"] is None
    assert "\n  bytes " not in str(shardwise.info(hierarchy, scan=False))


def test_choosing_the_array(hierarchy):
    with pytest.raises(ArrayChoiceError, match="say which array") as e:
        shardwise.inventory(hierarchy)
    assert "counts" in str(e.value) and "surface/temp" in str(e.value)
    assert isinstance(e.value, ValueError)
    with pytest.raises(ArrayChoiceError, match="no such array"):
        shardwise.inventory(hierarchy, "nope")
    ds = shardwise.inventory(hierarchy, "temp", group="surface")  # the group's only array
    assert ds.attrs["array"] == "surface/temp"
    assert shardwise.inventory(hierarchy, group="surface").identical(ds)


def test_damaged_index_and_strays(tmp_path):
    arr = zarr.create_array(
        str(tmp_path),
        name="v",
        shape=(8,),
        chunks=(2,),
        shards=(4,),
        dtype="f8",
        fill_value=0,
    )
    arr[...] = np.arange(1, 9)
    (tmp_path / "v/c/0.tmp").write_bytes(b"left over")
    ds = shardwise.inventory(tmp_path)
    assert ds.attrs["stray_keys"] == 1 and ds.attrs["shards_present"] == 2
    assert "strays   1 keys" in summary(ds)

    shard = tmp_path / "v/c/1"
    raw = bytearray(shard.read_bytes())
    raw[-10] ^= 0xFF
    shard.write_bytes(bytes(raw))
    with pytest.raises(ChecksumError) as e:
        shardwise.inventory(tmp_path)
    assert e.value.key == "v/c/1"
    info = shardwise.info(tmp_path)
    assert info.arrays[0].error.startswith("ChecksumError")
    assert "error    ChecksumError" in str(info)

    shard.write_bytes(b"short")  # shorter than its index: no request needed to tell
    with pytest.raises(TruncatedShardError):
        shardwise.inventory(tmp_path)


def test_keys_of_every_encoding():
    def info_of(**kwargs):
        store = MemoryStore()
        zarr.create_array(store, name="a", shape=(30, 30), chunks=(3, 3), dtype="i1", **kwargs)
        return open_source(store).arrays["a"]

    v3 = info_of()
    assert v3.coords("a/c/1/9") == (1, 9)
    assert v3.coords("a/c/1/10") is None  # past the grid
    assert v3.coords("a/c/1/9.partial") is None
    assert v3.coords("a/c/01/9") is None
    assert v3.coords("a/zarr.json") is None
    dotted = info_of(chunk_key_encoding={"name": "default", "separator": "."})
    assert dotted.coords("a/c.2.3") == (2, 3)
    assert dotted.coords("a/c/2/3") is None


# -- property: random patterns --------------------------------------------------------------
@settings(max_examples=25, deadline=None)
@given(
    data=st.data(),
    ndim=st.integers(1, 3),
    location=st.sampled_from(["start", "end"]),
)
def test_random_patterns(data, ndim, location):
    inner = tuple(data.draw(st.integers(1, 3)) for _ in range(ndim))
    per = tuple(data.draw(st.integers(1, 3)) for _ in range(ndim))
    shard = tuple(c * n for c, n in zip(inner, per, strict=True))
    shape = tuple(data.draw(st.integers(1, 3 * s)) for s in shard)
    grid = tuple(-(-n // c) for n, c in zip(shape, inner, strict=True))
    mask = np.array(
        data.draw(st.lists(st.booleans(), min_size=math.prod(grid), max_size=math.prod(grid))),
        dtype=bool,
    ).reshape(grid)
    values = np.zeros(shape, dtype="u2")
    for idx in zip(*np.nonzero(mask), strict=True):
        sl = tuple(slice(int(i) * c, (int(i) + 1) * c) for i, c in zip(idx, inner, strict=True))
        values[sl] = 7
    store = MemoryStore()
    arr = zarr.create_array(
        store,
        name="p",
        shape=shape,
        chunks=inner,
        shards={"shape": shard, "index_location": location},
        dtype="u2",
        fill_value=0,
        config={"write_empty_chunks": False},
    )
    arr[...] = values

    def get(key):
        buf = store._store_dict.get(key)
        return None if buf is None else buf.to_bytes()

    expected = truth(get, shape, regular(shape, shard), inner, default_key("p"), location)
    counting = CountingStore(store)
    ds = shardwise.inventory(counting)
    check(ds, expected, mask)
    shards_stored = sum(1 for k in store._store_dict if k.startswith("p/c/"))
    assert len(data_gets(counting)) == shards_stored == ds.attrs["shards_present"]


def test_arrays_shardwise_cannot_read(tmp_path):
    root = zarr.open_group(str(tmp_path), mode="w", zarr_format=2)
    root.create_array("names", shape=(2,), dtype=str)
    root.create_array("n", shape=(4,), chunks=(2,), dtype="i4", fill_value=0)[:] = [0, 0, 1, 2]
    info = shardwise.info(tmp_path)
    assert [a.path for a in info.arrays] == ["n"]
    assert [p for p, _ in info.unreadable] == ["names"]
    assert info.to_dict()["unreadable"][0]["error"].startswith("UnsupportedArrayError")
    text = str(info)
    assert "arrays   1 (and 1 shardwise cannot read)" in text
    assert "names  (cannot be read by shardwise)" in text
    with pytest.raises(shardwise.errors.UnsupportedArrayError):
        shardwise.inventory(tmp_path, "names")
    assert set(shardwise.tools.inventory.inventories(tmp_path)) == {"n"}
    assert shardwise.inventory(tmp_path, "n").attrs["chunks_present"] == 1


# -- the user guide -----------------------------------------------------------------------
def test_docs_show_real_output(tmp_path, monkeypatch):
    """Each python block of docs/inventory.md followed by a text block prints that text
    (the blocks run in order, in one namespace, in an empty directory)."""
    doc = (Path(__file__).parents[2] / "docs" / "inventory.md").read_text()
    blocks = list(re.finditer(r"```(\w*)\n(.*?)```\n", doc, re.S))
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    checked = 0
    for block, after in itertools.pairwise(blocks):
        if block[1] == "python" and after[1] == "text" and after.start() - block.end() < 3:
            printed = io.StringIO()
            with contextlib.redirect_stdout(printed):
                exec(block[2], namespace)
            assert printed.getvalue() == after[2]
            checked += 1
    assert checked == 6


def test_zero_dimensional_and_empty_arrays(tmp_path):
    scalar = zarr.create_array(str(tmp_path), name="s", shape=(), dtype="f8", fill_value=0)
    scalar[()] = 3.0
    zarr.create_array(str(tmp_path), name="z", shape=(), dtype="f8", fill_value=0)
    zarr.create_array(
        str(tmp_path), name="e", shape=(0, 5), chunks=(2, 2), shards=(4, 4), dtype="f8"
    )
    s = shardwise.inventory(tmp_path, "s")
    assert s.stored_bytes.dims == () and bool(s.present)
    assert int(s.stored_bytes) == (tmp_path / "s/c").stat().st_size
    assert shardwise.inventory(tmp_path, "z").attrs["chunks_present"] == 0
    e = shardwise.inventory(tmp_path, "e")
    assert e.stored_bytes.shape == (0, 3)
    assert e.attrs["chunks_total"] == 0 and e.attrs["compression_ratio"] is None
    assert "0 of 0 stored (- absent)" in summary(e)
    with dask.config.set({"shardwise.inventory-concurrency": 0}), pytest.raises(ValueError):
        shardwise.inventory(tmp_path, "s")
