"""``python -m shardwise verify PATH [--group G] [--decode]``: check every shard."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] != "verify":
        print("usage: python -m shardwise verify PATH [--group G] [--decode]", file=sys.stderr)
        return 2
    from shardwise.integrity import main as verify_main

    return verify_main(args[1:])


if __name__ == "__main__":
    sys.exit(main())
