"""What ``read_throughput.py`` and ``write_throughput.py`` share: the codec floors, the
single-process reference peers' plumbing, and the runner that times them.

The FLOOR of a throughput benchmark is the codec work alone, on the same inner chunks the
stores hold, on 2 threads: a ``ThreadPoolExecutor(2)`` with one work item per shard (the
list of that shard's inner chunks), in the client process, before any cluster starts,
best of ``FLOOR_RUNS`` runs after one warm-up. No I/O, no copy into an array and no
allocation per chunk where the codec allows it:

  decode (read floor)   numcodecs.Zstd().decode(chunk, out=buffer): every chunk into ONE
                        output buffer per thread, allocated once (threading.local)
  compress (write floor, the fastest of three)
      numcodecs.Zstd(level=1).encode(chunk)           a new bytes object per chunk
      zstandard.ZstdCompressor(level=1, write_content_size=True).compress(chunk),
                                                      one compressor per thread
      ZSTD_compress2 through python-zstandard's cffi binding into ONE output buffer per
                                                      thread, one ZSTD_CCtx per thread

The inputs (compressed frames, or C-contiguous numpy chunks) are prepared before timing.
Not a module to run; the two scripts import it (run as scripts, this directory is on
``sys.path``).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

FLOOR_RUNS = 3  # floors and single-process references: best of 3 after one warm-up
FUSED_PIPELINE = "zarr.core.codec_pipeline.FusedCodecPipeline"
COMPRESSORS = ("numcodecs.Zstd", "zstandard.ZstdCompressor", "ZSTD_compress2 (cffi)")


# -- the floors --------------------------------------------------------------------------
class DecodeFloor:
    """Decode every compressed inner chunk with ``numcodecs.Zstd().decode(c, out=buf)``
    into one reused buffer per thread; calling it returns the bytes decoded."""

    def __init__(self, chunk_nbytes: int) -> None:
        self.chunk_nbytes = chunk_nbytes
        self.local = threading.local()

    def _shard(self, chunks: Sequence[Any]) -> int:
        t = self.local
        if not hasattr(t, "out"):
            import numcodecs

            t.out = np.empty(self.chunk_nbytes, dtype=np.uint8)
            t.zstd = numcodecs.Zstd()
        out, decode = t.out, t.zstd.decode
        for c in chunks:
            decode(c, out=out)
        return len(chunks) * self.chunk_nbytes

    def __call__(self, shards: Sequence[Sequence[Any]], pool: ThreadPoolExecutor) -> int:
        return sum(pool.map(self._shard, shards))


class CompressFloor:
    """Compress every inner chunk at zstd level 1 with one of ``COMPRESSORS``, keeping
    per-thread state (compressor, context, output buffer) in a ``threading.local``;
    calling it returns the compressed bytes."""

    def __init__(self, how: str, chunk_nbytes: int) -> None:
        if how not in COMPRESSORS:
            raise ValueError(how)
        self.how = how
        self.chunk_nbytes = chunk_nbytes
        self.local = threading.local()

    def _numcodecs(self, chunks: Sequence[np.ndarray]) -> int:
        t = self.local
        if not hasattr(t, "zstd"):
            import numcodecs

            t.zstd = numcodecs.Zstd(level=1)
        encode = t.zstd.encode
        return sum(len(encode(c)) for c in chunks)

    def _zstandard(self, chunks: Sequence[np.ndarray]) -> int:
        t = self.local
        if not hasattr(t, "cctx"):
            import zstandard

            t.cctx = zstandard.ZstdCompressor(level=1, write_content_size=True)
        compress = t.cctx.compress
        return sum(len(compress(c)) for c in chunks)

    def _compress2(self, chunks: Sequence[np.ndarray]) -> int:
        from zstandard import backend_cffi

        ffi, lib = backend_cffi.ffi, backend_cffi.lib
        t = self.local
        if not hasattr(t, "cctx"):
            t.cctx = ffi.gc(lib.ZSTD_createCCtx(), lib.ZSTD_freeCCtx)
            lib.ZSTD_CCtx_setParameter(t.cctx, lib.ZSTD_c_compressionLevel, 1)
            t.out = np.empty(lib.ZSTD_compressBound(self.chunk_nbytes), dtype=np.uint8)
            t.dst = ffi.from_buffer(t.out, require_writable=True)
        cctx, out, dst, compress2 = t.cctx, t.out, t.dst, lib.ZSTD_compress2
        total = 0
        for c in chunks:
            n = compress2(cctx, dst, out.size, ffi.from_buffer(c), c.nbytes)
            if lib.ZSTD_isError(n):
                raise RuntimeError(ffi.string(lib.ZSTD_getErrorName(n)).decode())
            total += n
        return total

    def __call__(self, shards: Sequence[Sequence[np.ndarray]], pool: ThreadPoolExecutor) -> int:
        work = {
            "numcodecs.Zstd": self._numcodecs,
            "zstandard.ZstdCompressor": self._zstandard,
            "ZSTD_compress2 (cffi)": self._compress2,
        }[self.how]
        return sum(pool.map(work, shards))


# -- zarr-python's codec pipelines and tensorstore ---------------------------------------
def zarr_pipelines() -> dict[str, str | None]:
    """The zarr-python peers: method name -> ``codec_pipeline.path`` (None: the default).
    The fused pipeline only where the installed zarr has it (it does in zarr 3.4.2)."""
    import zarr.core.codec_pipeline

    pipelines: dict[str, str | None] = {}
    if hasattr(zarr.core.codec_pipeline, "FusedCodecPipeline"):
        pipelines["zarr-python fused"] = FUSED_PIPELINE
    else:
        print(
            f"  note: zarr {zarr.__version__} has no FusedCodecPipeline; "
            "its zarr-python peer is skipped"
        )
    pipelines["zarr-python default"] = None
    return pipelines


@contextmanager
def zarr_pipeline(path: str | None) -> Iterator[None]:
    """zarr-python's codec pipeline set to ``path`` in the block (None: leave it)."""
    import zarr

    if path is None:
        yield
        return
    with zarr.config.set({"codec_pipeline.path": path}):
        yield


def have_tensorstore() -> bool:
    try:
        import tensorstore  # noqa: F401
    except ImportError:
        print("  note: tensorstore is not installed; its peer is skipped")
        return False
    return True


def tensorstore_kvstore(array_path: Path) -> dict[str, Any]:
    return {"driver": "file", "path": str(array_path)}


def write_group_metadata(path: Path) -> None:
    """A bare Zarr v3 group at ``path`` (so that xarray can open what tensorstore writes
    under it)."""
    path.mkdir(parents=True, exist_ok=True)
    doc = {"zarr_format": 3, "node_type": "group", "attributes": {}}
    (path / "zarr.json").write_text(json.dumps(doc))


# -- timing ------------------------------------------------------------------------------
def interleaved(
    runs: dict[str, Callable[[], Any]],
    rounds: int,
    *,
    before: Callable[[str], None] | None = None,
    after: Callable[[str, int, Any], None] | None = None,
    nbytes: int | None = None,
    indent: str = "    ",
) -> dict[str, list[float]]:
    """Time every run once as a warm-up, then ``rounds`` times, interleaved round by
    round, printing each round; returns every run's times, the warm-up first. ``before``
    (given the method) and ``after`` (the method, the round, 0 = warm-up, and what the run
    returned) are called around each run, outside the timing."""
    times: dict[str, list[float]] = {m: [] for m in runs}
    for rnd in range(rounds + 1):
        shown = []
        for m, run in runs.items():
            if before is not None:
                before(m)
            t0 = time.perf_counter()
            out = run()
            seconds = time.perf_counter() - t0
            if after is not None:
                after(m, rnd, out)
            del out
            times[m].append(seconds)
            rate = "" if nbytes is None else f" ({nbytes / seconds / 1e9:.2f} GB/s)"
            shown.append(f"{m} {seconds:.2f} s{rate}")
        print(f"{indent}{'warm-up' if rnd == 0 else f'round {rnd}'}: " + ", ".join(shown))
    return times


def smooth_field(
    shape: tuple[int, int], chunks: tuple[int, int], seed: int, noise: float, decimals: int
) -> Any:
    """A lazy float32 2-D dask array like measured data: a smooth sum of sines plus
    ``noise`` times dask's seeded standard normal, rounded to ``decimals`` (so it
    compresses as real fields do), the same values every run."""
    import dask.array as da
    import numpy as np

    y = da.arange(shape[0], chunks=chunks[0], dtype=np.float32)[:, None]
    x = da.arange(shape[1], chunks=chunks[1], dtype=np.float32)[None, :]
    tau = np.float32(2 * np.pi)
    smooth = (
        10 * np.sin(tau * x / 3000 + np.float32(0.5)) * np.cos(tau * y / 2500)
        + 4 * np.sin(tau * (x + y) / 700)
        + 2 * np.cos(tau * (x - 2 * y) / 300)
    )
    rng = da.random.default_rng(seed)
    rough = rng.standard_normal(shape, chunks=chunks, dtype=np.float32)
    return da.round(smooth + np.float32(noise) * rough, decimals).astype(np.float32)
