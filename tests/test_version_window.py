"""Features only the newer releases of the supported versions have
(``shardwise._compat.NEWER``) are refused on the others with a ``VersionError`` naming
the release they need, before anything is written.

Each refusal is tested on every installation: where the installed release has the
feature, the test makes ``NEWER`` ask for a release that does not exist yet; where it
lacks it (the lowest-versions run), the installed release is the real reason."""

from __future__ import annotations

import json

import dask.array as da
import numpy as np
import pytest
import xarray as xr

import shardwise
from shardwise import _compat

IRREGULAR = (10, 20, 10)


def _lacking(monkeypatch: pytest.MonkeyPatch, feature: str) -> None:
    """``feature`` missing, whatever is installed."""
    if _compat.has(feature):
        distribution, _, what = _compat.NEWER[feature]
        monkeypatch.setitem(_compat.NEWER, feature, (distribution, (9999,), what))


def test_versions_are_numbers():
    assert _compat.version("zarr") >= (3, 1, 3)
    assert all(isinstance(n, int) for n in _compat.version("xarray"))


def test_rectilinear_shards_of_a_dask_array_need_zarr_3_2(tmp_path, monkeypatch):
    _lacking(monkeypatch, "rectilinear")
    x = da.zeros((40, 8), chunks=(IRREGULAR, 8))
    with pytest.raises(shardwise.errors.VersionError) as info:
        shardwise.array.to_zarr(x, tmp_path / "a.zarr", path="v")
    assert isinstance(info.value, NotImplementedError)
    assert _compat.needed("rectilinear") in str(info.value)
    assert "Nothing was written" in str(info.value)
    assert not (tmp_path / "a.zarr").exists()
    # regular chunks, or explicit shards, are written as ever
    shardwise.array.to_zarr(x.rechunk((10, 8)), tmp_path / "b.zarr", path="v")
    shardwise.array.to_zarr(x, tmp_path / "c.zarr", path="v", shards=(20, 8), chunks=(10, 8))


@pytest.mark.parametrize("feature", ["rectilinear", "xarray-rectilinear"])
def test_rectilinear_shards_through_xarray_need_both_releases(tmp_path, monkeypatch, feature):
    _lacking(monkeypatch, feature)
    ds = xr.Dataset({"v": (("y", "x"), np.zeros((40, 8)))}).chunk({"y": IRREGULAR})
    with pytest.raises(shardwise.errors.VersionError) as info:
        shardwise.to_zarr(ds, tmp_path / "d.zarr", shards="dask")
    # (the first feature lacking is named: zarr-python's, where it is lacking too)
    lacking = [f for f in ("rectilinear", "xarray-rectilinear") if not _compat.has(f)]
    assert _compat.needed(lacking[0]) in str(info.value)
    assert "'v'" in str(info.value)
    assert not (tmp_path / "d.zarr").exists()


def _rectilinear_store(tmp_path) -> str:
    """A store holding an array with a rectilinear grid, as zarr-python 3.2+ writes it."""
    path = tmp_path / "r.zarr"
    (path / "v").mkdir(parents=True)
    (path / "zarr.json").write_text(json.dumps({"zarr_format": 3, "node_type": "group"}))
    (path / "v" / "zarr.json").write_text(json.dumps(RECTILINEAR))
    return str(path)


RECTILINEAR = {
    "zarr_format": 3,
    "node_type": "array",
    "shape": [40],
    "data_type": "float64",
    "chunk_grid": {
        "name": "rectilinear",
        "configuration": {"kind": "inline", "chunk_shapes": [[10, 20, 10]]},
    },
    "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
    "fill_value": 0.0,
    "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
    "dimension_names": ["y"],
}


def test_a_rectilinear_document_is_named_where_zarr_cannot_read_it(monkeypatch):
    from shardwise.format.metadata import parse_document

    _lacking(monkeypatch, "rectilinear")
    with pytest.raises(shardwise.errors.VersionError) as info:
        parse_document(json.dumps(RECTILINEAR).encode(), "v/zarr.json")
    assert _compat.needed("rectilinear") in str(info.value) and "v/zarr.json" in str(info.value)


@pytest.mark.skipif(_compat.has("rectilinear"), reason="zarr-python reads rectilinear grids")
@pytest.mark.parametrize("reader", ["ArrayReader", "from_zarr", "open_dataset"])
def test_reading_a_rectilinear_array_names_the_release_it_needs(tmp_path, reader):
    store = _rectilinear_store(tmp_path)
    with pytest.raises(shardwise.errors.VersionError) as info:
        if reader == "ArrayReader":
            shardwise.ArrayReader.open(store, "v")
        elif reader == "from_zarr":
            shardwise.array.from_zarr(store, component="v")
        else:
            xr.open_dataset(store, engine="shardwise", consolidated=False)
    assert "zarr-python >= 3.2" in str(info.value) and "v/zarr.json" in str(info.value)


def test_every_private_name_resolves_on_the_installed_releases():
    """What ``shardwise._compat`` says of the releases its private names were checked
    against, checked wherever the suite runs (the floors, the middle of the window, the
    newest): each name imports, from where ``_WHERE`` says or, on older releases, from
    ``_BEFORE``; a feature's name is absent only where the feature is (``NEWER``)."""
    for name in _compat._WHERE:
        value = getattr(_compat, name)
        feature = _compat._FEATURE_OF.get(name)
        absent = (value.__doc__ or "").startswith("absent:")
        assert absent == (feature is not None and not _compat.has(feature)), name
