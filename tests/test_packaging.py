"""The package as a user installs it: an sdist and a wheel that ``twine check``
passes, and the wheel in a fresh virtual environment (no editable install, no test
extras) registering the xarray engine and writing and reading a small dataset."""

from __future__ import annotations

import os
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
]


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
    assert "Provides-Extra: s3" in text and "Provides-Extra: suite" in text
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    for dependency in declared:  # the floors make test-lowest tests, as pyproject has them
        assert f"Requires-Dist: {dependency}" in text, dependency
    entry = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert (
        "shardwise = shardwise.xarray.backend:ShardwiseBackendEntrypoint"
        in zipfile.ZipFile(wheel).read(entry).decode()
    )


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
