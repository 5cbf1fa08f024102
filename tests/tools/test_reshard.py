"""shardwise.reshard: every source kind to sharded Zarr v3, repacked as bytes or
re-encoded, checked against xarray's zarr engine, zarr-python and the stored bytes
(parsed here from the specs, not with shardwise)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import dask
import numcodecs
import numpy as np
import pytest
import xarray as xr
import zarr

import shardwise
from matrix import cover
from shardwise.testing import CountingStore

from clusters import CLUSTER_OPTIONS

LEGACY = Path(__file__).parents[1] / "data" / "legacy"
EMPTY = 2**64 - 1
KINDS = [
    "v2",
    "v3",
    "v3-sharded",
    # (written through xarray: make_source)
    pytest.param("v3-rectilinear", marks=pytest.mark.xarray_rectilinear),
    "draft",
]
MONTHS = (7, 13, 20)  # the rectilinear source's shards along time


def dataset() -> xr.Dataset:
    rng = np.random.default_rng(0)
    t = np.round(rng.random((40, 30, 20)), 2).astype("f4")
    t[:10] = np.nan  # chunks of fill only: absent in the source
    t[20:30, :10] = np.nan
    return xr.Dataset(
        {
            "t": (("time", "y", "x"), t, {"units": "K", "long_name": "temperature"}),
            "n": (("time",), np.arange(40, dtype="i8")),
        },
        coords={"time": np.arange(40), "y": np.linspace(0, 1, 30), "x": np.arange(20.0)},
        attrs={"title": "reshard test"},
    )


def make_source(kind: str, path: Path) -> Path:
    """A store of ``kind`` holding :func:`dataset` (``t`` in chunks of 5 x 10 x 20)."""
    ds = dataset()
    if kind == "v2":
        enc = {"t": {"chunks": (5, 10, 20), "compressors": [numcodecs.Zstd(level=3)]}}
        ds.to_zarr(path, zarr_format=2, encoding=enc, consolidated=False)
    elif kind == "v3":
        enc = {"t": {"chunks": (5, 10, 20), "compressors": [zarr.codecs.ZstdCodec(level=3)]}}
        ds.to_zarr(path, zarr_format=3, encoding=enc, consolidated=False)
    elif kind == "v3-sharded":
        enc = {"t": {"chunks": (5, 10, 20), "shards": (10, 30, 20)}}
        ds.to_zarr(path, zarr_format=3, encoding=enc, consolidated=False)
    elif kind == "v3-rectilinear":
        irregular = ds.chunk({"time": MONTHS})
        enc = {"t": {"chunks": (1, 10, 20)}}
        shardwise.to_zarr(irregular, path, shards="dask", encoding=enc, consolidated=False)
    else:
        shutil.copytree(LEGACY / "compressors", path)
    return path


def opened(kind: str, path: Path, **kwargs) -> xr.Dataset:
    """The source as xarray shows it (the shardwise engine for what xarray's zarr
    engine cannot read)."""
    if kind in ("v3-rectilinear", "draft"):
        return xr.open_dataset(path, engine="shardwise", consolidated=False, **kwargs).load()
    return xr.open_zarr(path, consolidated=False, **kwargs).load()


def data_var(kind: str) -> str:
    return "zstd" if kind == "draft" else "t"


# -- the stored bytes, from the specs ----------------------------------------------------
def _table(blob: bytes, n: int, *, crc: bool) -> np.ndarray:
    end = len(blob) - (4 if crc else 0)
    return np.frombuffer(blob[end - 16 * n : end], dtype="<u8").reshape(n, 2)


def stored_chunks(kind: str, root: Path, name: str) -> dict[tuple[int, ...], bytes]:
    """Global inner chunk coordinates -> the chunk's stored bytes, read off the files."""
    out: dict[tuple[int, ...], bytes] = {}
    if kind == "v2":
        for f in (root / name).iterdir():
            if not f.name.startswith("."):
                out[tuple(int(c) for c in f.name.split("."))] = f.read_bytes()
        return out
    if kind == "draft":
        doc = json.loads((root / "meta" / "root" / f"{name}.array.json").read_text())
        per = doc["storage_transformers"][0]["configuration"]["chunks_per_shard"]
        base, crc, starts = root / "data" / "root" / name, False, None
    else:
        doc = json.loads((root / name / "zarr.json").read_text())
        codec = doc["codecs"][0]
        if codec["name"] != "sharding_indexed":
            for f in (root / name / "c").rglob("*"):
                if f.is_file():
                    out[tuple(int(c) for c in f.relative_to(root / name / "c").parts)] = (
                        f.read_bytes()
                    )
            return out
        inner = codec["configuration"]["chunk_shape"]
        grid = doc["chunk_grid"]
        if grid["name"] == "regular":
            per = [s // c for s, c in zip(grid["configuration"]["chunk_shape"], inner, strict=True)]
            starts = None
        else:  # rectilinear: [value, count] runs or plain edges per dimension
            edges = []
            for spec in grid["configuration"]["chunk_shapes"]:
                if isinstance(spec, int):
                    edges.append([spec] * 64)
                else:
                    sizes = []
                    for e in spec:
                        sizes += [e[0]] * e[1] if isinstance(e, list) else [e]
                    edges.append(sizes)
            starts = [
                np.concatenate([[0], np.cumsum(e)]) // c for e, c in zip(edges, inner, strict=True)
            ]
            per = None
        base, crc = root / name / "c", True
    for f in base.rglob("*"):
        if not f.is_file():
            continue
        parts = f.relative_to(base).parts
        shard = tuple(int(p.removeprefix("c")) for p in parts)
        if starts is not None:
            cps = [int(s[i + 1] - s[i]) for s, i in zip(starts, shard, strict=True)]
            first = [int(s[i]) for s, i in zip(starts, shard, strict=True)]
        else:
            cps = per
            first = [i * n for i, n in zip(shard, per, strict=True)]
        blob = f.read_bytes()
        table = _table(blob, int(np.prod(cps)), crc=crc)
        for local, (offset, nbytes) in zip(np.ndindex(*cps), table.tolist(), strict=True):
            if offset != EMPTY:
                key = tuple(a + b for a, b in zip(first, local, strict=True))
                out[key] = blob[offset : offset + nbytes]
    return out


# -- round trips -------------------------------------------------------------------------
@pytest.mark.parametrize("scope", ["all", "one"])
@pytest.mark.parametrize("way", ["repack", "reencode"])
@pytest.mark.parametrize("kind", KINDS)
def test_round_trip(tmp_path, kind, way, scope):
    src = make_source(kind, tmp_path / "src.zarr")
    dst = tmp_path / "dst.zarr"
    name = data_var(kind)
    dim = "y" if kind == "draft" else "time"  # the draft array: 13 x 10 in chunks of 4 x 3
    if way == "repack":
        kwargs = {"shards": {dim: 16 if kind == "draft" else 20}}
    else:
        kwargs = {"shards": {dim: 8 if kind == "draft" else 20}, "chunks": {dim: 2}}
    variables = [name] if scope == "one" else None
    with dask.config.set(scheduler="threads"):
        report = shardwise.reshard(src, dst, variables=variables, **kwargs)

    assert (name in report.repacked) == (way == "repack"), report
    source = opened(kind, src)
    if scope == "one":
        source = source[[name]].drop_vars(list(source[[name]].coords))
        assert report.arrays == [name]
    back = xr.open_zarr(dst, consolidated=False).load()
    xr.testing.assert_identical(back, source)
    raw = zarr.open_array(dst / name, mode="r")
    np.testing.assert_array_equal(raw[...], shardwise.ArrayReader.open(src, name)[...])
    meta = json.loads((dst / name / "zarr.json").read_text())
    assert meta["codecs"][0]["name"] == "sharding_indexed"
    assert [c["name"] for c in meta["codecs"][0]["configuration"]["index_codecs"]] == [
        "bytes",
        "crc32c",
    ]

    before, after = stored_chunks(kind, src, name), stored_chunks("v3", dst, name)
    if way == "repack":  # the same inner chunks, byte for byte: no codec ran
        assert after == before
        assert report.chunks_repacked >= len(after)
    else:
        assert len(after) > 0 and report.chunks_reencoded >= len(after)
    written = [f for a in report.arrays for f in (dst / a / "c").rglob("*") if f.is_file()]
    assert report.shards_written == len(written) == report.shards


def test_v2_details_map_onto_v3(tmp_path):
    """F order and filters repack (the chain is the same inside the shard); zlib, which
    Zarr v3 has no codec for, is re-encoded as gzip; fill_value null stays no mask."""
    values = np.arange(12 * 10, dtype=">i4").reshape(12, 10)
    root = zarr.open_group(tmp_path / "src.zarr", mode="w", zarr_format=2)
    specs = {
        "f": {"order": "F", "compressors": numcodecs.Blosc(cname="zstd"), "fill_value": -1},
        "delta": {"filters": [numcodecs.Delta(dtype=">i4")], "compressors": numcodecs.GZip(4)},
        "zlib": {"compressors": numcodecs.Zlib(level=2), "fill_value": None},
    }
    for name, spec in specs.items():
        a = root.create_array(name, shape=values.shape, chunks=(4, 5), dtype=">i4", **spec)
        a[...] = values
        a.attrs["_ARRAY_DIMENSIONS"] = ["y", "x"]
    report = shardwise.reshard(tmp_path / "src.zarr", tmp_path / "dst.zarr", shards={"y": 8})
    assert sorted(report.repacked) == ["delta", "f"] and report.reencoded == ["zlib"]
    for name in specs:
        np.testing.assert_array_equal(zarr.open_array(tmp_path / "dst.zarr" / name)[...], values)
    assert stored_chunks("v3", tmp_path / "dst.zarr", "f") == stored_chunks(
        "v2", tmp_path / "src.zarr", "f"
    )
    meta = json.loads((tmp_path / "dst.zarr" / "zlib" / "zarr.json").read_text())
    inner = meta["codecs"][0]["configuration"]["codecs"]
    assert inner[-1] == {"name": "gzip", "configuration": {"level": 2}}
    assert "_FillValue" not in meta["attributes"]  # fill_value null: no missing mark
    assert (
        json.loads((tmp_path / "dst.zarr" / "f" / "zarr.json").read_text())["attributes"][
            "_FillValue"
        ]
        == -1
    )
    with pytest.warns(RuntimeWarning):  # xarray: v2 consolidated metadata missing
        src = xr.open_zarr(tmp_path / "src.zarr").load()
    xr.testing.assert_identical(xr.open_zarr(tmp_path / "dst.zarr", consolidated=False).load(), src)


@pytest.mark.xarray_rectilinear  # (its source is written through xarray)
def test_unchanged_sizes_keep_a_rectilinear_grid(tmp_path):
    src = make_source("v3-rectilinear", tmp_path / "src.zarr")
    report = shardwise.reshard(src, tmp_path / "dst.zarr", codecs=zarr.codecs.GzipCodec(level=1))
    assert report.reencoded == ["n", "t", "time", "x", "y"] and report.repacked == []
    grid = json.loads((tmp_path / "dst.zarr" / "t" / "zarr.json").read_text())["chunk_grid"]
    assert grid == json.loads((src / "t" / "zarr.json").read_text())["chunk_grid"]
    back = xr.open_dataset(tmp_path / "dst.zarr", engine="shardwise", consolidated=False)
    xr.testing.assert_identical(back.load(), opened("v3-rectilinear", src))


def test_strings_are_copied_whole(tmp_path):
    ds = dataset().assign(station=("x", np.array([f"s{i}" for i in range(20)])))
    ds.to_zarr(tmp_path / "src.zarr", zarr_format=2, consolidated=False)
    report = shardwise.reshard(tmp_path / "src.zarr", tmp_path / "dst.zarr")
    assert report.copied == ["station"]
    xr.testing.assert_identical(
        xr.open_zarr(tmp_path / "dst.zarr", consolidated=False).load(),
        xr.open_zarr(tmp_path / "src.zarr", consolidated=False).load(),
    )


def test_one_task_per_target_shard_and_one_read_per_source_object(tmp_path):
    src = make_source("v2", tmp_path / "src.zarr")
    counting = CountingStore(zarr.storage.LocalStore(src, read_only=True))
    delayed = shardwise.reshard(
        counting, tmp_path / "dst.zarr", shards={"time": 20, "y": 30}, compute=False
    )
    graph = dict(delayed.__dask_graph__())
    tasks = [k for k in graph if isinstance(k, tuple) and len(k) > 2 and "-reshard-" in k[0]]
    counting.log.clear()
    with dask.config.set(scheduler="sync"):
        (report,) = dask.compute(delayed)  # (a delayed, as to_zarr's: the report)
    assert isinstance(report, shardwise.tools.reshard.ReshardReport)
    assert len(tasks) == report.shards == report.shards_written
    per_key = counting.log.per_key()
    stored = {"t/" + ".".join(map(str, c)) for c in stored_chunks("v2", src, "t")}
    assert {k for k in per_key if k.startswith("t/")} == stored  # absent chunks: no request
    # each chunk of t read once (n's one chunk of 40 feeds two shards of 20: read twice)
    assert {n for k, n in per_key.items() if k.startswith("t/")} == {1}
    assert report.shards_written == report.shards


def test_refusals_before_writing(tmp_path):
    src = make_source("v2", tmp_path / "src.zarr")
    dst = tmp_path / "dst.zarr"
    for kwargs, match in [
        ({"shards": {"depth": 4}}, "names a dimension no array has"),
        ({"shards": {"time": 0}}, "integers >= 1"),
        ({"shards": {"time": 20}, "chunks": {"time": 3}}, "not a multiple"),
        ({"variables": ["nope"]}, "does not have"),
        ({"mode": "r+"}, "unknown mode"),
    ]:
        with pytest.raises(shardwise.errors.WriteError, match=match):
            shardwise.reshard(src, dst, **kwargs)
        assert not dst.exists()
    shardwise.reshard(src, dst)
    with pytest.raises(shardwise.errors.StoreExistsError, match="mode='a'"):
        shardwise.reshard(src, dst)
    with pytest.raises(shardwise.errors.StoreExistsError, match="not made by a reshard with these"):
        shardwise.reshard(src, dst, mode="a", shards={"time": 10})
    with pytest.raises(shardwise.errors.NotAZarrStoreError):
        shardwise.reshard(tmp_path / "nothing", tmp_path / "dst2.zarr")
    assert not (tmp_path / "dst2.zarr").exists()


def test_resume_skips_valid_shards_and_rewrites_damaged_ones(tmp_path):
    src = make_source("v3", tmp_path / "src.zarr")
    dst = tmp_path / "dst.zarr"
    kwargs = {"shards": {"time": 10}}
    first = shardwise.reshard(src, dst, **kwargs)
    files = sorted(f for f in (dst / "t" / "c").rglob("*") if f.is_file())
    files[0].unlink()  # never written
    files[1].write_bytes(files[1].read_bytes()[:-3])  # torn: its index does not read
    mtimes = {f: f.stat().st_mtime_ns for f in files[2:]}
    again = shardwise.reshard(src, dst, mode="a", **kwargs)
    assert again.shards_skipped == first.shards_written - 2
    assert again.shards_written == 2
    assert {f: f.stat().st_mtime_ns for f in files[2:]} == mtimes
    xr.testing.assert_identical(xr.open_zarr(dst, consolidated=False).load(), opened("v3", src))


# -- an interrupted run on worker processes, then mode="a" ----------------------------
JOB = """\
import sys
sys.path.insert(0, {tests!r})
import distributed, zarr
import shardwise
from shardwise.testing import LatencyStore
from clusters import CLUSTER_OPTIONS
from matrix import cover

if __name__ == "__main__":
    with distributed.LocalCluster(**CLUSTER_OPTIONS, threads_per_worker=1) as c, distributed.Client(c):
        slow = LatencyStore(zarr.storage.LocalStore(sys.argv[1], read_only=True), 0.15)
        print("cluster up", flush=True)
        shardwise.reshard(slow, sys.argv[2], shards={{"time": 5, "y": 10}})
        print("reshard done", flush=True)
"""


def test_interrupted_reshard_then_resume(tmp_path):
    src = make_source("v2", tmp_path / "src.zarr")
    dst = tmp_path / "dst.zarr"
    script = tmp_path / "job.py"
    script.write_text(JOB.format(tests=str(Path(__file__).parents[1])))
    log = tmp_path / "job.log"

    def shards() -> list[Path]:
        base = dst / "t" / "c"
        if not base.exists():
            return []
        return sorted(f for f in base.rglob("*") if f.is_file() and ".partial" not in f.name)

    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, str(script), str(src), str(dst)],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 120
        while len(shards()) < 3 and proc.poll() is None:
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.02)
        assert proc.poll() is None, log.read_text()
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert "reshard done" not in log.read_text()
    at_kill = {f: f.stat().st_mtime_ns for f in shards()}
    shardwise.reshard(src, tmp_path / "whole.zarr", shards={"time": 5, "y": 10})
    total = sum(1 for f in (tmp_path / "whole.zarr" / "t" / "c").rglob("*") if f.is_file())
    assert 3 <= len(at_kill) < total
    with dask.config.set(scheduler="threads"):
        report = shardwise.reshard(src, dst, shards={"time": 5, "y": 10}, mode="a")
    assert report.shards_skipped >= len(at_kill)
    assert {f: f.stat().st_mtime_ns for f in at_kill} == at_kill  # not rewritten
    assert len(shards()) == total
    xr.testing.assert_identical(xr.open_zarr(dst, consolidated=False).load(), opened("v2", src))


def test_on_worker_processes(tmp_path):
    distributed = pytest.importorskip("distributed")
    src = make_source("v3-sharded", tmp_path / "src.zarr")
    with (
        distributed.LocalCluster(**CLUSTER_OPTIONS, threads_per_worker=1) as cluster,
        distributed.Client(cluster),
    ):
        report = shardwise.reshard(src, tmp_path / "dst.zarr", shards={"time": 20}, chunks={"y": 5})
    assert report.reencoded and report.shards_written == report.shards
    xr.testing.assert_identical(
        xr.open_zarr(tmp_path / "dst.zarr", consolidated=False).load(), opened("v3-sharded", src)
    )


# -- object storage: a real S3 endpoint (moto's server), both clients ---------------------
from test_s3 import Target  # noqa: E402


def upload(path: Path, where: Target) -> None:
    """Every file of a local store into the bucket, under ``where``'s prefix."""
    from zarr.core.buffer import default_buffer_prototype
    from zarr.core.sync import sync

    store = where.store()
    for f in sorted(path.rglob("*")):
        if f.is_file():
            data = default_buffer_prototype().buffer.from_bytes(f.read_bytes())
            sync(store.set(f.relative_to(path).as_posix(), data))


@pytest.mark.parametrize(
    ("kind", "way", "scope"), cover(KINDS, ["repack", "reencode"], ["all", "one"])
)
def test_s3_to_s3(s3, bucket, tmp_path, kind, way, scope):
    """Every source kind, read from and written to the S3 endpoint: through s3fs for
    the repacks, obstore for the re-encodes."""
    client = "s3fs" if way == "repack" else "obstore"
    local = make_source(kind, tmp_path / "src.zarr")
    src = Target(client, s3, bucket, "source.zarr")
    dst = Target(client, s3, bucket, "resharded.zarr")
    upload(local, src)
    name = data_var(kind)
    dim = "y" if kind == "draft" else "time"
    kwargs: dict = {"shards": {dim: 16 if kind == "draft" else 20}}
    if way == "reencode":
        kwargs = {"shards": {dim: 8 if kind == "draft" else 20}, "chunks": {dim: 2}}
    with dask.config.set(scheduler="threads"):
        report = shardwise.reshard(
            src.where(),
            dst.where(),
            storage_options=src.options(),
            target_options=dst.options(),
            variables=[name] if scope == "one" else None,
            **kwargs,
        )
    assert (name in report.repacked) == (way == "repack")
    assert report.shards_written == len({k for k in dst.objects() if "/c/" in k})
    source = opened(kind, local)
    if scope == "one":
        source = source[[name]].drop_vars(list(source[[name]].coords))
    xr.testing.assert_identical(dst.open_zarr().load(), source)


def damaged_source(path: Path) -> Path:
    """An array whose document declares shards of 2**62 along 't' in inner chunks of 3
    (no multiple: zarr-python refuses the document, naming nothing)."""
    src = zarr.open_group(path, mode="w", zarr_format=3)
    src.create_array(
        "v", shape=(20,), dtype="f4", chunks=(5,), shards=(10,), dimension_names=["t"]
    )[...] = 1
    meta = json.loads((path / "v" / "zarr.json").read_text())
    meta["chunk_grid"]["configuration"]["chunk_shape"] = [2**62]
    meta["codecs"][0]["configuration"]["chunk_shape"] = [3]
    (path / "v" / "zarr.json").write_text(json.dumps(meta))
    return path


@pytest.mark.parametrize("sizes", [{}, {"shards": {"t": 10}, "chunks": {"t": 5}}])
def test_a_document_with_a_shard_no_inner_chunk_divides_is_named(tmp_path, sizes):
    """With sizes given by dimension too: the damaged array is named (before, the sizes
    were checked first, against the dimensions of no array: 'expected one of []')."""
    src = damaged_source(tmp_path / "src.zarr")
    with pytest.raises(
        shardwise.errors.UnsupportedArrayError, match=r"not divisible|needs to be divisible"
    ) as info:
        shardwise.reshard(src, tmp_path / "dst.zarr", **sizes)
    assert info.value.array == "v" and info.value.key == "v/zarr.json"
    assert "rewrite it" in str(info.value)
    assert not (tmp_path / "dst.zarr").exists()


def giant_shards(path: Path, extent: int = 40) -> Path:
    """A valid document whose shards and inner chunks are 2**62 long along 't', on an
    array of ``extent``: cut to the extent, the inner chunk divides no shard."""
    src = zarr.open_group(path, mode="w", zarr_format=3)
    src.create_array(
        "v", shape=(extent,), dtype="f4", chunks=(5,), shards=(10,), dimension_names=["t"]
    )
    meta = json.loads((path / "v" / "zarr.json").read_text())
    meta["chunk_grid"]["configuration"]["chunk_shape"] = [2**62]
    meta["codecs"][0]["configuration"]["chunk_shape"] = [2**62]
    (path / "v" / "zarr.json").write_text(json.dumps(meta))
    return path


@pytest.mark.parametrize(
    "sizes, error",
    [
        ({}, shardwise.errors.TooLargeError),  # inner chunks of 8: 2**59 of them per shard
        ({"chunks": {"t": 40}}, shardwise.errors.WriteError),  # 2**62 is no multiple of 40
    ],
)
def test_shards_of_two_to_the_62_are_refused_naming_the_document(tmp_path, sizes, error):
    """zarr-python's own ValueError ('Chunk edge length ... is not divisible') never
    reaches the user: a shardwise error names the array and the source's zarr.json,
    before anything is read of the data or written."""
    src = giant_shards(tmp_path / "src.zarr")
    with pytest.raises(error) as info:
        shardwise.reshard(src, tmp_path / "dst.zarr", **sizes)
    assert isinstance(info.value, ValueError)  # (what a caller of zarr-python catches)
    assert info.value.array == "v" and info.value.key == "v/zarr.json"
    assert "Chunk edge length" not in str(info.value)
    assert not (tmp_path / "dst.zarr").exists()


def test_a_kept_grid_with_inner_chunks_cut_to_the_extent(tmp_path):
    """Shards and inner chunks of 200 on 30 values: the inner chunk, cut to the array's
    extent (30), becomes the largest that divides the kept shards (10)."""
    src = zarr.open_group(tmp_path / "s.zarr", mode="w", zarr_format=3)
    src.create_array("v", shape=(30,), dtype="f4", chunks=(200,), shards=(200,))[...] = np.arange(
        30
    )
    shardwise.reshard(tmp_path / "s.zarr", tmp_path / "d.zarr")
    out = zarr.open_array(tmp_path / "d.zarr", path="v")
    assert (out.shards, out.chunks) == ((200,), (10,))
    np.testing.assert_array_equal(out[...], np.arange(30))
