"""``shardwise.verify``: every shard's index and checksums, bad keys reported."""

from __future__ import annotations

import numpy as np
import pytest
import zarr
from zarr.codecs import BytesCodec, Crc32cCodec, ShardingCodec, ZstdCodec
from zarr.storage import LocalStore

import shardwise
from shardwise.__main__ import main
from shardwise.testing import CountingStore

# v: (40, 12) float64 in shards of (10, 12) (4 shards) of inner chunks (5, 6) (4 each)


def make(path, *, crc_chunks: bool, index_location: str = "end", group: str = ""):
    root = zarr.open_group(LocalStore(path), mode="a")
    where = root.require_group(group) if group else root
    compressors = [ZstdCodec(), Crc32cCodec()] if crc_chunks else [ZstdCodec()]
    arr = where.create_array(
        "v",
        shape=(40, 12),
        dtype="f8",
        chunks=(5, 6),
        shards=(10, 12),
        compressors=compressors,
        serializer=BytesCodec(),
        dimension_names=["t", "x"],
        fill_value=np.nan,
    )
    values = np.arange(480.0).reshape(40, 12)
    values[30:] = np.nan  # shard 3 holds only fill values: not stored
    arr[...] = values
    return path / group / "v" if group else path / "v"


def flip(file, position):
    raw = bytearray(file.read_bytes())
    raw[position] ^= 0xFF
    file.write_bytes(bytes(raw))


def test_a_good_store(tmp_path):
    make(tmp_path / "s.zarr", crc_chunks=False)
    report = shardwise.verify(tmp_path / "s.zarr")
    assert report.ok and report.bad_keys == [] and report.strays == []
    assert report.arrays == ["v"]
    assert report.shards == 3  # shard 3 was never stored
    assert report.chunks == 0  # no inner checksums: only the indexes are checked
    assert "all good" in str(report)


def test_reads_only_the_indexes_when_inner_chunks_have_no_checksum(tmp_path):
    make(tmp_path / "s.zarr", crc_chunks=False)
    store = CountingStore(LocalStore(tmp_path / "s.zarr", read_only=True))
    report = shardwise.verify(store)
    assert report.ok
    gets = [r for r in store.log.gets() if "/c/" in r.key]  # past the metadata
    assert sorted((r.key, r.byte_range) for r in gets) == [
        (f"v/c/{i}/0", "last 68")
        for i in range(3)  # 4 entries of 16 bytes and a crc32c
    ]


def test_reads_each_shard_once_to_check_inner_checksums(tmp_path):
    make(tmp_path / "s.zarr", crc_chunks=True)
    store = CountingStore(LocalStore(tmp_path / "s.zarr", read_only=True))
    report = shardwise.verify(store)
    assert report.ok and report.shards == 3 and report.chunks == 12
    gets = [r for r in store.log.gets() if "/c/" in r.key]
    assert sorted((r.key, r.byte_range) for r in gets) == [
        (f"v/c/{i}/0", "whole") for i in range(3)
    ]
    shards = [tmp_path / "s.zarr" / "v" / "c" / str(i) / "0" for i in range(3)]
    documents = [tmp_path / "s.zarr" / "zarr.json", tmp_path / "s.zarr" / "v" / "zarr.json"]
    assert report.bytes_read == sum(f.stat().st_size for f in shards + documents)


def test_flipped_byte_in_an_inner_chunk(tmp_path):
    array = make(tmp_path / "s.zarr", crc_chunks=True)
    flip(array / "c" / "1" / "0", 10)  # inside the first inner chunk written
    report = shardwise.verify(tmp_path / "s.zarr")
    assert not report.ok
    assert report.bad_keys == ["v/c/1/0"]
    (problem,) = report.problems
    assert problem.error == "ChecksumError" and problem.array == "v"
    assert problem.chunk is not None
    # the chunk named is the one a read fails on
    with pytest.raises(shardwise.errors.ChecksumError) as info:
        shardwise.ArrayReader.open(tmp_path / "s.zarr", "v")[10:20]
    assert info.value.chunk == problem.chunk
    assert "v/c/1/0 inner chunk" in str(report)


@pytest.mark.parametrize("location", ["start", "end"])
# zarr-python warns about a sharding codec given as the serializer, each time it opens it
@pytest.mark.filterwarnings("ignore::zarr.errors.ZarrUserWarning")
def test_flipped_byte_in_an_index(tmp_path, location):
    root = zarr.open_group(LocalStore(tmp_path / "s.zarr"), mode="w")
    sharding = ShardingCodec(chunk_shape=(5,), index_location=location)
    arr = root.create_array(
        "v", shape=(20,), dtype="i4", chunks=(10,), serializer=sharding, compressors=None
    )
    arr[...] = np.arange(20)
    shard = tmp_path / "s.zarr" / "v" / "c" / "0"
    flip(shard, 3 if location == "start" else shard.stat().st_size - 10)
    report = shardwise.verify(tmp_path / "s.zarr")
    assert [(p.key, p.error) for p in report.problems] == [("v/c/0", "ChecksumError")]


def test_truncated_shard_and_stray_files(tmp_path):
    array = make(tmp_path / "s.zarr", crc_chunks=False)
    shard = array / "c" / "2" / "0"
    shard.write_bytes(shard.read_bytes()[:-30])
    (array / "c" / "0" / "0.partial").write_bytes(b"left over")
    report = shardwise.verify(tmp_path / "s.zarr")
    assert report.bad_keys == ["v/c/2/0"]
    assert report.strays == ["v/c/0/0.partial"]
    assert "not a chunk of its array" in str(report)


def test_decode_catches_damage_no_checksum_covers(tmp_path):
    array = make(tmp_path / "s.zarr", crc_chunks=False)
    flip(array / "c" / "0" / "0", 1)  # the first inner chunk's zstd magic number
    assert shardwise.verify(tmp_path / "s.zarr").ok  # the index is intact
    report = shardwise.verify(tmp_path / "s.zarr", decode=True)
    assert report.bad_keys == ["v/c/0/0"]
    assert report.problems[0].error in ("CorruptShardError", "ChecksumError")
    assert report.chunks == 12


def test_subgroups_and_the_command_line(tmp_path, capsys):
    make(tmp_path / "s.zarr", crc_chunks=True, group="a/b")
    array = tmp_path / "s.zarr" / "a" / "b" / "v"
    assert shardwise.verify(tmp_path / "s.zarr").arrays == ["a/b/v"]
    assert main(["verify", str(tmp_path / "s.zarr")]) == 0
    flip(array / "c" / "0" / "0", 10)
    assert main(["verify", str(tmp_path / "s.zarr"), "--group", "a"]) == 1
    out = capsys.readouterr().out
    assert "a/b/v/c/0/0" in out and "ChecksumError" in out


def test_unsharded_chunks_with_checksums(tmp_path):
    root = zarr.open_group(LocalStore(tmp_path / "s.zarr"), mode="w")
    arr = root.create_array(
        "u", shape=(20,), dtype="i4", chunks=(5,), compressors=[ZstdCodec(), Crc32cCodec()]
    )
    arr[...] = np.arange(1, 21)
    assert shardwise.verify(tmp_path / "s.zarr").chunks == 4
    flip(tmp_path / "s.zarr" / "u" / "c" / "2", 5)
    report = shardwise.verify(tmp_path / "s.zarr")
    assert [(p.key, p.error) for p in report.problems] == [("u/c/2", "ChecksumError")]


@pytest.mark.filterwarnings("ignore:Consolidated metadata:zarr.errors.ZarrUserWarning")
def test_a_zarr_json_that_cannot_be_read_is_a_problem_not_an_exception(tmp_path, capsys):
    """A damaged document is reported with its key (the other arrays are still checked),
    from the documents themselves: consolidated metadata does not hide it."""
    path = tmp_path / "s.zarr"
    make(path, crc_chunks=True)
    make(path, crc_chunks=True, group="g")
    zarr.consolidate_metadata(LocalStore(path))  # a good copy of every document
    doc = path / "v" / "zarr.json"
    doc.write_text(doc.read_text().replace('"shape": [\n    40,', '"shape": [\n    -40,'))
    assert '"shape": [\n    -40,' in doc.read_text()
    report = shardwise.verify(path)
    assert report.bad_keys == ["v/zarr.json"] and report.arrays == ["g/v"]
    (problem,) = report.problems
    assert (problem.array, problem.error) == ("v", "UnsupportedArrayError")
    assert "non-negative" in problem.message  # zarr-python's own words, kept
    assert report.shards == 3  # g/v's, all of them
    assert main(["verify", str(path)]) == 1
    assert "v/zarr.json: UnsupportedArrayError" in capsys.readouterr().out


def test_no_zarr_v3_metadata_here(tmp_path, capsys):
    with pytest.raises(shardwise.errors.NotAZarrStoreError, match="found nothing"):
        shardwise.verify(tmp_path / "nothing.zarr")
    zarr.open_group(LocalStore(tmp_path / "v2.zarr"), mode="w", zarr_format=2)
    with pytest.raises(shardwise.errors.NotAZarrStoreError, match="Zarr v2 metadata"):
        shardwise.verify(tmp_path / "v2.zarr")
    assert main(["verify", str(tmp_path / "v2.zarr")]) == 2
    assert "error: no Zarr v3 group or array here" in capsys.readouterr().err


def test_decode_through_zarr_pythons_pipeline(tmp_path):
    """Codecs shardwise decodes through zarr-python (here numcodecs.zlib) are checked
    too with decode=True (they once failed: zarr-python's sync() inside verify's loop)."""
    import warnings

    import numpy as np
    import zarr
    from zarr.codecs.numcodecs import Zlib

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # numcodecs.* codecs are not in the Zarr v3 spec
        a = zarr.create_array(
            tmp_path / "z.zarr",
            shape=(8, 8),
            shards=(4, 8),
            chunks=(2, 4),
            dtype="f4",
            compressors=[Zlib(level=1)],
        )
        a[...] = np.arange(64, dtype="f4").reshape(8, 8)
        report = shardwise.verify(tmp_path / "z.zarr", decode=True)
    assert report.ok, report
    assert report.chunks == 8


def test_a_shard_shorter_than_its_index(tmp_path):
    """A shard shorter than its index is named as such by verify and by inventory
    (the size the read of its index comes with tells): the one index reader both use."""
    path = make(tmp_path / "s.zarr", crc_chunks=False)
    (path / "c" / "1" / "0").write_bytes(b"short")
    report = shardwise.verify(tmp_path / "s.zarr")
    (problem,) = report.problems
    assert problem.key == "v/c/1/0" and problem.error == "TruncatedShardError"
    assert "shorter than its index" in problem.message
    with pytest.raises(shardwise.errors.TruncatedShardError, match="shorter than its index"):
        shardwise.inventory(tmp_path / "s.zarr")
