"""A model of the Google Cloud Storage XML API on 127.0.0.1, just enough for obstore's
``GCSStore`` (the Rust ``object_store`` crate's GCP client, which speaks the XML API:
``<base_url>/<bucket>/<object>``, not the JSON API that fake-gcs-server offers).

It is a model of the documented behaviour, not a GCS: one bucket, objects in memory,
each write given a new generation (an increasing microsecond count) and the MD5 of its
bytes as its ETag (what GCS gives a non-composite object). What it does, per the pages
https://cloud.google.com/storage/docs/xml-api/reference-headers and
https://cloud.google.com/storage/docs/request-preconditions:

- ``GET``/``HEAD`` of an object: ``ETag``, ``x-goog-generation``,
  ``x-goog-metageneration``, ``Last-Modified``, ``Content-Length``; ``Range``
  (``bytes=a-b``, ``a-``, ``-n``: 206 with ``Content-Range``, 416 out of the object);
  ``If-Match`` (412 when the ETag differs), ``If-None-Match`` (304 when it matches),
  ``x-goog-if-generation-match`` (412 when the generation differs), ``?generation=``
  (404 unless it is the live one: no old versions are kept);
- ``PUT`` of an object: ``x-goog-if-generation-match: 0`` (412 if the object exists)
  or ``: G`` (412 unless its live generation is G), checked and applied under one lock;
  answers ``ETag`` and ``x-goog-generation``;
- ``DELETE`` (204; 404 without an object; the generation condition as for ``PUT``);
- ``GET /<bucket>?list-type=2`` with ``prefix``, ``delimiter``, ``start-after``,
  ``max-keys``, ``continuation-token``: a ``ListBucketResult``.

Multipart uploads, copies and anything else answer 501. No authentication is checked
(the client is configured with ``disable_oauth``: no token endpoint is asked). Every
request is recorded (:attr:`GcsXmlServer.requests`) with its headers, for tests of the
request mapping.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import re
import socket
import threading
import time
from dataclasses import dataclass
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit
from xml.sax.saxutils import escape

MAX_BODY = 64 << 20  # larger uploads are refused (413): a test server, bounded
MAX_RECORDED = 100_000


@dataclass(frozen=True)
class Recorded:
    method: str
    key: str | None  # the object's name (None: a bucket request)
    query: dict[str, str]
    headers: dict[str, str]  # (names in lower case)


@dataclass(frozen=True)
class Object:
    data: bytes
    generation: int
    modified: float

    @property
    def etag(self) -> str:
        return '"' + hashlib.md5(self.data, usedforsecurity=False).hexdigest() + '"'


class GcsXmlServer:
    """``with GcsXmlServer() as gcs:`` serves bucket ``gcs.bucket`` at ``gcs.url``."""

    def __init__(self, bucket: str = "bucket") -> None:
        self.bucket = bucket
        self.objects: dict[str, Object] = {}
        self.requests: list[Recorded] = []
        self.lock = threading.Lock()
        self._last = 0
        self._connections: set[socket.socket] = set()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        assert self._httpd is not None
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> GcsXmlServer:
        handler = type("Handler", (_Handler,), {"model": self})
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._httpd is not None and self._thread is not None
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(10)
        with self.lock:  # (connections the client keeps alive: their threads end now)
            for connection in list(self._connections):
                with contextlib.suppress(OSError):
                    connection.shutdown(socket.SHUT_RDWR)

    # -- the model ---------------------------------------------------------------------
    def write(self, key: str, data: bytes, if_generation: str | None = None) -> Object | None:
        """Store ``data`` if ``if_generation`` (``x-goog-if-generation-match``) holds;
        None when it does not. Also "another writer", for tests (not recorded)."""
        with self.lock:
            if not _generation_holds(self.objects.get(key), if_generation):
                return None
            self._last = max(self._last + 1, time.time_ns() // 1000)
            self.objects[key] = Object(bytes(data), self._last, time.time())
            return self.objects[key]

    def since(self, mark: int) -> list[Recorded]:
        """The requests recorded after ``mark`` (``len(server.requests)`` taken before)."""
        with self.lock:
            return self.requests[mark:]


def _generation_holds(found: Object | None, condition: str | None) -> bool:
    if condition is None:
        return True
    if condition.strip() == "0":
        return found is None
    return found is not None and str(found.generation) == condition.strip()


def _etag_in(etag: str, header: str) -> bool:
    tags = [t.strip() for t in header.split(",")]
    return "*" in tags or etag in tags or etag.strip('"') in tags


def _byte_range(header: str, size: int) -> tuple[int, int] | None:
    """``(start, stop)`` of one ``bytes=`` range; None when it cannot be satisfied."""
    match = re.fullmatch(r"bytes=(\d*)-(\d*)", header.strip())
    if match is None or match.groups() == ("", ""):
        return None
    first, last = match.groups()
    if first == "":
        start, stop = max(size - int(last), 0), size
    else:
        start = int(first)
        stop = size if last == "" else min(int(last) + 1, size)
    return (start, stop) if start < stop else None


class _Handler(BaseHTTPRequestHandler):
    model: GcsXmlServer
    protocol_version = "HTTP/1.1"  # (keep-alive, as the client pools connections)
    timeout = 30  # an idle kept-alive connection is closed after this

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def setup(self) -> None:
        super().setup()
        with self.model.lock:
            self.model._connections.add(self.connection)

    def finish(self) -> None:
        with self.model.lock:
            self.model._connections.discard(self.connection)
        with contextlib.suppress(OSError):
            super().finish()

    def _target(self) -> tuple[str | None, dict[str, str]]:
        split = urlsplit(self.path)
        query = dict(parse_qsl(split.query, keep_blank_values=True))
        bucket, _, key = unquote(split.path).lstrip("/").partition("/")
        if bucket != self.model.bucket:
            raise LookupError(bucket)
        headers = {k.lower(): v for k, v in self.headers.items()}
        with self.model.lock:
            if len(self.model.requests) < MAX_RECORDED:
                self.model.requests.append(Recorded(self.command, key or None, query, headers))
        return key or None, query

    def _send(self, status: int, headers: dict[str, str] | None = None, body: bytes = b"") -> None:
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        if "Content-Length" not in (headers or {}):
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _error(self, status: int, code: str) -> None:
        body = f"<?xml version='1.0' encoding='UTF-8'?><Error><Code>{code}</Code></Error>"
        self._send(status, {"Content-Type": "application/xml"}, body.encode())

    def _read_body(self) -> bytes | None:
        length = self.headers.get("Content-Length")
        if length is None or not length.isdigit() or int(length) > MAX_BODY:
            self.close_connection = True
            self._error(411 if length is None else 413, "BadContentLength")
            return None
        return self.rfile.read(int(length))

    def _routed(self) -> tuple[str | None, dict[str, str]] | None:
        try:
            return self._target()
        except LookupError:
            self._error(404, "NoSuchBucket")
            return None

    def do_HEAD(self) -> None:
        self.do_GET()

    def do_GET(self) -> None:
        routed = self._routed()
        if routed is None:
            return
        key, query = routed
        if key is None:
            return self._list(query)
        with self.model.lock:
            found = self.model.objects.get(key)
        if found is None or query.get("generation", str(found.generation)) != str(found.generation):
            return self._error(404, "NoSuchKey")
        if "If-Match" in self.headers and not _etag_in(found.etag, self.headers["If-Match"]):
            return self._error(412, "PreconditionFailed")
        if not _generation_holds(found, self.headers.get("x-goog-if-generation-match")):
            return self._error(412, "PreconditionFailed")
        if "If-None-Match" in self.headers and _etag_in(found.etag, self.headers["If-None-Match"]):
            return self._send(304, {"ETag": found.etag})
        size = len(found.data)
        headers = {
            "ETag": found.etag,
            "x-goog-generation": str(found.generation),
            "x-goog-metageneration": "1",
            "x-goog-stored-content-length": str(size),
            "Last-Modified": formatdate(found.modified, usegmt=True),
            "Content-Type": "application/octet-stream",
            "Accept-Ranges": "bytes",
        }
        if "Range" not in self.headers:
            headers["Content-Length"] = str(size)
            return self._send(200, headers, found.data)
        span = _byte_range(self.headers["Range"], size)
        if span is None:
            return self._error(416, "InvalidRange")
        start, stop = span
        headers["Content-Range"] = f"bytes {start}-{stop - 1}/{size}"
        headers["Content-Length"] = str(stop - start)
        self._send(206, headers, found.data[start:stop])

    def do_PUT(self) -> None:
        routed = self._routed()
        body = self._read_body() if routed is not None else None
        if routed is None or body is None:
            return
        key, query = routed
        if key is None or query or "x-goog-copy-source" in self.headers:
            return self._error(501, "NotImplemented")  # (multipart parts, copies)
        stored = self.model.write(key, body, self.headers.get("x-goog-if-generation-match"))
        if stored is None:
            return self._error(412, "PreconditionFailed")
        self._send(200, {"ETag": stored.etag, "x-goog-generation": str(stored.generation)})

    def do_DELETE(self) -> None:
        routed = self._routed()
        if routed is None:
            return
        key, _ = routed
        if key is None:
            return self._error(501, "NotImplemented")
        with self.model.lock:
            found = self.model.objects.get(key)
            if found is None:
                return self._error(404, "NoSuchKey")
            if not _generation_holds(found, self.headers.get("x-goog-if-generation-match")):
                return self._error(412, "PreconditionFailed")
            del self.model.objects[key]
        self._send(204)

    def do_POST(self) -> None:
        if self._routed() is not None:
            self.close_connection = True
            self._error(501, "NotImplemented")  # (multipart uploads)

    def _list(self, query: dict[str, str]) -> None:
        prefix, delimiter = query.get("prefix", ""), query.get("delimiter", "")
        after = query.get("start-after", "")
        token = query.get("continuation-token")
        # (the token names the last key or common prefix of the page before)
        done = base64.urlsafe_b64decode(token).decode() if token else ""
        limit = min(int(query.get("max-keys", "1000")), 1000)
        with self.model.lock:
            items = sorted(self.model.objects.items())
        entries: list[tuple[str, str]] = []  # (key or common prefix, its XML)
        truncated = False
        for name, found in items:
            if not name.startswith(prefix) or name <= after or name <= done:
                continue
            if done.endswith(delimiter or "\0") and name.startswith(done):
                continue
            rest = name[len(prefix) :]
            if delimiter and delimiter in rest:
                common = prefix + rest.split(delimiter, 1)[0] + delimiter
                if entries and entries[-1][0] == common:
                    continue
                entry = (
                    common,
                    f"<CommonPrefixes><Prefix>{escape(common)}</Prefix></CommonPrefixes>",
                )
            else:
                modified = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(found.modified))
                entry = (
                    name,
                    f"<Contents><Key>{escape(name)}</Key>"
                    f"<Generation>{found.generation}</Generation>"
                    f"<MetaGeneration>1</MetaGeneration><LastModified>{modified}</LastModified>"
                    f"<ETag>{escape(found.etag)}</ETag><Size>{len(found.data)}</Size></Contents>",
                )
            if len(entries) == limit:
                truncated = True
                break
            entries.append(entry)
        more = ""
        if truncated:
            next_token = base64.urlsafe_b64encode(entries[-1][0].encode()).decode()
            more = f"<NextContinuationToken>{next_token}</NextContinuationToken>"
        body = (
            "<?xml version='1.0' encoding='UTF-8'?>"
            "<ListBucketResult xmlns='http://doc.s3.amazonaws.com/2006-03-01'>"
            f"<Name>{escape(self.model.bucket)}</Name><Prefix>{escape(prefix)}</Prefix>"
            f"<KeyCount>{len(entries)}</KeyCount><MaxKeys>{limit}</MaxKeys>"
            f"<IsTruncated>{'true' if truncated else 'false'}</IsTruncated>"
            + "".join(xml for _, xml in entries)
            + more
            + "</ListBucketResult>"
        )
        self._send(200, {"Content-Type": "application/xml"}, body.encode())
