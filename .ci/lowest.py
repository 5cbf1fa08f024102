"""Print a pip constraints file that pins every dependency pyproject.toml promises to
its lowest declared version: the runtime dependencies and the extras a user installs
(s3, icechunk, gcs, azure). ``make test`` installs the suite with it
(``.venv-lowest``), so the lower bounds are tested rather than only written down.

Usage: python .ci/lowest.py pyproject.toml > constraints.txt
"""

from __future__ import annotations

import re
import sys
import tomllib

EXTRAS = ("s3", "icechunk", "gcs", "azure")  # what users install beside the core
BOUND = re.compile(r"^(?P<name>[A-Za-z0-9_.-]+)(?:\[[^\]]*\])?\s*>=\s*(?P<low>[0-9][^,;\s]*)")


def lowest(pyproject: dict) -> list[str]:
    project = pyproject["project"]
    wanted = list(project["dependencies"])
    for extra in EXTRAS:
        wanted += project["optional-dependencies"][extra]
    pins: dict[str, str] = {}
    for spec in wanted:
        m = BOUND.match(spec.strip())
        if m is None:
            raise SystemExit(f"{spec!r} has no lower bound ('name>=version'): give it one")
        pins[m["name"].lower()] = m["low"]
    return [f"{name}=={low}" for name, low in sorted(pins.items())]


if __name__ == "__main__":
    with open(sys.argv[1] if len(sys.argv) > 1 else "pyproject.toml", "rb") as f:
        print("\n".join(lowest(tomllib.load(f))))
