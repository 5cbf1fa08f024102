"""The values of the command line's options: their parsers and the click options built on them.

``--storage-option KEY=VALUE`` lists, ``dim=size`` lists (``--shards time=100,y=512``)
and codecs (``--codec zstd:3``) are parsed here, each by a plain function that raises
``ValueError`` naming what was expected (tested on its own in ``tests/cli/test_cli.py``),
and by a click option that runs it and turns its ``ValueError`` into a usage error
(exit status 2) naming the option. They are apart from the commands and from
:class:`~shardwise.cli.run.Run` because they are pure parsing: no store is opened, no
dask is started, and a new command takes them as they are.

zarr is imported inside :func:`parse_codec`, when a codec is given, so that
``shardwise --help`` stays fast.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any

import click

__all__ = [
    "click_callback",
    "codec_option",
    "dst_storage_option",
    "parse_codec",
    "parse_sizes",
    "parse_storage_options",
    "sizes_option",
    "storage_options_for",
]


# -- option values --------------------------------------------------------------------------
def parse_storage_options(items: Iterable[str]) -> dict[str, Any]:
    """``KEY=VALUE`` items as a dict of fsspec storage options: the value parsed as
    JSON when it parses (``anon=true``, ``client_kwargs={"region_name": "x"}``), else
    kept as a string (``profile=prod``). A key given twice keeps its last value."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ValueError(f"expected KEY=VALUE, found {item!r}")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


_DIM_SIZE = re.compile(r"(?P<dim>[^=\s]+)\s*=\s*(?P<size>[0-9]+)")


def parse_sizes(
    values: str | Iterable[str], *, words: Collection[str] = ("auto",)
) -> dict[str, int] | str | None:
    """Sizes per dimension from ``dim=size`` items, comma-separated or in several
    values (``"time=100,y=512"`` or ``["time=100", "y=512"]``): ``{"time": 100, "y":
    512}``. One of ``words`` alone (``"auto"``) is returned as it is; no values at all
    give ``None``. ``ValueError`` for anything else, naming what was expected."""
    if isinstance(values, str):
        values = [values]
    items = [item.strip() for value in values for item in value.split(",")]
    if not items:
        return None
    forms = [*(repr(w) for w in words), "DIM=SIZE[,DIM=SIZE...]"]
    accepted = " or ".join([", ".join(forms[:-1]), forms[-1]] if len(forms) > 1 else forms)
    if len(items) == 1 and items[0] in words:
        return items[0]
    sizes: dict[str, int] = {}
    for item in items:
        if item in words:
            raise ValueError(f"{item!r} cannot be combined with DIM=SIZE items")
        m = _DIM_SIZE.fullmatch(item)
        if m is None:
            raise ValueError(f"expected {accepted} (e.g. time=100,y=512), found {item!r}")
        dim, size = m["dim"], int(m["size"])
        if size < 1:
            raise ValueError(f"sizes are positive, found {item!r}")
        if dim in sizes:
            raise ValueError(f"dimension {dim!r} given twice")
        sizes[dim] = size
    return sizes


# name -> (zarr.codecs class name, its level keyword, the levels it takes)
_CODECS: dict[str, tuple[str, str, range]] = {
    "zstd": ("ZstdCodec", "level", range(-131072, 23)),
    "blosc": ("BloscCodec", "clevel", range(0, 10)),
    "gzip": ("GzipCodec", "level", range(0, 10)),
}


def parse_codec(text: str) -> Any:
    """A ``name[:level]`` codec (``zstd:3``, ``blosc``, ``gzip:6``) as a
    ``zarr.codecs`` object; without a level, the codec's default. ``ValueError`` for an
    unknown name or a level the codec does not take."""
    import zarr.codecs

    name, sep, level = text.strip().partition(":")
    name = name.strip().lower()
    if name not in _CODECS:
        raise ValueError(f"expected one of {', '.join(_CODECS)}, found {name!r}")
    cls, keyword, levels = _CODECS[name]
    codec = getattr(zarr.codecs, cls)
    if not sep:
        return codec()
    try:
        n = int(level)
    except ValueError:
        n = None
    if n is None or n not in levels:
        raise ValueError(
            f"{name} levels are integers from {levels.start} to {levels.stop - 1}, "
            f"found {level.strip()!r}"
        )
    return codec(**{keyword: n})


def storage_options_for(
    target: str, options: Mapping[str, Any], flag: str
) -> dict[str, Any] | None:
    """``options`` (given with ``flag``) for the store ``target``, or ``None`` when
    there are none; a usage error when ``target`` is not a URL (zarr-python takes no
    storage options for local paths)."""
    if not options:
        return None
    scheme, sep, _ = target.partition("://")
    if not sep or scheme in ("file", "memory"):
        raise click.UsageError(
            f"{flag} is for stores at a URL (such as s3://bucket/data.zarr); "
            f"{target!r} is a local path"
        )
    return dict(options)


# -- the click options ------------------------------------------------------------------------
def click_callback(
    parse: Callable[[Any], Any],
) -> Callable[[click.Context, click.Parameter, Any], Any]:
    """A click callback running ``parse`` on the value, its ``ValueError`` a usage error."""

    def callback(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        try:
            return parse(value)
        except ValueError as e:
            raise click.BadParameter(str(e), ctx=ctx, param=param) from None

    return callback


def sizes_option(
    *names: str, words: Collection[str] = ("auto",), help: str | None = None
) -> Callable[[Any], Any]:
    """A repeatable click option of :func:`parse_sizes` values (``--shards
    time=100,y=512``, ``--shards time=100 --shards y=512``, ``--shards auto``); the
    command receives the dict, the word, or ``None`` when the option is not given."""
    return click.option(
        *names,
        multiple=True,
        metavar="DIM=SIZE[,...]",
        callback=click_callback(functools.partial(parse_sizes, words=words)),
        help=help,
    )


def codec_option(*names: str, help: str | None = None) -> Callable[[Any], Any]:
    """A click option of a :func:`parse_codec` value (``--codec zstd:3``); the command
    receives the ``zarr.codecs`` object, or ``None`` when the option is not given."""
    return click.option(
        *names,
        metavar="NAME[:LEVEL]",
        callback=click_callback(lambda v: None if v is None else parse_codec(v)),
        help=help,
    )


# the storage options of a command's DST (migrate, reshard)
dst_storage_option = click.option(
    "--dst-storage-option",
    "dst_storage_options",
    multiple=True,
    metavar="KEY=VALUE",
    callback=click_callback(parse_storage_options),
    help="A storage option for DST when it is a URL (repeatable), as --storage-option.",
)
