"""``python -m shardwise ...``: the ``shardwise`` command line (:mod:`shardwise.cli.commands`)."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from shardwise.cli import main as cli


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line on ``argv`` (default: ``sys.argv[1:]``) and return its exit
    status instead of exiting."""
    try:
        cli.main(
            args=None if argv is None else list(argv),
            prog_name="python -m shardwise",
            standalone_mode=True,
        )
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else 0 if e.code is None else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
