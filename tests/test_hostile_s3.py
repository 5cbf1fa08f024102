"""Issue 27's classes on an object store: the hostile and damaged stores of
``test_names.py``, ``test_hostile_decode.py``, ``test_giant_grid.py`` and
``test_validate_first.py``, uploaded to a real S3 endpoint (moto's server) and read
through s3fs URLs and obstore stores. (Class 1, overlap, is in ``test_overlap.py``.)"""

from __future__ import annotations

import re

import numpy as np
import pytest
import zarr
from test_hostile_decode import KEY, bombs, pristine, replace_chunk  # noqa: F401 (a fixture)
from test_names import draft
from test_overlap import _keys
from test_reshard import upload
from zarr.storage import LocalStore

import shardwise
from shardwise.errors import CorruptShardError, UnsafeNameError
from test_giant_grid import POINTS, write_giant
from test_s3 import Target
from test_validate_first import structured_v2

CLIENTS = ["s3fs", "obstore"]


def reshard_to(src: Target, dst: Target, **kwargs):
    dst_where = dst.url if dst.client == "s3fs" else dst.where()
    return shardwise.reshard(
        src.where(),
        dst_where,
        storage_options=src.options(),
        target_options=dst.options(),
        **kwargs,
    )


@pytest.mark.parametrize("client", CLIENTS)
def test_a_draft_array_named_dotdot_in_a_bucket(s3, bucket, tmp_path, client):
    """The keys ``meta/root/...array.json`` and ``data/root/../c0/0`` in a bucket: every
    tool refuses at open, and no key is written in the bucket, inside the destination's
    prefix or next to it."""
    local = tmp_path / "src.zarr"
    draft(LocalStore(local), "..")
    src = Target(client, s3, bucket, "area/src.zarr")
    upload(local, src)
    before = _keys(s3, bucket)
    dst = Target(client, s3, bucket, "area/dst.zarr")
    for call in (
        lambda: reshard_to(src, dst),
        lambda: shardwise.tools.migrate.migrate(
            src.where(),
            dst.url if client == "s3fs" else dst.where(),
            storage_options=src.options(),
            target_options=dst.options(),
        ),
        lambda: shardwise.info(src.where(), storage_options=src.options()),
    ):
        with pytest.raises(UnsafeNameError, match=re.escape("meta/root/...array.json")):
            call()
    assert _keys(s3, bucket) == before


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("bomb", ["zstd-declared", "zstd-no-size", "gzip-members"])
def test_a_bomb_read_from_a_bucket(s3, bucket, tmp_path, pristine, client, bomb):  # noqa: F811
    import shutil

    codec, frame = bombs()[bomb]
    local = tmp_path / "s.zarr"
    shutil.copytree(pristine(codec), local)
    replace_chunk(local / KEY, (1, 0), frame)
    src = Target(client, s3, bucket, "bomb.zarr")
    upload(local, src)
    reader = shardwise.ArrayReader.open(src.where(), "v", storage_options=src.options())
    with pytest.raises(CorruptShardError) as info:
        reader[...]
    assert info.value.key == KEY and info.value.chunk == (1, 0)
    report = shardwise.verify(src.where(), decode=True, storage_options=src.options())
    assert KEY in report.bad_keys


@pytest.mark.parametrize("client", CLIENTS)
def test_a_giant_sparse_grid_in_a_bucket(s3, bucket, tmp_path, client):
    """10**7 x 10**7 shards, five stored: info reads an index per stored shard, a point
    read one shard; inventory refuses before reading any index."""
    local = tmp_path / "giant.zarr"
    write_giant(local, POINTS)
    src = Target(client, s3, bucket, "giant.zarr")
    upload(local, src)
    found = shardwise.info(src.where(), storage_options=src.options())
    (array,) = found.arrays
    assert array.shards_present == len(POINTS)
    (i, j), value = next(iter(POINTS.items()))
    reader = shardwise.ArrayReader.open(src.where(), "v", storage_options=src.options())
    assert reader[i, j] == value
    with pytest.raises(shardwise.errors.TooLargeError):
        shardwise.inventory(src.where(), "v", storage_options=src.options())


@pytest.mark.parametrize("client", CLIENTS)
def test_refusals_write_nothing_to_a_bucket(s3, bucket, tmp_path, client):
    """A fill value that cannot be encoded and a damaged document, resharded into the
    bucket: refused, and the bucket holds only the sources."""
    src = Target(client, s3, bucket, "structured.zarr")
    upload(structured_v2(tmp_path / "structured.zarr"), src)
    damaged = tmp_path / "damaged.zarr"
    g = zarr.open_group(damaged, mode="w", zarr_format=3)
    g.create_array("a", shape=(4,), chunks=(2,), dtype="f4", dimension_names=["t"])[...] = 1
    g.create_array("b", shape=(4,), chunks=(2,), dtype="f4", dimension_names=["t"])
    (damaged / "b" / "zarr.json").write_bytes(b"{")
    src2 = Target(client, s3, bucket, "damaged.zarr")
    upload(damaged, src2)
    before = _keys(s3, bucket)
    dst = Target(client, s3, bucket, "dst.zarr")
    with pytest.raises(shardwise.errors.WriteError, match="Nothing was written"):
        reshard_to(src, dst)
    with pytest.raises(shardwise.errors.UnsupportedArrayError, match=re.escape("b/zarr.json")):
        reshard_to(src2, dst)
    assert _keys(s3, bucket) == before
    found = shardwise.info(src2.where(), storage_options=src2.options())
    assert found.damaged == ("b",) and [a.path for a in found.arrays] == ["a"]
    reshard_to(src2, dst, variables=["a"])
    np.testing.assert_array_equal(
        zarr.open_array(dst.store(), path="a", mode="r")[...], np.ones(4, "f4")
    )
