"""dask's own Zarr tests (every test of the installed ``dask.array.tests.test_array_core``
that writes or reads Zarr) run with ``dask.array.to_zarr`` and ``dask.array.from_zarr``
redirected to shardwise's: the argument spelling translated (dask's positional order,
which shardwise's ``to_zarr`` does not share), nothing else.

A failure here is a difference from dask a user would meet. The deliberate ones are
listed in ``DIFFERENCES`` (and in the user guide's table, with the reasons) and expected
to fail, strictly: a test that starts passing shows up too. A dask release that adds a
Zarr test shows up in ``test_every_zarr_test_of_dask_runs_here``.
"""

from __future__ import annotations

import inspect

import pytest

dask_tests = pytest.importorskip("dask.array.tests.test_array_core")

import dask.array as da  # noqa: E402
import dask.array.core  # noqa: E402

# dask's Zarr tests, collected here under their own names (pytest collects the
# functions imported into this module, with their parametrizations and marks)
from dask.array.tests.test_array_core import (  # noqa: E402, F401
    test_compute_chunk_sizes_warning_fixes_to_zarr,
    test_from_array_respects_zarr_shards,
    test_from_zarr_name,
    test_from_zarr_unique_name,
    test_read_zarr_chunks,
    test_to_zarr_unknown_chunks_raises,
    test_zarr_empty_array,
    test_zarr_existing_array,
    test_zarr_group,
    test_zarr_inline_array,
    test_zarr_irregular_chunks,
    test_zarr_nocompute,
    test_zarr_pass_store,
    test_zarr_regions,
    test_zarr_return_stored,
    test_zarr_risky_shards_warns,
    test_zarr_roundtrip,
    test_zarr_roundtrip_with_path_like,
    test_zarr_sharding_roundtrip,
    test_zarr_to_zarr_shards,
    unknown,  # a fixture
)

import shardwise  # noqa: E402

HERE = {name for name in globals() if name.startswith("test_") and "zarr" in name}


def to_zarr(
    arr,
    url,
    component=None,
    storage_options=None,
    region=None,
    compute=True,
    return_stored=False,
    mode=None,
    **zarr_array_kwargs,
):
    """``dask.array.to_zarr``'s signature, calling ``shardwise.array.to_zarr``. dask's default
    ``mode="a"`` creates the array and refuses one that exists (zarr-python's
    ``create_array`` without ``overwrite``): shardwise's default, ``None``, does that."""
    return shardwise.array.to_zarr(
        arr,
        url,
        component=component,
        storage_options=storage_options,
        region=region,
        compute=compute,
        return_stored=return_stored,
        mode=mode,
        **zarr_array_kwargs,
    )


def from_zarr(
    url, component=None, storage_options=None, chunks=None, name=None, inline_array=False, **kw
):
    """``dask.array.from_zarr``'s signature (shardwise's has the same order)."""
    return shardwise.array.from_zarr(
        url,
        component=component,
        storage_options=storage_options,
        chunks=chunks,
        name=name,
        inline_array=inline_array,
        **kw,
    )


@pytest.fixture(autouse=True)
def _shardwise_in_place_of_dask(monkeypatch, request):
    for module in (da, dask.array.core):  # Array.to_zarr calls dask.array.core.to_zarr
        monkeypatch.setattr(module, "to_zarr", to_zarr)
        monkeypatch.setattr(module, "from_zarr", from_zarr)
    entry = DIFFERENCES.get(request.node.name) or DIFFERENCES.get(request.node.originalname)
    # (a parametrized test is listed whole, or case by case)
    if entry is not None:
        reason, raises = entry
        request.applymarker(pytest.mark.xfail(strict=True, reason=reason, raises=raises))


_CHUNKS = (
    "from_zarr reads one dask chunk per shard (dask: one per zarr chunk), and its "
    "chunk sizes move to inner-chunk boundaries"
)
_RECHUNK = (
    "to_zarr never rechunks: irregular dask chunks become a rectilinear shard grid, "
    "chunks that cut shards or zarr chunks are merged by the one task owning each "
    "(dask rechunks, and warns)"
)
_DELAYED = (
    "to_zarr(compute=False) returns a dask.delayed (dask 2025.12+: a dask array whose "
    "chunks compute to nothing); return_stored=True gives an array"
)
# by test name (with the parametrization where only some cases differ): why, and the
# error the difference raises in the test
DIFFERENCES: dict[str, tuple[str, type[BaseException] | tuple[type[BaseException], ...]]] = {
    "test_zarr_sharding_roundtrip[chunks0-shards0]": (_CHUNKS, AssertionError),
    "test_zarr_sharding_roundtrip[chunks1-shards1]": (_CHUNKS, AssertionError),
    "test_read_zarr_chunks": (_CHUNKS, shardwise.errors.ChunkRoundingWarning),
    "test_zarr_inline_array[False]": (
        "the graph holds shardwise's ArrayReader (it reads byte ranges), not the zarr.Array",
        AssertionError,
    ),
    "test_zarr_irregular_chunks[shape0-chunks0-True]": (_RECHUNK, pytest.fail.Exception),
    "test_zarr_irregular_chunks[shape1-chunks1-True]": (_RECHUNK, pytest.fail.Exception),
    "test_zarr_irregular_chunks[shape4-chunks4-True]": (_RECHUNK, pytest.fail.Exception),
    "test_compute_chunk_sizes_warning_fixes_to_zarr": (_RECHUNK, pytest.fail.Exception),
    "test_zarr_risky_shards_warns": (_RECHUNK, pytest.fail.Exception),
    "test_zarr_regions": (_RECHUNK, pytest.fail.Exception),
    "test_zarr_to_zarr_shards": (_DELAYED, TypeError),  # a Delayed has no chunksize
    "test_zarr_nocompute": (_DELAYED, AssertionError),
}


def test_every_zarr_test_of_dask_runs_here():
    """A Zarr test a dask release adds fails here until it is imported above."""
    theirs = {
        name
        for name, f in inspect.getmembers(dask_tests, inspect.isfunction)
        if name.startswith("test_") and "zarr" in inspect.getsource(f)
    }
    # not about Zarr: dask's own helpers, or other formats mentioning zarr in passing
    theirs -= {"test_regular_chunks", "test_tiledb_roundtrip", "test_tiledb_multiattr"}
    missing = sorted(theirs - HERE)
    assert not missing, f"dask's Zarr tests not run against shardwise: {missing}"
