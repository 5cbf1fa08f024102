"""``progress=`` on to_zarr, reshard and migrate: a bar of the tasks while the write
computes, from the local scheduler's callbacks or a distributed Client's reports; off by
default (nothing on stderr)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import dask
import dask.array as da
import numpy as np
import pytest
import xarray as xr
import zarr

import shardwise

from clusters import CLUSTER_OPTIONS

LEGACY = Path(__file__).parents[1] / "data" / "legacy"


def done_of(err: str, desc: str) -> tuple[int, int]:
    """The last ``done/total`` a tqdm bar of ``desc`` printed."""
    found = re.findall(rf"{desc}: .*?(\d+)/(\d+)", err)
    assert found, err
    done, total = found[-1]
    return int(done), int(total)


def test_off_by_default_and_a_bar_when_asked(tmp_path, capsys):
    x = da.arange(64, chunks=8, dtype="f4")
    with dask.config.set(scheduler="threads"):
        shardwise.array.to_zarr(x, str(tmp_path / "a.zarr"), path="v", shards=(16,), chunks=(8,))
        assert capsys.readouterr().err == ""
        shardwise.array.to_zarr(
            x, str(tmp_path / "b.zarr"), path="v", shards=(16,), chunks=(8,), progress=True
        )
    done, total = done_of(capsys.readouterr().err, "to_zarr")
    assert done == total > 0
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "b.zarr", path="v")[...], x)

    ds = xr.Dataset({"v": ("t", x)})
    with dask.config.set(scheduler="sync"):
        shardwise.to_zarr(ds, tmp_path / "c.zarr", consolidated=False, progress=True)
    done, total = done_of(capsys.readouterr().err, "to_zarr")
    assert done == total > 0


def test_reshard_and_migrate(tmp_path, capsys):
    with dask.config.set(scheduler="threads"):
        report = shardwise.reshard(
            LEGACY / "compressors", tmp_path / "r.zarr", shards="auto", progress=True
        )
        assert report.shards > 0
        done, total = done_of(capsys.readouterr().err, "reshard")
        assert done == total > 0
        shardwise.tools.migrate.migrate(LEGACY / "sparse", tmp_path / "m.zarr", progress=True)
        done, total = done_of(capsys.readouterr().err, "migrate")
        assert done == total > 0


@pytest.mark.slow
def test_a_distributed_client_reports_progress(tmp_path, capsys):
    distributed = pytest.importorskip("distributed")
    with (
        # (the shared options: no server on port 8787, which another cluster on the
        # machine may hold, leaking a socket here)
        distributed.LocalCluster(
            **{**CLUSTER_OPTIONS, "n_workers": 1}, threads_per_worker=1
        ) as cluster,
        distributed.Client(cluster),
    ):
        x = da.arange(64, chunks=8, dtype="f4")
        shardwise.array.to_zarr(
            x, str(tmp_path / "d.zarr"), path="v", shards=(16,), chunks=(8,), progress=True
        )
    done, total = done_of(capsys.readouterr().err, "to_zarr")
    assert done == total > 0
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "d.zarr", path="v")[...], x)


def test_verify_and_inventory(tmp_path, capsys):
    store = str(tmp_path / "v.zarr")
    x = da.arange(96, chunks=8, dtype="f4").reshape(12, 8)
    shardwise.array.to_zarr(x, store, path="v", shards=(4, 8), chunks=(2, 4))  # 3 shards
    capsys.readouterr()
    assert shardwise.verify(store).ok
    shardwise.inventory(store, "v")
    assert capsys.readouterr().err == ""
    assert shardwise.verify(store, progress=True).ok
    assert done_of(capsys.readouterr().err, "verify") == (3, 3)
    inv = shardwise.inventory(store, "v", progress=True)
    assert done_of(capsys.readouterr().err, "inventory") == (3, 3)
    with dask.config.set({"shardwise.inventory-batch": 1, "scheduler": "threads"}):
        again = shardwise.inventory(store, "v", progress=True)  # a dask task per shard
    done, total = done_of(capsys.readouterr().err, "inventory")
    assert done == total >= 3
    xr.testing.assert_identical(inv, again)


def test_verify_of_a_draft_store(capsys):
    report = shardwise.verify(LEGACY / "compressors", progress=True)
    assert report.ok, report
    done, total = done_of(capsys.readouterr().err, "verify")
    assert done == total == report.shards > 0


def test_a_notebook_kernel_shows_the_bar(tmp_path):
    """In a real Jupyter kernel: without ipywidgets, tqdm's text bar, counted to the end,
    and not tqdm's warning to install ipywidgets (its auto mode would give both)."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    if importlib.util.find_spec("ipywidgets") is not None:
        pytest.skip("ipywidgets is installed: the bar is a widget")
    store = str(tmp_path / "v.zarr")
    x = da.arange(96, chunks=8, dtype="f4").reshape(12, 8)
    shardwise.array.to_zarr(x, store, path="v", shards=(4, 8), chunks=(2, 4))  # 3 shards
    code = f"import shardwise\nassert shardwise.verify({store!r}, progress=True).ok"
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code)])
    nbclient.NotebookClient(nb, kernel_name="python3", timeout=120).execute()
    err = "".join(o.get("text", "") for o in nb.cells[0].outputs if o.get("name") == "stderr")
    assert done_of(err, "verify") == (3, 3)
    assert "Warning" not in err, err
