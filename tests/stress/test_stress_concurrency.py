"""Concurrency, longer and wider than the suite runs it (``test_concurrency.py``,
``test_reader_consistency.py``):

- 2, 4 and 8 independent writer processes rewriting interleaved 10-row regions of one
  array (every shard written by all of them), 3 rounds, on the local disk and on S3:
  none of their values lost;
- the S3 endpoint the concurrency tests use (moto behind a write lock) lets exactly one
  of 8 concurrent conditional puts of a key win, for 200 keys, creates and updates;
- long-lived readers of an array another process rewrites for 30 s, on the local disk
  and on S3: no wrong value, no error, nothing stale once the writer has stopped.
"""

from __future__ import annotations

import numpy as np
import pytest
import zarr

from consistency import SHARDWISE_KINDS, experiment
from test_concurrency import _race_creates, expected_regions, jobs, new_array, run_all
from test_reader_consistency import table

pytestmark = [pytest.mark.slow, pytest.mark.stress]


@pytest.mark.timeout(900)
@pytest.mark.parametrize("place", ["local", "s3"])
@pytest.mark.parametrize("writers", [2, 4, 8])
def test_contending_region_writers_lose_nothing(tmp_path, request, place, writers):
    so = None
    store = str(tmp_path / "a.zarr")
    if place == "s3":
        server = request.getfixturevalue("s3_serialized")
        store = f"s3://{request.getfixturevalue('serialized_bucket')}/a.zarr"
        so = server.storage_options()
    new_array(store, storage_options=so)
    run_all(jobs(store, "regions", writers, 3, 10, storage_options=so), timeout=800)
    got = zarr.open_array(store, path="v", storage_options=so)[...]
    np.testing.assert_array_equal(got, expected_regions(3))


@pytest.mark.timeout(900)
@pytest.mark.parametrize("update", [False, True], ids=["create", "update"])
def test_the_serialized_endpoint_lets_one_of_many_conditional_puts_win(
    s3_serialized, serialized_bucket, update
):
    wins = _race_creates(s3_serialized.endpoint, serialized_bucket, tries=200, update=update)
    assert wins == [1] * 200, [(key, n) for key, n in enumerate(wins) if n != 1]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("place", ["local", "s3"])
def test_long_lived_readers_read_nothing_wrong_for_30_seconds(tmp_path, request, place):
    store, so, pause = str(tmp_path / "c.zarr"), None, 0.0
    if place == "s3":
        server = request.getfixturevalue("s3")
        store = f"s3://{request.getfixturevalue('bucket')}/c.zarr"
        so, pause = server.storage_options(), 0.1  # (readers that never pause starve moto)
    out = experiment(store, SHARDWISE_KINDS, 30.0, storage_options=so, pause=pause)
    assert not out.threads_left, f"readers still reading after 60 s: {out.threads_left}"
    assert out.writer["writes"] >= 10, out.writer
    bad = [t.kind for t in out.tallies.values() if not t.ok]
    assert not bad, f"{out.writer['writes']} writes; wrong for {bad}:\n{table(out.tallies)}"
