"""Every module, function, option, setting, path, command-line option and make target
the documentation names exists: ``docs/_hooks/names.py`` reads the pages (README.md,
CHANGELOG.md, every docs/**/*.md, the notebooks) and says, for each name that does not
exist, ``page:line: name — why`` (its docstring lists the rules and what it leaves
alone)."""

from __future__ import annotations

from pathlib import Path

import pytest

from loaded import module_at

ROOT = Path(__file__).resolve().parents[1]
names = module_at(ROOT / "docs/_hooks/names.py", "docs_names")
PAGES = [page.relative_to(ROOT).as_posix() for page in names.pages(ROOT)]


@pytest.fixture(scope="module")
def found() -> list:
    return names.problems([ROOT / page for page in PAGES], ROOT)


def test_the_pages_read_are_the_documentation():
    for page in ("README.md", "CHANGELOG.md", "docs/user-guide.md", "docs/how-it-works.md"):
        assert page in PAGES
    assert any(page.startswith("notebooks/") and page.endswith(".ipynb") for page in PAGES)


@pytest.mark.parametrize("page", PAGES)
def test_every_name_the_page_gives_exists(page, found):
    problems = [str(p) for p in found if p.page == page or p.page.startswith(f"{page}[")]
    assert not problems, "\n".join(problems)


GOOD = """\
# A page

`shardwise.to_zarr`, `shardwise.errors.StoreExistsError`, `shardwise.io.mounts`,
`shardwise.cache.clear_index_cache`, `shardwise.ReadOptions.threads`,
`shardwise.inventory-concurrency`, `ReadOptions(recheck_cached_data=True)`,
`shardwise.verify(store, decode=True)`, `shardwise verify PATH --decode --json`,
`xr.open_dataset(store, engine="shardwise", chunks={}, read_options={})`,
`src/shardwise/io/mounts.py`, `io/mounts.py`, `tests/test_docs.py`, `make test`,
`DASK_SHARDWISE__WRITE_RETRIES=20`, `VerifyReport.damaged_shards`,
`shardwise.xarray.backend:ShardwiseBackendEntrypoint`, `"a/v"`, `v/c/0/0`.

```python
import shardwise
from shardwise.errors import ChunksError

shardwise.to_zarr(ds, "data.zarr", shards={"time": 100}, chunks={"time": 10})
```

```console
$ shardwise info data.zarr --no-scan
```
"""

BAD = """\
# A page

A module `shardwise.io.mount`, an option `shardwise.verify(store, deep=True)`,
a command-line option `shardwise verify PATH --deep`, a setting
`shardwise.inventory-concurency`, a path `src/shardwise/io/mount.py`,
a module by its path `cli/progress`, a target `make tests`.

```python
import shardwise

shardwise.info("data.zarr", scan=False, deep=True)
```

```console
$ shardwise migrate SRC DST --modes a
```
"""


def test_the_checker_reports_each_kind_of_wrong_name_and_no_right_one(tmp_path):
    good, bad = tmp_path / "good.md", tmp_path / "bad.md"
    good.write_text(GOOD)
    bad.write_text(BAD)
    assert names.problems([good], ROOT) == []
    found = names.problems([bad], ROOT)
    reported = {(p.line, p.name) for p in found}
    assert reported == {
        (3, "shardwise.io.mount"),
        (3, "shardwise.verify(deep=...)"),
        (4, "shardwise verify --deep"),
        (5, "shardwise.inventory-concurency"),
        (5, "src/shardwise/io/mount.py"),
        (6, "cli/progress"),
        (6, "make tests"),
        (11, "shardwise.info(deep=...)"),
        (15, "shardwise migrate --modes"),
    }, "\n".join(map(str, found))
    assert all(str(p).startswith(f"{bad}:{p.line}: {p.name} — ") for p in found)


def test_every_page_under_docs_is_read(tmp_path):
    """Pages added later (docs/benchmarks/*.md) are read too."""
    for page in ("README.md", "CHANGELOG.md", "docs/index.md", "docs/benchmarks/reading.md"):
        (tmp_path / page).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / page).write_text("# page\n")
    read = {p.relative_to(tmp_path).as_posix() for p in names.pages(tmp_path)}
    assert "docs/benchmarks/reading.md" in read and "README.md" in read
