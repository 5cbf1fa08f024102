"""The package as a user installs it: an sdist and a wheel that ``twine check``
passes, and the wheel in a fresh virtual environment (no editable install, no
development tools) registering the xarray engine and writing and reading a small
dataset. And pyproject's promises about what it declares: each runtime dependency says
why, the extras are optional features, the development tools are dependency groups."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TEST_ONLY = [
    "pytest",
    "hypothesis",
    "tensorstore",
    "zarrs",
    "moto",
    "s3fs",
    "obstore",
    "matplotlib",
    "bokeh",
    "crc32c",  # (the tests' second implementation: shardwise's checksums are google-crc32c's)
]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
# the optional features a user installs by name; nothing else is an extra
FEATURES = {"s3", "gcs", "azure", "http", "icechunk"}


def run(*args: object, cwd: Path | None = None) -> str:
    done = subprocess.run(
        [str(a) for a in args], cwd=cwd, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, f"{args} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


@pytest.fixture(scope="module")
def dist(tmp_path_factory):
    out = tmp_path_factory.mktemp("dist")
    run(sys.executable, "-m", "build", "--sdist", "--wheel", "--outdir", out, ROOT)
    return out


def test_sdist_and_wheel_build_and_pass_twine_check(dist):
    (wheel,) = dist.glob("shardwise-*.whl")
    (sdist,) = dist.glob("shardwise-*.tar.gz")
    run(sys.executable, "-m", "twine", "check", "--strict", wheel, sdist)
    names = zipfile.ZipFile(wheel).namelist()
    assert "shardwise/py.typed" in names
    # every layer package is in the wheel
    for layer in ("format", "codecs", "io", "graph", "array", "xarray", "tools", "cli"):
        assert f"shardwise/{layer}/__init__.py" in names, layer
    assert not [n for n in names if n.startswith(("tests/", "benchmarks/", "notebooks/"))]
    meta = next(n for n in names if n.endswith(".dist-info/METADATA"))
    text = zipfile.ZipFile(wheel).read(meta).decode()
    extras = set(re.findall(r"^Provides-Extra: (\S+)$", text, re.M))
    assert extras == FEATURES  # no development tools among them
    declared = PYPROJECT["project"]["dependencies"]
    for dependency in declared:  # the floors make test-lowest tests, as pyproject has them
        assert f"Requires-Dist: {dependency}" in text, dependency
    required = re.findall(r"^Requires-Dist: ([^;\n]+)$", text, re.M)  # (no "; extra ==")
    assert sorted(required) == sorted(declared)
    entry = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert (
        "shardwise = shardwise.xarray.backend:ShardwiseBackendEntrypoint"
        in zipfile.ZipFile(wheel).read(entry).decode()
    )


def test_each_runtime_dependency_says_what_needs_it():
    """One comment per hard dependency in pyproject.toml: on its line, or the lines just
    above it."""
    text = (ROOT / "pyproject.toml").read_text()
    start = text.index("\ndependencies = [")
    lines = text[start : text.index("\n]", start)].splitlines()[1:]
    for n, line in enumerate(lines):
        if line.strip().startswith('"'):
            assert "#" in line or lines[n - 1].strip().startswith("#"), line


def test_development_tools_are_dependency_groups_the_makefile_installs():
    """pytest, ruff, mkdocs... are in [dependency-groups] (pip install --group), not in the
    package's extras; every group and extra the Makefile installs exists, and the runs on
    Python 3.13 and on the lowest versions install the test group with every extra."""
    groups = PYPROJECT["dependency-groups"]
    assert {"test", "lint", "docs", "bench", "dev"} <= set(groups)
    assert set(PYPROJECT["project"]["optional-dependencies"]) == FEATURES

    def names(group: str) -> set[str]:
        found = set()
        for item in groups[group]:
            if isinstance(item, dict):
                found |= names(item["include-group"])
            else:
                found.add(re.split(r"[\[<>=!~; ]", item, maxsplit=1)[0].lower())
        return found

    assert {"pytest", "hypothesis", "tensorstore", "crc32c"} <= names("test")
    assert {"ruff", "mypy", "import-linter"} <= names("lint")
    assert {"mkdocs", "pytest-benchmark"} <= names("dev") and "pytest-benchmark" in names("bench")
    makefile = (ROOT / "Makefile").read_text()
    extras = re.search(r"^EXTRAS := (\S+)$", makefile, re.M)
    assert extras is not None and set(extras[1].split(",")) == FEATURES
    installed = re.findall(r"--group (\S+)", makefile)
    assert set(installed) == {"dev", "test"} and set(installed) <= set(groups)
    for line in makefile.splitlines():
        if "pip install" in line or "$(call UV," in line:
            assert "[test]" not in line and "[suite]" not in line, line


@pytest.mark.slow
def test_the_wheel_works_in_a_fresh_environment(dist, tmp_path):
    (wheel,) = dist.glob("shardwise-*.whl")
    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", venv)
    python = venv / "bin" / "python"
    # (uv, as make installs, where it is: the same resolution in seconds, not a minute)
    uv = shutil.which("uv", path=os.path.dirname(sys.executable))
    if uv is not None:
        run(uv, "pip", "install", "--quiet", "--compile-bytecode", "--python", python, wheel)
    else:
        run(python, "-m", "pip", "install", "--quiet", wheel)
    script = textwrap.dedent(
        f"""
        import sys
        import numpy as np
        import xarray as xr
        import shardwise

        assert "shardwise" in xr.backends.list_engines()
        ds = xr.Dataset({{"v": (("t", "x"), np.arange(600.0).reshape(30, 20))}}).chunk({{"t": 7}})
        shardwise.to_zarr(ds, "s.zarr", shards={{"t": 10}}, chunks={{"t": 5}}, consolidated=False)
        back = xr.open_dataset("s.zarr", engine="shardwise", chunks={{}}, consolidated=False)
        xr.testing.assert_identical(back.load(), ds.load())
        test_only = [m for m in {TEST_ONLY!r} if m in sys.modules]
        assert not test_only, test_only
        assert shardwise.__file__.startswith(sys.prefix), shardwise.__file__  # not the checkout
        print("ok", shardwise.__version__)
        """
    )
    out = run(python, "-c", script, cwd=tmp_path)
    assert out.strip() == "ok 0.1.0.dev0"
    run(venv / "bin" / "shardwise", "--help")
    # make demo's job, on the runtime dependencies alone (no bokeh: no dashboard)
    out = run(python, "-m", "shardwise.demo", "--path", tmp_path / "demo.zarr", cwd=tmp_path)
    assert "identical to engine='zarr': yes" in out, out
