"""A grid of 10**7 x 10**7 shards with a handful stored, and sizes near 2**63 (issue 27).

What ``info``, ``verify``, opening an array and reading a point cost must follow the
shards stored (listed), never the grid's cell count; ``inventory``, whose Dataset has a
cell per inner chunk of the whole grid, refuses such a grid before it allocates or reads
an index. Sizes near 2**63 give shardwise's errors, never int64 wrap-around or
zarr-python's unnamed messages. The memory checks run in a child process under an
address-space limit (``resource.RLIMIT_AS``): a clean error, not a ``MemoryError`` or a
kill.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xarray as xr
import zarr
from zarr.storage import LocalStore

import shardwise
from shardwise import ArrayReader
from shardwise.config import get as setting
from shardwise.errors import TooLargeError, UnsupportedArrayError
from shardwise.format.grid import (
    INT64_MAX,
    MAX_CHUNKS_PER_SHARD,
    DimGrid,
    ShardLayout,
    check_chunks_per_shard,
)
from shardwise.format.shard import write_order
from shardwise.testing import CountingStore
from shardwise.tools.inventory import INVENTORY_SPARSITY, summary, totals

SHARD, INNER = 100, 10
GRID = 10**7  # shards per dimension
EXTENT = GRID * SHARD
# values written by zarr-python, each in a shard of its own
POINTS = {
    (5, 7): 42.0,
    (123_456_789, 987_654_321): 1.0,
    (EXTENT - 1, EXTENT - 1): 2.0,  # the last shard of the grid
    (EXTENT - 1, 0): 3.0,
    (500_000_050, 3): 4.0,
}
QUICK = 10.0  # seconds: what any of these may take (they take well under one)


def write_giant(path: Path, points: dict[tuple[int, int], float]) -> None:
    """A group holding ``v``: 10**9 x 10**9 float32 in shards of 100 x 100 of inner
    chunks of 10 x 10 (10**14 shards, 10**16 inner chunks), NaN fill value; the
    metadata and the points' shards written by zarr-python."""
    group = zarr.open_group(str(path), mode="w", zarr_format=3)
    arr = group.create_array(
        "v",
        shape=(EXTENT, EXTENT),
        chunks=(INNER, INNER),
        shards=(SHARD, SHARD),
        dtype="f4",
        fill_value=np.nan,
        dimension_names=["y", "x"],
    )
    for (i, j), value in points.items():
        arr[i, j] = value


@pytest.fixture(scope="module")
def giant(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("giant") / "giant.zarr"
    write_giant(path, POINTS)
    return path


def shard_key(i: int, j: int) -> str:
    return f"v/c/{i // SHARD}/{j // SHARD}"


def quick(fn: Callable[[], Any]) -> Any:
    t0 = time.perf_counter()
    out = fn()
    elapsed = time.perf_counter() - t0
    assert elapsed < QUICK, f"took {elapsed:.1f} s"
    return out


# -- the giant sparse grid --------------------------------------------------------------
def test_info_sums_the_stored_shards(giant: Path) -> None:
    found = quick(lambda: shardwise.info(giant))
    (a,) = found.arrays
    assert a.error is None
    assert (a.shards_present, a.shards_total) == (len(POINTS), GRID**2)
    assert (a.chunks_present, a.chunks_total) == (len(POINTS), (EXTENT // INNER) ** 2)
    assert a.raw_bytes == EXTENT**2 * 4
    assert "5 of 100000000000000 shards" in str(found)
    json.dumps(found.to_dict())


def test_totals_and_summary_without_the_grid(giant: Path) -> None:
    """What ``shardwise inventory`` prints needs the totals only: no refusal for them."""
    attrs = quick(lambda: totals(giant, "v"))
    assert (attrs["shards_present"], attrs["shards_total"]) == (len(POINTS), GRID**2)
    assert (attrs["chunks_present"], attrs["chunks_total"]) == (len(POINTS), 10**16)
    assert attrs["requests"] == 1 + len(POINTS)
    assert f"{len(POINTS)} of {GRID**2} stored" in summary(attrs)


def test_info_requests_follow_the_stored_shards(giant: Path) -> None:
    store = CountingStore(LocalStore(giant, read_only=True))
    shardwise.info(store)
    per_key = {k: n for k, n in store.log.per_key().items() if k.startswith("v/")}
    assert per_key == {shard_key(*p): 1 for p in POINTS}  # one index read each


def test_verify_checks_the_stored_shards(giant: Path) -> None:
    report = quick(lambda: shardwise.verify(giant))
    assert report.ok, str(report)
    assert report.arrays == ["v"] and report.shards == len(POINTS) and not report.strays


def test_verify_finds_strays_and_damage(tmp_path: Path) -> None:
    path = tmp_path / "g.zarr"
    write_giant(path, {(5, 7): 1.0, (EXTENT - 1, 0): 2.0})
    (path / "v" / "c" / str(GRID) / "0").parent.mkdir(parents=True)
    (path / "v" / "c" / str(GRID) / "0").write_bytes(b"off the grid")
    damaged = path / "v" / "c" / "0" / "0"
    raw = bytearray(damaged.read_bytes())
    raw[-1] ^= 0xFF  # the index's crc32c
    damaged.write_bytes(bytes(raw))
    report = quick(lambda: shardwise.verify(path))
    assert report.shards == 2
    assert report.bad_keys == ["v/c/0/0"]
    assert report.strays == [f"v/c/{GRID}/0"]


@pytest.mark.parametrize(("i", "j"), [*POINTS, (5, 8), (777_777_777, 3)])
def test_point_read_reads_one_shard(giant: Path, i: int, j: int) -> None:
    store = CountingStore(LocalStore(giant, read_only=True))
    reader = quick(lambda: ArrayReader.open(store, "v"))
    store.log.clear()
    value = quick(lambda: reader[i, j])
    expected = POINTS.get((i, j), np.nan)
    np.testing.assert_array_equal(value, np.float32(expected))
    assert set(store.log.per_key()) == {shard_key(i, j)}


def test_engine_point_read_reads_one_shard(giant: Path) -> None:
    store = CountingStore(LocalStore(giant, read_only=True))
    ds = quick(lambda: xr.open_dataset(store, engine="shardwise", consolidated=False))
    assert ds.v.shape == (EXTENT, EXTENT)
    store.log.clear()
    assert float(ds.v[5, 7].values) == 42.0
    assert set(store.log.per_key()) == {shard_key(5, 7)}
    store.log.clear()
    window = quick(lambda: ds.v.isel(y=slice(0, 20), x=slice(0, 20)).values)
    assert window[5, 7] == 42.0 and np.isnan(window).sum() == 399
    assert set(store.log.per_key()) == {shard_key(0, 0)}
    store.log.clear()
    far = ds.v.isel(y=[EXTENT - 1, 5], x=[EXTENT - 1, 7]).values
    np.testing.assert_array_equal(far, [[2.0, np.nan], [np.nan, 42.0]])
    assert set(store.log.per_key()) == {shard_key(5, 7), shard_key(EXTENT - 1, EXTENT - 1)} | {
        shard_key(5, EXTENT - 1),
        shard_key(EXTENT - 1, 7),
    }


def test_inventory_refuses_before_reading_an_index(giant: Path) -> None:
    store = CountingStore(LocalStore(giant, read_only=True))
    with pytest.raises(TooLargeError) as info:
        quick(lambda: shardwise.inventory(store, "v"))
    e = info.value
    assert isinstance(e, ValueError)
    assert (e.array, e.key) == ("v", "v/zarr.json")
    assert "shardwise.info" in str(e) and "100,000,000 x 100,000,000" in str(e)
    assert not [k for k in store.log.per_key() if k.startswith("v/c/")]  # no index read
    with pytest.raises(TooLargeError):
        shardwise.tools.inventory.inventories(giant)


def test_inventory_limit_is_relative_to_what_is_stored(tmp_path: Path) -> None:
    """Past shardwise.inventory-cells the grid may be INVENTORY_SPARSITY times what the stored
    shards hold; the limit is dask config."""
    import dask.config

    assert INVENTORY_SPARSITY == 64
    path = tmp_path / "a.zarr"
    arr = zarr.create_array(
        str(path), name="v", shape=(1024, 8), chunks=(1, 8), shards=(8, 8), dtype="i1"
    )
    arr[0, 0] = 1  # 1 of 128 shards: 8 of 1024 inner chunks
    with dask.config.set({"shardwise.inventory-cells": 1023}):
        with pytest.raises(TooLargeError, match=r"shardwise\.inventory-cells"):
            shardwise.inventory(path, "v")
        arr[8, 0] = 1  # 2 shards: 64 x 16 inner chunks cover the grid's 1024
        assert shardwise.inventory(path, "v").attrs["chunks_present"] == 2
    assert (
        shardwise.inventory(path, "v").attrs["chunks_total"] == 1024 <= setting("inventory-cells")
    )


def test_cli_inventory_summarises_and_refuses_the_table(giant: Path, tmp_path: Path) -> None:
    """``shardwise inventory`` prints its summary from the stored shards alone; the
    table (``--out``, one row per inner chunk) is refused with exit 2."""
    from click.testing import CliRunner

    from shardwise.cli.commands import main

    result = CliRunner().invoke(main, ["inventory", str(giant), "--var", "v"])
    assert result.exit_code == 0, result.output
    assert "5 of 100,000,000,000,000" in result.output or "5 of 100000000000000" in result.output
    out = tmp_path / "table.csv"
    result = CliRunner().invoke(main, ["inventory", str(giant), "--var", "v", "--out", str(out)])
    assert result.exit_code == 2, result.output
    assert "TooLargeError" in result.output or "far larger" in result.output
    assert not out.exists()
    result = CliRunner().invoke(main, ["info", str(giant)])
    assert result.exit_code == 0, result.output
    assert "5 of 100000000000000 shards" in result.output


def run_limited(code: str, headroom: int = 2 << 30, seconds: int = 60) -> str:
    """Run ``code`` in a child Python after importing shardwise, xarray, zarr and dask,
    with its address space limited to what it holds then plus ``headroom``; its stdout.
    A kill (or the alarm after ``seconds``) fails the test."""
    prelude = textwrap.dedent(
        f"""
        import resource, signal
        import dask, numpy, xarray, zarr, shardwise, shardwise.io.reader, shardwise.xarray.backend
        import shardwise.tools.info, shardwise.tools.inventory, shardwise.tools.verify
        with open("/proc/self/status") as f:
            vm = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
        resource.setrlimit(resource.RLIMIT_AS, (vm + {headroom}, vm + {headroom}))
        signal.alarm({seconds})
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if proc.returncode < 0:
        raise ChildProcessError(
            f"killed by {signal.Signals(-proc.returncode).name}: {proc.stderr[-2000:]}"
        )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_giant_grid_under_an_address_space_limit(giant: Path) -> None:
    out = run_limited(
        f"""
        import numpy as np, xarray as xr, shardwise
        from shardwise.errors import TooLargeError
        path = {str(giant)!r}
        a = shardwise.info(path).arrays[0]
        print("info", a.shards_present, a.error)
        report = shardwise.verify(path)
        print("verify", report.shards, report.ok)
        reader = shardwise.ArrayReader.open(path, "v")
        print("reader", reader[5, 7], reader[{EXTENT - 1}, 0])
        ds = xr.open_dataset(path, engine="shardwise", consolidated=False)
        print("engine", ds.v[5, 7].values, int(np.isnan(ds.v.isel(y=slice(0, 20), x=slice(0, 20)).values).sum()))
        try:
            shardwise.inventory(path, "v")
        except TooLargeError:
            print("inventory TooLargeError")
        """
    )
    assert out.split("\n")[:5] == [
        "info 5 None",
        "verify 5 True",
        "reader 42.0 3.0",
        "engine 42.0 399",
        "inventory TooLargeError",
    ]


# -- sizes near 2**63 ---------------------------------------------------------------------
def test_regular_bounds_do_not_wrap() -> None:
    dim = DimGrid(INT64_MAX, 2**62, 2**61)
    assert dim.nshards == 2 and dim.ninner == 4
    start, stop = dim.shard_bounds(np.array([0, 1]))
    assert start.tolist() == [0, 2**62] and stop.tolist() == [2**62, INT64_MAX]
    assert dim.inner_in_shard(1) == 2
    pieces = dim.pieces(np.array([INT64_MAX - 1, 0, 2**62]))
    assert [(p.shard, p.inner) for p in pieces] == [(0, 0), (1, 0), (1, 1)]
    assert int(pieces[2].local.start) == INT64_MAX - 1 - 3 * 2**61  # type: ignore[union-attr]
    (piece,) = dim.pieces(slice(INT64_MAX - 3, None))
    assert (piece.shard, piece.inner, piece.out) == (1, 1, slice(0, 3))


def test_rectilinear_starts_do_not_wrap() -> None:
    dim = DimGrid(INT64_MAX, (2**62, 2**62, 2**62), 2**60)
    assert dim.nshards == 2 and dim.ninner == 8
    start, stop = dim.shard_bounds(np.array([0, 1]))
    assert start.tolist() == [0, 2**62] and stop.tolist() == [2**62, INT64_MAX]
    assert dim.starts().tolist() == [0, 2**62]
    assert dim.shard_of(np.array([INT64_MAX - 1])).tolist() == [1]


def test_array_pieces_group_without_overflow() -> None:
    """Grouping (shard, inner chunk) pairs of coordinates near 2**63 needs no combined
    key (shard * width + inner would pass 2**63)."""
    dim = DimGrid(INT64_MAX, 3 * 2**60, 1)
    coords = np.array([INT64_MAX - 1, 5, INT64_MAX - 1, 3 * 2**60 + 1, 3 * 2**60])
    pieces = dim.pieces(coords)
    got = {(p.shard, p.inner): np.arange(len(coords))[p.out].tolist() for p in pieces}
    assert got == {
        (0, 5): [1],
        (1, 0): [4],
        (1, 1): [3],
        (2, INT64_MAX - 1 - 6 * 2**60): [0, 2],
    }


@pytest.mark.parametrize(
    ("extent", "shards", "inner"),
    [(10, 2**63, None), (10, 2**64, 2), (10, (4, 2**63), None), (2**63, 4, None), (10, 4, 2**64)],
)
def test_sizes_past_int64_are_refused(extent: int, shards: Any, inner: int | None) -> None:
    with pytest.raises(ValueError, match=r"2\*\*63 - 1"):
        DimGrid(extent, shards, inner)


def test_layout_counts_are_python_ints() -> None:
    layout = ShardLayout.build((INT64_MAX, INT64_MAX), (2**62, 2**62), (2**61, 2**61))
    assert layout.nshards == 4 and layout.ninner == (4, 4)
    huge = ShardLayout.build((INT64_MAX, INT64_MAX), (1, 1), (1, 1))
    assert huge.nshards == INT64_MAX**2  # no wrap-around


def test_write_order_refuses_huge_shards() -> None:
    with pytest.raises(TooLargeError, match="inner chunks"):
        write_order((2**20, 2**20))
    with pytest.raises(TooLargeError):
        write_order((MAX_CHUNKS_PER_SHARD + 1,), "C")
    assert check_chunks_per_shard((MAX_CHUNKS_PER_SHARD, 1)) == MAX_CHUNKS_PER_SHARD


def morton_key(coords: tuple[int, ...], bits: int) -> int:
    """Bit b of dimension d at bit b * ndim + d: the interleave, in Python ints."""
    ndim = len(coords)
    return sum(((c >> b) & 1) << (b * ndim + d) for b in range(bits) for d, c in enumerate(coords))


@pytest.mark.parametrize(
    "cps",
    [(4, 1, 1, 1, 2), (3, 5), (2**8, 2, 2, 2, 2, 2, 2, 2, 2)],
    ids=["small", "odd", "72-bit-interleave"],
)
def test_morton_order_needs_no_more_than_64_bits(cps: tuple[int, ...]) -> None:
    """Bits that no coordinate has take no place in the code: the order of the full
    interleave, whose positions reach past 64 bits for 8 bits by 9 dimensions."""
    bits = max((s - 1).bit_length() for s in cps)
    expected = sorted(write_order(cps, "C"), key=lambda c: morton_key(c, bits))
    assert write_order(cps, "morton") == expected


# -- damaged metadata near 2**63, through every way in ------------------------------------
@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """40 x 40 float32 in shards of 20 x 20, inner chunks 10 x 10, all written."""
    path = tmp_path_factory.mktemp("small") / "small.zarr"
    group = zarr.open_group(str(path), mode="w", zarr_format=3)
    arr = group.create_array(
        "v",
        shape=(40, 40),
        chunks=(10, 10),
        shards=(20, 20),
        dtype="f4",
        fill_value=np.nan,
        dimension_names=["y", "x"],
    )
    arr[:] = np.arange(1600, dtype="f4").reshape(40, 40)
    return path


def claiming(
    small: Path, tmp_path: Path, shape: list[int], grid: list[int], inner: list[int]
) -> Path:
    """A copy of ``small`` whose zarr.json claims this geometry (the shards stay)."""
    path = tmp_path / "claims.zarr"
    shutil.copytree(small, path)
    doc_path = path / "v" / "zarr.json"
    doc = json.loads(doc_path.read_text())
    doc["shape"] = shape
    doc["chunk_grid"]["configuration"]["chunk_shape"] = grid
    doc["codecs"][0]["configuration"]["chunk_shape"] = inner
    doc_path.write_text(json.dumps(doc))
    return path


OPENERS: dict[str, Callable[[Path], Any]] = {
    "reader": lambda p: ArrayReader.open(p, "v")[0, 0],
    "engine": lambda p: xr.open_dataset(p, engine="shardwise", consolidated=False).v[0, 0].values,
    "inventory": lambda p: shardwise.inventory(p, "v"),
}


@pytest.mark.parametrize("opener", list(OPENERS))
@pytest.mark.parametrize(
    ("geometry", "cls"),
    [
        # shards of 2**31 inner chunks: an index of 32 GiB
        (([INT64_MAX, 40], [2**62, 20], [2**31, 10]), TooLargeError),
        # 2**40 inner chunks in a shard: an index of 16 TiB
        (([2**40, 40], [2**40, 20], [1, 10]), TooLargeError),
        # a shard size past int64
        (([40, 40], [2**64, 20], [2**62, 10]), UnsupportedArrayError),
        # a shard of 2**62 that the inner chunk does not divide
        (([INT64_MAX, 40], [2**62, 20], [3, 10]), UnsupportedArrayError),
    ],
    ids=["index-32GiB", "index-16TiB", "shard-2**64", "indivisible-2**62"],
)
def test_claims_near_2_63_name_the_array(
    small: Path, tmp_path: Path, opener: str, geometry: Any, cls: type
) -> None:
    path = claiming(small, tmp_path, *geometry)
    with pytest.raises(cls) as info:
        OPENERS[opener](path)
    assert (info.value.array, info.value.key) == ("v", "v/zarr.json"), str(info.value)
    if cls is UnsupportedArrayError:  # info lists the array with what is wrong
        (a,) = [*shardwise.info(path).arrays, *shardwise.info(path).unreadable]
        assert "v/zarr.json" in str(a), str(a)


@pytest.mark.parametrize(
    "geometry",
    [([INT64_MAX, 40], [2**62, 20], [2**31, 10]), ([2**40, 40], [2**40, 20], [1, 10])],
    ids=["index-32GiB", "index-16TiB"],
)
def test_huge_index_claims_in_info_and_verify(small: Path, tmp_path: Path, geometry: Any) -> None:
    path = claiming(small, tmp_path, *geometry)
    (a,) = shardwise.info(path).arrays
    assert a.error is not None and a.error.startswith("TooLargeError")
    report = shardwise.verify(path)
    assert [(p.error, p.key) for p in report.problems] == [("TooLargeError", "v/zarr.json")]


def test_inventory_near_2_63_is_exact(small: Path, tmp_path: Path) -> None:
    """Shards of 2**62 of inner chunks of 2**61 (2 x 2 per shard, as the shards written
    hold): starts and totals exact, no wrap-around."""
    path = claiming(small, tmp_path, [INT64_MAX, INT64_MAX], [2**62, 2**62], [2**61, 2**61])
    ds = shardwise.inventory(path, "v")
    assert ds.y_start.values.tolist() == [0, 2**61, 2**62, 3 * 2**61]
    assert ds.shard.values.tolist() == [[0, 0, 1, 1], [0, 0, 1, 1], [2, 2, 3, 3], [2, 2, 3, 3]]
    assert ds.attrs["raw_bytes"] == INT64_MAX**2 * 4
    assert ds.attrs["raw_bytes_present"] == 16 * 2**122 * 4
    assert ds.attrs["chunks_total"] == 16 and ds.attrs["shards_total"] == 4
    (a,) = shardwise.info(path).arrays
    assert (a.chunks_present, a.raw_bytes) == (16, INT64_MAX**2 * 4)


def test_selection_past_int64_bytes_names_the_array(small: Path, tmp_path: Path) -> None:
    """numpy's "array is too big" names nothing: a selection larger than any array is
    refused with the array named, before any read."""
    path = claiming(small, tmp_path, [INT64_MAX, INT64_MAX], [2**62, 2**62], [2**61, 2**61])
    reader = ArrayReader.open(path, "v")
    with pytest.raises(TooLargeError) as info:
        reader[:, :]
    assert info.value.array == "v" and "smaller region" in str(info.value)
    ds = xr.open_dataset(path, engine="shardwise", consolidated=False)
    with pytest.raises(TooLargeError):
        np.asarray(ds.v[:, : 2**62])


def test_reshard_costs_the_stored_shards(giant: Path, tmp_path: Path) -> None:
    """reshard of the giant grid lists the source and writes one target shard per stored
    one: done in moments, and the result holds the same values."""
    import dask

    dst = tmp_path / "dst.zarr"
    with dask.config.set(scheduler="threads"):
        report = quick(lambda: shardwise.reshard(giant, dst))
    assert report.shards == report.shards_written == len(POINTS)
    reader = shardwise.ArrayReader.open(dst, "v")
    for (i, j), value in POINTS.items():
        assert reader[i, j] == value
