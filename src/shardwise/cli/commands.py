"""The ``shardwise`` command line (``shardwise --help``; also ``python -m shardwise``).

Each command is one small function under :func:`main`. What commands share is added by
:func:`shared_options`: ``--json`` and ``--storage-option`` for every command, and for
those that run a dask computation ``--scheduler``, ``--workers`` and ``--no-progress``;
it also hands the command a :class:`Run` (storage options, output, dask scheduler and
progress bar) and turns the errors of unreadable input into one line on stderr and exit
status 2. Option values that several commands will parse (``dim=size`` lists, codecs)
have their parsers here, as plain functions and as click options.

zarr, dask, distributed, xarray and tqdm are imported inside the commands, so
``shardwise --help`` stays fast.
"""

from __future__ import annotations

import functools
import json
import re
import sys
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from contextlib import ExitStack, nullcontext
from typing import Any

import click

from shardwise import __version__
from shardwise.errors import ShardwiseError, StoreExistsError

__all__ = [
    "Run",
    "codec_option",
    "main",
    "parse_codec",
    "parse_sizes",
    "parse_storage_options",
    "shared_options",
    "sizes_option",
    "storage_options_for",
]

EXIT_OK = 0
EXIT_PROBLEMS = 1  # the command ran and found problems (verify)
EXIT_ERROR = 2  # bad usage (click's own code for usage errors) or unreadable input
EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT, as shells report it; click would say 1)

# what a command raises for input it cannot read or accept: one line on stderr, status 2
# (ShardwiseError's subclasses are also ValueError, FileNotFoundError... but not all)
_INPUT_ERRORS = (ShardwiseError, OSError, ValueError)


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


def _absolute(target: str) -> str:
    """``target`` with a local path made absolute: dask workers, which may run in
    another directory, find the same files (URLs are returned as they are)."""
    import os.path

    return target if "://" in target else os.path.abspath(target)


def _on_workers(run: Run, target: str) -> str:
    """``target`` as the command reads it: made absolute when dask workers, which may
    run in another directory, read it too (``--scheduler``, ``--workers``); as given
    otherwise, so that the output names it as the user did."""
    return target if run.connect() is None else _absolute(target)


def _click_callback(
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
        callback=_click_callback(functools.partial(parse_sizes, words=words)),
        help=help,
    )


def codec_option(*names: str, help: str | None = None) -> Callable[[Any], Any]:
    """A click option of a :func:`parse_codec` value (``--codec zstd:3``); the command
    receives the ``zarr.codecs`` object, or ``None`` when the option is not given."""
    return click.option(
        *names,
        metavar="NAME[:LEVEL]",
        callback=_click_callback(lambda v: None if v is None else parse_codec(v)),
        help=help,
    )


# the storage options of a command's DST (migrate, reshard)
dst_storage_option = click.option(
    "--dst-storage-option",
    "dst_storage_options",
    multiple=True,
    metavar="KEY=VALUE",
    callback=_click_callback(parse_storage_options),
    help="A storage option for DST when it is a URL (repeatable), as --storage-option.",
)


# -- what a command is given besides its own arguments ----------------------------------------
class Run:
    """One command's run: where its output goes, its storage options, and (for
    commands that compute) the dask scheduler and the progress bar.

    The ``--scheduler`` client or ``--workers`` cluster is started by :meth:`connect`
    (before the command writes anything, so an address that does not answer leaves
    nothing half done) and closed by :meth:`close`.
    """

    def __init__(
        self,
        *,
        json_output: bool,
        storage_options: Mapping[str, Any],
        scheduler: str | None = None,
        workers: int | None = None,
        progress: bool = False,
    ) -> None:
        self.json_output = json_output
        self._storage_options = dict(storage_options)
        self.scheduler = scheduler
        self.workers = workers
        self.progress = progress
        self._stack = ExitStack()
        self._client: Any = None

    def storage_options(self, target: str) -> dict[str, Any] | None:
        """The ``--storage-option`` values for ``target``, the command's PATH or SRC;
        ``None`` when there are none (see :func:`storage_options_for`)."""
        return storage_options_for(target, self._storage_options, "--storage-option")

    def emit(self, text: str, document: Mapping[str, Any]) -> None:
        """The command's result on stdout: ``text``, or with ``--json`` ``document``
        as one JSON document."""
        click.echo(json.dumps(document, indent=2) if self.json_output else text)

    def compute(self, *collections: Any, desc: str) -> tuple[Any, ...]:
        """``dask.compute(*collections)`` on the chosen scheduler, under a progress bar
        (tasks done of all) on stderr when there is one."""
        client = self.connect()
        if client is None:
            import dask

            with _local_bar(desc) if self.progress else nullcontext():
                return tuple(dask.compute(*collections, scheduler="threads"))
        futures = client.compute(list(collections))
        if self.progress:
            _distributed_bar(futures, desc)
        return tuple(client.gather(futures))

    def connect(self) -> Any:
        """The distributed client of ``--scheduler`` or ``--workers`` (started on the
        first call), or ``None`` for dask's threaded scheduler."""
        if self._client is not None or (self.scheduler is None and self.workers is None):
            return self._client
        from distributed import Client

        if self.scheduler is not None:
            self._client = self._stack.enter_context(Client(self.scheduler))
            return self._client
        import importlib.util

        from distributed import LocalCluster

        # a dashboard on a free port when bokeh is there to draw it; the scheduler's HTTP
        # server on a free port too (it would take 8787, which may be in use)
        dashboard = ":0" if importlib.util.find_spec("bokeh") is not None else None
        cluster = self._stack.enter_context(
            LocalCluster(
                n_workers=self.workers,
                processes=True,
                dashboard_address=dashboard,
                worker_dashboard_address=None,
                scheduler_kwargs={"dashboard_address": ":0"},
            )
        )
        self._client = self._stack.enter_context(Client(cluster))
        if self.progress and dashboard is not None:
            click.echo(f"shardwise: dask dashboard at {self._client.dashboard_link}", err=True)
        return self._client

    def close(self) -> None:
        self._client = None
        self._stack.close()


def _local_bar(desc: str) -> Any:
    """A dask callback drawing a tqdm bar on stderr, of the tasks the threaded
    scheduler runs (those of the computation started in this thread only)."""
    import threading

    from dask.callbacks import Callback
    from tqdm import tqdm

    class Bar(Callback):
        def __init__(self) -> None:
            super().__init__()
            self._thread = threading.get_ident()
            self._bar: Any = None

        def _start_state(self, dsk: Any, state: Any) -> None:
            if threading.get_ident() == self._thread and self._bar is None:
                total = sum(len(state[k]) for k in ("ready", "waiting", "running"))
                self._bar = tqdm(total=total, desc=desc, unit="task", file=sys.stderr)

        def _posttask(self, key: Any, result: Any, dsk: Any, state: Any, worker: Any) -> None:
            if threading.get_ident() == self._thread and self._bar is not None:
                self._bar.update(1)

        def _finish(self, dsk: Any, state: Any, errored: bool) -> None:
            if threading.get_ident() == self._thread and self._bar is not None:
                self._bar.close()
                self._bar = None

    return Bar()


def _distributed_bar(futures: Sequence[Any], desc: str) -> None:
    """Block until ``futures`` are done (or one fails), with a tqdm bar on stderr of
    all the tasks they need, as the scheduler reports them. distributed's own
    ``progress()`` draws on stdout, which belongs to the command's output."""
    from distributed.diagnostics.progressbar import TextProgressBar
    from tqdm import tqdm

    with tqdm(desc=desc, unit="task", file=sys.stderr) as bar:

        class Bar(TextProgressBar):
            def _draw_bar(self, remaining: int, all: int, **kwargs: Any) -> None:
                bar.total = all
                bar.n = all - remaining
                bar.refresh()

            def _draw_stop(self, **kwargs: Any) -> None:
                pass

        Bar(list(futures), complete=True)


def shared_options(
    *, computes: bool = False, store: str = "PATH"
) -> Callable[[Callable[..., int]], Any]:
    """The options every command takes (``--json``, ``--storage-option``, the storage
    options of its argument ``store``), and with ``computes`` those of a dask
    computation (``--scheduler``, ``--workers``, ``--no-progress``). Put it last, right
    above the ``def``: the command receives a :class:`Run` first, then its own
    parameters, and returns its exit status.

    Errors of input that cannot be read or accepted (``ShardwiseError``, ``OSError``,
    ``ValueError``) become one line on stderr and exit status 2; Ctrl-C exit status
    130."""

    def decorate(command: Callable[..., int]) -> Any:
        @functools.wraps(command)
        def wrapper(**kwargs: Any) -> None:
            ctx = click.get_current_context()
            scheduler = kwargs.pop("scheduler", None)
            workers = kwargs.pop("workers", None)
            no_progress = kwargs.pop("no_progress", True)
            if scheduler is not None and workers is not None:
                raise click.UsageError("--scheduler and --workers exclude each other", ctx=ctx)
            run = Run(
                json_output=kwargs.pop("json_output"),
                storage_options=kwargs.pop("storage_options"),
                scheduler=scheduler,
                workers=workers,
                progress=not no_progress and sys.stderr.isatty(),
            )
            try:
                with ExitStack() as stack:
                    stack.callback(run.close)
                    if computes:
                        run.connect()
                    code = command(run, **kwargs)
            except _INPUT_ERRORS as e:
                click.echo(f"shardwise: error: {_one_line(e)}", err=True)
                ctx.exit(EXIT_ERROR)
            except KeyboardInterrupt:
                click.echo("shardwise: interrupted", err=True)
                ctx.exit(EXIT_INTERRUPTED)
            ctx.exit(code)

        options = [
            click.option(
                "--json",
                "json_output",
                is_flag=True,
                help="Print the result as one JSON document.",
            ),
            click.option(
                "--storage-option",
                "storage_options",
                multiple=True,
                metavar="KEY=VALUE",
                callback=_click_callback(parse_storage_options),
                help=f"A storage option for {store} when it is a URL (repeatable); VALUE "
                "is parsed as JSON when it parses, else kept as a string.",
            ),
        ]
        if computes:
            options += [
                click.option(
                    "--scheduler",
                    metavar="ADDRESS",
                    help="Run on the dask distributed scheduler at ADDRESS.",
                ),
                click.option(
                    "--workers",
                    type=click.IntRange(min=1),
                    metavar="N",
                    help="Run on a local cluster of N worker processes, started for the run.",
                ),
                click.option(
                    "--no-progress",
                    is_flag=True,
                    help="No progress bar (there is none either when stderr is not a terminal).",
                ),
            ]
        for option in reversed(options):  # listed in this order in --help
            option(wrapper)
        return wrapper

    return decorate


def _one_line(error: BaseException) -> str:
    text = " ".join(line.strip() for line in str(error).splitlines() if line.strip())
    return text or type(error).__name__


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


# -- the commands ---------------------------------------------------------------------------
@click.group(
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    epilog="\b\nExit status:\n"
    "  0    done, nothing wrong\n"
    "  1    the command found problems (verify: damaged shards; info and\n"
    "       inventory: damaged metadata documents, the rest reported)\n"
    "  2    bad usage, or input that cannot be read (no store there, an existing\n"
    "       destination, a store of the wrong kind): one line on stderr says why\n"
    "  130  interrupted (Ctrl-C)",
)
@click.version_option(
    __version__, "--version", prog_name="shardwise", message="%(prog)s %(version)s"
)
def main() -> None:
    """Zarr v3 sharding for dask and xarray, from the shell.

    PATH, SRC and DST are local paths or fsspec URLs (s3://bucket/data.zarr), whose
    storage options are given with --storage-option KEY=VALUE. Results go to stdout
    (--json: one JSON document), progress bars and errors to stderr.
    """


@main.command(short_help="Check every shard's index and checksums.")
@click.argument("path")
@click.option("--group", metavar="G", help="Check only the arrays under this group.")
@click.option(
    "--decode",
    is_flag=True,
    help="Decode every inner chunk too (catches damaged compressed data no checksum covers).",
)
@shared_options()
def verify(run: Run, path: str, group: str | None, decode: bool) -> int:
    """Check every shard of the Zarr v3 store (or draft store) at PATH.

    Checks each shard's index (its checksum, and its entries against the shard's size)
    and the crc32c of every inner chunk that has one. Exit status 1 when anything is
    bad; the output names each bad store key.
    """
    import shardwise

    options = run.storage_options(path)
    report = shardwise.verify(path, group, storage_options=options, decode=decode)
    problems = [
        {
            "array": p.array,
            "key": p.key,
            "chunk": None if p.chunk is None else list(p.chunk),
            "error": p.error,
            "message": p.message,
        }
        for p in report.problems
    ]
    document = {
        "ok": report.ok,
        "arrays": report.arrays,
        "shards": report.shards,
        "chunks": report.chunks,
        "requests": report.requests,
        "bytes_read": report.bytes_read,
        "bad_keys": report.bad_keys,
        "problems": problems,
        "strays": report.strays,
    }
    run.emit(str(report), document)
    return EXIT_OK if report.ok else EXIT_PROBLEMS


@main.command(short_help="Migrate a store of the 2022 sharding draft to Zarr v3.")
@click.argument("src")
@click.argument("dst")
@click.option("--group", metavar="G", help="Migrate only this group of SRC (and below).")
@click.option(
    "--mode",
    type=click.Choice(["w-", "w", "a"]),
    default="w-",
    show_default=True,
    help="w-: refuse an existing DST; a: complete an interrupted migration; w: replace DST.",
)
@dst_storage_option
@shared_options(computes=True, store="SRC")
def migrate(
    run: Run,
    src: str,
    dst: str,
    group: str | None,
    mode: str,
    dst_storage_options: dict[str, Any],
) -> int:
    """Migrate the store of the 2022 sharding draft at SRC to Zarr v3 at DST.

    Compressed chunks are copied as bytes where a Zarr v3 codec writes the same bytes
    (zlib is re-encoded as gzip); one task per shard. A failed run is completed with
    --mode a.
    """
    import shardwise

    report, delayed = shardwise.migrate(
        _absolute(src),
        _absolute(dst),
        group=group,
        storage_options=run.storage_options(src),
        dst_storage_options=storage_options_for(dst, dst_storage_options, "--dst-storage-option"),
        mode=mode,
        compute=False,
    )
    run.compute(delayed, desc="migrate")
    lines = [
        f"migrated {src} to {dst}: {_plural(len(report.arrays), 'array')} in "
        f"{_plural(len(report.groups), 'group')}, {_plural(report.shards, 'shard')}"
    ]
    for name in report.arrays:
        how = report.reencoded.get(name)
        lines.append(f"  {name}: " + (f"re-encoded as {how}" if how else "copied as bytes"))
    document = {
        "source": src,
        "destination": dst,
        "arrays": report.arrays,
        "groups": report.groups,
        "shards": report.shards,
        "reencoded": report.reencoded,
    }
    run.emit("\n".join(lines), document)
    return EXIT_OK


@main.command(short_help="Rewrite a store (Zarr v2, v3 or the 2022 draft) as sharded Zarr v3.")
@click.argument("src")
@click.argument("dst")
@sizes_option("--shards", help="Shard sizes by dimension (time=100,y=512), or 'auto'.")
@sizes_option("--chunks", help="Inner chunk sizes by dimension, or 'auto'.")
@codec_option("--codec", help="Compress inner chunks with this codec (default: the source's).")
@click.option("--group", metavar="G", help="Reshard only this group of SRC (and below).")
@click.option(
    "--var",
    "variables",
    multiple=True,
    metavar="V",
    help="Reshard only this array (repeatable; a path relative to --group).",
)
@click.option("--resume", is_flag=True, help="Complete a destination an interrupted run left.")
@click.option("--overwrite", is_flag=True, help="Replace DST if it exists.")
@dst_storage_option
@shared_options(computes=True, store="SRC")
def reshard(
    run: Run,
    src: str,
    dst: str,
    shards: Any,
    chunks: Any,
    codec: Any,
    group: str | None,
    variables: tuple[str, ...],
    resume: bool,
    overwrite: bool,
    dst_storage_options: dict[str, Any],
) -> int:
    """Rewrite the arrays of SRC as sharded Zarr v3 at DST, one task per shard.

    Inner chunks that stay the source's chunks, with codecs that write the same bytes,
    are moved as bytes (no recompression); others are decoded and re-encoded. Sizes
    not given are the source's.
    """
    import shardwise

    if resume and overwrite:
        raise click.UsageError("--resume and --overwrite exclude each other")
    report, delayed = shardwise.reshard(
        _absolute(src),
        _absolute(dst),
        shards=shards,
        chunks=chunks,
        codecs=codec,
        group=group,
        variables=list(variables) or None,
        mode="w" if overwrite else "w-",
        resume=resume,
        storage_options=run.storage_options(src),
        target_options=storage_options_for(dst, dst_storage_options, "--dst-storage-option"),
        compute=False,
    )
    (stats,) = run.compute(delayed, desc="reshard")
    report.add(stats)
    lines = [f"resharded {src} to {dst}", *(f"  {line}" for line in str(report).splitlines())]
    for name in report.arrays:
        how = (
            "repacked (chunks moved as bytes)"
            if name in report.repacked
            else "copied whole (zarr-python)"
            if name in report.copied
            else "re-encoded"
        )
        lines.append(f"  {name}: {how}")
    run.emit("\n".join(lines), {"source": src, "destination": dst, **report.to_dict()})
    return EXIT_OK


@main.command(short_help="Summarise a store: arrays, shards, inner chunks, bytes stored.")
@click.argument("path")
@click.option("--group", metavar="G", help="Summarise only this group (and below).")
@click.option("--no-scan", is_flag=True, help="Read the metadata only (no shard indexes).")
@shared_options(computes=True)
def info(run: Run, path: str, group: str | None, no_scan: bool) -> int:
    """The hierarchy of PATH with, per array: shape, data type, dimension names, shard
    and inner chunk shapes, codecs, stored bytes and compression ratio, and how many
    shards and inner chunks are stored (one index read per stored shard)."""
    import shardwise

    found = shardwise.info(
        _on_workers(run, path),
        group=group,
        storage_options=run.storage_options(path),
        scan=not no_scan,
    )
    run.emit(str(found), found.to_dict())
    return EXIT_PROBLEMS if found.damaged else EXIT_OK


_TABLE_SUFFIXES = (".nc", ".zarr", ".csv")


@main.command(short_help="Which inner chunks of an array are stored, and their sizes.")
@click.argument("path")
@click.option("--var", "variable", metavar="V", help="The array (needed when there are several).")
@click.option("--group", metavar="G", help="The group holding the array.")
@click.option(
    "--out",
    metavar="FILE",
    help="Write the full table (one row per inner chunk) to FILE: .nc, .zarr or .csv.",
)
@shared_options(computes=True)
def inventory(run: Run, path: str, variable: str | None, group: str | None, out: str | None) -> int:
    """The stored inner chunks of an array of PATH: a summary, and with --out the
    table of every inner chunk (stored or not, its bytes, its shard)."""
    import shardwise
    from shardwise.tools.inventory import summary, totals

    engine = None if out is None else _table_engine(out)  # refused before the scan
    if out is not None:  # the table is never written into (or around) the store read
        from shardwise.io.stores import check_apart, location

        check_apart(location(path, None, run.storage_options(path)), location(out), what="--out")
    where, options = _on_workers(run, path), run.storage_options(path)
    damaged: tuple[str, ...] = ()
    if variable is None:  # damaged documents beside the array: reported, then passed over
        found = shardwise.info(where, group=group, storage_options=options, scan=False)
        damaged = found.damaged
        for name, why in found.unreadable:
            if name in damaged:
                click.echo(f"shardwise: damaged document ({name or '/'}): {why}", err=True)
    code = EXIT_PROBLEMS if damaged else EXIT_OK
    if out is None:  # the summary alone: from the stored shards, whatever the grid's size
        attrs = totals(where, variable, group=group, storage_options=options)
        run.emit(summary(attrs), {**attrs, "out": None})
        return code
    table = shardwise.inventory(where, variable, group=group, storage_options=options)
    _write_table(table, out, engine)
    run.emit(f"{summary(table)}\ntable    written to {out}", {**table.attrs, "out": out})
    return code


def _table_engine(out: str) -> str | None:
    """Check ``--out FILE`` before anything is read: a suffix it can write (a usage
    error), no file or directory there already (``--out`` naming a store would replace
    it), and for ``.nc`` a netCDF library, whose xarray engine is returned."""
    import importlib.util
    import os.path

    if not out.endswith(_TABLE_SUFFIXES):
        raise click.UsageError(f"--out must end in {', '.join(_TABLE_SUFFIXES)}, found {out!r}")
    if os.path.lexists(out):
        raise StoreExistsError(
            "the --out file exists already",
            expected="a new file",
            found=f"{out!r}",
            advice="Remove it or choose another FILE (a .zarr there would be replaced).",
        )
    if not out.endswith(".nc"):
        return None
    engine = next(
        (e for e in ("h5netcdf", "netCDF4") if importlib.util.find_spec(e) is not None), None
    )
    if engine is None:
        raise ValueError(
            "writing a .nc table needs h5netcdf or netCDF4 (pip install h5netcdf); "
            "or use --out FILE.zarr or FILE.csv"
        )
    return engine.lower()


def _write_table(table: Any, out: str, engine: str | None) -> None:
    """An inventory to a file: netCDF (with ``engine``), Zarr or CSV."""
    if out.endswith(".csv"):
        table.to_dataframe().to_csv(out)
    elif out.endswith(".zarr"):
        table.to_zarr(out, mode="w-", consolidated=False)
    else:
        # netCDF attributes are numbers, strings or lists of them: the others as JSON
        attrs = {
            k: v if isinstance(v, int | float | str) else json.dumps(v)
            for k, v in table.attrs.items()
        }
        table.assign_attrs(attrs).to_netcdf(out, engine=engine)
