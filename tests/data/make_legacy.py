"""Write the 2022 sharding-draft fixture stores in ``tests/data/legacy/`` (issue 13).

Run by hand, in a throwaway venv, with the last zarr-python that wrote the draft:

    python3.12 -m venv /tmp/z218 && /tmp/z218/bin/pip install "zarr==2.18.*" pytest

(zarr 2.18 imports its own test module, and so pytest, to read a storage transformer.)
    ZARR_V3_EXPERIMENTAL_API=1 ZARR_V3_SHARDING=1 /tmp/z218/bin/python tests/data/make_legacy.py

Each store is a directory of the draft v3 core layout (``zarr.json`` at the root,
``meta/root/...``, ``data/root/...``) written by zarr-python 2.18's
``ShardingStorageTransformer``; ``expected.npz`` holds every array's values (fill
values where nothing was written) under ``<store>/<array path>``, and
``MANIFEST.json`` what each store exercises. The stores are small (well under 200 KiB
in all) and are committed; the tests never run this script.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numcodecs
import numpy as np
import zarr
from zarr._storage.v3 import DirectoryStoreV3
from zarr._storage.v3_storage_transformers import ShardingStorageTransformer

assert zarr.__version__.startswith("2.18"), zarr.__version__
assert (
    os.environ.get("ZARR_V3_EXPERIMENTAL_API") == "1" and os.environ.get("ZARR_V3_SHARDING") == "1"
)

OUT = Path(__file__).parent / "legacy"
expected: dict[str, np.ndarray] = {}
manifest: dict[str, str] = {}


def sharding(*chunks_per_shard: int) -> ShardingStorageTransformer:
    return ShardingStorageTransformer("indexed", chunks_per_shard=chunks_per_shard)


def store(name: str, note: str) -> DirectoryStoreV3:
    path = OUT / name
    shutil.rmtree(path, ignore_errors=True)
    manifest[name] = note
    return DirectoryStoreV3(str(path))


def array(st, path, data, *, chunks, cps=None, dims=None, **kwargs):
    """Create ``path`` and write ``data`` (NaN/fill where a mask says not to write)."""
    transformers = [sharding(*cps)] if cps else []
    a = zarr.create(
        shape=data.shape,
        chunks=chunks,
        dtype=data.dtype,
        store=st,
        path=path,
        zarr_version=3,
        storage_transformers=transformers,
        **kwargs,
    )
    if dims is not None:
        a.attrs["_ARRAY_DIMENSIONS"] = list(dims)  # as xarray wrote it
    return a


rng = np.random.default_rng(2022)

# 1. one 2-D float32 array per compressor, sharded 2 x 2 chunks per shard, uneven edges
st = store(
    "compressors",
    "one array per compressor (none, blosc, zstd, gzip, zlib), 2x2 "
    "chunks per shard, uneven edges (13 x 10 in chunks of 4 x 3)",
)
data = np.round(rng.normal(size=(13, 10)), 2).astype("<f4")
for name, comp in [
    ("none", None),
    ("blosc", numcodecs.Blosc(cname="lz4", clevel=5, shuffle=numcodecs.Blosc.SHUFFLE)),
    ("zstd", numcodecs.Zstd(level=3)),
    ("gzip", numcodecs.GZip(level=5)),
    ("zlib", numcodecs.Zlib(level=5)),
]:
    a = array(
        st,
        name,
        data,
        chunks=(4, 3),
        cps=(2, 2),
        compressor=comp,
        fill_value=np.nan,
        dims=("y", "x"),
    )
    a[...] = data
    expected[f"compressors/{name}"] = data

# 2. F memory layout, integers, 3-D, fill value, a group hierarchy with an implicit group
st = store(
    "hierarchy",
    "explicit root group with attributes, an explicit group, an "
    "implicit group, F layout, int16 3-D, uint8 1-D unsharded, fill values",
)
root = zarr.group(store=st, path="/", zarr_version=3)
root.attrs["title"] = "legacy draft"
g = root.create_group("surface")
g.attrs["level"] = 0
i3 = rng.integers(-500, 500, size=(5, 6, 7)).astype("<i2")
a = array(
    st,
    "surface/counts",
    i3,
    chunks=(2, 3, 4),
    cps=(1, 2, 2),
    order="F",
    compressor=numcodecs.Zstd(level=1),
    fill_value=-1,
    dims=("t", "y", "x"),
)
a[...] = i3
a.attrs["units"] = "1"
expected["hierarchy/surface/counts"] = i3
u1 = np.arange(9, dtype="u1")
a = array(
    st, "deep/inside/flags", u1, chunks=(4,), compressor=None, fill_value=255, dims=("n",)
)  # no storage transformer; "deep" and "deep/inside" are implicit
a[...] = u1
expected["hierarchy/deep/inside/flags"] = u1

# 3. missing chunks and shards, a rewritten shard (chunks out of order, dead bytes)
st = store(
    "sparse",
    "missing chunks and missing shards, chunks rewritten one by one "
    "(out of C order) and one deleted (its bytes left in the shard, unindexed)",
)
f8 = np.full((8, 8), -9.0)
a = array(
    st,
    "v",
    f8,
    chunks=(2, 2),
    cps=(2, 2),
    compressor=numcodecs.Zlib(level=1),
    fill_value=-9.0,
    dims=("y", "x"),
    write_empty_chunks=False,
)
block = np.round(rng.normal(size=(8, 8)), 3)
a[0:2, 0:2] = block[0:2, 0:2]  # shard (0, 0): chunk (0, 0)
a[2:4, 2:4] = block[2:4, 2:4]  # shard (0, 0) again: chunk (1, 1) first in the shard now
a[0:2, 2:4] = block[0:2, 2:4]  # chunk (0, 1)
a[4:8, 0:4] = block[4:8, 0:4]  # shard (1, 0) whole
a[4:6, 0:2] = -9.0  # all fill: zarr deletes chunk (2, 0), its bytes stay in the shard
# shard (0, 1) and (1, 1) never written
want = np.full((8, 8), -9.0)
want[0:2, 0:2] = block[0:2, 0:2]
want[2:4, 2:4] = block[2:4, 2:4]
want[0:2, 2:4] = block[0:2, 2:4]
want[4:8, 0:4] = block[4:8, 0:4]
want[4:6, 0:2] = -9.0
assert np.array_equal(a[...], want)
expected["sparse/v"] = want
raw = (OUT / "sparse/data/root/v/c1/0").read_bytes()
index = np.frombuffer(raw[-64:], "<u8").reshape(2, 2, 2)
assert (index[0, 0] == 2**64 - 1).all(), index  # deleted...
assert len(raw) - 64 > int(index[..., 1][index[..., 1] < 2**63].sum()), index  # ...bytes left

np.savez_compressed(OUT / "expected.npz", **expected)
(OUT / "MANIFEST.json").write_text(json.dumps(manifest, indent=1) + "\n")
total = sum(p.stat().st_size for p in OUT.rglob("*") if p.is_file())
print(f"wrote {len(manifest)} stores, {len(expected)} arrays, {total:,} bytes in {OUT}")
