"""``shardwise inventory --out FILE``: checking FILE before the scan, writing the table after.

An inventory table (one row per inner chunk, an ``xarray.Dataset``) goes to netCDF,
Zarr or CSV, chosen by FILE's suffix. FILE is checked before anything is read (a
suffix it can write, nothing there already, a netCDF library for ``.nc``), so that a
long scan does not end in a refusal. This is apart from the commands because it is
the one place the command line writes a file of its own rather than calling a tool
that does.

The table's own libraries (xarray, pandas, the netCDF engine) are reached through the
table object, so importing this module imports none of them.
"""

from __future__ import annotations

import importlib.util
import json
import os.path
from typing import Any

import click

from shardwise.errors import StoreExistsError

__all__ = ["TABLE_SUFFIXES", "table_engine", "write_table"]

TABLE_SUFFIXES = (".nc", ".zarr", ".csv")


def table_engine(out: str) -> str | None:
    """Check ``--out FILE`` before anything is read: a suffix it can write (a usage
    error), no file or directory there already (``--out`` naming a store would replace
    it), and for ``.nc`` a netCDF library, whose xarray engine is returned."""
    if not out.endswith(TABLE_SUFFIXES):
        raise click.UsageError(f"--out must end in {', '.join(TABLE_SUFFIXES)}, found {out!r}")
    if os.path.lexists(out):
        raise StoreExistsError(
            "the --out file exists already",
            expected="a new file",
            found=f"{out!r}",
            advice="Remove it or choose another FILE (a .zarr there would be replaced).",
        )
    if not out.endswith(".nc"):
        return None
    engine = next(
        (e for e in ("h5netcdf", "netCDF4") if importlib.util.find_spec(e) is not None), None
    )
    if engine is None:
        raise ValueError(
            "writing a .nc table needs h5netcdf or netCDF4 (pip install h5netcdf); "
            "or use --out FILE.zarr or FILE.csv"
        )
    return engine.lower()


def write_table(table: Any, out: str, engine: str | None) -> None:
    """An inventory to a file: netCDF (with ``engine``), Zarr or CSV."""
    if out.endswith(".csv"):
        table.to_dataframe().to_csv(out)
    elif out.endswith(".zarr"):
        table.to_zarr(out, mode="w-", consolidated=False)
    else:
        # netCDF attributes are numbers, strings or lists of them: the others as JSON
        attrs = {
            k: v if isinstance(v, int | float | str) else json.dumps(v)
            for k, v in table.attrs.items()
        }
        table.assign_attrs(attrs).to_netcdf(out, engine=engine)
