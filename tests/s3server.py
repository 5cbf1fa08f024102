"""A real S3 HTTP endpoint for tests: moto's server in a subprocess on 127.0.0.1.

:class:`S3Server` starts ``python -m moto.server`` on a free port and keeps two logs of
what the endpoint was asked, both in a temporary folder:

- werkzeug's access log (the server's stderr): one line per request with its method,
  path and status, e.g. ``"GET /bucket/data.zarr/v/c/0/0 HTTP/1.1" 206 -``
  (:meth:`S3Server.hits`);
- moto's request recorder (``MOTO_ENABLE_RECORDING``): every request with its headers,
  which tells a suffix-range GET (``Range: bytes=-N``) from any other
  (:meth:`S3Server.recorded`).

Both are written before the response goes out, so once a client call has returned its
requests are in the files. :meth:`S3Server.mark` takes the position of both logs, so a
test can count only the requests made after it.

:func:`isolated_aws_environment` points the AWS variables at the server (and a config
file that does not exist), so nothing falls back to the user's credentials or to AWS;
every client is also given the endpoint and credentials explicitly.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any
from urllib.parse import unquote, urlsplit

import pytest

from serverprocess import ServerProcess

KEY = "testing"
SECRET = "testing"
REGION = "us-east-1"

# werkzeug colours the request of some statuses (404, 4xx, 5xx) with ANSI escapes
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_ACCESS = re.compile(r'"(?P<method>[A-Z]+) (?P<target>\S+) HTTP/[0-9.]+" (?P<status>\d{3}) ')


def _split(target: str) -> tuple[str, str, str]:
    """(bucket, key, query) of a request target such as ``/bucket/a/b?x=1``."""
    parts = urlsplit(target)
    path = unquote(parts.path).lstrip("/")
    bucket, _, key = path.partition("/")
    return bucket, key, parts.query


@dataclass(frozen=True, slots=True)
class Hit:
    """One request as the endpoint's access log shows it."""

    method: str
    bucket: str
    key: str  # the object key ("" for a bucket-level request such as a listing)
    query: str
    status: int


@dataclass(frozen=True, slots=True)
class Recorded:
    """One request as moto's recorder saw it: with its Range header."""

    method: str
    bucket: str
    key: str
    query: str
    range: str | None  # the Range header, e.g. "bytes=-132" or "bytes=0-746"

    @property
    def suffix(self) -> int | None:
        """N of a suffix range ``bytes=-N``, else None."""
        if self.range and (m := re.fullmatch(r"bytes=-(\d+)", self.range)):
            return int(m.group(1))
        return None


@dataclass(frozen=True, slots=True)
class Mark:
    """Positions in the server's two logs."""

    access: int
    recording: int


_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@contextlib.contextmanager
def isolated_aws_environment(endpoint: str, home: Path) -> Iterator[None]:
    """Every ``AWS_*`` variable removed, then set to the test endpoint and credentials;
    no config or credentials file, no instance metadata, no proxy for 127.0.0.1.
    Restored afterwards (worker processes started meanwhile inherit it)."""
    with pytest.MonkeyPatch.context() as mp:
        for name in list(os.environ):
            if name.upper().startswith("AWS_"):
                mp.delenv(name)
        settings = {
            "AWS_ACCESS_KEY_ID": KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET,
            "AWS_DEFAULT_REGION": REGION,
            "AWS_REGION": REGION,
            "AWS_ENDPOINT_URL": endpoint,
            "AWS_ENDPOINT": endpoint,  # obstore's name for it
            "AWS_ALLOW_HTTP": "true",
            "AWS_EC2_METADATA_DISABLED": "true",
            "AWS_CONFIG_FILE": str(home / "no-aws-config"),
            "AWS_SHARED_CREDENTIALS_FILE": str(home / "no-aws-credentials"),
        }
        for name, value in settings.items():
            mp.setenv(name, value)
        for name in ("NO_PROXY", "no_proxy"):
            old = os.environ.get(name)
            mp.setenv(name, f"{old},127.0.0.1,localhost" if old else "127.0.0.1,localhost")
        yield


@contextlib.contextmanager
def endpoint_with_bucket(serialized: bool = False) -> Iterator[tuple[S3Server, str]]:
    """For a script that is no test (a benchmark): moto's server in a temporary folder,
    the AWS variables pointing at it, and a new bucket; all ended on exit, s3fs's cached
    filesystems closed."""
    with (
        tempfile.TemporaryDirectory() as tmp,
        S3Server(Path(tmp), serialized=serialized) as server,
        isolated_aws_environment(server.endpoint, Path(tmp)),
    ):
        try:
            yield server, server.new_bucket()
        finally:
            close_s3fs_sessions()


def close_s3fs_sessions() -> None:
    """Close and forget every cached s3fs filesystem.

    zarr-python's ``FsspecStore`` makes ``asynchronous=True`` filesystems and never
    closes them, and s3fs registers no finalizer for those, so their aiohttp sessions
    would be reported unclosed (a ResourceWarning, an error here) when garbage
    collected. The sessions live on zarr-python's I/O loop; they are closed there."""
    import s3fs
    from zarr.core.sync import sync

    for fs in list(s3fs.S3FileSystem._cache.values()):
        creator = getattr(fs, "_s3creator", None)
        if fs.asynchronous and creator is not None:
            sync(creator.__aexit__(None, None, None))
            fs._s3 = fs._s3creator = None
    _close_synchronous_s3fs()
    s3fs.S3FileSystem.clear_instance_cache()


def _close_synchronous_s3fs() -> None:
    """Close the sessions of synchronous s3fs filesystems now, on their own loop.

    s3fs closes them from a finalizer when the filesystem is garbage collected; s3fs
    2025.2 (the floor) calls ``asyncio.get_event_loop()`` there, which warns outside a
    loop on Python 3.12 (an error here), and falls back to closing the socket alone
    (aiohttp then reports the session unclosed). Both land in whatever test runs when
    the collector does: here they are closed when the server that served them stops,
    and the finalizers detached."""
    import weakref

    import s3fs
    from fsspec.asyn import sync as fsspec_sync

    for finalizer in list(weakref.finalize._registry):  # type: ignore[attr-defined]
        found = finalizer.peek()
        if found is None:
            continue
        obj, func, args, _ = found
        if not isinstance(obj, s3fs.S3FileSystem) or func.__name__ != "close_session":
            continue
        finalizer.detach()
        loop, creator = args
        if loop is not None and loop.is_running() and creator is not None:
            fsspec_sync(loop, creator.__aexit__, None, None, None, timeout=10)


class S3Server(ServerProcess):
    """moto's S3 server in a subprocess on 127.0.0.1; a context manager."""

    name = "moto's S3 server"

    def __init__(
        self, workdir: Path, *, startup_timeout: float = 30.0, serialized: bool = False
    ) -> None:
        """``serialized=True``: moto behind a lock held for each write request
        (``tests/moto_serialized.py``), so conditional puts are atomic, as on S3."""
        self.serialized = serialized
        self.access_log = Path(workdir) / "access.log"
        self.recording = Path(workdir) / "recording.jsonl"
        super().__init__(workdir, self.access_log, startup_timeout=startup_timeout)
        self._boto3: Any = None

    # -- process -------------------------------------------------------------------------
    @property
    def endpoint(self) -> str:
        return self.host

    def spawn(self, port: int, log: IO[bytes]) -> subprocess.Popen[bytes]:
        env = {
            **os.environ,
            "PYTHONUNBUFFERED": "1",
            "MOTO_ENABLE_RECORDING": "True",
            "MOTO_RECORDER_FILEPATH": str(self.recording),
        }
        self.recording.write_text("")
        server = (
            [str(Path(__file__).with_name("moto_serialized.py"))]
            if self.serialized
            else ["-m", "moto.server"]
        )
        return subprocess.Popen(
            [sys.executable, *server, "-H", "127.0.0.1", "-p", str(port)],
            stdout=subprocess.DEVNULL,
            stderr=log,
            env=env,
        )

    def answering(self) -> bool:
        with _NO_PROXY.open(f"{self.endpoint}/moto-api/", timeout=1) as r:
            return bool(r.status == 200)

    def close_clients(self) -> None:
        if self._boto3 is not None:
            self._boto3.close()
            self._boto3 = None

    # -- buckets and clients -------------------------------------------------------------
    def boto3(self) -> Any:
        if self._boto3 is None:
            import boto3

            self._boto3 = boto3.client(
                "s3",
                endpoint_url=self.endpoint,
                aws_access_key_id=KEY,
                aws_secret_access_key=SECRET,
                region_name=REGION,
            )
        return self._boto3

    def new_bucket(self) -> str:
        name = f"shardwise-{uuid.uuid4().hex[:12]}"
        self.boto3().create_bucket(Bucket=name)
        return name

    def keys(self, bucket: str, prefix: str = "") -> set[str]:
        """The objects in a bucket under ``prefix``, as the endpoint lists them."""
        out: set[str] = set()
        pages = self.boto3().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        for page in pages:
            out.update(o["Key"] for o in page.get("Contents", []))
        return out

    def storage_options(self, **extra: Any) -> dict[str, Any]:
        """fsspec/s3fs options for ``s3://`` URLs on this endpoint."""
        return {
            "endpoint_url": self.endpoint,
            "key": KEY,
            "secret": SECRET,
            "client_kwargs": {"region_name": REGION},
            **extra,
        }

    def obstore(self, bucket: str, prefix: str | None = None, endpoint: str | None = None) -> Any:
        """A zarr-python ``ObjectStore`` over obstore's ``S3Store`` on this endpoint (or
        on ``endpoint``, a proxy in front of it)."""
        from obstore.store import S3Store
        from zarr.storage import ObjectStore

        return ObjectStore(S3Store(**self.obstore_spec(bucket, prefix, endpoint)["kwargs"]))

    def obstore_spec(
        self, bucket: str, prefix: str | None = None, endpoint: str | None = None
    ) -> dict[str, Any]:
        """:meth:`obstore`'s ``S3Store`` as a job process opens it
        (``concurrency_worker.py``'s ``obstore``): the class and its keyword arguments."""
        kwargs = {
            "bucket": bucket,
            "prefix": prefix,
            "endpoint": endpoint or self.endpoint,
            "access_key_id": KEY,
            "secret_access_key": SECRET,
            "region": REGION,
            "virtual_hosted_style_request": False,  # path style: http://host:port/bucket/key
            "skip_signature": False,
            "client_options": {"allow_http": True},
        }
        return {"class": "S3Store", "kwargs": kwargs}

    # -- the logs ------------------------------------------------------------------------
    def mark(self) -> Mark:
        return Mark(self.access_log.stat().st_size, self.recording.stat().st_size)

    def hits(self, since: Mark | None = None) -> list[Hit]:
        """Requests in the access log (after ``since``)."""
        with self.access_log.open("rb") as f:
            f.seek(since.access if since else 0)
            text = f.read().decode("utf-8", "replace")
        out = []
        for line in _ANSI.sub("", text).splitlines():
            m = _ACCESS.search(line)
            if m is None:
                continue
            bucket, key, query = _split(m["target"])
            out.append(Hit(m["method"], bucket, key, query, int(m["status"])))
        return out

    def recorded(self, since: Mark | None = None) -> list[Recorded]:
        """Requests in moto's recording (after ``since``), with their Range headers."""
        with self.recording.open("rb") as f:
            f.seek(since.recording if since else 0)
            lines = f.read().decode().splitlines()
        out = []
        for line in lines:
            if not line.strip():
                continue
            entry = json.loads(line)
            headers = {k.lower(): v for k, v in entry["headers"].items()}
            url = urlsplit(entry["url"])
            bucket, key, query = _split(f"{url.path}?{url.query}")
            out.append(Recorded(entry["method"], bucket, key, query, headers.get("range")))
        return out
