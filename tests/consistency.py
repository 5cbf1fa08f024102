"""Readers that keep reading one array while another process rewrites it: the loops
of the reader-consistency tests (``test_reader_consistency.py``, and the longer runs of
``stress/test_stress_concurrency.py``).

Each reader *kind* is a way of reading the array that a long-lived program would
keep open: it is opened once, before the writer (``consistency_writer.py``) starts,
and read from until after the writer has exited:

- ``arrayreader``: ``shardwise.ArrayReader.open(store, path)``, read with
  ``reader[rows, cols]``;
- ``engine-lazy``: ``xr.open_dataset(store, engine="shardwise", chunks=None)``, read
  with ``ds[path][rows, cols].values``;
- ``engine-dask``: the same with ``chunks={}`` (a dask chunk per shard), computed
  with the threaded scheduler;
- ``fanout``: ``shardwise.open_dataset(store, chunks="inner")`` (the fan-out graph:
  one index task per shard, a read task per inner chunk), threaded scheduler;
- ``zarr`` (a baseline): ``xr.open_dataset(store, engine="zarr", chunks=None)``;
- ``tensorstore`` (a baseline): ``ts.open({"driver": "zarr3", ...}, read=True)``.

Every value the writer writes says where it belongs (``consistency_writer.check``),
so each read is checked value by value; a :class:`Tally` per kind counts the reads,
the wrong values and the errors (by exception class, with the first message of
each), and, once the writer has exited, how many values of one more read of the whole
array are not the writer's FINAL generation (``stale_after_stop``).
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from consistency_writer import CHUNKS, SHAPE, SHARDS, check, make_array, not_final

WRITER = Path(__file__).with_name("consistency_writer.py")
SHARDWISE_KINDS = ("arrayreader", "engine-lazy", "engine-dask", "fanout")
BASELINE_KINDS = ("zarr", "tensorstore")
KINDS = SHARDWISE_KINDS + BASELINE_KINDS

Sel = tuple[slice, slice]


# -- the readers ---------------------------------------------------------------------------
@dataclass
class Reader:
    """One opened handle of one kind: ``read(rows, cols)`` gives the block as numpy."""

    kind: str
    read: Callable[[slice, slice], np.ndarray]
    close: Callable[[], None] = lambda: None


def _read_options_kw(read_options: Any) -> dict[str, Any]:
    """``read_options=`` only when one was asked for (today's code may not know it)."""
    return {} if read_options is None else {"read_options": read_options}


def _tensorstore_kvstore(store: str, path: str, so: dict[str, Any] | None) -> dict[str, Any]:
    if not store.startswith("s3://"):
        return {"driver": "file", "path": f"{Path(store) / path}/"}
    bucket, _, prefix = store[len("s3://") :].partition("/")
    spec: dict[str, Any] = {
        "driver": "s3",
        "bucket": bucket,
        "path": f"{prefix.strip('/')}/{path}/",
        "aws_credentials": {"type": "environment"},
    }
    so = so or {}
    if "endpoint_url" in so:
        spec["endpoint"] = so["endpoint_url"]
    region = (so.get("client_kwargs") or {}).get("region_name")
    if region:
        spec["aws_region"] = region
    return spec


def open_reader(
    kind: str,
    store: str,
    path: str = "v",
    storage_options: dict[str, Any] | None = None,
    read_options: Any = None,
) -> Reader:
    """Open the array ``path`` of ``store`` (a local path or an ``s3://`` URL) as
    ``kind`` reads it. ``read_options`` (a ``shardwise.ReadOptions`` or a dict) goes to
    the shardwise kinds only, and only when given."""
    so = storage_options
    if kind == "arrayreader":
        import shardwise

        extra = {} if read_options is None else {"options": _as_options(read_options)}
        reader = shardwise.ArrayReader.open(store, path, storage_options=so, **extra)
        return Reader(kind, lambda r, c: np.asarray(reader[r, c]))
    if kind in ("engine-lazy", "engine-dask", "zarr"):
        import xarray as xr

        engine = "zarr" if kind == "zarr" else "shardwise"
        ds = xr.open_dataset(
            store,
            engine=engine,
            chunks={} if kind == "engine-dask" else None,
            consolidated=False,
            storage_options=so,
            **({} if kind == "zarr" else _read_options_kw(read_options)),
        )
        var = ds[path]
        if kind == "engine-dask":
            return Reader(
                kind,
                lambda r, c: np.asarray(var[r, c].data.compute(scheduler="threads")),
                ds.close,
            )
        return Reader(kind, lambda r, c: np.asarray(var[r, c].values), ds.close)
    if kind == "fanout":
        import shardwise

        ds = shardwise.open_dataset(
            store,
            chunks="inner",
            consolidated=False,
            storage_options=so,
            **_read_options_kw(read_options),
        )
        var = ds[path]
        return Reader(
            kind,
            lambda r, c: np.asarray(var[r, c].data.compute(scheduler="threads")),
            ds.close,
        )
    if kind == "tensorstore":
        import tensorstore as ts

        arr = ts.open(
            {"driver": "zarr3", "kvstore": _tensorstore_kvstore(store, path, so)}, read=True
        ).result()
        return Reader(kind, lambda r, c: np.asarray(arr[r, c].read().result()))
    raise ValueError(f"unknown reader kind {kind!r}; one of {', '.join(KINDS)}")


def _as_options(read_options: Any) -> Any:
    """ArrayReader.open takes a ``ReadOptions``; the engines take a dict too."""
    if isinstance(read_options, dict):
        import shardwise

        return shardwise.ReadOptions(**read_options)
    return read_options


# -- what the readers saw ------------------------------------------------------------------
@dataclass
class Tally:
    """What one kind's reads found."""

    kind: str
    reads: int = 0
    values: int = 0  # elements checked
    wrong: int = 0  # elements that were not their own position (or no written noise)
    wrong_reads: int = 0  # reads with at least one wrong element
    errors: Counter[str] = field(default_factory=Counter)  # exception class -> count
    first: dict[str, str] = field(default_factory=dict)  # exception class -> its message
    stale_after_stop: int | None = None  # elements of the last read that are not FINAL
    final_error: str | None = None  # the last read's exception, if it raised

    def error(self, e: BaseException) -> None:
        name = type(e).__name__
        self.errors[name] += 1
        self.first.setdefault(name, _message(e))

    @property
    def ok(self) -> bool:
        return (
            self.wrong == 0
            and not self.errors
            and self.stale_after_stop == 0
            and self.final_error is None
        )

    def summary(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "reads": self.reads,
            "wrong": self.wrong,
            "wrong_reads": self.wrong_reads,
            "errors": dict(self.errors),
            "first": self.first,
            "stale_after_stop": self.stale_after_stop,
            "final_error": self.final_error,
        }


def _message(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return (text[0] if text else repr(e))[:300]


# -- what to read --------------------------------------------------------------------------
def selection(
    rng: random.Random,
    shape: Sequence[int] = SHAPE,
    shards: Sequence[int] = SHARDS,
    chunks: Sequence[int] = CHUNKS,
) -> Sel:
    """A random selection: one inner chunk, a random block, a block spanning a shard
    boundary along axis 0, or the whole array."""
    nrows, ncols = shape
    pick = rng.random()
    if pick < 0.35:  # one inner chunk
        i = rng.randrange(nrows // chunks[0]) * chunks[0]
        j = rng.randrange(ncols // chunks[1]) * chunks[1]
        return slice(i, i + chunks[0]), slice(j, j + chunks[1])
    cols = _span(rng, ncols)
    if pick < 0.7:  # anywhere
        return _span(rng, nrows), cols
    if pick < 0.92:  # across a shard boundary along axis 0
        edge = rng.randrange(1, nrows // shards[0]) * shards[0]
        return slice(edge - rng.randint(1, shards[0]), edge + rng.randint(1, shards[0])), cols
    return slice(0, nrows), slice(0, ncols)  # the whole array


def _span(rng: random.Random, n: int) -> slice:
    a, b = sorted(rng.sample(range(n + 1), 2))
    return slice(a, b)


def read_loop(
    reader: Reader, tally: Tally, stop: threading.Event, seed: int, pause: float = 0.0
) -> None:
    """Read random selections with ``reader`` until ``stop``, checking every value,
    ``pause`` seconds between reads; nothing raised escapes (each exception is counted
    in ``tally``)."""
    rng = random.Random(seed)
    while not stop.wait(pause):
        rows, cols = selection(rng)
        try:
            got = reader.read(rows, cols)
            want = (rows.stop - rows.start, cols.stop - cols.start)
            if got.shape != want:
                raise ValueError(f"read {rows}, {cols}: shape {got.shape}, not {want}")
            bad = check(got, rows, cols)
        except Exception as e:
            tally.error(e)
            continue
        tally.reads += 1
        tally.values += got.size
        tally.wrong += bad
        tally.wrong_reads += bool(bad)


def final_read(reader: Reader, tally: Tally) -> None:
    """One read of the whole array after the writer has exited: every value must be
    the FINAL generation's."""
    rows, cols = slice(0, SHAPE[0]), slice(0, SHAPE[1])
    try:
        got = reader.read(rows, cols)
        tally.stale_after_stop = not_final(got, rows, cols)
    except Exception as e:
        tally.stale_after_stop = SHAPE[0] * SHAPE[1]
        tally.final_error = f"{type(e).__name__}: {_message(e)}"


# -- the writer ----------------------------------------------------------------------------
class Writer:
    """``consistency_writer.py`` with ``cfg`` in a process of its own; a context manager
    that kills it on the way out if it is still running. Its stdout is read line by
    line in a thread (:meth:`ready` waits for its first line), its stderr goes to a
    temporary file (a pipe nobody reads could fill and stall it)."""

    def __init__(self, cfg: dict[str, Any]) -> None:
        self.cfg = cfg
        self.lines: list[str] = []
        self._ready = threading.Event()
        self._stderr = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115  (closed on exit)
        self.proc = subprocess.Popen(
            [sys.executable, str(WRITER), json.dumps(cfg)],
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
        )
        self._drain = threading.Thread(target=self._read_stdout, daemon=True)
        self._drain.start()

    def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)
            if '"ready"' in line:
                self._ready.set()
        self._ready.set()  # exited: nobody waits for a line that will not come

    def stderr(self) -> str:
        self._stderr.seek(0)
        return self._stderr.read()[-4000:]

    def ready(self, timeout: float) -> None:
        """Until the writer says it is ready (its imports done: started on a busy
        machine, it would spend its seconds importing)."""
        if not self._ready.wait(timeout) or self.proc.poll() is not None:
            raise RuntimeError(
                f"the writer did not get ready in {timeout} s "
                f"(exit status {self.proc.poll()}):\n{self.stderr()}"
            )

    def wait(self, timeout: float) -> dict[str, Any]:
        """Its last JSON line, once it has exited 0 within ``timeout`` seconds."""
        code = self.proc.wait(timeout=timeout)
        self._drain.join(timeout=30)
        if code != 0:
            raise RuntimeError(f"the writer exited {code}:\n{self.stderr()}")
        return json.loads(self.lines[-1])

    def __enter__(self) -> Writer:
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait(timeout=30)
            self._drain.join(timeout=30)
        finally:
            if self.proc.stdout is not None:
                self.proc.stdout.close()
            self._stderr.close()


# -- one experiment ------------------------------------------------------------------------
@dataclass
class Outcome:
    tallies: dict[str, Tally]
    writer: dict[str, Any]  # the writer's line: writes, seconds
    threads_left: list[str]  # kinds whose reading thread did not stop in time


def experiment(
    store: str,
    kinds: Sequence[str],
    seconds: float,
    storage_options: dict[str, Any] | None = None,
    read_options: Any = None,
    path: str = "v",
    seed: int = 0,
    pause: float = 0.0,
    writer_timeout: float | None = None,
    join_timeout: float = 60.0,
) -> Outcome:
    """Create the array, open one reader of each of ``kinds``, run the writer for
    ``seconds`` while a thread per kind reads (``pause`` seconds between reads: on
    moto's server, readers that never pause starve the writer), then one last read per
    kind."""
    make_array(store, path, storage_options)
    readers = {k: open_reader(k, store, path, storage_options, read_options) for k in kinds}
    tallies = {k: Tally(k) for k in kinds}
    stop = threading.Event()
    threads = [
        threading.Thread(
            target=read_loop,
            args=(readers[k], tallies[k], stop, seed * 100 + n, pause),
            name=f"read-{k}",
            daemon=True,
        )
        for n, k in enumerate(kinds)
    ]
    cfg = {
        "store": store,
        "storage_options": storage_options,
        "path": path,
        "seconds": seconds,
        "seed": seed,
        "final": True,
    }
    try:
        with Writer(cfg) as w:
            w.ready(timeout=120)
            for t in threads:
                t.start()
            out = w.wait(timeout=writer_timeout or seconds + 120)
    finally:
        stop.set()
        deadline = time.monotonic() + join_timeout
        for t in threads:
            if t.ident is not None:  # started
                t.join(timeout=max(0.0, deadline - time.monotonic()))
    left = [k for k, t in zip(kinds, threads, strict=True) if t.is_alive()]
    try:
        for k in kinds:
            if k not in left:
                final_read(readers[k], tallies[k])
    finally:
        for k in kinds:
            if k not in left:
                readers[k].close()
    return Outcome(tallies, out, left)
