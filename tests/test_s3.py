"""shardwise against a real S3 HTTP endpoint (moto's server on 127.0.0.1), through both
S3 clients zarr-python supports: fsspec/s3fs (``s3://`` URLs with ``storage_options``)
and obstore (``zarr.storage.ObjectStore``).

Requests are counted twice: by :class:`shardwise.testing.CountingStore` around the zarr
store, and by the endpoint itself (its access log, and moto's recording of each request
with its headers; see ``s3server.py``).
"""

from __future__ import annotations

import itertools
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

import dask
import numpy as np
import pandas as pd
import pytest
import xarray as xr
import zarr

import shardwise
from s3server import Hit, Mark, Recorded, S3Server
from shardwise import _compat
from shardwise.testing import CountingStore

from clusters import CLUSTER_OPTIONS

pytest.importorskip("moto.server")
s3fs = pytest.importorskip("s3fs")
pytest.importorskip("obstore")

CLIENTS = ["s3fs", "obstore"]
SHARDS = {"time": 40}
CHUNKS = {"time": 10}


# -- the endpoint, a bucket per test, a client per parameter ------------------------------
# (the endpoint ``s3`` and a ``bucket`` per test: fixtures of conftest.py)


@dataclass
class Target:
    """A dataset location in the test bucket, reached through one client."""

    client: str
    server: S3Server
    bucket: str
    prefix: str = "data.zarr"

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"

    def where(self) -> Any:
        """What a user passes as the store: a URL for s3fs, a Store for obstore."""
        if self.client == "s3fs":
            return self.url
        return self.server.obstore(self.bucket, self.prefix)

    def options(self) -> dict[str, Any] | None:
        return self.server.storage_options() if self.client == "s3fs" else None

    def store(self) -> Any:
        """A zarr-python Store object (to wrap in a CountingStore)."""
        if self.client == "s3fs":
            return zarr.storage.FsspecStore.from_url(self.url, storage_options=self.options())
        return self.server.obstore(self.bucket, self.prefix)

    def _args(self, store: Any) -> tuple[Any, dict[str, Any] | None]:
        return (self.where(), self.options()) if store is None else (store, None)

    def write(self, ds: xr.Dataset, store: Any = None, **kwargs: Any) -> Any:
        where, options = self._args(store)
        return shardwise.to_zarr(ds, where, storage_options=options, consolidated=False, **kwargs)

    def open_fanout(self, store: Any = None, **kwargs: Any) -> xr.Dataset:
        where, options = self._args(store)
        return shardwise.open_dataset(where, storage_options=options, consolidated=False, **kwargs)

    def open(self, store: Any = None, **kwargs: Any) -> xr.Dataset:
        where, options = self._args(store)
        return xr.open_dataset(
            where,
            engine="shardwise",
            chunks={},
            storage_options=options,
            consolidated=False,
            **kwargs,
        )

    def open_zarr(self) -> xr.Dataset:
        return xr.open_zarr(self.where(), storage_options=self.options(), consolidated=False)

    def array(self, name: str) -> zarr.Array:
        return zarr.open_array(self.store(), path=name, mode="r")

    def objects(self, under: str = "") -> set[str]:
        """Keys stored under the dataset (relative to it), as the endpoint lists them."""
        root = f"{self.prefix}/"
        return {k[len(root) :] for k in self.server.keys(self.bucket, root + under)}

    def _rel(self, key: str) -> str | None:
        root = f"{self.prefix}/"
        return key[len(root) :] if key.startswith(root) else None

    def hits(self, since: Mark) -> list[Hit]:
        """The endpoint's requests after ``since`` for this dataset's objects, keys made
        relative to the dataset; listings of the bucket are kept with key ""."""
        out = []
        for h in self.server.hits(since):
            if h.bucket != self.bucket:
                continue
            rel = self._rel(h.key)
            out.append(
                Hit(h.method, h.bucket, rel if rel is not None else h.key, h.query, h.status)
            )
        return out

    def recorded(self, since: Mark) -> list[Recorded]:
        out = []
        for r in self.server.recorded(since):
            rel = self._rel(r.key) if r.bucket == self.bucket else None
            if rel is not None:
                out.append(Recorded(r.method, r.bucket, rel, r.query, r.range))
        return out


@pytest.fixture(params=CLIENTS)
def target(request, s3, bucket):
    return Target(request.param, s3, bucket)


@pytest.fixture(autouse=True)
def _threads():
    with dask.config.set(scheduler="threads"):
        yield


# -- data and checks ---------------------------------------------------------------------
def table(nt: int = 200, nx: int = 6, chunks: int = 30, seed: int = 0, blank: Any = None):
    """A float32 variable ("v", default fill value NaN) chunked by dask along time;
    ``blank`` rows are all NaN."""
    rng = np.random.default_rng(seed)
    v = rng.normal(size=(nt, nx)).astype("f4")
    if blank is not None:
        v[blank] = np.nan
    ds = xr.Dataset(
        {"v": (("time", "x"), v, {"units": "K"})},
        coords={"time": pd.date_range("2000-01-01", periods=nt, freq="h"), "x": np.arange(nx)},
        attrs={"title": "s3 test"},
    )
    return ds.chunk({"time": chunks})


def nonempty_shards(name: str, values: np.ndarray, shards: tuple[int, ...], fill: Any) -> set[str]:
    """Keys of the shards of an array holding ``values`` that are not all ``fill``."""
    out = set()
    grid = [range(-(-n // s)) for n, s in zip(values.shape, shards, strict=True)]
    for idx in itertools.product(*grid):
        block = values[tuple(slice(i * s, (i + 1) * s) for i, s in zip(idx, shards, strict=True))]
        same = block == fill
        if values.dtype.kind == "f" and np.isnan(fill):
            same |= np.isnan(block)
        if not same.all():
            out.add(f"{name}/c/" + "/".join(map(str, idx)))
    return out


def assert_stored(target: Target, expected: xr.Dataset) -> None:
    """The store reads back as ``expected`` through shardwise, xarray's own zarr engine
    and zarr-python."""
    back = target.open()
    # over a network, dask chunks of whole shards, several together (dask's chunk size)
    shard = target.array("v").shards[0]
    assert all(c % shard == 0 for c in back.v.chunks[0][:-1]), back.v.chunks
    xr.testing.assert_identical(back.load(), expected)
    xr.testing.assert_identical(target.open_zarr().load(), expected)
    np.testing.assert_array_equal(target.array("v")[...], expected.v.values)


def shard_requests(hits: list[Hit], method: str) -> Counter[str]:
    return Counter(h.key for h in hits if h.method == method and "/c/" in h.key)


# -- writes ------------------------------------------------------------------------------
def test_misaligned_write_and_read_back(target):
    """Dask chunks of 30 rows into shards of 40 with inner chunks of 10; the rows of
    shard 2 are all NaN, the fill value, so that shard is not stored."""
    ds = table(blank=slice(80, 120))
    target.write(ds, shards=SHARDS, chunks=CHUNKS)
    arr = target.array("v")
    assert arr.shards == (40, 6) and arr.chunks == (10, 6)
    assert np.isnan(arr.fill_value)  # xarray's default _FillValue for floats
    assert target.objects("v/") == {"v/zarr.json"} | {f"v/c/{i}/0" for i in (0, 1, 3, 4)}
    assert_stored(target, ds.load())


def test_region_write_cutting_shards(target):
    ds = table(blank=slice(80, 120))
    target.write(ds, shards=SHARDS, chunks=CHUNKS)
    new = table(seed=1).isel(time=slice(50, 130)).chunk({"time": 17})
    mark = target.server.mark()
    target.write(new.drop_vars(["time", "x"]), region={"time": slice(50, 130)}, mode="r+")
    hits = target.hits(mark)
    expected = ds.load().copy(deep=True)
    expected["v"][50:130] = new.v.values
    assert_stored(target, expected)
    # shards 1 and 3 are cut (read whole, merged), 2 (absent before) is covered
    assert shard_requests(hits, "PUT") == {"v/c/1/0": 1, "v/c/2/0": 1, "v/c/3/0": 1}
    assert shard_requests(hits, "GET") == {"v/c/1/0": 1, "v/c/3/0": 1}
    assert not [h for h in hits if h.method in ("DELETE", "POST")]

    # a region write of fill values over all of shard 4 deletes its object
    blank = expected.isel(time=slice(160, 200)).drop_vars(["time", "x"]).copy(deep=True)
    blank["v"][:] = np.nan
    mark = target.server.mark()
    target.write(blank.chunk({"time": 17}), region={"time": slice(160, 200)})
    hits = target.hits(mark)
    expected["v"][160:200] = np.nan
    assert_stored(target, expected)
    assert target.objects("v/c/") == {f"v/c/{i}/0" for i in range(4)}
    assert not shard_requests(hits, "PUT")
    # both clients delete with DeleteObjects (POST ?delete), not DELETE
    assert len([h for h in hits if h.method == "DELETE" or h.query == "delete"]) == 1


def test_append_cutting_a_shard(target):
    ds = table(nt=190)  # the last shard (160..199) is partly filled
    target.write(ds, shards=SHARDS, chunks=CHUNKS)
    more = table(nt=290, seed=3).isel(time=slice(190, 290)).chunk({"time": 45})
    mark = target.server.mark()
    target.write(more, append_dim="time")
    hits = target.hits(mark)
    assert_stored(target, xr.concat([ds, more], "time").load())
    puts = shard_requests(hits, "PUT")
    assert {k: n for k, n in puts.items() if k.startswith("v/")} == {
        f"v/c/{i}/0": 1 for i in range(4, 8)
    }
    assert shard_requests(hits, "GET")["v/c/4/0"] == 1  # the partial shard, merged


def test_write_requests(target):
    """One PUT per non-empty shard, no other request for the data; the other PUTs
    are metadata documents. Counted at the endpoint and by a CountingStore."""
    ds = table(blank=slice(80, 120))
    store = CountingStore(target.store())
    mark = target.server.mark()
    target.write(ds, store=store, shards=SHARDS, chunks=CHUNKS)
    hits = target.hits(mark)

    values = ds.v.values
    expected = nonempty_shards("v", values, (40, 6), np.float32("nan"))
    assert expected == {f"v/c/{i}/0" for i in (0, 1, 3, 4)}
    for name in ("time", "x"):  # numpy coordinates, written by zarr-python
        arr = target.array(name)
        expected |= nonempty_shards(name, arr[...], arr.shards or arr.chunks, arr.fill_value)
    assert len(expected) == 4 + 5 + 1

    # the endpoint
    puts = Counter(h.key for h in hits if h.method == "PUT")
    shard_puts = {k: n for k, n in puts.items() if "/c/" in k}
    assert shard_puts == dict.fromkeys(expected, 1)
    assert all(k.endswith("zarr.json") for k in puts if k not in shard_puts), puts
    assert all(h.status == 200 for h in hits if h.method == "PUT" and "/c/" in h.key)
    read = [h for h in hits if "/c/" in h.key and h.method != "PUT"]
    if _compat.version("zarr") < (3, 2):  # zarr-python 3.1 looks for the numpy coordinates'
        read = [h for h in read if h.key.startswith("v/")]  # chunks before writing them
    assert not read  # nothing read
    assert not [h for h in hits if h.method in ("DELETE", "POST")]
    # the CountingStore
    assert store.log.per_key("set") == Counter(dict.fromkeys(expected, 1))
    assert all(r.key.endswith("zarr.json") for r in store.log.sets() if "/c/" not in r.key)
    gets = [r for r in store.log.gets() if "/c/" in r.key]
    if _compat.version("zarr") < (3, 2):  # (as above)
        gets = [r for r in gets if r.key.startswith("v/")]
    assert not gets
    # what is stored
    assert {k for k in target.objects() if "/c/" in k} == expected
    xr.testing.assert_identical(target.open().load(), ds.load())


# -- reads -------------------------------------------------------------------------------
@pytest.mark.parametrize("opener", ["engine", "open_dataset"])
def test_region_read_requests(target, opener):
    """A selection touching 3 of the 8 inner chunks of each of 2 shards: per shard one
    suffix GET of the index and one ranged GET of the (coalesced) chunks; the same
    through the engine and through shardwise.open_dataset's fan-out graph."""
    ds = table(nt=240, chunks=80)
    target.write(ds, shards={"time": 80}, chunks=CHUNKS)
    index_nbytes = 16 * 8 + 4  # 8 (offset, nbytes) pairs and a crc32c
    store = CountingStore(target.store())
    back = target.open(store=store) if opener == "engine" else target.open_fanout(store=store)
    # over a network, both: the shards taken together toward dask's chunk size
    assert back.v.chunks == ((240,), (6,))
    store.log.clear()
    mark = target.server.mark()
    got = back.v.isel(time=slice(55, 105)).compute()
    hits = target.hits(mark)
    recorded = target.recorded(mark)
    xr.testing.assert_identical(got, ds.v.isel(time=slice(55, 105)).load())

    touched = ["v/c/0/0", "v/c/1/0"]  # rows 55..79 of shard 0, 80..104 of shard 1
    # the endpoint: two partial GETs per touched shard, nothing else
    assert Counter((h.method, h.key, h.status) for h in hits) == {
        ("GET", k, 206): 2 for k in touched
    }
    for key in touched:
        mine = [r for r in recorded if r.key == key]
        assert [r.range for r in mine if r.suffix is not None] == [f"bytes=-{index_nbytes}"]
        ranged = [r.range for r in mine if r.suffix is None]
        assert len(ranged) == 1 and re.fullmatch(r"bytes=\d+-\d+", ranged[0]), ranged
    # the CountingStore says the same
    gets = store.log.gets()
    assert sorted((r.key, r.byte_range) for r in gets if r.byte_range.startswith("last")) == [
        (k, f"last {index_nbytes}") for k in touched
    ]
    data = sorted((r.key, r.byte_range) for r in gets if r.byte_range.startswith("["))
    assert [k for k, _ in data] == touched and len(gets) == 4
    # ... with the same byte ranges: [a, b) is "bytes=a-(b-1)" on the wire
    wire = sorted((r.key, r.range) for r in recorded if r.suffix is None)
    as_http = []
    for key, rng in data:
        a, b = map(int, re.findall(r"\d+", rng))
        as_http.append((key, f"bytes={a}-{b - 1}"))
    assert wire == as_http


def test_ranged_read_finds_an_entry_pointing_into_the_index(target):
    """The index is read by a suffix request whose response says the object's size
    (``Content-Range``, in both clients): an entry lying in the index is refused when the
    index is read, before any chunk is, whichever chunks are wanted (TruncatedShardError,
    naming the chunk), as a whole-shard read refuses it."""
    ds = table(nt=80, chunks=40)
    target.write(ds, shards={"time": 40}, chunks=CHUNKS)
    key = f"{target.prefix}/v/c/1/0"
    s3 = target.server.boto3()
    raw = bytearray(s3.get_object(Bucket=target.bucket, Key=key)["Body"].read())
    fmt = shardwise.ArrayReader.open(target.store(), "v").decoder((1, 0)).index
    table_ = np.frombuffer(bytes(raw[-fmt.nbytes :][: 16 * fmt.nchunks]), "<u8")
    table_ = table_.reshape(*fmt.chunks_per_shard, 2).copy()
    table_[3, 0] = (len(raw) - fmt.nbytes, 8)  # inner chunk 3: 8 bytes of the index
    raw[-fmt.nbytes :] = fmt.encode(table_)  # crc32c recomputed: the index itself is fine
    s3.put_object(Bucket=target.bucket, Key=key, Body=bytes(raw))

    ranged = shardwise.ReadOptions(whole_shard_fraction=1.0, index_cache=False)
    reader = shardwise.ArrayReader.open(target.store(), "v", options=ranged)
    for read in (
        lambda: reader[75:80],
        lambda: reader[40:70],  # (chunks 0-2 are fine, but their index is not)
        lambda: target.open_fanout(chunks="inner").v[75:80].compute(),
    ):
        with pytest.raises(shardwise.errors.TruncatedShardError) as info:
            read()
        err = info.value
        assert (err.array, err.key, err.chunk) == ("v", "v/c/1/0", (3, 0)), err
        assert f"offset + nbytes <= {len(raw) - fmt.nbytes}" in str(err)


# -- two endpoints ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def s3_other(s3, tmp_path_factory):
    """A second endpoint (another S3 service, or another account) for the same names."""
    with S3Server(tmp_path_factory.mktemp("s3-other")) as server:
        yield server


@pytest.mark.parametrize("client", CLIENTS)
def test_delayed_writes_to_two_endpoints_computed_together(client, s3, s3_other, bucket):
    """Two stores with the same name (bucket and path) on two endpoints: their write
    graphs share no keys, so computed together both land."""
    s3_other.boto3().create_bucket(Bucket=bucket)
    here, there = Target(client, s3, bucket), Target(client, s3_other, bucket)
    ds = table()
    dask.compute(
        here.write(ds, shards=SHARDS, chunks=CHUNKS, compute=False),
        there.write(ds, shards=SHARDS, chunks=CHUNKS, compute=False),
    )
    for target in (here, there):
        assert target.objects("v/c/") == {f"v/c/{i}/0" for i in range(5)}
        assert_stored(target, ds.load())


# -- worker processes --------------------------------------------------------------------
@pytest.mark.slow
def test_write_and_read_on_worker_processes(s3, bucket):
    """A LocalCluster with 2 worker processes writes and reads through s3fs (the stores
    and readers are pickled to the workers); obstore's store reads there too."""
    distributed = pytest.importorskip("distributed")
    target = Target("s3fs", s3, bucket)
    ds = table(nt=400, blank=slice(80, 120))
    with (
        distributed.LocalCluster(
            **CLUSTER_OPTIONS,
            threads_per_worker=2,
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        mark = s3.mark()
        with distributed.get_task_stream(client) as tasks:
            target.write(ds, shards=SHARDS, chunks=CHUNKS)
        hits = target.hits(mark)
        got = target.open().compute()
        # the fan-out graph, one task per inner chunk, no index cache: the workers
        # still read each shard's index once in all (the index tasks hand it on)
        mark = s3.mark()
        fanned = target.open_fanout(chunks="inner", read_options={"index_cache": False}).v.compute()
        index_reads = Counter(
            r.key for r in target.recorded(mark) if r.suffix is not None and r.key.startswith("v/")
        )
        by_obstore = xr.open_dataset(
            s3.obstore(bucket, target.prefix), engine="shardwise", chunks={}, consolidated=False
        ).compute()
        assert len(client.scheduler_info()["workers"]) == 2
    names = {str(t["key"]) for t in tasks.data}
    assert any("shardwise-shard-" in n for n in names)  # the shards were written there
    xr.testing.assert_identical(got, ds.load())
    xr.testing.assert_identical(fanned, ds.v.load())
    assert index_reads == {f"v/c/{i}/0": 1 for i in range(10)}  # shard 2 absent: one 404
    xr.testing.assert_identical(by_obstore, ds.load())
    v_puts = {k: n for k, n in shard_requests(hits, "PUT").items() if k.startswith("v/")}
    assert v_puts == {f"v/c/{i}/0": 1 for i in range(10) if i != 2}
