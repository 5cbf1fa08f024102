"""Run one benchmark script and keep what it printed, with a header saying how, when and
on what it was measured.

    python benchmarks/run.py benchmarks/SCRIPT.py [ARGS...]              # shown as it comes
    python benchmarks/run.py --keep NAME benchmarks/SCRIPT.py [ARGS...]  # and kept

``benchmarks/SCRIPT.py`` (or ``SCRIPT``) is a script of this folder, which also runs alone
(``python benchmarks/SCRIPT.py --help`` lists its arguments), run with ``ARGS`` as a fresh
process of this interpreter, on the machine as it is: run it on an otherwise idle
machine. The header names the command, the date, the commit, the machine and the package
versions; the last line, the exit status and the time it took. ``--keep`` takes a name
(kept as ``benchmarks/results/NAME.txt``) or a path ending in ``.txt``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results"


def commit() -> str:
    """The checkout's commit, marked when the tree has changes other than kept results
    ("unknown" outside git)."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
        dirty = subprocess.run(
            # the kept results change as benchmarks run: not a change to the code
            ["git", "status", "--porcelain", "--untracked-files=no", "--", ":!benchmarks/results"],
            cwd=ROOT,
            capture_output=True,
            text=True,
        ).stdout.strip()
    except OSError:
        return "unknown"
    return (head or "unknown") + (" with uncommitted changes" if dirty else "")


def header(command: str) -> str:
    from common import describe

    hardware, software = describe()
    return "\n".join(
        [
            f"# command: {command}",
            f"# date: {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC; commit: {commit()}",
            f"# machine: {hardware}",
            f"# versions: {software}",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python benchmarks/run.py",
        description="Run a benchmark script and keep what it printed, with a header.",
    )
    parser.add_argument("--keep", metavar="NAME", help="keep the output: results/NAME.txt")
    parser.add_argument("script", help="a script of benchmarks/: benchmarks/NAME.py or NAME")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="the script's arguments")
    args = parser.parse_args(argv)
    name = Path(args.script).stem if args.script.endswith(".py") else args.script
    script = HERE / f"{name}.py"
    if name in ("run", "common", "emulators") or not script.is_file():
        parser.error(f"no benchmark script benchmarks/{name}.py")
    keep = None
    if args.keep:
        keep = Path(args.keep) if args.keep.endswith(".txt") else RESULTS / f"{args.keep}.txt"
    words = ["python benchmarks/run.py", *(["--keep", args.keep] if args.keep else [])]
    head = header(" ".join([*words, args.script, *args.args]))
    print(head, flush=True)
    started = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, str(script), *args.args],
        cwd=ROOT,
        env=os.environ | {"PYTHONUNBUFFERED": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:
        sys.stdout.write(line)
        sys.stdout.flush()
        lines.append(line)
    code = proc.wait()
    tail = f"# exit status {code} after {time.perf_counter() - started:.0f} s"
    print(tail, flush=True)
    if keep is not None:
        keep.parent.mkdir(parents=True, exist_ok=True)
        keep.write_text(head + "\n" + "".join(lines) + tail + "\n")
    return code


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    raise SystemExit(main())
