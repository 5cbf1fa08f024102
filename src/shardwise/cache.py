"""The shard-index cache of this process.

Readers keep the shard indexes they read, each with the version of the shard it came
from, in one cache per process, bounded in bytes (dask config
``shardwise.index-cache-bytes``, 64 MiB by default). A cached index is checked against
its shard on every read that uses it, so it is never wrong, only sometimes stale (see
``ReadOptions.recheck_cached_data``). Nothing here is needed to read right; these are
for looking at the cache, bounding it, or emptying it (to measure cold reads, say).
"""

from __future__ import annotations

from shardwise.io.cache import IndexCache, clear_index_cache, index_cache, set_index_cache_size

__all__ = ["IndexCache", "clear_index_cache", "index_cache", "set_index_cache_size"]
