"""The dask-array API: ``to_zarr`` / ``from_zarr`` for one dask array, the write primitive
the xarray layer builds on."""
