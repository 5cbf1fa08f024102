"""What a user's process sees: zarr-python's rectilinear flag is off (zarr requires a
user to turn it on), and every reader and tool of shardwise's reads a rectilinear array
with consolidated metadata all the same, leaving the flag as it was. Marked for
zarr-python's rectilinear grids only, so that it runs on every release of the window
that has them (zarr 3.2 on); the readers through xarray, where xarray reads them too."""

from __future__ import annotations

import dask
import dask.array as da
import numpy as np
import pytest
import xarray as xr
import zarr

import shardwise
from shardwise import _compat

pytestmark = [
    pytest.mark.rectilinear,
    pytest.mark.filterwarnings("ignore:Consolidated metadata is currently not part:UserWarning"),
]

VALUES = np.arange(30 * 4, dtype="f4").reshape(30, 4)
XARRAY = pytest.mark.xarray_rectilinear

READS = {
    "ArrayReader": lambda p: shardwise.ArrayReader.open(p, "tas")[...],
    "from_zarr": lambda p: shardwise.array.from_zarr(p, "tas").compute(),
    "info": lambda p: shardwise.info(p).arrays[0].shards_present,
    "verify": lambda p: shardwise.verify(p).ok,
    "inventory": lambda p: int(shardwise.inventory(p, "tas").attrs["shards_present"]),
    "check_regions": lambda p: shardwise.regions.check_regions(p, [{"time": slice(0, 10)}]),
    "reshard": lambda p: shardwise.ArrayReader.open(
        shardwise.reshard(p, p.parent / "copy.zarr") and p.parent / "copy.zarr", "tas"
    )[...],
    "xr.open_dataset": lambda p: (
        xr.open_dataset(p, engine="shardwise", consolidated=True).tas.values
    ),
    "shardwise.open_dataset": lambda p: shardwise.open_dataset(p, chunks="inner").tas.values,
}
EXPECTED = {"info": 3, "verify": True, "inventory": 3, "check_regions": None}


def _flag_off():
    assert not zarr.config.get("array.rectilinear_chunks")


@pytest.fixture
def store(tmp_path):
    """Shards of 10, 6 and 14 rows (dask's chunks), inner chunks of 2, written through
    the dask-array path, and the group's metadata consolidated as a user would (zarr's
    flag on around zarr's own call)."""
    path = tmp_path / "r.zarr"
    x = da.from_array(VALUES, chunks=((10, 6, 14), 4))
    with dask.config.set(scheduler="threads"):
        shardwise.array.to_zarr(x, path, path="tas", chunks=(2, 4), dimension_names=["time", "x"])
    with zarr.config.set({"array.rectilinear_chunks": True}):
        zarr.consolidate_metadata(path)
    _flag_off()
    return path


@pytest.mark.parametrize(
    "read",
    [
        pytest.param(name, marks=[XARRAY] if "open_dataset" in name else [])
        for name in sorted(READS)
    ],
)
def test_every_reader_and_tool_with_the_flag_off(store, read):
    got = READS[read](store)
    _flag_off()
    if read in EXPECTED:
        assert got == EXPECTED[read]
    else:
        np.testing.assert_array_equal(got, VALUES)
    assert _compat.has("rectilinear")
