"""Google Cloud Storage and Azure Blob Storage, against real endpoints on 127.0.0.1:
fake-gcs-server through gcsfs (its JSON API), Azurite through adlfs and through obstore's
``AzureStore`` (``tests/gcsserver.py``, ``tests/azurite.py``, started by conftest.py's
fixtures).

What is checked on each store, as on S3 (``test_s3.py``, ``test_concurrency.py``,
``test_lost_responses.py``): the conditional reads and puts shardwise finds for it
(generations on GCS, ETags on Azure); reads with one index request per shard, and on
Azure, which has no suffix range, no request per shard for its size; a put whose
response is lost, settled by what the store holds; region writes and appends from
independent processes that share shards, losing nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import dask
import dask.array as da
import numpy as np
import pytest
import xarray as xr
import zarr
from zarr.abc.store import RangeByteRequest, SuffixByteRequest
from zarr.storage import FsspecStore

import shardwise
from faultproxy import FaultProxy, Request
from shardwise import _compat
from shardwise.io.capabilities import conditional
from shardwise.io.versioned import ABSENT, Stale
from test_concurrency import (
    REGION_ROWS,
    check_appended,
    expected_regions,
    jobs,
    new_array,
    run_all,
)

KINDS = ["gcs", "azure", "azure-obstore"]
CLASSES = {
    "gcs": "GcsfsConditional",
    "azure": "AdlfsConditional",
    "azure-obstore": "ObstoreConditional",
}


@dataclass
class Place:
    """Where a test's arrays go: ``target`` is what shardwise and xarray are given (a
    URL, with ``storage_options``, or a zarr-python store), ``worker`` what
    ``concurrency_worker.py`` is."""

    kind: str
    server: Any
    bucket: str
    target: Any
    storage_options: dict | None
    worker: dict

    def store(self) -> Any:
        """A zarr-python store of the place (for zarr-python and the conditionals)."""
        if isinstance(self.target, str):
            return FsspecStore.from_url(self.target, storage_options=self.storage_options)
        return self.target

    def read_back(self) -> Any:
        """The group as zarr-python reads it, through a client of the same service:
        on Azure through obstore, since zarr-python's suffix requests through adlfs
        fail on Azurite (it answers ``bytes=-N`` with the whole object and a malformed
        ``Content-Range``, which azure-storage-blob refuses)."""
        store = self.store()
        if self.kind == "azure":
            store = self.server.obstore(self.bucket, self.target.split("/", 3)[3])
        return zarr.open_group(store, mode="r")

    def extra(self) -> dict:
        """The worker's settings but its ``store``."""
        return {k: v for k, v in self.worker.items() if k != "store"}

    def hits(self, since: int) -> list:
        return self.server.hits(since)


def place_of(kind: str, request, name: str, endpoint: str | None = None) -> Place:
    """A new bucket or container of ``kind`` with ``name`` in it (``endpoint``: a proxy in
    front of the server)."""
    if kind == "gcs":
        server = request.getfixturevalue("gcs")
        bucket = request.getfixturevalue("gcs_bucket")
        so = server.storage_options(**({"endpoint_url": endpoint} if endpoint else {}))
        url = f"gs://{bucket}/{name}"
        return Place(kind, server, bucket, url, so, {"store": url, "storage_options": so})
    server = request.getfixturevalue("azurite")
    bucket = request.getfixturevalue("azure_container")
    if kind == "azure":
        extra = {}
        if endpoint:  # (adlfs takes the endpoint from the connection string)
            extra["connection_string"] = server.connection_string.replace(
                server.endpoint, f"{endpoint}/devstoreaccount1"
            )
        so = server.storage_options(**extra)
        url = f"az://{bucket}/{name}"
        return Place(kind, server, bucket, url, so, {"store": url, "storage_options": so})
    where = f"{endpoint}/devstoreaccount1" if endpoint else server.endpoint
    worker = {"store": "", "obstore": server.obstore_spec(bucket, name, where)}
    return Place(kind, server, bucket, server.obstore(bucket, name, where), None, worker)


@pytest.fixture(params=KINDS)
def place(request):
    return place_of(request.param, request, "d.zarr")


# -- the conditional reads and puts of each store -----------------------------------------------
def test_each_store_has_its_conditional_reads_and_puts(place):
    """A put replaces only the version read, creates only what is absent; a put made
    again after it landed (its response lost, the client's retry refused by the object
    it put) counts as made; another writer's version refuses it; a read against a
    version that was replaced is stale; an object's end is read whatever its size."""
    cond = conditional(place.store())
    assert type(cond).__name__ == CLASSES[place.kind]
    assert cond.get("k") == (None, ABSENT)
    assert cond.put("k", b"one", ABSENT)
    assert not cond.put("k", b"other", ABSENT)  # (created meanwhile by another)
    data, v1 = cond.get("k")
    assert bytes(data) == b"one" and not v1.absent
    assert cond.put("k", b"two", v1)
    assert cond.put("k", b"two", v1)  # made again: refused by what it put, so its own
    assert not cond.put("k", b"three", v1)  # another writer's version is there
    data, v2 = cond.get("k")
    assert bytes(data) == b"two" and v2 != v1
    got = _read(cond, "k", SuffixByteRequest(2), v2)
    assert bytes(got.data) == b"wo" and got.version == v2 and got.size == 3
    got = _read(cond, "k", RangeByteRequest(0, 1), None)
    assert bytes(got.data) == b"t" and got.version == v2
    assert cond.put("k", b"four", v2)
    with pytest.raises(Stale):
        _read(cond, "k", SuffixByteRequest(2), v2)
    cond.delete("k")
    assert cond.get("k") == (None, ABSENT)


def _read(cond, key, byte_range, expected):
    """``cond.read`` on zarr-python's event loop, where the stores' clients live."""
    return _compat.sync(cond.read(key, byte_range, expected))


# -- reads ----------------------------------------------------------------------------------------
def _dataset() -> xr.Dataset:
    x = np.arange(40 * 30, dtype="f8").reshape(40, 30)
    return xr.Dataset({"v": (("y", "x"), x)}).chunk({"y": 20, "x": 10})


ENCODING = {"v": {"shards": (20, 10), "chunks": (5, 5)}}  # 6 shards of 8 inner chunks


def test_reads_read_each_index_once_and_azure_no_size_per_shard(place):
    """A Dataset written by shardwise reads back as zarr-python reads it. Reading all of
    it makes one request per shard (the whole object); reading a few inner chunks of
    some shards, two per shard (the index, then the chunks' coalesced range), and on
    Azure, which has no suffix range, one listing of the shards' folder for their sizes:
    never a request per shard for it."""
    ds = _dataset()
    shardwise.to_zarr(
        ds,
        place.target,
        encoding=ENCODING,
        storage_options=place.storage_options,
        consolidated=False,
    )
    kwargs = {"storage_options": place.storage_options} if place.storage_options else {}

    def read(select: dict) -> tuple[np.ndarray, list, list]:
        shardwise.cache.clear_index_cache()
        opened = xr.open_dataset(
            place.target, engine="shardwise", chunks={}, consolidated=False, backend_kwargs=kwargs
        )
        mark = place.server.mark()
        with dask.config.set(scheduler="synchronous"):
            got = opened.v.isel(select).values
        hits = place.hits(mark)
        listings = [h for h in hits if "/c/" in unquote(h.query)]
        return got, [h for h in hits if "/c/" in h.key], listings

    got, shard_hits, listings = read({})
    np.testing.assert_array_equal(got, ds.v.values)
    assert sorted(h.method for h in shard_hits) == ["GET"] * 6, shard_hits
    assert len({h.key for h in shard_hits}) == 6 and not listings
    got, shard_hits, listings = read({"y": slice(0, 3)})  # 2 inner chunks of 3 shards
    np.testing.assert_array_equal(got, ds.v.values[:3])
    assert sorted(h.method for h in shard_hits) == ["GET"] * 6, shard_hits
    assert len({h.key for h in shard_hits}) == 3
    # (Azure: the folder c/0/ listed once for the three shards' sizes)
    assert len(listings) == (0 if place.kind == "gcs" else 1), listings
    zarr_python = place.read_back()["v"][...]
    np.testing.assert_array_equal(zarr_python, ds.v.values)


# -- lost responses -----------------------------------------------------------------------------
def _conditional_put(req: Request) -> bool:
    """A conditional write: Azure's ``PUT`` with ``If-Match`` / ``If-None-Match``, GCS's
    upload with ``ifGenerationMatch``."""
    return FaultProxy.conditional_put(req) or (
        req.method == "POST" and "ifGenerationMatch=" in req.path
    )


@pytest.mark.parametrize("n", [1, 2, 3, 4])
@pytest.mark.parametrize("kind", KINDS)
def test_an_append_whose_nth_conditional_put_is_lost_lands_once(kind, n, request):
    """The response of the n-th conditional put of an append is lost (the put applied):
    the client sends it again, the store refuses it by the object it put, and the
    append takes that for its own: the array grows once, by its rows."""
    server = request.getfixturevalue("gcs" if kind == "gcs" else "azurite")
    upstream = server.endpoint if kind == "gcs" else server.host
    with FaultProxy(upstream, max_seconds=120) as proxy:
        place = place_of(kind, request, "a.zarr", endpoint=proxy.endpoint)
        first = da.from_array(np.arange(150 * 4, dtype="f8").reshape(150, 4), chunks=50)
        shardwise.array.to_zarr(
            first,
            place.target,
            path="v",
            shards=(100, 4),
            chunks=(10, 4),
            storage_options=place.storage_options,
        )
        proxy.lose_nth(n, _conditional_put)
        more = da.from_array(-np.arange(50 * 4, dtype="f8").reshape(50, 4), chunks=50)
        shardwise.array.to_zarr(
            more,
            place.target,
            path="v",
            mode="a",
            append_dim=0,
            storage_options=place.storage_options,
        )
        lost = proxy.injected.total()
    assert lost == (n <= 3)  # (the append's claim, its merge, the claim's release)
    stored = place_of(kind, request, "a.zarr").read_back()["v"]
    assert stored.shape == (200, 4)
    np.testing.assert_array_equal(stored[:150], first.compute())
    np.testing.assert_array_equal(stored[150:], more.compute())


# -- independent jobs -----------------------------------------------------------------------------
@pytest.mark.slow
def test_region_writes_sharing_shards_lose_nothing(place):
    """4 processes writing interleaved 10-row regions: every shard written by all 4."""
    new_array(place.target, storage_options=place.storage_options)
    run_all(jobs(place.worker["store"], "regions", 4, 2, REGION_ROWS, **place.extra()))
    got = place.read_back()["v"][...]
    np.testing.assert_array_equal(got, expected_regions(2))


@pytest.mark.slow
def test_appends_racing_each_other_all_land(place):
    nprocs, rounds, rows = 3, 2, 7  # 7 rows: appends cut shards of 100
    new_array(place.target, rows=0, storage_options=place.storage_options)
    run_all(jobs(place.worker["store"], "append", nprocs, rounds, rows, **place.extra()))
    check_appended(place.read_back()["v"][...], nprocs, rounds, rows)


# -- errors ------------------------------------------------------------------------------------
def test_the_clients_errors_are_raised_as_os_errors_naming_the_object():
    """What azure-storage-blob and gcsfs raise once their own retries are spent, as the
    readers and writers name the array and key of: an ``OSError``; a fault worth trying
    again (throttling, a server error, a dropped connection) as a ``ConnectionError``."""
    from azure.core.exceptions import HttpResponseError, ServiceResponseError
    from gcsfs.retry import HttpError

    from shardwise.io.retry import client_errors
    from shardwise.io.versioned import Stale

    def raised(error: Exception) -> BaseException:
        with pytest.raises(BaseException) as info, client_errors("c/a.zarr/v/c/0"):
            raise error
        return info.value

    forbidden = HttpResponseError(message="AuthorizationFailure")
    forbidden.status_code = 403
    busy = HttpResponseError(message="ServerBusy")
    busy.status_code = 503
    cases = [
        (forbidden, OSError),
        (busy, ConnectionError),
        (ServiceResponseError("connection reset"), ConnectionError),
        (HttpError({"code": 503, "message": "backend error"}), ConnectionError),
        (HttpError({"code": 400, "message": "no such thing"}), OSError),
    ]
    for error, kind in cases:
        got = raised(error)
        assert type(got) is kind and "c/a.zarr/v/c/0" in str(got), (error, got)
        assert got.__cause__ is error
    for error in (FileNotFoundError("x"), ValueError("x"), Stale("x")):
        assert raised(error) is error


def _a_shard(req: Request) -> bool:
    """A request for a shard (the ones shardwise makes with the store's client)."""
    return "/c/" in unquote(req.path)


@pytest.mark.parametrize(
    ("kind", "fault"),
    [
        ("gcs", "reset"),
        ("gcs", "short"),
        ("gcs", "slowdown503"),
        ("azure", "reset"),
        ("azure", "short"),
    ],
)
def test_transient_faults_are_retried(kind, fault, request):
    """A fault on a fifth of the requests for shards (connections reset part-way through
    a response, bodies cut short, throttling): the clients' retries and shardwise's make
    an append and a region write that merge into shards end exact, and the read after
    them. (zarr-python's own requests, for the metadata, are the clients' to retry: on
    the lowest versions adlfs and obstore do not retry a body cut short.)"""
    server = request.getfixturevalue("gcs" if kind == "gcs" else "azurite")
    upstream = server.endpoint if kind == "gcs" else server.host
    block = np.arange(200 * 4, dtype="f8").reshape(200, 4)
    with FaultProxy(upstream, max_seconds=120, seed=1) as proxy:
        place = place_of(kind, request, "t.zarr", endpoint=proxy.endpoint)
        so = place.storage_options
        first = da.from_array(block[:150], chunks=50)
        shardwise.array.to_zarr(
            first, place.target, path="v", shards=(100, 4), chunks=(10, 4), storage_options=so
        )
        proxy.inject(fault, 0.2, when=_a_shard)
        more = da.from_array(block[150:], chunks=50)
        shardwise.array.to_zarr(more, place.target, path="v", append_dim=0, storage_options=so)
        region = da.from_array(np.full((20, 4), 7.0), chunks=20)
        shardwise.array.to_zarr(
            region, place.target, path="v", region=(slice(20, 40),), storage_options=so
        )
        got = shardwise.ArrayReader.open(place.target, "v", storage_options=so)[...]
        injected = proxy.injected.total()
        proxy.clear()
    expected = block.copy()
    expected[20:40] = 7.0
    np.testing.assert_array_equal(got, expected)
    assert injected > 0
