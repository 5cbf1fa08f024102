from __future__ import annotations

import numpy as np
import pytest

from shardwise.format.grid import DimGrid, ShardLayout


def assemble(dim: DimGrid, sel) -> np.ndarray:
    """Rebuild ``arange(extent)[sel]`` from the pieces ``dim.pieces(sel)`` gives."""
    n = len(np.arange(dim.extent)[sel])
    out = np.full(n, -1)
    for p in dim.pieces(sel):
        start = dim.shard_start(p.shard) + p.inner * dim.inner_size(p.shard)
        chunk = np.arange(start, start + dim.inner_size(p.shard))
        out[p.out] = chunk[p.local]
    return out


@pytest.mark.parametrize(
    "sel",
    [
        slice(None),
        slice(3, 47),
        slice(5, 6),
        slice(2, 49, 7),
        slice(None, None, -1),
        slice(40, 3, -3),
        slice(10, 10),
        np.array([3, 1, 44, 44, -1, 0]),
        np.array([], dtype=int),
    ],
)
@pytest.mark.parametrize(
    "dim",
    [
        DimGrid(49, 10, 5),  # regular, edge shard reaches past the end
        DimGrid(49, 10, None),  # unsharded
        DimGrid(49, (20, 10, 30), 5),  # rectilinear, trailing edge past the end
        DimGrid(49, 49, 7),
    ],
)
def test_pieces_cover_selection(dim, sel):
    np.testing.assert_array_equal(assemble(dim, sel), np.arange(dim.extent)[sel])


def test_slice_pieces_are_slices_in_order():
    pieces = DimGrid(100, 20, 10).pieces(slice(15, 65))
    assert [(p.shard, p.inner) for p in pieces] == [(0, 1), (1, 0), (1, 1), (2, 0), (2, 1), (3, 0)]
    assert pieces[0].local == slice(5, 10, 1) and pieces[0].out == slice(0, 5)
    assert pieces[-1].local == slice(0, 5, 1) and pieces[-1].out == slice(45, 50)


def test_array_pieces_group_per_inner_chunk():
    pieces = DimGrid(100, 20, 10).pieces(np.array([95, 3, 4, 5, 12]))
    assert [(p.shard, p.inner) for p in pieces] == [(0, 0), (0, 1), (4, 1)]
    # contiguous runs become slices, others stay arrays
    assert pieces[0].local == slice(3, 6) and pieces[0].out == slice(1, 4)
    assert pieces[2].local == slice(5, 6) and pieces[2].out == slice(0, 1)


def test_out_of_bounds_array_raises():
    with pytest.raises(IndexError, match="out of bounds"):
        DimGrid(10, 5, 5).pieces(np.array([10]))


@pytest.mark.parametrize(
    ("extent", "shards", "inner", "message"),
    [
        (10, 6, 4, "does not divide"),
        (10, 0, None, "shard size"),
        (10, (4, 4), None, "less than the extent"),
        (-1, 4, None, "extent"),
    ],
)
def test_invalid_grids(extent, shards, inner, message):
    with pytest.raises(ValueError, match=message):
        DimGrid(extent, shards, inner)


def test_nshards():
    assert DimGrid(49, 10, 5).nshards == 5
    assert DimGrid(0, 10, 5).nshards == 0
    assert DimGrid(49, (20, 10, 30), 5).nshards == 3
    assert DimGrid(30, (20, 10, 30), 5).nshards == 2


def test_plan_groups_by_shard():
    layout = ShardLayout.build((40, 30), (10, 30), (5, 10))
    plan = layout.plan((slice(8, 22), slice(None)))
    assert plan.out_shape == (14, 30)
    assert [s.shard for s in plan.shards] == [(0, 0), (1, 0), (2, 0)]
    assert [len(s.chunks) for s in plan.shards] == [3, 6, 3]
    assert plan.nchunks == 12
    assert layout.grid_shape == (4, 1)
    assert layout.chunks_per_shard((0, 0)) == (2, 3)


def test_plan_rejects_wrong_ndim():
    with pytest.raises(IndexError):
        ShardLayout.build((4,), (2,), (1,)).plan((slice(None), slice(None)))
