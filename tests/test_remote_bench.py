"""benchmarks/remote_read.py runs end to end: its smoke run (``--quick``: a tiny array
served by aiohttp on 127.0.0.1 behind the project's Rust proxy, built here by cargo)
exits 0 and prints its tables, with a row for every reader and the proxy's request
counts, and leaves no process behind; so does ``--quick --store s3`` (moto's server),
``gcs`` (fake-gcs-server) and ``azure`` (Azurite), each where its emulator is installed.

Nothing here times anything: the figures are the benchmark's, never the tests'."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from loaded import module_at

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "remote_read.py"
EMULATORS = module_at(ROOT / "benchmarks" / "emulators.py", "benchmarks_emulators")


def _in_session(sid: int) -> set[int]:
    """The processes of session ``sid`` still running (from /proc; field 6 of stat)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid and fields[0] != "Z":
            found.add(int(entry.name))
    return found


@pytest.mark.parametrize("store", EMULATORS.STORES)
def test_the_quick_run_prints_every_readers_row_and_leaves_nothing_running(store):
    if (reason := EMULATORS.missing(store)) is not None:
        pytest.skip(reason)
    if shutil.which("cargo") is None:
        pytest.fail(
            "cargo (Rust) is not on PATH: benchmarks/remote_read.py builds its proxy "
            "(benchmarks/proxy) with it; install the Rust toolchain"
        )
    flags = ["--quick"] + ([] if store == "http" else ["--store", store])
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPT), *flags],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own session: what it leaves behind is found by it
    )
    try:
        out, err = proc.communicate(timeout=180)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail("remote_read.py --quick ran over 180 s")
    finally:
        left = _in_session(proc.pid)  # its server, its proxy, its readers
        for pid in left:
            os.kill(pid, signal.SIGKILL)
    assert not left, f"left running: {sorted(left)}"
    assert proc.returncode == 0, f"status {proc.returncode}\n{out[-3000:]}\n{err[-3000:]}"
    assert f"command: python benchmarks/remote_read.py {' '.join(flags)}\n" in out
    assert re.search(r"^machine: \d+ cores", out, re.M)

    readers = ["shardwise xarray dask"]
    try:
        import tensorstore  # noqa: F401
    except ImportError:
        pass
    else:
        if store != "azure":  # (it has no Azure driver: its row says n/a)
            readers.insert(0, "tensorstore")
    tables = re.findall(r"^\| reader \| median s \(min-max\) \| requests \|.*$", out, re.M)
    assert len(tables) == 2, out  # two workloads
    for reader in readers:
        rows = re.findall(rf"^\| {re.escape(reader)} \| (\d+\.\d+) \(.*?\) \| (\d+) \|", out, re.M)
        assert len(rows) == 2, (reader, out)
        assert all(int(requests) >= 1 for _, requests in rows)  # the proxy saw its requests
    assert "WRONG" not in out and "failed" not in out
