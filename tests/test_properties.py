"""Property tests: random arrays written by zarr-python read identically through shardwise,
and the pure geometry (``shardwise.format.grid``) and range coalescing (``shardwise.io.stores``)
are exact.

Each reader example writes one small array to a ``MemoryStore`` and reads several random
selections of it, so that the (comparatively slow) zarr-python write is amortised.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np
import pytest
import xarray as xr
import zarr
from hypothesis import event, given, settings
from hypothesis import strategies as st
from xarray.core import indexing
from zarr.storage import MemoryStore

from shardwise import _compat
from shardwise.format.grid import DimGrid, ShardLayout
from shardwise.io.reader import ArrayReader
from shardwise.io.stores import ByteRange, ReadOptions, coalesce
from shardwise.xarray.backend import ShardwiseBackendArray

# st.data() draws the selections after the array is built; each example is one
# zarr-python write, so the example counts stay modest
READER_SETTINGS = settings(max_examples=75, deadline=None)
PURE_SETTINGS = settings(max_examples=300, deadline=None)

DTYPES = ["int16", "uint8", "float32", "float64", "bool", "int64"]
# the documented read paths: whole shards (default), and index + ranges without caching
OPTIONS = {
    "default": None,
    "index-path": ReadOptions(whole_shard_fraction=float("inf"), index_cache=False),
    "tiny-requests": ReadOptions(coalesce_gap=0, coalesce_max=1, whole_shard_fraction=1.0),
}
RECTILINEAR = {"array.rectilinear_chunks": True}


# -- arrays ------------------------------------------------------------------------------
class Written:
    """An array written by zarr-python to a MemoryStore, with its expected contents."""

    def __init__(self, store: MemoryStore, array: Any, expected: np.ndarray, desc: str):
        self.store, self.array, self.expected, self.desc = store, array, expected, desc

    def __repr__(self) -> str:
        return f"<Written {self.desc}>"


def _split(draw: st.DrawFn, k: int) -> list[int]:
    """A random composition of ``k`` into positive parts."""
    parts: list[int] = []
    while k:
        p = draw(st.integers(1, k))
        parts.append(p)
        k -= p
    return parts


@st.composite
def written_arrays(draw: st.DrawFn) -> Written:
    ndim = draw(st.integers(1, 3))
    max_side = {1: 40, 2: 12, 3: 7}[ndim]
    inner = tuple(draw(st.integers(1, 4)) for _ in range(ndim))
    sharded = draw(st.sampled_from([True, True, True, False]))
    # (rectilinear grids where the installed zarr-python has them: 3.2 on)
    rectilinear = _compat.has("rectilinear") and draw(st.integers(0, 3)) == 0
    if rectilinear:
        # zarr-python wants rectilinear sizes (multiples of the inner chunk when sharded)
        # that add up to the shape: draw the number of units per dimension and split it
        unit = inner if sharded else (1,) * ndim
        nunits = [draw(st.integers(1, max(1, max_side // c))) for c in unit]
        shape = tuple(n * c for n, c in zip(nunits, unit, strict=True))
        shards: Any = [[p * c for p in _split(draw, n)] for n, c in zip(nunits, unit, strict=True)]
    else:
        shape = tuple(draw(st.integers(0 if i == 0 else 1, max_side)) for i in range(ndim))
        shards = tuple(c * draw(st.integers(1, 3)) for c in inner)
    # keep the number of inner chunks (the cost of a zarr-python write) small
    if sharded and math.prod(-(-n // c) for n, c in zip(shape, inner, strict=True)) > 150:
        inner = tuple(max(c, -(-n // 4)) for n, c in zip(shape, inner, strict=True))
        if rectilinear:
            shards = [[-(-n // c) * c] for n, c in zip(shape, inner, strict=True)]
            shape = tuple(s[0] for s in shards)
        else:
            shards = tuple(c * 2 for c in inner)
    event("sharded" if sharded else "unsharded")
    event("rectilinear" if rectilinear else "regular")
    dtype = np.dtype(draw(st.sampled_from(DTYPES)))
    fill = _scalar(draw, dtype)
    index_location = draw(st.sampled_from(["start", "end"]))
    compressors = draw(st.sampled_from([None, [zarr.codecs.ZstdCodec(level=1)]]))

    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    values = _random(rng, dtype, shape)
    # whole inner chunks at the fill value are not stored: blank a random set of them
    dense = draw(st.sampled_from([0.0, 0.5, 1.0]))
    keep = _chunk_mask(rng, shape, inner if sharded or rectilinear else shards, dense)
    data = np.where(keep, values, np.asarray(fill, dtype=dtype))
    # sometimes write only a region: the shards outside it are never written
    region = tuple(slice(0, n) for n in shape)
    if draw(st.booleans()):
        region = tuple(
            slice(a, a + b)
            for a, b in ((draw(st.integers(0, n)), draw(st.integers(0, n))) for n in shape)
        )
    expected = np.full(shape, fill, dtype=dtype)
    expected[region] = data[region]
    if 0 < dense < 1:
        event("some inner chunks at the fill value")
    if any(r.stop - r.start < n for r, n in zip(region, shape, strict=True)):
        event("partly written")

    store = MemoryStore()
    with zarr.config.set(RECTILINEAR if rectilinear else {}):
        array = zarr.create_array(
            store,
            shape=shape,
            dtype=dtype,
            chunks=inner if sharded else shards,
            shards={"shape": shards, "index_location": index_location} if sharded else None,
            fill_value=fill,
            compressors=compressors,
            config={"write_empty_chunks": False},
        )
        array[region] = data[region]
    desc = (
        f"shape={shape} shards={shards} inner={inner if sharded else None} dtype={dtype} "
        f"fill={fill!r} index={index_location} compressors={compressors} region={region}"
    )
    return Written(store, array, expected, desc)


def _scalar(draw: st.DrawFn, dtype: np.dtype[Any]) -> Any:
    if dtype.kind == "b":
        return draw(st.booleans())
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return draw(st.sampled_from([0, 1, 42, int(info.max), int(info.min)]))
    return draw(st.sampled_from([0.0, np.nan, -2.5, np.inf]))


def _random(rng: np.random.Generator, dtype: np.dtype[Any], shape: tuple[int, ...]) -> Any:
    if dtype.kind == "b":
        return rng.random(shape) < 0.5
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)
    out = rng.standard_normal(shape).astype(dtype)
    out[rng.random(shape) < 0.1] = np.nan
    return out


def _chunk_mask(
    rng: np.random.Generator, shape: tuple[int, ...], inner: tuple[int, ...], dense: float
) -> np.ndarray:
    grid = tuple(-(-n // c) for n, c in zip(shape, inner, strict=True))
    chunk_keep = rng.random(grid) < dense
    for axis, c in enumerate(inner):
        chunk_keep = np.repeat(chunk_keep, c, axis=axis)
    return chunk_keep[tuple(slice(0, n) for n in shape)]


def _reader(w: Written, options: ReadOptions | None) -> ArrayReader:
    # no clear_index_cache() between examples: each opened reader has its own cache scope,
    # even when a new MemoryStore reuses the id (and so the name) of a freed one
    with zarr.config.set(RECTILINEAR):
        return ArrayReader.open(w.store, options=options)


# -- selections -----------------------------------------------------------------------------
def _bound(n: int) -> st.SearchStrategy[int | None]:
    return st.one_of(st.none(), st.integers(-n - 3, n + 3))


def basic_indexer(n: int) -> st.SearchStrategy[Any]:
    steps = st.one_of(st.none(), st.integers(-5, -1), st.integers(1, 5))
    slices = st.builds(slice, _bound(n), _bound(n), steps)
    if n == 0:
        return slices
    return st.one_of(slices, st.integers(-n, n - 1), st.integers(-n, n - 1).map(np.int64))


def outer_indexer(n: int) -> st.SearchStrategy[Any]:
    if n == 0:
        return st.one_of(basic_indexer(n), st.just(np.array([], dtype=np.intp)))
    arrays = st.lists(st.integers(-n, n - 1), min_size=0, max_size=7).map(
        lambda v: np.array(v, dtype=np.int64)
    )
    # unsorted, with repeats and negative values; sometimes sorted and unique
    sorted_unique = st.lists(st.integers(0, n - 1), min_size=1, unique=True).map(
        lambda v: np.array(sorted(v), dtype=np.int32)
    )
    return st.one_of(basic_indexer(n), arrays, sorted_unique)


def _numpy_outer(arr: np.ndarray, key: tuple[Any, ...]) -> np.ndarray:
    out, axis = arr, 0
    for k in key:
        if isinstance(k, int | np.integer):
            out = np.take(out, int(k), axis=axis)
        else:
            out = out[(slice(None),) * axis + (k,)]
            axis += 1
    return out


def _for_zarr(key: tuple[Any, ...], shape: tuple[int, ...]) -> tuple[Any, ...]:
    """zarr-python refuses negative slice steps: give those as index arrays."""
    return tuple(
        np.arange(*k.indices(n)) if isinstance(k, slice) and (k.step or 1) < 0 else k
        for k, n in zip(key, shape, strict=True)
    )


def _empty_reversed(k: Any, n: int) -> bool:
    return isinstance(k, slice) and (k.step or 1) < 0 and not len(range(*k.indices(n)))


def _has_negative_step(key: tuple[Any, ...]) -> bool:
    return any(isinstance(k, slice) and (k.step or 1) < 0 for k in key)


# -- reading through ArrayReader -----------------------------------------------------------
@READER_SETTINGS
@given(w=written_arrays(), options=st.sampled_from(sorted(OPTIONS)), data=st.data())
def test_basic_indexing_matches_zarr(w: Written, options: str, data: st.DataObject) -> None:
    reader = _reader(w, OPTIONS[options])
    np.testing.assert_array_equal(w.array[...], w.expected)
    whole = reader[...]
    assert whole.dtype == w.expected.dtype
    np.testing.assert_array_equal(whole, w.expected)
    for _ in range(4):
        key = data.draw(st.tuples(*(basic_indexer(n) for n in w.expected.shape)), label="key")
        want = w.expected[key]
        got = reader[key]
        assert got.shape == want.shape
        np.testing.assert_array_equal(got, want)
        if not _has_negative_step(key):
            np.testing.assert_array_equal(got, w.array[key])


@pytest.mark.skipif(
    _compat.version("zarr") < (3, 2), reason="zarr-python 3.1's oindex (the reference) fails"
)
@READER_SETTINGS
@given(w=written_arrays(), options=st.sampled_from(sorted(OPTIONS)), data=st.data())
def test_outer_indexing_matches_zarr_oindex(w: Written, options: str, data: st.DataObject) -> None:
    reader = _reader(w, OPTIONS[options])
    shape = w.expected.shape
    for _ in range(4):
        key = data.draw(st.tuples(*(outer_indexer(n) for n in shape)), label="key")
        want = w.array.oindex[_for_zarr(key, shape)]
        got = reader.read(key)
        assert got.shape == np.shape(want)
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(got, _numpy_outer(w.expected, key))
        # __getitem__ takes outer keys too
        np.testing.assert_array_equal(reader[key], want)


@st.composite
def vectorized_keys(draw: st.DrawFn, shape: tuple[int, ...]) -> dict[str, Any]:
    """An xarray vectorized key: index arrays of one (1-d or 2-d) shape on every
    dimension of nonzero length, or on a random set of them, and ints or slices on the
    others."""
    ndim = len(shape)
    points = draw(st.lists(st.integers(1, 3), min_size=1, max_size=2))
    nonempty = [i for i in range(ndim) if shape[i] > 0]
    if draw(st.booleans()):
        vec_dims = nonempty
    else:
        vec_dims = [i for i in nonempty if draw(st.booleans())] or nonempty[:1]
    key: dict[str, Any] = {}
    point_dims = tuple(f"p{j}" for j in range(len(points)))
    for i, n in enumerate(shape):
        if i in vec_dims:
            idx = draw(
                st.lists(
                    st.integers(-n, n - 1), min_size=math.prod(points), max_size=math.prod(points)
                )
            )
            key[f"d{i}"] = xr.Variable(point_dims, np.array(idx).reshape(points))
        else:
            # xarray's lazy indexing mishandles an empty negative-step slice (wrong shape,
            # or IndexError in indexing._decompose_slice), with engine="zarr" as well
            key[f"d{i}"] = draw(basic_indexer(n).filter(lambda k, n=n: not _empty_reversed(k, n)))
    return key


@READER_SETTINGS
@given(w=written_arrays(), data=st.data())
def test_vectorized_indexing_through_the_backend_array(w: Written, data: st.DataObject) -> None:
    reader = _reader(w, None)
    shape = w.expected.shape
    dims = tuple(f"d{i}" for i in range(len(shape)))
    lazy = xr.Variable(dims, indexing.LazilyIndexedArray(ShardwiseBackendArray(reader)))
    eager = xr.Variable(dims, w.expected)
    for _ in range(3):
        key = data.draw(vectorized_keys(shape), label="key")
        got = lazy[key]
        want = eager[key]
        assert got.dims == want.dims
        np.testing.assert_array_equal(got.values, want.values)
        if all(isinstance(k, xr.Variable) for k in key.values()):
            arrays = tuple(key[d].values for d in dims)
            np.testing.assert_array_equal(got.values, w.array.vindex[arrays])


def test_vectorized_example() -> None:
    """One fixed vectorized read, so a failure of the property above has a simple twin."""
    store = MemoryStore()
    arr = zarr.create_array(store, shape=(9, 7), chunks=(2, 3), shards=(4, 6), dtype="i4")
    arr[...] = np.arange(63).reshape(9, 7)
    reader = ArrayReader.open(store)
    lazy = xr.Variable(("y", "x"), indexing.LazilyIndexedArray(ShardwiseBackendArray(reader)))
    i = np.array([[8, 0], [3, -1]])
    j = np.array([[6, 0], [2, 2]])
    got = lazy[{"y": xr.Variable(("a", "b"), i), "x": xr.Variable(("a", "b"), j)}]
    np.testing.assert_array_equal(got.values, arr.vindex[i, j])


# -- layout --------------------------------------------------------------------------------
@st.composite
def dim_grids(draw: st.DrawFn, max_extent: int = 60) -> DimGrid:
    extent = draw(st.integers(0, max_extent))
    inner = draw(st.one_of(st.none(), st.integers(1, 6)))
    unit = inner or 1
    if draw(st.booleans()):
        return DimGrid(extent, unit * draw(st.integers(1, 5)), inner)
    # rectilinear: sizes adding up to at least the extent (the last may reach past it)
    sizes: list[int] = []
    while sum(sizes) < max(extent, 1):
        sizes.append(unit * draw(st.integers(1, 5)))
    if draw(st.booleans()):
        sizes.append(unit * draw(st.integers(1, 3)))  # a shard wholly past the end
    return DimGrid(extent, tuple(sizes), inner)


def dim_selection(n: int) -> st.SearchStrategy[Any]:
    steps = st.one_of(st.none(), st.integers(-7, -1), st.integers(1, 7))
    slices = st.builds(slice, _bound(n), _bound(n), steps)
    if n == 0:
        return st.one_of(slices, st.just(np.array([], dtype=np.int64)))
    arrays = st.lists(st.integers(-n, n - 1), max_size=12).map(
        lambda v: np.array(v, dtype=np.int64)
    )
    return st.one_of(slices, arrays)


def _origin(dim: DimGrid, shard: int, inner: int) -> int:
    return dim.shard_start(shard) + inner * dim.inner_size(shard)


@PURE_SETTINGS
@given(data=st.data())
def test_dim_pieces_cover_the_selection_exactly(data: st.DataObject) -> None:
    dim = data.draw(dim_grids(), label="dim")
    sel = data.draw(dim_selection(dim.extent), label="sel")
    want = np.arange(dim.extent)[sel]
    out = np.full(len(want), -1)
    hits = np.zeros(len(want), dtype=int)
    seen = []
    for p in dim.pieces(sel):
        assert 0 <= p.shard < dim.nshards
        assert 0 <= p.inner < dim.inner_per_shard(p.shard)
        seen.append((p.shard, p.inner))
        origin = _origin(dim, p.shard, p.inner)
        chunk = np.arange(origin, origin + dim.inner_size(p.shard))
        values = chunk[p.local]
        # local selections stay inside the chunk (numpy would clip a slice silently)
        if isinstance(p.local, slice):
            r = range(p.local.start, p.local.stop, p.local.step or 1)
            assert len(r) and r[0] >= 0 and r[-1] < len(chunk) and r.step > 0, p
            assert len(values) == len(r)
        else:
            assert p.local.min() >= 0 and p.local.max() < len(chunk)
        # and inside the array
        assert values.size and values.max() < dim.extent
        out[p.out] = values
        np.add.at(hits, np.arange(len(want))[p.out], 1)
    assert (hits == 1).all(), hits
    np.testing.assert_array_equal(out, want)
    # one piece per touched inner chunk, in ascending (shard, inner chunk) order
    assert len(seen) == len(set(seen))
    if not isinstance(sel, slice) or (sel.step or 1) > 0:
        assert seen == sorted(seen)


@st.composite
def layouts(draw: st.DrawFn) -> ShardLayout:
    ndim = draw(st.integers(1, 3))
    dims = [draw(dim_grids(max_extent={1: 60, 2: 20, 3: 9}[ndim])) for _ in range(ndim)]
    # an array is sharded along all its dimensions or none (inner size 1 divides any shard)
    sharded = draw(st.booleans())
    return ShardLayout(
        tuple(DimGrid(d.extent, d.shards, (d.inner or 1) if sharded else None) for d in dims)
    )


@PURE_SETTINGS
@given(data=st.data())
def test_plan_reassembles_outer_selection(data: st.DataObject) -> None:
    layout = data.draw(layouts(), label="layout")
    sel = tuple(
        data.draw(dim_selection(d.extent), label=f"sel{i}") for i, d in enumerate(layout.dims)
    )
    source = np.arange(math.prod(layout.shape)).reshape(layout.shape)
    want = _numpy_outer(source, sel)
    plan = layout.plan(sel)
    assert plan.out_shape == want.shape
    out = np.full(want.shape, -1)
    hits = np.zeros(want.shape, dtype=int)
    shards_seen = [s.shard for s in plan.shards]
    assert shards_seen == sorted(set(shards_seen))  # each shard once, C order
    for shard_read in plan.shards:
        assert all(0 <= s < n for s, n in zip(shard_read.shard, layout.grid_shape, strict=True))
        inner_shape = layout.inner_shape(shard_read.shard)
        per_shard = layout.chunks_per_shard(shard_read.shard)
        for c in shard_read.chunks:
            assert all(0 <= j < n for j, n in zip(c.inner, per_shard, strict=True))
            origin = tuple(
                _origin(d, s, j)
                for d, s, j in zip(layout.dims, shard_read.shard, c.inner, strict=True)
            )
            # the chunk's data, reaching past the array's end like an encoded edge chunk
            grids = np.meshgrid(
                *(np.arange(o, o + k) for o, k in zip(origin, inner_shape, strict=True)),
                indexing="ij",
            )
            inside = (
                np.logical_and.reduce([g < n for g, n in zip(grids, layout.shape, strict=True)])
                if grids
                else np.bool_(True)
            )
            flat = (
                np.ravel_multi_index(
                    tuple(np.minimum(g, n - 1) for g, n in zip(grids, layout.shape, strict=True)),
                    layout.shape,
                )
                if grids
                else np.int64(0)
            )
            chunk = np.where(inside, flat, -2)
            out[_ix(c.out)] = chunk[_ix(c.local)]
            hits[_ix(c.out)] += 1
    assert (hits == 1).all()
    np.testing.assert_array_equal(out, want)


def _ix(sel: tuple[Any, ...]) -> tuple[Any, ...]:
    if all(isinstance(s, slice) for s in sel):
        return sel
    return np.ix_(
        *(np.arange(s.start, s.stop, s.step or 1) if isinstance(s, slice) else s for s in sel)
    )


# -- coalescing ----------------------------------------------------------------------------
byte_ranges = st.lists(
    st.builds(
        lambda start, n: ByteRange(start, start + n), st.integers(0, 2000), st.integers(0, 200)
    ),
    max_size=30,
)


@PURE_SETTINGS
@given(ranges=byte_ranges, gap=st.integers(0, 100), max_size=st.integers(1, 500))
def test_coalesce_groups(ranges: list[ByteRange], gap: int, max_size: int) -> None:
    groups = coalesce(ranges, gap=gap, max_size=max_size)
    members = [m for _, ms in groups for m in ms]
    # every range in exactly one group
    assert sorted(members) == list(range(len(ranges)))
    previous_start = -1
    for i, (req, ms) in enumerate(groups):
        assert ms
        # the request is exactly the span of its members
        assert req.start == min(ranges[m].start for m in ms)
        assert req.stop == max(ranges[m].stop for m in ms)
        # no request past max_size, unless it is one range that is larger by itself
        assert req.stop - req.start <= max_size or len(ms) == 1
        # members in offset order, no hole larger than gap between them
        stop = ranges[ms[0]].stop
        for a, b in itertools.pairwise(ms):
            assert ranges[a].start <= ranges[b].start
            assert ranges[b].start - stop <= gap
            stop = max(stop, ranges[b].stop)
        # groups sorted by offset
        assert req.start >= previous_start
        previous_start = req.start
        # greedy: the next group's first range could not join this one
        if i + 1 < len(groups):
            nxt = ranges[groups[i + 1][1][0]]
            assert nxt.start - req.stop > gap or max(req.stop, nxt.stop) - req.start > max_size


def test_coalesce_edge_cases() -> None:
    assert coalesce([], gap=10, max_size=10) == []
    big = ByteRange(0, 100)
    assert coalesce([big], gap=0, max_size=1) == [(big, [0])]
    # identical (deduplicated) entries share one request
    assert coalesce([ByteRange(5, 9), ByteRange(5, 9)], gap=0, max_size=4) == [
        (ByteRange(5, 9), [0, 1])
    ]
    # adjacent ranges merge with gap 0; a one-byte hole does not
    assert len(coalesce([ByteRange(0, 4), ByteRange(4, 8)], gap=0, max_size=100)) == 1
    assert len(coalesce([ByteRange(0, 4), ByteRange(5, 8)], gap=0, max_size=100)) == 2


@pytest.mark.parametrize("extent", [0, 1, 7])
def test_empty_outer_selections(extent: int) -> None:
    layout = ShardLayout.build((extent, 5), (4, 2), (2, 1))
    plan = layout.plan((np.array([], dtype=np.int64), slice(None)))
    assert plan.out_shape == (0, 5)
    assert plan.nchunks == 0
