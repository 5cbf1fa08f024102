"""Long-lived readers of an array that another process keeps rewriting.

A reader opened once (an ``ArrayReader``, a Dataset of ``engine="shardwise"``, lazy or
with dask chunks, a fan-out Dataset of ``shardwise.open_dataset``) keeps the shard
indexes it has read. Here a writer process (``consistency_writer.py``) rewrites random
inner chunks of the array for a few seconds, changing their compressed sizes so that
the offsets inside the rewritten shards move, while a thread per reader kind reads
random selections (``consistency.py``). Every value says where it belongs, so every
read is checked value by value. Each reader must return only right values (an older
generation is right; a value from another place is not), raise nothing (no
``CorruptShardError`` or ``TruncatedShardError`` for a shard that is only newer than its
cached index), and, once the writer has exited, read the last generation everywhere
(no cached index kept stale). On a local store, on S3 (moto's server), Google Cloud
Storage (fake-gcs-server, through gcsfs) and Azure (Azurite, through adlfs).

``shardwise.verify`` and ``shardwise.inventory`` run during the writes must report no
damage either: the store is never damaged, only rewritten.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

import shardwise
from consistency import SHARDWISE_KINDS, Writer, experiment
from consistency_writer import CHUNKS, SHAPE, make_array

# a writer process and readers racing it for seconds: run with the whole suite, not in
# the fast runs on other Pythons and the lowest versions
pytestmark = pytest.mark.slow

SECONDS = 6.0  # of writes
MIN_WRITES = 5  # fewer, and the run proved little: the machine was too busy


def where(request, tmp_path, name: str) -> tuple[str, dict | None]:
    """The store of a test parametrized by ``place``: a local path, or a URL on one of
    the emulators of conftest.py (moto's S3 server, fake-gcs-server, Azurite), and its
    storage options."""
    place = request.node.callspec.params["place"]
    if place == "local":
        return str(tmp_path / name), None
    if place == "gcs":
        server, bucket = request.getfixturevalue("gcs"), request.getfixturevalue("gcs_bucket")
        return f"gs://{bucket}/{name}", server.storage_options()
    if place == "azure":
        server = request.getfixturevalue("azurite")
        container = request.getfixturevalue("azure_container")
        return f"az://{container}/{name}", server.storage_options()
    server = request.getfixturevalue("s3")
    bucket = request.getfixturevalue("bucket")
    return f"s3://{bucket}/{name}", server.storage_options()


def table(tallies) -> str:
    """The tallies as lines of text, for an assertion's message."""
    return "\n".join(
        f"{t.kind}: reads {t.reads}, wrong values {t.wrong} (in {t.wrong_reads} reads), "
        f"errors {dict(t.errors)}, stale after stop {t.stale_after_stop}"
        + (f" ({t.final_error})" if t.final_error else "")
        + "".join(f"\n    first {name}: {message}" for name, message in t.first.items())
        for t in tallies.values()
    )


@pytest.mark.timeout(120)
@pytest.mark.parametrize("place", ["local", "s3", "gcs", "azure"])
def test_long_lived_readers_never_read_a_rewritten_shard_wrong(tmp_path, place, request):
    store, so = where(request, tmp_path, "c.zarr")
    # on moto's server readers that never pause starve the writer of the machine
    out = experiment(
        store, SHARDWISE_KINDS, SECONDS, storage_options=so, pause=0.0 if place == "local" else 0.1
    )
    assert not out.threads_left, f"readers still reading after 60 s: {out.threads_left}"
    assert out.writer["writes"] >= MIN_WRITES, out.writer
    for t in out.tallies.values():
        assert t.reads + sum(t.errors.values()) >= 5, f"{t.kind} hardly read:\n{table(out.tallies)}"
    bad = [t.kind for t in out.tallies.values() if not t.ok]
    assert not bad, f"{out.writer['writes']} writes; wrong for {bad}:\n{table(out.tallies)}"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("place", ["local", "s3"])
def test_verify_and_inventory_during_writes_report_no_damage(tmp_path, place, request):
    store, so = where(request, tmp_path, "c.zarr")
    make_array(store, "v", so)
    chunks = (SHAPE[0] // CHUNKS[0]) * (SHAPE[1] // CHUNKS[1])
    runs = {"verify": 0, "inventory": 0}
    problems: list[str] = []  # what verify reported, or what either raised
    present: list[int] = []  # stored inner chunks, per inventory: never fewer (none is erased)
    stop = threading.Event()
    pause = 0.0 if place == "local" else 0.1  # (as the readers above)

    def check_store() -> None:
        while not stop.wait(pause):
            try:
                report = shardwise.verify(store, storage_options=so, decode=True)
                problems.extend(f"verify: {p.key} {p.error}: {p.message}" for p in report.problems)
                runs["verify"] += 1
            except Exception as e:  # verify reports bad data, never raises for it
                problems.append(f"verify raised {type(e).__name__}: {str(e)[:300]}")
            try:
                inv = shardwise.inventory(store, "v", storage_options=so)
                present.append(int(inv.present.sum()))
                runs["inventory"] += 1
            except Exception as e:
                problems.append(f"inventory raised {type(e).__name__}: {str(e)[:300]}")

    thread = threading.Thread(target=check_store, name="verify", daemon=True)
    with Writer(
        {"store": store, "storage_options": so, "path": "v", "seconds": SECONDS, "seed": 1}
    ) as w:
        w.ready(timeout=60)
        thread.start()
        try:
            writes = w.wait(timeout=SECONDS + 90)["writes"]
        finally:
            stop.set()
            thread.join(timeout=60)
    assert not thread.is_alive(), "verify or inventory still running 60 s after the writes"
    assert writes >= MIN_WRITES
    assert runs["verify"] >= 2 and runs["inventory"] >= 2, runs
    assert not problems, f"{len(problems)} problems in {runs} runs:\n" + "\n".join(problems[:20])
    assert present == sorted(present), present
    # after the writes: every inner chunk stored, and whole; no temporary file left
    report = shardwise.verify(store, storage_options=so, decode=True)
    assert report.ok and not report.strays, report
    inv = shardwise.inventory(store, "v", storage_options=so)
    assert int(inv.present.sum()) == chunks
    assert bool(np.all(inv.stored_bytes.values > 0))
