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


def _in_a_new_process(code: str, **env: str) -> str:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("DASK_SHARDWISE")}
    proc = subprocess.run(
        [sys.executable, "-c", code],
        env={**environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


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
    # (the cache's own variable wins over dask's)
    found = _in_a_new_process(
        code, DASK_SHARDWISE__INDEX_CACHE_BYTES="1 MiB", SHARDWISE_INDEX_CACHE_BYTES="4096"
    )
    assert found.endswith(" 4096")


def test_a_bad_setting_is_refused_with_its_name():
    with (
        dask.config.set({"shardwise.write-retries": 0}),
        pytest.raises(ValueError, match=r"shardwise\.write-retries"),
    ):
        retries()
