"""What notebooks show: small HTML tables in xarray's manner and an SVG picture of a
shard grid, drawn to scale, each shard shaded by how much of it is stored.

Pure functions of the values they are given (no I/O). Everything taken from a store (an
array's name, its dimension names, a key, an error message) is escaped before it goes
into the markup, and a grid of any size is drawn with at most :data:`MAX_CELLS` cells:
larger grids are shown in blocks of shards, which the caption says.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import IntEnum
from typing import Any

import numpy as np
import numpy.typing as npt

from shardwise.format.grid import DimGrid
from shardwise.format.metadata import ArrayInfo

__all__ = [
    "MAX_CELLS",
    "ShardMap",
    "ShardState",
    "array_html",
    "esc",
    "frame",
    "grid_svg",
    "grids",
    "table",
]


class ShardState(IntEnum):
    """What a picture shows of a shard (of a block of shards: the highest of its
    shards')."""

    UNKNOWN = 0  # not looked at (an ArrayReader draws the grid without reading indexes)
    ABSENT = 1
    STORED = 2
    DAMAGED = 3


UNKNOWN, ABSENT, STORED, DAMAGED = ShardState

MAX_CELLS = 2500  # cells drawn at the most (50 x 50)
_SIDE = 50  # cells along an axis at the most
_WIDTH = 360.0  # pixels along the picture's longer axis
_MIN = 24.0  # pixels along the shorter one, at the least

_FILL: dict[int, str] = {UNKNOWN: "#ECB172", ABSENT: "#ffffff", DAMAGED: "#d62728"}
_STORED = "#1f77b4"


def esc(value: Any) -> str:
    """``value`` as text safe inside HTML or SVG, attributes included."""
    return html.escape(str(value), quote=True)


def frame(body: str) -> str:
    """A notebook view's outermost element: ``body`` in a ``div`` of class
    ``shardwise-repr`` (the built site's browser check finds the views by it)."""
    return f'<div class="shardwise-repr">{body}</div>'


def table(title: str, rows: Sequence[tuple[str, Any]], *, note: str = "") -> str:
    """A two-column table (name, value), escaped, under a bold ``title``."""
    body = "".join(
        f"<tr><th style='text-align:left;padding-right:1em'>{esc(k)}</th>"
        f"<td style='text-align:left'>{esc(v)}</td></tr>"
        for k, v in rows
    )
    foot = f"<div style='font-size:smaller'>{esc(note)}</div>" if note else ""
    return f"<div><b>{esc(title)}</b><table>{body}</table>{foot}</div>"


def _blocks(n: int) -> int:
    """How many shards along an axis of ``n`` go into one drawn cell."""
    return max(1, math.ceil(n / _SIDE))


def _coarsen(values: npt.NDArray[Any], factors: Sequence[int], how: str) -> npt.NDArray[Any]:
    """``values`` (2-D) in blocks of ``factors`` shards: the mean or the max of each."""
    out = values
    for axis, k in enumerate(factors):
        if k == 1:
            continue
        n = out.shape[axis]
        starts = np.arange(0, n, k)
        if how == "max":
            out = np.maximum.reduceat(out, starts, axis=axis)
        else:
            sums = np.add.reduceat(np.nan_to_num(out), starts, axis=axis)
            counts = np.add.reduceat((~np.isnan(out)).astype(float), starts, axis=axis)
            with np.errstate(invalid="ignore", divide="ignore"):
                out = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
    return out


_PAD = 20.0  # pixels around the grid


@dataclass(frozen=True, slots=True)
class _Cells:
    """A shard grid as drawn: two axes, rows then columns. Per cell, its
    :class:`ShardState` (``state``) and the share of its inner chunks stored
    (``stored``, NaN unknown); per axis, where each cell starts and the extent last
    (``edges``) and the axis's name (``names``; None for an axis added to make two).
    ``caption``: lines of markup saying what was folded together; ``added``: how many of
    the two axes were added (a cell's last ``2 - added`` coordinates are its shard's);
    ``whole``: one cell per shard, so a cell can be labelled with its shard."""

    state: npt.NDArray[Any]
    stored: npt.NDArray[np.float64]
    edges: list[npt.NDArray[np.int64]]
    names: list[Any]
    caption: list[str]
    added: int
    whole: bool


@dataclass(frozen=True, slots=True)
class _Box:
    """Where the cells start in pixels, down (``ys``) and across (``xs``), and the
    grid's size: drawn to scale, its longer side :data:`_WIDTH` pixels and its shorter at
    least :data:`_MIN`."""

    ys: npt.NDArray[np.float64]
    xs: npt.NDArray[np.float64]
    height: float
    width: float

    @classmethod
    def of(cls, edges: Sequence[npt.NDArray[np.int64]]) -> _Box:
        """The box of a grid whose rows and columns start at ``edges``."""
        rows_e, cols_e = edges
        extent = [max(int(a[-1] - a[0]), 1) for a in edges]
        scale = _WIDTH / max(extent)
        height = max(_MIN, extent[0] * scale)
        width = max(_MIN, extent[1] * scale)
        ys: npt.NDArray[np.float64] = (rows_e - rows_e[0]) / extent[0] * height
        xs: npt.NDArray[np.float64] = (cols_e - cols_e[0]) / extent[1] * width
        return cls(ys, xs, height, width)


def grid_svg(
    edges: Sequence[Any],
    names: Sequence[Any],
    *,
    state: npt.NDArray[np.int8] | None = None,
    stored: npt.NDArray[np.float64] | None = None,
    label: Callable[[tuple[int, ...]], str] | None = None,
) -> str:
    """An SVG of a shard grid. ``edges``: per axis, where each shard starts, and the
    array's length last (a regular grid's last shard clipped at it); ``names``: the axes'
    names. ``state``: per shard, :class:`ShardState` values (``UNKNOWN``, ``ABSENT``, ``STORED`` or
    ``DAMAGED``) (default: unknown); ``stored``: per shard, the fraction of its inner
    chunks stored (0-1, NaN unknown), which shades it; ``label``: a shard's tooltip.

    One axis is drawn as a row; two as rows and columns (the last axis across, as dask
    draws arrays); more as the last two, the state and fraction of each cell taken over
    the other axes (named in the caption). Shards are drawn to scale along each axis.
    Past :data:`MAX_CELLS` cells, blocks of shards are drawn as one cell each."""
    axes = [np.asarray(e, dtype=np.int64) for e in edges]
    st, fr = _shard_values(axes, state, stored)
    cells = _in_blocks(_last_two_axes(axes, names, st, fr))
    box = _Box.of(cells.edges)
    notes = _notes(cells, box)
    total_w = _PAD * 2 + box.width + 20
    total_h = _PAD * 2 + box.height + 20 + 14 * len(notes)
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{total_w:.0f}" '
        f'height="{total_h:.0f}" style="stroke:rgb(0,0,0);stroke-width:0">'
        + "".join(_rects(cells, box, label))
        + "".join(_axis_labels(cells.names, box))
        + "".join(notes)
        + "</svg>"
    )


def _shard_values(
    axes: Sequence[npt.NDArray[np.int64]],
    state: npt.NDArray[np.int8] | None,
    stored: npt.NDArray[np.float64] | None,
) -> tuple[npt.NDArray[Any], npt.NDArray[np.float64]]:
    """Each shard's state and share stored (unknown where not given), refused unless
    they have the grid's shape."""
    grid = tuple(len(e) - 1 for e in axes)
    st = np.full(grid, UNKNOWN, dtype=np.int8) if state is None else np.asarray(state)
    fr = np.full(grid, np.nan) if stored is None else np.asarray(stored, dtype=np.float64)
    if st.shape != grid or fr.shape != grid:
        raise ValueError(f"state {st.shape} and stored {fr.shape} do not match the grid {grid}")
    return st, fr


def _last_two_axes(
    axes: Sequence[npt.NDArray[np.int64]],
    names: Sequence[Any],
    st: npt.NDArray[Any],
    fr: npt.NDArray[np.float64],
) -> _Cells:
    """The grid on its last two axes: the others folded in (a cell's state the highest
    of its shards', its share the mean of those known), which the caption names; a grid
    of one axis becomes a row, one of none a single cell."""
    ndim = len(axes)
    grid = tuple(len(e) - 1 for e in axes)
    shown = list(range(ndim))[-2:] if ndim else []
    other = [i for i in range(ndim) if i not in shown]
    caption = []
    if other:
        st = st.max(axis=tuple(other)) if st.size else st.reshape([grid[i] for i in shown])
        with np.errstate(invalid="ignore"):
            fr = (
                np.nanmean(fr, axis=tuple(other))
                if fr.size and not np.isnan(fr).all()
                else np.full([grid[i] for i in shown], np.nan)
            )
        caption.append(
            "over "
            + ", ".join(f"{esc(names[i])} ({grid[i]} shards)" for i in other)
            + ": a cell shows its shards along them together"
        )
    while st.ndim < 2:  # one axis: a row; none: a single cell
        st, fr = st[None], fr[None]
    added = 2 - len(shown)
    edges = [np.array([0, 1], dtype=np.int64)] * added + [axes[i] for i in shown]
    axis_names = [None] * added + [names[i] for i in shown]
    return _Cells(st, fr, edges, axis_names, caption, added, whole=not other)


def _in_blocks(cells: _Cells) -> _Cells:
    """``cells`` as is, or, past :data:`_SIDE` shards along an axis, in blocks of shards
    drawn as one cell each (its state the highest, its share the mean), which the caption
    says."""
    factors = [_blocks(len(a) - 1) for a in cells.edges]
    if not any(k > 1 for k in factors):
        return cells
    line = (
        f"{' x '.join(str(len(a) - 1) for a in cells.edges)} shards drawn as "
        f"{' x '.join(str(math.ceil((len(a) - 1) / k)) for a, k in zip(cells.edges, factors, strict=True))}"
        f" cells of up to {' x '.join(map(str, factors))} shards"
    )
    st = _coarsen(cells.state.astype(np.int64), factors, "max")
    with np.errstate(invalid="ignore"):
        fr = _coarsen(cells.stored, factors, "mean")
    edges = [np.append(a[:-1][::k], a[-1]) for a, k in zip(cells.edges, factors, strict=True)]
    return replace(
        cells, state=st, stored=fr, edges=edges, caption=[*cells.caption, line], whole=False
    )


def _fill(state: int, share: float) -> tuple[str, float]:
    """A cell's colour and opacity: stored cells shaded by the share of their inner
    chunks stored (solid where it is not known)."""
    if state == STORED:
        opacity = 1.0 if math.isnan(share) else 0.15 + 0.85 * min(max(share, 0.0), 1.0)
        return _STORED, opacity
    return _FILL.get(state, _FILL[UNKNOWN]), 1.0


def _rects(cells: _Cells, box: _Box, label: Callable[[tuple[int, ...]], str] | None) -> list[str]:
    """A rectangle per cell, with ``label``'s tooltip where a cell is one shard."""
    ys, xs = box.ys, box.xs
    out = []
    for r in range(len(ys) - 1):
        for c in range(len(xs) - 1):
            fill, opacity = _fill(int(cells.state[r, c]), float(cells.stored[r, c]))
            title = ""
            if label is not None and cells.whole:
                where = (r, c)[cells.added :]
                title = f"<title>{esc(label(tuple(where)))}</title>"
            out.append(
                f'<rect x="{_PAD + xs[c]:.2f}" y="{_PAD + ys[r]:.2f}" '
                f'width="{max(xs[c + 1] - xs[c], 0.5):.2f}" '
                f'height="{max(ys[r + 1] - ys[r], 0.5):.2f}" fill="{fill}" '
                f'fill-opacity="{opacity:.3f}" stroke="#444" stroke-width="0.5">{title}</rect>'
            )
    return out


def _axis_labels(names: Sequence[Any], box: _Box) -> list[str]:
    """The columns' name under the grid, the rows' name up its right side (none for an
    added axis)."""
    width, height = box.width, box.height
    texts = []
    if names[1] is not None:
        texts.append(
            f'<text x="{_PAD + width / 2:.2f}" y="{_PAD + height + 15:.2f}" '
            f'text-anchor="middle" font-size="12">{esc(names[1])}</text>'
        )
    if names[0] is not None:
        texts.append(
            f'<text x="{_PAD + width + 12:.2f}" y="{_PAD + height / 2:.2f}" '
            f'text-anchor="middle" font-size="12" '
            f'transform="rotate(-90,{_PAD + width + 12:.2f},{_PAD + height / 2:.2f})">'
            f"{esc(names[0])}</text>"
        )
    return texts


def _notes(cells: _Cells, box: _Box) -> list[str]:
    """The lines under the grid, one text each: the legend (shading, damage), where
    the picture shows them, then the caption."""
    shaded = (cells.state == STORED) & ~np.isnan(cells.stored)
    legend = [
        "shaded by the share of inner chunks stored" if shaded.any() else "",
        "red: damaged" if (cells.state == DAMAGED).any() else "",
    ]
    words = [w for w in (*legend, *cells.caption) if w]
    return [
        f'<text x="{_PAD:.2f}" y="{_PAD + box.height + 32 + 14 * i:.2f}" font-size="11">'
        f"{w if w in cells.caption else esc(w)}</text>"
        for i, w in enumerate(words)
    ]


_DRAWN_SHARDS = 1_000_000  # an array's grid is drawn up to this many shards


def _starts(d: DimGrid) -> npt.NDArray[np.int64]:
    """Where each shard along a dimension starts, and the extent last."""
    return np.append(d.starts(), d.extent)


@dataclass(frozen=True, slots=True, eq=False)
class ShardMap:
    """An array's shard grid as a report keeps it for its picture: the array's layout and
    the shards looked at, each with its :class:`ShardState` and the share of its inner
    chunks stored (NaN: not known). Sparse: it holds the shards listed, not the grid, so
    a report of a few shards stored in a grid of 10**14 stays small.

    ``listed``: the store was listed, so a shard not among ``shards`` is absent (else
    not known: an ``ArrayReader``'s picture, drawn without a request)."""

    info: ArrayInfo
    shards: npt.NDArray[np.int64] = field(
        default_factory=lambda: np.zeros((0, 0), dtype=np.int64)
    )  # (n, ndim)
    state: npt.NDArray[np.int8] = field(default_factory=lambda: np.zeros(0, dtype=np.int8))
    share: npt.NDArray[np.float64] = field(default_factory=lambda: np.zeros(0))
    listed: bool = False

    @classmethod
    def of(
        cls,
        info: ArrayInfo,
        stored: Iterable[tuple[int, ...]],
        *,
        shares: Mapping[tuple[int, ...], float] | None = None,
        damaged: Iterable[tuple[int, ...]] = (),
    ) -> ShardMap:
        """The map of a listed array: the shards ``stored`` (with the share of each
        one's inner chunks stored, where ``shares`` knows it), those among them or
        beside them ``damaged``."""
        bad = set(damaged)
        coords = list(dict.fromkeys([*stored, *bad]))
        known = shares or {}
        return cls(
            info,
            np.array(coords, dtype=np.int64).reshape(len(coords), info.ndim),
            np.array([DAMAGED if c in bad else STORED for c in coords], dtype=np.int8),
            np.array([known.get(c, np.nan) for c in coords], dtype=np.float64),
            listed=True,
        )

    @property
    def nshards(self) -> int:
        return math.prod(self.info.layout.grid_shape)

    @property
    def names(self) -> tuple[str, ...]:
        given = self.info.dimension_names or (None,) * self.info.ndim
        return tuple(f"axis {i}" if n is None else str(n) for i, n in enumerate(given))

    def svg(self) -> str:
        """The picture (:func:`grid_svg`); empty past :data:`_DRAWN_SHARDS` shards or
        without a dimension."""
        grid = self.info.layout.grid_shape
        if self.nshards > _DRAWN_SHARDS or not self.info.ndim:
            return ""
        state = np.full(grid, ABSENT if self.listed else UNKNOWN, dtype=np.int8)
        share = np.full(grid, np.nan)
        shards = self.shards.reshape(-1, self.info.ndim)
        inside = np.all((shards >= 0) & (shards < np.array(grid)), axis=1)
        where = tuple(shards[inside].T)
        state[where] = self.state[inside]
        share[where] = self.share[inside]
        edges = [_starts(d) for d in self.info.layout.dims]
        return grid_svg(edges, self.names, state=state, stored=share)

    def html(self) -> str:
        """The picture, or a line saying why there is none."""
        return self.svg() or (
            f"<div style='font-size:smaller'>{self.nshards} shards: grid not drawn</div>"
        )


def array_html(info: ArrayInfo, store: Any) -> str:
    """An ``ArrayReader``'s view: the array's table and its shard grid, drawn without
    reading an index (``shardwise.tools.views.shard_grid(shardwise.inventory(...))`` shows what is
    stored). Grids of more than a million shards are not drawn."""
    grid = ShardMap(info)
    rows = [
        ("array", info.name),
        ("store", store),
        ("shape", " x ".join(f"{n}: {s}" for n, s in zip(grid.names, info.shape, strict=True))),
        ("dtype", info.dtype),
        ("shards", " x ".join(str(n) for n in info.layout.grid_shape)),
    ]
    picture = grid.svg()
    if not picture:
        return frame(
            table("shardwise.ArrayReader", rows, note=f"{grid.nshards} shards: grid not drawn")
        )
    return frame(table("shardwise.ArrayReader", rows) + picture)


_DRAWN_ARRAYS = 12  # a report draws the grids of this many arrays at the most


def grids(arrays: Iterable[tuple[str, ShardMap | None]] | Iterable[Any]) -> str:
    """The shard grids of a report's arrays, side by side, each under its name: pairs of
    (name, map), or values with ``path`` and ``grid`` (``info``'s summaries). The
    first :data:`_DRAWN_ARRAYS` are drawn, and the rest counted."""
    pairs = [a if isinstance(a, tuple) else (a.path, a.grid) for a in arrays]
    drawn = [(name, grid) for name, grid in pairs if grid is not None]
    cells = "".join(
        f"<div style='margin:0 1em 0.5em 0'><div><b>{esc(name or '/')}</b></div>{grid.html()}</div>"
        for name, grid in drawn[:_DRAWN_ARRAYS]
    )
    more = len(drawn) - _DRAWN_ARRAYS
    note = (
        f"<div style='font-size:smaller'>the grids of {more} more arrays are not drawn</div>"
        if more > 0
        else ""
    )
    return f"<div style='display:flex;flex-wrap:wrap'>{cells}</div>{note}" if cells else ""
