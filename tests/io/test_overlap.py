"""A source and a destination never overlap (issue 27, class 1): ``reshard``, ``migrate``
(API and command line) and ``to_zarr(mode="w")`` over data read lazily refuse a
destination that is the source, lies inside it or holds it, however it is spelled, and
leave every byte of the source as it was."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import dask
import numpy as np
import pytest
import xarray as xr
import zarr
from test_cli import LEGACY, run

import shardwise
from bounded import run_threads
from matrix import cover
from shardwise.errors import OverlapError, ShardwiseError
from shardwise.io.stores import Location, check_apart, location

pytestmark = pytest.mark.usefixtures("_threads")


@pytest.fixture
def _threads():
    with dask.config.set(scheduler="threads"):
        yield


def snapshot(root: Path) -> dict[str, str]:
    """Every file under ``root`` (and its parent's other entries) with its content's hash."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def make_v3(path: Path) -> Path:
    ds = xr.Dataset(
        {"v": (("y", "x"), np.arange(40 * 30, dtype="f4").reshape(40, 30))},
        coords={"y": np.arange(40), "x": np.arange(30)},
    )
    ds.to_zarr(
        path,
        zarr_format=3,
        consolidated=False,
        encoding={"v": {"chunks": (5, 10), "shards": (10, 30)}},
    )
    return path


# -- locations ---------------------------------------------------------------------------------
def test_spellings_of_one_folder_are_one_location(tmp_path, monkeypatch):
    src = make_v3(tmp_path / "src.zarr")
    (tmp_path / "link").symlink_to(src)
    monkeypatch.chdir(tmp_path)
    same = [
        str(src),
        f"{src}/",
        "src.zarr",
        "./src.zarr/",
        "link",
        f"{tmp_path}/./other/../src.zarr",
        src,  # a Path
        f"file://{src}",
        zarr.storage.LocalStore(src),
        zarr.open_group(src, mode="r"),
    ]
    first = location(same[0])
    for spelling in same:
        found = location(spelling)
        assert found.within(first) and first.within(found), spelling


def test_inside_holds_and_apart(tmp_path):
    src = location(tmp_path / "src.zarr")
    assert location(tmp_path / "src.zarr" / "inner.zarr").within(src)
    assert location(tmp_path / "src.zarr", "v").within(src)
    assert src.within(location(tmp_path))
    for apart in (tmp_path / "src.zarr2", tmp_path / "src", tmp_path / "other" / "src.zarr"):
        assert not location(apart).within(src) and not src.within(location(apart))


def test_one_folder_by_inode_when_names_differ(tmp_path):
    """A folder named two ways that the real path does not resolve (a filesystem that
    folds case, a bind mount) is found by its device and inode."""
    real = tmp_path / "src.zarr"
    real.mkdir()
    (tmp_path / "alias").symlink_to(real)
    unresolved = Location("file", "", (*tmp_path.parts[1:], "alias", "inner"), "alias/inner")
    assert unresolved.within(location(real))


def test_object_store_urls(s3, bucket):
    opts = s3.storage_options()
    url = f"s3://{bucket}/src.zarr"
    src = location(url, None, opts)
    assert location(f"s3a://{bucket}/src.zarr/", None, opts).within(src)
    assert location(f"s3://{bucket}//src.zarr/./v", None, opts).within(src)
    assert src.within(location(f"s3://{bucket}", None, opts))
    assert not location(f"s3://{bucket}/src.zarr2", None, opts).within(src)
    assert not location(f"s3://{bucket}-other/src.zarr", None, opts).within(src)
    # another endpoint is another store
    assert not location(url, None, {"endpoint_url": "http://127.0.0.2:9"}).within(src)
    # the same place through zarr-python's stores: s3fs and obstore
    fsspec_store = zarr.storage.FsspecStore.from_url(url, storage_options=opts)
    assert location(fsspec_store).within(src) and src.within(location(fsspec_store))
    obstore_store = s3.obstore(bucket, "src.zarr")
    assert location(obstore_store).within(src) and src.within(location(obstore_store))


def test_memory_stores_are_apart_unless_shared():
    a, b = zarr.storage.MemoryStore(), zarr.storage.MemoryStore()
    assert location(a).within(location(a))
    assert not location(a).within(location(b))
    with pytest.raises(OverlapError):
        check_apart(location(a), location(a, "inner"))


# -- reshard and migrate, command line -------------------------------------------------------
@pytest.mark.parametrize(
    ("dst", "flag"),
    cover(
        [
            pytest.param(dst, id=name)
            for dst, name in [
                ("{src}", "same"),
                ("./src.zarr/", "dot-slash"),
                ("{src}/v", "array"),
                ("{src}/inner.zarr", "inside"),
                ("link", "symlink"),
                ("{parent}", "parent"),
                (".", "cwd"),
            ]
        ],
        ["--overwrite", "--resume", None],
    ),
)
def test_reshard_refuses_overlap(tmp_path, dst, flag):
    work = tmp_path / "work"
    work.mkdir()
    src = make_v3(work / "src.zarr")
    (work / "link").symlink_to(src)
    before = snapshot(tmp_path)
    target = dst.format(src=src, parent=work)
    proc = run("reshard", src, target, *([flag] if flag else []), cwd=work)
    assert proc.returncode == 2, proc.stderr
    assert "source" in proc.stderr and "Traceback" not in proc.stderr
    assert snapshot(tmp_path) == before  # not a byte of anything changed, nothing added


@pytest.mark.parametrize(
    ("dst", "mode"), cover(["{src}", "{src}/", "{src}/inner.zarr", "{parent}"], ["w", "a", "w-"])
)
def test_migrate_refuses_overlap(tmp_path, dst, mode):
    src = tmp_path / "work" / "draft"
    shutil.copytree(LEGACY / "compressors", src)
    before = snapshot(tmp_path)
    proc = run("migrate", src, dst.format(src=src, parent=src.parent), "--mode", mode)
    assert proc.returncode == 2, proc.stderr
    assert "source" in proc.stderr and "Traceback" not in proc.stderr
    assert snapshot(tmp_path) == before


def test_apart_is_accepted(tmp_path):
    """Siblings whose names share a prefix are apart: the check refuses no honest job."""
    src = make_v3(tmp_path / "src.zarr")
    proc = run("reshard", src, tmp_path / "src.zarr2")
    assert proc.returncode == 0, proc.stderr
    xr.testing.assert_identical(
        xr.open_zarr(src, consolidated=False).load(),
        xr.open_zarr(tmp_path / "src.zarr2").load(),
    )


# -- the Python API, store objects and S3 ---------------------------------------------------
def test_reshard_api_with_store_objects(tmp_path):
    src = make_v3(tmp_path / "src.zarr")
    before = snapshot(tmp_path)
    for dst in (
        zarr.storage.LocalStore(src),
        zarr.storage.LocalStore(src / "inner.zarr"),
        zarr.storage.LocalStore(tmp_path),
    ):
        with pytest.raises(OverlapError, match="source") as info:
            shardwise.reshard(str(src), dst, mode="w")
        assert isinstance(info.value, ShardwiseError) and isinstance(info.value, ValueError)
    with pytest.raises(OverlapError):
        shardwise.tools.migrate.migrate(
            LEGACY / "compressors", LEGACY / "compressors" / "x", mode="w"
        )
    assert snapshot(tmp_path) == before


def _keys(s3, bucket) -> dict[str, bytes]:
    import s3fs

    fs = s3fs.S3FileSystem(**s3.storage_options())
    return {p: fs.cat_file(p) for p in fs.find(bucket)}


@pytest.mark.parametrize("client", ["s3fs", "obstore"])
def test_reshard_on_s3_refuses_overlap(s3, bucket, tmp_path, client):
    from test_reshard import upload

    from test_s3 import Target

    local = make_v3(tmp_path / "src.zarr")
    src = Target(client, s3, bucket, "src.zarr")
    upload(local, src)
    before = _keys(s3, bucket)
    assert before
    for prefix in ("src.zarr", "src.zarr/inner.zarr", ""):
        dst = Target(client, s3, bucket, prefix)
        dst_where: object = (
            dst.url.rstrip("/") if client == "s3fs" else s3.obstore(bucket, prefix or None)
        )
        with pytest.raises(OverlapError):
            shardwise.reshard(
                src.where(),
                dst_where,
                mode="w",
                storage_options=src.options(),
                target_options=dst.options(),
            )
    assert _keys(s3, bucket) == before


# -- to_zarr(mode="w") over data read lazily from the destination -----------------------------
@pytest.mark.parametrize(
    "how", ["shardwise-lazy", "shardwise-dask", "zarr-dask", "zarr-lazy", "open_dataset"]
)
@pytest.mark.parametrize("where", ["same", "parent", "array"])
def test_to_zarr_w_refuses_to_replace_what_it_reads(tmp_path, how, where):
    src = make_v3(tmp_path / "src.zarr")
    engine, _, kind = how.partition("-")
    if how == "open_dataset":
        ds = shardwise.open_dataset(src, consolidated=False)
    else:
        ds = xr.open_dataset(
            src, engine=engine, chunks={} if kind == "dask" else None, consolidated=False
        )
    before = snapshot(tmp_path)
    target = {"same": src, "parent": tmp_path, "array": src / "v"}[where]
    # (arithmetic loads lazily indexed data: then nothing is read later, and writing is safe)
    lazy = ds if kind == "lazy" else ds * 2
    with pytest.raises(OverlapError, match="source"):
        shardwise.to_zarr(lazy, target, mode="w", consolidated=False)
    assert snapshot(tmp_path) == before
    ds.close()


def test_dask_array_to_zarr_w_refuses_its_source(tmp_path):
    src = make_v3(tmp_path / "src.zarr")
    x = shardwise.array.from_zarr(src, "v")
    before = snapshot(tmp_path)
    with pytest.raises(OverlapError):
        shardwise.array.to_zarr(x + 1, src, path="v", mode="w")
    with pytest.raises(OverlapError):
        shardwise.array.to_zarr(x + 1, src, path="", mode="w")
    assert snapshot(tmp_path) == before
    # elsewhere it writes
    out = shardwise.array.to_zarr(x + 1, tmp_path / "out.zarr", path="v", mode="w")
    np.testing.assert_array_equal(out[...], zarr.open_array(src, path="v")[...] + 1)


def test_to_zarr_w_elsewhere_and_modes_that_keep_the_source(tmp_path):
    src = make_v3(tmp_path / "src.zarr")
    ds = xr.open_dataset(src, engine="shardwise", chunks={}, consolidated=False)
    shardwise.to_zarr(ds * 2, tmp_path / "copy.zarr", mode="w", consolidated=False)
    # adding a variable next to the source reads and keeps it
    shardwise.to_zarr((ds * 2).rename({"v": "w"})[["w"]], src, mode="a", consolidated=False)
    out = xr.open_zarr(src, consolidated=False)
    np.testing.assert_array_equal(out.w.values, out.v.values * 2)
    assert os.path.exists(tmp_path / "copy.zarr" / "zarr.json")


@pytest.mark.parametrize("out", ["{src}/table.zarr", "{src}/v/table.csv"])
def test_inventory_out_is_never_written_into_the_store(tmp_path, out):
    src = make_v3(tmp_path / "src.zarr")
    before = snapshot(tmp_path)
    proc = run("inventory", src, "--var", "v", "--out", out.format(src=src))
    assert proc.returncode == 2 and "--out lies inside the source" in proc.stderr, proc.stderr
    assert snapshot(tmp_path) == before
    proc = run("inventory", src, "--var", "v", "--out", tmp_path / "table.csv")
    assert proc.returncode == 0, proc.stderr


# -- mode="w" / --overwrite removes what is under the destination, and nothing else -----------
SIBLINGS = ["dst.zarr2/zarr.json", "dst.zarr.bak/zarr.json", "dst.zarrx", "dst1.zarr/zarr.json"]


def test_overwrite_removes_only_what_is_under_dst(tmp_path):
    src = make_v3(tmp_path / "src.zarr")
    for name in [*SIBLINGS, "dst.zarr/old/zarr.json"]:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"{}")
    before = {k: v for k, v in snapshot(tmp_path).items() if not k.startswith("dst.zarr/")}
    proc = run("reshard", src, tmp_path / "dst.zarr", "--overwrite")
    assert proc.returncode == 0, proc.stderr
    after = snapshot(tmp_path)
    assert {k: v for k, v in after.items() if not k.startswith("dst.zarr/")} == before
    assert "dst.zarr/old/zarr.json" not in after


@pytest.mark.parametrize("client", ["s3fs", "obstore"])
@pytest.mark.parametrize("dst_name", ["dst.zarr", "dst[12].zarr", "dst*.zarr"])
def test_overwrite_on_s3_removes_only_what_is_under_dst(s3, bucket, tmp_path, client, dst_name):
    """Keys next to the destination that share its prefix, or that a glob pattern in its
    name would match, survive ``mode="w"``."""
    from test_reshard import upload

    from test_s3 import Target

    local = make_v3(tmp_path / "src.zarr")
    upload(local, Target(client, s3, bucket, "src.zarr"))
    import s3fs

    fs = s3fs.S3FileSystem(**s3.storage_options())
    for name in [*SIBLINGS, "dst1.zarr/zarr.json", "dst2.zarr/zarr.json", "dstX.zarr/zarr.json"]:
        fs.pipe_file(f"{bucket}/{name}", b"{}")
    keep = {k for k in _keys(s3, bucket)}
    src = Target(client, s3, bucket, "src.zarr")
    dst = Target(client, s3, bucket, dst_name)

    def overwrite():
        return shardwise.reshard(
            src.where(),
            dst.url if client == "s3fs" else dst.where(),
            mode="w",
            storage_options=src.options(),
            target_options=dst.options(),
        )

    if client == "s3fs" and dst_name != "dst.zarr":
        # fsspec's rm would expand the pattern (before: dst1.zarr and dst2.zarr deleted)
        with pytest.raises(shardwise.errors.WriteError, match="glob character"):
            overwrite()
        with pytest.raises(shardwise.errors.WriteError, match="glob character"):
            ds = xr.Dataset({"v": ("x", np.arange(3))})
            shardwise.to_zarr(ds, dst.url, mode="w", storage_options=dst.options())
    else:  # obstore removes by listing the prefix
        overwrite()
    fs.invalidate_cache()
    assert keep <= set(_keys(s3, bucket))


# -- the store layer's state: one owner per process ---------------------------------------------
def test_index_state_has_one_owner_and_reads_the_environment_on_first_use():
    import subprocess
    import sys

    from shardwise.io import cache

    owner = cache.process_indexes()
    assert cache.SUPPLIED is owner.supplied and cache.IN_FLIGHT is owner.in_flight
    assert shardwise.cache.index_cache() is owner.cache is cache.index_cache()
    code = (
        "import dask, shardwise\n"
        "from shardwise.io import cache\n"
        "dask.config.set({'shardwise.index-cache-bytes': 4096})\n"
        "print(shardwise.cache.index_cache().max_bytes)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "4096"  # read when the cache is first used, not at import


def test_loads_in_flight_are_shared_per_loop_across_threads():
    import asyncio
    import threading

    from shardwise.io.cache import InFlight

    flight = InFlight()
    calls = []

    async def load():
        calls.append(threading.get_ident())
        await asyncio.sleep(0.01)
        return len(calls)

    async def many():
        return await asyncio.gather(*(flight.run("k", load) for _ in range(20)))

    results = run_threads([lambda: asyncio.run(many())] * 4, timeout=60)
    assert len(calls) == 4  # one load per event loop, whatever the threads
    assert all(len(set(r)) == 1 for r in results) and len(flight) == 0


def test_metadata_keys_lists_documents_to_a_depth(tmp_path):
    import asyncio

    from zarr.storage import LocalStore

    from shardwise.io.listing import folder, list_keys, metadata_keys

    root = zarr.create_group(tmp_path / "h.zarr")
    root.create_group("a").create_group("b").create_array("c", shape=(2,), dtype="i1")
    root.create_group("ab")
    store = LocalStore(tmp_path / "h.zarr")
    assert folder("/a/b/") == "a/b/" and folder("") == ""
    assert sorted(asyncio.run(metadata_keys(store, ""))) == [
        "a/b/c/zarr.json",
        "a/b/zarr.json",
        "a/zarr.json",
        "ab/zarr.json",
        "zarr.json",
    ]
    assert sorted(asyncio.run(metadata_keys(store, "a", 1))) == ["a/b/zarr.json", "a/zarr.json"]
    assert "ab/zarr.json" not in asyncio.run(list_keys(store, folder("a")))
