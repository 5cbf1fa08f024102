"""The dask-graph layer: planning writes as frozen values, the write graph (one task per
shard, no cross-task read-modify-write), the read fan-out, and region checks. Imports
``io``, ``codecs`` and ``format`` below it."""
