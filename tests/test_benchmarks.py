"""The benchmark scripts run: each comparison script's smoke run (small sizes, one round)
exits 0 through ``benchmarks/run.py``, which prints it after a header saying how, when and
on what it ran, and keeps it where ``--keep`` says. Their stores go to a temporary folder
(``SHARDWISE_BENCH_DATA``), the tools' and the rectilinear data at an eighth of their size
(``SHARDWISE_BENCH_SMALL``).

Nothing here times anything or checks a figure: the figures are the benchmarks'
(``docs/benchmarks/``), never the tests'. ``remote_read.py``'s smoke runs are
``test_remote_bench.py``'s; the micro-benchmarks are ``tests/benchmarks/``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"

# each script's smoke run: its arguments, and how often it runs: True, in the fast runs
# too; False, in the whole suite (marked slow); "asked", only where asked for with
# SHARDWISE_BENCH_SMOKE=1 (make bench-quick): minutes each on a 2-core machine, their
# code paths tested by the suite itself
SMOKE: dict[str, tuple[tuple[str, ...], bool | str]] = {
    "peers": (("--data", "u2-3d", "--edge", "256", "--runs", "1"), "asked"),
    "read_throughput": (("--shape", "2d", "--size-mib", "128", "--repeats", "1"), "asked"),
    "read_fanout": (("--quick",), False),
    "single_shard": (("--shape", "2d", "--size-mib", "128", "--repeats", "1"), "asked"),
    "task_profile": (("--shape", "2d", "--size-mib", "128", "--rounds", "1"), "asked"),
    "write_throughput": (
        (
            *("--shape", "2d", "--size-mib", "128", "--repeats", "1"),
            *("--part2-size-mib", "128", "--part2-shard-mib", "64"),
        ),
        "asked",
    ),
    "rectilinear": (("--repeats", "1"), False),
    "encode_split": (("--repeats", "1", "--size-mib", "256"), "asked"),
    "independent_writers": (("--quick", "--repeats", "1"), False),
    "scaling": (("--build", "1000", "--run", "1000", "--repeats", "1"), False),
    "giant_grid": (("--stored", "1", "10", "--repeats", "1"), True),
    "migrate": (("--repeats", "1", "--compressor", "zstd"), False),
    "reshard": (("--repeats", "1"), "asked"),
    "inventory": (("--shards", "100", "--repeats", "1", "--latency", "0"), True),
}


def test_every_script_has_a_smoke_run():
    scripts = {p.stem for p in BENCH.glob("*.py") if 'if __name__ == "__main__"' in p.read_text()}
    assert scripts - {"run", "remote_read"} == set(SMOKE)


ASKED = pytest.mark.skipif(
    not os.environ.get("SHARDWISE_BENCH_SMOKE"),
    reason="a long smoke run: SHARDWISE_BENCH_SMOKE=1 (make bench-quick) runs it",
)


def _marks(how: bool | str) -> tuple[pytest.MarkDecorator, ...]:
    return () if how is True else (pytest.mark.slow,) if how is False else (pytest.mark.slow, ASKED)


@pytest.mark.timeout(600)
@pytest.mark.parametrize(
    "script", [pytest.param(s, marks=_marks(how)) for s, (_, how) in SMOKE.items()]
)
def test_the_smoke_run_exits_0_and_is_kept_with_its_header(script, tmp_path):
    kept = tmp_path / f"{script}.txt"
    args = SMOKE[script][0]
    proc = subprocess.run(
        [sys.executable, str(BENCH / "run.py"), "--keep", str(kept), script, *args],
        capture_output=True,
        text=True,
        timeout=540,
        cwd=ROOT,
        env=os.environ
        | {"SHARDWISE_BENCH_DATA": str(tmp_path / "data"), "SHARDWISE_BENCH_SMALL": "1"},
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    text = kept.read_text()
    assert text.startswith(f"# command: python benchmarks/run.py --keep {kept} {script} ")
    assert re.search(r"^# date: \d{4}-\d\d-\d\d \d\d:\d\d UTC; commit: \w+", text, re.M)
    assert re.search(r"^# machine: .+ cores", text, re.M)
    assert re.search(r"^# versions: python 3\.\d+\.\d+, shardwise ", text, re.M)
    assert text.rstrip().splitlines()[-1].startswith("# exit status 0 after ")
    assert proc.stdout == text  # what it printed is what it kept


def test_the_runner_refuses_what_is_not_a_benchmark():
    for name in ("nope", "common", "run"):
        proc = subprocess.run(
            [sys.executable, str(BENCH / "run.py"), name],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=ROOT,
        )
        assert proc.returncode == 2, proc.stderr
        assert f"no benchmark script benchmarks/{name}.py" in proc.stderr
