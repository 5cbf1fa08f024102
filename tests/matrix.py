"""Test matrices, whole in the full suite and covered in the fast runs.

A test parametrized over the product of several axes (formats x ways x scopes, fault
kinds x retry settings) runs every case in ``make test-main``; the fast runs of
``make test-3.13`` and ``make test-lowest`` (``-m "not slow and not exhaustive"``) run a
cover of it: as many cases as the longest axis has values, case ``i`` taking value
``i mod len(axis)`` of each axis, so that every value of every axis runs at least once.
The other cases carry the ``exhaustive`` mark. Where no product of axes applies (the n-th
of a count of requests), ``keep`` names the cases the fast runs take."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from typing import Any

import pytest
from _pytest.mark.structures import ParameterSet

EXHAUSTIVE = pytest.mark.exhaustive


def cover(*axes: Sequence[Any]) -> list[ParameterSet]:
    """The cases of the product of ``axes`` (each a list of values or ``pytest.param``\\ s
    of one value, whose marks and ids are kept), for ``parametrize`` with one name per
    axis; the ones outside the cover marked ``exhaustive``."""
    width = max(len(axis) for axis in axes)
    kept = {tuple(i % len(axis) for axis in axes) for i in range(width)}
    cases = []
    for combination in itertools.product(*(list(enumerate(axis)) for axis in axes)):
        values: list[Any] = []
        marks: list[Any] = []
        ids: list[str] = []
        for _, value in combination:
            if isinstance(value, ParameterSet):
                (inner,) = value.values
                values.append(inner)
                marks.extend(value.marks)
                ids.append(value.id if value.id is not None else str(inner))
            else:
                values.append(value)
                ids.append(str(value))
        if tuple(i for i, _ in combination) not in kept:
            marks.append(EXHAUSTIVE)
        cases.append(pytest.param(*values, marks=marks, id="-".join(ids)))
    return cases


def keep(cases: Iterable[Any], kept: Iterable[Any]) -> list[ParameterSet]:
    """``cases`` (tuples of values) as ``parametrize`` cases, those not in ``kept`` marked
    ``exhaustive``."""
    keep = {tuple(k) for k in kept}
    return [pytest.param(*case, marks=() if tuple(case) in keep else EXHAUSTIVE) for case in cases]
