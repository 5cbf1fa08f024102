"""The documentation site as a reader's browser shows it: every page of the built site
(``make docs`` writes ``site/``; ``make test`` builds it before the suite runs) opened in
headless Chromium (Debian's ``chromium``) through Playwright, served over HTTP on
127.0.0.1. A page fails on an HTTP error, an uncaught script error or a console error,
and a notebook page on an HTML output that renders as nothing: every ``text/html``
output (xarray's reprs, shardwise's views) must take up space, every shardwise view
(``class="shardwise-repr"``) too, and a shard grid's cells must be drawn.

Requests that leave 127.0.0.1 (the theme's web fonts, the Mermaid and MathJax scripts
fetched from CDNs) are refused, as this machine's closed network refuses them. What
follows from a refusal is not the site's error, and only that is let through: the
console's "Failed to load resource" at a refused address, a script loader's error naming
it, and mkdocs-jupyter's "MathJax rendering failed" once MathJax was refused. Skipped when Chromium, Playwright or
the built site is missing, except under CI (``CI=true``), where it fails instead.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[1]
SITE = ROOT / "site"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# what the machine's closed network needs (no background connections to Google's hosts)
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# the site's shardwise views: the inventory notebook shows a shard grid, an Info, a
# VerifyReport, a shard grid with damage and an ArrayReader
VIEWS = {"notebooks/inventory/index.html": 5}


def need(ok: bool, why: str) -> None:
    if not ok:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"{why} (CI runs the site check: make test installs what it needs)")
        pytest.skip(why)


@contextlib.contextmanager
def served(root: Path) -> Iterator[str]:
    """``root`` over HTTP on 127.0.0.1: its address."""
    handler = functools.partial(_Quiet, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def site_url() -> Iterator[str]:
    need((SITE / "index.html").exists(), "the site is not built (make docs)")
    with served(SITE) as url:
        yield url


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    need(Path(CHROMIUM).exists(), f"no Chromium at {CHROMIUM} (Debian's chromium package)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        need(False, "Playwright is not installed (the test extra has it)")
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
        try:
            yield chromium
        finally:
            chromium.close()


def pages() -> list[str]:
    if not SITE.exists():
        return ["index.html"]
    return sorted(
        str(p.relative_to(SITE))
        for p in SITE.rglob("*.html")
        if "assets" not in p.relative_to(SITE).parts
    )


def problems(browser: Any, url: str, page: str, views: int = 0) -> list[str]:
    """What is wrong with ``page`` of the site at ``url`` in the browser: an HTTP error,
    console errors and uncaught errors (but those of refused outside requests), a page
    with no title or article, outputs that render as nothing, fewer than ``views``
    shardwise views."""
    context = browser.new_context()
    outside: list[str] = []
    found: list[str] = []

    def route(r: Any) -> None:
        if urlsplit(r.request.url).hostname not in ("127.0.0.1", None):
            outside.append(r.request.url)
            r.abort()
        else:
            r.continue_()

    def console(msg: Any) -> None:
        where = msg.location.get("url", "") if msg.location else ""
        if msg.type == "error" and not refused(msg.text, where, outside):
            found.append(f"console: {msg.text} ({where})")

    def uncaught(e: Any) -> None:
        if not refused(str(e), "", outside):
            found.append(f"uncaught: {e}")

    context.route("**/*", route)
    tab = context.new_page()
    tab.on("console", console)
    tab.on("pageerror", uncaught)
    try:
        response = tab.goto(url + page, wait_until="load")
        if response is None or not response.ok:
            return [f"HTTP {response and response.status}"]
        tab.wait_for_load_state("networkidle")
        if not tab.title():
            found.append("no title")
        if not tab.locator("article").count() and page != "404.html":
            found.append("no article")
        found += [f"renders as nothing: {e}" for e in tab.evaluate(_EMPTY)]
        n = tab.locator(".shardwise-repr").count()
        if n < views:
            found.append(f"{n} shardwise views, {views} expected")
        return found
    finally:
        context.close()


@pytest.mark.parametrize("page", pages())
def test_page_loads_without_errors_and_shows_its_outputs(browser, site_url, page):
    found = problems(browser, site_url, page, VIEWS.get(page, 0))
    assert not found, f"{page}:\n" + "\n".join(found)


BROKEN = """<!doctype html><html><head><title>broken</title>
<link rel="stylesheet" href="https://fonts.googleapis.com/css?family=Roboto"></head>
<body><article>
<div data-mime-type="text/html"><div class="shardwise-repr"><b>a view</b><svg
  xmlns="http://www.w3.org/2000/svg" width="50" height="20"><rect x="0" y="0" width="9"
  height="9"/></svg></div></div>
<div data-mime-type="text/html"></div>
<div class="shardwise-repr"><svg xmlns="http://www.w3.org/2000/svg" width="40"
  height="20"></svg></div>
<script>console.error("the site's own error");</script>
<script>undefinedFunction();</script>
</article></body></html>"""


def test_the_check_finds_what_is_broken(browser, tmp_path):
    """The check itself: a page with an empty output, a grid with no cell, a console
    error and an uncaught error is refused for each; a refused web font is not one."""
    (tmp_path / "index.html").write_text(BROKEN)
    (tmp_path / "fine.html").write_text(BROKEN.split("<div data-mime-type")[0] + "</article>")
    with served(tmp_path) as url:
        found = problems(browser, url, "index.html", views=3)
        fine = problems(browser, url, "fine.html")
        gone = problems(browser, url, "gone.html")
    assert any("console: the site's own error" in f for f in found), found
    assert any(f.startswith("uncaught:") and "undefinedFunction" in f for f in found), found
    assert any("renders as nothing: DIV" in f for f in found), found
    assert any("no cell drawn" in f for f in found), found
    assert "2 shardwise views, 3 expected" in found
    assert not any("fonts.googleapis" in f or "Failed to load" in f for f in found), found
    assert fine == [], fine
    assert gone == ["HTTP 404"]


def refused(text: str, where: str, outside: list[str]) -> bool:
    """Whether an error is only the consequence of refusing a request that left
    127.0.0.1 (see the module docstring)."""
    if text.startswith("Failed to load resource") and where in outside:
        return True
    if any(url in text for url in outside):  # e.g. "Invalid script: https://unpkg.com/..."
        return True
    mathjax = any("mathjax" in url.lower() for url in outside)
    return mathjax and text.startswith("mkdocs-jupyter: MathJax rendering failed")


# every text/html output of a notebook page, every shardwise view and every SVG in one
# that has no size, and every shard grid with no cell drawn: a description of each
_EMPTY = """() => {
  const bad = [];
  const sized = (el) => { const r = el.getBoundingClientRect(); return r.width > 0 && r.height > 0; };
  document.querySelectorAll('[data-mime-type="text/html"], .shardwise-repr, .shardwise-repr svg')
    .forEach((el, i) => { if (!sized(el)) bad.push(`${el.tagName}.${el.className} #${i}`); });
  document.querySelectorAll('.shardwise-repr svg').forEach((svg, i) => {
    const cells = [...svg.querySelectorAll('rect')].filter(sized);
    if (cells.length === 0) bad.push(`svg #${i}: no cell drawn`);
  });
  return bad;
}"""
