"""The store layer: opening stores (v3, v2, 2022 draft, Icechunk; local, fsspec, obstore),
where a store is (overlap checks), listing, the shard-index cache and ranged reads, and
``ArrayReader``. Imports ``codecs`` and ``format`` below it."""
