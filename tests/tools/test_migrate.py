"""shardwise.tools.migrate.migrate (issue 13): stores of the 2022 sharding draft to sharding_indexed,
compressed chunks copied as bytes; checked with xarray's zarr engine, zarr-python and
tensorstore against what zarr-python 2.18 wrote."""

from __future__ import annotations

import shutil
from pathlib import Path

import dask
import numpy as np
import pytest
import xarray as xr
import zarr
from zarr.storage import LocalStore

import shardwise
from shardwise.errors import StoreExistsError, WriteError
from shardwise.testing import CountingStore

LEGACY = Path(__file__).parents[1] / "data" / "legacy"
EXPECTED = dict(np.load(LEGACY / "expected.npz"))
EMPTY = 2**64 - 1


@pytest.fixture(autouse=True)
def _threads():
    with dask.config.set(scheduler="threads"):
        yield


def index_of(raw: bytes, n: int) -> np.ndarray:
    """(offset, nbytes) pairs of a shard whose index (n entries, then crc32c) ends it."""
    return np.frombuffer(raw[-(16 * n + 4) : -4], "<u8").reshape(n, 2)


def chunks_of(raw: bytes, table: np.ndarray) -> set[bytes]:
    return {raw[o : o + k] for o, k in table.tolist() if o != EMPTY}


@pytest.mark.parametrize("store", ["compressors", "hierarchy", "sparse"])
def test_migrated_store_opens_identically_everywhere(tmp_path, store):
    dst = tmp_path / f"{store}.zarr"
    report = shardwise.tools.migrate.migrate(LEGACY / store, dst)
    names = sorted(n.partition("/")[2] for n in EXPECTED if n.startswith(f"{store}/"))
    assert sorted(report.arrays) == names
    source = xr.open_datatree(LEGACY / store, engine="shardwise").load()
    for engine in ("zarr", "shardwise"):
        back = xr.open_datatree(dst, engine=engine, consolidated=False).load()
        xr.testing.assert_identical(back, source)
    ts = pytest.importorskip("tensorstore")
    for name in names:
        want = EXPECTED[f"{store}/{name}"]
        np.testing.assert_array_equal(zarr.open_array(dst / name, mode="r")[...], want)
        spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(dst / name)}}
        np.testing.assert_array_equal(ts.open(spec, open=True).result().read().result(), want)
    assert shardwise.verify(dst, decode=True).ok


def test_chunks_are_copied_as_bytes_and_dead_bytes_dropped(tmp_path):
    dst = tmp_path / "c.zarr"
    report = shardwise.tools.migrate.migrate(LEGACY / "compressors", dst)
    assert report.reencoded == {"zlib": "gzip (level 5)"}  # no v3 codec writes zlib
    for name in ("none", "blosc", "zstd", "gzip"):
        for shard in ("0/0", "0/1", "1/0", "1/1"):
            old = (LEGACY / "compressors" / f"data/root/{name}/c{shard}").read_bytes()
            new = (dst / name / f"c/{shard}").read_bytes()
            old_table = np.frombuffer(old[-64:], "<u8").reshape(4, 2)
            assert chunks_of(new, index_of(new, 4)) == chunks_of(old, old_table), (name, shard)
    dst = tmp_path / "s.zarr"
    shardwise.tools.migrate.migrate(LEGACY / "sparse", dst)
    old = (LEGACY / "sparse/data/root/v/c1/0").read_bytes()  # 3 chunks and unused bytes
    new = (dst / "v/c/1/0").read_bytes()
    table = index_of(new, 4)
    assert (table[0] == EMPTY).all()  # the deleted chunk stays missing
    assert len(new) == int(table[table[:, 0] != EMPTY, 1].sum()) + 16 * 4 + 4 < len(old)
    assert sorted(
        p.relative_to(dst / "v").as_posix() for p in (dst / "v/c").rglob("*") if p.is_file()
    ) == [
        "c/0/0",
        "c/1/0",
    ]  # missing shards stay missing


def test_one_task_per_shard_and_resume(tmp_path):
    dst = tmp_path / "c.zarr"
    delayed = shardwise.tools.migrate.migrate(LEGACY / "compressors", dst, compute=False)
    # one task per shard (keys: layer, array, *shard), after one key per array's plan
    graph = dict(delayed.__dask_graph__())
    tasks = [k for k in graph if isinstance(k, tuple) and len(k) > 2]
    plans = sum(isinstance(k, tuple) and len(k) == 2 for k in graph)
    assert not (dst / "zstd" / "c").exists()  # metadata only, so far
    report = delayed.compute()  # (a delayed, as to_zarr's: the report)
    assert isinstance(report, shardwise.tools.migrate.MigrationReport)
    assert sum(k[0].startswith("shardwise-migrate-") for k in tasks) == report.shards == 20
    assert plans == len(report.arrays)
    # an interrupted run: one shard missing, one cut short; mode="a" completes it
    (dst / "zstd/c/1/1").unlink()
    cut = dst / "gzip/c/0/1"
    cut.write_bytes(cut.read_bytes()[:-7])
    store = CountingStore(LocalStore(dst))
    shardwise.tools.migrate.migrate(LEGACY / "compressors", store, mode="a")
    puts = sorted(k for k in store.log.per_key("set") if "/c/" in k)
    assert puts == ["gzip/c/0/1", "zstd/c/1/1"]
    assert shardwise.verify(dst).ok
    source = xr.open_dataset(LEGACY / "compressors", engine="shardwise").load()
    xr.testing.assert_identical(
        xr.open_dataset(dst, engine="zarr", consolidated=False).load(), source
    )


def test_refusals_before_writing(tmp_path):
    dst = tmp_path / "d.zarr"
    shardwise.tools.migrate.migrate(LEGACY / "sparse", dst)
    before = sorted(p.as_posix() for p in dst.rglob("*"))
    with pytest.raises(StoreExistsError, match="mode='a'"):
        shardwise.tools.migrate.migrate(LEGACY / "sparse", dst)
    with pytest.raises(WriteError, match="not a store of the 2022") as err:
        shardwise.tools.migrate.migrate(dst, tmp_path / "e.zarr")
    assert "Zarr v3" in str(err.value)
    assert sorted(p.as_posix() for p in dst.rglob("*")) == before
    assert not (tmp_path / "e.zarr").exists()
    shutil.rmtree(dst / "v")
    report = shardwise.tools.migrate.migrate(LEGACY / "sparse", dst, mode="w")  # replaces it
    assert report.arrays == ["v"]
    np.testing.assert_array_equal(zarr.open_array(dst / "v")[...], EXPECTED["sparse/v"])


def test_a_group_of_the_source(tmp_path):
    dst = tmp_path / "g.zarr"
    report = shardwise.tools.migrate.migrate(LEGACY / "hierarchy", dst, group="surface")
    assert report.arrays == ["surface/counts"]
    back = xr.open_dataset(dst, engine="zarr", consolidated=False).load()
    source = xr.open_dataset(LEGACY / "hierarchy", engine="shardwise", group="surface").load()
    xr.testing.assert_identical(back, source)
    assert back.attrs == {"level": 0}


def test_one_whole_read_per_shard_and_index_reads_to_resume(tmp_path):
    """Migrating is reshard's repack with the grid unchanged (shardwise.graph.copy): each
    old shard is read whole in one request and a new destination is not read; mode='a'
    reads the index of each shard already there, and nothing else."""
    src = CountingStore(LocalStore(LEGACY / "compressors", read_only=True))
    dst = CountingStore(LocalStore(tmp_path / "c.zarr"))
    report = shardwise.tools.migrate.migrate(src, dst)
    gets = [r for r in src.log.requests if r.op == "get" and r.key.startswith("data/")]
    assert len({r.key for r in gets}) == len(gets) == report.shards == 20
    assert {r.byte_range for r in gets} == {"whole"}
    assert not [r for r in dst.log.requests if r.op == "get" and "/c/" in r.key]
    src.log.clear()
    dst.log.clear()
    shardwise.tools.migrate.migrate(src, dst, mode="a")
    reads = [r for r in dst.log.requests if r.op == "get" and "/c/" in r.key]
    assert len({r.key for r in reads}) == len(reads) == 20
    assert {r.byte_range for r in reads} == {f"last {16 * 4 + 4}"}  # the index
    assert not [r for r in src.log.requests if r.op == "get" and r.key.startswith("data/")]
    assert not [r for r in dst.log.requests if r.op in ("set", "delete") and "/c/" in r.key]


def test_migrate_is_reshards_same_grid_mode(tmp_path):
    """shardwise.tools.migrate.migrate runs reshard's planner with the grid unchanged: an unsharded
    draft array stays unsharded (its codecs kept), a sharded one keeps its shard and
    inner chunk shapes, no consolidated metadata is written, and the draft's fill
    value is the _FillValue attribute even where the attributes held another."""
    import json

    src = tmp_path / "src.zarr"
    shutil.copytree(LEGACY / "hierarchy", src)
    doc_key = src / "meta/root/surface/counts.array.json"
    doc = json.loads(doc_key.read_text())
    doc["attributes"]["_FillValue"] = 7
    doc_key.write_text(json.dumps(doc))
    dst = tmp_path / "dst.zarr"
    shardwise.tools.migrate.migrate(src, dst)
    # (no consolidated metadata: zarr-python 3.1 writes the field as null, 3.2 on leaves it out)
    assert json.loads((dst / "zarr.json").read_text()).get("consolidated_metadata") is None
    flags = json.loads((dst / "deep/inside/flags/zarr.json").read_text())
    assert [c["name"] for c in flags["codecs"]] == ["bytes"]
    assert flags["chunk_grid"]["configuration"]["chunk_shape"] == [4]
    assert flags["dimension_names"] == ["n"]
    counts = json.loads((dst / "surface/counts/zarr.json").read_text())
    (sharding,) = counts["codecs"]
    assert sharding["name"] == "sharding_indexed"
    assert sharding["configuration"]["chunk_shape"] == [2, 3, 4]
    assert counts["chunk_grid"]["configuration"]["chunk_shape"] == [2, 6, 8]
    assert counts["attributes"] == {"units": "1", "_FillValue": -1}
    assert counts["dimension_names"] == ["t", "y", "x"]
