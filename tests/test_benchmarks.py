"""The benchmarks are one suite (``benchmarks/run.py``), and their pages in
``docs/benchmarks/`` say what the runner runs and what it printed.

Nothing here times anything: the figures are measured by the runner, never by tests."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from loaded import module_at

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"
PAGES = ROOT / "docs" / "benchmarks"

RUN_LINE = re.compile(
    r"^Run: `python benchmarks/run\.py ([a-z_]+(?::[a-z_]+)?)(?: -- [^`]*)?`", re.M
)
RECORDED = re.compile(r"`benchmarks/results/([a-z_]+(?:-[a-z_]+)?)\.txt`")
NUMBER = re.compile(r"(?<![\w.])\d[\d,]*(?:\.\d+)?")

# Sections whose figures were measured by the scripts alone, before run.py kept what they
# print: each leaves this set when it is measured again through run.py and its section
# names the result (``Recorded: `benchmarks/results/<name>.txt```, or
# ``<name>-<variant>.txt`` for a variant).
NOT_YET_RECORDED: set[str] = set()


RUNNER = module_at(BENCH / "run.py", "benchmarks_run")
# every run the runner keeps a result of, as selected on its command line
EVERY_RUN = {run.name: run for run in RUNNER.select(["all"])}


def _scopes(page: Path) -> list[tuple[int, str, str, str]]:
    """(level, heading, its own text, its whole text) of each ``##`` or ``###`` heading
    of a page: the own text runs to the next heading, the whole text to the next heading of
    the same level or above (its subsections included)."""
    lines = page.read_text().splitlines()
    heads = [
        (i, len(m.group(1)), m.group(2))
        for i, line in enumerate(lines)
        if (m := re.match(r"^(#{2,3}) (.+)$", line))
    ]
    scopes = []
    for k, (i, level, heading) in enumerate(heads):
        own_end = heads[k + 1][0] if k + 1 < len(heads) else len(lines)
        end = next((j for j, lv, _ in heads[k + 1 :] if lv <= level), len(lines))
        own = "\n".join(lines[i + 1 : own_end])
        whole = "\n".join(lines[i + 1 : end])
        scopes.append((level, heading, own, whole))
    return scopes


def _table_numbers(text: str) -> set[str]:
    """The numbers of the figures in ``text``: those in the body rows of its markdown
    tables (header rows and separators left out) and in its fenced blocks (output
    copied as printed)."""
    numbers: set[str] = set()
    lines = text.splitlines()
    fenced = False
    for i, line in enumerate(lines):
        if line.startswith("```"):
            fenced = not fenced
            continue
        if fenced:
            numbers.update(NUMBER.findall(line))
            continue
        if not line.startswith("|") or set(line) <= set("|-: "):
            continue
        if i + 1 < len(lines) and re.fullmatch(r"[|\-: ]+", lines[i + 1]):
            continue  # the header row
        numbers.update(NUMBER.findall(line))
    return numbers


def test_every_script_is_in_the_runner():
    scripts = {
        p.stem
        for p in BENCH.glob("*.py")
        if p.name != "run.py" and 'if __name__ == "__main__"' in p.read_text()
    }
    registered = {b.name for b in RUNNER.BENCHMARKS}
    assert scripts == registered, (scripts - registered, registered - scripts)
    assert {b.question for b in RUNNER.BENCHMARKS} == set(RUNNER.QUESTIONS)
    assert not registered & set(RUNNER.QUESTIONS), "a name selects a question, not a benchmark"


def test_the_runner_gives_each_script_only_options_it_has():
    problems = [
        f"{b.name}: {flag}"
        for b in RUNNER.BENCHMARKS
        for flag in (*b.quick, *b.args, *(a for _, args in b.variants for a in args))
        if flag.startswith("--") and f'"{flag}"' not in b.script.read_text()
    ]
    assert not problems, problems


def test_every_benchmark_has_a_section_on_its_question_page():
    problems = []
    for question in RUNNER.QUESTIONS:
        page = PAGES / f"{question}.md"
        if not page.exists():
            problems.append(f"no page {page.relative_to(ROOT)}")
            continue
        runs = {}
        sections = [(h, text) for level, h, _, text in _scopes(page) if level == 2]
        for heading, text in sections:
            for name in RUN_LINE.findall(text):
                runs[name] = heading
                if not re.search(r"^Machine: ", text, re.M):
                    problems.append(f"{page.name}: section {heading!r} has no 'Machine:' line")
        for name, run in EVERY_RUN.items():
            if run.bench.question == question and name not in runs:
                problems.append(f"{page.name}: no section runs {name}")
        for name in runs:
            if name not in EVERY_RUN or EVERY_RUN[name].bench.question != question:
                problems.append(f"{page.name}: runs {name}, not a benchmark of {question!r}")
    assert not problems, "\n".join(problems)


def test_the_docs_name_only_what_the_runner_runs():
    """The docs, the README and the Makefile run benchmarks through ``run.py``, and every
    ``benchmarks/run.py`` command in them selects something the runner has."""
    names = {"all", *RUNNER.QUESTIONS, *EVERY_RUN}
    files = [ROOT / "README.md", ROOT / "Makefile", *sorted((ROOT / "docs").rglob("*.md"))]
    problems = []
    for path in files:
        for n, line in enumerate(path.read_text().splitlines(), 1):
            for script in re.findall(r"python3? benchmarks/([a-z_]+)\.py", line):
                if script != "run":
                    problems.append(f"{path.name}:{n}: runs {script}.py, not run.py {script}")
            for words in re.findall(r"benchmarks/run\.py((?: [a-z_:-]+)*)", line):
                selected = words.split(" -- ")[0].split()
                for word in selected:
                    if not word.startswith("-") and word not in names:
                        problems.append(f"{path.name}:{n}: {word}")
    assert not problems, "\n".join(problems)


def test_recorded_figures_are_what_the_runner_printed():
    """A section (or subsection) naming a result kept by the runner
    (``benchmarks/results/<name>.txt``) shows in its tables and output blocks, its
    subsections' included, only numbers that the result holds, and the result says how
    and on what machine it was measured."""
    problems = []
    recorded: set[str] = set()
    for page in sorted(PAGES.glob("*.md")):
        for _, heading, own, text in _scopes(page):
            for name in RECORDED.findall(own):
                result = BENCH / "results" / f"{name}.txt"
                if not result.exists():
                    problems.append(f"{page.name}: {heading!r}: {result.name} is not kept")
                    continue
                recorded.add(name)
                printed = result.read_text()
                for field in ("command", "runs", "date", "machine", "versions"):
                    if f"\n# {field}: " not in "\n" + printed:
                        problems.append(f"{result.name}: no '# {field}:' line")
                if "# exit status 0 " not in printed:
                    problems.append(f"{result.name}: the run did not end with status 0")
                tokens = set(NUMBER.findall(printed))
                tokens |= {t.replace(",", "") for t in tokens}
                missing = sorted(_table_numbers(text) - tokens)
                if missing:
                    problems.append(f"{page.name}: {heading!r}: not in {result.name}: {missing}")
    assert not problems, "\n".join(problems)
    unrecorded = {run.kept.removesuffix(".txt") for run in EVERY_RUN.values()} - recorded
    assert unrecorded == NOT_YET_RECORDED, (
        "sections that name no kept result, other than NOT_YET_RECORDED's: "
        f"{sorted(unrecorded - NOT_YET_RECORDED)}; recorded now, to take out of it: "
        f"{sorted(NOT_YET_RECORDED - unrecorded)}"
    )


def test_the_scripts_say_what_they_measure_today():
    history = re.compile(r"\bissues? \d+|\bthan before\b|\bas before\b|(?-i:\bBefore, )", re.I)
    found = [
        f"{path.name}:{n}: {line.strip()[:80]}"
        for path in sorted(BENCH.glob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if history.search(line)
    ]
    assert not found, "\n".join(found)


def test_the_table_check_sees_a_wrong_number(tmp_path):
    """The check above can fail: a number not printed is found."""
    text = "| a 7 | b |\n|---|---|\n| x | 1.25 (1.20-1.31) |\n| y | 3,000 |\n"
    text += "prose 9\n```\n  shards 20 ms\n     100 0.031\n```\n"
    assert _table_numbers(text) == {"1.25", "1.20", "1.31", "3,000", "20", "100", "0.031"}


def test_the_runner_runs_a_benchmark_and_keeps_what_it_printed(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(BENCH / "run.py"), "--quick", "inventory", "--results", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    kept = (tmp_path / "inventory.txt").read_text()
    assert kept.startswith("# benchmark: inventory (tools): ")
    assert "# command: python benchmarks/run.py --quick inventory\n" in kept
    assert "# runs: python benchmarks/inventory.py --shards 100 " in kept
    assert re.search(r"^# machine: .+ cores", kept, re.M)
    assert re.search(r"^# versions: python 3\.\d+\.\d+, shardwise ", kept, re.M)
    assert re.search(r"^\s+100 ", kept, re.M)  # the table's row for 100 shards
    assert kept.rstrip().splitlines()[-1].startswith("# exit status 0 after ")


def test_the_runner_refuses_what_it_does_not_have():
    with pytest.raises(SystemExit, match="no benchmark or question 'nope'"):
        RUNNER.select(["nope"])
    tools = ["migrate", "reshard", "reshard:memory", "inventory"]
    assert [run.name for run in RUNNER.select(["tools"])] == tools
    assert [run.name for run in RUNNER.select(["reshard"])] == ["reshard"]
    memory = RUNNER.select(["reshard:memory"])
    assert [(run.kept, run.args[:2]) for run in memory] == [
        ("reshard-memory.txt", ("--data-dir", "/dev/shm/shardwise"))
    ]
    quick = [run.name for run in RUNNER.to_run(["tools"], quick=True)]
    assert quick == ["migrate", "reshard", "inventory"]  # a smoke run: each script once
    assert [run.name for run in RUNNER.to_run(["reshard:memory"], quick=True)] == ["reshard:memory"]
    with pytest.raises(SystemExit, match="reshard has no variant 'disk'; expected one of"):
        RUNNER.select(["reshard:disk"])
