"""How the data of a write is turned into shard tasks: one frozen value, checked when it
is made, so that every write path refuses a bad option before anything is written
(each public ``to_zarr`` makes it first, from its keywords)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

import shardwise.config as config
from shardwise.errors import WriteError
from shardwise.format.shard import WRITE_ORDERS
from shardwise.graph.write_plan import check_encode_split, check_shards_per_task


@dataclass(frozen=True, slots=True)
class WriteOptions:
    """The options of the data step of a write.

    - ``write_order``: the order of the inner chunks in each shard: ``"morton"``
      (default: neighbours in space are neighbours in the object) or ``"C"``.
    - ``shards_per_task``: ``None`` (default: one task per shard's worth of dask
      blocks), an integer >= 1 (neighbouring blocks that hold fewer shards than that are
      written by one task) or ``"auto"`` (grouped toward dask's ``array.chunk-size``).
    - ``encode_split``: ``None`` (default: dask config ``shardwise.encode-split``,
      itself ``"auto"``), an integer >= 1 (each shard encoded in about that many tasks)
      or ``"auto"``.
    - ``write_empty_chunks``: ``None`` (default: zarr-python's ``array.write_empty_chunks``
      setting), or whether inner chunks that hold only the fill value are stored.
    - ``progress``: show a progress bar while the data are written.
    - ``independent_writers``: whether to guard against other jobs writing the same
      arrays while this one runs: ``"auto"`` (guard where the store can: shards merged
      with what is stored, and the metadata an append grows, are put only if unchanged
      since read; where it cannot, write as ``Dataset.to_zarr`` would, with an
      :class:`~shardwise.errors.UnprotectedWriteWarning`), ``True`` (guard, and refuse
      what cannot be guarded) or ``False`` (this job is the only writer). ``None``
      (default) takes dask config ``shardwise.independent-writers`` (itself
      ``"auto"``); held resolved.
    """

    write_order: str = "morton"
    shards_per_task: int | str | None = None
    encode_split: int | str | None = None
    write_empty_chunks: bool | None = None
    progress: bool = False
    independent_writers: bool | str | None = None

    def __post_init__(self) -> None:
        if self.independent_writers is None:
            configured = config.get("independent-writers")
            object.__setattr__(self, "independent_writers", configured)
        setting = self.independent_writers
        auto = isinstance(setting, str) and setting == "auto"
        if not auto and not _is_bool(setting):
            raise _refused(
                "independent_writers",
                "'auto' (guard against other jobs where the store can), True (guard, "
                "refusing what cannot be) or False (the only writer)",
                setting,
            )
        if not auto:
            object.__setattr__(self, "independent_writers", bool(setting))
        if self.write_order not in WRITE_ORDERS:
            raise _refused("write_order", f"one of {WRITE_ORDERS}", self.write_order)
        if self.shards_per_task is not None:
            try:
                check_shards_per_task(self.shards_per_task)
            except ValueError:
                raise _refused(
                    "shards_per_task",
                    "None, an integer >= 1 or 'auto'",
                    self.shards_per_task,
                    "Pass e.g. shards_per_task=16 to write 16 tiny shards per task.",
                ) from None
        try:
            check_encode_split(self.encode_split)
        except ValueError:
            raise _refused(
                "encode_split",
                "None, an integer >= 1 or 'auto'",
                self.encode_split,
                "Pass e.g. encode_split=8 to encode each shard in 8 tasks.",
            ) from None
        if self.write_empty_chunks is not None and not _is_bool(self.write_empty_chunks):
            raise _refused("write_empty_chunks", "True, False or None", self.write_empty_chunks)
        if not _is_bool(self.progress):
            raise _refused("progress", "True or False", self.progress)


def _is_bool(value: Any) -> bool:
    return isinstance(value, bool | np.bool_)


def _refused(name: str, expected: str, found: Any, advice: str = "") -> WriteError:
    return WriteError(
        f"bad {name}",
        expected=expected,
        found=repr(found),
        advice=(advice + " " if advice else "") + "Nothing was written.",
    )
