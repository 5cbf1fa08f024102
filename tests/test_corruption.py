"""Corrupt shards and impossible metadata: the documented error, never a crash, a hang or
wrong data returned silently (docs/user-guide.md, "Errors").

Two halves:

- targeted cases on real stores written by zarr-python and xarray, each read through
  every read path: ``ArrayReader`` (whole shards, and index + ranges), the
  ``engine="shardwise"`` backend with dask (one task per shard) and
  ``shardwise.open_dataset(chunks="inner")`` (the fan-out graph: index tasks, ranged
  reads). Each asserts the exact class and the array, store key and inner chunk named;
- hypothesis fuzzing of the index decoder, the shard and inner-chunk decoders, the
  metadata reader and whole shard objects: only documented exceptions escape.

tests/test_errors.py has the first corruption tests; these extend them. A bug found
here is pinned as ``xfail(strict=True)`` (with the exception that escapes) until fixed;
none is open.
"""

from __future__ import annotations

import json
import math
import shutil
import signal
import subprocess
import sys
import textwrap
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xarray as xr
import zarr
from hypothesis import HealthCheck, assume, event, example, given, settings
from hypothesis import strategies as st
from zarr.codecs import (
    BloscCodec,
    BytesCodec,
    Crc32cCodec,
    GzipCodec,
    ShardingCodec,
    TransposeCodec,
    ZstdCodec,
)
from zarr.core.buffer import cpu
from zarr.core.dtype import FixedLengthUTF32, Float64, Int16
from zarr.errors import ZarrUserWarning
from zarr.storage import MemoryStore

import shardwise
from shardwise import ArrayReader, ReadOptions, ShardwiseError, _compat
from shardwise.codecs import ChunkDecoder, ChunkEncoder, ShardDecoder
from shardwise.errors import (
    ChecksumError,
    CorruptShardError,
    TruncatedShardError,
    UnsupportedArrayError,
    UnsupportedCodecError,
)
from shardwise.format.index import EMPTY, IndexFormat, check_entries
from shardwise.format.metadata import ArrayInfo
from shardwise.xarray.backend import _ENGINE_KINDS

E64 = 2**64 - 1
DATA = np.random.default_rng(42).normal(size=(16, 16))
SHAPE, SHARDS, INNER = (16, 16), (8, 8), (4, 4)
KEY = "v/c/1/0"  # the shard the targeted cases corrupt
ALL_KEYS = frozenset(f"v/c/{i}/{j}" for i in (0, 1) for j in (0, 1))
RANGED = ReadOptions(whole_shard_fraction=float("inf"), index_cache=False)
FUZZ = settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


# -- stores ------------------------------------------------------------------------------
def write(
    path: Path,
    *,
    writer: str = "zarr",
    location: str = "end",
    index_crc: bool = True,
    inner_crc: bool = True,
    compress: bool = True,
    inner: tuple[int, int] = INNER,
) -> Path:
    """A (16, 16) float64 array "v" of 2 x 2 shards of (8, 8), inner chunks ``inner``
    (2 x 2 of (4, 4) by default), written by zarr-python or xarray."""
    compressors: list[Any] = [ZstdCodec(level=1)] if compress else []
    if inner_crc:
        compressors.append(Crc32cCodec())
    if writer == "xarray":
        assert location == "end" and index_crc
        ds = xr.Dataset({"v": (("y", "x"), DATA)})
        encoding = {"v": {"chunks": inner, "shards": SHARDS, "compressors": compressors}}
        ds.to_zarr(path, zarr_format=3, consolidated=False, encoding=encoding)
        return path
    common: dict[str, Any] = {
        "name": "v",
        "shape": SHAPE,
        "dtype": "f8",
        "dimension_names": ["y", "x"],
        "fill_value": np.nan,
    }
    if index_crc:  # zarr-python's own spelling: the default index codecs, bytes + crc32c
        arr = zarr.create_array(
            path,
            chunks=inner,
            shards={"shape": SHARDS, "index_location": location},
            compressors=compressors or None,
            **common,
        )
    else:  # other index codecs need the sharding codec spelled out
        codec = ShardingCodec(
            chunk_shape=inner,
            codecs=[BytesCodec(), *compressors],
            index_codecs=[BytesCodec()],
            index_location=location,
        )
        arr = zarr.create_array(path, chunks=SHARDS, serializer=codec, compressors=None, **common)
    arr[:] = DATA
    return path


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    """Stores written once per configuration; tests corrupt copies of them."""
    root = tmp_path_factory.mktemp("pristine")
    cache: dict[tuple[Any, ...], Path] = {}

    def get(**config: Any) -> Path:
        k = tuple(sorted(config.items()))
        if k not in cache:
            cache[k] = write(root / f"s{len(cache)}.zarr", **config)
        return cache[k]

    return get


@pytest.fixture
def make_store(tmp_path: Path, pristine: Callable[..., Path]) -> Callable[..., Path]:
    def make(**config: Any) -> Path:
        dst = tmp_path / "s.zarr"
        shutil.copytree(pristine(**config), dst)
        return dst

    return make


def index_format(config: dict[str, Any]) -> IndexFormat:
    inner = config.get("inner", INNER)
    cps = tuple(s // c for s, c in zip(SHARDS, inner, strict=True))
    return IndexFormat(
        cps, location=config.get("location", "end"), checksum=config.get("index_crc", True)
    )


def table_of(raw: bytes | bytearray, fmt: IndexFormat) -> np.ndarray:
    """The index table of a shard, without checking anything."""
    body = bytes(fmt.split(bytes(raw)))[: 16 * fmt.nchunks]
    return np.frombuffer(body, dtype="<u8").reshape(*fmt.chunks_per_shard, 2).copy()


def with_table(raw: bytearray, fmt: IndexFormat, table: np.ndarray) -> bytearray:
    """The shard with its index replaced (crc32c recomputed when the index has one)."""
    enc = fmt.encode(table)
    if fmt.location == "start":
        raw[: fmt.nbytes] = enc
    else:
        raw[-fmt.nbytes :] = enc
    return raw


def index_start(raw: bytes | bytearray, fmt: IndexFormat) -> int:
    return 0 if fmt.location == "start" else len(raw) - fmt.nbytes


# -- the read paths ----------------------------------------------------------------------
def read_reader(path: Path) -> np.ndarray:
    return ArrayReader.open(path, "v")[...]


def read_ranged(path: Path) -> np.ndarray:
    return ArrayReader.open(path, "v", options=RANGED)[...]


def read_engine(path: Path) -> np.ndarray:
    with xr.open_dataset(path, engine="shardwise", chunks={}, consolidated=False) as ds:
        return ds.compute()["v"].values


def read_fanout(path: Path) -> np.ndarray:
    with shardwise.open_dataset(path, chunks="inner", consolidated=False) as ds:
        return ds.compute()["v"].values


READERS: dict[str, Callable[[Path], np.ndarray]] = {
    "reader": read_reader,  # whole shards in one request, index checked against the size
    "ranged": read_ranged,  # suffix/prefix request for the index, then byte ranges
    "engine": read_engine,  # xr.open_dataset(engine="shardwise", chunks={}) + dask
    "fanout": read_fanout,  # shardwise.open_dataset(chunks="inner"): index tasks + ranges
}
OPENERS = ("reader", "engine", "fanout")  # the three ways to open (metadata cases)

ANY = object()


def assert_error(
    read: Callable[[Path], np.ndarray],
    path: Path,
    cls: type[ShardwiseError],
    *,
    key: Any = KEY,
    chunk: Any = ANY,
) -> ShardwiseError:
    """The read raises exactly ``cls`` naming array "v", ``key`` and ``chunk`` (a
    value, a frozenset of allowed values, or ANY) -- and returns no data."""
    try:
        out = read(path)
    except ShardwiseError as e:
        err = e
    else:
        same = out.shape == DATA.shape and np.array_equal(out, DATA, equal_nan=True)
        pytest.fail(f"no error: the read returned {'the original' if same else 'WRONG'} data")
    assert type(err) is cls, f"{type(err).__name__}: {err}"
    assert err.array == "v", err
    if isinstance(key, frozenset):
        assert err.key in key, err
    else:
        assert err.key == key, err
    if isinstance(chunk, frozenset):
        assert err.chunk in chunk, err
    elif chunk is not ANY:
        assert err.chunk == chunk, err
    return err


# -- targeted corruption of one shard ----------------------------------------------------
@dataclass(frozen=True)
class Expect:
    cls: type[ShardwiseError]
    chunk: Any = ANY
    key: Any = KEY


@dataclass(frozen=True)
class Case:
    id: str
    config: dict[str, Any]
    corrupt: Callable[[bytearray, IndexFormat], bytes | bytearray]
    expect: Expect | dict[str, Expect]


def flip_chunk_byte(inner: tuple[int, int], where: int) -> Callable[..., bytearray]:
    def corrupt(raw: bytearray, fmt: IndexFormat) -> bytearray:
        offset, nbytes = (int(x) for x in table_of(raw, fmt)[inner])
        raw[offset + (where % nbytes)] ^= 0x5A
        return raw

    return corrupt


def flip_index_byte(pos: int) -> Callable[..., bytearray]:
    """Flip byte ``pos`` of the index (negative: from the index's end, i.e. its crc)."""

    def corrupt(raw: bytearray, fmt: IndexFormat) -> bytearray:
        raw[index_start(raw, fmt) + pos % fmt.nbytes] ^= 0x01
        return raw

    return corrupt


def cut(where: Callable[[bytearray, IndexFormat], int]) -> Callable[..., bytes]:
    def corrupt(raw: bytearray, fmt: IndexFormat) -> bytes:
        return bytes(raw[: where(raw, fmt)])

    return corrupt


def edit(fn: Callable[[np.ndarray, int, IndexFormat], None]) -> Callable[..., bytearray]:
    """Edit the index table in place (``fn(table, shard_nbytes, fmt)``), re-encoded with
    a fresh crc32c when the index has one, so that the entry checks are what fires."""

    def corrupt(raw: bytearray, fmt: IndexFormat) -> bytearray:
        table = table_of(raw, fmt)
        fn(table, len(raw), fmt)
        return with_table(raw, fmt, table)

    return corrupt


def _overlap(t: np.ndarray, n: int, fmt: IndexFormat) -> None:
    t[0, 1, 0] = t[0, 0, 0] + 10  # chunk (0, 1) starts inside chunk (0, 0)


def _outside(t: np.ndarray, n: int, fmt: IndexFormat) -> None:
    t[1, 1, 0] = n + 100


def _past_end(t: np.ndarray, n: int, fmt: IndexFormat) -> None:
    t[1, 1, 1] += 1000  # starts inside the object, ends past it


def _into_index(t: np.ndarray, n: int, fmt: IndexFormat) -> None:
    last = tuple(s - 1 for s in fmt.chunks_per_shard)
    if fmt.location == "start":
        t[last] = (0, t[last][1])
    else:  # one inner chunk's worth of bytes lying wholly inside the index
        t[last] = (n - fmt.nbytes, min(int(t[last][1]), fmt.nbytes - 4))


def _half_offset(t: np.ndarray, n: int, fmt: IndexFormat) -> None:
    t[0, 1, 0] = EMPTY


def _half_nbytes(t: np.ndarray, n: int, fmt: IndexFormat) -> None:
    t[1, 0, 1] = EMPTY


def _overflow(t: np.ndarray, n: int, fmt: IndexFormat) -> None:
    t[1, 0] = (2**63, 2**63 + 5)


def _zero_length(t: np.ndarray, n: int, fmt: IndexFormat) -> None:
    t[1, 0, 1] = 0


def _doubled(t: np.ndarray, n: int, fmt: IndexFormat) -> None:
    t[..., 1] *= 2  # nbytes add up to twice the data: each chunk runs into the next


def _all_whole_object(t: np.ndarray, n: int, fmt: IndexFormat) -> None:
    t[...] = (0, n)  # identical entries (allowed: deduplication) spanning the object


def _all_empty(t: np.ndarray, n: int, fmt: IndexFormat) -> None:
    t[...] = EMPTY


NO_CRC = {"index_crc": False}
NO_CRC_START = {"index_crc": False, "location": "start"}
START = {"location": "start"}
# 8 inner chunks of (2, 4) float64 = 64 bytes, no checksum, no compression: a 128-byte
# index can hold a whole inner chunk
BARE = {"inner": (2, 4), "index_crc": False, "inner_crc": False, "compress": False}

CASES = [
    # crc32c-protected inner chunks
    Case("inner-crc-flip", {}, flip_chunk_byte((1, 0), 5), Expect(ChecksumError, (1, 0))),
    Case(
        "inner-crc-flip-xarray-writer",
        {"writer": "xarray"},
        flip_chunk_byte((0, 1), 7),
        Expect(ChecksumError, (0, 1)),
    ),
    Case(
        "inner-crc-flip-in-its-crc",
        {},
        flip_chunk_byte((1, 1), -1),
        Expect(ChecksumError, (1, 1)),
    ),
    Case(
        "inner-crc-flip-index-start",
        START,
        flip_chunk_byte((0, 0), 0),
        Expect(ChecksumError, (0, 0)),
    ),
    # flipped bytes in the index
    Case("index-flip-offset", {}, flip_index_byte(16), Expect(ChecksumError, None)),
    Case("index-flip-nbytes", {}, flip_index_byte(40), Expect(ChecksumError, None)),
    Case("index-flip-crc", {}, flip_index_byte(-1), Expect(ChecksumError, None)),
    Case("index-flip-start", START, flip_index_byte(20), Expect(ChecksumError, None)),
    Case("index-flip-crc-start", START, flip_index_byte(-2), Expect(ChecksumError, None)),
    # truncated shards; with the index at the end a cut loses the index (docs: a
    # ChecksumError on the index), with the index at the start the entries run past the end
    Case("cut-in-index-crc", {}, cut(lambda r, f: len(r) - 2), Expect(ChecksumError, None)),
    Case("cut-in-index", {}, cut(lambda r, f: len(r) - 20), Expect(ChecksumError, None)),
    Case("cut-whole-index", {}, cut(lambda r, f: len(r) - f.nbytes), Expect(ChecksumError, None)),
    Case("cut-in-data", {}, cut(lambda r, f: len(r) // 2), Expect(ChecksumError, None)),
    Case(
        "cut-shorter-than-index",
        {},
        cut(lambda r, f: f.nbytes - 28),
        Expect(TruncatedShardError, None),
    ),
    Case("cut-to-nothing", {}, cut(lambda r, f: 0), Expect(TruncatedShardError, None)),
    Case(
        "cut-to-nothing-no-index-crc",
        NO_CRC,
        cut(lambda r, f: 0),
        Expect(TruncatedShardError, None),
    ),
    Case("cut-in-index-start", START, cut(lambda r, f: 30), Expect(TruncatedShardError, None)),
    Case(
        "cut-after-index-start",
        START,
        cut(lambda r, f: f.nbytes),
        Expect(TruncatedShardError, frozenset({(0, 0), (0, 1), (1, 0), (1, 1)})),
    ),
    Case(
        "cut-in-last-chunk-start",  # zarr-python lays (1, 1) out last
        START,
        cut(lambda r, f: len(r) - 7),
        Expect(TruncatedShardError, (1, 1)),
    ),
    Case(
        "cut-in-last-chunk-start-no-index-crc",
        NO_CRC_START,
        cut(lambda r, f: len(r) - 1),
        Expect(TruncatedShardError, (1, 1)),
    ),
    # entries that overlap, point outside the object or into the index
    Case("overlap", NO_CRC, edit(_overlap), Expect(CorruptShardError, (0, 1))),
    Case("overlap-start", NO_CRC_START, edit(_overlap), Expect(CorruptShardError, (0, 1))),
    Case("overlap-crc-recomputed", {}, edit(_overlap), Expect(CorruptShardError, (0, 1))),
    Case("outside", NO_CRC, edit(_outside), Expect(TruncatedShardError, (1, 1))),
    Case("outside-start", NO_CRC_START, edit(_outside), Expect(TruncatedShardError, (1, 1))),
    Case("outside-crc-recomputed", {}, edit(_outside), Expect(TruncatedShardError, (1, 1))),
    Case("past-end-start", NO_CRC_START, edit(_past_end), Expect(TruncatedShardError, (1, 1))),
    Case("into-index-start", NO_CRC_START, edit(_into_index), Expect(CorruptShardError, (1, 1))),
    # found by the size check: the whole shard's size, or the short read of the ranged
    # path's last range, read on by the index's length (the index was read by a suffix
    # request, so its size was unknown)
    Case("into-index-end", NO_CRC, edit(_into_index), Expect(TruncatedShardError, (1, 1))),
    Case(
        "into-index-end-no-checksums",
        BARE,
        edit(_into_index),
        Expect(TruncatedShardError, (3, 1)),
    ),
    # half-empty and overflowing entries
    Case("half-empty-offset", NO_CRC, edit(_half_offset), Expect(CorruptShardError, (0, 1))),
    Case("half-empty-nbytes", {}, edit(_half_nbytes), Expect(CorruptShardError, (1, 0))),
    Case("half-empty-start", NO_CRC_START, edit(_half_nbytes), Expect(CorruptShardError, (1, 0))),
    Case("entry-overflows", {}, edit(_overflow), Expect(CorruptShardError, (1, 0))),
    # a zero-length chunk is too short for its crc32c (or for its data)
    Case("zero-length-entry", {}, edit(_zero_length), Expect(CorruptShardError, (1, 0))),
    Case("zero-length-entry-bare", BARE, edit(_zero_length), Expect(CorruptShardError, (1, 0))),
    # entries whose nbytes add up to more than the object holds
    # the last chunk in the file runs past the data: every reader knows the object's size
    # (a whole shard's, or the size the read of its index came with, from the one file)
    Case("nbytes-doubled", {}, edit(_doubled), Expect(TruncatedShardError, (1, 1))),
    Case("nbytes-doubled-start", NO_CRC_START, edit(_doubled), Expect(TruncatedShardError, (1, 1))),
    Case(
        "all-entries-span-object",
        {},
        edit(_all_whole_object),
        {
            "reader": Expect(TruncatedShardError, (0, 0)),
            "engine": Expect(TruncatedShardError, (0, 0)),
            "ranged": Expect(TruncatedShardError, (0, 0)),
            # the four read tasks race: whichever fails first is reported
            "fanout": Expect(TruncatedShardError, frozenset({(0, 0), (0, 1), (1, 0), (1, 1)})),
        },
    ),
]


def _case_params() -> list[Any]:
    params = []
    for case in CASES:
        for name in READERS:
            params.append(pytest.param(case, name, id=f"{case.id}-{name}"))
    return params


@pytest.mark.parametrize(("case", "reader"), _case_params())
def test_corrupt_shard(make_store, case: Case, reader: str) -> None:
    path = make_store(**case.config)
    fmt = index_format(case.config)
    shard = path / KEY
    shard.write_bytes(bytes(case.corrupt(bytearray(shard.read_bytes()), fmt)))
    expect = case.expect if isinstance(case.expect, Expect) else case.expect[reader]
    assert_error(READERS[reader], path, expect.cls, key=expect.key, chunk=expect.chunk)


@pytest.mark.parametrize("reader", list(READERS))
@pytest.mark.parametrize(
    ("config", "corrupt", "emptied"),
    [
        pytest.param(
            START, lambda raw, fmt: bytes(raw) + b"trailing junk", False, id="junk-after-data"
        ),
        pytest.param({}, edit(_all_empty), True, id="all-entries-empty"),
        pytest.param(NO_CRC, edit(_all_empty), True, id="all-entries-empty-no-index-crc"),
    ],
)
def test_harmless_changes_read_correctly(make_store, config, corrupt, emptied, reader) -> None:
    """Not everything is corruption: bytes after the data of a shard whose index is at
    the start are never read, and an index of empty entries is a shard of fill values."""
    path = make_store(**config)
    shard = path / KEY
    shard.write_bytes(bytes(corrupt(bytearray(shard.read_bytes()), index_format(config))))
    expected = DATA.copy()
    if emptied:
        expected[8:, :8] = np.nan
    np.testing.assert_array_equal(READERS[reader](path), expected)


def test_flip_in_the_index_with_crc_never_reaches_entry_checks(make_store) -> None:
    """The same bad entry is a CorruptShardError when the crc32c is recomputed and a
    ChecksumError when it is not: the checksum is checked before the entries."""
    path = make_store()
    fmt = index_format({})
    shard = path / KEY
    raw = bytearray(shard.read_bytes())
    table = table_of(raw, fmt)
    _overlap(table, len(raw), fmt)
    body = np.ascontiguousarray(table, dtype="<u8").tobytes()
    raw[-fmt.nbytes : -4] = body  # the old crc32c stays
    shard.write_bytes(bytes(raw))
    err = assert_error(read_reader, path, ChecksumError, chunk=None)
    assert "index crc32c" in str(err)


@pytest.mark.parametrize("options", [None, RANGED], ids=["whole", "ranged"])
def test_errors_are_not_cached(make_store, options) -> None:
    """A failed read leaves nothing behind: once the shard is rewritten, the same reader
    (index cache on) reads it correctly."""
    path = make_store(location="start")
    shard = path / KEY
    good = shard.read_bytes()
    shard.write_bytes(good[:-7])
    reader = ArrayReader.open(path, "v", options=options)
    with pytest.raises(TruncatedShardError):
        reader[...]
    shard.write_bytes(good)
    np.testing.assert_array_equal(reader[...], DATA)


# -- metadata that disagrees with the shards ---------------------------------------------
def edit_metadata(path: Path, fn: Callable[[dict[str, Any]], None]) -> None:
    meta_path = path / "v" / "zarr.json"
    meta = json.loads(meta_path.read_text())
    fn(meta)
    meta_path.write_text(json.dumps(meta))


def sharding(meta: dict[str, Any]) -> dict[str, Any]:
    return meta["codecs"][0]["configuration"]


def set_inner(shape: list[int]) -> Callable[[dict[str, Any]], None]:
    return lambda m: sharding(m).__setitem__("chunk_shape", shape)


def set_grid(shape: list[int]) -> Callable[[dict[str, Any]], None]:
    return lambda m: m["chunk_grid"]["configuration"].__setitem__("chunk_shape", shape)


def set_field(name: str, value: Any) -> Callable[[dict[str, Any]], None]:
    return lambda m: m.__setitem__(name, value)


@pytest.mark.parametrize("reader", list(READERS))
@pytest.mark.parametrize(
    ("config", "mutate", "cls", "key", "chunk"),
    [
        # more chunks per shard than the shards were written with: the index read is
        # longer than the real one (or longer than the whole object)
        pytest.param({}, set_inner([1, 1]), TruncatedShardError, ALL_KEYS, None, id="64-chunks"),
        pytest.param({}, set_inner([2, 4]), ChecksumError, ALL_KEYS, None, id="8-chunks"),
        pytest.param(
            {}, set_grid([16, 16]), ChecksumError, "v/c/0/0", None, id="16-chunks-one-shard"
        ),
        # fewer: the index read is a suffix of the real one
        pytest.param({}, set_inner([8, 8]), ChecksumError, ALL_KEYS, None, id="1-chunk"),
        pytest.param(
            NO_CRC,
            set_inner([8, 8]),
            CorruptShardError,
            ALL_KEYS,
            (0, 0),
            id="1-chunk-no-index-crc",
        ),
    ],
)
def test_index_size_disagrees_with_metadata(
    make_store, config, mutate, cls, key, chunk, reader
) -> None:
    """zarr.json rewritten so that chunks_per_shard differs from what the shards were
    written with: the index has the wrong size, which is an error, not garbage."""
    path = make_store(**config)
    edit_metadata(path, mutate)
    assert_error(READERS[reader], path, cls, key=key, chunk=chunk)


@pytest.mark.parametrize("reader", list(READERS))
def test_index_size_disagrees_without_any_checksum(make_store, reader) -> None:
    """Without index checksum the misread index is garbage entries: still a
    CorruptShardError (which one depends on the bytes)."""
    path = make_store(index_crc=False)
    edit_metadata(path, set_inner([2, 4]))
    with pytest.raises(CorruptShardError) as info:
        READERS[reader](path)
    assert info.value.array == "v"
    assert info.value.key in ALL_KEYS


@pytest.mark.parametrize("reader", list(READERS))
def test_larger_shape_reads_fill_value(make_store, reader) -> None:
    """A shape larger than the data written is valid: the missing shards are fill."""
    path = make_store()
    edit_metadata(path, set_field("shape", [24, 16]))
    out = READERS[reader](path)
    assert out.shape == (24, 16)
    np.testing.assert_array_equal(out[:16], DATA)
    assert np.isnan(out[16:]).all()


@pytest.mark.parametrize("reader", list(READERS))
def test_zero_shard_shape_is_repaired_by_zarr(make_store, reader) -> None:
    """zarr-python reads a shard shape of 0 as the inner chunk size (with a warning);
    the shards then do not match their index size, which is reported."""
    path = make_store()
    edit_metadata(path, set_grid([0, 8]))
    if _compat.version("zarr") < (3, 4):  # (no repairs before): refused, named
        assert_error(READERS[reader], path, UnsupportedArrayError, key="v/zarr.json", chunk=None)
        return
    with pytest.warns(ZarrUserWarning, match="chunk shape"):
        assert_error(READERS[reader], path, ChecksumError, key=ALL_KEYS, chunk=None)


# impossible metadata: zarr-python's and xarray's own errors on each document become an
# UnsupportedArrayError naming the array and its zarr.json
META_CASES: list[tuple[str, Callable[..., None]]] = [
    ("inner-does-not-divide-shard", set_inner([3, 3])),
    ("inner-larger-than-shard", set_inner([16, 16])),
    ("inner-zero", set_inner([0, 4])),
    ("inner-negative", set_inner([-4, 4])),
    ("inner-wrong-ndim", set_inner([4, 4, 4])),
    ("inner-float", set_inner([4.0, 4])),  # zarr-python: TypeError
    ("shape-negative", set_field("shape", [-1, 16])),
    ("shape-wrong-ndim", set_field("shape", [16, 16, 16])),
    ("shape-too-large-for-numpy", set_field("shape", [2**63, 16])),  # xarray: OverflowError
    ("grid-negative", set_grid([-8, 8])),
    ("grid-wrong-ndim", set_grid([8])),
    ("grid-unknown", lambda m: m["chunk_grid"].__setitem__("name", "hexagonal")),
    ("sharding-without-chunk-shape", lambda m: sharding(m).pop("chunk_shape")),  # TypeError
    ("fill-value-of-wrong-type", set_field("fill_value", "abc")),  # TypeError
    ("index-location-middle", lambda m: sharding(m).__setitem__("index_location", "middle")),
    (
        "storage-transformers",
        set_field("storage_transformers", [{"name": "sharding", "configuration": {}}]),
    ),
    ("zarr-format-2-in-v3-document", set_field("zarr_format", 2)),  # zarr-python: KeyError
    ("no-node-type", lambda m: m.pop("node_type")),
    ("no-dimension-names", lambda m: m.pop("dimension_names")),  # xarray: KeyError
]


@pytest.mark.parametrize("reader", OPENERS)
@pytest.mark.parametrize(("name", "mutate"), META_CASES, ids=[c[0] for c in META_CASES])
def test_impossible_metadata(make_store, name, mutate, reader) -> None:
    """Impossible shapes and malformed documents: an UnsupportedArrayError naming the
    array and its zarr.json, whatever zarr-python or xarray raised underneath."""
    path = make_store()
    edit_metadata(path, mutate)
    if name == "no-dimension-names" and reader == "reader":
        assert ArrayReader.open(path, "v").shape == (16, 16)  # only xarray needs them
        return
    with pytest.raises(UnsupportedArrayError) as info:
        READERS[reader](path)
    assert info.value.array == "v"
    assert info.value.key == "v/zarr.json"
    assert "zarr.json" in str(info.value)


@pytest.mark.parametrize("reader", OPENERS)
@pytest.mark.parametrize("name", ["", "it's"], ids=["empty", "quote"])
def test_unknown_codec_with_odd_name(make_store, name, reader) -> None:
    path = make_store()
    edit_metadata(path, lambda m: sharding(m)["codecs"][1].__setitem__("name", name))
    with pytest.raises(UnsupportedCodecError) as info:
        READERS[reader](path)
    assert (info.value.array, info.value.key) == ("v", "v/zarr.json")


class _Unreachable(MemoryStore):
    """A store whose every read fails as a dead endpoint's would; the keys asked for go
    to ``ASKED`` (zarr-python makes copies of a store, so not to an attribute)."""

    async def get(self, key: str, prototype: Any = None, byte_range: Any = None) -> Any:
        ASKED.append(key)
        raise ConnectionError("endpoint unreachable")


ASKED: list[str] = []


@pytest.mark.parametrize("reader", ["reader", "engine"])
def test_io_errors_pass_through_without_a_search_for_bad_metadata(reader) -> None:
    """Only parse errors send shardwise looking through the documents for a culprit: an
    I/O error arrives as a StoreIOError naming where (the store's error its cause), and
    no document is asked for twice."""
    ASKED.clear()
    with pytest.raises(shardwise.errors.StoreIOError, match="endpoint unreachable") as info:
        if reader == "reader":
            ArrayReader.open(_Unreachable(), "v")
        else:
            xr.open_dataset(_Unreachable(), engine="shardwise", consolidated=False)
    assert isinstance(info.value.__cause__, ConnectionError)
    assert info.value.key == ("v/zarr.json" if reader == "reader" else "zarr.json")
    assert ASKED and len(ASKED) == len(set(ASKED)), ASKED


def test_impossible_metadata_fails_at_open_not_later(make_store) -> None:
    """Whatever escapes, it escapes when opening, before any shard is read: opening never
    returns an object that would read garbage."""
    path = make_store()
    edit_metadata(path, set_inner([3, 3]))
    with pytest.raises(ValueError):
        ArrayReader.open(path, "v")
    with pytest.raises(ValueError):
        xr.open_dataset(path, engine="shardwise", consolidated=False)
    with pytest.raises(ValueError):
        shardwise.open_dataset(path, consolidated=False)


def run_with_deadline(code: str, seconds: int = 10) -> str:
    """Run ``code`` in a child Python, with ``DEADLINE`` in it replaced by an alarm of
    ``seconds`` and at most 3 GiB of address space, so that a hang or a runaway
    allocation cannot hurt; TimeoutError when the alarm rang. (The calls timed here take
    well under a second on an idle machine; 2 s was too little with six processes on two
    cores. The hangs they guard against never end: listing 2**24 chunks grew about
    100 MB/s until killed.) Returns its stdout. The libraries shardwise loads on first use
    are imported before the alarm is set: the deadline times the work, not imports
    (seconds on a loaded 2-core machine)."""
    prelude = (
        "import resource, signal\nresource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))\n"
        "import dask.array, xarray, zarr, shardwise.xarray.to_zarr, shardwise.xarray.open, shardwise.xarray.backend, shardwise.io.reader\n"
    )
    code = prelude + textwrap.dedent(code).replace("DEADLINE", f"signal.alarm({seconds})")
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False
    )
    if proc.returncode == -signal.SIGALRM:
        raise TimeoutError(f"no result within {seconds} s")
    if proc.returncode < 0:
        raise ChildProcessError(
            f"killed by {signal.Signals(-proc.returncode).name}: {proc.stderr[-2000:]}"
        )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


@pytest.mark.parametrize(
    ("shape", "chunks", "expected"),
    [
        ([2**40, 16], "shards", "raised ChunksError"),
        ([2**40, 16], "inner", "raised ChunksError"),
        ([2**40, 16], "auto", "raised ChunksError"),
        ([2**40, 16], {"y": 2**16}, "raised ChunksError"),  # 2**24 of them
        ([2**40, 16], {"y": -1}, "opened ((1099511627776,), (8, 8))"),
        ([2**40, 2**40], {"y": 2**28, "x": 2**28}, "raised ChunksError"),  # 2**12 x 2**12
        ([0, 2**40], "shards", "opened ((0,), (1099511627776,))"),
        ([0, 2**40], "inner", "opened ((0,), (1099511627776,))"),
        ([0, 2**40], {"x": (1,)}, "raised ChunksError"),  # still checked
    ],
    ids=["shards", "inner", "auto", "int", "whole", "product", "empty", "empty-inner", "bad"],
)
def test_open_dataset_huge_shape_does_not_hang(make_store, shape, chunks, expected) -> None:
    """A dimension of 2**40 (a corrupt or hostile zarr.json): open_dataset refuses more
    than MAX_CHUNKS dask chunks with ChunksError at once, instead of listing them (it
    used to grow ~100 MB/s until killed); an array holding nothing gets one chunk along
    every dimension, whatever their length."""
    path = make_store()
    edit_metadata(path, set_field("shape", shape))
    out = run_with_deadline(
        f"""
        import shardwise
        DEADLINE
        try:
            ds = shardwise.open_dataset({str(path)!r}, chunks={chunks!r}, consolidated=False)
        except shardwise.ShardwiseError as e:
            print("raised", type(e).__name__)
        else:
            print("opened", ds.v.chunks)
        """
    )
    assert out.strip() == expected


@pytest.mark.parametrize(
    ("shape", "selection", "expected"),
    [
        ([0, 2**40], "[...]", "(0, 1099511627776)"),
        ([2**40, 16], "[0:0, :]", "(0, 16)"),
        ([2**40, 16], "[5:5]", "(0, 16)"),
        ([2**40, 16], "[...]", "MemoryError"),  # 128 TiB: refused before any planning
        ([2**40, 16], "[2**40 - 2:, 0]", "(2,)"),  # past the data written: fill values
    ],
)
def test_reading_nothing_or_too_much_does_not_hang(make_store, shape, selection, expected) -> None:
    """An empty selection returns at once however many inner chunks the array has (it
    used to list every one); one too large for memory raises numpy's MemoryError before
    its chunks are listed."""
    path = make_store()
    edit_metadata(path, set_field("shape", shape))
    out = run_with_deadline(
        f"""
        from shardwise import ArrayReader
        reader = ArrayReader.open({str(path)!r}, "v")
        DEADLINE
        try:
            print(reader{selection}.shape)
        except MemoryError:
            print("MemoryError")
        """
    )
    assert out.strip() == expected


# A 166-byte blosc (lz4) frame for a (4, 6) float64 chunk, found by fuzzing: its header
# claims 0x6d0000a6 compressed bytes and its blocks are corrupt. c-blosc (numcodecs.Blosc)
# reads past the buffer and the process dies of SIGSEGV -- zarr-python too.
BLOSC_SEGFAULT = bytes.fromhex(
    "02012401c0000000c0000000a600006d1400001b8e000000f107004000000000008000000000004000"
    "400040400000401500000500001800031400002a00104007000005001080070001100043400000400c"
    "00013000001e00041300040800c04000c04040000040404040401e0002190000560013c00a00010d00"
    "000200128001001240070000020011c00100000a00f00580808040000000000000000000000020732000"
    "20"
)


def blosc_header_lies(raw: bytes) -> bool:
    """Whether a blosc frame's header claims another compressed size than it has (what
    makes c-blosc read past the buffer: test_corrupt_blosc_chunk_does_not_crash)."""
    return len(raw) >= 16 and int.from_bytes(raw[12:16], "little") != len(raw)


def test_corrupt_blosc_chunk_does_not_crash(tmp_path) -> None:
    """c-blosc trusts the compressed size in a frame's header and segfaulted on this one
    (zarr-python still does): shardwise checks the header first."""
    assert len(BLOSC_SEGFAULT) == 166 and blosc_header_lies(BLOSC_SEGFAULT)
    arr = zarr.create_array(
        tmp_path / "b.zarr",
        name="v",
        shape=(4, 6),
        dtype="f8",
        chunks=(4, 6),
        shards=(4, 6),
        compressors=[BloscCodec(cname="lz4")],
        dimension_names=["y", "x"],
    )
    arr[:] = np.arange(24.0).reshape(4, 6)
    table = np.array([[[0, len(BLOSC_SEGFAULT)]]], dtype=np.uint64)
    (tmp_path / "b.zarr" / "v" / "c" / "0" / "0").write_bytes(
        BLOSC_SEGFAULT + IndexFormat((1, 1)).encode(table)
    )
    out = run_with_deadline(
        f"""
        import shardwise
        DEADLINE
        try:
            shardwise.ArrayReader.open({str(tmp_path / "b.zarr")!r}, "v")[...]
        except shardwise.errors.CorruptShardError as e:
            print(type(e).__name__, e.key, e.chunk)
        """,
        seconds=60,
    )
    assert out.split() == ["CorruptShardError", "v/c/0/0", "(0,", "0)"]


# -- small units: shard decoding edge cases ----------------------------------------------
def test_nested_shard_shorter_than_its_index() -> None:
    codec = ShardingCodec(chunk_shape=(2,), codecs=[BytesCodec()])
    dec = ShardDecoder(codec, (4,), Float64(), 0.0, array="v")
    with pytest.raises(TruncatedShardError) as info:
        dec.decode(b"tiny", key="v/c/0")
    assert info.value.chunk is None and "nested" not in str(info.value)
    # as a nested shard (inner chunk (1,) of the outer shard): named, and said to be nested
    with pytest.raises(TruncatedShardError) as info:
        dec.decode(b"tiny", key="v/c/0", chunk=(1,))
    assert info.value.chunk == (1,) and "nested shard" in str(info.value)


def _nested_index_crc(raw: bytearray) -> None:
    raw[-6] ^= 0x01  # inside the nested index, before its crc32c


def _nested_half_empty(raw: bytearray) -> None:
    fmt = IndexFormat((2, 2))
    table = fmt.decode(fmt.split(bytes(raw))).copy()
    table[0, 1, 0] = EMPTY
    raw[-fmt.nbytes :] = fmt.encode(table)


@pytest.mark.parametrize(
    ("corrupt", "cls"),
    [
        pytest.param(_nested_index_crc, ChecksumError, id="nested-index-crc"),
        pytest.param(_nested_half_empty, CorruptShardError, id="nested-half-empty-entry"),
    ],
)
def test_nested_shard_errors_name_the_chunk(tmp_path, corrupt, cls) -> None:
    """Nested sharding written by zarr-python: inner chunk (1, 0) of shard v/c/1/0 is a
    shard of 2 x 2 chunks of (2, 2). A fault in its index names that inner chunk."""
    nested = ShardingCodec(chunk_shape=(2, 2), codecs=[BytesCodec(), Crc32cCodec()])
    outer = ShardingCodec(chunk_shape=INNER, codecs=[nested])
    arr = zarr.create_array(
        tmp_path / "n.zarr",
        name="v",
        shape=SHAPE,
        dtype="f8",
        chunks=SHARDS,
        serializer=outer,
        compressors=None,
        dimension_names=["y", "x"],
    )
    arr[:] = DATA
    shard = tmp_path / "n.zarr" / KEY
    raw = bytearray(shard.read_bytes())
    offset, nbytes = (int(x) for x in table_of(raw, IndexFormat((2, 2)))[1, 0])
    inner = bytearray(raw[offset : offset + nbytes])
    corrupt(inner)
    raw[offset : offset + nbytes] = inner
    shard.write_bytes(bytes(raw))
    for read in (read_reader, read_ranged):
        assert_error(read, tmp_path / "n.zarr", cls, chunk=(1, 0))


# -- fuzzing: the shard index ------------------------------------------------------------
def entries_oracle(table: np.ndarray, start: int, stop: int | None) -> str | None:
    """What is wrong with an index table, in check_entries' order, with Python ints."""
    entries = [(int(o), int(n)) for o, n in table.reshape(-1, 2)]
    if any((o == E64) != (n == E64) for o, n in entries):
        return "half"
    present = [(o, n) for o, n in entries if o != E64]
    if any(o + n > E64 for o, n in present):
        return "overflow"
    if any(o < start for o, _ in present):
        return "low"
    if stop is not None and any(o + n > max(stop, 0) for o, n in present):
        return "high"
    for i, a in enumerate(present):
        for b in present[i + 1 :]:
            if a != b and not (a[0] + a[1] <= b[0] or b[0] + b[1] <= a[0]):
                return "overlap"
    return None


index_formats = st.builds(
    IndexFormat,
    chunks_per_shard=st.lists(st.integers(0, 4), min_size=1, max_size=3).map(tuple),
    location=st.sampled_from(["start", "end"]),
    endian=st.sampled_from(["little", "big"]),
    checksum=st.booleans(),
)
wild_fields = st.one_of(
    st.integers(0, 300), st.just(E64), st.integers(0, E64), st.integers(2**63 - 10, 2**63 + 10)
)


@st.composite
def laid_out(draw: st.DrawFn, fmt: IndexFormat) -> tuple[list[int], int]:
    """Entries as a writer lays them out (in a random order, some empty, some gaps,
    possibly shared), then maybe one entry nudged: valid tables and near misses. Also
    the shard size they imply."""
    n = fmt.nchunks
    pos = fmt.nbytes if fmt.location == "start" else 0
    order = draw(st.permutations(range(n)))
    pairs: list[tuple[int, int]] = [(E64, E64)] * n
    for i in order:
        kind = draw(st.sampled_from(["chunk", "chunk", "chunk", "empty", "shared"]))
        if kind == "empty":
            continue
        if kind == "shared" and any(p != (E64, E64) for p in pairs):
            pairs[i] = draw(st.sampled_from([p for p in pairs if p != (E64, E64)]))
            continue
        pos += draw(st.integers(0, 3))  # a gap
        size = draw(st.integers(0, 40))
        pairs[i] = (pos, size)
        pos += size
    if n and draw(st.booleans()):  # nudge one field of one entry
        i, field_ = draw(st.integers(0, n - 1)), draw(st.integers(0, 1))
        o, s = pairs[i]
        value = draw(st.sampled_from([E64, 0]) | st.integers(0, pos + 8))
        pairs[i] = (value, s) if field_ == 0 else (o, value)
    size = pos + (fmt.nbytes if fmt.location == "end" else 0)
    return [x for p in pairs for x in p], size


@given(fmt=index_formats, data=st.data())
@FUZZ
def test_fuzz_index_decode_and_check(fmt: IndexFormat, data: st.DataObject) -> None:
    """IndexFormat.decode on arbitrary bytes and check_entries on what it decodes: only
    ShardwiseErrors escape, naming the array and key; check_entries accepts exactly the
    tables an independent oracle accepts, and blames a chunk that is at fault."""
    kind = data.draw(st.sampled_from(["arbitrary", "sized", "wild", "laid-out"]), label="kind")
    n = fmt.nchunks
    sizes = st.none() | st.integers(0, 700) | st.integers(0, 2**40)
    if kind == "arbitrary":
        raw = data.draw(st.binary(max_size=fmt.nbytes + 24))
    elif kind == "sized":
        raw = data.draw(st.binary(min_size=fmt.nbytes, max_size=fmt.nbytes))
    else:  # a well-formed index (crc32c right when there is one) of random entries
        if kind == "wild":
            values = data.draw(st.lists(wild_fields, min_size=2 * n, max_size=2 * n))
        else:
            values, size = data.draw(laid_out(fmt))
            sizes = st.sampled_from([None, size, size, max(size - 1, 0), size + 3]) | sizes
        raw = fmt.encode(np.array(values, dtype=np.uint64).reshape(*fmt.chunks_per_shard, 2))
    as_type = data.draw(st.sampled_from([bytes, bytearray, memoryview, np.frombuffer]))
    buf = np.frombuffer(raw, dtype=np.uint8) if as_type is np.frombuffer else as_type(raw)
    try:
        table = fmt.decode(buf, array="a", key="k")
    except ShardwiseError as e:
        event(f"decode: {type(e).__name__}")
        assert isinstance(e, TruncatedShardError | ChecksumError), repr(e)
        assert (e.array, e.key) == ("a", "k")
        return
    assert table.shape == (*fmt.chunks_per_shard, 2) and table.dtype == np.uint64

    shard_nbytes = data.draw(sizes, label="shard_nbytes")
    start, stop = fmt.data_bounds(shard_nbytes)
    wrong = entries_oracle(table, start, stop)
    event(f"entries: {wrong or 'valid'}")
    try:
        check_entries(table, data_start=start, data_stop=stop, array="a", key="k")
    except ShardwiseError as e:
        assert wrong is not None, f"rejected a valid table: {e}"
        expected = TruncatedShardError if wrong == "high" else CorruptShardError
        assert type(e) is expected, f"{wrong}: {e!r}"
        assert (e.array, e.key) == ("a", "k")
        assert e.chunk is not None and len(e.chunk) == len(fmt.chunks_per_shard)
        assert all(0 <= c < n for c, n in zip(e.chunk, fmt.chunks_per_shard, strict=True))
        o, n = (int(x) for x in table[e.chunk])
        blamed = {
            "half": (o == E64) != (n == E64),
            "overflow": o != E64 and o + n > E64,
            "low": o != E64 and o < start,
            "high": o != E64 and stop is not None and o + n > max(stop, 0),
            "overlap": o != E64,
        }[wrong]
        assert blamed, f"{wrong}: blamed chunk {e.chunk} = ({o}, {n})"
    else:
        assert wrong is None, f"accepted a table with a {wrong} entry"


# -- fuzzing: whole shards through ShardDecoder ------------------------------------------
def _sharded_store(location: str, checksums: bool) -> tuple[MemoryStore, Any]:
    store = MemoryStore()
    codecs: list[Any] = [BytesCodec()]
    if checksums:
        codecs += [ZstdCodec(level=1), Crc32cCodec()]
    codec = ShardingCodec(
        chunk_shape=INNER,
        codecs=codecs,
        index_codecs=[BytesCodec(), Crc32cCodec()] if checksums else [BytesCodec()],
        index_location=location,
    )
    arr = zarr.create_array(
        store,
        name="v",
        shape=SHAPE,
        dtype="f8",
        chunks=SHARDS,
        serializer=codec,
        compressors=None,
        dimension_names=["y", "x"],
        fill_value=np.nan,
    )
    arr[:] = DATA
    return store, arr


SHARD_CONFIGS = {
    f"{loc}-{'crc' if crc else 'nocrc'}": _sharded_store(loc, crc)
    for loc in ("end", "start")
    for crc in (True, False)
}


@st.composite
def mutated(draw: st.DrawFn, original: bytes) -> bytes:
    """``original`` with random byte flips, a cut, junk appended or inserted, or a range
    deleted (one to three of those)."""
    out = bytearray(original)
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(["flip", "flip", "cut", "append", "insert", "delete"]))
        n = len(out)
        if op == "flip" and n:
            out[draw(st.integers(0, n - 1))] ^= draw(st.integers(1, 255))
        elif op == "cut":
            del out[draw(st.integers(0, n)) :]
        elif op == "append":
            out += draw(st.binary(min_size=1, max_size=40))
        elif op == "insert":
            i = draw(st.integers(0, n))
            out[i:i] = draw(st.binary(min_size=1, max_size=8))
        elif op == "delete" and n:
            i = draw(st.integers(0, n - 1))
            del out[i : i + draw(st.integers(1, 16))]
    return bytes(out)


@pytest.mark.parametrize("config", list(SHARD_CONFIGS))
@given(data=st.data())
@FUZZ
def test_fuzz_shard_decoder(config: str, data: st.DataObject) -> None:
    """ShardDecoder.parse and .decode of a real array's sharding codec on arbitrary bytes
    and on mutations of a real shard: only ShardwiseErrors naming the array and key; with
    crc32c on the index and the chunks, a decoded shard is the original."""
    store, arr = SHARD_CONFIGS[config]
    dec = ShardDecoder(
        _compat.sharding_codec(arr.metadata), SHARDS, arr.metadata.data_type, np.nan, array="v"
    )
    original = store._store_dict["v/c/1/0"].to_bytes()
    raw = data.draw(st.binary(max_size=700) | mutated(original), label="shard")
    for op in ("parse", "decode"):
        try:
            out = getattr(dec, op)(raw, key=KEY)
        except ShardwiseError as e:
            event(f"{op}: {type(e).__name__}")
            assert isinstance(e, CorruptShardError), repr(e)
            assert (e.array, e.key) == ("v", KEY)
            continue
        event(f"{op}: ok")
        if op == "decode":
            assert out.shape == SHARDS and out.dtype == np.float64
            if config.endswith("-crc"):
                np.testing.assert_array_equal(out, DATA[8:, :8])


# -- fuzzing: inner chunks through ChunkDecoder ------------------------------------------
CHAINS: dict[str, tuple[list[Any], Any, Any]] = {
    "bytes": ([BytesCodec()], Float64(), 0.0),
    "bytes-big-endian": ([BytesCodec(endian="big")], Int16(), 0),
    "zstd": ([BytesCodec(), ZstdCodec()], Float64(), 0.0),
    "gzip": ([BytesCodec(), GzipCodec()], Float64(), 0.0),
    "blosc": ([BytesCodec(), BloscCodec(cname="lz4", shuffle="noshuffle")], Float64(), 0.0),
    "blosc-shuffle": ([BytesCodec(), BloscCodec(cname="zstd", shuffle="shuffle")], Int16(), 0),
    "zstd-crc32c": ([BytesCodec(), ZstdCodec(), Crc32cCodec()], Float64(), 0.0),
    "crc32c-zstd": ([BytesCodec(), Crc32cCodec(), ZstdCodec()], Float64(), 0.0),
    "transpose-zstd": ([TransposeCodec(order=(1, 0)), BytesCodec(), ZstdCodec()], Float64(), 0.0),
    "transpose-bytes": ([TransposeCodec(order=(1, 0)), BytesCodec()], Int16(), 0),
    "nested-shards-crc32c": (
        [ShardingCodec(chunk_shape=(2, 3), codecs=[BytesCodec(), Crc32cCodec()])],
        Float64(),
        0.0,
    ),
    # a data type the fast path leaves to zarr-python's own codec pipeline
    "zarr-pipeline-strings": ([BytesCodec(), ZstdCodec()], FixedLengthUTF32(length=2), ""),
}
CHUNK_SHAPE = (4, 6)


def _chunk_values(zdtype: Any) -> np.ndarray:
    dtype = zdtype.to_native_dtype()
    if dtype.kind == "U":
        return np.array([f"{i % 7}x" for i in range(24)], dtype=dtype).reshape(CHUNK_SHAPE)
    return (np.arange(24) * 3 - 20).astype(dtype).reshape(CHUNK_SHAPE)


@pytest.mark.parametrize("chain", list(CHAINS))
@given(data=st.data())
@settings(FUZZ, max_examples=150)
def test_fuzz_chunk_decoder(chain: str, data: st.DataObject) -> None:
    """ChunkDecoder.decode on arbitrary bytes and on mutations of a chunk zarr-python
    encoded: only CorruptShardError (ChecksumError for crc32c), naming the array, key and
    chunk; a chunk whose last codec is crc32c decodes to the original or not at all."""
    codecs, zdtype, fill = CHAINS[chain]
    dec = ChunkDecoder(codecs, CHUNK_SHAPE, zdtype, fill, array="v")
    values = _chunk_values(zdtype)
    original = ChunkEncoder(codecs, CHUNK_SHAPE, zdtype, fill, array="v")._zarr_encode(values)
    raw = data.draw(st.binary(max_size=300) | mutated(original), label="chunk")
    if chain.startswith("blosc"):
        # such frames crash the process (test_corrupt_blosc_chunk_does_not_crash)
        assume(not blosc_header_lies(raw))
    try:
        out = dec.decode(raw, key=KEY, chunk=(1, 0))
    except ShardwiseError as e:
        event(type(e).__name__)
        assert isinstance(e, CorruptShardError), repr(e)
        assert (e.array, e.key) == ("v", KEY), repr(e)
        if not chain.startswith("nested"):  # see test_nested_shard_errors_name_the_chunk
            assert e.chunk == (1, 0), repr(e)
        return
    event("decoded")
    assert out.shape == CHUNK_SHAPE and out.dtype == values.dtype
    if isinstance(codecs[-1], Crc32cCodec):
        np.testing.assert_array_equal(out, values)


# -- fuzzing: mutated shard objects read through ArrayReader -----------------------------
@pytest.mark.parametrize("options", [None, RANGED], ids=["whole", "ranged"])
@pytest.mark.parametrize("config", list(SHARD_CONFIGS))
@given(data=st.data())
@FUZZ
def test_fuzz_mutated_shard_objects(config: str, options: Any, data: st.DataObject) -> None:
    """A real shard with flipped bytes, cut, with junk appended or inserted, read with the
    rest of the array: a ShardwiseError naming the array and that shard, or -- when the
    index and the inner chunks carry crc32c -- exactly the original data."""
    store, arr = SHARD_CONFIGS[config]
    contents = dict(store._store_dict)
    original = contents[KEY].to_bytes()
    contents[KEY] = cpu.Buffer.from_bytes(data.draw(mutated(original), label="shard"))
    reader = ArrayReader(MemoryStore(contents), ArrayInfo.from_metadata(arr.metadata, "v"), options)
    try:
        out = reader[...]
    except ShardwiseError as e:
        event(type(e).__name__)
        assert isinstance(e, CorruptShardError), repr(e)
        assert (e.array, e.key) == ("v", KEY), repr(e)
        return
    assert out.shape == SHAPE
    event("read: " + ("original" if np.array_equal(out, DATA) else "other data"))
    np.testing.assert_array_equal(np.delete(out, np.s_[8:], 0), DATA[:8])
    if config.endswith("-crc"):
        np.testing.assert_array_equal(out, DATA)


# -- fuzzing: the metadata reader --------------------------------------------------------
def _metadata_store() -> tuple[dict[str, Any], dict[str, Any]]:
    store = MemoryStore()
    arr = zarr.create_array(
        store,
        name="v",
        shape=SHAPE,
        dtype="f8",
        chunks=INNER,
        shards=SHARDS,
        compressors=[ZstdCodec(level=1), Crc32cCodec()],
        dimension_names=["y", "x"],
        fill_value=np.nan,
    )
    arr[:] = DATA
    contents = dict(store._store_dict)
    return contents, json.loads(contents["v/zarr.json"].to_bytes())


META_CONTENTS, META_DOC = _metadata_store()
META_PATHS: list[tuple[Any, ...]] = [
    ("shape",),
    ("data_type",),
    ("fill_value",),
    ("chunk_grid",),
    ("chunk_grid", "name"),
    ("chunk_grid", "configuration"),
    ("chunk_grid", "configuration", "chunk_shape"),
    ("chunk_key_encoding",),
    ("codecs",),
    ("codecs", 0),
    ("codecs", 0, "name"),
    ("codecs", 0, "configuration"),
    ("codecs", 0, "configuration", "chunk_shape"),
    ("codecs", 0, "configuration", "codecs"),
    ("codecs", 0, "configuration", "codecs", 1),
    ("codecs", 0, "configuration", "index_codecs"),
    ("codecs", 0, "configuration", "index_location"),
    ("dimension_names",),
    ("storage_transformers",),
    ("zarr_format",),
    ("node_type",),
]
json_leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**65), 2**65),
    st.integers(-3, 40),
    st.floats(),
    st.text(max_size=6),
    st.sampled_from(
        [
            *("bytes", "crc32c", "zstd", "sharding_indexed", "regular", "rectilinear"),
            *("float64", "int8", "uint64", "bool", "end", "start", "little", "big", "NaN"),
        ]
    ),
)
json_values = st.recursive(
    json_leaves,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.sampled_from(["name", "configuration", "chunk_shape", "codecs", "endian"])
            | st.text(max_size=4),
            inner,
            max_size=4,
        )
    ),
    max_leaves=10,
)
small_shapes = st.lists(st.integers(0, 40), max_size=3)
chunk_shapes = st.lists(st.integers(1, 16), min_size=1, max_size=3)
_b, _crc = {"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}
# values a real document could hold, so that mutated documents often open and reach the
# shards; the wild JSON values above try everything else
PLAUSIBLE: dict[tuple[Any, ...], st.SearchStrategy[Any]] = {
    ("shape",): small_shapes,
    ("data_type",): st.sampled_from(
        [
            *("float64", "float32", "float16", "int16", "uint8", "int64", "bool", "complex128"),
            *("string", "bytes"),
            {"name": "fixed_length_utf32", "configuration": {"length_bytes": 8}},
        ]
    ),
    ("fill_value",): st.sampled_from([0, 1.5, -1, "NaN", "Infinity", True, 2**70, "0x7fc00000"]),
    ("chunk_grid", "configuration", "chunk_shape"): chunk_shapes,
    ("chunk_grid",): st.builds(
        lambda shapes: {"name": "rectilinear", "configuration": {"chunk_shapes": shapes}},
        st.lists(st.lists(st.integers(1, 16), min_size=1, max_size=3), min_size=1, max_size=3),
    ),
    ("codecs", 0, "configuration", "chunk_shape"): chunk_shapes,
    ("codecs", 0, "configuration", "index_location"): st.sampled_from(["start", "end"]),
    ("codecs", 0, "configuration", "index_codecs"): st.sampled_from(
        [
            [_b],
            [_crc],
            [_b, _crc, _crc],
            [{"name": "bytes", "configuration": {"endian": "big"}}],
            [_b, {"name": "zstd", "configuration": {"level": 1, "checksum": False}}],
        ]
    ),
    ("codecs", 0, "configuration", "codecs"): st.sampled_from(
        [
            [_b],
            [_b, _crc],
            [_b, {"name": "gzip", "configuration": {"level": 1}}],
            [_crc],
            [{"name": "transpose", "configuration": {"order": [1, 0]}}, _b],
        ]
    ),
    ("dimension_names",): st.sampled_from([["y", "x"], ["x"], None, ["y", None], []]),
}


def _mutation(path: tuple[Any, ...]) -> st.SearchStrategy[tuple[Any, ...]]:
    if path not in PLAUSIBLE:
        return st.tuples(st.just(path), json_values, st.sampled_from([False, False, True]))
    plausible = PLAUSIBLE[path]
    values = st.one_of(plausible, plausible, plausible, json_values)  # 3:1
    return st.tuples(st.just(path), values, st.sampled_from([False, False, False, True]))


metadata_mutations = st.lists(
    st.sampled_from(META_PATHS + 2 * list(PLAUSIBLE)).flatmap(_mutation), min_size=1, max_size=3
)


def _mutated_metadata_store(mutations: list[tuple[Any, ...]]) -> MemoryStore:
    doc = json.loads(json.dumps(META_DOC))
    for path, value, delete in mutations:
        try:
            node = doc
            for p in path[:-1]:
                node = node[p]
            if delete:
                del node[path[-1]]
            else:
                node[path[-1]] = value
        except (KeyError, IndexError, TypeError):
            pass  # an earlier mutation removed the parent
    contents = dict(META_CONTENTS)
    contents["v/zarr.json"] = cpu.Buffer.from_bytes(json.dumps(doc).encode())
    return MemoryStore(contents)


class DelegatedReadError(Exception):
    """What zarr-python raised reading a variable shardwise hands to it (strings and
    other types outside ``backend._ENGINE_KINDS``, read by xarray's zarr wrapper)."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(repr(error))
        self.error = error


def _read_first(v: xr.DataArray, compute: bool = False) -> None:
    """Read one element; zarr-python's errors on variables it reads are wrapped."""
    try:
        sub = v[(0,) * v.ndim]
        _ = sub.compute() if compute else sub.values
    except ShardwiseError:
        raise
    except Exception as e:
        if v.dtype.kind in _ENGINE_KINDS:
            raise
        raise DelegatedReadError(e) from e


def _open_everything(store: MemoryStore) -> list[BaseException]:
    """Open the array through ArrayReader, the engine and (for small arrays) the fan-out
    graph, reading one element each; the exceptions raised."""
    errors: list[BaseException] = []

    def attempt(fn: Callable[[], Any]) -> None:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # zarr's repairs, xarray's decoding notes
                fn()
        except Exception as e:
            errors.append(e)

    def reader() -> None:
        r = ArrayReader.open(store, "v")
        if r.ndim and all(r.shape):
            r[(0,) * r.ndim]

    def engine() -> None:
        with xr.open_dataset(store, engine="shardwise", consolidated=False) as ds:
            for v in ds.data_vars.values():
                if v.ndim and v.size:
                    _read_first(v)

    def fanout() -> None:
        r = ArrayReader.open(store, "v")
        layout = r.info.layout
        inner = [d.inner_size(0) for d in layout.dims]
        if (
            not layout.ndim
            or math.prod(-(-n // c) for n, c in zip(r.shape, inner, strict=True)) > 4096
        ):
            return  # see test_open_dataset_huge_shape_does_not_hang
        with shardwise.open_dataset(store, chunks="inner", consolidated=False) as ds:
            for v in ds.data_vars.values():
                if v.size:
                    _read_first(v, compute=True)

    for fn in (reader, engine, fanout):
        attempt(fn)
    return errors


def _raised_in_shardwise(e: BaseException) -> bool:
    frames = traceback.extract_tb(e.__traceback__)
    return bool(frames) and "/shardwise/" in frames[-1].filename


@given(metadata_mutations)
@settings(FUZZ, max_examples=200)
def test_fuzz_metadata_no_internal_errors(mutations: list[tuple[Any, ...]]) -> None:
    """Mutated zarr.json documents: every exception is a ShardwiseError, or one that
    zarr-python or xarray raised (see the next test): nothing breaks inside shardwise."""
    errors = _open_everything(_mutated_metadata_store(mutations))
    if not errors:
        event("opened and read")
    for e in errors:
        event(f"{type(e).__module__.split('.')[0]}.{type(e).__name__}")
        if isinstance(e, DelegatedReadError):
            e = e.error
        if isinstance(e, ShardwiseError):
            assert e.array == "v", repr(e)
        else:
            assert not _raised_in_shardwise(e), "".join(traceback.format_exception(e))


@given(metadata_mutations)
@example([(("fill_value",), "abc", False)])
@settings(FUZZ, max_examples=60)
def test_fuzz_metadata_only_documented_errors(mutations: list[tuple[Any, ...]]) -> None:
    """Mutated zarr.json documents: only ShardwiseErrors escape, each naming the array
    and, when the document is at fault, its zarr.json (reads of variables zarr-python
    reads for shardwise, strings, raise zarr-python's ValueErrors on bad data)."""
    for e in _open_everything(_mutated_metadata_store(mutations)):
        if isinstance(e, DelegatedReadError) and isinstance(e.error, ValueError):
            continue
        if not isinstance(e, ShardwiseError):
            raise e
        assert e.array == "v", repr(e)
        if isinstance(e, UnsupportedArrayError | UnsupportedCodecError):
            assert e.key == "v/zarr.json", repr(e)
