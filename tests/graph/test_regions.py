"""``shardwise.regions.shared_shards`` / ``check_regions``: region writes that would share shards."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

import shardwise
from shardwise.errors import RegionConflictError, WriteError


@pytest.fixture
def store(tmp_path):
    """v(t=100, x=8) in shards of 20 x 8 (inner 10 x 8); w(x) has no t; time coord t."""
    ds = xr.Dataset(
        {"v": (("t", "x"), np.zeros((100, 8))), "w": (("x",), np.arange(8.0))},
        coords={"t": np.arange(100)},
    )
    path = tmp_path / "r.zarr"
    shardwise.to_zarr(ds, path, shards={"t": 20}, chunks={"t": 10}, consolidated=False)
    return path


def test_shard_aligned_regions_share_nothing(store):
    regions = [{"t": slice(0, 40)}, {"t": slice(40, 60)}, {"t": slice(60, None)}]
    assert shardwise.regions.shared_shards(store, regions) == {}
    shardwise.regions.check_regions(store, regions)  # quiet


def test_regions_that_cut_a_shard(store):
    regions = [{"t": slice(0, 45)}, {"t": slice(45, 100)}]
    assert shardwise.regions.shared_shards(store, regions) == {
        "t": {"t/c/2": [0, 1]},
        "v": {"v/c/2/0": [0, 1]},
    }  # w has no t: a region write leaves it alone
    assert shardwise.regions.shared_shards(store, regions, variables=["v"]) == {
        "v": {"v/c/2/0": [0, 1]}
    }
    with pytest.raises(RegionConflictError) as info:
        shardwise.regions.check_regions(store, regions, variables=["v"])
    assert isinstance(info.value, ValueError)
    assert info.value.array == "v" and info.value.key == "v/c/2/0"
    assert "regions [0, 1]" in str(info.value) and "shard boundaries" in str(info.value)


def test_three_regions_and_empty_ones(store):
    regions = [{"t": slice(0, 21)}, {"t": slice(21, 39)}, {"t": slice(39, 41)}, {"t": slice(5, 5)}]
    # shard 0 (rows 0..19): region 0 only; shard 1: regions 0, 1, 2; shard 2: region 2
    # only; the empty region touches nothing
    assert shardwise.regions.shared_shards(store, regions, variables=["v"]) == {
        "v": {"v/c/1/0": [0, 1, 2]}
    }


@pytest.mark.parametrize(
    ("region", "match"), [({"t": slice(0, 40, 2)}, "has a step"), ({"t": 3}, "not a slice")]
)
def test_bad_regions(store, region, match):
    with pytest.raises(WriteError, match=match):
        shardwise.regions.shared_shards(store, [region, {"t": slice(0, 10)}])
