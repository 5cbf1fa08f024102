"""Notebook views: the per-shard view of an inventory, the shard grid's SVG (parsed,
to scale, bounded, escaped) and the HTML reprs of info, verify and ArrayReader."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import dask.array as da
import numpy as np
import pytest
import zarr

import shardwise
import shardwise._html as h
from shardwise._html import ShardState

SVG = "{http://www.w3.org/2000/svg}"
HOSTILE = '<script>alert("x")</script>&\'"'


def rects(svg: str) -> list[ET.Element]:
    root = ET.fromstring(svg)  # valid XML, or this raises
    assert root.tag == f"{SVG}svg"
    return root.findall(f"{SVG}rect")


def sparse_array(tmp_path, name="v"):
    """8 x 6 float32 in shards of 4 x 3 (2 x 2 shards) of inner chunks 2 x 3 (2 per
    shard): shard (0, 0) whole, shard (1, 1) half, the others absent."""
    store = tmp_path / "a.zarr"
    arr = zarr.create_array(
        store, name=name, shape=(8, 6), shards=(4, 3), chunks=(2, 3), dtype="f4", fill_value=0
    )
    arr[0:4, 0:3] = np.arange(12, dtype="f4").reshape(4, 3) + 1
    arr[4:6, 3:6] = 7
    return store


def test_shard_view_counts_each_shard(tmp_path):
    store = sparse_array(tmp_path)
    inv = shardwise.inventory(store, "v")
    view = shardwise.tools.views.shard_view(inv)
    assert view["chunks_stored"].shape == (2, 2)
    np.testing.assert_array_equal(view["chunks_stored"].values, [[2, 0], [0, 1]])
    np.testing.assert_array_equal(view["chunks"].values, [[2, 2], [2, 2]])
    assert int(view["stored_bytes"].sum()) == int(inv["stored_bytes"].sum())
    assert np.isnan(view["ratio"].values[0, 1]) and view["ratio"].values[0, 0] > 0
    starts = [view[c].values.tolist() for c in view.coords]
    assert [0, 4] in starts and [0, 3] in starts


def test_shard_grid_svg_draws_states_and_tooltips(tmp_path):
    store = sparse_array(tmp_path)
    inv = shardwise.inventory(store, "v")
    grid = shardwise.tools.views.shard_grid(inv, damaged=[(0, 1)])
    cells = rects(grid.svg())
    assert len(cells) == 4
    fills = [c.get("fill") for c in cells]
    assert fills.count("#ffffff") == 1  # shard (1, 0) absent
    assert "#d62728" in fills  # (0, 1) damaged
    stored = [c for c in cells if c.get("fill") == "#1f77b4"]
    assert sorted(float(c.get("fill-opacity")) for c in stored) == [0.575, 1.0]  # half, whole
    titles = [c.find(f"{SVG}title").text for c in cells]
    assert any("2 of 2 inner chunks" in t for t in titles)
    assert "damaged" in titles[1]
    html = grid._repr_html_()
    assert "<svg" in html and "shards stored" in html


def test_rectilinear_shards_are_drawn_to_scale():
    svg = h.grid_svg([[0, 10, 40, 100]], ["time"], state=np.array([2, 1, 2], dtype=np.int8))
    widths = [float(r.get("width")) for r in rects(svg)]
    assert widths[1] / widths[0] == pytest.approx(3, rel=1e-3)
    assert widths[2] / widths[0] == pytest.approx(6, rel=1e-3)


def test_huge_grids_are_drawn_in_blocks_and_say_so():
    n = 10_000
    edges = [np.append(np.arange(n) * 4, 4 * n - 1), np.append(np.arange(n) * 4, 4 * n)]
    state = np.full((n, n), ShardState.ABSENT, dtype=np.int8)
    state[0, 0] = ShardState.STORED
    svg = h.grid_svg(edges, ["y", "x"], state=state, stored=np.zeros((n, n)))
    cells = rects(svg)
    assert len(cells) <= h.MAX_CELLS
    assert "10000 x 10000 shards drawn as 50 x 50 cells" in svg


def test_more_axes_are_projected_and_named():
    edges = [[0, 2, 4], [0, 5, 10], [0, 3, 6]]
    state = np.full((2, 2, 2), ShardState.ABSENT, dtype=np.int8)
    state[1, 0, 1] = ShardState.STORED
    svg = h.grid_svg(edges, ["time", "y", "x"], state=state)
    cells = rects(svg)
    assert len(cells) == 4
    assert [c.get("fill") for c in cells].count("#ffffff") == 3
    assert "over time (2 shards)" in svg


def test_hostile_names_are_escaped(tmp_path):
    svg = h.grid_svg([[0, 1, 2], [0, 2]], [HOSTILE, "x"], label=lambda w: HOSTILE)
    root = ET.fromstring(svg)
    assert not root.findall(f".//{SVG}script") and "<script>" not in svg
    assert HOSTILE in "".join(root.itertext())  # shown as text, whole
    table = h.table(HOSTILE, [(HOSTILE, HOSTILE)], note=HOSTILE)
    assert "<script>" not in table and "&lt;script&gt;" in table


def test_reprs_of_info_verify_and_reader(tmp_path):
    store = tmp_path / "r.zarr"
    name = "a<b>&c"
    x = da.arange(48, chunks=12, dtype="f4").reshape(8, 6)
    shardwise.array.to_zarr(x, str(store), path=name, shards=(4, 3), chunks=(2, 3))
    info = shardwise.info(store)
    page = info._repr_html_()
    assert "<b>shardwise info</b>" in page and "a&lt;b&gt;&amp;c" in page and "<b>&" not in page
    report = shardwise.verify(store)
    assert "all good" in report._repr_html_()
    reader = shardwise.ArrayReader.open(str(store), name)
    page = reader._repr_html_()
    assert len(rects(page[page.index("<svg") : page.index("</svg>") + 6])) == 4
    # a damaged shard: listed, escaped
    victim = store / name / "c" / "0" / "0"
    victim.write_bytes(victim.read_bytes()[:-5])
    page = shardwise.verify(store)._repr_html_()
    assert "bad keys" in page and "c/0/0" in page
    for view in (info, report, reader, shardwise.verify(store)):  # the site check finds them
        assert view._repr_html_().startswith('<div class="shardwise-repr">')


def test_a_verify_report_marks_its_shards_damaged(tmp_path):
    store = sparse_array(tmp_path)
    other = sparse_array(tmp_path, name="w")  # the same store, another array
    for key in ("v/c/1/1", "w/c/0/0"):
        victim = store / key
        raw = bytearray(victim.read_bytes())
        raw[3] ^= 0xFF  # the first inner chunk's zstd frame (its index is whole)
        victim.write_bytes(bytes(raw))
    report = shardwise.verify(other, decode=True)
    assert report.damaged_shards("v") == [(1, 1)] and report.damaged_shards("/w") == [(0, 0)]
    grid = shardwise.tools.views.shard_grid(shardwise.inventory(store, "w"), report)
    fills = [c.get("fill") for c in rects(grid.svg())]
    assert fills[0] == "#d62728" and fills.count("#d62728") == 1
    assert "damaged shards" in grid._repr_html_()


def svgs(page: str) -> list[list[ET.Element]]:
    """The cells of every picture in a page."""
    out, at = [], 0
    while (start := page.find("<svg", at)) >= 0:
        at = page.index("</svg>", start) + len("</svg>")
        out.append(rects(page[start:at]))
    return out


def test_info_and_verify_draw_the_shard_grid(tmp_path):
    """info's picture: each stored shard shaded by its share of inner chunks, the others
    absent (white); verify's: the shards it checked, the damaged one red, as the
    inventory's view draws them."""
    store = sparse_array(tmp_path)
    (cells,) = svgs(shardwise.info(store)._repr_html_())
    assert [c.get("fill") for c in cells] == ["#1f77b4", "#ffffff", "#ffffff", "#1f77b4"]
    assert [float(c.get("fill-opacity")) for c in cells] == [1.0, 1.0, 1.0, 0.575]
    (cells,) = svgs(shardwise.info(store, scan=False)._repr_html_())  # nothing read: unknown
    assert {c.get("fill") for c in cells} == {"#ECB172"}
    (cells,) = svgs(shardwise.verify(store)._repr_html_())
    assert [c.get("fill") for c in cells] == ["#1f77b4", "#ffffff", "#ffffff", "#1f77b4"]
    victim = store / "v" / "c" / "1" / "1"
    raw = bytearray(victim.read_bytes())
    raw[3] ^= 0xFF  # the first inner chunk's zstd frame
    victim.write_bytes(bytes(raw))
    page = shardwise.verify(store, decode=True)._repr_html_()
    (cells,) = svgs(page)
    assert [c.get("fill") for c in cells] == ["#1f77b4", "#ffffff", "#ffffff", "#d62728"]
    assert "red: damaged" in page and "v/c/1/1" in page  # the picture, then the table


def test_a_million_shards_are_drawn_in_blocks(tmp_path):
    """1000 x 1000 shards, two stored (then one of them damaged): both reports draw at
    most MAX_CELLS cells, verify the damaged shard's block red, in a page of bounded
    size."""
    store = tmp_path / "m.zarr"
    arr = zarr.create_array(
        store, name="v", shape=(1000, 1000), shards=(1, 1), chunks=(1, 1), dtype="u1"
    )
    arr[0, 0] = 1
    arr[999, 999] = 2
    pages = [shardwise.info(store)._repr_html_()]
    victim = store / "v" / "c" / "999" / "999"
    victim.write_bytes(victim.read_bytes()[:-1])  # the index cut short
    pages.append(shardwise.verify(store)._repr_html_())
    for page in pages:
        assert len(page) < 500_000
        (cells,) = svgs(page)
        assert len(cells) == 50 * 50 <= h.MAX_CELLS
        assert "1000 x 1000 shards drawn as 50 x 50 cells of up to 20 x 20 shards" in page
        fills = [c.get("fill") for c in cells]
        assert fills[0] == "#1f77b4" and fills[1:-1] == ["#ffffff"] * (50 * 50 - 2)
    assert fills[-1] == "#d62728"  # verify's picture: damaged


def test_a_report_draws_a_dozen_grids_and_counts_the_rest(tmp_path):
    root = zarr.open_group(tmp_path / "g.zarr", mode="w")
    for i in range(14):
        root.create_array(f"a{i:02}", shape=(4,), shards=(2,), chunks=(1,), dtype="u1")[...] = 1
    page = shardwise.verify(tmp_path / "g.zarr")._repr_html_()
    assert len(svgs(page)) == 12 and "the grids of 2 more arrays are not drawn" in page
