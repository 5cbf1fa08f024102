"""The ``shardwise`` command line, run the way users run it: the installed console script
(and ``python -m shardwise``) in a subprocess, its stdout, stderr and exit status
checked; the parsers of option values as functions and as click options."""

from __future__ import annotations

import concurrent.futures
import importlib.util
import itertools
import json
import os
import pty
import re
import shlex
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import click
import dask
import numpy as np
import pandas as pd
import pytest
import xarray as xr
from click.testing import CliRunner
from zarr.codecs import BloscCodec, GzipCodec, ZstdCodec

import shardwise
from shardwise.cli.arguments import (
    codec_option,
    parse_codec,
    parse_sizes,
    parse_storage_options,
    sizes_option,
)
from shardwise.cli.run import shared_options

SCRIPT = Path(sys.executable).parent / "shardwise"
LEGACY = Path(__file__).parents[1] / "data" / "legacy"
DOCS = Path(__file__).parents[2] / "docs" / "cli.md"


def run(
    *args: object,
    module: bool = False,
    stderr: int | None = None,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess:
    """``shardwise *args`` (or ``python -m shardwise *args``), output captured."""
    if module:
        command = [sys.executable, "-m", "shardwise"]
    else:
        assert SCRIPT.is_file(), (
            f"no console script at {SCRIPT}: install shardwise (pip install -e '.[test]')"
        )
        command = [str(SCRIPT)]
    return subprocess.run(
        [*command, *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE if stderr is None else stderr,
        text=True,
        timeout=120,
        cwd=cwd,
        env=None if env is None else {**os.environ, **env},
    )


def run_all(
    *commands: Sequence[object], cwd: Path | None = None
) -> list[subprocess.CompletedProcess]:
    """:func:`run` for each of ``commands`` (lists of arguments), all at once."""
    with concurrent.futures.ThreadPoolExecutor(len(commands)) as pool:
        return list(pool.map(lambda args: run(*args, cwd=cwd), commands))


def run_with_tty_stderr(*args: object) -> tuple[str, str, int]:
    """``shardwise *args`` with stderr on a terminal (a pty of 100 columns) and stdout
    on a pipe: (stdout, what the terminal showed, exit status)."""
    import fcntl
    import struct
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    shown: list[bytes] = []

    def pump() -> None:
        while True:
            try:
                data = os.read(master, 4096)
            except OSError:  # EIO: the child closed the terminal
                break
            if not data:
                break
            shown.append(data)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        proc = run(*args, stderr=slave)
    finally:
        os.close(slave)  # the child's copy is closed: the reader sees the end
        reader.join(timeout=30)
        os.close(master)
    return proc.stdout, b"".join(shown).decode(), proc.returncode


def assert_error_line(proc: subprocess.CompletedProcess, *words: str) -> None:
    """Exit status 2, nothing on stdout, one line on stderr saying what is wrong."""
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("shardwise: error: "), proc.stderr
    for word in words:
        assert word in lines[0]


@pytest.fixture(autouse=True)
def _threads():
    with dask.config.set(scheduler="threads"):
        yield


def weather(gap: slice | None = None) -> xr.Dataset:
    """The dataset of the stores docs/cli.md shows: temperature (400 hours x 50) and its
    coordinates; with ``gap``, temperature missing (NaN) over those hours."""
    rng = np.random.default_rng(0)
    temperature = rng.normal(280, 5, (400, 50)).astype("f4")
    if gap is not None:
        temperature[gap] = np.nan
    return xr.Dataset(
        {"temperature": (("time", "x"), temperature)},
        coords={"time": pd.date_range("2000-01-01", periods=400, freq="h"), "x": np.arange(50)},
    )


def write_sharded(ds: xr.Dataset, path: Path) -> Path:
    """``ds`` by shardwise.to_zarr: temperature and time in shards of 100 hours of 10
    inner chunks each (inner chunks of NaN only left out), x in 1 chunk."""
    with dask.config.set(scheduler="threads"):
        shardwise.to_zarr(
            ds.chunk({"time": 100}),
            path,
            shards={"time": 100},
            chunks={"time": 10},
            consolidated=False,
        )
    return path


def write_v2(ds: xr.Dataset, path: Path) -> Path:
    """``ds`` by xarray as Zarr v2 (its default compressor): temperature in chunks of
    10 hours, time and x in one chunk each."""
    ds.to_zarr(
        path, zarr_format=2, encoding={"temperature": {"chunks": (10, 50)}}, consolidated=False
    )
    return path


@pytest.fixture(scope="module")
def good_store(tmp_path_factory) -> Path:
    """weather.zarr: temperature and time in 4 shards of 10 inner chunks each, x in 1."""
    return write_sharded(weather(), tmp_path_factory.mktemp("cli") / "weather.zarr")


@pytest.fixture(scope="module")
def sparse_store(tmp_path_factory) -> Path:
    """sparse.zarr: as weather.zarr, temperature missing from hour 100 to 229: its
    second shard is not stored, nor the first 3 inner chunks of the third."""
    return write_sharded(
        weather(gap=slice(100, 230)), tmp_path_factory.mktemp("cli") / "sparse.zarr"
    )


@pytest.fixture(scope="module")
def v2_store(tmp_path_factory) -> Path:
    """v2.zarr: weather.zarr's dataset as Zarr v2, written by xarray."""
    return write_v2(weather(), tmp_path_factory.mktemp("cli") / "v2.zarr")


def flip(file: Path, position: int) -> None:
    raw = bytearray(file.read_bytes())
    raw[position] ^= 0xFF
    file.write_bytes(bytes(raw))


def same_as_source(dst: Path, src: Path) -> None:
    source = xr.open_datatree(src, engine="shardwise").load()
    back = xr.open_datatree(dst, engine="zarr", consolidated=False).load()
    xr.testing.assert_identical(back, source)


# -- help, version, usage -------------------------------------------------------------------
@pytest.mark.parametrize("module", [False, True], ids=["script", "python -m"])
def test_help_and_version(module):
    proc = run("--help", module=module)
    assert proc.returncode == 0, proc.stderr
    for word in ("verify", "migrate", "info", "inventory", "reshard", "2    bad usage"):
        assert word in proc.stdout
    proc = run("--version", module=module)
    assert (proc.returncode, proc.stdout) == (0, f"shardwise {shardwise.__version__}\n")
    proc = run("migrate", "--help", module=module)
    assert proc.returncode == 0
    for option in ("--mode", "--dst-storage-option", "--scheduler", "--workers", "--no-progress"):
        assert option in proc.stdout


@pytest.mark.parametrize(
    "args, says",
    [
        ([], "Usage: shardwise"),
        (["verify"], "Missing argument 'PATH'"),
        (["frobnicate"], "No such command 'frobnicate'"),
        (["verify", "x.zarr", "--nope"], "No such option"),
        (["verify", "x.zarr", "--storage-option", "anon"], "expected KEY=VALUE, found 'anon'"),
        (["verify", "x.zarr", "--storage-option", "anon=true"], "'x.zarr' is a local path"),
        (["migrate", "a", "b", "--mode", "r"], "'r' is not one of 'w-', 'w', 'a'"),
        (["migrate", "a", "b", "--workers", "0"], "0 is not in the range x>=1"),
        (["migrate", "a", "b", "--workers", "2", "--scheduler", "x"], "exclude each other"),
        (["info"], "Missing argument 'PATH'"),
        (["inventory", "x.zarr", "--out", "t.txt"], "--out must end in .nc, .zarr, .csv"),
        (["reshard", "a"], "Missing argument 'DST'"),
        (["reshard", "a", "b", "--shards", "time"], "Invalid value for '--shards'"),
        (["reshard", "a", "b", "--chunks", "time=0"], "sizes are positive"),
        (["reshard", "a", "b", "--codec", "lz4"], "expected one of zstd, blosc, gzip"),
        (["reshard", "a", "b", "--dst-storage-option", "anon=true"], "'b' is a local path"),
    ],
)
def test_bad_usage_exits_2(args, says):
    proc = run(*args)
    assert proc.returncode == 2
    assert says in proc.stderr and "Traceback" not in proc.stderr
    assert proc.stdout == ""


# -- verify ---------------------------------------------------------------------------------
def test_verify_a_good_store(good_store):
    proc = run("verify", good_store)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("3 arrays, 9 shards, 0 inner chunks checked;")
    assert proc.stdout.rstrip().endswith("all good") and proc.stderr == ""
    proc = run("verify", good_store, "--decode", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["ok"] is True and doc["problems"] == [] and doc["bad_keys"] == []
    assert doc["arrays"] == ["temperature", "time", "x"]
    # temperature and time: 4 shards of 10 inner chunks each; x: 1 unsharded chunk
    assert (doc["shards"], doc["chunks"]) == (9, 40 + 40 + 1)
    proc = run("verify", good_store, "--group", "temperature", module=True)
    assert proc.returncode == 0 and proc.stdout.startswith("1 arrays, 4 shards")


def test_verify_a_damaged_store(good_store, tmp_path):
    path = tmp_path / "bad.zarr"
    shutil.copytree(good_store, path)
    flip(path / "temperature/c/2/0", -10)  # in the shard index: its crc32c fails
    proc = run("verify", path)
    assert proc.returncode == 1, proc.stderr
    assert "1 bad keys" in proc.stdout
    assert "temperature/c/2/0: ChecksumError: shard index crc32c mismatch" in proc.stdout
    proc = run("verify", path, "--json")
    assert proc.returncode == 1
    doc = json.loads(proc.stdout)
    assert doc["ok"] is False and doc["bad_keys"] == ["temperature/c/2/0"]
    [problem] = doc["problems"]
    assert problem["array"] == "temperature" and problem["key"] == "temperature/c/2/0"
    assert problem["chunk"] is None and problem["error"] == "ChecksumError"
    assert "store key 'temperature/c/2/0'" in problem["message"]


def test_verify_where_there_is_no_store(tmp_path):
    proc = run("verify", tmp_path / "nothing.zarr")
    assert_error_line(proc, "no Zarr v3 group or array here", "found nothing")
    proc = run("verify", tmp_path / "nothing.zarr", "--json", module=True)
    assert_error_line(proc, "no Zarr v3 group or array here")


# -- migrate --------------------------------------------------------------------------------
def test_migrate_text_and_json(tmp_path):
    dst = tmp_path / "c.zarr"
    proc = run("migrate", LEGACY / "compressors", dst)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        f"migrated {LEGACY / 'compressors'} to {dst}: 5 arrays in 1 group, 20 shards",
        "  blosc: copied as bytes",
        "  gzip: copied as bytes",
        "  none: copied as bytes",
        "  zlib: re-encoded as gzip (level 5)",
        "  zstd: copied as bytes",
    ]
    assert proc.stderr == ""  # no progress bar: stderr is not a terminal
    same_as_source(dst, LEGACY / "compressors")

    dst = tmp_path / "h.zarr"
    proc = run("migrate", LEGACY / "hierarchy", dst, "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc == {
        "source": str(LEGACY / "hierarchy"),
        "destination": str(dst),
        "arrays": ["surface/counts", "deep/inside/flags"],
        "groups": ["/", "deep", "surface", "deep/inside"],
        "shards": 6,
        "reencoded": {},
    }
    same_as_source(dst, LEGACY / "hierarchy")
    assert run("verify", dst, "--decode").returncode == 0


def test_migrate_refuses_an_existing_destination(tmp_path):
    dst = tmp_path / "s.zarr"
    assert run("migrate", LEGACY / "sparse", dst).returncode == 0
    before = sorted((p.as_posix(), p.stat().st_mtime_ns) for p in dst.rglob("*"))
    proc = run("migrate", LEGACY / "sparse", dst)
    assert_error_line(proc, "the destination holds Zarr data already", "mode='a'")
    assert sorted((p.as_posix(), p.stat().st_mtime_ns) for p in dst.rglob("*")) == before
    (dst / "v/c/1/0").unlink()  # an interrupted run: --mode a completes it
    proc = run("migrate", LEGACY / "sparse", dst, "--mode", "a", "--json")
    assert proc.returncode == 0 and json.loads(proc.stdout)["shards"] == 2
    same_as_source(dst, LEGACY / "sparse")
    proc = run("migrate", dst, tmp_path / "again.zarr")  # not a draft store
    assert_error_line(proc, "not a store of the 2022 sharding draft", "Zarr v3")
    assert not (tmp_path / "again.zarr").exists()


def test_progress_bar_on_a_terminal_goes_to_stderr(tmp_path):
    out, shown, code = run_with_tty_stderr(
        "migrate", LEGACY / "compressors", tmp_path / "a.zarr", "--json"
    )
    assert code == 0, shown
    assert json.loads(out)["shards"] == 20  # stdout holds the JSON document only
    # 20 shard tasks, the one that ends the copy, and the one that gives the report
    assert "migrate: 100%" in shown and "22/22" in shown
    out, shown, code = run_with_tty_stderr(
        "migrate", LEGACY / "compressors", tmp_path / "b.zarr", "--no-progress"
    )
    assert code == 0 and out.startswith("migrated") and shown == ""


@pytest.mark.slow
def test_migrate_on_worker_processes(tmp_path):
    dst = tmp_path / "c.zarr"
    proc = run("migrate", LEGACY / "compressors", dst, "--workers", "2", "--json", module=True)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["reencoded"] == {"zlib": "gzip (level 5)"}
    same_as_source(dst, LEGACY / "compressors")


def _address(info: Path) -> str | None:
    """The address in a scheduler file, once the scheduler has written it whole."""
    try:
        return json.loads(info.read_text())["address"]
    except (FileNotFoundError, ValueError, KeyError):
        return None


@pytest.fixture
def scheduler(tmp_path):
    """The address of a dask scheduler with one worker, both in processes of their own
    (as on a cluster; an in-process scheduler would unpickle the tasks here), the
    worker in a directory of its own."""
    info = tmp_path / "scheduler.json"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    common = ["--scheduler-file", str(info), "--dashboard-address", ":0"]  # 8787 may be taken
    start = [sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1", *common]
    procs = [subprocess.Popen(start, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    try:
        deadline = time.monotonic() + 90  # (a loaded 2-core machine starts it slowly)
        while (address := _address(info)) is None:
            assert time.monotonic() < deadline, "the scheduler did not start"
            time.sleep(0.05)
        start = [sys.executable, "-m", "distributed.cli.dask_worker", *common, "--nworkers", "1"]
        procs.append(
            subprocess.Popen(
                start, cwd=elsewhere, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
        )
        yield address
    finally:
        for proc in reversed(procs):
            proc.terminate()
            proc.wait(timeout=30)


@pytest.mark.slow
def test_migrate_on_a_running_scheduler(tmp_path, scheduler):
    """Relative paths given to the command are found by a worker in another directory."""
    shutil.copytree(LEGACY / "sparse", tmp_path / "draft.zarr")
    proc = run("migrate", "draft.zarr", "s.zarr", "--scheduler", scheduler, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("migrated draft.zarr to s.zarr: 1 array in 1 group")
    assert not (tmp_path / "elsewhere" / "s.zarr").exists()
    same_as_source(tmp_path / "s.zarr", LEGACY / "sparse")


@pytest.mark.slow
def test_info_and_inventory_on_a_running_scheduler(tmp_path, scheduler, sparse_store):
    """Past shardwise.inventory-batch stored shards the index reads are dask tasks: a
    worker in another directory finds the store given by a relative path."""
    shutil.copytree(sparse_store, tmp_path / "sparse.zarr")
    env = {"DASK_SHARDWISE__INVENTORY_BATCH": "1"}  # a task per stored shard
    args = ["--scheduler", scheduler, "--json"]
    proc = run("info", "sparse.zarr", *args, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert [(a["shards_present"], a["chunks_present"]) for a in doc["arrays"]] == [
        (3, 27),
        (4, 40),
        (1, 1),
    ]
    assert doc["store"] == f"file://{tmp_path / 'sparse.zarr'}"  # made absolute
    proc = run("inventory", "sparse.zarr", "--var", "temperature", *args, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert (doc["shards_present"], doc["chunks_present"], doc["requests"]) == (3, 27, 4)
    assert not (tmp_path / "elsewhere" / "sparse.zarr").exists()


def test_storage_options_reach_an_s3_endpoint(tmp_path):
    pytest.importorskip("moto.server")
    pytest.importorskip("s3fs")
    from s3server import KEY, REGION, SECRET, S3Server, isolated_aws_environment

    with S3Server(tmp_path) as server, isolated_aws_environment(server.endpoint, tmp_path):
        bucket = server.new_bucket()
        url = f"s3://{bucket}/c.zarr"
        options = [
            f"endpoint_url={server.endpoint}",  # not JSON: a string
            f"key={KEY}",
            f"secret={SECRET}",
            f'client_kwargs={{"region_name": "{REGION}"}}',  # JSON: a dict
            "anon=false",  # JSON: a bool
        ]
        dst_args = [a for o in options for a in ("--dst-storage-option", o)]
        proc = run("migrate", LEGACY / "compressors", url, *dst_args)
        assert proc.returncode == 0, proc.stderr
        assert "zlib/c/1/1" in {k.removeprefix("c.zarr/") for k in server.keys(bucket)}
        src_args = [a for o in options for a in ("--storage-option", o)]
        proc = run("verify", url, "--json", *src_args)
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["shards"] == 20
        proc = run("verify", f"s3://{bucket}/nothing.zarr", *src_args)
        assert_error_line(proc, "no Zarr v3 group or array here")


# -- info -----------------------------------------------------------------------------------
def test_info_text_and_json(sparse_store):
    proc = run("info", sparse_store)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    lines = proc.stdout.splitlines()
    assert lines[:5] == [
        f"store    file://{sparse_store}",
        "format   Zarr v3",
        "group    /",
        "groups   1: /",
        "arrays   3",
    ]
    assert "  stored   3 of 4 shards, 27 of 40 inner chunks (32.5% absent)" in lines
    proc = run("info", sparse_store, "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc == shardwise.info(sparse_store).to_dict()  # the library's, as it is
    assert (doc["format"], doc["group"], doc["groups"]) == ("Zarr v3", "", [""])
    by = {a["path"]: a for a in doc["arrays"]}
    assert list(by) == ["temperature", "time", "x"]
    t = by["temperature"]
    assert (t["shard_shape"], t["chunk_shape"], t["error"]) == ([100, 50], [10, 50], None)
    assert (t["shards_present"], t["shards_total"]) == (3, 4)
    assert (t["chunks_present"], t["chunks_total"]) == (27, 40)
    shards = [p for p in (sparse_store / "temperature/c").rglob("*") if p.is_file()]
    stored = sum(p.stat().st_size for p in shards)
    assert t["stored_bytes"] == stored  # chunks and indexes: the shard files
    assert doc["stored_bytes"] == sum(a["stored_bytes"] for a in doc["arrays"])
    assert doc["raw_bytes"] == 400 * 50 * 4 + 400 * 8 + 50 * 8
    # metadata only: no counts
    proc = run("info", sparse_store, "--no-scan", "--json", "--group", "/")
    assert proc.returncode == 0, proc.stderr
    quick = json.loads(proc.stdout)
    assert quick["stored_bytes"] is None and quick["ratio"] is None
    assert [a["shards_total"] for a in quick["arrays"]] == [4, 4, 1]
    assert all(a["chunks_present"] is None for a in quick["arrays"])


def test_info_on_a_damaged_store(good_store, tmp_path):
    """info is a summary: an array whose index cannot be read shows its error, the
    others their counts, and the exit status is 0 (verify is the check: 1)."""
    path = tmp_path / "bad.zarr"
    shutil.copytree(good_store, path)
    flip(path / "temperature/c/2/0", -10)  # in the shard index: its crc32c fails
    proc = run("info", path)
    assert proc.returncode == 0, proc.stderr
    assert (
        "  error    ChecksumError: shard index crc32c mismatch; expected 0x0ec62af5; "
        "found 0xbf7d04c9 (array 'temperature', store key 'temperature/c/2/0')"
    ) in proc.stdout
    assert "  stored   4 of 4 shards, 40 of 40 inner chunks (0.0% absent)" in proc.stdout
    assert "\nbytes " not in proc.stdout  # no total: one array's is unknown
    proc = run("info", path, "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["stored_bytes"] is None and doc["ratio"] is None
    temperature, time_, x = doc["arrays"]
    assert temperature["error"].startswith("ChecksumError: shard index crc32c mismatch")
    assert "store key 'temperature/c/2/0'" in temperature["error"]
    assert temperature["stored_bytes"] is None and temperature["chunks_present"] is None
    assert (time_["error"], time_["chunks_present"], x["error"]) == (None, 40, None)
    # an inventory of that array cannot be made: exit status 2, the key named
    proc = run("inventory", path, "--var", "temperature")
    assert_error_line(proc, "shard index crc32c mismatch", "store key 'temperature/c/2/0'")


def test_info_and_inventory_of_a_draft_store():
    sparse = LEGACY / "sparse"
    proc = run("info", sparse, "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc == shardwise.info(sparse).to_dict()
    assert doc["format"] == "2022 sharding draft"
    [v] = doc["arrays"]
    assert (v["path"], v["shape"], v["shard_shape"], v["chunk_shape"]) == (
        "v",
        [8, 8],
        [4, 4],
        [2, 2],
    )
    assert (v["shards_present"], v["shards_total"], v["chunks_present"]) == (2, 4, 6)
    proc = run("inventory", sparse)  # one array: no --var needed
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[:5] == [
        "array    v  float64 (y: 8, x: 8)",
        f"store    file://{sparse} (2022 sharding draft)",
        "codecs   sharding_indexed(bytes > numcodecs.zlib; index at end: bytes)",
        "shards   (4, 4): 2 of 4 stored (50.0% absent)",
        "inner    (2, 2): 6 of 16 stored (62.5% absent)",
    ]
    # a chunk rewritten in place left its old bytes in the shard, unindexed
    assert "unused   43 B in the objects that no index entry points to" in proc.stdout


def test_info_and_inventory_of_a_v2_store(v2_store):
    proc = run("info", v2_store)
    assert proc.returncode == 0, proc.stderr
    assert "format   Zarr v2" in proc.stdout
    assert "  chunks   (10, 50) (unsharded)\n  stored   40 of 40 chunks (0.0% absent)" in (
        proc.stdout
    )
    proc = run("inventory", v2_store, "--var", "/temperature", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    expected = shardwise.inventory(v2_store, "temperature").attrs
    assert doc == {**expected, "out": None}
    assert (doc["format"], doc["sharded"], doc["index_location"]) == ("Zarr v2", False, None)
    assert (doc["chunks_present"], doc["shards_present"], doc["chunk_shape"]) == (40, 40, [10, 50])
    files = [p for p in (v2_store / "temperature").iterdir() if not p.name.startswith(".")]
    assert doc["stored_bytes"] == sum(p.stat().st_size for p in files)
    assert doc["requests"] == 1  # the listing gives the sizes of local files


# -- inventory ------------------------------------------------------------------------------
def test_inventory_tables(sparse_store, tmp_path):
    """--out writes one row per inner chunk, stored or not; its stored_bytes add up to
    the summary's."""
    csv = tmp_path / "t.csv"
    proc = run("inventory", sparse_store, "--var", "temperature", "--out", csv)
    assert proc.returncode == 0, proc.stderr
    assert "inner    (10, 50): 27 of 40 stored (32.5% absent)" in proc.stdout
    assert proc.stdout.endswith(f"\ntable    written to {csv}\n") and proc.stderr == ""
    table = pd.read_csv(csv)
    assert list(table.columns[:3]) == ["time_chunk", "x_chunk", "stored_bytes"]
    assert len(table) == 40 and table["present"].sum() == 27
    assert list(table["time_start"]) == list(range(0, 400, 10))
    assert (table["stored_bytes"] == 0).tolist() == [False] * 10 + [True] * 13 + [False] * 17

    out = tmp_path / "t.zarr"
    proc = run("inventory", sparse_store, "--var", "temperature", "--out", out, "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["out"] == str(out)
    assert (doc["chunks_total"], doc["chunks_present"], doc["shards_present"]) == (40, 27, 3)
    assert int(table["stored_bytes"].sum()) == doc["stored_bytes"]
    assert doc["total_bytes"] == doc["stored_bytes"] + doc["index_bytes"]
    back = xr.open_zarr(out, consolidated=False).load()
    assert dict(back.sizes) == {"time_chunk": 40, "x_chunk": 1}
    assert int(back.stored_bytes.sum()) == doc["stored_bytes"]
    assert back.stored_bytes.values.ravel().tolist() == table["stored_bytes"].tolist()
    assert back.attrs["chunks_present"] == 27

    # an existing --out is refused before the scan (a store there would be replaced)
    before = csv.read_bytes()
    proc = run("inventory", sparse_store, "--var", "temperature", "--out", csv)
    assert_error_line(proc, "the --out file exists already", repr(str(csv)))
    assert csv.read_bytes() == before
    proc = run("inventory", sparse_store, "--var", "temperature", "--out", sparse_store)
    assert_error_line(proc, "the --out file exists already")
    assert shardwise.info(sparse_store).arrays[0].chunks_present == 27  # still there


def test_inventory_refusals(good_store, tmp_path):
    nc = tmp_path / "t.nc"
    which, nope, nothing, proc = run_all(
        ["inventory", good_store],  # three arrays: which one?
        ["inventory", good_store, "--var", "nope"],
        ["inventory", tmp_path / "nothing.zarr", "--json"],
        ["inventory", good_store, "--var", "temperature", "--out", nc],
    )
    assert_error_line(which, "say which array", "['temperature', 'time', 'x']")
    assert_error_line(nope, "no such array", "'nope'", "['temperature', 'time', 'x']")
    assert_error_line(nothing, "no Zarr group here", "nothing.zarr does not exist")
    if any(importlib.util.find_spec(m) for m in ("h5netcdf", "netCDF4")):
        assert proc.returncode == 0, proc.stderr
        assert int(xr.open_dataset(nc).stored_bytes.sum()) > 0
    else:
        assert_error_line(proc, "writing a .nc table needs h5netcdf or netCDF4")
        assert not nc.exists()


# -- reshard --------------------------------------------------------------------------------
def test_reshard_a_v2_store(v2_store, tmp_path):
    """Zarr v2 written by xarray: repacked (new shards around the source's chunks), then
    with --overwrite re-encoded (new inner chunks and codec); both open like the
    source."""
    source = xr.open_zarr(v2_store, consolidated=False).load()
    dst = tmp_path / "r.zarr"
    proc = run("reshard", v2_store, dst, "--shards", "time=100")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    lines = proc.stdout.splitlines()
    assert lines[:4] == [
        f"resharded {v2_store} to {dst}",
        "  3 arrays in 1 group: 2 repacked, 1 re-encoded",
        "  shards: 9 written, 0 already there (of 9)",  # temperature, time: 4; x: 1
        "  inner chunks: 41 moved as bytes, 4 re-encoded",
    ]
    assert lines[5:] == [
        "  temperature: repacked (chunks moved as bytes)",
        "  time: re-encoded",  # one source chunk of 400 split into inner chunks of 100
        "  x: repacked (chunks moved as bytes)",
    ]
    xr.testing.assert_identical(xr.open_zarr(dst, consolidated=False).load(), source)

    args = ["--shards", "time=200", "--chunks", "time=25", "--codec", "zstd:5", "--json"]
    proc = run("reshard", v2_store, dst, *args, "--overwrite")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert (doc["source"], doc["destination"]) == (str(v2_store), str(dst))
    assert doc["arrays"] == ["temperature", "time", "x"] and doc["groups"] == ["/"]
    assert (doc["repacked"], doc["reencoded"], doc["copied"]) == ([], doc["arrays"], [])
    assert (doc["shards"], doc["shards_written"], doc["shards_skipped"]) == (5, 5, 0)
    assert (doc["chunks_repacked"], doc["chunks_reencoded"]) == (0, 16 + 16 + 1)
    assert doc["bytes_read"] == 400 * 50 * 4 + 400 * 8 + 50 * 8  # decoded values
    assert sorted(p.name for p in (dst / "temperature/c").iterdir()) == ["0", "1"]
    back = xr.open_zarr(dst, consolidated=False)
    assert back.temperature.encoding["shards"] == (200, 50)
    assert back.temperature.encoding["chunks"] == (25, 50)
    assert back.temperature.encoding["compressors"] == (ZstdCodec(level=5),)
    xr.testing.assert_identical(back.load(), source)


def test_reshard_resume(v2_store, tmp_path):
    dst = tmp_path / "r.zarr"
    assert run("reshard", v2_store, dst, "--shards", "time=100").returncode == 0
    before = sorted((p.as_posix(), p.stat().st_mtime_ns) for p in dst.rglob("*"))
    proc = run("reshard", v2_store, dst, "--shards", "time=100")
    assert_error_line(proc, "the destination holds Zarr data already", "--resume", "--overwrite")
    assert sorted((p.as_posix(), p.stat().st_mtime_ns) for p in dst.rglob("*")) == before

    (dst / "temperature/c/2/0").unlink()  # an interrupted run: --resume completes it
    proc = run("reshard", v2_store, dst, "--shards", "time=100", "--resume", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert (doc["shards"], doc["shards_written"], doc["shards_skipped"]) == (9, 1, 8)
    assert (doc["chunks_repacked"], doc["chunks_reencoded"]) == (10, 0)
    source = xr.open_zarr(v2_store, consolidated=False).load()
    xr.testing.assert_identical(xr.open_zarr(dst, consolidated=False).load(), source)


def test_reshard_refusals(v2_store, good_store, tmp_path):
    dst = tmp_path / "r.zarr"
    multiple, dim, var, nothing, both = run_all(
        ["reshard", v2_store, dst, "--shards", "time=25", "--chunks", "time=10"],
        ["reshard", v2_store, dst, "--shards", "depth=10"],
        ["reshard", v2_store, dst, "--var", "nope"],
        ["reshard", tmp_path / "nothing.zarr", dst],
        ["reshard", v2_store, dst, "--resume", "--overwrite"],
    )
    assert_error_line(
        multiple, "the shard size is not a multiple of the inner chunk size", "found 25"
    )
    assert_error_line(dim, "shards names a dimension no array has", "'depth'")
    assert_error_line(var, "variables names arrays the source does not have", "['nope']")
    assert_error_line(nothing, "no Zarr group here")
    assert both.returncode == 2 and "--resume and --overwrite exclude each other" in both.stderr
    assert not dst.exists()  # refused before writing
    # resuming with other sizes than the destination was made with
    assert run("reshard", good_store, dst, "--var", "x").returncode == 0
    proc = run("reshard", good_store, dst, "--var", "x", "--chunks", "x=10", "--resume")
    assert_error_line(proc, "not made by a reshard with these arguments", "array 'x'")


def test_reshard_v3_and_draft_sources(good_store, tmp_path):
    dst = tmp_path / "v3.zarr"
    proc = run("reshard", good_store, dst, "--shards", "time=200", "--var", "temperature")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[1:3] == [
        "  1 array in 1 group: 1 repacked, 0 re-encoded",
        "  shards: 2 written, 0 already there (of 2)",
    ]
    back = xr.open_zarr(dst, consolidated=False)
    assert back.temperature.encoding["shards"] == (200, 50)
    source = xr.open_zarr(good_store, consolidated=False)
    xr.testing.assert_identical(back.temperature.variable, source.temperature.variable)
    assert "time" not in back.variables  # --var: that array only

    dst = tmp_path / "draft.zarr"
    proc = run("reshard", LEGACY / "hierarchy", dst, "--group", "deep", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert (doc["arrays"], doc["groups"]) == (["inside/flags"], ["/", "inside"])
    source = xr.open_datatree(LEGACY / "hierarchy", engine="shardwise", group="deep").load()
    back = xr.open_datatree(dst, engine="zarr", consolidated=False).load()
    xr.testing.assert_equal(back, source)
    assert run("verify", dst, "--decode").returncode == 0


# -- docs/cli.md shows what the commands print ---------------------------------------------
def documented(command: str, occurrence: int = 0) -> str:
    """What docs/cli.md shows ``$ command`` printing (its ``occurrence``-th time): the
    lines after it in a console block, up to the next ``$`` line or the block's end."""
    shown = []
    for block in re.findall(r"```console\n(.*?)```", DOCS.read_text(), re.S):
        lines = block.splitlines()
        for i, line in enumerate(lines):
            if line == f"$ {command}":
                rest = list(itertools.takewhile(lambda x: not x.startswith("$ "), lines[i + 1 :]))
                shown.append("".join(f"{x}\n" for x in rest))
    assert len(shown) > occurrence, f"docs/cli.md shows `$ {command}` {len(shown)} times"
    return shown[occurrence]


def test_docs_show_the_real_version():
    """(The help of each command is the generated reference, made from the same click
    commands: tests/test_docs.py checks it names every command and option.)"""
    command = "shardwise --version"
    proc = run(*command.split()[1:], env={"COLUMNS": "80"})
    assert proc.returncode == 0
    assert proc.stdout == documented(command)


def test_docs_show_real_migrations(tmp_path):
    shutil.copytree(LEGACY / "compressors", tmp_path / "draft.zarr")
    for command in ("shardwise migrate draft.zarr migrated.zarr",):
        proc = run(*shlex.split(command)[1:], cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout == documented(command)
    command = "shardwise migrate draft.zarr migrated.zarr"  # again: refused
    proc = run(*shlex.split(command)[1:], cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr == documented(command, 1)


def test_docs_show_real_info_and_inventory(sparse_store, v2_store, tmp_path):
    shutil.copytree(sparse_store, tmp_path / "sparse.zarr")
    shutil.copytree(v2_store, tmp_path / "v2.zarr")
    ok = [
        "shardwise info sparse.zarr",
        "shardwise info v2.zarr --no-scan",
        "shardwise inventory sparse.zarr --var temperature --out temperature.csv",
    ]
    refused = [
        "shardwise inventory sparse.zarr",
        "shardwise inventory sparse.zarr --var temperature --out temperature.nc",
    ]
    commands = ok + refused
    procs = run_all(*(shlex.split(c)[1:] for c in commands), cwd=tmp_path)
    for command, proc in zip(commands, procs, strict=True):
        if command in ok:
            assert proc.returncode == 0, proc.stderr
            assert proc.stdout == documented(command)
        elif not command.endswith(".nc") or not any(
            importlib.util.find_spec(m) for m in ("h5netcdf", "netCDF4")
        ):
            assert proc.returncode == 2
            assert proc.stderr == documented(command)
    head = (tmp_path / "temperature.csv").read_text().splitlines(keepends=True)[:4]
    assert "".join(head) == documented("head -n 4 temperature.csv")


def test_docs_show_real_reshards(v2_store, tmp_path):
    shutil.copytree(v2_store, tmp_path / "v2.zarr")
    repack = "shardwise reshard v2.zarr resharded.zarr --shards time=100"
    reencode = (
        "shardwise reshard v2.zarr reencoded.zarr --shards time=200 --chunks time=25 "
        "--codec zstd:5 --json"
    )
    misfit = "shardwise reshard v2.zarr bad.zarr --shards time=25 --chunks time=10"
    procs = run_all(*(shlex.split(c)[1:] for c in (repack, reencode, misfit)), cwd=tmp_path)
    for command, proc in zip((repack, reencode), procs[:2], strict=True):
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout == documented(command)
    assert procs[2].returncode == 2 and procs[2].stderr == documented(misfit)
    proc = run(*shlex.split(repack)[1:], cwd=tmp_path)  # again: refused
    assert proc.returncode == 2 and proc.stderr == documented(repack, 1)
    assert documented("rm resharded.zarr/temperature/c/2/0") == ""
    (tmp_path / "resharded.zarr/temperature/c/2/0").unlink()
    resume = f"{repack} --resume"
    proc = run(*shlex.split(resume)[1:], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == documented(resume)
    source = xr.open_zarr(v2_store, consolidated=False).load()
    for name in ("resharded.zarr", "reencoded.zarr"):
        xr.testing.assert_identical(xr.open_zarr(tmp_path / name).load(), source)


# -- option values --------------------------------------------------------------------------
def test_parse_storage_options():
    assert parse_storage_options(
        [
            "anon=true",
            'client_kwargs={"endpoint_url": "http://127.0.0.1:5555"}',
            "profile=prod",
            "retries=3",
            'tag="true"',
            "token=",
            "url=a=b",
            "profile=dev",
        ]
    ) == {
        "anon": True,
        "client_kwargs": {"endpoint_url": "http://127.0.0.1:5555"},
        "profile": "dev",  # the last one wins
        "retries": 3,
        "tag": "true",
        "token": "",
        "url": "a=b",
    }
    for bad in ("anon", "=true", ""):
        with pytest.raises(ValueError, match="expected KEY=VALUE"):
            parse_storage_options([bad])


def test_parse_sizes():
    assert parse_sizes("time=100,y=512") == {"time": 100, "y": 512}
    assert parse_sizes(["time=100", "y = 512 , x=1"]) == {"time": 100, "y": 512, "x": 1}
    assert parse_sizes("auto") == "auto"
    assert parse_sizes(["dask"], words=("auto", "dask")) == "dask"
    assert parse_sizes([]) is None
    for bad, says in [
        ("time", "expected 'auto' or DIM=SIZE"),
        ("time=ten", "found 'time=ten'"),
        ("time=-1", "found 'time=-1'"),
        ("time=0", "sizes are positive"),
        ("time=10,", "found ''"),
        ("time=10,time=20", "'time' given twice"),
        ("auto,time=10", "'auto' cannot be combined"),
        ("dask", "expected 'auto' or DIM=SIZE"),
    ]:
        with pytest.raises(ValueError, match=says):
            parse_sizes(bad)


def test_parse_codec():
    assert parse_codec("zstd:3") == ZstdCodec(level=3)
    assert parse_codec("zstd") == ZstdCodec()
    assert parse_codec("ZSTD:-5") == ZstdCodec(level=-5)
    assert parse_codec("gzip:9") == GzipCodec(level=9)
    assert parse_codec("blosc:7") == BloscCodec(clevel=7)
    assert parse_codec("blosc") == BloscCodec()
    for bad, says in [
        ("lz4", "expected one of zstd, blosc, gzip, found 'lz4'"),
        ("gzip:10", "gzip levels are integers from 0 to 9, found '10'"),
        ("blosc:-1", "blosc levels are integers from 0 to 9"),
        ("zstd:23", "zstd levels are integers from -131072 to 22"),
        ("zstd:fast", "found 'fast'"),
        ("", "found ''"),
    ]:
        with pytest.raises(ValueError, match=says):
            parse_codec(bad)


@click.command()
@sizes_option("--shards", words=("auto", "dask"))
@sizes_option("--chunks")
@codec_option("--codec")
def _echo(shards, chunks, codec):
    click.echo(repr((shards, chunks, codec)))


@pytest.mark.parametrize(
    "args, parsed",
    [
        ([], (None, None, None)),
        (["--shards", "time=100,y=512"], ({"time": 100, "y": 512}, None, None)),
        (["--shards", "time=100", "--shards", "y=512"], ({"time": 100, "y": 512}, None, None)),
        (["--shards", "dask", "--chunks", "auto"], ("dask", "auto", None)),
        (["--codec", "zstd:3"], (None, None, ZstdCodec(level=3))),
    ],
)
def test_size_and_codec_options(args, parsed):
    result = CliRunner().invoke(_echo, args)
    assert result.exit_code == 0, result.output
    assert result.stdout == f"{parsed!r}\n"


@pytest.mark.parametrize(
    "args, says",
    [
        (["--shards", "time"], "Invalid value for '--shards': expected 'auto', 'dask' or DIM=SIZE"),
        (["--chunks", "dask"], "Invalid value for '--chunks': expected 'auto' or DIM=SIZE"),
        (["--shards", "t=1", "--shards", "t=2"], "dimension 't' given twice"),
        (["--codec", "zstd:99"], "Invalid value for '--codec': zstd levels are integers"),
        (["--codec", "snappy"], "expected one of zstd, blosc, gzip, found 'snappy'"),
    ],
)
def test_bad_size_and_codec_options_exit_2(args, says):
    result = CliRunner().invoke(_echo, args)
    assert result.exit_code == 2
    assert says in result.stderr


# -- what every command shares --------------------------------------------------------------
@click.command()
@click.argument("what")
@shared_options(computes=True)
def _fail(run, what):
    if what == "interrupt":
        raise KeyboardInterrupt
    if what == "shardwise":
        raise shardwise.errors.CorruptShardError(
            "bad entry\nover two lines", array="v", key="v/c/0", advice="Rewrite it."
        )
    if what == "other":
        raise RuntimeError("a bug")  # not an input error: a traceback, as for any bug
    run.emit(
        "text", {"json": True, "progress": run.progress, "options": run.storage_options("s3://b")}
    )
    return 3


def test_errors_of_input_are_one_line_and_exit_2():
    result = CliRunner().invoke(_fail, ["shardwise"])
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr == (
        "shardwise: error: bad entry over two lines (array 'v', store key 'v/c/0'). Rewrite it.\n"
    )
    result = CliRunner().invoke(_fail, ["interrupt"])
    assert (result.exit_code, result.stderr) == (130, "shardwise: interrupted\n")
    result = CliRunner().invoke(_fail, ["other"])
    assert isinstance(result.exception, RuntimeError)
    result = CliRunner().invoke(_fail, ["ok", "--storage-option", "anon=true"])
    assert (result.exit_code, result.stdout) == (3, "text\n")  # the command's own status
    result = CliRunner().invoke(_fail, ["ok", "--json", "--storage-option", "anon=true"])
    doc = {"json": True, "progress": False, "options": {"anon": True}}  # no terminal here
    assert json.loads(result.stdout) == doc


def test_docs_show_real_verifies(good_store, tmp_path):
    """The verify examples: a good store, one with a flipped byte in a shard index, no
    store at all; each command's output and exit status as docs/cli.md shows them."""
    shutil.copytree(good_store, tmp_path / "weather.zarr")
    shutil.copytree(good_store, tmp_path / "damaged.zarr")
    flip(tmp_path / "damaged.zarr/temperature/c/2/0", -10)
    cases = {
        "shardwise verify weather.zarr": (0, "stdout"),
        "shardwise verify damaged.zarr": (1, "stdout"),
        "shardwise verify damaged.zarr --json": (1, "stdout"),
        "shardwise verify nowhere.zarr": (2, "stderr"),
        "shardwise verify weather.zarr --storage-option anon=true": (2, "stderr"),
    }
    procs = run_all(*(shlex.split(c)[1:] for c in cases), cwd=tmp_path)
    for (command, (status, stream)), proc in zip(cases.items(), procs, strict=True):
        assert proc.returncode == status, (command, proc.stderr)
        # click 8.2.0 names the first help option (-h) in its hint, 8.5 names --help
        shown = getattr(proc, stream).replace(" -h' for help.", " --help' for help.")
        assert shown == documented(command), command
    # the statuses the docs show with `echo $?` after the first command of each kind
    assert [documented("echo $?", i).strip() for i in range(3)] == ["0", "1", "2"]


def test_docs_show_real_migration_refusals_and_resumption(good_store, tmp_path):
    shutil.copytree(LEGACY / "compressors", tmp_path / "draft.zarr")
    shutil.copytree(good_store, tmp_path / "weather.zarr")
    assert run("migrate", "draft.zarr", "migrated.zarr", cwd=tmp_path).returncode == 0
    command = "shardwise verify migrated.zarr"
    proc = run(*shlex.split(command)[1:], cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout == documented(command)
    command = "shardwise migrate weather.zarr w.zarr"
    proc = run(*shlex.split(command)[1:], cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr == documented(command)
    shutil.copytree(tmp_path / "migrated.zarr", tmp_path / "partial.zarr")
    root = tmp_path / "partial.zarr"
    shard = next(
        p for p in sorted(root.rglob("*")) if p.is_file() and "c" in p.relative_to(root).parts
    )
    shard.unlink()  # an interrupted run: one shard missing
    command = "shardwise migrate draft.zarr partial.zarr --mode a"
    proc = run(*shlex.split(command)[1:], cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout == documented(command)
    same_as_source(tmp_path / "partial.zarr", tmp_path / "draft.zarr")


def test_docs_show_real_object_store_runs(s3, tmp_path):
    """The S3 examples against moto's server: the docs' port (5555) and bucket (archive)
    are the server's; the output is the documented one."""
    shutil.copytree(LEGACY / "compressors", tmp_path / "draft.zarr")
    s3.boto3().create_bucket(Bucket="archive")
    documented_endpoint = "http://127.0.0.1:5555"
    for command in (
        "shardwise migrate draft.zarr s3://archive/migrated.zarr "
        f"--dst-storage-option endpoint_url={documented_endpoint}",
        f"shardwise verify s3://archive/migrated.zarr --storage-option endpoint_url={documented_endpoint} "
        """--storage-option 'client_kwargs={"region_name": "us-east-1"}'""",
    ):
        real = command.replace(documented_endpoint, s3.endpoint)
        proc = run(*shlex.split(real)[1:], cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout == documented(command), command


@pytest.mark.slow
def test_docs_show_real_cluster_runs(scheduler, tmp_path):
    """The cluster examples: --workers 4 (a LocalCluster for the run), --scheduler (the
    docs' address is this test's scheduler), and a scheduler that does not answer."""
    shutil.copytree(LEGACY / "compressors", tmp_path / "draft.zarr")
    local = "shardwise migrate draft.zarr local-cluster.zarr --workers 4"
    remote = "shardwise migrate draft.zarr on-cluster.zarr --scheduler tcp://127.0.0.1:8786 --json"
    proc = run(*shlex.split(local)[1:], cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout == documented(local), proc.stderr
    real = remote.replace("tcp://127.0.0.1:8786", scheduler)
    proc = run(*shlex.split(real)[1:], cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout == documented(remote), proc.stderr
    timeout = "DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT=2s shardwise migrate draft.zarr c6.zarr --scheduler tcp://127.0.0.1:1"
    variable, command = timeout.split(" ", 1)
    key, value = variable.split("=")
    proc = run(*shlex.split(command)[1:], cwd=tmp_path, env={key: value})
    assert proc.returncode == 2 and proc.stderr == documented(timeout)
    assert not (tmp_path / "c6.zarr").exists()


def test_reshard_names_a_document_with_a_shard_no_inner_chunk_divides(tmp_path):
    from test_reshard import damaged_source

    src = damaged_source(tmp_path / "src.zarr")
    proc = run("reshard", src, tmp_path / "dst.zarr", "--shards", "t=10")
    assert proc.returncode == 2, proc.stderr  # the input's fault (docs/cli.md)
    assert "'v'" in proc.stderr and "v/zarr.json" in proc.stderr, proc.stderr
    assert "not divisible" in proc.stderr and "Traceback" not in proc.stderr


def test_reshard_of_shards_of_two_to_the_62_exits_2(tmp_path):
    from test_reshard import giant_shards

    src = giant_shards(tmp_path / "src.zarr")
    proc = run("reshard", src, tmp_path / "dst.zarr")
    assert proc.returncode == 2, proc.stderr  # the input's fault (docs/cli.md)
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "'v'" in proc.stderr and "v/zarr.json" in proc.stderr, proc.stderr
    assert not (tmp_path / "dst.zarr").exists()
