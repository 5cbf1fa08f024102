"""A real Azure Blob Storage endpoint for tests: Azurite's blob service in a subprocess on
127.0.0.1.

:class:`AzuriteServer` starts ``azurite-blob`` (the npm package, which ``make`` installs
into ``.ci/azurite/node_modules``; :func:`azurite_command` finds it, else one on
``PATH``) on a free port, data in memory, and keeps its access log in a temporary
folder: one line per request with its method, path and status (``"PUT
/devstoreaccount1/container/a/zarr.json HTTP/1.1" 201 -``, :meth:`AzuriteServer.hits`).

Azurite writes that line when the response has gone out (morgan's ``finish``), not
before: a client can have its answer before the line is in the file (here about one
request in six, read at once). So :meth:`AzuriteServer.hits` first sends a request of
its own (a *barrier*: an anonymous ``GET`` of a path no test uses) and waits, bounded,
until that request's line is in the log: the lines of every request whose response a
client had before then are in it too (500 of 500 checked). :meth:`AzuriteServer.mark`
takes the log's position, so a test counts only the requests made after it.

The account is Azurite's well-known development account (``devstoreaccount1`` and its
published key: no secret). :func:`isolated_azure_environment` removes the user's
``AZURE_*`` variables and points the ones Azure clients read at the server; every
client is also given the endpoint and credentials explicitly.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any
from urllib.parse import quote, unquote, urlsplit

import pytest

from serverprocess import ServerProcess

ACCOUNT = "devstoreaccount1"
# Azurite's well-known development key, published with the emulator (not a secret)
KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
ROOT = Path(__file__).resolve().parents[1]
# where `make` installs the pinned release with npm ci (.ci/azurite/package-lock.json)
INSTALLED = ROOT / ".ci" / "azurite" / "node_modules" / ".bin" / "azurite-blob"
API_VERSION = "2025-01-05"  # x-ms-version of request()'s plain requests
BARRIER = "shardwise-barrier-"  # the path of hits()'s own requests: never a container's

_ACCESS = re.compile(r'"(?P<method>[A-Z]+) (?P<target>\S+) HTTP/[0-9.]+" (?P<status>\d{3}) ')
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def azurite_command() -> str | None:
    """``azurite-blob`` as make installs it (.ci/azurite), else one on ``PATH``; None when
    there is none or no ``node`` to run it."""
    if shutil.which("node") is None:
        return None
    if INSTALLED.exists():
        return str(INSTALLED)
    return shutil.which("azurite-blob")


@dataclass(frozen=True, slots=True)
class Hit:
    """One request as Azurite's access log shows it."""

    method: str
    container: str  # "" for an account-level request (listing containers)
    key: str  # the blob's name ("" for a container-level request such as a listing)
    query: str  # e.g. "restype=container&comp=list", "comp=block&blockid=..."
    status: int


def _split(target: str) -> tuple[str, str, str]:
    """(container, key, query) of ``/devstoreaccount1/container/a/b?x=1``."""
    parts = urlsplit(target)
    path = unquote(parts.path).lstrip("/")
    _account, _, rest = path.partition("/")
    container, _, key = rest.partition("/")
    return container, key, parts.query


@contextlib.contextmanager
def isolated_azure_environment(server: AzuriteServer) -> Iterator[None]:
    """Every ``AZURE_*`` and ``AZURITE_*`` variable removed, then the ones adlfs and
    obstore read set to the server's; no proxy for 127.0.0.1. Restored afterwards
    (processes started meanwhile inherit it)."""
    with pytest.MonkeyPatch.context() as mp:
        for name in list(os.environ):
            if name.upper().startswith(("AZURE_", "AZURITE_")):
                mp.delenv(name)
        settings = {
            "AZURE_STORAGE_CONNECTION_STRING": server.connection_string,  # adlfs
            "AZURE_STORAGE_ACCOUNT_NAME": ACCOUNT,
            "AZURE_STORAGE_ACCOUNT_KEY": KEY,
            # obstore (not AZURE_STORAGE_USE_EMULATOR: with it an explicit endpoint, a
            # proxy's, is ignored)
            "AZURE_STORAGE_ENDPOINT": server.endpoint,
            "AZURE_ALLOW_HTTP": "true",
        }
        for name, value in settings.items():
            mp.setenv(name, value)
        for name in ("NO_PROXY", "no_proxy"):
            old = os.environ.get(name)
            mp.setenv(name, f"{old},127.0.0.1,localhost" if old else "127.0.0.1,localhost")
        yield


def close_adlfs_clients() -> None:
    """Close the clients of every adlfs filesystem made so far, and forget the cached ones.

    adlfs closes a filesystem's aiohttp-based service client only from a finalizer that
    holds the filesystem itself, so it runs at interpreter exit, when the loop it needs
    is gone ("RuntimeError: Loop is not running", an unclosed-session ResourceWarning).
    zarr-python's FsspecStore never closes its filesystems either. Here each client is
    closed on the event loop its aiohttp session belongs to (zarr-python's, for the
    filesystems FsspecStore makes: their ``fs.loop`` is None), and the finalizer
    detached."""
    adlfs = sys.modules.get("adlfs")
    if adlfs is None:
        return
    for finalizer in list(weakref.finalize._registry):  # type: ignore[attr-defined]
        found = finalizer.peek()
        if found is None or not isinstance(found[0], adlfs.AzureBlobFileSystem):
            continue
        finalizer.detach()
        client = getattr(found[0], "service_client", None)
        if client is None:
            continue
        transport = getattr(getattr(client, "_client", None), "_client", None)
        transport = getattr(getattr(transport, "_pipeline", None), "_transport", None)
        session = getattr(transport, "session", None)
        loop = getattr(session, "_loop", None) or found[0].loop
        if loop is not None and loop.is_running():
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(client.close(), loop).result(10)
    adlfs.AzureBlobFileSystem.clear_instance_cache()


class AzuriteServer(ServerProcess):
    """Azurite's blob service in a subprocess on 127.0.0.1; a context manager."""

    name = "Azurite"

    def __init__(self, workdir: Path, *, startup_timeout: float = 60.0) -> None:
        """``startup_timeout``: about 1 s idle, but node loads some 370 packages, and on two
        cores under the suite's four workers one start took 20 s."""
        command = azurite_command()
        if command is None:
            raise FileNotFoundError(
                "azurite-blob not found (make installs it into .ci/azurite; needs node)"
            )
        self.command = command
        # its stdout and stderr: the access log
        super().__init__(workdir, Path(workdir) / "azurite.log", startup_timeout=startup_timeout)
        self._service: Any = None

    # -- process -------------------------------------------------------------------------
    @property
    def endpoint(self) -> str:
        """The account's blob endpoint (path style): ``http://127.0.0.1:P/devstoreaccount1``."""
        return f"{self.host}/{ACCOUNT}"

    @property
    def connection_string(self) -> str:
        return (
            f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={KEY};"
            f"BlobEndpoint={self.endpoint};"
        )

    def spawn(self, port: int, log: IO[bytes]) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [
                self.command,
                "--blobHost",
                "127.0.0.1",
                "--blobPort",
                str(port),
                "--inMemoryPersistence",
                "--skipApiVersionCheck",  # clients newer than the emulator
                "--loose",  # ignore headers it does not know
                "--disableTelemetry",  # no connection out
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=self.workdir,
        )

    def answering(self) -> bool:
        try:  # any HTTP answer (403 to this anonymous listing) means it is serving
            with _NO_PROXY.open(f"{self.endpoint}?comp=list", timeout=1):
                return True
        except urllib.error.HTTPError as e:
            e.close()
            return True

    def close_clients(self) -> None:
        if self._service is not None:
            self._service.close()
            self._service = None

    # -- containers and clients ----------------------------------------------------------
    def service(self) -> Any:
        """azure-storage-blob's (synchronous) ``BlobServiceClient`` for the account."""
        if self._service is None:
            from azure.storage.blob import BlobServiceClient

            self._service = BlobServiceClient.from_connection_string(self.connection_string)
        return self._service

    def new_container(self) -> str:
        name = f"shardwise-{uuid.uuid4().hex[:12]}"
        self.service().create_container(name)
        return name

    def keys(self, container: str, prefix: str = "") -> set[str]:
        """The blobs in a container under ``prefix``, as the endpoint lists them."""
        client = self.service().get_container_client(container)
        return {b.name for b in client.list_blobs(name_starts_with=prefix or None)}

    def sas(self, container: str) -> str:
        """A container SAS token (read, write, create, delete, list; an hour), for plain
        HTTP requests (:meth:`request`) without Shared Key signing."""
        import datetime

        from azure.storage.blob import ContainerSasPermissions, generate_container_sas

        return generate_container_sas(
            ACCOUNT,
            container,
            account_key=KEY,
            permission=ContainerSasPermissions(
                read=True, write=True, create=True, delete=True, list=True
            ),
            expiry=datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1),
        )

    def request(
        self,
        method: str,
        container: str,
        key: str,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
        timeout: float = 30.0,
    ) -> tuple[int, dict[str, str], bytes]:
        """One plain HTTP request for a blob, authorized by a container SAS, with exactly
        the headers given (and ``x-ms-version``): (status, headers with lower-cased
        names, body); an error status is returned, not raised."""
        req = urllib.request.Request(
            f"{self.endpoint}/{container}/{quote(key)}?{self.sas(container)}",
            data=body,
            method=method,
            headers={"x-ms-version": API_VERSION, **(headers or {})},
        )
        try:
            with _NO_PROXY.open(req, timeout=timeout) as r:
                return r.status, {k.lower(): v for k, v in r.headers.items()}, r.read()
        except urllib.error.HTTPError as e:
            with e:
                return e.code, {k.lower(): v for k, v in e.headers.items()}, e.read()

    def storage_options(self, **extra: Any) -> dict[str, Any]:
        """fsspec/adlfs options for ``az://container/path`` URLs on this endpoint.

        ``use_listings_cache=False``: adlfs 2026.8's listings cache keeps a directory's
        listing after a write below it (``_pipe_file`` drops the cached listing of the
        blob's parent named without its container, while the cache is keyed with it),
        so a group's members written after it was listed would go unseen."""
        return {
            "connection_string": self.connection_string,
            "account_name": ACCOUNT,
            "account_key": KEY,
            "use_listings_cache": False,
            **extra,
        }

    def azure_store(
        self, container: str, prefix: str | None = None, endpoint: str | None = None
    ) -> Any:
        """obstore's ``AzureStore`` for a container on this endpoint (or on ``endpoint``,
        a proxy's ``http://127.0.0.1:P/devstoreaccount1`` in front of it)."""
        from obstore.store import AzureStore

        return AzureStore(**self.obstore_spec(container, prefix, endpoint)["kwargs"])

    def obstore_spec(
        self, container: str, prefix: str | None = None, endpoint: str | None = None
    ) -> dict[str, Any]:
        """:meth:`azure_store` as a job process opens it (``concurrency_worker.py``'s
        ``obstore``): the class and its keyword arguments."""
        kwargs = {
            "container_name": container,
            "prefix": prefix,
            "endpoint": endpoint or self.endpoint,
            "account_name": ACCOUNT,
            "account_key": KEY,
            "client_options": {"allow_http": True},
        }
        return {"class": "AzureStore", "kwargs": kwargs}

    def obstore(
        self, container: str, prefix: str | None = None, endpoint: str | None = None
    ) -> Any:
        """A zarr-python ``ObjectStore`` over :meth:`azure_store`."""
        from zarr.storage import ObjectStore

        return ObjectStore(self.azure_store(container, prefix, endpoint))

    # -- the log -------------------------------------------------------------------------
    def mark(self) -> int:
        """The access log's position now; give it to :meth:`hits`."""
        self._barrier()
        return self.log.stat().st_size

    def hits(self, since: int | None = None, *, timeout: float = 10.0) -> list[Hit]:
        """Requests in the access log (after ``since``), every one answered before this
        call included (a barrier request first, see the module's doc)."""
        self._barrier(timeout)
        with self.log.open("rb") as f:
            f.seek(since or 0)
            text = f.read().decode("utf-8", "replace")
        out = []
        for line in text.splitlines():
            m = _ACCESS.search(line)
            if m is None or BARRIER in m["target"]:
                continue
            container, key, query = _split(m["target"])
            out.append(Hit(m["method"], container, key, query, int(m["status"])))
        return out

    def _barrier(self, timeout: float = 10.0) -> None:
        tag = f"{BARRIER}{uuid.uuid4().hex}"
        start = self.log.stat().st_size
        try:
            with _NO_PROXY.open(f"{self.endpoint}/{tag}", timeout=timeout):
                pass
        except urllib.error.HTTPError as e:  # 4xx: it was served, so it will be logged
            e.close()
        needle = tag.encode()
        deadline = time.monotonic() + timeout
        while True:
            with self.log.open("rb") as f:
                f.seek(start)
                if needle in f.read():
                    return
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"Azurite's access log did not show {tag} within {timeout:.0f} s; "
                    f"it ends:\n{self.log_tail()}"
                )
            time.sleep(0.002)
