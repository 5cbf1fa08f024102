"""Run the concurrency, cluster and object-store tests many times under load.

A test that passes on an idle machine may fail or hang on CI's two busy cores. This
runs a selection of the suite ``--repeat`` times, each run bounded (``--minutes``),
while ``--load`` processes keep the cores busy (each a Python busy loop, ended when the
soak ends, whatever happens), and reports every run: its exit status, its counts and
its time, and the tests that failed. It stops at nothing: a failed or hung run is
recorded and the next one starts.

    .venv/bin/python .ci/soak.py --repeat 20 --load 2 --out soak.json
    .venv/bin/python .ci/soak.py --repeat 5 -- tests/test_concurrency.py -n 2

Exit status 0 when every run passed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

SELECTION = [
    "tests/test_concurrency.py",
    "tests/test_distributed.py",
    "tests/test_faults.py",
    "tests/test_load.py",
    "tests/test_reader_consistency.py",
    "tests/test_lost_responses.py",
    "tests/test_incomplete_append.py",
    "tests/test_s3.py",
    "tests/test_hostile_s3.py",
    "tests/test_faultproxy.py",
    "tests/graph/test_progress.py",
    "tests/xarray/test_staged_write.py",
]
"""The tests that start threads, processes, clusters and servers."""

ROOT = Path(__file__).resolve().parents[1]


def _busy(deadline: float, parent: int) -> None:
    """Keep one core busy until ``deadline``, or until the parent is gone."""
    n = 0
    while time.monotonic() < deadline and os.getppid() == parent:
        for _ in range(100_000):
            n = (n * 1103515245 + 12345) % 2**31


def _summary(output: str) -> dict[str, int]:
    """pytest's last line's counts: {"passed": 12, "failed": 1, ...}."""
    lines = [line for line in output.splitlines() if re.search(r"\d+ (passed|failed|error)", line)]
    if not lines:
        return {}
    return {k: int(n) for n, k in re.findall(r"(\d+) (\w+)", lines[-1])}


def _write(out: Path | None, command: list[str], load: int, runs: list[dict[str, object]]) -> None:
    if out is None:
        return
    record = {
        "command": command,
        "load": load,
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "python": platform.python_version(),
        "runs": runs,
    }
    out.write_text(json.dumps(record, indent=1))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--load", type=int, default=2, help="busy processes beside the tests")
    parser.add_argument("--minutes", type=float, default=20, help="the bound of one run")
    parser.add_argument("--out", type=Path, help="the runs, as JSON")
    parser.add_argument("pytest", nargs="*", help="pytest's arguments (after --)")
    args = parser.parse_args(argv)
    pytest_args = args.pytest or [*SELECTION, "-n", "2"]
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-o",
        "addopts=-ra --strict-markers",
        *pytest_args,
    ]
    bound = args.minutes * 60
    deadline = time.monotonic() + args.repeat * (bound + 90) + 60
    load = [
        multiprocessing.Process(target=_busy, args=(deadline, os.getpid()), daemon=True)
        for _ in range(args.load)
    ]
    runs: list[dict[str, object]] = []
    for p in load:
        p.start()
    try:
        for i in range(1, args.repeat + 1):
            started = time.monotonic()
            try:
                done = subprocess.run(
                    ["timeout", "--signal=INT", "--kill-after=60", f"{bound:.0f}", *command],
                    cwd=ROOT,
                    capture_output=True,
                    text=True,
                    env={**os.environ, "COLUMNS": "300"},
                    timeout=bound + 120,
                    check=False,
                )
                output, status = done.stdout + done.stderr, done.returncode
            except subprocess.TimeoutExpired as e:
                parts = (e.stdout, e.stderr)
                output = "".join(p.decode() if isinstance(p, bytes) else p or "" for p in parts)
                status = -1
            seconds = time.monotonic() - started
            failed = sorted(set(re.findall(r"^(?:FAILED|ERROR) (\S+)", output, re.M)))
            run = {
                "run": i,
                "status": status,
                "hung": status in (124, -1),
                "seconds": round(seconds, 1),
                "counts": _summary(output),
                "failed": failed,
            }
            if status != 0:
                run["tail"] = output[-4000:]
            runs.append(run)
            _write(args.out, command, args.load, runs)  # (after every run: a partial record)
            print(
                f"run {i}/{args.repeat}: exit {status} in {seconds:.0f} s {run['counts']}"
                + (f" failed: {failed}" if failed else ""),
                flush=True,
            )
    finally:
        for p in load:
            p.terminate()
        for p in load:
            p.join(5)
            if p.is_alive():
                p.kill()
    ok = all(r["status"] == 0 for r in runs)
    print(f"{sum(r['status'] == 0 for r in runs)} of {len(runs)} runs passed", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
