"""The shardwise demo: write a sharded dataset, read it back on a local dask cluster.

Run with ``make demo`` (or ``python -m shardwise.demo [--path DIR] [--workers N]``).

1. makes a sample climate-like dataset (daily temperature on a global grid), with dask
   chunks of 100 days that do not line up with the 146-day shards,
2. starts a ``distributed.LocalCluster`` with worker processes,
3. writes it to local disk as Zarr v3 with sharding through ``shardwise.to_zarr``
   (one task writes each shard; ``ds.to_zarr`` refuses these chunks, or with
   ``safe_chunks=False`` loses values), and checks the store against xarray's own write
   of the same data with dask chunks equal to the shards,
4. opens the store with ``engine="shardwise", chunks={}`` (one dask task per shard),
   computes a climatology on the cluster and checks it against ``engine="zarr"``,
5. counts the store requests one full read costs.
"""

from __future__ import annotations

import argparse
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr

import shardwise  # (this module's package: imported already, and light)


def sample_dataset(ndays: int = 730, nlat: int = 90, nlon: int = 180) -> xr.Dataset:
    """Daily surface temperature with a seasonal cycle, weather noise and land gaps."""
    rng = np.random.default_rng(42)
    time_ = pd.date_range("2020-01-01", periods=ndays, freq="D")
    lat = np.linspace(-89, 89, nlat)
    lon = np.linspace(0, 358, nlon)
    day = np.arange(ndays)[:, None, None]
    base = 288 - 30 * np.sin(np.deg2rad(lat))[None, :, None] ** 2
    season = 10 * np.sin(2 * np.pi * day / 365.25) * np.sign(lat)[None, :, None]
    temp = base + season + rng.normal(0, 2, (ndays, nlat, nlon))
    temp[:, :5, :] = np.nan  # no data near the pole
    return xr.Dataset(
        {"tas": (("time", "lat", "lon"), temp.astype("f4"), {"units": "K"})},
        coords={
            "time": time_,
            "lat": ("lat", lat, {"units": "degrees_north"}),
            "lon": ("lon", lon, {"units": "degrees_east"}),
        },
        attrs={"title": "shardwise demo data"},
    )


@dataclass(frozen=True, slots=True)
class _Layout:
    """How the demo stores ``tas``: shards of ``shards`` (time, lat, lon) made of inner
    chunks of ``inner``, ``nshards`` of them over the array, packed as int16."""

    shards: tuple[int, ...]
    inner: tuple[int, ...]
    nshards: int

    @classmethod
    def of(cls, shape: tuple[int, ...]) -> _Layout:
        """The layout of an array of ``shape``: shards of 146 days of the whole globe,
        inner chunks of 73 days and 45 x 45 points."""
        shards, inner = (146, 90, 180), (73, 45, 45)
        nshards = int(np.prod([-(-n // s) for n, s in zip(shape, shards, strict=True)]))
        return cls(shards, inner, nshards)

    @property
    def encoding(self) -> dict[str, dict[str, Any]]:
        """The ``encoding`` that asks for this layout, for xarray's write and shardwise's."""
        return {
            "tas": {
                "shards": self.shards,
                "chunks": self.inner,
                "dtype": "i2",
                "scale_factor": 0.01,
                "add_offset": 273.15,
                "_FillValue": -32768,
            }
        }

    @property
    def chunks_per_shard(self) -> int:
        """How many inner chunks a shard holds."""
        return int(np.prod(self.shards) // np.prod(self.inner))


def main(argv: list[str] | None = None) -> int:
    """Run the demo (the steps above) with the command line's ``--path`` and
    ``--workers``; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--path", default="demo-data/demo.zarr", help="where to write the store")
    parser.add_argument("--workers", type=int, default=2, help="worker processes")
    args = parser.parse_args(argv)

    # imported after parsing, so that --help answers without loading dask and zarr
    import dask
    import distributed

    path = Path(args.path)
    if path.exists():
        shutil.rmtree(path)
    path.parent.mkdir(parents=True, exist_ok=True)

    ds = sample_dataset()
    layout = _Layout.of(ds.tas.shape)
    awkward = ds.chunk({"time": 100})  # 100-day dask chunks into 146-day shards
    del ds

    with (
        distributed.LocalCluster(
            n_workers=args.workers, threads_per_worker=1, processes=True, dashboard_address=":0"
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        print(f"LocalCluster: {args.workers} worker processes, dashboard {client.dashboard_link}")
        # the sample data lives in this process: send it to the workers once
        with dask.config.set({"distributed.admin.large-graph-warning-threshold": "256MiB"}):
            awkward = awkward.persist()
        distributed.wait(awkward)
        _write(awkward, path, layout)
        _read(path)

    _count_reads(path, layout)
    return 0


def _write(awkward: xr.Dataset, path: Path, layout: _Layout) -> None:
    """Write ``awkward`` with ``shardwise.to_zarr``, say what it made, and check it
    against xarray's own write of the same data with dask chunks equal to the shards."""
    t0 = time.perf_counter()
    shardwise.to_zarr(awkward, path, mode="w", encoding=layout.encoding, consolidated=False)
    elapsed = time.perf_counter() - t0
    size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    objects = sum(1 for f in (path / "tas" / "c").rglob("*") if f.is_file())
    print(
        f"\nshardwise.to_zarr -> {path}: {awkward.tas.nbytes / 2**20:.1f} MiB of float32 as "
        f"{size / 2**20:.1f} MiB in {elapsed:.2f} s"
    )
    print(
        f"  dask chunks {awkward.tas.chunks[0][:3]}... days into shards of {layout.shards[0]} "
        f"days: {awkward.tas.data.npartitions} dask chunks -> {objects} shard objects "
        f"(of {layout.nshards}), each of {layout.chunks_per_shard} inner chunks {layout.inner}"
    )
    reference_path = path.with_name(path.stem + "-xarray.zarr")
    awkward.chunk(dict(zip(awkward.tas.dims, layout.shards, strict=True))).to_zarr(
        reference_path, zarr_format=3, encoding=layout.encoding, consolidated=False, mode="w"
    )
    xr.testing.assert_identical(
        xr.open_zarr(path, consolidated=False).load(),
        xr.open_zarr(reference_path, consolidated=False).load(),
    )
    shutil.rmtree(reference_path)
    print("  identical to xarray's own write with dask chunks = shards: yes")


def _read(path: Path) -> None:
    """Open the store with ``engine="shardwise", chunks={}``, compute a monthly
    climatology on the cluster and check it against ``engine="zarr"``'s."""
    opened = xr.open_dataset(path, engine="shardwise", chunks={}, consolidated=False)
    print(f"\nxr.open_dataset({str(path)!r}, engine='shardwise', chunks={{}}):")
    print(opened)
    print(f"\n  dask chunks: {opened.tas.chunks} -> one task per shard")
    clim = opened.tas.groupby("time.month").mean()
    t0 = time.perf_counter()
    result = clim.compute()
    elapsed = time.perf_counter() - t0
    print(
        f"  monthly climatology on the cluster in {elapsed:.2f} s "
        f"({opened.tas.data.npartitions} read tasks)"
    )

    reference = (
        xr.open_dataset(path, engine="zarr", consolidated=False)
        .tas.groupby("time.month")
        .mean()
        .compute()
    )
    xr.testing.assert_identical(result, reference)
    print("  identical to engine='zarr': yes")
    january = float(result.sel(month=1).sel(lat=45, method="nearest").mean())
    print(f"  mean January temperature at 45N: {january:.2f} K")


def _count_reads(path: Path, layout: _Layout) -> None:
    """Count the store requests one full read of ``tas`` costs (threaded, counted in
    this process)."""
    import dask
    from zarr.storage import LocalStore

    from shardwise.testing import CountingStore

    shardwise.cache.clear_index_cache()
    store = CountingStore(LocalStore(path, read_only=True))
    counted = xr.open_dataset(store, engine="shardwise", chunks={}, consolidated=False)  # type: ignore[arg-type]
    store.log.clear()
    with dask.config.set(scheduler="threads"):
        counted.tas.load()
    reads = store.log.gets("")
    print(
        f"\nreading all of tas: {len(reads)} store reads for {layout.nshards} shards "
        f"({len(reads) / layout.nshards:.1f} per shard, "
        f"{layout.chunks_per_shard} inner chunks each)"
    )


if __name__ == "__main__":
    raise SystemExit(main())
