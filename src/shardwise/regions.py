"""Planning region writes of several jobs: which shards two or more of them would both
write (``shared_shards``), and a check that refuses such a plan before any job starts
(``check_regions``). See :mod:`shardwise.graph.regions` for what they read."""

from __future__ import annotations

from shardwise.graph.regions import check_regions, shared_shards

__all__ = ["check_regions", "shared_shards"]
