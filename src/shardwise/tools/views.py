"""Notebook views: one value per shard from an ``shardwise.inventory``, and the
shard grid drawn as SVG (``ShardGrid``), shown by Jupyter through ``_repr_html_``.

``shard_view`` reduces the inventory's cell per inner chunk to a cell per shard
(inner chunks stored and in all, stored bytes, compression ratio), an
``xarray.Dataset`` that ``.plot()`` draws directly. ``shard_grid`` draws it: every
shard to scale (regular and rectilinear grids), absent shards blank, stored ones
shaded by the share of their inner chunks stored, damaged ones (a
``shardwise.tools.verify.VerifyReport``'s, given as ``damaged``) red; the picture is
bounded whatever the grid's size (see ``shardwise._html``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np

import shardwise._html as h
from shardwise._html import ShardState
from shardwise.tools._text import byte_size
from shardwise.tools.verify import VerifyReport

if TYPE_CHECKING:
    import xarray as xr

__all__ = ["ShardGrid", "shard_grid", "shard_view"]


def _names(inv: xr.Dataset) -> list[str]:
    return [str(d)[: -len("_chunk")] for d in inv["present"].dims]


def shard_view(inv: xr.Dataset) -> xr.Dataset:
    """One value per shard of an ``shardwise.inventory``.

    Parameters
    ----------
    inv : xarray.Dataset
        An array's inventory.

    Returns
    -------
    xarray.Dataset
        Dimensions ``<name>_shard`` with coordinates ``<name>_start`` (each shard's
        first index), and ``chunks_stored`` and ``chunks`` (the inner chunks stored,
        and those of the shard inside the array), ``stored_bytes``, ``raw_bytes`` (of
        the stored inner chunks, at full size) and ``ratio`` (raw / stored, NaN for an
        absent shard). The inventory's attributes are kept.
    """
    import xarray as xr

    names = _names(inv)
    idx = [np.asarray(inv[f"{n}_shard"].values, dtype=np.int64) for n in names]
    grid = tuple(int(i.max()) + 1 if i.size else 0 for i in idx)
    where = np.ix_(*idx)
    present = np.asarray(inv["present"].values)
    nbytes = np.asarray(inv["stored_bytes"].values, dtype=np.int64)
    stored = np.zeros(grid, dtype=np.int64)
    total = np.zeros(grid, dtype=np.int64)
    size = np.zeros(grid, dtype=np.int64)
    np.add.at(stored, where, present.astype(np.int64))
    np.add.at(total, where, np.ones(present.shape, dtype=np.int64))
    np.add.at(size, where, nbytes)
    chunk = inv.attrs.get("chunk_shape")
    itemsize = np.dtype(inv.attrs["dtype"]).itemsize if "dtype" in inv.attrs else 0
    per_chunk = (
        math.prod(int(c) for c in chunk) * itemsize
        if chunk and all(isinstance(c, int | np.integer) for c in chunk)
        else 0
    )
    raw = stored * per_chunk
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(size > 0, raw / np.maximum(size, 1), np.nan)
    dims = [f"{n}_shard" for n in names]
    coords = {}
    for n, d, i in zip(names, dims, idx, strict=True):
        starts = np.full(grid[names.index(n)], np.iinfo(np.int64).max, dtype=np.int64)
        np.minimum.at(starts, i, np.asarray(inv[f"{n}_start"].values, dtype=np.int64))
        coords[f"{n}_start"] = (d, starts, {"long_name": f"first index along {n}"})
    return xr.Dataset(
        {
            "chunks_stored": (dims, stored, {"long_name": "inner chunks stored"}),
            "chunks": (dims, total, {"long_name": "inner chunks in the shard"}),
            "stored_bytes": (dims, size, {"long_name": "stored bytes", "units": "B"}),
            "raw_bytes": (dims, raw, {"long_name": "raw bytes of the stored chunks", "units": "B"}),
            "ratio": (dims, ratio, {"long_name": "compression ratio"}),
        },
        coords=coords,
        attrs=dict(inv.attrs),
    )


class ShardGrid:
    """A shard grid to look at (``shardwise.tools.views.shard_grid``): a notebook shows a
    table and a picture of the shards, each shaded by what is stored of it and the
    damaged ones red; ``svg`` is the picture alone.

    Attributes
    ----------
    view : xarray.Dataset
        The ``shardwise.tools.views.shard_view`` drawn.
    damaged : set of tuple of int
        The shards drawn as damaged.
    """

    def __init__(self, view: xr.Dataset, damaged: Iterable[tuple[int, ...]] = ()) -> None:
        self.view = view
        self.damaged = {tuple(int(i) for i in d) for d in damaged}

    def svg(self) -> str:
        v = self.view
        names = [str(d)[: -len("_shard")] for d in v["chunks"].dims]
        shape = v.attrs.get("shape")
        edges = []
        for axis, n in enumerate(names):
            starts = np.asarray(v[f"{n}_start"].values, dtype=np.int64)
            end = int(shape[axis]) if shape is not None else int(starts[-1]) + 1
            edges.append(np.append(starts, end))
        stored = np.asarray(v["chunks_stored"].values)
        total = np.asarray(v["chunks"].values)
        state = np.where(stored > 0, ShardState.STORED, ShardState.ABSENT).astype(np.int8)
        for d in self.damaged:
            if len(d) == state.ndim and all(
                0 <= i < s for i, s in zip(d, state.shape, strict=True)
            ):
                state[d] = ShardState.DAMAGED
        with np.errstate(divide="ignore", invalid="ignore"):
            share = np.where(total > 0, stored / np.maximum(total, 1), np.nan)
        nbytes = np.asarray(v["stored_bytes"].values)
        ratio = np.asarray(v["ratio"].values)

        def label(where: tuple[int, ...]) -> str:
            if state[where] == ShardState.DAMAGED:
                return f"shard {where}: damaged"
            if not stored[where]:
                return f"shard {where}: absent"
            r = "" if math.isnan(ratio[where]) else f", {ratio[where]:.2f}x"
            return (
                f"shard {where}: {stored[where]} of {total[where]} inner chunks, "
                f"{byte_size(int(nbytes[where]))}{r}"
            )

        return h.grid_svg(edges, names, state=state, stored=share, label=label)

    def _repr_html_(self) -> str:
        a = self.view.attrs
        rows = [
            ("array", a.get("array", "")),
            ("shards stored", f"{a.get('shards_present')} of {a.get('shards_total')}"),
            ("inner chunks stored", f"{a.get('chunks_present')} of {a.get('chunks_total')}"),
            ("stored", byte_size(a.get("total_bytes"))),
        ]
        if self.damaged:
            rows.append(("damaged shards", len(self.damaged)))
        return h.frame(h.table("shardwise shard grid", rows) + self.svg())


def shard_grid(
    inv: xr.Dataset, damaged: VerifyReport | Iterable[tuple[int, ...]] = ()
) -> ShardGrid:
    """The shard grid of an ``shardwise.inventory``, to look at in a notebook.

    Parameters
    ----------
    inv : xarray.Dataset
        An array's inventory.
    damaged : VerifyReport or iterable of tuple of int, optional
        The shards to draw as damaged: a ``shardwise.verify`` report (its problems
        in the inventory's array) or shard coordinates.

    Returns
    -------
    ShardGrid
        The grid, drawn in a notebook (see ``shardwise.tools.views.ShardGrid``).
    """
    if isinstance(damaged, VerifyReport):
        damaged = damaged.damaged_shards(str(inv.attrs.get("array", "")))
    return ShardGrid(shard_view(inv), damaged)
