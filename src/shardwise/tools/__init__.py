"""Tools for data that exist already, one module each, each with the report its
function returns: :mod:`~shardwise.tools.reshard` (``reshard``, ``ReshardReport``),
:mod:`~shardwise.tools.migrate` (``migrate``, ``MigrationReport``: the 2022 draft's
repack), :mod:`~shardwise.tools.verify` (``verify``, ``VerifyReport``),
:mod:`~shardwise.tools.inventory` (``inventory``, ``inventories``),
:mod:`~shardwise.tools.info` (``info``, ``Info``) and :mod:`~shardwise.tools.views`
(``shard_view``, ``shard_grid``, ``ShardGrid``). ``reshard``, ``verify``, ``inventory``
and ``info`` are also at the top (``shardwise.reshard``...)."""

from __future__ import annotations

import importlib
from typing import Any

_MODULES = frozenset({"info", "inventory", "migrate", "reshard", "verify", "views"})


def __getattr__(name: str) -> Any:
    # (the modules load when first named: ``shardwise.tools.migrate.migrate(...)``)
    if name in _MODULES:
        return importlib.import_module(f"shardwise.tools.{name}")
    raise AttributeError(f"module 'shardwise.tools' has no attribute {name!r}")
