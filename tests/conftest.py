from __future__ import annotations

import pytest

import shardwise

from datasets import WEATHER_ENCODING, weather


@pytest.fixture(autouse=True)
def _fresh_index_cache():
    """Each test starts with an empty per-process shard-index cache."""
    shardwise.clear_index_cache()
    yield
    shardwise.clear_index_cache()


@pytest.fixture
def weather_store(tmp_path):
    """A sharded store written by xarray/zarr-python, and the dataset written to it."""
    ds = weather()
    path = tmp_path / "weather.zarr"
    ds.to_zarr(path, zarr_format=3, encoding=WEATHER_ENCODING, consolidated=False)
    return path, ds
