"""Rows an append has claimed and not yet written, recorded where running the same
append again finds them.

An append that other jobs may make at the same time grows its arrays' metadata (claims
its rows, so that another job's append lands after them) before it writes the rows.
The claim is recorded in the same conditional put: in the array's attributes, under
:data:`CLAIMS`, ``{token: {"axis": a, "rows": [start, stop]}}``, where the token is the
call's (:func:`call_token`: its data's dask token, the append dimension, the shape).
Once every row is written, the entry is taken out again (:func:`release`, a
conditional put). An append that fails in between leaves the entry: the same call run
again finds its token and writes those rows instead of appending again. Zarr v2 arrays
keep their attributes in another document than their shape, so no claim is recorded
for them (a failed append there is reported, and completed with a region write)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from shardwise.errors import (
    ConflictError,
    IncompleteAppendError,
    incomplete_append,
    naming_metadata_errors,
)
from shardwise.format.metadata import node_document
from shardwise.io.conditional import Conditional, distinct
from shardwise.io.retry import retries, tries

__all__ = [
    "CLAIMS",
    "append_failed",
    "call_token",
    "Unrecorded",
    "claim_in",
    "claim_in_document",
    "claim_of",
    "rebased",
    "release",
    "shown_before",
    "with_claim",
]

#: the attribute under which an array's claimed and not yet written rows are recorded
CLAIMS = "shardwise:appending"


def call_token(*parts: Any) -> str:
    """The token of an append call: dask's deterministic token of ``parts`` (the data,
    which for a dask array is its graph's name, with the append dimension and shape).
    The same data appended by the same script is the same token in every process. Data
    dask cannot tokenize gets a random token (another call every time: it appends)."""
    import uuid

    from dask.base import tokenize

    try:
        return str(tokenize(*parts))
    except Exception:  # (an object without a deterministic token, a missing optional import)
        return uuid.uuid4().hex


def claim_of(attributes: Mapping[str, Any], token: str) -> tuple[int, int, int] | None:
    """The claim ``token`` recorded in ``attributes``: ``(axis, start, stop)``, or None.
    A malformed record is no claim (it is not this call's)."""
    claims = attributes.get(CLAIMS)
    entry = claims.get(token) if isinstance(claims, Mapping) else None
    if not isinstance(entry, Mapping):
        return None
    axis, rows = entry.get("axis"), entry.get("rows")
    if not isinstance(axis, int) or not isinstance(rows, list) or len(rows) != 2:
        return None
    start, stop = rows
    if not (isinstance(start, int) and isinstance(stop, int) and 0 <= start < stop):
        return None
    return axis, start, stop


def with_claim(
    attributes: Mapping[str, Any], token: str, axis: int, start: int, stop: int
) -> dict[str, Any]:
    """``attributes`` with the claim of rows ``start:stop`` along ``axis`` recorded."""
    claims = attributes.get(CLAIMS)
    claims = dict(claims) if isinstance(claims, Mapping) else {}
    claims[token] = {"axis": axis, "rows": [start, stop]}
    return {**attributes, CLAIMS: claims}


class Unrecorded(ValueError):
    """An array grew, and its claim cannot be recorded in its ``zarr.json``: its grid
    is not a regular one (a rectilinear grid's edges sum to its shape)."""


def claim_in_document(document: bytes, token: str, dim: str, old: bytes | None) -> bytes | None:
    """An array's ``zarr.json`` (``document``, as an append's metadata step wrote it)
    with the rows it grew along dimension ``dim`` claimed for ``token``, compared with
    the document it was (``old``); None where it did not grow along ``dim``. Raises
    :class:`Unrecorded` for an array that grew and has no regular grid."""
    new = json.loads(document)
    names = new.get("dimension_names") or []
    if old is None or dim not in names or new.get("node_type") != "array":
        return None
    axis = names.index(dim)
    start, stop = json.loads(old)["shape"][axis], new["shape"][axis]
    if stop <= start:
        return None
    if (new.get("chunk_grid") or {}).get("name") != "regular":
        raise Unrecorded(dim)
    new["attributes"] = with_claim(new.get("attributes") or {}, token, axis, start, stop)
    return json.dumps(new, indent=2).encode()


def claim_in(document: bytes, token: str) -> tuple[int, int, int] | None:
    """The claim of ``token`` recorded in an array's ``zarr.json`` (``(axis, start,
    stop)``), None when there is none."""
    metadata = node_document(document, "array")
    if metadata is None:
        return None
    attributes = metadata.get("attributes")
    return claim_of(attributes, token) if isinstance(attributes, Mapping) else None


def shown_before(document: bytes, axis: int, start: int) -> bytes:
    """An array's ``zarr.json`` as it was before its claimed rows: ``start`` long along
    ``axis`` (what the same append, run again, plans from, to write them)."""
    metadata = json.loads(document)
    shape = list(metadata["shape"])
    shape[axis] = start
    metadata["shape"] = shape
    return json.dumps(metadata, indent=2).encode()


def rebased(ours: bytes, read: bytes | None, current: bytes | None) -> bytes | None:
    """An array's ``zarr.json`` as an append's commit puts it (``ours``), put again over
    the document as it is now (``current``) where another job changed only the claims
    recorded in it since the commit read it (``read``: another append's claim taken out
    once its data was written): ours with the current claims and ours merged. None where
    anything else changed (a conflict). ``current`` itself where it holds the claims
    ours adds: ours was put (its answer lost) and another append went over it."""
    mine, before, now = node_document(ours), node_document(read), node_document(current)
    if mine is None or before is None or now is None:
        return None

    def claims(document: dict[str, Any]) -> dict[str, Any]:
        found = (document.get("attributes") or {}).get(CLAIMS)
        return dict(found) if isinstance(found, Mapping) else {}

    def rest(document: dict[str, Any]) -> dict[str, Any]:
        attributes = {k: v for k, v in (document.get("attributes") or {}).items() if k != CLAIMS}
        return {**document, "attributes": attributes}

    added = {k: v for k, v in claims(mine).items() if k not in claims(before)}
    if added and all(claims(now).get(k) == v for k, v in added.items()):
        # ours landed (its response lost) and another job's append went over it,
        # keeping our claim: settled, as it is now
        return current
    if rest(before) != rest(now):
        return None
    merged = {**claims(now), **added}
    attributes = dict(rest(mine)["attributes"])
    if merged:
        attributes[CLAIMS] = merged
    return distinct(json.dumps({**mine, "attributes": attributes}, indent=2).encode())


def release(guard: Conditional, key: str, token: str) -> None:
    """Take the claim of ``token`` out of the metadata document at ``key`` (its rows are
    written): a conditional put, again while other jobs change the document."""
    advice = (
        "The append is complete; the record of its claim is left in the array's "
        f"attributes ({CLAIMS!r}): delete it, or run the append again, which writes "
        "the same rows again and deletes it."
    )
    for _ in tries():
        with naming_metadata_errors("an append's last step", key, advice):
            data, version = guard.get(key)
            if data is None:
                return
            document = node_document(data)
            if document is None:  # (no longer an array's document: nothing to take out)
                return
            attributes = document.get("attributes") or {}
            claims = attributes.get(CLAIMS)
            if not isinstance(claims, Mapping) or token not in claims:
                return
            rest = {k: v for k, v in claims.items() if k != token}
            if rest:
                attributes[CLAIMS] = rest
            else:
                del attributes[CLAIMS]
            document["attributes"] = attributes
            if guard.put(key, distinct(json.dumps(document, indent=2).encode()), version):
                return
    raise ConflictError(
        "other jobs kept changing the array's metadata",
        expected="its zarr.json unchanged between reading it and putting it",
        found=f"it changed every time, {retries()} tries",
        array=key.rpartition("/")[0] or "/",
        key=key,
        advice=advice,
    )


def append_failed(
    error: BaseException,
    *,
    name: str,
    key: str,
    dim: str,
    offset: tuple[int, ...],
    shape: tuple[int, ...],
    axis: int,
    recorded: bool,
) -> IncompleteAppendError:
    """The error of a dask-array append whose data step raised ``error`` after its
    metadata claimed the rows ``offset``/``shape`` locate; ``recorded``: the claim is in
    the array's attributes, so running the append again completes the rows."""
    start = offset[axis]
    rows = {name: (dim, start, start + shape[axis])}
    cuts = [f"slice({o}, {o + n})" for o, n in zip(offset, shape, strict=True)]
    region = f"({', '.join(cuts)}{',' if len(shape) == 1 else ''})"
    return incomplete_append(error, rows, region=region, key=key, recorded=recorded)
