"""Run shardwise's benchmarks: the one entry point.

Every benchmark answers a question users ask, and is grouped under it:

    reading         whole-array and partial reads against zarr-python, zarrs, tensorstore
                    and the codec floor; reads over HTTP at a remote store's latency;
                    fan-out reads; where a read task's time goes
    writing         write throughput and memory; irregular dask chunks; one big shard;
                    what misaligned chunks cost other writers
    object-stores   faults of an object store (resets, throttling, lost responses);
                    whether an endpoint's conditional puts are atomic
    concurrency     independent writers of one array; readers while another job writes
    scale           graphs of up to a million shards; giant sparse grids
    tools           migrate, reshard and inventory

Usage::

    python benchmarks/run.py --list                  # what there is
    python benchmarks/run.py reading                 # every benchmark of a question
    python benchmarks/run.py inventory giant_grid    # benchmarks by name (no benchmark
                                                     # is named as a question)
    python benchmarks/run.py inventory -- --shards 100 1000   # arguments for the script
    python benchmarks/run.py reshard:memory          # a named variant of a benchmark
    python benchmarks/run.py --quick all             # a smoke run of everything, small sizes

Each benchmark runs as a fresh process of this interpreter (its own script in this
folder, which also runs alone: ``python benchmarks/<name>.py --help``), one after the
other, on the machine as it is: run them on an otherwise idle machine. What a benchmark
prints is shown as it comes and kept, with a header naming the command, the date, the
commit, the machine and the package versions, in ``benchmarks/results/<name>.txt``
(``--results DIR`` elsewhere; a ``--quick`` run or a run with script arguments keeps
nothing unless ``--results`` is given). A benchmark may have named variants, other runs
worth keeping (the same script with other arguments, such as stores in memory): they run
with their question and with ``all`` (but for ``--quick``, which smoke-runs each script
once), alone as ``<name>:<variant>``, and are kept in
``benchmarks/results/<name>-<variant>.txt``. The figures in ``docs/benchmarks/`` are copied
from those files, and ``tests/test_benchmarks.py`` checks that each table's numbers are
in the file its section names.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results"

# the stores of the variants "memory": a tmpfs, where a write waits for no disk
SHM = "/dev/shm/shardwise"

QUESTIONS = ("reading", "writing", "object-stores", "concurrency", "scale", "tools")


@dataclass(frozen=True)
class Benchmark:
    name: str  # the script: benchmarks/<name>.py
    question: str  # one of QUESTIONS
    title: str  # what it answers, in a line
    quick: tuple[str, ...] = ()  # the script's arguments for a smoke run (small sizes)
    args: tuple[str, ...] = ()  # the script's arguments for the recorded run
    # other recorded runs, selected as <name>:<variant>: (variant, the script's arguments)
    variants: tuple[tuple[str, tuple[str, ...]], ...] = ()

    @property
    def script(self) -> Path:
        return HERE / f"{self.name}.py"

    @property
    def runs(self) -> tuple[Selected, ...]:
        """Its recorded run, then its variants'."""
        return (Selected(self), *(Selected(self, v) for v, _ in self.variants))


@dataclass(frozen=True)
class Selected:
    """One run the command line asks for: a benchmark, with its recorded arguments or
    those of one of its variants."""

    bench: Benchmark
    variant: str = ""

    @property
    def name(self) -> str:  # as selected on the command line
        return f"{self.bench.name}:{self.variant}" if self.variant else self.bench.name

    @property
    def kept(self) -> str:  # the result's file name
        return f"{self.bench.name}-{self.variant}.txt" if self.variant else f"{self.bench.name}.txt"

    @property
    def args(self) -> tuple[str, ...]:
        return dict(self.bench.variants)[self.variant] if self.variant else self.bench.args


BENCHMARKS = (
    # -- reading ---------------------------------------------------------------------------
    Benchmark(
        "zarr_engine_costs",
        "reading",
        "What xarray + zarr-python + dask cost on sharded stores: index reads per shard, "
        "values lost by misaligned writes",
    ),
    Benchmark(
        "peers",
        "reading",
        "Whole-array reads and round trips against zarr-python, zarrs, tensorstore and "
        "the codec floor",
        quick=("--data", "u2-3d", "--edge", "256", "--runs", "1"),
        args=("--data", "u2-3d,f4-2d,f4-3d", "--runs", "7"),
    ),
    Benchmark(
        "read_throughput",
        "reading",
        "Full-array read throughput on a cluster against zarr-python, tensorstore and zstd",
        quick=("--shape", "2d", "--size-mib", "128", "--repeats", "1"),
        args=("--repeats", "3"),
    ),
    Benchmark(
        "read_fanout",
        "reading",
        "Region reads over many shards with latency, and one big shard split across workers",
        quick=("--quick",),
    ),
    Benchmark(
        "single_shard",
        "reading",
        "One shard read whole on one thread against the decode floor and a compiled reader",
        quick=("--shape", "2d", "--repeats", "1"),
    ),
    Benchmark(
        "remote_read",
        "reading",
        "Reads over HTTP at an object store's latency and bandwidth, beside tensorstore, "
        "zarr-python, zarrs and xarray",
        quick=("--quick",),
        variants=(
            ("large", ("--data", "large", "--runs", "1")),
            ("slow", ("--rtt-ms", "100", "--runs", "1")),
            ("tail", ("--tail", "0.02:1000", "--workloads", "100 points", "--runs", "1")),
            ("stores", ("--store", "s3,gcs,azure", "--runs", "1")),
        ),
    ),
    Benchmark(
        "task_profile",
        "reading",
        "Where a read task's and a write task's time goes, per shard",
        quick=("--shape", "2d", "--size-mib", "128", "--rounds", "1"),
    ),
    Benchmark(
        "decode_bomb",
        "reading",
        "Peak memory of reading an array one of whose inner chunks is a decompression bomb",
        quick=("--bomb-gib", "1", "--repeats", "1"),
    ),
    # -- writing ---------------------------------------------------------------------------
    Benchmark(
        "write_throughput",
        "writing",
        "Write throughput and worker memory against Dataset.to_zarr, zarr-python, "
        "tensorstore and zstd",
        quick=(
            "--shape",
            "2d",
            "--size-mib",
            "128",
            "--repeats",
            "1",
            "--part2-size-mib",
            "128",
            "--part2-shard-mib",
            "64",
        ),
        args=("--repeats", "3"),
    ),
    Benchmark(
        "rectilinear",
        "writing",
        "Irregular dask chunks written 1:1 as rectilinear shards, against rechunking first",
        quick=("--repeats", "1"),
        variants=(("memory", ("--repeats", "5", "--data-dir", SHM)),),
    ),
    Benchmark(
        "encode_split",
        "writing",
        "One big shard encoded on many workers against one task per shard",
        quick=("--repeats", "1", "--size-mib", "256"),
    ),
    Benchmark(
        "icechunk_misaligned",
        "writing",
        "Values lost writing misaligned dask chunks into Icechunk, against shardwise",
        quick=("--trials", "1"),
    ),
    # -- object stores ---------------------------------------------------------------------
    Benchmark(
        "fault_matrix",
        "object-stores",
        "Writes and reads through an object store that resets, throttles and loses "
        "responses, against zarr-python + xarray",
        quick=(
            "--trials",
            "1",
            "--rates",
            "0.1",
            "--faults",
            "lost,stall",
            "--clients",
            "s3fs,obstore",
        ),
        args=("--operations", "all", "--clients", "s3fs,obstore"),
    ),
    Benchmark(
        "moto_atomicity",
        "object-stores",
        "Whether an S3 endpoint's conditional puts are atomic under concurrent requests",
        quick=("--tries", "10"),
    ),
    # -- concurrency -----------------------------------------------------------------------
    Benchmark(
        "independent_writers",
        "concurrency",
        "What the guard against other jobs costs one writer, and what it does for several",
        quick=("--repeats", "1", "--rounds", "1"),
        args=("--s3",),
    ),
    Benchmark(
        "reader_consistency",
        "concurrency",
        "What long-lived readers return while another process rewrites shards",
        quick=("--seconds", "2", "--stores", "local"),
    ),
    # -- scale -----------------------------------------------------------------------------
    Benchmark(
        "scaling",
        "scale",
        "Building and running graphs of 1,000 to 1,000,000 shards",
        quick=("--build", "1000", "--run", "1000", "--repeats", "1"),
    ),
    Benchmark(
        "giant_grid",
        "scale",
        "shardwise info on a grid of 10**14 shards: time and memory follow the shards stored",
        quick=("--stored", "1", "10", "--repeats", "1"),
    ),
    # -- tools -----------------------------------------------------------------------------
    Benchmark(
        "migrate",
        "tools",
        "Migrating a store of the 2022 sharding draft against decoding and rewriting it",
        quick=("--repeats", "1", "--compressor", "zstd"),
        args=("--repeats", "5"),
    ),
    Benchmark(
        "reshard",
        "tools",
        "Resharding a Zarr v2 store against xarray's route and a plain copy",
        quick=("--repeats", "1"),
        variants=(("memory", ("--data-dir", SHM, "--repeats", "5")),),
    ),
    Benchmark(
        "inventory",
        "tools",
        "shardwise.inventory on many tiny shards: time and store requests per shard",
        quick=("--shards", "100", "--repeats", "1", "--latency", "0"),
    ),
)
BY_NAME = {b.name: b for b in BENCHMARKS}


def select(names: list[str]) -> list[Selected]:
    """The runs that ``names`` (questions, benchmark names, ``<name>:<variant>`` or
    ``all``) select, in the registry's order (a benchmark before its variants)."""
    chosen: set[Selected] = set()
    for name in names:
        bench, _, variant = name.partition(":")
        if name == "all":
            chosen.update(run for b in BENCHMARKS for run in b.runs)
        elif name in QUESTIONS:
            chosen.update(run for b in BENCHMARKS if b.question == name for run in b.runs)
        elif name in BY_NAME:
            chosen.add(Selected(BY_NAME[name]))
        elif bench in BY_NAME and variant in dict(BY_NAME[bench].variants):
            chosen.add(Selected(BY_NAME[bench], variant))
        elif bench in BY_NAME and variant:
            known = [v for v, _ in BY_NAME[bench].variants]
            raise SystemExit(
                f"run.py: {bench} has no variant {variant!r}; expected one of {known} "
                "(python benchmarks/run.py --list shows them)"
            )
        else:
            raise SystemExit(
                f"run.py: no benchmark or question {name!r}; expected 'all', one of "
                f"{', '.join(QUESTIONS)}, or a name from --list"
            )
    return [run for b in BENCHMARKS for run in b.runs if run in chosen]


def to_run(names: list[str], *, quick: bool) -> list[Selected]:
    """:func:`select`'s runs; a ``--quick`` run smoke-runs each script once, so it keeps
    a variant only when named."""
    runs = select(names)
    if quick:
        runs = [run for run in runs if not run.variant or run.name in names]
    return runs


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


def header(
    run: Selected, command: str, script_args: list[str], hardware: str, software: str
) -> str:
    bench = run.bench
    script = " ".join(["python", f"benchmarks/{bench.name}.py", *script_args])
    return "\n".join(
        [
            f"# benchmark: {run.name} ({bench.question}): {bench.title}",
            f"# command: {command}",
            f"# runs: {script}",
            f"# date: {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC; commit: {commit()}",
            f"# machine: {hardware}",
            f"# versions: {software}",
        ]
    )


def run_one(run: Selected, script_args: list[str], command: str, out: Path | None) -> int:
    from common import describe

    hardware, software = describe()
    head = header(run, command, script_args, hardware, software)
    print(head, flush=True)
    started = time.perf_counter()
    env = os.environ | {"PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, str(run.bench.script), *script_args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines = []
    assert proc.stdout is not None
    for line in proc.stdout:
        sys.stdout.write(line)
        sys.stdout.flush()
        lines.append(line)
    code = proc.wait()
    elapsed = time.perf_counter() - started
    tail = f"# exit status {code} after {elapsed:.0f} s"
    print(tail, flush=True)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / run.kept).write_text(head + "\n" + "".join(lines) + tail + "\n")
    return code


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    script_args: list[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, script_args = argv[:at], argv[at + 1 :]
    parser = argparse.ArgumentParser(
        prog="python benchmarks/run.py",
        description="Run shardwise's benchmarks by question or by name.",
        epilog="Arguments after -- go to each selected script (see its --help).",
    )
    parser.add_argument("names", nargs="*", help="'all', questions or benchmark names")
    parser.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run")
    parser.add_argument(
        "--results", type=Path, help=f"keep the outputs here (default {RESULTS.relative_to(ROOT)})"
    )
    args = parser.parse_args(argv)
    if args.list or not args.names:
        for question in QUESTIONS:
            print(f"{question}:")
            for b in BENCHMARKS:
                if b.question == question:
                    print(f"  {b.name:<20} {b.title}")
                    for variant, variant_args in b.variants:
                        shown = f"{b.name}:{variant}"
                        print(f"  {shown:<20} the same, {' '.join(variant_args)}")
        return 0
    out = args.results
    if out is None and not args.quick and not script_args:
        out = RESULTS
    failed = []
    for run in to_run(args.names, quick=args.quick):
        chosen = script_args or list(run.bench.quick if args.quick else run.args)
        words = ["python benchmarks/run.py", *(["--quick"] if args.quick else []), run.name]
        command = " ".join(words + (["--", *script_args] if script_args else []))
        if run_one(run, chosen, command, out) != 0:
            failed.append(run.name)
        print(flush=True)
    if failed:
        print(f"run.py: failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    raise SystemExit(main())
