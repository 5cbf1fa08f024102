"""Small datasets shared by the tests."""

from __future__ import annotations

import numpy as np
import pandas as pd
import xarray as xr


def weather(nt: int = 40, ny: int = 30, nx: int = 20, seed: int = 0) -> xr.Dataset:
    """A small CF-style dataset: times, coordinates, attributes, a packed variable."""
    rng = np.random.default_rng(seed)
    time = pd.date_range("2000-01-01", periods=nt, freq="6h")
    y = np.linspace(-45, 45, ny)
    x = np.linspace(0, 350, nx)
    field = 280 + 10 * np.sin(np.deg2rad(y))[None, :, None] + rng.normal(0, 1, (nt, ny, nx))
    field[:, :3, :3] = np.nan  # a corner of missing values
    return xr.Dataset(
        {
            "temperature": (("time", "y", "x"), field.astype("f4"), {"units": "K"}),
            "precip": (("time", "y", "x"), rng.gamma(1, 2, (nt, ny, nx)), {"units": "mm"}),
            "station": (("y",), np.arange(ny, dtype="i4"), {"long_name": "station id"}),
        },
        coords={"time": time, "y": ("y", y, {"units": "degrees_north"}), "x": x},
        attrs={"title": "shardwise test data", "history": "made in tests"},
    )


WEATHER_ENCODING = {
    "temperature": {
        "chunks": (5, 10, 10),
        "shards": (10, 30, 20),
        "dtype": "i2",
        "scale_factor": 0.01,
        "add_offset": 280.0,
        "_FillValue": -32768,
    },
    "precip": {"chunks": (8, 15, 5), "shards": (16, 30, 10)},
}


ROWS = 50
"""The rows an append adds in the append and fault tests."""


def block(start: int, rows: int = ROWS) -> np.ndarray:
    """Rows that say where they belong: row r holds r in every column (4 columns)."""
    return np.repeat(np.arange(start, start + rows, dtype="f8")[:, None], 4, axis=1)


def rows_dataset(start: int, rows: int) -> xr.Dataset:
    """Rows ``start`` to ``start + rows`` of two variables along ``y`` (``temp``:
    :func:`block`, ``salt``: the same plus 0.5), in dask chunks of :data:`ROWS`."""
    values = block(start, rows)
    return xr.Dataset(
        {"temp": (("y", "x"), values), "salt": (("y", "x"), values + 0.5)},
        coords={"y": np.arange(start, start + rows)},
    ).chunk({"y": ROWS})
