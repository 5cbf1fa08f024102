from __future__ import annotations

import numpy as np
import pytest
import zarr

from shardwise.errors import ChecksumError, CorruptShardError, TruncatedShardError
from shardwise.format.index import EMPTY, MAX_OBJECT, IndexFormat, check_entries


def table(cps, entries):
    t = np.full((*cps, 2), EMPTY, dtype=np.uint64)
    for idx, (o, n) in entries.items():
        t[idx] = (o, n)
    return t


@pytest.mark.parametrize("endian", ["little", "big"])
@pytest.mark.parametrize("checksum", [True, False])
def test_round_trip(endian, checksum):
    fmt = IndexFormat((2, 3), "end", endian, checksum)
    t = table((2, 3), {(0, 0): (0, 10), (1, 2): (10, 5)})
    raw = fmt.encode(t)
    assert len(raw) == fmt.nbytes == 16 * 6 + 4 * checksum
    np.testing.assert_array_equal(fmt.decode(raw), t)


def test_spec_example_size():
    # the spec: shard [64, 64], inner [32, 32], bytes + crc32c -> 68 bytes
    assert IndexFormat((2, 2)).nbytes == 68


def test_matches_zarr_python(tmp_path):
    """The index zarr-python writes decodes to entries that cut out its inner chunks."""
    a = zarr.create_array(
        tmp_path / "a", shape=(8, 8), chunks=(4, 4), shards=(8, 8), dtype="u1", compressors=None
    )
    a[:] = np.arange(64, dtype="u1").reshape(8, 8)
    shard = (tmp_path / "a" / "c" / "0" / "0").read_bytes()
    fmt = IndexFormat((2, 2))
    t = fmt.decode(fmt.split(shard))
    check_entries(t, data_start=0, data_stop=len(shard) - fmt.nbytes)
    o, n = (int(v) for v in t[1, 0])
    np.testing.assert_array_equal(np.frombuffer(shard[o : o + n], "u1").reshape(4, 4), a[4:8, 0:4])


def test_crc_mismatch():
    fmt = IndexFormat((2,))
    raw = bytearray(fmt.encode(table((2,), {(0,): (0, 4)})))
    raw[3] ^= 0xFF
    with pytest.raises(ChecksumError, match=r"crc32c mismatch.*store key 'c/0'"):
        fmt.decode(bytes(raw), array="v", key="c/0")


def test_wrong_size():
    fmt = IndexFormat((2,))
    with pytest.raises(TruncatedShardError, match="expected 36 bytes; found 10 bytes"):
        fmt.decode(b"\0" * 10, key="c/1")


@pytest.mark.parametrize(
    ("entries", "stop", "error", "message", "chunk"),
    [
        ({(1,): (EMPTY, 3)}, None, CorruptShardError, "half-empty", (1,)),
        ({(0,): (0, 8), (2,): (90, 20)}, 100, TruncatedShardError, "outside the shard", (2,)),
        ({(0,): (0, 8), (1,): (4, 8)}, None, CorruptShardError, "overlap", (1,)),
        ({(0,): (2**64 - 10, 20)}, None, CorruptShardError, "overflows", (0,)),
    ],
)
def test_bad_entries(entries, stop, error, message, chunk):
    t = table((3,), entries)
    with pytest.raises(error, match=message) as info:
        check_entries(t, data_start=0, data_stop=stop, array="v", key="c/0")
    assert info.value.chunk == chunk
    assert info.value.key == "c/0"


def test_entry_inside_start_index():
    fmt = IndexFormat((2,), "start")
    start, stop = fmt.data_bounds(100)
    assert (start, stop) == (36, 100)
    with pytest.raises(CorruptShardError, match="overlaps the shard index"):
        check_entries(table((2,), {(0,): (10, 4)}), data_start=start, data_stop=stop)


def test_identical_entries_are_allowed():
    # a writer may store one copy of identical inner chunks
    check_entries(
        table((3,), {(0,): (0, 8), (1,): (0, 8), (2,): (8, 2)}), data_start=0, data_stop=10
    )


def test_invalid_format():
    with pytest.raises(ValueError, match="index_location"):
        IndexFormat((2,), "middle")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="shape"):
        IndexFormat((2,)).encode(np.zeros((3, 2), dtype=np.uint64))


@pytest.mark.parametrize(
    ("entry", "error", "message"),
    [
        ((2**64 - 2, 1), TruncatedShardError, "past the end of any shard object"),
        ((MAX_OBJECT - 99, 100), TruncatedShardError, "past the end of any shard object"),
        ((8, 4097), CorruptShardError, "larger than its codecs make one"),
        ((2**64 - 10, 20), CorruptShardError, "overflows"),  # checked first, as before
    ],
)
def test_entries_past_any_object_or_larger_than_a_chunk(entry, error, message):
    """With the shard's size unknown (an index read alone), entries reaching past the
    largest object any store holds, or longer than the chunk's codecs make one, are
    refused -- before a reader turns them into requests."""
    t = table((3,), {(0,): (0, 8), (2,): entry})
    with pytest.raises(error, match=message) as info:
        check_entries(
            t, data_start=0, data_stop=None, key="c/0", max_stop=MAX_OBJECT - 1, max_nbytes=4096
        )
    assert (type(info.value), info.value.chunk, info.value.key) == (error, (2,), "c/0")
    # the bounds are the caller's: without them, only overflow is an error
    if message != "overflows":
        check_entries(t, data_start=0, data_stop=None)


def test_largest_entries_allowed():
    t = table((2,), {(0,): (0, 4096), (1,): (MAX_OBJECT - 101, 100)})
    check_entries(t, data_start=0, data_stop=None, max_stop=MAX_OBJECT - 1, max_nbytes=4096)
    # a known size takes over from max_stop
    with pytest.raises(TruncatedShardError, match="outside the shard object"):
        check_entries(t, data_start=0, data_stop=5000, max_stop=MAX_OBJECT - 1)
