"""One independent job of the concurrency tests and benchmark, run as a process of its
own: ``python concurrency_worker.py '<json>'``.

The json says where the array is (``store``: a local path or an ``s3://``, ``gs://``
or ``az://`` URL, with ``storage_options``; or ``obstore``: an obstore store's class
in ``obstore.store`` and its keyword arguments, as ``{"class": "S3Store", "kwargs":
{...}}``, opened as zarr-python's ``ObjectStore``), what to do (``job``) and as whom (``proc``, ``nprocs``):

- ``"regions"``: for ``rounds`` rounds, write each of this process's regions of
  ``rows`` rows (region ``i`` of the array belongs to process ``i % nprocs``), one
  ``shardwise.to_zarr`` call each, with the values :func:`value` gives;
- ``"append"``: ``rounds`` times, append ``rows`` rows along axis 0 whose first column
  says who appended them and when (``proc * 1000 + round``), the others 0..;
- ``"append-dataset"``: the same with an xarray Dataset (a variable ``v`` and a
  ``time`` coordinate) appended along ``time`` (``consolidated``: passed on, default
  False).

``independent_writers`` is passed on (default: shardwise's default). Prints one JSON
line with what it did and how long it took; exits 0 when it wrote everything.
"""

from __future__ import annotations

import json
import sys
import time


def value(rnd: int, rows: range, ncols: int):  # -> np.ndarray
    """The values round ``rnd`` writes in ``rows``: row r, column c holds
    ``(rnd + 1) * 1e6 + r * 100 + c``, so every row says which round wrote it."""
    import numpy as np

    r = np.arange(rows.start, rows.stop, dtype="f8")[:, None]
    c = np.arange(ncols, dtype="f8")[None, :]
    return (rnd + 1) * 1e6 + r * 100 + c


def main(argv: list[str]) -> None:
    import dask
    import dask.array as da
    import numpy as np

    import shardwise

    cfg = json.loads(argv[0])
    dask.config.set(scheduler="synchronous")
    options = {}
    if "independent_writers" in cfg:
        options["independent_writers"] = cfg["independent_writers"]
    so = cfg.get("storage_options")
    store = cfg["store"]
    if "obstore" in cfg:  # an obstore store: its class and arguments (prefix: the path)
        import obstore.store
        from zarr.storage import ObjectStore

        spec = cfg["obstore"]
        store, so = ObjectStore(getattr(obstore.store, spec["class"])(**spec["kwargs"])), None
    proc, nprocs, rounds, rows = cfg["proc"], cfg["nprocs"], cfg["rounds"], cfg["rows"]
    t0 = time.perf_counter()
    calls = 0
    if cfg["job"] == "regions":
        nrows, ncols = cfg["shape"]
        mine = [i for i in range(nrows // rows) if i % nprocs == proc]
        for rnd in range(rounds):
            for i in mine:
                part = range(i * rows, (i + 1) * rows)
                x = da.from_array(value(rnd, part, ncols), chunks=rows)
                shardwise.array.to_zarr(
                    x,
                    store,
                    path="v",
                    region=(slice(part.start, part.stop),),
                    mode="r+",
                    storage_options=so,
                    **options,
                )
                calls += 1
    elif cfg["job"] == "append":
        ncols = cfg["shape"][1]
        for rnd in range(rounds):
            block = np.zeros((rows, ncols), dtype="f8")
            block[:, 0] = proc * 1000 + rnd
            block[:, 1] = np.arange(rows)
            shardwise.array.to_zarr(
                da.from_array(block, chunks=rows),
                store,
                path="v",
                mode="a",
                append_dim=0,
                storage_options=so,
                **options,
            )
            calls += 1
    elif cfg["job"] == "append-dataset":
        import xarray as xr

        ncols = cfg["shape"][1]
        for rnd in range(rounds):
            tag = proc * 1000 + rnd
            block = np.zeros((rows, ncols), dtype="f8")
            block[:, 0] = tag
            block[:, 1] = np.arange(rows)
            ds = xr.Dataset(
                {"v": (("time", "x"), da.from_array(block, chunks=rows))},
                coords={"time": tag * 1000 + np.arange(rows, dtype="i8")},
            )
            shardwise.to_zarr(
                ds,
                store,
                append_dim="time",
                storage_options=so,
                consolidated=cfg.get("consolidated", False),
                **options,
            )
            calls += 1
    else:
        raise SystemExit(f"unknown job {cfg['job']!r}")
    from shardwise.graph.tasks import conflicts

    print(
        json.dumps(
            {
                "proc": proc,
                "calls": calls,
                "seconds": time.perf_counter() - t0,
                "conflicts": conflicts(),
            }
        )
    )


if __name__ == "__main__":
    main(sys.argv[1:])
