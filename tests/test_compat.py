"""Arrays written by zarr-python and by tensorstore read identically through ArrayReader.

Each case is a small array described by :class:`Case`; the same case is written by both
writers where both can write it (tensorstore has no rectilinear grids and no numcodecs
codecs). The parameter lists are a sum of axes (dtype, index location, codecs, shapes,
missing data, fill values, unsharded, index codecs, chunk key encodings, rectilinear),
not their product.

Every case is read twice: with the default :class:`ReadOptions` (whole-shard reads, then
the cached index for the partial selections) and with options that force the
index-then-ranges path (no whole-shard reads, no index cache, no coalescing).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
import zarr.codecs as zc

from shardwise import _compat
from shardwise.io.reader import ArrayReader
from shardwise.io.stores import ReadOptions

ts = pytest.importorskip("tensorstore")

EMPTY = 2**64 - 1
RECTILINEAR = {"array.rectilinear_chunks": True}

# the default options read whole shards; these force the index + byte-range path
INDEX_PATH = ReadOptions(whole_shard_fraction=float("inf"), index_cache=False, coalesce_gap=0)


@dataclass(frozen=True)
class Case:
    dtype: str = "int32"
    shape: tuple[int, ...] = (13, 10)
    # shard shape (the chunk shape when ``inner`` is None); per-dimension size lists
    # make a rectilinear grid
    shard: tuple[Any, ...] = (8, 6)
    inner: tuple[int, ...] | None = (4, 3)
    index_location: str = "end"
    index_endian: str = "little"
    index_crc: bool = True
    transpose: tuple[int, ...] | None = None
    endian: str = "little"
    nested: tuple[int, ...] | None = None  # inner chunks are themselves sharded
    compressors: tuple[str, ...] = ()
    fallback: str | None = None  # a codec only zarr-python's pipeline decodes
    fill: Any = 0
    # "full": every element written; "sparse": fill-valued inner chunks (and whole
    # shards) are not stored; "partial": only a region is written, other shards missing
    write: str = "full"
    resize: tuple[int, ...] | None = None  # zarr only: shrink after writing
    key_encoding: tuple[str, str] = ("default", "/")  # chunk key encoding and separator
    name: str = "arr"  # the array's path in the store
    seed: int = 0

    @property
    def rectilinear(self) -> bool:
        return any(not isinstance(s, int) for s in self.shard)

    @property
    def default_index_codecs(self) -> bool:
        return self.index_endian == "little" and self.index_crc


def _p(case: Case, id: str) -> Any:
    return pytest.param(case, id=id)


# zarr-python 3.1 (the reference here) reads no nested shards, writes no sharding codec
# among other codecs and indexes no sharded 0-d array; 3.2 on does
ZARR_3_1 = pytest.mark.skipif(
    _compat.version("zarr") < (3, 2), reason="zarr-python 3.1 cannot do it (the reference)"
)


def _z(case: Case, id: str) -> Any:
    """A case zarr-python 3.1 cannot read back."""
    return pytest.param(case, id=id, marks=ZARR_3_1)


def _r(case: Case, id: str) -> Any:
    """A case with a rectilinear grid (zarr-python >= 3.2)."""
    return pytest.param(case, id=id, marks=pytest.mark.rectilinear)


# -- the axes ----------------------------------------------------------------------------
DTYPES = [
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float32",
    "float64",
    "complex64",
]
_FILL_FOR = {"bool": True, "float32": np.nan, "float64": -1.5, "complex64": 1 - 2j}
DTYPE_CASES = [
    _p(Case(dtype=d, fill=_FILL_FOR.get(d, 7), write="sparse", seed=i), f"dtype-{d}")
    for i, d in enumerate(DTYPES)
]

INDEX_LOCATION_CASES = [
    _p(Case(index_location=loc, write="sparse", compressors=("zstd",)), f"index-{loc}")
    for loc in ("start", "end")
]

CODEC_CASES = [
    _p(Case(), "codec-bytes-only"),
    _p(Case(compressors=("zstd",)), "codec-zstd"),
    _p(Case(compressors=("gzip",)), "codec-gzip"),
    _p(Case(dtype="float64", compressors=("blosc",), write="sparse"), "codec-blosc"),
    _p(Case(compressors=("crc32c",)), "codec-crc32c"),
    _p(Case(compressors=("zstd", "crc32c"), index_location="start"), "codec-zstd-crc32c"),
    _p(
        Case(shape=(5, 9, 7), shard=(4, 6, 6), inner=(2, 3, 3), transpose=(2, 0, 1)),
        "codec-transpose",
    ),
    _p(Case(dtype="float64", endian="big", compressors=("gzip",)), "codec-big-endian"),
    _p(Case(dtype="complex64", endian="big", fill=np.nan), "codec-big-endian-complex"),
    _p(
        Case(
            dtype="uint16",
            shape=(5, 9, 7),
            shard=(4, 6, 6),
            inner=(2, 3, 3),
            transpose=(1, 2, 0),
            endian="big",
            compressors=("zstd", "crc32c"),
        ),
        "codec-transpose-big-endian-zstd-crc32c",
    ),
    _z(Case(shape=(13, 14), shard=(8, 12), inner=(4, 6), nested=(2, 3)), "codec-nested"),
    _z(
        Case(
            dtype="float32",
            shape=(13, 14),
            shard=(8, 12),
            inner=(4, 6),
            nested=(2, 3),
            compressors=("zstd",),
            fill=np.nan,
            write="sparse",
            index_location="start",
        ),
        "codec-nested-sparse-start",
    ),
]

SHAPE_CASES = [
    _p(Case(shape=(37,), shard=(16,), inner=(4,)), "shape-1d"),
    _p(Case(shape=(3,), shard=(16,), inner=(4,)), "shape-1d-smaller-than-inner-chunk"),
    _p(Case(shape=(15, 11), shard=(8, 8), inner=(4, 2)), "shape-2d"),
    _p(Case(shape=(3, 2), shard=(8, 8), inner=(4, 4)), "shape-2d-smaller-than-shard"),
    _p(Case(shape=(5, 9, 7), shard=(4, 4, 6), inner=(2, 2, 3)), "shape-3d"),
    _p(Case(shape=(9, 1, 17), shard=(3, 1, 8), inner=(3, 1, 2)), "shape-3d-unit-dim"),
    _p(Case(shape=(0, 7), shard=(4, 4), inner=(2, 2)), "shape-empty"),
]

MISSING_CASES = [
    _p(Case(write="partial"), "missing-shards"),
    _p(Case(write="sparse"), "missing-inner-chunks"),
    _p(Case(write="partial", fill=-3, index_location="start"), "missing-shards-start"),
    _p(
        Case(dtype="float64", shape=(5, 9, 7), shard=(4, 4, 6), inner=(2, 2, 3), write="sparse"),
        "missing-inner-chunks-3d",
    ),
]

FILL_CASES = [
    _p(Case(dtype="float32", fill=np.nan, write="partial"), "fill-nan32"),
    _p(Case(dtype="float64", fill=np.nan, write="sparse", compressors=("zstd",)), "fill-nan64"),
    _p(Case(dtype="int16", fill=-12345, write="sparse"), "fill-int-negative"),
    _p(Case(dtype="uint64", fill=2**64 - 2, write="partial"), "fill-uint64-large"),
    _p(Case(dtype="bool", fill=True, write="partial"), "fill-bool-true"),
]

KEY_ENCODING_CASES = [
    _p(Case(key_encoding=("default", "."), write="partial"), "key-encoding-default-dot"),
    _p(Case(key_encoding=("v2", "."), write="sparse"), "key-encoding-v2-dot"),
    _p(Case(key_encoding=("v2", "/"), inner=None, shard=(4, 3)), "key-encoding-v2-slash-unsharded"),
    _p(Case(name="group/sub/arr", write="sparse"), "nested-array-path"),
]

UNSHARDED_CASES = [
    _p(Case(inner=None, shard=(4, 3)), "unsharded"),
    _p(Case(inner=None, shard=(4, 3), write="sparse", fill=5), "unsharded-missing-chunks"),
    _p(
        Case(dtype="float32", inner=None, shard=(8, 8), fill=np.nan, write="partial"),
        "unsharded-nan",
    ),
    _p(
        Case(
            dtype="int64",
            inner=None,
            shape=(5, 9, 7),
            shard=(2, 4, 3),
            transpose=(2, 1, 0),
            endian="big",
            compressors=("zstd", "crc32c"),
        ),
        "unsharded-transpose-big-zstd-crc32c",
    ),
    _p(Case(inner=None, shape=(37,), shard=(10,), compressors=("blosc",)), "unsharded-1d-blosc"),
]

INDEX_CODEC_CASES = [
    _p(
        Case(index_endian=e, index_crc=crc, index_location=loc, write="sparse"),
        f"index-codecs-{e}-{'crc32c' if crc else 'nocrc'}-{loc}",
    )
    for e, crc, loc in [
        ("little", False, "end"),
        ("big", True, "end"),
        ("big", False, "start"),
        ("little", True, "start"),
    ]
]

BOTH_WRITERS = (
    DTYPE_CASES
    + INDEX_LOCATION_CASES
    + CODEC_CASES
    + SHAPE_CASES
    + MISSING_CASES
    + FILL_CASES
    + UNSHARDED_CASES
    + INDEX_CODEC_CASES
    + KEY_ENCODING_CASES
)

# numcodecs' codecs zarr-python registers: decoded by zarr-python's codec pipeline, but
# zlib, which shardwise decodes itself (bounded by the chunk's size, like zstd and gzip)
NUMCODECS_ZLIB = {"fallback-numcodecs-zlib", "fallback-unsharded"}
FALLBACK_CASES = [
    _p(Case(fallback="shuffle", write="sparse"), "fallback-numcodecs-shuffle"),
    _p(
        Case(fallback="zlib", dtype="float64", fill=np.nan, write="sparse"),
        "fallback-numcodecs-zlib",
    ),
    _p(Case(fallback="delta", dtype="int64", write="partial"), "fallback-numcodecs-delta"),
    _p(
        Case(fallback="scale_offset", dtype="int32", fill=11, write="sparse"),
        "fallback-scale-offset",
    ),
    _p(Case(fallback="zlib", inner=None, shard=(4, 3), write="sparse"), "fallback-unsharded"),
]

# zarr-python writes rectilinear shard grids whose sizes add up to the shape; a shrinking
# resize leaves the last shard reaching past the end
RECTILINEAR_CASES = [
    _r(Case(shape=(12, 9), shard=((4, 2, 6), (3, 6)), inner=(2, 3)), "rectilinear-sharded"),
    _r(
        Case(
            dtype="float32",
            shape=(12, 9),
            shard=((4, 2, 6), (3, 6)),
            inner=(2, 3),
            fill=np.nan,
            write="sparse",
            index_location="start",
            compressors=("zstd",),
            resize=(11, 8),
        ),
        "rectilinear-sharded-sparse-resized",
    ),
    _r(
        Case(shape=(5, 12, 7), shard=((5,), (2, 4, 6), (3, 4)), inner=(5, 2, 1), write="partial"),
        "rectilinear-sharded-3d-partial",
    ),
    _r(
        Case(
            shape=(20,),
            shard=((4, 4, 4, 4, 2, 2),),  # stored as [value, count] runs
            inner=(2,),
            fill=5,
            write="sparse",
            index_location="start",
            compressors=("zstd",),
        ),
        "rectilinear-sharded-1d-runs",
    ),
    _r(
        Case(shape=(20,), shard=((6, 6, 8),), inner=(2,), resize=(17,)),
        "rectilinear-sharded-1d-past-the-end",
    ),
    _r(
        Case(
            dtype="float64",
            shape=(6, 5, 4, 3),
            shard=((2, 4), (1, 4), (4,), (1, 2)),
            inner=(2, 1, 2, 1),
            fill=-1.5,
            write="partial",
            compressors=("gzip",),
        ),
        "rectilinear-sharded-4d-partial",
    ),
    _r(Case(shape=(10, 7), shard=((3, 7), (1, 2, 4)), inner=None), "rectilinear-unsharded"),
    _r(
        Case(shape=(10, 7), shard=((3, 7), (1, 2, 4)), inner=None, write="partial", fill=9),
        "rectilinear-unsharded-partial",
    ),
]

ZARR_ONLY = FALLBACK_CASES + RECTILINEAR_CASES


# -- data ----------------------------------------------------------------------------------
def _values(
    dtype: np.dtype[Any], shape: tuple[int, ...], rng: np.random.Generator, small: bool = False
) -> Any:
    if dtype.kind == "b":
        return rng.random(shape) < 0.5
    if dtype.kind in "iu" and small:
        return rng.integers(0, 100, size=shape, dtype=dtype)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)
    if dtype.kind == "f":
        out = (rng.standard_normal(shape) * 1e3).astype(dtype)
        out[rng.random(shape) < 0.05] = np.nan
        return out
    re, im = rng.standard_normal(shape), rng.standard_normal(shape)
    return (re + 1j * im).astype(dtype)


def _grid_coords(case: Case) -> list[np.ndarray]:
    """Per dimension, the (inner) chunk index of each coordinate, for the sparse pattern."""
    if case.inner is not None:
        return [np.arange(n) // c for n, c in zip(case.shape, case.inner, strict=True)]
    out = []
    for n, s in zip(case.shape, case.shard, strict=True):
        if isinstance(s, int):
            out.append(np.arange(n) // s)
        else:
            out.append(np.searchsorted(np.cumsum(s), np.arange(n), side="right"))
    return out


def _expected(case: Case) -> tuple[np.ndarray, np.ndarray, tuple[slice, ...]]:
    """The source data, the array as stored, and the region to write."""
    dtype = np.dtype(case.dtype)
    rng = np.random.default_rng(case.seed)
    # scale_offset refuses values whose encoding overflows the dtype
    data = _values(dtype, case.shape, rng, small=case.fallback == "scale_offset")
    fill = np.asarray(case.fill, dtype=dtype)
    region = tuple(slice(None) for _ in case.shape)
    if case.write == "sparse":
        # drop every third (inner) chunk, and everything in the first shard
        keep = sum(_mesh(_grid_coords(case))) % 3 != 1
        in_first = _mesh(
            [np.arange(n) < _first_shard(s) for n, s in zip(case.shape, case.shard, strict=True)]
        )
        keep = keep & ~functools.reduce(np.logical_and, in_first)
        data = np.where(keep, data, fill)
    elif case.write == "partial":
        region = tuple(slice(n // 3, max(n // 3 + 1, n // 2)) for n in case.shape)
    expected = np.full(case.shape, fill, dtype=dtype)
    expected[region] = data[region]
    if case.resize is not None:
        expected = expected[tuple(slice(0, n) for n in case.resize)]
    return data, expected, region


def _mesh(vectors: list[np.ndarray]) -> list[np.ndarray]:
    """Per-dimension vectors reshaped to broadcast against each other (an open mesh)."""
    ndim = len(vectors)
    return [v.reshape((1,) * i + (-1,) + (1,) * (ndim - i - 1)) for i, v in enumerate(vectors)]


def _first_shard(s: Any) -> int:
    return s if isinstance(s, int) else s[0]


# -- writers ---------------------------------------------------------------------------------
def _zarr_compressors(case: Case) -> list[Any]:
    out: list[Any] = []
    for name in case.compressors:
        if name == "zstd":
            out.append(zc.ZstdCodec(level=1))
        elif name == "gzip":
            out.append(zc.GzipCodec(level=1))
        elif name == "blosc":
            out.append(zc.BloscCodec(cname="lz4", clevel=3, shuffle="shuffle"))
        elif name == "crc32c":
            out.append(zc.Crc32cCodec())
        else:  # pragma: no cover
            raise AssertionError(name)
    if case.fallback == "shuffle":
        out.append(zc.numcodecs.Shuffle(elementsize=np.dtype(case.dtype).itemsize))
    elif case.fallback == "zlib":
        out.append(zc.numcodecs.Zlib(level=1))
    return out


def _zarr_filters(case: Case) -> list[Any]:
    out: list[Any] = []
    if case.transpose is not None:
        out.append(zc.TransposeCodec(order=case.transpose))
    if case.fallback == "delta":
        out.append(zc.numcodecs.Delta(dtype=np.dtype(case.dtype).newbyteorder("<").str))
    elif case.fallback == "scale_offset" and hasattr(zc, "ScaleOffset"):
        out.append(zc.ScaleOffset(offset=3, scale=2))
    elif case.fallback == "scale_offset":  # zarr 3.1 has no scale_offset: numcodecs' one
        dtype = np.dtype(case.dtype).newbyteorder("<").str
        out.append(zc.numcodecs.FixedScaleOffset(offset=3, scale=2, dtype=dtype))
    return out


def _zarr_bytes(case: Case) -> Any:
    return (
        zc.BytesCodec(endian=case.endian) if np.dtype(case.dtype).itemsize > 1 else zc.BytesCodec()
    )


def _zarr_serializer(case: Case) -> Any:
    if case.nested is not None:
        # the compressors go inside the nested shard, around each of its chunks
        return zc.ShardingCodec(
            chunk_shape=case.nested,
            codecs=[_zarr_bytes(case), *_zarr_compressors(case)],
            index_location=case.index_location,
        )
    return _zarr_bytes(case)


def write_zarr(root: Path, case: Case) -> tuple[str, str]:
    """Write ``case`` with zarr-python; returns (store path, array path)."""
    data, _, region = _expected(case)
    kwargs: dict[str, Any] = dict(
        shape=case.shape,
        dtype=case.dtype,
        fill_value=case.fill,
        filters=_zarr_filters(case),
        compressors=[] if case.nested else _zarr_compressors(case),
        serializer=_zarr_serializer(case),
        config={"write_empty_chunks": False},
        overwrite=True,
    )
    if case.inner is None:
        kwargs["chunks"] = [list(s) for s in case.shard] if case.rectilinear else case.shard
    elif case.default_index_codecs:
        kwargs["chunks"] = case.inner
        shards = [list(s) for s in case.shard] if case.rectilinear else case.shard
        kwargs["shards"] = {"shape": shards, "index_location": case.index_location}
    else:
        # non-default index codecs: build the sharding codec ourselves
        assert not case.rectilinear
        index_codecs: list[Any] = [zc.BytesCodec(endian=case.index_endian)]
        if case.index_crc:
            index_codecs.append(zc.Crc32cCodec())
        kwargs["chunks"] = case.shard
        kwargs["serializer"] = zc.ShardingCodec(
            chunk_shape=case.inner,
            codecs=[*kwargs.pop("filters"), kwargs["serializer"], *kwargs.pop("compressors")],
            index_codecs=index_codecs,
            index_location=case.index_location,
        )
        kwargs["compressors"] = None
        kwargs["filters"] = None
    with zarr.config.set(RECTILINEAR if case.rectilinear else {}):
        arr = zarr.create_array(
            str(root),
            name=case.name,
            chunk_key_encoding={"name": case.key_encoding[0], "separator": case.key_encoding[1]},
            **kwargs,
        )
        arr[region] = data[region]
        if case.resize is not None:
            arr.resize(case.resize)
    return str(root), case.name


def _ts_bytes(case: Case) -> dict[str, Any]:
    if np.dtype(case.dtype).itemsize == 1:
        return {"name": "bytes"}
    return {"name": "bytes", "configuration": {"endian": case.endian}}


def _ts_compressors(case: Case) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for name in case.compressors:
        if name in ("zstd", "gzip"):
            out.append({"name": name, "configuration": {"level": 1}})
        elif name == "blosc":
            itemsize = np.dtype(case.dtype).itemsize
            config = {"cname": "lz4", "clevel": 3, "shuffle": "shuffle", "typesize": itemsize}
            out.append({"name": "blosc", "configuration": {**config, "blocksize": 0}})
        elif name == "crc32c":
            out.append({"name": "crc32c"})
        else:  # pragma: no cover
            raise AssertionError(name)
    return out


def _ts_inner_codecs(case: Case) -> list[dict[str, Any]]:
    chain: list[dict[str, Any]] = []
    if case.transpose is not None:
        chain.append({"name": "transpose", "configuration": {"order": list(case.transpose)}})
    if case.nested is None:
        return [*chain, _ts_bytes(case), *_ts_compressors(case)]
    nested = {
        "chunk_shape": list(case.nested),
        "codecs": [_ts_bytes(case), *_ts_compressors(case)],
        "index_codecs": [
            {"name": "bytes", "configuration": {"endian": "little"}},
            {"name": "crc32c"},
        ],
        "index_location": case.index_location,
    }
    return [*chain, {"name": "sharding_indexed", "configuration": nested}]


def _ts_fill(case: Case) -> Any:
    def scalar(x: Any) -> Any:
        return "NaN" if isinstance(x, float) and math.isnan(x) else x

    if np.dtype(case.dtype).kind == "c":
        fill = complex(case.fill)
        return [scalar(fill.real), scalar(fill.imag)]
    return scalar(case.fill)


def write_tensorstore(root: Path, case: Case) -> tuple[str, str]:
    assert case.fallback is None and not case.rectilinear and case.resize is None
    data, _, region = _expected(case)
    chain = _ts_inner_codecs(case)
    if case.inner is None:
        codecs = chain
    else:
        index_codecs: list[dict[str, Any]] = [
            {"name": "bytes", "configuration": {"endian": case.index_endian}}
        ]
        if case.index_crc:
            index_codecs.append({"name": "crc32c"})
        codecs = [
            {
                "name": "sharding_indexed",
                "configuration": {
                    "chunk_shape": list(case.inner),
                    "codecs": chain,
                    "index_codecs": index_codecs,
                    "index_location": case.index_location,
                },
            }
        ]
    spec = {
        "driver": "zarr3",
        "kvstore": {"driver": "file", "path": str(root / case.name)},
        "metadata": {
            "shape": list(case.shape),
            "data_type": case.dtype,
            "fill_value": _ts_fill(case),
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(case.shard)}},
            "codecs": codecs,
            "chunk_key_encoding": {
                "name": case.key_encoding[0],
                "configuration": {"separator": case.key_encoding[1]},
            },
        },
        "create": True,
        "delete_existing": True,
    }
    store = ts.open(spec).result()
    if data.size:
        store[region].write(data[region]).result()
    return str(root), case.name


# -- checks ----------------------------------------------------------------------------------
def _outer(arr: np.ndarray, sel: tuple[Any, ...]) -> np.ndarray:
    """Outer indexing in numpy: one axis at a time; ints drop their axis."""
    out = arr
    axis = 0
    for s in sel:
        if isinstance(s, int):
            out = np.take(out, s, axis=axis)
        else:
            out = out[(slice(None),) * axis + (s,)]
            axis += 1
    return out


def _selections(shape: tuple[int, ...]) -> list[tuple[Any, ...]]:
    sels: list[tuple[Any, ...]] = [
        tuple(slice(1, None, 2) for _ in shape),
        tuple(slice(None, None, -3) for _ in shape),
        tuple(slice(n - 2, 0, -1) for n in shape),
        tuple(np.array([n - 1, 0, n // 2, 0, -1]) for n in shape),
        (-1, *(slice(None) for _ in shape[1:])),
        tuple(n // 2 for n in shape),
    ]
    if len(shape) > 1:
        sels.append((np.array([1, 0]), *(slice(None, 1, None) for _ in shape[1:])))
    return sels if all(shape) else [tuple(slice(None) for _ in shape)]


def _zarr_selection(sel: tuple[Any, ...], shape: tuple[int, ...]) -> tuple[Any, ...]:
    """``sel`` for zarr-python's ``oindex``, which refuses negative slice steps."""
    return tuple(
        np.arange(*s.indices(n)) if isinstance(s, slice) and (s.step or 1) < 0 else s
        for s, n in zip(sel, shape, strict=True)
    )


def _chunk_objects(base: Path, case: Case) -> dict[tuple[int, ...], Path]:
    """The shard (chunk) files of an array, by grid coordinates."""
    encoding, sep = case.key_encoding
    out = {}
    for p in base.rglob("*"):
        if p.is_file() and p.name != "zarr.json":
            key = p.relative_to(base).as_posix()
            if encoding == "default":
                assert key.startswith("c" + sep), key
                key = key[2:]
            out[tuple(int(k) for k in key.split(sep))] = p
    return out


def _stored(root: Path, case: Case) -> tuple[int, int]:
    """(number of shard/chunk objects written, number of empty inner chunk entries), read
    straight from the files, independently of shardwise."""
    objects = _chunk_objects(root / case.name, case)
    if case.inner is None:
        return len(objects), 0
    empty = 0
    dtype = "<u8" if case.index_endian == "little" else ">u8"
    for key, p in objects.items():
        raw = p.read_bytes()
        # a rectilinear grid has several shard shapes: find this shard's from its key
        sizes = [s if isinstance(s, int) else s[i] for s, i in zip(case.shard, key, strict=True)]
        n = math.prod(s // c for s, c in zip(sizes, case.inner, strict=True))
        nbytes = 16 * n + (4 if case.index_crc else 0)
        index = raw[:nbytes] if case.index_location == "start" else raw[len(raw) - nbytes :]
        table = np.frombuffer(index[: 16 * n], dtype=dtype).reshape(n, 2)
        empty += int(np.sum((table[:, 0] == EMPTY) & (table[:, 1] == EMPTY)))
    return len(objects), empty


def _nshards(case: Case) -> int:
    """Shards (chunks) in the grid as written."""
    return math.prod(
        -(-n // s) if isinstance(s, int) else len(s)
        for n, s in zip(case.shape, case.shard, strict=True)
    )


def check(root: Path, case: Case, store: str, name: str) -> None:
    _, expected, _ = _expected(case)
    nobjects, nempty = _stored(root, case)
    # the case writes what it says it writes
    if case.write == "partial" and expected.size:
        assert nobjects < _nshards(case)
    if case.write == "sparse":
        assert nobjects < _nshards(case)
        if case.inner is not None:
            assert nempty > 0

    with zarr.config.set(RECTILINEAR if case.rectilinear else {}):
        reference = zarr.open_array(store, path=name, mode="r")
        readers = [ArrayReader.open(store, name), ArrayReader.open(store, name, options=INDEX_PATH)]
    np.testing.assert_array_equal(reference[...], expected)
    for reader in readers:
        assert reader.shape == expected.shape
        assert reader.dtype == np.dtype(case.dtype)
        got = reader[...]
        assert got.dtype == np.dtype(case.dtype)
        assert got.shape == expected.shape
        np.testing.assert_array_equal(got, expected)
        np.testing.assert_array_equal(got, reference[...])
        for sel in _selections(expected.shape):
            want = _outer(expected, sel)
            got = reader.read(sel)
            np.testing.assert_array_equal(got, want, err_msg=f"selection {sel}")
            assert got.shape == want.shape
            from_zarr = reference.oindex[_zarr_selection(sel, expected.shape)]
            np.testing.assert_array_equal(got, from_zarr, err_msg=f"selection {sel}")


# -- tests -------------------------------------------------------------------------------------
@pytest.mark.parametrize("case", BOTH_WRITERS + ZARR_ONLY)
def test_zarr_python_written(tmp_path: Path, case: Case) -> None:
    store, name = write_zarr(tmp_path, case)
    check(tmp_path, case, store, name)


@pytest.mark.parametrize("case", BOTH_WRITERS)
def test_tensorstore_written(tmp_path: Path, case: Case) -> None:
    store, name = write_tensorstore(tmp_path, case)
    check(tmp_path, case, store, name)


def test_fallback_cases_leave_the_fast_path(tmp_path: Path) -> None:
    """The fallback cases really go through zarr-python's codec pipeline (zlib through
    shardwise's own), and the others really take the fast path."""
    for param in FALLBACK_CASES:
        (case,) = param.values
        store, name = write_zarr(tmp_path / param.id, case)
        reader = ArrayReader.open(store, name)
        decoder = reader.decoder((0,) * reader.ndim)
        chunk = getattr(decoder, "chunk", decoder)
        assert chunk.fast == (param.id in NUMCODECS_ZLIB), param.id
    fast = [
        Case(compressors=("zstd", "crc32c"), endian="big"),
        Case(shape=(13, 14), shard=(8, 12), inner=(4, 6), nested=(2, 3), compressors=("gzip",)),
    ]
    for i, case in enumerate(fast):
        store, name = write_zarr(tmp_path / f"fast{i}", case)
        assert ArrayReader.open(store, name).decoder((0, 0)).chunk.fast


@pytest.mark.filterwarnings(
    "ignore:Combining a `sharding_indexed` codec:zarr.errors.ZarrUserWarning"
)
@ZARR_3_1
@pytest.mark.parametrize("layout", ["sharding-then-zstd", "transpose-then-sharding"])
def test_sharding_codec_among_other_codecs(tmp_path: Path, layout: str) -> None:
    """A ``sharding_indexed`` codec that is not the array's only codec makes an unsharded
    array whose chunks are whole shards (zarr-python warns about it, on purpose here)."""
    data = np.arange(9 * 7, dtype="i4").reshape(9, 7)
    if layout == "sharding-then-zstd":
        codecs: dict[str, Any] = dict(filters=None, compressors=[zc.ZstdCodec(level=1)])
    else:
        codecs = dict(filters=[zc.TransposeCodec(order=(1, 0))], compressors=None)
    arr = zarr.create_array(
        str(tmp_path),
        name="arr",
        shape=data.shape,
        dtype=data.dtype,
        chunks=(4, 4),
        serializer=zc.ShardingCodec(chunk_shape=(2, 2), index_location="start"),
        fill_value=-1,
        config={"write_empty_chunks": False},
        **codecs,
    )
    arr[:5] = data[:5]
    expected = np.full(data.shape, -1, dtype=data.dtype)
    expected[:5] = data[:5]
    reader = ArrayReader.open(str(tmp_path), "arr")
    assert reader.info.sharding is None
    np.testing.assert_array_equal(reader[...], expected)
    np.testing.assert_array_equal(reader[::-2, [6, 0, 3]], expected[::-2][:, [6, 0, 3]])
    np.testing.assert_array_equal(reader[...], zarr.open_array(str(tmp_path), path="arr")[...])


@pytest.mark.parametrize("writer", ["zarr", "tensorstore"])
@pytest.mark.parametrize("sharded", [False, True])
def test_zero_dimensional(tmp_path: Path, writer: str, sharded: bool) -> None:
    if writer == "zarr" and sharded and _compat.version("zarr") < (3, 2):
        pytest.skip("zarr-python 3.1 cannot write a sharded 0-d array (the reference)")
    if writer == "zarr":
        arr = zarr.create_array(
            str(tmp_path),
            name="arr",
            shape=(),
            dtype="f8",
            chunks=(),
            shards=() if sharded else None,
            fill_value=np.nan,
        )
        arr[...] = 3.5
    else:
        codecs: list[dict[str, Any]] = [{"name": "bytes", "configuration": {"endian": "little"}}]
        if sharded:
            codecs = [
                {"name": "sharding_indexed", "configuration": {"chunk_shape": [], "codecs": codecs}}
            ]
        spec = {
            "driver": "zarr3",
            "kvstore": {"driver": "file", "path": str(tmp_path / "arr")},
            "metadata": {
                "shape": [],
                "data_type": "float64",
                "fill_value": "NaN",
                "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": []}},
                "codecs": codecs,
            },
            "create": True,
        }
        ts.open(spec).result().write(np.float64(3.5)).result()
    reader = ArrayReader.open(str(tmp_path), "arr")
    assert reader.shape == ()
    for got in (reader[...], reader[()], reader.read(())):
        assert got.shape == ()
        assert got == 3.5
