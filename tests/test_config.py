"""shardwise's settings: one defaults file, read through one module, set as dask's own
settings are (dask.config.set, DASK_ environment variables)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import dask.config
import pytest

import shardwise.config as config
from shardwise.io.retry import retries

SRC = Path(__file__).resolve().parents[1] / "src" / "shardwise"


def test_every_setting_is_read_and_every_read_is_a_setting():
    names = set(config.defaults()["shardwise"])
    read = set()
    for path in SRC.rglob("*.py"):
        text = path.read_text()
        if "import shardwise.config as config" in text:
            read |= set(re.findall(r"config\.(?:get|get_bytes)\(\"([a-z-]+)\"\)", text))
        read |= set(re.findall(r"target_bytes\(\"([a-z-]+)\"\)", text))
        # (no module but the settings' own reads dask config under "shardwise.")
        if path.name != "config.py":
            assert not re.search(r"dask\.config\.get\(\s*[\"']shardwise\.", text), path
            assert "os.environ" not in text or path.parts[-2] == "testing", path
    read.add("index-cache-bytes")  # (config.index_cache_bytes)
    assert read == names


def test_a_setting_set_in_dask_config_wins_over_its_default():
    assert retries() == 100
    with dask.config.set({"shardwise.write-retries": 3}):
        assert retries() == 3
    with dask.config.set({"shardwise.shard-bytes": "2 MiB"}):
        assert config.get_bytes("shard-bytes") == 2 << 20
    assert config.get_bytes("shard-bytes") == 128 << 20


def _run(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("DASK_SHARDWISE") and k != config.CACHE_BYTES_VARIABLE
    }
    proc = subprocess.run(
        [sys.executable, "-c", code],
        env={**environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return proc


def _in_a_new_process(code: str, **env: str) -> str:
    return _run(code, **env).stdout.strip()


def test_dasks_environment_variables_set_shardwise():
    code = (
        "from shardwise.io.retry import retries; from shardwise import config; "
        "print(retries(), config.get_bytes('chunk-bytes'), config.index_cache_bytes())"
    )
    assert _in_a_new_process(code) == f"100 {1 << 20} {64 << 20}"
    found = _in_a_new_process(
        code,
        DASK_SHARDWISE__WRITE_RETRIES="7",
        DASK_SHARDWISE__CHUNK_BYTES="2MiB",
        DASK_SHARDWISE__INDEX_CACHE_BYTES="1 MiB",
    )
    assert found == f"7 {2 << 20} {1 << 20}"


def test_the_old_index_cache_variable_is_read_with_a_warning_naming_dasks(monkeypatch):
    """``SHARDWISE_INDEX_CACHE_BYTES`` is deprecated: read for one release more (over
    dask's variable, as it was), with a ``FutureWarning`` naming what to set instead."""
    monkeypatch.setenv("SHARDWISE_INDEX_CACHE_BYTES", "4 KiB")
    with pytest.warns(FutureWarning, match="SHARDWISE_INDEX_CACHE_BYTES is deprecated") as info:
        assert config.index_cache_bytes() == 4096
    message = str(info[0].message)
    assert "DASK_SHARDWISE__INDEX_CACHE_BYTES='4 KiB'" in message
    assert "shardwise.index-cache-bytes" in message
    # as a user meets it: the process's cache is bounded by it, and the warning is shown
    code = "import shardwise; print(shardwise.cache.index_cache().max_bytes)"
    proc = _run(code, DASK_SHARDWISE__INDEX_CACHE_BYTES="1 MiB", SHARDWISE_INDEX_CACHE_BYTES="4096")
    assert proc.stdout.strip() == "4096"
    assert "FutureWarning" in proc.stderr and "DASK_SHARDWISE__INDEX_CACHE_BYTES" in proc.stderr
    # dask's variable alone: no warning
    proc = _run(code, DASK_SHARDWISE__INDEX_CACHE_BYTES="1 MiB")
    assert proc.stdout.strip() == str(1 << 20) and "Warning" not in proc.stderr


def test_the_defaults_file_is_read_without_importing_yaml_here():
    """The defaults are parsed by dask's reader of its own configuration files: shardwise
    imports no YAML library itself (pyyaml is dask's dependency, not shardwise's)."""
    assert config.defaults()["shardwise"]["shard-bytes"] == "128 MiB"
    for path in SRC.rglob("*.py"):
        assert not re.search(r"^\s*(import|from) yaml\b", path.read_text(), re.M), path


def test_a_bad_setting_is_refused_with_its_name():
    with (
        dask.config.set({"shardwise.write-retries": 0}),
        pytest.raises(ValueError, match=r"shardwise\.write-retries"),
    ):
        retries()
