"""Hostile inner chunks and index entries (issue 27): memory is sized by what the metadata
says a chunk holds, never by what its bytes claim.

- decompression bombs (zstd frames with and without a declared size, several frames,
  gzip members, zlib streams, blosc headers) in real stores written by zarr-python, read
  through ``ArrayReader`` (whole shards and ranged reads), the ``shardwise`` xarray engine
  and ``verify(decode=True)``: a ``CorruptShardError`` naming the array, key and inner
  chunk;
- the same with 4 GiB bombs in a child process under an address-space limit
  (``RLIMIT_AS``): a clean error, not a ``MemoryError`` or a kill;
- a hypothesis property: any frame decodes to exactly the chunk's size or raises
  ``CorruptShardError``;
- index entries that would overflow or ask for more than a chunk's worth of bytes:
  refused before any request is made.
"""

from __future__ import annotations

import functools
import gzip
import json
import shutil
import subprocess
import sys
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numcodecs
import numpy as np
import pytest
import zarr
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from zarr.codecs import (
    BloscCodec,
    BytesCodec,
    Crc32cCodec,
    GzipCodec,
    ShardingCodec,
    ZstdCodec,
)
from zarr.codecs.numcodecs import LZ4, Zlib
from zarr.core.dtype import Float64, UInt8

import shardwise
from shardwise import ArrayReader, ReadOptions
from shardwise.codecs import ChunkDecoder, ShardDecoder, decoded_size
from shardwise.codecs._decompress import compressed_bound
from shardwise.errors import CorruptShardError, TruncatedShardError
from shardwise.format.index import EMPTY, MAX_OBJECT, IndexFormat
from shardwise.testing import CountingStore
from test_corruption import READERS  # the four read paths: whole shards, ranges, engine, fan-out

zstandard = pytest.importorskip("zstandard")

E64 = 2**64 - 1
SHAPE, SHARDS, INNER = (32, 32), (16, 16), (8, 8)
CHUNK_BYTES = 8 * 8 * 8  # an inner chunk: (8, 8) float64
KEY, CHUNK = "v/c/1/0", (1, 0)  # the shard and inner chunk the cases replace
FMT = IndexFormat((2, 2))  # zarr-python's default index: at the end, with crc32c
DATA = np.arange(float(np.prod(SHAPE))).reshape(SHAPE) % 97
RANGED = ReadOptions(whole_shard_fraction=float("inf"), index_cache=False)


# -- bombs: small frames, huge output ------------------------------------------------------
def zstd_rle_frame(total: int, *, declare: bool, claim: int | None = None) -> bytes:
    """One zstd frame of ``total`` zero bytes in RLE blocks of 128 KiB (4 bytes each),
    built by hand in no time: with the content size in its header (``declare``; or
    ``claim`` there instead), or without (as a streaming compressor writes them)."""
    block = 128 << 10
    fhd = 0xC0 if declare else 0x00  # 8-byte content size field; not single-segment
    header = (0xFD2FB528).to_bytes(4, "little") + bytes([fhd, (17 - 10) << 3])
    if declare:
        header += (total if claim is None else claim).to_bytes(8, "little")
    blocks = []
    left = total
    while left:
        n = min(block, left)
        left -= n
        blocks.append(((n << 3) | (1 << 1) | int(left == 0)).to_bytes(3, "little") + b"\0")
    return header + b"".join(blocks)


def zstd_stream(data: bytes) -> bytes:
    """A frame from python-zstandard's streaming compressor: no content size."""
    cobj = zstandard.ZstdCompressor().compressobj()
    return cobj.compress(data) + cobj.flush()


_MiB64 = b"\0" * (64 << 20)


@functools.cache
def bombs() -> dict[str, tuple[str, bytes]]:
    """name -> (codec, frame): each decompresses to 4 MiB or more where an inner chunk
    holds 512 bytes, in fewer bytes than an index entry may claim for one (else the
    index check refuses it first: test_bomb_larger_than_any_chunk)."""
    small_zstd = zstandard.ZstdCompressor().compress(_MiB64)  # 2,067 bytes
    gz = gzip.compress(b"\0" * (1 << 20), 9)  # 1,051 bytes
    return {
        "zstd-declared": ("zstd", small_zstd),
        "zstd-no-size": ("zstd", zstd_stream(_MiB64)),
        "zstd-declares-the-chunk-size-holds-more": (
            "zstd",  # a first frame of exactly 512 bytes, then 64 MiB more
            numcodecs.Zstd().encode(DATA[:8, :8].copy()) + small_zstd,
        ),
        "zstd-declares-the-chunk-size-then-a-stream": (
            "zstd",
            numcodecs.Zstd().encode(DATA[:8, :8].copy()) + zstd_stream(_MiB64),
        ),
        "zstd-frames": ("zstd", zstd_stream(b"\0" * (1 << 20)) * 64),
        "gzip": ("gzip", gzip.compress(b"\0" * (4 << 20), 9)),
        "gzip-members": ("gzip", gz * 4),
        "gzip-size-mod-2**32": ("gzip", _patch_isize(gz, CHUNK_BYTES)),
        "blosc-header": ("blosc", _blosc_claiming(2**32 - 1)),
        "zstd-crc32c": ("zstd+crc32c", _with_crc(small_zstd)),
        "crc32c-zstd": ("crc32c+zstd", zstd_stream(_MiB64)),
    }


def _patch_isize(member: bytes, size: int) -> bytes:
    """A gzip member whose trailer claims ``size`` bytes (ISIZE, modulo 2**32)."""
    return member[:-4] + (size % 2**32).to_bytes(4, "little")


def _blosc_claiming(nbytes: int) -> bytes:
    """A real blosc frame of the chunk whose header claims ``nbytes`` decompressed."""
    frame = bytearray(numcodecs.Blosc(cname="lz4").encode(DATA[:8, :8].copy()))
    frame[4:8] = (nbytes % 2**32).to_bytes(4, "little")
    return bytes(frame)


def _with_crc(frame: bytes) -> bytes:
    import crc32c

    return frame + crc32c.crc32c(frame).to_bytes(4, "little")


COMPRESSORS: dict[str, Callable[[], list[Any]]] = {
    "zstd": lambda: [ZstdCodec(level=1)],
    "gzip": lambda: [GzipCodec(level=1)],
    "blosc": lambda: [BloscCodec(cname="lz4")],
    "zstd+crc32c": lambda: [ZstdCodec(level=1), Crc32cCodec()],
    "crc32c+zstd": lambda: [Crc32cCodec(), ZstdCodec(level=1)],
}


# -- stores ------------------------------------------------------------------------------
def write_store(
    path: Path,
    codec: str,
    shape: tuple[int, ...] = SHAPE,
    inner: tuple[int, ...] = INNER,
    shards: tuple[int, ...] = SHARDS,
) -> Path:
    """A float64 array "v" written by zarr-python (the data: ``DATA``'s recipe)."""
    arr = zarr.create_array(
        path,
        name="v",
        shape=shape,
        chunks=inner,
        shards=shards,
        dtype="f8",
        compressors=COMPRESSORS[codec](),
        dimension_names=["y", "x"],
        fill_value=np.nan,
    )
    arr[:] = np.arange(float(np.prod(shape))).reshape(shape) % 97
    return path


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    """Stores written once per configuration; tests change copies of them."""
    root = tmp_path_factory.mktemp("pristine")
    cache: dict[tuple[Any, ...], Path] = {}

    def get(codec: str, **layout: Any) -> Path:
        k = (codec, *sorted(layout.items()))
        if k not in cache:
            cache[k] = write_store(root / f"s{len(cache)}.zarr", codec, **layout)
        return cache[k]

    return get


def replace_chunk(shard: Path, inner: tuple[int, ...], data: bytes, fmt: IndexFormat = FMT) -> None:
    """Rewrite a shard object with inner chunk ``inner`` replaced by ``data``: the inner
    chunks laid out again in C order, with a fresh index (and its crc32c)."""
    raw = shard.read_bytes()
    table = fmt.decode(fmt.split(raw))
    body, new = bytearray(), fmt.empty_table()
    for idx in np.ndindex(*fmt.chunks_per_shard):
        offset, nbytes = (int(x) for x in table[idx])
        piece = data if idx == inner else None if offset == E64 else raw[offset : offset + nbytes]
        if piece is not None:
            new[idx] = (len(body), len(piece))
            body += piece
    shard.write_bytes(bytes(body) + fmt.encode(new))


def set_entry(shard: Path, inner: tuple[int, ...], offset: int, nbytes: int) -> None:
    raw = bytearray(shard.read_bytes())
    table = FMT.decode(FMT.split(bytes(raw))).copy()
    table[inner] = (offset, nbytes)
    raw[-FMT.nbytes :] = FMT.encode(table)
    shard.write_bytes(bytes(raw))


def raised(read: Callable[[Path], Any], path: Path, cls: type[Exception]) -> Any:
    with pytest.raises(cls) as info:
        read(path)
    err = info.value
    assert type(err) is cls, repr(err)
    assert (err.array, err.key, err.chunk) == ("v", KEY, CHUNK), repr(err)
    return err


# -- bombs in real stores ----------------------------------------------------------------
@pytest.mark.parametrize("reader", list(READERS))
@pytest.mark.parametrize("bomb", list(bombs()))
def test_bomb_in_a_shard_is_a_corrupt_chunk(tmp_path, pristine, bomb, reader) -> None:
    codec, frame = bombs()[bomb]
    assert len(frame) <= compressed_bound(CHUNK_BYTES)  # the index check lets it pass
    path = tmp_path / "s.zarr"
    shutil.copytree(pristine(codec), path)
    replace_chunk(path / KEY, CHUNK, frame)
    err = raised(READERS[reader], path, CorruptShardError)
    assert "decompress" in err.problem and "bomb" in str(err), err
    assert f"{CHUNK_BYTES} bytes" in str(err) or f"{CHUNK_BYTES + 4} bytes" in str(err), err


@pytest.mark.parametrize("reader", list(READERS))
def test_bomb_larger_than_any_chunk(tmp_path, pristine, reader) -> None:
    """A frame longer than the chunk's codecs make one (65 KB of gzip, 64 MiB of
    zeros): the index entry is refused before the chunk is read or decompressed."""
    path = tmp_path / "s.zarr"
    shutil.copytree(pristine("gzip"), path)
    replace_chunk(path / KEY, CHUNK, gzip.compress(_MiB64, 9))
    err = raised(READERS[reader], path, CorruptShardError)
    assert "larger than its codecs make one" in err.problem


@pytest.mark.parametrize("bomb", ["zstd-declared", "gzip", "blosc-header"])
def test_verify_decode_reports_the_bomb(tmp_path, pristine, bomb) -> None:
    codec, frame = bombs()[bomb]
    path = tmp_path / "s.zarr"
    shutil.copytree(pristine(codec), path)
    replace_chunk(path / KEY, CHUNK, frame)
    assert shardwise.verify(path).ok  # the index is sound, and there is no crc32c
    report = shardwise.verify(path, decode=True)
    assert report.bad_keys == [KEY]
    (problem,) = report.problems
    assert (problem.chunk, problem.error) == (CHUNK, "CorruptShardError")
    assert "decompresses to more than" in problem.message


def test_declared_size_is_refused_before_decompressing(monkeypatch) -> None:
    """A zstd frame or blosc header claiming more than the chunk never reaches the
    decompressor."""
    import shardwise.codecs._decompress as decompress

    def fail(*args: Any) -> Any:
        raise AssertionError("decompressed")

    monkeypatch.setattr(decompress, "zstd_decompress_into", fail)
    monkeypatch.setattr(numcodecs.Blosc, "decode", fail)
    claims = {
        "zstd": zstd_rle_frame(1 << 20, declare=True, claim=1 << 40),
        "blosc": _blosc_claiming(1 << 31),
    }
    for name, frame in claims.items():
        dec = _decoder([BytesCodec(), ZstdCodec() if name == "zstd" else BloscCodec()])
        with pytest.raises(CorruptShardError, match="claims"):
            dec.decode(frame, key=KEY, chunk=CHUNK)
        dest = np.empty(INNER)
        with pytest.raises(CorruptShardError, match="claims"):
            dec.decode_into(frame, dest, key=KEY, chunk=CHUNK)


def _decoder(codecs: list[Any], shape: tuple[int, ...] = INNER, zdtype: Any = None) -> ChunkDecoder:
    return ChunkDecoder(codecs, shape, zdtype or Float64(), 0.0, array="v")


def test_zlib_of_a_zarr_v2_array(tmp_path) -> None:
    """numcodecs' zlib (Zarr v2 arrays, the 2022 draft) is decompressed with a bound too."""
    arr = zarr.create_array(
        tmp_path / "v2.zarr",
        name="v",
        shape=SHAPE,
        chunks=INNER,
        dtype="f8",
        zarr_format=2,
        compressors=numcodecs.Zlib(level=1),
        fill_value=0.0,
    )
    arr[:] = DATA
    chunk = tmp_path / "v2.zarr" / "v" / "1.0"
    chunk.write_bytes(zlib.compress(_MiB64, 9))
    reader = ArrayReader.open(tmp_path / "v2.zarr", "v")
    assert reader.decoder((1, 0)).fast  # shardwise decodes it, not zarr-python
    with pytest.raises(CorruptShardError, match="zlib data decompresses to more") as info:
        reader[...]
    assert info.value.key == "v/1.0"  # (an unsharded array's chunk is its inner chunk 0)


def _nested_shard(inner_codecs: list[Any], chunk: bytes) -> tuple[ShardingCodec, bytes]:
    """A nested shard of 2 x 2 chunks of (4, 4) float64 whose chunk (0, 1) is ``chunk``."""
    codec = ShardingCodec(chunk_shape=(4, 4), codecs=inner_codecs)
    good = numcodecs.Zstd().encode(np.zeros((4, 4)))
    fmt = IndexFormat((2, 2))
    body, table = b"", fmt.empty_table()
    for idx in np.ndindex(2, 2):
        piece = chunk if idx == (0, 1) else good
        table[idx] = (len(body), len(piece))
        body += piece
    return codec, body + fmt.encode(table)


def test_bomb_in_a_nested_shard() -> None:
    codec, nested = _nested_shard([BytesCodec(), ZstdCodec()], zstd_stream(_MiB64))
    dec = _decoder([codec])
    with pytest.raises(CorruptShardError, match=r"more than.*exactly 128 bytes") as info:
        dec.decode(nested, key=KEY, chunk=CHUNK)
    assert (info.value.key, info.value.chunk) == (KEY, CHUNK)
    # a nested shard compressed as a whole: at most what the nested shard can take
    dec = _decoder([codec, ZstdCodec()])
    bound = ShardDecoder(codec, INNER, Float64(), 0.0).max_nbytes
    per_chunk = compressed_bound(4 * 4 * 8)
    assert bound == compressed_bound(IndexFormat((2, 2)).nbytes + 4 * per_chunk)
    good = numcodecs.Zstd().encode(
        np.frombuffer(
            _nested_shard([BytesCodec(), ZstdCodec()], numcodecs.Zstd().encode(np.ones((4, 4))))[1],
            np.uint8,
        )
    )
    np.testing.assert_array_equal(dec.decode(good)[:4, 4:], 1.0)
    with pytest.raises(CorruptShardError, match=f"at most {bound} bytes") as info:
        dec.decode(zstd_stream(_MiB64), key=KEY, chunk=CHUNK)
    assert info.value.chunk == CHUNK


def test_zarr_pipeline_chains_check_the_decoded_shape() -> None:
    """Chains zarr-python decodes whole (here: numcodecs' bz2) are checked for the
    decoded shape; their codecs' memory is zarr-python's own."""
    from zarr.codecs.numcodecs import BZ2

    dec = _decoder([BytesCodec(), BZ2()])
    assert not dec.fast and dec.max_encoded is None and not dec._tail
    values = np.arange(64.0).reshape(8, 8)
    np.testing.assert_array_equal(dec.decode(numcodecs.BZ2().encode(values)), values)
    with pytest.raises(CorruptShardError, match=r"does not decode|wrong size"):
        dec.decode(numcodecs.BZ2().encode(np.arange(80.0)), key=KEY, chunk=CHUNK)


def _tail_chains() -> dict[str, tuple[list[Any], int, bool]]:
    """Chains zarr-python decodes, ending in a compressor shardwise bounds: the codecs,
    the bound of the compressor's output, and whether it is exact."""
    from zarr.codecs.numcodecs import Delta, FixedScaleOffset, Shuffle

    scaled = FixedScaleOffset(offset=0, scale=10, dtype="<f8", astype="<i2")
    return {
        "delta": ([Delta(dtype="<f8"), BytesCodec(), ZstdCodec()], CHUNK_BYTES, True),
        "scale-offset-int16": ([scaled, BytesCodec(), GzipCodec()], CHUNK_BYTES // 4, True),
        "shuffle": (
            [BytesCodec(), Shuffle(elementsize=8), ZstdCodec()],
            compressed_bound(CHUNK_BYTES),
            False,
        ),
    }


@pytest.mark.parametrize("chain", list(_tail_chains()))
def test_compressor_ending_a_zarr_pipeline_chain_is_bounded(chain) -> None:
    """Zarr v2 filters (numcodecs' delta, fixed scale-offset...) before a compressor:
    zarr-python decodes the filters, shardwise the compressor, with a bound."""
    from shardwise.codecs import ChunkEncoder

    codecs, limit, exact = _tail_chains()[chain]
    dec = _decoder(codecs)
    assert not dec.fast and len(dec._tail) == 1 and dec._head == tuple(codecs[:-1])
    values = np.arange(64.0).reshape(8, 8)
    encoded = ChunkEncoder(codecs, INNER, Float64(), 0.0)._zarr_encode(values)
    np.testing.assert_array_equal(dec.decode(encoded), values)
    bomb = zstd_stream(_MiB64) if isinstance(codecs[-1], ZstdCodec) else gzip.compress(_MiB64)
    expected = f"{'exactly' if exact else 'at most'} {limit} bytes"
    with pytest.raises(CorruptShardError, match=f"more than the chunk holds; expected {expected}"):
        dec.decode(bomb, key=KEY, chunk=CHUNK)


def test_lz4_header_is_checked_before_decompressing() -> None:
    dec = _decoder([BytesCodec(), LZ4()])
    assert dec.fast and dec.can_decode_into
    values = np.arange(64.0).reshape(8, 8)
    frame = numcodecs.LZ4().encode(values)
    np.testing.assert_array_equal(dec.decode(frame), values)
    dest = np.empty(INNER)
    assert dec.decode_into(frame, dest) and np.array_equal(dest, values)
    big = numcodecs.LZ4().encode(np.zeros(1 << 20))  # declares 8 MiB
    for decode in (dec.decode, lambda f, **kw: dec.decode_into(f, dest, **kw)):
        with pytest.raises(CorruptShardError, match="claims 8388608 bytes") as info:
            decode(big, key=KEY, chunk=CHUNK)
        assert info.value.chunk == CHUNK


# -- 4 GiB bombs under an address-space limit --------------------------------------------
CHILD = """
import json, resource, sys
import numpy as np, xarray as xr
import shardwise
from shardwise import ArrayReader, ReadOptions

clean, bombs = sys.argv[1], json.loads(sys.argv[2])
ranged = ReadOptions(whole_shard_fraction=float("inf"), index_cache=False)
reads = {
    "reader": lambda p: ArrayReader.open(p, "v")[...],
    "ranged": lambda p: ArrayReader.open(p, "v", options=ranged)[...],
    "engine": lambda p: xr.open_dataset(p, engine="shardwise", chunks={}).compute(),
}
for read in reads.values():  # start the threads and pools the reads use
    read(clean)

def vm_size():
    with open("/proc/self/status") as f:
        line = next(line for line in f if line.startswith("VmSize:"))
    return int(line.split()[1]) * 1024

limit = vm_size() + HEADROOM
resource.setrlimit(resource.RLIMIT_AS, (limit, resource.getrlimit(resource.RLIMIT_AS)[1]))
try:
    np.ones(1 << 30, dtype=np.uint8)  # 1 GiB: the limit holds
    print("NO LIMIT")
except MemoryError:
    pass
for path in bombs:
    for name, read in reads.items():
        try:
            read(path)
            print(json.dumps([path, name, "no error"]))
        except shardwise.errors.CorruptShardError as e:
            print(json.dumps([path, name, type(e).__name__, e.key, list(e.chunk or ()), str(e)]))
        except BaseException as e:
            print(json.dumps([path, name, type(e).__name__, str(e)[:200]]))
"""

GiB4 = 4 << 30


BIG = {"shape": (1024, 1024), "inner": (512, 1024), "shards": (1024, 1024)}  # 4 MiB chunks


@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_AS and /proc: Linux")
def test_four_gib_bombs_under_an_address_space_limit(tmp_path, pristine) -> None:
    """Inner chunks of 4 MiB (so that even 4 MB of gzip is a length an index entry may
    claim), each replaced by a frame of 4 GiB, read by a child process allowed 384 MiB
    more address space than it has after a first read: a CorruptShardError each time."""
    member = gzip.compress(b"\0" * (256 << 20), 9)  # 256 KiB of gzip, 256 MiB of zeros
    cases = {
        "zstd": [
            zstd_rle_frame(GiB4, declare=True),
            zstd_rle_frame(GiB4, declare=False),
            zstd_rle_frame(GiB4 // 64, declare=False) * 64,  # several frames
        ],
        "gzip": [member * 16],
        "blosc": [_blosc_claiming(2**31 - 1)],  # (numcodecs reads the size as a signed int)
    }
    paths = []
    for codec, frames in cases.items():
        for i, frame in enumerate(frames):
            path = tmp_path / f"{codec}-{i}.zarr"
            shutil.copytree(pristine(codec, **BIG), path)
            replace_chunk(path / "v/c/0/0", CHUNK, frame, IndexFormat((2, 1)))
            paths.append(str(path))
    code = CHILD.replace("HEADROOM", str(384 << 20))
    proc = subprocess.run(
        [sys.executable, "-c", code, str(pristine("zstd", **BIG)), json.dumps(paths)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert "NO LIMIT" not in lines
    results = [json.loads(line) for line in lines]
    assert len(results) == 3 * len(paths), proc.stdout
    for path, read, *outcome in results:
        assert outcome[:3] == ["CorruptShardError", "v/c/0/0", list(CHUNK)], (path, read, outcome)
        # refused as a bomb, not a MemoryError wrapped as an undecodable chunk
        assert "decompresses to more than the chunk holds" in outcome[3], (path, read, outcome)
        assert "MemoryError" not in outcome[3], (path, read, outcome)


# -- the decode bound as a property --------------------------------------------------------
ENCODERS: dict[str, Callable[[bytes], bytes]] = {
    "zstd": lambda b: numcodecs.Zstd(level=1).encode(b),
    "zstd-stream": zstd_stream,
    "zstd-frames": lambda b: (
        zstd_stream(b[: len(b) // 2]) + numcodecs.Zstd().encode(b[len(b) // 2 :])
    ),
    "gzip": lambda b: gzip.compress(b, 1),
    "gzip-members": lambda b: gzip.compress(b[:7], 1) + b"\0\0" + gzip.compress(b[7:], 1),
    "zlib": lambda b: zlib.compress(b, 1),
    "blosc": lambda b: numcodecs.Blosc(cname="lz4").encode(b),
    "lz4": lambda b: numcodecs.LZ4().encode(b),
}
CODEC_OF = {
    "zstd": ZstdCodec(),
    "gzip": GzipCodec(),
    "zlib": Zlib(),
    "blosc": BloscCodec(),
    "lz4": LZ4(),
}


@st.composite
def frames(draw: st.DrawFn, expected: int) -> tuple[str, bytes, bytes | None]:
    """(codec, frame, the payload when the frame is a well-formed encoding of it)."""
    encoder = draw(st.sampled_from(list(ENCODERS)))
    codec = encoder.split("-")[0]
    kind = draw(
        st.sampled_from(["exact", "exact", "sized", "bomb", "truncated", "flipped", "random"])
    )
    event(f"{encoder} {kind}")
    if kind == "random":
        return codec, draw(st.binary(max_size=2 * expected + 64)), None
    if kind == "bomb":
        payload = bytes(draw(st.integers(expected + 1, 64 * expected + 4096)))
    elif kind == "sized":
        payload = draw(st.binary(min_size=0, max_size=2 * expected + 16))
    else:
        payload = draw(st.binary(min_size=expected, max_size=expected))
    frame = ENCODERS[encoder](payload)
    if kind == "truncated":
        return codec, frame[: draw(st.integers(0, max(len(frame) - 1, 0)))], None
    if kind == "flipped":
        at = draw(st.integers(0, len(frame) - 1))
        flipped = bytearray(frame)
        flipped[at] ^= draw(st.integers(1, 255))
        return codec, bytes(flipped), None
    return codec, frame, payload


@given(data=st.data())
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_any_frame_decodes_to_the_chunk_size_or_is_a_corrupt_chunk(data) -> None:
    expected = data.draw(st.integers(1, 2048), label="expected")
    codec, frame, payload = data.draw(frames(expected), label="frame")
    dec = ChunkDecoder([BytesCodec(), CODEC_OF[codec]], (expected,), UInt8(), 0, array="v")
    assert dec.can_decode_into
    try:
        out = dec.decode(frame, key=KEY, chunk=CHUNK, scratch=data.draw(st.booleans()))
    except CorruptShardError as e:
        assert (e.array, e.key, e.chunk) == ("v", KEY, CHUNK), repr(e)
        assert payload is None or len(payload) != expected, f"refused a good frame: {e}"
    else:
        assert out.shape == (expected,) and out.dtype == np.uint8
        if payload is not None:
            assert len(payload) == expected and out.tobytes() == payload
    dest = np.full(expected, 0xAA, dtype=np.uint8)
    try:
        done = dec.decode_into(frame, dest, key=KEY, chunk=CHUNK)
    except CorruptShardError as e:
        assert (e.array, e.key, e.chunk) == ("v", KEY, CHUNK), repr(e)
        assert payload is None or len(payload) != expected, f"refused a good frame: {e}"
    else:
        if payload is not None and len(payload) == expected:
            # a good chunk decodes in place, but where its first zstd frame declares less
            # than the chunk (several frames): then decode_into declines, as documented
            first = decoded_size("zstd", frame) if codec == "zstd" else None
            declines = first is not None and first < expected
            assert (done and dest.tobytes() == payload) or (declines and not done)
        if not done:
            assert (dest == 0xAA).all()


def test_compressed_bound_holds_for_incompressible_chunks() -> None:
    """What each compressor makes of random bytes stays within the bound an index entry
    and a stage between two compressors are held to."""
    rng = np.random.default_rng(0)
    for n in [0, 1, 100, 4096, 1 << 16, (1 << 20) + 7]:
        raw = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
        for encode in ENCODERS.values():
            assert len(encode(raw)) <= compressed_bound(n), (encode, n)


# -- index entries that overflow or claim too much ---------------------------------------
@pytest.mark.parametrize("reader", list(READERS))
@pytest.mark.parametrize(
    ("offset", "nbytes", "cls"),
    [
        (2**64 - 2, 1, TruncatedShardError),  # was zarr's "cannot fit 'int' into an offset"
        (MAX_OBJECT - 10, 10, TruncatedShardError),
        (2**63, 2**63 + 5, CorruptShardError),  # overflows 64 bits
        (0, 2**40, TruncatedShardError),  # more than the object, or than a chunk can take
    ],
    ids=["2**64-2", "near-2**63", "overflow", "huge-nbytes"],
)
def test_entries_past_any_object_are_refused(tmp_path, pristine, offset, nbytes, cls, reader):
    path = tmp_path / "s.zarr"
    shutil.copytree(pristine("zstd"), path)
    set_entry(path / KEY, CHUNK, offset, nbytes)
    # (every reader knows the object's size: a whole shard's, or the one the read of its
    # index came with; an entry that outruns it is a truncation before it is too large
    # for a chunk)
    err = raised(READERS[reader], path, cls)
    assert f"offset={offset}, nbytes={nbytes}" in str(err)


@pytest.mark.parametrize(("offset", "nbytes"), [(2**64 - 2, 1), (0, 2**40), (MAX_OBJECT - 10, 10)])
def test_bad_entries_are_refused_before_any_chunk_request(tmp_path, pristine, offset, nbytes):
    path = tmp_path / "s.zarr"
    shutil.copytree(pristine("zstd"), path)
    set_entry(path / KEY, CHUNK, offset, nbytes)
    store = CountingStore(zarr.storage.LocalStore(path, read_only=True))
    reader = ArrayReader.open(store, "v", options=RANGED)
    store.log.clear()
    with pytest.raises(CorruptShardError) as info:
        reader[24:32, 0:8]  # inner chunk (1, 0) of shard (1, 0)
    assert (info.value.key, info.value.chunk) == (KEY, CHUNK)
    assert [r.byte_range for r in store.log.gets(KEY)] == [f"last {FMT.nbytes}"]


def test_decode_index_bounds() -> None:
    codec = ShardingCodec(chunk_shape=(8, 8), codecs=[BytesCodec(), ZstdCodec()])
    dec = ShardDecoder(codec, (16, 16), Float64(), 0.0, array="v")
    assert dec.chunk.max_encoded == compressed_bound(CHUNK_BYTES)
    table = FMT.empty_table()
    table[0, 0] = (0, compressed_bound(CHUNK_BYTES))
    dec.decode_index(FMT.encode(table), shard_nbytes=None, key=KEY)  # the most allowed
    table[0, 0] = (0, compressed_bound(CHUNK_BYTES) + 1)
    with pytest.raises(CorruptShardError, match="larger than its codecs make one") as info:
        dec.decode_index(FMT.encode(table), shard_nbytes=None, key=KEY)
    assert (info.value.key, info.value.chunk) == (KEY, (0, 0))
    table[0, 0] = (MAX_OBJECT - FMT.nbytes - 100, 100)  # ends where the index must begin
    dec.decode_index(FMT.encode(table), shard_nbytes=None, key=KEY)
    table[0, 0] = (MAX_OBJECT - FMT.nbytes - 99, 100)
    with pytest.raises(TruncatedShardError, match="past the end of any shard object"):
        dec.decode_index(FMT.encode(table), shard_nbytes=None, key=KEY)
    table[0, 0] = EMPTY
    table[1, 1] = (2**64 - 2, 1)
    with pytest.raises(TruncatedShardError) as info:
        dec.decode_index(FMT.encode(table), shard_nbytes=None, key=KEY)
    assert info.value.chunk == (1, 1)


@pytest.mark.parametrize("reader", ["ranged", "fanout"])
def test_entry_past_the_file_systems_largest_file(tmp_path, pristine, reader) -> None:
    """An entry inside the largest object a store may hold (2**63 - 1 bytes) but past
    the file system's (ext4: 16 TiB): the index alone cannot tell, the read must."""
    path = tmp_path / "s.zarr"
    shutil.copytree(pristine("zstd"), path)
    set_entry(path / KEY, CHUNK, 2**50, 10)
    raised(READERS[reader], path, TruncatedShardError)
