"""Faults during ``shardwise.to_zarr`` on a real LocalCluster with worker processes.

- a worker process killed (SIGKILL) while the write's tasks run: dask retries its work
  and the store equals the input;
- the whole job killed part-way (the client's process group, SIGKILL): readers polling
  every shard file see each shard absent, old or new, never torn, and re-running the
  same call produces the input, with stale ``LocalStore`` temp files left behind;
- two concurrent jobs writing regions of one array: disjoint shard-aligned regions both
  land; regions sharing a shard are caught by ``shardwise.regions.check_regions`` beforehand,
  and (forced deterministically) one job's values in the shared shard are lost.

The data is made inside the tasks (``map_blocks`` from each block's position, plus a
fixed sleep per block), so a write lasts a few seconds whatever the machine, and the
test process computes the same values without the sleep.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import dask.array as da
import numpy as np
import pytest
import xarray as xr
import zarr
from zarr.storage import LocalStore, WrapperStore

import shardwise
from bounded import join_all
from shardwise.codecs import ShardDecoder
from shardwise.format.metadata import ArrayInfo

from clusters import CLUSTER_OPTIONS

distributed = pytest.importorskip("distributed")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="SIGKILL and /proc"),
]

ROWS, COLS = 4000, 500  # float32, 8 MB
BLOCK = 100  # dask chunks: 40 blocks
SHARD = 400  # 10 shards of 800 kB along time
INNER = 100
NSHARDS = ROWS // SHARD
WRITE = {"shards": {"time": SHARD}, "chunks": {"time": INNER}, "consolidated": False}
SHARD_KEYS = [f"v/c/{i}/0" for i in range(NSHARDS)]
CLUSTER = {**CLUSTER_OPTIONS, "threads_per_worker": 1}
TIMEOUT = 60  # seconds for anything we wait on


# -- data made inside the tasks ----------------------------------------------------------
def block_values(version: int, lo: int, hi: int) -> np.ndarray:
    """Rows ``lo:hi`` of the array of ``version`` (``lo`` a multiple of BLOCK)."""
    return np.random.default_rng([version, lo]).standard_normal((hi - lo, COLS), dtype="f4")


def values(version: int) -> np.ndarray:
    return np.concatenate([block_values(version, lo, lo + BLOCK) for lo in range(0, ROWS, BLOCK)])


def _slow_block(
    version: int, delay: float, meet: tuple[str, int] | None, block_info: Any = None
) -> np.ndarray:
    (lo, hi), (c0, c1) = block_info[None]["array-location"]
    if meet is not None and lo == meet[1]:
        # a rendezvous with another job's block: neither finishes before both started
        Path(meet[0], str(lo)).touch()
        deadline = time.monotonic() + TIMEOUT / 2
        while len(os.listdir(meet[0])) < 2:
            if time.monotonic() > deadline:
                raise TimeoutError("the other job never started")
            time.sleep(0.005)
    time.sleep(delay)
    return block_values(version, lo, hi)[:, c0:c1]


def slow_dataset(version: int, delay: float, meet: tuple[str, int] | None = None) -> xr.Dataset:
    """The dataset of ``version`` as a dask array whose blocks each sleep ``delay`` (and
    whose block at row ``meet[1]`` waits for another one to start, see _slow_block)."""
    data = da.map_blocks(
        _slow_block,
        version,
        delay,
        meet,
        chunks=((BLOCK,) * (ROWS // BLOCK), (COLS,)),
        dtype="f4",
        meta=np.empty((0, 0), "f4"),
    )
    return xr.Dataset({"v": (("time", "x"), data)})


REGION = slice(200, 3800)  # cuts shards 0 and 9 (merged with their old rows)


def write(kind: str, path: Any, version: int, delay: float) -> None:
    """The write each scenario runs (and re-runs): ``"w"`` writes the whole dataset with
    mode="w", ``"region"`` writes rows REGION of it into an existing store."""
    ds = slow_dataset(version, delay)
    if kind == "w":
        shardwise.to_zarr(ds, path, mode="w", **WRITE)
    else:
        shardwise.to_zarr(ds.isel(time=REGION), path, region={"time": REGION}, consolidated=False)


def expected_after(kind: str, old: np.ndarray | None, version: int) -> np.ndarray:
    new = values(version)
    if kind == "w":
        return new
    assert old is not None
    out = old.copy()
    out[REGION] = new[REGION]
    return out


def run_job(kind: str, path: str) -> None:
    """The job the client-kill test runs in a subprocess: a LocalCluster with worker
    processes and a slow write (about 4 s of tasks)."""
    with (
        distributed.LocalCluster(**CLUSTER) as cluster,
        distributed.Client(cluster),
    ):
        print("cluster up", flush=True)
        write(kind, path, version=1, delay=0.1)
        print("write done", flush=True)


# -- helpers -----------------------------------------------------------------------------
def shard_decoder(path: Path) -> ShardDecoder:
    info = ArrayInfo.from_metadata(zarr.open_array(path / "v", mode="r").metadata, "v")
    return ShardDecoder(info.sharding, (SHARD, COLS), info.zdtype, info.fill_value, array="v")


def stored_shards(path: Path) -> set[str]:
    """Shard keys present on disk (LocalStore temp files ``*.partial`` left out)."""
    root = path / "v" / "c"
    if not root.exists():
        return set()
    return {
        f"v/c/{p.relative_to(root).as_posix()}"
        for p in root.rglob("*")
        if p.is_file() and not p.name.endswith(".partial")
    }


def temp_files(path: Path) -> list[str]:
    return sorted(p.relative_to(path).as_posix() for p in path.rglob("*.partial"))


def stale_temp_name(target: Path) -> Path:
    """The name LocalStore gives the temporary file of a put to ``target``."""
    return target.with_suffix(f".{uuid.uuid4().hex}.partial")


def assert_store_holds(path: Path, expected: np.ndarray) -> None:
    """zarr-python, xarray's zarr engine and shardwise all read ``expected``, and every
    shard exists and decodes to its rows."""
    np.testing.assert_array_equal(zarr.open_array(path / "v", mode="r")[...], expected)
    with xr.open_zarr(path, consolidated=False) as ds:
        np.testing.assert_array_equal(ds.v.values, expected)
    with shardwise.open_dataset(path, consolidated=False) as ds:
        np.testing.assert_array_equal(ds.v.values, expected)
    assert stored_shards(path) == set(SHARD_KEYS)
    decoder = shard_decoder(path)
    for i, key in enumerate(SHARD_KEYS):
        raw = (path / key).read_bytes()
        got = decoder.decode(np.frombuffer(raw, "u1"), key=key)
        np.testing.assert_array_equal(got, expected[i * SHARD : (i + 1) * SHARD])


def wait_for(condition: Any, what: str, timeout: float = TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def _group_members(pgid: int) -> list[int]:
    """Live (not zombie) processes of a process group."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[2]) == pgid and fields[0] != "Z":
            out.append(int(entry))
    return out


class ShardPoller(threading.Thread):
    """Reads every shard file over and over, the way a reader of the store would, and
    classifies each distinct content it sees: ``"absent"``, ``"old"``, ``"new"`` (decoded
    values equal the shard's rows before or after the write), or ``"torn"``."""

    def __init__(
        self, path: Path, decoder: ShardDecoder, old: np.ndarray | None, new: np.ndarray
    ) -> None:
        super().__init__(daemon=True)
        self.path, self.decoder, self.old, self.new = path, decoder, old, new
        self.stop = threading.Event()
        self.polls = 0  # sweeps over all shards
        self.reads = 0  # shard files read
        self.kinds: dict[str, dict[str | None, str]] = {k: {None: "absent"} for k in SHARD_KEYS}
        self.seen: dict[str, set[str]] = {k: set() for k in SHARD_KEYS}  # kinds seen
        self.current: dict[str, str] = dict.fromkeys(SHARD_KEYS, "not polled yet")
        self.error: BaseException | None = None

    def classify(self, i: int, key: str, raw: bytes) -> str:
        try:
            got = self.decoder.decode(np.frombuffer(raw, "u1"), key=key)
        except Exception as e:
            return f"torn ({type(e).__name__}: {e})"
        rows = slice(i * SHARD, (i + 1) * SHARD)
        if np.array_equal(got, self.new[rows]):
            return "new"
        if self.old is not None and np.array_equal(got, self.old[rows]):
            return "old"
        return "torn (decodes to other values)"

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                for i, key in enumerate(SHARD_KEYS):
                    try:
                        raw = (self.path / key).read_bytes()
                    except FileNotFoundError:
                        raw, digest = None, None
                    else:
                        digest = hashlib.blake2b(raw, digest_size=16).hexdigest()
                        self.reads += 1
                    kinds = self.kinds[key]
                    if digest not in kinds:
                        assert raw is not None
                        kinds[digest] = self.classify(i, key, raw)
                    self.current[key] = kinds[digest]
                    self.seen[key].add(kinds[digest])
                self.polls += 1
                time.sleep(0.002)  # leave the (2-core) machine to the writers
        except BaseException as e:  # surfaced by the test
            self.error = e

    def count(self, kind: str) -> int:
        return sum(v == kind for v in self.current.values())


# -- 1. a worker process killed in the middle of the write -------------------------------
@pytest.fixture
def own_client():
    """A cluster of its own: this test kills one of its workers."""
    with (
        distributed.LocalCluster(**CLUSTER) as cluster,
        distributed.Client(cluster) as client,
    ):
        yield client


def test_worker_killed_mid_write(own_client, tmp_path):
    client = own_client
    path = tmp_path / "s.zarr"
    pids = client.run(os.getpid)
    assert len(set(pids.values())) == 2
    delayed = shardwise.to_zarr(slow_dataset(1, 0.1), path, mode="w", compute=False, **WRITE)
    assert not stored_shards(path)  # compute=False wrote the metadata only

    with distributed.get_task_stream(client) as stream:
        started = time.time()
        future = client.compute(delayed)
        victim: list[str] = []

        def some_shards_written_and_a_worker_busy() -> bool:
            if len(stored_shards(path)) < 2:
                return False
            # a worker that has done some of the job (in the task stream so far) and has
            # more to do: on a loaded machine a busy worker may not have finished its
            # first task yet
            worked = {t["worker"] for t in client.get_task_stream(start=started)}
            busy = [w for w, keys in client.processing().items() if keys and w in worked]
            victim[:] = busy[:1]
            return bool(busy)

        wait_for(some_shards_written_and_a_worker_busy, "two shards and a worker that did some")
        at_kill = stored_shards(path)
        assert future.status == "pending"  # the job is not finished ...
        assert len(at_kill) < NSHARDS  # ... and has shards left to write
        busy_keys = client.processing()[victim[0]]
        assert busy_keys
        os.kill(pids[victim[0]], signal.SIGKILL)
        result = future.result(timeout=TIMEOUT)
    assert isinstance(result, xr.backends.ZarrStore)

    # the nanny restarted the killed worker process
    client.wait_for_workers(2, timeout=TIMEOUT)
    wait_for(lambda: len(client.run(os.getpid)) == 2, "the restarted worker")
    after = client.run(os.getpid)
    assert pids[victim[0]] not in after.values()
    assert len(set(after.values()) - set(pids.values())) == 1

    # dask redid the victim's share: the tasks it had been given when it was killed
    # ran on another worker, or results it held (lost with it) were computed again
    victim_done = {t["key"] for t in stream.data if t["worker"] == victim[0]}
    elsewhere = {t["key"] for t in stream.data if t["worker"] != victim[0]}
    assert victim_done  # it had worked on this job
    redone = (set(busy_keys) | victim_done) & elsewhere
    assert redone
    assert_store_holds(path, values(1))
    print(
        f"\nworker kill: {len(at_kill)}/{NSHARDS} shards on disk at the kill, "
        f"{len(busy_keys)} task(s) assigned to the victim then, {len(victim_done)} done by "
        f"it before; {len(redone)} task(s) run again elsewhere "
        f"({len(set(busy_keys) & elsewhere)} of those assigned to it); "
        f"temp files left: {temp_files(path)}"
    )


# -- 2. the whole job killed part-way, then re-run ---------------------------------------
@pytest.fixture(scope="module")
def client():
    with (
        distributed.LocalCluster(**{**CLUSTER, "threads_per_worker": 2}) as cluster,
        distributed.Client(cluster) as client,
    ):
        yield client


JOB_SCRIPT = """\
import faulthandler, signal, sys
faulthandler.register(signal.SIGUSR1, all_threads=True)  # the test asks when it hangs
sys.path.insert(0, {tests!r})
from test_faults import run_job  # also imported by the spawned worker processes

if __name__ == "__main__":
    run_job(sys.argv[1], sys.argv[2])
"""


@pytest.mark.parametrize("kind", ["w", "region"])
def test_job_killed_part_way_then_rerun(client, tmp_path, kind):
    """``kind="w"``: mode="w" over a store holding other values (the group is cleared,
    then shards come back one by one); ``kind="region"``: a region write over old
    values (shards 0 and 9 are merged with their old rows). Readers poll every shard
    from before the job starts until the re-run is done."""
    path = tmp_path / "s.zarr"
    shardwise.to_zarr(slow_dataset(0, 0.0), path, mode="w", **WRITE)  # the old values
    old = values(0)
    new = expected_after(kind, old, 1)
    poller = ShardPoller(path, shard_decoder(path), old, new)
    poller.start()
    try:
        _kill_and_rerun(kind, path, tmp_path, poller, old, new)
    finally:
        poller.stop.set()
        join_all([poller], timeout=TIMEOUT)


def _kill_and_rerun(
    kind: str, path: Path, tmp_path: Path, poller: ShardPoller, old: np.ndarray, new: np.ndarray
) -> None:
    wait_for(lambda: poller.polls > 0, "the first poll")
    assert poller.count("old") == NSHARDS

    script = tmp_path / "job.py"
    script.write_text(JOB_SCRIPT.format(tests=str(Path(__file__).parent)))
    log = tmp_path / "job.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, str(script), kind, str(path)],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: client, scheduler, workers
        )
    try:
        try:
            wait_for(
                lambda: poller.count("new") >= 3 or proc.poll() is not None or poller.error,
                "three shards written by the job",
            )
        except AssertionError as e:
            os.kill(proc.pid, signal.SIGUSR1)  # the job's stacks, into its log
            time.sleep(1)
            raise AssertionError(f"{e}; the job's output:\n{log.read_text()[-20000:]}") from e
        assert proc.poll() is None, log.read_text()
        assert poller.error is None
        killed_with = dict(poller.current)
        os.killpg(proc.pid, signal.SIGKILL)  # the whole job, at once
        proc.wait(timeout=TIMEOUT)
        wait_for(lambda: not _group_members(proc.pid), "every process of the job to end")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert "write done" not in log.read_text()

    # nothing writes any more: the store stays as the kill left it
    polls = poller.polls
    wait_for(lambda: poller.polls >= polls + 2, "two polls after the kill")
    snapshot = dict(poller.current)
    time.sleep(0.3)
    assert poller.current == snapshot
    n_new = sum(v == "new" for v in snapshot.values())
    assert 3 <= n_new < NSHARDS, snapshot  # the kill hit the job half-way
    others = {v for v in snapshot.values() if v != "new"}
    assert others == ({"absent"} if kind == "w" else {"old"}), snapshot
    real_temps = temp_files(path)

    # stale LocalStore temp files, as a put killed half-way leaves them
    half = (path / SHARD_KEYS[0]).read_bytes() if (path / SHARD_KEYS[0]).exists() else b""
    for key in SHARD_KEYS[:2]:
        (path / key).parent.mkdir(parents=True, exist_ok=True)
        stale_temp_name(path / key).write_bytes(half[: len(half) // 2] or b"\x00" * 100)
    stale_temp_name(path / "v" / "zarr.json").write_bytes(b'{"zarr_format": 3, "node_t')
    if kind == "w":
        # the new dataset's metadata comes after its data: the killed job left shards
        # and no document, so no reader opens a dataset of fill values
        assert not list(path.rglob("zarr.json")), sorted(path.rglob("*"))
        with pytest.raises(FileNotFoundError):
            xr.open_zarr(path, consolidated=False)
    else:
        # the half-written store reads despite them: new shards, and old ones
        with xr.open_zarr(path, consolidated=False) as ds:
            got = ds.v.values
        for i, key in enumerate(SHARD_KEYS):
            rows = slice(i * SHARD, (i + 1) * SHARD)
            want = {"new": new[rows], "old": old[rows]}
            np.testing.assert_array_equal(got[rows], want[snapshot[key]])
    if kind == "w":
        # and one of a metadata put in the group (zarr-python warns about it when
        # listing the group, see test_stale_group_temp_file; mode="w" clears it)
        stale_temp_name(path / "zarr.json").write_bytes(b'{"zarr_format": 3, "node_t')

    # the same call again (without the slow-down), readers still polling
    write(kind, path, version=1, delay=0.0)
    wait_for(lambda: poller.count("new") == NSHARDS, "the re-run's shards to be polled")
    poller.stop.set()
    join_all([poller], timeout=TIMEOUT)
    assert poller.error is None

    # no reader ever saw a torn shard: only absent, old or new
    allowed = {"absent", "old", "new"} if kind == "w" else {"old", "new"}
    seen = {key: sorted(kinds) for key, kinds in poller.seen.items()}
    assert all(set(kinds) <= allowed for kinds in seen.values()), seen
    assert_store_holds(path, new)
    if kind == "w":
        assert temp_files(path) == []  # mode="w" cleared the group, stale files too
    else:
        assert len(temp_files(path)) >= 3  # read around them
    states = sum(len(k) - 1 for k in poller.kinds.values())
    print(
        f"\njob kill ({kind}): {poller.polls} polls, {poller.reads} shard reads, "
        f"{states} distinct shard contents, states seen per shard {seen}; at the kill "
        f"{n_new}/{NSHARDS} new (poller saw {killed_with}); temp files left by the "
        f"kill: {real_temps}"
    )


def test_stale_group_temp_file(client, tmp_path):
    """A temp file of a metadata put killed half-way, left in a group's directory, does
    not stop reads: zarr-python warns when it lists the group, xarray and shardwise
    read the data."""
    path = tmp_path / "s.zarr"
    shardwise.to_zarr(slow_dataset(0, 0.0).isel(time=slice(0, 800)), path, mode="w", **WRITE)
    stale_temp_name(path / "zarr.json").write_bytes(b'{"zarr_format": 3, "node_t')
    with pytest.warns(UserWarning, match="not recognized as a component"):
        ds = xr.open_zarr(path, consolidated=False)
    with ds:
        np.testing.assert_array_equal(ds.v.values, values(0)[:800])
    with pytest.warns(UserWarning, match="not recognized as a component"):
        ds = shardwise.open_dataset(path, consolidated=False)
    with ds:
        np.testing.assert_array_equal(ds.v.values, values(0)[:800])


# -- 3. two concurrent jobs writing regions of one array --------------------------------
def template(path: Path) -> None:
    """The store both jobs write into: metadata and the time coordinate, no v shards."""
    ds = slow_dataset(0, 0.0).assign_coords(time=np.arange(ROWS))
    shardwise.to_zarr(ds, path, mode="w", compute=False, **WRITE)


def region_job(
    store: Any,
    version: int,
    region: slice,
    delay: float,
    meet: str | None = None,
    independent_writers: bool | None = None,
) -> None:
    """A region write of rows ``region`` of the dataset of ``version``; with ``meet``,
    its first block meets the first block of the other job calling it so."""
    where = None if meet is None else (meet, region.start)
    part = slow_dataset(version, delay, where).isel(time=region)
    shardwise.to_zarr(
        part,
        store,
        region={"time": region},
        consolidated=False,
        independent_writers=independent_writers,
    )


def run_concurrently(jobs: list[Any]) -> list[tuple[float, float]]:
    """Run each job in a thread of its own, started together; their wall-clock spans."""
    start = threading.Barrier(len(jobs), timeout=60)
    spans: list[Any] = [None] * len(jobs)
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            start.wait()
            t0 = time.monotonic()
            jobs[i]()
            spans[i] = (t0, time.monotonic())
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(len(jobs))]
    for t in threads:
        t.start()
    join_all(threads, timeout=TIMEOUT)
    if errors:
        raise errors[0]
    return spans


def test_concurrent_disjoint_regions_both_land(client, tmp_path):
    path = tmp_path / "s.zarr"
    template(path)
    r1, r2 = {"time": slice(0, 2000)}, {"time": slice(2000, ROWS)}  # on shard boundaries
    assert shardwise.regions.shared_shards(path, [r1, r2]) == {}
    shardwise.regions.check_regions(path, [r1, r2], variables=["v"])  # no error

    meet = tmp_path / "meet"
    meet.mkdir()
    with distributed.get_task_stream(client) as stream:
        run_concurrently(
            [
                lambda: region_job(path, 1, r1["time"], 0.05, str(meet)),
                lambda: region_job(path, 2, r2["time"], 0.05, str(meet)),
            ]
        )
    # both jobs' tasks ran at the same time on the cluster (their first blocks waited
    # for each other)
    assert sorted(os.listdir(meet)) == ["0", "2000"]
    spans = []
    for version, region in ((1, r1), (2, r2)):
        ds = slow_dataset(version, 0.05, (str(meet), region["time"].start))
        # its blocks (named after isel's layer when dask fuses the two)
        layers = {ds.v.data.name, ds.isel(time=region["time"]).v.data.name}
        times = [
            (ss["start"], ss["stop"])
            for t in stream.data
            if isinstance(t["key"], tuple) and t["key"][0] in layers
            for ss in t["startstops"]
            if ss["action"] == "compute"
        ]
        assert len(times) == 20  # its 20 blocks
        spans.append((min(a for a, _ in times), max(b for _, b in times)))
    (a0, a1), (b0, b1) = spans
    assert a0 < b1 and b0 < a1, spans

    expected = np.concatenate([values(1)[:2000], values(2)[2000:]])
    assert_store_holds(path, expected)
    np.testing.assert_array_equal(zarr.open_array(path / "time")[...], np.arange(ROWS))


class GateStore(WrapperStore[Any]):
    """Holds every put of one key until ``parties`` reads of that key have completed, in
    any process (a file per completed read in the directory ``gate``). With two jobs
    this forces the interleaving that loses an update: both read the shard before
    either puts it back."""

    def __init__(self, store: Any, key: str, gate: str, parties: int = 2) -> None:
        super().__init__(store)
        self.key, self.gate, self.parties = key, gate, parties

    def _with_store(self, store: Any) -> GateStore:
        return type(self)(store, self.key, self.gate, self.parties)

    def with_read_only(self, read_only: bool = False) -> GateStore:
        # (zarr-python's WrapperStore has it from 3.2 on; 3.1's opens need it for mode "r")
        return self._with_store(self._store.with_read_only(read_only))

    def __str__(self) -> str:
        return f"gate-{self._store}"

    async def get(self, key: str, prototype: Any = None, byte_range: Any = None) -> Any:
        out = await self._store.get(key, prototype, byte_range)
        if key == self.key:
            Path(self.gate, uuid.uuid4().hex).touch()
        return out

    async def set(self, key: str, value: Any) -> None:
        if key == self.key:
            # (the module's cluster has 2 threads per worker: the other job's task
            # never waits behind this one)
            deadline = time.monotonic() + TIMEOUT / 2
            while len(os.listdir(self.gate)) < self.parties:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the other read of {key} never came")
                await asyncio.sleep(0.01)
        await self._store.set(key, value)


def test_regions_sharing_a_shard_are_caught_before_writing(client, tmp_path):
    """Regions 0:2200 and 2200:4000 both touch shard 5 (rows 2000:2400): the check
    names it, and two jobs run at once anyway lose one job's rows of that shard."""
    path = tmp_path / "s.zarr"
    template(path)
    r1, r2 = {"time": slice(0, 2200)}, {"time": slice(2200, ROWS)}
    assert shardwise.regions.shared_shards(path, [r1, r2], variables=["v"]) == {
        "v": {"v/c/5/0": [0, 1]}
    }
    # without variables=, every array along time counts, the time coordinate too
    assert shardwise.regions.shared_shards(path, [r1, r2]) == {
        "time": {"time/c/5": [0, 1]},
        "v": {"v/c/5/0": [0, 1]},
    }
    with pytest.raises(shardwise.errors.RegionConflictError) as info:
        shardwise.regions.check_regions(path, [r1, r2], variables=["v"])
    assert isinstance(info.value, ValueError)
    assert info.value.array == "v" and info.value.key == "v/c/5/0"
    assert "v/c/5/0" in str(info.value)

    # the hazard, forced, with plain puts (independent_writers=False; with the default
    # guard, see test_concurrency.py): both jobs read shard 5 before either writes it
    gate = tmp_path / "gate"
    gate.mkdir()
    store = GateStore(LocalStore(path), "v/c/5/0", str(gate))
    run_concurrently(
        [
            lambda: region_job(store, 1, r1["time"], 0.0, independent_writers=False),
            lambda: region_job(store, 2, r2["time"], 0.0, independent_writers=False),
        ]
    )
    assert len(os.listdir(gate)) == 2  # each job read shard 5 once, both before a put
    got = zarr.open_array(path / "v", mode="r")[...]
    one, two = values(1), values(2)
    np.testing.assert_array_equal(got[:2000], one[:2000])  # the other shards are intact
    np.testing.assert_array_equal(got[2400:], two[2400:])
    kept_1 = np.array_equal(got[2000:2200], one[2000:2200])
    kept_2 = np.array_equal(got[2200:2400], two[2200:2400])
    assert kept_1 != kept_2  # exactly one job's rows of shard 5 survived ...
    lost = got[2200:2400] if kept_1 else got[2000:2200]
    assert np.isnan(lost).all()  # ... the other's are the fill value the shard held
    # written one after the other, the same two jobs keep both
    region_job(path, 1, r1["time"], 0.0)
    region_job(path, 2, r2["time"], 0.0)
    np.testing.assert_array_equal(
        zarr.open_array(path / "v", mode="r")[...], np.concatenate([one[:2200], two[2200:]])
    )


def test_check_regions_sees_shared_chunks_of_zarr_v2_arrays(client, tmp_path):
    """shardwise.to_zarr writes Zarr v2 arrays too (dask.array.store along the chunk
    grid), and two jobs whose regions share a v2 chunk lose an update exactly as with a
    shared shard (shown here, forced as above). check_regions must not call them safe."""
    path = tmp_path / "v2.zarr"
    zeros = xr.Dataset({"v": (("time", "x"), np.zeros((800, 50), "f4"))})
    shardwise.to_zarr(
        zeros.chunk({"time": 100}),
        path,
        zarr_format=2,
        encoding={"v": {"chunks": (400, 50)}},
        consolidated=False,
    )
    r1, r2 = slice(0, 500), slice(500, 800)  # both write rows of chunk 1 (400:800)
    gate = tmp_path / "gate"
    gate.mkdir()
    store = GateStore(LocalStore(path), "v/1.0", str(gate))

    def job(region: slice, value: float) -> None:
        n = region.stop - region.start
        part = xr.Dataset({"v": (("time", "x"), np.full((n, 50), value, "f4"))})
        shardwise.to_zarr(  # plain puts: the hazard (Zarr v2's merges are never guarded)
            part.chunk({"time": 100}),
            store,
            region={"time": region},
            consolidated=False,
            independent_writers=False,
        )

    run_concurrently([lambda: job(r1, 1.0), lambda: job(r2, 2.0)])
    got = zarr.open_array(path / "v", mode="r")[...]
    assert (got[:400] == 1).all()
    kept_1, kept_2 = (got[400:500] == 1).all(), (got[500:] == 2).all()
    assert kept_1 != kept_2  # one job's rows of chunk 1 are lost
    assert shardwise.regions.shared_shards(path, [{"time": r1}, {"time": r2}]) == {
        "v": {"v/1.0": [0, 1]}
    }
    with pytest.raises(shardwise.errors.RegionConflictError):
        shardwise.regions.check_regions(path, [{"time": r1}, {"time": r2}])


def test_writes_into_an_existing_zarr_v2_store(client, tmp_path):
    """As with Dataset.to_zarr, writes into an existing store keep its Zarr format when
    zarr_format is not given (they used to write a second, v3 hierarchy beside it)."""
    path = tmp_path / "v2.zarr"
    zeros = xr.Dataset({"v": (("time", "x"), np.zeros((800, 50), "f4"))}).chunk({"time": 400})
    kwargs = {"encoding": {"v": {"chunks": (400, 50)}}, "consolidated": False}
    shardwise.to_zarr(zeros, path, zarr_format=2, **kwargs)
    shardwise.to_zarr(zeros + 1, path, mode="a", consolidated=False)
    assert not (path / "zarr.json").exists() and not (path / "v" / "zarr.json").exists()
    v2 = zarr.open_group(path, mode="r", zarr_format=2)
    np.testing.assert_array_equal(v2["v"][...], 1)
    part = (zeros.isel(time=slice(0, 400)) + 2).chunk({"time": 100})
    shardwise.to_zarr(part, path, region={"time": slice(0, 400)}, consolidated=False)
    shardwise.to_zarr(zeros + 3, path, append_dim="time", consolidated=False)
    want = np.concatenate([np.full((400, 50), 2), np.full((400, 50), 1), np.full((800, 50), 3)])
    np.testing.assert_array_equal(zarr.open_array(path / "v", mode="r", zarr_format=2)[...], want)
