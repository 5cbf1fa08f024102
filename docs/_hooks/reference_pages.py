"""MkDocs hook: the reference pages made from the code at build time, so that they
cannot drift from it.

- ``docs/cli-reference.md``: every command of the ``shardwise`` command line, from its
  click commands (``shardwise.cli.main``): usage, description, arguments and options.
- ``docs/settings.md``: every setting, its default and meaning, from the defaults file
  ``src/shardwise/shardwise.yaml`` (its comments are the meanings).

Each page holds a marker (``<!-- generated: cli -->``, ``<!-- generated: settings -->``)
that the hook replaces with what it makes; the rest of the page is written by hand.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SETTINGS_FILE = ROOT / "src" / "shardwise" / "shardwise.yaml"
MARKERS = {"<!-- generated: cli -->": "cli", "<!-- generated: settings -->": "settings"}


# -- the command line ----------------------------------------------------------------------
def _text(help_text: str | None) -> str:
    """A click help text as markdown: click's no-rewrap marker (``\\b``) dropped, a
    block it guards kept as preformatted text."""
    paragraphs = inspect.cleandoc(help_text or "").split("\n\n")
    out = []
    for paragraph in paragraphs:
        if paragraph.startswith("\b"):
            out.append("```text\n" + paragraph.removeprefix("\b").strip("\n") + "\n```")
        else:
            out.append(" ".join(paragraph.split()))
    return "\n\n".join(out)


def cli_markdown() -> str:
    """The command-line reference: the ``shardwise`` group, then each command."""

    from shardwise.cli import main

    # (contexts made as the command line makes them: its context settings, -h included)
    root = main.make_context("shardwise", [], resilient_parsing=True)
    out = [
        "## `shardwise`",
        "",
        f"```text\nUsage: {' '.join(['shardwise', *main.collect_usage_pieces(root)])}\n```",
        "",
        _text(main.help),
        "",
        _options(main, root),
        "",
        _text(main.epilog),
    ]
    for name in main.list_commands(root):
        command = main.get_command(root, name)
        assert command is not None
        ctx = command.make_context(name, [], parent=root, resilient_parsing=True)
        usage = " ".join(["shardwise", name, *command.collect_usage_pieces(ctx)])
        out += [
            "",
            f"## `shardwise {name}`",
            "",
            f"```text\nUsage: {usage}\n```",
            "",
            _text(command.help),
            "",
            _options(command, ctx),
        ]
    return "\n".join(out) + "\n"


def _options(command: Any, ctx: Any) -> str:
    import click

    lines = ["Options:", ""]
    for param in command.get_params(ctx):
        if not isinstance(param, click.Option):
            continue
        record = param.get_help_record(ctx)
        if record is None:
            continue
        names, meaning = record
        meaning = " ".join(meaning.split())
        lines.append(f"- `{names}`: {meaning}")
    return "\n".join(lines)


# -- the settings --------------------------------------------------------------------------
_LINE = re.compile(
    r"^(?P<indent> *)(?P<key>[\w-]+):(?: +(?P<value>[^#\n]*?))? *(?:# *(?P<comment>.*))?$"
)
_SECTION = re.compile(r"^ +# *(?P<title>\S.*)$")


def settings() -> list[tuple[str, str, str, str]]:
    """``(section, key, default, meaning)`` for every setting of the defaults file, in
    its order; a nested key's meaning is its parent's followed by its own."""
    found = []
    section = ""
    parents: list[tuple[int, str, str]] = []  # (indent, key, comment)
    inside = False
    for line in SETTINGS_FILE.read_text(encoding="utf-8").splitlines():
        if line.startswith("shardwise:"):
            inside = True
            continue
        if not inside or not line.strip():
            continue
        title = _SECTION.match(line)
        if title:
            section = title["title"]
            continue
        m = _LINE.match(line)
        if m is None:
            raise ValueError(f"{SETTINGS_FILE.name}: cannot read the line {line!r}")
        indent = len(m["indent"])
        while parents and parents[-1][0] >= indent:
            parents.pop()
        comment = (m["comment"] or "").strip()
        if not m["value"]:
            parents.append((indent, m["key"], comment))
            continue
        key = ".".join([*(p[1] for p in parents), m["key"]])
        meaning = ": ".join([*(p[2] for p in parents if p[2]), comment])
        found.append((section, key, m["value"].strip(), meaning))
    return found


def environment_variable(key: str) -> str:
    """The variable dask reads a setting from: ``concurrency.network`` is
    ``DASK_SHARDWISE__CONCURRENCY__NETWORK``."""
    return "DASK_SHARDWISE__" + "__".join(part.upper().replace("-", "_") for part in key.split("."))


def settings_markdown() -> str:
    out: list[str] = []
    section = None
    for where, key, default, meaning in settings():
        if where != section:
            section = where
            out += ["", f"## {where.capitalize()}", ""]
            out += ["| setting | default | meaning |", "|---|---|---|"]
        out.append(f"| `shardwise.{key}` | `{default}` | {meaning} |")
    return "\n".join(out).strip() + "\n"


# -- the hook ------------------------------------------------------------------------------
def generated(kind: str) -> str:
    return {"cli": cli_markdown, "settings": settings_markdown}[kind]()


def on_page_markdown(markdown: str, page: Any, **kwargs: Any) -> str:
    for marker, kind in MARKERS.items():
        if marker in markdown:
            markdown = markdown.replace(marker, generated(kind))
    return markdown
