"""Peak memory of reading an array one of whose inner chunks is a decompression bomb.

A float32 array of 1024 x 1024 in one shard of 16 inner chunks of 256 x 256 (256 KiB
decoded each), zstd or gzip, written by zarr-python to a local store under
``benchmarks/data/``. One inner chunk is then replaced by a small frame that
decompresses to ``--bomb-gib`` GiB of zeros (the shard's index and its crc32c fixed up
to match): a valid shard whose claims about one chunk are hostile.

Each reader runs in a child process of its own, which reads the whole array once; the
figure is the child's peak resident memory (``ru_maxrss``) and what the read ended with:

  baseline     the child's imports alone (numpy, zarr, shardwise), no read
  shardwise    ``shardwise.ArrayReader.open(path, "v")[...]``
  engine       ``xr.open_dataset(path, engine="shardwise").v.values``
  zarr-python  ``zarr.open_array(path, path="v")[...]`` (the anchor: zarr-python
               3's own codec pipeline)

Each child runs under an address-space limit of ``--limit-gib`` GiB (RLIMIT_AS), so a
reader that would allocate the whole bomb ends with a MemoryError there instead of
taking the machine; the row says so. Medians of ``--repeats`` runs.

    .venv/bin/python benchmarks/decode_bomb.py [--bomb-gib 4] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from common import DATA_DIR, machine

SHAPE, INNER = (1024, 1024), (256, 256)

READERS = {
    "baseline": "pass",
    "shardwise": "shardwise.ArrayReader.open(PATH, 'v')[...]",
    "engine": "xr.open_dataset(PATH, engine='shardwise').v.values",
    "zarr-python": "zarr.open_array(PATH, path='v')[...]",
}

CHILD = """
import json, resource, sys
limit = int(sys.argv[2]) << 30
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
import numpy as np, xarray as xr, zarr, shardwise
PATH = sys.argv[1]
outcome = "read"
try:
    {read}
except MemoryError:
    outcome = "MemoryError"
except Exception as e:
    outcome = type(e).__name__
print(json.dumps({{"rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                  "outcome": outcome}}))
"""


def bomb(codec: str, nbytes: int) -> bytes:
    """A frame of ``codec`` that decompresses to ``nbytes`` zero bytes, made without
    holding them (streamed), declaring no content size."""
    zeros = bytes(64 << 20)
    if codec == "zstd":
        import zstandard

        compressor = zstandard.ZstdCompressor(level=3).compressobj()
        out = [compressor.compress(zeros) for _ in range(nbytes // len(zeros))]
        return b"".join(out) + compressor.flush()
    import zlib

    gz = zlib.compressobj(9, zlib.DEFLATED, 31)  # a gzip member
    out = [gz.compress(zeros) for _ in range(nbytes // len(zeros))]
    return b"".join(out) + gz.flush()


def ensure_store(codec: str, bomb_gib: int) -> Path:
    import crc32c
    import zarr
    from zarr.codecs import GzipCodec, ZstdCodec

    path = DATA_DIR / f"bomb-{codec}-{bomb_gib}gib.zarr"
    stamp = path.with_name(path.name + ".recipe.json")
    want = {"version": 1, "codec": codec, "gib": bomb_gib}
    if stamp.exists() and json.loads(stamp.read_text()) == want:
        return path
    shutil.rmtree(path, ignore_errors=True)
    compressor = ZstdCodec(level=3) if codec == "zstd" else GzipCodec(level=5)
    root = zarr.open_group(path, mode="w", zarr_format=3)
    arr = root.create_array(
        "v",
        shape=SHAPE,
        chunks=INNER,
        shards=SHAPE,
        dtype="f4",
        compressors=compressor,
        dimension_names=["y", "x"],
    )
    arr[...] = np.random.default_rng(0).random(SHAPE, dtype="f4")
    shard = path / "v" / "c" / "0" / "0"
    blob = shard.read_bytes()
    n = (SHAPE[0] // INNER[0]) * (SHAPE[1] // INNER[1])
    index = np.frombuffer(blob[-(16 * n + 4) : -4], dtype="<u8").reshape(n, 2).copy()
    frame = bomb(codec, bomb_gib << 30)
    data = bytearray(blob[: -(16 * n + 4)])
    index[5] = (len(data), len(frame))  # inner chunk (1, 1): the bomb, appended
    data += frame
    tail = index.tobytes()
    shard.write_bytes(bytes(data) + tail + crc32c.crc32c(tail).to_bytes(4, "little"))
    stamp.write_text(json.dumps(want))
    print(f"  wrote {path}: a {len(frame):,}-byte {codec} frame that decodes to {bomb_gib} GiB")
    return path


def run(reader: str, path: Path, limit_gib: int) -> dict[str, object]:
    code = CHILD.format(read=READERS[reader])
    proc = subprocess.run(
        [sys.executable, "-c", code, str(path), str(limit_gib)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if proc.returncode != 0 or not proc.stdout.strip():
        return {"rss": None, "outcome": f"exit {proc.returncode}: {proc.stderr[-200:]}"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bomb-gib", type=int, default=4)
    parser.add_argument("--limit-gib", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(machine())
    for codec in ("zstd", "gzip"):
        path = ensure_store(codec, args.bomb_gib)
        print(f"\n{codec}: one inner chunk of 256 KiB declared, {args.bomb_gib} GiB in the frame")
        print(f"  {'reader':<12} {'peak RSS (median)':>18}   outcome")
        for reader in READERS:
            runs = [run(reader, path, args.limit_gib) for _ in range(args.repeats)]
            sizes = [r["rss"] for r in runs if r["rss"] is not None]
            rss = f"{statistics.median(sizes) / 2**20:,.0f} MiB" if sizes else "-"
            outcomes = sorted({str(r["outcome"]) for r in runs})
            print(f"  {reader:<12} {rss:>18}   {', '.join(outcomes)}")


if __name__ == "__main__":
    main()
