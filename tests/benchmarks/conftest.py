"""Micro-benchmarks (pytest-benchmark): the costs a change to shardwise could move, each
small and fast, timed by ``make bench-micro`` and run once as plain tests by the suite
(``--benchmark-disable``).

Where pytest-benchmark is not installed (or not loaded), the ``benchmark`` fixture below
calls each function once, as ``--benchmark-disable`` does, so the suite runs them
everywhere.
"""

from __future__ import annotations

from typing import Any

import pytest


class _Once:
    """pytest-benchmark's fixture, disabled: calls the function once."""

    def __init__(self) -> None:
        self.group: str | None = None
        self.extra_info: dict[str, Any] = {}

    def __call__(self, function: Any, *args: Any, **kwargs: Any) -> Any:
        return function(*args, **kwargs)

    def pedantic(
        self,
        target: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
        setup: Any = None,
        **timing: Any,
    ) -> Any:
        if setup is not None and (made := setup()) is not None:
            args, kwargs = made
        return target(*args, **(kwargs or {}))


class _Fallback:
    @pytest.fixture
    def benchmark(self) -> _Once:
        return _Once()


def pytest_configure(config: pytest.Config) -> None:
    if not config.pluginmanager.hasplugin("benchmark"):
        config.pluginmanager.register(_Fallback(), "benchmark-fallback")
