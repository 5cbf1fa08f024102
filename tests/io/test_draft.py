"""Stores of the 2022 sharding draft (issue 13): read with shardwise, checked against
values zarr-python 2.18 wrote (``tests/data/legacy``, made by ``make_legacy.py``) and
against an independent writer of the draft's binary format written here from the spec."""

from __future__ import annotations

import json
from pathlib import Path

import numcodecs
import numpy as np
import pytest
import xarray as xr
import zarr
from hypothesis import given, settings
from hypothesis import strategies as st
from zarr.storage import LocalStore, MemoryStore

import shardwise
from shardwise.errors import UnsupportedArrayError, UnsupportedCodecError
from shardwise.testing import CountingStore

LEGACY = Path(__file__).parents[1] / "data" / "legacy"
EXPECTED = dict(np.load(LEGACY / "expected.npz"))
EMPTY = 2**64 - 1


def masked(values, fill):
    """What xarray shows for a Zarr v2-era array: the fill value is the missing mark."""
    out = values.astype("f8" if values.dtype.itemsize > 4 else "f4")
    out[values == fill] = np.nan
    return out


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_array_reader_reads_what_zarr_2_18_wrote(name):
    store, _, path = name.partition("/")
    reader = shardwise.ArrayReader.open(LEGACY / store, path)
    np.testing.assert_array_equal(reader[...], EXPECTED[name])
    np.testing.assert_array_equal(reader[1:4, ...], EXPECTED[name][1:4, ...])


def test_engine_opens_a_draft_store():
    ds = xr.open_dataset(LEGACY / "compressors", engine="shardwise", chunks={})
    assert sorted(ds.data_vars) == ["blosc", "gzip", "none", "zlib", "zstd"]
    for name, var in ds.data_vars.items():
        assert var.dims == ("y", "x")
        assert var.chunks == ((8, 5), (6, 4))  # dask chunks = shards (2 x 2 chunks of 4 x 3)
        assert var.encoding["chunks"] == (4, 3)
        np.testing.assert_array_equal(var.values, EXPECTED[f"compressors/{name}"])


def test_groups_implicit_groups_f_layout_and_fill_values():
    tree = xr.open_datatree(LEGACY / "hierarchy", engine="shardwise")
    assert tree.attrs == {"title": "legacy draft"}
    assert set(tree.children) == {"deep", "surface"}
    assert set(tree["deep"].children) == {"inside"}  # implicit groups: no documents
    counts = tree["surface"].to_dataset().counts
    assert tree["surface"].attrs == {"level": 0}
    assert counts.dims == ("t", "y", "x") and counts.attrs == {"units": "1"}
    np.testing.assert_array_equal(counts.values, masked(EXPECTED["hierarchy/surface/counts"], -1))
    flags = xr.open_dataset(LEGACY / "hierarchy", engine="shardwise", group="deep/inside").flags
    np.testing.assert_array_equal(flags.values, EXPECTED["hierarchy/deep/inside/flags"])


def test_missing_and_rewritten_chunks_and_one_index_read_per_shard():
    store = CountingStore(LocalStore(LEGACY / "sparse", read_only=True))
    ds = shardwise.open_dataset(store, chunks="inner")
    assert ds.v.chunks == ((2,) * 4, (2,) * 4)
    np.testing.assert_array_equal(ds.v.values, masked(EXPECTED["sparse/v"], -9.0))
    shard_reads = [r for r in store.log.gets() if r.key.startswith("data/")]
    index_reads = [r.key for r in shard_reads if r.byte_range == "last 64"]  # 4 x 16 B
    assert sorted(index_reads) == [f"data/root/v/c{i}/{j}" for i in (0, 1) for j in (0, 1)]
    # the missing shards cost their index request only; the others, ranges of chunks
    others = {r.key for r in shard_reads if r.byte_range != "last 64"}
    assert others == {"data/root/v/c0/0", "data/root/v/c1/0"}


# -- an independent writer of the draft format, from the spec ------------------------------
def write_draft(store, path, values, chunks, per_shard, *, compressor, order, fill, rng):
    """Write ``values`` as a draft sharded array: chunks in a random order inside each
    shard with random unused bytes between them, an index of (offset, nbytes) uint64
    pairs in C order at the end, empty pairs for chunks equal to the fill value."""
    from zarr.core.buffer import default_buffer_prototype
    from zarr.core.sync import sync

    def put(key, data):
        sync(store.set(key, default_buffer_prototype().buffer.from_bytes(bytes(data))))

    put(
        "zarr.json",
        json.dumps(
            {
                "zarr_format": "https://purl.org/zarr/spec/protocol/core/3.0",
                "metadata_encoding": "https://purl.org/zarr/spec/protocol/core/3.0",
                "metadata_key_suffix": ".json",
                "extensions": [],
            }
        ).encode(),
    )
    doc = {
        "shape": list(values.shape),
        "data_type": values.dtype.str,
        "chunk_grid": {"type": "regular", "chunk_shape": list(chunks), "separator": "/"},
        "chunk_memory_layout": order,
        "fill_value": fill,
        "extensions": [],
        "attributes": {"_ARRAY_DIMENSIONS": [f"d{i}" for i in range(values.ndim)]},
        "storage_transformers": [
            {
                "extension": "https://purl.org/zarr/spec/storage_transformers/sharding/1.0",
                "type": "indexed",
                "configuration": {"chunks_per_shard": list(per_shard)},
            }
        ],
    }
    if compressor is not None:
        doc["compressor"] = {
            "codec": f"https://purl.org/zarr/spec/codec/{compressor.codec_id}/1.0",
            "configuration": {k: v for k, v in compressor.get_config().items() if k != "id"},
        }
    put(f"meta/root/{path}.array.json", json.dumps(doc).encode())
    outer = [c * n for c, n in zip(chunks, per_shard, strict=True)]
    nshards = [-(-s // o) for s, o in zip(values.shape, outer, strict=True)]
    for shard in np.ndindex(*nshards):
        pieces, table = [], np.full((*per_shard, 2), EMPTY, dtype="<u8")
        local = list(np.ndindex(*per_shard))
        rng.shuffle(local)
        offset = 0
        for inner in local:
            start = [
                (s * n + i) * c for s, n, i, c in zip(shard, per_shard, inner, chunks, strict=True)
            ]
            block = np.full(chunks, fill, dtype=values.dtype)
            part = values[tuple(slice(a, a + c) for a, c in zip(start, chunks, strict=True))]
            if part.size == 0 or (part == fill).all():
                continue
            block[tuple(slice(0, n) for n in part.shape)] = part
            raw = np.asarray(block, order=order).tobytes(order=order)
            data = raw if compressor is None else compressor.encode(raw)
            gap = bytes(int(rng.integers(0, 4)))
            pieces += [gap, data]
            offset += len(gap)
            table[inner] = (offset, len(data))
            offset += len(data)
        if not pieces:
            continue
        key = f"data/root/{path}/c" + "/".join(map(str, shard))
        put(key, b"".join(pieces) + table.tobytes(order="C"))


@st.composite
def draft_cases(draw):
    ndim = draw(st.integers(1, 3))
    shape = tuple(draw(st.integers(1, 9)) for _ in range(ndim))
    chunks = tuple(draw(st.integers(1, 4)) for _ in range(ndim))
    per_shard = tuple(draw(st.integers(1, 3)) for _ in range(ndim))
    dtype = draw(st.sampled_from(["<i4", ">i2", "<f8", "|u1"]))
    compressor = draw(st.sampled_from([None, "zstd", "zlib", "gzip", "blosc"]))
    order = draw(st.sampled_from(["C", "F"]))
    return shape, chunks, per_shard, dtype, compressor, order


COMPRESSORS = {
    None: None,
    "zstd": numcodecs.Zstd(level=1),
    "zlib": numcodecs.Zlib(level=1),
    "gzip": numcodecs.GZip(level=1),
    "blosc": numcodecs.Blosc(cname="zstd", clevel=1, shuffle=numcodecs.Blosc.BITSHUFFLE),
}


@settings(max_examples=40, deadline=None)
@given(draft_cases(), st.integers(0, 2**31))
def test_any_draft_array_reads_back(case, seed):
    shape, chunks, per_shard, dtype, compressor, order = case
    rng = np.random.default_rng(seed)
    values = rng.integers(0, 5, size=shape).astype(dtype)  # many chunks all fill (0)
    store = MemoryStore()
    write_draft(
        store,
        "a/b",
        values,
        chunks,
        per_shard,
        compressor=COMPRESSORS[compressor],
        order=order,
        fill=0,
        rng=rng,
    )
    reader = shardwise.ArrayReader.open(store, "a/b")
    np.testing.assert_array_equal(reader[...], values)


def test_names_the_spec_allows_read_back():
    """Spaces, Unicode, a leading ``__`` and periods among other characters are node
    names (issue 27: only names that could reach outside the root are refused)."""
    from shardwise.io.sources import open_source

    store = MemoryStore()
    values = np.arange(6, dtype="<i2").reshape(2, 3)
    names = ["é t/__x", "a..b", "g/.hidden", "..a"]
    for path in names:
        write_draft(
            store,
            path,
            values,
            (1, 3),
            (2, 1),
            compressor=None,
            order="C",
            fill=0,
            rng=np.random.default_rng(1),
        )
    assert set(open_source(store).arrays) == set(names)
    for path in names:
        np.testing.assert_array_equal(shardwise.ArrayReader.open(store, path)[...], values)


# -- refusals --------------------------------------------------------------------------------
def _copy(tmp_path, store):
    import shutil

    shutil.copytree(LEGACY / store, tmp_path / store)
    return tmp_path / store


def test_unknown_compressor_and_transformer_are_refused(tmp_path):
    path = _copy(tmp_path, "compressors")
    doc_path = path / "meta/root/zstd.array.json"
    doc = json.loads(doc_path.read_text())
    doc["compressor"] = {
        "codec": "https://purl.org/zarr/spec/codec/frobnicate/1.0",
        "configuration": {},
    }
    doc_path.write_text(json.dumps(doc))
    with pytest.raises(UnsupportedCodecError, match="compressor") as err:
        shardwise.ArrayReader.open(path, "zstd")
    assert err.value.key == "meta/root/zstd.array.json" and err.value.array == "zstd"
    doc["compressor"] = None
    doc["storage_transformers"][0]["type"] = "hashed"
    doc_path.write_text(json.dumps(doc))
    with pytest.raises(UnsupportedCodecError, match="storage transformer"):
        shardwise.ArrayReader.open(path, "zstd")


def test_damaged_array_document(tmp_path):
    path = _copy(tmp_path, "sparse")
    (path / "meta/root/v.array.json").write_text('{"shape": [8, 8]}')
    with pytest.raises(UnsupportedArrayError, match="2022 draft") as err:
        shardwise.ArrayReader.open(path, "v")
    assert err.value.key == "meta/root/v.array.json"


# -- verify ------------------------------------------------------------------------------------
@pytest.mark.parametrize("store", ["compressors", "hierarchy", "sparse"])
def test_verify_checks_draft_stores(store):
    report = shardwise.verify(LEGACY / store, decode=True)
    assert report.ok, report
    expected = {name.partition("/")[2] for name in EXPECTED if name.startswith(f"{store}/")}
    assert set(report.arrays) == expected
    assert report.chunks > 0


def test_verify_finds_damage_in_a_draft_store(tmp_path):
    """No checksums: a damaged index is found from the index alone, damaged chunk bytes
    only by decoding them."""
    path = _copy(tmp_path, "compressors")
    shard = path / "data/root/zstd/c0/0"
    raw = bytearray(shard.read_bytes())
    raw[3] ^= 0xFF  # inside the first chunk's zstd frame
    shard.write_bytes(bytes(raw))
    assert shardwise.verify(path).ok  # the index is fine
    report = shardwise.verify(path, decode=True)
    assert [p.key for p in report.problems] == ["data/root/zstd/c0/0"]
    assert report.damaged_shards("zstd") == [(0, 0)] and report.damaged_shards("gzip") == []
    other = path / "data/root/gzip/c1/1"
    other.write_bytes(other.read_bytes()[:-10])  # the index cut short
    bad = shardwise.verify(path)
    assert "data/root/gzip/c1/1" in bad.bad_keys


def _edit_index(path, key, n, edit):
    raw = bytearray((path / key).read_bytes())
    table = np.frombuffer(bytes(raw[-16 * n :]), "<u8").reshape(n, 2).copy()
    edit(table)
    raw[-16 * n :] = table.tobytes()
    (path / key).write_bytes(bytes(raw))


@pytest.mark.parametrize(
    ("edit", "error", "chunk"),
    [
        # an entry reaching past the end of the object (index rows: chunks in C order)
        (lambda t: t.__setitem__((0, 1), 10_000), "TruncatedShardError", (0, 0)),
        # an entry overlapping the index
        (lambda t: t.__setitem__((1, 0), 40), "CorruptShardError", (0, 1)),
        # an uncompressed chunk of the wrong size (4 x 3 float32 is 48 bytes)
        (lambda t: t.__setitem__((2, 1), 20), "CorruptShardError", (1, 0)),
    ],
    ids=["outside", "overlaps-index", "wrong-size"],
)
def test_bad_index_entries_are_errors_naming_array_key_and_chunk(tmp_path, edit, error, chunk):
    path = _copy(tmp_path, "compressors")
    _edit_index(path, "data/root/none/c0/0", 4, edit)
    with pytest.raises(shardwise.errors.CorruptShardError) as err:
        shardwise.ArrayReader.open(path, "none")[...]
    assert type(err.value).__name__ == error
    assert err.value.array == "none" and err.value.key == "data/root/none/c0/0"
    assert err.value.chunk == chunk
    report = shardwise.verify(path, decode=True)
    assert report.bad_keys == ["data/root/none/c0/0"]


# -- the one opener: store, path and format ---------------------------------------------------
def test_open_store_tells_the_formats_apart(tmp_path):
    from shardwise.io.opener import DRAFT, V2, V3, open_store

    draft = open_store(LEGACY / "hierarchy")
    assert (draft.format, draft.document, draft.root, draft.prefix) == (DRAFT, "zarr.json", "", "")
    assert open_store(LEGACY / "hierarchy", group="surface").format == DRAFT  # the whole store

    zarr.create_group(tmp_path / "v3.zarr").create_group("g")
    assert open_store(tmp_path / "v3.zarr").format == V3
    found = open_store(tmp_path / "v3.zarr", group="/g/")
    assert (found.format, found.document, found.path) == (V3, "zarr.json", "g")
    assert open_store(tmp_path / "v3.zarr", group="nothing").format is None

    zarr.create_array(tmp_path / "v2.zarr", shape=(2,), dtype="i1", zarr_format=2)
    found = open_store(tmp_path / "v2.zarr")
    assert (found.format, found.document) == (V2, ".zarray")
    assert open_store(tmp_path / "absent.zarr") is None


def test_opening_a_draft_store_reads_one_document():
    from shardwise.io.draft import DraftStore

    store = CountingStore(LocalStore(LEGACY / "hierarchy", read_only=True))
    draft = DraftStore.open(store)
    assert draft is not None and draft.prefix == ""
    assert [(r.op, r.key) for r in store.log.requests] == [("get", "zarr.json")]
    assert DraftStore.open(zarr.storage.MemoryStore()) is None


def test_a_draft_store_walked_once_opened_is_what_open_source_walks():
    """``migrate`` opens the draft store itself and walks it with ``draft_source``: the
    same hierarchy as ``open_source``, breadth first, with no second open."""
    from shardwise.io.draft import DraftStore
    from shardwise.io.sources import draft_source, open_source

    for group in ("", "surface"):
        store = CountingStore(LocalStore(LEGACY / "hierarchy", read_only=True))
        draft = DraftStore.open(store)
        store.log.clear()
        walked = draft_source(draft, group)
        assert ("get", "zarr.json") not in [(r.op, r.key) for r in store.log.requests]
        opened = open_source(LEGACY / "hierarchy", group)
        assert (walked.kind, walked.base, list(walked.groups), list(walked.arrays)) == (
            opened.kind,
            opened.base,
            list(opened.groups),
            list(opened.arrays),
        )
    assert list(draft_source(draft).groups) == ["", "deep", "surface", "deep/inside"]


def test_asking_whether_a_v2_store_is_a_draft_store_costs_one_read(tmp_path):
    """DraftStore.open (tried by the reader and the engine on stores zarr-python does not
    open) reads the root document and asks nothing else: no existence checks for
    Zarr v2 documents it does not use."""
    calls = []

    class Logged(LocalStore):
        async def exists(self, key):
            calls.append(("exists", key))
            return await super().exists(key)

        async def get(self, key, *args, **kwargs):
            calls.append(("get", key))
            return await super().get(key, *args, **kwargs)

    from shardwise.io.draft import DraftStore

    group = zarr.open_group(tmp_path / "v2.zarr", mode="w", zarr_format=2)
    group.create_array("a", shape=(4,), chunks=(2,), dtype="i4")
    assert DraftStore.open(Logged(tmp_path / "v2.zarr", read_only=True)) is None
    assert calls == [("get", "zarr.json")]
    calls.clear()
    assert DraftStore.open(Logged(tmp_path / "v2.zarr/a", read_only=True)) is None
    assert calls == [("get", "zarr.json")]
