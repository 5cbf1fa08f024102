"""The stress tests: what the suite checks, run longer, harder or more often (faults at
high rates on every operation, more concurrent writers, longer races), for minutes.

They run only when asked for with ``-m stress`` (``make stress``): other runs skip them,
and the fast runs, which leave out ``slow`` tests, deselect them (each is ``slow`` too).
"""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(config, items):
    if "stress" in (config.option.markexpr or ""):
        return  # asked for (or, as "not stress", deselected)
    skip = pytest.mark.skip(reason="a stress test: run it with -m stress (make stress)")
    for item in items:
        if item.get_closest_marker("stress"):
            item.add_marker(skip)
