"""What a command is given besides its own arguments, and what every command shares.

:func:`shared_options` adds the options every command takes (``--json`` and
``--storage-option``, and for the commands that run a dask computation
``--scheduler``, ``--workers`` and ``--no-progress``), hands the command a
:class:`Run` (storage options, output, dask scheduler and progress bar) and turns the
errors of unreadable input into one line on stderr and exit status 2. The exit
statuses are named here too. This is apart from the commands so that each command is
its own arguments, one call of a tool and its printing, and apart from
:mod:`shardwise.cli.arguments` because it runs things (a dask client, a local cluster)
where the options only parse.

dask and distributed are imported inside :class:`Run`'s methods, when a command
computes, so that ``shardwise --help`` stays fast.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os.path
import sys
from collections.abc import Callable, Mapping
from contextlib import ExitStack, nullcontext
from typing import Any

import click

from shardwise.cli.arguments import click_callback, parse_storage_options, storage_options_for
from shardwise.errors import ShardwiseError
from shardwise.graph.progress import distributed_bar, local_bar

__all__ = [
    "EXIT_ERROR",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_PROBLEMS",
    "Run",
    "absolute",
    "shared_options",
]

EXIT_OK = 0
EXIT_PROBLEMS = 1  # the command ran and found problems (verify)
EXIT_ERROR = 2  # bad usage (click's own code for usage errors) or unreadable input
EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT, as shells report it; click would say 1)

# what a command raises for input it cannot read or accept: one line on stderr, status 2
# (ShardwiseError's subclasses are also ValueError, FileNotFoundError... but not all)
_INPUT_ERRORS = (ShardwiseError, OSError, ValueError)


def absolute(target: str) -> str:
    """``target`` with a local path made absolute: dask workers, which may run in
    another directory, find the same files (URLs are returned as they are)."""
    return target if "://" in target else os.path.abspath(target)


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

    def on_workers(self, target: str) -> str:
        """``target`` as the command reads it: made absolute when dask workers, which
        may run in another directory, read it too (``--scheduler``, ``--workers``); as
        given otherwise, so that the output names it as the user did."""
        return target if self.connect() is None else absolute(target)

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

            with local_bar(desc) if self.progress else nullcontext():
                return tuple(dask.compute(*collections, scheduler="threads"))
        futures = client.compute(list(collections))
        if self.progress:
            distributed_bar(futures, desc)
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
                callback=click_callback(parse_storage_options),
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
