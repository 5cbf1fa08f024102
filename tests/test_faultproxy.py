"""The fault-injecting proxy of ``tests/faultproxy.py``, between S3 clients and moto's
server: requests pass unchanged when no rule is set, and each fault class gives its
client the symptom a real object store's fault gives (checked with boto3; s3fs and
obstore are checked to work through it).

The exceptions botocore (urllib3) raises, as these tests pin them:

- ``error500`` / ``slowdown503``: ``ClientError`` with the code ``InternalError`` /
  ``SlowDown`` (``"500"`` / ``"503"`` for a HEAD, whose error has no body);
- ``reset``: a GET's headers arrive, reading its body raises ``ResponseStreamingError``
  (a ``ConnectionResetError`` underneath); a PUT or HEAD raises ``ConnectionClosedError``;
- ``short``: a GET's body read raises ``ResponseStreamingError`` (``IncompleteRead``
  underneath); a PUT or HEAD raises ``ConnectionClosedError`` (``BadStatusLine``); a cut
  XML answer (ListObjectsV2) becomes ``ClientError`` code ``"500"``: botocore turns a 200
  whose XML does not parse into a 500 (``botocore.handlers._handle_200_error``);
- ``stall``: ``ReadTimeoutError``;
- ``lost``: ``ConnectionClosedError``, though the server applied the request.

A single attempt is ``retries={"total_max_attempts": 1}``: botocore's client ``Config``
takes ``max_attempts`` for the number of *retries* (``botocore/args.py`` adds one), so
``{"max_attempts": 1}`` makes two attempts.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import http.client
import os
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import (
    ClientError,
    ConnectionClosedError,
    ReadTimeoutError,
    ResponseStreamingError,
)

from faultproxy import FAULTS, FaultProxy, Request
from s3server import KEY, REGION, SECRET


def _one_attempt() -> dict[str, Any]:
    # a new dict each time: botocore rewrites the retries dict it is given
    return {"total_max_attempts": 1, "mode": "standard"}


@contextlib.contextmanager
def client(endpoint: str, **config: Any) -> Iterator[Any]:
    """A boto3 S3 client on ``endpoint``, closed on exit."""
    c = boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=KEY,
        aws_secret_access_key=SECRET,
        region_name=REGION,
        config=Config(**config),
    )
    try:
        yield c
    finally:
        c.close()


def _threads(proxy: FaultProxy) -> list[threading.Thread]:
    prefix = f"faultproxy-{proxy.port}-"
    return [t for t in threading.enumerate() if t.name.startswith(prefix) and t.is_alive()]


def _chain(error: BaseException) -> list[BaseException]:
    out: list[BaseException] = []
    seen: BaseException | None = error
    while seen is not None and seen not in out:
        out.append(seen)
        seen = seen.__cause__ or seen.__context__
    return out


def _code(error: ClientError) -> tuple[str, int]:
    return error.response["Error"]["Code"], error.response["ResponseMetadata"]["HTTPStatusCode"]


def _on_server(s3, bucket: str, key: str) -> bytes | None:
    """The object as moto's endpoint itself has it (no proxy), or None."""
    try:
        return s3.boto3().get_object(Bucket=bucket, Key=key)["Body"].read()
    except ClientError as e:
        if _code(e)[1] == 404:
            return None
        raise


@pytest.fixture
def proxy(s3, bucket) -> Iterator[FaultProxy]:
    with FaultProxy(s3.endpoint, stall_seconds=3.0, max_seconds=120.0) as p:
        yield p
    assert not _threads(p), "a proxy thread outlived stop()"


@pytest.fixture
def one(proxy) -> Iterator[Any]:
    """A boto3 client through the proxy that makes a single attempt per call."""
    with client(proxy.endpoint, retries=_one_attempt()) as c:
        yield c


# -- no rule: the proxy is transparent ---------------------------------------------------
def test_requests_pass_through_unchanged(s3, bucket, proxy, one):
    data = os.urandom(300_000)
    mark = s3.mark()
    put = one.put_object(Bucket=bucket, Key="a/data", Body=data)
    assert put["ETag"] == f'"{hashlib.md5(data).hexdigest()}"'
    assert one.get_object(Bucket=bucket, Key="a/data")["Body"].read() == data
    head = one.head_object(Bucket=bucket, Key="a/data")
    assert (head["ContentLength"], head["ETag"]) == (len(data), put["ETag"])
    listed = one.list_objects_v2(Bucket=bucket, Prefix="a/")
    assert [o["Key"] for o in listed["Contents"]] == ["a/data"]

    ranged = one.get_object(Bucket=bucket, Key="a/data", Range="bytes=1000-1999")
    assert ranged["ResponseMetadata"]["HTTPStatusCode"] == 206
    assert ranged["ContentRange"] == f"bytes 1000-1999/{len(data)}"
    assert ranged["Body"].read() == data[1000:2000]
    suffix = one.get_object(Bucket=bucket, Key="a/data", Range="bytes=-10")
    assert suffix["Body"].read() == data[-10:]

    # conditional puts: a create of a new key passes, of an existing one is refused
    new = one.put_object(Bucket=bucket, Key="a/new", Body=b"1", IfNoneMatch="*")
    with pytest.raises(ClientError) as refused:
        one.put_object(Bucket=bucket, Key="a/data", Body=b"2", IfNoneMatch="*")
    assert _code(refused.value) == ("PreconditionFailed", 412)
    one.put_object(Bucket=bucket, Key="a/new", Body=b"3", IfMatch=new["ETag"])

    one.delete_object(Bucket=bucket, Key="a/data")
    assert not proxy.injected
    assert proxy.forwarded == len(s3.hits(mark)) == proxy.received == 10
    assert _on_server(s3, bucket, "a/data") is None
    assert _on_server(s3, bucket, "a/new") == b"3"


def test_a_chunked_body_after_100_continue(s3, bucket, proxy):
    """``Expect: 100-continue`` is answered before the body is read, and a chunked body
    is decoded and forwarded with its length."""
    auth = (
        "AWS4-HMAC-SHA256 Credential=testing/20260101/us-east-1/s3/aws4_request, "
        "SignedHeaders=host, Signature=00"
    )
    mark = s3.mark()
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as sock:
        sock.sendall(
            f"PUT /{bucket}/chunked HTTP/1.1\r\nHost: 127.0.0.1:{proxy.port}\r\n"
            f"Authorization: {auth}\r\nTransfer-Encoding: chunked\r\n"
            "Expect: 100-continue\r\n\r\n".encode()
        )
        continue_ = b"HTTP/1.1 100 Continue\r\n\r\n"
        got = b""
        while len(got) < len(continue_):
            got += sock.recv(len(continue_) - len(got))
        assert got == continue_
        sock.sendall(b"5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\n\r\n")
        response = http.client.HTTPResponse(sock, method="PUT")
        response.begin()
        assert response.status == 200
        response.read()
        response.close()
    assert [(r.method, r.key) for r in s3.recorded(mark)] == [("PUT", "chunked")]
    assert _on_server(s3, bucket, "chunked") == b"hello world"


# -- each fault class --------------------------------------------------------------------
@pytest.mark.parametrize(
    ("fault", "status", "code"),
    [("error500", 500, "InternalError"), ("slowdown503", 503, "SlowDown")],
)
def test_error_answers_are_not_forwarded(s3, bucket, proxy, one, fault, status, code):
    s3.boto3().put_object(Bucket=bucket, Key="there", Body=b"x")
    proxy.inject(fault, 1.0)
    mark = s3.mark()
    with pytest.raises(ClientError) as get:
        one.get_object(Bucket=bucket, Key="there")
    assert _code(get.value) == (code, status)
    with pytest.raises(ClientError) as put:
        one.put_object(Bucket=bucket, Key="new", Body=b"y")
    assert _code(put.value) == (code, status)
    with pytest.raises(ClientError) as head:  # a HEAD's error has no body, so no code
        one.head_object(Bucket=bucket, Key="there")
    assert _code(head.value) == (str(status), status)
    assert s3.hits(mark) == [] and proxy.forwarded == 0
    assert _on_server(s3, bucket, "new") is None
    assert proxy.injected == {(fault, "GET"): 1, (fault, "PUT"): 1, (fault, "HEAD"): 1}


def test_reset_cuts_the_connection_after_part_of_the_response(s3, bucket, proxy, one):
    data = os.urandom(100_000)
    s3.boto3().put_object(Bucket=bucket, Key="obj", Body=data)
    proxy.inject("reset", 1.0)
    response = one.get_object(Bucket=bucket, Key="obj")  # the headers arrive
    assert response["ContentLength"] == len(data)
    with pytest.raises(ResponseStreamingError) as read:
        response["Body"].read()
    assert any(isinstance(e, ConnectionResetError) for e in _chain(read.value))

    with pytest.raises(ConnectionClosedError) as put:
        one.put_object(Bucket=bucket, Key="written", Body=b"w")
    assert any(isinstance(e, ConnectionResetError) for e in _chain(put.value))
    assert _on_server(s3, bucket, "written") == b"w"  # forwarded first: applied
    with pytest.raises(ConnectionClosedError):
        one.head_object(Bucket=bucket, Key="obj")
    assert proxy.injected == {("reset", "GET"): 1, ("reset", "PUT"): 1, ("reset", "HEAD"): 1}


def test_short_sends_less_body_than_its_content_length(s3, bucket, proxy, one):
    data = os.urandom(100_000)
    s3.boto3().put_object(Bucket=bucket, Key="obj", Body=data)
    proxy.inject("short", 1.0)
    response = one.get_object(Bucket=bucket, Key="obj")
    assert response["ContentLength"] == len(data)
    with pytest.raises(ResponseStreamingError) as read:
        response["Body"].read()
    assert any(isinstance(e, http.client.IncompleteRead) for e in _chain(read.value))

    # a PUT's response has no body: half of its status line is sent instead
    with pytest.raises(ConnectionClosedError) as put:
        one.put_object(Bucket=bucket, Key="written", Body=b"w")
    assert any(isinstance(e, http.client.BadStatusLine) for e in _chain(put.value))
    assert _on_server(s3, bucket, "written") == b"w"

    # a cut XML body: botocore makes the 200 a 500 of its own (_handle_200_error), or,
    # at 1.41 (the lowest-versions run; 1.43 makes the 500), raises the cut connection
    with pytest.raises((ClientError, ConnectionClosedError)) as listed:
        one.list_objects_v2(Bucket=bucket)
    if isinstance(listed.value, ClientError):
        assert _code(listed.value) == ("500", 500)
    else:
        assert any(isinstance(e, http.client.IncompleteRead) for e in _chain(listed.value))


def test_stall_outlasts_the_read_timeout(s3, bucket, proxy):
    s3.boto3().put_object(Bucket=bucket, Key="obj", Body=b"slow")
    proxy.inject("stall", 1.0)
    with client(proxy.endpoint, retries=_one_attempt(), read_timeout=1) as c:
        started = time.monotonic()
        with pytest.raises(ReadTimeoutError):
            c.get_object(Bucket=bucket, Key="obj")
        with pytest.raises(ReadTimeoutError):
            c.put_object(Bucket=bucket, Key="written", Body=b"w")
        assert time.monotonic() - started < proxy.stall_seconds * 2
    assert _on_server(s3, bucket, "written") == b"w"
    assert proxy.injected == {("stall", "GET"): 1, ("stall", "PUT"): 1}


def test_a_lost_put_is_applied_on_the_server(s3, bucket, proxy, one):
    proxy.inject("lost", 1.0, methods={"PUT"})
    mark = s3.mark()
    with pytest.raises(ConnectionClosedError) as put:
        one.put_object(Bucket=bucket, Key="lost", Body=b"applied")
    assert any(isinstance(e, ConnectionResetError) for e in _chain(put.value))
    assert [(h.method, h.key, h.status) for h in s3.hits(mark)] == [("PUT", "lost", 200)]
    assert _on_server(s3, bucket, "lost") == b"applied"
    assert one.get_object(Bucket=bucket, Key="lost")["Body"].read() == b"applied"  # GETs pass


def test_lose_nth_loses_the_second_conditional_put(s3, bucket, proxy, one):
    proxy.lose_nth(2, FaultProxy.conditional_put)
    one.put_object(Bucket=bucket, Key="c1", Body=b"1", IfNoneMatch="*")
    one.put_object(Bucket=bucket, Key="plain", Body=b"p")  # not conditional: not counted
    with pytest.raises(ConnectionClosedError):
        one.put_object(Bucket=bucket, Key="c2", Body=b"2", IfNoneMatch="*")
    one.put_object(Bucket=bucket, Key="c3", Body=b"3", IfNoneMatch="*")
    assert [_on_server(s3, bucket, k) for k in ("c1", "plain", "c2", "c3")] == [
        b"1",
        b"p",
        b"2",  # applied, though its client got no answer
        b"3",
    ]
    assert proxy.injected == {("lost", "PUT"): 1}
    assert proxy.forwarded == 4


def test_a_retried_lost_create_fails_on_its_own_write(s3, bucket, proxy):
    """The hard case: botocore's default retries resend a conditional create whose
    response was lost; the server has the object already (the first attempt's), so the
    retry gets 412 PreconditionFailed: the client is told its create lost a race it won.
    The error's ``ResponseMetadata.RetryAttempts`` is 1, the one sign of it."""
    proxy.lose_nth(1, FaultProxy.conditional_put)
    mark = s3.mark()
    with client(proxy.endpoint) as c, pytest.raises(ClientError) as create:
        c.put_object(Bucket=bucket, Key="mine", Body=b"my write", IfNoneMatch="*")
    assert _code(create.value) == ("PreconditionFailed", 412)
    assert create.value.response["ResponseMetadata"]["RetryAttempts"] > 0
    assert create.value.response["ResponseMetadata"]["RetryAttempts"] == 1
    assert [(h.method, h.status) for h in s3.hits(mark)] == [("PUT", 200), ("PUT", 412)]
    assert _on_server(s3, bucket, "mine") == b"my write"


# -- rules -------------------------------------------------------------------------------
def test_a_rate_fails_about_that_share_of_requests(s3, bucket, proxy, one):
    s3.boto3().put_object(Bucket=bucket, Key="obj", Body=b"x")
    proxy.inject("error500", 0.5)
    failed = 0
    for _ in range(200):
        try:
            one.get_object(Bucket=bucket, Key="obj")["Body"].read()
        except ClientError as e:
            assert _code(e) == ("InternalError", 500)
            failed += 1
    assert 0.35 <= failed / 200 <= 0.65
    assert proxy.injected == {("error500", "GET"): failed}
    assert proxy.forwarded == 200 - failed


def test_a_seed_draws_the_same_faults(s3, bucket):
    s3.boto3().put_object(Bucket=bucket, Key="obj", Body=b"x")

    def pattern(seed: int) -> list[bool]:
        with (
            FaultProxy(s3.endpoint, seed=seed) as p,
            client(p.endpoint, retries=_one_attempt()) as c,
        ):
            p.inject("slowdown503", 0.5)
            out = []
            for _ in range(40):
                try:
                    c.head_object(Bucket=bucket, Key="obj")
                    out.append(False)
                except ClientError:
                    out.append(True)
            return out

    assert pattern(1) == pattern(1) != pattern(2)


def test_methods_when_and_clear(s3, bucket, proxy, one):
    proxy.inject("error500", 1.0, methods={"put"}, when=lambda r: r.path.endswith("/bad"))
    one.put_object(Bucket=bucket, Key="good", Body=b"g")
    one.get_object(Bucket=bucket, Key="good")
    with pytest.raises(ClientError):
        one.put_object(Bucket=bucket, Key="bad", Body=b"b")
    proxy.clear()
    one.put_object(Bucket=bucket, Key="bad", Body=b"b")
    assert proxy.injected == {("error500", "PUT"): 1}
    assert FaultProxy.conditional_put(Request("PUT", "/b/k", {"if-match": '"e"'}, b""))
    assert not FaultProxy.conditional_put(Request("PUT", "/b/k", {}, b""))
    assert not FaultProxy.conditional_put(Request("GET", "/b/k", {"if-none-match": "*"}, b""))
    with pytest.raises(ValueError):
        proxy.inject("teapot", 0.5)
    with pytest.raises(ValueError):
        proxy.inject("reset", 1.5)
    assert {"error500", "slowdown503", "reset", "short", "stall", "lost"} == FAULTS


# -- life ----------------------------------------------------------------------------------
def test_stop_joins_every_thread_and_max_seconds_stops_it(s3, bucket):
    with FaultProxy(s3.endpoint) as p, client(p.endpoint, retries=_one_attempt()) as c:
        c.put_object(Bucket=bucket, Key="k", Body=b"v")
        idle = socket.create_connection(("127.0.0.1", p.port))  # a keep-alive client, idle
        p.inject("stall", 1.0)
        staller = socket.create_connection(("127.0.0.1", p.port))  # one in a stall
        staller.sendall(f"GET /{bucket}/k HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        time.sleep(0.3)
        assert _threads(p)
        started = time.monotonic()
    assert time.monotonic() - started < 3.0
    assert not _threads(p)
    idle.close()
    staller.close()

    with FaultProxy(s3.endpoint, max_seconds=0.5) as p:
        time.sleep(1.2)
        assert not _threads(p)  # gone by itself
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", p.port), timeout=2).close()


# -- other clients -------------------------------------------------------------------------
def test_s3fs_reads_through_resets(s3, bucket, proxy):
    """aiobotocore's and s3fs's own retries carry a read through resets of a third of the
    requests (aiohttp raises ClientPayloadError for a cut body, ClientOSError for a
    reset before the body, which aiobotocore calls EndpointConnectionError)."""
    import s3fs

    data = os.urandom(200_000)
    s3.boto3().put_object(Bucket=bucket, Key="file", Body=data)
    proxy.inject("reset", 0.3)
    fs = s3fs.S3FileSystem(
        client_kwargs={"endpoint_url": proxy.endpoint, "region_name": REGION},
        key=KEY,
        secret=SECRET,
    )
    for start in range(0, len(data), 50_000):
        assert (
            fs.cat_file(f"{bucket}/file", start=start, end=start + 50_000)
            == (data[start : start + 50_000])
        )
    assert fs.cat_file(f"{bucket}/file") == data
    assert sum(proxy.injected.values()) > 0


def test_obstore_through_the_proxy(s3, bucket, proxy):
    obstore = pytest.importorskip("obstore")
    from obstore.store import S3Store

    store = S3Store(
        bucket,
        endpoint=proxy.endpoint,
        access_key_id=KEY,
        secret_access_key=SECRET,
        region=REGION,
        client_options={"allow_http": True},
    )
    data = os.urandom(100_000)

    # obstore's async calls: its blocking ones hold the GIL at 0.6 (the floor), and so
    # stop the proxy's threads in this process until they time out
    async def requests() -> tuple[bytes, bytes, int]:
        await obstore.put_async(store, "o/data", data)
        whole = await (await obstore.get_async(store, "o/data")).bytes_async()
        part = await obstore.get_range_async(store, "o/data", start=10, end=20)
        return bytes(whole), bytes(part), (await obstore.head_async(store, "o/data"))["size"]

    whole, part, size = asyncio.run(requests())
    assert whole == data and part == data[10:20] and size == len(data)
    assert _on_server(s3, bucket, "o/data") == data
    assert proxy.forwarded == proxy.received >= 4
    assert not proxy.injected
