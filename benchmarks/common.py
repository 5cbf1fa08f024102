"""What every benchmark shares: where the data live, and the description of the machine
and of the software a figure was measured with.

Not a script: the benchmarks import it (run as scripts, or through ``run.py``, this
folder is on ``sys.path``).
"""

from __future__ import annotations

import os
import platform
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

DATA_DIR = Path(__file__).resolve().parent / "data"  # stores kept between runs (git-ignored)

# the packages every description names; a benchmark may add its own peers
PACKAGES = ("shardwise", "zarr", "xarray", "dask", "distributed", "numcodecs", "numpy")


def package_versions(*names: str) -> dict[str, str]:
    """The installed versions of ``names`` ("not installed" where one is missing)."""
    found = {}
    for name in names:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = "not installed"
    return found


def cpu_and_ram() -> tuple[str | None, int | None]:
    """The CPU model and the total RAM in bytes, from /proc (None where it does not say)."""
    cpu, ram = None, None
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                ram = int(line.split()[1]) * 1024
                break
    except OSError:
        pass
    return cpu, ram


def machine() -> dict[str, Any]:
    """The machine and the versions of the packages that a figure depends on."""
    cpu, ram = cpu_and_ram()
    return {
        "cpu": cpu or platform.processor() or "unknown",
        "cores": os.cpu_count(),
        "cores_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "ram_gib": None if ram is None else round(ram / 2**30, 1),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        **package_versions(*PACKAGES),
    }


def describe(info: dict[str, Any] | None = None) -> tuple[str, str]:
    """The machine and the versions as two lines of text (for a result's header)."""
    info = machine() if info is None else info
    hardware = (
        f"{info['cpu']}, {info['cores']} cores ({info['cores_usable']} usable), "
        f"{info['ram_gib']} GiB RAM, {info['platform']}"
    )
    software = ", ".join(f"{k} {v}" for k, v in info.items() if k not in _HARDWARE_KEYS)
    return hardware, software


_HARDWARE_KEYS = {"cpu", "cores", "cores_usable", "ram_gib", "platform"}
