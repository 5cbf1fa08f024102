"""Every module, function, option, setting, path, command-line option and make target
the documentation names exists (``tests/test_docs_names.py`` runs :func:`problems`).

The pages: ``README.md``, ``CHANGELOG.md``, every ``docs/**/*.md`` and the notebooks
(their markdown cells and their code). What is read of them: inline code spans, fenced
code blocks (but mermaid), relative links, ``::: name`` lines and the tables whose first
column names things. Prose outside code is not read: a name written there is not known
to be one.

The rules (each problem says which one it broke):

- **Python names** ``shardwise.x.y``: the longest prefix that is a module is imported
  and the rest looked up on it (class attributes include dataclass fields and
  annotations); ``module:attr`` (an entry point) likewise. Written without
  ``shardwise.``: a class of its top level (``VerifyReport.damaged_shards``), a class
  only one of its modules defines and lists in ``__all__`` (``Problem.shard``), a name
  of a private module (``_compat.NEWER``). In Python code (blocks, notebook cells, read
  in page order as one namespace with ``shardwise`` bound) the names bound by ``import
  shardwise...`` / ``from shardwise... import`` are followed through attributes, until
  the code binds them to something else. A table headed ``error``: names of
  ``shardwise.errors``.
- **Settings**: a dotted ``shardwise.`` name that is a key of the defaults file or has
  a hyphen in a part (``shardwise.inventory-concurrency``), a ``DASK_SHARDWISE__...``
  variable and the
  first column of a table headed ``setting`` are keys of ``src/shardwise/shardwise.yaml``.
- **Keyword options**: ``name(..., option=...)`` where ``name`` is a ``shardwise``
  callable (``shardwise.x``; a name of ``shardwise.__all__`` written alone; a name of two
  words or more only one module defines and lists in ``__all__``, ``LatencyStore``):
  each keyword is a parameter of its signature, unless it takes ``**kwargs``.
  ``xr.open_dataset`` / ``xr.open_datatree`` with ``engine="shardwise"``: each keyword is
  xarray's or the engine's. A table headed ``field`` or ``parameter`` in a section whose
  heading names a shardwise class or callable (``## `ReadOptions```) or the engine
  (``engine="shardwise"``): its first column's names are its parameters or attributes.
- **Command line**: ``shardwise [options] <command> [--option ...]`` (also ``python -m
  shardwise``, ``$``-prompted lines of console blocks, and ``<command> --option`` spans):
  the command exists and each option is one of its click options; on the command-line
  page (:data:`CLI_PAGES`) a span that is an option alone (``--no-scan``) is an option of
  some command.
- **Scripts**: an option after ``benchmarks/x.py`` or ``.ci/x.py`` (up to a ``--``,
  after which they are the script's to hand on) appears in that script's source
  (``"--repeats"``), or is ``-h`` / ``--help``.
- **make**: ``make <target>`` names a target of the ``Makefile``.
- **Paths**: a path starting at a top-level folder of the repository (``src/``,
  ``tests/``, ``benchmarks/``, ``docs/``, ``notebooks/``, ``.ci/``) or a file at its
  root exists (unless ``.gitignore`` says it is made by a run: ``benchmarks/data/``); a
  path starting at a folder of the package (``io/mounts.py``, ``cli/progress``) exists
  in ``src/shardwise/`` (or, for another installed package's files such as
  ``xarray/tests/test_backends.py``, in that package); a bare ``x.py`` / ``x.ipynb`` /
  ``x.md`` / ``x.yaml`` / ``x.toml`` file is a file of the repository; the entries of a
  text block drawing a folder tree below a folder of the repository exist in it; the
  modules of the table of layers (``| `io` | `mounts` (...) |``) exist in their layer,
  and the layers it may import exist; a relative link's target exists.

Deliberately not checked: names in prose outside code; attributes of values rather than
of modules or classes (``report.repacked``, ``ds.to_zarr``, instance attributes set in
``__init__``); other libraries' names and options (``zarr.open_array``,
``dask.config.set``) but xarray's with the shardwise engine; keywords of callables
taking ``**kwargs`` (``shardwise.to_zarr`` hands the rest to zarr-python's
``create_array``); bare names that other libraries may have too (``to_zarr`` is taken as
shardwise's only because it is in ``shardwise.__all__``; ``compute``, ``Zstd`` are not
looked up); option *values*; the attributes an inventory carries (values, not names of
the code); store keys and example files (``v/c/0/0``, ``data.zarr``); quoted strings as
paths (``"a/v"`` is an array path); options of other programs (``pytest -n 2``,
``sbatch --dependency``), options after ``run.py NAME --`` and bare options outside
:data:`CLI_PAGES`; names a module whose optional dependency is missing would hold.
"""

from __future__ import annotations

import ast
import builtins
import dataclasses
import fnmatch
import functools
import importlib
import importlib.util
import inspect
import json
import os
import re
import shlex
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "shardwise"

CLI_PAGES = frozenset({"docs/cli.md"})
"""Pages about the command line: an option written alone in a code span there is one of
the ``shardwise`` command's."""

# repository files named by extension alone (``config.py``) must exist somewhere in it
_FILE_EXTENSIONS = ("py", "ipynb", "md", "yaml", "yml", "toml")
# a store or data file named like a module (``shardwise.zarr``): not a name
_DATA_EXTENSIONS = ("zarr", "json", "nc", "csv", "txt", "log", "h5", "png", "svg", "html")
# folders of the repository searched for those files (and by nothing else)
_OWN_FOLDERS = ("src", "tests", "benchmarks", "docs", "notebooks", ".ci")
_ROOT_FILES = ("Makefile", "pyproject.toml", "mkdocs.yml", "README.md", "CHANGELOG.md")

_DOTTED = re.compile(
    rf"(?<![\w.\-/]){PACKAGE}(?P<rest>(?:\.[A-Za-z_][\w\-]*)+)(?::(?P<attr>[A-Za-z_]\w*))?"
)
_ENV_SETTING = re.compile(r"\bDASK_SHARDWISE__(?P<key>[A-Z0-9_]+)")
_CALL = re.compile(r"(?<![\w.])(?P<name>[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)\(")
_KEYWORD = re.compile(r"\s*(?P<kw>[A-Za-z_]\w*)\s*=(?!=)")
_QUALIFIED = re.compile(r"(?<![\w.\-/])(?P<name>[A-Z_]\w*(?:\.[A-Za-z_]\w*)+)(?![\w\-/])")
_SPAN = re.compile(r"(?<!`)(?P<ticks>`+)(?!`)(?P<code>.+?)(?<!`)(?P=ticks)(?!`)", re.S)
_LINK = re.compile(r"!?\[[^\]]*\]\((?P<target>[^)\s]+)(?:\s+\"[^\"]*\")?\)")
_FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})\s*(?P<lang>[\w+-]*)")
_ENGINE = re.compile(rf"engine\s*=\s*[\"']{PACKAGE}[\"']")
_PREFIXES = ("$", "sudo", "env", "time", "nohup", "exec")
_ENV_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=\S*$")
_SCRIPT = re.compile(r"^(?:\./)?(?P<path>(?:benchmarks|\.ci)/[\w\-]+\.py)$")


class Problem(NamedTuple):
    """One name a page gives that does not exist: where, the name, and why."""

    page: str
    line: int
    name: str
    why: str

    def __str__(self) -> str:
        return f"{self.page}:{self.line}: {self.name} — {self.why}"


def pages(root: str | Path = ROOT) -> list[Path]:
    """The pages read: the README, the changelog, every page under ``docs/`` and the
    notebooks."""
    root = Path(root)
    found = [root / "README.md", root / "CHANGELOG.md"]
    found += sorted((root / "docs").glob("**/*.md"))
    found += sorted((root / "notebooks").glob("*.ipynb"))
    return [page for page in found if page.is_file()]


def problems(
    page_list: Iterable[str | Path] | None = None, root: str | Path = ROOT
) -> list[Problem]:
    """Every name the pages (by default :func:`pages`) give that does not exist, in page
    and line order. ``root`` is the repository the paths are resolved in."""
    root = Path(root).absolute()
    found: set[Problem] = set()
    for page in pages(root) if page_list is None else page_list:
        page = Path(page).absolute()  # (not resolved: a page reached through a link is there)
        label = page.relative_to(root).as_posix() if page.is_relative_to(root) else str(page)
        checker = _Checker(root, page)
        if page.suffix == ".ipynb":
            cells = json.loads(page.read_text(encoding="utf-8"))["cells"]
            for n, cell in enumerate(cells, 1):
                source = "".join(cell["source"])
                checker.where = f"{label}[cell {n}]"
                if cell["cell_type"] == "markdown":
                    checker.markdown(source)
                elif cell["cell_type"] == "code":
                    checker.python(source, 1)
        else:
            checker.where = label
            checker.markdown(page.read_text(encoding="utf-8"))
        found.update(checker.found)
    return sorted(found)


# -- what exists ---------------------------------------------------------------------------
class _Unknown:
    """A value that could not be looked up (an instance attribute, a missing optional
    dependency): nothing below it is checked."""


UNKNOWN = _Unknown()


@functools.cache
def _settings() -> frozenset[str]:
    import yaml

    text = (ROOT / "src" / PACKAGE / f"{PACKAGE}.yaml").read_text(encoding="utf-8")
    loaded = yaml.safe_load(text)[PACKAGE]

    def keys(mapping: dict[str, Any], prefix: str = "") -> Iterator[str]:
        for key, value in mapping.items():
            yield prefix + key
            if isinstance(value, dict):
                yield from keys(value, f"{prefix}{key}.")

    return frozenset(keys(loaded))


def _setting_problem(key: str) -> str | None:
    """Why ``key`` (below ``shardwise.``) is no setting; dask takes ``_`` for ``-``."""
    if key.replace("_", "-") in _settings():
        return None
    return f"not a setting in src/{PACKAGE}/{PACKAGE}.yaml ({', '.join(sorted(_settings()))})"


def _class_attributes(cls: type) -> set[str]:
    names: set[str] = set()
    for klass in cls.__mro__:
        names.update(getattr(klass, "__annotations__", {}))
        slots = getattr(klass, "__slots__", ())
        names.update([slots] if isinstance(slots, str) else slots)
    names.update(getattr(cls, "_fields", ()))
    if dataclasses.is_dataclass(cls):
        names.update(f.name for f in dataclasses.fields(cls))
    return names


@functools.cache
def resolve(dotted: str) -> tuple[Any, str | None]:
    """The object ``dotted`` names (``module.attr.attr``, or ``module:attr``) and None,
    or None and why it does not exist; :data:`UNKNOWN` where it cannot be told."""
    dotted = dotted.replace(":", ".")
    parts = dotted.split(".")
    obj: Any = None
    for i in range(len(parts), 0, -1):
        name = ".".join(parts[:i])
        if parts[i - 1] == "__main__":
            continue  # never run a command line by importing it
        try:
            obj = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name and (name == e.name or name.startswith(e.name + ".")):
                continue  # no such module: a shorter prefix may be one
            return UNKNOWN, None  # an optional dependency is missing
        except ImportError:
            return UNKNOWN, None  # (one that is there but broken)
        break
    else:
        return None, f"no module {parts[0]!r}"
    for j in range(i, len(parts)):
        attr = parts[j]
        try:
            obj = getattr(obj, attr)
        except AttributeError:
            if isinstance(obj, type) and attr in _class_attributes(obj):
                return UNKNOWN, None
            where = ".".join(parts[:j])
            kind = "module" if inspect.ismodule(obj) else "object"
            return None, f"{kind} {where} has no attribute {attr!r}"
    return obj, None


@functools.cache
def _definitions() -> dict[str, frozenset[str]]:
    """The modules of shardwise defining a class or function of each name at their top
    level and listing it in their ``__all__`` (read, not imported)."""
    found: dict[str, set[str]] = {}
    src = ROOT / "src"
    for path in sorted((src / PACKAGE).rglob("*.py")):
        module = ".".join(path.relative_to(src).with_suffix("").parts).removesuffix(".__init__")
        body = ast.parse(path.read_text(encoding="utf-8")).body
        kinds = ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef
        defined = {node.name for node in body if isinstance(node, kinds)}
        for node in body:
            if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
            ):
                for name in ast.literal_eval(node.value):
                    if name in defined:
                        found.setdefault(name, set()).add(module)
    return {name: frozenset(modules) for name, modules in found.items()}


def _defined_once(name: str, *, compound: bool = False) -> str | None:
    """``module.name`` where one module of shardwise (none of its top level) defines
    ``name`` publicly: ``LatencyStore`` is ``shardwise.testing.LatencyStore``. With
    ``compound``, only a name no other library is likely to have: of two words or more
    (``shared_options``, ``ShardDecoder``; not ``compute``, ``Zstd``)."""
    modules = _definitions().get(name, frozenset())
    if len(modules) != 1 or name in _top_level() or hasattr(builtins, name):
        return None
    if compound and not ("_" in name.strip("_") or re.search(r"[a-z0-9][A-Z]", name)):
        return None
    (module,) = modules
    return f"{module}.{name}"


@functools.cache
def _top_level() -> frozenset[str]:
    return frozenset(importlib.import_module(PACKAGE).__all__)


def _keyword_problem(callable_name: str, obj: Any, keyword: str) -> str | None:
    try:
        signature = inspect.signature(obj)
    except (TypeError, ValueError):
        return None
    params = signature.parameters.values()
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return None
    names = [p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    if keyword in names:
        return None
    return f"not a keyword of {callable_name} (it takes {', '.join(names) or 'none'})"


@functools.cache
def _engine_keywords(function: str) -> frozenset[str]:
    """The keywords ``xr.<function>(..., engine="shardwise", ...)`` takes: xarray's own
    and the engine's."""
    import xarray as xr

    from shardwise.xarray.backend import ShardwiseBackendEntrypoint

    names = set()
    for f in (getattr(xr, function), getattr(ShardwiseBackendEntrypoint, function)):
        names |= {
            p.name
            for p in inspect.signature(f).parameters.values()
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
        }
    return frozenset(names - {"self"})


@functools.cache
def _cli() -> tuple[frozenset[str], dict[str, frozenset[str]]]:
    """The options of the ``shardwise`` group and of each of its commands (click's)."""
    import click

    from shardwise.cli.commands import main

    helps = set(main.context_settings.get("help_option_names", ["--help"]))

    def options(command: click.Command) -> frozenset[str]:
        found = set(helps)
        for param in command.params:
            if isinstance(param, click.Option):
                found.update(param.opts, param.secondary_opts)
        return frozenset(found)

    assert isinstance(main, click.Group)
    return options(main), {name: options(c) for name, c in main.commands.items()}


@functools.cache
def _make_targets(root: Path) -> frozenset[str]:
    targets: set[str] = set()
    for line in (root / "Makefile").read_text(encoding="utf-8").splitlines():
        m = re.match(r"^([^\s#:=][^:=]*?)\s*::?(?!=)", line)
        if m:
            targets.update(m[1].split())
    return frozenset(targets)


@functools.cache
def _ignored(root: Path) -> tuple[str, ...]:
    path = root / ".gitignore"
    if not path.is_file():
        return ()
    lines = path.read_text(encoding="utf-8").splitlines()
    return tuple(s.strip().rstrip("/") for s in lines if s.strip() and not s.startswith("#"))


def _is_ignored(root: Path, path: str) -> bool:
    """Whether ``.gitignore`` says ``path`` (relative to ``root``) is made, not kept."""
    parts = path.strip("/").split("/")
    for pattern in _ignored(root):
        if "/" in pattern:  # anchored at the root: the path or a folder above it
            depth = pattern.count("/") + 1
            if fnmatch.fnmatch("/".join(parts[:depth]), pattern.lstrip("/")):
                return True
        elif any(fnmatch.fnmatch(part, pattern) for part in parts):
            return True
    return False


@functools.cache
def _own_files(root: Path) -> frozenset[str]:
    """The names of the repository's files (its own folders, and files at its root)."""
    names = {p.name for p in root.iterdir() if p.is_file()}
    for folder in _OWN_FOLDERS:
        for here, folders, files in os.walk(root / folder):
            rel = Path(here).relative_to(root).as_posix()
            folders[:] = [f for f in folders if not _is_ignored(root, f"{rel}/{f}")]
            names.update(files)
    return frozenset(names)


@functools.cache
def _script_source(path: Path) -> str:
    return path.read_text(encoding="utf-8") if path.is_file() else ""


def _installed_location(top: str) -> Path | None:
    """The folder of an installed package other than shardwise (``xarray``)."""
    if top == PACKAGE or not top.isidentifier():
        return None
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _exists(base: Path, path: str) -> bool:
    path = path.rstrip("/")
    return (base / path).exists() or (base / f"{path}.py").is_file()


# -- reading a page ------------------------------------------------------------------------
def _split_args(text: str) -> list[str]:
    """The top-level arguments of a call whose text starts after its ``(`` (to its
    ``)``, or to the end of the text)."""
    args, depth, quote, current = [], 0, "", []
    for ch in text:
        if quote:
            current.append(ch)
            if ch == quote:
                quote = ""
            continue
        if ch in "\"'":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            if depth == 0:
                args.append("".join(current))
                return args
            depth -= 1
        elif ch == "," and depth == 0:
            args.append("".join(current))
            current = []
            continue
        current.append(ch)
    args.append("".join(current))
    return args


def _table_cells(line: str) -> list[str]:
    """The cells of a markdown table row (a ``|`` in a code span is not a border)."""
    cells: list[str] = []
    current: list[str] = []
    in_code = False
    for ch in line.strip().strip("|"):
        if ch == "`":
            in_code = not in_code
        if ch == "|" and not in_code:
            cells.append("".join(current).strip())
            current = []
        else:
            current.append(ch)
    cells.append("".join(current).strip())
    return cells


def _outer_spans(cell: str) -> list[str]:
    """The code spans of a table cell outside parentheses: ``a`` (``b``), ``c`` gives
    a and c."""
    found, depth = [], 0
    pos = 0
    while pos < len(cell):
        if cell[pos] == "`":
            end = cell.find("`", pos + 1)
            if end < 0:
                break
            if depth == 0:
                found.append(cell[pos + 1 : end])
            pos = end + 1
            continue
        depth += {"(": 1, ")": -1}.get(cell[pos], 0)
        pos += 1
    return found


def _tokens(code: str) -> list[str]:
    try:
        return shlex.split(code, comments=False)
    except ValueError:
        return code.split()


class _Checker:
    def __init__(self, root: Path, page: Path) -> None:
        self.root = root
        self.page = page
        self.where = ""
        self.found: set[Problem] = set()
        # what the page's Python code has bound so far (its blocks and cells run in order,
        # in one namespace; ``shardwise`` and ``xr`` as the pages assume them)
        self.bound: dict[str, str] = {PACKAGE: PACKAGE}
        self.xarray: set[str] = {"xr", "xarray"}

    def problem(self, line: int, name: str, why: str) -> None:
        self.found.add(Problem(self.where, line, name, why))

    # -- a page's parts ----------------------------------------------------------------------
    def markdown(self, text: str) -> None:
        lines = text.splitlines()
        prose: list[tuple[int, str]] = []
        n = 0
        while n < len(lines):
            m = _FENCE.match(lines[n])
            if m is None:
                prose.append((n + 1, lines[n]))
                n += 1
                continue
            fence, start, body = m["fence"], n + 1, []
            n += 1
            while n < len(lines) and not (
                lines[n].strip().startswith(fence) and lines[n].strip().strip(fence[0]) == ""
            ):
                body.append(lines[n])
                n += 1
            n += 1
            self.block(m["lang"].lower(), start + 1, body)
        self.prose(prose)

    def prose(self, lines: list[tuple[int, str]]) -> None:
        paragraphs: list[list[tuple[int, str]]] = [[]]
        table: list[list[str]] = []
        heading = ""
        for number, line in lines:
            if line.lstrip().startswith("|"):
                paragraphs += [[(number, line)], []]  # a row is read alone
                table.append(_table_cells(line))
                if len(table) > 2:
                    self.table_row(number, heading, table[0], table[-1])
                continue
            table = []
            if re.match(r"#{1,6}\s", line):
                heading = line.lstrip("#").strip()
            if line.strip():
                paragraphs[-1].append((number, line))
            else:
                paragraphs.append([])
            if m := re.match(r"^:::\s+(?P<name>[\w.:]+)\s*$", line):
                self.dotted(number, m["name"])
        for paragraph in paragraphs:
            if not paragraph:
                continue
            first = paragraph[0][0]
            text = "\n".join(row for _, row in paragraph)
            text = re.sub(r"<!--.*?-->", lambda m: re.sub(r"[^\n]", " ", m[0]), text, flags=re.S)
            for m in _SPAN.finditer(text):
                at = first + text.count("\n", 0, m.start())
                self.span(at, m["code"].replace("\n", " ").strip())
            outside = _SPAN.sub(lambda m: re.sub(r"[^\n]", " ", m[0]), text)
            for m in _LINK.finditer(outside):
                self.link(first + outside.count("\n", 0, m.start()), m["target"])

    def block(self, lang: str, first: int, body: list[str]) -> None:
        if lang == "mermaid":
            return
        if lang in ("python", "py", "pycon"):
            self.python("\n".join(body), first)
            return
        for offset, line in enumerate(body):
            self.settings_in(first + offset, line)
            for m in _DOTTED.finditer(line):
                self.dotted(first + offset, m[0])
        if lang in ("bash", "sh", "shell", "console"):
            commands = self.command_lines(lang, first, body)
        else:
            # text and plain blocks: signatures, usage lines and command output
            commands = [
                (first + k, re.sub(r"\s#.*$", "", line))
                for k, line in enumerate(body)
                if line.startswith(PACKAGE + " ")
            ]
            for offset, line in enumerate(body):
                if "(" in line and _DOTTED.search(line):
                    self.calls(first + offset, line)
            self.tree(first, body)
        for number, command in commands:
            self.command(number, command)

    @staticmethod
    def command_lines(lang: str, first: int, body: list[str]) -> list[tuple[int, str]]:
        """A shell block's commands (continuation lines joined), without comments; in a
        console block, the ``$`` lines only."""
        commands: list[tuple[int, str]] = []
        pending = ""
        for offset, line in enumerate(body):
            if not pending:
                if lang == "console":
                    if not line.startswith("$ "):
                        continue
                    line = line[2:]
                start = first + offset
            line = re.sub(r"(^|\s)#.*$", "", line).rstrip()
            if line.endswith("\\"):
                pending += line[:-1] + " "
                continue
            if (pending + line).strip():
                commands.append((start, pending + line))
            pending = ""
        return commands

    def python(self, code: str, first: int) -> None:
        code = "\n".join(
            "" if line.lstrip().startswith(("%", "!")) else line for line in code.splitlines()
        )
        for offset, line in enumerate(code.splitlines()):
            self.settings_in(first + offset, line)
            for m in _DOTTED.finditer(line):
                if "-" in m[0]:
                    self.dotted(first + offset, m[0])
        try:
            tree = ast.parse(code)
        except SyntaxError:
            for offset, line in enumerate(code.splitlines()):
                self.span(first + offset, line)
            return
        _PythonNames(self, first).visit(tree)

    # -- what a span may name ----------------------------------------------------------------
    def span(self, line: int, code: str) -> None:
        self.settings_in(line, code)
        for m in _DOTTED.finditer(code):
            self.dotted(line, m[0])
        for m in _QUALIFIED.finditer(code):
            top, _, rest = m["name"].partition(".")
            if rest in _FILE_EXTENSIONS:
                continue  # a file: _compat.py
            if top in _top_level() and isinstance(resolve(f"{PACKAGE}.{top}")[0], type):
                self.dotted(line, f"{PACKAGE}.{m['name']}", shown=m["name"])
            elif top[:1].isupper() and (defined := _defined_once(top)) and not rest[:1].isupper():
                self.dotted(line, f"{defined}.{rest}", shown=m["name"])  # Problem.shard
            elif top.startswith("_") and (self.root / "src" / PACKAGE / f"{top}.py").is_file():
                self.dotted(line, f"{PACKAGE}.{m['name']}", shown=m["name"])  # _compat.NEWER
        self.calls(line, code)
        self.command(line, code)
        if self.where in CLI_PAGES and re.fullmatch(r"--[\w-]+(?:[ =]\S.*)?", code):
            option = re.split(r"[ =]", code)[0]
            group, commands = _cli()
            if not any(option in opts for opts in (group, *commands.values())):
                self.problem(line, option, "an option of no shardwise command")

    def member(self, line: int, subject: str, name: str) -> None:
        """``name`` is a parameter or attribute of ``subject`` (a shardwise class or
        callable, or ``engine="shardwise"``); nothing is said of other subjects."""
        if _ENGINE.fullmatch(subject):
            if name not in _engine_keywords("open_dataset"):
                self.problem(line, name, "not a keyword of xr.open_dataset with engine='shardwise'")
            return
        dotted = subject if subject.startswith(f"{PACKAGE}.") else f"{PACKAGE}.{subject}"
        if subject.split(".")[0] not in (PACKAGE, *_top_level()):
            return
        obj, _why = resolve(dotted)
        if obj is None or obj is UNKNOWN:
            return
        if isinstance(obj, type) and name in _class_attributes(obj) | set(dir(obj)):
            return
        if callable(obj) and _keyword_problem(dotted, obj, name) is None:
            return
        self.problem(line, name, f"not a parameter or attribute of {subject}")

    def settings_in(self, line: int, text: str) -> None:
        for m in _ENV_SETTING.finditer(text):
            key = m["key"].lower().replace("__", ".")
            why = _setting_problem(key)
            if why:
                self.problem(line, m[0], why)

    def dotted(self, line: int, name: str, shown: str | None = None) -> None:
        parts = name.split(":")[0].split(".")
        if any(p.endswith("-") for p in parts):
            return  # a placeholder: shardwise-index-...
        if any("-" in p for p in parts):
            why = _setting_problem(".".join(parts[1:]))
            if why:
                self.problem(line, name, why)
            return
        if parts[0] == PACKAGE and _setting_problem(".".join(parts[1:])) is None:
            return  # a setting without a hyphen: shardwise.hedge, shardwise.concurrency.disk
        if len(parts) == 2 and parts[-1] in _FILE_EXTENSIONS:
            self.bare_file(line, name)  # shardwise.yaml
            return
        if parts[-1] in _DATA_EXTENSIONS:
            return  # a store: shardwise.zarr
        _obj, why = resolve(name)
        if why:
            self.problem(line, shown or name, why)

    def calls(self, line: int, code: str) -> None:
        for m in _CALL.finditer(code):
            name = m["name"]
            args = _split_args(code[m.end() :])
            keywords = [k["kw"] for a in args if (k := _KEYWORD.match(a))]
            if not keywords:
                continue
            first, _, rest = name.partition(".")
            if first in ("xr", "xarray") and rest in ("open_dataset", "open_datatree"):
                if any(_ENGINE.fullmatch(a.strip()) for a in args):
                    for keyword in keywords:
                        if keyword not in _engine_keywords(rest):
                            why = f"not a keyword of xr.{rest} with engine='shardwise'"
                            self.problem(line, f"{name}({keyword}=...)", why)
                continue
            if first == PACKAGE:
                dotted = name
            elif first in _top_level():
                dotted = f"{PACKAGE}.{name}"
            elif not rest and (defined := _defined_once(name, compound=True)):
                dotted = defined  # LatencyStore(store, delay=0.02)
            else:
                continue
            obj, _why = resolve(dotted)
            if obj is None or obj is UNKNOWN or not callable(obj):
                continue  # a missing name is reported as a name
            for keyword in keywords:
                if wrong := _keyword_problem(dotted, obj, keyword):
                    self.problem(line, f"{name}({keyword}=...)", wrong)

    def command(self, line: int, code: str) -> None:
        """A command line: shardwise's, make's, a script's; and the paths it names."""
        for part in re.split(r"\s(?:&&|\|\||;|\|)\s", code.strip()):
            self.one_command(line, _tokens(part))
        for token in code.split():
            self.path(line, token)

    def one_command(self, line: int, tokens: list[str]) -> None:
        while tokens and (tokens[0] in _PREFIXES or _ENV_ASSIGNMENT.match(tokens[0])):
            tokens = tokens[1:]
        if not tokens:
            return
        if tokens[0] == "make":
            args = iter(tokens[1:])
            for target in args:
                if target in ("-C", "-f", "-j", "-l", "-o", "-W", "-I"):
                    next(args, None)  # an option's value
                elif target.startswith("-") or "=" in target or target.isdigit():
                    continue  # an option, a variable, a -j count
                elif target not in _make_targets(self.root):
                    self.problem(line, f"make {target}", "not a target of the Makefile")
        if re.fullmatch(r"(?:\S*/)?python[\d.]*", tokens[0]) and tokens[1:3] == ["-m", PACKAGE]:
            self.cli(line, tokens[3:])
        elif tokens[0] == PACKAGE:
            self.cli(line, tokens[1:])
        elif tokens[0] in _cli()[1] and len(tokens) > 1 and tokens[1].startswith("--"):
            self.cli(line, tokens)  # `inventory --out`
        for k, token in enumerate(tokens):
            m = _SCRIPT.match(token)
            if m:
                self.script_options(line, m["path"], tokens[k + 1 :])

    def cli(self, line: int, args: list[str]) -> None:
        group, commands = _cli()
        options, command = group, None
        for arg in args:
            if arg in ("|", "&&", ";", ">", "2>", "||", "--") or arg.startswith((">", "|")):
                return
            arg = arg.strip("[]")
            if arg.startswith("-") and len(arg) > 1 and not arg[1:2].isdigit():
                option = arg.split("=")[0]
                if option not in options:
                    where = f"shardwise {command}" if command else "shardwise"
                    self.problem(line, f"{where} {option}", f"not an option of {where}")
            elif command is None and arg and not arg.startswith("-"):
                if arg == "..." or not re.fullmatch(r"[a-z][\w-]*", arg):
                    return  # a placeholder (COMMAND, ...)
                if arg not in commands:
                    known = ", ".join(sorted(commands))
                    self.problem(line, f"shardwise {arg}", f"no such command ({known})")
                    return
                command, options = arg, commands[arg]

    def script_options(self, line: int, script: str, args: list[str]) -> None:
        source = _script_source(self.root / script)
        if not source:
            return  # reported as a path
        for arg in args:
            if arg in ("|", "&&", ";", "||", "--") or _SCRIPT.match(arg):
                return  # (after --: the arguments the script hands on)
            if not re.fullmatch(r"--?[A-Za-z][\w-]*(=.*)?", arg):
                continue
            option = arg.split("=")[0]
            if option in ("-h", "--help"):
                continue
            if not re.search(rf"[\"']{re.escape(option)}[\"']", source):
                self.problem(line, f"{script} {option}", f"not an option of {script}")

    # -- paths ---------------------------------------------------------------------------------
    def path(self, line: int, token: str) -> None:
        if token[:1] in "\"'" or token[-1:] in "\"'":
            return  # a string: an array path, a store key
        token = re.sub(r"(?:::\S*|:\d+(?::\d+)?)$", "", token.strip("()[]{},;.`"))
        token = token.strip(":")
        if not token or re.search(r"[<>*?$%{}=@\\]|://|\.\.\.|^[/~]", token) or token == "..":
            return
        while token.startswith("./"):
            token = token[2:]
        parts = token.split("/")
        top = parts[0]
        if (self.root / top).is_dir() and top in _OWN_FOLDERS and len(parts) > 1:
            if not _exists(self.root, token) and not _is_ignored(self.root, token):
                self.problem(line, token, "no such file or folder in the repository")
        elif "/" not in token.rstrip("/") and token in _ROOT_FILES:
            if not (self.root / token).exists():
                self.problem(line, token, "no such file at the repository's root")
        elif len(parts) > 1 and (self.root / "src" / PACKAGE / top).is_dir():
            if parts[1:] == [""] or _exists(self.root / "src" / PACKAGE, token):
                return
            installed = _installed_location(top)
            if installed is not None and _exists(installed.parent, token):
                return  # another package's file (xarray/tests/test_backends.py)
            self.problem(line, token, f"no such module or folder in src/{PACKAGE}/")
        elif len(parts) == 1:
            m = re.fullmatch(rf"[\w.\-]+\.(?:{'|'.join(_FILE_EXTENSIONS)})", token)
            if m and not token.startswith(f"{PACKAGE}."):
                self.bare_file(line, token)

    def bare_file(self, line: int, name: str) -> None:
        if name not in _own_files(self.root):
            self.problem(line, name, "no file of that name in the repository")

    def link(self, line: int, target: str) -> None:
        if re.match(r"^[a-z][\w+.-]*:|^#|^/", target):
            return
        target = target.split("#")[0].split("?")[0]
        bases = [self.page.parent]
        if self.page.suffix == ".ipynb":  # the site shows the notebooks from docs/notebooks/
            bases.append(self.root / "docs" / self.page.parent.name)
        if target and not any((base / target).exists() for base in bases):
            self.problem(line, target, "a link to a file that does not exist")

    def tree(self, first: int, body: list[str]) -> None:
        """A text block drawing a folder of the repository (first line ``src/x/``): the
        files and folders it lists exist there (those of a line no more indented than
        the first, beside it: at the repository's root or in the folder's parent)."""
        if not body or not re.fullmatch(r"[\w.\-/]+/", body[0].strip()):
            return
        top = body[0].strip()
        base = self.root / top
        if not base.is_dir():
            self.problem(first, top, "no such folder in the repository")
            return
        indent = len(body[0]) - len(body[0].lstrip())
        entry = re.compile(r"(?<![\w./-])([\w\-]+/(?:[\w\-]+\.py)?|[\w\-]+\.(?:py|yaml))(?![\w/])")
        for offset, line in enumerate(body[1:], 1):
            inside = len(line) - len(line.lstrip()) > indent
            bases = [base] if inside else [self.root, base.parent]
            for m in entry.finditer(line):
                if not any((b / m[1]).exists() for b in bases):
                    where = top if inside else "the repository"
                    self.problem(first + offset, m[1], f"not in {where}")

    def table_row(self, line: int, heading: str, header: list[str], row: list[str]) -> None:
        """The tables whose first column names things: settings (``setting | default |
        meaning``), errors (``error | ...``: of ``shardwise.errors``), the fields or
        parameters of what the section's heading names (``## `ReadOptions```, ``##
        Opening data with `engine="shardwise"```), and the layers of the code (``layer |
        modules | may import``)."""
        head = [h.strip().lower() for h in header]
        if head[:1] == ["setting"]:
            for key in _outer_spans(row[0]):
                why = _setting_problem(key)
                if why:
                    self.problem(line, key, why)
        if head[:1] == ["error"]:
            for name in _outer_spans(row[0]):
                if name.isidentifier():
                    self.dotted(line, f"{PACKAGE}.errors.{name}", shown=name)
        if head[:1] in (["field"], ["parameter"]):
            subject = _SPAN.search(heading)
            if subject is not None:
                for name in _outer_spans(row[0]):
                    if name.isidentifier():
                        self.member(line, subject["code"], name)
        if head[:2] == ["layer", "modules"] and len(row) >= 2:
            src = self.root / "src" / PACKAGE
            for layer in _outer_spans(row[0]):
                if not (src / layer).is_dir():
                    self.problem(line, layer, f"no such layer (folder) in src/{PACKAGE}/")
                    continue
                for module in _outer_spans(row[1]):
                    if "." not in module and not _exists(src / layer, module):
                        self.problem(line, f"{layer}/{module}", f"no such module in {layer}/")
            for cell in row[2:]:
                for module in _outer_spans(cell):
                    if module.isidentifier() and not _exists(src, module):
                        self.problem(line, module, f"no such module or layer in src/{PACKAGE}/")


class _PythonNames(ast.NodeVisitor):
    """The shardwise names and keywords of a block of Python code."""

    def __init__(self, checker: _Checker, first: int) -> None:
        self.checker = checker
        self.first = first
        self.bound = checker.bound  # local name -> the dotted name it stands for
        self.xarray = checker.xarray

    def line(self, node: ast.AST) -> int:
        return self.first + getattr(node, "lineno", 1) - 1

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.name.split(".")[0] == PACKAGE:
                self.checker.dotted(self.line(node), alias.name)
                if alias.asname:
                    self.bound[alias.asname] = alias.name
                else:
                    self.bound[PACKAGE] = PACKAGE
            elif alias.name == "xarray":
                self.xarray.add(alias.asname or "xarray")
            else:
                self.bound.pop(alias.asname or alias.name.split(".")[0], None)

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Store | ast.Del):
            self.bound.pop(node.id, None)  # a name bound to something else from here on

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level or not node.module or node.module.split(".")[0] != PACKAGE:
            for alias in node.names:
                self.bound.pop(alias.asname or alias.name, None)
            return
        for alias in node.names:
            if alias.name == "*":
                continue
            dotted = f"{node.module}.{alias.name}"
            self.checker.dotted(self.line(node), dotted)
            self.bound[alias.asname or alias.name] = dotted

    def dotted(self, node: ast.AST) -> str | None:
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if isinstance(node, ast.Name):
            return ".".join([node.id, *reversed(parts)])
        return None

    def expand(self, dotted: str | None) -> str | None:
        if dotted is None:
            return None
        first, _, rest = dotted.partition(".")
        if first not in self.bound:
            return None
        return f"{self.bound[first]}.{rest}" if rest else self.bound[first]

    def visit_Attribute(self, node: ast.Attribute) -> None:
        full = self.expand(self.dotted(node))
        if full is not None:
            self.checker.dotted(self.line(node), full)
            return  # the chain is checked whole
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        written = self.dotted(node.func)
        keywords = [k.arg for k in node.keywords if k.arg is not None]
        first, _, rest = (written or "").partition(".")
        if first in self.xarray and rest in ("open_dataset", "open_datatree"):
            engine = [k.value for k in node.keywords if k.arg == "engine"]
            if engine and isinstance(engine[0], ast.Constant) and engine[0].value == PACKAGE:
                for keyword in keywords:
                    if keyword not in _engine_keywords(rest):
                        why = f"not a keyword of xr.{rest} with engine='shardwise'"
                        self.checker.problem(self.line(node), f"{written}({keyword}=...)", why)
        full = self.expand(written)
        if full is not None and keywords:
            obj, _ = resolve(full)
            if obj is not None and obj is not UNKNOWN and callable(obj):
                for keyword in keywords:
                    if wrong := _keyword_problem(full, obj, keyword):
                        self.checker.problem(self.line(node), f"{written}({keyword}=...)", wrong)
        self.generic_visit(node)
