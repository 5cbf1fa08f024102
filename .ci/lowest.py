"""Print a pip constraints file that pins every dependency pyproject.toml promises to
its lowest declared version: the runtime dependencies and every extra (each an optional
feature a user installs: s3, icechunk, gcs, azure, http), and pandas, which xarray brings
(see ALSO). ``make test`` installs the suite with it (``.venv-lowest``), so the lower
bounds are tested rather than only written down.

Usage: python .ci/lowest.py pyproject.toml > constraints.txt
"""

from __future__ import annotations

import re
import sys
import tomllib

BOUND = re.compile(r"^(?P<name>[A-Za-z0-9_.-]+)(?:\[[^\]]*\])?\s*>=\s*(?P<low>[0-9][^,;\s]*)")

# what shardwise's dependencies bring that is held at its oldest working release too, as a
# user of the oldest releases has it: pandas comes with xarray (the demo imports it), whose
# floor (pandas >= 2.2) leaves the resolver the newest pandas, newer than xarray 2025.11;
# 2.2.2 is the first release that works with numpy 2 (2.2.0 and 2.2.1 require numpy < 2)
ALSO = {"pandas": "2.2.2"}


def lowest(pyproject: dict) -> list[str]:
    project = pyproject["project"]
    wanted = list(project["dependencies"])
    for requirements in project["optional-dependencies"].values():
        wanted += requirements
    pins: dict[str, str] = dict(ALSO)
    for spec in wanted:
        m = BOUND.match(spec.strip())
        if m is None:
            raise SystemExit(f"{spec!r} has no lower bound ('name>=version'): give it one")
        pins[m["name"].lower()] = m["low"]
    return [f"{name}=={low}" for name, low in sorted(pins.items())]


if __name__ == "__main__":
    with open(sys.argv[1] if len(sys.argv) > 1 else "pyproject.toml", "rb") as f:
        print("\n".join(lowest(tomllib.load(f))))
