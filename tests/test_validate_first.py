"""Validate, then write (issue 27, class 4): every refusal ``reshard`` and ``migrate`` can
know in advance comes before the first byte of the destination, which is left exactly as
it was (absent when it was absent), and the refusal says so."""

from __future__ import annotations

import errno

import numpy as np
import pytest
import zarr
from test_cli import LEGACY, run
from test_overlap import snapshot

import shardwise


def structured_v2(path):
    """A Zarr v2 group: a structured array (whose fill value xarray cannot encode as
    ``_FillValue``) beside an ordinary one."""
    dt = np.dtype([("a", "i4"), ("b", "f8")])
    g = zarr.open_group(path, mode="w", zarr_format=2)
    g.create_array("s", shape=(10,), chunks=(5,), dtype=dt, fill_value=np.zeros((), dt)[()])[
        ...
    ] = np.ones(10, dt)
    g.create_array("ok", shape=(4,), chunks=(2,), dtype="f4", dimension_names=None)[...] = 1
    return path


def test_unencodable_fill_value_refused_before_writing(tmp_path):
    src = structured_v2(tmp_path / "src.zarr")
    dst = tmp_path / "dst.zarr"
    with pytest.raises(shardwise.errors.WriteError, match="Nothing was written") as info:
        shardwise.reshard(src, dst)
    assert info.value.array == "s" and info.value.key == "s/.zarray"
    assert not dst.exists()
    proc = run("reshard", src, dst)
    assert proc.returncode == 2 and "Nothing was written" in proc.stderr, proc.stderr
    assert not dst.exists()
    # the array left out, the rest is resharded
    proc = run("reshard", src, dst, "--var", "ok")
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_array_equal(zarr.open_array(dst, path="ok")[...], np.ones(4, "f4"))


def test_refused_resume_leaves_the_destination_as_it_was(tmp_path):
    src = zarr.open_group(tmp_path / "src.zarr", mode="w", zarr_format=3)
    src.create_array("v", shape=(20,), chunks=(5,), dimension_names=["t"], dtype="i4")[...] = 7
    dst = tmp_path / "dst.zarr"
    shardwise.reshard(tmp_path / "src.zarr", dst, shards={"t": 10})
    before = snapshot(dst)
    with pytest.raises(shardwise.errors.StoreExistsError, match="not made by a reshard with these"):
        shardwise.reshard(tmp_path / "src.zarr", dst, mode="a", shards={"t": 20})
    assert snapshot(dst) == before


def test_migrate_refusals_write_nothing(tmp_path):
    dst = tmp_path / "dst.zarr"
    for kwargs, error in [
        ({"mode": "x"}, shardwise.errors.WriteError),
        ({"group": "nope"}, shardwise.ShardwiseError),
    ]:
        with pytest.raises(error):
            shardwise.tools.migrate.migrate(LEGACY / "compressors", dst, **kwargs)
        assert not dst.exists()
    with pytest.raises(shardwise.errors.WriteError, match="not a store of the 2022"):
        shardwise.tools.migrate.migrate(tmp_path, dst)
    assert not dst.exists()


@pytest.mark.parametrize("name", ["../x", "a/../../x", "a//b", "a\\b", "a\x00b"])
def test_unsafe_paths_given_by_the_user_are_refused(tmp_path, name):
    src = zarr.open_group(tmp_path / "src.zarr", mode="w", zarr_format=3)
    src.create_array("v", shape=(4,), chunks=(2,), dimension_names=["t"], dtype="i4")
    dst = tmp_path / "dst.zarr"
    with pytest.raises(shardwise.errors.UnsafeNameError):
        shardwise.reshard(tmp_path / "src.zarr", dst, variables=[name])
    with pytest.raises(shardwise.errors.UnsafeNameError):
        shardwise.tools.migrate.migrate(LEGACY / "compressors", dst, group=name)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src.zarr"]


def test_store_errors_in_shard_tasks_name_the_array_and_key(tmp_path):
    """An OSError while a shard is written (here: a file where the shard's folder goes)
    arrives as a StoreIOError (an OSError too) naming the array and key, with what to do."""
    import dask

    src = zarr.open_group(tmp_path / "src.zarr", mode="w", zarr_format=3)
    src.create_array("v", shape=(20,), chunks=(5,), dimension_names=["t"], dtype="i4")[...] = 7
    dst = tmp_path / "dst.zarr"
    delayed = shardwise.reshard(tmp_path / "src.zarr", dst, compute=False)
    (dst / "v" / "c").write_bytes(b"in the way")
    with pytest.raises(shardwise.errors.StoreIOError, match="mode='a'") as info:
        dask.compute(delayed, scheduler="sync")
    assert isinstance(info.value, OSError) and isinstance(info.value, shardwise.ShardwiseError)
    assert info.value.array == "v" and info.value.key.startswith("v/c/")
    assert isinstance(info.value.__cause__, OSError)


@pytest.mark.parametrize(
    "shards, chunks", [((2**40,), (1,)), ((2**62,), (2**61,))], ids=["index", "chunk"]
)
def test_grids_no_reader_could_read_are_refused_before_writing(tmp_path, shards, chunks):
    """A shard of 2**40 inner chunks (a 16 TiB index) or an inner chunk past what numpy
    holds: refused by every write path, with the destination left absent."""
    import dask.array as da
    import xarray as xr

    ds = xr.Dataset({"v": (("t",), np.arange(20, dtype="f4"))}).chunk(t=5)
    with pytest.raises(shardwise.errors.TooLargeError, match="Nothing was written") as info:
        enc = {"v": {"shards": shards, "chunks": chunks}}
        shardwise.to_zarr(ds, tmp_path / "a.zarr", encoding=enc, consolidated=False)
    assert info.value.array == "v" and info.value.key == "v/zarr.json"
    with pytest.raises(shardwise.errors.TooLargeError, match="Nothing was written"):
        shardwise.array.to_zarr(
            da.arange(20, chunks=5), tmp_path / "b.zarr", shards=shards, chunks=chunks
        )
    src = zarr.open_group(tmp_path / "src.zarr", mode="w", zarr_format=3)
    src.create_array("v", shape=(20,), chunks=(5,), dimension_names=["t"], dtype="f4")[...] = 1
    # (reshard caps inner chunks at the extent: 2**62 along 20 values is then no multiple)
    with pytest.raises((shardwise.errors.TooLargeError, shardwise.errors.WriteError)):
        shardwise.reshard(
            tmp_path / "src.zarr",
            tmp_path / "c.zarr",
            shards={"t": shards[0]},
            chunks={"t": chunks[0]},
        )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src.zarr"]


class _Failing(zarr.storage.WrapperStore):
    """A store whose shard requests fail as a dropped connection does."""

    error: type[BaseException] = ConnectionResetError

    async def get(self, key, prototype, byte_range=None):
        if "/c/" in f"/{key}":
            raise self.error("connection reset by peer")
        return await self._store.get(key, prototype, byte_range)


def _payload_error(message: str) -> BaseException:
    aiohttp = pytest.importorskip("aiohttp")
    return aiohttp.ClientPayloadError(f"Response payload is not completed: {message}")


@pytest.mark.parametrize("error", [_payload_error, ConnectionResetError])
def test_an_object_store_clients_own_error_names_the_array_and_key(tmp_path, error):
    """A read cut short as aiohttp reports it (ClientPayloadError, no OSError) through
    s3fs: a StoreIOError naming the array and the key, the client's error its cause,
    as for the OSErrors of other stores."""
    path = tmp_path / "s.zarr"
    zarr.create_array(path, name="v", shape=(8,), chunks=(2,), shards=(4,), dtype="f4")[:] = 1

    class Cut(_Failing):
        pass

    Cut.error = staticmethod(error)  # type: ignore[assignment]
    reader = shardwise.ArrayReader.open(Cut(zarr.storage.LocalStore(path, read_only=True)), "v")
    with pytest.raises(shardwise.errors.StoreIOError) as info:
        reader[...]
    assert info.value.array == "v" and info.value.key in ("v/c/0", "v/c/1")
    assert "ClientPayloadError" in str(info.value) or error is ConnectionResetError


@pytest.mark.parametrize("whole", [True, False], ids=["whole-shard", "ranges"])
def test_store_errors_of_reads_and_writes_name_the_array_and_key(tmp_path, whole):
    """An OSError of a read (here a dropped connection) or of a write (a folder where the
    shard's file goes) arrives as a StoreIOError, an OSError too, naming the array and
    the shard's key, with the store's error as its cause."""
    import dask.array as da

    path = tmp_path / "s.zarr"
    zarr.create_array(path, name="v", shape=(8,), chunks=(2,), shards=(4,), dtype="f4")[:] = 1
    options = shardwise.ReadOptions(whole_shard_fraction=0.5 if whole else float("inf"))
    store = _Failing(zarr.storage.LocalStore(path, read_only=True))
    reader = shardwise.ArrayReader.open(store, "v", options=options)
    with pytest.raises(shardwise.errors.StoreIOError, match="read again") as info:
        reader[...]
    assert isinstance(info.value, ConnectionError | OSError)
    assert info.value.array == "v" and info.value.key in ("v/c/0", "v/c/1")
    assert isinstance(info.value.__cause__, ConnectionResetError)
    (path / "v" / "c" / "1").unlink()
    (path / "v" / "c" / "1").mkdir()
    (path / "v" / "c" / "1" / "x").write_bytes(b"")
    with pytest.raises(shardwise.errors.StoreIOError, match="run the same write again") as info:
        shardwise.array.to_zarr(
            da.ones(8, chunks=4, dtype="f4"), path, path="v", mode="r+", region=(slice(0, 8),)
        )
    assert info.value.key == "v/c/1" and isinstance(info.value.__cause__, OSError)


class _Busy(zarr.storage.WrapperStore):
    """A store whose metadata reads fail as s3fs reports a 503 SlowDown that outlasted
    its retries: a plain ``OSError`` (EBUSY)."""

    async def get(self, key, prototype, byte_range=None):
        if key.endswith("zarr.json"):
            raise OSError(errno.EBUSY, "Service Unavailable")
        return await self._store.get(key, prototype, byte_range)


@pytest.mark.parametrize("what", ["dataset", "dask-array", "open"])
def test_a_plain_store_oserror_while_a_write_is_planned_names_where(tmp_path, what):
    """s3fs's OSError for a 503 from zarr-python's or xarray's own requests, while a
    region write is opened and planned, or a dataset opened with the engine: a
    StoreIOError naming the group or array, the store's error its cause."""
    import dask.array as da
    import xarray as xr

    path = tmp_path / "s.zarr"
    zarr.create_array(
        path, name="v", shape=(8,), chunks=(2,), shards=(4,), dtype="f4", dimension_names=["x"]
    )[:] = 1
    store = _Busy(zarr.storage.LocalStore(path))
    with pytest.raises(shardwise.errors.StoreIOError) as info:
        if what == "open":
            xr.open_dataset(store, engine="shardwise", consolidated=False)
        elif what == "dataset":
            ds = xr.Dataset({"v": ("x", da.zeros(8, chunks=4, dtype="f4"))})
            shardwise.to_zarr(
                ds, store, mode="r+", region={"x": slice(0, 8)}, independent_writers=False
            )
        else:
            shardwise.array.to_zarr(
                da.zeros(8, chunks=4, dtype="f4"),
                store,
                path="v",
                region=(slice(0, 8),),
                independent_writers=False,
            )
    assert isinstance(info.value.__cause__, OSError) and info.value.__cause__.errno == errno.EBUSY
    assert info.value.key is not None and info.value.key.endswith("zarr.json")
    assert (zarr.open_array(path, path="v")[:] == 1).all()


# every write option, refused the same way on every entry point before anything is written
BAD_WRITE_OPTIONS = [
    {"write_order": "bogus"},
    {"write_order": None},
    {"shards_per_task": 0},
    {"shards_per_task": 2.5},
    {"shards_per_task": True},
    {"encode_split": -3},
    {"encode_split": "some"},
    {"write_empty_chunks": "no"},
    {"progress": "yes"},
    {"independent_writers": "yes"},
    {"independent_writers": 1},
]


def _write(what, store, **options):
    import dask.array as da
    import xarray as xr

    data = da.zeros((8, 4), chunks=(4, 4), dtype="f4")
    ds = xr.Dataset({"v": (("t", "x"), data)})
    if what == "dataset":
        return shardwise.to_zarr(ds, store, shards={"t": 8}, consolidated=False, **options)
    if what == "dataarray":
        return shardwise.to_zarr(ds.v, store, shards={"t": 8}, consolidated=False, **options)
    if what == "datatree":
        tree = xr.DataTree.from_dict({"/a": ds})
        return shardwise.to_zarr(tree, store, consolidated=False, **options)
    if what == "dataset-region":
        region = {"t": slice(0, 8)}
        return shardwise.to_zarr(ds, store, region=region, consolidated=False, **options)
    if what == "dask-array":
        return shardwise.array.to_zarr(data, store, path="a", shards=(8, 4), **options)
    assert what == "dask-array-region"
    return shardwise.array.to_zarr(
        data, store, path="a", region=(slice(0, 8), slice(0, 4)), **options
    )


@pytest.mark.parametrize(
    "what",
    ["dataset", "dataarray", "datatree", "dataset-region", "dask-array", "dask-array-region"],
)
@pytest.mark.parametrize(
    "bad", BAD_WRITE_OPTIONS, ids=lambda o: "-".join(f"{k}={v!r}" for k, v in o.items())
)
def test_every_bad_write_option_is_refused_before_anything_is_written(tmp_path, what, bad):
    path = tmp_path / "s.zarr"
    if what.endswith("region"):  # into what a good write made
        _write(what.removesuffix("-region"), path)
    before = snapshot(tmp_path)
    with pytest.raises(shardwise.errors.WriteError, match=f"bad {next(iter(bad))}") as info:
        _write(what, path, **bad)
    assert isinstance(info.value, ValueError)
    assert "Nothing was written" in str(info.value)
    assert snapshot(tmp_path) == before
