"""Parity with xarray's own Zarr path: ``engine="shardwise"`` against ``engine="zarr"``
and ``shardwise.to_zarr`` against ``Dataset.to_zarr``, the same cases through both,
comparing results, errors and warnings."""

from __future__ import annotations

import asyncio
import inspect
import shutil
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr
import zarr
from xarray.backends.zarr import ZarrBackendEntrypoint

import shardwise
from shardwise.xarray.backend import ShardwiseBackendEntrypoint


# -- open_dataset's parameters --------------------------------------------------------------
@pytest.mark.parametrize("method", ["open_dataset", "open_groups_as_dict", "open_datatree"])
def test_every_parameter_of_engine_zarr_is_accepted_with_its_default(method):
    """A parameter xarray adds to engine="zarr" fails here until the engine takes it."""
    theirs = inspect.signature(getattr(ZarrBackendEntrypoint, method)).parameters
    ours = inspect.signature(getattr(ShardwiseBackendEntrypoint, method)).parameters
    missing = [name for name in theirs if name not in ours]
    assert not missing, f"engine='shardwise' {method} lacks {missing}"
    for name, p in theirs.items():
        assert ours[name].default == p.default, (name, ours[name].default, p.default)
        assert ours[name].kind == p.kind, name
    # (and engine="zarr"'s keywords for zarr-python 2, which newer xarray dropped)
    older = {"synchronizer", "chunk_store", "zarr_version"}
    assert set(ours) - set(theirs) - older == {"read_options"}


def test_the_zarr_python_2_keywords_of_older_xarray(tmp_path):
    path = tmp_path / "s.zarr"
    xr.Dataset({"v": ("x", np.arange(4.0))}).to_zarr(path, zarr_format=3, consolidated=False)
    opened = xr.open_dataset(path, engine="shardwise", consolidated=False, zarr_version=3)
    assert opened.v.values.tolist() == [0.0, 1.0, 2.0, 3.0]
    for bad in ({"synchronizer": object()}, {"chunk_store": {}}, {"zarr_version": 2}):
        with pytest.raises(shardwise.errors.ArgumentError):
            xr.open_dataset(path, engine="shardwise", consolidated=False, zarr_format=3, **bad)


def fill_value_stores(tmp_path: Path) -> dict[str, Path]:
    """A v3 and a v2 array whose unwritten chunk is the Zarr fill value, no _FillValue."""
    out = {}
    for fmt in (3, 2):
        path = tmp_path / f"fill-v{fmt}.zarr"
        group = zarr.create_group(path, zarr_format=fmt)
        kwargs = (
            {"dimension_names": ("x",)}
            if fmt == 3
            else {"attributes": {"_ARRAY_DIMENSIONS": ["x"]}}
        )
        a = group.create_array("v", shape=(4,), chunks=(2,), dtype="f4", fill_value=-1.0, **kwargs)
        a[:2] = [1, 2]
        out[f"v{fmt}"] = path
    return out


@pytest.mark.parametrize("mask", [None, True, False])
@pytest.mark.parametrize("fmt", ["v3", "v2"])
def test_use_zarr_fill_value_as_mask(tmp_path, mask, fmt):
    path = fill_value_stores(tmp_path)[fmt]
    kwargs = {"use_zarr_fill_value_as_mask": mask, "consolidated": False}
    theirs = xr.open_dataset(path, engine="zarr", **kwargs)
    ours = xr.open_dataset(path, engine="shardwise", **kwargs)
    xr.testing.assert_identical(ours.load(), theirs.load())
    assert ours.v.encoding.get("_FillValue") == theirs.v.encoding.get("_FillValue")


@pytest.mark.parametrize("mode", ["r", "r+", "a"])
def test_open_modes_and_cache_members(tmp_path, mode):
    path = fill_value_stores(tmp_path)["v3"]
    for cache_members in (True, False):
        kwargs = {"mode": mode, "cache_members": cache_members, "consolidated": False}
        theirs = xr.open_dataset(path, engine="zarr", **kwargs)
        ours = xr.open_dataset(path, engine="shardwise", **kwargs)
        xr.testing.assert_identical(ours.load(), theirs.load())


def test_a_zarr_store_opened_already(tmp_path):
    from xarray.backends.zarr import ZarrStore

    path = fill_value_stores(tmp_path)["v3"]
    store = ZarrStore.open_group(str(path), mode="r", consolidated=False)
    ours = xr.open_dataset(path, engine="shardwise", store=store)
    xr.testing.assert_identical(
        ours.load(), xr.open_dataset(path, engine="zarr", consolidated=False).load()
    )


def test_datatree_parameters(tmp_path):
    tree = xr.DataTree.from_dict(
        {
            "/": xr.Dataset({"a": ("x", np.arange(3.0))}),
            "/child": xr.Dataset({"b": ("y", np.arange(4, dtype="i2"))}),
        }
    )
    tree.to_zarr(tmp_path / "tree.zarr", zarr_format=3, consolidated=False)
    kwargs = {"mode": "r", "consolidated": False, "decode_timedelta": False}
    theirs = xr.open_datatree(tmp_path / "tree.zarr", engine="zarr", **kwargs)
    ours = xr.open_datatree(tmp_path / "tree.zarr", engine="shardwise", **kwargs)
    xr.testing.assert_identical(ours.load(), theirs.load())
    for group in (None, "child"):
        want = xr.open_groups(tmp_path / "tree.zarr", engine="zarr", group=group, **kwargs)
        got = xr.open_groups(tmp_path / "tree.zarr", engine="shardwise", group=group, **kwargs)
        assert list(got) == list(want)
        for name in want:
            xr.testing.assert_identical(got[name].load(), want[name].load())


# -- asynchronous loading ---------------------------------------------------------------------
def test_load_async_values_and_concurrent_variables(tmp_path):
    """``await ds.load_async()`` reads every variable at once: the requests of the
    variables overlap (counted on a LatencyStore), and the values are engine="zarr"'s."""
    from zarr.storage import LocalStore

    from shardwise.testing import LatencyStore

    rng = np.random.default_rng(0)
    ds = xr.Dataset(
        {f"v{i}": (("t", "x"), rng.normal(size=(40, 8)).astype("f4")) for i in range(4)}
    ).chunk({"t": 20})
    shardwise.to_zarr(
        ds, tmp_path / "a.zarr", shards={"t": 40}, chunks={"t": 10}, consolidated=False
    )

    async def load() -> tuple[xr.Dataset, xr.Variable, int]:
        store = LatencyStore(LocalStore(tmp_path / "a.zarr", read_only=True), delay=0.05)
        opened = xr.open_dataset(store, engine="shardwise", consolidated=False)
        store.overlap.peak = 0
        loaded = await opened.load_async()
        peak = store.overlap.peak
        part = await opened.v2.variable[5:15].load_async()
        return loaded, part, peak

    loaded, part, peak = asyncio.run(load())
    theirs = xr.open_dataset(tmp_path / "a.zarr", engine="zarr", consolidated=False).load()
    xr.testing.assert_identical(loaded, theirs)
    np.testing.assert_array_equal(part.values, theirs.v2.values[5:15])
    assert peak >= 4, f"the 4 variables' reads did not overlap (at most {peak} at once)"


# -- writing ----------------------------------------------------------------------------------
def write_both(ds: xr.Dataset, tmp_path: Path, **kwargs) -> tuple[object, object]:
    """The same write through ds.to_zarr and shardwise.to_zarr: (result or exception) each,
    with the warnings each raised (as errors, so a warning is a difference too)."""
    out = []
    for who in ("xarray", "shardwise"):
        path = tmp_path / f"{who}.zarr"
        shutil.rmtree(path, ignore_errors=True)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            try:
                if who == "xarray":
                    ds.to_zarr(path, zarr_format=3, consolidated=False, **kwargs)
                else:
                    shardwise.to_zarr(ds, path, consolidated=False, **kwargs)
                out.append(path)
            except Exception as e:
                out.append(e)
    return out[0], out[1]


def assert_same_outcome(theirs: object, ours: object) -> None:
    if isinstance(theirs, Exception):
        assert isinstance(ours, type(theirs)), (theirs, ours)
        # xarray's text first, shardwise's additions after it
        assert str(ours).startswith(str(theirs).rstrip(".")), (str(theirs), str(ours))
        return
    assert not isinstance(ours, Exception), ours
    a = xr.open_dataset(theirs, engine="zarr", consolidated=False).load()
    b = xr.open_dataset(ours, engine="zarr", consolidated=False).load()
    xr.testing.assert_identical(b, a)


def test_zero_length_dimension(tmp_path):
    ds = xr.Dataset({"x": (("a", "b"), np.empty((5, 0)))}).chunk({})
    theirs, ours = write_both(ds, tmp_path)
    assert_same_outcome(theirs, ours)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        back = xr.open_dataset(ours, engine="shardwise", chunks={}, consolidated=False)
        xr.testing.assert_identical(back.load(), ds.load())


@pytest.mark.parametrize(
    "case",
    [
        "unexpected encoding key",
        "variable name not a string",
        "unknown mode",
        "append_dim not a dimension",
        "write_empty_chunks",
        "timedelta and datetime",
        "attributes and encodings",
    ],
)
def test_same_results_and_errors_as_dataset_to_zarr(tmp_path, case):
    ds = xr.Dataset(
        {"v": (("t", "x"), np.arange(24.0).reshape(6, 4))},
        coords={"t": pd.date_range("2001-01-01", periods=6)},
    ).chunk({"t": 3})
    kwargs: dict = {}
    if case == "unexpected encoding key":
        kwargs = {"encoding": {"v": {"foo": 1}}}
    elif case == "variable name not a string":
        ds = xr.Dataset({1: ("x", np.arange(3.0))}).chunk({})
    elif case == "unknown mode":
        kwargs = {"mode": "x"}
    elif case == "append_dim not a dimension":
        kwargs = {"append_dim": "nope"}
    elif case == "write_empty_chunks":
        ds["v"][:] = np.nan
        kwargs = {"write_empty_chunks": True}
    elif case == "timedelta and datetime":
        ds["d"] = ("t", pd.timedelta_range("1h", periods=6, freq="h"))
    elif case == "attributes and encodings":
        ds.v.attrs = {"units": "K", "long_name": "temperature"}
        kwargs = {"encoding": {"v": {"dtype": "i2", "scale_factor": 0.5, "_FillValue": -1}}}
    theirs, ours = write_both(ds, tmp_path, **kwargs)
    assert_same_outcome(theirs, ours)


def test_region_auto_with_coordinates_and_append_with_encoding(tmp_path):
    ds = xr.Dataset(
        {"v": (("t", "x"), np.arange(40.0).reshape(10, 4))},
        coords={"t": np.arange(10), "x": [10, 20, 30, 40]},
    ).chunk({"t": 5})
    for who in ("xarray", "shardwise"):
        path = tmp_path / f"{who}.zarr"
        write = (
            (lambda d, p=path, **kw: d.to_zarr(p, zarr_format=3, consolidated=False, **kw))
            if who == "xarray"
            else (lambda d, p=path, **kw: shardwise.to_zarr(d, p, consolidated=False, **kw))
        )
        write(ds, encoding={"v": {"dtype": "f4"}})
        write((ds * 2).isel(t=slice(5, 10)), region="auto", mode="r+")
        more = (ds + 100).assign_coords(t=np.arange(10, 20))
        write(more, append_dim="t")
    a = xr.open_dataset(tmp_path / "xarray.zarr", engine="zarr", consolidated=False).load()
    b = xr.open_dataset(tmp_path / "shardwise.zarr", engine="zarr", consolidated=False).load()
    xr.testing.assert_identical(b, a)
    assert b.v.dtype == np.float32


@pytest.mark.parametrize("consolidated", [False, None])
def test_datatree_to_zarr(tmp_path, consolidated):
    """``shardwise.to_zarr(tree, ...)`` writes every node as ``DataTree.to_zarr`` does
    (groups, inherited coordinates at the root only, encodings by group path), each
    node's dask data with the shard writer."""
    tree = xr.DataTree.from_dict(
        {
            "/": xr.Dataset(coords={"t": np.arange(12)}),
            "/a": xr.Dataset({"v": ("t", np.arange(12.0))}).chunk({"t": 5}),
            "/a/b": xr.Dataset({"w": (("t", "x"), np.ones((12, 3), "f4"))}).chunk({"t": 7}),
        }
    )
    encoding = {"/a/b": {"w": {"shards": (6, 3), "chunks": (2, 3)}}}
    with warnings.catch_warnings():
        # xarray's default consolidates, and zarr-python warns that consolidated metadata
        # is not in the Zarr v3 spec: both writers get the same warning
        warnings.filterwarnings("ignore", "Consolidated metadata", UserWarning)
        aligned = tree.copy()
        aligned["a/b"] = aligned["a/b"].chunk({"t": 6})  # xarray refuses the cut shards
        aligned.to_zarr(
            tmp_path / "x.zarr", zarr_format=3, encoding=encoding, consolidated=consolidated
        )
        shardwise.to_zarr(tree, tmp_path / "s.zarr", encoding=encoding, consolidated=consolidated)
        theirs = xr.open_datatree(tmp_path / "x.zarr", engine="zarr", consolidated=consolidated)
        ours = xr.open_datatree(tmp_path / "s.zarr", engine="zarr", consolidated=consolidated)
    xr.testing.assert_identical(ours.load(), theirs.load())
    assert zarr.open_array(tmp_path / "s.zarr", path="a/b/w").shards == (6, 3)
    with pytest.raises(ValueError, match="unexpected encoding group name"):
        shardwise.to_zarr(tree, tmp_path / "t.zarr", encoding={"/nope": {}})
    with pytest.raises(NotImplementedError, match="append_dim"):
        shardwise.to_zarr(tree, tmp_path / "s.zarr", append_dim="t")


def test_datatree_shards_and_chunks_by_dimension(tmp_path):
    """``shards=`` and ``chunks=`` by dimension name apply to every node that has the
    dimension, as ``tree.chunk({...})`` does (the root here has none); only a name no
    node has is refused, naming the tree's dimensions, before anything is written."""
    rng = np.random.default_rng(5)
    u, w = rng.random((40, 3)), rng.random(40)
    tree = xr.DataTree.from_dict(
        {
            "/": xr.Dataset(attrs={"root": 1}),
            "/a": xr.Dataset({"u": (("t", "z"), u)}),
            "/a/b": xr.Dataset({"w": (("t",), w)}),
        }
    )
    shardwise.to_zarr(
        tree.chunk({"t": 7}),
        tmp_path / "t.zarr",
        shards={"t": 15},
        chunks={"t": 5},
        consolidated=False,
    )
    for path, shape in (("a/u", (15, 3)), ("a/b/w", (15,))):
        arr = zarr.open_array(tmp_path / "t.zarr", path=path)
        assert (arr.shards, arr.chunks) == (shape, (5, *shape[1:]))
    back = xr.open_datatree(tmp_path / "t.zarr", engine="shardwise", consolidated=False)
    xr.testing.assert_identical(back.load(), tree)
    with pytest.raises(shardwise.errors.WriteError, match=r"no node of the tree has.*\['t', 'z'\]"):
        shardwise.to_zarr(tree, tmp_path / "n.zarr", shards={"x": 15})
    with pytest.raises(shardwise.errors.WriteError, match=r"no node of the tree has"):
        shardwise.to_zarr(tree, tmp_path / "n.zarr", chunks={"t": 0})
    assert not (tmp_path / "n.zarr").exists()


def test_append_with_encoding_of_existing_variables(tmp_path):
    """xarray refuses an encoding for a variable that exists when appending; so does
    shardwise, with xarray's text first."""
    ds = xr.Dataset({"v": ("t", np.arange(6.0))}, coords={"t": np.arange(6)}).chunk({"t": 3})
    more = ds.assign_coords(t=np.arange(6, 12))
    outcomes = []
    for who in ("xarray", "shardwise"):
        path = tmp_path / f"{who}.zarr"
        if who == "xarray":
            ds.to_zarr(path, zarr_format=3, consolidated=False)
        else:
            shardwise.to_zarr(ds, path, consolidated=False)
        try:
            if who == "xarray":
                more.to_zarr(
                    path, append_dim="t", encoding={"v": {"dtype": "f4"}}, consolidated=False
                )
            else:
                shardwise.to_zarr(
                    more, path, append_dim="t", encoding={"v": {"dtype": "f4"}}, consolidated=False
                )
            outcomes.append(path)
        except Exception as e:
            outcomes.append(e)
    assert_same_outcome(*outcomes)


@pytest.mark.parametrize("create_default_indexes", [True, False])
def test_create_default_indexes(tmp_path, create_default_indexes):
    ds = xr.Dataset({"v": ("t", np.arange(6.0))}, coords={"t": np.arange(6) * 10})
    ds.to_zarr(tmp_path / "a.zarr", zarr_format=3, consolidated=False)
    kwargs = {"create_default_indexes": create_default_indexes, "consolidated": False}
    theirs = xr.open_dataset(tmp_path / "a.zarr", engine="zarr", **kwargs)
    ours = xr.open_dataset(tmp_path / "a.zarr", engine="shardwise", **kwargs)
    assert list(ours.xindexes) == list(theirs.xindexes)
    xr.testing.assert_identical(ours.load(), theirs.load())


def test_datatree_refuses_options_it_would_drop(tmp_path):
    """Array-only options and commit= are refused for a DataTree, as for a Dataset,
    before anything is written, rather than dropped."""
    tree = xr.DataTree.from_dict({"/a": xr.Dataset({"v": ("t", np.arange(4.0))})})
    with pytest.raises(shardwise.errors.WriteError, match="options for a single dask array"):
        shardwise.to_zarr(tree, tmp_path / "t.zarr", fill_value=1.0)
    with pytest.raises(shardwise.errors.WriteError, match="commit= is for Icechunk sessions"):
        shardwise.to_zarr(tree, tmp_path / "t.zarr", commit="x")
    assert not (tmp_path / "t.zarr").exists()
