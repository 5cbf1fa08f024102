"""obstore's ``GCSStore`` through shardwise's ``ObstoreConditional``: the request
mapping, checked on the requests themselves.

obstore's GCS client (the Rust ``object_store`` crate's) speaks the XML API, which no
emulator here speaks (fake-gcs-server has only the JSON API), so these tests run it
against ``tests/gcs_xml_server.py``, a model of the documented XML API, and assert on
the headers each call sends: what is verified is the mapping (shardwise's call →
obstore's request → the fields read from the answer), against the documented service,
not the service itself. The client is pointed at the model with a service-account key
carrying ``disable_oauth`` and ``gcs_base_url`` (both obstore 0.6's object_store 0.12
and later read them), over plain HTTP.

What object_store sends (``src/gcp/client.rs``): a put with ``mode="create"`` carries
``x-goog-if-generation-match: 0``; with ``{"e_tag": ..., "version": G}`` it carries
``x-goog-if-generation-match: G`` (the ETag is not sent; without a version the put is
refused by the client: ``GenericError`` "Version required for conditional update"); a
get with ``if_match`` carries ``If-Match``; 412 is ``PreconditionError``
(``AlreadyExistsError`` for a create), 404 ``NotFoundError``. The version of a read is
its ``x-goog-generation``, its ETag the ``ETag`` header (GCS: the MD5 of a
non-composite object's bytes, so two generations with the same bytes share it).
"""

from __future__ import annotations

import hashlib
import json
import os
from datetime import timedelta
from typing import Any

import dask.array as da
import numpy as np
import pytest
import zarr
from zarr.abc.store import OffsetByteRequest, RangeByteRequest, SuffixByteRequest

import shardwise
from gcs_xml_server import GcsXmlServer, Recorded
from shardwise import _compat
from shardwise.io.capabilities import conditional
from shardwise.io.cloud import ObstoreConditional
from shardwise.io.versioned import ABSENT, Stale, Version

pytest.importorskip("obstore")

CONDITION = "x-goog-if-generation-match"


@pytest.fixture
def gcs(monkeypatch):
    # (GCSStore reads GOOGLE_* variables: a service account there would clash with the key)
    for name in [n for n in os.environ if n.upper().startswith("GOOGLE_")]:
        monkeypatch.delenv(name)
    with GcsXmlServer() as server:
        yield server


def gcs_spec(server: GcsXmlServer, prefix: str | None = None) -> dict[str, Any]:
    """obstore's ``GCSStore`` on the model as a job process opens it
    (``concurrency_worker.py``'s ``obstore``): the class and its keyword arguments."""
    key = {
        "private_key": "unused",  # (never parsed: disable_oauth sends an empty bearer)
        "private_key_id": "unused",
        "client_email": "test@example.invalid",
        "disable_oauth": True,
        "gcs_base_url": server.url,
    }
    kwargs = {
        "bucket": server.bucket,
        "prefix": prefix,
        "service_account_key": json.dumps(key),
        "client_options": {"allow_http": True, "timeout": "10s"},
    }
    return {"class": "GCSStore", "kwargs": kwargs}


def gcs_store(server: GcsXmlServer, prefix: str | None = None) -> Any:
    """A zarr-python ``ObjectStore`` over obstore's ``GCSStore`` on the model."""
    from obstore.store import GCSStore
    from zarr.storage import ObjectStore

    store = GCSStore(
        **gcs_spec(server, prefix)["kwargs"],
        retry_config={
            "max_retries": 2,
            "retry_timeout": timedelta(seconds=10),
            "init_backoff": timedelta(milliseconds=10),
            "max_backoff": timedelta(milliseconds=100),
            "backoff_base": 2.0,
        },
    )
    return ObjectStore(store)


@pytest.fixture
def cond(gcs) -> ObstoreConditional:
    found = conditional(gcs_store(gcs))
    assert isinstance(found, ObstoreConditional)
    return found


def of(server: GcsXmlServer, mark: int, method: str, key: str) -> list[Recorded]:
    return [r for r in server.since(mark) if r.method == method and r.key == key]


def md5_etag(data: bytes) -> str:
    return '"' + hashlib.md5(data, usedforsecurity=False).hexdigest() + '"'


def test_a_version_is_the_etag_and_the_generation(gcs, cond):
    assert cond.put("k", b"one", ABSENT)
    data, version = cond.get("k")
    assert data == b"one"
    stored = gcs.objects["k"]
    assert version == Version(("obstore", md5_etag(b"one"), str(stored.generation)))


def test_a_create_sends_generation_0_and_a_second_create_is_refused(gcs, cond):
    mark = len(gcs.requests)
    assert cond.put("k", b"one", ABSENT)
    [put] = of(gcs, mark, "PUT", "k")
    assert put.headers[CONDITION] == "0" and "if-match" not in put.headers
    first = gcs.objects["k"]
    mark = len(gcs.requests)
    assert not cond.put("k", b"two", ABSENT)
    [put] = of(gcs, mark, "PUT", "k")
    assert put.headers[CONDITION] == "0"
    assert gcs.objects["k"] == first  # (refused: 412, read: another writer's bytes)
    assert len(of(gcs, mark, "GET", "k")) == 1


def test_an_update_sends_the_generation_read_and_is_refused_after_another_put(gcs, cond):
    assert cond.put("k", b"one", ABSENT)
    _, read = cond.get("k")
    generation = str(gcs.objects["k"].generation)
    mark = len(gcs.requests)
    assert cond.put("k", b"two", read)
    [put] = of(gcs, mark, "PUT", "k")
    # the generation is the condition; the ETag is not sent (object_store's GCS client
    # drops it: an MD5 would not tell two generations of the same bytes apart)
    assert put.headers[CONDITION] == generation
    assert "if-match" not in put.headers
    assert gcs.objects["k"].data == b"two"

    _, read = cond.get("k")
    gcs.write("k", b"another writer's")
    mark = len(gcs.requests)
    assert not cond.put("k", b"three", read)
    [put] = of(gcs, mark, "PUT", "k")
    assert put.headers[CONDITION] == read.tag[2]
    assert gcs.objects["k"].data == b"another writer's"

    # gone since it was read: GCS answers 412 too (no live generation matches)
    _, read = cond.get("k")
    cond.delete("k")
    assert not cond.put("k", b"four", read)
    assert "k" not in gcs.objects


def test_a_put_made_twice_is_settled_by_what_the_store_holds(gcs, cond):
    """A lost response: the put landed, and made again it is refused by the very
    object it put; what the store holds says it was this writer's."""
    assert cond.put("k", b"body", ABSENT)
    landed = gcs.objects["k"]
    mark = len(gcs.requests)
    assert cond.put("k", b"body", ABSENT)
    assert gcs.objects["k"] == landed  # (refused: nothing written)
    assert [r.method for r in gcs.since(mark)] == ["PUT", "GET"]

    _, read = cond.get("k")
    assert cond.put("k", b"update", read)
    landed = gcs.objects["k"]
    mark = len(gcs.requests)
    assert cond.put("k", b"update", read)
    assert gcs.objects["k"] == landed
    [put] = of(gcs, mark, "PUT", "k")
    assert put.headers[CONDITION] == read.tag[2]


def test_a_read_from_a_version_sends_if_match_and_is_stale_after_a_replacement(gcs, cond):
    assert cond.put("k", b"one", ABSENT)
    got = _compat.sync(cond.read("k"))
    assert got.version is not None
    mark = len(gcs.requests)
    again = _compat.sync(cond.read("k", SuffixByteRequest(2), expected=got.version))
    assert again.data is not None and bytes(again.data) == b"ne"
    assert again.version == got.version
    [get] = of(gcs, mark, "GET", "k")
    assert get.headers["if-match"] == md5_etag(b"one")
    assert get.headers["range"] == "bytes=-2"
    # the generation read is asked for too (``?generation=``): that generation or none
    assert CONDITION not in get.headers and get.query["generation"] == got.version.tag[2]

    gcs.write("k", b"two")  # another writer: another ETag, 412
    with pytest.raises(Stale):
        _compat.sync(cond.read("k", expected=got.version))

    # the same bytes put again: GCS gives them the same ETag (their MD5), so If-Match
    # alone would pass; the generation asked for is gone (404): Stale
    _, read = cond.get("k")
    gcs.write("k", b"two")
    mark = len(gcs.requests)
    with pytest.raises(Stale):
        _compat.sync(cond.read("k", expected=read))
    [get] = of(gcs, mark, "GET", "k")
    assert get.headers["if-match"] == read.tag[1] == gcs.objects["k"].etag
    assert get.query["generation"] == read.tag[2] != str(gcs.objects["k"].generation)

    cond.delete("k")  # gone: 404, Stale
    with pytest.raises(Stale):
        _compat.sync(cond.read("k", expected=read))


def test_ranged_reads_say_the_generation_and_the_whole_size(gcs, cond):
    body = bytes(range(100))
    assert cond.put("k", body, ABSENT)
    generation = str(gcs.objects["k"].generation)
    cases = [
        (None, None, body),
        (RangeByteRequest(10, 20), "bytes=10-19", body[10:20]),
        (SuffixByteRequest(7), "bytes=-7", body[-7:]),
        (OffsetByteRequest(95), "bytes=95-", body[95:]),
    ]
    for byte_range, header, expected in cases:
        mark = len(gcs.requests)
        got = _compat.sync(cond.read("k", byte_range))
        assert got.data is not None and bytes(got.data) == expected
        assert got.size == 100
        assert got.version == Version(("obstore", md5_etag(body), generation))
        [get] = of(gcs, mark, "GET", "k")
        assert get.headers.get("range") == header

    absent = _compat.sync(cond.read("nothing"))
    assert absent.data is None and absent.version == ABSENT


def test_delete_sends_delete_and_ignores_an_absent_object(gcs, cond):
    assert cond.put("k", b"one", ABSENT)
    mark = len(gcs.requests)
    cond.delete("k")
    cond.delete("k")
    assert [(r.method, r.key) for r in gcs.since(mark)] == [("DELETE", "k")] * 2
    assert "k" not in gcs.objects


def test_a_sharded_write_and_an_independent_append(gcs):
    store = gcs_store(gcs, prefix="d.zarr")
    first = np.arange(120 * 6, dtype="f8").reshape(120, 6)
    more = -np.arange(50 * 6, dtype="f8").reshape(50, 6)
    shardwise.array.to_zarr(
        da.from_array(first, chunks=(40, 6)),
        store,
        path="v",
        shards=(40, 6),
        chunks=(10, 6),
        independent_writers=True,
    )
    mark = len(gcs.requests)
    shardwise.array.to_zarr(
        da.from_array(more, chunks=(50, 6)),
        store,
        path="v",
        mode="a",
        append_dim=0,
        independent_writers=True,
    )
    stored = zarr.open_array(store, path="v", mode="r")
    assert stored.shape == (170, 6)
    np.testing.assert_array_equal(stored[...], np.concatenate([first, more]))

    # the append was guarded: its metadata put conditioned on the generation it read
    appended = gcs.since(mark)
    conditioned = [r for r in appended if r.method == "PUT" and CONDITION in r.headers]
    assert any(r.key == "d.zarr/v/zarr.json" and r.headers[CONDITION] != "0" for r in conditioned)
    assert all(r.headers[CONDITION].isdigit() for r in conditioned)


@pytest.mark.slow
def test_appends_racing_each_other_all_land(gcs):
    """Jobs in processes of their own appending through obstore's GCSStore: every
    append lands once, and no job ends on a signal as it exits."""
    from test_concurrency import check_appended, jobs, new_array, run_all

    nprocs, rounds, rows = 3, 2, 7  # 7 rows: appends cut shards of 100
    store = gcs_store(gcs, "a.zarr")
    new_array(store, rows=0)
    run_all(jobs("", "append", nprocs, rounds, rows, obstore=gcs_spec(gcs, "a.zarr")))
    check_appended(zarr.open_array(store, path="v", mode="r")[...], nprocs, rounds, rows)
