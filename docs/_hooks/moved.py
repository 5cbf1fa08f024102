"""MkDocs hook: links to sections that moved to another page reach them there.

Pages written against the former places (the benchmark pages link to sections of the
user guide and of the reliability page) keep working: at build time each link to a
place in :data:`MOVED` is rewritten to the new one, relative to the linking page. Once
no page links to a former place, its entry can go.
"""

from __future__ import annotations

import posixpath
import re
from typing import Any

MOVED = {
    "user-guide.md#writing-with-shardwiseto_zarr": "how-it-works.md#a-shard-in-memory",
    "user-guide.md#how-a-read-turns-into-requests": (
        "how-it-works.md#how-a-read-turns-into-requests"
    ),
    "reliability.md#object-stores-that-misbehave-teststest_lost_responsespy": (
        "reliability.md#object-stores-that-misbehave"
    ),
}

_LINK = re.compile(r"\]\((?P<target>[^)\s#]+\.md#[^)\s]+)\)")


def new_place(page: str, target: str) -> str | None:
    """Where a link ``target`` from the page ``page`` (a path under ``docs/``) now
    points, relative to that page; None when it has not moved."""
    here = posixpath.dirname(page) or "."
    moved = MOVED.get(posixpath.normpath(posixpath.join(here, target)))
    return None if moved is None else posixpath.relpath(moved, here)


def on_page_markdown(markdown: str, page: Any, **kwargs: Any) -> str:
    def swap(m: re.Match[str]) -> str:
        moved = new_place(page.file.src_uri, m["target"])
        return m[0] if moved is None else f"]({moved})"

    return _LINK.sub(swap, markdown)
