"""Are an S3 endpoint's conditional puts atomic under concurrent requests?

For each of ``--tries`` new keys, ``--writers`` threads (each with its own boto3
client) wait at a barrier, then all put the key with ``If-None-Match: *`` (and, in a
second round, put an existing key with ``If-Match`` on the ETag they all read). On S3
exactly one put may succeed; the others get HTTP 412. The script counts the keys that
more than one put created, against moto's server as it is (``python -m moto.server``)
and against moto behind the lock of ``tests/moto_serialized.py`` (the endpoint the
concurrency tests use), and prints both.

    python benchmarks/moto_atomicity.py [--tries 200] [--writers 8]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--tries", type=int, default=200)
    ap.add_argument("--writers", type=int, default=8)
    args = ap.parse_args()

    from s3server import S3Server
    from test_concurrency import _race_creates

    for serialized in (False, True):
        name = "moto behind a write lock" if serialized else "moto as it is"
        for update, what in ((False, "If-None-Match: *"), (True, "If-Match: <etag>")):
            with (
                tempfile.TemporaryDirectory() as tmp,
                S3Server(Path(tmp), serialized=serialized) as s,
            ):
                bucket = s.new_bucket()
                wins = _race_creates(
                    s.endpoint, bucket, tries=args.tries, writers=args.writers, update=update
                )
            doubled = sum(w > 1 for w in wins)
            none = sum(w == 0 for w in wins)
            print(
                f"{name}, {what}: {doubled} of {args.tries} keys put by more than one of "
                f"{args.writers} concurrent conditional puts (most at once: {max(wins)}); "
                f"{none} by none",
                flush=True,
            )


if __name__ == "__main__":
    main()
