"""The format layer: pure values and arithmetic, no I/O, no dask, no xarray.

Grid geometry (regular and rectilinear) and the shard/chunk size heuristics, the
``sharding_indexed`` index, Zarr v3 / v2 documents mapped onto ``ArrayInfo``, node names,
and assembling one shard's bytes. Imports nothing above ``shardwise.errors`` and
``shardwise._compat``."""
