"""The xarray layer: the ``engine="shardwise"`` backend, ``open_dataset``, and Dataset /
DataTree ``to_zarr``."""
