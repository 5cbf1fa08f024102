"""The documentation cannot rot: every public name is documented and in the API
reference, the Python blocks of the getting-started page and the user guide run, and
the site builds with warnings as errors (``make docs``)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr

import shardwise
from loaded import module_at

ROOT = Path(__file__).resolve().parents[1]
# the pages use xarray's defaults, which consolidate Zarr v3 metadata: zarr-python warns
# that consolidated metadata is not in the v3 spec, as a user running them would see
CONSOLIDATED = pytest.mark.filterwarnings("ignore:Consolidated metadata:UserWarning")
DOCS = ROOT / "docs"
BLOCK = re.compile(r"(?:<!-- docs-test: (?P<how>[^>]*?) -->\n)?```python\n(?P<code>.*?)```", re.S)


def python_blocks(page: Path) -> list[tuple[str, str]]:
    """The page's Python blocks, each with its ``<!-- docs-test: ... -->`` directive."""
    return [(m["how"] or "", m["code"]) for m in BLOCK.finditer(page.read_text())]


def test_every_public_name_has_a_docstring_and_an_api_entry_at_its_public_path():
    """Each name of the top level and of the documented submodules, in docs/api.md at
    the path users write (``shardwise.to_zarr``, not where it is defined): the docs
    build's own check (``docs/_hooks/public_names.py``), run here."""
    hook = module_at(DOCS / "_hooks/public_names.py", "public_names")
    assert hook.problems(DOCS) == []


def run_blocks(page: Path, tmp_path: Path, namespace: dict, monkeypatch) -> int:
    monkeypatch.chdir(tmp_path)
    ran = 0
    for how, code in python_blocks(page):
        if how.startswith(("s3", "gcs", "azure")):
            continue  # run by the tests below against the emulators
        exec(compile(code, f"{page.name} block {ran + 1}", "exec"), namespace)
        ran += 1
    return ran


@CONSOLIDATED
def test_getting_started_blocks_run(tmp_path, monkeypatch):
    assert run_blocks(DOCS / "getting-started.md", tmp_path, {}, monkeypatch) == 3


def guide_dataset() -> xr.Dataset:
    """The ``ds`` the user guide's blocks assume: a temperature field by time, y, x."""
    rng = np.random.default_rng(0)
    return xr.Dataset(
        {"temperature": (("time", "y", "x"), rng.normal(size=(120, 12, 16)).astype("f4"))},
        coords={"time": pd.date_range("2000-01-01", periods=120, freq="D")},
    ).chunk({"time": 30})


@CONSOLIDATED
@pytest.mark.xarray_rectilinear  # (the guide writes rectilinear shards through xarray)
def test_user_guide_blocks_run(tmp_path, monkeypatch):
    """In a fresh directory, in page order, with the ``ds`` they assume and the stores
    they name made first (a Zarr v2 store for reshard, an Icechunk repository)."""
    import icechunk

    ds = guide_dataset()
    ds.to_zarr(tmp_path / "era5-v2.zarr", zarr_format=2, consolidated=False)
    icechunk.set_logs_filter("error")
    icechunk.Repository.create(icechunk.local_filesystem_storage(str(tmp_path / "repo")))
    namespace = {"ds": ds, "store": str(tmp_path / "data.zarr"), "shardwise": shardwise}
    ran = run_blocks(DOCS / "user-guide.md", tmp_path, namespace, monkeypatch)
    assert ran >= 9
    assert (
        isinstance(namespace["report"], shardwise.tools.verify.VerifyReport)
        and namespace["report"].ok
    )


@CONSOLIDATED
def test_the_readme_quick_start_runs(tmp_path, monkeypatch):
    """The README's quick start, as a new user would paste it, in a fresh folder."""
    namespace: dict = {}
    assert run_blocks(ROOT / "README.md", tmp_path, namespace, monkeypatch) == 1
    stored = xr.open_dataset(tmp_path / "data.zarr", engine="shardwise", chunks={})
    assert stored.sizes["time"] == 730
    xr.testing.assert_equal(
        stored.temperature.isel(time=slice(365, None)).drop_vars("time"),
        namespace["more"].temperature.drop_vars("time"),
    )


def test_inventory_page_blocks_run(tmp_path, monkeypatch):
    namespace: dict = {}
    assert run_blocks(DOCS / "inventory.md", tmp_path, namespace, monkeypatch) == 6
    assert int(namespace["ds"].present.sum()) < namespace["ds"].present.size  # NaN left out


@CONSOLIDATED
def test_user_guide_s3_block(s3, bucket, tmp_path, monkeypatch):
    """The object-store block against moto's S3 server: its placeholders (endpoint,
    credentials, bucket) filled in with the server's."""
    (code,) = [c for how, c in python_blocks(DOCS / "user-guide.md") if how.startswith("s3")]
    opts_line = next(line for line in code.splitlines() if line.startswith("opts = "))
    store_line = next(line for line in code.splitlines() if line.startswith("store = "))
    prefix = re.search(r'prefix="([^"]+)"', store_line)[1]
    code = (
        code.replace(opts_line, "opts = _server_options")
        .replace(store_line, "store = _server_store")
        .replace("s3://bucket/", f"s3://{bucket}/")
    )
    monkeypatch.chdir(tmp_path)
    namespace = {
        "ds": guide_dataset(),
        "shardwise": shardwise,
        "xr": xr,
        "_server_options": s3.storage_options(),
        "_server_store": s3.obstore(bucket, prefix),
    }
    exec(compile(code, "user-guide.md s3 block", "exec"), namespace)
    xr.testing.assert_identical(namespace["ds"].load(), guide_dataset().load())
    assert any(k.startswith(f"{prefix}/temperature/c/") for k in s3.keys(bucket))


def _cloud_block(how: str, replacements: dict[str, str], namespace: dict, tmp_path, monkeypatch):
    """The user guide's ``how`` block with its placeholder lines (``opts = ``,
    ``store = ``) and names replaced, run with the guide's ``ds``."""
    (code,) = [c for h, c in python_blocks(DOCS / "user-guide.md") if h.startswith(how)]
    for line in code.splitlines():
        for start in ("opts = ", "store = "):
            if line.startswith(start):
                code = code.replace(line, f"{start}_server_{start.split()[0]}")
    for old, new in replacements.items():
        code = code.replace(old, new)
    monkeypatch.chdir(tmp_path)
    namespace |= {"ds": guide_dataset(), "shardwise": shardwise, "xr": xr}
    exec(compile(code, f"user-guide.md {how} block", "exec"), namespace)
    xr.testing.assert_identical(namespace["ds"].load(), guide_dataset().load())


@CONSOLIDATED
def test_user_guide_gcs_block(gcs, gcs_bucket, tmp_path, monkeypatch):
    namespace = {"_server_opts": gcs.storage_options()}
    _cloud_block("gcs", {"gs://bucket/": f"gs://{gcs_bucket}/"}, namespace, tmp_path, monkeypatch)
    assert any(k.startswith("data.zarr/temperature/c/") for k in gcs.keys(gcs_bucket))


@CONSOLIDATED
def test_user_guide_azure_block(azurite, azure_container, tmp_path, monkeypatch):
    namespace = {
        "_server_opts": azurite.storage_options(),
        "_server_store": azurite.obstore(azure_container, "other.zarr"),
    }
    replacements = {"az://container/": f"az://{azure_container}/"}
    _cloud_block("azure", replacements, namespace, tmp_path, monkeypatch)
    keys = azurite.keys(azure_container)
    assert any(k.startswith("data.zarr/temperature/c/") for k in keys)
    assert any(k.startswith("other.zarr/temperature/c/") for k in keys)


def test_the_stores_table_is_the_same_on_both_pages():
    def table(page: str) -> str:
        text = (DOCS / page).read_text()
        start = text.index("<!-- stores-table")
        return text[text.index("\n", start) : text.index("<!-- /stores-table -->")]

    assert table("concurrency.md") == table("user-guide.md")


def test_the_engine_says_what_it_is_and_where_to_read_about_it():
    entry = xr.backends.list_engines()["shardwise"]
    assert "shard" in entry.description and entry.url.startswith("https://")


def test_user_pages_speak_of_the_software_not_of_its_history():
    """No user page (the README, the changelog, every page of the docs, the benchmark
    pages included) refers to the project's issues or to what the code used to do."""
    history = re.compile(
        r"\bissues? \d+|\bthan before\b|\bas before\b|\bBefore, |\bwent from\b"
        r"|\bbefore (this|the) (change|commit|issue|work)\b"
        r"|\b(escaped|raised|failed|returned) before\b",
        re.I,
    )
    pages = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted(DOCS.rglob("*.md"))]
    found = [
        f"{page.relative_to(ROOT)}:{n}: {line.strip()[:80]}"
        for page in pages
        for n, line in enumerate(page.read_text().splitlines(), 1)
        if history.search(line)
    ]
    assert not found, "\n".join(found)
