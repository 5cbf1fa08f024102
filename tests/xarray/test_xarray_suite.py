"""xarray's own Zarr round-trip tests (``ZarrBase``, from the installed
``xarray.tests.test_backends``) run against shardwise three ways: xarray writes and
shardwise reads, shardwise writes and xarray reads, shardwise both.

A failure here is a difference from ``engine="zarr"`` / ``Dataset.to_zarr`` that a user
would meet; the deliberate ones are listed in ``DIFFERENCES`` (and in the user guide's
table) and expected to fail for the reason given, strictly, so that a fix upstream or
here shows up too.
"""

from __future__ import annotations

import asyncio
import contextlib

import pytest
import xarray as xr

pytest.importorskip("xarray.tests.test_backends")

from xarray.tests import test_backends as xb
from xarray.tests.conftest import time_unit, use_dask  # noqa: F401  (fixtures the tests use)
from xarray.tests.test_backends import default_zarr_format  # noqa: F401

import shardwise

# xarray's own warning filters (its pyproject.toml): warnings from xarray (and here from
# shardwise) are errors, zarr-python's about its V3 extensions are not
pytestmark = pytest.mark.filterwarnings(
    "default",
    "error:::xarray.*",
    "error:::shardwise.*",
    "ignore:Zarr-Python is not in alignment with the final V3 specification",
    "ignore:is currently not part .* the Zarr version 3 specification.",
    # raised as much when xarray writes and reads the store (xarray's own
    # TestZarrDirectoryStore.test_manual_chunk fails on it under these filters)
    "default:The specified chunks separate the stored chunks:UserWarning",
)


# The deliberate differences (the user guide's table says why): by test name, the classes
# (the ways of running) they apply to and why; each is expected to fail, strictly.
_WRITES = ("TestShardwiseWritesXarrayReads", "TestShardwiseBoth")
DIFFERENCES = {
    "test_shard_encoding_with_dask[3]": (
        _WRITES,
        "dask chunks that cut shards are written (one task owns each shard) where "
        "Dataset.to_zarr refuses them",
    ),
    "test_chunk_encoding_with_dask[3]": (
        _WRITES,
        "irregular dask chunks become a rectilinear shard grid, and chunks that overlap "
        "zarr chunks are written safely, where Dataset.to_zarr refuses both",
    ),
    "test_chunk_encoding_with_dask[2]": (
        _WRITES,
        "irregular dask chunks are refused for Zarr v2 with shardwise's advice (write "
        "Zarr v3: a rectilinear grid), and chunks that overlap zarr chunks are written "
        "safely, where Dataset.to_zarr refuses them",
    ),
}


@pytest.fixture(autouse=True)
def _deliberate_difference(request):
    entry = DIFFERENCES.get(request.node.name)
    if entry is not None and request.node.cls.__name__ in entry[0]:
        request.applymarker(pytest.mark.xfail(strict=True, reason=entry[1]))


class _Suite(xb.TestZarrDirectoryStore):
    def test_load_async(self) -> None:  # xarray runs it with pytest-asyncio
        asyncio.run(xb.CFEncodedBase.test_load_async(self))


class _ShardwiseReads:
    @contextlib.contextmanager
    def open(self, path, **kwargs):
        with xr.open_dataset(
            path, engine="shardwise", mode="r", **kwargs, **self.version_kwargs
        ) as ds:
            yield ds


class _ShardwiseWrites:
    def save(self, dataset, store_target, **kwargs):
        return shardwise.to_zarr(dataset, store=store_target, **kwargs, **self.version_kwargs)


class TestXarrayWritesShardwiseReads(_ShardwiseReads, _Suite):
    pass


class TestShardwiseWritesXarrayReads(_ShardwiseWrites, _Suite):
    pass


class TestShardwiseBoth(_ShardwiseReads, _ShardwiseWrites, _Suite):
    pass
