"""Reading over HTTP: a real server on 127.0.0.1 (aiohttp's static file handler, which
answers ``Range``, ``If-Match`` and ``If-Unmodified-Since`` and gives strong ETags) in a
thread of its own, each request logged; read with versions from the ETag through both
clients: obstore's ``HTTPStore`` (what an ``http://`` URL opens when obstore is
installed) and fsspec's HTTP file system (what it opens with ``storage_options``)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path

import dask
import dask.array as da
import numpy as np
import pytest
import xarray as xr

import shardwise
from shardwise.io.capabilities import conditional
from shardwise.io.cloud import ObstoreConditional
from shardwise.io.http import HttpConditional
from shardwise.io.opener import store_path

aiohttp = pytest.importorskip("aiohttp")
from aiohttp import web  # noqa: E402

pytestmark = pytest.mark.filterwarnings(
    "ignore:Consolidated metadata is currently not part:UserWarning"
)


class StaticServer:
    """aiohttp's static handler over ``root`` on a free port of 127.0.0.1, on an event
    loop in a thread of its own (started and stopped by the ``with`` block, bounded);
    ``requests`` lists every request: (method, path, its If-Match header, the status)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.requests: list[tuple[str, str, str | None, int]] = []
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.url = ""
        # a request for a shard is answered once this many requests are in flight at
        # once (or after 10 s): what a client sends together is then seen together,
        # however late a busy machine lets one of them start
        self.gather = 0
        self.gathered = lambda request: "/c/" in request.path  # which requests wait so
        self.in_flight = 0
        self.most_in_flight = 0

    async def _start(self) -> None:
        self.arrived = asyncio.Condition()

        @web.middleware
        async def track(request: web.Request, handler: object) -> web.StreamResponse:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
            try:
                if self.gather and self.gathered(request):
                    async with self.arrived:
                        self.arrived.notify_all()
                        with contextlib.suppress(TimeoutError):
                            await asyncio.wait_for(
                                self.arrived.wait_for(lambda: self.in_flight >= self.gather), 10
                            )
                return await handler(request)  # type: ignore[operator,no-any-return]
            finally:
                self.in_flight -= 1

        async def log(request: web.Request, response: web.StreamResponse) -> None:
            # (on_response_prepare: the status a file response settles on as it is sent)
            condition = request.headers.get("If-Match")
            self.requests.append((request.method, request.path, condition, response.status))

        app = web.Application(middlewares=[track])
        app.on_response_prepare.append(log)
        app.router.add_static("/", self.root)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"

    def __enter__(self) -> StaticServer:
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(timeout=30)
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(timeout=30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=30)
        self.loop.close()

    def since(self, mark: int) -> list[tuple[str, str, str | None, int]]:
        return self.requests[mark:]


@pytest.fixture(params=["obstore", "fsspec"])
def via(request) -> dict[str, object]:
    """How a URL is opened: with no ``storage_options`` (obstore's ``HTTPStore``), or
    with ``storage_options={}`` (fsspec's HTTP file system)."""
    if request.param == "obstore":
        pytest.importorskip("obstore")
        return {}
    return {"storage_options": {}}


@pytest.fixture
def served(tmp_path) -> Iterator[tuple[StaticServer, Path, np.ndarray]]:
    """A Dataset of 4 x 4 shards of 32 x 32 (inner chunks 8 x 8), consolidated, served."""
    values = np.arange(128 * 128, dtype="f4").reshape(128, 128)
    ds = xr.Dataset({"v": (("y", "x"), da.from_array(values, chunks=64))})
    shardwise.to_zarr(ds, tmp_path / "d.zarr", shards={"y": 32, "x": 32}, chunks={"y": 8, "x": 8})
    with StaticServer(tmp_path) as server:
        yield server, tmp_path / "d.zarr", values


def test_versions_come_from_the_etag(served, via):
    server, _, _ = served
    found = conditional(store_path(f"{server.url}/d.zarr", via.get("storage_options")).store)
    assert isinstance(found, HttpConditional if via else ObstoreConditional)


def test_a_warm_point_read_is_one_request_and_a_replaced_shard_is_read_again(served, via):
    server, path, values = served
    reader = shardwise.ArrayReader.open(f"{server.url}/d.zarr", "v", **via)
    mark = len(server.requests)
    assert reader[70, 5] == values[70, 5]
    cold = server.since(mark)
    assert [(r[1], r[3]) for r in cold] == [("/d.zarr/v/c/2/0", 206)] * 2  # index, chunk
    etag = cold[1][2]
    assert etag is not None and etag.startswith('"')  # the chunk read from the index's version
    mark = len(server.requests)
    assert reader[71, 6] == values[71, 6]
    assert [(r[2], r[3]) for r in server.since(mark)] == [(etag, 206)]  # index cached
    # another job replaces the shard: the cached index's version is gone
    shardwise.array.to_zarr(
        da.full((32, 32), -1, dtype="f4", chunks=32),
        path,
        path="v",
        region=(slice(64, 96), slice(0, 32)),
        mode="r+",
    )
    mark = len(server.requests)
    assert reader[72, 7] == -1
    again = server.since(mark)
    assert [r[3] for r in again] == [412, 206, 206]  # refused, the index, the chunk
    assert again[0][2] == etag and again[2][2] not in (None, etag)


def test_xarray_reads_through_the_engine_without_listing(served, via):
    server, _, values = served
    mark = len(server.requests)
    ds = xr.open_dataset(
        f"{server.url}/d.zarr", engine="shardwise", chunks={}, consolidated=True, **via
    )
    np.testing.assert_array_equal(ds.v.values, values)
    requests = server.since(mark)
    assert all(method == "GET" for method, *_ in requests)
    shards = [p for _, p, *_ in requests if "/c/" in p]
    assert len(shards) == 16  # one request a shard: each read whole
    # opened as Zarr v3 first: no request for Zarr v2's documents
    assert [p for _, p, *_ in requests if "/c/" not in p] == ["/d.zarr/zarr.json"]


def test_writing_to_an_http_url_is_refused(served):
    server, _, _ = served
    with pytest.raises((shardwise.ShardwiseError, NotImplementedError, OSError)):
        shardwise.array.to_zarr(da.zeros(4, chunks=2), f"{server.url}/new.zarr", path="v")


def test_obstore_http_store(served):
    """obstore's HTTPStore through zarr-python's ObjectStore: the same reads, through
    obstore's conditional reads."""
    pytest.importorskip("obstore")
    from obstore.store import HTTPStore
    from zarr.storage import ObjectStore

    server, _, values = served
    store = ObjectStore(
        HTTPStore.from_url(f"{server.url}/d.zarr", client_options={"allow_http": True}),
        read_only=True,
    )
    reader = shardwise.ArrayReader.open(store, "v")
    mark = len(server.requests)
    assert reader[70, 5] == values[70, 5]
    assert len(server.since(mark)) == 2
    mark = len(server.requests)
    assert reader[71, 6] == values[71, 6]
    assert [r[3] for r in server.since(mark)] == [206]
    ds = xr.open_dataset(store, engine="shardwise", chunks={}, consolidated=True)
    np.testing.assert_array_equal(ds.v.values, values)


def test_a_task_has_all_its_shards_requests_in_flight_at_once(served, via):
    """Over HTTP, chunks={} gives dask chunks of several whole shards, and a task's
    shards are fetched together: on dask's synchronous scheduler (one task at a time),
    the 16 shards' requests are all in flight at once, not one after another."""
    server, _, values = served
    server.gather = 16
    ds = xr.open_dataset(
        f"{server.url}/d.zarr", engine="shardwise", chunks={}, consolidated=True, **via
    )
    assert ds.v.chunks == ((128,), (128,))  # the 4 x 4 shards of 32 x 32 in one dask chunk
    mark = len(server.requests)
    server.most_in_flight = 0
    with dask.config.set(scheduler="synchronous"):
        np.testing.assert_array_equal(ds.v.values, values)
    shard_reads = [r for r in server.since(mark) if "/c/" in r[1]]
    assert len(shard_reads) == 16  # one request per shard (whole)
    assert server.most_in_flight == 16
    # the same with the process's bound on requests in flight set lower
    shardwise.cache.clear_index_cache()
    server.most_in_flight, server.gather = 0, 4
    with dask.config.set({"scheduler": "synchronous", "shardwise.concurrency": {"network": 4}}):
        again = xr.open_dataset(
            f"{server.url}/d.zarr", engine="shardwise", chunks={}, consolidated=True, **via
        )
        np.testing.assert_array_equal(again.v.values, values)
    assert server.most_in_flight == 4


def test_local_disk_keeps_one_dask_chunk_per_shard(served):
    _, path, _ = served
    ds = xr.open_dataset(path, engine="shardwise", chunks={}, consolidated=True)
    assert ds.v.chunks == ((32,) * 4, (32,) * 4)


def test_a_large_shard_is_read_as_its_index_then_parts_at_once(served, via):
    """A shard expected to be larger than two parts (``coalesce_max``) is read over a
    network as its index, then its inner chunks in ranges of at most a part, all in
    flight together, each against the index's version."""
    server, _, values = served
    options = shardwise.ReadOptions(coalesce_max=256)  # a part: about two inner chunks
    reader = shardwise.ArrayReader.open(f"{server.url}/d.zarr", "v", options=options, **via)
    mark = len(server.requests)
    server.most_in_flight, server.gather = 0, 16  # the parts (the index is read first)
    server.gathered = lambda request: "If-Match" in request.headers
    np.testing.assert_array_equal(reader[0:32, 0:32], values[0:32, 0:32])  # shard (0, 0)
    got = server.since(mark)
    assert all(r[1] == "/d.zarr/v/c/0/0" and r[3] == 206 for r in got), got
    index, ranges = got[0], got[1:]
    assert index[2] is None  # the index: no version to hold it to yet
    assert len(ranges) >= 4 and len({r[2] for r in ranges}) == 1 and ranges[0][2]
    assert server.most_in_flight == len(ranges)  # the parts at once
