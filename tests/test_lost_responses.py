"""Writes through an object store that loses responses: a conditional put that reaches
the server and is applied, whose response never comes back (``tests/faultproxy.py``
between s3fs and moto's server, its writes serialized so that conditional puts are
atomic as on S3). botocore sends the request again by itself, and the retry is refused
(412) by the object the first one put: a write must take that for its own, never for
another job's.

For every n, the response of the n-th conditional put an operation makes is lost; the
operation must end exactly as without the fault: an append grows the array once, by its
rows, in their place. Each operation's last n is one past the puts it makes, where no
response is lost: so the cases are every put it makes.
"""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest
import xarray as xr
import zarr

import shardwise
from faultproxy import FaultProxy
from matrix import cover, keep

from datasets import ROWS, block, rows_dataset

pytest.importorskip("moto.server")
pytest.importorskip("s3fs")

# the conditional puts each append below makes: its claim (the metadata documents it
# grows), the merges of the shards it shares with what is stored, the claims' release
DASK_ARRAY_PUTS = 3
DATASET_PUTS = {False: 8, None: 9}  # by consolidated= (None: xarray's default, consolidated)
REGION_PUTS = 2  # (the two shards it cuts)


def puts(count: int) -> list[int]:
    """Every n of an operation making ``count`` conditional puts, and one past them."""
    return list(range(1, count + 2))


@pytest.fixture
def proxy(s3_serialized):
    with FaultProxy(s3_serialized.endpoint, max_seconds=300) as p:
        yield p


def options(proxy: FaultProxy, server) -> dict:
    return server.storage_options(endpoint_url=proxy.endpoint)


def conditional_puts(proxy: FaultProxy) -> int:
    return proxy.injected.total()


@pytest.mark.parametrize("n", puts(DASK_ARRAY_PUTS))
def test_a_dask_array_append_whose_nth_conditional_put_is_lost(
    s3_serialized, serialized_bucket, proxy, n
):
    url = f"s3://{serialized_bucket}/a.zarr"
    so = options(proxy, s3_serialized)
    first = da.from_array(block(0, 150), chunks=ROWS)
    shardwise.array.to_zarr(
        first, url, path="v", storage_options=so, shards=(100, 4), chunks=(10, 4)
    )
    proxy.lose_nth(n, FaultProxy.conditional_put)
    more = da.from_array(block(150), chunks=ROWS)
    shardwise.array.to_zarr(more, url, path="v", mode="a", append_dim=0, storage_options=so)
    assert proxy.injected.total() == (n <= DASK_ARRAY_PUTS)
    stored = zarr.open_array(
        url, path="v", mode="r", storage_options=s3_serialized.storage_options()
    )
    assert stored.shape == (200, 4), f"lost put #{n}: {stored.shape}"
    np.testing.assert_array_equal(stored[...], block(0, 200))


@pytest.mark.parametrize("n", puts(DASK_ARRAY_PUTS))
def test_an_obstore_append_whose_nth_conditional_put_is_lost(
    s3_serialized, serialized_bucket, proxy, n
):
    """The same through obstore (zarr-python's ObjectStore): a conditional put whose
    response is lost comes back as obstore's GenericError (it does not send such a put
    again itself); what the store holds says whether it landed."""
    pytest.importorskip("obstore")
    store = s3_serialized.obstore(serialized_bucket, "o.zarr", endpoint=proxy.endpoint)
    first = da.from_array(block(0, 150), chunks=ROWS)
    shardwise.array.to_zarr(first, store, path="v", shards=(100, 4), chunks=(10, 4))
    proxy.lose_nth(n, FaultProxy.conditional_put)
    shardwise.array.to_zarr(da.from_array(block(150), chunks=ROWS), store, path="v", append_dim=0)
    lost = proxy.injected.total()
    stored = zarr.open_array(
        f"s3://{serialized_bucket}/o.zarr",
        path="v",
        mode="r",
        storage_options=s3_serialized.storage_options(),
    )
    assert lost == (n <= DASK_ARRAY_PUTS)
    assert stored.shape == (200, 4), f"lost put #{n}: {stored.shape}"
    np.testing.assert_array_equal(stored[...], block(0, 200))


@pytest.mark.parametrize(
    ("consolidated", "n"),
    # (the fast runs: the first put, one in the middle, the last and one past them)
    keep(
        [(c, n) for c, count in DATASET_PUTS.items() for n in puts(count)],
        [(c, n) for c, count in DATASET_PUTS.items() for n in (1, count // 2, count, count + 1)],
    ),
)
@pytest.mark.filterwarnings("ignore:Consolidated metadata is currently not part:UserWarning")
def test_a_dataset_append_whose_nth_conditional_put_is_lost(
    s3_serialized, serialized_bucket, proxy, consolidated, n
):
    url = f"s3://{serialized_bucket}/d.zarr"
    so = options(proxy, s3_serialized)

    encoding = {"temp": {"shards": (100, 4), "chunks": (10, 4)}}
    shardwise.to_zarr(
        rows_dataset(0, 150), url, storage_options=so, consolidated=consolidated, encoding=encoding
    )
    proxy.lose_nth(n, FaultProxy.conditional_put)
    shardwise.to_zarr(
        rows_dataset(150, ROWS), url, append_dim="y", storage_options=so, consolidated=consolidated
    )
    assert proxy.injected.total() == (n <= DATASET_PUTS[consolidated])
    back = xr.open_dataset(
        url,
        engine="zarr",
        consolidated=consolidated,
        storage_options=s3_serialized.storage_options(),
    )
    assert dict(back.sizes) == {"y": 200, "x": 4}, f"lost put #{n}: {dict(back.sizes)}"
    xr.testing.assert_equal(back.load(), rows_dataset(0, 200).load())


@pytest.mark.parametrize("n", puts(REGION_PUTS))
def test_a_region_write_whose_nth_conditional_put_is_lost(
    s3_serialized, serialized_bucket, proxy, n
):
    """A region write that cuts two shards merges each with what is stored."""
    url = f"s3://{serialized_bucket}/r.zarr"
    so = options(proxy, s3_serialized)
    first = da.from_array(block(0, 200), chunks=ROWS)
    shardwise.array.to_zarr(
        first, url, path="v", storage_options=so, shards=(100, 4), chunks=(10, 4)
    )
    proxy.lose_nth(n, FaultProxy.conditional_put)
    part = da.from_array(block(60, 80) + 0.5, chunks=ROWS)
    shardwise.array.to_zarr(
        part, url, path="v", region=(slice(60, 140),), mode="r+", storage_options=so
    )
    assert proxy.injected.total() == (n <= REGION_PUTS)
    expected = block(0, 200)
    expected[60:140] += 0.5
    stored = zarr.open_array(
        url, path="v", mode="r", storage_options=s3_serialized.storage_options()
    )
    np.testing.assert_array_equal(stored[...], expected)


def ours(request) -> bool:
    """A request shardwise makes itself: a conditional put, a read against a version."""
    return FaultProxy.conditional_put(request) or "if-match" in request.headers


def every_other(when):
    """A predicate true for every other request ``when`` is true for (the first
    included): each fault is followed by a request that passes."""
    import itertools
    import threading

    count = itertools.count()
    lock = threading.Lock()

    def pick(request) -> bool:
        if not when(request):
            return False
        with lock:
            return next(count) % 2 == 0

    return pick


@pytest.mark.parametrize(
    ("client_retries", "fault"),
    cover(["botocore", "none"], ["slowdown503", "error500", "reset", "short"]),
)
def test_transient_faults_are_retried(
    s3_serialized, serialized_bucket, proxy, fault, client_retries
):
    """Faults on a third of the requests (with botocore's own retries), or on every other
    request shardwise makes itself with botocore retrying nothing: an append and a
    region write that merge into shards end exact; in the second case the retries are
    shardwise's, and counted."""
    from shardwise.io.retry import retried

    url = f"s3://{serialized_bucket}/t.zarr"
    so = options(proxy, s3_serialized)
    if client_retries == "none":
        so["config_kwargs"] = {"retries": {"total_max_attempts": 1, "mode": "standard"}}
    shardwise.array.to_zarr(
        da.from_array(block(0, 150), chunks=ROWS),
        url,
        path="v",
        storage_options=so,
        shards=(100, 4),
        chunks=(10, 4),
    )
    before = sum(retried().values())
    if client_retries == "none":
        proxy.inject(fault, 1.0, when=every_other(ours))
    else:
        proxy.inject(fault, 0.33)
    shardwise.array.to_zarr(
        da.from_array(block(150), chunks=ROWS),
        url,
        path="v",
        mode="a",
        append_dim=0,
        storage_options=so,
    )
    shardwise.array.to_zarr(
        da.from_array(np.full((20, 4), 7.0), chunks=20),
        url,
        path="v",
        region=(slice(20, 40),),
        storage_options=so,
    )
    got = shardwise.ArrayReader.open(url, "v", storage_options=so)[...]
    injected = proxy.injected.total()
    proxy.clear()
    expected = block(0, 200)
    expected[20:40] = 7.0
    np.testing.assert_array_equal(got, expected)
    assert injected > 0
    if client_retries == "none" and fault in ("slowdown503", "error500"):
        # (an error answer reaches shardwise whole; a reset or a short answer to a put
        # whose headers came through, aiohttp may take as the answer, which it is)
        assert sum(retried().values()) - before >= injected


def test_a_fault_that_outlasts_the_retries_names_the_array_and_key(
    s3_serialized, serialized_bucket, proxy
):
    import dask

    url = f"s3://{serialized_bucket}/f.zarr"
    so = options(proxy, s3_serialized)
    so["config_kwargs"] = {"retries": {"total_max_attempts": 1, "mode": "standard"}}
    shardwise.array.to_zarr(
        da.from_array(block(0, 150), chunks=ROWS),
        url,
        path="v",
        storage_options=so,
        shards=(100, 4),
        chunks=(10, 4),
    )
    proxy.inject("reset", 1.0, when=FaultProxy.conditional_put)
    with (
        dask.config.set({"shardwise.store-retries": 2}),
        pytest.raises(shardwise.errors.StoreIOError) as info,
    ):
        shardwise.array.to_zarr(
            da.from_array(block(150), chunks=ROWS),
            url,
            path="v",
            mode="a",
            append_dim=0,
            storage_options=so,
        )
    proxy.clear()
    err = info.value
    assert err.key is not None and err.key.endswith("v/zarr.json"), err
    assert err.array is not None and "check its shape" in str(err)
    assert isinstance(err.__cause__, ConnectionError)


@pytest.mark.parametrize("client", ["s3fs", "obstore"])
def test_another_append_between_a_lost_response_and_its_retry(
    s3_serialized, serialized_bucket, proxy, client
):
    """The race the bytes alone cannot settle: the claim's put lands, its response is
    lost, and another job appends before the put is sent again (or, through obstore,
    before the object is read to settle it). The object then holds neither this put's
    bytes nor the version it was conditioned on: the put is taken as not made. The
    other job's document keeps this call's claim, so the next try finds it and writes
    the claimed rows, once, in their place; the other job's rows follow."""
    direct = s3_serialized.storage_options()
    if client == "s3fs":
        store = f"s3://{serialized_bucket}/race.zarr"
        so = options(proxy, s3_serialized)
    else:
        pytest.importorskip("obstore")
        store = s3_serialized.obstore(serialized_bucket, "race.zarr", endpoint=proxy.endpoint)
        so = None
    url = f"s3://{serialized_bucket}/race.zarr"
    first = da.from_array(block(0, 150), chunks=ROWS)
    shardwise.array.to_zarr(
        first, url, path="v", storage_options=direct, shards=(100, 4), chunks=(10, 4)
    )
    other = []

    def another_job_appends() -> None:
        more = da.from_array(block(200), chunks=ROWS)  # after the 50 rows claimed
        other.append(
            shardwise.array.to_zarr(more, url, path="v", append_dim=0, storage_options=direct).shape
        )

    proxy.lose_nth(1, FaultProxy.conditional_put, then=another_job_appends)
    ours_ = da.from_array(block(150), chunks=ROWS)
    shardwise.array.to_zarr(ours_, store, path="v", append_dim=0, storage_options=so)
    assert proxy.injected.total() == 1
    assert other == [(250, 4)]
    stored = zarr.open_array(url, path="v", mode="r", storage_options=direct)
    assert stored.shape == (250, 4)
    np.testing.assert_array_equal(stored[...], block(0, 250))
    assert "shardwise:appending" not in stored.attrs  # every claim taken out


@pytest.mark.filterwarnings("ignore:Consolidated metadata is currently not part:UserWarning")
def test_another_dataset_append_between_a_lost_response_and_its_retry(
    s3_serialized, serialized_bucket, proxy
):
    """The same for a Dataset append, the response of its commit's last put lost (the
    other job's append, which waits for a store whose arrays have one length, goes
    through there): the other job's document keeps this call's claim, so the put is
    settled as made, and the claimed rows written in their place."""
    url = f"s3://{serialized_bucket}/race-ds.zarr"
    so = options(proxy, s3_serialized)
    direct = s3_serialized.storage_options()

    encoding = {"temp": {"shards": (100, 4), "chunks": (10, 4)}}
    shardwise.to_zarr(rows_dataset(0, 150), url, storage_options=direct, encoding=encoding)
    other = []

    def another_job_appends() -> None:
        shardwise.to_zarr(rows_dataset(200, ROWS), url, append_dim="y", storage_options=direct)
        other.append(True)

    def last_of_the_commit(request) -> bool:  # (its documents are put in key order)
        path = request.path.split("?")[0]
        return FaultProxy.conditional_put(request) and path.endswith("/y/zarr.json")

    proxy.lose_nth(1, last_of_the_commit, then=another_job_appends)
    shardwise.to_zarr(rows_dataset(150, ROWS), url, append_dim="y", storage_options=so)
    assert proxy.injected.total() == 1 and other == [True]
    back = xr.open_dataset(url, engine="zarr", storage_options=direct)
    assert dict(back.sizes) == {"y": 250, "x": 4}
    xr.testing.assert_equal(back.load(), rows_dataset(0, 250).load())
