"""Long-lived readers of an array that another process keeps rewriting: what each way of
reading returns while shards change under it, and after.

One writer process (``tests/consistency_writer.py``) rewrites random inner chunks (or
runs of 1-3 along axis 0) of a 400 x 60 int64 array in shards of 100 x 60 rows, inner
chunks of 10 x 20, zstd, for ``--seconds``, alternating noise that compresses to
almost nothing with noise that does not, so the offsets inside a rewritten shard move;
then it writes the FINAL generation over the whole array and exits. Each reader kind
(``tests/consistency.py``) is opened once before the writer starts and read from in a
thread of its own: random blocks, single inner chunks, blocks across shard boundaries,
the whole array. Every value says where it belongs, so each read is checked value by
value. Per store and kind, the table gives:

- reads: reads that returned (checked) blocks;
- wrong values: elements from the wrong place or garbage, and in how many reads;
- errors: exceptions raised by reads, by class;
- stale after stop: after the writer has exited, elements of one more read of the whole
  array that are not the FINAL generation (all of them when that read raised).

Kinds: ``arrayreader``, ``engine-lazy``, ``engine-dask``, ``fanout`` (shardwise's), and
the baselines ``zarr`` (xarray's engine="zarr", zarr-python's reads) and ``tensorstore``
(zarr3 driver, default context). ``--recheck`` passes
``shardwise.ReadOptions(recheck_cached_data=...)`` to the shardwise kinds (``true``,
``open`` or a number of seconds); without it none is passed (the default, ``True``).

On S3 (moto's server on 127.0.0.1, ``tests/s3server.py``) readers pause ``--pause-s3``
seconds between reads: readers that never pause take the machine from the writer.

    python benchmarks/reader_consistency.py [--seconds 10] [--stores local,s3]
        [--kinds arrayreader,engine-lazy,engine-dask,fanout,zarr,tensorstore]
        [--recheck true|open|SECONDS]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
TESTS = HERE.parent / "tests"
sys.path.insert(0, str(TESTS))


def recheck_value(text: str) -> bool | str | float:
    """``--recheck``'s value as ``ReadOptions(recheck_cached_data=...)`` takes it."""
    low = text.strip().lower()
    if low == "true":
        return True
    if low == "open":
        return "open"
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--recheck takes true, open or a number of seconds, not {text!r}"
        ) from None


def run_store(place: str, args: argparse.Namespace, read_options: Any) -> dict[str, Any]:
    from consistency import experiment

    kinds = args.kinds
    if place == "local":
        with tempfile.TemporaryDirectory() as tmp:
            out = experiment(
                str(Path(tmp) / "c.zarr"),
                kinds,
                args.seconds,
                read_options=read_options,
                seed=args.seed,
                pause=args.pause_local,
            )
    elif place == "s3":
        from s3server import endpoint_with_bucket

        with endpoint_with_bucket() as (server, bucket):
            out = experiment(
                f"s3://{bucket}/c.zarr",
                kinds,
                args.seconds,
                storage_options=server.storage_options(),
                read_options=read_options,
                seed=args.seed,
                pause=args.pause_s3,
            )
    else:
        raise SystemExit(f"unknown store {place!r}: local or s3")
    return {"place": place, "outcome": out}


def errors_cell(errors: dict[str, int]) -> str:
    return ", ".join(f"{name} {n}" for name, n in sorted(errors.items())) or "0"


def main() -> None:
    from consistency import KINDS

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--seconds", type=float, default=10.0, help="of writes, per store")
    ap.add_argument("--stores", default="local,s3", help="comma-separated: local, s3")
    ap.add_argument("--kinds", default=",".join(KINDS), help="comma-separated reader kinds")
    ap.add_argument("--recheck", type=recheck_value, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--pause-local", type=float, default=0.0, help="seconds between reads")
    ap.add_argument("--pause-s3", type=float, default=0.1, help="seconds between reads")
    ap.add_argument("--json", type=Path, help="also write the tallies to this file")
    args = ap.parse_args()
    args.kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    unknown = sorted(set(args.kinds) - set(KINDS))
    if unknown:
        raise SystemExit(f"unknown kinds {unknown}; known: {', '.join(KINDS)}")
    read_options = None
    if args.recheck is not None:
        import shardwise

        read_options = shardwise.ReadOptions(recheck_cached_data=args.recheck)

    print(
        f"machine: {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}; "
        f"{args.seconds:g} s of writes per store; "
        + (
            f"read_options recheck_cached_data={args.recheck!r}"
            if read_options is not None
            else "no read_options"
        )
    )
    results = []
    for place in [p.strip() for p in args.stores.split(",") if p.strip()]:
        t0 = time.perf_counter()
        r = run_store(place, args, read_options)
        r["wall"] = time.perf_counter() - t0
        results.append(r)
        print(
            f"{place}: {r['outcome'].writer['writes']} writes in "
            f"{r['outcome'].writer['seconds']:.1f} s, {r['wall']:.1f} s in all"
            + (
                f"; still reading after the writer stopped: {r['outcome'].threads_left}"
                if r["outcome"].threads_left
                else ""
            ),
            flush=True,
        )

    print()
    print("| store | reader | reads | wrong values (reads) | errors | stale after stop |")
    print("|---|---|---|---|---|---|")
    for r in results:
        for t in r["outcome"].tallies.values():
            stale = "-" if t.stale_after_stop is None else str(t.stale_after_stop)
            if t.final_error:
                stale += f" ({t.final_error.split(':')[0]})"
            print(
                f"| {r['place']} | {t.kind} | {t.reads} | {t.wrong} ({t.wrong_reads}) "
                f"| {errors_cell(t.errors)} | {stale} |"
            )
    firsts = {
        (name, message.split(" (array")[0])
        for r in results
        for t in r["outcome"].tallies.values()
        for name, message in t.first.items()
    }
    if firsts:
        print("\nerrors seen (first message of each, per class and wording):")
        for name, message in sorted(firsts):
            print(f"- {name}: {message}")
    if args.json:
        args.json.write_text(
            json.dumps(
                [
                    {
                        "store": r["place"],
                        "writer": r["outcome"].writer,
                        "tallies": [t.summary() for t in r["outcome"].tallies.values()],
                    }
                    for r in results
                ],
                indent=1,
            )
        )


if __name__ == "__main__":
    main()
